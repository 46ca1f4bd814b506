#include "lib/cuda/runtime.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "lib/cuda/check.hpp"

namespace kantor::cuda {

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" / "no device" error
    return 0;
  }
  return n;
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  const int n = device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.ordinal = i;
    d.name = p.name;
    d.compute_major = p.major;
    d.compute_minor = p.minor;
    d.multiprocessors = p.multiProcessorCount;
    d.memory_bytes = std::int64_t(p.totalGlobalMem);
    out.push_back(d);
  }
  return out;
}

void set_device(int device) { KANTOR_CUDA_TRY(cudaSetDevice(device)); }

void* create_stream() {
  cudaStream_t s = nullptr;
  KANTOR_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void destroy_stream(void* stream) noexcept {
  if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

void synchronize_stream(void* stream) {
  KANTOR_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

void device_synchronize() { KANTOR_CUDA_TRY(cudaDeviceSynchronize()); }

void* device_malloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw OutOfMemory("cannot allocate " + std::to_string(bytes) + " bytes of device memory (" +
                      cudaGetErrorString(e) + ")");
  }
  return p;
}

void device_free(void* p) noexcept {
  // A failed free (nothing a destructor can do about it) must not surface later as the error of
  // an unrelated launch check: clear it.
  if (p && cudaFree(p) != cudaSuccess) cudaGetLastError();
}

void* create_pool(int device, std::size_t keep_bytes) {
  // Devices or drivers without stream-ordered pools: none (plain cudaMalloc, as before).
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (!supported) return nullptr;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  KANTOR_CUDA_TRY(cudaMemPoolCreate(&pool, &props));
  std::uint64_t keep = keep_bytes;
  const cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (e != cudaSuccess) {
    cudaMemPoolDestroy(pool);
    KANTOR_CUDA_TRY(e);
  }
  return pool;
}

void destroy_pool(void* pool) noexcept {
  if (pool) cudaMemPoolDestroy(static_cast<cudaMemPool_t>(pool));
}

void* pool_malloc(std::size_t bytes, void* pool, void* stream) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, static_cast<cudaMemPool_t>(pool),
                                                static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw OutOfMemory("cannot allocate " + std::to_string(bytes) + " bytes of device memory (" +
                      cudaGetErrorString(e) + ")");
  }
  return p;
}

void pool_free(void* p, void* stream) noexcept {
  if (p && cudaFreeAsync(p, static_cast<cudaStream_t>(stream)) != cudaSuccess) cudaGetLastError();
}

void memcpy_async(void* dst, const void* src, std::size_t bytes, int kind, void* stream) {
  const cudaMemcpyKind k = kind == 0   ? cudaMemcpyHostToDevice
                           : kind == 1 ? cudaMemcpyDeviceToHost
                                       : cudaMemcpyDeviceToDevice;
  KANTOR_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(stream)));
}

void memset_async(void* dst, int value, std::size_t bytes, void* stream) {
  KANTOR_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)));
}

void* event_create() {
  cudaEvent_t e = nullptr;
  KANTOR_CUDA_TRY(cudaEventCreate(&e));
  return e;
}

void event_destroy(void* event) noexcept {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void event_record(void* event, void* stream) {
  KANTOR_CUDA_TRY(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

double event_elapsed_ms(void* start, void* stop) {
  KANTOR_CUDA_TRY(cudaEventSynchronize(static_cast<cudaEvent_t>(stop)));
  float ms = 0;
  KANTOR_CUDA_TRY(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)));
  return double(ms);
}

namespace {
struct Staging {
  std::size_t chunk = 0;
  void* host[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};  // the last DMA that used each buffer
};
}  // namespace

void* staging_create(std::size_t chunk) {
  auto* st = new Staging;
  st->chunk = chunk;
  for (int b = 0; b < 2; ++b) {
    if (cudaHostAlloc(&st->host[b], chunk, cudaHostAllocDefault) != cudaSuccess ||
        cudaEventCreateWithFlags(&st->done[b], cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      staging_destroy(st);
      return nullptr;
    }
  }
  return st;
}

bool stream_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) {
    cudaGetLastError();
    return true;  // unknown: the plain copy
  }
  return status != cudaStreamCaptureStatusNone;
}

