// CPU-only build: the CUDA runtime helpers report no device and refuse everything else.
#include "kantor/error.hpp"
#include "kantor/otdd.hpp"
#include "lib/cuda/runtime.hpp"

namespace kantor::cuda {
namespace {
[[noreturn]] void not_compiled() {
  throw NotCompiled(
      "this kantor build has no CUDA engine (configured with KANTOR_WITH_CUDA=OFF "
      "or without nvcc)");
}
}  // namespace

int device_count() noexcept { return 0; }
std::vector<DeviceInfo> devices() { return {}; }
void set_device(int) { not_compiled(); }
void* create_stream() { not_compiled(); }
void destroy_stream(void*) noexcept {}
void synchronize_stream(void*) { not_compiled(); }
void device_synchronize() { not_compiled(); }
void* device_malloc(std::size_t) { not_compiled(); }
void device_free(void*) noexcept {}
void* create_pool(int, std::size_t) { not_compiled(); }
void destroy_pool(void*) noexcept {}
void* pool_malloc(std::size_t, void*, void*) { not_compiled(); }
void pool_free(void*, void*) noexcept {}
void memcpy_async(void*, const void*, std::size_t, int, void*) { not_compiled(); }
void memset_async(void*, int, std::size_t, void*) { not_compiled(); }
std::size_t sort_order_temp_bytes(std::int64_t, int) { not_compiled(); }
void sort_order(void*, std::size_t, const std::uint64_t*, std::uint64_t*, std::int64_t*,
                std::int64_t*, std::int64_t, int, void*) {
  not_compiled();
}
template <class T>
void permute_by_order(const std::int64_t*, const T*, T*, std::int64_t, bool, void*) {
  not_compiled();
}
template void permute_by_order<float>(const std::int64_t*, const float*, float*, std::int64_t,
                                      bool, void*);
template void permute_by_order<double>(const std::int64_t*, const double*, double*,
                                       std::int64_t, bool, void*);
void* event_create() { not_compiled(); }
void event_destroy(void*) noexcept {}
void event_record(void*, void*) { not_compiled(); }
double event_elapsed_ms(void*, void*) { not_compiled(); }
void* staging_create(std::size_t) { not_compiled(); }
void staging_destroy(void*) noexcept {}
bool stream_capturing(void*) { not_compiled(); }
void staged_upload(void*, void*, const void*, std::size_t, void*, const HostCopy&) {
  not_compiled();
}
void staged_download(void*, void*, const void*, std::size_t, void*, const HostCopy&) {
  not_compiled();
}
bool graph_record(void*, const std::function<void()>&, StreamGraph*) { not_compiled(); }
void graph_launch(const StreamGraph&, void*) { not_compiled(); }
void graph_destroy(StreamGraph*) noexcept {}

}  // namespace kantor::cuda

namespace kantor::otdd {
std::vector<double> bures_table_cuda(const Context&, const RowGroups&, double (*)[3]) {
  throw NotCompiled("bures_table_cuda: this kantor build has no CUDA engine");
}
}  // namespace kantor::otdd
