// C API (include/kantor/birkhoff_c.h): a thin adapter over project_birkhoff /
// project_birkhoff_backward (kantor/birkhoff.hpp). It converts the C options to BirkhoffOptions,
// wraps the raw device pointers in device BatchViews and calls the C++ entry points with a
// Context on the caller's stream; every default and every check lives in the C++ path
// (lib/birkhoff/birkhoff.cpp). Exceptions become status codes.
//
// Contexts: one per (current CUDA device, stream), created on first use and kept in a small
// per-thread cache (a Context is not thread-safe and costs a device query to create). A cached
// Context only borrows the stream: it owns no stream, no CPU worker and no device memory, and
// destroying it makes no CUDA call.
#include "kantor/birkhoff_c.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kantor/birkhoff.hpp"
#include "kantor/config.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "lib/birkhoff/engine.hpp"

#if KANTOR_CUDA_ENABLED
#include <cuda_runtime_api.h>
#endif

static_assert(int(kantor::BirkhoffMethod::kNewton) == KANTOR_BIRKHOFF_NEWTON &&
                  int(kantor::BirkhoffMethod::kSinkhorn) == KANTOR_BIRKHOFF_SINKHORN &&
                  int(kantor::BirkhoffMethod::kDeepSeek) == KANTOR_BIRKHOFF_DEEPSEEK,
              "kantor_birkhoff_method must number the methods as kantor::BirkhoffMethod does");

namespace {

thread_local std::string g_last_error;

template <class Fn>
kantor_status guarded(Fn&& fn) {
  try {
    g_last_error.clear();
    fn();
    return KANTOR_STATUS_OK;
  } catch (const kantor::InvalidArgument& e) {
    g_last_error = e.what();
    return KANTOR_STATUS_INVALID_ARGUMENT;
  } catch (const kantor::NotCompiled& e) {
    g_last_error = e.what();
    return KANTOR_STATUS_NOT_COMPILED;
  } catch (const kantor::OutOfMemory& e) {
    g_last_error = e.what();
    return KANTOR_STATUS_OUT_OF_MEMORY;
  } catch (const std::bad_alloc&) {
    g_last_error = "out of host memory";
    return KANTOR_STATUS_OUT_OF_MEMORY;
  } catch (const kantor::CudaError& e) {
    g_last_error = e.what();
    return KANTOR_STATUS_CUDA_ERROR;
  } catch (const kantor::BackendUnavailable& e) {  // no CUDA device visible, bad device ordinal
    g_last_error = e.what();
    return KANTOR_STATUS_CUDA_ERROR;
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return KANTOR_STATUS_INTERNAL_ERROR;
  } catch (...) {
    g_last_error = "unknown error";
    return KANTOR_STATUS_INTERNAL_ERROR;
  }
}

// ---- options and views ----------------------------------------------------------------------

// The C options as BirkhoffOptions. Defaults are the C++ ones (BirkhoffOptions{}); the C-only
// parts are the integer encodings (method, booleans) and max_newton_iterations' "0 = default".
// The range checks are BirkhoffOptions::is_valid, run here so that the message names the C
// struct ("options: ...") rather than the C++ one.
kantor::BirkhoffOptions to_options(const kantor_birkhoff_options* o, bool compute_summary) {
  kantor::BirkhoffOptions r;
  if (o) {
    if (o->method < KANTOR_BIRKHOFF_NEWTON || o->method > KANTOR_BIRKHOFF_DEEPSEEK)
      throw kantor::InvalidArgument(
          "options.method must be 0 (newton), 1 (sinkhorn) or 2 (deepseek), got " +
          std::to_string(o->method));
    r.method = kantor::BirkhoffMethod(o->method);
    r.order =
        o->column_first ? kantor::SinkhornOrder::kColumnFirst : kantor::SinkhornOrder::kRowFirst;
    r.iterations = o->iterations;
    r.tolerance = o->tolerance;
    if (o->max_newton_iterations != 0) r.max_newton_iterations = o->max_newton_iterations;
    r.gradient = o->unrolled_gradient ? kantor::BirkhoffGradient::kUnrolled
                                      : kantor::BirkhoffGradient::kImplicit;
  }
  r.compute_summary = compute_summary;
  std::string why;
  if (!r.is_valid(&why)) throw kantor::InvalidArgument("options: " + why);
  return r;
}

bool is_bfloat16(kantor_dtype t) {
  if (t == KANTOR_DTYPE_FLOAT32) return false;
  if (t == KANTOR_DTYPE_BFLOAT16) return true;
  throw kantor::InvalidArgument("dtype must be KANTOR_DTYPE_FLOAT32 or KANTOR_DTYPE_BFLOAT16, got " +
                                std::to_string(int(t)));
}

template <class T>
kantor::BatchView<T> device_view(T* p, std::int64_t batch, int n) {
  return {p, batch, n, kantor::MemorySpace::kDevice};
}

// ---- Contexts on the caller's stream ----------------------------------------------------------

constexpr std::size_t kMaxCachedContexts = 8;

struct CachedContext {
  int device;
  void* stream;
  kantor::Context context;
};

// Most recently used first; at most kMaxCachedContexts (a caller cycling through many streams
// evicts the least recently used).
thread_local std::vector<std::unique_ptr<CachedContext>> t_contexts;

int current_device() {
#if KANTOR_CUDA_ENABLED
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // clear "no driver" / "no device": the Context reports it, by name
    return 0;
  }
  return device;
#else
  return 0;
#endif
}

