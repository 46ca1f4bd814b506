// Argument validation of the derivative entry points: InvalidArgument, before any work, with a
// message naming the field (directions, potentials and outputs of the wrong shape, non-finite
// directions, invalid options, a LabelAugmented problem).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "derivatives/derivative_cases.hpp"

namespace kantor::testing {
namespace {

constexpr std::int64_t kN = 6, kM = 5, kD = 2;

struct Fixture {
  Context ctx = cpu_context();
  LibRun<double> run;
  LibDivRun<double> div;
  Fixture()
      : run(ctx, make_raw(DerivCase{"bad", kN, kM, kD, 0.3, 1.0, true}), Precision::kFp64,
            SinkhornOptions{}),
        div(ctx, make_raw(DerivCase{"bad", kN, kM, kD, 0.3, 1.0, true}), Precision::kFp64,
            SinkhornOptions{}) {}
};

Potentials<double> potentials_of_size(const Context& ctx, std::int64_t n, std::int64_t m,
                                      double eps) {
  Potentials<double> p;
  p.f = Buffer<double>(ctx, n);
  p.g = Buffer<double>(ctx, m);
  for (std::int64_t i = 0; i < n; ++i) p.f.data()[i] = 0;
  for (std::int64_t j = 0; j < m; ++j) p.g.data()[j] = 0;
  p.epsilon = eps;
  return p;
}

TEST(DerivativesBadInput, HvpDirectionOfTheWrongShape) {
  Fixture fx;
  std::vector<double> A(static_cast<std::size_t>((kN + 1) * (kD + 1)), 1.0), out(A.size(), 0.0);
  for (auto shape : {std::pair<std::int64_t, std::int64_t>{kN + 1, kD},
                     std::pair<std::int64_t, std::int64_t>{kN - 1, kD},
                     std::pair<std::int64_t, std::int64_t>{kN, kD + 1}}) {
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.run.solver->hvp(fx.run.pot, host_matrix<const double>(A.data(), shape.first, shape.second),
                             host_matrix(out.data(), kN, kD));
        },
        {"direction"}));
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.div.solver->divergence_hvp(
              fx.div.pot, host_matrix<const double>(A.data(), shape.first, shape.second),
              host_matrix(out.data(), kN, kD));
        },
        {"direction"}));
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.run.solver->inverse_hvp(fx.run.pot,
                                     host_matrix<const double>(A.data(), shape.first, shape.second),
                                     host_matrix(out.data(), kN, kD));
        },
        {"g"}));
  }
  // An empty direction.
  EXPECT_TRUE(throws_invalid(
      [&] {
        fx.run.solver->hvp(fx.run.pot, MatrixView<const double>{}, host_matrix(out.data(), kN, kD));
      },
      {"direction"}));
}

TEST(DerivativesBadInput, HvpOutputOfTheWrongShape) {
  Fixture fx;
  std::vector<double> A(static_cast<std::size_t>(kN * kD), 1.0), out(static_cast<std::size_t>((kN + 1) * (kD + 1)), 0.0);
  for (auto shape : {std::pair<std::int64_t, std::int64_t>{kN + 1, kD},
                     std::pair<std::int64_t, std::int64_t>{kN, kD - 1}}) {
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.run.solver->hvp(fx.run.pot, host_matrix<const double>(A.data(), kN, kD),
                             host_matrix(out.data(), shape.first, shape.second));
        },
        {"out"}));
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.div.solver->divergence_hvp(fx.div.pot, host_matrix<const double>(A.data(), kN, kD),
                                        host_matrix(out.data(), shape.first, shape.second));
        },
        {"out"}));
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.run.solver->inverse_hvp(fx.run.pot, host_matrix<const double>(A.data(), kN, kD),
                                     host_matrix(out.data(), shape.first, shape.second));
        },
        {"out"}));
  }
  EXPECT_TRUE(throws_invalid(
      [&] {
        fx.run.solver->hvp(fx.run.pot, host_matrix<const double>(A.data(), kN, kD),
                           MatrixView<double>{});
      },
      {"out"}));
}

TEST(DerivativesBadInput, NonFiniteDirection) {
  Fixture fx;
  for (double bad : {std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    std::vector<double> A(static_cast<std::size_t>(kN * kD), 1.0), out(A.size(), 0.0);
    A[3] = bad;
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.run.solver->hvp(fx.run.pot, host_matrix<const double>(A.data(), kN, kD),
                             host_matrix(out.data(), kN, kD));
        },
        {"direction", "finite"}));
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.div.solver->divergence_hvp(fx.div.pot, host_matrix<const double>(A.data(), kN, kD),
                                        host_matrix(out.data(), kN, kD));
        },
        {"direction", "finite"}));
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.run.solver->inverse_hvp(fx.run.pot, host_matrix<const double>(A.data(), kN, kD),
                                     host_matrix(out.data(), kN, kD));
        },
        {"g", "finite"}));
    for (double e : out) EXPECT_EQ(e, 0.0) << "output written before the validation";
  }
}

