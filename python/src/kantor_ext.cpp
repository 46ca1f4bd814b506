// kantor._kantor: the nanobind extension under the Python package (python/kantor, docs/python.md).
// Arrays arrive through DLPack (numpy, torch, CuPy, JAX; host or CUDA memory) and are read in
// place: the Problem's views point at the caller's memory (the engines copy what they need once,
// at setup). Every argument is checked here first, and a mismatch raises TypeError (dtype,
// device) or ValueError (shape, strides) naming the argument; the library's own checks raise
// ValueError (kantor::InvalidArgument) with the field named. The GIL is released while the
// engines run; a callback at every check takes it back briefly to poll for Ctrl-C, which ends
// the solve and raises KeyboardInterrupt.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <functional>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kantor/birkhoff.hpp"
#include "kantor/buffer.hpp"
#include "kantor/context.hpp"
#include "kantor/derivatives.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"
#include "kantor/oracle.hpp"
#include "kantor/otdd.hpp"
#include "kantor/newton.hpp"
#include "kantor/ot_objectives.hpp"
#include "kantor/problem.hpp"
#include "kantor/sinkhorn.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kantor::python {
namespace {

using Array = nb::ndarray<nb::ro>;
using MutArray = nb::ndarray<>;

// ---- arrays -------------------------------------------------------------------------------

enum class Kind { kFloat32, kFloat64, kBfloat16, kOther };

template <class A>
Kind kind_of(const A& a) {
  const nb::dlpack::dtype t = a.dtype();
  if (t == nb::dtype<float>()) return Kind::kFloat32;
  if (t == nb::dtype<double>()) return Kind::kFloat64;
  if (t.code == std::uint8_t(nb::dlpack::dtype_code::Bfloat) && t.bits == 16 && t.lanes == 1)
    return Kind::kBfloat16;
  return Kind::kOther;
}

std::string kind_name(Kind k) {
  switch (k) {
    case Kind::kFloat32: return "float32";
    case Kind::kFloat64: return "float64";
    case Kind::kBfloat16: return "bfloat16";
    default: return "another dtype";
  }
}

template <class A>
bool on_cuda(const A& a) {
  return a.device_type() == nb::device::cuda::value;
}

template <class A>
void require_device(const A& a, const char* name) {
  if (a.device_type() != nb::device::cpu::value && a.device_type() != nb::device::cuda::value)
    throw nb::type_error((std::string(name) + ": arrays must be in CPU or CUDA memory").c_str());
}

/// A 2-D array as a row-major view of T: dtype T, last dimension contiguous.
template <class T, class A>
MatrixView<const T> matrix(const A& a, const char* name, MemorySpace space) {
  require_device(a, name);
  if (a.ndim() != 2)
    throw nb::value_error((std::string(name) + ": expected a 2-D array (points x coordinates), got " +
                           std::to_string(a.ndim()) + " dimensions")
                              .c_str());
  if (a.shape(1) > 1 && a.stride(1) != 1)
    throw nb::value_error((std::string(name) +
                           ": the last dimension must be contiguous (stride 1; call "
                           "np.ascontiguousarray or .contiguous())")
                              .c_str());
  const std::int64_t rows = std::int64_t(a.shape(0)), cols = std::int64_t(a.shape(1));
  std::int64_t stride = rows > 1 ? a.stride(0) : cols;
  if (stride < cols)
    throw nb::value_error((std::string(name) + ": rows overlap (row stride " +
                           std::to_string(stride) + " < " + std::to_string(cols) + " columns)")
                              .c_str());
  return MatrixView<const T>{static_cast<const T*>(a.data()), rows, cols, stride, space};
}

template <class T, class A>
VectorView<const T> vector(const A& a, const char* name, MemorySpace space, std::int64_t expected) {
  require_device(a, name);
  if (a.ndim() != 1)
    throw nb::value_error((std::string(name) + ": expected a 1-D array, got " +
                           std::to_string(a.ndim()) + " dimensions")
                              .c_str());
  if (std::int64_t(a.shape(0)) != expected)
    throw nb::value_error((std::string(name) + ": " + std::to_string(a.shape(0)) +
                           " entries for " + std::to_string(expected) + " points")
                              .c_str());
  if (a.shape(0) > 1 && a.stride(0) != 1)
    throw nb::value_error((std::string(name) + ": must be contiguous (stride 1)").c_str());
  return VectorView<const T>{static_cast<const T*>(a.data()), expected, space};
}

template <class T>
nb::object numpy_array(std::vector<T> v, std::initializer_list<std::size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(heap->data(), shape, owner));
}

// ---- contexts -----------------------------------------------------------------------------

std::atomic<bool> g_cancel{false};

