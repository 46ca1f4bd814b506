// prepare_problem_scalars (lib/costs/problem_data.hpp): the scalars of prepare_problem_data bit for
// bit, without its copies, on every kind of host problem the CUDA engine builds this way (weights
// given, uniform, with zeros, as given for an unbalanced problem; one cloud as both sides; a
// strided view; a reference); the copies the engine derives from them (x = T(x - center),
// a_ref = a / total) equal the host's. Refuses a label-augmented cost.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kantor/error.hpp"
#include "kantor/problem.hpp"
#include "lib/costs/problem_data.hpp"

namespace kantor {
namespace {

template <class T>
struct Data {
  std::int64_t n = 0, m = 0, d = 0, stride = 0;
  std::vector<T> x, y, a, b;
  std::vector<double> rx, ry;
};

template <class T>
Data<T> make(std::int64_t n, std::int64_t m, std::int64_t d, std::int64_t stride, unsigned seed) {
  Data<T> s;
  s.n = n, s.m = m, s.d = d, s.stride = stride;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-3.0, 5.0), w(0.0, 2.0);
  s.x.assign(std::size_t(n * stride), T(0));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < d; ++k) s.x[std::size_t(i * stride + k)] = T(u(rng) + 0.1 * k);
  s.y.resize(std::size_t(m * d));
  for (auto& v : s.y) v = T(0.5 * u(rng));
  s.a.resize(std::size_t(n));
  for (auto& v : s.a) v = T(w(rng));
  s.a[3] = T(0);  // a masked point
  s.b.resize(std::size_t(m));
  for (auto& v : s.b) v = T(w(rng));
  // Equal masses (a balanced problem): b rescaled to a's total.
  double ta = 0, tb = 0;
  for (const T v : s.a) ta += double(v);
  for (const T v : s.b) tb += double(v);
  for (auto& v : s.b) v = T(double(v) * ta / tb);
  s.rx.resize(std::size_t(n * d));
  for (auto& v : s.rx) v = u(rng);
  s.ry.resize(std::size_t(m * d));
  for (auto& v : s.ry) v = u(rng);
  return s;
}

template <class T>
void expect_scalars_match(const Problem<T>& p, const std::string& what) {
  SCOPED_TRACE(what);
  const PreparedProblem<T> full = prepare_problem_data(p);
  const PreparedProblem<T> light = prepare_problem_scalars(p);
  EXPECT_FALSE(full.scalars_only);
  EXPECT_TRUE(light.scalars_only);
  EXPECT_TRUE(light.x.empty() && light.y.empty() && light.a.empty() && light.la.empty() &&
              light.x_ref.empty() && light.a_ref.empty());
  EXPECT_EQ(light.n, full.n);
  EXPECT_EQ(light.m, full.m);
  EXPECT_EQ(light.d, full.d);
  EXPECT_EQ(light.same_clouds, full.same_clouds);
  EXPECT_EQ(light.center, full.center);
  EXPECT_EQ(light.diameter, full.diameter);
  EXPECT_EQ(light.cost_scale, full.cost_scale);
  EXPECT_EQ(light.max_sq_norm, full.max_sq_norm);
  EXPECT_EQ(light.max_cost, full.max_cost);
  EXPECT_EQ(light.mass_a, full.mass_a);
  EXPECT_EQ(light.mass_b, full.mass_b);
  EXPECT_EQ(light.rho_a, full.rho_a);
  EXPECT_EQ(light.rho_b, full.rho_b);
  // The engine's derivations from the caller's views (lib/cuda/operands.hpp) give the host's
  // copies: the weights' double and T values and the centred cloud.
  const SqEuclidean<T>& f = p.features();
  for (int side = 0; side < 2; ++side) {
    const VectorView<const T>& w = side ? p.b : p.a;
    const std::int64_t rows = side ? full.m : full.n;
    const double total = side ? light.weight_total_b : light.weight_total_a;
    const auto& ref = side ? full.b_ref : full.a_ref;
    const auto& narrow = side ? full.b : full.a;
    for (std::int64_t i = 0; i < rows; ++i) {
      const double r = w.data ? double(w[i]) / total : 1.0 / double(rows);
      ASSERT_EQ(r, ref[std::size_t(i)]) << "side " << side << " weight " << i;
      ASSERT_EQ(T(r), narrow[std::size_t(i)]) << "side " << side << " weight " << i;
    }
  }
  for (std::int64_t i = 0; i < full.n; ++i)
    for (std::int64_t k = 0; k < full.d; ++k)
      ASSERT_EQ(T(double(f.x(i, k)) - light.center[std::size_t(k)]),
                full.x[std::size_t(i * full.d + k)])
          << "x " << i << ", " << k;
}

