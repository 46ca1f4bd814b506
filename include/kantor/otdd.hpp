// OTDD: the optimal transport dataset distance (Alvarez-Melis & Fusi, NeurIPS 2020) between two
// labelled datasets, streamed through the LabelAugmented cost (no n x m matrix; docs/otdd.md,
// docs/numerics.md section 6).
//
// Each sample is (feature x, label y); the ground cost between (x, y) and (x', y') is
//
//   C = feature_scale |x - x'|^2 + label_scale W[y, y']
//
// where W[y, y'] is a squared 2-Wasserstein distance between the feature distributions of the
// two classes: Gaussian (Bures) from per-class means and covariances, or exact (an inner OT
// between the class-conditional point sets). The classes of the two datasets are distinct
// labels of one label space (the source's classes first, then the target's), so the table is
// (La + Lb) x (La + Lb) and serves the cross problem and both self-problems of the debiased
// divergence D = OT(A, B) - OT(A, A)/2 - OT(B, B)/2 (no square root).
//
//   kantor::otdd::Dataset a{host_matrix(xa.data(), na, d), host_vector(la.data(), na)};
//   kantor::otdd::Dataset b{host_matrix(xb.data(), nb, d), host_vector(lb.data(), nb)};
//   kantor::otdd::OtddSummary s = kantor::otdd::dataset_distance(ctx, a, b, {});
//   std::cout << s.distance << "\n" << s.brief_report() << "\n";
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/sinkhorn.hpp"
#include "kantor/view.hpp"

