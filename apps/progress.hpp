// kantor solve on a terminal: Ctrl-C handling (the solve's cancellation flag) and the progress
// line. Header-only: one translation unit (cmd_solve.cpp) uses it.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>

#include "kantor/sinkhorn.hpp"

namespace kantor::cli {

// Ctrl-C during a solve: the context's cancellation flag stops it between row blocks of the
// running pass (CPU) or after the current iteration (CUDA), no output is written, exit 130; the
// handler restores the default action, so a second Ctrl-C ends the process.
inline volatile std::sig_atomic_t g_interrupted = 0;
inline std::atomic<bool> g_cancel{false};  // ContextOptions::cancel of the solve's context
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
extern "C" inline void on_interrupt(int) {
  g_interrupted = 1;
  g_cancel.store(true);
  std::signal(SIGINT, SIG_DFL);
}

/// Installs on_interrupt for its lifetime, unless SIGINT is ignored (a background job of a
/// non-interactive shell, nohup): then it stays ignored.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted = 0;
    g_cancel.store(false);
    struct sigaction current {};
    installed_ = ::sigaction(SIGINT, nullptr, &current) == 0 && current.sa_handler != SIG_IGN;
    if (!installed_) return;
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    installed_ = ::sigaction(SIGINT, &action, &previous_) == 0;
  }
  ~InterruptGuard() {
    if (installed_) ::sigaction(SIGINT, &previous_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  bool installed_ = false;
  struct sigaction previous_ {};
};

/// One overwritten stderr line (iteration, eps, marginal error) for solves running longer than a
/// second, refreshed at most 5 times per second.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled), start_(std::chrono::steady_clock::now()) {}
  IterationCallback callback() {
    return [this](const IterationRecord& r) {
      if (g_interrupted) return CallbackResult::kAbort;
      const double t =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      if (enabled_ && t >= 1.0 && t - last_ >= 0.2) {
        std::fprintf(stderr, "\r\033[K  solving: iteration %lld, eps %.4g, marginal error %.3e",
                     static_cast<long long>(r.iteration), r.epsilon, r.marginal_error);
        std::fflush(stderr);
        last_ = t;
        shown_ = true;
      }
      return CallbackResult::kContinue;
    };
  }
  void finish() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }
  ~Progress() { finish(); }

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
  double last_ = 0;
  bool shown_ = false;
};

}  // namespace kantor::cli