// The stream handle the Context runs on. A Context given no stream creates its own, so the
// header's "NULL = the default stream" is passed as the explicit handle of the legacy default
// stream: what NULL means to the engine's launches (kantor is built without per-thread default
// streams), same ordering with the caller's work on it.
void* stream_handle(void* stream) {
#if KANTOR_CUDA_ENABLED
  if (!stream) return static_cast<void*>(cudaStreamLegacy);
#endif
  return stream;
}

// Throws what Context throws: NotCompiled (CPU-only build), BackendUnavailable (no device).
const kantor::Context& context_for(void* stream) {
  const int device = current_device();
  void* const handle = stream_handle(stream);
  std::vector<std::unique_ptr<CachedContext>>& cache = t_contexts;
  for (std::size_t i = 0; i < cache.size(); ++i)
    if (cache[i]->device == device && cache[i]->stream == handle) {
      std::rotate(cache.begin(), cache.begin() + std::ptrdiff_t(i),
                  cache.begin() + std::ptrdiff_t(i) + 1);
      return cache.front()->context;
    }
  kantor::ContextOptions co;
  co.backend = kantor::Backend::kCuda;
  co.threads = 1;  // the CUDA path needs no CPU workers
  co.device = device;
  co.cuda_stream = handle;
  std::unique_ptr<CachedContext> entry(new CachedContext{device, handle, kantor::Context(co)});
  if (cache.size() >= kMaxCachedContexts) cache.pop_back();
  cache.insert(cache.begin(), std::move(entry));
  return cache.front()->context;
}

// ---- the two calls --------------------------------------------------------------------------

template <class T>
kantor::BirkhoffSummary forward(const void* logits, void* out, std::int64_t batch, int n,
                                const kantor::BirkhoffOptions& o, void* stream) {
  const auto in = device_view(static_cast<const T*>(logits), batch, n);
  const auto dst = device_view(static_cast<T*>(out), batch, n);
  // The front end's own checks, before any CUDA call (see engine.hpp); project_birkhoff repeats
  // them (a few comparisons).
  kantor::birkhoff::check_forward(kantor::Backend::kCuda, in, dst, o);
  return kantor::project_birkhoff(context_for(stream), in, dst, o);
}

template <class T>
void backward(const void* P, const void* logits, const void* grad_P, void* grad_logits,
              std::int64_t batch, int n, const kantor::BirkhoffOptions& o, void* stream) {
  const auto p = device_view(static_cast<const T*>(P), batch, n);
  const auto r = device_view(static_cast<const T*>(logits), batch, n);
  const auto g = device_view(static_cast<const T*>(grad_P), batch, n);
  const auto d = device_view(static_cast<T*>(grad_logits), batch, n);
  kantor::birkhoff::check_backward(kantor::Backend::kCuda, p, g, d, o, r);
  kantor::project_birkhoff_backward(context_for(stream), p, g, d, o, r);
}

}  // namespace

extern "C" {

void kantor_birkhoff_default_options(kantor_birkhoff_options* o) {
  if (!o) return;
  const kantor::BirkhoffOptions d;
  o->method = int(d.method);
  o->column_first = d.order == kantor::SinkhornOrder::kColumnFirst;
  o->iterations = d.iterations;
  o->tolerance = d.tolerance;
  o->max_newton_iterations = d.max_newton_iterations;
  o->unrolled_gradient = d.gradient == kantor::BirkhoffGradient::kUnrolled;
}

kantor_status kantor_birkhoff_forward(const void* logits, void* out, int64_t batch, int n,
                                      kantor_dtype dtype, const kantor_birkhoff_options* options,
                                      void* stream, kantor_birkhoff_stats* stats) {
  return guarded([&] {
    const bool bf16 = is_bfloat16(dtype);
    // No stats: no summary, so the C++ path stays asynchronous.
    const kantor::BirkhoffOptions o = to_options(options, stats != nullptr);
    const kantor::BirkhoffSummary s =
        bf16 ? forward<kantor::bfloat16>(logits, out, batch, n, o, stream)
             : forward<float>(logits, out, batch, n, o, stream);
    if (stats) {
      stats->worst_error = s.worst_error;
      stats->median_error = s.median_error;
      stats->not_converged = s.not_converged;
      stats->invalid_inputs = s.invalid_inputs;
      stats->first_invalid = s.first_invalid;
    }
  });
}

kantor_status kantor_birkhoff_backward(const void* P, const void* logits, const void* grad_P,
                                       void* grad_logits, int64_t batch, int n, kantor_dtype dtype,
                                       const kantor_birkhoff_options* options, void* stream) {
  return guarded([&] {
    const bool bf16 = is_bfloat16(dtype);
    const kantor::BirkhoffOptions o = to_options(options, false);
    if (bf16)
      backward<kantor::bfloat16>(P, logits, grad_P, grad_logits, batch, n, o, stream);
    else
      backward<float>(P, logits, grad_P, grad_logits, batch, n, o, stream);
  });
}

const char* kantor_birkhoff_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
