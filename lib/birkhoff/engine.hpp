// Internal interface between the Birkhoff front end (lib/birkhoff/birkhoff.cpp) and the CUDA
// engine (lib/birkhoff/cuda/), plus the front end's argument checks for the C API
// (lib/birkhoff/birkhoff_c.cpp, an adapter over the front end that never calls the engine
// itself). No CUDA types: streams are opaque cudaStream_t pointers.
#pragma once

#include <cstdint>
#include <string>

#include "kantor/birkhoff.hpp"

namespace kantor::birkhoff {

enum class Storage { kFloat32, kBFloat16 };

/// Everything a forward launch needs (device pointers).
struct ForwardArgs {
  const void* logits = nullptr;
  void* out = nullptr;
  std::int64_t batch = 0;
  int n = 0;
  Storage storage = Storage::kFloat32;
  BirkhoffMethod method = BirkhoffMethod::kNewton;
  bool row_first = true;
  int iterations = 20;
  float tolerance = 1e-5f;
  int max_newton_iterations = 30;
};

/// Everything a backward launch needs (device pointers). implicit: P, grad_P; unrolled: logits,
/// grad_P (method, row_first, iterations describe the truncated map).
struct BackwardArgs {
  const void* P = nullptr;
  const void* logits = nullptr;
  const void* grad_P = nullptr;
  void* grad_logits = nullptr;
  std::int64_t batch = 0;
  int n = 0;
  Storage storage = Storage::kFloat32;
  bool implicit = true;
  BirkhoffMethod method = BirkhoffMethod::kSinkhorn;
  bool row_first = true;
  int iterations = 20;
};

/// Error statistics reduced on the device.
struct DeviceStats {
  double worst = 0;
  double median = 0;
  double median_bin_decades = 0;
  std::int64_t not_converged = 0;
  std::int64_t invalid = 0;
  std::int64_t first_invalid = -1;  ///< smallest index of a matrix with invalid input
  int first_invalid_status = 0;     ///< its MatrixStatus
};

/// Why a MatrixStatus >= kInvalidInput is invalid ("" for the others).
std::string invalid_reason(int status);

/// The argument checks of project_birkhoff / project_birkhoff_backward for a context of
/// `backend` (options, shapes, memory spaces, null data: InvalidArgument naming the argument);
/// those functions run exactly these first. The C API runs them before it looks up its Context,
/// so that a bad argument is reported as KANTOR_STATUS_INVALID_ARGUMENT also where no CUDA device
/// is visible or the build has no CUDA engine. Defined in lib/birkhoff/birkhoff.cpp.
void check_forward(Backend backend, BatchView<const float> logits, BatchView<float> out,
                   const BirkhoffOptions& options);
void check_forward(Backend backend, BatchView<const bfloat16> logits, BatchView<bfloat16> out,
                   const BirkhoffOptions& options);
void check_backward(Backend backend, BatchView<const float> P, BatchView<const float> grad_P,
                    BatchView<float> grad_logits, const BirkhoffOptions& options,
                    BatchView<const float> logits);
void check_backward(Backend backend, BatchView<const bfloat16> P,
                    BatchView<const bfloat16> grad_P, BatchView<bfloat16> grad_logits,
                    const BirkhoffOptions& options, BatchView<const bfloat16> logits);

/// Histogram of log10(Err) used for the device median: kHistBins bins of kHistWidth decades
/// from 10^kHistLo; bin 0 also takes smaller errors (and 0), the last bin larger and non-finite.
constexpr int kHistBins = 64;
constexpr double kHistLo = -10.0;
constexpr double kHistWidth = 0.25;

/// Launches the forward on `stream`. With stats != null also reduces the error statistics on the
/// device, copies them back and synchronizes the stream; otherwise asynchronous.
void cuda_forward(const ForwardArgs& args, void* stream, DeviceStats* stats);
/// Launches the backward on `stream` (asynchronous).
void cuda_backward(const BackwardArgs& args, void* stream);
/// Fills `count` floats (or bf16 values) at `out` with N(mean, stddev^2) samples on `stream`.
void cuda_fill_normal(void* out, std::int64_t count, Storage storage, float mean, float stddev,
                      std::uint64_t seed, void* stream);
/// The CUDA half of time_birkhoff.
BirkhoffTiming cuda_time(const BirkhoffBenchConfig& config, void* stream);
/// Description of the kernel that runs a forward of size n.
const char* cuda_kernel_name(int n);

}  // namespace kantor::birkhoff
