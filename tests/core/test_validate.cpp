// Problem validation at the API boundary: every InvalidArgument case, with the field named in
// the message; the same errors from make_oracle and solve_sinkhorn.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/oracle.hpp"
#include "kantor/problem.hpp"
#include "kantor/sinkhorn.hpp"

namespace kantor {
namespace {

struct Arrays {
  std::vector<double> x = {0, 0, 1, 0, 0, 1};  // 3 points in d = 2
  std::vector<double> y = {0, 0, 2, 2};        // 2 points
  std::vector<double> a = {1, 2, 3};           // mass 6
  std::vector<double> b = {4, 2};              // mass 6
  Problem<double> problem() const {
    Problem<double> p;
    p.features().x = host_matrix<const double>(x.data(), 3, 2);
    p.features().y = host_matrix<const double>(y.data(), 2, 2);
    p.a = host_vector<const double>(a.data(), 3);
    p.b = host_vector<const double>(b.data(), 2);
    p.epsilon = 0.5;
    return p;
  }
};

struct BadCase {
  std::string name;
  std::string expect_in_message;
  std::function<void(Arrays*, Problem<double>*)> mutate;
};

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();

std::vector<BadCase> bad_cases() {
  return {
      {"empty_x", "problem.x: empty", [](Arrays*, Problem<double>* p) { p->features().x.rows = 0; }},
      {"empty_y", "problem.y: empty", [](Arrays*, Problem<double>* p) { p->features().y.rows = 0; }},
      {"zero_dim", "dimension 0",
       [](Arrays*, Problem<double>* p) {
         p->features().x.cols = 0;
         p->features().y.cols = 0;
       }},
      {"dim_mismatch", "dimension mismatch", [](Arrays*, Problem<double>* p) { p->features().y.cols = 1; }},
      {"stride_lt_cols", "stride", [](Arrays*, Problem<double>* p) { p->features().x.stride = 1; }},
      {"null_x", "problem.x: null", [](Arrays*, Problem<double>* p) { p->features().x.data = nullptr; }},
      {"nan_x", "problem.x: non-finite", [](Arrays* a, Problem<double>*) { a->x[3] = nan; }},
      {"inf_y", "problem.y: non-finite", [](Arrays* a, Problem<double>*) { a->y[0] = -inf; }},
      {"a_size", "problem.a: 2 weights for 3 points",
       [](Arrays*, Problem<double>* p) { p->a.size = 2; }},
      {"a_null_data", "problem.a", [](Arrays*, Problem<double>* p) { p->a.data = nullptr; }},
      {"negative_a", "problem.a: weight 1", [](Arrays* a, Problem<double>*) { a->a[1] = -2; }},
      {"nan_b", "problem.b: weight 0", [](Arrays* a, Problem<double>*) { a->b[0] = nan; }},
      {"inf_b", "problem.b: weight 1", [](Arrays* a, Problem<double>*) { a->b[1] = inf; }},
      {"zero_mass", "total mass is 0",
       [](Arrays* a, Problem<double>*) {
         a->b = {0, 0};
       }},
      {"unequal_mass", "different total mass", [](Arrays* a, Problem<double>*) { a->b[0] = 4.1; }},
      {"uniform_vs_unequal", "different total mass",
       [](Arrays*, Problem<double>* p) { p->b = {}; }},  // uniform b has mass 1, a has 6
      {"cost_scale_zero", "cost.scale", [](Arrays*, Problem<double>* p) { p->features().scale = 0; }},
      {"cost_scale_nan", "cost.scale", [](Arrays*, Problem<double>* p) { p->features().scale = nan; }},
      {"eps_zero", "epsilon", [](Arrays*, Problem<double>* p) { p->epsilon = 0; }},
      {"eps_negative", "epsilon", [](Arrays*, Problem<double>* p) { p->epsilon = -0.1; }},
      {"eps_inf", "epsilon", [](Arrays*, Problem<double>* p) { p->epsilon = inf; }},
      {"eps_nan", "epsilon", [](Arrays*, Problem<double>* p) { p->epsilon = nan; }},
  };
}

class ProblemValidation : public ::testing::TestWithParam<BadCase> {};

TEST_P(ProblemValidation, ThrowsInvalidArgumentNamingTheField) {
  const BadCase& c = GetParam();
  Arrays arrays;
  Problem<double> p = arrays.problem();
  c.mutate(&arrays, &p);
  try {
    validate(p);
    FAIL() << "no exception for " << c.name;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(c.expect_in_message), std::string::npos)
        << "message: " << e.what();
  }
  Context ctx(ContextOptions{Backend::kCpu, 1});
  EXPECT_THROW(make_oracle(ctx, p, Precision::kFp64), InvalidArgument);
  EXPECT_THROW(solve_sinkhorn(ctx, p), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Cases, ProblemValidation, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           return info.param.name;
                         });

TEST(ProblemValidation, AcceptsValidProblems) {
  Arrays arrays;
  Problem<double> p = arrays.problem();
  EXPECT_NO_THROW(validate(p));
  // Masses equal to 1e-6 relative are balanced; zero weights are allowed.
  arrays.b = {4 + 6e-7, 2};
  arrays.a = {0, 3, 3};
  EXPECT_NO_THROW(validate(p));
  // Uniform weights on both sides; a strided x (every other row of a 6 x 2 array).
  std::vector<double> wide = {0, 0, 9, 9, 1, 0, 9, 9, 0, 1, 9, 9};
  Problem<double> q = p;
  q.features().x = MatrixView<const double>{wide.data(), 3, 2, 4, MemorySpace::kHost};
  q.a = {};
  q.b = {};
  EXPECT_NO_THROW(validate(q));
  Problem<float> pf;
  std::vector<float> xf = {0.f, 1.f};
  pf.features().x = host_matrix<const float>(xf.data(), 2, 1);
  pf.features().y = host_matrix<const float>(xf.data(), 2, 1);
  EXPECT_NO_THROW(validate(pf));
  xf[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(validate(pf), InvalidArgument);
}

// Weights are checked in chunks on the host threads: the message still names the first bad
// weight when later chunks hold others (a bad weight in the last chunk is found too), and the
// total (the balance check) does not depend on the thread count.
TEST(ProblemValidation, NamesTheFirstBadWeightOfManyChunks) {
  const std::int64_t n = 300000;  // 5 chunks of 2^16
  std::vector<double> x(static_cast<std::size_t>(n), 0.5), a(static_cast<std::size_t>(n), 1.0);
  Problem<double> p;
  p.features().x = host_matrix<const double>(x.data(), n, 1);
  p.features().y = p.features().x;
  p.epsilon = 0.1;
  p.a = host_vector<const double>(a.data(), n);
  p.b = p.a;
  EXPECT_NO_THROW(validate(p));
  auto message = [&]() -> std::string {
    try {
      validate(p);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "accepted";
  };
  a[std::size_t(n - 1)] = -1;
  EXPECT_NE(message().find("weight 299999 is -1"), std::string::npos) << message();
  a[250000] = nan;
  a[70000] = -3;
  EXPECT_NE(message().find("weight 70000 is -3"), std::string::npos) << message();
  a[1] = inf;
  EXPECT_NE(message().find("weight 1 is inf"), std::string::npos) << message();
  // Balanced to 1e-6: one weight 0.2 heavier in 300000 (6.7e-7 relative) passes, 0.4 does not.
  std::vector<double> b(a.size(), 1.0);
  std::fill(a.begin(), a.end(), 1.0);
  b[123456] = 1.2;
  p.b = host_vector<const double>(b.data(), n);
  EXPECT_NO_THROW(validate(p));
  b[123456] = 1.4;
  EXPECT_NE(message().find("different total mass"), std::string::npos) << message();
}

// LabelAugmented costs: every defect of labels and table is named (field and value).
TEST(ProblemValidation, LabelAugmentedDefectsAreNamed) {
  Arrays arrays;
  std::vector<std::int32_t> lx = {0, 1, 2}, ly = {2, 0};
  std::vector<double> W = {0, 1, 2, 1, 0, 3, 2, 3, 0};
  auto make = [&]() {
    Problem<double> p = arrays.problem();
    LabelAugmented<double> l;
    l.features = p.features();
    l.labels_x = host_vector<const std::int32_t>(lx.data(), 3);
    l.labels_y = host_vector<const std::int32_t>(ly.data(), 2);
    l.table = host_matrix<const double>(W.data(), 3, 3);
    l.table_scale = 0.5;
    p.cost = l;
    return p;
  };
  EXPECT_NO_THROW(validate(make()));
  auto expect = [&](const char* what, auto mutate) {
    Problem<double> p = make();
    mutate(std::get<LabelAugmented<double>>(p.cost));
    try {
      validate(p);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect("labels_x: 2 labels for 3 points", [](auto& l) { l.labels_x.size = 2; });
  expect("label 5 at point 1", [&](auto&) { ly[1] = 5; });
  ly[1] = 0;
  expect("label -1 at point 2", [&](auto&) { lx[2] = -1; });
  lx[2] = 2;
  expect("must be L x L", [](auto& l) { l.table.cols = 2; });
  expect("entry (1, 2) is -1", [&](auto&) { W[5] = -1; });
  W[5] = std::numeric_limits<double>::quiet_NaN();
  expect("entry (1, 2) is nan", [](auto&) {});
  W[5] = 3;
  expect("table_scale must be finite and >= 0", [](auto& l) { l.table_scale = -1; });
  expect("labels_y: null data", [](auto& l) { l.labels_y.data = nullptr; });
}

// Problems the library builds from validated ones (detail::validate_clouds_checked): shapes,
// weights and scalars still checked, the coordinates not scanned again. Also: validate() names
// the first non-finite coordinate of a cloud of many chunks, and of the first bad cloud in order
// (x before y before the reference clouds), as a serial scan would; malformed shapes give
// InvalidArgument before any scan.
TEST(ProblemValidation, CloudsCheckedSkipsTheCoordinatesOnly) {
  const std::int64_t n = 200000, m = 150000;  // clouds of several chunks
  std::vector<double> x(static_cast<std::size_t>(n), 0.5), y(static_cast<std::size_t>(m), 0.25);
  std::vector<double> a(static_cast<std::size_t>(n), 1.0 / double(n));
  Problem<double> p;
  p.features().x = host_matrix<const double>(x.data(), n, 1);
  p.features().y = host_matrix<const double>(y.data(), m, 1);
  p.epsilon = 0.1;
  auto message = [&](bool checked) -> std::string {
    try {
      if (checked)
        detail::validate_clouds_checked(p);
      else
        validate(p);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message(false), "accepted");
  EXPECT_EQ(message(true), "accepted");
  y[std::size_t(m - 2)] = nan;
  y[100000] = inf;
  x[199999] = -inf;
  EXPECT_NE(message(false).find("problem.x: non-finite coordinate -inf at point 199999"),
            std::string::npos)
      << message(false);
  x[199999] = 0.5;
  EXPECT_NE(message(false).find("problem.y: non-finite coordinate inf at point 100000"),
            std::string::npos)
      << message(false);
  EXPECT_EQ(message(true), "accepted");  // coordinates not scanned
  // Weights, shapes and scalars are.
  a[7] = -1;
  p.a = host_vector<const double>(a.data(), n);
  EXPECT_NE(message(true).find("weight 7 is -1"), std::string::npos) << message(true);
  a[7] = 1.0 / double(n);
  p.epsilon = 0;
  EXPECT_NE(message(true).find("epsilon"), std::string::npos) << message(true);
  p.epsilon = 0.1;
  p.features().y = host_matrix<const double>(y.data(), m / 2, 2);
  EXPECT_NE(message(true).find("dimension mismatch"), std::string::npos) << message(true);
  p.features().y = host_matrix<const double>(y.data(), m, 1);
  // The reference clouds come after x and y: a bad x is named first, then the reference's.
  std::vector<double> xr = x, yr = y;
  xr[150001] = nan;
  p.reference_x = host_matrix<const double>(xr.data(), n, 1);
  p.reference_y = host_matrix<const double>(yr.data(), m, 1);
  EXPECT_NE(message(false).find("problem.y: non-finite coordinate inf at point 100000"),
            std::string::npos)
      << message(false);
  y[100000] = 0.25;
  y[std::size_t(m - 2)] = 0.25;
  EXPECT_NE(message(false).find("problem.reference_x: non-finite coordinate nan at point 150001"),
            std::string::npos)
      << message(false);
  EXPECT_EQ(message(true), "accepted");
  // A negative row count with weights of that count: the shape's message, not a scan's failure.
  p.reference_x = {};
  p.reference_y = {};
  p.features().x = host_matrix<const double>(x.data(), -5, 1);
  p.a = VectorView<const double>{a.data(), -5, MemorySpace::kHost};
  EXPECT_NE(message(false).find("problem.x: empty point cloud"), std::string::npos)
      << message(false);
}

}  // namespace
}  // namespace kantor
