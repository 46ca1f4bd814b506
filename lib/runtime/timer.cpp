#include "kantor/timer.hpp"

#include "lib/cuda/runtime.hpp"

namespace kantor {

StreamTimer::StreamTimer(const Context& ctx) : ctx_(&ctx) {
  if (ctx.backend() == Backend::kCuda) {
    start_event_ = cuda::event_create();
    try {
      stop_event_ = cuda::event_create();
    } catch (...) {
      cuda::event_destroy(start_event_);
      throw;
    }
  }
}

StreamTimer::~StreamTimer() {
  cuda::event_destroy(start_event_);
  cuda::event_destroy(stop_event_);
}

void StreamTimer::start() {
  if (start_event_)
    cuda::event_record(start_event_, ctx_->cuda_stream());
  else
    t0_ = std::chrono::steady_clock::now();
}

void StreamTimer::stop() {
  if (stop_event_)
    cuda::event_record(stop_event_, ctx_->cuda_stream());
  else
    t1_ = std::chrono::steady_clock::now();
}

double StreamTimer::elapsed_ms() const {
  if (stop_event_) return cuda::event_elapsed_ms(start_event_, stop_event_);
  return std::chrono::duration<double, std::milli>(t1_ - t0_).count();
}

}  // namespace kantor
