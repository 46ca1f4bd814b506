// The kantor CLI as a user runs it: the built binary (KANTOR_CLI) on small files in a temporary
// directory. Results are checked against an independent float64 dense log-domain Sinkhorn written
// here; every bad input must exit 2 with one line naming the file / option, and leave no output.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_fixture.hpp"
#include "gtest/gtest.h"
#include "kantor/io.hpp"

extern char** environ;

namespace {

namespace io = kantor::io;
using namespace kantor::test::cli;

// ---- an independent float64 dense log-domain Sinkhorn -------------------------------------

struct Reference {
  std::vector<double> f, g;
  double dual = 0, primal = 0;
  std::vector<std::vector<double>> plan;
};

double cost(const Cloud& x, std::int64_t i, const Cloud& y, std::int64_t j, double c) {
  double s = 0;
  for (std::int64_t k = 0; k < x.d; ++k) s += (x.at(i, k) - y.at(j, k)) * (x.at(i, k) - y.at(j, k));
  return c * s;
}

// LSE over the terms with finite log-weights (a zero weight is a masked point).
double soft_min(const std::vector<double>& terms) {
  double mx = -INFINITY;
  for (double t : terms) mx = std::max(mx, t);
  double s = 0;
  for (double t : terms)
    if (t > -INFINITY) s += std::exp(t - mx);
  return mx + std::log(s);
}

/// Alternating Sinkhorn at fixed eps, weights normalized to mass 1, run until the L1 row error
/// is below 1e-14 (columns are exact after each g-update).
Reference reference_sinkhorn(const Cloud& x, const Cloud& y, std::vector<double> a,
                             std::vector<double> b, double eps, double c = 1.0) {
  const std::int64_t n = x.n, m = y.n;
  if (a.empty()) a.assign(std::size_t(n), 1.0);
  if (b.empty()) b.assign(std::size_t(m), 1.0);
  double sa = 0, sb = 0;
  for (double v : a) sa += v;
  for (double v : b) sb += v;
  for (double& v : a) v /= sa;
  for (double& v : b) v /= sb;
  std::vector<std::vector<double>> C(static_cast<std::size_t>(n),
                                     std::vector<double>(static_cast<std::size_t>(m)));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j) C[i][j] = cost(x, i, y, j, c);
  Reference r;
  r.f.assign(std::size_t(n), 0);
  r.g.assign(std::size_t(m), 0);
  std::vector<double> t;
  for (int it = 0; it < 100000; ++it) {
    for (std::int64_t i = 0; i < n; ++i) {
      t.assign(std::size_t(m), 0);
      for (std::int64_t j = 0; j < m; ++j) t[j] = std::log(b[j]) + (r.g[j] - C[i][j]) / eps;
      r.f[i] = -eps * soft_min(t);
    }
    for (std::int64_t j = 0; j < m; ++j) {
      t.assign(std::size_t(n), 0);
      for (std::int64_t i = 0; i < n; ++i) t[i] = std::log(a[i]) + (r.f[i] - C[i][j]) / eps;
      r.g[j] = -eps * soft_min(t);
    }
    double err = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      double row = 0;
      for (std::int64_t j = 0; j < m; ++j)
        row += a[i] * b[j] * std::exp((r.f[i] + r.g[j] - C[i][j]) / eps);
      err += std::abs(row - a[i]);
    }
    if (err < 1e-14) break;
  }
  r.plan.assign(std::size_t(n), std::vector<double>(std::size_t(m)));
  for (std::int64_t i = 0; i < n; ++i) {
    r.dual += a[i] * r.f[i];
    for (std::int64_t j = 0; j < m; ++j) {
      r.plan[i][j] = a[i] * b[j] * std::exp((r.f[i] + r.g[j] - C[i][j]) / eps);
      r.primal += r.plan[i][j] * C[i][j];
    }
  }
  for (std::int64_t j = 0; j < m; ++j) r.dual += b[j] * r.g[j];
  return r;
}

// Deterministic test data (a 64-bit LCG), independent of the standard library's distributions.
class Lcg {
 public:
  explicit Lcg(std::uint64_t s) : s_(s) {}
  double uniform() {
    s_ = s_ * 6364136223846793005ull + 1442695040888963407ull;
    return double(s_ >> 11) * 0x1.0p-53;
  }

 private:
  std::uint64_t s_;
};

Cloud random_cloud(Lcg& rng, std::int64_t n, std::int64_t d, double shift) {
  Cloud c{n, d, std::vector<double>(std::size_t(n * d))};
  for (double& v : c.p) v = rng.uniform() + shift;
  return c;
}

// ---- the fixture ---------------------------------------------------------------------------

class CliTest : public CliFixture {
 protected:
  CliTest() : CliFixture("kantor_test_cli_") {}
};

double rel(double got, double want) { return std::abs(got - want) / std::abs(want); }

// Results are compared with float64 references: pin the engine (the default, auto, picks CUDA
// and fp32 where a GPU is visible).
const std::string kSolveCpu = "solve --backend cpu";

const char* const kRequiredKeys[] = {"dual_cost",   "primal_cost",
                                     "divergence",  "regularized_cost",
                                     "dual_gap",    "marginal_error",
                                     "iterations",  "converged",
                                     "termination", "backend",
                                     "precision",   "schedule",
                                     "epsilon",     "n",
                                     "m",           "d",
                                     "seconds",     "engine"};

// ---- results --------------------------------------------------------------------------------

TEST_F(CliTest, DemoJsonConverges) {
  const Json j = run_json(kSolveCpu + " --demo --precision fp32 --quiet");
  for (const char* k : kRequiredKeys) EXPECT_TRUE(j.has(k)) << k;
  EXPECT_TRUE(j["converged"].b);
  EXPECT_EQ(j["termination"].str, "converged");
  EXPECT_TRUE(j["demo"].b);
  EXPECT_EQ(j["n"].num, 2000);
  EXPECT_EQ(j["m"].num, 3000);
  EXPECT_EQ(j["d"].num, 3);
  EXPECT_EQ(j["epsilon"].num, 0.05);
  EXPECT_EQ(j["precision"].str, "fp32");
  EXPECT_EQ(j["backend"].str, "cpu");
  EXPECT_EQ(j["divergence"].kind, Json::kNull);
  EXPECT_LE(j["marginal_error"].num, j["tolerance"].num);  // fp32 default tolerance
  EXPECT_GT(j["primal_cost"].num, 0);
  EXPECT_GE(j["dual_cost"].num, j["primal_cost"].num);  // eps KL >= 0
}

TEST_F(CliTest, DemoIsDeterministicAndTextReportNamesIt) {
  const Json a = run_json(kSolveCpu + " --demo --max-iterations 15");
  const Json b = run_json(kSolveCpu + " --demo --max-iterations 15");
  EXPECT_FALSE(a["converged"].b);
  EXPECT_EQ(a["termination"].str, "max iterations");
  EXPECT_EQ(a["dual_cost"].num, b["dual_cost"].num);
  EXPECT_EQ(a["marginal_error"].num, b["marginal_error"].num);
  const Result r = run(kSolveCpu + " --demo --max-iterations 15 --epsilon 0.2");
  EXPECT_EQ(r.code, 0) << "a solve that ran exits 0, converged or not";
  EXPECT_NE(r.out.find("demo problem"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epsilon = 0.2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kantor Sinkhorn summary"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max iterations"), std::string::npos) << r.out;
}

struct Fixture30x40 {
  Cloud x, y;
  std::vector<double> a, b;
};

Fixture30x40 make_problem() {
  Lcg rng(7);
  Fixture30x40 p;
  p.x = random_cloud(rng, 30, 2, 0.0);
  p.y = random_cloud(rng, 40, 2, 0.3);
  p.a.resize(30);
  p.b.resize(40);
  for (double& v : p.a) v = 0.5 + rng.uniform();
  for (double& v : p.b) v = 0.5 + rng.uniform();
  p.a[3] = 0;  // a zero weight is allowed
  double sa = 0, sb = 0;
  for (double v : p.a) sa += v;
  for (double v : p.b) sb += v;
  for (double& v : p.b) v *= sa / sb;  // equal total mass (not 1)
  return p;
}

