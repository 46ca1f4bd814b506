// kantor bench sinkhorn: times K Sinkhorn iterations of the point-cloud oracle at a fixed eps
// (no annealing), the protocol of docs/performance.md section 2: x, y ~ N(0, I) in R^d, weights
// rand + 0.1 normalized (seeded), cost |x - y|^2. Each repeat starts from zero potentials and
// times K iterations (update_f + update_g, or symmetric_step) through the Oracle directly, after
// a warm-up run: CUDA events on the GPU, std::chrono on the CPU. Prints the median and min/max
// over repeats, the achieved exp2/s and flop/s and their fractions of the H200 ceilings.
//
// Policies of the engine redesign, for its acceptance rows: --classes L (a LabelAugmented cost:
// random labels in [0, L) sorted by class, a random table), --block-fraction F (a block list
// keeping a fraction F of each row tile's key tiles, one contiguous run around the diagonal),
// --values K (time apply_mat with K value columns, P V, instead of iterations), --kernel (force
// a kernel family of the dispatch table).
//
// Derivatives (issue 10): --gradient times the K iterations followed by the gradient w.r.t. x
// (FlashSinkhorn's forward + backward protocol); --hvp first iterates (untimed) until the
// marginal error is below --converge-tolerance (default 1e-6; at most --converge-max-iterations,
// default 20000), then times one HVP w.r.t. x in a random
// direction with the Schur-complement CG at --cg-tolerance.
//
//   kantor bench sinkhorn --n 50000 --d 64 --precision tf32 --backend cuda --json
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <vector>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "kantor/buffer.hpp"
#include "kantor/config.hpp"
#include "kantor/context.hpp"
#include "kantor/derivatives.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"
#include "kantor/oracle.hpp"
#include "kantor/sinkhorn.hpp"
#include "kantor/timer.hpp"

