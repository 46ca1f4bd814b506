// `kantor newton` and `kantor solve --output-gradient` as a user runs them: the built binary
// (KANTOR_CLI) on small files in a temporary directory. The newton demo's JSON, positions file
// and SVG; bad input exits 2 with one line naming the option or file and writes nothing; the
// gradient file matches the library's SinkhornSolver::gradient (divergence_gradient with
// --debias) on the same problem.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cli/cli_fixture.hpp"
#include "gtest/gtest.h"
#include "kantor/context.hpp"
#include "kantor/derivatives.hpp"
#include "kantor/io.hpp"
#include "kantor/sinkhorn.hpp"

namespace {

namespace io = kantor::io;
using namespace kantor::test::cli;

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

Cloud gaussian_points(std::mt19937_64& rng, std::int64_t n, std::int64_t d, double mean,
                      double sigma) {
  std::normal_distribution<double> nd(mean, sigma);
  Cloud c{n, d, std::vector<double>(std::size_t(n * d))};
  for (double& v : c.p) v = nd(rng);
  return c;
}

class CliNewtonTest : public CliFixture {
 protected:
  CliNewtonTest() : CliFixture("kantor_test_cli_newton_") {}
};

// Pin the engine: the default (auto) picks CUDA and fp32 where a GPU is visible.
const std::string kNewtonCpu = "newton --backend cpu --quiet";

// ---- kantor newton --------------------------------------------------------------------------

TEST_F(CliNewtonTest, NewtonDemoJsonPositionsAndPlot) {
  const std::string positions = out_dir_ + "/x1.npy", plot = out_dir_ + "/clouds.svg";
  // Three outer iterations of the demo (200 points onto 300, eps 0.01): seconds.
  const Json j = run_json(kNewtonCpu + " --demo --max-iterations 3 --output-positions " +
                          positions + " --output-plot " + plot);
  for (const char* k : {"version",
                        "demo",
                        "objective",
                        "method",
                        "n",
                        "m",
                        "d",
                        "epsilon",
                        "backend",
                        "precision",
                        "converged",
                        "termination",
                        "message",
                        "initial_objective",
                        "final_objective",
                        "initial_gradient_norm",
                        "gradient_norm",
                        "outer_iterations",
                        "cg_iterations",
                        "hvp_count",
                        "gradient_count",
                        "evaluation_count",
                        "sinkhorn_solves",
                        "sinkhorn_iterations",
                        "seconds"})
    EXPECT_TRUE(j.has(k)) << k;
  EXPECT_TRUE(j["demo"].b);
  EXPECT_EQ(j["objective"].str, "divergence");
  EXPECT_EQ(j["method"].str, "newton-cg");
  EXPECT_EQ(j["n"].num, 200);
  EXPECT_EQ(j["m"].num, 300);
  EXPECT_EQ(j["d"].num, 2);
  EXPECT_EQ(j["epsilon"].num, 0.01);
  EXPECT_EQ(j["backend"].str, "cpu");
  EXPECT_EQ(j["precision"].str, "fp64");
  EXPECT_EQ(j["converged"].kind, Json::kBool);
  EXPECT_FALSE(j["termination"].str.empty());
  EXPECT_LE(j["outer_iterations"].num, 3);
  EXPECT_GE(j["outer_iterations"].num, 1);
  EXPECT_GT(j["initial_objective"].num, 0);
  EXPECT_LT(j["final_objective"].num, j["initial_objective"].num) << "three Newton steps descend";
  EXPECT_GE(j["final_objective"].num, 0) << "S_eps >= 0";
  EXPECT_GT(j["hvp_count"].num, 0);
  EXPECT_EQ(j["hvp_count"].num, j["cg_iterations"].num) << "one HVP per CG iteration";
  EXPECT_GE(j["gradient_count"].num, 1);
  EXPECT_GE(j["evaluation_count"].num, j["gradient_count"].num);
  EXPECT_GE(j["sinkhorn_solves"].num, 1);
  EXPECT_GT(j["sinkhorn_iterations"].num, 0);
  EXPECT_GT(j["seconds"].num, 0);

  const io::Array x = io::read_array(positions);
  ASSERT_EQ(x.shape, (std::vector<std::int64_t>{200, 2}));
  EXPECT_EQ(x.dtype, "float64");
  for (double v : x.data) EXPECT_TRUE(std::isfinite(v));

  const std::string svg = read_text(plot);
  ASSERT_FALSE(svg.empty()) << "no SVG written";
  EXPECT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 80);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count_of(svg, "<circle"), 300u + 200u + 200u) << "target, source before and after";
  EXPECT_NE(svg.find("target"), std::string::npos) << "a legend";
  for (const std::string& name : list_dir(out_dir_))
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << "temporary left behind: " << name;

  // The same run is deterministic.
  const Json k = run_json(kNewtonCpu + " --demo --max-iterations 3");
  EXPECT_EQ(k["final_objective"].num, j["final_objective"].num);
  EXPECT_EQ(k["hvp_count"].num, j["hvp_count"].num);
}