/// One Context per (backend, device, stream, threads), kept for the process (a CUDA context's
/// creation costs milliseconds; a CPU context owns a thread pool).
const Context& context_for(Backend backend, int device, std::uintptr_t stream, int threads) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, std::uintptr_t, int>, std::unique_ptr<Context>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(int(backend), device, stream, threads);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  ContextOptions o;
  o.backend = backend;
  o.device = device;
  o.threads = threads;
  o.cuda_stream = reinterpret_cast<void*>(stream);
  o.cancel = &g_cancel;
  auto ctx = std::make_unique<Context>(o);
  return *cache.emplace(key, std::move(ctx)).first->second;
}

Backend backend_for(const std::string& name, bool device_data, const char* what) {
  if (device_data) {
    if (name != "auto" && name != "cuda")
      throw nb::value_error((std::string(what) + ": the arrays are in CUDA memory; backend '" +
                             name + "' cannot read them (use 'cuda' or 'auto')")
                                .c_str());
    return Backend::kCuda;
  }
  if (name == "auto") return Backend::kCpu;  // host arrays: the CPU engine, unless asked
  return parse_backend(name, "backend");
}

// ---- solve --------------------------------------------------------------------------------

/// Ctrl-C during a long call: the engines run with the GIL released; a callback at each check
/// takes the GIL back to poll for signals, ends the run on one (kAbort), and `finish()` raises
/// the pending KeyboardInterrupt once the GIL is held again.
struct Interrupt {
  bool interrupted = false;
  template <class Record>
  std::function<CallbackResult(const Record&)> callback() {
    return [this](const Record&) {
      nb::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) {
        interrupted = true;
        return CallbackResult::kAbort;
      }
      return CallbackResult::kContinue;
    };
  }
  void finish() const {
    if (!interrupted) return;
    if (PyErr_Occurred()) throw nb::python_error();
    throw nb::builtin_exception(nb::exception_type::runtime_error, "interrupted");
  }
};


nb::dict summary_dict(const SinkhornSummary& s) {
  nb::dict d;
  d["converged"] = s.converged();
  d["termination"] = to_string(s.termination);
  d["message"] = s.message;
  d["n"] = s.n;
  d["m"] = s.m;
  d["d"] = s.d;
  d["schedule"] = to_string(s.schedule);
  d["backend"] = to_string(s.backend);
  d["backend_note"] = s.backend_note;
  d["precision"] = to_string(s.precision);
  d["engine"] = s.engine;
  d["epsilon"] = s.epsilon;
  d["epsilon_reached"] = s.epsilon_reached;
  d["initial_epsilon"] = s.initial_epsilon;
  d["resolvable_epsilon"] = s.resolvable_epsilon;
  d["tolerance"] = s.tolerance;
  d["iterations"] = s.iterations;
  d["annealing_iterations"] = s.annealing_iterations;
  d["marginal_error"] = s.marginal_error;
  d["marginal_error_slack"] = s.marginal_error_slack;
  d["residual"] = s.residual;
  d["certificates"] = s.certificates;
  d["relaxation"] = s.relaxation;
  d["solver"] = s.solver;
  d["solver_note"] = s.solver_note;
  d["multiscale_levels"] = s.multiscale_levels;
  d["kept_fraction"] = s.kept_fraction;
  d["truncation_bound"] = s.truncation_bound;
  d["rho_a"] = s.rho_a;
  d["rho_b"] = s.rho_b;
  d["mass_a"] = s.mass_a;
  d["mass_b"] = s.mass_b;
  d["marginal_kl_a"] = s.marginal_kl_a;
  d["marginal_kl_b"] = s.marginal_kl_b;
  d["dual_cost"] = s.dual_cost;
  d["primal_cost"] = s.primal_cost;
  d["regularized_cost"] = s.regularized_cost;
  d["dual_gap"] = s.dual_gap;
  d["plan_mass"] = s.plan_mass;
  d["seconds_setup"] = s.seconds_setup;
  d["seconds_iterations"] = s.seconds_iterations;
  d["seconds_costs"] = s.seconds_costs;
  d["seconds"] = s.seconds_total;
  d["brief_report"] = s.brief_report();
  d["full_report"] = s.full_report();
  return d;
}

struct SolveArgs {
  double epsilon = 0, cost_scale = 1, rho_a = 0, rho_b = 0, tolerance = 0, scaling = 0.5;
  double relaxation = 1;
  std::int64_t max_iterations = 10000, check_every = 10;
  bool anneal = true, debias = false, want_map = false;
  std::string precision, backend = "auto", schedule = "alternating", solver = "auto";
  std::vector<std::string> gradient;  // of "x", "y", "a", "b"
  std::uintptr_t stream = 0;
  int threads = 0;
};

