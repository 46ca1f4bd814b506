// The multiscale solver behind SinkhornOptions::solver (docs/multiscale.md). Internal to
// solvers/: solve_sinkhorn and SinkhornSolver::solve dispatch here.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "kantor/oracle.hpp"
#include "kantor/sinkhorn.hpp"

namespace kantor::multiscale {

/// Whether SolverKind::kAuto picks the multiscale solver for this problem and these options
/// (`warm`: the call holds warm-start potentials); *why receives the reason either way.
template <class T>
bool auto_picks_multiscale(const Problem<T>& problem, const SinkhornOptions& options, bool warm,
                           std::string* why);

/// Solves `problem` with the multiscale solver (the caller validated the options). Potentials
/// of sizes n and m in `pot` are a warm start (no coarse levels: the mask is built from them).
/// `lists` (optional, two entries): the f-side and g-side block lists of the final fine passes,
/// over the points in the caller's order (left empty when the fine passes ran dense); the next
/// finer level lifts through them. `coarse` marks a coarse level of an enclosing solve: its
/// points are the caller's cells, runs of Morton-sorted points, and keep their order (no sort of
/// their own); its potentials are only a warm start, so it runs the truncated passes whatever
/// their density and stops on the engine's residual (no certificate; the finest level
/// certifies the result). `lists` is for coarse levels only. `cells_checked` (coarse levels):
/// the caller's points were scanned for non-finite coordinates, so its cells, weighted means of
/// them, are not scanned again. `images` (coarse levels, optional): the returned plan's images
/// of the x points, sums (n x d, row-major) sum_j P_ij y_j and masses sum_j P_ij, over the
/// level's lists (the Gaussian lift's T, solvers/multiscale_lift.hpp).
struct CellImages {
  std::vector<double> sums, mass;
};
template <class T>
SinkhornSummary solve(const Context& ctx, const Problem<T>& problem,
                      const SinkhornOptions& options, Precision precision, Potentials<T>* pot,
                      std::chrono::steady_clock::time_point t0, BlockList* lists = nullptr,
                      bool coarse = false, bool cells_checked = false,
                      CellImages* images = nullptr);

/// The coarsest level's dense solve (solvers/sinkhorn.cpp): solve_sinkhorn's dense path on
/// `problem` (options.precision, unset: the data's natural precision, as before), stopped on the
/// engine's residual alone, with no certificate and no plan values for a balanced problem (its
/// potentials only warm-start the level above, whose finest level certifies the result: the
/// float64 certificate and plan values over every pair of a 2,048-cell level cost 1.5 ms of GPU
/// time, twenty-second session). The Summary's marginal_error and plan values are NaN;
/// kConverged means the residual met the tolerance. An unbalanced problem gets the full dense
/// solve.
template <class T>
SinkhornSummary solve_coarsest(const Context& ctx, const Problem<T>& problem,
                               const SinkhornOptions& options, Potentials<T>* pot);

}  // namespace kantor::multiscale
