// Context::Impl: what engines need from a Context. Only lib/ and oracles/ include this.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "kantor/context.hpp"
#include "lib/core/thread_pool.hpp"

namespace kantor {

struct Context::Impl {
  Backend backend = Backend::kCpu;
  std::string note;
  int threads = 1;
  int device = 0;
  void* stream = nullptr;     // cudaStream_t
  bool owns_stream = false;
  void* memory = nullptr;     // cudaMemPool_t of the context's device buffers (lib/runtime/buffer.cpp)
  const std::atomic<bool>* cancel = nullptr;  // ContextOptions::cancel
  KernelChoice kernel = KernelChoice::kAuto;  // ContextOptions::kernel
  std::unique_ptr<detail::ThreadPool> pool;  // CPU engine workers (created for every context)
  // Engine-specific state (e.g. the cuBLAS handle), created on first use by lib/cuda.
  std::shared_ptr<void> cuda_state;
  // Pinned buffers of the large host<->device copies (lib/runtime/buffer.cpp, copy_bytes),
  // made on first use (none where pinning fails: the plain copy then).
  mutable std::mutex staging_mutex;
  mutable std::shared_ptr<void> staging;
  mutable bool staging_tried = false;

  ~Impl();
};

}  // namespace kantor