template <class T>
nb::dict run_solve(const Array& x, const Array& y, const Array* a, const Array* b,
                   const SolveArgs& args, bool device, const Array* hvp_direction) {
  const MemorySpace space = device ? MemorySpace::kDevice : MemorySpace::kHost;
  Problem<T> p;
  p.features().x = matrix<T>(x, "x", space);
  p.features().y = matrix<T>(y, "y", space);
  if (a) p.a = vector<T>(*a, "a", space, p.features().x.rows);
  if (b) p.b = vector<T>(*b, "b", space, p.features().y.rows);
  p.features().scale = args.cost_scale;
  p.epsilon = args.epsilon;
  // SolveArgs: 0 = a strict side (the Python layer has checked the values).
  const double inf = std::numeric_limits<double>::infinity();
  p.rho_a = args.rho_a == 0 ? inf : args.rho_a;
  p.rho_b = args.rho_b == 0 ? inf : args.rho_b;
  SinkhornOptions o;
  if (!args.precision.empty()) o.precision = parse_precision(args.precision, "precision");
  o.tolerance = args.tolerance;
  o.max_iterations = args.max_iterations;
  o.check_every = args.check_every;
  o.anneal = args.anneal;
  o.scaling = args.scaling;
  o.relaxation = args.relaxation;
  o.schedule = parse_schedule(args.schedule, "schedule");
  o.solver = parse_solver_kind(args.solver, "solver");
  o.record_iterations = false;
  Interrupt interrupt;
  o.callbacks.push_back(interrupt.callback<IterationRecord>());
  bool want[4] = {false, false, false, false};
  for (const std::string& w : args.gradient) {
    if (w == "x") want[0] = true;
    else if (w == "y") want[1] = true;
    else if (w == "a") want[2] = true;
    else if (w == "b") want[3] = true;
    else
      throw nb::value_error(("gradient: unknown argument '" + w + "' (expected x, y, a or b)").c_str());
  }
  const int device_id = device ? x.device_id() : 0;
  if (device && (y.device_id() != x.device_id()))
    throw nb::value_error("y: on another CUDA device than x");
  const Context& ctx = context_for(backend_for(args.backend, device, "x"), device_id, args.stream,
                                   args.threads);
  const std::int64_t n = p.features().x.rows, m = p.features().y.rows, d = p.features().x.cols;
  std::vector<T> gx, gy, ga, gb, map, hv;
  MatrixView<const T> hdir;
  if (hvp_direction) {
    if (on_cuda(*hvp_direction)) throw nb::type_error("direction: host (CPU) memory only");
    hdir = matrix<T>(*hvp_direction, "direction", MemorySpace::kHost);
    if (hdir.rows != p.features().x.rows || hdir.cols != p.features().x.cols)
      throw nb::value_error("direction: must have x's shape");
  }
  HvpSummary hs;
  SinkhornSummary s;
  DivergenceSummary div;
  std::vector<T> fh, gh;
  {
    nb::gil_scoped_release release;
    g_cancel = false;
    std::optional<Precision> prec = o.precision;
    SinkhornSolver<T> solver(ctx, p, prec);
    DivergencePotentials<T> dpot;
    if (args.debias) {
      div = solver.solve_divergence(o, &dpot);
      s = div.xy;
    } else {
      s = solver.solve(o, &dpot.xy);
    }
    if (!interrupt.interrupted && s.termination != TerminationType::kNumericalFailure) {
      fh = to_host(ctx, dpot.xy.f.cview());
      gh = to_host(ctx, dpot.xy.g.cview());
      if (want[0] || want[1] || want[2] || want[3]) {
        GradientOutput<T> go;
        if (want[0]) go.x = host_matrix((gx = std::vector<T>(std::size_t(n * d))).data(), n, d);
        if (want[1]) go.y = host_matrix((gy = std::vector<T>(std::size_t(m * d))).data(), m, d);
        if (want[2]) go.a = host_vector((ga = std::vector<T>(std::size_t(n))).data(), n);
        if (want[3]) go.b = host_vector((gb = std::vector<T>(std::size_t(m))).data(), m);
        // The solve's certificate covers the potentials: no second certificate pass.
        if (args.debias)
          solver.divergence_gradient(dpot, go, /*certify=*/false);
        else
          solver.gradient(dpot.xy, go, /*certify=*/false);
      }
      if (hvp_direction) {
        hv.resize(std::size_t(n * d));
        hs = args.debias ? solver.divergence_hvp(dpot, hdir, host_matrix(hv.data(), n, d))
                         : solver.hvp(dpot.xy, hdir, host_matrix(hv.data(), n, d));
      }
      if (args.want_map) {
        map.resize(std::size_t(n * d));
        solver.barycentric_map(dpot.xy, host_matrix(map.data(), n, d));
      }
    }
  }
  interrupt.finish();
  nb::dict out;
  out["summary"] = summary_dict(s);
  if (args.debias) {
    out["divergence"] = div.divergence;
    out["divergence_raw"] = div.divergence_raw;
    out["divergence_bound"] = div.divergence_bound;
    out["summary_xx"] = summary_dict(div.xx);
    out["summary_yy"] = summary_dict(div.yy);
  }
  if (!fh.empty()) {
    out["f"] = numpy_array(std::move(fh), {std::size_t(n)});
    out["g"] = numpy_array(std::move(gh), {std::size_t(m)});
  }
  if (!gx.empty()) out["grad_x"] = numpy_array(std::move(gx), {std::size_t(n), std::size_t(d)});
  if (!gy.empty()) out["grad_y"] = numpy_array(std::move(gy), {std::size_t(m), std::size_t(d)});
  if (!ga.empty()) out["grad_a"] = numpy_array(std::move(ga), {std::size_t(n)});
  if (!gb.empty()) out["grad_b"] = numpy_array(std::move(gb), {std::size_t(m)});
  if (!map.empty()) out["map"] = numpy_array(std::move(map), {std::size_t(n), std::size_t(d)});
  if (!hv.empty()) {
    out["hvp"] = numpy_array(std::move(hv), {std::size_t(n), std::size_t(d)});
    nb::dict h;
    h["converged"] = hs.converged;
    h["message"] = hs.message;
    h["cg_iterations"] = hs.cg_iterations;
    h["relative_residual"] = hs.relative_residual;
    h["marginal_error"] = hs.marginal_error;
    h["seconds"] = hs.seconds;
    out["hvp_summary"] = h;
  }
  return out;
}

