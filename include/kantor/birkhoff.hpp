// Batched Birkhoff projection (mHC): B small n x n logit matrices R -> doubly stochastic
// P = diag(e^alpha) exp(R) diag(e^beta) (P 1 = 1, P^T 1 = 1), and its backward pass.
// Conventions and formulas: docs/birkhoff.md and numerics.md section 5.
//
//   kantor::Context ctx;                                       // cpu or cuda (auto)
//   kantor::Buffer<float> R(ctx, B * 16), P(ctx, B * 16);       // fill R ...
//   auto s = kantor::project_birkhoff(ctx, kantor::batch_view<const float>(R, 4),
//                                     kantor::batch_view<float>(P, 4), {});
//   std::cout << s.brief_report() << "\n";
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kantor/buffer.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/types.hpp"

namespace kantor {

/// Which map project_birkhoff computes.
enum class BirkhoffMethod {
  kNewton,    ///< converged projection: log-domain Newton on the reduced dual, to a tolerance
  kSinkhorn,  ///< `iterations` exact Sinkhorn-Knopp sweeps (row+column), order by `order`
  kDeepSeek,  ///< DeepSeek's released truncated map: softmax+1e-6, denominators sum+1e-6
};
std::string to_string(BirkhoffMethod m);
/// Parse "newton" | "sinkhorn" | "deepseek"; throws InvalidArgument naming `what` otherwise.
BirkhoffMethod parse_birkhoff_method(const std::string& s, const std::string& what = "method");

/// Order of the two normalizations inside one Sinkhorn sweep.
enum class SinkhornOrder { kRowFirst, kColumnFirst };
std::string to_string(SinkhornOrder o);
/// Parse "row" | "column"; throws InvalidArgument naming `what` otherwise.
SinkhornOrder parse_sinkhorn_order(const std::string& s, const std::string& what = "order");

/// Which derivative project_birkhoff_backward computes.
enum class BirkhoffGradient {
  kImplicit,  ///< implicit differentiation at the returned P (needs P and dL/dP only)
  kUnrolled,  ///< exact gradient of the truncated map (kSinkhorn / kDeepSeek; needs the logits)
};

struct BirkhoffOptions {
  BirkhoffMethod method = BirkhoffMethod::kNewton;
  SinkhornOrder order = SinkhornOrder::kRowFirst;  ///< kSinkhorn only
  /// Sweeps of kSinkhorn / repeat of kDeepSeek; 0 = 20. Ignored by kNewton.
  int iterations = 0;
  /// A matrix counts as converged when Err = |P1-1|_1 + |P^T1-1|_1 of the stored output is
  /// <= tolerance. 0 = default: 1e-5 for float32 storage, 3e-2 for bfloat16 (its rounding alone
  /// leaves ~1e-2). kNewton also stops iterating on it (see max_newton_iterations).
  double tolerance = 0;
  /// kNewton iteration cap (each iteration: one 3x3 / (n-1)x(n-1) SPD solve and a line search).
  int max_newton_iterations = 30;
  /// Compute the Summary's error statistics (a reduction fused into the kernel, then one
  /// device-to-host copy and a stream synchronization). false keeps the fast path asynchronous.
  bool compute_summary = true;
  BirkhoffGradient gradient = BirkhoffGradient::kImplicit;

  /// True when every field is in range; otherwise false with the reason in *why.
  bool is_valid(std::string* why) const;
};

/// Result of a forward projection. Error statistics are of the stored (rounded) output.
struct BirkhoffSummary {
  bool computed = false;  ///< false when options.compute_summary was false
  std::int64_t batch = 0;
  int n = 0;
  BirkhoffMethod method = BirkhoffMethod::kNewton;
  Backend backend = Backend::kCpu;
  std::string kernel;  ///< which kernel/engine ran, e.g. "cuda n=4 register kernel"
  double tolerance = 0;
  /// Largest per-matrix Err (+inf when some matrix has no projection or invalid input).
  double worst_error = std::numeric_limits<double>::quiet_NaN();
  /// Median per-matrix Err. CPU: exact. CUDA: from a device histogram of log10(Err) with
  /// `median_bin_decades`-wide bins: the geometric centre of the bin holding the median.
  double median_error = std::numeric_limits<double>::quiet_NaN();
  double median_bin_decades = 0;    ///< 0 when the median is exact
  std::int64_t not_converged = 0;   ///< matrices with Err > tolerance (or non-finite)
  /// Matrices with invalid input (output set to 0, also counted in not_converged): a NaN or +inf
  /// logit, or a row, a column or the whole matrix of -inf (no matrix with that pattern has unit
  /// row and column sums).
  std::int64_t invalid_inputs = 0;
  std::int64_t first_invalid = -1;   ///< smallest index of a matrix with invalid input, or -1
  std::string first_invalid_reason;  ///< why that matrix is invalid, e.g. "a row has every logit -inf"
  double seconds = 0;                ///< host wall time of the call (includes the sync)

