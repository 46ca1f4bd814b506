// kantor bench solve: time whole solves to a tolerance (annealing, certificate and all) on the
// multiscale benchmark data of docs/benchmarks.md: x ~ U[0,1]^d, y = (0.8 u + 0.1)^2 elementwise
// with u ~ U[0,1]^d, cost |x - y|^2. The first call is timed with the Context's creation (the
// cold figure, in this process: CUDA context and module loading included); later calls reuse the
// Context (warm). One JSON object per invocation with --json.
//
//   kantor bench solve --n 1048576 --epsilon 0.0025 --tolerance 5e-3 --solver multiscale --json
#include <boost/program_options.hpp>
#if defined(__linux__)
#include <sys/resource.h>
#endif
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <vector>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "kantor/io.hpp"
#include "kantor/kantor.hpp"
#include "apps/solve_output.hpp"

namespace kantor::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::int64_t n = 1 << 17, m = 0;
  int d = 3;
  double epsilon = 0.0025, tolerance = 5e-3;
  std::string solver = "multiscale", precision, backend = "auto";
  std::string kernel = "auto";  // ContextOptions::kernel
  int repeats = 3;
  std::uint64_t seed = 0;
  std::int64_t cell = 0;
  std::int64_t dense_pairs = 0;  // 0: the library's default
  double max_density = -1;  // < 0: the library's default
  std::string points_stage = "auto";
  std::string gaussian_lift = "on";
  bool verify = false, json = false, phases = false;
  std::string mask_path;
};

// The process's minor page faults so far (-1 where getrusage has no such count).
std::int64_t minor_page_faults() {
#if defined(__linux__)
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) == 0) return std::int64_t(u.ru_minflt);
#endif
  return -1;
}