/// Checks that every array shares x's dtype and device; returns the dtype.
Kind common_kind(const Array& x, const std::vector<std::pair<const Array*, const char*>>& others) {
  const Kind k = kind_of(x);
  if (k != Kind::kFloat32 && k != Kind::kFloat64)
    throw nb::type_error(("x: dtype must be float32 or float64, got " + kind_name(k) +
                          " (convert bfloat16 point clouds with .float())")
                             .c_str());
  for (const auto& [arr, name] : others) {
    if (!arr) continue;
    if (kind_of(*arr) != k)
      throw nb::type_error((std::string(name) + ": dtype " + kind_name(kind_of(*arr)) +
                            " differs from x's " + kind_name(k))
                               .c_str());
    if (on_cuda(*arr) != on_cuda(x))
      throw nb::type_error((std::string(name) + ": in " + (on_cuda(*arr) ? "CUDA" : "CPU") +
                            " memory but x is in " + (on_cuda(x) ? "CUDA" : "CPU") + " memory")
                               .c_str());
  }
  return k;
}

nb::dict solve(const Array& x, const Array& y, std::optional<Array> a, std::optional<Array> b,
               const SolveArgs& args, std::optional<Array> direction) {
  const Kind k = common_kind(x, {{&y, "y"}, {a ? &*a : nullptr, "a"}, {b ? &*b : nullptr, "b"},
                                 {direction ? &*direction : nullptr, "direction"}});
  const bool device = on_cuda(x);
  const Array* dir = direction ? &*direction : nullptr;
  if (k == Kind::kFloat64)
    return run_solve<double>(x, y, a ? &*a : nullptr, b ? &*b : nullptr, args, device, dir);
  return run_solve<float>(x, y, a ? &*a : nullptr, b ? &*b : nullptr, args, device, dir);
}

// ---- Newton-CG ----------------------------------------------------------------------------

