// kantor solve: entropic OT between two point clouds read from .npy / .csv files (or the built-in
// --demo problem), printed as the Summary's full report or as one JSON object.
//
//   kantor solve --source x.npy --target y.npy --epsilon 0.05 --json
//   kantor solve --demo --schedule symmetric --debias
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "apps/progress.hpp"
#include "apps/solve_input.hpp"
#include "apps/solve_output.hpp"
#include "kantor/buffer.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"
#include "kantor/io.hpp"
#include "kantor/sinkhorn.hpp"

namespace kantor::cli {
namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

constexpr double kDefaultScaling = 0.5;

// The SinkhornOptions fields the CLI sets, by option (their is_valid messages name the field).
const FieldOptions kSinkhornOptionNames = {{"multiscale.cell_points", "--multiscale-cell"},
                                           {"multiscale.max_density", "--multiscale-max-density"},
                                           {"scaling", "--scaling"},
                                           {"tolerance", "--tolerance"},
                                           {"max_iterations", "--max-iterations"},
                                           {"check_every", "--check-every"}};

// ---- settings ---------------------------------------------------------------------------------

struct Settings {
  SinkhornOptions options;
  double epsilon = kDemoEpsilon;
  double cost_scale = 1.0;
  /// KL-relaxed marginals (--rho, --rho-source, --rho-target, --reach); infinity: strict.
  double rho_a = std::numeric_limits<double>::infinity();
  double rho_b = std::numeric_limits<double>::infinity();
  bool debias = false, json = false, quiet = false, demo = false;
  std::string potentials_prefix, map_path, gradient_path, mask_path;
};



// ---- the solve ----------------------------------------------------------------------------

/// The nested summary of a debiased part; the keys written as null are appended to *nulls as
/// "<prefix>.<key>".
std::string summary_json(const SinkhornSummary& s, const std::string& prefix,
                         std::vector<std::string>* nulls) {
  JsonObject o;
  o.add("converged", s.converged())
      .add("termination", to_string(s.termination))
      .add("iterations", s.iterations)
      .add("epsilon", s.epsilon_reached)
      .add("marginal_error", s.marginal_error)
      .add("residual", s.residual)
      .add("dual_cost", s.dual_cost)
      .add("primal_cost", s.primal_cost);
  for (const std::string& k : o.null_keys()) nulls->push_back(prefix + "." + k);
  return o.str();
}

/// Test hook: with KANTOR_TEST_INJECT=numerical-failure in the environment, a solve's Summary is
/// turned into a numerical failure (NaN / Inf in its numbers), so that the CLI tests can check
/// what a failure prints and writes; the validation of the inputs makes a real one hard to
/// provoke on purpose.
void inject_test_failure(SinkhornSummary* s, DivergenceSummary* div) {
  const char* v = std::getenv("KANTOR_TEST_INJECT");
  if (v == nullptr || std::string(v) != "numerical-failure") return;
  auto poison = [](SinkhornSummary* x) {
    x->termination = TerminationType::kNumericalFailure;
    x->message = "marginal error is not finite at iteration " + std::to_string(x->iterations) +
                 " (injected by KANTOR_TEST_INJECT)";
    x->marginal_error = std::numeric_limits<double>::infinity();
    x->primal_cost = -std::numeric_limits<double>::quiet_NaN();
    x->regularized_cost = std::numeric_limits<double>::quiet_NaN();
    x->dual_gap = std::numeric_limits<double>::quiet_NaN();
    x->plan_mass = std::numeric_limits<double>::infinity();
  };
  poison(s);
  if (div) {
    poison(&div->xy);
    poison(&div->xx);
  }
}

/// True when the solve (any of the three of a debiased one) ended in a numerical failure.
bool numerical_failure(const SinkhornSummary& s, const DivergenceSummary& div, bool debias) {
  auto failed = [](const SinkhornSummary& x) {
    return x.termination == TerminationType::kNumericalFailure;
  };
  return failed(s) || (debias && (failed(div.xx) || failed(div.yy)));
}

/// The message of a failed (or partly non-finite) solve: what could not be computed.
std::string not_computed_message(const std::string& message,
                                 const std::vector<std::string>& keys) {
  if (keys.empty()) return message;
  std::string out = message + "; not computed (null): ";
  for (std::size_t i = 0; i < keys.size(); ++i) out += (i ? ", " : "") + keys[i];
  return out;
}

template <class T>
int run_solve(const Context& ctx, const Settings& st, const Input& in, Precision precision) {
  constexpr bool is_float = std::is_same<T, float>::value;
  // In float32 the points are first centred in float64 on the midpoint of their joint bounding
  // box: far from the origin (1e8 + N(0, 1)) the float conversion would round away the spread.
  // The cost is translation invariant, so the potentials are unchanged; the map is shifted back.
  // Centred, a coordinate overflows float32 only where the costs do: that check comes first.
  check_cost_range(in, st.cost_scale, std::numeric_limits<T>::max(), precision);
  const Box box = is_float ? bounding_box(in) : Box{};
  const std::vector<double>& shift = box.mid;
  const std::vector<T> x = convert<T>(in.x, in.x_name, "coordinate", in.d, precision, shift);
  const std::vector<T> y = convert<T>(in.y, in.y_name, "coordinate", in.d, precision, shift);
  const std::vector<T> a = convert<T>(in.a, in.a_name, "weight", 1, precision);
  const std::vector<T> b = convert<T>(in.b, in.b_name, "weight", 1, precision);
  if (is_float) {
    check_float_mass(in.a, in.a_name, precision);
    check_float_mass(in.b, in.b_name, precision);
  }
  Problem<T> p;
  p.features().x = host_matrix(x.data(), in.n, in.d);
  p.features().y = host_matrix(y.data(), in.m, in.d);
  if (!a.empty()) p.a = host_vector(a.data(), in.n);
  if (!b.empty()) p.b = host_vector(b.data(), in.m);
  p.epsilon = st.epsilon;
  p.features().scale = st.cost_scale;
  p.rho_a = st.rho_a;
  p.rho_b = st.rho_b;
  // The certificate is about the file's float64 coordinates, not their centred float32 copies.
  if (is_float) {
    p.reference_x = host_matrix(in.x.data(), in.n, in.d);
    p.reference_y = host_matrix(in.y.data(), in.m, in.d);
  }
  // The solver validates the problem (the float64 one already passed kantor::validate) and its
  // range in the precision (eps resolvable, costs finite): its messages get the file / option.
  auto named = [&in](auto&& fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const InvalidArgument& e) {
      rethrow_problem_error(e, in);
    }
  };

