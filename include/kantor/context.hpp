// Context: the backend choice and the resources of one engine (threads, CUDA device, stream,
// cuBLAS handle, workspace). Move-only; not thread-safe: use one Context per host thread.
//
//   kantor::Context ctx({kantor::Backend::kAuto});
//   std::cout << kantor::to_string(ctx.backend()) << "\n";   // cpu or cuda
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "kantor/types.hpp"

namespace kantor {

struct ContextOptions {
  /// kCpu, kCuda or kAuto (CUDA when compiled in and a device is visible, else CPU).
  Backend backend = Backend::kAuto;
  /// CPU worker threads; 0 = std::thread::hardware_concurrency().
  int threads = 0;
  /// CUDA device ordinal (ignored on CPU).
  int device = 0;
  /// Optional caller-owned CUDA stream (a cudaStream_t passed as an opaque pointer). When null the
  /// Context creates and owns its own non-blocking stream. The caller keeps ownership and must
  /// keep the stream alive for the Context's lifetime.
  void* cuda_stream = nullptr;
  /// Optional cancellation flag (caller-owned, may be set from a signal handler: std::atomic<bool>
  /// is lock-free). Once it reads true, CPU passes stop handing out row blocks and solvers end at
  /// the next iteration with TerminationType::kUserAbort; results are then not meaningful.
  const std::atomic<bool>* cancel = nullptr;
  /// Kernel family override for tests and benchmarks (kantor/types.hpp); kAuto = the dispatch
  /// table.
  KernelChoice kernel = KernelChoice::kAuto;
};

class Context {
 public:
  /// Throws NotCompiled (CUDA asked for in a CPU-only build), BackendUnavailable (CUDA asked for
  /// but no device visible, or bad device ordinal) or InvalidArgument (threads < 0).
  explicit Context(const ContextOptions& options = {});
  ~Context();
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// The resolved backend: kCpu or kCuda, never kAuto.
  Backend backend() const;
  /// Memory space of buffers and passes of this context.
  MemorySpace memory_space() const;
  /// How the backend was chosen, e.g. "auto: no CUDA device visible, using cpu".
  const std::string& backend_note() const;
  int threads() const;
  int device() const;
  /// The CUDA stream all work is issued on (opaque cudaStream_t), null on CPU.
  void* cuda_stream() const;
  /// ContextOptions::kernel.
  KernelChoice kernel() const;
  /// True once ContextOptions::cancel is set and reads true.
  bool cancel_requested() const;
  /// Blocks until all work issued on this context has finished (no-op on CPU).
  void synchronize() const;

  /// Internal state, defined in lib/core (engines use it; applications do not need it).
  struct Impl;
  Impl& impl() const { return *impl_; }
  /// The same, or null for a moved-from context (internal: a buffer freed after its context was
  /// moved from falls back to a synchronous free).
  Impl* impl_if_any() const noexcept { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kantor