void staging_destroy(void* staging) noexcept {
  auto* st = static_cast<Staging*>(staging);
  if (!st) return;
  for (int b = 0; b < 2; ++b) {
    if (st->done[b]) {
      cudaEventSynchronize(st->done[b]);
      cudaEventDestroy(st->done[b]);
    }
    if (st->host[b]) cudaFreeHost(st->host[b]);
  }
  cudaGetLastError();
  delete st;
}

void staged_upload(void* staging, void* dst, const void* src, std::size_t bytes, void* stream,
                   const HostCopy& copy_host) {
  auto* st = static_cast<Staging*>(staging);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  int b = 0;
  for (std::size_t off = 0; off < bytes; off += st->chunk, b ^= 1) {
    const std::size_t len = std::min(st->chunk, bytes - off);
    KANTOR_CUDA_TRY(cudaEventSynchronize(st->done[b]));  // its previous DMA has read it
    copy_host(st->host[b], static_cast<const char*>(src) + off, len);
    KANTOR_CUDA_TRY(cudaMemcpyAsync(static_cast<char*>(dst) + off, st->host[b], len,
                                    cudaMemcpyHostToDevice, s));
    KANTOR_CUDA_TRY(cudaEventRecord(st->done[b], s));
  }
}

void staged_download(void* staging, void* dst, const void* src, std::size_t bytes, void* stream,
                     const HostCopy& copy_host) {
  auto* st = static_cast<Staging*>(staging);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // Chunk k's DMA into buffer k % 2 is queued before chunk k - 1 is copied out of the other.
  auto queue = [&](std::size_t off, int b) {
    const std::size_t len = std::min(st->chunk, bytes - off);
    KANTOR_CUDA_TRY(cudaMemcpyAsync(st->host[b], static_cast<const char*>(src) + off, len,
                                    cudaMemcpyDeviceToHost, s));
    KANTOR_CUDA_TRY(cudaEventRecord(st->done[b], s));
  };
  KANTOR_CUDA_TRY(cudaEventSynchronize(st->done[0]));  // an upload's last DMAs may read them
  KANTOR_CUDA_TRY(cudaEventSynchronize(st->done[1]));
  queue(0, 0);
  int b = 0;
  for (std::size_t off = 0; off < bytes; off += st->chunk, b ^= 1) {
    const std::size_t next = off + st->chunk;
    if (next < bytes) queue(next, b ^ 1);
    KANTOR_CUDA_TRY(cudaEventSynchronize(st->done[b]));
    copy_host(static_cast<char*>(dst) + off, st->host[b], std::min(st->chunk, bytes - off));
  }
}

bool graph_record(void* stream, const std::function<void()>& body, StreamGraph* g) {
  graph_destroy(g);
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  bool ok = true;
  try {
    body();
  } catch (...) {
    ok = false;  // a call the capture refused (or any other failure): nothing recorded
  }
  cudaGraph_t graph = nullptr;
  // Ends the capture whatever happened (an invalidated capture returns an error and no graph).
  if (cudaStreamEndCapture(st, &graph) != cudaSuccess || !ok || !graph) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return false;
  }
  cudaGraphExec_t exec = nullptr;
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    cudaGetLastError();
    cudaGraphDestroy(graph);
    return false;
  }
  g->graph = graph;
  g->exec = exec;
  return true;
}

void graph_launch(const StreamGraph& g, void* stream) {
  KANTOR_CUDA_TRY(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(g.exec), static_cast<cudaStream_t>(stream)));
}

void graph_destroy(StreamGraph* g) noexcept {
  if (g->exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g->exec));
  if (g->graph) cudaGraphDestroy(static_cast<cudaGraph_t>(g->graph));
  g->exec = g->graph = nullptr;
}

}  // namespace kantor::cuda
