// Multiscale block-sparse Sinkhorn (docs/multiscale.md): Morton order, coarse-to-fine solves on
// cells, a provable block screen, truncated fine passes on the engine's block lists, and a
// deterministic certificate (kept-set float64 passes plus the truncation bound).
#include "multiscale.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "kantor/buffer.hpp"
#include "kantor/error.hpp"
#include "kantor/oracle.hpp"
#include "kantor/uninit_vector.hpp"
#include "epsilon_range.hpp"
#include "multiscale_lift.hpp"
#include "multiscale_screen.hpp"
#include "parallel.hpp"
#include "relaxation.hpp"
#include "unbalanced.hpp"

namespace kantor::multiscale {
namespace {

using Clock = std::chrono::steady_clock;

// A coarse level stops when the engine's residual is below this fraction of the tolerance: a
// warm start only, whose accuracy beyond this does not shorten the finest level (the lift's
// discretization sets its count). H100, nineteenth session: 0.3 instead of 0.1 took 12 of the
// 131,072-cell level's 19 iterations away at 2^20 points (coarse levels 82-83 -> 64-66 ms, the
// finest level still 2 iterations) and 4 of the 16,384-cell level's 45 at 2^17.
constexpr double kCoarseResidual = 0.3;
// Nor is a coarse level asked for a tolerance below this: a warm start whose accuracy is
// spent by the lift (the first residual on the points is about 1e-2). 4,096 points in fp32 at a
// tolerance of 1e-5: the dense coarsest level ran its whole budget (1,500 of 3,000 iterations)
// below fp32's reach; with 1e-4 it converges in 111 and the points take 85 iterations (86
// before) to the same rounding floor. fp64 at 1e-6 and 1e-8: the same iterations.
constexpr double kCoarseTolerance = 1e-4;
// The automatic over-relaxation of a level's passes: at most this factor, and its rate measured
// again over this many decreasing residuals.
constexpr double kMaxLevelRelaxation = 1.9;
constexpr int kRelaxRun = 4;
constexpr int kRelaxGrace = 5;
// A coarse level whose residual has not improved by 1% in this many iterations stops.
constexpr std::int64_t kCoarseStall = 100;
// The finest level checks its mask after this many iterations without a 1% better residual:
// a mask built from poor potentials (a warm start, a lift far from the solution) can admit no
// plan with the marginals, and its iterations then never come near the tolerance, where the
// mask is otherwise checked (two clusters a side, 0.5 / 0.5 against 0.9 / 0.1 of the mass, from
// zero potentials: the whole budget, 4,000 iterations, at a residual of 0.8, the potentials
// diverging).
constexpr std::int64_t kFineStall = 50;
// The finest level tries its certificate once the engine's residual is below this multiple of
// the tolerance where the certificate's row side also makes the next f update
// (Oracle::certify_kept_next: a failed try then costs the difference between that side and an
// update), else below half the tolerance (a failed try costs about 1.5 iterations). The
// certificate of (f, g) after the g update has the row error of (f, g), typically well below the
// column residual of (f, g_old) that the update measured: at 2^17 points on the CPU, residuals
// 3.5e-2, 7.1e-3, 3.9e-3, 3.0e-3, 2.3e-3 against certificates of 1.3e-2, 5.8e-3, 4.0e-3, 3.7e-3,
// 3.1e-3 (tolerance 5e-3: certified after 3 iterations instead of 5).
constexpr double kTryWithNext = 2.0;
constexpr double kTryWithout = 0.5;
// After this many failed tries in a row the level returns to kTryWithout and certify_kept (a
// tolerance near the precision's floor: the certificate's updates, on the caller's coordinates,
// and the engine's, on its rounded copies, then pull the engine's residual apart).
constexpr int kMaxFailedTries = 3;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// MultiscaleOptions::phase_timer: at each phase boundary the context is synchronized (the GPU's
// queued work belongs to the phase that queued it) and the phase's wall seconds reported.
class Phases {
 public:
  Phases(const Context& ctx, const MultiscaleOptions& mo, std::int64_t n)
      : ctx_(ctx), timer_(mo.phase_timer), n_(n) {
    if (timer_) {
      ctx_.synchronize();
      last_ = Clock::now();
    }
  }
  void end(const char* phase) {
    if (!timer_) return;
    ctx_.synchronize();
    const auto now = Clock::now();
    timer_(phase, n_, std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }

 private:
  const Context& ctx_;
  const std::function<void(const char*, std::int64_t, double)>& timer_;
  std::int64_t n_;
  Clock::time_point last_;
};

// The message of a solve that spent its budget (the caller's, whatever its levels were given).
std::string budget_spent(std::int64_t max_iterations) {
  return "iteration budget of " + std::to_string(max_iterations) +
         " spent before the tolerance was met";
}

// A matrix view (host or device, any stride) as contiguous host rows x cols: the view's own
// memory when it already is that (no copy: at 2^20 points each copy is ~25 MB of fresh pages),
// else a copy.
template <class U>
struct HostRows {
  detail::UninitVector<U> own;  // every element written before it is read
  const U* data = nullptr;
};
template <class U>
HostRows<U> host_rows(const Context& ctx, const MatrixView<const U>& v) {
  HostRows<U> out;
  if (v.space == MemorySpace::kHost && (v.stride == v.cols || v.rows <= 1)) {
    out.data = v.data;
    return out;
  }
  out.own.resize(static_cast<std::size_t>(v.rows * v.cols));
  out.data = out.own.data();
  if (v.rows == 0) return out;
  if (v.stride == v.cols || v.rows <= 1) {  // contiguous rows in device memory: one copy
    detail::copy_bytes(ctx, out.own.data(), MemorySpace::kHost, v.data, v.space,
                       sizeof(U) * out.own.size());
    return out;
  }
  detail::UninitVector<U> raw;
  const U* src = v.data;
  if (v.space != MemorySpace::kHost) {
    raw.resize(std::size_t((v.rows - 1) * v.stride + v.cols));
    detail::copy_bytes(ctx, raw.data(), MemorySpace::kHost, v.data, v.space,
                       sizeof(U) * raw.size());
    src = raw.data();
  }
  for (std::int64_t i = 0; i < v.rows; ++i)
    std::copy(src + i * v.stride, src + i * v.stride + v.cols, out.own.begin() + i * v.cols);
  return out;
}

// Weights normalized to total 1, in double; empty for uniform weights (1 / n each).
template <class T>
std::vector<double> host_weights(const Context& ctx, const VectorView<const T>& w, std::int64_t n,
                                 bool as_given) {
  // Uniform: empty, for 1 / n each (the value the general path computes, 1.0 / (a sum of n
  // ones), without three passes over n doubles; the gather writes it without reading an array).
  if (w.size == 0) return {};
  std::vector<double> out(static_cast<std::size_t>(n));
  {
    const std::vector<T> h = to_host(ctx, w);
    for (std::int64_t i = 0; i < n; ++i) out[std::size_t(i)] = double(h[std::size_t(i)]);
  }
  double total = 0;
  for (double v : out) total += v;
  // Unbalanced problems use given weights as they are (uniform ones are 1/n, as in the engines).
  if (as_given && w.size > 0) total = 1.0;
  for (double& v : out) v /= total;
  return out;
}

template <class T, class A>
Buffer<T> upload(const Context& ctx, const std::vector<T, A>& h) {
  Buffer<T> b(ctx, std::int64_t(h.size()));
  if (!h.empty())
    detail::copy_bytes(ctx, b.data(), b.space(), h.data(), MemorySpace::kHost, sizeof(T) * h.size());
  return b;
}

// A buffer's values in double on the host: copied into uninitialized memory and converted by the
// host threads (at 2^20 points a serial conversion into a zeroed vector took about 1 ms a side,
// four times a solve).
template <class T>
detail::UninitVector<double> download(const Context& ctx, const Buffer<T>& b, int threads) {
  const std::int64_t n = b.size();
  detail::UninitVector<T> h(static_cast<std::size_t>(n));
  if (n > 0)
    detail::copy_bytes(ctx, h.data(), MemorySpace::kHost, b.data(), b.space(),
                       sizeof(T) * std::size_t(n));
  detail::UninitVector<double> out(static_cast<std::size_t>(n));
  detail::parallel_ranges(n, threads, 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) out[std::size_t(i)] = double(h[std::size_t(i)]);
  });
  return out;
}

// Cells of `size` consecutive sorted points: mass-weighted centroids (plain means for cells
// without mass), masses and, where `spread` is given, spreads (the mean squared distance of the
// cell's points to its centroid per coordinate, same weights: the Gaussian lift's s).
template <class T>
void coarsen(const T* x, const double* w, std::int64_t n, int d, std::int64_t size,
             std::vector<T>* xc, std::vector<T>* wc, std::vector<double>* spread, int threads) {
  const std::int64_t K = (n + size - 1) / size;
  xc->resize(std::size_t(K * d));
  wc->resize(std::size_t(K));
  if (spread) spread->resize(std::size_t(K));
  detail::parallel_ranges(K, threads, 4096, [&](std::int64_t kb, std::int64_t ke) {
    std::vector<double> acc(static_cast<std::size_t>(d));
    for (std::int64_t k = kb; k < ke; ++k) {
      const std::int64_t b = k * size, e = std::min(n, b + size);
      double mass = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t i = b; i < e; ++i) mass += w[std::size_t(i)];
      for (std::int64_t i = b; i < e; ++i) {
        const double wi = mass > 0 ? w[std::size_t(i)] / mass : 1.0 / double(e - b);
        for (int a = 0; a < d; ++a) acc[std::size_t(a)] += wi * double(x[std::size_t(i * d + a)]);
      }
      for (int a = 0; a < d; ++a) (*xc)[std::size_t(k * d + a)] = T(acc[std::size_t(a)]);
      (*wc)[std::size_t(k)] = T(mass);
      if (!spread) continue;
      double sq = 0;  // about the stored (rounded) centroid: the lift's cell is that point
      for (std::int64_t i = b; i < e; ++i) {
        const double wi = mass > 0 ? w[std::size_t(i)] / mass : 1.0 / double(e - b);
        for (int a = 0; a < d; ++a) {
          const double v =
              double(x[std::size_t(i * d + a)]) - double((*xc)[std::size_t(k * d + a)]);
          sq += wi * v * v;
        }
      }
      (*spread)[std::size_t(k)] = sq / double(d);
    }
  });
}

