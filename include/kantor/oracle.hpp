// Oracle<T>: the passes of the entropic dual over a point-cloud problem. Solvers call only this.
// Every pointer argument is in the oracle's memory space (device memory for the CUDA engine) and
// has length n (f, a-side vectors) or m (g, b-side vectors). Scalars are written as double into
// that memory space too; nothing here synchronizes with the host.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kantor/context.hpp"
#include "kantor/problem.hpp"
#include "kantor/view.hpp"

namespace kantor {

/// The certificate of a pair of potentials (lib/core/certificate.hpp, docs/numerics.md): an upper
/// bound of the L1 marginal error of the plan they define on the caller's coordinates, evaluated
/// in float64 with exact differences, rounding slack included.
struct Certificate {
  double bound = std::numeric_limits<double>::quiet_NaN();      ///< computed + slack
  double computed = std::numeric_limits<double>::quiet_NaN();   ///< the float64 evaluation
  double slack = std::numeric_limits<double>::quiet_NaN();      ///< its rounding bound
  double plan_mass = std::numeric_limits<double>::quiet_NaN();  ///< sum_ij P_ij
  /// From the same float64 sums over the row side's pairs: <P, C> and sum_ij P_ij (f_i + g_j).
  double plan_cost = std::numeric_limits<double>::quiet_NaN();
  double plan_potentials = std::numeric_limits<double>::quiet_NaN();
  /// Evaluated by an engine's fp32 path (Oracle::certify with a target): `computed` and the
  /// plan values come from float32 terms, `slack` includes that path's rounding bound.
  bool fp32 = false;
  /// Oracle::certify_kept_next: the row side's update was written to f_next.
  bool next_written = false;
  /// Oracle::certify_kept_next: the row side alone exceeded the target, the column side was not
  /// evaluated; `computed` holds the row side's error, `bound` is +inf (no certificate).
  bool rows_only = false;
};

/// What one side of a certificate accumulates (lib/core/certificate.hpp computes the bound from
/// two of them), over the rows i of that side (queries) and all keys j.
struct CertificateSide {
  double error = 0;       ///< sum_i |r_i - w_i|, r_i = w_i sum_j v_j exp(z_ij) (computed)
  double mass = 0;        ///< sum_i r_i
  double weighted_t = 0;  ///< sum_ij P_ij t_ij, t_ij = |f_i| + |g_j| + C_ij (rounding exposure)
  double max_t = 0;       ///< max_ij t_ij over pairs of positive weight
  /// Plan statistics from the same sums (not part of the bound): sum_ij P_ij C_ij and
  /// sum_ij P_ij (p_i + p_j), P the plan as evaluated here.
  double cost = 0;
  double potentials = 0;
  double weight = 0;           ///< sum_i w_i (rows of positive weight)
  /// sum_i target_i (|p_i| / rho + 2): the rounding exposure of the KL-relaxed targets
  /// w_i exp(-p_i / rho) (0 for a strict side).
  double target_exposure = 0;
  /// An engine's own rounding bound for a side it evaluated outside this header's float64 model
  /// (the CUDA engine's fp32 certificate, lib/cuda/certify.cu): added to the side's slack as it
  /// is. Such a side reports weighted_t = max_t = 0 (its exposure is inside `extra`).
  double extra = 0;
};

/// A block-sparse key schedule for one direction of the passes (rows = that direction's queries:
/// x for the f side, y for the g side). Row tile r (rows [r row_tile, (r+1) row_tile)) scans
/// only the keys of its runs p in [run_ptr[r], run_ptr[r+1]): key tiles [runs[2p], runs[2p+1]),
/// key tile t = keys [t key_tile, (t+1) key_tile) clipped to the key count. Keys outside the runs
/// are absent from that row's sums (the truncated kernel of the multiscale solver). The runs of
/// one row tile must not overlap. A row tile without runs has an empty sum: its potential update
/// gives +inf (as a row whose keys are all masked).
struct BlockList {
  std::int64_t row_tile = 0;           ///< > 0; the engine's BlockShape::row_tile
  std::int64_t key_tile = 0;           ///< > 0; a multiple of BlockShape::key_tile
  std::vector<std::int64_t> run_ptr;   ///< ceil(rows / row_tile) + 1 offsets, run_ptr[0] = 0
  std::vector<std::int32_t> runs;      ///< 2 run_ptr.back() entries: (begin, end) key tiles
};

/// The tile shape an engine's block lists use (its kernels' row block and key stage).
/// One level of a cell hierarchy as the multiscale screen's descent reads it
/// (Oracle::screen_descent; host memory): `count` cells, each a record of 3 d + 3 doubles (the
/// layout of kantor/screen_bound.hpp), its mass and whether it holds positive weight.
struct ScreenLevel {
  std::int64_t count = 0;
  const double* packed = nullptr;
  const double* mass = nullptr;
  const char* active = nullptr;
};

/// The kept atom pairs of a screen descent in blocks of the block levels (bx, by): keys[k] =
/// (I0 << 32) | J0 for the k-th kept pair of an x block I0 and a y block J0 (increasing), masks[k]
/// its kept atom pairs, bit 8 a + b for the block's a-th x atom and b-th y atom.
struct ScreenDescent {
  std::vector<std::uint64_t> keys, masks;
  std::int64_t tested = 0;  ///< pair bounds evaluated, all levels
  double dropped = 0;       ///< sum of mass_I mass_J e^(bound / eps) over the dropped cell pairs
  /// With a points stage (ScreenPoints; points_done when the engine ran it): `masks` are the
  /// masks after it (keys whose mask it emptied keep a zero mask), `box_masks` the box stage's
  /// (when asked), and the atom pairs it evaluated and dropped with their mass bound
  /// (sum of mass_I mass_J e^(max / eps), max the pair's Oracle::atom_pair_maxima value or an
  /// engine's upper bound of it: the CUDA engine's fp32 pre-scan reports a bound at most
  /// 0.01 eps above it, lib/cuda/screen_descent.cu).
  bool points_done = false;
  std::vector<std::uint64_t> box_masks;
  std::int64_t point_tests = 0, point_drops = 0;
  double point_dropped = 0;
  /// With ScreenPoints::engine_lists, where the engine kept the pairs (keys, masks and box_masks
  /// then empty; Oracle::engine_block_lists makes the lists of them): the atoms of either side
  /// without a kept pair, increasing.
  bool on_engine = false;
  std::vector<std::int64_t> lonely_x, lonely_y;
};

/// The screen's points stage inside Oracle::screen_descent: the potentials (this engine's memory
/// space) and the atoms' size in points (the hierarchies' level 0); keep_box_masks asks for the
/// box stage's masks too (ScreenDescent::box_masks).
template <class T>
struct ScreenPoints {
  const T* f = nullptr;
  const T* g = nullptr;
  std::int64_t atom = 0;
  bool keep_box_masks = false;
  /// Ask the engine to keep the kept pairs where they are, for engine_block_lists
  /// (ScreenDescent::on_engine says whether it did).
  bool engine_lists = false;
};

struct BlockShape {
  std::int64_t row_tile = 0;
  std::int64_t key_tile = 0;
};

/// Throws InvalidArgument naming the first defect of `list` as a schedule of `rows` queries over
/// `keys` keys on an engine of tile shape `shape` ("f side" / "g side" in `what`): tile sizes,
/// run_ptr length, monotonicity and end, runs outside [0, ceil(keys / key_tile)], begin > end,
/// overlapping runs of one row tile.
void validate_block_list(const BlockList& list, std::int64_t rows, std::int64_t keys,
                         const BlockShape& shape, const std::string& what);

/// Small vector and matrix kernels in an oracle's memory space (device memory on the CUDA engine),
/// the glue of the derivative algorithms (solvers/derivatives.cpp), which are written once over
/// these and the oracle's passes. Nothing here synchronizes with the host: scalars are doubles
/// in the same memory space, so that an iterative method (the HVP's conjugate gradients) keeps
/// its coefficients on the device and reads one scalar at a check. Vectors are contiguous;
/// matrices are row-major views (stride >= cols) in the same memory space. Reductions accumulate
/// in double in a fixed order (results are run-to-run identical).
template <class T>
class VectorOps {
 public:
  virtual ~VectorOps() = default;
  /// dst = value (every entry of a rows x cols view).
  virtual void fill(MatrixView<T> dst, T value) = 0;
  /// dst = alpha src + beta dst (same shapes; beta = 0 ignores dst's old entries, NaN included).
  virtual void axpby(double alpha, MatrixView<const T> src, double beta, MatrixView<T> dst) = 0;
  /// dst_ik = s_i src_ik (s has src.rows entries; dst may alias src).
  virtual void scale_rows(const T* s, MatrixView<const T> src, MatrixView<T> dst) = 0;
  /// dst_i = x_i * y_i (n entries; dst may alias x or y).
  virtual void multiply(std::int64_t n, const T* x, const T* y, T* dst) = 0;
  /// dst_i = x_i / y_i, and 0 where y_i = 0 (a zero-weight point: its row of the plan is empty).
  virtual void divide(std::int64_t n, const T* x, const T* y, T* dst) = 0;
  /// Row-wise Khatri-Rao product: dst(i, k * W.cols + l) = U_ik W_il (dst is rows x U.cols W.cols).
  virtual void row_products(MatrixView<const T> U, MatrixView<const T> W, MatrixView<T> dst) = 0;
  /// Row-wise vector-matrix product: out_il = alpha sum_k u_ik M(i, k * out.cols + l) +
  /// beta out_il (u is rows x p, M rows x p q, out rows x q; beta = 0 ignores out's old entries).
  virtual void row_contract(double alpha, MatrixView<const T> u, MatrixView<const T> M,
                            double beta, MatrixView<T> out) = 0;
  /// out_i = sum_k U_ik W_ik (out has U.rows entries).
  virtual void row_dots(MatrixView<const T> U, MatrixView<const T> W, T* out) = 0;
  /// out[0] = sum_i x_i y_i, accumulated in double (out in this memory space).
  virtual void dot(std::int64_t n, const T* x, const T* y, double* out) = 0;
  /// x_i -= mean(x) (the projection onto sum-zero vectors); `scratch` holds one double.
  virtual void subtract_mean(std::int64_t n, T* x, double* scratch) = 0;
  /// y += sign * (num[0] / den[0]) x with the scalars read in this memory space; a zero or
  /// non-finite ratio leaves y unchanged (a CG step after exact convergence).
  virtual void axpy_ratio(std::int64_t n, const double* num, const double* den, double sign,
                          const T* x, T* y) = 0;
  /// y = x + (num[0] / den[0]) y; a zero, non-finite or undefined ratio gives y = x.
  virtual void xpay_ratio(std::int64_t n, const T* x, const double* num, const double* den,
                          T* y) = 0;
  /// Copies `count` doubles between two places of this memory space.
  virtual void copy_scalars(const double* src, double* dst, std::int64_t count) = 0;
};

template <class T>
class Oracle {
 public:
  virtual ~Oracle() = default;