/// Minimizes S_eps(x, y) (OT_eps without debias) over the source positions from x, with
/// Newton-CG, L-BFGS or gradient descent (docs/newton.md). float64 host arrays.
nb::dict newton(const Array& x, const Array& y, std::optional<Array> a, std::optional<Array> b,
                const SolveArgs& args, const std::string& method, std::int64_t max_iterations,
                double gradient_tolerance, double function_tolerance, bool debias) {
  for (const auto& [arr, name] : {std::pair<const Array*, const char*>{&x, "x"}, {&y, "y"},
                                  {a ? &*a : nullptr, "a"}, {b ? &*b : nullptr, "b"}})
    if (arr && (kind_of(*arr) != Kind::kFloat64 || on_cuda(*arr)))
      throw nb::type_error((std::string(name) + ": float64 host arrays (kantor.newton converts)").c_str());
  const MemorySpace sp = MemorySpace::kHost;
  const MatrixView<const double> xv = matrix<double>(x, "x", sp), yv = matrix<double>(y, "y", sp);
  std::vector<double> pos(std::size_t(xv.rows * xv.cols));
  for (std::int64_t i = 0; i < xv.rows; ++i)
    for (std::int64_t k = 0; k < xv.cols; ++k) pos[std::size_t(i * xv.cols + k)] = xv(i, k);
  Problem<double> p;
  p.cost = SqEuclidean<double>{host_matrix<const double>(pos.data(), xv.rows, xv.cols), yv,
                               args.cost_scale};
  if (a) p.a = vector<double>(*a, "a", sp, xv.rows);
  if (b) p.b = vector<double>(*b, "b", sp, yv.rows);
  p.epsilon = args.epsilon;
  NewtonOptions o;
  o.method = parse_minimizer_method(method, "method");
  o.max_iterations = max_iterations;
  o.gradient_tolerance = gradient_tolerance;
  o.function_tolerance = function_tolerance;
  o.record_iterations = false;
  std::string why;
  if (!o.is_valid(&why)) throw nb::value_error(("newton: " + why).c_str());
  Interrupt interrupt;
  o.callbacks.push_back(interrupt.callback<NewtonIterationRecord>());
  SinkhornOptions so;
  so.precision = Precision::kFp64;
  so.tolerance = args.tolerance;
  so.max_iterations = args.max_iterations;
  so.record_iterations = false;
  const Context& ctx = context_for(parse_backend(args.backend, "backend"), 0, 0, args.threads);
  NewtonSummary ns;
  std::int64_t sinkhorn_iterations = 0;
  {
    nb::gil_scoped_release release;
    g_cancel = false;
    DivergenceObjective<double> objective(ctx, p, so, HvpOptions{}, debias);
    ns = minimize(objective, o, pos.data());
    sinkhorn_iterations = objective.sinkhorn_iterations();
  }
  interrupt.finish();
  nb::dict out;
  out["x"] = numpy_array(std::move(pos), {std::size_t(xv.rows), std::size_t(xv.cols)});
  out["converged"] = ns.converged();
  out["termination"] = to_string(ns.termination);
  out["message"] = ns.message;
  out["method"] = to_string(ns.method);
  out["initial_objective"] = ns.initial_objective;
  out["final_objective"] = ns.final_objective;
  out["initial_gradient_norm"] = ns.initial_gradient_norm;
  out["gradient_norm"] = ns.gradient_norm;
  out["outer_iterations"] = ns.outer_iterations;
  out["accepted_steps"] = ns.accepted_steps;
  out["cg_iterations"] = ns.cg_iterations;
  out["hvp_count"] = ns.hvp_count;
  out["gradient_count"] = ns.gradient_count;
  out["sinkhorn_iterations"] = sinkhorn_iterations;
  out["most_negative_curvature"] = ns.most_negative_curvature;
  out["seconds"] = ns.seconds;
  out["brief_report"] = ns.brief_report();
  out["full_report"] = ns.full_report();
  return out;
}

// ---- OTDD ---------------------------------------------------------------------------------

nb::dict otdd_distance(const Array& xs, const Array& ls, const Array& xt, const Array& lt,
                       const std::string& mode, const std::string& label_distance, double epsilon,
                       double tolerance, const std::string& precision, const std::string& backend,
                       std::int64_t max_iterations) {
  for (const auto& [arr, name] : {std::pair<const Array*, const char*>{&xs, "source"}, {&xt, "target"}}) {
    if (kind_of(*arr) != Kind::kFloat64 || on_cuda(*arr))
      throw nb::type_error((std::string(name) + ": float64 host features (the dataset's copy; "
                                                "kantor.otdd converts)").c_str());
  }
  for (const auto& [arr, name] : {std::pair<const Array*, const char*>{&ls, "source_labels"},
                                  {&lt, "target_labels"}}) {
    if (arr->dtype() != nb::dtype<std::int32_t>() || on_cuda(*arr))
      throw nb::type_error((std::string(name) + ": int32 host labels").c_str());
  }
  otdd::Dataset A{matrix<double>(xs, "source", MemorySpace::kHost),
                  vector<std::int32_t>(ls, "source_labels", MemorySpace::kHost, std::int64_t(xs.shape(0)))};
  otdd::Dataset B{matrix<double>(xt, "target", MemorySpace::kHost),
                  vector<std::int32_t>(lt, "target_labels", MemorySpace::kHost, std::int64_t(xt.shape(0)))};
  otdd::OtddOptions o;
  o.mode = otdd::parse_mode(mode, "mode");
  o.labels.method = otdd::parse_label_distance(label_distance, "label_distance");
  o.epsilon = epsilon;
  if (tolerance > 0) o.tolerance = tolerance;
  if (max_iterations > 0) o.max_iterations = max_iterations;
  if (!precision.empty()) o.precision = parse_precision(precision, "precision");
  Interrupt interrupt;
  o.callbacks.push_back(interrupt.callback<IterationRecord>());
  const Context& ctx = context_for(parse_backend(backend, "backend"), 0, 0, 0);
  otdd::OtddSummary r;
  {
    nb::gil_scoped_release release;
    g_cancel = false;
    r = otdd::dataset_distance(ctx, A, B, o);
  }
  interrupt.finish();
  nb::dict out;
  out["distance"] = r.distance;
  out["converged"] = r.converged;
  out["message"] = r.message;
  out["mode"] = otdd::to_string(r.mode);
  out["label_distance"] = otdd::to_string(r.label_distance);
  out["precision"] = to_string(r.precision);
  out["iterations"] = r.iterations;
  out["marginal_error_xy"] = r.marginal_error_xy;
  out["marginal_error_xx"] = r.marginal_error_xx;
  out["marginal_error_yy"] = r.marginal_error_yy;
  out["ot_xy"] = r.ot_xy;
  out["ot_xx"] = r.ot_xx;
  out["ot_yy"] = r.ot_yy;
  out["seconds"] = r.seconds_total;
  out["compatible_kernel"] = r.compatible_kernel;  // "" outside compatible mode
  out["brief_report"] = r.brief_report();
  out["full_report"] = r.full_report();
  const std::size_t L = std::size_t(r.table.size());
  out["classes_source"] = r.table.classes_a;
  out["classes_target"] = r.table.classes_b;
  out["label_table"] = numpy_array(std::vector<double>(r.table.values), {L, L});
  return out;
}

