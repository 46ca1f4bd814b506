// StreamTimer: times the work issued on a Context, for benchmarks. CUDA contexts use a pair of
// CUDA events recorded on the context's stream; CPU contexts use the steady clock.
//
//   kantor::StreamTimer t(ctx);
//   t.start();  run_passes();  t.stop();
//   double ms = t.elapsed_ms();   // synchronizes
#pragma once

#include <chrono>

#include "kantor/context.hpp"

namespace kantor {

class StreamTimer {
 public:
  explicit StreamTimer(const Context& ctx);
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;

  /// Marks the start (an event on the stream, or the clock now).
  void start();
  /// Marks the end of the work issued so far (on CPU the work is already done).
  void stop();
  /// Milliseconds between start and stop; waits for the stop event on CUDA.
  double elapsed_ms() const;

 private:
  const Context* ctx_;
  void* start_event_ = nullptr;  // cudaEvent_t on CUDA contexts
  void* stop_event_ = nullptr;
  std::chrono::steady_clock::time_point t0_, t1_;
};

}  // namespace kantor