  virtual std::int64_t n() const = 0;
  virtual std::int64_t m() const = 0;
  virtual std::int64_t dim() const = 0;
  virtual Precision precision() const = 0;
  virtual MemorySpace memory_space() const = 0;
  /// Engine and kernel actually used, for the Summary, e.g. "cpu lse blocked 64x256 fp64".
  virtual std::string description() const = 0;
  /// An upper bound of every cost C_ij (host value from setup): c D^2 with D the diagonal of the
  /// joint bounding box of the features, plus the largest label term c_w W for a LabelAugmented
  /// cost. The annealing start and the scale of the potentials' rounding.
  virtual double max_cost() const = 0;
  /// Largest cost term of a score (c |x_i|^2 or c |y_j|^2 on the centred clouds, plus the largest
  /// label term): the magnitude whose rounding in the engine's arithmetic limits the resolvable
  /// eps (host value from setup).
  virtual double max_score_term() const = 0;
  /// The kind of cost the passes evaluate: "sqeuclidean" or "label-augmented".
  virtual std::string cost_kind() const = 0;
  /// The tile shape of this engine's block lists.
  virtual BlockShape block_shape() const = 0;
  /// Sets the key schedule of every later pass (update, symmetric step, value passes, statistics;
  /// not the certificate, which always sums over every pair): null = dense (all keys). The lists
  /// are validated (validate_block_list) and copied. Squared-Euclidean and label-augmented costs
  /// alike.
  virtual void set_block_lists(const BlockList* f_side, const BlockList* g_side) = 0;
  /// After a screen_descent that kept its pairs on the engine (ScreenDescent::on_engine): those
  /// pairs and the atom pairs `extra` (2 K entries: x atom, y atom; the repair's partners) become
  /// the key schedule of both sides, as set_block_lists would set the lists the host builds from
  /// the same pairs (solvers/multiscale_screen.cpp), without them leaving the engine; *covered
  /// is the point pairs the f side's list covers, *atom_pairs the kept atom pairs. The kept
  /// pairs are consumed. Returns false (nothing changed) where the engine holds none; throws
  /// InvalidArgument for an extra pair outside the atoms (ceil(n / key_tile) x ceil(m /
  /// key_tile), BlockShape::key_tile points each).
  /// set_block_lists (even with nulls) replaces these lists.
  virtual bool engine_block_lists(const std::vector<std::int64_t>& extra, double* covered,
                                  std::int64_t* atom_pairs) {
    (void)extra, (void)covered, (void)atom_pairs;
    return false;
  }
  /// The scale c of the squared-Euclidean part of the cost.
  virtual double cost_scale() const = 0;
  /// The features the passes see, centred on the same point (the cost and every derivative of
  /// it are translation invariant): side 0 = x (n x d), side 1 = y (m x d), in the oracle's
  /// memory space, unrounded (tf32 / bf16 engines round only the copies their tensor cores read).
  virtual MatrixView<const T> points(int side) const = 0;
  /// The vector kernels of this engine (same memory space as the passes).
  virtual VectorOps<T>& ops() = 0;
  /// Normalized weights (total mass 1; as given for an unbalanced problem), in the oracle's
  /// memory space.
  virtual const T* a() const = 0;
  virtual const T* b() const = 0;
  /// The marginal penalty of side 0 (a: rho_a) or 1 (b: rho_b); infinity for a strict marginal
  /// (Problem::rho_a, rho_b; docs/numerics.md section 9).
  virtual double marginal_penalty(int side) const = 0;
  /// The total mass of a (side 0) or b (side 1) as the passes use them: 1 for a balanced problem.
  virtual double weight_mass(int side) const = 0;

