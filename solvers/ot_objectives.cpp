// DivergenceObjective: S_eps(x, y) (or OT_eps) of the source positions as a kantor::Objective.
#include "kantor/ot_objectives.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "kantor/buffer.hpp"
#include "kantor/error.hpp"

namespace kantor {

template <class T>
struct DivergenceObjective<T>::Point {
  std::vector<T> x;        // the positions in the solver's type (the problem's view)
  std::vector<double> xd;  // as given: the certificate's reference coordinates
  Problem<T> problem;
  std::unique_ptr<SinkhornSolver<T>> solver;
  DivergencePotentials<T> pot;
};

namespace {

template <class T>
void copy_potentials(const Context& ctx, const Potentials<T>& src, Potentials<T>* dst) {
  dst->f = Buffer<T>(ctx, src.f.size());
  dst->g = Buffer<T>(ctx, src.g.size());
  copy(ctx, src.f.cview(), dst->f.view());
  copy(ctx, src.g.cview(), dst->g.view());
  dst->epsilon = src.epsilon;
}

}  // namespace

template <class T>
DivergenceObjective<T>::DivergenceObjective(const Context& ctx, const Problem<T>& problem,
                                            const SinkhornOptions& sinkhorn, const HvpOptions& hvp,
                                            bool debiased)
    : ctx_(&ctx), problem_(problem), sinkhorn_(sinkhorn), hvp_(hvp), debiased_(debiased) {
  hvp_.certify = false;  // the gradient point's solve is certified already
  // The positions' reference coordinates are the objective's own (set at every solve): the
  // problem may carry reference_y alone, which validate() refuses on its own.
  Problem<T> check = problem;
  check.reference_x = MatrixView<const double>{};
  check.reference_y = MatrixView<const double>{};
  validate(check);
  if (problem.reference_y.data && (problem.reference_y.rows != problem.features().y.rows ||
                                   problem.reference_y.cols != problem.features().y.cols))
    throw InvalidArgument("problem.reference_y must have the shape of y (" +
                          std::to_string(problem.features().y.rows) + " x " +
                          std::to_string(problem.features().y.cols) + ")");
  if (problem.labels())
    throw InvalidArgument(
        "DivergenceObjective: the cost must be squared-Euclidean (derivatives of a "
        "label-augmented cost are not implemented)");
  std::string why;
  if (!sinkhorn.is_valid(&why)) throw InvalidArgument("DivergenceObjective: " + why);
  if (!hvp.is_valid(&why)) throw InvalidArgument("DivergenceObjective: " + why);
  n_ = problem.features().x.rows;
  d_ = problem.features().x.cols;
}

template <class T>
DivergenceObjective<T>::~DivergenceObjective() = default;

template <class T>
std::int64_t DivergenceObjective<T>::num_parameters() const {
  return n_ * d_;
}

template <class T>
std::unique_ptr<typename DivergenceObjective<T>::Point> DivergenceObjective<T>::solve_at(
    const double* x, double* value) {
  const std::int64_t N = n_ * d_;
  for (std::int64_t i = 0; i < N; ++i)
    if (!std::isfinite(x[i])) return nullptr;  // outside the domain: the step is rejected
  auto p = std::make_unique<Point>();
  p->xd.assign(x, x + N);
  p->x.assign(x, x + N);
  p->problem = problem_;
  p->problem.features().x = host_matrix<const T>(p->x.data(), n_, d_);
  // The certificate's coordinates: the positions as given (double) and the caller's target
  // reference, both or neither (a float solve without reference_y is certified on the float
  // coordinates of both clouds).
  if (problem_.reference_y.data)
    p->problem.reference_x = host_matrix<const double>(p->xd.data(), n_, d_);
  else
    p->problem.reference_x = MatrixView<const double>{};
  p->solver = std::make_unique<SinkhornSolver<T>>(*ctx_, p->problem, sinkhorn_.precision);
  SinkhornOptions options = sinkhorn_;
  if (warm_) {
    // Warm start from the last accepted point, at the target eps (annealing from c D^2 would
    // throw the warm start away).
    copy_potentials(*ctx_, warm_->xy, &p->pot.xy);
    copy_potentials(*ctx_, warm_->xx, &p->pot.xx);
    copy_potentials(*ctx_, warm_->yy, &p->pot.yy);
    options.anneal = false;
  }
  bool ok = false;
  if (debiased_) {
    const DivergenceSummary s = p->solver->solve_divergence(options, &p->pot);
    last_ = s.xy;
    sinkhorn_iterations_ += s.xy.iterations + s.xx.iterations + s.yy.iterations;
    ok = s.converged() && std::isfinite(s.divergence_raw);
    *value = s.divergence_raw;
  } else {
    const SinkhornSummary s = p->solver->solve(options, &p->pot.xy);
    last_ = s;
    sinkhorn_iterations_ += s.iterations;
    ok = s.converged() && std::isfinite(s.dual_cost);
    *value = s.dual_cost;
  }
  ++solves_;
  if (!ok) return nullptr;
  return p;
}

template <class T>
bool DivergenceObjective<T>::evaluate(const double* x, double* value, double* gradient) {
  double v = 0;
  std::unique_ptr<Point> p;
  const std::int64_t N = n_ * d_;
  if (value_point_ && std::equal(x, x + N, value_point_->xd.begin())) {
    // minimize() evaluates an accepted trial point again with a gradient: reuse its solve.
    p = std::move(value_point_);
    v = value_point_value_;
  } else {
    p = solve_at(x, &v);
  }
  if (!p) return false;
  *value = v;
  if (!gradient) {
    value_point_ = std::move(p);
    value_point_value_ = v;
    return true;
  }
  std::vector<T> g(static_cast<std::size_t>(N));
  GradientOutput<T> out;
  out.x = host_matrix(g.data(), n_, d_);
  // The solve was certified (evaluate() accepts only converged solves): no second certificate.
  if (debiased_)
    p->solver->divergence_gradient(p->pot, out, /*certify=*/false);
  else
    p->solver->gradient(p->pot.xy, out, /*certify=*/false);
  for (std::size_t i = 0; i < g.size(); ++i) {
    gradient[i] = double(g[i]);
    if (!std::isfinite(gradient[i])) return false;
  }
  grad_point_ = std::move(p);
  return true;
}

template <class T>
bool DivergenceObjective<T>::hessian_vector(const double* v, double* out) {
  if (!grad_point_) return false;
  const std::int64_t N = n_ * d_;
  std::vector<T> vt(v, v + N);
  std::vector<T> o(static_cast<std::size_t>(N));
  const MatrixView<const T> A = host_matrix<const T>(vt.data(), n_, d_);
  const MatrixView<T> O = host_matrix(o.data(), n_, d_);
  Point& p = *grad_point_;
  const HvpSummary s =
      debiased_ ? p.solver->divergence_hvp(p.pot, A, O, hvp_) : p.solver->hvp(p.pot.xy, A, O, hvp_);
  hvp_cg_iterations_ += s.cg_iterations;
  if (!s.converged) return false;
  for (std::int64_t i = 0; i < N; ++i) {
    out[i] = double(o[std::size_t(i)]);
    if (!std::isfinite(out[i])) return false;
  }
  return true;
}

template <class T>
void DivergenceObjective<T>::accepted(const double* x) {
  (void)x;  // minimize() calls this after the gradient evaluation at x: grad_point_ is at x
  if (!grad_point_) return;
  auto w = std::make_unique<DivergencePotentials<T>>();
  copy_potentials(*ctx_, grad_point_->pot.xy, &w->xy);
  if (debiased_) {
    copy_potentials(*ctx_, grad_point_->pot.xx, &w->xx);
    copy_potentials(*ctx_, grad_point_->pot.yy, &w->yy);
  }
  warm_ = std::move(w);
}

template class DivergenceObjective<float>;
template class DivergenceObjective<double>;

}  // namespace kantor