TEST_F(CliTest, NpyAndCsvSolvesMatchDenseReference) {
  const Fixture30x40 p = make_problem();
  const double eps = 0.05;
  const Reference ref = reference_sinkhorn(p.x, p.y, p.a, p.b, eps);
  const std::string files = " --source " + save("x.npy", p.x) + " --target " + save("y.npy", p.y) +
                            " --source-weights " + save("a.npy", p.a) + " --target-weights " +
                            save("b.npy", p.b);
  const Json j = run_json(kSolveCpu + files + " --epsilon 0.05");
  for (const char* k : kRequiredKeys) EXPECT_TRUE(j.has(k)) << k;
  EXPECT_TRUE(j["converged"].b);
  EXPECT_EQ(j["n"].num, 30);
  EXPECT_EQ(j["m"].num, 40);
  EXPECT_EQ(j["d"].num, 2);
  EXPECT_EQ(j["precision"].str, "fp64");
  EXPECT_EQ(j["schedule"].str, "alternating");
  EXPECT_LT(rel(j["primal_cost"].num, ref.primal), 1e-6)
      << j["primal_cost"].num << " vs reference " << ref.primal;
  EXPECT_LT(rel(j["dual_cost"].num, ref.dual), 1e-6) << j["dual_cost"].num << " vs " << ref.dual;

  // The same data as .csv (17 digits: exact) gives the same numbers.
  const std::string csv_files = " --source " + save("x.csv", p.x) + " --target " +
                                save("y.csv", p.y) + " --source-weights " + save("a.csv", p.a) +
                                " --target-weights " + save("b.csv", p.b);
  const Json c = run_json(kSolveCpu + csv_files + " --epsilon 0.05");
  EXPECT_EQ(c["primal_cost"].num, j["primal_cost"].num);
  EXPECT_EQ(c["dual_cost"].num, j["dual_cost"].num);

  // Symmetric schedule, fixed eps, other scaling: same optimum.
  for (const char* extra : {" --schedule symmetric", " --fixed-epsilon", " --scaling 0.8",
                            " --check-every 1 --tolerance 1e-11"}) {
    const Json k = run_json(kSolveCpu + files + " --epsilon 0.05" + extra);
    EXPECT_TRUE(k["converged"].b) << extra;
    EXPECT_LT(rel(k["primal_cost"].num, ref.primal), 1e-6) << extra;
  }
  const Json s = run_json(kSolveCpu + files + " --epsilon 0.05 --schedule symmetric");
  EXPECT_EQ(s["schedule"].str, "symmetric");

  // float32 data and arithmetic: looser agreement.
  const Json f = run_json(kSolveCpu + files + " --epsilon 0.05 --precision fp32");
  EXPECT_EQ(f["precision"].str, "fp32");
  EXPECT_TRUE(f["converged"].b);
  EXPECT_LT(rel(f["primal_cost"].num, ref.primal), 1e-3);
}

TEST_F(CliTest, CostScaleAndUniformWeights) {
  const Fixture30x40 p = make_problem();
  const Reference ref = reference_sinkhorn(p.x, p.y, {}, {}, 0.1, 0.5);
  const Json j = run_json(kSolveCpu + " --source " + save("x.csv", p.x) + " --target " +
                          save("y.npy", p.y) + " --epsilon 0.1 --cost-scale 0.5");
  EXPECT_TRUE(j["converged"].b);
  EXPECT_LT(rel(j["primal_cost"].num, ref.primal), 1e-6);
  // One weight file: the other side is uniform with the same total mass (here 30, not 1).
  const Reference ref_a = reference_sinkhorn(p.x, p.y, p.a, {}, 0.1, 0.5);
  const Json k =
      run_json(kSolveCpu + " --source " + save("x.csv", p.x) + " --target " + save("y.npy", p.y) +
               " --source-weights " + save("a.npy", p.a) + " --epsilon 0.1 --cost-scale 0.5");
  EXPECT_TRUE(k["converged"].b);
  EXPECT_LT(rel(k["primal_cost"].num, ref_a.primal), 1e-6);
}

TEST_F(CliTest, DebiasedDivergenceMatchesReference) {
  const Fixture30x40 p = make_problem();
  const double eps = 0.1;
  const double want = reference_sinkhorn(p.x, p.y, p.a, p.b, eps).dual -
                      0.5 * reference_sinkhorn(p.x, p.x, p.a, p.a, eps).dual -
                      0.5 * reference_sinkhorn(p.y, p.y, p.b, p.b, eps).dual;
  const std::string x = save("x.npy", p.x), a = save("a.npy", p.a);
  const Json j = run_json(kSolveCpu + " --source " + x + " --target " + save("y.npy", p.y) +
                          " --source-weights " + a + " --target-weights " + save("b.npy", p.b) +
                          " --epsilon 0.1 --debias");
  EXPECT_TRUE(j["converged"].b);
  ASSERT_EQ(j["divergence"].kind, Json::kNumber);
  EXPECT_GT(want, 0);
  EXPECT_LT(rel(j["divergence"].num, want), 1e-6) << j["divergence"].num << " vs " << want;
  EXPECT_TRUE(j["xx"]["converged"].b);
  EXPECT_TRUE(j["yy"]["converged"].b);
  // S(a, a) = 0.
  const Json z = run_json(kSolveCpu + " --source " + x + " --target " + x + " --source-weights " +
                          a + " --target-weights " + a + " --epsilon 0.1 --debias");
  EXPECT_LT(std::abs(z["divergence"].num), 1e-9);
  const Result r = run(kSolveCpu + " --source " + x + " --target " + x + " --epsilon 0.1 --debias");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("debiased Sinkhorn divergence"), std::string::npos) << r.out;
}

TEST_F(CliTest, PotentialsAndBarycentricMapOutputs) {
  const Fixture30x40 p = make_problem();
  const double eps = 0.05;
  const Reference ref = reference_sinkhorn(p.x, p.y, p.a, p.b, eps);
  const std::string files = " --source " + save("x.npy", p.x) + " --target " + save("y.npy", p.y) +
                            " --source-weights " + save("a.npy", p.a) + " --target-weights " +
                            save("b.npy", p.b) + " --epsilon 0.05";
  const Json j = run_json(kSolveCpu + files + " --output-potentials " + out_dir_ +
                          "/pot --output-map " + out_dir_ + "/map.csv");
  EXPECT_EQ(j["outputs"].items.size(), 3u);
  const io::Array f = io::read_array(out_dir_ + "/pot_f.npy");
  const io::Array g = io::read_array(out_dir_ + "/pot_g.npy");
  const io::Array map = io::read_array(out_dir_ + "/map.csv");
  ASSERT_EQ(f.shape, (std::vector<std::int64_t>{30}));
  ASSERT_EQ(g.shape, (std::vector<std::int64_t>{40}));
  ASSERT_EQ(map.shape, (std::vector<std::int64_t>{30, 2}));
  EXPECT_EQ(f.dtype, "float64");
  // The potentials are defined up to f + k, g - k: compare the plans they give.
  double sa = 0, sb = 0;
  for (double v : p.a) sa += v;
  for (double v : p.b) sb += v;
  const double shift = f.data[0] - ref.f[0];
  for (std::int64_t i = 0; i < 30; ++i) {
    if (p.a[i] == 0) continue;
    EXPECT_NEAR(f.data[i] - shift, ref.f[i], 1e-7) << i;
    // T(x_i) = sum_j P_ij y_j / sum_j P_ij.
    double row = 0, t0 = 0, t1 = 0;
    for (std::int64_t j2 = 0; j2 < 40; ++j2) {
      row += ref.plan[i][j2];
      t0 += ref.plan[i][j2] * p.y.at(j2, 0);
      t1 += ref.plan[i][j2] * p.y.at(j2, 1);
    }
    EXPECT_NEAR(map.data[std::size_t(2 * i)], t0 / row, 1e-7) << i;
    EXPECT_NEAR(map.data[std::size_t(2 * i + 1)], t1 / row, 1e-7) << i;
  }
  for (std::int64_t j2 = 0; j2 < 40; ++j2) EXPECT_NEAR(g.data[j2] + shift, ref.g[j2], 1e-7);

  // A prefix ending in .csv picks .csv; fp32 solves write float32 .npy.
  run_json(kSolveCpu + files + " --output-potentials " + out_dir_ + "/p.csv");
  EXPECT_EQ(io::read_array(out_dir_ + "/p_f.csv").rows(), 30);
  EXPECT_EQ(io::read_array(out_dir_ + "/p_g.csv").rows(), 40);
  run_json(kSolveCpu + files + " --precision fp32 --output-map " + out_dir_ + "/m32.npy");
  EXPECT_EQ(io::read_array(out_dir_ + "/m32.npy").dtype, "float32");
  for (const std::string& name : list_dir(out_dir_))
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << "temporary left behind: " << name;
}

