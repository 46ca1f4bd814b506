// Derivatives of entropic OT at given potentials, written once over the Oracle's passes and its
// VectorOps (docs/numerics.md section 4): gradients by the envelope theorem, the joint (x, y)
// Hessian-vector product by a Schur-complement conjugate-gradient solve of the linearized
// marginal conditions, the inverse HVP, and the divergence's combinations of them.
//
// Notation (one "side" s of a problem): rows are the side's own points X (x for s = 0, y for
// s = 1), keys the other side's points Y; P_s is the plan seen from that side (P for s = 0, P^T
// for s = 1), applied by the oracle's value passes; Ds is the direction of the own points, Dk
// that of the keys. With D_ij = x_i - y_j and E_ij = Ds_i - Dk_j:
//   grad_s           = 2c sum_j P_ij D_ij = 2c (ah * X - P Y),             ah = P 1
//   dC_ij            = 2c <D_ij, E_ij>
//   r_s              = sum_j P_ij dC_ij = 2c (ah v - <PY, Ds> - <X, P Dk> + P w),
//                      v_i = <x_i, Ds_i>, w_j = <y_j, Dk_j>
//   marginals        ah_i z_s,i + (P z_o)_i = r_s,i   (both sides; z = the potentials' derivative)
//   (H (Ds, Dk))_s   = 2c (ah Ds - P Dk) + (2c/eps) sum_j P_ij (z_s,i + z_o,j) D_ij
//                      - ((2c)^2/eps) M,   M_i = sum_j P_ij D_ij <D_ij, E_ij>
//   M_i              = x_i r_s,i / (2c) - (PY)_i v_i
//                      + sum_j P_ij y_j (<y_j, Ds_i> + <Dk_j, x_i>) - (P [w y])_i
// The sum in M is one value pass over the row-wise products [Y | Dk] (x) Y (2 d^2 columns),
// contracted per row with [Ds_i | x_i]. The (2c)^2/eps factor holds for every cost scale c.
#include "kantor/derivatives.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/error.hpp"
#include "kantor/oracle.hpp"
#include "kantor/sinkhorn.hpp"

