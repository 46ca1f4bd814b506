// OTDD dataset distances (kantor/otdd.hpp, docs/otdd.md): class statistics, Bures and exact
// label distances, and the debiased divergence under the LabelAugmented cost in the public
// implementation's conventions (compatible) or to a tolerance (converged).
#include "kantor/otdd.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <future>
#include <memory>
#include <thread>

#include "kantor/buffer.hpp"
#include "kantor/error.hpp"
#include "kantor/oracle.hpp"
#include "parallel.hpp"

namespace kantor::otdd {
namespace {

using Clock = std::chrono::steady_clock;
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using detail::parallel_for;
using detail::parallel_ranges;
using detail::thread_count;

void check_dataset(const Dataset& x, const std::string& what) {
  if (x.features.rows <= 0 || x.features.cols <= 0)
    throw InvalidArgument(what + ".features is empty (" + std::to_string(x.features.rows) + " x " +
                          std::to_string(x.features.cols) + ")");
  if (x.features.space != MemorySpace::kHost || x.labels.space != MemorySpace::kHost)
    throw InvalidArgument(what + ": features and labels must be host memory");
  if (x.features.stride < x.features.cols)
    throw InvalidArgument(what + ".features: stride " + std::to_string(x.features.stride) +
                          " < cols " + std::to_string(x.features.cols));
  if (x.labels.size != x.features.rows)
    throw InvalidArgument(what + ".labels has " + std::to_string(x.labels.size) +
                          " entries but the features have " + std::to_string(x.features.rows) +
                          " rows");
  for (std::int64_t i = 0; i < x.features.rows; ++i)
    for (std::int64_t k = 0; k < x.features.cols; ++k)
      if (!std::isfinite(x.features(i, k))) {
        std::ostringstream os;
        os << what << ".features(" << i << ", " << k << ") = " << x.features(i, k)
           << " is not finite";
        throw InvalidArgument(os.str());
      }
}

/// Both datasets checked, and of one feature dimension.
void check_datasets(const Dataset& a, const Dataset& b) {
  check_dataset(a, "source");
  check_dataset(b, "target");
  if (a.features.cols != b.features.cols)
    throw InvalidArgument("source and target features have different dimensions (" +
                          std::to_string(a.features.cols) + " and " +
                          std::to_string(b.features.cols) + ")");
}

/// The bounding box of rows added one at a time, and its Euclidean diagonal (GeomLoss's
/// max_diameter).
struct Extent {
  std::vector<double> lo, hi;
  explicit Extent(std::int64_t dim) : lo(std::size_t(dim), INFINITY), hi(std::size_t(dim), -INFINITY) {}
  void add(std::int64_t k, double v) {
    lo[std::size_t(k)] = std::min(lo[std::size_t(k)], v);
    hi[std::size_t(k)] = std::max(hi[std::size_t(k)], v);
  }
  void merge(const Extent& o) {
    for (std::size_t k = 0; k < lo.size(); ++k) {
      lo[k] = std::min(lo[k], o.lo[k]);
      hi[k] = std::max(hi[k], o.hi[k]);
    }
  }
  double diagonal() const {
    double s2 = 0;
    for (std::size_t k = 0; k < lo.size(); ++k) s2 += (hi[k] - lo[k]) * (hi[k] - lo[k]);
    return std::sqrt(s2);
  }
};

/// Step k of GeomLoss's loop over `schedule` (schedule.size() + 2 steps): the eps it runs at and
/// its averaging weight (1 for the initial and the final extrapolation step, 1/2 otherwise).
struct LoopStep {
  double eps, weight;
};
LoopStep geomloss_step(const std::vector<double>& schedule, std::int64_t k) {
  const std::int64_t steps = std::int64_t(schedule.size()) + 2;
  if (k == 0) return {schedule.front(), 1.0};
  if (k == steps - 1) return {schedule.back(), 1.0};
  return {schedule[std::size_t(k - 1)], 0.5};
}

/// Widest features whose Gaussian table runs on the GPU (per class and pair, d x d float64
/// matrices: 128 MiB each at d = 4096).
constexpr std::int64_t kMaxDeviceBuresDim = 4096;

/// Distinct class ids (ascending) and each sample's class index.
void index_classes(const Dataset& x, std::vector<std::int32_t>* classes,
                   std::vector<std::int32_t>* index) {
  const std::int64_t n = x.labels.size;
  classes->assign(x.labels.data, x.labels.data + n);
  std::sort(classes->begin(), classes->end());
  classes->erase(std::unique(classes->begin(), classes->end()), classes->end());
  index->resize(std::size_t(n));
  for (std::int64_t i = 0; i < n; ++i)
    (*index)[std::size_t(i)] = std::int32_t(
        std::lower_bound(classes->begin(), classes->end(), x.labels.data[i]) - classes->begin());
}

/// The rows of each class, in order.
std::vector<std::vector<std::int64_t>> class_rows(const std::vector<std::int32_t>& index,
                                                  std::int64_t classes) {
  std::vector<std::vector<std::int64_t>> rows;
  rows.resize(std::size_t(classes));
  for (std::size_t i = 0; i < index.size(); ++i) rows[std::size_t(index[i])].push_back(std::int64_t(i));
  return rows;
}

/// S^1/2 factor of a PSD matrix: L (d x r) with L L^T = S over the eigenvalues kept (those above
/// d * 2^-52 * the largest), and Tr S.
struct SqrtFactor {
  RowMatrix L;
  double trace = 0;
};

SqrtFactor sqrt_factor(std::int64_t d, const double* S) {
  Eigen::Map<const RowMatrix> M(S, d, d);
  SqrtFactor out;
  out.trace = M.trace();
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(M);
  if (es.info() != Eigen::Success) throw Error("bures: the eigensolver did not converge");
  const Eigen::VectorXd& lam = es.eigenvalues();
  const double top = std::max(0.0, lam.maxCoeff());
  const double floor = double(d) * std::ldexp(1.0, -52) * top;
  std::vector<std::int64_t> keep;
  for (std::int64_t k = 0; k < d; ++k)
    if (lam(k) > floor) keep.push_back(k);
  out.L.resize(d, std::int64_t(keep.size()));
  for (std::size_t c = 0; c < keep.size(); ++c)
    out.L.col(std::int64_t(c)) = es.eigenvectors().col(keep[c]) * std::sqrt(lam(keep[c]));
  return out;
}

/// The same factor from a class's n_c <= d samples: with R the n_c x d residuals and
/// R R^T / (n_c - 1) = U Lambda U^T (an n_c x n_c problem instead of d x d), L = R^T U / sqrt(n_c - 1)
/// over the kept eigenvalues (then L L^T = S and L^T L = Lambda).
SqrtFactor sqrt_factor_from_samples(const MatrixView<const double>& x,
                                    const std::vector<std::int64_t>& rows, const double* mean,
                                    double trace) {
  const std::int64_t nc = std::int64_t(rows.size()), d = x.cols;
  RowMatrix R(nc, d);
  for (std::int64_t q = 0; q < nc; ++q)
    for (std::int64_t k = 0; k < d; ++k) R(q, k) = x(rows[std::size_t(q)], k) - mean[k];
  const Eigen::MatrixXd G = (R * R.transpose()) / double(nc - 1);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(G);
  if (es.info() != Eigen::Success) throw Error("bures: the eigensolver did not converge");
  const Eigen::VectorXd& lam = es.eigenvalues();
  const double floor = double(std::max(nc, d)) * std::ldexp(1.0, -52) * std::max(0.0, lam.maxCoeff());
  std::vector<std::int64_t> keep;
  for (std::int64_t k = 0; k < nc; ++k)
    if (lam(k) > floor) keep.push_back(k);
  SqrtFactor out;
  out.trace = trace;
  out.L.resize(d, std::int64_t(keep.size()));
  const double scale = 1.0 / std::sqrt(double(nc - 1));
  for (std::size_t c = 0; c < keep.size(); ++c)
    out.L.col(std::int64_t(c)) = R.transpose() * es.eigenvectors().col(keep[c]) * scale;
  return out;
}

/// Tr (S1^1/2 S2 S1^1/2)^1/2 = nuclear norm of L1^T L2.
double trace_term(const SqrtFactor& a, const SqrtFactor& b) {
  if (a.L.cols() == 0 || b.L.cols() == 0) return 0;
  const RowMatrix K = a.L.transpose() * b.L;
  // G = K K^T (or K^T K, the smaller): symmetric, so only its lower triangle is formed (a rank
  // update, half a GEMM); the eigensolver reads the lower triangle alone.
  const Eigen::Index r = std::min(K.rows(), K.cols());
  Eigen::MatrixXd G = Eigen::MatrixXd::Zero(r, r);
  if (K.rows() <= K.cols())
    G.selfadjointView<Eigen::Lower>().rankUpdate(K);
  else
    G.selfadjointView<Eigen::Lower>().rankUpdate(K.transpose());
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(G, Eigen::EigenvaluesOnly);
  if (es.info() != Eigen::Success) throw Error("bures: the eigensolver did not converge");
  // Eigenvalues at the rounding level of the largest are zeros (their square roots would add
  // sqrt(rounding) each): the same floor as sqrt_factor's.
  const Eigen::VectorXd& mu = es.eigenvalues();
  const double floor = double(mu.size()) * std::ldexp(1.0, -52) * std::max(0.0, mu.maxCoeff());
  double s = 0;
  for (Eigen::Index k = 0; k < mu.size(); ++k)
    if (mu(k) > floor) s += std::sqrt(mu(k));
  return s;
}

double mean_term(std::int64_t d, const double* m1, const double* m2) {
  double s = 0;
  for (std::int64_t k = 0; k < d; ++k) s += (m1[k] - m2[k]) * (m1[k] - m2[k]);
  return s;
}

bool same_gaussian(std::int64_t d, const double* m1, const double* S1, const double* m2,
                   const double* S2, bool diagonal) {
  if (std::memcmp(m1, m2, sizeof(double) * std::size_t(d)) != 0) return false;
  if (diagonal) {
    for (std::int64_t k = 0; k < d; ++k)
      if (S1[k * d + k] != S2[k * d + k]) return false;
    return true;
  }
  return std::memcmp(S1, S2, sizeof(double) * std::size_t(d * d)) == 0;
}

double diagonal_bures(std::int64_t d, const double* S1, const double* S2) {
  double s = 0;
  for (std::int64_t k = 0; k < d; ++k) {
    const double u = std::sqrt(std::max(0.0, S1[k * d + k]));
    const double v = std::sqrt(std::max(0.0, S2[k * d + k]));
    s += (u - v) * (u - v);
  }
  return s;
}

/// The pairs (i < j) of the union label space whose distance must be computed.
std::vector<std::pair<std::int64_t, std::int64_t>> table_pairs(std::int64_t L) {
  std::vector<std::pair<std::int64_t, std::int64_t>> p;
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = i + 1; j < L; ++j) p.emplace_back(i, j);
  return p;
}

/// A class's covariance needs 2 samples: InvalidArgument naming the side, the class and its count.
void require_two_samples(bool source, std::int32_t cls, std::int64_t count) {
  if (count < 2)
    throw InvalidArgument(std::string(source ? "source" : "target") + " class " +
                          std::to_string(cls) + " has " + std::to_string(count) +
                          " sample; the Gaussian label distance needs at least 2 per class");
}

/// The Gaussian table on a CUDA context (bures_table_cuda): the classes of both datasets as
/// row groups, no host statistics.
LabelTable gaussian_table_cuda(const Context& ctx, const Dataset& a, const Dataset& b,
                               const ProgressCallback& progress) {
  LabelTable t;
  std::vector<std::int32_t> ia, ib;
  index_classes(a, &t.classes_a, &ia);
  index_classes(b, &t.classes_b, &ib);
  const std::int64_t La = std::int64_t(t.classes_a.size());
  RowGroups g;
  g.matrices = {a.features, b.features};
  g.rows = class_rows(ia, La);
  auto rb = class_rows(ib, std::int64_t(t.classes_b.size()));
  g.rows.insert(g.rows.end(), std::make_move_iterator(rb.begin()), std::make_move_iterator(rb.end()));
  g.matrix.assign(g.rows.size(), 0);
  std::fill(g.matrix.begin() + La, g.matrix.end(), 1);
  for (std::size_t u = 0; u < g.rows.size(); ++u) {
    const bool src = std::int64_t(u) < La;
    require_two_samples(src, src ? t.classes_a[u] : t.classes_b[u - std::size_t(La)],
                        std::int64_t(g.rows[u].size()));
  }
  if (progress) progress("label distances: Bures table on the GPU", 0.0);
  double sec[3] = {0, 0, 0};
  t.values = bures_table_cuda(ctx, g, &sec);
  t.seconds_statistics = sec[0];
  t.seconds_square_roots = sec[1];
  t.seconds_pairs = sec[2];
  if (progress) progress("label distances: Bures table on the GPU", 1.0);
  return t;
}

LabelTable gaussian_table(const Dataset& a, const Dataset& b, const LabelDistanceOptions& o,
                          int threads, const ProgressCallback& progress) {
  const auto t_stats = Clock::now();
  // Both datasets at once (each splits its classes over the threads; the source has the larger
  // classes, the target's would otherwise wait behind them).
  auto future_b = std::async(std::launch::async, [&] { return class_statistics(b, true, threads); });
  const ClassStatistics sa = class_statistics(a, true, threads);
  const ClassStatistics sb = future_b.get();
  const double seconds_statistics = seconds_since(t_stats);
  const std::int64_t d = sa.dim, La = sa.size(), Lb = sb.size(), L = La + Lb;
  for (const auto* s : {&sa, &sb})
    for (std::int64_t c = 0; c < s->size(); ++c)
      require_two_samples(s == &sa, s->classes[std::size_t(c)], s->counts[std::size_t(c)]);
  auto mean = [&](std::int64_t u) {
    return u < La ? &sa.means[std::size_t(u * d)] : &sb.means[std::size_t((u - La) * d)];
  };
  auto cov = [&](std::int64_t u) {
    return u < La ? &sa.covariances[std::size_t(u * d * d)]
                  : &sb.covariances[std::size_t((u - La) * d * d)];
  };
  LabelTable t;
  t.classes_a = sa.classes;
  t.classes_b = sb.classes;
  t.values.assign(std::size_t(L * L), 0.0);
  t.seconds_statistics = seconds_statistics;
  const auto pairs = table_pairs(L);
  // One task list: the L class square roots first, then the pairs, each pair waiting for its two
  // factors (handed out in order, so a waiting pair only waits for factors already running, and
  // the threads left over by the last round of factors start on pairs).
  std::vector<SqrtFactor> factors(o.diagonal_covariance ? 0 : std::size_t(L));
  std::vector<std::atomic<int>> ready(static_cast<std::size_t>(L));
  for (auto& r : ready) r.store(o.diagonal_covariance ? 1 : 0);
  std::vector<std::int32_t> ca, cb, ia, ib;
  index_classes(a, &ca, &ia);
  index_classes(b, &cb, &ib);
  const auto ra = class_rows(ia, La), rb = class_rows(ib, Lb);
  const std::int64_t nf = o.diagonal_covariance ? 0 : L;
  std::atomic<std::int64_t> done_f{0}, done_p{0};
  std::atomic<bool> failed{false};
  const auto t_factors = Clock::now();
  std::atomic<std::int64_t> factors_end_ns{0};
  auto table_task = [&](std::int64_t task) {
    if (task < nf) {
      const std::int64_t u = task;
      const auto& rows = u < La ? ra[std::size_t(u)] : rb[std::size_t(u - La)];
      const MatrixView<const double>& x = u < La ? a.features : b.features;
      // Classes with fewer samples than dimensions factor their n_c x n_c Gram matrix.
      if (std::int64_t(rows.size()) <= d) {
        double trace = 0;
        for (std::int64_t k = 0; k < d; ++k) trace += cov(u)[k * d + k];
        factors[std::size_t(u)] = sqrt_factor_from_samples(x, rows, mean(u), trace);
      } else {
        factors[std::size_t(u)] = sqrt_factor(d, cov(u));
      }
      ready[std::size_t(u)].store(1);
      const std::int64_t k = ++done_f;
      if (k == nf)
        factors_end_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 Clock::now() - t_factors).count());
      if (progress) progress("label distances: class square roots", double(k) / double(nf));
      return;
    }
    const auto [u, v] = pairs[std::size_t(task - nf)];
    while (!(ready[std::size_t(u)].load() && ready[std::size_t(v)].load())) {
      if (failed.load()) return;  // the factor's task failed or will not run
      std::this_thread::yield();
    }
    double w = 0;
    if (!same_gaussian(d, mean(u), cov(u), mean(v), cov(v), o.diagonal_covariance)) {
      const double mt = mean_term(d, mean(u), mean(v));
      if (o.diagonal_covariance) {
        w = mt + diagonal_bures(d, cov(u), cov(v));
      } else {
        const SqrtFactor& fu = factors[std::size_t(u)];
        const SqrtFactor& fv = factors[std::size_t(v)];
        w = mt + fu.trace + fv.trace - 2 * trace_term(fu, fv);
      }
      w = std::max(0.0, w);
    }
    t.values[std::size_t(u * L + v)] = t.values[std::size_t(v * L + u)] = w;
    if (progress) progress("label distances: Bures pairs", double(++done_p) / double(pairs.size()));
  };
  // Any task that throws sets `failed` first: a pair waiting for a factor whose task will not
  // run (parallel_for skips the tasks it hands out after a failure) then stops waiting.
  parallel_for(nf + std::int64_t(pairs.size()), threads, [&](std::int64_t task) {
    try {
      table_task(task);
    } catch (...) {
      failed.store(true);
      throw;
    }
  });
  t.seconds_square_roots = double(factors_end_ns.load()) * 1e-9;
  t.seconds_pairs = seconds_since(t_factors);
  return t;
}