// ---- bad input: exit 2, one line naming the file / option, no output -------------------------

std::string npy_with_descr(const std::string& descr, const std::string& extra = "False") {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': " + extra + ", 'shape': (3, 2), }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += char(h.size() & 0xff);
  out += char(h.size() >> 8);
  return out + h + std::string(48, '\0');
}

TEST_F(CliTest, BadInputExitsTwoWithOneClearLineAndNoOutput) {
  const Fixture30x40 p = make_problem();
  const std::string x = save("x.npy", p.x), y = save("y.npy", p.y);
  const std::string xy = " --source " + x + " --target " + y;
  const std::string a = save("a.npy", p.a), b = save("b.npy", p.b);
  Cloud y3{2, 3, {0, 0, 0, 1, 1, 1}};
  const std::string y3f = save("y3.npy", y3);
  const std::string i8 = save_text("i8.npy", npy_with_descr(">i8"));
  const std::string be = save_text("be.npy", npy_with_descr(">f8"));
  const std::string obj = save_text("obj.npy", npy_with_descr("|O"));
  const std::string fo = save_text("fortran.npy", npy_with_descr("<f8", "True"));
  const std::string tr = save_text("trunc.npy", npy_with_descr("<f8").substr(0, 128 + 20));
  const std::string hdr =
      save_text("hdr.npy", std::string("\x93NUMPY\x01\x00\x40\x00{'descr'", 17));
  const std::string one_d = save("oned.npy", std::vector<double>{1, 2, 3});
  const std::string bad_csv = save_text("bad.csv", "x,y\n1,2\n3,oops\n");
  const std::string ragged = save_text("ragged.csv", "1,2\n3\n");
  const std::string nan_csv = save_text("nan.csv", "1,2\n3,4\n5,nan\n");
  const std::string inf_csv = save_text("inf.csv", "1,2\n-inf,4\n");
  const std::string empty_csv = save_text("empty.csv", "x,y\n");
  const std::string big = save_text("big.csv", "1,2\n1e300,4\n");
  const std::string huge = save_text("huge.csv", "0,0\n1e200,0\n");
  io::write_array(path("zero_rows.npy"), {0, 2}, nullptr);
  io::write_array(path("zero_cols.npy"), {3, 0}, nullptr);
  std::vector<double> neg = p.a, zeros(30, 0.0), half = p.a, short_w(29, 1.0);
  neg[1] = -0.5;
  for (double& v : half) v *= 0.5;
  const std::string negf = save("neg.npy", neg), zerof = save("zeros.npy", zeros);
  const std::string halff = save("half.npy", half), shortf = save("short.npy", short_w);
  const std::string w2d = save("w2d.npy", Cloud{15, 2, std::vector<double>(30, 1.0)});

  const std::vector<BadCase> cases = {
      // files
      {" --source " + path("missing.npy") + " --target " + y + " --epsilon 0.1",
       {"--source", "cannot open '" + path("missing.npy") + "'", "No such file"}},
      {" --source " + x + " --target " + path("nope.csv") + " --epsilon 0.1",
       {"--target", "cannot open '" + path("nope.csv") + "'"}},
      {" --source " + dir_ + " --target " + y + " --epsilon 0.1",
       {"--source", "unknown file type"}},
      {" --source " + i8 + " --target " + y + " --epsilon 0.1", {"'" + i8 + "'", "'>i8'"}},
      {" --source " + be + " --target " + y + " --epsilon 0.1", {"'" + be + "'", "'>f8'"}},
      {" --source " + obj + " --target " + y + " --epsilon 0.1", {"'" + obj + "'", "'|O'"}},
      {" --source " + x + " --target " + fo + " --epsilon 0.1", {"'" + fo + "'", "fortran_order"}},
      {" --source " + tr + " --target " + y + " --epsilon 0.1", {"'" + tr + "'", "truncated data"}},
      {" --source " + hdr + " --target " + y + " --epsilon 0.1", {"'" + hdr + "'", "truncated"}},
      {" --source " + one_d + " --target " + y + " --epsilon 0.1",
       {"--source", "'" + one_d + "' has shape (3,)", "(n, d)"}},
      {" --source " + bad_csv + " --target " + y + " --epsilon 0.1",
       {"'" + bad_csv + "'", "line 3, column 2", "'oops'"}},
      {" --source " + x + " --target " + ragged + " --epsilon 0.1",
       {"'" + ragged + "'", "line 2 has 1 fields"}},
      // values
      {" --source " + nan_csv + " --target " + y + " --epsilon 0.1",
       {"--source '" + nan_csv + "'", "non-finite coordinate nan at point 2, coordinate 1"}},
      {" --source " + x + " --target " + inf_csv + " --epsilon 0.1",
       {"--target '" + inf_csv + "'", "non-finite coordinate -inf at point 1, coordinate 0"}},
      {" --source " + x + " --target " + y3f + " --epsilon 0.1",
       {"--source '" + x + "' and --target '" + y3f + "': problem: dimension mismatch",
        "x has 2 coordinates per point and y has 3"}},
      {" --source " + empty_csv + " --target " + y + " --epsilon 0.1",
       {"--source '" + empty_csv + "'", "empty point cloud"}},
      {" --source " + x + " --target " + path("zero_rows.npy") + " --epsilon 0.1",
       {"--target '" + path("zero_rows.npy") + "'", "empty point cloud"}},
      {" --source " + path("zero_cols.npy") + " --target " + y + " --epsilon 0.1",
       {"--source '" + path("zero_cols.npy") + "': problem.x", "points have dimension 0"}},
      {xy + " --source-weights " + negf + " --epsilon 0.1",
       {"--source-weights '" + negf + "': problem.a", "weight 1 is -0.5", ">= 0"}},
      {xy + " --target-weights " + b + " --source-weights " + zerof + " --epsilon 0.1",
       {"--source-weights '" + zerof + "': problem.a", "total mass is 0 (all weights zero)"}},
      {xy + " --source-weights " + halff + " --target-weights " + b + " --epsilon 0.1",
       {"--source-weights '" + halff + "' and --target-weights '" + b + "': problem:",
        "different total mass"}},
      {xy + " --source-weights " + shortf + " --epsilon 0.1",
       {"--source-weights '" + shortf + "' for --source '" + x + "': problem.a",
        "29 weights for 30 points"}},
      {xy + " --target-weights " + a + " --epsilon 0.1",
       {"--target-weights '" + a + "' for --target '" + y + "': problem.b",
        "30 weights for 40 points"}},
      {xy + " --source-weights " + w2d + " --epsilon 0.1",
       {"--source-weights", "'" + w2d + "' has shape (15, 2)"}},
      // fp32 centres the points in float64 first: only a spread beyond float32 is refused.
      {" --source " + big + " --target " + y + " --epsilon 0.1 --precision fp32",
       {"--source '" + big + "'", "exceed the float32 range (precision fp32)"}},
      {" --source " + huge + " --target " + y + " --epsilon 0.1 --backend cpu",
       {"--source '" + huge + "' and --target '" + y + "'", "exceed the float64 range"}},
      {" --source " + big + " --target " + y + " --epsilon 0.1 --precision fp64",
       {"--source '" + big + "'", "exceed the float64 range"}},
      // options
      {xy + " --epsilon 0", {"--epsilon: problem.epsilon must be finite and > 0, got 0"}},
      {xy + " --epsilon=-1", {"--epsilon: problem.epsilon must be finite and > 0, got -1"}},
      {" --demo --epsilon inf", {"--epsilon: problem.epsilon must be finite and > 0, got inf"}},
      {xy + " --epsilon nan", {"--epsilon"}},
      {xy + " --epsilon abc", {"--epsilon expects a number, got 'abc'"}},
      {xy, {"missing --epsilon"}},
      {" --source " + x + " --epsilon 0.1", {"missing --target"}},
      {" --epsilon 0.1", {"missing --source"}},
      {xy + " --epsilon 0.1 --source-weights ''", {"--source-weights: empty file name"}},
      {xy + " --epsilon 0.1 --cost-scale 0",
       {"--cost-scale: problem.cost.scale must be finite and > 0"}},
      {xy + " --epsilon 0.1 --cost-scale nan",
       {"--cost-scale: problem.cost.scale must be finite and > 0, got nan"}},
      {xy + " --epsilon 0.1 --bogus", {"unrecognised option '--bogus'"}},
      {xy + " --epsilon 0.1 --eps 3", {"'--eps'"}},
      {xy + " --epsilon 0.1 stray", {"unexpected argument 'stray'"}},
      {xy + " --epsilon 0.1 --schedule fast", {"--schedule: unknown value 'fast'"}},
      {xy + " --epsilon 0.1 --backend gpu", {"--backend: unknown value 'gpu'"}},
      {xy + " --epsilon 0.1 --precision fp16", {"--precision: unknown value 'fp16'"}},
      {xy + " --epsilon 0.1 --backend cpu --precision tf32",
       {"--precision tf32", "--backend cuda"}},
      {xy + " --epsilon 0.1 --scaling 0.3 --fixed-epsilon", {"mutually exclusive"}},
      {xy + " --epsilon 0.1 --scaling 1.5", {"--scaling: scaling must be in (0, 1), got 1.5"}},
      {xy + " --epsilon 0.1 --tolerance=-1", {"--tolerance: tolerance must be >= 0"}},
      {xy + " --epsilon 0.1 --max-iterations 0",
       {"--max-iterations: max_iterations must be >= 1, got 0"}},
      {xy + " --epsilon 0.1 --check-every 0", {"--check-every: check_every must be >= 1"}},
      {xy + " --epsilon 0.1 --threads=-2",
       {"--threads: ContextOptions::threads must be in [0, 1024]", "got -2"}},
      {xy + " --epsilon 0.1 --threads 100000",
       {"--threads: ContextOptions::threads must be in [0, 1024]"}},
      {xy + " --epsilon 0.1 --max-iterations 1.5",
       {"--max-iterations expects an integer, got '1.5'"}},
      {xy + " --epsilon 0.1 --threads=two", {"--threads expects an integer, got 'two'"}},
      {xy + " --epsilon 0.1 --check-every 99999999999999999999",
       {"--check-every expects an integer in [", "got '99999999999999999999'"}},
      {xy + " --epsilon 0.1 --max-iterations 1e3",
       {"--max-iterations expects an integer, got '1e3'"}},
      {xy + " --epsilon 0.1 --tolerance 1e-3x", {"--tolerance expects a number, got '1e-3x'"}},
      {xy + " --epsilon ''", {"--epsilon expects a number, got ''"}},
      {" --demo --source " + x, {"--demo", "--source is not allowed"}},
      {" --demo --target-weights " + b, {"--target-weights is not allowed"}},
      {xy + " --epsilon 0.1 --output-map " + path("no/dir/map.npy"),
       {"--output-map: cannot write '" + path("no/dir/map.npy") + "'"}},
      {xy + " --epsilon 0.1 --output-map " + out_dir_ + "/map.txt",
       {"--output-map", "unknown file type '.txt'"}},
      {xy + " --epsilon 0.1 --output-potentials " + path("no/dir/p"),
       {"--output-potentials: cannot write '" + path("no/dir/p_f.npy") + "'"}},
  };
  // Every case also asks for all outputs: none may appear.
  const std::string outputs =
      " --output-potentials " + out_dir_ + "/pot --output-map " + out_dir_ + "/map.npy";
  for (const BadCase& c : cases) {
    const bool own_output = c.args.find("--output") != std::string::npos;
    const Result r = run("solve" + c.args + (own_output ? "" : outputs));
    EXPECT_EQ(r.code, 2) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_EQ(r.err.rfind("kantor solve: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    for (const std::string& e : c.expected)
      EXPECT_NE(r.err.find(e), std::string::npos) << "expected '" << e << "' in: " << r.err;
    EXPECT_TRUE(list_dir(out_dir_).empty()) << c.args << " left output files";
  }
}

TEST_F(CliTest, HelpUnknownCommandAndCudaOnCpuBuild) {
  Result r = run("solve --help");
  EXPECT_EQ(r.code, 0);
  for (const char* opt : {"--source", "--target", "--epsilon", "--debias", "--output-map", "--demo",
                          "--fixed-epsilon", "--precision"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  r = run("info --help");
  EXPECT_EQ(r.code, 0);
  r = run("frobnicate");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << r.err;
  r = run("");
  EXPECT_EQ(r.code, 2);
  // A CUDA request the build or machine cannot serve is a runtime failure (exit 1), named.
  const Json info = run_json("info");
  if (!info["cuda_compiled"].b || info["cuda_devices"].items.empty()) {
    r = run("solve --demo --backend cuda --max-iterations 1");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(CliTest, DefaultBackendIsAutoAndSaysWhatItPicked) {
  const Json info = run_json("info");
  const bool gpu = info["cuda_compiled"].b && !info["cuda_devices"].items.empty();
  const Json j = run_json("solve --demo --max-iterations 5");
  EXPECT_EQ(j["backend"].str, gpu ? "cuda" : "cpu");
  EXPECT_EQ(j["precision"].str, gpu ? "fp32" : "fp64");
  EXPECT_EQ(j["backend_note"].str.rfind("auto", 0), 0u) << j["backend_note"].str;
}

// Starts `kantor args...` with stdout to `out` and stderr to `err_path` (a file or a terminal),
// SIGINT at its default action whatever this process inherited. Returns the pid.
pid_t spawn_cli(std::vector<std::string> args, const std::string& out,
                const std::string& err_path) {
  args.insert(args.begin(), KANTOR_CLI);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err_path.c_str(), O_RDWR | O_NOCTTY | O_CREAT, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &files, &attr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  return pid;
}

struct Interrupted {
  int status = 0;
  std::string err;  // what the process wrote on stderr
};

// Runs a solve that cannot converge (tolerance 1e-300) for 1.5 s, stderr on a pseudo-terminal or
// a file, then sends SIGINT and collects the exit status and stderr.
Interrupted interrupt_solve(const std::string& dir, bool terminal, bool quiet,
                            const std::string& output) {
  Interrupted r;
  int master = -1, keep_open = -1;
  std::string err_path = dir + "/stderr.txt";
  if (terminal) {
    master = ::posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
      ADD_FAILURE() << "no pseudo-terminal: " << std::strerror(errno);
      return r;
    }
    err_path = ::ptsname(master);
    keep_open = ::open(err_path.c_str(), O_RDWR | O_NOCTTY);  // its output outlives the child
  }
  std::vector<std::string> args = {"solve",        "--demo", "--backend",        "cpu",
                                   "--tolerance",  "1e-300", "--max-iterations", "100000",
                                   "--output-map", output};
  if (quiet) args.push_back("--quiet");
  const pid_t pid = spawn_cli(args, dir + "/stdout.txt", err_path);
  if (pid <= 0) {
    ADD_FAILURE() << "cannot start " << KANTOR_CLI;
    return r;
  }
  // Wait 1.5 s, and where a progress line is expected until it has appeared (up to 30 s: an
  // instrumented build on a loaded machine can take longer than 1.5 s to its first line).
  if (terminal) ::fcntl(master, F_SETFL, O_NONBLOCK);
  const bool want_progress = terminal && !quiet;
  for (int waited_ms = 0; waited_ms < 30000; waited_ms += 100) {
    ::usleep(100 * 1000);
    if (terminal) {
      char buf[4096];
      for (ssize_t got; (got = ::read(master, buf, sizeof buf)) > 0;) r.err.append(buf, got);
    }
    if (waited_ms >= 1400 &&
        (!want_progress || r.err.find("solving: iteration") != std::string::npos))
      break;
  }
  EXPECT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(::waitpid(pid, &r.status, 0), pid);
  if (terminal) {
    char buf[4096];
    for (ssize_t got; (got = ::read(master, buf, sizeof buf)) > 0;) r.err.append(buf, got);
    ::close(keep_open);
    ::close(master);
  } else {
    r.err = read_text(err_path);
  }
  EXPECT_EQ(read_text(dir + "/stdout.txt"), "");
  return r;
}

TEST_F(CliTest, CtrlCAbortsCleanlyAndProgressShowsOnlyOnATerminal) {
  for (const bool terminal : {true, false}) {
    for (const bool quiet : {false, true}) {
      if (!terminal && quiet) continue;
      SCOPED_TRACE(std::string(terminal ? "terminal" : "file") + (quiet ? ", --quiet" : ""));
      const Interrupted r = interrupt_solve(dir_, terminal, quiet, out_dir_ + "/map.npy");
      ASSERT_TRUE(WIFEXITED(r.status)) << "killed by signal " << WTERMSIG(r.status) << r.err;
      EXPECT_EQ(WEXITSTATUS(r.status), 130) << r.err;
      EXPECT_NE(r.err.find("interrupted after"), std::string::npos) << r.err;
      const bool progress = terminal && !quiet;
      EXPECT_EQ(r.err.find("solving: iteration") != std::string::npos, progress) << r.err;
      if (progress) {
        EXPECT_NE(r.err.find("marginal error"), std::string::npos) << r.err;
      }
      EXPECT_TRUE(list_dir(out_dir_).empty()) << "an interrupted solve writes nothing";
    }
  }
}

TEST_F(CliTest, InfoJsonAndText) {
  const Json j = run_json("info");
  EXPECT_FALSE(j["version"].str.empty());
  EXPECT_EQ(j["cuda_compiled"].kind, Json::kBool);
  EXPECT_EQ(j["cuda_architectures"].kind, Json::kString);
  EXPECT_FALSE(j["compiler"].str.empty());
  EXPECT_GE(j["hardware_threads"].num, 1);
  ASSERT_EQ(j["cuda_devices"].kind, Json::kArray);
  for (const Json& d : j["cuda_devices"].items) {
    EXPECT_FALSE(d["name"].str.empty());
    EXPECT_GT(d["memory_bytes"].num, 0);
  }
  if (!j["cuda_compiled"].b) {
    EXPECT_TRUE(j["cuda_devices"].items.empty());
  }
  const Result r = run("info");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("kantor " + j["version"].str), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CUDA devices"), std::string::npos) << r.out;
  EXPECT_EQ(run("info --bogus").code, 2);
  EXPECT_EQ(run("info extra").code, 2);
}

// ---- review findings ----------------------------------------------------------------------

// n x d standard normal points (Box-Muller on the LCG) shifted by `shift` in every coordinate.
Cloud normal_cloud(Lcg& rng, std::int64_t n, std::int64_t d, double shift) {
  Cloud c{n, d, std::vector<double>(std::size_t(n * d))};
  for (double& v : c.p) {
    const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
    v = shift + std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  return c;
}

// Coordinates near 1e8 do not survive a float32 conversion (spacing 8): an fp32 solve must
// centre them in float64 first, and write the map back in the original coordinates.
TEST_F(CliTest, Fp32SolveFarFromTheOriginMatchesFp64) {
  Lcg rng(11);
  const Cloud x = normal_cloud(rng, 50, 3, 1e8), y = normal_cloud(rng, 60, 3, 1e8);
  const std::string files =
      " --source " + save("far.npy", x) + " --target " + save("fary.npy", y) + " --epsilon 0.1";
  const Json j64 =
      run_json(kSolveCpu + files + " --precision fp64 --output-map " + out_dir_ + "/map64.npy");
  const Json j32 =
      run_json(kSolveCpu + files + " --precision fp32 --output-map " + out_dir_ + "/map32.npy");
  EXPECT_TRUE(j64["converged"].b);
  EXPECT_TRUE(j32["converged"].b);
  EXPECT_GT(j64["dual_cost"].num, 0.5);  // two N(0, 1) samples in R^3: about 1.1
  EXPECT_LT(rel(j32["dual_cost"].num, j64["dual_cost"].num), 1e-4)
      << "fp32 " << j32["dual_cost"].num << " vs fp64 " << j64["dual_cost"].num;
  // The translation does not change the solution: both match the float64 reference.
  const Reference ref = reference_sinkhorn(x, y, {}, {}, 0.1);
  EXPECT_LT(rel(j64["dual_cost"].num, ref.dual), 1e-6);
  const io::Array m64 = io::read_array(out_dir_ + "/map64.npy");
  const io::Array m32 = io::read_array(out_dir_ + "/map32.npy");
  ASSERT_EQ(m32.shape, (std::vector<std::int64_t>{50, 3}));
  ASSERT_EQ(m64.shape, m32.shape);
  EXPECT_EQ(m32.dtype, "float64") << "float32 would round coordinates near 1e8 to multiples of 8";
  for (std::size_t k = 0; k < m32.data.size(); ++k) {
    EXPECT_NEAR(m32.data[k], m64.data[k], 2e-3) << k;  // original coordinates, fp32 accuracy
    EXPECT_NEAR(m32.data[k], 1e8, 10.0) << k;
  }
}

TEST_F(CliTest, CsvFirstLineOfEmptyFieldsIsAMalformedRowNotAHeader) {
  const std::string e = save_text("e.csv", ",,\n1,2,3\n");
  const std::string y = save("y3.npy", Cloud{2, 3, {0, 0, 0, 1, 1, 1}});
  const Result r = run(kSolveCpu + " --source " + e + " --target " + y + " --epsilon 0.1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("--source: '" + e + "': line 1, column 1: empty field"), std::string::npos)
      << r.err;
}

TEST_F(CliTest, WeightsWhoseTotalOverflowsAreRejectedByName) {
  const Fixture30x40 p = make_problem();
  const std::string xy = " --source " + save("x.npy", p.x) + " --target " + save("y.npy", p.y);
  const std::string huge = save("huge_w.npy", std::vector<double>(30, 1e308));
  // Only --source-weights: the total is not finite in float64.
  for (const std::string prec : {"fp64", "fp32"}) {
    const Result r =
        run(kSolveCpu + xy + " --epsilon 0.1 --precision " + prec + " --source-weights " + huge);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.err.find("--source-weights '" + huge + "'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("problem.a: total mass overflows double"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(": : "), std::string::npos) << "empty name: " << r.err;
  }
  // Finite in float64 but beyond float32: named, with the precision in use.
  const std::string big = save("big_w.npy", std::vector<double>(30, 2e37));
  Result r = run(kSolveCpu + xy + " --epsilon 0.1 --precision fp32 --source-weights " + big);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("--source-weights '" + big + "'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(precision fp32;"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(precision fp64"), std::string::npos) << r.err;
  // The same in fp64 is a valid problem.
  r = run(kSolveCpu + xy + " --epsilon 0.1 --precision fp64 --source-weights " + big);
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(CliTest, FailedMultiOutputRunKeepsPreExistingFiles) {
  const Fixture30x40 p = make_problem();
  const std::string xy = " --source " + save("x.npy", p.x) + " --target " + save("y.npy", p.y);
  const std::vector<double> old_f = {1, 2, 3}, old_g = {4, 5};
  io::write_array(out_dir_ + "/pot_f.npy", {3}, old_f.data());
  io::write_array(out_dir_ + "/pot_g.npy", {2}, old_g.data());
  // A map name whose temporary file name is too long for the file system: refused by the
  // up-front check (before the solve), leaving the existing outputs untouched.
  const std::string long_map = out_dir_ + "/" + std::string(246, 'm') + ".npy";
  const Result r = run(kSolveCpu + xy + " --epsilon 0.1 --output-potentials " + out_dir_ +
                       "/pot --output-map " + long_map);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("cannot write"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("temporary file name"), std::string::npos) << r.err;
  EXPECT_EQ(io::read_array(out_dir_ + "/pot_f.npy").data, old_f);
  EXPECT_EQ(io::read_array(out_dir_ + "/pot_g.npy").data, old_g);
  std::vector<std::string> left = list_dir(out_dir_);
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"pot_f.npy", "pot_g.npy"}));
}

// An [B, n, n] float64 logits file.
std::string save_logits(const std::string& path, std::int64_t batch, std::int64_t n,
                        const std::vector<double>& v) {
  io::write_array(path, {batch, n, n}, v.data());
  return path;
}

TEST_F(CliTest, BirkhoffRejectsLogitsThatOverflowFloat32) {
  std::vector<double> v(2 * 16, 0.0);
  v[1 * 16 + 3 * 4 + 0] = -1e39;  // matrix 1, row 3, column 0
  const std::string neg = save_logits(path("neg.npy"), 2, 4, v);
  Result r = run("birkhoff --backend cpu --input " + neg);
  EXPECT_EQ(r.code, 2) << r.out;
  for (const std::string e : {"--input '" + neg + "'", std::string("matrix 1, row 3, column 0"),
                              std::string("-1e+39"), std::string("float32")})
    EXPECT_NE(r.err.find(e), std::string::npos) << "expected '" << e << "' in: " << r.err;
  v[1 * 16 + 3 * 4 + 0] = 0;
  v[0 * 16 + 1 * 4 + 2] = 1e39;  // matrix 0, row 1, column 2
  const std::string pos = save_logits(path("pos.npy"), 2, 4, v);
  r = run("birkhoff --backend cpu --input " + pos + " --output " + out_dir_ + "/p.npy");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("matrix 0, row 1, column 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1e+39"), std::string::npos) << r.err;
  EXPECT_TRUE(list_dir(out_dir_).empty());
  // NaN and +inf are named by position too; an exact -inf is a forbidden entry and is fine.
  v[0 * 16 + 1 * 4 + 2] = std::nan("");
  r = run("birkhoff --backend cpu --input " + save_logits(path("nan.npy"), 2, 4, v));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("matrix 0, row 1, column 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("NaN"), std::string::npos) << r.err;
  v[0 * 16 + 1 * 4 + 2] = -INFINITY;
  r = run("birkhoff --backend cpu --input " + save_logits(path("ninf.npy"), 2, 4, v) +
          " --output " + out_dir_ + "/p.npy");
  EXPECT_EQ(r.code, 0) << r.err;
  const io::Array P = io::read_array(out_dir_ + "/p.npy");
  ASSERT_EQ(P.data.size(), 32u);
  EXPECT_EQ(P.data[6], 0.0);
  EXPECT_NEAR(P.data[0] + P.data[1] + P.data[2] + P.data[3], 1.0, 1e-4);
  // A row of -inf (no doubly stochastic matrix has that pattern) is invalid input: exit 2 naming
  // the matrix, nothing written.
  for (int k = 0; k < 4; ++k) v[1 * 16 + 2 * 4 + k] = -INFINITY;
  ::unlink((out_dir_ + "/p.npy").c_str());
  r = run("birkhoff --backend cpu --input " + save_logits(path("row.npy"), 2, 4, v) + " --output " +
          out_dir_ + "/p.npy");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("matrix 1"), std::string::npos) << r.err;
  EXPECT_TRUE(list_dir(out_dir_).empty());
}

TEST_F(CliTest, BirkhoffParsesItsCommandLineStrictly) {
  const std::string bk = save_logits(path("bk.npy"), 1, 4, std::vector<double>(16, 0.0));
  const std::string n1 = save_logits(path("n1.npy"), 3, 1, std::vector<double>(3, 0.0));
  const std::string n17 = save_logits(path("n17.npy"), 1, 17, std::vector<double>(289, 0.0));
  const std::vector<BadCase> cases = {
      {" --input " + bk + " stray", {"unexpected argument 'stray'"}},
      {" --input " + bk + " --tol 1e-3", {"'--tol'"}},
      {" --input " + bk + " --iter 3", {"'--iter'"}},
      {" --input " + bk + " --bogus", {"unrecognised option '--bogus'"}},
      {" --input " + bk + " --tolerance abc", {"--tolerance expects a number, got 'abc'"}},
      {" --input " + bk + " --iterations 2.5", {"--iterations expects an integer, got '2.5'"}},
      {" --input " + bk + " --output " + bk, {"--output '" + bk + "' is the input file"}},
      {" --input " + bk + " --output " + path("no/dir/p.npy"),
       {"--output: cannot write '" + path("no/dir/p.npy") + "'"}},
      {" --input " + bk + " --output " + out_dir_ + "/p.txt",
       {"--output", "unknown file type '.txt'"}},
      {" --input " + bk + " --output ''", {"--output: empty file name"}},
      // BirkhoffOptions::is_valid and ContextOptions, naming the option.
      {" --input " + bk + " --iterations=-1", {"--iterations: iterations must be in 0..10000"}},
      {" --input " + bk + " --tolerance nan", {"--tolerance: tolerance must be finite and >= 0"}},
      {" --input " + bk + " --threads 5000",
       {"--threads: ContextOptions::threads must be in [0, 1024]"}},
      // n outside 2..16: project_birkhoff's check, naming the file.
      {" --input " + n1, {"--input '" + n1 + "': ", "n = 1 is outside the supported range 2..16"}},
      {" --input " + n17 + " --output " + out_dir_ + "/p.npy",
       {"--input '" + n17 + "': ", "n = 17 is outside the supported range 2..16"}},
      // The output is checked before the input is read.
      {" --input " + path("missing.npy") + " --output " + path("no/dir/p.npy"),
       {"--output: cannot write"}},
  };
  for (const BadCase& c : cases) {
    const Result r = run("birkhoff --backend cpu" + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\nstdout: " << r.out;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_EQ(r.err.rfind("kantor birkhoff: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    for (const std::string& e : c.expected)
      EXPECT_NE(r.err.find(e), std::string::npos) << "expected '" << e << "' in: " << r.err;
    EXPECT_TRUE(list_dir(out_dir_).empty()) << c.args << " left output files";
  }
  const Result ok = run("birkhoff --backend cpu --input " + bk + " --tolerance 1e-3");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// ---- reliability: failures fail loudly, outputs checked first, bounded readers -------------

// Does `text` show a non-finite number the way printf / ostream write one (nan, -nan, inf)?
bool shows_non_finite(const std::string& text) {
  for (const char* w : {"nan", "inf", "NaN", "Inf", "NAN", "INF"}) {
    for (std::size_t at = text.find(w); at != std::string::npos; at = text.find(w, at + 1)) {
      const std::size_t end = at + std::strlen(w);
      const bool starts = at == 0 || !std::isalnum(static_cast<unsigned char>(text[at - 1]));
      const bool ends = end == text.size() || !std::isalnum(static_cast<unsigned char>(text[end]));
      if (starts && ends) return true;
    }
  }
  return false;
}

// A numerical failure (forced by the CLI's test hook KANTOR_TEST_INJECT: the input validation
// makes a real one hard to provoke) exits 3, writes no file, and prints no NaN / Inf: null in
// JSON with the message naming what is missing, "not computed" in the report.
TEST_F(CliTest, NumericalFailureExitsThreeWritesNothingAndShowsNoNonFinite) {
  const Fixture30x40 p = make_problem();
  const std::string files = " --source " + save("x.npy", p.x) + " --target " + save("y.npy", p.y) +
                            " --epsilon 0.1 --output-potentials " + out_dir_ +
                            "/pot --output-map " + out_dir_ + "/map.npy";
  const std::string inject = "KANTOR_TEST_INJECT=numerical-failure ";
  for (const std::string extra : {"", " --debias"}) {
    SCOPED_TRACE(extra);
    // JSON: one object, nulls for what could not be computed, named in the message.
    Result r = run(kSolveCpu + files + extra + " --json", inject);
    EXPECT_EQ(r.code, 3) << r.err;
    Json j;
    ASSERT_TRUE(JsonParser(r.out).parse(&j)) << "not JSON (a NaN / Inf?): " << r.out;
    EXPECT_FALSE(shows_non_finite(r.out)) << r.out;
    EXPECT_EQ(j["termination"].str, "numerical failure");
    EXPECT_FALSE(j["converged"].b);
    EXPECT_EQ(j["marginal_error"].kind, Json::kNull);
    EXPECT_EQ(j["primal_cost"].kind, Json::kNull);
    EXPECT_NE(j["message"].str.find("not computed"), std::string::npos) << j["message"].str;
    EXPECT_NE(j["message"].str.find("marginal_error"), std::string::npos) << j["message"].str;
    EXPECT_NE(j["message"].str.find("primal_cost"), std::string::npos) << j["message"].str;
    EXPECT_EQ(j["message"].str.find("divergence") != std::string::npos, !extra.empty())
        << "divergence is null without --debias because it was not asked for";
    if (!extra.empty()) {
      EXPECT_EQ(j["divergence"].kind, Json::kNull) << "the divergence of a failed solve";
    }
    EXPECT_TRUE(j["outputs"].items.empty());
    EXPECT_NE(r.err.find("kantor solve: error: numerical failure"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no output written"), std::string::npos) << r.err;
    EXPECT_TRUE(list_dir(out_dir_).empty()) << "a failed solve writes no output";
    // The text report.
    r = run(kSolveCpu + files + extra, inject);
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_FALSE(shows_non_finite(r.out)) << r.out;
    EXPECT_NE(r.out.find("marginal error     not computed"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("primal cost        not computed"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("wrote "), std::string::npos) << r.out;
    EXPECT_TRUE(list_dir(out_dir_).empty());
  }
  // The same run without the failure is fine and writes its outputs.
  const Result ok = run(kSolveCpu + files);
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(list_dir(out_dir_).size(), 3u);
  // birkhoff: a non-finite result likewise.
  const std::string bk = save_logits(path("bk.npy"), 2, 4, std::vector<double>(32, 0.0));
  for (const std::string mode : {" --json", ""}) {
    const Result b = run(
        "birkhoff --backend cpu --input " + bk + " --output " + out_dir_ + "/p.npy" + mode, inject);
    EXPECT_EQ(b.code, 3) << b.err;
    EXPECT_FALSE(shows_non_finite(b.out)) << b.out;
    EXPECT_NE(b.err.find("kantor birkhoff: error: numerical failure"), std::string::npos) << b.err;
    EXPECT_EQ(list_dir(out_dir_).size(), 3u) << "no p.npy";
    if (!mode.empty()) {
      Json j;
      ASSERT_TRUE(JsonParser(b.out).parse(&j)) << b.out;
      EXPECT_EQ(j["worst_error"].kind, Json::kNull);
      EXPECT_NE(j["message"].str.find("worst_error"), std::string::npos) << j["message"].str;
      EXPECT_FALSE(j.has("output"));
    } else {
      EXPECT_NE(b.out.find("worst Err not computed"), std::string::npos) << b.out;
    }
  }
  const Result help = run("solve --help");
  EXPECT_NE(help.out.find("3 numerical failure"), std::string::npos) << help.out;
}

TEST_F(CliTest, OutputsThatCollideOrReplaceAnInputAreRefusedBeforeTheSolve) {
  const Fixture30x40 p = make_problem();
  const std::string x = save("x.npy", p.x), y = save("y.npy", p.y), a = save("a.npy", p.a);
  const std::string xy = " --source " + x + " --target " + y + " --epsilon 0.1";
  ASSERT_EQ(::symlink(y.c_str(), (out_dir_ + "/ylink.npy").c_str()), 0);
  const std::string o = out_dir_;
  const std::vector<BadCase> cases = {
      {xy + " --output-potentials " + o + "/p --output-map " + o + "/p_f.npy",
       {"--output-map '" + o + "/p_f.npy' is the same file as --output-potentials '" + o +
        "/p_f.npy'"}},
      {xy + " --output-potentials " + o + "/p.csv --output-map " + o + "/sub/../p_g.csv",
       {"--output-map '" + o + "/sub/../p_g.csv' is the same file as --output-potentials"}},
      {xy + " --output-map " + x, {"--output-map '" + x + "' is the input file --source '" + x}},
      {xy + " --output-map " + dir_ + "/./x.npy", {"is the input file --source"}},
      {xy + " --output-map " + o + "/ylink.npy", {"is the input file --target '" + y + "'"}},
      // Last, not an error: a prefix equal to an input writes a_f.npy and a_g.npy next to it.
      {xy + " --source-weights " + a + " --output-potentials " + dir_ + "/a.npy", {}},
  };
  ASSERT_EQ(::mkdir((o + "/sub").c_str(), 0755), 0);
  for (std::size_t i = 0; i + 1 < cases.size(); ++i) {
    const BadCase& c = cases[i];
    const Result r = run(kSolveCpu + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    for (const std::string& e : c.expected)
      EXPECT_NE(r.err.find(e), std::string::npos) << "expected '" << e << "' in: " << r.err;
    std::vector<std::string> left = list_dir(o);
    std::sort(left.begin(), left.end());
    EXPECT_EQ(left, (std::vector<std::string>{"sub", "ylink.npy"})) << c.args;
  }
  EXPECT_EQ(io::read_array(x).data, p.x.p) << "the input is untouched";
  const Result fine = run(kSolveCpu + cases.back().args);
  EXPECT_EQ(fine.code, 0) << fine.err;
  // The check comes before the solve: a solve that would take minutes is refused at once.
  const Result fast =
      run("solve --demo --backend cpu --tolerance 1e-300 --max-iterations 100000000"
          " --output-potentials " +
          o + "/q --output-map " + o + "/q_g.npy");
  EXPECT_EQ(fast.code, 2) << fast.err;
  EXPECT_NE(fast.err.find("is the same file as"), std::string::npos) << fast.err;
}

TEST_F(CliTest, FailedWritesToStandardOutputExitOneWithAMessage) {
  // A full disk.
  for (const std::string cmd : {"info", "info --json",
                                "solve --demo --backend cpu "
                                "--max-iterations 5 --json",
                                "--help"}) {
    const std::string err = dir_ + "/err.txt";
    const std::string line =
        "'" + std::string(KANTOR_CLI) + "' " + cmd + " >/dev/full 2>'" + err + "'";
    const int status = std::system(line.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << cmd;
    EXPECT_EQ(WEXITSTATUS(status), 1) << cmd;
    const std::string e = read_text(err);
    EXPECT_NE(e.find("cannot write to standard output"), std::string::npos) << cmd << ": " << e;
  }
  // A closed pipe: the reader (true) is gone before kantor writes; SIGPIPE must not kill it
  // silently (status 141), the write fails with EPIPE and is reported.
  const std::string err = dir_ + "/err.txt", code = dir_ + "/code.txt";
  const std::string line = "sh -c \"(sleep 0.5; '" + std::string(KANTOR_CLI) + "' info 2>'" + err +
                           "'; echo \\$? >'" + code + "') | true\"";
  ASSERT_EQ(std::system(line.c_str()), 0);
  for (int i = 0; i < 100 && read_text(code).empty(); ++i) ::usleep(50 * 1000);
  EXPECT_EQ(read_text(code), "1\n") << read_text(err);
  EXPECT_NE(read_text(err).find("kantor info: error: cannot write to standard output: Broken pipe"),
            std::string::npos)
      << read_text(err);
}

TEST_F(CliTest, AWriteThatFailsMidwayLeavesNoTemporary) {
  // Over the file size limit (ulimit -f, in KiB): the write fails inside write() (SIGXFSZ is
  // ignored, EFBIG): exit 2 naming the file, no temporary and no output left.
  const std::string line = "sh -c \"ulimit -f 16; exec '" + std::string(KANTOR_CLI) +
                           "' solve --demo --backend cpu --max-iterations 5 --output-map '" +
                           out_dir_ + "/map.csv'\" >/dev/null 2>'" + dir_ + "/err.txt'";
  const int status = std::system(line.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal";
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(
      read_text(dir_ + "/err.txt").find("--output-map: cannot write '" + out_dir_ + "/map.csv'"),
      std::string::npos)
      << read_text(dir_ + "/err.txt");
  EXPECT_TRUE(list_dir(out_dir_).empty()) << "left: " << list_dir(out_dir_).front();
}

TEST_F(CliTest, HugeMalformedCsvFailsFastUnderAMemoryLimit) {
  if (std::getenv("KANTOR_UNDER_SANITIZER"))
    GTEST_SKIP() << "runs the CLI under ulimit -v 1000000 (RLIMIT_AS 1 GB): an ASan binary "
                    "reserves ~15 TB of address space for its shadow memory and cannot start";
  // 50 MB of commas: line 1 is 50 million empty fields. Under a 1 GB address-space limit the
  // reader must report the first one (exit 2), not run out of memory (exit 1) or take long.
  const std::string commas = save_text("commas.csv", std::string(50u << 20, ',') + "\n");
  const std::string y = save("y.npy", make_problem().y);
  const std::string line = "sh -c \"ulimit -v 1000000; exec '" + std::string(KANTOR_CLI) +
                           "' solve --backend cpu --source '" + commas + "' --target '" + y +
                           "' --epsilon 0.1\" >/dev/null 2>'" + dir_ + "/err.txt'";
  const int status = std::system(line.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << read_text(dir_ + "/err.txt");
  EXPECT_NE(read_text(dir_ + "/err.txt")
                .find("--source: '" + commas + "': line 1, column 1: empty field"),
            std::string::npos)
      << read_text(dir_ + "/err.txt");
}

TEST_F(CliTest, FifosAndDevicesAreRefusedWithoutBlocking) {
  const std::string fifo = path("fifo.npy"), dev = path("dev.csv");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(::symlink("/dev/zero", dev.c_str()), 0);
  const std::string y = save("y.npy", make_problem().y);
  // timeout: a reader that opened the FIFO would block forever.
  const std::vector<BadCase> cases = {
      {"solve --backend cpu --source " + fifo + " --target " + y + " --epsilon 0.1",
       {"kantor solve: error: --source: cannot open '" + fifo + "': it is a FIFO",
        "expected a regular file"}},
      {"solve --backend cpu --source " + y + " --target " + dev + " --epsilon 0.1",
       {"--target: cannot open '" + dev + "': it is a character device"}},
      {"birkhoff --backend cpu --input " + fifo, {"kantor birkhoff: error: cannot open '" + fifo}},
  };
  for (const BadCase& c : cases) {
    const Result r = run(c.args, "timeout 20 ");
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    for (const std::string& e : c.expected)
      EXPECT_NE(r.err.find(e), std::string::npos) << "expected '" << e << "' in: " << r.err;
  }
}

TEST_F(CliTest, BirkhoffOutputExtensionIsCaseInsensitiveAndEmptyBatchIsRefused) {
  const std::string bk = save_logits(path("bk.npy"), 2, 4, std::vector<double>(32, 0.0));
  const Result r = run("birkhoff --backend cpu --input " + bk + " --output " + out_dir_ + "/P.CSV");
  EXPECT_EQ(r.code, 0) << r.err;
  const io::Array P = io::read_array(out_dir_ + "/P.CSV");
  EXPECT_EQ(P.shape, (std::vector<std::int64_t>{8, 4})) << "B*n rows of n";
  io::write_array(path("empty.npy"), {0, 4, 4}, nullptr);
  const Result e = run("birkhoff --backend cpu --input " + path("empty.npy"));
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("holds no matrices"), std::string::npos) << e.err;
}

}  // namespace

// ---- certificates and numerical honesty (issue 8) -----------------------------------------

namespace {
Cloud make_cloud(std::int64_t n, std::int64_t d, std::vector<double> p) {
  Cloud c;
  c.n = n;
  c.d = d;
  c.p = std::move(p);
  return c;
}
}  // namespace

// The two-point problem at eps = 1e-17 used to "converge" with plan mass 2: refused now, exit 2,
// naming the eps and the smallest eps fp64 resolves for it.
TEST_F(CliTest, EpsBelowTheResolvableRangeIsRefused) {
  const std::string x = save("x2.npy", make_cloud(2, 2, {0, 0, 1, 0}));
  const std::string y = save("y2.npy", make_cloud(2, 2, {0, 1, 1, 1}));
  const Result r = run(kSolveCpu + " --source " + x + " --target " + y + " --epsilon 1e-17");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("problem.epsilon = 1e-17"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("smallest eps fp64 can resolve"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  // fp32: 1e-9 is below fp32's range for unit costs; the message points to fp64.
  const Result f =
      run(kSolveCpu + " --source " + x + " --target " + y + " --epsilon 1e-9 --precision fp32");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("use fp64"), std::string::npos) << f.err;
}

// JSON: epsilon is the eps reached (a solve cut short while annealing is not at the target),
// target_epsilon the target; the certificate's fields are there.
TEST_F(CliTest, JsonReportsTheEpsReachedAndTheCertificate) {
  const Json cut = run_json(kSolveCpu + " --demo --max-iterations 3 --quiet");
  EXPECT_EQ(cut["target_epsilon"].num, 0.05);
  EXPECT_GT(cut["epsilon"].num, 0.05);
  EXPECT_FALSE(cut["converged"].b);
  const Json ok = run_json(kSolveCpu + " --demo --precision fp32 --quiet");
  EXPECT_EQ(ok["epsilon"].num, 0.05);
  EXPECT_TRUE(ok["converged"].b);
  EXPECT_LE(ok["marginal_error"].num, ok["tolerance"].num);
  EXPECT_GT(ok["marginal_error_slack"].num, 0);
  EXPECT_GE(ok["certificates"].num, 1);
  EXPECT_GT(ok["resolvable_epsilon"].num, 0);
  EXPECT_LT(ok["resolvable_epsilon"].num, 1e-5);
}

// Ctrl-C with no convergence check in sight (--check-every 100000) still stops within about a
// second: the flag is polled between row blocks of a pass. Exit 130, nothing written.
TEST_F(CliTest, CtrlCStopsWithinASecondBetweenChecks) {
  const std::vector<std::string> args = {"solve",
                                         "--demo",
                                         "--backend",
                                         "cpu",
                                         "--tolerance",
                                         "1e-300",
                                         "--max-iterations",
                                         "100000",
                                         "--check-every",
                                         "100000",
                                         "--quiet",
                                         "--output-map",
                                         out_dir_ + "/map.npy"};
  const pid_t pid = spawn_cli(args, dir_ + "/stdout.txt", dir_ + "/stderr.txt");
  ASSERT_GT(pid, 0);
  ::usleep(1200 * 1000);
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 130) << read_text(dir_ + "/stderr.txt");
  EXPECT_LT(waited, 1.0);
  EXPECT_TRUE(list_dir(out_dir_).empty());
  EXPECT_EQ(read_text(dir_ + "/stdout.txt"), "");
}

// fp32 with --debias: the self-terms OT(a, a), OT(b, b) are certified on the file's points too
// (their reference coordinates are the same side's; n != m caught a mix-up on the H200).
TEST_F(CliTest, Fp32DivergenceCertifiesEveryTermOnTheFilePoints) {
  const Json j =
      run_json(kSolveCpu + " --demo --precision fp32 --debias --max-iterations 40 --quiet");
  EXPECT_EQ(j["precision"].str, "fp32");
  EXPECT_EQ(j["divergence"].kind, Json::kNumber);
  EXPECT_GE(j["divergence"].num, 0);
  EXPECT_GT(j["marginal_error"].num, 0);
}