// The block list of a lift (rows: the points, keys: the other side's cells) from a coarse
// level's list (rows: this side's cells, keys: the same cells): point row tile r takes the union
// of the runs of the coarse row tiles its cells fall in (sorted, overlapping and adjacent runs
// merged), in parallel over the point row tiles.
BlockList lift_list(const BlockList& coarse, std::int64_t rows, std::int64_t cell,
                    const BlockShape& shape, int threads) {
  const std::int64_t tiles = (rows + shape.row_tile - 1) / shape.row_tile;
  const std::int64_t coarse_tiles = std::int64_t(coarse.run_ptr.size()) - 1;
  auto emit = [&](std::int64_t r, std::vector<std::int32_t>* o) {
    const std::int64_t first = (r * shape.row_tile / cell) / coarse.row_tile;
    const std::int64_t last =
        std::min(coarse_tiles - 1, ((std::min(rows, (r + 1) * shape.row_tile) - 1) / cell) /
                                       coarse.row_tile);
    if (last < first) return;  // no coarse tile under this one (a list shorter than its cells)
    const std::size_t start = o->size();
    // A run that starts at or before the last one's end extends it (sorted by begin: one coarse
    // tile's runs are; several tiles' are merged by a sort of their (begin, end) pairs).
    auto add = [&](std::int32_t b, std::int32_t e) {
      if (b >= e) return;
      if (o->size() > start && b <= o->back())
        o->back() = std::max(o->back(), e);
      else {
        o->push_back(b);
        o->push_back(e);
      }
    };
    if (last == first) {
      for (std::int64_t q = coarse.run_ptr[std::size_t(first)];
           q < coarse.run_ptr[std::size_t(first + 1)]; ++q)
        add(coarse.runs[std::size_t(2 * q)], coarse.runs[std::size_t(2 * q + 1)]);
      return;
    }
    std::vector<std::pair<std::int32_t, std::int32_t>> all;  // several coarse tiles: rare
    for (std::int64_t t = first; t <= last; ++t)
      for (std::int64_t q = coarse.run_ptr[std::size_t(t)]; q < coarse.run_ptr[std::size_t(t + 1)];
           ++q)
        all.emplace_back(coarse.runs[std::size_t(2 * q)], coarse.runs[std::size_t(2 * q + 1)]);
    std::sort(all.begin(), all.end());
    for (const auto& run : all) add(run.first, run.second);
  };
  return assemble_list(tiles, shape.row_tile, coarse.key_tile, threads, emit);
}

// The plan's images of the rows of `oracle`'s problem (rows x d: sum_j P_ij y_j) and their
// masses (sum_j P_ij), in double: P V on the engine with V = y - mid (its value pass rounds V's
// entries; centred, the error does not grow with the clouds' offset), mid added back here.
template <class T>
CellImages plan_images(const Context& ctx, Oracle<T>& oracle, double eps, const T* f, const T* g,
                       const T* y, std::int64_t rows, std::int64_t m, int d,
                       const std::vector<double>& mid, int threads) {
  // V = [y - mid, 1]: the masses are the last column of the same pass (the CUDA engine's value
  // pass with a mass output runs a second pass over V = 1: 9.5 ms instead of about 5 for the
  // 131,072-cell level of 2^20 points, H100; the same sums column by column).
  const int w = d + 1;
  std::vector<T> yc(static_cast<std::size_t>(m * w));
  for (std::int64_t j = 0; j < m; ++j) {
    for (int a = 0; a < d; ++a)
      yc[std::size_t(j * w + a)] = T(double(y[j * d + a]) - mid[std::size_t(a)]);
    yc[std::size_t(j * w + d)] = T(1);
  }
  const Buffer<T> yv = upload(ctx, yc);
  Buffer<T> sums(ctx, rows * w);
  oracle.apply_mat(T(eps), f, g, {yv.data(), m, w, w, yv.space()},
                   {sums.data(), rows, w, w, sums.space()}, nullptr);
  const detail::UninitVector<double> sh = download(ctx, sums, threads);
  CellImages out;
  out.sums.resize(std::size_t(rows * d));
  out.mass.resize(std::size_t(rows));
  for (std::int64_t i = 0; i < rows; ++i) {
    const double mass = sh[std::size_t(i * w + d)];
    out.mass[std::size_t(i)] = mass;
    for (int a = 0; a < d; ++a)
      out.sums[std::size_t(i * d + a)] = sh[std::size_t(i * w + a)] + mass * mid[std::size_t(a)];
  }
  return out;
}

// The truncation's tail 2 D e^(drift / eps) (docs/multiscale.md, step 5): 0 without dropped mass
// whatever the drift (never 0 * inf).
double truncation_tail(double dropped, double drift, double eps) {
  return dropped > 0 ? 2 * dropped * std::exp(drift / eps) : 0.0;
}

// max_i (now_i - build_i) over the points of positive weight, on the host threads (a maximum: the
// same value in any order).
double max_drift(const detail::UninitVector<double>& now, const detail::UninitVector<double>& build,
                 const double* w, int threads) {
  constexpr std::int64_t kChunk = std::int64_t(1) << 16;
  const std::int64_t n = std::int64_t(now.size());
  std::vector<double> part(static_cast<std::size_t>((n + kChunk - 1) / kChunk),
                           -std::numeric_limits<double>::infinity());
  detail::parallel_for(std::int64_t(part.size()), threads, [&](std::int64_t c) {
    double v = -std::numeric_limits<double>::infinity();
    for (std::int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i)
      if (w[i] > 0) v = std::max(v, now[std::size_t(i)] - build[std::size_t(i)]);
    part[std::size_t(c)] = v;
  });
  double v = -std::numeric_limits<double>::infinity();
  for (const double p : part) v = std::max(v, p);
  return v;
}

}  // namespace

template <class T>
bool auto_picks_multiscale(const Problem<T>& problem, const SinkhornOptions& options, bool warm,
                           std::string* why) {
  const std::int64_t n = problem.features().x.rows, m = problem.features().y.rows;
  const std::int64_t d = problem.features().x.cols;
  auto no = [&](const std::string& r) {
    *why = "auto: dense (" + r + ")";
    return false;
  };
  if (problem.labels()) return no("label-augmented cost");
  if (d > 6) return no("d = " + std::to_string(d) + " > 6: boxes prune little");
  if (double(n) * double(m) < std::ldexp(1.0, 30)) return no("n m < 2^30");
  if (!options.anneal) return no("fixed-eps mode");
  if (!options.coarse_blocks_x.empty()) return no("coarse blocks given");
  if (warm) return no("warm start");
  *why = "auto: multiscale (squared-Euclidean, d <= 6, n m >= 2^30)";
  return true;
}

