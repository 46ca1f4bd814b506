// OracleBase<T>: what every engine's dual oracle shares, written once: the problem's sizes and
// cost facts from setup (max cost, largest score term, cost kind), the block lists of the key
// schedule (validated and kept on the host; each engine copies them where its kernels read
// them), and the refusal of squared-Euclidean-only operations for other costs. The per-row dual
// math (potential from an LSE, marginal-error terms, plan prefactors, the online state's merge)
// is lib/core/online_lse.hpp, shared by the CPU loops and the CUDA kernels; each engine
// implements only its passes (lib/cpu/row_pass, lib/cuda/lse_*).
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kantor/error.hpp"
#include "kantor/oracle.hpp"
#include "lib/core/certificate.hpp"
#include "lib/costs/problem_data.hpp"

namespace kantor {

template <class T>
class OracleBase : public Oracle<T> {
 public:
  std::int64_t n() const override { return n_; }
  std::int64_t m() const override { return m_; }
  std::int64_t dim() const override { return d_; }
  Precision precision() const override { return precision_; }
  double max_cost() const override { return max_cost_; }
  double max_score_term() const override { return max_score_term_; }
  std::string cost_kind() const override {
    return classes_ > 0 ? "label-augmented" : "sqeuclidean";
  }
  BlockShape block_shape() const override { return shape_; }
  double marginal_penalty(int side) const override { return side == 0 ? rho_a_ : rho_b_; }
  double weight_mass(int side) const override { return side == 0 ? mass_a_ : mass_b_; }

  using Oracle<T>::certify;
  using Oracle<T>::certify_kept;
  Certificate certify(double eps, const T* f, const T* g, double target) override {
    return certify_decided(eps, f, g, false, target);
  }
  Certificate certify_kept(double eps, const T* f, const T* g, double target) override {
    return certify_decided(eps, f, g, true, target);
  }
  bool certify_next_applies() const override {
    return fp32_certificate_applies() && rho_inv(0) == 0;
  }
  bool update_g_certified_applies() const override {
    return fp32_certificate_applies() && rho_inv(1) == 0;
  }
  Certificate certify_kept_next(double eps, const T* f, const T* g, double target, T* f_next,
                                const CertificateSide* cols) override {
    if (!(target > 0) || !certify_next_applies() || !f_next)
      return certify_decided(eps, f, g, true, target);
    // A try: the fp32 certificate as it comes, decided or not (its bound is an upper bound
    // either way, and a try that fails only costs the caller an iteration); float64 only where
    // the fp32 bound is not finite.
    Certificate c = certify_pass(eps, f, g, true, true, f_next, target, cols);
    c.fp32 = true;
    if (c.rows_only || std::isfinite(c.bound)) return c;
    Certificate d = certify_pass(eps, f, g, true, false);
    d.next_written = c.next_written;
    return d;
  }
  bool update_g_certified(double eps, const T* f, const T* g, double relax, T* g_next,
                          CertificateSide* old_pair, CertificateSide* new_pair) override {
    if (!update_g_certified_applies() || !g_next) return false;
    certified_pass(1, eps, f, g, relax, g_next, old_pair, new_pair);
    return std::isfinite(new_pair->extra) && std::isfinite(new_pair->error);
  }
  bool update_f_certified(double eps, const T* f, const T* g, double relax, T* f_next,
                          CertificateSide* old_pair, CertificateSide* new_pair) override {
    if (!certify_next_applies() || !f_next) return false;
    certified_pass(0, eps, f, g, relax, f_next, old_pair, new_pair);
    return std::isfinite(new_pair->extra) && std::isfinite(new_pair->error);
  }
  Certificate certificate_of(double eps, const CertificateSide& rows,
                             const CertificateSide& cols) const override {
    Certificate c = certificate_bound(rows, cols, n_, m_, d_, eps);
    c.fp32 = true;
    return c;
  }