namespace kantor::cli {
namespace {

// H200 ceilings measured on 2026-11-29 (docs/performance.md section 1).
constexpr double kExp2PerSecond = 4.13e12;
constexpr double kTf32MmaFlops = 320e12;
constexpr double kFp32Flops = 58.6e12;

struct BenchOptions {
  std::int64_t n = 10000, m = 0, d = 3;
  double epsilon = 0.1;
  std::int64_t iterations = 10;
  std::string schedule = "alternating", precision, backend = "auto";
  int repeats = 20;
  int warmup = 2;
  unsigned seed = 0;
  bool json = false;
  std::int64_t classes = 0;     // > 0: LabelAugmented cost with this many classes
  double block_fraction = 1;    // < 1: block-list schedule keeping this fraction of key tiles
  std::int64_t values = 0;      // > 0: time apply_mat with this many value columns
  std::string kernel = "auto";  // ContextOptions::kernel
  bool gradient = false;        // time iterations + the gradient w.r.t. x
  bool hvp = false;             // time one HVP from converged potentials
  double cg_tolerance = 1e-6;
  std::int64_t cg_check_every = 5;
  std::int64_t cg_max_iterations = 1000;  // --hvp: CG iteration budget
  std::string cg_preconditioner = "diagonal";  // --hvp: diagonal | marginal | none
  double converge_tolerance = 1e-6;        // --hvp: marginal error of the potentials
  std::int64_t converge_max_iterations = 20000;
  double rho = 0;  // > 0: unbalanced, both marginals relaxed with this penalty
};

struct Timing {
  std::vector<double> ms;
  std::string engine;
  double marginal_error = 0;
  double certificate = 0;   // certified marginal error of the last repeat's potentials
  double certify_ms = 0;    // one certificate (two float64 passes), timed on its own
  std::int64_t cg_iterations = 0;      // --hvp: CG iterations of the last timed HVP
  double cg_relative_residual = NAN;   // --hvp: its relative residual
  std::int64_t converge_iterations = 0;  // --hvp: untimed iterations before it
};

template <class T>
Timing run_bench(const Context& ctx, const BenchOptions& o, Precision precision,
                 Schedule schedule) {
  const std::int64_t n = o.n, m = o.m, d = o.d;
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  std::vector<T> x(static_cast<std::size_t>(n * d)), y(static_cast<std::size_t>(m * d));
  std::vector<T> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(m));
  for (auto& v : x) v = T(nd(rng));
  for (auto& v : y) v = T(nd(rng));
  double sa = 0, sb = 0;
  for (auto& v : a) sa += (v = T(ud(rng) + 0.1));
  for (auto& v : b) sb += (v = T(ud(rng) + 0.1));
  for (auto& v : a) v = T(v / sa);
  for (auto& v : b) v = T(v / sb);
  Problem<T> p;
  p.features().x = host_matrix<const T>(x.data(), n, d);
  p.features().y = host_matrix<const T>(y.data(), m, d);
  p.a = host_vector<const T>(a.data(), n);
  p.b = host_vector<const T>(b.data(), m);
  p.epsilon = o.epsilon;
  if (o.rho > 0) p.rho_a = p.rho_b = o.rho;
  std::vector<std::int32_t> lx, ly;
  std::vector<double> table;
  if (o.classes > 0) {
    // Labels sorted by class (as a dataset sorted by label), a random table in [0, 2).
    const std::int64_t L = o.classes;
    lx.resize(std::size_t(n));
    ly.resize(std::size_t(m));
    for (std::int64_t i = 0; i < n; ++i) lx[std::size_t(i)] = std::int32_t(i * L / n);
    for (std::int64_t j = 0; j < m; ++j) ly[std::size_t(j)] = std::int32_t(j * L / m);
    table.resize(std::size_t(L * L));
    for (auto& v : table) v = 2 * ud(rng);
    LabelAugmented<T> l;
    l.features = p.features();
    l.labels_x = host_vector<const std::int32_t>(lx.data(), n);
    l.labels_y = host_vector<const std::int32_t>(ly.data(), m);
    l.table = host_matrix<const double>(table.data(), L, L);
    p.cost = l;
  }
  auto oracle = make_oracle(ctx, p, precision);
  if (o.block_fraction < 1) {
    // Each row tile keeps one run of ceil(F * key tiles) tiles around its diagonal position.
    auto make = [&](std::int64_t rows, std::int64_t keys) {
      const BlockShape sh = oracle->block_shape();
      BlockList l;
      l.row_tile = sh.row_tile;
      l.key_tile = sh.key_tile;
      const std::int64_t rt = (rows + l.row_tile - 1) / l.row_tile;
      const std::int64_t kt = (keys + l.key_tile - 1) / l.key_tile;
      const std::int64_t w = std::max<std::int64_t>(1, std::int64_t(std::ceil(o.block_fraction * double(kt))));
      l.run_ptr.push_back(0);
      for (std::int64_t r = 0; r < rt; ++r) {
        const std::int64_t c = r * kt / rt;
        const std::int64_t b0 = std::max<std::int64_t>(0, std::min(kt - w, c - w / 2));
        l.runs.push_back(std::int32_t(b0));
        l.runs.push_back(std::int32_t(b0 + w));
        l.run_ptr.push_back(std::int64_t(l.runs.size()) / 2);
      }
      return l;
    };
    const BlockList lf = make(n, m), lg = make(m, n);
    oracle->set_block_lists(&lf, &lg);
  }
  Buffer<T> V, PV;
  if (o.values > 0) {
    std::vector<T> hv(std::size_t(m * o.values));
    for (auto& v : hv) v = T(nd(rng));
    V = Buffer<T>(ctx, m * o.values);
    PV = Buffer<T>(ctx, n * o.values);
    copy(ctx, host_vector<const T>(hv.data(), m * o.values), V.view());
  }
  Buffer<T> f(ctx, n), g(ctx, m);
  Buffer<double> err(ctx, 1);
  const T eps = T(o.epsilon);
  Buffer<T> G, A, HA;
  if (o.gradient) G = Buffer<T>(ctx, n * d);
  if (o.hvp) {
    std::vector<T> ha(std::size_t(n * d));
    for (auto& v : ha) v = T(nd(rng));
    A = Buffer<T>(ctx, n * d);
    HA = Buffer<T>(ctx, n * d);
    copy(ctx, host_vector<const T>(ha.data(), n * d), A.view());
  }
  HvpOptions hvp_options;
  hvp_options.tolerance = o.cg_tolerance;
  hvp_options.check_every = o.cg_check_every;
  hvp_options.max_iterations = o.cg_max_iterations;
  hvp_options.preconditioner =
      o.cg_preconditioner == "none"       ? HvpOptions::Preconditioner::kNone
      : o.cg_preconditioner == "marginal" ? HvpOptions::Preconditioner::kMarginal
                                          : HvpOptions::Preconditioner::kDiagonal;
  HvpSummary hvp_summary;
  auto reset = [&] {
    detail::fill_bytes(ctx, f.data(), f.space(), 0, sizeof(T) * std::size_t(n));
    detail::fill_bytes(ctx, g.data(), g.space(), 0, sizeof(T) * std::size_t(m));
  };
  auto iterate = [&] {
    if (o.hvp) {
      hvp_summary = oracle_hvp(ctx, *oracle, eps, f.data(), g.data(),
                               MatrixView<const T>{A.data(), n, d, d, A.space()},
                               MatrixView<const T>{}, MatrixView<T>{HA.data(), n, d, d, HA.space()},
                               MatrixView<T>{}, hvp_options);
      return;
    }
    for (std::int64_t k = 0; k < o.iterations; ++k) {
      if (o.values > 0) {
        oracle->apply_mat(eps, f.data(), g.data(),
                          MatrixView<const T>{V.data(), m, o.values, o.values, V.space()},
                          MatrixView<T>{PV.data(), n, o.values, o.values, PV.space()});
      } else if (schedule == Schedule::kAlternating) {
        oracle->update_f(eps, g.data(), f.data(), nullptr);
        oracle->update_g(eps, f.data(), g.data(), nullptr);
      } else {
        oracle->symmetric_step(eps, k == 0 ? T(1) : T(0.5), f.data(), g.data(), nullptr);
      }
    }
    if (o.gradient)
      oracle_gradient(ctx, *oracle, eps, f.data(), g.data(), 0,
                      MatrixView<T>{G.data(), n, d, d, G.space()});
  };
  Timing t;
  if (o.hvp) {
    // Converged potentials (untimed): alternating iterations until the marginal error <= 1e-6.
    reset();
    for (std::int64_t k = 0; k < o.converge_max_iterations; k += 10) {
      for (int s = 0; s < 10; ++s) {
        oracle->update_f(eps, g.data(), f.data(), nullptr);
        oracle->update_g(eps, f.data(), g.data(), s == 9 ? err.data() : nullptr);
      }
      t.converge_iterations = k + 10;
      if (to_host(ctx, err.cview())[0] <= o.converge_tolerance) break;
    }
  }
  t.engine = oracle->description();
  for (int w = 0; w < o.warmup; ++w) {
    if (!o.hvp) reset();
    iterate();
  }
  ctx.synchronize();
  for (int r = 0; r < o.repeats; ++r) {
    if (!o.hvp) reset();
    StreamTimer timer(ctx);  // CUDA events on the context's stream, or the steady clock
    timer.start();
    iterate();
    timer.stop();
    t.ms.push_back(timer.elapsed_ms());
  }
  t.cg_iterations = hvp_summary.cg_iterations;
  t.cg_relative_residual = hvp_summary.relative_residual;
  // Sanity value of the last repeat's potentials (not timed).
  oracle->marginal_error(eps, f.data(), g.data(), err.data());
  t.marginal_error = to_host(ctx, err.cview())[0];
  // The certificate a solve runs at its end (not part of the timed iterations above).
  ctx.synchronize();
  const auto c0 = std::chrono::steady_clock::now();
  t.certificate = oracle->certify(o.epsilon, f.data(), g.data()).bound;  // synchronizes
  t.certify_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
  return t;
}

}  // namespace