template <class T>
SinkhornSummary solve(const Context& ctx, const Problem<T>& problem,
                      const SinkhornOptions& options, Precision precision, Potentials<T>* pot,
                      Clock::time_point t0, BlockList* lists, bool coarse_level,
                      bool cells_checked, CellImages* images) {
  // A coarse level's cells are weighted means of points scanned one level up: their coordinates
  // are not scanned again (shapes, weights and scalars are). validate() scans host views only:
  // after it, this level's coordinates are checked when all of them are host memory (always on
  // a coarse level); device ones are scanned on their host copies by the engine oracle's
  // preparation (make_oracle below), and the coarse levels under them scan their cells.
  if (coarse_level && cells_checked)
    detail::validate_clouds_checked(problem);
  else
    validate(problem);
  const bool checked = problem.features().x.space == MemorySpace::kHost &&
                       problem.features().y.space == MemorySpace::kHost &&
                       (problem.reference_x.rows == 0 ||
                        (problem.reference_x.space == MemorySpace::kHost &&
                         problem.reference_y.space == MemorySpace::kHost));
  // The oracles of the problems built here (sorted points, lifts): their coordinates are this
  // level's, permuted, or weighted means of them.
  auto make_level_oracle = [&](const Problem<T>& p) {
    return checked ? detail::make_oracle_clouds_checked(ctx, p, precision)
                   : make_oracle(ctx, p, precision);
  };
  if (lists && !coarse_level)
    throw InvalidArgument("multiscale::solve: block lists are returned by coarse levels only");
  if (problem.labels())
    throw InvalidArgument("solver multiscale: defined for a squared-Euclidean cost only (this "
                          "problem's cost is label-augmented); use the dense solver");
  const MultiscaleOptions& mo = options.multiscale;
  const SqEuclidean<T>& fe = problem.features();
  const std::int64_t n = fe.x.rows, m = fe.y.rows;
  const int d = int(fe.x.cols);
  const double c = fe.scale, eps = problem.epsilon;
  const int threads = ctx.threads();
  const bool warm = pot->f.size() == n && pot->g.size() == m;
  Phases phase(ctx, mo, n);

  // Too few points for even one coarse level: the dense solver, said so.
  if (!warm && (n < 2 * mo.cell_points || m < 2 * mo.cell_points)) {
    SinkhornOptions dense = options;
    dense.solver = SolverKind::kDense;
    SinkhornSummary s = solve_sinkhorn(ctx, problem, dense, pot);
    s.solver_note = "multiscale: fewer than 2 cells of " + std::to_string(mo.cell_points) +
                    " points on a side; solved dense";
    return s;
  }

  // ---- order: one joint Morton key on the certificate's float64 coordinates ----
  const HostRows<T> xh = host_rows(ctx, fe.x), yh = host_rows(ctx, fe.y);
  const bool has_ref = problem.reference_x.rows > 0;
  // The certificate's coordinates in the caller's order: the reference, else the engine's
  // coordinates in double.
  HostRows<double> xr, yr;
  if (has_ref) {
    xr = host_rows(ctx, problem.reference_x);
    yr = host_rows(ctx, problem.reference_y);
  } else {
    for (auto [to, from, rows] : {std::make_tuple(&xr, &xh, n), std::make_tuple(&yr, &yh, m)}) {
      if constexpr (std::is_same_v<T, double>) {  // already double: no copy
        to->data = from->data;
        continue;
      }
      to->own.resize(static_cast<std::size_t>(rows * d));
      const T* src = from->data;
      detail::UninitVector<double>& dst = to->own;
      detail::parallel_ranges(rows * d, threads, 1 << 18, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t k = b; k < e; ++k) dst[std::size_t(k)] = double(src[k]);
      });
      to->data = to->own.data();
    }
  }
  // The screen works on coordinates centred on the clouds' bounding box (the cost is translation
  // invariant): it keeps the bound's arithmetic small.
  std::vector<double> lo, hi, mid(static_cast<std::size_t>(d));
  joint_bounds(xr.data, n, yr.data, m, d, threads, &lo, &hi);
  for (int a = 0; a < d; ++a) mid[std::size_t(a)] = 0.5 * (lo[std::size_t(a)] + hi[std::size_t(a)]);
  phase.end("copies");
  // A coarse level's points are the cells of its caller, runs of the caller's Morton-sorted
  // points: already in hierarchical order, and kept in it (identity), so that the block lists it
  // returns index the caller's cells. (Sorted again by the cells' centroids, 55-85% of the cells
  // moved, by up to hundreds of places at 2^17 points, and the caller lifted through lists of
  // other cells.)
  Order ox, oy;
  // The engine's sort keeps the permutations on its device too: the caller's warm potentials
  // come into Morton order and the results go back through them there (no round trip of the
  // potentials through the host: 3.6 ms at 2^20 points a side, H100).
  Buffer<std::int64_t> device_order[2];
  if (coarse_level) {
    ox.resize(std::size_t(n));
    oy.resize(std::size_t(m));
    std::iota(ox.begin(), ox.end(), std::int64_t(0));
    std::iota(oy.begin(), oy.end(), std::int64_t(0));
  } else {
    // The keys' sort on the engine where it has one (the CUDA engine's radix sort: the same
    // permutation, without the host's 8 passes over 2^21 pairs at 2^20 points a side).
    const KeySorter sorter = [&](const std::uint64_t* keys, std::int64_t count, int bits,
                                 std::int64_t* order) {
      return detail::device_sort_order(ctx, keys, count, bits, order,
                                       &device_order[order == ox.data() ? 0 : 1]);
    };
    morton_order(xr.data, n, yr.data, m, d, &ox, &oy, threads, lo, hi,
                 ctx.backend() == Backend::kCuda ? &sorter : nullptr);  // CPU: no second key pass
  }
  phase.end("sort");
  const std::vector<double> wa = host_weights(ctx, problem.a, n, problem.unbalanced());
  const std::vector<double> wb = host_weights(ctx, problem.b, m, problem.unbalanced());
  // One gather per side in Morton order (its reads are random; one pass reads every array at
  // the same index): the engine's coordinates, the screen's centred ones, the caller's reference
  // (uncentred, when given) and the weights (double and T).
  // Uninitialized on resize: the parallel loop below writes every element (zero-filling them
  // first was a serial pass over ~150 MB at 2^20 points a side).
  struct Side {
    detail::UninitVector<T> p, w;                   // engine coordinates, weights
    detail::UninitVector<double> centred, ref, wd;  // screen coordinates, reference, weights
  };
  auto gather = [&](const T* eng, const double* cert, const std::vector<double>& w,
                    const Order& o) {
    const double uniform = 1.0 / double(o.size());  // where w is empty
    Side out;
    const std::int64_t rows = std::int64_t(o.size());
    out.p.resize(std::size_t(rows * d));
    out.centred.resize(std::size_t(rows * d));
    if (has_ref) out.ref.resize(std::size_t(rows * d));
    out.wd.resize(std::size_t(rows));
    out.w.resize(std::size_t(rows));
    detail::parallel_ranges(rows, threads, 16384, [&](std::int64_t b, std::int64_t e) {
      // The reads are random (a point's rows in the input order): request those of the point
      // kAhead places on while this one is copied.
      constexpr std::int64_t kAhead = 16;
      for (std::int64_t k = b; k < e; ++k) {
        if (k + kAhead < e) {
          const std::int64_t p = o[std::size_t(k + kAhead)];
          __builtin_prefetch(cert + p * d);
          if (has_ref) __builtin_prefetch(eng + p * d);
          if (!w.empty()) __builtin_prefetch(w.data() + p);
        }
        const std::int64_t i = o[std::size_t(k)];
        for (int a = 0; a < d; ++a) {
          const double v = cert[i * d + a];
          // Without a reference the certificate's coordinates are the engine's in double, so
          // T(v) is the engine's coordinate exactly: one random read stream less.
          out.p[std::size_t(k * d + a)] = has_ref ? eng[i * d + a] : T(v);
          out.centred[std::size_t(k * d + a)] = v - mid[std::size_t(a)];
          if (has_ref) out.ref[std::size_t(k * d + a)] = v;
        }
        const double wi = w.empty() ? uniform : w[std::size_t(i)];
        out.wd[std::size_t(k)] = wi;
        out.w[std::size_t(k)] = T(wi);
      }
    });
    return out;
  };
  const Side sx = gather(xh.data, xr.data, wa, ox), sy = gather(yh.data, yr.data, wb, oy);
  const detail::UninitVector<T>&xp = sx.p, &yp = sy.p, &apt = sx.w, &bpt = sy.w;
  const detail::UninitVector<double>&xs = sx.centred, &ys = sy.centred, &ap = sx.wd, &bp = sy.wd;
  const detail::UninitVector<double>&xrp = sx.ref, &yrp = sy.ref;
  Problem<T> sorted;
  sorted.cost = SqEuclidean<T>{host_matrix(xp.data(), n, d), host_matrix(yp.data(), m, d), c};
  sorted.a = host_vector(apt.data(), n);
  sorted.b = host_vector(bpt.data(), m);
  sorted.epsilon = eps;
  sorted.rho_a = problem.rho_a;
  sorted.rho_b = problem.rho_b;
  if (has_ref) {
    sorted.reference_x = host_matrix(xrp.data(), n, d);
    sorted.reference_y = host_matrix(yrp.data(), m, d);
  }
  const double t_setup = seconds_since(t0);
  phase.end("order");

  // ---- coarse levels: the cell problem, solved (recursively when large), lifted ----
  SinkhornSummary s;
  s.solver = "multiscale";
  SinkhornSummary coarse_summary;
  double seconds_lift = 0, seconds_lift_oracles = 0;
  bool gaussian_lift = false;  // this level's potentials come from a Gaussian lift
  // The Gaussian lift's probe (lift_excess) where it ran, and whether it declined the lift.
  double lift_probe = std::numeric_limits<double>::quiet_NaN(), probe_tolerance = 0;
  bool lift_declined = false;
  Buffer<T> f(ctx, n), g(ctx, m);
  // Both sides' permutations on the device (the CUDA engine's sort).
  const bool orders_on_device = device_order[0].size() == n && device_order[1].size() == m;
  if (warm && orders_on_device && pot->f.space() == MemorySpace::kDevice &&
      pot->g.space() == MemorySpace::kDevice) {
    detail::device_permute(ctx, device_order[0].data(), pot->f.data(), f.data(), n, false);
    detail::device_permute(ctx, device_order[1].data(), pot->g.data(), g.data(), m, false);
    s.solver_note = "multiscale from a warm start (no coarse levels)";
  } else if (warm) {
    const detail::UninitVector<double> fi = download(ctx, pot->f, threads),
                                       gi = download(ctx, pot->g, threads);
    // Into Morton order on the host threads (every entry written: no zero fill).
    detail::UninitVector<T> fs(static_cast<std::size_t>(n)), gs(static_cast<std::size_t>(m));
    for (auto [to, from, o] : {std::make_tuple(&fs, &fi, &ox), std::make_tuple(&gs, &gi, &oy)}) {
      // (Copies: C++17 lambdas do not capture structured bindings.)
      T* dst = to->data();
      const double* src = from->data();
      const std::int64_t* ord = o->data();
      detail::parallel_ranges(std::int64_t(o->size()), threads, 1 << 16,
                              [=](std::int64_t b, std::int64_t e) {
                                for (std::int64_t k = b; k < e; ++k) dst[k] = T(src[ord[k]]);
                              });
    }
    f = upload(ctx, fs);
    g = upload(ctx, gs);
    s.solver_note = "multiscale from a warm start (no coarse levels)";
  } else {
    std::vector<T> xc, ac, yc, bc;
    std::vector<double> sxc;  // the x cells' spreads
    coarsen(xp.data(), ap.data(), n, d, mo.cell_points, &xc, &ac, &sxc, threads);
    coarsen(yp.data(), bp.data(), m, d, mo.cell_points, &yc, &bc, nullptr, threads);
    phase.end("coarsen");
    const std::int64_t K = std::int64_t(ac.size()), Km = std::int64_t(bc.size());
    Problem<T> coarse;
    coarse.cost = SqEuclidean<T>{host_matrix(xc.data(), K, d), host_matrix(yc.data(), Km, d), c};
    coarse.a = host_vector(ac.data(), K);
    coarse.b = host_vector(bc.data(), Km);
    coarse.epsilon = eps;
    coarse.rho_a = problem.rho_a;
    coarse.rho_b = problem.rho_b;
    SinkhornOptions co = options;
    const bool coarse_multiscale = double(K) * double(Km) > double(mo.dense_pairs);
    co.solver = coarse_multiscale ? SolverKind::kMultiscale : SolverKind::kDense;
    co.callbacks.clear();
    co.record_iterations = false;
    co.relaxation = 0;  // automatic over-relaxation: the coarse loop is where the iterations are
    co.multiscale.verify = false;
    // At most half the budget: a coarse solve that cannot reach the tolerance (one below the
    // precision's reach) leaves the finer levels iterations of their own.
    co.max_iterations = std::max<std::int64_t>(1, options.max_iterations / 2);
    const double tolerance =
        options.tolerance > 0 ? options.tolerance : default_tolerance(precision);
    co.tolerance = std::max(tolerance, kCoarseTolerance);
    Potentials<T> pc;
    BlockList coarse_lists[2];
    // The Gaussian lift (below): a multiscale coarse level returns the images it needs.
    const double median_ratio = median_cell_ratio(sxc, c, eps);
    gaussian_lift = mo.gaussian_lift && !coarse_level && !problem.unbalanced() &&
                    median_ratio <= kMaxMedianCellRatio;
    CellImages images;
    coarse_summary = coarse_multiscale
                         ? solve(ctx, coarse, co, precision, &pc, Clock::now(), coarse_lists, true,
                                 checked, gaussian_lift ? &images : nullptr)
                         : solve_coarsest(ctx, coarse, co, &pc);
    s.multiscale_levels = 1 + coarse_summary.multiscale_levels;
    phase.end("coarse");
    // Lift: one c-transform per side against the other side's cells. For a balanced problem the
    // g side's cells are Gaussians of their points' spread around the coarse plan's images (the
    // Gaussian lift, solvers/multiscale_lift.hpp: one more coordinate, shifted key potentials, a
    // row shift subtracted after the pass), so that the first pair (f_1, g_0) is nearer its
    // marginals. The f side keeps its cells' centroids: its lift only builds the mask, and the
    // centroids' kernel, narrower, overestimates f, where a lower Gaussian f moved up past the
    // mask's slack (2^17 points, CPU: a rebuild and a fourth iteration). The finest level only:
    // a coarse level lifted so took more iterations (2^20 points, H200: the 131,072-cell level
    // 9 instead of 7), its potentials only a warm start. Only where the first pair can meet the
    // tolerance (kMaxMedianCellRatio: the lift buys nothing after it), not for an unbalanced
    // problem, whose damped updates would scale the row shift, and not where its probe on the
    // coarse cells finds it crediting columns mass they lack (lift_excess: mass carried between
    // clusters).
    const auto t_lift = Clock::now();
    Problem<T> fx = coarse, gy = coarse;
    fx.cost = SqEuclidean<T>{host_matrix(xp.data(), n, d), host_matrix(yc.data(), Km, d), c};
    fx.a = sorted.a;
    gy.cost = SqEuclidean<T>{host_matrix(xc.data(), K, d), host_matrix(yp.data(), m, d), c};
    gy.b = sorted.b;
    detail::UninitVector<T> yq;  // the Gaussian lift's points
    std::vector<T> xkeys;        // and cells
    Buffer<T> fkeys, yshift;   // its key potentials and row shifts
    if (gaussian_lift) {
      // The coarse plan's images of the x cells, sum_J P_IJ y_J, and their masses: from the
      // multiscale coarse level, over its lists; here for a dense one.
      if (images.mass.empty()) {
        auto cells = make_level_oracle(coarse);
        images = plan_images(ctx, *cells, eps, pc.f.data(), pc.g.data(), yc.data(), K, Km, d,
                             mid, threads);
      }
      phase.end("lift images");
      std::vector<double> shift;  // the key potentials' shifts
      lift_keys(xc.data(), sxc.data(), images.sums.data(), images.mass.data(), K, d, mid.data(),
                c, eps, threads, &xkeys, &shift);
      const detail::UninitVector<double> fc = download(ctx, pc.f, threads);
      std::vector<T> fk(static_cast<std::size_t>(K));
      for (std::int64_t k = 0; k < K; ++k)
        fk[std::size_t(k)] = T(fc[std::size_t(k)] + shift[std::size_t(k)]);
      fkeys = upload(ctx, fk);
      phase.end("lift operands");
      // The probe (lift_excess): the lift's g on the coarse level's own y cells, one pass over
      // its lists, against the coarse solution's g there. A lift that would credit the columns
      // more mass than the tolerance beyond the centroids' kernels (mass carried between
      // clusters) is declined for the centroids'.
      {
        detail::UninitVector<T> cq, cshift;
        lift_queries(yc.data(), Km, d, mid.data(), c, threads, &cq, &cshift);
        Problem<T> probe = coarse;
        probe.cost = SqEuclidean<T>{host_matrix(xkeys.data(), K, d + 1),
                                    host_matrix(cq.data(), Km, d + 1), c};
        auto cells = make_level_oracle(probe);
        if (!coarse_lists[1].run_ptr.empty()) cells->set_block_lists(nullptr, &coarse_lists[1]);
        Buffer<T> gp(ctx, Km);
        cells->update_g(T(eps), fkeys.data(), gp.data(), nullptr);
        const detail::UninitVector<double> gph = download(ctx, gp, threads),
                                           gch = download(ctx, pc.g, threads);
        const std::vector<double> shifts(cshift.begin(), cshift.end()), bd(bc.begin(), bc.end());
        lift_probe = lift_excess(gch.data(), gph.data(), shifts.data(), bd.data(), Km, eps);
        gaussian_lift = lift_probe <= tolerance;
        lift_declined = !gaussian_lift;
        probe_tolerance = tolerance;
      }
      phase.end("lift probe");
      if (gaussian_lift) {
        detail::UninitVector<T> ry;
        lift_queries(yp.data(), m, d, mid.data(), c, threads, &yq, &ry);
        yshift = upload(ctx, ry);
        gy.cost = SqEuclidean<T>{host_matrix(xkeys.data(), K, d + 1),
                                 host_matrix(yq.data(), m, d + 1), c};
        phase.end("lift queries");
      }
    }
    detail::fill_bytes(ctx, f.data(), f.space(), 0, sizeof(T) * std::size_t(n));
    detail::fill_bytes(ctx, g.data(), g.space(), 0, sizeof(T) * std::size_t(m));
    // Through the coarse level's block lists when it kept some (its cells are runs of the
    // sorted points, so its row tiles map onto the points' row tiles); dense otherwise.
    const auto t_oracles = Clock::now();
    auto lift_f = make_level_oracle(fx);
    auto lift_g = make_level_oracle(gy);
    seconds_lift_oracles = seconds_since(t_oracles);
    phase.end("lift oracles");
    if (!coarse_lists[0].run_ptr.empty()) {
      const BlockList lf = lift_list(coarse_lists[0], n, mo.cell_points, lift_f->block_shape(), threads);
      const BlockList lg = lift_list(coarse_lists[1], m, mo.cell_points, lift_g->block_shape(), threads);
      phase.end("lift lists");
      lift_f->set_block_lists(&lf, nullptr);
      lift_g->set_block_lists(nullptr, &lg);
    }
    phase.end("lift setup");  // the lists handed to the engines
    lift_f->update_f(T(eps), pc.g.data(), f.data(), nullptr);
    lift_g->update_g(T(eps), gaussian_lift ? fkeys.data() : pc.f.data(), g.data(), nullptr);
    if (gaussian_lift)
      lift_g->ops().axpby(-1.0, {yshift.data(), m, 1, 1, yshift.space()}, 1.0,
                          {g.data(), m, 1, 1, g.space()});
    seconds_lift = seconds_since(t_lift);
    phase.end("lift");
    // The levels, coarsest first: "K x Km: ..." per level.
    std::ostringstream os;
    os << std::setprecision(3);
    if (coarse_summary.solver == "multiscale")
      os << coarse_summary.solver_note;
    else
      os << K << " x " << Km << " dense: " << coarse_summary.iterations << " iterations ("
         << to_string(coarse_summary.termination) << "), " << coarse_summary.seconds_total << " s";
    s.solver_note = os.str();
  }

  // ---- the points: screen, truncated passes, certificate ----
  const auto t_engine = Clock::now();
  std::unique_ptr<Oracle<T>> oracle = make_level_oracle(sorted);
  const double seconds_engine = seconds_since(t_engine);
  phase.end("engine");
  s.n = n;
  s.m = m;
  s.d = d;
  s.schedule = Schedule::kAlternating;
  s.backend = ctx.backend();
  s.backend_note = ctx.backend_note();
  s.precision = oracle->precision();
  s.engine = oracle->description();
  s.epsilon = eps;
  set_unbalanced_facts(*oracle, &s);
  s.tolerance = options.tolerance > 0 ? options.tolerance : default_tolerance(s.precision);
  s.initial_epsilon = warm ? eps : coarse_summary.initial_epsilon;
  // The dense solver's guards on eps, for the points (a warm start has no coarse level that ran
  // them; a coarse level's cells span a smaller box): an eps the engine cannot resolve on these
  // points is refused by name, not iterated into a non-finite error; the floor it names is the
  // finest level's rounding floor below.
  // (A coarse level's cells lie inside its caller's box: the finest level's check covers them.)
  if (!coarse_level) s.resolvable_epsilon = detail::check_epsilon_range(*oracle, eps);
  s.iterations = coarse_summary.iterations;
  s.annealing_iterations = coarse_summary.annealing_iterations;
  s.relaxation = 1.0;
  s.certificates = coarse_summary.certificates;
  // The truncation (docs/multiscale.md): the screen bounds the plan mass D on the pairs it drops
  // (each dropped pair of cells holds at most mass_I mass_J e^(bound / eps)); the potentials
  // drifting up by delta since the mask multiply it by at most e^(delta / eps), and each side's
  // marginal loses at most that mass: tail = 2 D e^(delta / eps). The mask is rebuilt when delta
  // exceeds slack * eps, so the tail stays below 2 D e^slack; a screen is accepted when that is
  // at most half the tolerance. Its threshold: theta_b - theta_trial first (D is usually far
  // below its worst case, e^-theta m_a m_b), theta_b when that drops too much; at theta_b the
  // worst case itself is tol / 2 (theta_b = ln(4 max(1, m_a m_b) / tol) + slack).
  const double mass_ab = s.mass_a * s.mass_b;
  const double theta_b = std::log(4.0 * std::max(1.0, mass_ab) / s.tolerance) + mo.slack;
  const BlockShape shape = oracle->block_shape();

  detail::UninitVector<double> fb = download(ctx, f, threads),
                               gb = download(ctx, g, threads);  // the mask's potentials
  phase.end("potentials");
  Screen sc;
  double seconds_screen = 0, screen_theta = 0, seconds_descent = 0;
  int screen_retries = 0;
  auto build_mask = [&]() {
    const auto t_screen = Clock::now();
    const Hierarchy hx = build_hierarchy(xs.data(), ap.data(), fb.data(), n, d, shape.key_tile,
                                         64, threads);
    const Hierarchy hy = build_hierarchy(ys.data(), bp.data(), gb.data(), m, d, shape.key_tile,
                                         64, threads);
    phase.end("hierarchies");
    // The kept atom pairs are evaluated once more on their points by the engine (the box bound
    // keeps 1.3-1.7x the exact tile-level pairs at 2^17 to 2^20 points): about one pass over the
    // kept pairs without exponentials, and a fifth to a third of every later pass and of the
    // certificate saved. The potentials are those of the mask (fb, gb are copies of f, g now).
    // By default on every engine: on the CUDA engine inside its descent (PointsStage::kEngine;
    // H100, seventeenth session: 2^20 points 0.464-0.469 s warm against 0.485-0.493 s without
    // the stage, 2^17 0.057-0.060 s against 0.065-0.070 s), on the CPU engine over
    // atom_pair_maxima on the host's lists (kOn; the host's stage over the CUDA engine's
    // atom_pair_maxima costs more than it saves: 1.08-1.12 s at 2^20; docs/multiscale.md).
    const AtomPairMaxima maxima = [&](const std::vector<std::int32_t>& pairs, double stop_at,
                                      std::vector<double>* out) {
      oracle->atom_pair_maxima(f.data(), g.data(), shape.key_tile, pairs, stop_at, out);
    };
    const bool points = mo.points_stage != PointsStage::kOff;
    const bool engine_points = mo.points_stage == PointsStage::kEngine ||
                               (mo.points_stage == PointsStage::kAuto &&
                                ctx.backend() == Backend::kCuda);
    const AtomPairMaxima* on_points = points ? &maxima : nullptr;
    // The lists made where the engine's descent leaves the kept pairs (the CUDA engine: no
    // download of the pairs, no host lists to hand back; docs/multiscale.md, "Lists on the
    // device"), where no one reads the host's lists: not for a coarse level (its caller lifts
    // through them) nor a kept mask.
    const bool engine_lists = engine_points && !coarse_level && !lists && !mo.keep_mask;
    const EngineLists made = [&](const std::vector<std::int64_t>& extra, double* covered,
                                 std::int64_t* atom_pairs) {
      return oracle->engine_block_lists(extra, covered, atom_pairs);
    };
    // A trial screen dropping more than this is rejected (the screen stops early when its box
    // stage alone drops more).
    const double drop_budget = 0.25 * s.tolerance / std::exp(mo.slack);
    double theta = std::min(theta_b, std::max(0.5, theta_b - mo.theta_trial));
    // A coarse level also keeps the box stage's lists: they lift its potentials to the finer
    // points (its points stage tests the cells' centroids, not the points beneath them; lifting
    // through the tighter lists left the 2^20 points' level 93 iterations instead of 2 on the
    // H100, docs/multiscale.md).
    // The box stage's descent on the engine where it has one (the CUDA engine's: the same pairs,
    // one thread per tested pair of cells instead of the host threads).
    const Descent descent = [&](const std::vector<ScreenLevel>& lx,
                                const std::vector<ScreenLevel>& ly, int dim, double cost,
                                double keep_at, double e, int bx, int by, bool on_pts,
                                bool box_masks, ScreenDescent* r) {
      const ScreenPoints<T> sp{f.data(), g.data(), shape.key_tile, box_masks, engine_lists};
      const auto t_descent = Clock::now();
      const bool used = oracle->screen_descent(lx, ly, dim, cost, keep_at, e, bx, by,
                                               on_pts && engine_points ? &sp : nullptr, r);
      seconds_descent += seconds_since(t_descent);
      return used;
    };
    const std::function<void(const char*)> mark = [&phase](const char* stage) {
      phase.end(stage);
    };
    sc = screen(hx, hy, n, m, d, c, theta * eps, 0.0, eps, shape, threads, on_points,
                theta < theta_b ? drop_budget : HUGE_VAL, coarse_level, &descent, &mark, &made);
    if (theta < theta_b && !(sc.dropped_mass <= drop_budget)) {
      theta = theta_b;
      sc = screen(hx, hy, n, m, d, c, theta * eps, 0.0, eps, shape, threads, on_points,
                  HUGE_VAL, coarse_level, &descent, &mark, &made);
      ++screen_retries;
    }
    s.kept_fraction = sc.kept_fraction;
    screen_theta = theta;
    seconds_screen += seconds_since(t_screen);
    phase.end("screen");
  };
  build_mask();
  const double first_screen = seconds_screen;
  double seconds_cert = 0, seconds_loop_certs = 0;  // all certificates; those inside the loop
  double loop_screen = 0;  // seconds_screen when the loop ended
  int level_certs = 0, fp32_certs = 0;  // certificates on this level; decided in fp32
  const bool dense_fine = !coarse_level && sc.kept_fraction > mo.max_density;
  if (dense_fine) {
    // Fallback: the screen keeps too much (high dimension, large eps): dense passes on the
    // points from the lifted potentials; the coarse annealing has run. The engine's own lists,
    // if it made them, are dropped: this oracle's later passes (values, the final checks) are
    // dense, as without them.
    if (sc.on_engine) oracle->set_block_lists(nullptr, nullptr);
    SinkhornSolver<T> solver(ctx, sorted, precision);
    Potentials<T> ps;
    ps.f = std::move(f);
    ps.g = std::move(g);
    SinkhornOptions dense = options;
    dense.solver = SolverKind::kDense;
    // What the coarse levels left of the budget (the dense passes were given the whole of it
    // before: 4,000 asked for, 6,000 run on 1,024 points at eps 2.5e-4).
    dense.max_iterations = std::max<std::int64_t>(1, options.max_iterations - s.iterations);
    SinkhornSummary fine = solver.solve(dense, &ps);
    std::ostringstream os;
    os << s.solver_note << "; " << n << " x " << m << " points: the screen kept "
       << std::setprecision(3) << 100 * sc.kept_fraction << "% of the pairs (> "
       << 100 * mo.max_density << "%): dense passes, " << fine.iterations << " iterations";
    const std::string note = os.str();
    const std::int64_t coarse_it = s.iterations, levels = s.multiscale_levels;
    s = fine;
    s.solver = "multiscale";
    s.solver_note = note;
    s.multiscale_levels = levels;
    s.kept_fraction = 1.0;
    s.iterations += coarse_it;
    if (s.termination == TerminationType::kMaxIterations)  // the caller's budget, not the rest
      s.message = budget_spent(options.max_iterations);
    s.fine_updates = 2 * fine.iterations;
    s.initial_epsilon = coarse_summary.initial_epsilon;
    s.annealing_iterations = coarse_summary.annealing_iterations;
    s.certificates += coarse_summary.certificates;
    // The dense solve's certificate is already over every pair: its float64 evaluation.
    if (mo.verify) s.verified_error = fine.marginal_error - fine.marginal_error_slack;
    f = std::move(ps.f);
    g = std::move(ps.g);
    phase.end("dense passes");
  } else {
    if (!sc.on_engine) oracle->set_block_lists(&sc.f_side, &sc.g_side);
    phase.end("lists");
  }

  const auto t_iter = Clock::now();
  Buffer<double> scalars(ctx, 4);
  VectorOps<T>& ops = oracle->ops();
  auto as_matrix = [](const Buffer<T>& b, bool /*read*/ = true) {
    return MatrixView<T>{b.data(), b.size(), 1, 1, b.space()};
  };
  const bool auto_relax = mo.relaxation == 0;
  double w = auto_relax ? 1.0 : mo.relaxation;
  // The certificate's row side as the next f update (Oracle::certify_kept_next; the finest
  // level, every row of positive weight): next_f receives it, f_ready says f holds it already.
  bool with_next = !coarse_level && oracle->certify_next_applies() &&
                   std::all_of(ap.begin(), ap.end(), [](double v) { return v > 0; });
  Buffer<T> next_f(ctx, with_next ? n : 0);
  bool f_ready = false;
  int failed_tries = 0;
  // And its column side as the g update (Oracle::update_g_certified; every column of positive
  // weight): the column side of the pair it makes comes with it, so a try runs its row side only.
  bool g_certified = with_next && oracle->update_g_certified_applies() &&
                     std::all_of(bp.begin(), bp.end(), [](double v) { return v > 0; });
  Buffer<T> next_g(ctx, g_certified ? m : 0);
  CertificateSide cols_old, cols_new;
  bool have_cols = false;  // cols_new is the column side of the current (f, g)
  int grew = 0, plain_run = 0, relax_run = 0, since_change = 0;
  double relax_cap = kMaxLevelRelaxation, change_norm = HUGE_VAL;
  double run_start = 0;
  std::int64_t fine_iterations = 0, failed_certs = 0, cert_iteration = -1;
  bool coarse_stalled = false;  // a coarse level stopped on kCoarseStall
  int floor_stalls = 0;  // stall checks in a row at the precision's rounding floor
  double residual = std::numeric_limits<double>::quiet_NaN();
  double norm_residual = std::numeric_limits<double>::quiet_NaN();  // residual / its factor
  double best_norm = HUGE_VAL;
  std::int64_t best_at = 0;
  Certificate cert;
  double tail = std::numeric_limits<double>::quiet_NaN();
  const std::int64_t budget = std::max<std::int64_t>(1, options.max_iterations - s.iterations);
  if (!dense_fine) s.termination = TerminationType::kMaxIterations;
  // The finest level's potentials on the host, current while host_fresh (every write to f or g
  // clears it): the drift checks, the final certificate's drift and the results read one
  // download (two arrays of n and m at 2^20 points each cost the GPU machine's host
  // milliseconds).
  detail::UninitVector<double> fh, gh;
  bool host_fresh = false;
  auto potentials_on_host = [&]() {
    if (host_fresh) return;
    fh = download(ctx, f, threads);
    gh = download(ctx, g, threads);
    host_fresh = true;
  };
  // The potentials' drift since the mask: max_i (f_i - fb_i) + max_j (g_j - gb_j), on the host.
  auto current_drift = [&]() {
    potentials_on_host();
    return max_drift(fh, fb, ap.data(), threads) + max_drift(gh, gb, bp.data(), threads);
  };
  // *drift: how far (f, g), as the buffers hold them, moved up since the mask was built. Where
  // that exceeds the slack the mask no longer covers what the potentials may carry: it is
  // rebuilt from them (false; the lists change).
  auto mask_holds = [&](double* drift) {
    *drift = current_drift();
    if (!(*drift > mo.slack * eps)) return true;
    fb = fh;
    gb = gh;
    build_mask();
    if (!sc.on_engine) oracle->set_block_lists(&sc.f_side, &sc.g_side);
    phase.end("lists");
    ++s.mask_rebuilds;
    return false;
  };
  // The verdict on a certificate of (f, g) as the buffers hold them: certified when its bound
  // plus the truncation's tail is within the tolerance. The drift (a download) only where the
  // bound alone is; where the drift exceeds the slack the mask is rebuilt from these potentials
  // instead (the lists change: sides evaluated before no longer apply). *judged receives the
  // bound plus the tail when the drift was computed, else stays as it is.
  enum class Verdict { kFailed, kCertified, kRebuilt };
  auto judge = [&](const Certificate& c, double* judged) {
    ++level_certs;
    fp32_certs += c.fp32 ? 1 : 0;
    ++s.certificates;
    if (!(c.bound <= s.tolerance)) return Verdict::kFailed;
    double drift = 0;
    if (!mask_holds(&drift)) return Verdict::kRebuilt;
    const double t = truncation_tail(sc.dropped_mass, drift, eps);
    *judged = c.bound + t;
    if (!(c.bound + t <= s.tolerance)) return Verdict::kFailed;
    tail = t;
    cert = c;
    return Verdict::kCertified;
  };
  while (!dense_fine && fine_iterations < budget) {
    if (ctx.cancel_requested()) {
      s.termination = TerminationType::kUserAbort;
      s.message = "cancelled";
      break;
    }
    host_fresh = false;  // every iteration writes f or g
    // One alternating iteration, over-relaxed: pot <- (1 - w) pot + w T(other) (f already
    // updated when a failed certificate try made its update). The engine's own passes (coarse
    // levels; the finest where the certificate's column side is not the g update) as one
    // recorded step (Oracle::repeat: one CUDA graph launch instead of 4 to 6 while w stays).
    bool paired = false;              // this iteration's half steps through certificate sides
    bool paired_certified = false;    // and one of them certified its pair (f, g as they are)
    bool paired_failed = false;       // a certificate judged and failed (no mask rebuilt)
    double paired_error = std::numeric_limits<double>::quiet_NaN();
    // After a certified side's pass: the certificate of (f, g) from the two sides when `known`
    // (both of this pair); certified, the pair stays as the buffers hold it, else the pass's
    // update `next` becomes `pot`. Returns whether the pass's new side stays usable (no mask
    // rebuilt by the judgement).
    auto settle = [&](bool known, const CertificateSide& rows, const CertificateSide& cols,
                      const Buffer<T>& next, Buffer<T>* pot) {
      Verdict v = Verdict::kFailed;
      if (known) {
        v = judge(oracle->certificate_of(eps, rows, cols), &paired_error);
        paired_failed = paired_failed || v == Verdict::kFailed;
      }
      paired_certified = v == Verdict::kCertified;
      if (!paired_certified) {
        ops.axpby(1.0, as_matrix(next), 0.0, as_matrix(*pot, false));
        host_fresh = false;
      }
      return v != Verdict::kRebuilt;
    };
    if (!f_ready && g_certified && with_next) {
      // The finest level's half steps through the certificate's sides: each side's pass
      // returns the side of the pair before its update and of the pair after it
      // (update_f_certified, update_g_certified), so the f step completes the certificate of
      // (f, g) when the last g step gave its column side, and the g step that of (f_new, g):
      // a certificate after either half step without a pass of its own (docs/multiscale.md,
      // step 6, "Half steps through both sides"). The f side runs with the plan's statistics,
      // dearer than the engine's update (H100, 2^20 points: 35 against 25 ms): once the
      // residual is near the tolerance, and on the first iteration after a Gaussian lift,
      // whose (f_1, g_0) can meet it (kMaxMedianCellRatio; 2^20 points, CPU:
      // certified at 4.5e-3 after one f and one g pass, where the centroids' lift left 5.9e-3
      // and took three passes); the engine's update before.
      paired = true;
      CertificateSide rows_new;  // after a certified f update: the row side of (f, g)
      bool rows_known = false;   // rows_new holds it
      if (residual <= kTryWithNext * s.tolerance || (fine_iterations == 0 && gaussian_lift)) {
        const auto t_rows = Clock::now();
        CertificateSide rows_old;
        const bool ok = oracle->update_f_certified(eps, f.data(), g.data(), w, next_f.data(),
                                                   &rows_old, &rows_new);
        seconds_cert += seconds_since(t_rows);
        ++s.fine_updates;
        phase.end("certificate");
        if (ok) {
          rows_known = settle(have_cols, rows_old, cols_new, next_f, &f);
        } else {
          // A row sum out of range: the engine's update (f untouched by the declined pass), and
          // the engine's passes with certify_kept from now (its float64 fallback: a row side
          // that keeps declining would leave the level without a certificate).
          oracle->relaxed_update(0, T(eps), T(w), g.data(), f.data(), nullptr);
          with_next = false;
        }
      } else {
        oracle->relaxed_update(0, T(eps), T(w), g.data(), f.data(), nullptr);
        ++s.fine_updates;
      }
      have_cols = false;
      if (!paired_certified) {
        const bool cols =
            oracle->update_g_certified(eps, f.data(), g.data(), w, next_g.data(), &cols_old,
                                       &cols_new);
        ++s.fine_updates;
        if (cols) {
          residual = cols_old.error;  // the column error of (f, g_old), as update_g's residual
          have_cols = settle(rows_known, rows_new, cols_old, next_g, &g);
        } else {
          // A column sum out of range: the engine's passes and certify_kept from now.
          g_certified = false;
          oracle->relaxed_update(1, T(eps), T(w), f.data(), g.data(), scalars.data());
          residual = to_host(ctx, scalars.cview())[0];
        }
      }
    } else if (!f_ready && !(g_certified && with_next)) {
      const std::uint64_t key = detail::step_key({eps, w}, {f.data(), g.data(), scalars.data()});
      oracle->repeat(1, key, [&] {
        oracle->relaxed_update(0, T(eps), T(w), g.data(), f.data(), nullptr);
        oracle->relaxed_update(1, T(eps), T(w), f.data(), g.data(), scalars.data());
      });
      s.fine_updates += 2;
      have_cols = false;
      residual = to_host(ctx, scalars.cview())[0];
    } else {
      // f holds a failed try's update already (certify_kept_next, outside the paired steps).
      f_ready = false;
      have_cols = false;
      oracle->relaxed_update(1, T(eps), T(w), f.data(), g.data(), scalars.data());
      residual = to_host(ctx, scalars.cview())[0];
      ++s.fine_updates;
    }
    ++fine_iterations;
    phase.end("iteration");
    // Automatic over-relaxation, on the residual divided by the factor that made it (a relaxed
    // step moves the potentials w times the plain correction, so the raw residual jumps with
    // w). The contraction rate over two plain iterations gives w; then every kRelaxRun
    // decreasing residuals at that w measure its rate again, and a rate slower than w - 1 (w
    // below the optimum: the first estimate comes from the transient) raises w by the SOR
    // relation (solvers/relaxation.hpp; the 16,384-cell level of 2^17 points kept w = 1.14 and
    // a rate of 0.981 per iteration for 150 iterations), when that rate leaves more than
    // 3 kRelaxGrace iterations to the level's stop. A new w is left a grace of
    // max(kRelaxGrace, (w - 1) / (2 - w) + 1) iterations before its rate or growth counts (near
    // the optimum the relaxed iteration's error first grows like k (w - 1)^k, for k up to
    // (w - 1) / (2 - w)); a residual above 4x the one at the change resets w at any time, two
    // growing residuals in a row or a rate of 0.999 or slower (a stall) once settled. A reset
    // sets w to 1 and halves its excess over 1 as the level's ceiling.
    const double norm = residual / w, last_norm = norm_residual;
    norm_residual = norm;
    if (auto_relax && std::isfinite(last_norm)) {
      auto set_w = [&](double v) {
        if (v == w) return;
        w = v;
        since_change = relax_run = grew = 0;
        change_norm = norm;
      };
      auto reset = [&] {
        relax_cap = 1 + 0.5 * (w - 1);
        set_w(1.0);
        plain_run = 0;
        norm_residual = std::numeric_limits<double>::quiet_NaN();  // a fresh plain run
        ++s.relaxation_resets;
      };
      ++since_change;
      const int grace = std::max(kRelaxGrace, int(std::ceil((w - 1) / (2 - w))) + 1);
      const bool settled = since_change > grace;
      grew = settled && norm > last_norm ? grew + 1 : 0;
      if (w != 1 && (grew >= 2 || !(norm <= 4 * change_norm))) {
        reset();
      } else if (w == 1 && norm < last_norm) {
        if (++plain_run == 1) run_start = last_norm;
        if (plain_run == 2 && run_start > 0) {
          const double rate = std::sqrt(norm / run_start);
          if (rate < 1) set_w(std::min(relax_cap, detail::sor_optimal_factor(rate, 1.0)));
        }
      } else if (w == 1) {
        plain_run = 0;
      } else if (settled && norm < last_norm) {
        if (++relax_run == 1) run_start = last_norm;
        if (relax_run == kRelaxRun) {
          const double lam = std::pow(norm / run_start, 1.0 / kRelaxRun);
          relax_run = 0;
          // Worth a new transient only when this rate leaves many iterations to go.
          const double target = (coarse_level ? kCoarseResidual : 0.5) * s.tolerance / w;
          const bool long_way = lam < 1 && norm > target &&
                                std::log(target / norm) / std::log(lam) > 3 * kRelaxGrace;
          if (!(lam < 0.999))
            reset();  // a relaxed stall: plain steps do better there
          else if (long_way && lam > 1.05 * (w - 1))
            set_w(std::max(w, std::min(relax_cap, detail::sor_optimal_factor(lam, w))));
        }
      } else if (settled) {
        relax_run = 0;
      }
    }
    s.relaxation = w;
    // +inf is a residual too large for a double (a step that moves a potential by more than
    // 709 eps: b_j e^((g_old - g_new) / eps) overflows), not a failure: the iteration goes on
    // and the returned pair's certificate decides (docs/multiscale.md, "Residuals too large for
    // a double"; the dense solver, which anneals eps on the points, does not meet such steps).
    // NaN is a failure.
    if (std::isnan(residual)) {
      s.termination = TerminationType::kNumericalFailure;
      s.message = "NaN marginal error in the fine passes";
      break;
    }
    IterationRecord rec{s.iterations + fine_iterations, eps, residual,
                        std::numeric_limits<double>::quiet_NaN(), seconds_since(t0)};
    bool stop = false;
    // A coarse level's progress: its best residual (divided by its factor) and when it came.
    if (norm < 0.99 * best_norm) {
      best_norm = norm;
      best_at = fine_iterations;
    }
    if (coarse_level && residual <= kCoarseResidual * s.tolerance) {
      // A coarse level: a warm start for the next; the finest level certifies.
      s.termination = TerminationType::kConverged;
      s.message = "coarse level: engine residual below 0.3 of the tolerance (not certified)";
      stop = true;
    } else if (coarse_level && fine_iterations - best_at >= kCoarseStall) {
      // No progress for kCoarseStall iterations (the engine's rounding floor at this eps can
      // sit above the coarse target): as good a warm start as this level gives.
      s.termination = TerminationType::kConverged;
      std::ostringstream os;
      os << std::setprecision(3) << "coarse level: engine residual stalled at " << residual
         << " (not certified)";
      s.message = os.str();
      coarse_stalled = true;
      stop = true;
    } else if (coarse_level) {
    } else if (paired) {
      rec.certified_error = paired_error;
      if (paired_certified) {
        s.termination = TerminationType::kConverged;
        cert_iteration = fine_iterations;
        std::ostringstream os;
        os << "certified marginal error " << std::setprecision(3) << cert.bound + tail
           << " <= tolerance " << s.tolerance << " (kept pairs " << cert.bound
           << ", truncation " << tail << ")";
        s.message = os.str();
        stop = true;
      } else if (paired_failed) {
        // Failed certificates near the tolerance: after kMaxFailedTries the engine's passes and
        // certify_kept (its float64 fallback), as a failed try of certify_kept_next below.
        if (residual <= kTryWithNext * s.tolerance && ++failed_tries >= kMaxFailedTries)
          with_next = false;
        if (residual <= 0.5 * s.tolerance && ++failed_certs >= 10) {
          s.termination = TerminationType::kRoundingFloor;
          std::ostringstream os;
          os << "not converged: the engine's residual " << std::setprecision(3) << residual
             << " met the tolerance but the certified error stayed above " << s.tolerance
             << " (the rounding floor of " << to_string(s.precision) << " at this eps)";
          s.message = os.str();
          stop = true;
        }
      }
    } else if (residual <= (with_next ? kTryWithNext : kTryWithout) * s.tolerance ||
               fine_iterations == budget) {
      double drift = 0;
      if (!mask_holds(&drift)) {
        have_cols = false;  // of the old lists
      } else {
        const auto t_cert = Clock::now();
        tail = truncation_tail(sc.dropped_mass, drift, eps);
        // The decision is kept-pair bound + tail <= tolerance: the engine may decide it in fp32.
        const double target = std::max(0.0, s.tolerance - tail);
        cert = with_next ? oracle->certify_kept_next(eps, f.data(), g.data(), target,
                                                     next_f.data(), nullptr)
                         : oracle->certify_kept(eps, f.data(), g.data(), target);
        seconds_cert += seconds_since(t_cert);
        phase.end("certificate");
        ++level_certs;
        fp32_certs += cert.fp32 ? 1 : 0;
        ++s.certificates;
        cert_iteration = cert.rows_only ? -1 : fine_iterations;
        // A rows-only try certifies nothing: no certificate in the record.
        rec.certified_error =
            cert.rows_only ? std::numeric_limits<double>::quiet_NaN() : cert.bound + tail;
        const bool certified = rec.certified_error <= s.tolerance;
        if (!certified && cert.next_written) {
          // The try's row side is the next f update: f <- (1 - w) f + w T(g).
          ops.axpby(w, as_matrix(next_f), 1 - w, as_matrix(f, false));
          host_fresh = false;
          f_ready = true;
          ++s.fine_updates;
          cert_iteration = -1;  // f moved on: the final certificate is of the new pair
        }
        if (!certified && with_next && ++failed_tries >= kMaxFailedTries) with_next = false;
        if (certified) {
          s.termination = TerminationType::kConverged;
          std::ostringstream os;
          os << "certified marginal error " << std::setprecision(3) << rec.certified_error
             << " <= tolerance " << s.tolerance << " (kept pairs " << cert.bound
             << ", truncation " << tail << ")";
          s.message = os.str();
          stop = true;
        } else if (!cert.rows_only && residual <= 0.5 * s.tolerance && ++failed_certs >= 10) {
          s.termination = TerminationType::kRoundingFloor;
          std::ostringstream os;
          os << "not converged: the engine's residual " << std::setprecision(3) << residual
             << " met the tolerance but the certified error stayed at " << rec.certified_error
             << " > " << s.tolerance << " (the rounding floor of " << to_string(s.precision)
             << " at this eps)";
          s.message = os.str();
          stop = true;
        }
      }
    }
    if (!stop && !coarse_level && fine_iterations - best_at >= kFineStall) {
      // A stall (kFineStall): the drift since the mask was built, and the mask rebuilt from
      // these potentials where it exceeds the slack (the kept set then follows the potentials
      // where the iterations pushed them). Checked again after kFineStall more either way.
      double drift = 0;
      const double floor_at = s.resolvable_epsilon / eps;  // the precision's rounding floor
      const bool at_floor = residual <= floor_at && !(residual <= 0.5 * s.tolerance);
      floor_stalls = at_floor ? floor_stalls + 1 : 0;
      if (!mask_holds(&drift)) {
        have_cols = false;    // of the old lists
        cert_iteration = -1;  // no certificate of this pair on the new lists
        floor_stalls = 0;
      } else if (floor_stalls >= 2) {
        // Two stall checks in a row (2 kFineStall iterations without a 1% better residual) with
        // the engine's residual at the precision's rounding floor (resolvable eps / eps) and
        // the tolerance below half of it, where the certificate's rule (residual within half
        // the tolerance) never applies: more iterations do not move it (4,096 points in fp32 at
        // a tolerance of 1e-7: the whole budget at a residual near 4e-6 before).
        s.termination = TerminationType::kRoundingFloor;
        std::ostringstream os;
        os << "not converged: the engine's " << to_string(s.precision) << " residual "
           << std::setprecision(3) << residual << " stopped improving at the rounding floor of "
           << to_string(s.precision) << " at eps = " << eps << " (about " << floor_at
           << "), above the tolerance " << s.tolerance;
        s.message = os.str();
        stop = true;
      }
      best_norm = HUGE_VAL;
      best_at = fine_iterations;
    }
    if (options.record_iterations) s.records.push_back(rec);
    for (const auto& cb : options.callbacks) {
      const CallbackResult r = cb(rec);
      if (r == CallbackResult::kAbort) {
        s.termination = TerminationType::kUserAbort;
        s.message = "a callback asked to abort";
        stop = true;
        break;
      }
      if (r == CallbackResult::kStopSuccessfully) {
        s.termination = TerminationType::kUserSuccess;
        s.message = "a callback asked to stop";
        stop = true;
        break;
      }
    }
    if (stop) break;
  }
  if (!dense_fine) {
    s.iterations += fine_iterations;
    if (s.termination == TerminationType::kMaxIterations)
      s.message = budget_spent(options.max_iterations);
    s.seconds_iterations = seconds_since(t_iter);
    seconds_loop_certs = seconds_cert;
    loop_screen = seconds_screen;  // the final certificate's rebuild, if any, is not the loop's
    if (lists) {
      const bool box = !sc.box_f_side.run_ptr.empty();  // lift through the box stage's lists
      BlockList& lf = box ? sc.box_f_side : sc.f_side;
      BlockList& lg = box ? sc.box_g_side : sc.g_side;
      // A coarse level reads sc no more (the finest level's certificate and mask below do).
      lists[0] = coarse_level ? std::move(lf) : lf;
      lists[1] = coarse_level ? std::move(lg) : lg;
    }
  }
  if (!dense_fine && !coarse_level) {
    const auto t_costs = Clock::now();
    // The certificate of the returned potentials, when the loop did not end on one. Where they
    // drifted past the slack since the mask (a budget that ended far from convergence: the
    // drift is checked only at certificates) the mask is rebuilt from them first: the tail
    // 2 D e^(drift / eps) would otherwise make the bound useless (+inf beyond drift = 709 eps).
    // Not after a failure, a cancel or a callback's stop (no screen of NaN potentials, no
    // screen the caller asked not to wait for).
    const bool may_rebuild = s.termination == TerminationType::kMaxIterations ||
                             s.termination == TerminationType::kRoundingFloor ||
                             s.termination == TerminationType::kConverged;
    double drift = 0;
    bool held = true;
    if (may_rebuild) {
      held = mask_holds(&drift);
      if (!held) drift = 0;  // the new mask is these potentials'
    } else {
      drift = current_drift();
    }
    tail = truncation_tail(sc.dropped_mass, drift, eps);
    if (cert_iteration != fine_iterations || !held) {
      const auto t_cert = Clock::now();
      cert = oracle->certify_kept(eps, f.data(), g.data(), std::max(0.0, s.tolerance - tail));
      seconds_cert += seconds_since(t_cert);
      ++level_certs;
      fp32_certs += cert.fp32 ? 1 : 0;
      ++s.certificates;
    }
    s.truncation_bound = tail;
    s.marginal_error = cert.bound + tail;
    s.marginal_error_slack = cert.slack;
    s.residual = residual;
    oracle->dual_value(f.data(), g.data(), scalars.data());
    s.dual_cost = to_host(ctx, scalars.cview())[0];
    // The plan's values from the certificate's sums over the kept pairs (float64; fp32 terms
    // summed in double on the CUDA fp32 path, ~1e-6 relative; the rest holds at most the
    // truncation bound of the mass): no extra pass.
    s.plan_mass = cert.plan_mass;
    s.primal_cost = cert.plan_cost;
    s.regularized_cost = cert.plan_potentials - eps * (cert.plan_mass - 1.0);
    s.dual_gap = s.regularized_cost - s.dual_cost;
    if (s.unbalanced())
      set_unbalanced_values(ctx, *oracle, eps, f.data(), g.data(), s.dual_cost, cert.plan_mass,
                            cert.plan_potentials, &s);
    if (!std::isfinite(cert.bound) && may_rebuild) {
      // As the dense solver: the plan of the returned potentials overflows float64 on the kept
      // pairs (a budget spent far from convergence at an eps far below the points' spacing).
      // A solve that ended otherwise (NaN, a cancel, a callback) keeps its own status.
      s.termination = TerminationType::kNumericalFailure;
      s.message = "the certificate of the returned potentials is not finite (their plan "
                  "overflows float64 on the kept pairs)";
    }
    if (s.termination == TerminationType::kRoundingFloor && s.marginal_error <= s.tolerance) {
      // Stopped at the engine's floor, but the float64 certificate meets the tolerance.
      s.termination = TerminationType::kConverged;
      std::ostringstream os;
      os << "certified marginal error " << std::setprecision(3) << s.marginal_error
         << " <= tolerance " << s.tolerance << " (at the engine's rounding floor)";
      s.message = os.str();
    }
    if (s.termination == TerminationType::kConverged && !(s.marginal_error <= s.tolerance)) {
      s.termination = TerminationType::kMaxIterations;
      s.message += "; but the final certificate exceeds the tolerance";
    }
    if (mo.keep_mask) s.mask = std::make_shared<const BlockList>(sc.f_side);
    if (mo.verify) {
      oracle->set_block_lists(nullptr, nullptr);
      s.verified_error = oracle->certify(eps, f.data(), g.data()).computed;
    }
    s.epsilon_reached = eps;
    s.seconds_costs = seconds_since(t_costs);
    phase.end("values");
  }
  s.seconds_setup = t_setup;
  if (!dense_fine) {
    std::ostringstream os;
    os << std::setprecision(3) << s.solver_note << (s.solver_note.empty() ? "" : "; ") << n
       << " x " << m << " points: " << fine_iterations << " iterations"
       << (coarse_stalled ? " (stalled)" : "") << ", " << 100 * s.kept_fraction
       << "% kept (atom pairs "
       << 100 * double(sc.atom_pairs) /
              (double((n + shape.key_tile - 1) / shape.key_tile) *
               double((m + shape.key_tile - 1) / shape.key_tile))
       << "%, points stage " << sc.point_tests << " tested, " << sc.point_drops
       << " dropped, theta " << screen_theta << (screen_retries ? ", after a retry" : "")
       << "); seconds: order " << t_setup << ", lift " << seconds_lift << " ("
       << (gaussian_lift ? "Gaussian, " : "");
    if (lift_declined)
      os << "Gaussian declined: probe excess " << lift_probe << " not <= tolerance "
         << probe_tolerance << ", ";
    os << "oracles " << seconds_lift_oracles
       << "), engine " << seconds_engine << ", screen " << seconds_screen
       << " (engine descent " << seconds_descent << "), passes "
       << s.seconds_iterations - (loop_screen - first_screen) - seconds_loop_certs
       << ", certificates " << seconds_cert << " (" << level_certs << ", " << fp32_certs
       << " in fp32), values "
       << s.seconds_costs;
    s.solver_note = os.str();
  }

  // ---- results in the caller's order ----
  if (coarse_level) {
    // A coarse level keeps its caller's order (identity permutations): its potentials as they
    // are, without the round trip through the host (1.1 ms at 131,072 cells, H100).
    if (images) {
      // The returned pair's images of this level's x points over its lists (the caller's
      // Gaussian lift): one value pass of the engine that holds them.
      *images = plan_images(ctx, *oracle, eps, f.data(), g.data(), yp.data(), n, m, d, mid,
                            threads);
    }
    pot->f = std::move(f);
    pot->g = std::move(g);
    pot->epsilon = eps;
    phase.end("results");
  } else if (orders_on_device) {
    // Scattered into the caller's order on the device.
    pot->f = Buffer<T>(ctx, n);
    pot->g = Buffer<T>(ctx, m);
    detail::device_permute(ctx, device_order[0].data(), f.data(), pot->f.data(), n, true);
    detail::device_permute(ctx, device_order[1].data(), g.data(), pot->g.data(), m, true);
    pot->epsilon = eps;
    phase.end("results");
  } else {
    // The finest level's last download where it is current (the loop and the certificate above
    // leave f and g as they were read); the dense fallback's potentials afresh.
    if (dense_fine) host_fresh = false;
    potentials_on_host();
    const detail::UninitVector<double>&fs = fh, &gs = gh;
    // Every entry written by the scatter (ox, oy are permutations): no zero fill.
    detail::UninitVector<T> fo(static_cast<std::size_t>(n)), go(static_cast<std::size_t>(m));
    detail::parallel_ranges(n, threads, 1 << 16, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k)
        fo[std::size_t(ox[std::size_t(k)])] = T(fs[std::size_t(k)]);
    });
    detail::parallel_ranges(m, threads, 1 << 16, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k)
        go[std::size_t(oy[std::size_t(k)])] = T(gs[std::size_t(k)]);
    });
    pot->f = upload(ctx, fo);
    pot->g = upload(ctx, go);
    pot->epsilon = eps;
    phase.end("results");
  }
  s.seconds_total = seconds_since(t0);
  return s;
}

#define KANTOR_INSTANTIATE(T)                                                                  \
  template bool auto_picks_multiscale(const Problem<T>&, const SinkhornOptions&, bool,        \
                                      std::string*);                                          \
  template SinkhornSummary solve(const Context&, const Problem<T>&, const SinkhornOptions&,   \
                                 Precision, Potentials<T>*, Clock::time_point, BlockList*, \
                                 bool, bool, CellImages*);
KANTOR_INSTANTIATE(float)
KANTOR_INSTANTIATE(double)
#undef KANTOR_INSTANTIATE

}  // namespace kantor::multiscale