namespace kantor {

bool HvpOptions::is_valid(std::string* why) const {
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  if (!(tolerance > 0) || !std::isfinite(tolerance))
    return fail("HvpOptions::tolerance must be > 0 and finite, got " + format_number(tolerance));
  if (max_iterations < 1)
    return fail("HvpOptions::max_iterations must be >= 1, got " + std::to_string(max_iterations));
  if (check_every < 1)
    return fail("HvpOptions::check_every must be >= 1, got " + std::to_string(check_every));
  return true;
}

bool InverseHvpOptions::is_valid(std::string* why) const {
  auto fail = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  if (!(tolerance > 0) || !std::isfinite(tolerance))
    return fail("InverseHvpOptions::tolerance must be > 0 and finite, got " +
                format_number(tolerance));
  if (max_iterations < 1)
    return fail("InverseHvpOptions::max_iterations must be >= 1, got " +
                std::to_string(max_iterations));
  return hvp.is_valid(why);
}

std::string to_string(InverseHvpTermination t) {
  switch (t) {
    case InverseHvpTermination::kNotRun:
      return "not run";
    case InverseHvpTermination::kConverged:
      return "converged";
    case InverseHvpTermination::kMaxIterations:
      return "max iterations";
    case InverseHvpTermination::kNegativeCurvature:
      return "negative curvature";
    case InverseHvpTermination::kInnerFailure:
      return "inner failure";
  }
  return "?";
}

std::string HvpSummary::brief_report() const {
  std::ostringstream os;
  os << "HVP: " << (converged ? "converged" : "not converged") << ", " << cg_iterations
     << " CG iterations, relative residual " << relative_residual << ", " << seconds << " s";
  if (!converged) os << " (" << message << ")";
  return os.str();
}

std::string InverseHvpSummary::brief_report() const {
  std::ostringstream os;
  os << "inverse HVP: " << to_string(termination) << ", " << iterations << " iterations ("
     << inner_iterations << " inner CG), relative residual " << relative_residual
     << ", smallest curvature " << curvature << ", " << seconds << " s";
  return os.str();
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// A row-major matrix in the oracle's memory space.
template <class T>
struct Mat {
  Buffer<T> buf;
  std::int64_t rows = 0, cols = 0;
  Mat() = default;
  Mat(const Context& ctx, std::int64_t r, std::int64_t c)
      : buf(ctx, std::max<std::int64_t>(r * c, 1)), rows(r), cols(c) {}
  MatrixView<T> view() { return {buf.data(), rows, cols, cols, buf.space()}; }
  MatrixView<const T> cview() const { return {buf.data(), rows, cols, cols, buf.space()}; }
  /// Columns [c0, c0 + k) as a strided view.
  MatrixView<T> cols_view(std::int64_t c0, std::int64_t k) {
    return {buf.data() + c0, rows, k, cols, buf.space()};
  }
  MatrixView<const T> ccols(std::int64_t c0, std::int64_t k) const {
    return {buf.data() + c0, rows, k, cols, buf.space()};
  }
  T* data() { return buf.data(); }
};

template <class T>
MatrixView<T> column(T* p, std::int64_t n, MemorySpace s) {
  return {p, n, 1, 1, s};
}

/// The problem seen from side s (0: rows x, keys y, P; 1: rows y, keys x, P^T).
template <class T>
struct SideView {
  Oracle<T>* o;
  int s;
  T eps;
  const T* f;
  const T* g;
  std::int64_t rows() const { return s == 0 ? o->n() : o->m(); }
  std::int64_t keys() const { return s == 0 ? o->m() : o->n(); }
  MatrixView<const T> X() const { return o->points(s); }
  MatrixView<const T> Y() const { return o->points(1 - s); }
  /// out (rows x k) = P_s V (V keys x k); mass (if not null, rows) = P_s 1 from the same pass.
  void P(MatrixView<const T> V, MatrixView<T> out, T* mass = nullptr) const {
    if (s == 0)
      o->apply_mat(eps, f, g, V, out, mass);
    else
      o->apply_mat_t(eps, f, g, V, out, mass);
  }
  void Pvec(const T* v, T* out) const {
    if (s == 0)
      o->apply(eps, f, g, v, out);
    else
      o->apply_t(eps, f, g, v, out);
  }
  void PTvec(const T* u, T* out) const {
    if (s == 0)
      o->apply_t(eps, f, g, u, out);
    else
      o->apply(eps, f, g, u, out);
  }
};

/// Copies column k of a matrix view into a contiguous vector.
template <class T>
Buffer<T> extract(const Context& ctx, VectorOps<T>& ops, MatrixView<const T> M, std::int64_t k) {
  Buffer<T> out(ctx, std::max<std::int64_t>(M.rows, 1));
  ops.axpby(1, MatrixView<const T>{M.data + k, M.rows, 1, M.stride, M.space}, 0,
            column(out.data(), M.rows, M.space));
  return out;
}

/// Column layout of one side's first value pass: V (keys x cols) and P_s V (rows x cols) =
/// [P Y | P Dk | P w | P (w y) | P ([Y | Dk] (x) Y)] (ah = P 1 comes with the pass), the Dk
/// blocks only for a key direction, the last two only when the side's output is wanted.
struct Layout {
  std::int64_t d = 0;
  bool dk = false, products = false;
  std::int64_t y = 0, dkc = -1, w = -1, wy = -1, prod = -1, cols = 0;
  Layout(std::int64_t dim, bool has_dk, bool want_products)
      : d(dim), dk(has_dk), products(want_products) {
    std::int64_t c = d;
    if (dk) {
      dkc = c;
      w = c + d;
      c += d + 1;
    }
    if (products) {
      if (dk) {
        wy = c;
        c += d;
      }
      prod = c;
      c += prod_cols();
    }
    cols = c;
  }
  /// [Y | Dk] (x) Y with a key direction, Y (x) Y without.
  std::int64_t prod_width() const { return dk ? 2 * d : d; }
  std::int64_t prod_cols() const { return prod_width() * d; }
};

/// All derivative work of one oracle at one (eps, f, g): buffers in the oracle's memory space.
template <class T>
class Derivatives {
 public:
  Derivatives(const Context& ctx, Oracle<T>& o, T eps, const T* f, const T* g)
      : ctx_(ctx), o_(o), ops_(o.ops()), eps_(eps), f_(f), g_(g), sp_(o.memory_space()) {}

  /// out (rows x d, this memory space) = the gradient with respect to side s's points:
  /// 2c sum_j P_ij (x_i - y_j) = 2c (ah X - P Y).
  void gradient(int s, MatrixView<T> out) {
    const SideView<T> sv = side(s);
    const std::int64_t d = o_.dim();
    // One pass: P Y and ah = P 1. The oracle's points are already a keys x d view.
    Mat<T> PY(ctx_, sv.rows(), d);
    Buffer<T> ah(ctx_, std::max<std::int64_t>(sv.rows(), 1));
    sv.P(sv.Y(), PY.view(), ah.data());
    const double c2 = 2 * o_.cost_scale();
    ops_.scale_rows(ah.data(), sv.X(), out);
    ops_.axpby(-c2, PY.cview(), c2, out);
  }

  /// The joint HVP: (out_x, out_y) = H (A, B) for the Hessian of (x, y) -> OT_eps. Empty A or B
  /// (data == nullptr) is a zero direction; empty out_x or out_y is not computed. Views in this
  /// memory space, n x d and m x d.
  HvpSummary joint_hvp(MatrixView<const T> A, MatrixView<const T> B, MatrixView<T> out_x,
                       MatrixView<T> out_y, const HvpOptions& opt) {
    const auto t0 = Clock::now();
    const std::int64_t d = o_.dim();
    const double c2 = 2 * o_.cost_scale(), eps = double(eps_);
    MatrixView<const T> dir[2] = {A, B};
    MatrixView<T> outs[2] = {out_x, out_y};
    Mat<T> zero_dir[2];
    SideState st[2];
    for (int s = 0; s < 2; ++s) {
      const SideView<T> sv = side(s);
      // A missing own direction is a zero matrix (its terms vanish); a missing key direction
      // drops its columns from the pass.
      MatrixView<const T> Ds = dir[s];
      if (!Ds.data) {
        zero_dir[s] = Mat<T>(ctx_, sv.rows(), d);
        ops_.fill(zero_dir[s].view(), T(0));
        Ds = zero_dir[s].cview();
      }
      st[s].Ds = Ds;
      st[s].Dk = dir[1 - s];
      first_pass(sv, Layout(d, dir[1 - s].data != nullptr, outs[s].data != nullptr), &st[s]);
    }
    // The Schur complement of the row block: S z2 = r_y - P^T (r_x / ah), S = diag(bh) -
    // P^T diag(1/ah) P; then z1 = (r_x - P z2) / ah.
    const std::int64_t n = o_.n(), m = o_.m();
    const SideView<T> s0 = side(0);
    // The marginals of the operator the CG applies, from the same passes (P v, P^T u): S 1 = 0
    // holds only when diag(bh) and P^T diag(1/ah) P come from one rounded P. (The matrix passes
    // may round differently: tf32 tensor cores; at 100k points their masses made S indefinite
    // by ~1e-4 and the CG diverged.)
    Buffer<T> ones(ctx_, std::max(n, m)), ah(ctx_, n), bh(ctx_, m);
    ops_.fill(column(ones.data(), std::max(n, m), sp_), T(1));
    s0.Pvec(ones.data(), ah.data());
    s0.PTvec(ones.data(), bh.data());
    Buffer<T> tn(ctx_, n), rhs(ctx_, m);
    ops_.divide(n, st[0].r.data(), ah.data(), tn.data());
    s0.PTvec(tn.data(), rhs.data());
    ops_.axpby(1, column<const T>(st[1].r.data(), m, sp_), -1, column(rhs.data(), m, sp_));
    Buffer<T> z[2] = {Buffer<T>(ctx_, n), Buffer<T>(ctx_, m)};
    HvpSummary sum = schur_cg(ah, bh, rhs, &z[1], opt);
    s0.Pvec(z[1].data(), tn.data());
    ops_.axpby(1, column<const T>(st[0].r.data(), n, sp_), -1, column(tn.data(), n, sp_));
    ops_.divide(n, tn.data(), ah.data(), z[0].data());
    for (int s = 0; s < 2; ++s)
      if (outs[s].data) output(side(s), st[s], z[s], z[1 - s], c2, eps, outs[s]);
    sum.seconds = seconds_since(t0);
    return sum;
  }

 private:
  struct SideState {
    MatrixView<const T> Ds, Dk;
    Layout layout{0, false, false};
    Mat<T> PV;     // rows x layout.cols
    Buffer<T> ah;  // rows: P_s 1
    Buffer<T> v;   // rows: <x_i, Ds_i>
    Buffer<T> r;   // rows: r_s
    Buffer<T> w;   // keys: <y_j, Dk_j>
  };

  SideView<T> side(int s) const { return SideView<T>{&o_, s, eps_, f_, g_}; }

  void first_pass(const SideView<T>& sv, const Layout& L, SideState* st) {
    const std::int64_t R = sv.rows(), K = sv.keys(), d = L.d;
    st->layout = L;
    Mat<T> V(ctx_, K, L.cols);
    ops_.axpby(1, sv.Y(), 0, V.cols_view(L.y, d));
    if (L.dk) {
      ops_.axpby(1, st->Dk, 0, V.cols_view(L.dkc, d));
      st->w = Buffer<T>(ctx_, K);
      ops_.row_dots(sv.Y(), st->Dk, st->w.data());
      ops_.axpby(1, column<const T>(st->w.data(), K, sp_), 0, V.cols_view(L.w, 1));
    }
    if (L.products) {
      if (L.dk) ops_.scale_rows(st->w.data(), sv.Y(), V.cols_view(L.wy, d));
      // The Y and Dk blocks of V are adjacent: [Y | Dk] (x) Y in one call.
      ops_.row_products(V.ccols(L.y, L.prod_width()), sv.Y(), V.cols_view(L.prod, L.prod_cols()));
    }
    st->PV = Mat<T>(ctx_, R, L.cols);
    st->ah = Buffer<T>(ctx_, std::max<std::int64_t>(R, 1));
    sv.P(V.cview(), st->PV.view(), st->ah.data());
    // r_s = 2c (ah v - <PY, Ds> - <X, P Dk> + P w)
    st->v = Buffer<T>(ctx_, R);
    st->r = Buffer<T>(ctx_, R);
    Buffer<T> t(ctx_, R);
    ops_.row_dots(sv.X(), st->Ds, st->v.data());
    ops_.multiply(R, st->ah.data(), st->v.data(), st->r.data());
    MatrixView<T> r = column(st->r.data(), R, sp_);
    MatrixView<const T> tv = column<const T>(t.data(), R, sp_);
    ops_.row_dots(st->PV.ccols(L.y, d), st->Ds, t.data());
    ops_.axpby(-1, tv, 1, r);
    if (L.dk) {
      ops_.row_dots(sv.X(), st->PV.ccols(L.dkc, d), t.data());
      ops_.axpby(-1, tv, 1, r);
      ops_.axpby(1, st->PV.ccols(L.w, 1), 1, r);
    }
    ops_.axpby(2 * o_.cost_scale(), MatrixView<const T>(r), 0, r);
  }

  /// out (rows x d) = side s's block of H (Ds, Dk), given z_s (own) and z_o (the keys').
  void output(const SideView<T>& sv, const SideState& st, const Buffer<T>& zs, const Buffer<T>& zo,
              double c2, double eps, MatrixView<T> out) {
    const Layout& L = st.layout;
    const std::int64_t R = sv.rows(), K = sv.keys(), d = L.d;
    // Second pass: [P z_o | P (z_o y)].
    Mat<T> V(ctx_, K, 1 + d);
    ops_.axpby(1, column<const T>(zo.data(), K, sp_), 0, V.cols_view(0, 1));
    ops_.scale_rows(zo.data(), sv.Y(), V.cols_view(1, d));
    Mat<T> PV2(ctx_, R, 1 + d);
    sv.P(V.cview(), PV2.view());
    const Buffer<T> pz = extract(ctx_, ops_, PV2.cview(), 0);
    const MatrixView<const T> PY = st.PV.ccols(L.y, d), X = sv.X();
    Mat<T> tmp(ctx_, R, d), tmp2(ctx_, R, d);
    // term 1: 2c (ah Ds - P Dk)
    ops_.scale_rows(st.ah.data(), st.Ds, out);
    ops_.axpby(c2, MatrixView<const T>(out), 0, out);
    if (L.dk) ops_.axpby(-c2, st.PV.ccols(L.dkc, d), 1, out);
    // term 2: -(2c)^2/eps M, M = X r/(2c) - PY v + [Ds | X] . P([Y | Dk] (x) Y) - P (w y)
    const double k2 = -c2 * c2 / eps;
    ops_.scale_rows(st.r.data(), X, tmp.view());
    ops_.axpby(k2 / c2, tmp.cview(), 1, out);
    ops_.scale_rows(st.v.data(), PY, tmp.view());
    ops_.axpby(-k2, tmp.cview(), 1, out);
    if (L.dk) {
      Mat<T> U(ctx_, R, 2 * d);
      ops_.axpby(1, st.Ds, 0, U.cols_view(0, d));
      ops_.axpby(1, X, 0, U.cols_view(d, d));
      ops_.row_contract(k2, U.cview(), st.PV.ccols(L.prod, L.prod_cols()), 1, out);
      ops_.axpby(-k2, st.PV.ccols(L.wy, d), 1, out);
    } else {
      ops_.row_contract(k2, st.Ds, st.PV.ccols(L.prod, L.prod_cols()), 1, out);
    }
    // term 3: (2c/eps) [z_s (ah X - PY) + (P z_o) X - P (z_o y)]
    const double k3 = c2 / eps;
    ops_.scale_rows(st.ah.data(), X, tmp.view());
    ops_.axpby(-1, PY, 1, tmp.view());
    ops_.scale_rows(zs.data(), tmp.cview(), tmp2.view());
    ops_.axpby(k3, tmp2.cview(), 1, out);
    ops_.scale_rows(pz.data(), X, tmp.view());
    ops_.axpby(k3, tmp.cview(), 1, out);
    ops_.axpby(-k3, PV2.ccols(1, d), 1, out);
  }

  /// Preconditioned CG on S z = rhs (S = diag(bh) - P^T diag(1/ah) P, PSD with null vector 1),
  /// preconditioner diag(bh), iterates kept sum-zero. Scalars stay in the oracle's memory space;
  /// the host reads |r|^2 every check_every iterations.
  HvpSummary schur_cg(const Buffer<T>& ah, const Buffer<T>& bh, const Buffer<T>& rhs, Buffer<T>* z,
                      const HvpOptions& opt) {
    const std::int64_t n = o_.n(), m = o_.m();
    const SideView<T> s0 = side(0);
    HvpSummary sum;
    Buffer<T> r(ctx_, m), p(ctx_, m), q(ctx_, m), sv(ctx_, m), tn(ctx_, n), um(ctx_, m);
    // scalars: 0, 1 = r.s (two slots, swapped), 2 = p.q, 3 = r.r, 4 = r0.r0, 5 = scratch
    Buffer<double> sc(ctx_, 6);
    double* rz = sc.data();
    double* rz_new = sc.data() + 1;
    double* pq = sc.data() + 2;
    const auto colm = [&](T* x) { return column(x, m, sp_); };
    const auto ccolm = [&](const T* x) { return column<const T>(x, m, sp_); };
    ops_.axpby(1, ccolm(rhs.data()), 0, colm(r.data()));
    ops_.subtract_mean(m, r.data(), sc.data() + 5);
    ops_.fill(colm(z->data()), T(0));
    ops_.dot(m, r.data(), r.data(), sc.data() + 4);
    const double rr0 = read(sc, 4);
    if (!std::isfinite(rr0)) {
      sum.message = "the right-hand side of the Schur system is not finite";
      return sum;
    }
    if (rr0 == 0) {  // a zero direction (or one the marginals do not see): z = 0
      sum.converged = true;
      sum.relative_residual = 0;
      sum.message = "zero right-hand side";
      return sum;
    }
    // The Jacobi preconditioner's diagonal (see HvpOptions::Preconditioner).
    using Pre = HvpOptions::Preconditioner;
    Buffer<T> diag;
    if (opt.preconditioner == Pre::kDiagonal) {
      // sum_i P_ij^2 / ah_i = b_j (P(eps/2)^T (a / ah))_j; diag(S) = bh - that, >= 0 exactly
      // but ~0 where the plan matches a point alone, where rounding could make it <= 0: the
      // preconditioner is diag(S) + kFloor bh (positive; a 0.1 % change elsewhere).
      constexpr double kFloor = 1e-3;
      diag = Buffer<T>(ctx_, m);
      ops_.divide(n, o_.a(), ah.data(), tn.data());
      o_.apply_t(eps_ / T(2), f_, g_, tn.data(), diag.data());
      ops_.multiply(m, diag.data(), o_.b(), diag.data());
      ops_.axpby(1 + kFloor, ccolm(bh.data()), -1, colm(diag.data()));
    }
    auto precondition = [&]() {
      if (opt.preconditioner == Pre::kDiagonal)
        ops_.divide(m, r.data(), diag.data(), sv.data());
      else if (opt.preconditioner == Pre::kMarginal)
        ops_.divide(m, r.data(), bh.data(), sv.data());
      else
        ops_.axpby(1, ccolm(r.data()), 0, colm(sv.data()));
      ops_.subtract_mean(m, sv.data(), sc.data() + 5);
    };
    precondition();
    ops_.axpby(1, ccolm(sv.data()), 0, colm(p.data()));
    ops_.dot(m, r.data(), sv.data(), rz);
    double rel = 1;
    for (std::int64_t it = 1; it <= opt.max_iterations; ++it) {
      // q = S p = bh p - P^T ((P p) / ah)
      s0.Pvec(p.data(), tn.data());
      ops_.divide(n, tn.data(), ah.data(), tn.data());
      s0.PTvec(tn.data(), um.data());
      ops_.multiply(m, bh.data(), p.data(), q.data());
      ops_.axpby(-1, ccolm(um.data()), 1, colm(q.data()));
      ops_.dot(m, p.data(), q.data(), pq);
      ops_.axpy_ratio(m, rz, pq, 1, p.data(), z->data());
      ops_.axpy_ratio(m, rz, pq, -1, q.data(), r.data());
      ops_.subtract_mean(m, r.data(), sc.data() + 5);
      precondition();
      ops_.dot(m, r.data(), sv.data(), rz_new);
      ops_.xpay_ratio(m, sv.data(), rz_new, rz, p.data());
      std::swap(rz, rz_new);
      sum.cg_iterations = it;
      if (it % opt.check_every == 0 || it == opt.max_iterations) {
        ops_.dot(m, r.data(), r.data(), sc.data() + 3);
        const double rr = read(sc, 3);
        rel = std::sqrt(rr / rr0);
        sum.relative_residual = rel;
        if (!std::isfinite(rel)) {
          sum.message = "the CG residual became NaN or infinite";
          return sum;
        }
        if (rel <= opt.tolerance) {
          sum.converged = true;
          sum.message = "relative residual <= tolerance";
          return sum;
        }
      }
    }
    sum.message = "CG iteration budget (" + std::to_string(opt.max_iterations) +
                  ") spent with relative residual " + format_number(rel) + " > tolerance " +
                  format_number(opt.tolerance);
    return sum;
  }

  /// Reads scalar k of `sc` on the host (synchronizes).
  double read(const Buffer<double>& sc, std::int64_t k) const {
    return to_host(ctx_, VectorView<const double>{sc.data() + k, 1, sc.space()})[0];
  }

  const Context& ctx_;
  Oracle<T>& o_;
  VectorOps<T>& ops_;
  T eps_;
  const T* f_;
  const T* g_;
  MemorySpace sp_;
};

/// Throws InvalidArgument unless the cost is squared-Euclidean.
template <class T>
void require_sqeuclidean(const Problem<T>& p, const char* what) {
  if (p.labels())
    throw InvalidArgument(std::string(what) +
                          ": derivatives are implemented for a squared-Euclidean cost only (this "
                          "problem's cost is label-augmented)");
}

/// Throws InvalidArgument for an unbalanced problem: the Hessian-vector products linearize the
/// balanced marginal constraints (docs/numerics.md section 8), not the KL-relaxed ones.
template <class T>
void require_balanced(const Problem<T>& p, const char* what) {
  if (p.unbalanced())
    throw InvalidArgument(std::string(what) +
                          ": Hessian-vector products are implemented for balanced problems only "
                          "(problem.rho_a / rho_b are set); gradients support unbalanced ones");
}

/// Checks sizes and finiteness of potentials for `o` (downloads them: O(n + m)).
template <class T>
void check_potentials(const Context& ctx, const Oracle<T>& o, const Potentials<T>& p,
                      const std::string& what) {
  if (p.f.size() != o.n() || p.g.size() != o.m())
    throw InvalidArgument(what + ": potentials have sizes " + std::to_string(p.f.size()) + ", " +
                          std::to_string(p.g.size()) +
                          " but the problem has n = " + std::to_string(o.n()) +
                          ", m = " + std::to_string(o.m()) + " (solve first)");
  if (p.f.space() != o.memory_space() || p.g.space() != o.memory_space())
    throw InvalidArgument(what + ": potentials are not in the solver context's memory space");
  const std::vector<T> f = to_host(ctx, p.f.cview()), g = to_host(ctx, p.g.cview());
  for (std::size_t i = 0; i < f.size(); ++i)
    if (!std::isfinite(double(f[i])))
      throw InvalidArgument(what + ": potential f[" + std::to_string(i) + "] is not finite");
  for (std::size_t j = 0; j < g.size(); ++j)
    if (!std::isfinite(double(g[j])))
      throw InvalidArgument(what + ": potential g[" + std::to_string(j) + "] is not finite");
}

template <class T>
void check_shape(std::int64_t rows, std::int64_t cols, MemorySpace space, std::int64_t stride,
                 std::int64_t want_rows, std::int64_t want_cols, const std::string& what) {
  if (space != MemorySpace::kHost) throw InvalidArgument(what + " must be host memory");
  if (rows != want_rows || cols != want_cols)
    throw InvalidArgument(what + " must be " + std::to_string(want_rows) + " x " +
                          std::to_string(want_cols) + ", got " + std::to_string(rows) + " x " +
                          std::to_string(cols));
  if (stride < cols)
    throw InvalidArgument(what + ": stride " + std::to_string(stride) + " < cols " +
                          std::to_string(cols));
}

/// A host direction (validated: shape, finite) uploaded contiguously into `ctx`'s space.
template <class T>
Buffer<T> upload_direction(const Context& ctx, MatrixView<const T> A, std::int64_t rows,
                           std::int64_t cols, const std::string& what) {
  if (!A.data) throw InvalidArgument(what + " is empty (data == nullptr)");
  check_shape<T>(A.rows, A.cols, A.space, A.stride, rows, cols, what);
  std::vector<T> h(std::size_t(rows * cols));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t k = 0; k < cols; ++k) {
      const T v = A(i, k);
      if (!std::isfinite(double(v)))
        throw InvalidArgument(what + "(" + std::to_string(i) + ", " + std::to_string(k) +
                              ") is not finite");
      h[std::size_t(i * cols + k)] = v;
    }
  Buffer<T> b(ctx, std::max<std::int64_t>(rows * cols, 1));
  copy(ctx, VectorView<const T>{h.data(), rows * cols, MemorySpace::kHost},
       VectorView<T>{b.data(), rows * cols, b.space()});
  return b;
}

template <class T>
MatrixView<T> mview(Buffer<T>& b, std::int64_t rows, std::int64_t cols) {
  return {b.data(), rows, cols, cols, b.space()};
}

template <class T>
std::vector<double> download(const Context& ctx, const Buffer<T>& b, std::int64_t count) {
  const std::vector<T> h = to_host(ctx, VectorView<const T>{b.data(), count, b.space()});
  return std::vector<double>(h.begin(), h.end());
}

/// Sum of a weight vector as the caller gave it (1 for the empty, uniform, view).
template <class T>
double raw_mass(const Context& ctx, VectorView<const T> w) {
  if (!w.data || w.size == 0) return 1.0;
  const std::vector<T> h =
      w.space == MemorySpace::kHost ? std::vector<T>(w.data, w.data + w.size) : to_host(ctx, w);
  double s = 0;
  for (const T v : h) s += double(v);
  return s;
}

/// The gradient blocks of one problem on the host, in double.
struct HostGradient {
  std::vector<double> x, y, a, b;  // empty when not asked
  double value = 0, certificate = 0, epsilon = 0;
};

template <class T>
HostGradient host_gradient(const Context& ctx, Oracle<T>& o, const Potentials<T>& pot, double eps,
                           bool want_x, bool want_y, bool want_a, bool want_b, double mass_a,
                           double mass_b, bool certify) {
  HostGradient out;
  out.epsilon = eps;
  Derivatives<T> D(ctx, o, T(eps), pot.f.data(), pot.g.data());
  const std::int64_t n = o.n(), m = o.m(), d = o.dim();
  if (want_x) {
    Buffer<T> G(ctx, std::max<std::int64_t>(n * d, 1));
    D.gradient(0, mview(G, n, d));
    out.x = download(ctx, G, n * d);
  }
  if (want_y) {
    Buffer<T> G(ctx, std::max<std::int64_t>(m * d, 1));
    D.gradient(1, mview(G, m, d));
    out.y = download(ctx, G, m * d);
  }
  // Weights: OT(a/|a|, b/|b|) has gradient (f - <a/|a|, f>) / |a| in the raw a (f is the
  // gradient in the normalized weights up to a constant, which the mass constraint removes).
  // Unbalanced (docs/numerics.md section 9): the raw weights are the problem's, and the envelope
  // gradient of the dual in a_i at converged potentials is phi_a(f_i) - eps (exp(-f_i / rho_a) -
  // m_b) (sum_j b_j exp((f_i + g_j - C_ij) / eps) = exp(-f_i / rho_a) at the fixed point; 1 for a
  // strict side).
  const bool unbalanced = std::isfinite(o.marginal_penalty(0)) || std::isfinite(o.marginal_penalty(1));
  if (unbalanced && (want_a || want_b)) {
    const std::vector<double> f = download(ctx, pot.f, n), g = download(ctx, pot.g, m);
    auto grad = [&](const std::vector<double>& p, int side) {
      const double rp = o.marginal_penalty(side);
      const double ri = std::isfinite(rp) ? 1.0 / rp : 0.0;
      const double other_mass = o.weight_mass(1 - side);
      std::vector<double> r(p.size());
      for (std::size_t i = 0; i < p.size(); ++i)
        r[i] = (ri == 0 ? p[i] : -std::expm1(-p[i] * ri) / ri) -
               eps * (std::exp(-p[i] * ri) - other_mass);
      return r;
    };
    if (want_a) out.a = grad(f, 0);
    if (want_b) out.b = grad(g, 1);
  } else if (want_a || want_b) {
    const std::vector<T> a = to_host(ctx, VectorView<const T>{o.a(), n, o.memory_space()});
    const std::vector<T> b = to_host(ctx, VectorView<const T>{o.b(), m, o.memory_space()});
    const std::vector<double> f = download(ctx, pot.f, n), g = download(ctx, pot.g, m);
    auto project = [](const std::vector<T>& w, const std::vector<double>& p, double mass) {
      double mean = 0;
      for (std::size_t i = 0; i < p.size(); ++i) mean += double(w[i]) * p[i];
      std::vector<double> r(p.size());
      for (std::size_t i = 0; i < p.size(); ++i) r[i] = (p[i] - mean) / mass;
      return r;
    };
    if (want_a) out.a = project(a, f, mass_a);
    if (want_b) out.b = project(b, g, mass_b);
  }
  Buffer<double> sc(ctx, 1);
  o.dual_value(pot.f.data(), pot.g.data(), sc.data());
  out.value = to_host(ctx, sc.cview())[0];
  if (unbalanced) {
    // The unbalanced dual's mass term: - eps (sum P - m_a m_b).
    Buffer<double> st(ctx, 3);
    o.plan_statistics(T(eps), pot.f.data(), pot.g.data(), st.data());
    out.value -= eps * (to_host(ctx, st.cview())[0] - o.weight_mass(0) * o.weight_mass(1));
  }
  out.certificate = certify ? o.certify(eps, pot.f.data(), pot.g.data()).bound
                            : std::numeric_limits<double>::quiet_NaN();
  return out;
}

template <class T>
void write_matrix(const std::vector<double>& h, MatrixView<T> out) {
  for (std::int64_t i = 0; i < out.rows; ++i)
    for (std::int64_t k = 0; k < out.cols; ++k) out(i, k) = T(h[std::size_t(i * out.cols + k)]);
}
template <class T>
void write_vector(const std::vector<double>& h, VectorView<T> out) {
  for (std::int64_t i = 0; i < out.size; ++i) out[i] = T(h[std::size_t(i)]);
}

template <class T>
void check_gradient_output(const GradientOutput<T>& out, std::int64_t n, std::int64_t m,
                           std::int64_t d, const std::string& what) {
  if (out.x.data)
    check_shape<T>(out.x.rows, out.x.cols, out.x.space, out.x.stride, n, d, what + ": out.x");
  if (out.y.data)
    check_shape<T>(out.y.rows, out.y.cols, out.y.space, out.y.stride, m, d, what + ": out.y");
  if (out.a.data) check_shape<T>(out.a.size, 1, out.a.space, 1, n, 1, what + ": out.a");
  if (out.b.data) check_shape<T>(out.b.size, 1, out.b.space, 1, m, 1, what + ": out.b");
}

template <class T>
void check_output_matrix(MatrixView<T> out, std::int64_t n, std::int64_t d,
                         const std::string& what) {
  if (!out.data) throw InvalidArgument(what + " is empty (data == nullptr)");
  check_shape<T>(out.rows, out.cols, out.space, out.stride, n, d, what);
}

}  // namespace

