// Front end of the batched Birkhoff projection: validation, dispatch to the CPU engine (below,
// float64 math over the shared per-matrix algorithms) or the CUDA engine (lib/birkhoff/cuda),
// and the Summary. The only front end: the C API (birkhoff_c.cpp) is an adapter over
// project_birkhoff / project_birkhoff_backward, so every default and check lives here.
#include "kantor/birkhoff.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <type_traits>
#include <vector>

#include "kantor/error.hpp"
#include "lib/birkhoff/algorithms.hpp"
#include "lib/birkhoff/engine.hpp"
#include "lib/runtime/context_impl.hpp"

namespace kantor {

std::string to_string(BirkhoffMethod m) {
  switch (m) {
    case BirkhoffMethod::kNewton:
      return "newton";
    case BirkhoffMethod::kSinkhorn:
      return "sinkhorn";
    case BirkhoffMethod::kDeepSeek:
      return "deepseek";
  }
  return "unknown";
}

BirkhoffMethod parse_birkhoff_method(const std::string& s, const std::string& what) {
  if (s == "newton") return BirkhoffMethod::kNewton;
  if (s == "sinkhorn") return BirkhoffMethod::kSinkhorn;
  if (s == "deepseek") return BirkhoffMethod::kDeepSeek;
  throw InvalidArgument(what + ": expected newton, sinkhorn or deepseek, got '" + s + "'");
}

std::string to_string(SinkhornOrder o) { return o == SinkhornOrder::kRowFirst ? "row" : "column"; }

SinkhornOrder parse_sinkhorn_order(const std::string& s, const std::string& what) {
  if (s == "row") return SinkhornOrder::kRowFirst;
  if (s == "column") return SinkhornOrder::kColumnFirst;
  throw InvalidArgument(what + ": expected row or column, got '" + s + "'");
}

bool BirkhoffOptions::is_valid(std::string* why) const {
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  if (iterations < 0 || iterations > 10000)
    return fail("iterations must be in 0..10000 (0 = 20), got " + std::to_string(iterations));
  if (!(tolerance >= 0) || !std::isfinite(tolerance))
    return fail("tolerance must be finite and >= 0 (0 = default), got " +
                std::to_string(tolerance));
  if (max_newton_iterations < 1 || max_newton_iterations > 1000)
    return fail("max_newton_iterations must be in 1..1000, got " +
                std::to_string(max_newton_iterations));
  if (gradient == BirkhoffGradient::kUnrolled && method == BirkhoffMethod::kNewton)
    return fail(
        "the unrolled gradient exists only for the truncated methods (sinkhorn, "
        "deepseek); use the implicit gradient for newton");
  return true;
}

std::string BirkhoffSummary::brief_report() const {
  std::ostringstream os;
  os << "birkhoff " << to_string(method) << " B=" << batch << " n=" << n << " on "
     << to_string(backend);
  if (!computed) {
    os << " (no summary requested)";
    return os.str();
  }
  os << ": worst Err " << worst_error << ", median Err " << median_error;
  if (median_bin_decades > 0) os << " (binned, " << median_bin_decades << " decade)";
  os << ", " << not_converged << " above tolerance " << tolerance;
  if (invalid_inputs)
    os << ", " << invalid_inputs << " with invalid input (first: matrix " << first_invalid << ", "
       << first_invalid_reason << ")";
  os << ", " << seconds * 1e3 << " ms";
  return os.str();
}

void BirkhoffSummary::throw_if_invalid(const std::string& what) const {
  if (invalid_inputs <= 0) return;
  throw InvalidArgument(what + ": matrix " + std::to_string(first_invalid) + " of " +
                        std::to_string(batch) + " is not a valid input: " + first_invalid_reason +
                        " (" + std::to_string(invalid_inputs) +
                        " invalid in all; expected finite logits or -inf, with a finite entry in "
                        "every row and every column)");
}

namespace birkhoff {
std::string invalid_reason(int status) {
  switch (status) {
    case kInvalidInput:
      return "a logit is NaN or +inf";
    case kEmptyRow:
      return "a row has every logit -inf";
    case kEmptyColumn:
      return "a column has every logit -inf";
    case kAllNegInf:
      return "every logit is -inf";
    default:
      return "";
  }
}
}  // namespace birkhoff

namespace {

using birkhoff::Storage;

double default_tolerance(bool bf16) { return bf16 ? 3e-2 : 1e-5; }
int default_iterations(int it) { return it > 0 ? it : 20; }

template <class T>
Storage storage_of() {
  return std::is_same<T, float>::value ? Storage::kFloat32 : Storage::kBFloat16;
}

inline double load(float v) { return v; }
inline double load(bfloat16 v) { return to_float(v); }
inline void store(float& d, double v) { d = float(v); }
inline void store(bfloat16& d, double v) { d = to_bfloat16(float(v)); }

MemorySpace memory_space_of(Backend backend) {
  return backend == Backend::kCuda ? MemorySpace::kDevice : MemorySpace::kHost;
}

template <class T>
void check_view(Backend backend, const BatchView<T>& v, const char* name, std::int64_t batch,
                int n) {
  const MemorySpace space = memory_space_of(backend);
  if (v.space != space)
    throw InvalidArgument(std::string(name) + " is in " + to_string(v.space) +
                          " memory but the context runs on " + to_string(backend) +
                          " (expected " + to_string(space) + " memory)");
  if (v.batch != batch || v.n != n)
    throw InvalidArgument(std::string(name) + " has shape [" + std::to_string(v.batch) + ", " +
                          std::to_string(v.n) + ", " + std::to_string(v.n) + "], expected [" +
                          std::to_string(batch) + ", " + std::to_string(n) + ", " +
                          std::to_string(n) + "]");
  if (batch > 0 && v.data == nullptr)
    throw InvalidArgument(std::string(name) + " is null but the batch is not empty");
}

void check_shape(std::int64_t batch, int n, const char* name) {
  if (n < 2 || n > birkhoff::kMaxN)
    throw InvalidArgument(std::string(name) + ": n = " + std::to_string(n) +
                          " is outside the supported range 2..16");
  if (batch < 0)
    throw InvalidArgument(std::string(name) + ": batch must be >= 0, got " + std::to_string(batch));
  // Guard: batch * n * n elements (and their bytes) must fit in 64 bits, or sizes wrap around.
  const std::int64_t max_batch = std::numeric_limits<std::int64_t>::max() / (16 * n * n);
  if (batch > max_batch)
    throw InvalidArgument(std::string(name) + ": batch " + std::to_string(batch) +
                          " is too large (at most " + std::to_string(max_batch) + " for n = " +
                          std::to_string(n) + ")");
}

void check_options(const BirkhoffOptions& o) {
  std::string why;
  if (!o.is_valid(&why)) throw InvalidArgument("BirkhoffOptions: " + why);
}

template <class T>
void check_forward_args(Backend backend, const BatchView<const T>& logits,
                        const BatchView<T>& out, const BirkhoffOptions& options) {
  check_options(options);
  check_shape(logits.batch, logits.n, "project_birkhoff: logits");
  check_view(backend, logits, "project_birkhoff: logits", logits.batch, logits.n);
  check_view(backend, out, "project_birkhoff: out", logits.batch, logits.n);
}

template <class T>
void check_backward_args(Backend backend, const BatchView<const T>& P,
                         const BatchView<const T>& G, const BatchView<T>& D,
                         const BirkhoffOptions& options, const BatchView<const T>& R) {
  check_options(options);
  const bool implicit = options.gradient == BirkhoffGradient::kImplicit;
  check_shape(G.batch, G.n, "project_birkhoff_backward: grad_P");
  check_view(backend, G, "project_birkhoff_backward: grad_P", G.batch, G.n);
  check_view(backend, D, "project_birkhoff_backward: grad_logits", G.batch, G.n);
  check_view(backend, implicit ? P : R,
             implicit ? "project_birkhoff_backward: P"
                      : "project_birkhoff_backward: logits (unrolled gradient)",
             G.batch, G.n);
}

// ---- CPU engine ---------------------------------------------------------------------------

constexpr std::int64_t kCpuChunk = 2048;

// Forward of matrices [b0, b1) with compile-time row stride NMAX; returns per-matrix status.
template <int NMAX, class T>
void cpu_forward_range(const T* in, T* out, std::int64_t b0, std::int64_t b1, int n,
                       const BirkhoffOptions& o, double tol, std::uint8_t* status) {
  using namespace birkhoff;
  double X[NMAX * NMAX];
  const TruncatedMap map{o.method == BirkhoffMethod::kDeepSeek, o.order == SinkhornOrder::kRowFirst,
                         default_iterations(o.iterations)};
  const std::int64_t nn = std::int64_t(n) * n;
  for (std::int64_t b = b0; b < b1; ++b) {
    std::fill(X, X + NMAX * NMAX, 0.0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) X[i * NMAX + j] = load(in[b * nn + i * n + j]);
    int st;
    if (o.method == BirkhoffMethod::kNewton) {
      // float64 Newton reaches ~1e-15; stop far below any storage tolerance.
      st = newton_project<NMAX>(X, n, 1e-13, std::min(1e-9, 0.1 * tol),
                                std::max(o.max_newton_iterations, 60))
               .status;
    } else {
      st = truncated_forward<NMAX>(X, n, map);
    }
    // Invalid input, or Newton on a pattern without total support (X still holds the logits):
    // write zeros, never NaN or -inf; the status reports the matrix.
    if (st != kOk)
      std::fill(X, X + NMAX * NMAX, 0.0);
    status[b] = std::uint8_t(st);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) store(out[b * nn + i * n + j], X[i * NMAX + j]);
  }
}

template <int NMAX, class T>
void cpu_backward_range(const T* P, const T* R, const T* G, T* D, std::int64_t b0, std::int64_t b1,
                        int n, const BirkhoffOptions& o) {
  using namespace birkhoff;
  double A[NMAX * NMAX], Gm[NMAX * NMAX];
  const TruncatedMap map{o.method == BirkhoffMethod::kDeepSeek, o.order == SinkhornOrder::kRowFirst,
                         default_iterations(o.iterations)};
  const std::int64_t nn = std::int64_t(n) * n;
  const bool implicit = o.gradient == BirkhoffGradient::kImplicit;
  for (std::int64_t b = b0; b < b1; ++b) {
    std::fill(A, A + NMAX * NMAX, 0.0);
    std::fill(Gm, Gm + NMAX * NMAX, 0.0);
    const T* src = implicit ? P : R;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        A[i * NMAX + j] = load(src[b * nn + i * n + j]);
        Gm[i * NMAX + j] = load(G[b * nn + i * n + j]);
      }
    if (implicit)
      implicit_backward<NMAX>(A, Gm, n);
    else
      truncated_backward<NMAX>(A, Gm, n, map);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const double v = Gm[i * NMAX + j];
        store(D[b * nn + i * n + j], std::isfinite(v) ? v : 0.0);  // never NaN out
      }
  }
}