// The median of a non-empty list (the upper one of an even count).
std::int64_t median_of(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class T>
int run(const Options& o) {
  // The data, in float64 (the certificate's coordinates) and in T (the engine's).
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  const std::int64_t m = o.m > 0 ? o.m : o.n;
  std::vector<double> x(std::size_t(o.n * o.d)), y(std::size_t(m * o.d));
  for (double& v : x) v = U(rng);
  for (double& v : y) {
    const double u = 0.8 * U(rng) + 0.1;
    v = u * u;
  }
  const std::vector<T> xt(x.begin(), x.end()), yt(y.begin(), y.end());
  Problem<T> p;
  p.features().x = host_matrix(xt.data(), o.n, o.d);
  p.features().y = host_matrix(yt.data(), m, o.d);
  p.epsilon = o.epsilon;
  if (!std::is_same<T, double>::value) {
    p.reference_x = host_matrix(x.data(), o.n, o.d);
    p.reference_y = host_matrix(y.data(), m, o.d);
  }
  SinkhornOptions so;
  so.tolerance = o.tolerance;
  so.solver = parse_solver_kind(o.solver, "--solver");
  so.multiscale.verify = o.verify;
  so.multiscale.keep_mask = !o.mask_path.empty();
  if (o.cell > 0) so.multiscale.cell_points = o.cell;
  if (o.dense_pairs > 0) so.multiscale.dense_pairs = o.dense_pairs;
  if (o.max_density >= 0) so.multiscale.max_density = o.max_density;
  // --phases: the last run's phase timings (MultiscaleOptions::phase_timer).
  struct Phase {
    std::string name;
    std::int64_t n;
    double seconds;
  };
  std::vector<Phase> phases;
  // --phases also records the finest level's iterations (residual, certificate) for the JSON.
  so.record_iterations = o.phases;
  if (o.phases)
    so.multiscale.phase_timer = [&phases](const char* name, std::int64_t n, double seconds) {
      phases.push_back({name, n, seconds});
    };
  so.multiscale.gaussian_lift = o.gaussian_lift == "on";
  so.multiscale.points_stage = o.points_stage == "on"       ? PointsStage::kOn
                               : o.points_stage == "off"    ? PointsStage::kOff
                               : o.points_stage == "engine" ? PointsStage::kEngine
                                                            : PointsStage::kAuto;
  {
    std::string why;
    if (!so.is_valid(&why)) throw InvalidArgument("SinkhornOptions: " + why);
  }
  ContextOptions co;
  co.backend = parse_backend(o.backend, "--backend");
  co.kernel = parse_kernel_choice(o.kernel, "--kernel");
  const Precision precision =
      o.precision.empty() ? (std::is_same<T, double>::value ? Precision::kFp64 : Precision::kFp32)
                          : parse_precision(o.precision, "--precision");
  so.precision = precision;

  std::vector<double> seconds;
  SinkhornSummary s;
  double cold = NAN, context_seconds = NAN;
  std::int64_t cold_faults = -1;  // the cold solve's minor page faults (fresh host pages)
  std::vector<std::int64_t> warm_faults;  // each warm solve's (pages the allocator gave back)
  {
    const auto t0 = Clock::now();
    Context ctx(co);
    context_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    for (int r = 0; r < o.repeats; ++r) {
      const auto t1 = Clock::now();
      const std::int64_t faults0 = minor_page_faults();
      phases.clear();
      Potentials<T> pot;
      s = solve_sinkhorn(ctx, p, so, &pot);
      const double sec = std::chrono::duration<double>(Clock::now() - t1).count();
      if (r == 0) {
        cold = std::chrono::duration<double>(Clock::now() - t0).count();
        if (faults0 >= 0) cold_faults = minor_page_faults() - faults0;
      } else if (faults0 >= 0) {
        warm_faults.push_back(minor_page_faults() - faults0);
      }
      seconds.push_back(sec);
      if (!o.json)
        std::fprintf(stderr, "run %d: %.4f s, %s\n", r, sec, s.brief_report().c_str());
    }
  }
  if (!o.mask_path.empty() && s.mask) {
    std::ostringstream title;
    title.precision(3);
    title << "multiscale block mask, n = " << s.n << ", m = " << s.m << ", eps = " << s.epsilon
          << " (x ~ U[0,1]^" << o.d << ", y = (0.8 u + 0.1)^2)";
    io::write_text_atomic(o.mask_path, mask_svg(*s.mask, s.n, s.m, s.kept_fraction, title.str()));
  }
  std::vector<double> warm(seconds.begin() + (seconds.size() > 1 ? 1 : 0), seconds.end());
  std::sort(warm.begin(), warm.end());
  const double median = warm[warm.size() / 2];
  JsonObject j;
  j.add("benchmark", "solve")
      .add("n", o.n)
      .add("m", m)
      .add("d", std::int64_t(o.d))
      .add("epsilon", o.epsilon)
      .add("tolerance", o.tolerance)
      .add("solver_asked", o.solver)
      .add("solver", s.solver)
      .add("solver_note", s.solver_note)
      .add("points_stage", o.points_stage)
      .add("gaussian_lift_asked", o.gaussian_lift == "on")
      .add("cell_points", so.multiscale.cell_points)
      .add("dense_pairs", so.multiscale.dense_pairs)
      .add("max_density", so.multiscale.max_density)
      .add("precision", to_string(s.precision))
      .add("backend", to_string(s.backend))
      .add("engine", s.engine)
      .add("kernel", o.kernel)
      .add("repeats", std::int64_t(o.repeats))
      .add("cold_s", cold)
      .add("context_s", context_seconds)
      .add("cold_page_faults", cold_faults)
      .add("warm_page_faults", warm_faults.empty() ? std::int64_t(-1) : median_of(warm_faults))
      .add("warm_s_median", median)
      .add("warm_s_min", warm.front())
      .add("converged", s.converged())
      .add("termination", to_string(s.termination))
      .add("iterations", s.iterations)
      .add("fine_updates", s.fine_updates)
      .add("multiscale_levels", s.multiscale_levels)
      .add("kept_fraction", s.kept_fraction)
      .add("mask_rebuilds", s.mask_rebuilds)
      .add("marginal_error", s.marginal_error)
      .add("truncation_bound", s.truncation_bound)
      .add("verified_error", s.verified_error)
      .add("dual_cost", s.dual_cost)
      .add("primal_cost", s.primal_cost)
      .add("seconds_setup", s.seconds_setup)
      .add("seconds_iterations", s.seconds_iterations)
      .add("seconds_costs", s.seconds_costs);
  if (o.phases) {
    std::ostringstream a;
    a.precision(6);
    a << "[";
    for (std::size_t k = 0; k < phases.size(); ++k)
      a << (k ? ", " : "") << "{\"phase\": " << json_escape(phases[k].name)
        << ", \"n\": " << phases[k].n << ", \"seconds\": " << phases[k].seconds << "}";
    a << "]";
    j.add_raw("phases", a.str());
    // The last run's finest-level iteration records (17 digits: the last certified error reads
    // back equal to marginal_error).
    j.add_raw("records", records_json(s.records, 17));
    if (!o.json)
      for (const Phase& ph : phases)
        std::fprintf(stderr, "phase %-12s n=%-10lld %9.3f ms\n", ph.name.c_str(),
                     (long long)ph.n, 1e3 * ph.seconds);
  }
  if (o.json) {
    std::cout << j.str() << std::endl;
  } else {
    std::printf("solve n=%lld m=%lld d=%d eps=%g tol=%g %s [%s]\n  %s\n  cold %.4f s (context "
                "included), warm median %.4f s (min %.4f, %d warm runs)\n  %s\n",
                (long long)o.n, (long long)m, o.d, o.epsilon, o.tolerance, s.solver.c_str(),
                s.solver_note.c_str(), s.brief_report().c_str(), cold, median, warm.front(),
                int(warm.size()), s.engine.c_str());
  }
  return kExitOk;
}

}  // namespace