template <class T>
GradientSummary SinkhornSolver<T>::gradient(const Potentials<T>& pot,
                                            const GradientOutput<T>& out, bool certify) {
  const auto t0 = Clock::now();
  require_sqeuclidean(problem_, "gradient");
  Oracle<T>& o = *oracle_;
  check_potentials(*ctx_, o, pot, "gradient");
  check_gradient_output(out, o.n(), o.m(), o.dim(), "gradient");
  const double eps = pot.epsilon > 0 ? pot.epsilon : problem_.epsilon;
  const HostGradient h = host_gradient(
      *ctx_, o, pot, eps, out.x.data != nullptr, out.y.data != nullptr, out.a.data != nullptr,
      out.b.data != nullptr, raw_mass(*ctx_, problem_.a), raw_mass(*ctx_, problem_.b),
      certify);
  if (out.x.data) write_matrix(h.x, out.x);
  if (out.y.data) write_matrix(h.y, out.y);
  if (out.a.data) write_vector(h.a, out.a);
  if (out.b.data) write_vector(h.b, out.b);
  GradientSummary s;
  s.value = h.value;
  s.epsilon = eps;
  s.marginal_error = h.certificate;
  s.seconds = seconds_since(t0);
  return s;
}

template <class T>
GradientSummary SinkhornSolver<T>::divergence_gradient(const DivergencePotentials<T>& pot,
                                                       const GradientOutput<T>& out,
                                                       bool certify) {
  const auto t0 = Clock::now();
  require_sqeuclidean(problem_, "divergence_gradient");
  Oracle<T>& o = *oracle_;
  Oracle<T>& oxx = self_oracle(0);
  Oracle<T>& oyy = self_oracle(1);
  check_potentials(*ctx_, o, pot.xy, "divergence_gradient (x, y)");
  check_potentials(*ctx_, oxx, pot.xx, "divergence_gradient (x, x)");
  check_potentials(*ctx_, oyy, pot.yy, "divergence_gradient (y, y)");
  check_gradient_output(out, o.n(), o.m(), o.dim(), "divergence_gradient");
  const double ma = raw_mass(*ctx_, problem_.a), mb = raw_mass(*ctx_, problem_.b);
  auto eps_of = [&](const Potentials<T>& p) {
    return p.epsilon > 0 ? p.epsilon : problem_.epsilon;
  };
  const bool wx = out.x.data != nullptr, wy = out.y.data != nullptr;
  const bool wa = out.a.data != nullptr, wb = out.b.data != nullptr;
  const HostGradient xy = host_gradient(*ctx_, o, pot.xy, eps_of(pot.xy), wx, wy, wa, wb, ma, mb,
                                        certify);
  // OT(x, x) moves both arguments: its gradient in x is the sum of its two sides' gradients.
  const HostGradient xx = host_gradient(*ctx_, oxx, pot.xx, eps_of(pot.xx), wx, wx, wa, wa, ma, ma,
                                        certify);
  const HostGradient yy = host_gradient(*ctx_, oyy, pot.yy, eps_of(pot.yy), wy, wy, wb, wb, mb, mb,
                                        certify);
  auto combine = [](const std::vector<double>& main, const std::vector<double>& s1,
                    const std::vector<double>& s2) {
    std::vector<double> r(main.size());
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = main[i] - 0.5 * (s1[i] + s2[i]);
    return r;
  };
  if (wx) write_matrix(combine(xy.x, xx.x, xx.y), out.x);
  if (wy) write_matrix(combine(xy.y, yy.x, yy.y), out.y);
  // Unbalanced: the mass term eps/2 (m_a - m_b)^2 of S (docs/numerics.md section 9) adds
  // eps (m_a - m_b) to every a_i's derivative and subtracts it from every b_j's.
  const bool unbalanced = problem_.unbalanced();
  const double dm = unbalanced ? o.weight_mass(0) - o.weight_mass(1) : 0.0;
  const double eps_xy = eps_of(pot.xy);
  auto shifted = [&](std::vector<double> v, double by) {
    for (double& e : v) e += by;
    return v;
  };
  if (wa) write_vector(shifted(combine(xy.a, xx.a, xx.b), eps_xy * dm), out.a);
  if (wb) write_vector(shifted(combine(xy.b, yy.a, yy.b), -eps_xy * dm), out.b);
  GradientSummary s;
  s.value = xy.value - 0.5 * xx.value - 0.5 * yy.value + 0.5 * eps_xy * dm * dm;
  s.epsilon = xy.epsilon;
  s.marginal_error = std::max({xy.certificate, xx.certificate, yy.certificate});
  s.seconds = seconds_since(t0);
  return s;
}