namespace kantor::otdd {

/// A labelled dataset: n x d features and n labels (any int32 class ids), host memory.
struct Dataset {
  MatrixView<const double> features;
  VectorView<const std::int32_t> labels;
};

enum class LabelDistance {
  kGaussian,  ///< Bures-Wasserstein W2^2 between N(mean, covariance) of the two classes
  kExact,     ///< an inner entropic OT between the two classes' point sets
};
std::string to_string(LabelDistance l);
LabelDistance parse_label_distance(const std::string& s, const std::string& what);

enum class Mode {
  /// The public implementation's conventions (microsoft/otdd with its defaults, GeomLoss
  /// tensorized backend): a fixed eps schedule from the diameter down to eps by factors 1/4, one
  /// averaged symmetric step per eps, one final unaveraged step: not converged (docs/otdd.md).
  kCompatible,
  /// The same cost and eps, each of the three problems run to `tolerance` (certified).
  kConverged,
};
std::string to_string(Mode m);
Mode parse_mode(const std::string& s, const std::string& what);

/// The classes of one dataset and their Gaussian statistics.
struct ClassStatistics {
  std::int64_t dim = 0;
  std::vector<std::int32_t> classes;   ///< distinct class ids, ascending
  std::vector<std::int64_t> counts;    ///< samples per class
  std::vector<double> means;           ///< classes x dim
  /// classes x dim x dim, unbiased (divided by count - 1; 0 for a class of one sample), empty
  /// when not requested.
  std::vector<double> covariances;
  std::int64_t size() const { return std::int64_t(classes.size()); }
};

/// Per-class means (and, when `covariances`, unbiased covariances: the public implementation's)
/// in float64. Throws InvalidArgument for mismatched sizes or non-finite features.
ClassStatistics class_statistics(const Dataset& data, bool covariances, int threads = 0);

/// Squared Bures-Wasserstein distance between N(m1, S1) and N(m2, S2) (d-vectors, row-major
/// d x d PSD matrices): |m1 - m2|^2 + Tr S1 + Tr S2 - 2 Tr (S1^1/2 S2 S1^1/2)^1/2, clamped at 0.
/// Eigenvalues below d * 2^-52 * (largest eigenvalue) of either covariance are taken as 0 (a
/// rank-deficient covariance: zero-variance pixels); the trace term is the nuclear norm of
/// S1^1/2 S2^1/2 over the kept eigenvectors. Exactly 0 when both Gaussians are equal bitwise.
double bures_squared(std::int64_t d, const double* m1, const double* S1, const double* m2,
                     const double* S2);

struct LabelDistanceOptions {
  LabelDistance method = LabelDistance::kGaussian;
  /// Gaussian: only the diagonal of each covariance (the public implementation's diagonal_cov).
  bool diagonal_covariance = false;
  /// Exact: the inner problem's eps and cost scale, and whether it is debiased. Defaults: the
  /// converged inner distance, S_eps with cost |x - y|^2 (an estimate of W2^2 comparable with the
  /// Gaussian one). dataset_distance in compatible mode uses the public implementation's
  /// (OT_eps with cost |x - y|^2 / 2, not debiased) whatever these say.
  double inner_epsilon = 0.1;
  double inner_scale = 1.0;
  bool inner_debiased = true;
  /// Exact: at most this many samples per class enter an inner problem (a seeded uniform
  /// subsample without replacement); 0 = all.
  std::int64_t max_class_samples = 0;
  std::uint64_t seed = 1;
  /// Exact: run each inner problem as the public implementation does (GeomLoss's fixed loop:
  /// the eps schedule from the pair's diameter, scaling 0.5, one averaged step per eps and a
  /// final step; not converged) instead of solving it to `inner.tolerance`.
  bool inner_compatible = false;
  /// Exact: the inner solves' options (tolerance, precision, iteration budget). The tolerance
  /// defaults to 5e-2 for the reason OtddOptions::tolerance does (eps = 0.1 is small against
  /// these costs).
  SinkhornOptions inner = [] {
    SinkhornOptions o;
    o.tolerance = 5e-2;
    return o;
  }();
};

/// The label-distance table over the union label space: (La + Lb) x (La + Lb), row-major; the
/// source's classes (ascending ids) index 0..La-1, the target's La..La+Lb-1. Symmetric, zero
/// diagonal; the off-diagonal blocks are the cross distances.
struct LabelTable {
  std::vector<std::int32_t> classes_a, classes_b;
  std::vector<double> values;
  /// Gaussian: seconds of the class statistics (means, covariances), of the class square roots
  /// and of the Bures pairs (the last two overlap: pairs start as their factors are ready).
  double seconds_statistics = 0, seconds_square_roots = 0, seconds_pairs = 0;
  std::int64_t size() const { return std::int64_t(classes_a.size() + classes_b.size()); }
  double operator()(std::int64_t i, std::int64_t j) const { return values[std::size_t(i * size() + j)]; }
  /// W between class index p of A and class index q of B.
  double cross(std::int64_t p, std::int64_t q) const {
    return (*this)(p, std::int64_t(classes_a.size()) + q);
  }
};

/// Progress of a long computation: a phase name and a fraction done (0..1).
using ProgressCallback = std::function<void(const std::string& phase, double fraction)>;

/// Groups of rows of row-major float64 host matrices (e.g. the classes of two datasets): group
/// u is the rows `rows[u]` (in that order) of `matrices[matrix[u]]`; all matrices have the same
/// number of columns.
struct RowGroups {
  std::vector<MatrixView<const double>> matrices;
  std::vector<int> matrix;
  std::vector<std::vector<std::int64_t>> rows;
  /// bures_table_cuda: the most pairs per batched eigensolver call (0: as many as fit
  /// min(8 GiB, a third of the free device memory)); a smaller value bounds the memory.
  std::int64_t max_pairs_per_call = 0;
  std::int64_t size() const { return std::int64_t(rows.size()); }
};

/// Squared Bures-Wasserstein distances between the groups' Gaussians N(mean, unbiased
/// covariance), groups x groups row-major (zero diagonal), on the CUDA engine of `ctx` in
/// float64: the covariances by DSYRK, each covariance's eigendecomposition and every pair's
/// trace term (the eigenvalues of K^T K, K = S_u^1/2 S_v^1/2 over the kept eigenvectors) by
/// cuSOLVER's batched symmetric eigensolver; the floors of bures_squared (eigenvalues below
/// d 2^-52 of the largest are 0). Exactly 0 for two groups whose means and covariances are
/// equal bitwise; clamped at 0. Every group needs at least 2 rows (InvalidArgument). `seconds`
/// (optional) receives the seconds of the statistics, of the square roots and of the pairs.
/// NotCompiled in a CPU-only build; InvalidArgument when ctx is not a CUDA context.
std::vector<double> bures_table_cuda(const Context& ctx, const RowGroups& groups,
                                     double (*seconds)[3] = nullptr);

/// The label table of two datasets. Gaussian: class statistics of each dataset, then one Bures
/// distance per pair (on a CUDA context: bures_table_cuda; on the CPU engine: threads on the
/// host). Exact: one inner OT per pair on ctx's engine.
LabelTable label_distances(const Context& ctx, const Dataset& a, const Dataset& b,
                           const LabelDistanceOptions& options,
                           const ProgressCallback& progress = {});

struct OtddOptions {
  Mode mode = Mode::kCompatible;
  LabelDistanceOptions labels;
  double epsilon = 0.1;        ///< the public implementation's entreg
  double feature_scale = 0.5;  ///< its cost |x - x'|^2 / 2 (GeomLoss's p = 2 cost)
  double label_scale = 0.5;    ///< its label term W / p
  /// GeomLoss's `scaling` (blur ratio per annealing step; eps ratio scaling^2), compatible mode.
  double scaling = 0.5;
  /// Converged mode: L1 marginal-error tolerance of each of the three problems and their
  /// iteration budget; annealing from the largest cost by `converged_scaling` per iteration.
  /// Default 5e-2, from the evidence on full Fashion-MNIST (docs/otdd.md): the certified error
  /// of the cross problem decays like iterations^-0.46 (0.134 at 76 iterations, 0.034 at 1,500),
  /// so 1e-3 is out of reach of Sinkhorn iterations at eps = 0.1; 5e-2 is met after ~850.
  double tolerance = 5e-2;
  std::int64_t max_iterations = 20000;
  double converged_scaling = 0.5;
  /// Converged mode: over-relaxation of the cross problem (SinkhornOptions::relaxation; 1 =
  /// plain, 0 = automatic). Plain by default: on Fashion-MNIST (400 samples a side, fp64) the
  /// residual does not decay linearly but in plateaus and drops, and the automatic factor left it
  /// at 0.052 after 3,000 iterations against 0.033 for plain steps (both with the coarse
  /// correction).
  double relaxation = 1;
  /// Converged mode: the coarse correction of the cross problem over the classes
  /// (SinkhornOptions::coarse_blocks_x / _y): the label term nearly decouples the classes, whose
  /// relative potentials plain Sinkhorn balances only very slowly.
  bool coarse_correction = true;
  std::int64_t check_every = 10;
  /// Engine arithmetic; unset: fp32 (the public implementation's 'single').
  std::optional<Precision> precision;
  /// Converged mode: called at every check of each of the three solves.
  std::vector<IterationCallback> callbacks;
  /// A precomputed label table (as label_distances returns for these datasets); null: compute.
  const LabelTable* table = nullptr;