template <class T>
void check_kinds() {
  const Data<T> s = make<T>(301, 157, 3, 5, 17);
  Problem<T> p;
  p.features().x = {s.x.data(), s.n, s.d, s.stride, MemorySpace::kHost};  // strided
  p.features().y = host_matrix<const T>(s.y.data(), s.m, s.d);
  p.features().scale = T(0.75);
  p.a = host_vector<const T>(s.a.data(), s.n);
  p.b = host_vector<const T>(s.b.data(), s.m);
  p.epsilon = 0.1;
  expect_scalars_match(p, "weights given, strided x");
  Problem<T> u = p;
  u.a = {};
  u.b = {};
  expect_scalars_match(u, "uniform weights");
  Problem<T> ub = p;
  ub.rho_a = 0.5;
  ub.rho_b = 2.0;
  expect_scalars_match(ub, "unbalanced (weights as given)");
  Problem<T> r = p;
  r.reference_x = host_matrix<const double>(s.rx.data(), s.n, s.d);
  r.reference_y = host_matrix<const double>(s.ry.data(), s.m, s.d);
  expect_scalars_match(r, "with a reference");
  Problem<T> self = u;
  self.features().y = self.features().x;
  expect_scalars_match(self, "one cloud as both sides");
  // Several chunks of the ordered sums (2^16 weights each) and of the fused regions' loops.
  const Data<T> big = make<T>(300001, 200003, 2, 2, 23);
  Problem<T> pb;
  pb.features().x = host_matrix<const T>(big.x.data(), big.n, big.d);
  pb.features().y = host_matrix<const T>(big.y.data(), big.m, big.d);
  pb.a = host_vector<const T>(big.a.data(), big.n);
  pb.b = host_vector<const T>(big.b.data(), big.m);
  pb.epsilon = 0.1;
  expect_scalars_match(pb, "several chunks");
  EXPECT_TRUE(prepare_problem_scalars(self).same_clouds);
}

TEST(PrepareProblem, ScalarsOnlyMatchTheFullPreparationFloat) { check_kinds<float>(); }
TEST(PrepareProblem, ScalarsOnlyMatchTheFullPreparationDouble) { check_kinds<double>(); }

TEST(PrepareProblem, ScalarsOnlyRefusesALabelCost) {
  const Data<float> s = make<float>(20, 10, 2, 2, 3);
  std::vector<std::int32_t> lx(20, 0), ly(10, 1);
  const std::vector<double> table = {0, 1, 1, 0};
  LabelAugmented<float> cost;
  cost.features.x = host_matrix<const float>(s.x.data(), 20, 2);
  cost.features.y = host_matrix<const float>(s.y.data(), 10, 2);
  cost.labels_x = host_vector<const std::int32_t>(lx.data(), 20);
  cost.labels_y = host_vector<const std::int32_t>(ly.data(), 10);
  cost.table = host_matrix<const double>(table.data(), 2, 2);
  Problem<float> p;
  p.cost = cost;
  p.epsilon = 0.1;
  EXPECT_FALSE(scalars_preparable(p));
  EXPECT_THROW(prepare_problem_scalars(p), InvalidArgument);
  EXPECT_NO_THROW(prepare_problem_data(p));
}

}  // namespace
}  // namespace kantor
