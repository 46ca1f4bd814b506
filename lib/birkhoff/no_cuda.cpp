// CPU-only build: the CUDA entry points of the Birkhoff engine refuse with NotCompiled.
#include "kantor/config.hpp"

#if !KANTOR_CUDA_ENABLED
#include "kantor/error.hpp"
#include "lib/birkhoff/engine.hpp"

namespace kantor::birkhoff {
namespace {
[[noreturn]] void not_compiled() {
  throw NotCompiled("the Birkhoff CUDA engine is not in this build (configured without CUDA)");
}
}  // namespace

void cuda_forward(const ForwardArgs&, void*, DeviceStats*) { not_compiled(); }
void cuda_backward(const BackwardArgs&, void*) { not_compiled(); }
void cuda_fill_normal(void*, std::int64_t, Storage, float, float, std::uint64_t, void*) {
  not_compiled();
}
BirkhoffTiming cuda_time(const BirkhoffBenchConfig&, void*) { not_compiled(); }
const char* cuda_kernel_name(int) { return "none (no CUDA in this build)"; }

}  // namespace kantor::birkhoff
#endif  // !KANTOR_CUDA_ENABLED