template <class T>
HvpSummary SinkhornSolver<T>::hvp(const Potentials<T>& pot, MatrixView<const T> direction,
                                  MatrixView<T> out, const HvpOptions& options) {
  const auto t0 = Clock::now();
  require_sqeuclidean(problem_, "hvp");
  require_balanced(problem_, "hvp");
  std::string why;
  if (!options.is_valid(&why)) throw InvalidArgument("hvp: " + why);
  Oracle<T>& o = *oracle_;
  const std::int64_t n = o.n(), d = o.dim();
  check_potentials(*ctx_, o, pot, "hvp");
  check_output_matrix(out, n, d, "hvp: out");
  Buffer<T> A = upload_direction(*ctx_, direction, n, d, "hvp: direction");
  Buffer<T> O(*ctx_, std::max<std::int64_t>(n * d, 1));
  const double eps = pot.epsilon > 0 ? pot.epsilon : problem_.epsilon;
  Derivatives<T> D(*ctx_, o, T(eps), pot.f.data(), pot.g.data());
  HvpSummary s = D.joint_hvp(MatrixView<const T>(mview(A, n, d)), MatrixView<const T>{},
                             mview(O, n, d), MatrixView<T>{}, options);
  write_matrix(download(*ctx_, O, n * d), out);
  if (options.certify) s.marginal_error = o.certify(eps, pot.f.data(), pot.g.data()).bound;
  s.seconds = seconds_since(t0);
  return s;
}

