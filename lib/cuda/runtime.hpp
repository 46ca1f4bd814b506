// Host-callable CUDA runtime helpers with no CUDA types in their signatures, so that lib/core
// (plain C++) can use them. In a CPU-only build lib/cuda/no_cuda.cpp defines them: the queries
// report no device and everything else throws NotCompiled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kantor/info.hpp"

namespace kantor::cuda {

/// Number of visible devices; 0 when there is no driver or no device (never throws).
int device_count() noexcept;
std::vector<DeviceInfo> devices();

/// Make `device` current for the calling thread.
void set_device(int device);
/// A new non-blocking stream on the current device (opaque cudaStream_t).
void* create_stream();
void destroy_stream(void* stream) noexcept;
void synchronize_stream(void* stream);
/// Wait for all work on the current device (any stream).
void device_synchronize();

/// Device allocation; throws OutOfMemory with the requested size when it fails.
void* device_malloc(std::size_t bytes);
void device_free(void* p) noexcept;
/// A stream-ordered memory pool on `device` (opaque cudaMemPool_t) that keeps up to `keep_bytes`
/// of freed memory for reuse across synchronizations (the rest goes back to the driver), or null
/// where the device has no memory pools; and its destruction (outstanding allocations release
/// it when they are freed).
void* create_pool(int device, std::size_t keep_bytes);
void destroy_pool(void* pool) noexcept;
/// Stream-ordered allocation from `pool` on `stream` (usable by work on `stream` from this
/// point; throws OutOfMemory like device_malloc) and its stream-ordered free.
void* pool_malloc(std::size_t bytes, void* pool, void* stream);
void pool_free(void* p, void* stream) noexcept;
/// Asynchronous copy on `stream` (host buffers are pageable, so host<->device copies are
/// effectively synchronous with respect to the host buffer). kind: 0 = h2d, 1 = d2h, 2 = d2d.
void memcpy_async(void* dst, const void* src, std::size_t bytes, int kind, void* stream);
void memset_async(void* dst, int value, std::size_t bytes, void* stream);

/// Stable radix sort of `count` keys by their low `bits` bits (CUB), returning the permutation:
/// the workspace it needs, and the sort on `stream` (device arrays, all distinct): `order` gets
/// the input index of each sorted key, `keys_out` the sorted keys and `scratch` the identity.
std::size_t sort_order_temp_bytes(std::int64_t count, int bits);
void sort_order(void* temp, std::size_t temp_bytes, const std::uint64_t* keys_in,
                std::uint64_t* keys_out, std::int64_t* scratch, std::int64_t* order,
                std::int64_t count, int bits, void* stream);

/// dst[order[k]] = src[k] (scatter) or dst[k] = src[order[k]] (gather), k < count, on `stream`
/// (device arrays; order a permutation of [0, count)).
template <class T>
void permute_by_order(const std::int64_t* order, const T* src, T* dst, std::int64_t count,
                      bool scatter, void* stream);

/// CUDA events (opaque cudaEvent_t) for stream-ordered timing.
void* event_create();
void event_destroy(void* event) noexcept;
void event_record(void* event, void* stream);
/// Milliseconds from `start` to `stop`; waits for `stop`.
double event_elapsed_ms(void* start, void* stop);

/// Large copies between pageable host memory and the device through two pinned host buffers
/// of `chunk` bytes (opaque state; one per context, made on first use): `copy_host` moves each
/// chunk between the caller's memory and a pinned buffer (the caller's parallel memcpy) while
/// the DMA of the other buffer runs. An upload returns once the caller's memory has been read
/// (its DMAs may still run; the next use of a buffer waits for them); a download returns with
/// the data in place. The state's destruction waits for its DMAs.
using HostCopy = std::function<void(void* dst, const void* src, std::size_t bytes)>;
void* staging_create(std::size_t chunk);
/// Whether `stream` is being captured into a graph (then no staged copy: its events and shared
/// buffers cannot be part of a recorded step).
bool stream_capturing(void* stream);
void staging_destroy(void* staging) noexcept;
void staged_upload(void* staging, void* dst, const void* src, std::size_t bytes, void* stream,
                   const HostCopy& copy_host);
void staged_download(void* staging, void* dst, const void* src, std::size_t bytes, void* stream,
                     const HostCopy& copy_host);

/// A recorded sequence of one stream's work (opaque CUDA graph and its executable form).
struct StreamGraph {
  void* graph = nullptr;
  void* exec = nullptr;
};
/// Records what `body` enqueues on `stream` (a thread-local stream capture) into *g, replacing
/// what it held, without running it. Returns false, with *g empty and the stream out of
/// capture, where the capture fails (body calls something a capture refuses, such as a
/// synchronization, or throws): body's work has then not run.
bool graph_record(void* stream, const std::function<void()>& body, StreamGraph* g);
/// Enqueues the recorded work on `stream`.
void graph_launch(const StreamGraph& g, void* stream);
void graph_destroy(StreamGraph* g) noexcept;

}  // namespace kantor::cuda