// float32 arithmetic (the default on CUDA): the objective solves in float32 with the
// certificate on the float64 coordinates.
TEST_F(CliNewtonTest, NewtonFp32Runs) {
  const Json j = run_json(kNewtonCpu + " --demo --precision fp32 --max-iterations 2");
  EXPECT_EQ(j["precision"].str, "fp32");
  EXPECT_LT(j["final_objective"].num, j["initial_objective"].num);
}

TEST_F(CliNewtonTest, NewtonMethodsOnFilesMoveTheSourceOntoTheTarget) {
  // 12 source points onto 12 target points (a shifted copy plus noise): S_eps drops to ~0 and
  // the positions file holds points near the target's.
  std::mt19937_64 rng(3);
  const Cloud x = gaussian_points(rng, 12, 2, 0.0, 0.3);
  Cloud y = gaussian_points(rng, 12, 2, 0.0, 0.3);
  for (std::int64_t i = 0; i < 12; ++i) y.p[std::size_t(2 * i)] += 1.0;
  const std::string files =
      " --source " + save("x.npy", x) + " --target " + save("y.csv", y) + " --epsilon 0.05";
  for (const char* method : {"newton-cg", "lbfgs", "gd"}) {
    SCOPED_TRACE(method);
    const std::string out = out_dir_ + "/" + method + ".csv";
    const Json j = run_json(kNewtonCpu + files + " --method " + method +
                            " --max-iterations 400 --output-positions " + out);
    EXPECT_EQ(j["method"].str, std::string(method) == "gd" ? "gradient-descent" : method);
    EXPECT_FALSE(j["demo"].b);
    EXPECT_TRUE(j["converged"].b) << j["termination"].str << ": " << j["message"].str;
    EXPECT_LT(j["final_objective"].num, 1e-3 * j["initial_objective"].num);
    if (std::string(method) == "newton-cg")
      EXPECT_GT(j["hvp_count"].num, 0);
    else
      EXPECT_EQ(j["hvp_count"].num, 0);
    const io::Array p = io::read_array(out);
    ASSERT_EQ(p.shape, (std::vector<std::int64_t>{12, 2}));
    double mean_x = 0;
    for (std::int64_t i = 0; i < 12; ++i) mean_x += p.data[std::size_t(2 * i)] / 12;
    double want = 0;
    for (std::int64_t i = 0; i < 12; ++i) want += y.p[std::size_t(2 * i)] / 12;
    EXPECT_NEAR(mean_x, want, 0.02) << "the cloud moved onto the target";
  }
  // --plain-ot minimizes OT_eps: the objective says so.
  const Json j = run_json(kNewtonCpu + files + " --plain-ot --max-iterations 5");
  EXPECT_EQ(j["objective"].str, "ot");
}

/// True when `text` contains one of the '|'-separated alternatives of `parts` (an expected part of
/// a BadCase here may be "a|b": a or b).
bool contains_any(const std::string& text, const std::string& parts) {
  std::size_t start = 0;
  for (;;) {
    const std::size_t bar = parts.find('|', start);
    if (text.find(parts.substr(start, bar - start)) != std::string::npos) return true;
    if (bar == std::string::npos) return false;
    start = bar + 1;
  }
}

