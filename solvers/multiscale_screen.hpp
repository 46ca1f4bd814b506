// The geometry of the multiscale solver (docs/multiscale.md): Morton ordering, a hierarchy of
// contiguous cells with boxes and linear potential models, and the provable block screening that
// turns potentials into block lists (kantor::BlockList) for the engines' truncated passes.
// Host code, float64, no engine types: unit-tested on its own (tests/sinkhorn/test_multiscale.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "kantor/oracle.hpp"
#include "kantor/uninit_vector.hpp"
#include "parallel.hpp"

namespace kantor::multiscale {

/// A permutation of points (order[k] = the input index of the k-th): uninitialized on resize, its
/// writers fill every entry (at 2^20 points a side, zero-filling the orders and keys first was
/// four serial passes over 8 MB).
using Order = detail::UninitVector<std::int64_t>;

/// The joint bounding box of x (n x d) and y (m x d), row-major float64: lo and hi (d each), on
/// the host threads (chunks of 2^16 rows, merged in order).
void joint_bounds(const double* x, std::int64_t n, const double* y, std::int64_t m, int d,
                  int threads, std::vector<double>* lo, std::vector<double>* hi);

/// The permutation that sorts the points of x (n x d) and y (m x d), row-major float64, by one
/// joint Morton (Z-order) key on their joint bounding box: min(52, floor(63 / d)) bits per axis (at least
/// one; axes beyond the 63rd do not enter the key). order_x[k] = the input index of the k-th
/// sorted point. Ties keep the input order (stable).
void morton_order(const double* x, std::int64_t n, const double* y, std::int64_t m, int d,
                  Order* order_x, Order* order_y, int threads);
/// The permutation that sorts the `count` keys at `keys` by their low `bits` bits, stably, on an
/// engine (detail::device_sort_order) into order[0, count); false when it has no sort (nothing
/// changed).
using KeySorter = std::function<bool(const std::uint64_t* keys, std::int64_t count, int bits,
                                     std::int64_t* order)>;

/// The same on a joint bounding box the caller already has (joint_bounds); with `sorter`, the
/// keys are sorted by it where it can (the same permutation: a stable sort of the same keys).
void morton_order(const double* x, std::int64_t n, const double* y, std::int64_t m, int d,
                  Order* order_x, Order* order_y, int threads, const std::vector<double>& lo,
                  const std::vector<double>& hi, const KeySorter* sorter = nullptr);

/// One side's cells at one level: `count` cells of consecutive sorted points; cell k holds points
/// [k * size, min((k + 1) * size, n)).
struct CellLevel {
  std::int64_t size = 0;    ///< points per cell (the atom size times 2^level)
  std::int64_t count = 0;
  std::vector<double> lo, hi;  ///< count x d: the box of the cell's points (all of them)
  /// Linear model of the potential over the cell's points of positive weight:
  /// model(x) = value + <grad, x - center> (the least-squares fit, center = their mean), and
  /// resid >= max_i (pot_i - model(x_i)): measured on the points for level-0 cells, bounded
  /// through the children's models over their boxes above (upper levels never revisit points).
  std::vector<double> center, grad;  ///< count x d
  std::vector<double> value, resid;  ///< count
  std::vector<char> active;          ///< the cell holds a point of positive weight
  std::vector<double> mass;          ///< the sum of its points' positive weights
  /// What pair_bound reads, one record of 3 d + 3 doubles per cell: lo, hi, grad, then
  /// value + resid - <grad, center>, a bound of the magnitudes behind it, the largest |coordinate|.
  std::vector<double> packed;
};

/// A hierarchy over one side's sorted points: level 0 cells of `atom` points, each level above
/// merging pairs of cells, up to the first level of at most `top_cells` cells.
struct Hierarchy {
  std::vector<CellLevel> levels;
};

/// Builds the hierarchy of sorted points `x` (n x d), weights `w` (n, >= 0) and potential `pot`
/// (n, as double; entries of zero-weight points are ignored and may be non-finite). Throws
/// InvalidArgument if a positive-weight point has a non-finite potential.
Hierarchy build_hierarchy(const double* x, const double* w, const double* pot, std::int64_t n,
                          int d, std::int64_t atom, std::int64_t top_cells, int threads);

/// An upper bound of pot_x(x_i) + pot_y(y_j) - c |x_i - y_j|^2 over the points i of cell I and j
/// of cell J (both active), exact in real arithmetic up to the rounding of double (the caller
/// adds a margin): the two linear models plus their residuals, maximized in closed form over the
/// two boxes, axis by axis (a concave quadratic over a rectangle attains its maximum on an edge).
double pair_bound(const CellLevel& X, std::int64_t I, const CellLevel& Y, std::int64_t J,
                  int d, double c);

/// The result of a screen: the kept atom pairs as two block lists, and statistics.
struct Screen {
  BlockList f_side;        ///< rows x (row tiles of shape.row_tile), keys y (tiles of atoms)
  BlockList g_side;        ///< rows y, keys x
  std::int64_t atom_pairs = 0;     ///< kept pairs of level-0 cells
  std::int64_t tested_pairs = 0;   ///< pair bounds evaluated, all levels
  double kept_fraction = 0;        ///< point pairs the f-side list covers / (n m)
  std::int64_t orphans = 0;        ///< atoms that kept no partner and got their best one
  /// An upper bound of the plan mass on the dropped pairs, sum a_i b_j e^((f_i + g_j - C_ij) / eps)
  /// for the potentials of the hierarchies: each dropped pair of cells contributes
  /// mass_I mass_J e^(bound / eps), with allowances for its rounding. At most about
  /// e^(-threshold / eps) m_a m_b (every dropped pair at the threshold), usually far less.
  double dropped_mass = 0;
  std::int64_t point_tests = 0;    ///< kept atom pairs evaluated on their points (AtomPairMaxima)
  std::int64_t point_drops = 0;    ///< of which dropped
  /// The box stage alone dropped more than drop_budget (or a NaN mass): no points stage and
  /// no lists (f_side etc. empty); dropped_mass is the box stage's. The caller rejects it.
  bool over_budget = false;
  /// With box_lists and a points stage that ran: the lists of the box stage alone (repaired
  /// like f_side and g_side), for lifting a coarse level's potentials to finer points (the
  /// points stage tests a coarse level's centroids, not the points beneath them); else empty.
  BlockList box_f_side, box_g_side;
  /// The lists are the engine's own (Oracle::engine_block_lists, already its key schedule):
  /// f_side and g_side are empty.
  bool on_engine = false;
};

/// The screen's second stage: out (resized to pairs.size() / 2) bounds, for each atom pair
/// (pairs[2k] an x atom, pairs[2k + 1] a y atom), the largest f_i + g_j - c |x_i - y_j|^2 over
/// its points of positive weight from above, or is some value >= stop_at where that is reached
/// (Oracle::atom_pair_maxima on the sorted problem: the engine evaluates it where the points are).
using AtomPairMaxima = std::function<void(const std::vector<std::int32_t>& pairs,
                                          double stop_at, std::vector<double>* out)>;

/// The box stage's descent on an engine (Oracle::screen_descent's signature): the hierarchies'
/// levels, d, c, keep_at, eps, the block levels, whether to run the points stage there too (the
/// engine's atom_pair_maxima on the sorted problem's potentials; ScreenDescent::points_done
/// says whether it did) and whether to return the box stage's masks as well; false when the
/// engine has no descent.
using Descent = std::function<bool(const std::vector<ScreenLevel>&, const std::vector<ScreenLevel>&,
                                   int, double, double, double, int, int, bool, bool,
                                   ScreenDescent*)>;

/// Oracle::engine_block_lists' signature: the repair's extra atom pairs (x atom, y atom), the
/// covered point pairs and the kept atom pairs out; false when the engine made no lists.
using EngineLists =
    std::function<bool(const std::vector<std::int64_t>&, double*, std::int64_t*)>;

/// The box stage's descent on the host threads (the screen's own when no engine descends), in the
/// form of an engine's (Oracle::screen_descent: block keys in increasing order, masks, pairs
/// tested, dropped mass; no points stage); *bx, *by receive the block levels. Tests use it to
/// stand in for an engine.
ScreenDescent host_descent(const Hierarchy& hx, const Hierarchy& hy, int d, double c,
                           double keep_at, double eps, int threads, int* bx, int* by);

/// A block list from its row tiles' runs: emit(t, &out) appends row tile t's runs (begin, end
/// key-tile pairs, increasing) to out. Tiles go to the host threads in contiguous chunks, each
/// chunk's runs into one buffer, then placed by the offsets: no vector per tile (at 2^20 points
/// 8,192 of them, each grown run by run) and one copy.
template <class Emit>
BlockList assemble_list(std::int64_t tiles, std::int64_t row_tile, std::int64_t key_tile,
                        int threads, const Emit& emit) {
  BlockList list;
  list.row_tile = row_tile;
  list.key_tile = key_tile;
  list.run_ptr.assign(static_cast<std::size_t>(tiles + 1), 0);
  const std::int64_t per = std::max<std::int64_t>(
      64, (tiles + 8 * detail::thread_count(threads) - 1) / (8 * detail::thread_count(threads)));
  const std::int64_t chunks = (tiles + per - 1) / per;
  std::vector<std::vector<std::int32_t>> buf(static_cast<std::size_t>(chunks));
  detail::parallel_for(chunks, threads, [&](std::int64_t c) {
    std::vector<std::int32_t>& out = buf[std::size_t(c)];
    for (std::int64_t t = c * per; t < std::min(tiles, (c + 1) * per); ++t) {
      const std::size_t before = out.size();
      emit(t, &out);
      list.run_ptr[std::size_t(t + 1)] = std::int64_t(out.size() - before) / 2;
    }
  });
  for (std::int64_t t = 0; t < tiles; ++t)
    list.run_ptr[std::size_t(t + 1)] += list.run_ptr[std::size_t(t)];
  list.runs.resize(static_cast<std::size_t>(2 * list.run_ptr.back()));
  detail::parallel_for(chunks, threads, [&](std::int64_t c) {
    const std::vector<std::int32_t>& in = buf[std::size_t(c)];
    std::copy(in.begin(), in.end(), list.runs.begin() + 2 * list.run_ptr[std::size_t(c * per)]);
  });
  return list;
}

/// Keeps the atom pairs (I, J) whose bound is >= -threshold - margin (threshold = theta eps,
/// margin = an extra allowance), testing only children of pairs kept one level up (all pairs at
/// the top level); with `maxima`, only those of them whose maximum on the points also reaches
/// it. Every atom, on either side, keeps at least one partner holding positive weight (its best
/// by the bound, or by box distance for an atom without weight), so no row of a pass is empty.
/// Atoms are shape.key_tile points (the hierarchies' atoms); shape.row_tile must be a multiple.
/// eps scales the dropped mass (Screen::dropped_mass). drop_budget: the most dropped mass a
/// caller would accept; when the box stage alone (as reported) exceeds it, the screen stops
/// there (Screen::over_budget: the points stage only adds to the mass). box_lists: also keep
/// the box stage's lists (Screen::box_f_side) when the points stage runs. descent: the box
/// stage's descent on an engine where it has one (the same pairs; else the host threads'), with
/// the points stage there when `maxima` is given and the engine runs it (the same pairs as
/// `maxima` would drop; else `maxima` on the host's pairs). mark: called with the name of each
/// of its stages as it ends ("screen descent", "screen rows", "screen repair", "screen f list",
/// "screen g list" or "screen engine lists"; MultiscaleOptions::phase_timer's sub-phases of
/// "screen"). engine_lists: where the engine's descent kept the pairs on the engine
/// (ScreenDescent::on_engine, asked through ScreenPoints::engine_lists), the repaired pairs'
/// lists are made there by this call (Oracle::engine_block_lists; Screen::on_engine).
Screen screen(const Hierarchy& hx, const Hierarchy& hy, std::int64_t n, std::int64_t m, int d,
              double c, double threshold, double margin, double eps, const BlockShape& shape,
              int threads, const AtomPairMaxima* maxima = nullptr,
              double drop_budget = HUGE_VAL, bool box_lists = false,
              const Descent* descent = nullptr,
              const std::function<void(const char*)>* mark = nullptr,
              const EngineLists* engine_lists = nullptr);

}  // namespace kantor::multiscale