/// Rows `rows` of x (optionally a seeded subsample of at most `cap`), as a contiguous matrix.
std::vector<double> gather(const MatrixView<const double>& x, std::vector<std::int64_t> rows,
                           std::int64_t cap, std::mt19937_64* rng) {
  if (cap > 0 && std::int64_t(rows.size()) > cap) {
    std::shuffle(rows.begin(), rows.end(), *rng);
    rows.resize(std::size_t(cap));
    std::sort(rows.begin(), rows.end());
  }
  std::vector<double> out(rows.size() * std::size_t(x.cols));
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::int64_t k = 0; k < x.cols; ++k) out[i * std::size_t(x.cols) + std::size_t(k)] = x(rows[i], k);
  return out;
}

/// An inner problem between two class point sets: the points in the engine's type and the
/// squared-Euclidean problem over them (float64 references for the certificate).
template <class T>
struct InnerProblem {
  std::int64_t n, m;
  std::vector<T> xt, yt;
  Problem<T> p;
  InnerProblem(const std::vector<double>& xs, const std::vector<double>& ys, std::int64_t d,
               double eps, double scale)
      : n(std::int64_t(xs.size()) / d), m(std::int64_t(ys.size()) / d), xt(xs.begin(), xs.end()),
        yt(ys.begin(), ys.end()) {
    p.cost = SqEuclidean<T>{host_matrix<const T>(xt.data(), n, d),
                            host_matrix<const T>(yt.data(), m, d), scale};
    p.epsilon = eps;
    if (!std::is_same<T, double>::value) {
      p.reference_x = host_matrix<const double>(xs.data(), n, d);
      p.reference_y = host_matrix<const double>(ys.data(), m, d);
    }
  }
};