int cmd_bench_solve(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  Options o;
  po::options_description desc("options", 100, 50);
  // clang-format off
  desc.add_options()
    ("help,h", "print this help and exit")
    ("n", po::value(&o.n), "source points (default 131072)")
    ("m", po::value(&o.m), "target points (default n)")
    ("d", po::value(&o.d), "dimension (default 3)")
    ("epsilon", po::value(&o.epsilon), "target eps (default 0.0025)")
    ("tolerance", po::value(&o.tolerance), "certified L1 marginal error (default 5e-3)")
    ("solver", po::value(&o.solver), "dense | multiscale | auto (default multiscale)")
    ("cell", po::value(&o.cell), "multiscale: points per coarse cell (default: the library's)")
    ("dense-pairs", po::value(&o.dense_pairs),
     "multiscale: coarse problems with at most this many pairs are solved dense (default: the "
     "library's)")
    ("max-density", po::value(&o.max_density),
     "multiscale: densest kept fraction still run on block lists (default: the library's)")
    ("points-stage", po::value(&o.points_stage),
     "multiscale: evaluate the screen's kept atom pairs on their points: auto (engine on CUDA, "
     "on on the CPU) | on (over the host's pair lists) | off | engine (inside the engine's "
     "descent) (default auto)")
    ("gaussian-lift", po::value(&o.gaussian_lift),
     "multiscale: on | off: the Gaussian lift of the finest level's g side (the level takes it "
     "only where its cells are narrow against eps and its probe on the coarse cells passes; the "
     "solver note then says \"(Gaussian, oracles\", or \"Gaussian declined\") (default on)")
    ("precision", po::value(&o.precision), "fp32 | fp64 | tf32 | bf16 (default fp32)")
    ("backend", po::value(&o.backend), "cpu | cuda | auto (default auto)")
    ("kernel", po::value(&o.kernel),
     (kernel_choice_names(" | ") + ": force a kernel family (default auto)").c_str())
    ("repeats", po::value(&o.repeats), "solves in one process; the first is the cold one (default 3)")
    ("seed", po::value(&o.seed), "data seed (default 0)")
    ("verify", po::bool_switch(&o.verify), "multiscale: dense float64 check of the result")
    ("phases", po::bool_switch(&o.phases),
     "multiscale: time each phase of each level in the last run, the device synchronized at "
     "every boundary (JSON \"phases\"; on stderr without --json), and record the finest "
     "level's iterations (JSON \"records\")")
    ("output-mask", po::value(&o.mask_path), "multiscale: draw the last solve's block mask (.svg)")
    ("json", po::bool_switch(&o.json), "print one JSON object");
  // clang-format on
  po::variables_map vm = parse_command_line(args, desc);
  if (vm.count("help")) {
    std::cout << "usage: kantor bench solve [--n N] [--epsilon E] [--tolerance T] "
                 "[--solver dense|multiscale|auto] [--json]\n\n"
              << desc << std::endl;
    return kExitOk;
  }
  po::notify(vm);
  if (o.n < 1) throw InvalidArgument("--n must be >= 1, got " + std::to_string(o.n));
  if (o.m < 0) throw InvalidArgument("--m must be >= 1, got " + std::to_string(o.m));
  if (o.d < 1 || o.d > 64) throw InvalidArgument("--d must be in [1, 64], got " + std::to_string(o.d));
  if (o.repeats < 1) throw InvalidArgument("--repeats must be >= 1, got " + std::to_string(o.repeats));
  if (vm.count("dense-pairs") && o.dense_pairs < 1)
    throw InvalidArgument("--dense-pairs must be >= 1, got " + std::to_string(o.dense_pairs));
  if (vm.count("max-density") && !(o.max_density > 0 && o.max_density <= 1))
    throw InvalidArgument("--max-density must be in (0, 1], got " + format_number(o.max_density));
  if (o.points_stage != "auto" && o.points_stage != "on" && o.points_stage != "off" &&
      o.points_stage != "engine")
    throw InvalidArgument("--points-stage must be auto, on, off or engine, got '" +
                          o.points_stage + "'");
  if (o.gaussian_lift != "on" && o.gaussian_lift != "off")
    throw InvalidArgument("--gaussian-lift must be on or off, got '" + o.gaussian_lift + "'");
  if (!(o.epsilon > 0) || !std::isfinite(o.epsilon))
    throw InvalidArgument("--epsilon must be a finite number > 0");
  if (!(o.tolerance > 0) || !std::isfinite(o.tolerance))
    throw InvalidArgument("--tolerance must be a finite number > 0");
  const bool fp64 = o.precision == "fp64";
  return fp64 ? run<double>(o) : run<float>(o);
}

}  // namespace kantor::cli