// ---- transport application ----------------------------------------------------------------

template <class T>
nb::object run_apply(const Array& x, const Array& y, const Array* a, const Array* b,
                     const Array& f, const Array& g, const Array& v, double epsilon,
                     double cost_scale, bool transpose, const std::string& backend,
                     std::uintptr_t stream) {
  if (on_cuda(x)) throw nb::type_error("apply: host (CPU) arrays only");
  const MemorySpace space = MemorySpace::kHost;
  Problem<T> p;
  p.features().x = matrix<T>(x, "x", space);
  p.features().y = matrix<T>(y, "y", space);
  const std::int64_t n = p.features().x.rows, m = p.features().y.rows;
  if (a) p.a = vector<T>(*a, "a", space, n);
  if (b) p.b = vector<T>(*b, "b", space, m);
  p.features().scale = cost_scale;
  p.epsilon = epsilon;
  const VectorView<const T> fv = vector<T>(f, "f", space, n), gv = vector<T>(g, "g", space, m);
  const VectorView<const T> vv = vector<T>(v, "v", space, transpose ? n : m);
  const Context& ctx = context_for(parse_backend(backend, "backend"), 0, stream, 0);
  std::vector<T> out(std::size_t(transpose ? m : n));
  {
    nb::gil_scoped_release release;
    auto oracle = make_oracle(ctx, p, std::is_same<T, double>::value ? Precision::kFp64 : Precision::kFp32);
    auto upload = [&](const VectorView<const T>& h) {
      Buffer<T> buf(ctx, h.size);
      copy(ctx, h, buf.view());
      return buf;
    };
    Buffer<T> fb = upload(fv), gb = upload(gv), vb = upload(vv), ob(ctx, std::int64_t(out.size()));
    if (transpose)
      oracle->apply_t(T(epsilon), fb.data(), gb.data(), vb.data(), ob.data());
    else
      oracle->apply(T(epsilon), fb.data(), gb.data(), vb.data(), ob.data());
    out = to_host(ctx, ob.cview());
  }
  const std::size_t len = out.size();
  return numpy_array(std::move(out), {len});
}

nb::object apply(const Array& x, const Array& y, std::optional<Array> a, std::optional<Array> b,
                 const Array& f, const Array& g, const Array& v, double epsilon, double cost_scale,
                 bool transpose, const std::string& backend, std::uintptr_t stream) {
  const Kind k = common_kind(x, {{&y, "y"}, {a ? &*a : nullptr, "a"}, {b ? &*b : nullptr, "b"},
                                 {&f, "f"}, {&g, "g"}, {&v, "v"}});
  if (k == Kind::kFloat64)
    return run_apply<double>(x, y, a ? &*a : nullptr, b ? &*b : nullptr, f, g, v, epsilon,
                             cost_scale, transpose, backend, stream);
  return run_apply<float>(x, y, a ? &*a : nullptr, b ? &*b : nullptr, f, g, v, epsilon,
                          cost_scale, transpose, backend, stream);
}

// ---- Birkhoff -----------------------------------------------------------------------------