template <class T>
double inner_ot(const Context& ctx, const std::vector<double>& xs, const std::vector<double>& ys,
                std::int64_t d, double eps, double scale, bool debiased,
                const SinkhornOptions& options) {
  const InnerProblem<T> ip(xs, ys, d, eps, scale);
  SinkhornSolver<T> solver(ctx, ip.p, options.precision);
  if (debiased) return solver.divergence(options).divergence;
  Potentials<T> pot;
  return solver.solve(options, &pot).dual_cost;
}

/// The public implementation's inner OT_eps (GeomLoss, not debiased, tensorized): the fixed
/// loop of `compatible` on one problem, from the Euclidean diameter of the two point sets.
template <class T>
double inner_ot_geomloss(const Context& ctx, const std::vector<double>& xs,
                         const std::vector<double>& ys, std::int64_t d, double eps, double scale,
                         Precision prec) {
  const InnerProblem<T> ip(xs, ys, d, eps, scale);
  const std::int64_t n = ip.n, m = ip.m;
  Extent box(d);
  for (const std::vector<double>* z : {&xs, &ys})
    for (std::size_t i = 0; i < z->size(); ++i) box.add(std::int64_t(i % std::size_t(d)), (*z)[i]);
  const std::vector<double> sched = geomloss_schedule(box.diagonal(), eps, 0.5);
  auto o = make_oracle(ctx, ip.p, prec);
  Buffer<T> f(ctx, n), g(ctx, m);
  o->ops().fill(MatrixView<T>{f.data(), n, 1, 1, f.space()}, T(0));
  o->ops().fill(MatrixView<T>{g.data(), m, 1, 1, g.space()}, T(0));
  const std::int64_t steps = std::int64_t(sched.size()) + 2;
  for (std::int64_t k = 0; k < steps; ++k) {
    const LoopStep st = geomloss_step(sched, k);
    o->symmetric_step(T(st.eps), T(st.weight), f.data(), g.data(), nullptr);
  }
  Buffer<double> sc(ctx, 1);
  o->dual_value(f.data(), g.data(), sc.data());
  return to_host(ctx, sc.cview())[0];
}

