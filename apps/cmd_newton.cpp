// kantor newton: shape matching by minimizing the debiased Sinkhorn divergence S_eps(x, y) over
// the source positions x (a gradient flow run to a minimum), with Newton-CG (default), L-BFGS or
// gradient descent (kantor/newton.hpp over kantor/ot_objectives.hpp).
//
//   kantor newton --source x.npy --target y.npy --epsilon 0.01 --output-positions x1.npy \
//                 --output-plot clouds.svg --json
//   kantor newton --demo --method gd
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "apps/progress.hpp"
#include "apps/solve_input.hpp"
#include "apps/solve_output.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"
#include "kantor/io.hpp"
#include "kantor/newton.hpp"
#include "kantor/ot_objectives.hpp"

namespace kantor::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kNewtonDemoEpsilon = 0.01;

/// The --demo problem: a noisy ring of 200 points (the source) and 300 points uniform in a
/// rectangle beside it (the target), seeded, in 2-D.
Input newton_demo_input() {
  Input in;
  in.n = 200;
  in.m = 300;
  in.d = in.dy = 2;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::int64_t i = 0; i < in.n; ++i) {
    const double t = 2 * M_PI * u(rng), r = 0.5 + 0.05 * u(rng);
    in.x.push_back(r * std::cos(t));
    in.x.push_back(r * std::sin(t));
  }
  for (std::int64_t j = 0; j < in.m; ++j) {
    in.y.push_back(0.3 + 0.6 * (2 * u(rng) - 1));
    in.y.push_back(0.3 * (2 * u(rng) - 1));
  }
  in.x_name = "--demo source";
  in.y_name = "--demo target";  // no weight names: uniform weights
  return in;
}

/// The SVG picture: target (grey), source before (blue) and after (red), first two coordinates
/// (a line of points on the first one when d = 1), equal axes.
std::string clouds_svg(const Input& in, const std::vector<double>& after,
                       const std::string& title) {
  const std::int64_t d = in.d;
  auto coord = [&](const std::vector<double>& v, std::int64_t i, int k) {
    return k < d ? v[std::size_t(i * d + k)] : 0.0;
  };
  double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
  auto extend = [&](const std::vector<double>& v, std::int64_t rows) {
    for (std::int64_t i = 0; i < rows; ++i)
      for (int k = 0; k < 2; ++k) {
        lo[k] = std::min(lo[k], coord(v, i, k));
        hi[k] = std::max(hi[k], coord(v, i, k));
      }
  };
  extend(in.x, in.n);
  extend(in.y, in.m);
  extend(after, in.n);
  const double span = std::max({hi[0] - lo[0], hi[1] - lo[1], 1e-12});
  const double size = 600, margin = 30, scale = (size - 2 * margin) / span;
  std::ostringstream os;
  os.precision(6);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << size << "\" height=\"" << size + 40
     << "\" viewBox=\"0 0 " << size << " " << size + 40 << "\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << margin << "\" y=\"20\" font-family=\"sans-serif\" font-size=\"13\">"
     << title << "</text>\n";
  auto dots = [&](const std::vector<double>& v, std::int64_t rows, const char* color, double r) {
    os << "<g fill=\"" << color << "\" fill-opacity=\"0.75\">\n";
    for (std::int64_t i = 0; i < rows; ++i) {
      const double px = margin + (coord(v, i, 0) - lo[0]) * scale;
      const double py = 40 + size - margin - (coord(v, i, 1) - lo[1]) * scale;
      os << "<circle cx=\"" << px << "\" cy=\"" << py << "\" r=\"" << r << "\"/>\n";
    }
    os << "</g>\n";
  };
  dots(in.y, in.m, "#999999", 2.5);
  dots(in.x, in.n, "#1f5fbf", 2.5);
  dots(after, in.n, "#d62728", 2.5);
  os << "<text x=\"" << margin << "\" y=\"" << size + 30
     << "\" font-family=\"sans-serif\" font-size=\"12\">grey: target, blue: source before, "
        "red: source after</text>\n</svg>\n";
  return os.str();
}

