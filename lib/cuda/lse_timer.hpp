// Stream-ordered GPU timing with CUDA events, for `kantor bench sinkhorn` (CUDA builds only;
// callers guard with KANTOR_CUDA_ENABLED). Plain C++: events and streams are opaque pointers.
#pragma once

namespace kantor::cuda {

/// A pair of CUDA events on one stream. elapsed_ms() synchronizes on the stop event.
class LseEventTimer {
 public:
  LseEventTimer();
  ~LseEventTimer();
  LseEventTimer(const LseEventTimer&) = delete;
  LseEventTimer& operator=(const LseEventTimer&) = delete;
  /// Record the start / stop event on `stream` (an opaque cudaStream_t).
  void start(void* stream);
  void stop(void* stream);
  /// Milliseconds between the two events; waits for the stop event.
  double elapsed_ms() const;

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

}  // namespace kantor::cuda