template <class A>
int batch_n(const A& a, const char* name) {
  require_device(a, name);
  if (a.ndim() != 3 || a.shape(1) != a.shape(2))
    throw nb::value_error((std::string(name) + ": expected a (B, n, n) array").c_str());
  const std::int64_t n = std::int64_t(a.shape(1));
  const std::int64_t B = std::int64_t(a.shape(0));
  // Contiguous row-major: strides (n n, n, 1) (any stride is fine for a size-1 dimension).
  if ((n > 1 && (a.stride(2) != 1 || a.stride(1) != n)) || (B > 1 && a.stride(0) != n * n))
    throw nb::value_error((std::string(name) + ": must be contiguous (call .contiguous())").c_str());
  return int(n);
}

BirkhoffOptions birkhoff_options(const std::string& method, const std::string& gradient,
                                 int iterations, double tolerance) {
  BirkhoffOptions o;
  o.method = parse_birkhoff_method(method, "method");
  if (gradient == "implicit")
    o.gradient = BirkhoffGradient::kImplicit;
  else if (gradient == "unrolled")
    o.gradient = BirkhoffGradient::kUnrolled;
  else
    throw nb::value_error(("gradient: expected 'implicit' or 'unrolled', got '" + gradient + "'").c_str());
  o.iterations = iterations;
  o.tolerance = tolerance;
  o.compute_summary = false;
  std::string why;
  if (!o.is_valid(&why)) throw nb::value_error(("birkhoff: " + why).c_str());
  return o;
}

template <class E>
BatchView<const E> cview(const void* d, std::int64_t B, int n, MemorySpace sp) {
  return BatchView<const E>{static_cast<const E*>(d), d ? B : 0, n, sp};
}
template <class E>
BatchView<E> mview(void* d, std::int64_t B, int n, MemorySpace sp) {
  return BatchView<E>{static_cast<E*>(d), B, n, sp};
}

/// out <- the projection of logits (same shape, dtype and device; out written in place).
void birkhoff_forward(const Array& logits, MutArray out, const std::string& method, int iterations,
                      double tolerance, std::uintptr_t stream) {
  const int n = batch_n(logits, "logits");
  batch_n(out, "out");
  if (kind_of(logits) != kind_of(out) || on_cuda(logits) != on_cuda(out) ||
      logits.shape(0) != out.shape(0) || logits.shape(1) != out.shape(1))
    throw nb::value_error("out: must have the shape, dtype and device of logits");
  const Kind k = kind_of(logits);
  if (k != Kind::kFloat32 && k != Kind::kBfloat16)
    throw nb::type_error(("logits: dtype must be float32 or bfloat16, got " + kind_name(k)).c_str());
  const BirkhoffOptions o = birkhoff_options(method, "implicit", iterations, tolerance);
  const bool dev = on_cuda(logits);
  const MemorySpace sp = dev ? MemorySpace::kDevice : MemorySpace::kHost;
  const Context& ctx =
      context_for(dev ? Backend::kCuda : Backend::kCpu, dev ? logits.device_id() : 0, stream, 0);
  const std::int64_t B = std::int64_t(logits.shape(0));
  nb::gil_scoped_release release;
  if (k == Kind::kFloat32)
    project_birkhoff(ctx, cview<float>(logits.data(), B, n, sp), mview<float>(out.data(), B, n, sp), o);
  else
    project_birkhoff(ctx, cview<bfloat16>(logits.data(), B, n, sp),
                     mview<bfloat16>(out.data(), B, n, sp), o);
}

/// grad_logits <- dL/dlogits from P (forward output), grad_P and (unrolled) the logits.
void birkhoff_backward(const Array& P, const Array& grad_P, std::optional<Array> logits,
                       MutArray grad_logits, const std::string& method, const std::string& gradient,
                       int iterations, std::uintptr_t stream) {
  const int n = batch_n(P, "P");
  batch_n(grad_P, "grad_P");
  batch_n(grad_logits, "grad_logits");
  if (logits) batch_n(*logits, "logits");
  const Kind k = kind_of(P);
  if (k != Kind::kFloat32 && k != Kind::kBfloat16)
    throw nb::type_error(("P: dtype must be float32 or bfloat16, got " + kind_name(k)).c_str());
  for (const auto& [arr, name] : {std::pair<const Array*, const char*>{&grad_P, "grad_P"},
                                  {logits ? &*logits : nullptr, "logits"}})
    if (arr && (kind_of(*arr) != k || arr->shape(0) != P.shape(0) ||
                arr->shape(1) != P.shape(1) || on_cuda(*arr) != on_cuda(P)))
      throw nb::value_error((std::string(name) + ": must have the shape, dtype and device of P").c_str());
  if (kind_of(grad_logits) != k || grad_logits.shape(0) != P.shape(0) ||
      grad_logits.shape(1) != P.shape(1) || on_cuda(grad_logits) != on_cuda(P))
    throw nb::value_error("grad_logits: must have the shape, dtype and device of P");
  const BirkhoffOptions o = birkhoff_options(method, gradient, iterations, 0);
  const bool dev = on_cuda(P);
  const MemorySpace sp = dev ? MemorySpace::kDevice : MemorySpace::kHost;
  const Context& ctx =
      context_for(dev ? Backend::kCuda : Backend::kCpu, dev ? P.device_id() : 0, stream, 0);
  const std::int64_t B = std::int64_t(P.shape(0));
  const void* lg = logits ? logits->data() : nullptr;
  nb::gil_scoped_release release;
  if (k == Kind::kFloat32)
    project_birkhoff_backward(ctx, cview<float>(P.data(), B, n, sp),
                              cview<float>(grad_P.data(), B, n, sp),
                              mview<float>(grad_logits.data(), B, n, sp), o,
                              cview<float>(lg, B, n, sp));
  else
    project_birkhoff_backward(ctx, cview<bfloat16>(P.data(), B, n, sp),
                              cview<bfloat16>(grad_P.data(), B, n, sp),
                              mview<bfloat16>(grad_logits.data(), B, n, sp), o,
                              cview<bfloat16>(lg, B, n, sp));
}

}  // namespace
}  // namespace kantor::python