  // The plain updates are the relaxed update at w = 1 (bit for bit: the engines' blend returns
  // the fresh value for w = 1); each engine implements that one pass.
  void update_f(T eps, const T* g, T* f, double* row_err) override {
    this->relaxed_update(0, eps, T(1), g, f, row_err);
  }
  void update_g(T eps, const T* f, T* g, double* col_err) override {
    this->relaxed_update(1, eps, T(1), f, g, col_err);
  }

  void set_block_lists(const BlockList* f_side, const BlockList* g_side) override {
    if (f_side) validate_block_list(*f_side, n_, m_, shape_, "f side: rows x, keys y");
    if (g_side) validate_block_list(*g_side, m_, n_, shape_, "g side: rows y, keys x");
    std::optional<BlockList> old[2] = {std::move(lists_[0]), std::move(lists_[1])};
    lists_[0] = f_side ? std::optional<BlockList>(*f_side) : std::nullopt;
    lists_[1] = g_side ? std::optional<BlockList>(*g_side) : std::nullopt;
    try {
      block_lists_changed();
    } catch (...) {
      // Refused by the engine (a forced kernel family without lists): the oracle keeps the
      // schedule it had, passes and certificates alike.
      lists_[0] = std::move(old[0]);
      lists_[1] = std::move(old[1]);
      block_lists_changed();
      throw;
    }
  }

 protected:
  OracleBase(const PreparedProblem<T>& prep, Precision precision, BlockShape shape)
      : n_(prep.n),
        m_(prep.m),
        d_(prep.d),
        classes_(prep.classes),
        precision_(precision),
        shape_(shape),
        max_cost_(prep.max_cost),
        max_score_term_(prep.cost_scale * prep.max_sq_norm + prep.max_pair),
        rho_a_(prep.rho_a),
        rho_b_(prep.rho_b),
        mass_a_(prep.rho_a < kInf || prep.rho_b < kInf ? prep.mass_a : 1.0),
        mass_b_(prep.rho_a < kInf || prep.rho_b < kInf ? prep.mass_b : 1.0) {}