  /// f_i <- tau_a T(g)_i, T(g)_i = -eps LSE_j[log b_j + (g_j - C_ij)/eps], in place, with
  /// tau_a = rho_a / (rho_a + eps) (1 for a strict side). If row_err is not null it receives the
  /// L1 residual of the old f's rows, |P(f_old, g) 1 - a exp(-f_old / rho_a)|_1 = sum_i a_i
  /// exp(-f_old_i / rho_a) |exp((f_old_i - f_new_i) / (tau_a eps)) - 1| (for a strict side the
  /// marginal error |P 1 - a|_1).
  virtual void update_f(T eps, const T* g, T* f, double* row_err) = 0;
  /// g_j <- tau_b T(f)_j, T(f)_j = -eps LSE_i[log a_i + (f_i - C_ij)/eps]; col_err as for
  /// update_f.
  virtual void update_g(T eps, const T* f, T* g, double* col_err) = 0;
  /// update_f (side 0: other = g, pot = f) or update_g (side 1: other = f, pot = g) over-relaxed
  /// in one pass: pot <- (1 - w) pot + w tau T(other), formed in double and rounded once (w = 1:
  /// the plain update, bit for bit). err as theirs: the residual of the old pot against the
  /// fresh T(other).
  virtual void relaxed_update(int side, T eps, T w, const T* other, T* pot, double* err) = 0;
  /// Both from the old values: f <- (1-w) f + w tau_a T_f(g), g <- (1-w) g + w tau_b T_g(f). If
  /// err is not null it receives the L1 residual (rows + columns, as for update_f) of the plan of
  /// the old (f, g).
  virtual void symmetric_step(T eps, T w, T* f, T* g, double* err) = 0;