constexpr const char* kUsage =
    "usage: kantor newton --source X --target Y --epsilon E [options]\n"
    "       kantor newton --demo [options]\n\n"
    "Moves the source cloud X (n x d) toward the target Y (m x d) by minimizing the debiased\n"
    "Sinkhorn divergence S_eps(x, y) over the source positions (cost c |x - y|^2; --plain-ot:\n"
    "OT_eps instead), with Newton-CG (Steihaug trust region over streaming Hessian-vector\n"
    "products), L-BFGS or gradient descent. Stops at the gradient tolerance, a relative\n"
    "objective decrease below the function tolerance, or the iteration budget.\n\n"
    "Exit codes: 0 ran (converged or not); 1 runtime failure; 2 bad input or usage; 3 numerical\n"
    "failure (no output written); 130 interrupted.\n";

}  // namespace

int cmd_newton(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  std::string source, target, source_weights, target_weights, method_name = "newton-cg";
  std::string backend = "auto", precision_name, positions_path, plot_path;
  double epsilon = 0, cost_scale = 1.0, gradient_tolerance = 1e-7, function_tolerance = 1e-10;
  double sinkhorn_tolerance = 0;
  std::int64_t max_iterations = 100;
  int threads = 0;
  bool json = false, quiet = false, demo = false, plain = false;
  po::options_description desc("options", 100, 50);
  desc.add_options()("help,h", "print this help and exit")(
      "source", po::value(&source)->value_name("FILE"), "source points X (n x d), moved")(
      "target", po::value(&target)->value_name("FILE"), "target points Y (m x d), fixed")(
      "source-weights", po::value(&source_weights)->value_name("FILE"), "weights a (n)")(
      "target-weights", po::value(&target_weights)->value_name("FILE"), "weights b (m)")(
      "epsilon", po::value(&epsilon), "entropic regularization eps (> 0; demo: 0.01)")(
      "cost-scale", po::value(&cost_scale), "c in c |x - y|^2 (default 1)")(
      "method", po::value(&method_name),
      "newton-cg | lbfgs | gd (gradient descent) (default newton-cg)")(
      "max-iterations", po::value(&max_iterations), "outer iterations at most (default 100)")(
      "gradient-tolerance", po::value(&gradient_tolerance),
      "stop when |grad|_inf <= this * max(1, |grad_0|_inf) (default 1e-7)")(
      "function-tolerance", po::value(&function_tolerance),
      "stop when a step changes the objective by <= this * |objective| (default 1e-10)")(
      "sinkhorn-tolerance", po::value(&sinkhorn_tolerance),
      "certified marginal error of every inner solve (default: the precision's)")(
      "plain-ot", po::bool_switch(&plain), "minimize OT_eps(x, y) instead of S_eps(x, y)")(
      "backend", po::value(&backend), "cpu | cuda | auto (default auto)")(
      "precision", po::value(&precision_name),
      "fp64 | fp32 | tf32 | bf16 (default fp64 on cpu, fp32 on cuda)")(
      "threads", po::value(&threads), "CPU threads (default: all cores)")(
      "output-positions", po::value(&positions_path)->value_name("FILE"),
      "write the final source positions (n x d) to FILE (.npy or .csv)")(
      "output-plot", po::value(&plot_path)->value_name("FILE"),
      "write an SVG picture of the clouds before and after to FILE (.svg)")(
      "demo", po::bool_switch(&demo), "a built-in 2-D problem: a ring moved onto a rectangle")(
      "json", po::bool_switch(&json), "print one JSON object")("quiet", po::bool_switch(&quiet),
                                                               "no progress line");
  po::variables_map vm = parse_command_line(args, desc);
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << desc << std::endl;
    return kExitOk;
  }
  po::notify(vm);
  if (demo && (vm.count("source") || vm.count("target")))
    throw InvalidArgument("--demo replaces --source and --target: give one or the other");
  if (!demo && (!vm.count("source") || !vm.count("target")))
    throw InvalidArgument("--source and --target are required (or --demo)");
  if (!demo && !vm.count("epsilon")) throw InvalidArgument("--epsilon is required");
  NewtonOptions options;
  if (method_name == "newton-cg")
    options.method = MinimizerMethod::kNewtonCG;
  else if (method_name == "lbfgs")
    options.method = MinimizerMethod::kLbfgs;
  else if (method_name == "gd" || method_name == "gradient-descent")
    options.method = MinimizerMethod::kGradientDescent;
  else
    throw InvalidArgument("--method: unknown value '" + method_name +
                          "' (expected newton-cg, lbfgs or gd)");
  options.max_iterations = max_iterations;
  options.gradient_tolerance = gradient_tolerance;
  options.function_tolerance = function_tolerance;
  {
    // The library's checks, named by this command's options.
    std::string why;
    if (!options.is_valid(&why))
      throw_invalid_options(why, "NewtonOptions",
                            {{"max_iterations", "--max-iterations"},
                             {"gradient_tolerance", "--gradient-tolerance"},
                             {"function_tolerance", "--function-tolerance"}});
    SinkhornOptions so;
    so.tolerance = sinkhorn_tolerance;
    if (!so.is_valid(&why))
      throw_invalid_options(why, "SinkhornOptions", {{"tolerance", "--sinkhorn-tolerance"}});
  }
  if (!plot_path.empty() && io::extension(plot_path) != ".svg")
    throw InvalidArgument("--output-plot '" + plot_path + "': the picture is SVG: use a .svg name");
  {
    std::vector<std::pair<std::string, std::string>> outputs, inputs;
    if (vm.count("output-positions")) outputs.emplace_back("--output-positions", positions_path);
    for (const char* opt : {"source", "target", "source-weights", "target-weights"})
      if (vm.count(opt)) inputs.emplace_back(std::string("--") + opt, vm[opt].as<std::string>());
    check_outputs(outputs, inputs);
    if (!plot_path.empty()) {
      for (const auto& in_file : inputs)
        if (io::same_file(in_file.second, plot_path))
          throw InvalidArgument("--output-plot '" + plot_path + "' names the input " +
                                in_file.first);
      if (!positions_path.empty() && io::same_file(positions_path, plot_path))
        throw InvalidArgument("--output-plot and --output-positions name the same file");
    }
  }

  Input in =
      demo ? newton_demo_input() : load_input(source, target, source_weights, target_weights);
  const double eps = vm.count("epsilon") ? epsilon : kNewtonDemoEpsilon;
  check_and_finish(&in, eps, cost_scale);

  ContextOptions co;
  co.backend = parse_backend(backend, "--backend");
  co.threads = threads;
  co.cancel = &g_cancel;
  const Context ctx = make_context(co);
  const Precision prec =
      precision_name.empty()
          ? (ctx.backend() == Backend::kCuda ? Precision::kFp32 : Precision::kFp64)
          : parse_precision(precision_name, "--precision");
  if (ctx.backend() == Backend::kCpu && (prec == Precision::kTf32 || prec == Precision::kBf16))
    throw InvalidArgument("--precision " + to_string(prec) + " needs --backend cuda");

  const std::int64_t N = in.n * in.d;
  std::vector<double> x = in.x;
  NewtonSummary summary;
  std::int64_t sinkhorn_iterations = 0, solves = 0;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    // The target and weights in the solve's type; the objective owns the moving positions.
    const std::vector<T> xt = convert<T>(in.x, in.x_name, "coordinate", in.d, prec);
    const std::vector<T> yt = convert<T>(in.y, in.y_name, "coordinate", in.d, prec);
    const std::vector<T> at = convert<T>(in.a, in.a_name, "weight", 1, prec);
    const std::vector<T> bt = convert<T>(in.b, in.b_name, "weight", 1, prec);
    Problem<T> p;
    p.cost = SqEuclidean<T>{host_matrix<const T>(xt.data(), in.n, in.d),
                            host_matrix<const T>(yt.data(), in.m, in.d), cost_scale};
    if (!at.empty()) p.a = host_vector<const T>(at.data(), in.n);
    if (!bt.empty()) p.b = host_vector<const T>(bt.data(), in.m);
    p.epsilon = eps;
    if (std::is_same<T, float>::value)
      p.reference_y = host_matrix<const double>(in.y.data(), in.m, in.d);
    SinkhornOptions so;
    so.precision = prec;
    so.tolerance = sinkhorn_tolerance;
    try {
      DivergenceObjective<T> objective(ctx, p, so, HvpOptions{}, !plain);
      summary = minimize(objective, options, x.data());
      sinkhorn_iterations = objective.sinkhorn_iterations();
      solves = objective.solves();
    } catch (const InvalidArgument& e) {
      rethrow_problem_error(e, in);
    }
  };
  const bool progress = !quiet && ::isatty(STDERR_FILENO);
  if (progress)
    options.callbacks.push_back([](const NewtonIterationRecord& r) {
      std::fprintf(stderr,
                   "\rnewton: iteration %lld  objective %.10g  |grad|_inf %.3e  HVPs %lld   ",
                   static_cast<long long>(r.iteration), r.objective, r.gradient_norm,
                   static_cast<long long>(r.hvp_count));
      std::fflush(stderr);
      return CallbackResult::kContinue;
    });
  options.callbacks.push_back([](const NewtonIterationRecord&) {
    return g_interrupted ? CallbackResult::kAbort : CallbackResult::kContinue;
  });
  const auto t0 = Clock::now();
  {
    InterruptGuard guard;
    if (prec == Precision::kFp64)
      run(double{});
    else
      run(float{});
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (progress) std::fprintf(stderr, "\n");
  if (g_interrupted) {
    std::fprintf(stderr, "kantor newton: interrupted; no output written\n");
    return kExitInterrupted;
  }
  bool failed = summary.termination == MinimizerTermination::kNumericalFailure ||
                !std::isfinite(summary.final_objective);
  for (std::int64_t i = 0; i < N && !failed; ++i)
    if (!std::isfinite(x[std::size_t(i)])) failed = true;  // never written as a result
  if (!failed) {
    std::vector<OutputFile> outputs;
    if (!positions_path.empty())
      outputs.push_back(
          {"--output-positions", positions_path, {in.n, in.d}, x, prec != Precision::kFp64});
    write_outputs(outputs);
    if (!plot_path.empty()) {
      std::ostringstream title;
      title << (plain ? "OT_eps" : "S_eps") << " " << to_string(options.method) << ": "
            << summary.initial_objective << " -> " << summary.final_objective << " in "
            << summary.outer_iterations << " iterations (eps " << eps << ")";
      io::write_text_atomic(plot_path, clouds_svg(in, x, title.str()));
    }
  }

  if (json) {
    JsonObject o;
    o.add("version", build_info().version)
        .add("demo", demo)
        .add("objective", plain ? "ot" : "divergence")
        .add("method", to_string(options.method))
        .add("n", in.n)
        .add("m", in.m)
        .add("d", in.d)
        .add("epsilon", eps)
        .add("backend", to_string(ctx.backend()))
        .add("precision", to_string(prec))
        .add("converged", summary.converged())
        .add("termination", to_string(summary.termination))
        .add("message", summary.message)
        .add("initial_objective", summary.initial_objective)
        .add("final_objective", summary.final_objective)
        .add("initial_gradient_norm", summary.initial_gradient_norm)
        .add("gradient_norm", summary.gradient_norm)
        .add("outer_iterations", summary.outer_iterations)
        .add("cg_iterations", summary.cg_iterations)
        .add("hvp_count", summary.hvp_count)
        .add("gradient_count", summary.gradient_count)
        .add("evaluation_count", summary.evaluation_count)
        .add("sinkhorn_solves", solves)
        .add("sinkhorn_iterations", sinkhorn_iterations)
        .add("seconds", seconds);
    std::cout << o.str() << std::endl;
  } else {
    std::cout << replace_non_finite(summary.full_report()) << std::endl;
  }
  if (failed) {
    std::fprintf(stderr, "kantor newton: error: numerical failure: %s; no output written\n",
                 summary.message.c_str());
    return kExitNumericalFailure;
  }
  return kExitOk;
}

}  // namespace kantor::cli