template <class T>
HvpSummary SinkhornSolver<T>::divergence_hvp(const DivergencePotentials<T>& pot,
                                             MatrixView<const T> direction, MatrixView<T> out,
                                             const HvpOptions& options) {
  const auto t0 = Clock::now();
  require_sqeuclidean(problem_, "divergence_hvp");
  require_balanced(problem_, "divergence_hvp");
  std::string why;
  if (!options.is_valid(&why)) throw InvalidArgument("divergence_hvp: " + why);
  Oracle<T>& o = *oracle_;
  Oracle<T>& oxx = self_oracle(0);
  const std::int64_t n = o.n(), d = o.dim();
  check_potentials(*ctx_, o, pot.xy, "divergence_hvp (x, y)");
  check_potentials(*ctx_, oxx, pot.xx, "divergence_hvp (x, x)");
  check_output_matrix(out, n, d, "divergence_hvp: out");
  Buffer<T> A = upload_direction(*ctx_, direction, n, d, "divergence_hvp: direction");
  const MatrixView<const T> Av = mview(A, n, d);
  const std::int64_t nd = std::max<std::int64_t>(n * d, 1);
  Buffer<T> O(*ctx_, nd), Ox(*ctx_, nd), Oy(*ctx_, nd);
  const double exy = pot.xy.epsilon > 0 ? pot.xy.epsilon : problem_.epsilon;
  const double exx = pot.xx.epsilon > 0 ? pot.xx.epsilon : problem_.epsilon;
  Derivatives<T> Dxy(*ctx_, o, T(exy), pot.xy.f.data(), pot.xy.g.data());
  HvpSummary s1 =
      Dxy.joint_hvp(Av, MatrixView<const T>{}, mview(O, n, d), MatrixView<T>{}, options);
  // x -> OT(x, x): the joint HVP in direction (A, A), both blocks.
  Derivatives<T> Dxx(*ctx_, oxx, T(exx), pot.xx.f.data(), pot.xx.g.data());
  HvpSummary s2 = Dxx.joint_hvp(Av, Av, mview(Ox, n, d), mview(Oy, n, d), options);
  const std::vector<double> h = download(*ctx_, O, n * d), hx = download(*ctx_, Ox, n * d),
                            hy = download(*ctx_, Oy, n * d);
  std::vector<double> r(h.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = h[i] - 0.5 * (hx[i] + hy[i]);
  write_matrix(r, out);
  HvpSummary s;
  s.converged = s1.converged && s2.converged;
  s.message = s1.converged ? (s2.converged ? s1.message : "(x, x): " + s2.message)
                           : "(x, y): " + s1.message;
  s.cg_iterations = s1.cg_iterations + s2.cg_iterations;
  s.relative_residual = std::max(s1.relative_residual, s2.relative_residual);
  if (options.certify)
    s.marginal_error = std::max(o.certify(exy, pot.xy.f.data(), pot.xy.g.data()).bound,
                                oxx.certify(exx, pot.xx.f.data(), pot.xx.g.data()).bound);
  s.seconds = seconds_since(t0);
  return s;
}

template <class T>
InverseHvpSummary SinkhornSolver<T>::inverse_hvp(const Potentials<T>& pot, MatrixView<const T> g,
                                                 MatrixView<T> out,
                                                 const InverseHvpOptions& options) {
  const auto t0 = Clock::now();
  require_sqeuclidean(problem_, "inverse_hvp");
  require_balanced(problem_, "inverse_hvp");
  std::string why;
  if (!options.is_valid(&why)) throw InvalidArgument("inverse_hvp: " + why);
  Oracle<T>& o = *oracle_;
  const std::int64_t n = o.n(), d = o.dim(), N = n * d;
  check_potentials(*ctx_, o, pot, "inverse_hvp");
  check_output_matrix(out, n, d, "inverse_hvp: out");
  // Validates g's shape and entries; the CG below works on a host copy in double.
  (void)upload_direction(*ctx_, g, n, d, "inverse_hvp: g");
  std::vector<double> b(static_cast<std::size_t>(N)), x(static_cast<std::size_t>(N), 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < d; ++k) b[std::size_t(i * d + k)] = double(g(i, k));
  const double eps = pot.epsilon > 0 ? pot.epsilon : problem_.epsilon;
  Derivatives<T> D(*ctx_, o, T(eps), pot.f.data(), pot.g.data());
  Buffer<T> P(*ctx_, std::max<std::int64_t>(N, 1)), HP(*ctx_, std::max<std::int64_t>(N, 1));
  InverseHvpSummary s;
  auto dotv = [](const std::vector<double>& u, const std::vector<double>& v) {
    double r = 0;
    for (std::size_t i = 0; i < u.size(); ++i) r += u[i] * v[i];
    return r;
  };
  std::vector<double> r = b, p = b;
  const double bb = dotv(b, b);
  double rr = bb;
  s.relative_residual = bb > 0 ? 1.0 : 0.0;
  s.termination = InverseHvpTermination::kMaxIterations;
  if (bb == 0) s.termination = InverseHvpTermination::kConverged;
  for (std::int64_t it = 1; it <= options.max_iterations && bb > 0; ++it) {
    std::vector<T> pt(p.begin(), p.end());
    copy(*ctx_, VectorView<const T>{pt.data(), N, MemorySpace::kHost},
         VectorView<T>{P.data(), N, P.space()});
    const HvpSummary hs = D.joint_hvp(MatrixView<const T>(mview(P, n, d)), MatrixView<const T>{},
                                      mview(HP, n, d), MatrixView<T>{}, options.hvp);
    s.iterations = it;
    s.inner_iterations += hs.cg_iterations;
    if (!hs.converged) {
      s.termination = InverseHvpTermination::kInnerFailure;
      s.message = "HVP " + std::to_string(it) + ": " + hs.message;
      break;
    }
    const std::vector<double> hp = download(*ctx_, HP, N);
    const double php = dotv(p, hp), pp = dotv(p, p);
    const double curv = php / pp;
    if (!(curv >= s.curvature))
      s.curvature = std::isnan(s.curvature) ? curv : std::min(s.curvature, curv);
    if (!(php > 0)) {
      s.termination = InverseHvpTermination::kNegativeCurvature;
      s.message = "p^T H p / p^T p = " + format_number(curv) + " <= 0 at iteration " +
                  std::to_string(it) +
                  ": the Hessian is not positive definite along the CG direction; the output "
                  "is the last iterate before it";
      break;
    }
    const double alpha = rr / php;
    for (std::int64_t i = 0; i < N; ++i) {
      x[std::size_t(i)] += alpha * p[std::size_t(i)];
      r[std::size_t(i)] -= alpha * hp[std::size_t(i)];
    }
    const double rr_new = dotv(r, r);
    s.relative_residual = std::sqrt(rr_new / bb);
    if (s.relative_residual <= options.tolerance) {
      s.termination = InverseHvpTermination::kConverged;
      break;
    }
    const double beta = rr_new / rr;
    rr = rr_new;
    for (std::int64_t i = 0; i < N; ++i)
      p[std::size_t(i)] = r[std::size_t(i)] + beta * p[std::size_t(i)];
  }
  if (s.termination == InverseHvpTermination::kConverged)
    s.message = "relative residual <= tolerance";
  else if (s.termination == InverseHvpTermination::kMaxIterations)
    s.message = "iteration budget (" + std::to_string(options.max_iterations) +
                ") spent with relative residual " + format_number(s.relative_residual);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < d; ++k) out(i, k) = T(x[std::size_t(i * d + k)]);
  s.seconds = seconds_since(t0);
  return s;
}