LabelTable exact_table(const Context& ctx, const Dataset& a, const Dataset& b,
                       const LabelDistanceOptions& o, const ProgressCallback& progress) {
  std::vector<std::int32_t> ca, cb, ia, ib;
  index_classes(a, &ca, &ia);
  index_classes(b, &cb, &ib);
  const std::int64_t La = std::int64_t(ca.size()), Lb = std::int64_t(cb.size()), L = La + Lb;
  const std::int64_t d = a.features.cols;
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<double>> sets;
  sets.resize(std::size_t(L));
  const auto ra = class_rows(ia, La), rb = class_rows(ib, Lb);
  for (std::int64_t u = 0; u < La; ++u)
    sets[std::size_t(u)] = gather(a.features, ra[std::size_t(u)], o.max_class_samples, &rng);
  for (std::int64_t v = 0; v < Lb; ++v)
    sets[std::size_t(La + v)] = gather(b.features, rb[std::size_t(v)], o.max_class_samples, &rng);
  const Precision prec = o.inner.precision.value_or(Precision::kFp32);
  SinkhornOptions inner = o.inner;
  inner.precision = prec;
  LabelTable t;
  t.classes_a = ca;
  t.classes_b = cb;
  t.values.assign(std::size_t(L * L), 0.0);
  const auto pairs = table_pairs(L);
  for (std::size_t p = 0; p < pairs.size(); ++p) {
    if (ctx.cancel_requested()) throw Error("cancelled");
    const auto [u, v] = pairs[p];
    const double w = o.inner_compatible
                         ? (prec == Precision::kFp64
                                ? inner_ot_geomloss<double>(ctx, sets[std::size_t(u)], sets[std::size_t(v)], d,
                                                            o.inner_epsilon, o.inner_scale, prec)
                                : inner_ot_geomloss<float>(ctx, sets[std::size_t(u)], sets[std::size_t(v)], d,
                                                           o.inner_epsilon, o.inner_scale, prec))
                     : prec == Precision::kFp64
                         ? inner_ot<double>(ctx, sets[std::size_t(u)], sets[std::size_t(v)], d,
                                            o.inner_epsilon, o.inner_scale, o.inner_debiased, inner)
                         : inner_ot<float>(ctx, sets[std::size_t(u)], sets[std::size_t(v)], d,
                                           o.inner_epsilon, o.inner_scale, o.inner_debiased, inner);
    const double c = std::max(0.0, w);
    t.values[std::size_t(u * L + v)] = t.values[std::size_t(v * L + u)] = c;
    if (progress) progress("label distances: inner OT problems", double(p + 1) / double(pairs.size()));
  }
  return t;
}