NB_MODULE(_kantor, m) {
  using namespace kantor::python;
  m.doc() = "kantor: entropic optimal transport (C++/CUDA engines); see the kantor package";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const kantor::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const kantor::NotCompiled& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const kantor::BackendUnavailable& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const kantor::OutOfMemory& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });

  nb::class_<SolveArgs>(m, "SolveArgs")
      .def(nb::init<>())
      .def_rw("epsilon", &SolveArgs::epsilon)
      .def_rw("cost_scale", &SolveArgs::cost_scale)
      .def_rw("rho_a", &SolveArgs::rho_a)
      .def_rw("rho_b", &SolveArgs::rho_b)
      .def_rw("tolerance", &SolveArgs::tolerance)
      .def_rw("scaling", &SolveArgs::scaling)
      .def_rw("relaxation", &SolveArgs::relaxation)
      .def_rw("max_iterations", &SolveArgs::max_iterations)
      .def_rw("check_every", &SolveArgs::check_every)
      .def_rw("anneal", &SolveArgs::anneal)
      .def_rw("debias", &SolveArgs::debias)
      .def_rw("want_map", &SolveArgs::want_map)
      .def_rw("precision", &SolveArgs::precision)
      .def_rw("backend", &SolveArgs::backend)
      .def_rw("schedule", &SolveArgs::schedule)
      .def_rw("solver", &SolveArgs::solver)
      .def_rw("gradient", &SolveArgs::gradient)
      .def_rw("stream", &SolveArgs::stream)
      .def_rw("threads", &SolveArgs::threads);

  m.def("newton", &newton, "x"_a, "y"_a, "a"_a.none(), "b"_a.none(), "args"_a, "method"_a,
        "max_iterations"_a, "gradient_tolerance"_a, "function_tolerance"_a, "debias"_a,
        "Minimize S_eps (or OT_eps) over the source positions; returns a dict.");
  m.def("otdd", &otdd_distance, "source"_a, "source_labels"_a, "target"_a, "target_labels"_a,
        "mode"_a, "label_distance"_a, "epsilon"_a, "tolerance"_a, "precision"_a, "backend"_a,
        "max_iterations"_a, "The OTDD dataset distance (docs/otdd.md); returns a dict.");
  m.def("solve", &solve, "x"_a, "y"_a, "a"_a.none(), "b"_a.none(), "args"_a,
        "direction"_a.none() = nb::none(),
        "Solve (or, with args.debias, the divergence) and the asked extras; returns a dict.");
  m.def("apply", &apply, "x"_a, "y"_a, "a"_a.none(), "b"_a.none(), "f"_a, "g"_a, "v"_a,
        "epsilon"_a, "cost_scale"_a, "transpose"_a, "backend"_a, "stream"_a,
        "P v (or P^T v) for the plan of the potentials f, g.");
  m.def("birkhoff_forward", &birkhoff_forward, "logits"_a, "out"_a, "method"_a, "iterations"_a,
        "tolerance"_a, "stream"_a);
  m.def("birkhoff_backward", &birkhoff_backward, "P"_a, "grad_P"_a, "logits"_a.none(),
        "grad_logits"_a, "method"_a, "gradient"_a, "iterations"_a, "stream"_a);
  m.def("data_pointer", [](const Array& a) { return reinterpret_cast<std::uintptr_t>(a.data()); },
        "The address the extension sees for an array (tests: zero-copy import).");
  m.def("version", [] { return kantor::build_info().version; });
  m.def("cuda_available", [] { return !kantor::cuda_devices().empty(); });
}