template <class T>
void oracle_gradient(const Context& ctx, Oracle<T>& oracle, T eps, const T* f, const T* g, int side,
                     MatrixView<T> out) {
  if (side != 0 && side != 1)
    throw InvalidArgument("oracle_gradient: side must be 0 (x) or 1 (y), got " +
                          std::to_string(side));
  const std::int64_t rows = side == 0 ? oracle.n() : oracle.m();
  if (out.rows != rows || out.cols != oracle.dim() || out.space != oracle.memory_space())
    throw InvalidArgument("oracle_gradient: out must be " + std::to_string(rows) + " x " +
                          std::to_string(oracle.dim()) + " in the oracle's memory space");
  Derivatives<T>(ctx, oracle, eps, f, g).gradient(side, out);
}

template <class T>
HvpSummary oracle_hvp(const Context& ctx, Oracle<T>& oracle, T eps, const T* f, const T* g,
                      MatrixView<const T> A, MatrixView<const T> B, MatrixView<T> out_x,
                      MatrixView<T> out_y, const HvpOptions& options) {
  std::string why;
  if (!options.is_valid(&why)) throw InvalidArgument("oracle_hvp: " + why);
  const std::int64_t n = oracle.n(), m = oracle.m(), d = oracle.dim();
  const MemorySpace sp = oracle.memory_space();
  auto check = [&](std::int64_t rows, std::int64_t cols, std::int64_t stride, MemorySpace s,
                   bool present, std::int64_t want, const char* what) {
    if (present && (rows != want || cols != d || stride < cols || s != sp))
      throw InvalidArgument(std::string("oracle_hvp: ") + what + " must be " +
                            std::to_string(want) + " x " + std::to_string(d) +
                            " in the oracle's memory space");
  };
  check(A.rows, A.cols, A.stride, A.space, A.data != nullptr, n, "A");
  check(B.rows, B.cols, B.stride, B.space, B.data != nullptr, m, "B");
  check(out_x.rows, out_x.cols, out_x.stride, out_x.space, out_x.data != nullptr, n, "out_x");
  check(out_y.rows, out_y.cols, out_y.stride, out_y.space, out_y.data != nullptr, m, "out_y");
  return Derivatives<T>(ctx, oracle, eps, f, g).joint_hvp(A, B, out_x, out_y, options);
}