  bool is_valid(std::string* why) const;
};

struct OtddSummary {
  double distance = std::numeric_limits<double>::quiet_NaN();  ///< D(A, B), no square root
  Mode mode = Mode::kCompatible;
  LabelDistance label_distance = LabelDistance::kGaussian;
  Precision precision = Precision::kFp32;
  double epsilon = 0, feature_scale = 0, label_scale = 0;
  std::int64_t n = 0, m = 0, d = 0;
  LabelTable table;
  /// Compatible mode: the schedule that ran (eps per averaged step; the init and the final step
  /// ran at its first and last value), the diameter it started from, and the Sinkhorn steps of
  /// each problem (init + schedule + final).
  std::vector<double> schedule;
  double diameter = 0;
  std::int64_t iterations = 0;
  /// Certificates of the returned potentials (L1 marginal error bound on the float64 data) of
  /// the cross problem and the two self-problems. Compatible mode certifies the cross problem
  /// only; its self-problem entries are the engine's residual (its own passes, not a bound).
  double marginal_error_xy = std::numeric_limits<double>::quiet_NaN();
  double marginal_error_xx = std::numeric_limits<double>::quiet_NaN();
  double marginal_error_yy = std::numeric_limits<double>::quiet_NaN();
  /// The three dual values OT(A,B), OT(A,A), OT(B,B).
  double ot_xy = std::numeric_limits<double>::quiet_NaN();
  double ot_xx = std::numeric_limits<double>::quiet_NaN();
  double ot_yy = std::numeric_limits<double>::quiet_NaN();
  /// Converged mode: the three solves.
  std::optional<DivergenceSummary> divergence;
  bool converged = false;  ///< converged mode: all three certified below the tolerance
  std::string message;
  double seconds_labels = 0, seconds_setup = 0, seconds_ot = 0, seconds_total = 0;
  /// Sorting the rows by class and building the problems (host copies); compatible mode: the
  /// certificate of the cross problem and the self-problems' residuals after the loop.
  double seconds_prepare = 0, seconds_certificate = 0;
  /// Compatible mode: the kernel family its oracles ran ("auto": the dispatch table; on the GPU
  /// at fp32 and d > 16 "gemm-3xtf32", float32 products as in the public implementation).
  std::string compatible_kernel;

  std::string brief_report() const;
  std::string full_report() const;
};

/// The label-distance options dataset_distance uses for `options`: options.labels, with the
/// public implementation's inner problem (cost |x - y|^2 / 2, not debiased, its fixed loop) in
/// compatible mode, and the engine precision as the inner precision unless one is set.
LabelDistanceOptions effective_label_options(const OtddOptions& options);

/// D(A, B) with `options`. Throws InvalidArgument naming the defect (sizes, dimensions,
/// non-finite features, a class of one sample for the Gaussian distance, options).
OtddSummary dataset_distance(const Context& ctx, const Dataset& a, const Dataset& b,
                             const OtddOptions& options, const ProgressCallback& progress = {});

/// GeomLoss's eps schedule for p = 2: [D^2] + [exp(e) for e in arange(2 ln D, 2 ln blur,
/// 2 ln scaling)] + [blur^2], blur = sqrt(epsilon).
std::vector<double> geomloss_schedule(double diameter, double epsilon, double scaling);

}  // namespace kantor::otdd