int cmd_bench_sinkhorn(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  BenchOptions o;
  po::options_description desc("options", 100, 50);
  desc.add_options()("help,h", "print this help and exit")("n", po::value(&o.n),
                                                           "source points (default 10000)")(
      "m", po::value(&o.m), "target points (default n)")("d", po::value(&o.d),
                                                         "dimension (default 3)")(
      "epsilon", po::value(&o.epsilon), "entropic regularization, fixed (default 0.1)")(
      "iterations", po::value(&o.iterations), "timed Sinkhorn iterations per repeat (default 10)")(
      "schedule", po::value(&o.schedule), "alternating | symmetric (default alternating)")(
      "precision", po::value(&o.precision),
      "fp32 | tf32 | bf16 | fp64 (default tf32 on cuda, fp32 on cpu)")(
      "backend", po::value(&o.backend), "cpu | cuda | auto (default auto)")(
      "repeats", po::value(&o.repeats), "timed repeats (default 20)")(
      "warmup", po::value(&o.warmup), "untimed warm-up runs (default 2)")(
      "seed", po::value(&o.seed), "data seed (default 0)")(
      "classes", po::value(&o.classes), "label-augmented cost with L classes (default 0: none)")(
      "block-fraction", po::value(&o.block_fraction),
      "block-list schedule keeping this fraction of the key tiles (default 1: dense)")(
      "values", po::value(&o.values),
      "time apply_mat (P V) with K value columns instead of iterations (default 0)")(
      "kernel", po::value(&o.kernel),
      (kernel_choice_names(" | ") + ": force a kernel family (default auto)").c_str())(
      "gradient", po::bool_switch(&o.gradient),
      "time the iterations followed by the gradient w.r.t. x")(
      "hvp", po::bool_switch(&o.hvp),
      "time one Hessian-vector product w.r.t. x from converged potentials")(
      "cg-tolerance", po::value(&o.cg_tolerance),
      "--hvp: relative residual of the Schur-complement CG (default 1e-6)")(
      "converge-tolerance", po::value(&o.converge_tolerance),
      "--hvp: untimed iterations until this marginal error (default 1e-6)")(
      "converge-max-iterations", po::value(&o.converge_max_iterations),
      "--hvp: at most this many untimed iterations (default 20000)")(
      "cg-preconditioner", po::value(&o.cg_preconditioner),
      "--hvp: diagonal (exact diag of the Schur complement, default) | marginal | none")(
      "cg-check-every", po::value(&o.cg_check_every),
      "--hvp: CG iterations between residual checks (default 5)")(
      "cg-max-iterations", po::value(&o.cg_max_iterations),
      "--hvp: CG iteration budget (default 1000)")(
      "rho", po::value(&o.rho),
      "unbalanced OT: both marginals relaxed with penalty R (default 0: balanced)")(
      "json", po::bool_switch(&o.json), "print one JSON object");
  po::variables_map vm = parse_command_line(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: kantor bench sinkhorn --n N --m M --d D --epsilon E --iterations K "
                 "[--schedule alternating|symmetric] [--precision fp32|tf32|bf16|fp64] "
                 "[--backend cpu|cuda|auto] [--repeats R] [--classes L] [--block-fraction F] [--rho R] "
                 "[--values K | --gradient | --hvp [--cg-tolerance T]] [--kernel "
              << kernel_choice_names("|") << "] [--json]\n\n"
              << desc << std::endl;
    return kExitOk;
  }
  po::notify(vm);
  if (o.m == 0) o.m = o.n;
  if (o.n < 1) throw InvalidArgument("--n must be >= 1, got " + std::to_string(o.n));
  if (o.m < 1) throw InvalidArgument("--m must be >= 1, got " + std::to_string(o.m));
  if (o.d < 1) throw InvalidArgument("--d must be >= 1, got " + std::to_string(o.d));
  if (!(o.epsilon > 0) || !std::isfinite(o.epsilon))
    throw InvalidArgument("--epsilon must be a finite number > 0");
  if (o.iterations < 1)
    throw InvalidArgument("--iterations must be >= 1, got " + std::to_string(o.iterations));
  if (o.repeats < 1)
    throw InvalidArgument("--repeats must be >= 1, got " + std::to_string(o.repeats));
  if (o.warmup < 0) throw InvalidArgument("--warmup must be >= 0");
  if (!(o.rho >= 0) || !std::isfinite(o.rho))
    throw InvalidArgument("--rho must be a finite number > 0 (or 0: balanced), got " +
                          format_number(o.rho));
  if (o.classes < 0 || o.classes > (1 << 20))
    throw InvalidArgument("--classes must be in [0, 2^20], got " + std::to_string(o.classes));
  if (!(o.block_fraction > 0 && o.block_fraction <= 1))
    throw InvalidArgument("--block-fraction must be in (0, 1], got " +
                          format_number(o.block_fraction));
  if (int(o.gradient) + int(o.hvp) + int(o.values > 0) > 1)
    throw InvalidArgument("--gradient, --hvp and --values time different things: give one");
  if (!(o.cg_tolerance > 0) || !std::isfinite(o.cg_tolerance))
    throw InvalidArgument("--cg-tolerance must be a finite number > 0, got " +
                          format_number(o.cg_tolerance));
  if (!(o.converge_tolerance > 0) || o.converge_max_iterations < 10)
    throw InvalidArgument("--converge-tolerance must be > 0 and --converge-max-iterations >= 10");
  if (o.cg_preconditioner != "diagonal" && o.cg_preconditioner != "marginal" &&
      o.cg_preconditioner != "none")
    throw InvalidArgument("--cg-preconditioner: unknown value '" + o.cg_preconditioner +
                          "' (expected diagonal, marginal or none)");
  if (o.cg_check_every < 1)
    throw InvalidArgument("--cg-check-every must be >= 1, got " + std::to_string(o.cg_check_every));
  if (o.cg_max_iterations < 1)
    throw InvalidArgument("--cg-max-iterations must be >= 1, got " +
                          std::to_string(o.cg_max_iterations));
  if (o.values < 0 || o.values > 4096)
    throw InvalidArgument("--values must be in [0, 4096], got " + std::to_string(o.values));
  const Schedule schedule = parse_schedule(o.schedule, "--schedule");
  const Backend backend = parse_backend(o.backend, "--backend");
  ContextOptions co;
  co.backend = backend;
  co.kernel = parse_kernel_choice(o.kernel, "--kernel");
  Context ctx(co);
  if (o.precision.empty()) o.precision = ctx.backend() == Backend::kCuda ? "tf32" : "fp32";
  const Precision precision = parse_precision(o.precision, "--precision");

  const Timing t = precision == Precision::kFp64 ? run_bench<double>(ctx, o, precision, schedule)
                                                 : run_bench<float>(ctx, o, precision, schedule);
  std::vector<double> ms = t.ms;
  std::sort(ms.begin(), ms.end());
  const std::size_t k = ms.size();
  const double median = k % 2 ? ms[k / 2] : 0.5 * (ms[k / 2 - 1] + ms[k / 2]);
  // Work per timed run: 2K LSE passes over n x m pairs (both schedules), one exp2 per pair; flops
  // of the scores: 2d per pair (dot product, tf32/bf16) or 3d (exact differences, fp32/fp64).
  // (--values: K one-sided passes.)
  const double pairs =
      (o.values > 0 ? 1.0 : 2.0) * double(o.iterations) * double(o.n) * double(o.m);
  const bool dot = precision == Precision::kTf32 || precision == Precision::kBf16;
  const double flops = pairs * double(o.d) * (dot ? 2.0 : 3.0);
  const double sec = median * 1e-3;
  const double exp_rate = pairs / sec, flop_rate = flops / sec;
  const bool gpu = ctx.backend() == Backend::kCuda;
  const double flop_ceiling = !gpu                            ? NAN
                              : dot                           ? kTf32MmaFlops
                              : precision == Precision::kFp32 ? kFp32Flops
                                                              : NAN;
  std::string device = "cpu";
  if (gpu) {
    const auto devs = cuda_devices();
    if (!devs.empty()) device = devs[std::size_t(ctx.device())].name;
  }
  if (o.json) {
    JsonObject j;
    j.add("benchmark", "sinkhorn")
        .add("n", o.n)
        .add("m", o.m)
        .add("d", o.d)
        .add("epsilon", o.epsilon)
        .add("rho", o.rho)
        .add("iterations", o.iterations)
        .add("schedule", to_string(schedule))
        .add("precision", to_string(precision))
        .add("backend", to_string(ctx.backend()))
        .add("device", device)
        .add("engine", t.engine)
        .add("repeats", std::int64_t(o.repeats))
        .add("ms_median", median)
        .add("ms_min", ms.front())
        .add("ms_max", ms.back())
        .add("ms_per_iteration", median / double(o.iterations))
        .add("exp_per_s", exp_rate)
        .add("exp_fraction_of_h200", gpu ? exp_rate / kExp2PerSecond : NAN)
        .add("flop_per_s", flop_rate)
        .add("flop_ceiling", flop_ceiling)
        .add("flop_fraction_of_h200", flop_rate / flop_ceiling)
        .add("marginal_error", t.marginal_error)
        .add("certified_marginal_error", t.certificate)
        .add("certify_ms", t.certify_ms)
        .add("classes", o.classes)
        .add("block_fraction", o.block_fraction)
        .add("values", o.values)
        .add("kernel", o.kernel)
        .add("gradient", o.gradient)
        .add("hvp", o.hvp)
        .add("cg_tolerance", o.cg_tolerance)
        .add("cg_iterations", t.cg_iterations)
        .add("cg_relative_residual", t.cg_relative_residual)
        .add("converge_iterations", t.converge_iterations);
    std::cout << j.str() << std::endl;
  } else {
    std::printf(
        "sinkhorn n=%lld m=%lld d=%lld eps=%g K=%lld %s %s on %s (%s)\n"
        "  %s\n"
        "  median %.3f ms (min %.3f, max %.3f, %d repeats), %.4f ms/iteration\n"
        "  %.3e exp2/s (%.1f%% of the H200 SFU), %.3e flop/s",
        (long long)o.n, (long long)o.m, (long long)o.d, o.epsilon, (long long)o.iterations,
        to_string(schedule).c_str(), to_string(precision).c_str(), to_string(ctx.backend()).c_str(),
        device.c_str(), t.engine.c_str(), median, ms.front(), ms.back(), o.repeats,
        median / double(o.iterations), exp_rate, gpu ? 100 * exp_rate / kExp2PerSecond : NAN,
        flop_rate);
    if (std::isfinite(flop_ceiling))
      std::printf(" (%.1f%% of %.3g)", 100 * flop_rate / flop_ceiling, flop_ceiling);
    std::printf("\n  marginal error after the last repeat %.3e (engine residual), %.3e certified"
                " (certificate: %.3f ms, not in the timings above)\n",
                t.marginal_error, t.certificate, t.certify_ms);
    if (o.gradient) std::printf("  timed: %lld iterations + the gradient w.r.t. x\n",
                                (long long)o.iterations);
    if (o.hvp)
      std::printf("  timed: one HVP w.r.t. x, %lld CG iterations, relative residual %.3e "
                  "(tolerance %g), after %lld untimed iterations\n",
                  (long long)t.cg_iterations, t.cg_relative_residual, o.cg_tolerance,
                  (long long)t.converge_iterations);
  }
  return kExitOk;
}

}  // namespace kantor::cli