  /// Runs `body` `count` times: one step of a loop that only enqueues this engine's work, with
  /// the same arguments each time (no host reads, writes or synchronizations between its
  /// calls). An engine with launch costs may record it once and replay the record (the CUDA
  /// engine: a CUDA graph, one launch per step) while `key` stays the same: the caller's digest
  /// of whatever body's arguments depend on (eps, factors, pointers). The default calls body.
  virtual void repeat(std::int64_t count, std::uint64_t key, const std::function<void()>& body) {
    (void)key;
    for (std::int64_t k = 0; k < count; ++k) body();
  }

  /// out = P v (n), P_ij = a_i b_j exp((f_i + g_j - C_ij)/eps).
  virtual void apply(T eps, const T* f, const T* g, const T* v, T* out) = 0;
  /// out = P^T u (m).
  virtual void apply_t(T eps, const T* f, const T* g, const T* u, T* out) = 0;
  /// out = P V; V is m x k, out is n x k. If row_mass is not null it receives P 1 (n) from the
  /// same pass (the tensor-core value kernel has it for free).
  virtual void apply_mat(T eps, const T* f, const T* g, MatrixView<const T> V,
                         MatrixView<T> out, T* row_mass = nullptr) = 0;
  /// out = P^T U; U is n x k, out is m x k; col_mass: P^T 1 (m) from the same pass.
  virtual void apply_mat_t(T eps, const T* f, const T* g, MatrixView<const T> U,
                           MatrixView<T> out, T* col_mass = nullptr) = 0;
  /// out (n x d) = barycentric map T(x_i) = sum_j P_ij y_j / sum_j P_ij, original coordinates.
  /// SqEuclidean costs only (the map estimates the Monge map of that cost): InvalidArgument
  /// naming the cost otherwise.
  virtual void barycentric_map(T eps, const T* f, const T* g, MatrixView<T> out) = 0;