int mantissa(Precision p) {
  switch (p) {
    case Precision::kFp64: return 52;
    case Precision::kFp32: return 23;
    case Precision::kTf32: return 10;
    case Precision::kBf16: return 7;
  }
  return 23;
}

/// One dataset sorted by class (rows of a class contiguous: label-uniform tiles for the kernels),
/// in the engine's type, with its float64 copy and union label indices.
/// (x and ref are allocated without a zero fill: the parallel copy writes them first.)
template <class T>
struct Sorted {
  std::unique_ptr<T[]> x;
  std::unique_ptr<double[]> ref;
  std::vector<std::int32_t> labels;
  std::int64_t n = 0, d = 0;
};

template <class T>
Sorted<T> sort_by_class(const Dataset& data, const std::vector<std::int32_t>& classes,
                        std::int32_t offset, int threads) {
  Sorted<T> s;
  s.n = data.features.rows;
  s.d = data.features.cols;
  std::vector<std::int64_t> order(std::size_t(s.n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t i, std::int64_t j) {
    return data.labels.data[i] < data.labels.data[j];
  });
  s.x.reset(new T[std::size_t(s.n * s.d)]);
  s.ref.reset(new double[std::size_t(s.n * s.d)]);
  s.labels.resize(std::size_t(s.n));
  // Rows in parallel chunks of about 1 MB of output (the copies are memory bound).
  const std::int64_t grain = std::max<std::int64_t>(64, (std::int64_t(1) << 17) / std::max<std::int64_t>(s.d, 1));
  parallel_ranges(s.n, threads, grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const std::int64_t i = order[std::size_t(r)];
      for (std::int64_t k = 0; k < s.d; ++k) {
        s.ref[std::size_t(r * s.d + k)] = data.features(i, k);
        s.x[std::size_t(r * s.d + k)] = T(data.features(i, k));
      }
      const auto it = std::lower_bound(classes.begin(), classes.end(), data.labels.data[i]);
      s.labels[std::size_t(r)] = offset + std::int32_t(it - classes.begin());
    }
  });
  return s;
}

template <class T>
Problem<T> make_problem(const Sorted<T>& x, const Sorted<T>& y, const LabelTable& table,
                        const OtddOptions& o) {
  LabelAugmented<T> l;
  l.features.x = host_matrix<const T>(x.x.get(), x.n, x.d);
  l.features.y = host_matrix<const T>(y.x.get(), y.n, y.d);
  l.features.scale = o.feature_scale;
  l.labels_x = host_vector<const std::int32_t>(x.labels.data(), x.n);
  l.labels_y = host_vector<const std::int32_t>(y.labels.data(), y.n);
  l.table = host_matrix<const double>(table.values.data(), table.size(), table.size());
  l.table_scale = o.label_scale;
  Problem<T> p;
  p.cost = l;
  p.epsilon = o.epsilon;
  p.reference_x = host_matrix<const double>(x.ref.get(), x.n, x.d);
  p.reference_y = host_matrix<const double>(y.ref.get(), y.n, y.d);
  return p;
}

/// The Euclidean diameter GeomLoss computes on otdd's augmented samples: the features plus one
/// column holding the union label index (max_diameter over the union of both sets).
template <class T>
double augmented_diameter(const Sorted<T>& a, const Sorted<T>& b, int threads) {
  const std::int64_t d = a.d;
  Extent box(d + 1);
  // Per-chunk boxes (min and max are exact: the merge order does not matter).
  const std::int64_t grain = std::max<std::int64_t>(256, (std::int64_t(1) << 16) / (d + 1));
  for (const Sorted<T>* s : {&a, &b}) {
    const std::int64_t chunks = (s->n + grain - 1) / grain;
    std::vector<Extent> part(std::size_t(chunks), Extent(d + 1));
    parallel_for(chunks, threads, [&](std::int64_t c) {
      Extent& e = part[std::size_t(c)];
      for (std::int64_t i = c * grain; i < std::min(s->n, (c + 1) * grain); ++i) {
        for (std::int64_t k = 0; k < d; ++k) e.add(k, s->ref[std::size_t(i * d + k)]);
        e.add(d, s->labels[std::size_t(i)]);
      }
    });
    for (const Extent& e : part) box.merge(e);
  }
  return box.diagonal();
}

double read_scalar(const Context& ctx, const Buffer<double>& b, std::int64_t k) {
  return to_host(ctx, VectorView<const double>{b.data() + k, 1, b.space()})[0];
}