TEST(DerivativesBadInput, PotentialsOfTheWrongSize) {
  Fixture fx;
  std::vector<double> A(static_cast<std::size_t>(kN * kD), 1.0), out(A.size(), 0.0);
  std::vector<double> gx(static_cast<std::size_t>(kN * kD));
  GradientOutput<double> gout;
  gout.x = host_matrix(gx.data(), kN, kD);
  for (auto sizes : {std::pair<std::int64_t, std::int64_t>{kN + 1, kM},
                     std::pair<std::int64_t, std::int64_t>{kN, kM - 1},
                     std::pair<std::int64_t, std::int64_t>{0, 0}}) {
    const Potentials<double> bad = potentials_of_size(fx.ctx, sizes.first, sizes.second, 0.3);
    EXPECT_TRUE(throws_invalid([&] { fx.run.solver->gradient(bad, gout); }, {"potential|potentials"}));
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.run.solver->hvp(bad, host_matrix<const double>(A.data(), kN, kD),
                             host_matrix(out.data(), kN, kD));
        },
        {"potential|potentials"}));
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.run.solver->inverse_hvp(bad, host_matrix<const double>(A.data(), kN, kD),
                                     host_matrix(out.data(), kN, kD));
        },
        {"potential|potentials"}));
  }
  // The divergence's self-problems: the (x, x) potentials must have size n twice, (y, y) m.
  {
    DivergencePotentials<double> dp;
    dp.xy = potentials_of_size(fx.ctx, kN, kM, 0.3);
    dp.xx = potentials_of_size(fx.ctx, kN, kM, 0.3);  // wrong: g of (x, x) has n entries
    dp.yy = potentials_of_size(fx.ctx, kM, kM, 0.3);
    EXPECT_TRUE(throws_invalid([&] { fx.div.solver->divergence_gradient(dp, gout); },
                               {"potential|potentials"}));
    EXPECT_TRUE(throws_invalid(
        [&] {
          fx.div.solver->divergence_hvp(dp, host_matrix<const double>(A.data(), kN, kD),
                                        host_matrix(out.data(), kN, kD));
        },
        {"potential|potentials"}));
  }
  {
    DivergencePotentials<double> dp;
    dp.xy = potentials_of_size(fx.ctx, kN, kM, 0.3);
    dp.xx = potentials_of_size(fx.ctx, kN, kN, 0.3);
    dp.yy = potentials_of_size(fx.ctx, kN, kN, 0.3);  // wrong: (y, y) has m entries
    EXPECT_TRUE(throws_invalid([&] { fx.div.solver->divergence_gradient(dp, gout); },
                               {"potential|potentials"}));
  }
  // Non-finite potentials.
  {
    Potentials<double> bad = potentials_of_size(fx.ctx, kN, kM, 0.3);
    bad.f.data()[1] = std::numeric_limits<double>::quiet_NaN();
    EXPECT_TRUE(throws_invalid([&] { fx.run.solver->gradient(bad, gout); },
                               {"potential|potentials|f", "finite"}));
  }
}

TEST(DerivativesBadInput, GradientOutputsOfTheWrongShape) {
  Fixture fx;
  std::vector<double> buf(static_cast<std::size_t>((kN + kM + 2) * (kD + 2)), 0.0);
  auto expect_bad = [&](const GradientOutput<double>& o, const std::string& field) {
    EXPECT_TRUE(throws_invalid([&] { fx.run.solver->gradient(fx.run.pot, o); }, {field}))
        << field;
    EXPECT_TRUE(throws_invalid([&] { fx.div.solver->divergence_gradient(fx.div.pot, o); }, {field}))
        << field;
  };
  {
    GradientOutput<double> o;
    o.x = host_matrix(buf.data(), kN + 1, kD);
    expect_bad(o, "out.x");
  }
  {
    GradientOutput<double> o;
    o.x = host_matrix(buf.data(), kN, kD + 1);
    expect_bad(o, "out.x");
  }
  {
    GradientOutput<double> o;
    o.y = host_matrix(buf.data(), kN, kD);  // y is m x d
    expect_bad(o, "out.y");
  }
  {
    GradientOutput<double> o;
    o.a = host_vector(buf.data(), kM);  // a has n entries
    expect_bad(o, "out.a");
  }
  {
    GradientOutput<double> o;
    o.b = host_vector(buf.data(), kN);  // b has m entries
    expect_bad(o, "out.b");
  }
  // The right shapes work and leave the empty blocks alone.
  GradientOutput<double> ok;
  ok.a = host_vector(buf.data(), kN);
  EXPECT_NO_THROW(fx.run.solver->gradient(fx.run.pot, ok));
}

