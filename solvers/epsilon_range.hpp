// The guards on eps that the dense and multiscale solvers share (defined in solvers/sinkhorn.cpp;
// docs/numerics.md, "Resolvable range").
#pragma once

#include "kantor/oracle.hpp"

namespace kantor::detail {

/// The solvers' guards on eps for the data of `oracle`: a largest cost that overflows the
/// engine's type, an eps out of its range, an eps so large that the cost is lost in the rounding
/// of the log weights, and an eps below the smallest one the engine's precision resolves, each
/// refused with an InvalidArgument that names the bound. Returns that smallest resolvable eps.
/// The dense solver runs them before iterating; the multiscale solver on its finest level's
/// oracle (a warm start has no coarse level, and a coarse level's cells lie inside the points'
/// box).
template <class T>
double check_epsilon_range(const Oracle<T>& oracle, double epsilon);

}  // namespace kantor::detail
