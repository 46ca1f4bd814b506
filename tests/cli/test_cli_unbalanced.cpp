// kantor solve --rho / --rho-source / --rho-target / --reach: unbalanced and semi-unbalanced OT
// from the command line (JSON fields of the transported masses, the divergence, the gradient)
// and bad options (exit 2, the option named).
#include <cmath>
#include <random>
#include <string>

#include "cli/cli_fixture.hpp"

namespace {

using namespace kantor::test::cli;

class CliUnbalancedTest : public CliFixture {
 protected:
  CliUnbalancedTest() : CliFixture("kantor_test_cli_unbalanced_") {}
  void SetUp() override {
    CliFixture::SetUp();
    std::mt19937_64 rng(21);
    std::normal_distribution<double> N(0.0, 1.0);
    std::uniform_real_distribution<double> U(0.5, 1.5);
    Cloud x{60, 2, std::vector<double>(120)}, y{45, 2, std::vector<double>(90)};
    for (double& v : x.p) v = N(rng);
    for (double& v : y.p) v = N(rng) + 0.5;
    std::vector<double> a(60), b(45);
    for (double& v : a) v = U(rng) / 60;  // mass ~1
    for (double& v : b) v = 2 * U(rng) / 45;  // mass ~2
    files_ = " --source " + save("x.npy", x) + " --target " + save("y.npy", y) +
             " --source-weights " + save("a.npy", a) + " --target-weights " + save("b.npy", b);
    for (double v : a) mass_a_ += v;
    for (double v : b) mass_b_ += v;
  }
  std::string files_;
  double mass_a_ = 0, mass_b_ = 0;
};

TEST_F(CliUnbalancedTest, RhoRelaxesBothSidesAndReportsTheMasses) {
  const Json j = run_json("solve --backend cpu --quiet --epsilon 0.1 --rho 1 --tolerance 1e-9" +
                          files_);
  EXPECT_TRUE(j["converged"].b) << j["message"].str;
  EXPECT_EQ(j["rho_source"].num, 1.0);
  EXPECT_EQ(j["rho_target"].num, 1.0);
  EXPECT_NEAR(j["source_mass"].num, mass_a_, 1e-12);
  EXPECT_NEAR(j["target_mass"].num, mass_b_, 1e-12);
  // Between the two masses, near their geometric mean for a large rho / eps.
  EXPECT_GT(j["transported_mass"].num, 0.5 * mass_a_);
  EXPECT_LT(j["transported_mass"].num, mass_b_);
  EXPECT_GE(j["marginal_kl_source"].num, 0.0);
  EXPECT_GT(j["marginal_kl_target"].num, 0.0);
  EXPECT_LE(j["marginal_error"].num, 1e-9);
  EXPECT_NEAR(j["dual_gap"].num, 0.0, 1e-7);
}

TEST_F(CliUnbalancedTest, OneSideRelaxedIsSemiUnbalanced) {
  const Json j = run_json("solve --backend cpu --quiet --epsilon 0.1 --rho-target 0.5 "
                          "--tolerance 1e-9" + files_);
  EXPECT_TRUE(j["converged"].b) << j["message"].str;
  EXPECT_EQ(j["rho_source"].str, "inf");
  EXPECT_EQ(j["rho_target"].num, 0.5);
  // The strict source side is transported whole.
  EXPECT_NEAR(j["transported_mass"].num, mass_a_, 1e-8);
  EXPECT_EQ(j["marginal_kl_source"].num, j["marginal_kl_source"].num);  // a number
}

TEST_F(CliUnbalancedTest, ReachIsGeomLossReachSquaredInItsHalvedCost) {
  const Json j = run_json("solve --backend cpu --quiet --epsilon 0.01 --cost-scale 0.5 --reach 0.7 "
                          "--tolerance 1e-8" + files_);
  EXPECT_TRUE(j["converged"].b) << j["message"].str;
  EXPECT_NEAR(j["rho_source"].num, 0.49, 1e-15);  // 2 c R^2 with c = 1/2
  const Json k = run_json("solve --backend cpu --quiet --epsilon 0.02 --reach 0.7 --tolerance 1e-8" +
                          files_);
  EXPECT_NEAR(k["rho_target"].num, 0.98, 1e-15);
  // The same problem up to the factor 2 of the cost: the value doubles.
  EXPECT_NEAR(k["dual_cost"].num, 2 * j["dual_cost"].num, 1e-6 * std::abs(k["dual_cost"].num));
}

TEST_F(CliUnbalancedTest, DivergenceAndGradient) {
  const std::string grad = out_dir_ + "/grad.npy";
  const Json j = run_json("solve --backend cpu --quiet --epsilon 0.1 --rho 1 --debias "
                          "--tolerance 1e-9 --output-gradient " + grad + files_);
  EXPECT_TRUE(j["converged"].b) << j["message"].str;
  EXPECT_GT(j["divergence"].num, 0.0);
  const kantor::io::Array g = kantor::io::read_matrix(grad, "gradient");
  EXPECT_EQ(g.shape[0], 60);
  EXPECT_EQ(g.shape[1], 2);
}

TEST_F(CliUnbalancedTest, BadOptionsExitTwoNamingTheOption) {
  const BadCase cases[] = {
      {"solve --epsilon 0.1" + files_, {"different total mass", "rho"}},
      {"solve --epsilon 0.1 --rho 0" + files_, {"--rho", "> 0"}},
      {"solve --epsilon 0.1 --rho-source -1" + files_, {"--rho-source"}},
      {"solve --epsilon 0.1 --reach nan" + files_, {"--reach"}},
      {"solve --epsilon 0.1 --rho 1 --rho-target 2" + files_, {"--rho", "--rho-target"}},
      {"solve --epsilon 0.1 --reach 1 --rho 1" + files_, {"--reach", "mutually exclusive"}},
      {"solve --epsilon 0.1 --rho-source 1 --debias" + files_, {"one marginal penalty"}},
      {"bench sinkhorn --n 100 --rho -1", {"--rho"}},
  };
  for (const BadCase& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    for (const std::string& e : c.expected)
      EXPECT_NE(r.err.find(e), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