TEST_F(CliNewtonTest, NewtonBadInputExitsTwoNamingTheOptionOrFile) {
  std::mt19937_64 rng(5);
  const std::string x = save("x.npy", gaussian_points(rng, 6, 2, 0.0, 1.0));
  const std::string y = save("y.npy", gaussian_points(rng, 7, 2, 0.5, 1.0));
  const std::string y3 = save("y3.npy", gaussian_points(rng, 7, 3, 0.5, 1.0));
  const std::string nan_csv = save_text("nan.csv", "1,2\n3,4\n5,nan\n");
  const std::string inf_csv = save_text("inf.csv", "1,2\ninf,4\n");
  const std::string xy = " --source " + x + " --target " + y;
  const std::string png = out_dir_ + "/x.png";
  const std::vector<BadCase> cases = {
      {xy, {"--epsilon"}},
      {xy + " --epsilon 0.1 --method nonsense", {"--method", "'nonsense'"}},
      {xy + " --epsilon 0.1 --output-plot " + png, {"--output-plot", "x.png", "SVG"}},
      {" --source " + nan_csv + " --target " + y + " --epsilon 0.1",
       {"--source '" + nan_csv + "'", "non-finite coordinate"}},
      {" --source " + x + " --target " + inf_csv + " --epsilon 0.1",
       {"--target '" + inf_csv + "'", "non-finite coordinate"}},
      {" --source " + x + " --target " + y3 + " --epsilon 0.1",
       {"--source '" + x + "' and --target '" + y3 + "'", "dimension mismatch"}},
      {" --source " + path("missing.npy") + " --target " + y + " --epsilon 0.1",
       {"--source", "missing.npy"}},
      {" --target " + y + " --epsilon 0.1", {"--source"}},
      {" --demo --source " + x, {"--demo"}},
      {xy + " --epsilon 0", {"--epsilon", "epsilon"}},
      {xy + " --epsilon 0.1 --max-iterations=-1", {"--max-iterations|max_iterations", "-1"}},
      {xy + " --epsilon 0.1 --gradient-tolerance=-1",
       {"--gradient-tolerance|gradient_tolerance", "-1"}},
      {xy + " --epsilon 0.1 --backend gpu", {"--backend", "'gpu'"}},
      {xy + " --epsilon 0.1 --backend cpu --precision tf32", {"--precision tf32"}},
      {xy + " --epsilon 0.1 --output-positions " + path("no/dir/x1.npy"),
       {"--output-positions", "no/dir/x1.npy"}},
      {xy + " --epsilon 0.1 --output-positions " + x, {"--output-positions"}},
      {xy + " --epsilon 0.1 --bogus", {"'--bogus'"}},
  };
  for (const BadCase& c : cases) {
    const bool own_output = c.args.find("--output") != std::string::npos;
    const std::string outputs = own_output ? "" : " --output-positions " + out_dir_ + "/x1.npy";
    const bool own_backend = c.args.find("--backend") != std::string::npos;
    const Result r = run((own_backend ? "newton --quiet" : kNewtonCpu) + c.args + outputs);
    EXPECT_EQ(r.code, 2) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_EQ(r.err.rfind("kantor newton: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    for (const std::string& e : c.expected)
      EXPECT_TRUE(contains_any(r.err, e)) << "expected '" << e << "' in: " << r.err;
    EXPECT_TRUE(list_dir(out_dir_).empty()) << c.args << " left output files";
  }
  // The input file is untouched by the refused --output-positions naming it.
  EXPECT_EQ(io::read_array(x).shape, (std::vector<std::int64_t>{6, 2}));
  // --help works.
  const Result h = run("newton --help");
  EXPECT_EQ(h.code, 0);
  for (const char* opt : {"--source", "--target", "--epsilon", "--method", "--output-positions",
                          "--output-plot", "--demo", "--plain-ot"})
    EXPECT_NE(h.out.find(opt), std::string::npos) << opt;
}

// ---- kantor solve --output-gradient -------------------------------------------------------

/// The library's gradient of OT_eps (or S_eps) w.r.t. x on the same float64 problem, solved to
/// `tolerance`.
std::vector<double> library_gradient(const Cloud& x, const Cloud& y, const std::vector<double>& a,
                                     double eps, bool debias, double tolerance) {
  const kantor::Context ctx(kantor::ContextOptions{kantor::Backend::kCpu, 2});
  kantor::Problem<double> p;
  p.cost =
      kantor::SqEuclidean<double>{kantor::host_matrix<const double>(x.p.data(), x.n, x.d),
                                  kantor::host_matrix<const double>(y.p.data(), y.n, y.d), 1.0};
  // The CLI spreads the source's total mass uniformly over the target when only a is given.
  std::vector<double> b;
  if (!a.empty()) {
    double total = 0;
    for (double v : a) total += v;
    b.assign(std::size_t(y.n), total / double(y.n));
    p.a = kantor::host_vector<const double>(a.data(), x.n);
    p.b = kantor::host_vector<const double>(b.data(), y.n);
  }
  p.epsilon = eps;
  kantor::SinkhornSolver<double> solver(ctx, p);
  kantor::SinkhornOptions o;
  o.tolerance = tolerance;
  std::vector<double> g(std::size_t(x.n * x.d));
  kantor::GradientOutput<double> out;
  out.x = kantor::host_matrix(g.data(), x.n, x.d);
  if (debias) {
    kantor::DivergencePotentials<double> pot;
    const kantor::DivergenceSummary s = solver.solve_divergence(o, &pot);
    EXPECT_TRUE(s.converged()) << s.full_report();
    solver.divergence_gradient(pot, out);
  } else {
    kantor::Potentials<double> pot;
    const kantor::SinkhornSummary s = solver.solve(o, &pot);
    EXPECT_TRUE(s.converged()) << s.full_report();
    solver.gradient(pot, out);
  }
  return g;
}

TEST_F(CliNewtonTest, SolveOutputGradientMatchesTheLibrary) {
  std::mt19937_64 rng(9);
  const Cloud x = gaussian_points(rng, 15, 3, 0.0, 1.0);
  const Cloud y = gaussian_points(rng, 11, 3, 0.5, 0.8);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  std::vector<double> a(15);
  for (double& v : a) v = u(rng);
  const double eps = 0.2, tol = 1e-12;
  const std::string files = " --source " + save("x.npy", x) + " --target " + save("y.npy", y) +
                            " --epsilon 0.2 --tolerance 1e-12";
  struct Case {
    std::string extra, file;
    bool debias, weights;
  };
  for (const Case& c :
       {Case{"", "g.npy", false, false}, Case{" --debias", "gs.csv", true, false},
        Case{" --source-weights " + save("a.npy", a), "ga.npy", false, true},
        Case{" --debias --source-weights " + save("a.csv", a), "gsa.npy", true, true}}) {
    SCOPED_TRACE(c.extra);
    const std::string out = out_dir_ + "/" + c.file;
    const Json j =
        run_json("solve --backend cpu --quiet" + files + c.extra + " --output-gradient " + out);
    EXPECT_TRUE(j["converged"].b);
    const io::Array g = io::read_array(out);
    ASSERT_EQ(g.shape, (std::vector<std::int64_t>{15, 3}));
    const std::vector<double> want =
        library_gradient(x, y, c.weights ? a : std::vector<double>{}, eps, c.debias, tol);
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 1e-2);
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(std::isfinite(g.data[i]));
      EXPECT_NEAR(g.data[i], want[i], 1e-9 * (1 + scale)) << "entry " << i;
    }
    // The gradient of S is not that of OT: the two runs differ.
    if (c.debias) {
      const std::vector<double> plain =
          library_gradient(x, y, c.weights ? a : std::vector<double>{}, eps, false, tol);
      double diff = 0;
      for (std::size_t i = 0; i < want.size(); ++i)
        diff = std::max(diff, std::abs(plain[i] - want[i]));
      EXPECT_GT(diff, 1e-3);
    }
  }
  // fp32: float32 file, close to the float64 gradient.
  const Json j = run_json("solve --backend cpu --quiet --precision fp32 --source " + path("x.npy") +
                          " --target " + path("y.npy") + " --epsilon 0.2 --output-gradient " +
                          out_dir_ + "/g32.npy");
  EXPECT_TRUE(j["converged"].b);
  const io::Array g32 = io::read_array(out_dir_ + "/g32.npy");
  ASSERT_EQ(g32.shape, (std::vector<std::int64_t>{15, 3}));
  EXPECT_EQ(g32.dtype, "float32");
  const std::vector<double> want = library_gradient(x, y, {}, eps, false, tol);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g32.data[i], want[i], 1e-3) << i;
}

