#include "kantor/info.hpp"

#include "kantor/config.hpp"
#include "lib/cuda/runtime.hpp"

namespace kantor {

BuildInfo build_info() {
  BuildInfo b;
  b.version = KANTOR_VERSION_STRING;
  b.cuda_compiled = KANTOR_CUDA_ENABLED != 0;
  b.cuda_architectures = b.cuda_compiled ? KANTOR_CUDA_ARCHITECTURES : "";
#if defined(__clang__)
  b.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  b.compiler = "gcc " __VERSION__;
#else
  b.compiler = "unknown";
#endif
  return b;
}

std::vector<DeviceInfo> cuda_devices() { return cuda::devices(); }

}  // namespace kantor