  SinkhornOptions options = st.options;
  options.precision = precision;
  Progress progress(!st.quiet && ::isatty(STDERR_FILENO));
  options.callbacks.push_back(progress.callback());

  const auto t0 = Clock::now();
  // One prepared problem serves the solve and the barycentric map.
  SinkhornSolver<T> solver = named([&] { return SinkhornSolver<T>(ctx, p, precision); });
  DivergencePotentials<T> dpot;  // the self-terms' potentials serve the divergence's gradient
  Potentials<T>& pot = dpot.xy;
  SinkhornSummary s;
  DivergenceSummary div;
  {
    InterruptGuard guard;
    named([&] {
      if (st.debias) {
        div = solver.solve_divergence(options, &dpot);
        s = div.xy;
      } else {
        s = solver.solve(options, &pot);
      }
    });
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  progress.finish();
  inject_test_failure(&s, st.debias ? &div : nullptr);
  if (g_interrupted) {
    std::fprintf(stderr, "kantor solve: interrupted after %lld iterations; no output written\n",
                 static_cast<long long>(s.iterations));
    return kExitInterrupted;
  }
  // A numerical failure writes no output file and exits kExitNumericalFailure.
  const bool failed = numerical_failure(s, div, st.debias);

  std::vector<OutputFile> outputs;
  if (!failed && !st.potentials_prefix.empty()) {
    const PotentialPaths paths = potential_paths(st.potentials_prefix);
    outputs.push_back(
        {"--output-potentials", paths.f, {in.n}, to_double(to_host(ctx, pot.f.cview())), is_float});
    outputs.push_back(
        {"--output-potentials", paths.g, {in.m}, to_double(to_host(ctx, pot.g.cview())), is_float});
  }
  if (!failed && !st.mask_path.empty()) {
    if (s.mask) {
      std::ostringstream title;
      title.precision(3);
      title << "multiscale block mask, n = " << s.n << ", m = " << s.m << ", eps = " << s.epsilon;
      io::write_text_atomic(st.mask_path,
                            mask_svg(*s.mask, s.n, s.m, s.kept_fraction, title.str()));
      if (!st.json) std::cout << "wrote " << st.mask_path << "\n";
    } else {
      std::fprintf(stderr, "kantor solve: no block mask to draw (%s); %s not written\n",
                   s.solver == "multiscale" ? "the fine passes ran dense" : "the dense solver ran",
                   st.mask_path.c_str());
    }
  }
  if (!failed && !st.map_path.empty()) {
    std::vector<T> map(std::size_t(in.n * in.d));
    solver.barycentric_map(pot, host_matrix(map.data(), in.n, in.d));
    std::vector<double> out = to_double(map);
    // Back to the original coordinates. Where the points lie farther from the origin than the
    // widest side of their box, float32 would round the map coarser than the solve: float64.
    double offset = 0;
    for (const double c : shift) offset = std::max(offset, std::abs(c));
    for (std::size_t i = 0; i < out.size() && !shift.empty(); ++i)
      out[i] += shift[i % std::size_t(in.d)];
    outputs.push_back({"--output-map",
                       st.map_path,
                       {in.n, in.d},
                       std::move(out),
                       is_float && offset <= box.width});
  }
  if (!failed && !st.gradient_path.empty()) {
    // The gradient w.r.t. the source positions (of S_eps with --debias): translation invariant,
    // so the centred solve's gradient is that of the file's coordinates.
    std::vector<T> grad(std::size_t(in.n * in.d));
    GradientOutput<T> go;
    go.x = host_matrix(grad.data(), in.n, in.d);
    named([&] {
      if (st.debias)
        solver.divergence_gradient(dpot, go);
      else
        solver.gradient(pot, go);
    });
    outputs.push_back({"--output-gradient", st.gradient_path, {in.n, in.d}, to_double(grad),
                       is_float});
  }
  write_outputs(outputs);

  if (st.json) {
    JsonObject o;
    o.add("version", build_info().version)
        .add("demo", st.demo)
        .add("converged", st.debias ? div.converged() : s.converged())
        .add("termination", to_string(s.termination))
        .add("message", s.message)
        .add("dual_cost", s.dual_cost)
        .add("primal_cost", s.primal_cost)
        .add("regularized_cost", s.regularized_cost)
        .add("dual_gap", s.dual_gap)
        .add("divergence", st.debias && !failed ? div.divergence : std::nan(""))
        .add("divergence_raw", st.debias && !failed ? div.divergence_raw : std::nan(""))
        .add("divergence_bound", st.debias && !failed ? div.divergence_bound : std::nan(""))
        .add("marginal_error", s.marginal_error)
        .add("marginal_error_slack", s.marginal_error_slack)
        .add("residual", s.residual)
        .add("certificates", s.certificates)
        .add("plan_mass", s.plan_mass)
        .add("iterations", s.iterations)
        .add("annealing_iterations", s.annealing_iterations)
        .add("epsilon", s.epsilon_reached)
        .add("target_epsilon", s.epsilon)
        .add("resolvable_epsilon", s.resolvable_epsilon)
        .add("initial_epsilon", s.initial_epsilon)
        .add("tolerance", s.tolerance)
        .add("cost_scale", st.cost_scale)
        .add("schedule", to_string(s.schedule))
        .add("solver", s.solver)
        .add("solver_note", s.solver_note)
        .add("multiscale_levels", s.multiscale_levels)
        .add("kept_fraction", s.kept_fraction)
        .add("fine_updates", s.fine_updates)
        .add("mask_rebuilds", s.mask_rebuilds)
        .add("truncation_bound", s.truncation_bound)
        .add("backend", to_string(s.backend))
        .add("backend_note", s.backend_note)
        .add("precision", to_string(s.precision))
        .add("engine", s.engine)
        .add("threads", ctx.threads())
        .add("n", s.n)
        .add("m", s.m)
        .add("d", s.d)
        .add("seconds", seconds);
    std::vector<std::string> nulls;
    if (st.options.multiscale.verify) o.add("verified_error", s.verified_error);
    if (s.unbalanced()) {
      // Strict sides have no penalty: their rho is written as the string "inf".
      for (const auto& [key, r] : {std::pair<const char*, double>{"rho_source", s.rho_a},
                                   {"rho_target", s.rho_b}}) {
        if (std::isfinite(r))
          o.add(key, r);
        else
          o.add_raw(key, json_escape("inf"));
      }
      o.add("source_mass", s.mass_a)
          .add("target_mass", s.mass_b)
          .add("transported_mass", s.plan_mass)
          .add("marginal_kl_source", s.marginal_kl_a)
          .add("marginal_kl_target", s.marginal_kl_b);
    }
    for (const std::string& k : o.null_keys())
      if ((k != "divergence" && k != "divergence_raw" && k != "divergence_bound") || st.debias)
        nulls.push_back(k);  // null: not asked for
    if (st.debias)
      o.add_raw("xx", summary_json(div.xx, "xx", &nulls))
          .add_raw("yy", summary_json(div.yy, "yy", &nulls));
    o.set("message", not_computed_message(s.message, nulls));
    std::string files = "[";
    for (std::size_t i = 0; i < outputs.size(); ++i)
      files += (i ? ", " : "") + json_escape(outputs[i].path);
    o.add_raw("outputs", files + "]");
    std::cout << o.str() << std::endl;
  } else {
    if (st.demo)
      std::cout << "demo problem: two seeded Gaussian mixtures, n = " << in.n << ", m = " << in.m
                << ", d = " << in.d << ", epsilon = " << st.epsilon << "\n";
    std::string report = st.debias ? div.full_report() : s.full_report();
    if (st.debias && failed)  // the divergence of failed solves is no number
      report = "debiased Sinkhorn divergence not computed" + report.substr(report.find('\n'));
    std::cout << replace_non_finite(report);
    for (const OutputFile& f : outputs) std::cout << "wrote " << f.path << "\n";
    std::cout.flush();
  }
  if (failed) {
    const SinkhornSummary& bad = s.termination == TerminationType::kNumericalFailure ? s
                                 : div.xx.termination == TerminationType::kNumericalFailure
                                     ? div.xx
                                     : div.yy;
    std::fprintf(stderr, "kantor solve: error: numerical failure: %s; no output written\n",
                 bad.message.c_str());
    return kExitNumericalFailure;
  }
  return kExitOk;
}

constexpr const char* kUsage =
    "usage: kantor solve --source X --target Y --epsilon E [options]\n"
    "       kantor solve --demo [options]\n\n"
    "Entropic OT between point clouds X (n x d) and Y (m x d), cost c |x - y|^2. Files: .npy\n"
    "(float32/float64, C order) or .csv (comma-separated, optional header line). Without\n"
    "weight files the weights are uniform; with one, the other side is uniform with the same\n"
    "total mass. Every output file is checked before the solve starts (writable, no two\n"
    "outputs and no output and input naming the same file).\n\n"
    "Exit codes: 0 the solve ran (converged or not); 1 runtime failure (CUDA, memory, a failed\n"
    "write to standard output); 2 bad input or usage; 3 numerical failure (NaN/Inf: the report\n"
    "or JSON says what could not be computed, as 'not computed' / null, and no output file is\n"
    "written); 130 interrupted.\n";

}  // namespace