/// GeomLoss's sinkhorn_loop for the debiased loss (tensorized, no jumps): init f_ba, g_ab, f_aa,
/// g_bb by a full softmin step at schedule[0] from zero potentials; one averaged step
/// h <- (h + T(h)) / 2 per eps of the schedule (the cross pair from the old values: Jacobi);
/// a final unaveraged step at the last eps. The self-problems keep f = g, one pass per step.
template <class T>
void compatible(const Context& ctx, const Problem<T>& pxy, const Problem<T>& pxx,
                const Problem<T>& pyy, Precision prec, OtddSummary* s,
                const ProgressCallback& progress) {
  const auto t_setup = Clock::now();
  // The public implementation computes its costs in float32, as norm expansions (GeomLoss:
  // |x|^2 + |y|^2 - 2<x, y>). On the GPU at fp32 and d > 16 this mode does the same, with
  // float32-accurate products (the 3xTF32 score blocks), unless a kernel was asked for: twice as
  // fast as the float64 score blocks of the table (docs/otdd.md). Converged mode keeps the table.
  KernelChoice kernel = ctx.kernel();
  if (kernel == KernelChoice::kAuto && ctx.backend() == Backend::kCuda &&
      prec == Precision::kFp32 && pxy.features().x.cols > 16)
    kernel = KernelChoice::kGemm3xTf32;
  s->compatible_kernel = to_string(kernel);
  auto oxy = make_oracle(ctx, pxy, prec, kernel);
  auto oxx = make_oracle(ctx, pxx, prec, kernel);
  auto oyy = make_oracle(ctx, pyy, prec, kernel);
  const std::int64_t n = oxy->n(), m = oxy->m();
  for (Oracle<T>* o : {oxy.get(), oxx.get(), oyy.get()}) {
    const double r = std::ldexp(1.0, std::ilogb(o->max_score_term()) - mantissa(prec));
    if (!(s->epsilon > r)) {
      std::ostringstream os;
      os << "epsilon = " << s->epsilon << " is below what " << to_string(prec)
         << " resolves for this data (ulp of the largest score term " << o->max_score_term()
         << " is " << r << "): use fp32 or fp64";
      throw InvalidArgument(os.str());
    }
  }
  Buffer<T> f(ctx, n), g(ctx, m), fa(ctx, n), ga(ctx, m), tmp_a(ctx, n), tmp_b(ctx, m);
  for (auto* b : {&f, &fa, &tmp_a})
    oxy->ops().fill(MatrixView<T>{b->data(), n, 1, 1, b->space()}, T(0));
  for (auto* b : {&g, &ga, &tmp_b})
    oxy->ops().fill(MatrixView<T>{b->data(), m, 1, 1, b->space()}, T(0));
  s->seconds_setup = seconds_since(t_setup);
  const auto t_ot = Clock::now();
  auto self_step = [&](Oracle<T>& o, Buffer<T>& h, Buffer<T>& old, std::int64_t k, T eps, double w) {
    // old = h; h <- T(old); h = w h + (1 - w) old.
    const MatrixView<T> hv{h.data(), k, 1, 1, h.space()}, ov{old.data(), k, 1, 1, old.space()};
    o.ops().axpby(1.0, hv, 0.0, ov);
    o.update_f(eps, old.data(), h.data(), nullptr);
    if (w != 1.0) o.ops().axpby(1.0 - w, ov, w, hv);
  };
  const std::vector<double>& sched = s->schedule;
  const std::int64_t steps = std::int64_t(sched.size()) + 2;
  for (std::int64_t k = 0; k < steps; ++k) {
    if (ctx.cancel_requested()) throw Error("cancelled");
    const LoopStep st = geomloss_step(sched, k);
    const double eps = st.eps, w = st.weight;
    oxy->symmetric_step(T(eps), T(w), f.data(), g.data(), nullptr);
    self_step(*oxx, fa, tmp_a, n, T(eps), w);
    self_step(*oyy, ga, tmp_b, m, T(eps), w);
    if (progress) progress("dataset distance: Sinkhorn steps", double(k + 1) / double(steps));
  }
  s->iterations = steps;
  Buffer<double> sc(ctx, 3);
  oxy->dual_value(f.data(), g.data(), sc.data());
  oxx->dual_value(fa.data(), fa.data(), sc.data() + 1);
  oyy->dual_value(ga.data(), ga.data(), sc.data() + 2);
  s->ot_xy = read_scalar(ctx, sc, 0);
  s->ot_xx = read_scalar(ctx, sc, 1);
  s->ot_yy = read_scalar(ctx, sc, 2);
  s->distance = s->ot_xy - 0.5 * s->ot_xx - 0.5 * s->ot_yy;
  s->seconds_ot = seconds_since(t_ot);
  const auto t_cert = Clock::now();
  const double eps = sched.back();
  s->marginal_error_xy = oxy->certify(eps, f.data(), g.data()).bound;
  // The self-problems report the engine's residual (not float64 certificate passes, which at d
  // in the hundreds cost several seconds on a CPU): in this mode the numbers are a diagnostic of
  // how far from converged the fixed schedule left them. A self-problem's pair (h, h) has equal
  // row and column errors: one pass (h' <- T(h) on a copy, its row error) and twice that.
  Buffer<double> res(ctx, 2);
  auto self_residual = [&](Oracle<T>& o, Buffer<T>& h, Buffer<T>& tmp, std::int64_t k, double* out) {
    o.ops().axpby(1.0, MatrixView<const T>{h.data(), k, 1, 1, h.space()}, 0.0,
                  MatrixView<T>{tmp.data(), k, 1, 1, tmp.space()});
    o.update_f(T(eps), h.data(), tmp.data(), out);
  };
  self_residual(*oxx, fa, tmp_a, n, res.data());
  self_residual(*oyy, ga, tmp_b, m, res.data() + 1);
  s->marginal_error_xx = 2 * read_scalar(ctx, res, 0);
  s->marginal_error_yy = 2 * read_scalar(ctx, res, 1);
  s->seconds_certificate = seconds_since(t_cert);
  s->converged = false;
  std::ostringstream os;
  os << "compatible mode: " << steps << " fixed steps (not a convergence test); certified L1 "
     << "marginal error of the cross problem " << s->marginal_error_xy;
  s->message = os.str();
}

template <class T>
void converged(const Context& ctx, const Problem<T>& pxy, Precision prec, const OtddOptions& o,
               OtddSummary* s) {
  const auto t_setup = Clock::now();
  SinkhornSolver<T> solver(ctx, pxy, prec);
  s->seconds_setup = seconds_since(t_setup);
  SinkhornOptions so;
  so.precision = prec;
  so.tolerance = o.tolerance;
  so.max_iterations = o.max_iterations;
  so.scaling = o.converged_scaling;
  so.check_every = o.check_every;
  so.relaxation = o.relaxation;
  if (o.coarse_correction) {
    // The classes: rows are sorted by class, labels are union indices (target's offset by La).
    const auto& l = std::get<LabelAugmented<T>>(pxy.cost);
    const std::int32_t La = std::int32_t(s->table.classes_a.size());
    so.coarse_blocks_x.assign(l.labels_x.data, l.labels_x.data + l.labels_x.size);
    so.coarse_blocks_y.assign(l.labels_y.data, l.labels_y.data + l.labels_y.size);
    for (auto& b : so.coarse_blocks_y) b -= La;
  }
  so.callbacks = o.callbacks;
  so.record_iterations = true;
  const auto t_ot = Clock::now();
  DivergenceSummary d = solver.divergence(so);
  s->seconds_ot = seconds_since(t_ot);
  s->distance = d.divergence;
  s->ot_xy = d.xy.dual_cost;
  s->ot_xx = d.xx.dual_cost;
  s->ot_yy = d.yy.dual_cost;
  s->marginal_error_xy = d.xy.marginal_error;
  s->marginal_error_xx = d.xx.marginal_error;
  s->marginal_error_yy = d.yy.marginal_error;
  s->iterations = d.xy.iterations + d.xx.iterations + d.yy.iterations;
  s->converged = d.converged();
  s->message = "converged mode: " + d.xy.message;
  s->divergence = std::move(d);
}