  std::string brief_report() const;
  /// Throws InvalidArgument naming the first invalid matrix (index and reason) when
  /// invalid_inputs > 0; `what` prefixes the message (e.g. the CLI's "--input 'L.npy'").
  void throw_if_invalid(const std::string& what = "project_birkhoff") const;
};

/// A contiguous batch of `batch` row-major n x n matrices (element (b, i, j) at
/// data[(b * n + i) * n + j]) in host or device memory.
template <class T>
struct BatchView {
  T* data = nullptr;
  std::int64_t batch = 0;
  int n = 0;
  MemorySpace space = MemorySpace::kHost;
  std::int64_t elements() const { return batch * n * n; }
  /// Implicit conversion to a view of const elements.
  template <class U = T, class = std::enable_if_t<!std::is_const<U>::value>>
  operator BatchView<const U>() const {
    return {data, batch, n, space};
  }
};

/// A batch view over a whole buffer of batch * n * n elements (throws InvalidArgument when n is
/// outside 1..16 or the buffer size is not a multiple of n * n).
template <class T, class U>
BatchView<T> batch_view(const Buffer<U>& buffer, int n) {
  if (n < 1 || n > 16 || buffer.size() % (std::int64_t(n) * n) != 0)
    throw InvalidArgument("batch_view: a buffer of " + std::to_string(buffer.size()) +
                          " elements is not a whole number of " + std::to_string(n) + "x" +
                          std::to_string(n) + " matrices");
  return {buffer.data(), buffer.size() / (std::int64_t(n) * n), n, buffer.space()};
}

/// Forward projection of every matrix of `logits` into `out` (same shape, same storage type,
/// both in ctx.memory_space()). Math is float32 on CUDA, float64 on the CPU engine. Runs on the
/// context's stream; returns without synchronizing unless options.compute_summary is true.
/// Throws InvalidArgument for bad shapes/options. Invalid matrices (NaN / +inf logits, a row,
/// column or matrix of all -inf) are reported in the summary (invalid_inputs, first_invalid; call
/// Summary::throw_if_invalid to turn them into an InvalidArgument), their output is 0; patterns
/// without total support (no doubly stochastic scaling exists) count as not converged (newton:
/// output 0). Output never NaN. An empty batch (B = 0, data may be null) is a no-op.
BirkhoffSummary project_birkhoff(const Context& ctx, BatchView<const float> logits,
                                 BatchView<float> out, const BirkhoffOptions& options = {});
BirkhoffSummary project_birkhoff(const Context& ctx, BatchView<const bfloat16> logits,
                                 BatchView<bfloat16> out, const BirkhoffOptions& options = {});

/// Backward pass: grad_logits = dL/dR from P (the forward output) and grad_P = dL/dP.
/// options.gradient = kImplicit: implicit differentiation of the projection at P (rows and
/// columns of the result sum to 0; `logits` unused, may be empty). kUnrolled: exact gradient of
/// the truncated map of options.method (kSinkhorn or kDeepSeek, same order/iterations as the
/// forward), recomputed on chip from `logits` (P unused, may be empty). Asynchronous on CUDA.
void project_birkhoff_backward(const Context& ctx, BatchView<const float> P,
                               BatchView<const float> grad_P, BatchView<float> grad_logits,
                               const BirkhoffOptions& options = {},
                               BatchView<const float> logits = {});
void project_birkhoff_backward(const Context& ctx, BatchView<const bfloat16> P,
                               BatchView<const bfloat16> grad_P, BatchView<bfloat16> grad_logits,
                               const BirkhoffOptions& options = {},
                               BatchView<const bfloat16> logits = {});

/// Fill `out` with independent N(mean, stddev^2) samples generated in its own memory space (on
/// the device for CUDA contexts; counter-based, deterministic in `seed`). For tests/benchmarks.
void fill_normal(const Context& ctx, BatchView<float> out, double mean, double stddev,
                 std::uint64_t seed);

/// Timing of the batched projection (kantor bench birkhoff). CUDA: CUDA events around each run
/// on the context's stream, after warm-up, with fresh N(0, scale^2) logits generated on the
/// device before every run (outside the timed region). CPU: steady clock.
struct BirkhoffTiming {
  std::int64_t runs = 0;
  double forward_ms_median = 0, forward_ms_min = 0, forward_ms_max = 0;
  double both_ms_median = 0, both_ms_min = 0, both_ms_max = 0;  ///< forward + backward (0 if off)
  double graph_forward_ms_median = 0;  ///< one graph-launched forward, median (CUDA only)
  double graph_both_ms_median = 0;
  bool graphs = false;
};
struct BirkhoffBenchConfig {
  std::int64_t batch = 1 << 20;
  int n = 4;
  bool bf16 = false;
  bool backward = false;
  int runs = 20;
  int warmup = 3;
  double scale = 1.0;  ///< logits ~ N(0, scale^2)
  bool graphs = true;  ///< also time CUDA-graph launches (CUDA only)
  BirkhoffOptions options;
};
/// Runs the benchmark protocol above; synchronizes.
BirkhoffTiming time_birkhoff(const Context& ctx, const BirkhoffBenchConfig& config);

}  // namespace kantor