TEST_F(CliNewtonTest, SolveOutputGradientBadPathExitsTwo) {
  std::mt19937_64 rng(4);
  const std::string x = save("x.npy", gaussian_points(rng, 5, 2, 0.0, 1.0));
  const std::string y = save("y.npy", gaussian_points(rng, 6, 2, 0.0, 1.0));
  const std::string xy = " --source " + x + " --target " + y + " --epsilon 0.1";
  const std::vector<BadCase> cases = {
      {xy + " --output-gradient " + path("no/dir/g.npy"),
       {"--output-gradient: cannot write '" + path("no/dir/g.npy") + "'"}},
      {xy + " --output-gradient " + out_dir_ + "/g.txt", {"--output-gradient", "'.txt'"}},
      {xy + " --output-gradient " + x, {"--output-gradient"}},
      {xy + " --output-gradient " + out_dir_ + "/g.npy --output-map " + out_dir_ + "/g.npy",
       {"--output-gradient", "--output-map"}},
  };
  for (const BadCase& c : cases) {
    const Result r = run("solve --backend cpu --quiet" + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("kantor solve: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    for (const std::string& e : c.expected)
      EXPECT_NE(r.err.find(e), std::string::npos) << "expected '" << e << "' in: " << r.err;
    EXPECT_TRUE(list_dir(out_dir_).empty()) << c.args;
  }
  EXPECT_EQ(io::read_array(x).shape, (std::vector<std::int64_t>{5, 2})) << "input untouched";
}

}  // namespace