template <class T>
void run(const Context& ctx, const Dataset& a, const Dataset& b, const OtddOptions& o,
         Precision prec, OtddSummary* s, const ProgressCallback& progress) {
  const auto t_prepare = Clock::now();
  const Sorted<T> sa = sort_by_class<T>(a, s->table.classes_a, 0, ctx.threads());
  const Sorted<T> sb = sort_by_class<T>(b, s->table.classes_b,
                                        std::int32_t(s->table.classes_a.size()), ctx.threads());
  const Problem<T> pxy = make_problem(sa, sb, s->table, o);
  if (o.mode == Mode::kCompatible) {
    s->diameter = augmented_diameter(sa, sb, ctx.threads());
    s->schedule = geomloss_schedule(s->diameter, o.epsilon, o.scaling);
    s->seconds_prepare = seconds_since(t_prepare);
    compatible(ctx, pxy, make_problem(sa, sa, s->table, o), make_problem(sb, sb, s->table, o),
               prec, s, progress);
  } else {
    s->seconds_prepare = seconds_since(t_prepare);
    converged(ctx, pxy, prec, o, s);
  }
}

}  // namespace

std::string to_string(LabelDistance l) { return l == LabelDistance::kGaussian ? "gaussian" : "exact"; }
LabelDistance parse_label_distance(const std::string& s, const std::string& what) {
  if (s == "gaussian") return LabelDistance::kGaussian;
  if (s == "exact") return LabelDistance::kExact;
  throw InvalidArgument(what + ": expected 'gaussian' or 'exact', got '" + s + "'");
}
std::string to_string(Mode m) { return m == Mode::kCompatible ? "compatible" : "converged"; }
Mode parse_mode(const std::string& s, const std::string& what) {
  if (s == "compatible") return Mode::kCompatible;
  if (s == "converged") return Mode::kConverged;
  throw InvalidArgument(what + ": expected 'compatible' or 'converged', got '" + s + "'");
}

ClassStatistics class_statistics(const Dataset& data, bool covariances, int threads) {
  check_dataset(data, "dataset");
  ClassStatistics s;
  std::vector<std::int32_t> index;
  index_classes(data, &s.classes, &index);
  const std::int64_t L = s.size(), d = data.features.cols;
  s.dim = d;
  const auto rows = class_rows(index, L);
  s.counts.resize(std::size_t(L));
  s.means.assign(std::size_t(L * d), 0.0);
  if (covariances) s.covariances.assign(std::size_t(L * d * d), 0.0);
  parallel_for(L, threads, [&](std::int64_t c) {
    const auto& r = rows[std::size_t(c)];
    const std::int64_t nc = std::int64_t(r.size());
    s.counts[std::size_t(c)] = nc;
    double* mu = &s.means[std::size_t(c * d)];
    for (std::int64_t i : r)
      for (std::int64_t k = 0; k < d; ++k) mu[k] += data.features(i, k);
    for (std::int64_t k = 0; k < d; ++k) mu[k] /= double(nc);
    if (!covariances || nc < 2) return;
    // Two passes, as the public implementation: residuals, then sum r r^T / (n - 1).
    RowMatrix R(nc, d);
    for (std::int64_t q = 0; q < nc; ++q)
      for (std::int64_t k = 0; k < d; ++k) R(q, k) = data.features(r[std::size_t(q)], k) - mu[k];
    Eigen::MatrixXd S = Eigen::MatrixXd::Zero(d, d);
    S.selfadjointView<Eigen::Lower>().rankUpdate(R.transpose(), 1.0 / double(nc - 1));
    Eigen::Map<RowMatrix> out(&s.covariances[std::size_t(c * d * d)], d, d);
    out = S.selfadjointView<Eigen::Lower>();
  });
  return s;
}

double bures_squared(std::int64_t d, const double* m1, const double* S1, const double* m2,
                     const double* S2) {
  if (d <= 0) throw InvalidArgument("bures_squared: d must be >= 1, got " + std::to_string(d));
  if (same_gaussian(d, m1, S1, m2, S2, false)) return 0;
  const SqrtFactor a = sqrt_factor(d, S1), b = sqrt_factor(d, S2);
  return std::max(0.0, mean_term(d, m1, m2) + a.trace + b.trace - 2 * trace_term(a, b));
}

LabelTable label_distances(const Context& ctx, const Dataset& a, const Dataset& b,
                           const LabelDistanceOptions& options, const ProgressCallback& progress) {
  check_datasets(a, b);
  if (options.method == LabelDistance::kGaussian) {
    // Full covariances on a CUDA context run there (docs/otdd.md: float64 throughout, 10x the
    // host's threads at d = 784); d x d matrices per class and pair must fit the device, so very
    // wide features stay on the host.
    if (ctx.backend() == Backend::kCuda && !options.diagonal_covariance &&
        a.features.cols <= kMaxDeviceBuresDim) {
      try {
        return gaussian_table_cuda(ctx, a, b, progress);
      } catch (const BackendUnavailable&) {
        // No cuSOLVER on this machine (it is loaded at run time): the host computes the table.
      } catch (const OutOfMemory&) {
        // Too many classes for the device (d x d float64 matrices per class and per batch of
        // pairs): the host computes the table.
      }
    }
    return gaussian_table(a, b, options, ctx.threads(), progress);
  }
  return exact_table(ctx, a, b, options, progress);
}

std::vector<double> geomloss_schedule(double diameter, double epsilon, double scaling) {
  const double blur = std::sqrt(epsilon);
  std::vector<double> s{diameter * diameter};
  const double start = 2 * std::log(diameter), stop = 2 * std::log(blur),
               step = 2 * std::log(scaling);
  // numpy.arange(start, stop, step): ceil((stop - start) / step) values start + i step.
  const double count = std::ceil((stop - start) / step);
  for (std::int64_t i = 0; i < std::int64_t(std::max(0.0, count)); ++i)
    s.push_back(std::exp(start + double(i) * step));
  s.push_back(blur * blur);
  return s;
}