  /// out[0] = <a, phi_a(f)> + <b, phi_b(g)>, phi(f) = f for a strict side and
  /// rho (1 - exp(-f / rho)) for a KL-relaxed one (balanced: <a, f> + <b, g>).
  virtual void dual_value(const T* f, const T* g, double* out) = 0;
  /// out[0] = sum_ij P_ij, out[1] = <P, C>, out[2] = sum_ij P_ij (f_i + g_j).
  virtual void plan_statistics(T eps, const T* f, const T* g, double* out) = 0;
  /// out[0] = |P 1 - a|_1 + |P^T 1 - b|_1 (for a KL-relaxed side its residual as in update_f),
  /// evaluated by the engine's own passes (the residual of its rounded problem: cheap, but not
  /// a certificate).
  virtual void marginal_error(T eps, const T* f, const T* g, double* out) = 0;
  /// The certificate of (f, g) at `eps`: two float64 exact-difference passes over the caller's
  /// coordinates (lib/core/certificate.hpp). Synchronizes (returns a host value).
  Certificate certify(double eps, const T* f, const T* g) { return certify(eps, f, g, 0.0); }
  /// The same bound for a caller that needs to know whether it is at most `target` (> 0; 0 =
  /// always float64): an engine may first evaluate it in a cheaper precision with a rigorous
  /// bound of that precision's rounding (the CUDA engine's fp32 path: fp32 potentials, a
  /// squared-Euclidean cost, d <= 6; docs/numerics.md, "Certificates"), and returns that
  /// certificate when it decides (bound <= target, or computed - slack > target); otherwise the
  /// float64 passes. Either way an upper bound of the true error.
  virtual Certificate certify(double eps, const T* f, const T* g, double target) = 0;
  /// The certificate's two float64 passes restricted to the current block lists: the row side
  /// sums each row over the keys of the f-side list, the column side over those of the g-side
  /// list (every pair without lists, then equal to certify()). Its bound covers the L1 marginal
  /// error of the plan restricted to those pairs; the multiscale solver adds the bound of the mass
  /// outside them (docs/multiscale.md). Synchronizes.
  Certificate certify_kept(double eps, const T* f, const T* g) {
    return certify_kept(eps, f, g, 0.0);
  }
  /// certify_kept() with a decision target, as certify(eps, f, g, target).
  virtual Certificate certify_kept(double eps, const T* f, const T* g, double target) = 0;
  /// certify_kept(eps, f, g, target) whose row side also serves as the next f update of the
  /// alternating loop, where the engine's fp32 path runs (balanced sides, every row of positive
  /// weight: the caller's duty; rows of zero weight are left as they are): it sums
  /// S_i = sum_j b_j exp((f_i + g_j - C_ij) / eps) over the f-side list for the certificate anyway,
  /// and writes f_next_i = f_i - eps ln S_i (update_f from g, unrelaxed, through the same list,
  /// evaluated on the caller's coordinates) when every S_i is positive and finite
  /// (Certificate::next_written). When the row side's error alone exceeds `target`, the column
  /// side is skipped (Certificate::rows_only, bound +inf): a failed try then costs about one
  /// update. The fp32 certificate is returned whether or not it decides (an upper bound all the
  /// same), the float64 passes only where its bound is not finite. Engines without that path
  /// return certify_kept(eps, f, g, target), nothing written. f_next must not alias f or g.
  /// `cols`: the column side of (f, g) already evaluated (update_g_certified's new_pair for
  /// exactly these f and g): only the row side runs. Synchronizes.
  virtual Certificate certify_kept_next(double eps, const T* f, const T* g, double target,
                                        T* f_next, const CertificateSide* cols = nullptr) {
    (void)f_next;
    (void)cols;
    return certify_kept(eps, f, g, target);
  }
  /// Whether certify_kept_next can write f_next here (then it does unless a row sum is not
  /// positive and finite), and update_g_certified can run (a strict b side too).
  virtual bool certify_next_applies() const { return false; }
  virtual bool update_g_certified_applies() const { return false; }
  /// update_g through the certificate's column side, where update_g_certified_applies() (every
  /// column of positive weight: the caller's duty): sums S_j = sum_i a_i exp((f_i + g_j - C_ij)
  /// / eps) over the g-side list on the caller's coordinates, writes
  /// g_next_j = g_j - relax eps ln S_j (update_g, relaxed by `relax`; g_next must not alias f or
  /// g), and returns the column sides of the certificates of (f, g) (*old_pair: its error is the
  /// update's residual) and of (f, g_next) (*new_pair, for certify_kept_next(f, g_next, ...)).
  /// Returns false, nothing usable written, where it does not apply or an S_j is not positive
  /// and finite (then update_g). Synchronizes.
  virtual bool update_g_certified(double eps, const T* f, const T* g, double relax, T* g_next,
                                  CertificateSide* old_pair, CertificateSide* new_pair) {
    (void)eps, (void)f, (void)g, (void)relax, (void)g_next, (void)old_pair, (void)new_pair;
    return false;
  }
  /// update_f through the certificate's row side, where certify_next_applies() (every row of
  /// positive weight: the caller's duty): update_g_certified's mirror. Sums S_i = sum_j b_j
  /// exp((f_i + g_j - C_ij) / eps) over the f-side list on the caller's coordinates, writes
  /// f_next_i = f_i - relax eps ln S_i (f_next must not alias f or g), and returns the row sides,
  /// plan statistics included, of (f, g) (*old_pair) and of (f_next, g) (*new_pair). With the
  /// column side of the same pair from update_g_certified, certificate_of gives the pair's
  /// certificate without a pass of its own. Returns false, nothing usable written, where it does
  /// not apply or an S_i is not positive and finite (then update_f). Synchronizes.
  virtual bool update_f_certified(double eps, const T* f, const T* g, double relax, T* f_next,
                                  CertificateSide* old_pair, CertificateSide* new_pair) {
    (void)eps, (void)f, (void)g, (void)relax, (void)f_next, (void)old_pair, (void)new_pair;
    return false;
  }
  /// The certificate of one pair (f, g) from its row side and its column side as
  /// update_f_certified and update_g_certified return them (both of the same f and g, over the
  /// current block lists): the bound certify_kept's fp32 path computes from them. Engines without
  /// those updates return no certificate (bound NaN).
  virtual Certificate certificate_of(double eps, const CertificateSide& rows,
                                     const CertificateSide& cols) const {
    (void)eps, (void)rows, (void)cols;
    return Certificate();
  }