template <class T>
void cpu_run_chunks(const Context& ctx, std::int64_t batch,
                    const std::function<void(std::int64_t, std::int64_t)>& fn) {
  const std::int64_t chunks = (batch + kCpuChunk - 1) / kCpuChunk;
  ctx.impl().pool->run(
      chunks, [&](std::int64_t c) { fn(c * kCpuChunk, std::min(batch, (c + 1) * kCpuChunk)); });
}

template <class T>
BirkhoffSummary forward_impl(const Context& ctx, BatchView<const T> logits, BatchView<T> out,
                             const BirkhoffOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  check_forward_args(ctx.backend(), logits, out, options);
  const bool bf16 = !std::is_same<T, float>::value;
  BirkhoffSummary s;
  s.batch = logits.batch;
  s.n = logits.n;
  s.method = options.method;
  s.backend = ctx.backend();
  s.tolerance = options.tolerance > 0 ? options.tolerance : default_tolerance(bf16);
  const int n = logits.n;
  const std::int64_t B = logits.batch;
  if (ctx.backend() == Backend::kCuda) {
    s.kernel = birkhoff::cuda_kernel_name(n);
    birkhoff::ForwardArgs a;
    a.logits = logits.data;
    a.out = out.data;
    a.batch = B;
    a.n = n;
    a.storage = storage_of<T>();
    a.method = options.method;
    a.row_first = options.order == SinkhornOrder::kRowFirst;
    a.iterations = default_iterations(options.iterations);
    a.tolerance = float(s.tolerance);
    a.max_newton_iterations = options.max_newton_iterations;
    if (B > 0) {
      birkhoff::DeviceStats st;
      birkhoff::cuda_forward(a, ctx.cuda_stream(), options.compute_summary ? &st : nullptr);
      if (options.compute_summary) {
        s.computed = true;
        s.worst_error = st.worst;
        s.median_error = st.median;
        s.median_bin_decades = st.median_bin_decades;
        s.not_converged = st.not_converged;
        s.invalid_inputs = st.invalid;
        s.first_invalid = st.first_invalid;
        s.first_invalid_reason = birkhoff::invalid_reason(st.first_invalid_status);
      }
    }
  } else {
    s.kernel = "cpu float64 " + std::string(n == 4 ? "n=4 unrolled" : "general n");
    std::vector<std::uint8_t> status(std::size_t(std::max<std::int64_t>(B, 0)));
    cpu_run_chunks<T>(ctx, B, [&](std::int64_t b0, std::int64_t b1) {
      if (n == 4)
        cpu_forward_range<4>(logits.data, out.data, b0, b1, n, options, s.tolerance, status.data());
      else
        cpu_forward_range<birkhoff::kMaxN>(logits.data, out.data, b0, b1, n, options, s.tolerance,
                                           status.data());
    });
    if (options.compute_summary && B > 0) {
      std::vector<double> err(std::size_t(B), 0.0);
      const std::int64_t nn = std::int64_t(n) * n;
      cpu_run_chunks<T>(ctx, B, [&](std::int64_t b0, std::int64_t b1) {
        double P[birkhoff::kMaxN * birkhoff::kMaxN];
        for (std::int64_t b = b0; b < b1; ++b) {
          for (int i = 0; i < n; ++i)
            for (int j = 0; j < n; ++j)
              P[i * birkhoff::kMaxN + j] = load(out.data[b * nn + i * n + j]);
          double e = birkhoff::marginal_error<birkhoff::kMaxN>(P, n);
          if (status[std::size_t(b)] != birkhoff::kOk) e = HUGE_VAL;
          err[std::size_t(b)] = e;
        }
      });
      s.computed = true;
      for (std::int64_t b = 0; b < B; ++b) {
        const double e = err[std::size_t(b)];
        if (!(e <= s.tolerance)) ++s.not_converged;
        if (birkhoff::is_invalid_status(status[std::size_t(b)])) {
          if (s.invalid_inputs++ == 0) {
            s.first_invalid = b;
            s.first_invalid_reason = birkhoff::invalid_reason(status[std::size_t(b)]);
          }
        }
      }
      s.worst_error = *std::max_element(err.begin(), err.end());
      auto mid = err.begin() + (B - 1) / 2;
      std::nth_element(err.begin(), mid, err.end());
      s.median_error = *mid;
    }
  }
  // An empty batch is a no-op (nothing read or written; the pointers may be null): the summary
  // of no matrices has no errors.
  if (B == 0 && options.compute_summary) {
    s.computed = true;
    s.worst_error = 0;
    s.median_error = 0;
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

template <class T>
void backward_impl(const Context& ctx, BatchView<const T> P, BatchView<const T> G, BatchView<T> D,
                   const BirkhoffOptions& options, BatchView<const T> R) {
  check_backward_args(ctx.backend(), P, G, D, options, R);
  const bool implicit = options.gradient == BirkhoffGradient::kImplicit;
  const int n = G.n;
  const std::int64_t B = G.batch;
  if (B == 0) return;
  if (ctx.backend() == Backend::kCuda) {
    birkhoff::BackwardArgs a;
    a.P = P.data;
    a.logits = R.data;
    a.grad_P = G.data;
    a.grad_logits = D.data;
    a.batch = B;
    a.n = n;
    a.storage = storage_of<T>();
    a.implicit = implicit;
    a.method = options.method;
    a.row_first = options.order == SinkhornOrder::kRowFirst;
    a.iterations = default_iterations(options.iterations);
    birkhoff::cuda_backward(a, ctx.cuda_stream());
    return;
  }
  cpu_run_chunks<T>(ctx, B, [&](std::int64_t b0, std::int64_t b1) {
    if (n == 4)
      cpu_backward_range<4>(P.data, R.data, G.data, D.data, b0, b1, n, options);
    else
      cpu_backward_range<birkhoff::kMaxN>(P.data, R.data, G.data, D.data, b0, b1, n, options);
  });
}

}  // namespace

namespace birkhoff {
void check_forward(Backend backend, BatchView<const float> logits, BatchView<float> out,
                   const BirkhoffOptions& options) {
  check_forward_args(backend, logits, out, options);
}
void check_forward(Backend backend, BatchView<const bfloat16> logits, BatchView<bfloat16> out,
                   const BirkhoffOptions& options) {
  check_forward_args(backend, logits, out, options);
}
void check_backward(Backend backend, BatchView<const float> P, BatchView<const float> grad_P,
                    BatchView<float> grad_logits, const BirkhoffOptions& options,
                    BatchView<const float> logits) {
  check_backward_args(backend, P, grad_P, grad_logits, options, logits);
}
void check_backward(Backend backend, BatchView<const bfloat16> P,
                    BatchView<const bfloat16> grad_P, BatchView<bfloat16> grad_logits,
                    const BirkhoffOptions& options, BatchView<const bfloat16> logits) {
  check_backward_args(backend, P, grad_P, grad_logits, options, logits);
}
}  // namespace birkhoff

BirkhoffSummary project_birkhoff(const Context& ctx, BatchView<const float> logits,
                                 BatchView<float> out, const BirkhoffOptions& options) {
  return forward_impl<float>(ctx, logits, out, options);
}
BirkhoffSummary project_birkhoff(const Context& ctx, BatchView<const bfloat16> logits,
                                 BatchView<bfloat16> out, const BirkhoffOptions& options) {
  return forward_impl<bfloat16>(ctx, logits, out, options);
}

void project_birkhoff_backward(const Context& ctx, BatchView<const float> P,
                               BatchView<const float> grad_P, BatchView<float> grad_logits,
                               const BirkhoffOptions& options, BatchView<const float> logits) {
  backward_impl<float>(ctx, P, grad_P, grad_logits, options, logits);
}
void project_birkhoff_backward(const Context& ctx, BatchView<const bfloat16> P,
                               BatchView<const bfloat16> grad_P, BatchView<bfloat16> grad_logits,
                               const BirkhoffOptions& options, BatchView<const bfloat16> logits) {
  backward_impl<bfloat16>(ctx, P, grad_P, grad_logits, options, logits);
}

void fill_normal(const Context& ctx, BatchView<float> out, double mean, double stddev,
                 std::uint64_t seed) {
  check_view(ctx.backend(), out, "fill_normal: out", out.batch, out.n);
  const std::int64_t count = out.elements();
  if (count == 0) return;
  if (ctx.backend() == Backend::kCuda) {
    birkhoff::cuda_fill_normal(out.data, count, Storage::kFloat32, float(mean), float(stddev), seed,
                               ctx.cuda_stream());
    return;
  }
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(mean, stddev);
  for (std::int64_t k = 0; k < count; ++k) out.data[k] = float(dist(gen));
}

BirkhoffTiming time_birkhoff(const Context& ctx, const BirkhoffBenchConfig& cfg) {
  check_options(cfg.options);
  check_shape(cfg.batch, cfg.n, "bench birkhoff");
  if (cfg.runs < 1 || cfg.warmup < 0)
    throw InvalidArgument("bench birkhoff: runs must be >= 1 and warmup >= 0");
  if (ctx.backend() == Backend::kCuda) return birkhoff::cuda_time(cfg, ctx.cuda_stream());
  // CPU: fresh N(0, scale^2) logits before every run (outside the timed region), steady clock.
  if (cfg.bf16) throw InvalidArgument("bench birkhoff: --bf16 is timed on the CUDA engine only");
  const std::int64_t count = cfg.batch * cfg.n * cfg.n;
  Buffer<float> R(ctx, count), P(ctx, count), G(ctx, count), D(ctx, count);
  BirkhoffOptions o = cfg.options;
  o.compute_summary = false;
  BirkhoffTiming t;
  std::vector<double> fwd, both;
  fill_normal(ctx, batch_view<float>(G, cfg.n), 0.0, 1.0, 99);
  for (int r = 0; r < cfg.warmup + cfg.runs; ++r) {
    fill_normal(ctx, batch_view<float>(R, cfg.n), 0.0, cfg.scale, 1000 + r);
    const auto t0 = std::chrono::steady_clock::now();
    project_birkhoff(ctx, batch_view<const float>(R, cfg.n), batch_view<float>(P, cfg.n), o);
    const auto t1 = std::chrono::steady_clock::now();
    if (cfg.backward)
      project_birkhoff_backward(ctx, batch_view<const float>(P, cfg.n),
                                batch_view<const float>(G, cfg.n), batch_view<float>(D, cfg.n), o,
                                batch_view<const float>(R, cfg.n));
    const auto t2 = std::chrono::steady_clock::now();
    if (r < cfg.warmup) continue;
    fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    both.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
  }
  auto stats = [](std::vector<double> v, double& med, double& lo, double& hi) {
    std::sort(v.begin(), v.end());
    med = v[v.size() / 2];
    lo = v.front();
    hi = v.back();
  };
  t.runs = cfg.runs;
  stats(fwd, t.forward_ms_median, t.forward_ms_min, t.forward_ms_max);
  if (cfg.backward) stats(both, t.both_ms_median, t.both_ms_min, t.both_ms_max);
  return t;
}

}  // namespace kantor
