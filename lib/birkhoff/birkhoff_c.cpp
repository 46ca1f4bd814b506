// C API (include/kantor/birkhoff_c.h): validates, then calls the CUDA engine directly on the
// caller's stream (no Context: nothing to create per call). Exceptions become status codes.
#include "kantor/birkhoff_c.h"

#include <new>
#include <string>

#include "kantor/error.hpp"
#include "lib/birkhoff/engine.hpp"

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
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return KANTOR_STATUS_INTERNAL_ERROR;
  } catch (...) {
    g_last_error = "unknown error";
    return KANTOR_STATUS_INTERNAL_ERROR;
  }
}

kantor::BirkhoffOptions to_options(const kantor_birkhoff_options* o) {
  kantor_birkhoff_options d;
  kantor_birkhoff_default_options(&d);
  if (!o) o = &d;
  if (o->method < 0 || o->method > 2)
    throw kantor::InvalidArgument(
        "options.method must be 0 (newton), 1 (sinkhorn) or 2 "
        "(deepseek), got " +
        std::to_string(o->method));
  kantor::BirkhoffOptions r;
  r.method = kantor::BirkhoffMethod(o->method);
  r.order =
      o->column_first ? kantor::SinkhornOrder::kColumnFirst : kantor::SinkhornOrder::kRowFirst;
  r.iterations = o->iterations;
  r.tolerance = o->tolerance;
  r.max_newton_iterations = o->max_newton_iterations > 0 ? o->max_newton_iterations : 30;
  r.gradient = o->unrolled_gradient ? kantor::BirkhoffGradient::kUnrolled
                                    : kantor::BirkhoffGradient::kImplicit;
  std::string why;
  if (!r.is_valid(&why)) throw kantor::InvalidArgument("options: " + why);
  return r;
}

kantor::birkhoff::Storage to_storage(kantor_dtype t) {
  if (t == KANTOR_DTYPE_FLOAT32) return kantor::birkhoff::Storage::kFloat32;
  if (t == KANTOR_DTYPE_BFLOAT16) return kantor::birkhoff::Storage::kBFloat16;
  throw kantor::InvalidArgument(
      "dtype must be KANTOR_DTYPE_FLOAT32 or KANTOR_DTYPE_BFLOAT16, "
      "got " +
      std::to_string(int(t)));
}

void check_shape(std::int64_t batch, int n) {
  if (n < 2 || n > 16)
    throw kantor::InvalidArgument("n = " + std::to_string(n) + " is outside 2..16");
  if (batch < 0) throw kantor::InvalidArgument("batch must be >= 0, got " + std::to_string(batch));
}

void check_ptr(const void* p, std::int64_t batch, const char* name) {
  if (batch > 0 && !p) throw kantor::InvalidArgument(std::string(name) + " is NULL but batch > 0");
}

}  // namespace

extern "C" {

void kantor_birkhoff_default_options(kantor_birkhoff_options* o) {
  if (!o) return;
  o->method = KANTOR_BIRKHOFF_NEWTON;
  o->column_first = 0;
  o->iterations = 0;
  o->tolerance = 0;
  o->max_newton_iterations = 30;
  o->unrolled_gradient = 0;
}

kantor_status kantor_birkhoff_forward(const void* logits, void* out, int64_t batch, int n,
                                      kantor_dtype dtype, const kantor_birkhoff_options* options,
                                      void* stream, kantor_birkhoff_stats* stats) {
  return guarded([&] {
    check_shape(batch, n);
    check_ptr(logits, batch, "logits");
    check_ptr(out, batch, "out");
    const kantor::BirkhoffOptions o = to_options(options);
    kantor::birkhoff::ForwardArgs a;
    a.logits = logits;
    a.out = out;
    a.batch = batch;
    a.n = n;
    a.storage = to_storage(dtype);
    a.method = o.method;
    a.row_first = o.order == kantor::SinkhornOrder::kRowFirst;
    a.iterations = o.iterations > 0 ? o.iterations : 20;
    a.tolerance =
        float(o.tolerance > 0 ? o.tolerance : (dtype == KANTOR_DTYPE_BFLOAT16 ? 3e-2 : 1e-5));
    a.max_newton_iterations = o.max_newton_iterations;
    kantor::birkhoff::DeviceStats st;
    kantor::birkhoff::cuda_forward(a, stream, stats ? &st : nullptr);
    if (stats) {
      stats->worst_error = st.worst;
      stats->median_error = st.median;
      stats->not_converged = st.not_converged;
      stats->invalid_inputs = st.invalid;
      stats->first_invalid = st.first_invalid;
    }
  });
}

kantor_status kantor_birkhoff_backward(const void* P, const void* logits, const void* grad_P,
                                       void* grad_logits, int64_t batch, int n, kantor_dtype dtype,
                                       const kantor_birkhoff_options* options, void* stream) {
  return guarded([&] {
    check_shape(batch, n);
    const kantor::BirkhoffOptions o = to_options(options);
    const bool implicit = o.gradient == kantor::BirkhoffGradient::kImplicit;
    check_ptr(implicit ? P : logits, batch, implicit ? "P" : "logits");
    check_ptr(grad_P, batch, "grad_P");
    check_ptr(grad_logits, batch, "grad_logits");
    kantor::birkhoff::BackwardArgs a;
    a.P = P;
    a.logits = logits;
    a.grad_P = grad_P;
    a.grad_logits = grad_logits;
    a.batch = batch;
    a.n = n;
    a.storage = to_storage(dtype);
    a.implicit = implicit;
    a.method = o.method;
    a.row_first = o.order == kantor::SinkhornOrder::kRowFirst;
    a.iterations = o.iterations > 0 ? o.iterations : 20;
    kantor::birkhoff::cuda_backward(a, stream);
  });
}

const char* kantor_birkhoff_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
