// kantor solve --solver multiscale and kantor bench solve: the JSON fields of a multiscale solve
// (certified, with the dense float64 check below the reported bound), the block-mask picture,
// and bad options (exit 2, the option named).
#include <algorithm>
#include <random>
#include <string>

#include "cli/cli_fixture.hpp"

namespace {

using namespace kantor::test::cli;

class CliMultiscaleTest : public CliFixture {
 protected:
  CliMultiscaleTest() : CliFixture("kantor_test_cli_multiscale_") {}
};

Cloud uniform(std::mt19937_64& rng, std::int64_t n, std::int64_t d, bool squeeze) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  Cloud c{n, d, std::vector<double>(std::size_t(n * d))};
  for (double& v : c.p) {
    v = U(rng);
    if (squeeze) v = (0.8 * v + 0.1) * (0.8 * v + 0.1);
  }
  return c;
}

TEST_F(CliMultiscaleTest, SolveReportsTheLevelsAndDrawsTheMask) {
  std::mt19937_64 rng(4);
  const std::string x = save("x.npy", uniform(rng, 1500, 2, false));
  const std::string y = save("y.npy", uniform(rng, 1200, 2, true));
  const std::string mask = out_dir_ + "/mask.svg";
  const Json j = run_json("solve --backend cpu --quiet --source " + x + " --target " + y +
                          " --epsilon 0.002 --tolerance 1e-3 --solver multiscale "
                          "--multiscale-max-density 1 --verify --output-mask " + mask);
  EXPECT_EQ(j["solver"].str, "multiscale");
  EXPECT_TRUE(j["converged"].b) << j["message"].str;
  EXPECT_GE(j["multiscale_levels"].num, 1);
  EXPECT_GT(j["kept_fraction"].num, 0.0);
  EXPECT_LE(j["kept_fraction"].num, 1.0);
  EXPECT_GT(j["fine_updates"].num, 0);
  EXPECT_GE(j["truncation_bound"].num, 0.0);
  EXPECT_LE(j["verified_error"].num, j["marginal_error"].num);
  EXPECT_LE(j["marginal_error"].num, 1e-3);
  const std::string svg = read_text(mask);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("block mask"), std::string::npos);
  EXPECT_NE(svg.find("<rect x="), std::string::npos) << "kept tiles drawn";
}

TEST_F(CliMultiscaleTest, AutoStaysDenseOnSmallProblemsAndSaysWhy) {
  std::mt19937_64 rng(5);
  const std::string x = save("x.npy", uniform(rng, 300, 3, false));
  const std::string y = save("y.npy", uniform(rng, 200, 3, true));
  const Json j = run_json("solve --backend cpu --quiet --source " + x + " --target " + y +
                          " --epsilon 0.05 --tolerance 1e-6");
  EXPECT_EQ(j["solver"].str, "dense");
  EXPECT_NE(j["solver_note"].str.find("auto: dense"), std::string::npos) << j["solver_note"].str;
}

TEST_F(CliMultiscaleTest, BenchSolveWritesOneJsonObject) {
  const Json j = run_json("bench solve --backend cpu --n 2048 --d 2 --epsilon 0.005 --tolerance "
                          "1e-2 --repeats 2");
  EXPECT_EQ(j["benchmark"].str, "solve");
  EXPECT_EQ(j["solver"].str, "multiscale");
  EXPECT_TRUE(j["converged"].b);
  EXPECT_GT(j["warm_s_median"].num, 0.0);
  EXPECT_GT(j["cold_s"].num, 0.0);
  EXPECT_EQ(j["points_stage"].str, "auto");
  // Without the points stage the screen keeps at least as much.
  const Json off = run_json("bench solve --backend cpu --n 2048 --d 2 --epsilon 0.005 --tolerance "
                            "1e-2 --repeats 1 --points-stage off");
  EXPECT_TRUE(off["converged"].b);
  EXPECT_GE(off["kept_fraction"].num, j["kept_fraction"].num);
  // "engine" on the CPU engine (no descent of its own): the host's stage, as auto there.
  const Json eng = run_json("bench solve --backend cpu --n 2048 --d 2 --epsilon 0.005 --tolerance "
                            "1e-2 --repeats 1 --points-stage engine");
  EXPECT_EQ(eng["points_stage"].str, "engine");
  EXPECT_EQ(eng["kept_fraction"].num, j["kept_fraction"].num);
  EXPECT_EQ(eng["dual_cost"].num, j["dual_cost"].num);
}

