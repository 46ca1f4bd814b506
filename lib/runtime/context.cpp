#include <thread>

#include "kantor/config.hpp"

#include "kantor/error.hpp"
#include "lib/core/kernel_check.hpp"
#include "lib/runtime/context_impl.hpp"
#include "lib/cuda/runtime.hpp"

namespace kantor {

Context::Impl::~Impl() {
  staging.reset();  // waits for its DMAs
  cuda_state.reset();
  cuda::destroy_pool(memory);
  if (owns_stream) cuda::destroy_stream(stream);
}

Context::Context(const ContextOptions& options) : impl_(std::make_unique<Impl>()) {
  // Guard: thousands of worker threads exhaust the process limit of small machines (seen: a
  // CLI run with --threads 3000 left the host unable to fork) and never help a CPU pass.
  constexpr int kMaxThreads = 1024;
  if (options.threads < 0 || options.threads > kMaxThreads)
    throw InvalidArgument("ContextOptions::threads must be in [0, " +
                          std::to_string(kMaxThreads) + "] (0 = all cores), got " +
                          std::to_string(options.threads));
  if (options.device < 0)
    throw InvalidArgument("ContextOptions::device must be >= 0, got " +
                          std::to_string(options.device));
  Impl& s = *impl_;
  const unsigned hw = std::thread::hardware_concurrency();
  s.threads = options.threads > 0 ? options.threads : int(hw > 0 ? hw : 1);
  s.device = options.device;

  [[maybe_unused]] const int devices = cuda::device_count();
  Backend chosen = options.backend;
  if (options.backend == Backend::kAuto) {
#if KANTOR_CUDA_ENABLED
    if (devices > options.device) {
      chosen = Backend::kCuda;
      s.note = "auto: CUDA device " + std::to_string(options.device) + " visible, using cuda";
    } else {
      chosen = Backend::kCpu;
      s.note = "auto: no CUDA device visible, using cpu";
    }
#else
    chosen = Backend::kCpu;
    s.note = "auto: built without CUDA, using cpu";
#endif
  } else {
    s.note = "requested " + to_string(options.backend);
  }
  if (chosen == Backend::kCuda) {
#if !KANTOR_CUDA_ENABLED
    throw NotCompiled("backend 'cuda' requested but this kantor build has no CUDA engine "
                      "(configure with KANTOR_WITH_CUDA=ON on a machine with nvcc)");
#else
    if (devices == 0)
      throw BackendUnavailable("backend 'cuda' requested but no CUDA device is visible");
    if (options.device >= devices)
      throw BackendUnavailable("CUDA device " + std::to_string(options.device) +
                               " requested but only " + std::to_string(devices) +
                               " device(s) are visible");
    cuda::set_device(options.device);
    if (options.cuda_stream) {
      s.stream = options.cuda_stream;
      s.owns_stream = false;
    } else {
      s.stream = cuda::create_stream();
      s.owns_stream = true;
    }
    // Device buffers come from a stream-ordered pool on the context's stream: an engine's setup
    // allocates and frees dozens of buffers per oracle, and cudaFree waits for the whole device
    // (docs/architecture.md, "Device memory"). Up to kKeep bytes of freed memory stay reserved
    // for reuse; the pool goes with the context. Null where the device has no pools (plain
    // cudaMalloc then).
    constexpr std::size_t kKeep = std::size_t(4) << 30;
    s.memory = cuda::create_pool(options.device, kKeep);
#endif
  }
  s.backend = chosen;
  s.cancel = options.cancel;
  if (chosen == Backend::kCpu)
    detail::require_cpu_kernel(options.kernel, "ContextOptions::kernel",
                               options.backend == Backend::kAuto ? "; no CUDA device was chosen" : "");
  s.kernel = options.kernel;
  s.pool = std::make_unique<detail::ThreadPool>(s.threads, options.cancel);
}

Context::~Context() = default;
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;

Backend Context::backend() const { return impl_->backend; }
MemorySpace Context::memory_space() const {
  return impl_->backend == Backend::kCuda ? MemorySpace::kDevice : MemorySpace::kHost;
}
const std::string& Context::backend_note() const { return impl_->note; }
int Context::threads() const { return impl_->threads; }
int Context::device() const { return impl_->device; }
void* Context::cuda_stream() const { return impl_->stream; }
KernelChoice Context::kernel() const { return impl_->kernel; }
bool Context::cancel_requested() const {
  return impl_->cancel != nullptr && impl_->cancel->load(std::memory_order_relaxed);
}
void Context::synchronize() const {
  if (impl_->backend == Backend::kCuda) cuda::synchronize_stream(impl_->stream);
}

}  // namespace kantor