  /// The multiscale screen's second stage (docs/multiscale.md): `pairs` holds K pairs (I, J) of
  /// atoms of `atom` points (x points [I atom, min(n, (I + 1) atom)), y points likewise; 2 K
  /// entries). out[k] (resized to K) is at least the largest f_i + g_j - c |x_i - y_j|^2 over the
  /// atom pair's points of positive weight, on the certificate's float64 coordinates (computed
  /// in float64 with a rounding allowance: an upper bound); -inf when no pair has positive
  /// weight. Where the largest reaches `stop_at`, out[k] is some value >= stop_at (an engine may
  /// stop early). Squared-Euclidean cost only. Synchronizes.
  virtual void atom_pair_maxima(const T* f, const T* g, std::int64_t atom,
                                const std::vector<std::int32_t>& pairs, double stop_at,
                                std::vector<double>* out) = 0;

  /// The multiscale screen's descent (docs/multiscale.md, "The screen") on the engine: from
  /// every pair of active cells of the top levels (x.back(), y.back()), each pair whose bound
  /// (kantor/screen_bound.hpp) is >= keep_at passes its active children (both sides one level
  /// down while both can, then the deeper side alone) to the next test, down to the atoms (level
  /// 0); the kept atom pairs come back in blocks of levels (block_x, block_y) (the host
  /// descent's: max(0, top - steps) a side, steps = max(0, max(top_x, top_y) - 3)), with
  /// the pairs tested and the dropped cells' mass. The same pairs as the host descent (the bound
  /// is evaluated operation for operation alike). With `points`, the kept atom pairs are then
  /// evaluated on their points where the engine can (out->points_done): a pair whose
  /// atom_pair_maxima value is below keep_at leaves its mask, exactly as the host's points stage
  /// over atom_pair_maxima would drop it (an engine may stop a kept pair's evaluation early, and
  /// bound a dropped pair's maximum from above instead of evaluating it: ScreenDescent).
  /// Returns false when the engine has no descent (the CPU engine: the caller descends on the
  /// host threads). Synchronizes.
  virtual bool screen_descent(const std::vector<ScreenLevel>& x, const std::vector<ScreenLevel>& y,
                              int d, double c, double keep_at, double eps, int block_x,
                              int block_y, const ScreenPoints<T>* points, ScreenDescent* out) {
    (void)x, (void)y, (void)d, (void)c, (void)keep_at, (void)eps, (void)block_x, (void)block_y,
        (void)points, (void)out;
    return false;
  }
};

/// The oracle for (context backend, the problem's cost, precision). Copies, centres and
/// normalizes the problem data once. Validates the problem. Throws InvalidArgument for a
/// precision the engine or T does not support (fp64 needs T = double; fp32, tf32 and bf16 need
/// T = float; tf32 and bf16 need the CUDA engine).
template <class T>
std::unique_ptr<Oracle<T>> make_oracle(const Context& ctx, const Problem<T>& problem,
                                       Precision precision);
/// The same with this oracle's kernel family instead of ctx.kernel() (kAuto: the dispatch
/// table). The CPU engine accepts kAuto and kExact only.
template <class T>
std::unique_ptr<Oracle<T>> make_oracle(const Context& ctx, const Problem<T>& problem,
                                       Precision precision, KernelChoice kernel);

namespace detail {
/// make_oracle(ctx, problem, precision) for a problem whose coordinates the library checked
/// already (detail::validate_clouds_checked: its shapes, weights and scalars are validated, its
/// coordinates not scanned again): the multiscale solver's sorted points, cells and lifts.
template <class T>
std::unique_ptr<Oracle<T>> make_oracle_clouds_checked(const Context& ctx, const Problem<T>& problem,
                                                      Precision precision);
}  // namespace detail

}  // namespace kantor