bool OtddOptions::is_valid(std::string* why) const {
  auto bad = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  auto pos = [](double v) { return std::isfinite(v) && v > 0; };
  if (!pos(epsilon)) return bad("epsilon must be > 0 and finite, got " + std::to_string(epsilon));
  if (!pos(feature_scale))
    return bad("feature_scale must be > 0 and finite, got " + std::to_string(feature_scale));
  if (!(std::isfinite(label_scale) && label_scale >= 0))
    return bad("label_scale must be >= 0 and finite, got " + std::to_string(label_scale));
  if (!(scaling > 0 && scaling < 1))
    return bad("scaling must be in (0, 1), got " + std::to_string(scaling));
  if (!(converged_scaling > 0 && converged_scaling < 1))
    return bad("converged_scaling must be in (0, 1), got " + std::to_string(converged_scaling));
  if (!pos(tolerance)) return bad("tolerance must be > 0, got " + std::to_string(tolerance));
  if (max_iterations < 1)
    return bad("max_iterations must be >= 1, got " + std::to_string(max_iterations));
  if (check_every < 1) return bad("check_every must be >= 1, got " + std::to_string(check_every));
  if (!(relaxation == 0 || (relaxation >= 1 && relaxation < 2)))
    return bad("relaxation must be 0 (automatic) or in [1, 2), got " + std::to_string(relaxation));
  if (!pos(labels.inner_epsilon))
    return bad("labels.inner_epsilon must be > 0, got " + std::to_string(labels.inner_epsilon));
  if (!pos(labels.inner_scale))
    return bad("labels.inner_scale must be > 0, got " + std::to_string(labels.inner_scale));
  if (labels.max_class_samples < 0)
    return bad("labels.max_class_samples must be >= 0, got " +
               std::to_string(labels.max_class_samples));
  return true;
}

LabelDistanceOptions effective_label_options(const OtddOptions& options) {
  LabelDistanceOptions lo = options.labels;
  if (lo.method == LabelDistance::kExact && options.mode == Mode::kCompatible) {
    // The public implementation's inner OT: GeomLoss p = 2 (cost |x - y|^2 / 2), eps 0.1, not
    // debiased, its fixed loop.
    lo.inner_scale = 0.5;
    lo.inner_debiased = false;
    lo.inner_compatible = true;
  }
  if (!lo.inner.precision) lo.inner.precision = options.precision.value_or(Precision::kFp32);
  return lo;
}

OtddSummary dataset_distance(const Context& ctx, const Dataset& a, const Dataset& b,
                             const OtddOptions& options, const ProgressCallback& progress) {
  const auto t0 = Clock::now();
  std::string why;
  if (!options.is_valid(&why)) throw InvalidArgument("OtddOptions: " + why);
  check_datasets(a, b);
  OtddSummary s;
  s.mode = options.mode;
  s.label_distance = options.labels.method;
  s.precision = options.precision.value_or(Precision::kFp32);
  s.epsilon = options.epsilon;
  s.feature_scale = options.feature_scale;
  s.label_scale = options.label_scale;
  s.n = a.features.rows;
  s.m = b.features.rows;
  s.d = a.features.cols;
  const auto t_labels = Clock::now();
  if (options.table) {
    s.table = *options.table;
    std::vector<std::int32_t> ca, cb, idx;
    index_classes(a, &ca, &idx);
    index_classes(b, &cb, &idx);
    if (ca != s.table.classes_a || cb != s.table.classes_b ||
        std::int64_t(s.table.values.size()) != s.table.size() * s.table.size())
      throw InvalidArgument("OtddOptions::table does not match the datasets' classes");
  } else {
    s.table = label_distances(ctx, a, b, effective_label_options(options), progress);
  }
  s.seconds_labels = seconds_since(t_labels);
  if (s.precision == Precision::kFp64)
    run<double>(ctx, a, b, options, s.precision, &s, progress);
  else
    run<float>(ctx, a, b, options, s.precision, &s, progress);
  s.seconds_total = seconds_since(t0);
  return s;
}

std::string OtddSummary::brief_report() const {
  std::ostringstream os;
  os.precision(8);
  os << "OTDD " << to_string(mode) << " (" << to_string(label_distance)
     << " label distance): distance " << distance << ", " << iterations << " iterations, "
     << "cross marginal error " << marginal_error_xy << ", " << seconds_total << " s";
  return os.str();
}

std::string OtddSummary::full_report() const {
  std::ostringstream os;
  os.precision(8);
  os << "OTDD dataset distance\n"
     << "  mode            " << to_string(mode) << "\n"
     << "  label distance  " << to_string(label_distance) << " (" << table.classes_a.size()
     << " + " << table.classes_b.size() << " classes)\n"
     << "  problem         n = " << n << ", m = " << m << ", d = " << d
     << "; cost " << feature_scale << " |x - x'|^2 + " << label_scale << " W; eps " << epsilon
     << "; " << to_string(precision) << "\n";
  if (mode == Mode::kCompatible)
    os << "  schedule        " << schedule.size() << " eps values from " << schedule.front()
       << " (diameter " << diameter << ") to " << schedule.back() << "\n";
  os << "  distance        " << distance << "\n"
     << "  OT(A,B)         " << ot_xy << " (marginal error " << marginal_error_xy << ")\n"
     << "  OT(A,A)         " << ot_xx << " (marginal error " << marginal_error_xx << ")\n"
     << "  OT(B,B)         " << ot_yy << " (marginal error " << marginal_error_yy << ")\n"
     << "  iterations      " << iterations << "\n"
     << "  converged       " << (converged ? "yes" : "no") << "\n"
     << "  message         " << message << "\n"
     << "  time            labels " << seconds_labels << " s, setup " << seconds_setup
     << " s, Sinkhorn " << seconds_ot << " s, total " << seconds_total << " s\n";
  return os.str();
}

}  // namespace kantor::otdd