  /// The block list of side 0 (f: rows x) or 1 (g: rows y); null for a dense schedule.
  const BlockList* block_list(int side) const {
    return lists_[side] ? &*lists_[side] : nullptr;
  }
  bool label_cost() const { return classes_ > 0; }
  /// 1 / rho of side 0 (a) or 1 (b): 0 for a strict marginal (lib/core/online_lse.hpp).
  double rho_inv(int side) const {
    const double r = side == 0 ? rho_a_ : rho_b_;
    return r < kInf ? 1.0 / r : 0.0;
  }
  bool unbalanced() const { return rho_a_ < kInf || rho_b_ < kInf; }
  /// Throws InvalidArgument for a cost other than SqEuclidean, naming the operation.
  void require_sqeuclidean(const char* what) const {
    if (classes_ > 0)
      throw InvalidArgument(std::string(what) +
                            " is defined for a squared-Euclidean cost only (this problem's cost "
                            "is label-augmented)");
  }
  /// atom_pair_maxima's arguments: a squared-Euclidean cost, atom > 0, (I, J) pairs of atoms
  /// inside the clouds. Throws InvalidArgument naming the first defect.
  void check_atom_pairs(std::int64_t atom, const std::vector<std::int32_t>& pairs) const {
    require_sqeuclidean("atom_pair_maxima");
    if (atom <= 0 || pairs.size() % 2 != 0)
      throw InvalidArgument("atom_pair_maxima: atom (" + std::to_string(atom) +
                            ") must be positive and pairs hold (I, J) pairs (" +
                            std::to_string(pairs.size()) + " entries)");
    const std::int64_t ax = (n_ + atom - 1) / atom, ay = (m_ + atom - 1) / atom;
    for (std::size_t k = 0; 2 * k < pairs.size(); ++k)
      if (pairs[2 * k] < 0 || pairs[2 * k] >= ax || pairs[2 * k + 1] < 0 ||
          pairs[2 * k + 1] >= ay)
        throw InvalidArgument("atom_pair_maxima: pair " + std::to_string(k) + " (" +
                              std::to_string(pairs[2 * k]) + ", " +
                              std::to_string(pairs[2 * k + 1]) + ") is outside the " +
                              std::to_string(ax) + " x " + std::to_string(ay) + " atoms of " +
                              std::to_string(atom) + " points");
  }
  /// Called after set_block_lists: the engine copies the lists where its passes read them.
  virtual void block_lists_changed() = 0;
  /// The engine's certificate passes over every pair (kept = false) or the current block lists
  /// (kept = true), in float64, or (fp32 = true) by its fp32 path (docs/numerics.md, "The fp32
  /// certificate"); fp32 is asked for only where fp32_certificate_applies(). With f_next (fp32,
  /// balanced row side only): the row side also writes f_next_i = f_i - eps ln S_i for its rows
  /// of positive weight and sets next_written when every such S_i is positive and finite (a row
  /// whose S_i is not makes the row side's bound +inf); when the row side's computed error
  /// exceeds rows_stop the column side is skipped (rows_only, bound +inf).
  /// With cols (fp32, kept): the column side is not evaluated, *cols stands for it.
  virtual Certificate certify_pass(double eps, const T* f, const T* g, bool kept, bool fp32,
                                   T* f_next = nullptr,
                                   double rows_stop = std::numeric_limits<double>::infinity(),
                                   const CertificateSide* cols = nullptr) = 0;
  /// update_f_certified's (side 0) and update_g_certified's (side 1) pass: the fp32 side over
  /// that side's list (every key when none) with next_i = p_i - relax eps ln S_i and both pairs'
  /// sides (next_update; the row side with its plan statistics).
  virtual void certified_pass(int side, double eps, const T* f, const T* g, double relax,
                              T* next, CertificateSide* old_pair, CertificateSide* new_pair) = 0;
  /// The rows-only result of certify_pass (the column side skipped).
  /// relaxed_update's side argument: 0 (f) or 1 (g), else InvalidArgument.
  static void check_update_side(int side) {
    if (side != 0 && side != 1)
      throw InvalidArgument("relaxed_update: side must be 0 (f) or 1 (g), got " +
                            std::to_string(side));
  }
  static Certificate rows_only_certificate(const CertificateSide& rows, bool next_written) {
    Certificate c;
    c.computed = rows.error;
    c.bound = std::numeric_limits<double>::infinity();
    c.plan_mass = rows.mass;
    c.plan_cost = rows.cost;
    c.plan_potentials = rows.potentials;
    c.rows_only = true;
    c.next_written = next_written;
    return c;
  }
  /// Whether a row side's sums let its f_next stand (every S_i positive and finite: the side
  /// adds +inf to `extra` otherwise).
  static bool next_usable(const CertificateSide& rows) {
    return std::isfinite(rows.error) && std::isfinite(rows.extra);
  }
  /// The fp32 path's domain: fp32 potentials, a squared-Euclidean cost, d <= 6.
  bool fp32_certificate_applies() const {
    return sizeof(T) == 4 && classes_ == 0 && d_ <= kFastCertificateMaxDim;
  }

  std::int64_t n_ = 0, m_ = 0, d_ = 0, classes_ = 0;

 private:
  // Oracle::certify with a target: the fp32 certificate first where it applies, float64 when it
  // does not decide.
  Certificate certify_decided(double eps, const T* f, const T* g, bool kept, double target) {
    if (target > 0 && fp32_certificate_applies()) {
      Certificate c = certify_pass(eps, f, g, kept, true);
      c.fp32 = true;
      if (certificate_decides(c, target)) return c;
    }
    return certify_pass(eps, f, g, kept, false);
  }

  Precision precision_;
  BlockShape shape_;
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  double max_cost_ = 0, max_score_term_ = 0;
  double rho_a_, rho_b_, mass_a_, mass_b_;
  std::optional<BlockList> lists_[2];
};

}  // namespace kantor