#define KANTOR_INSTANTIATE_DERIVATIVES(T)                                                         \
  template GradientSummary SinkhornSolver<T>::gradient(const Potentials<T>&,                      \
                                                       const GradientOutput<T>&, bool);           \
  template GradientSummary SinkhornSolver<T>::divergence_gradient(const DivergencePotentials<T>&, \
                                                                  const GradientOutput<T>&, bool);\
  template HvpSummary SinkhornSolver<T>::hvp(const Potentials<T>&, MatrixView<const T>,           \
                                             MatrixView<T>, const HvpOptions&);                   \
  template HvpSummary SinkhornSolver<T>::divergence_hvp(                                          \
      const DivergencePotentials<T>&, MatrixView<const T>, MatrixView<T>, const HvpOptions&);     \
  template InverseHvpSummary SinkhornSolver<T>::inverse_hvp(                                      \
      const Potentials<T>&, MatrixView<const T>, MatrixView<T>, const InverseHvpOptions&);        \
  template void oracle_gradient(const Context&, Oracle<T>&, T, const T*, const T*, int,           \
                                MatrixView<T>);                                                   \
  template HvpSummary oracle_hvp(const Context&, Oracle<T>&, T, const T*, const T*,               \
                                 MatrixView<const T>, MatrixView<const T>, MatrixView<T>,         \
                                 MatrixView<T>, const HvpOptions&);
KANTOR_INSTANTIATE_DERIVATIVES(float)
KANTOR_INSTANTIATE_DERIVATIVES(double)

}  // namespace kantor