TEST(DerivativesBadInput, InvalidOptions) {
  Fixture fx;
  std::string why;
  HvpOptions h;
  EXPECT_TRUE(h.is_valid(&why)) << why;
  h.tolerance = 0;
  EXPECT_FALSE(h.is_valid(&why));
  EXPECT_TRUE(has_word(why, "tolerance")) << why;
  std::vector<double> A(static_cast<std::size_t>(kN * kD), 1.0), out(A.size(), 0.0);
  EXPECT_TRUE(throws_invalid(
      [&] {
        fx.run.solver->hvp(fx.run.pot, host_matrix<const double>(A.data(), kN, kD),
                           host_matrix(out.data(), kN, kD), h);
      },
      {"tolerance"}));
  HvpOptions h2;
  h2.max_iterations = 0;
  EXPECT_FALSE(h2.is_valid(&why));
  EXPECT_TRUE(has_word(why, "max_iterations")) << why;
  HvpOptions h3;
  h3.check_every = 0;
  EXPECT_FALSE(h3.is_valid(&why));
  EXPECT_TRUE(has_word(why, "check_every")) << why;
  HvpOptions h4;
  h4.tolerance = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(h4.is_valid(&why));

  InverseHvpOptions io;
  EXPECT_TRUE(io.is_valid(&why)) << why;
  io.tolerance = -1;
  EXPECT_FALSE(io.is_valid(&why));
  EXPECT_TRUE(throws_invalid(
      [&] {
        fx.run.solver->inverse_hvp(fx.run.pot, host_matrix<const double>(A.data(), kN, kD),
                                   host_matrix(out.data(), kN, kD), io);
      },
      {"tolerance"}));
  InverseHvpOptions io2;
  io2.hvp.max_iterations = -3;
  EXPECT_FALSE(io2.is_valid(&why));
  EXPECT_TRUE(has_word(why, "max_iterations")) << why;
}

TEST(DerivativesBadInput, LabelAugmentedCostIsRefused) {
  Context ctx = cpu_context();
  const RawData raw = make_raw(DerivCase{"labels", kN, kM, kD, 0.3, 1.0, true});
  const PointData<double> data = raw.data<double>();
  const std::vector<std::int32_t> lx = {0, 1, 0, 1, 0, 1}, ly = {1, 0, 1, 0, 1};
  const std::vector<double> W = {0.0, 1.0, 1.0, 0.0};
  Problem<double> p = data.problem();
  LabelAugmented<double> la;
  la.features = p.features();
  la.labels_x = host_vector<const std::int32_t>(lx.data(), kN);
  la.labels_y = host_vector<const std::int32_t>(ly.data(), kM);
  la.table = host_matrix<const double>(W.data(), 2, 2);
  la.table_scale = 0.5;
  p.cost = la;
  SinkhornSolver<double> solver(ctx, p);
  Potentials<double> pot;
  ASSERT_TRUE(solver.solve(SinkhornOptions{}, &pot).converged());
  std::vector<double> gx(static_cast<std::size_t>(kN * kD)), A(gx.size(), 1.0), out(gx.size());
  GradientOutput<double> o;
  o.x = host_matrix(gx.data(), kN, kD);
  EXPECT_TRUE(throws_invalid([&] { solver.gradient(pot, o); }, {"label|labels|label-augmented|labelaugmented"}));
  EXPECT_TRUE(throws_invalid(
      [&] {
        solver.hvp(pot, host_matrix<const double>(A.data(), kN, kD), host_matrix(out.data(), kN, kD));
      },
      {"label|labels|label-augmented|labelaugmented"}));
  EXPECT_TRUE(throws_invalid(
      [&] {
        solver.inverse_hvp(pot, host_matrix<const double>(A.data(), kN, kD),
                           host_matrix(out.data(), kN, kD));
      },
      {"label|labels|label-augmented|labelaugmented"}));
  DivergencePotentials<double> dp;
  EXPECT_TRUE(throws_invalid([&] { solver.divergence_gradient(dp, o); }, {"label|labels|label-augmented|labelaugmented"}));
  EXPECT_TRUE(throws_invalid(
      [&] {
        solver.divergence_hvp(dp, host_matrix<const double>(A.data(), kN, kD),
                              host_matrix(out.data(), kN, kD));
      },
      {"label|labels|label-augmented|labelaugmented"}));
}

}  // namespace
}  // namespace kantor::testing