int cmd_solve(const std::vector<std::string>& args) {
  std::string source, target, source_weights, target_weights, schedule = "alternating";
  std::string backend = "auto", precision_name, potentials_prefix, map_path, gradient_path;
  std::string solver_name = "auto", mask_path;
  bool verify = false;
  MultiscaleOptions ms_defaults;
  std::int64_t cell_points = ms_defaults.cell_points;
  double max_density = ms_defaults.max_density;
  double epsilon = 0, cost_scale = 1.0, scaling = kDefaultScaling, tolerance = 0;
  double rho = 0, rho_source = 0, rho_target = 0, reach = 0;
  std::int64_t max_iterations = 10000, check_every = 10;
  int threads = 0;
  bool fixed_eps = false, debias = false, json = false, quiet = false, demo = false;

  po::options_description desc("options", 100, 50);
  // clang-format off
  desc.add_options()
    ("help,h", "print this help and exit")
    ("source", po::value(&source)->value_name("X"), "source points, .npy or .csv, shape (n, d)")
    ("target", po::value(&target)->value_name("Y"), "target points, .npy or .csv, shape (m, d)")
    ("source-weights", po::value(&source_weights)->value_name("A"),
     "source weights (n), >= 0 (default uniform)")
    ("target-weights", po::value(&target_weights)->value_name("B"),
     "target weights (m), >= 0, same total as A unless unbalanced (default uniform)")
    ("epsilon", po::value(&epsilon)->value_name("E"),
     "entropic regularization in cost units, > 0 (required unless --demo; demo: 0.05)")
    ("cost-scale", po::value(&cost_scale)->value_name("C")->default_value(1.0),
     "c in the cost c |x - y|^2, > 0")
    ("rho", po::value(&rho)->value_name("R"),
     "unbalanced OT: relax both marginals to the penalty R KL(P1|a) + R KL(P^T1|b), R > 0 in cost "
     "units (weights then used as given; docs/numerics.md section 9)")
    ("rho-source", po::value(&rho_source)->value_name("R"),
     "relax only the source marginal (semi-unbalanced), or set its own penalty")
    ("rho-target", po::value(&rho_target)->value_name("R"),
     "relax only the target marginal (semi-unbalanced), or set its own penalty")
    ("reach", po::value(&reach)->value_name("R"),
     "GeomLoss's reach (p = 2): both marginals relaxed with rho = 2 c R^2 (GeomLoss's reach^2 "
     "in its cost |x - y|^2 / 2)")
    ("schedule", po::value(&schedule)->value_name("NAME")->default_value("alternating"),
     "alternating | symmetric")
    ("scaling", po::value(&scaling)->value_name("S"),
     "eps-annealing factor per iteration, in (0, 1) (default 0.5)")
    ("fixed-epsilon", po::bool_switch(&fixed_eps), "no annealing: every iteration at E")
    ("solver", po::value(&solver_name)->value_name("S")->default_value("auto"),
     "dense | multiscale | auto (auto: multiscale for squared-Euclidean clouds with d <= 6 and "
     "n m >= 2^30 when annealing, else dense; docs/multiscale.md)")
    ("multiscale-cell", po::value(&cell_points)->value_name("N")->default_value(cell_points),
     "multiscale: points per coarse cell (the coarsening factor per level), >= 2")
    ("multiscale-max-density", po::value(&max_density)->value_name("F"),
     "multiscale: dense fine passes when the screen keeps more than this fraction of the pairs "
     "(default 0.6)")
    ("output-mask", po::value(&mask_path)->value_name("FILE"),
     "multiscale: draw the block mask of the truncated passes to FILE (.svg)")
    ("verify", po::bool_switch(&verify),
     "multiscale: also evaluate the returned plan's marginal error densely over all n m pairs "
     "(float64; JSON verified_error)")
    ("tolerance", po::value(&tolerance)->value_name("T")->default_value(0),
     "stop when the L1 marginal error <= T (0: default of the precision, 1e-9 for fp64)")
    ("max-iterations", po::value(&max_iterations)->value_name("N")->default_value(10000),
     "iteration budget, annealing included")
    ("check-every", po::value(&check_every)->value_name("K")->default_value(10),
     "check the marginal error every K iterations")
    ("debias", po::bool_switch(&debias),
     "also compute the debiased Sinkhorn divergence OT(a,b) - OT(a,a)/2 - OT(b,b)/2")
    ("backend", po::value(&backend)->value_name("B")->default_value("auto"),
     "cpu | cuda | auto (auto: cuda when compiled in and a GPU is visible, else cpu)")
    ("threads", po::value(&threads)->value_name("N")->default_value(0),
     "CPU threads (0: all hardware threads)")
    ("precision", po::value(&precision_name)->value_name("P"),
     "fp64 | fp32 | tf32 | bf16 (default fp64 on cpu, fp32 on cuda; tf32/bf16: cuda only)")
    ("output-potentials", po::value(&potentials_prefix)->value_name("PREFIX"),
     "write f and g to PREFIX_f.npy, PREFIX_g.npy (PREFIX ending in .csv/.npy picks the format)")
    ("output-gradient", po::value(&gradient_path)->value_name("FILE"),
     "write the gradient of OT_eps (of the divergence S_eps with --debias) w.r.t. the source "
     "positions (n x d) to FILE (.npy or .csv), at the returned potentials (envelope theorem)")
    ("output-map", po::value(&map_path)->value_name("FILE"),
     "write the barycentric map T(x_i) (n x d) to FILE (.npy or .csv; float32 .npy for fp32 "
     "solves unless the points lie farther from the origin than their spread)")
    ("json", po::bool_switch(&json), "print one JSON object instead of the report")
    ("quiet", po::bool_switch(&quiet), "no progress line on stderr")
    ("demo", po::bool_switch(&demo),
     "solve a built-in seeded problem: Gaussian mixtures, n = 2000, m = 3000, d = 3");
  // clang-format on

  po::variables_map vm = parse_command_line(args, desc);
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << desc << std::endl;
    return kExitOk;
  }
  po::notify(vm);

  // Combinations, all before any file is read. Ranges are the library's checks: the options'
  // (SinkhornOptions::is_valid) below, before any file is read too; --epsilon and --cost-scale
  // with the problem (kantor::validate, check_and_finish), --threads by the Context.
  for (const char* opt :
       {"source", "target", "source-weights", "target-weights", "output-map", "output-potentials",
        "output-gradient", "output-mask"})
    if (vm.count(opt) && vm[opt].as<std::string>().empty())
      throw InvalidArgument(std::string("--") + opt + ": empty file name");
  if (demo) {
    for (const char* opt : {"source", "target", "source-weights", "target-weights"})
      if (vm.count(opt))
        throw InvalidArgument(std::string("--demo solves a built-in problem; --") + opt +
                              " is not allowed with it");
  } else {
    if (!vm.count("source") || !vm.count("target"))
      throw InvalidArgument(std::string("missing ") +
                            (!vm.count("source") ? "--source X" : "--target Y") +
                            " (expected --source X --target Y, or --demo)");
    if (!vm.count("epsilon"))
      throw InvalidArgument(
          "missing --epsilon E (the entropic regularization, > 0, in cost "
          "units)");
  }
  if (vm.count("scaling") && fixed_eps)
    throw InvalidArgument(
        "--scaling and --fixed-epsilon are mutually exclusive (--scaling sets "
        "the annealing factor, --fixed-epsilon turns annealing off)");
  if (vm.count("reach") && (vm.count("rho") || vm.count("rho-source") || vm.count("rho-target")))
    throw InvalidArgument("--reach and --rho / --rho-source / --rho-target are mutually exclusive "
                          "(--reach R is --rho 2 c R^2)");
  if (vm.count("rho") && (vm.count("rho-source") || vm.count("rho-target")))
    throw InvalidArgument("--rho sets both marginal penalties; give either --rho or --rho-source "
                          "/ --rho-target");
  for (const auto& [name, value] : {std::pair<const char*, double>{"rho", rho},
                                    {"rho-source", rho_source},
                                    {"rho-target", rho_target},
                                    {"reach", reach}})
    if (vm.count(name) && !(value > 0 && std::isfinite(value)))
      throw InvalidArgument(std::string("--") + name + " must be finite and > 0, got " +
                            format_number(value) + " (leave it out for a strict marginal)");
  Settings st;
  st.epsilon = vm.count("epsilon") ? epsilon : kDemoEpsilon;
  if (vm.count("rho")) st.rho_a = st.rho_b = rho;
  if (vm.count("rho-source")) st.rho_a = rho_source;
  if (vm.count("rho-target")) st.rho_b = rho_target;
  if (vm.count("reach")) st.rho_a = st.rho_b = 2 * cost_scale * reach * reach;
  st.options.schedule = parse_schedule(schedule, "--schedule");
  const Backend backend_choice = parse_backend(backend, "--backend");
  std::optional<Precision> precision;
  if (vm.count("precision")) precision = parse_precision(precision_name, "--precision");
  st.options.anneal = !fixed_eps;
  st.options.solver = parse_solver_kind(solver_name, "--solver");
  st.options.multiscale.verify = verify;
  st.options.multiscale.keep_mask = vm.count("output-mask") > 0;
  st.mask_path = mask_path;
  if (!mask_path.empty() && io::extension(mask_path) != ".svg")
    throw InvalidArgument("--output-mask '" + mask_path +
                          "': the picture is SVG: use a .svg name");
  st.options.multiscale.cell_points = cell_points;
  st.options.multiscale.max_density = max_density;
  st.options.scaling = scaling;
  st.options.tolerance = tolerance;
  st.options.max_iterations = max_iterations;
  st.options.check_every = check_every;
  {
    std::string why;
    if (!st.options.is_valid(&why))
      throw_invalid_options(why, "SinkhornOptions", kSinkhornOptionNames);
  }
  st.cost_scale = cost_scale;
  st.debias = debias;
  st.json = json;
  st.quiet = quiet;
  st.demo = demo;
  st.potentials_prefix = potentials_prefix;
  st.map_path = map_path;
  st.gradient_path = gradient_path;
  {
    std::vector<std::pair<std::string, std::string>> outputs, inputs;
    if (vm.count("output-potentials")) {
      const PotentialPaths paths = potential_paths(potentials_prefix);
      outputs.emplace_back("--output-potentials", paths.f);
      outputs.emplace_back("--output-potentials", paths.g);
    }
    if (vm.count("output-map")) outputs.emplace_back("--output-map", map_path);
    if (vm.count("output-gradient")) outputs.emplace_back("--output-gradient", gradient_path);
    for (const char* opt : {"source", "target", "source-weights", "target-weights"})
      if (vm.count(opt)) inputs.emplace_back(std::string("--") + opt, vm[opt].as<std::string>());
    check_outputs(outputs, inputs);
  }

  Input in = demo ? demo_input() : load_input(source, target, source_weights, target_weights);
  check_and_finish(&in, st.epsilon, st.cost_scale, st.rho_a, st.rho_b);

  ContextOptions co;
  co.backend = backend_choice;
  co.threads = threads;  // ContextOptions checks the range (a typo must not start 10^5 threads)
  co.cancel = &g_cancel;
  const Context ctx = make_context(co);
  const Precision prec =
      precision.value_or(ctx.backend() == Backend::kCuda ? Precision::kFp32 : Precision::kFp64);
  if (ctx.backend() == Backend::kCpu && (prec == Precision::kTf32 || prec == Precision::kBf16))
    throw InvalidArgument("--precision " + to_string(prec) +
                          " uses tensor cores and needs --backend cuda (the cpu engine runs "
                          "fp32 or fp64)");
  if (prec == Precision::kFp64) return run_solve<double>(ctx, st, in, prec);
  return run_solve<float>(ctx, st, in, prec);
}

}  // namespace kantor::cli