// --phases: the last run's phase timings as a JSON array, the finest level's in order (copies
// first, results last), adding up to no more than the run, and its finest level's iteration
// records (the last one certified); both absent without the option.
TEST_F(CliMultiscaleTest, BenchSolvePhasesTimeTheLastRun) {
  const Json j = run_json("bench solve --backend cpu --n 2048 --d 2 --epsilon 0.005 --tolerance "
                          "1e-2 --repeats 2 --phases");
  ASSERT_EQ(j["phases"].kind, Json::kArray);
  std::vector<std::string> finest;
  double sum = 0;
  for (const Json& p : j["phases"].items) {
    EXPECT_GE(p["seconds"].num, 0.0);
    if (p["n"].num != 2048) continue;
    finest.push_back(p["phase"].str);
    sum += p["seconds"].num;
  }
  ASSERT_FALSE(finest.empty());
  EXPECT_EQ(finest.front(), "copies");
  EXPECT_EQ(finest.back(), "results");
  ASSERT_EQ(j["records"].kind, Json::kArray);
  ASSERT_FALSE(j["records"].items.empty());
  const Json& last = j["records"].items.back();
  ASSERT_EQ(last.items.size(), 6u);  // iteration, seconds, eps, residual, certificate, dual cost
  EXPECT_EQ(last.items[0].num, j["iterations"].num);
  EXPECT_EQ(last.items[2].num, j["epsilon"].num);
  EXPECT_GT(last.items[3].num, 0.0);                       // the engine's residual
  EXPECT_EQ(last.items[4].num, j["marginal_error"].num);  // the certificate that ended it
  for (const char* name : {"coarse", "lift", "engine", "screen", "iteration", "certificate"})
    EXPECT_NE(std::find(finest.begin(), finest.end(), name), finest.end()) << name;
  EXPECT_LE(sum, j["warm_s_median"].num * 1.001 + 1e-4);
  const Json plain = run_json("bench solve --backend cpu --n 2048 --d 2 --epsilon 0.005 "
                              "--tolerance 1e-2 --repeats 1");
  EXPECT_FALSE(plain.has("phases"));
  EXPECT_FALSE(plain.has("records"));
}

// --gaussian-lift on|off: MultiscaleOptions::gaussian_lift (on by default), asked for in the
// JSON's gaussian_lift_asked; at eps 0.02 on 2,048 points in 2-D the finest level takes it (its
// note's lift entry says "Gaussian"; truncated passes forced, the screen keeping 83%), so its
// first pair differs and the solve still converges. Another value exits 2 naming the option.
TEST_F(CliMultiscaleTest, BenchSolveGaussianLiftIsAnOption) {
  const std::string args = "bench solve --backend cpu --n 2048 --d 2 --epsilon 0.02 --tolerance "
                           "1e-2 --repeats 1 --phases --max-density 1";
  const Json lifted = run_json(args);
  const Json plain = run_json(args + " --gaussian-lift off");
  ASSERT_EQ(plain["gaussian_lift_asked"].kind, Json::kBool);
  ASSERT_EQ(lifted["gaussian_lift_asked"].kind, Json::kBool);
  EXPECT_FALSE(plain["gaussian_lift_asked"].b);
  EXPECT_TRUE(lifted["gaussian_lift_asked"].b);
  EXPECT_EQ(plain["solver_note"].str.find("Gaussian"), std::string::npos)
      << plain["solver_note"].str;
  EXPECT_NE(lifted["solver_note"].str.find("(Gaussian, oracles"), std::string::npos)
      << lifted["solver_note"].str;
  EXPECT_TRUE(plain["converged"].b);
  EXPECT_TRUE(lifted["converged"].b);
  ASSERT_FALSE(plain["records"].items.empty());
  ASSERT_FALSE(lifted["records"].items.empty());
  ASSERT_GE(plain["records"].items.front().items.size(), 4u);
  ASSERT_GE(lifted["records"].items.front().items.size(), 4u);
  EXPECT_NE(plain["records"].items.front().items[3].num,
            lifted["records"].items.front().items[3].num);
}

TEST_F(CliMultiscaleTest, BadOptionsExitTwoNamingTheOption) {
  const BadCase cases[] = {
      {"solve --demo --solver sparse", {"--solver", "sparse"}},
      {"solve --demo --multiscale-cell 1", {"--multiscale-cell"}},
      {"solve --demo --multiscale-max-density 0", {"--multiscale-max-density"}},
      {"solve --demo --output-mask " + out_dir_ + "/m.png", {"--output-mask", "svg"}},
      {"bench solve --n 0", {"--n"}},
      {"bench solve --tolerance -1", {"--tolerance"}},
      {"bench solve --solver nope", {"--solver"}},
      {"bench solve --max-density 0", {"--max-density"}},
      {"bench solve --dense-pairs 0", {"--dense-pairs"}},
      {"bench solve --max-density 1.5", {"--max-density"}},
      {"bench solve --points-stage maybe", {"--points-stage", "maybe"}},
      {"bench solve --gaussian-lift maybe", {"--gaussian-lift", "maybe"}},
      {"bench sinkhorn --n 100 --hvp --cg-max-iterations 0", {"--cg-max-iterations"}},
  };
  for (const BadCase& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    for (const std::string& e : c.expected) EXPECT_NE(r.err.find(e), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
