// Morton ordering, cell hierarchies and the block screen of the multiscale solver
// (solvers/multiscale_screen.hpp; the bound: docs/multiscale.md).
#include "multiscale_screen.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "kantor/error.hpp"
#include "kantor/screen_bound.hpp"
#include "kantor/uninit_vector.hpp"
#include "parallel.hpp"

namespace kantor::multiscale {
namespace {

constexpr double kRound = 0x1.0p-53;

// Chunks of an index range for the host threads: [k * chunk, min((k + 1) * chunk, count)).
std::int64_t chunks(std::int64_t count, std::int64_t chunk) { return (count + chunk - 1) / chunk; }

}  // namespace

void joint_bounds(const double* x, std::int64_t n, const double* y, std::int64_t m, int d,
                  int threads, std::vector<double>* lo_out, std::vector<double>* hi_out) {
  constexpr std::int64_t kRows = std::int64_t(1) << 16;
  const std::int64_t cx = chunks(n, kRows), cy = chunks(m, kRows);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> lo(std::size_t((cx + cy) * d), inf), hi(lo.size(), -inf);
  detail::parallel_for(cx + cy, threads, [&](std::int64_t c) {
    const double* v = c < cx ? x : y;
    const std::int64_t b = (c < cx ? c : c - cx) * kRows, e = std::min(c < cx ? n : m, b + kRows);
    // One coordinate at a time, its extent in registers (the chunk's rows stay in cache).
    for (int a = 0; a < d; ++a) {
      double l = inf, h = -inf;
      for (std::int64_t i = b; i < e; ++i) {
        l = std::min(l, v[i * d + a]);
        h = std::max(h, v[i * d + a]);
      }
      lo[std::size_t(c * d + a)] = l;
      hi[std::size_t(c * d + a)] = h;
    }
  });
  lo_out->assign(std::size_t(d), inf);
  hi_out->assign(std::size_t(d), -inf);
  for (std::int64_t c = 0; c < cx + cy; ++c)
    for (int a = 0; a < d; ++a) {
      (*lo_out)[std::size_t(a)] = std::min((*lo_out)[std::size_t(a)], lo[std::size_t(c * d + a)]);
      (*hi_out)[std::size_t(a)] = std::max((*hi_out)[std::size_t(a)], hi[std::size_t(c * d + a)]);
    }
}

void morton_order(const double* x, std::int64_t n, const double* y, std::int64_t m, int d,
                  Order* order_x, Order* order_y, int threads) {
  std::vector<double> lo, hi;
  joint_bounds(x, n, y, m, d, threads, &lo, &hi);
  morton_order(x, n, y, m, d, order_x, order_y, threads, lo, hi);
}

void morton_order(const double* x, std::int64_t n, const double* y, std::int64_t m, int d,
                  Order* order_x, Order* order_y, int threads, const std::vector<double>& lo,
                  const std::vector<double>& hi, const KeySorter* sorter) {
  const int axes = std::min(d, 63);
  // At most 52 bits: top = 2^bits - 1 must be exact in double (with 63 bits it rounds to 2^63 and
  // the largest coordinate would wrap to key 0).
  const int bits = std::max(1, std::min(52, 63 / d));
  const double top = std::ldexp(1.0, bits) - 1;
  std::vector<double> scale(std::size_t(d), 0.0);
  for (int k = 0; k < d; ++k) {
    const double w = hi[std::size_t(k)] - lo[std::size_t(k)];
    scale[std::size_t(k)] = w > 0 ? top / w : 0.0;
  }
  // The key interleaves the axes' bits from the top: bit b of axis k goes to bit b axes + (axes -
  // 1 - k). spread[(k * 8 + B) * 256 + v] is the contribution of byte B of axis k holding v.
  const int bytes = (bits + 7) / 8;
  std::vector<std::uint64_t> spread(std::size_t(axes) * 8 * 256, 0);
  for (int k = 0; k < axes; ++k)
    for (int B = 0; B < bytes; ++B)
      for (int v = 0; v < 256; ++v) {
        std::uint64_t c = 0;
        for (int t = 0; t < 8; ++t) {
          const int b = 8 * B + t;
          if (b < bits && ((v >> t) & 1)) c |= std::uint64_t(1) << (b * axes + (axes - 1 - k));
        }
        spread[(std::size_t(k) * 8 + std::size_t(B)) * 256 + std::size_t(v)] = c;
      }
  auto key_of = [&](const double* p, std::int64_t i) {
    std::uint64_t key = 0;
    for (int k = 0; k < axes; ++k) {
      const double v = (p[i * d + k] - lo[std::size_t(k)]) * scale[std::size_t(k)];
      const std::uint64_t q = std::uint64_t(std::min(top, std::max(0.0, std::floor(v))));
      const std::uint64_t* row = spread.data() + std::size_t(k) * 8 * 256;
      for (int B = 0; B < bytes; ++B) key |= row[B * 256 + ((q >> (8 * B)) & 0xffu)];
    }
    return key;
  };
  constexpr std::int64_t kChunk = 4096;
  auto order = [&](const double* p, std::int64_t rows, Order* out) {
    if (sorter) {
      // The engine's sort (the same stable order of the same keys).
      detail::UninitVector<std::uint64_t> k(static_cast<std::size_t>(rows));
      detail::parallel_for(chunks(rows, kChunk), threads, [&](std::int64_t c) {
        for (std::int64_t i = c * kChunk; i < std::min(rows, (c + 1) * kChunk); ++i)
          k[std::size_t(i)] = key_of(p, i);
      });
      out->resize(std::size_t(rows));
      if ((*sorter)(k.data(), rows, std::max(1, bits * axes), out->data())) return;
    }
    std::vector<std::pair<std::uint64_t, std::int64_t>> keys(static_cast<std::size_t>(rows));
    detail::parallel_for(chunks(rows, kChunk), threads, [&](std::int64_t c) {
      for (std::int64_t i = c * kChunk; i < std::min(rows, (c + 1) * kChunk); ++i)
        keys[std::size_t(i)] = {key_of(p, i), i};
    });
    // LSD radix sort, 8-bit digits (stable: ties keep the input order), on the host threads:
    // each thread counts and scatters its own contiguous chunk, so the order of equal digits is
    // the input order. Passes whose digit is the same for every key are skipped.
    constexpr int kDigit = 8;
    constexpr std::uint64_t kMask = (1u << kDigit) - 1;
    const int nt = int(std::max<std::int64_t>(
        1, std::min<std::int64_t>(detail::thread_count(threads), rows / 65536)));
    const std::int64_t per = (rows + nt - 1) / nt;
    std::vector<std::pair<std::uint64_t, std::int64_t>> tmp(keys.size());
    std::vector<std::int64_t> count(std::size_t(nt) << kDigit);
    for (int shift = 0; shift < 64; shift += kDigit) {
      std::fill(count.begin(), count.end(), 0);
      detail::parallel_for(nt, nt, [&](std::int64_t t) {
        std::int64_t* c = count.data() + (t << kDigit);
        for (std::int64_t i = t * per; i < std::min(rows, (t + 1) * per); ++i)
          ++c[(keys[std::size_t(i)].first >> shift) & kMask];
      });
      if (rows == 0) break;
      const std::uint64_t first = (keys[0].first >> shift) & kMask;
      std::int64_t same = 0;
      for (int t = 0; t < nt; ++t) same += count[(std::size_t(t) << kDigit) + first];
      if (same == rows) continue;
      // Exclusive prefix over (digit, thread): thread t's keys of digit v follow those of
      // threads < t.
      std::int64_t at = 0;
      for (std::size_t v = 0; v <= kMask; ++v)
        for (int t = 0; t < nt; ++t) {
          std::int64_t& c = count[(std::size_t(t) << kDigit) + v];
          const std::int64_t here = c;
          c = at;
          at += here;
        }
      detail::parallel_for(nt, nt, [&](std::int64_t t) {
        std::int64_t* c = count.data() + (t << kDigit);
        for (std::int64_t i = t * per; i < std::min(rows, (t + 1) * per); ++i) {
          const auto& k = keys[std::size_t(i)];
          tmp[std::size_t(c[(k.first >> shift) & kMask]++)] = k;
        }
      });
      keys.swap(tmp);
    }
    out->resize(std::size_t(rows));
    detail::parallel_ranges(rows, threads, 65536, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) (*out)[std::size_t(i)] = keys[std::size_t(i)].second;
    });
  };
  order(x, n, order_x);
  order(y, m, order_y);
}

namespace {

// Per-cell central moments of the active (positive-weight) points: count, mean, scatter matrix
// sum (x - mean)(x - mean)^T, mean potential and sum (x - mean)(pot - mean pot). Children merge
// exactly (Chan et al.'s pairwise update), so upper levels never revisit the points.
struct Moments {
  std::vector<double> cnt, mean, scatter, fmean, cross;
  void resize(std::int64_t count, int d) {
    cnt.assign(std::size_t(count), 0.0);
    mean.assign(std::size_t(count * d), 0.0);
    scatter.assign(std::size_t(count * d * d), 0.0);
    fmean.assign(std::size_t(count), 0.0);
    cross.assign(std::size_t(count * d), 0.0);
  }
};

// The least-squares gradient of cell k from its moments (0 when degenerate); any gradient gives
// a valid bound, because the residual above the model is measured or bounded, not assumed.
// kD > 0: fixed-size matrices (no heap allocation per cell: with the dynamic ones the host
// threads spent their time in malloc); kD = 0: any d.
template <int kD>
void fit_gradient_impl(const Moments& M, std::int64_t k, int d, double* grad) {
  using Mat = Eigen::Matrix<double, kD == 0 ? Eigen::Dynamic : kD, kD == 0 ? Eigen::Dynamic : kD>;
  using Vec = Eigen::Matrix<double, kD == 0 ? Eigen::Dynamic : kD, 1>;
  for (int a = 0; a < d; ++a) grad[a] = 0;
  if (M.cnt[std::size_t(k)] < 2) return;
  Mat A = Eigen::Map<const Mat>(M.scatter.data() + k * d * d, d, d);
  const Eigen::Map<const Vec> r(M.cross.data() + k * d, d);
  const double tr = A.trace();
  if (!(tr > 0)) return;
  A.diagonal().array() += 1e-9 * tr / d;
  const Vec g = A.ldlt().solve(r);
  if (g.allFinite())
    for (int a = 0; a < d; ++a) grad[a] = g[a];
}

void fit_gradient(const Moments& M, std::int64_t k, int d, double* grad) {
  switch (d) {
    case 1: return fit_gradient_impl<1>(M, k, d, grad);
    case 2: return fit_gradient_impl<2>(M, k, d, grad);
    case 3: return fit_gradient_impl<3>(M, k, d, grad);
    default: return fit_gradient_impl<0>(M, k, d, grad);
  }
}

// Level 0: boxes, moments, models and exact residuals from the points of cell k.
// kD > 0: the dimension as a compile-time constant (the box, mean and moment sums in registers);
// kD = 0: any d.
template <int kD>
void fit_atom(const double* x, const double* w, const double* pot, std::int64_t n, int dyn_d,
              CellLevel* L, Moments* M, std::int64_t k) {
  constexpr int kMax = kD > 0 ? kD : 1;
  const int d = kD > 0 ? kD : dyn_d;
  const std::int64_t b = k * L->size, e = std::min(n, b + L->size);
  // Accumulators: local arrays for a fixed d, the level's own storage otherwise.
  double lo_r[kMax], hi_r[kMax], mean_r[kMax], r_r[kMax], S_r[kMax * kMax], u_r[kMax];
  std::vector<double> u_dyn;
  double* lo = kD > 0 ? lo_r : L->lo.data() + k * d;
  double* hi = kD > 0 ? hi_r : L->hi.data() + k * d;
  double* mean = kD > 0 ? mean_r : M->mean.data() + k * d;
  double* S = kD > 0 ? S_r : M->scatter.data() + k * d * d;
  double* r = kD > 0 ? r_r : M->cross.data() + k * d;
  if (kD == 0) u_dyn.resize(std::size_t(d));
  double* u = kD > 0 ? u_r : u_dyn.data();
  for (int a = 0; a < d; ++a) {
    lo[a] = std::numeric_limits<double>::infinity();
    hi[a] = -std::numeric_limits<double>::infinity();
    mean[a] = 0;
    r[a] = 0;
  }
  for (int a = 0; a < d * d; ++a) S[a] = 0;
  double cnt = 0, fmean = 0, mass = 0;
  for (std::int64_t i = b; i < e; ++i) {
    for (int a = 0; a < d; ++a) {
      lo[a] = std::min(lo[a], x[i * d + a]);
      hi[a] = std::max(hi[a], x[i * d + a]);
    }
    if (!(w[i] > 0)) continue;
    mass += w[i];
    if (!std::isfinite(pot[i]))
      throw InvalidArgument("multiscale: the potential of point " + std::to_string(i) +
                            " (sorted order) is not finite");
    cnt += 1;
    fmean += pot[i];
    for (int a = 0; a < d; ++a) mean[a] += x[i * d + a];
  }
  // Written back whatever happens next (the level's arrays are the outputs).
  auto store = [&] {
    if (kD == 0) return;
    for (int a = 0; a < d; ++a) {
      L->lo[std::size_t(k * d + a)] = lo[a];
      L->hi[std::size_t(k * d + a)] = hi[a];
      M->mean[std::size_t(k * d + a)] = mean[a];
      M->cross[std::size_t(k * d + a)] = r[a];
    }
    for (int a = 0; a < d * d; ++a) M->scatter[std::size_t(k * d * d + a)] = S[a];
  };
  M->cnt[std::size_t(k)] = cnt;
  L->mass[std::size_t(k)] = mass;
  L->active[std::size_t(k)] = cnt > 0;
  if (cnt == 0) {
    store();
    return;
  }
  fmean /= cnt;
  for (int a = 0; a < d; ++a) mean[a] /= cnt;
  M->fmean[std::size_t(k)] = fmean;
  for (std::int64_t i = b; i < e; ++i) {
    if (!(w[i] > 0)) continue;
    for (int a = 0; a < d; ++a) u[a] = x[i * d + a] - mean[a];
    for (int a = 0; a < d; ++a) {
      r[a] += u[a] * (pot[i] - fmean);
      for (int c2 = 0; c2 < d; ++c2) S[a * d + c2] += u[a] * u[c2];
    }
  }
  store();
  double* grad = L->grad.data() + k * d;
  fit_gradient(*M, k, d, grad);
  double res = -std::numeric_limits<double>::infinity();
  for (std::int64_t i = b; i < e; ++i) {
    if (!(w[i] > 0)) continue;
    double model = fmean;
    for (int a = 0; a < d; ++a) model += grad[a] * (x[i * d + a] - mean[a]);
    res = std::max(res, pot[i] - model);
  }
  for (int a = 0; a < d; ++a) L->center[std::size_t(k * d + a)] = mean[a];
  L->value[std::size_t(k)] = fmean;
  L->resid[std::size_t(k)] = res;
}

// Level above `C`: cell k merges children 2k and 2k+1. Its residual is bounded through the
// children's: for a point of child c, pot - model_k(x) <= (model_c - model_k)(x) + resid_c, a
// linear function maximized over the child's box (plus a rounding allowance).
void merge_cell(const CellLevel& C, const Moments& MC, int d, CellLevel* L, Moments* M,
                std::int64_t k) {
  double* lo = L->lo.data() + k * d;
  double* hi = L->hi.data() + k * d;
  for (int a = 0; a < d; ++a) {
    lo[a] = std::numeric_limits<double>::infinity();
    hi[a] = -std::numeric_limits<double>::infinity();
  }
  double cnt = 0;
  double* mean = M->mean.data() + k * d;
  double* S = M->scatter.data() + k * d * d;
  double* r = M->cross.data() + k * d;
  double fmean = 0, mass = 0;
  for (std::int64_t c = 2 * k; c < std::min(C.count, 2 * k + 2); ++c) {
    mass += C.mass[std::size_t(c)];
    for (int a = 0; a < d; ++a) {
      lo[a] = std::min(lo[a], C.lo[std::size_t(c * d + a)]);
      hi[a] = std::max(hi[a], C.hi[std::size_t(c * d + a)]);
    }
    const double n2 = MC.cnt[std::size_t(c)];
    if (n2 == 0) continue;
    const double* m2 = MC.mean.data() + c * d;
    if (cnt == 0) {
      cnt = n2;
      fmean = MC.fmean[std::size_t(c)];
      for (int a = 0; a < d; ++a) mean[a] = m2[a];
      for (int a = 0; a < d * d; ++a) S[a] = MC.scatter[std::size_t(c * d * d + a)];
      for (int a = 0; a < d; ++a) r[a] = MC.cross[std::size_t(c * d + a)];
      continue;
    }
    const double tot = cnt + n2, wgt = cnt * n2 / tot;
    const double df = MC.fmean[std::size_t(c)] - fmean;
    // The mean's shift, on the stack for d <= 8 (a heap vector per merge was most of the level's
    // time on many threads).
    double dl_small[8];
    std::vector<double> dl_big(d > 8 ? std::size_t(d) : 0);
    double* dl = d > 8 ? dl_big.data() : dl_small;
    for (int a = 0; a < d; ++a) dl[a] = m2[a] - mean[a];
    for (int a = 0; a < d; ++a) {
      r[a] += MC.cross[std::size_t(c * d + a)] + wgt * dl[a] * df;
      for (int b2 = 0; b2 < d; ++b2)
        S[a * d + b2] += MC.scatter[std::size_t(c * d * d + a * d + b2)] + wgt * dl[a] * dl[b2];
    }
    for (int a = 0; a < d; ++a) mean[a] += dl[a] * n2 / tot;
    fmean += df * n2 / tot;
    cnt = tot;
  }
  M->cnt[std::size_t(k)] = cnt;
  M->fmean[std::size_t(k)] = fmean;
  L->mass[std::size_t(k)] = mass;
  L->active[std::size_t(k)] = cnt > 0;
  if (cnt == 0) return;
  double* grad = L->grad.data() + k * d;
  fit_gradient(*M, k, d, grad);
  for (int a = 0; a < d; ++a) L->center[std::size_t(k * d + a)] = mean[a];
  L->value[std::size_t(k)] = fmean;
  double res = -std::numeric_limits<double>::infinity();
  for (std::int64_t c = 2 * k; c < std::min(C.count, 2 * k + 2); ++c) {
    if (!C.active[std::size_t(c)]) continue;
    const double* gc = C.grad.data() + c * d;
    const double* cc = C.center.data() + c * d;
    // (model_c - model_k)(x) = v_c - v_k - <g_c, c_c> + <g_k, c_k> + <g_c - g_k, x>.
    double v = C.value[std::size_t(c)] - fmean + C.resid[std::size_t(c)];
    double mag = std::fabs(C.value[std::size_t(c)]) + std::fabs(fmean) + std::fabs(C.resid[std::size_t(c)]);
    for (int a = 0; a < d; ++a) {
      const double da = gc[a] - grad[a];
      const double xl = C.lo[std::size_t(c * d + a)], xh = C.hi[std::size_t(c * d + a)];
      v += -gc[a] * cc[a] + grad[a] * mean[a] + std::max(da * xl, da * xh);
      mag += std::fabs(gc[a] * cc[a]) + std::fabs(grad[a] * mean[a]) +
             (std::fabs(gc[a]) + std::fabs(grad[a])) * std::max(std::fabs(xl), std::fabs(xh));
    }
    res = std::max(res, v + (4.0 * d + 16.0) * kRound * mag);
  }
  L->resid[std::size_t(k)] = res;
}

// The packed record pair_bound reads: lo, hi, grad, base = value + resid - <grad, center>,
// mag (the magnitudes behind base and the linear terms) and ext (the largest |coordinate|).
void pack(CellLevel* L, int d) {
  const std::int64_t st = 3 * std::int64_t(d) + 3;
  L->packed.assign(std::size_t(L->count * st), 0.0);
  for (std::int64_t k = 0; k < L->count; ++k) {
    double* P = L->packed.data() + k * st;
    double base = L->value[std::size_t(k)] + L->resid[std::size_t(k)];
    double mag = std::fabs(L->value[std::size_t(k)]) + std::fabs(L->resid[std::size_t(k)]);
    double ext = 0;
    for (int a = 0; a < d; ++a) {
      const double lo = L->lo[std::size_t(k * d + a)], hi = L->hi[std::size_t(k * d + a)];
      const double g = L->grad[std::size_t(k * d + a)], c = L->center[std::size_t(k * d + a)];
      P[a] = lo;
      P[d + a] = hi;
      P[2 * d + a] = g;
      base -= g * c;
      const double e = std::max(std::fabs(lo), std::fabs(hi));
      ext = std::max(ext, e);
      mag += std::fabs(g) * (std::fabs(c) + 2 * e);
    }
    P[3 * d] = base;
    P[3 * d + 1] = mag;
    P[3 * d + 2] = ext;
  }
}

}  // namespace

Hierarchy build_hierarchy(const double* x, const double* w, const double* pot, std::int64_t n,
                          int d, std::int64_t atom, std::int64_t top_cells, int threads) {
  Hierarchy h;
  Moments below;
  std::int64_t size = atom;
  for (;;) {
    CellLevel L;
    L.size = size;
    L.count = (n + size - 1) / size;
    L.lo.resize(std::size_t(L.count * d));
    L.hi.resize(std::size_t(L.count * d));
    L.center.assign(std::size_t(L.count * d), 0.0);
    L.grad.assign(std::size_t(L.count * d), 0.0);
    L.value.assign(std::size_t(L.count), 0.0);
    L.resid.assign(std::size_t(L.count), 0.0);
    L.active.assign(std::size_t(L.count), 0);
    L.mass.assign(std::size_t(L.count), 0.0);
    Moments M;
    M.resize(L.count, d);
    if (h.levels.empty()) {
      auto fit = d == 1   ? fit_atom<1>
                 : d == 2 ? fit_atom<2>
                 : d == 3 ? fit_atom<3>
                          : fit_atom<0>;
      // Ranges of cells per task: one atomic claim per range instead of per cell.
      detail::parallel_ranges(L.count, threads, 256, [&](std::int64_t kb, std::int64_t ke) {
        for (std::int64_t k = kb; k < ke; ++k) fit(x, w, pot, n, d, &L, &M, k);
      });
    } else {
      const CellLevel& C = h.levels.back();
      detail::parallel_ranges(L.count, threads, 512, [&](std::int64_t kb, std::int64_t ke) {
        for (std::int64_t k = kb; k < ke; ++k) merge_cell(C, below, d, &L, &M, k);
      });
    }
    pack(&L, d);
    const std::int64_t count = L.count;
    h.levels.push_back(std::move(L));
    below = std::move(M);
    if (count <= std::max<std::int64_t>(top_cells, 1)) break;
    size *= 2;
  }
  return h;
}

namespace {

// pair_bound's body (kantor/screen_bound.hpp: shared with the CUDA engine's descent), with the
// dimension a compile-time constant when D > 0 (unrolled loops).
template <int D>
inline double pair_bound_impl(const double* A, const double* B, int dyn_d, double c) {
  return detail::screen_pair_bound<D>(A, B, dyn_d, c);
}

}  // namespace

double pair_bound(const CellLevel& X, std::int64_t I, const CellLevel& Y, std::int64_t J, int d,
                  double c) {
  const std::int64_t st = 3 * std::int64_t(d) + 3;
  const double* A = X.packed.data() + I * st;
  const double* B = Y.packed.data() + J * st;
  switch (d) {
    case 1: return pair_bound_impl<1>(A, B, d, c);
    case 2: return pair_bound_impl<2>(A, B, d, c);
    case 3: return pair_bound_impl<3>(A, B, d, c);
    default: return pair_bound_impl<0>(A, B, d, c);
  }
}

namespace {

// The kept atom pairs of a screen in blocks: x cells of level lx and y cells of level ly (at most
// 2^kBlockLevels = 8 atoms each). Rows are x blocks; each row lists its y blocks in increasing
// order with a 64-bit mask of its kept atom pairs, bit 8 a + b for the block's a-th x atom with
// its b-th y atom. 64x fewer entries than the atom pairs, and sorted by construction: the lists
// of both sides come out of it without a sort (docs/multiscale.md, "The screen").
struct BlockPairs {
  int lx = 0, ly = 0;
  std::vector<std::int64_t> ptr;  // rows + 1 offsets
  detail::UninitVector<std::int32_t> col;  // y blocks (every entry written: no zero fill)
  detail::UninitVector<std::uint64_t> mask;
};

constexpr int kBlockLevels = 3;

// The masks' bit operations (kantor/screen_bound.hpp, shared with the CUDA engine's lists).
std::uint64_t transpose_bits(std::uint64_t v) { return detail::screen_transpose_bits(v); }
std::uint32_t fold_bytes(std::uint64_t v) { return detail::screen_fold_bytes(v); }

// The block pairs with rows and columns exchanged (rows: the `cols` y blocks), each row's
// columns still increasing: a counting sort by column, each group of rows counting and
// scattering its own entries in row order.
BlockPairs transpose(const BlockPairs& p, std::int64_t cols, int threads) {
  BlockPairs t;
  t.lx = p.ly;
  t.ly = p.lx;
  const std::int64_t rows = std::int64_t(p.ptr.size()) - 1;
  const std::int64_t groups = std::max<std::int64_t>(
      1, std::min<std::int64_t>(rows, std::min(64, 4 * detail::thread_count(threads))));
  const std::int64_t per = (rows + groups - 1) / groups;
  std::vector<std::int64_t> count(std::size_t(groups * cols), 0);
  detail::parallel_for(groups, threads, [&](std::int64_t gr) {
    std::int64_t* c = count.data() + gr * cols;
    for (std::int64_t q = p.ptr[std::size_t(std::min(rows, gr * per))];
         q < p.ptr[std::size_t(std::min(rows, (gr + 1) * per))]; ++q)
      ++c[p.col[std::size_t(q)]];
  });
  t.ptr.assign(std::size_t(cols + 1), 0);
  std::int64_t at = 0;
  for (std::int64_t c = 0; c < cols; ++c) {
    t.ptr[std::size_t(c)] = at;
    for (std::int64_t gr = 0; gr < groups; ++gr) {
      std::int64_t& k = count[std::size_t(gr * cols + c)];
      const std::int64_t here = k;
      k = at;
      at += here;
    }
  }
  t.ptr[std::size_t(cols)] = at;
  t.col.resize(std::size_t(at));
  t.mask.resize(std::size_t(at));
  detail::parallel_for(groups, threads, [&](std::int64_t gr) {
    std::int64_t* c = count.data() + gr * cols;
    for (std::int64_t r = gr * per; r < std::min(rows, (gr + 1) * per); ++r)
      for (std::int64_t q = p.ptr[std::size_t(r)]; q < p.ptr[std::size_t(r + 1)]; ++q) {
        const std::int64_t to = c[p.col[std::size_t(q)]]++;
        t.col[std::size_t(to)] = std::int32_t(r);
        t.mask[std::size_t(to)] = transpose_bits(p.mask[std::size_t(q)]);
      }
  });
  return t;
}

// One side's block list from its block pairs (rows: this side's `rows` points in row tiles of
// shape.row_tile; keys: the other side's `keys` points in atoms of shape.key_tile): a row tile
// keeps the union of its atoms' kept key atoms, merged into runs in increasing order.
BlockList block_list(const BlockPairs& p, std::int64_t rows, std::int64_t keys,
                     const BlockShape& shape, int threads, double* covered_pairs) {
  const std::int64_t atom = shape.key_tile, per_tile = shape.row_tile / shape.key_tile;
  const std::int64_t tiles = (rows + shape.row_tile - 1) / shape.row_tile;
  const std::int64_t row_atoms = (rows + atom - 1) / atom;
  const int lx = p.lx, ly = p.ly;
  std::vector<double> covered(static_cast<std::size_t>(tiles), 0.0);
  auto emit_tile = [&](std::int64_t t, std::vector<std::int32_t>* runs) {
    const std::int64_t a0 = t * per_tile, a1 = std::min(row_atoms, a0 + per_tile) - 1;
    const std::int64_t b0 = a0 >> lx, b1 = a1 >> lx;
    // The key atoms block q's row `blk` gives this tile (its rows in [a0, a1]): the mask's
    // bytes of those rows, OR-ed.
    auto rows_of_block = [&](std::int64_t blk) {
      const std::int64_t first = blk << lx;
      const std::int64_t lo = std::max(a0 - first, std::int64_t(0));
      const std::int64_t hi = std::min(a1 - first, (std::int64_t(1) << lx) - 1);
      std::uint64_t sel = 0;
      for (std::int64_t a = lo; a <= hi; ++a) sel |= std::uint64_t(0xFF) << (8 * a);
      return sel;
    };
    std::vector<std::int32_t>& out = *runs;
    std::int64_t rb = 0, re = -1, nkeys = 0;
    auto flush = [&]() {
      if (re < 0) return;
      out.push_back(std::int32_t(rb));
      out.push_back(std::int32_t(re));
      nkeys += std::min(keys, re * atom) - rb * atom;
    };
    // Key atoms (J << ly) + b for the set bits b of `bits` (at most 8), in increasing order:
    // each run of set bits extends the current run of keys or starts a new one.
    auto emit = [&](std::int64_t J, std::uint32_t bits) {
      while (bits) {
        const int b = __builtin_ctz(bits);
        const int len = __builtin_ctz(~(bits >> b));  // bits has at most 8: ~ has a zero above
        bits &= ~(((1u << len) - 1u) << b);
        const std::int64_t k = (J << ly) + b;
        if (k == re) {
          re = k + len;
        } else {
          flush();
          rb = k;
          re = k + len;
        }
      }
    };
    if (b0 == b1) {
      const std::uint64_t sel = rows_of_block(b0);
      for (std::int64_t q = p.ptr[std::size_t(b0)]; q < p.ptr[std::size_t(b0 + 1)]; ++q)
        emit(p.col[std::size_t(q)], fold_bytes(p.mask[std::size_t(q)] & sel));
    } else {
      // A row tile over several blocks: their columns merged (sorted, equal ones OR-ed).
      std::vector<std::pair<std::int32_t, std::uint32_t>> merged;
      for (std::int64_t blk = b0; blk <= b1; ++blk) {
        const std::uint64_t sel = rows_of_block(blk);
        for (std::int64_t q = p.ptr[std::size_t(blk)]; q < p.ptr[std::size_t(blk + 1)]; ++q)
          merged.emplace_back(p.col[std::size_t(q)], fold_bytes(p.mask[std::size_t(q)] & sel));
      }
      std::sort(merged.begin(), merged.end());
      for (std::size_t i = 0; i < merged.size();) {
        std::uint32_t bits = 0;
        std::size_t j = i;
        for (; j < merged.size() && merged[j].first == merged[i].first; ++j) bits |= merged[j].second;
        emit(merged[i].first, bits);
        i = j;
      }
    }
    flush();
    const std::int64_t r0 = t * shape.row_tile, r1 = std::min(rows, r0 + shape.row_tile);
    covered[std::size_t(t)] = double(r1 - r0) * double(nkeys);
  };
  BlockList list = assemble_list(tiles, shape.row_tile, shape.key_tile, threads, emit_tile);
  double total = 0;
  for (std::int64_t t = 0; t < tiles; ++t) total += covered[std::size_t(t)];
  *covered_pairs = total;
  return list;
}

// The descent of screen(): the kept pairs of atoms, in blocks (rec[I] for x block I: its y blocks
// in increasing order with their masks; blocks of levels bx, by), and the pairs tested. pair_bound
// inlined with the dimension D (0: any).
using BlockRows = std::vector<std::vector<std::pair<std::int32_t, std::uint64_t>>>;

template <int D>
std::int64_t descend(const Hierarchy& hx, const Hierarchy& hy, int d, double c, double keep_at,
                     double eps, int threads, int* bx_out, int* by_out, BlockRows* rec_out,
                     double* dropped_out) {
  // A dropped pair of cells (I, J) with bound b holds at most mass_I mass_J e^(b / eps) of the
  // plan: summed per row (then in row order: deterministic) into the dropped mass.
  auto dropped = [&](const CellLevel& X, std::int64_t I, const CellLevel& Y, std::int64_t J,
                     double b) {
    return X.mass[std::size_t(I)] * Y.mass[std::size_t(J)] * std::exp(b / eps);
  };
  double dropped_total = 0;
  const std::int64_t st = 3 * std::int64_t(d) + 3;
  auto bound = [&](const CellLevel& X, std::int64_t I, const CellLevel& Y, std::int64_t J) {
    return pair_bound_impl<D>(X.packed.data() + I * st, Y.packed.data() + J * st, d, c);
  };
  // The descent: a pair of cells is tested only when its parent pair was kept; both sides
  // descend one level per step while both can (then the deeper one alone), so every pair
  // of a step has the same levels. Level-synchronous down to the block levels (at most 8
  // atoms a side), rows = x cells, each with its candidate y cells in increasing order.
  const int tx = int(hx.levels.size()) - 1, ty = int(hy.levels.size()) - 1;
  const int steps = std::max(0, std::max(tx, ty) - kBlockLevels);
  auto level = [](int top, int s) { return std::max(0, top - s); };
  std::atomic<std::int64_t> tested{0};
  std::vector<std::vector<std::int32_t>> cand;
  {
    const CellLevel& X = hx.levels[std::size_t(tx)];
    const CellLevel& Y = hy.levels[std::size_t(ty)];
    cand.resize(std::size_t(X.count));
    for (std::int64_t I = 0; I < X.count; ++I)
      for (std::int64_t J = 0; J < Y.count; ++J)
        if (X.active[std::size_t(I)] && Y.active[std::size_t(J)])
          cand[std::size_t(I)].push_back(std::int32_t(J));
  }
  for (int s = 0; s < steps; ++s) {
    const int lx = level(tx, s), ly = level(ty, s);
    const bool dx = lx > 0, dy = ly > 0;
    const CellLevel& X = hx.levels[std::size_t(lx)];
    const CellLevel& Y = hy.levels[std::size_t(ly)];
    const CellLevel& Xc = hx.levels[std::size_t(dx ? lx - 1 : lx)];
    const CellLevel& Yc = hy.levels[std::size_t(dy ? ly - 1 : ly)];
    std::vector<std::vector<std::int32_t>> next(static_cast<std::size_t>(Xc.count));
    std::vector<double> lost(static_cast<std::size_t>(X.count), 0.0);
    detail::parallel_for(X.count, threads, [&](std::int64_t I) {
      std::vector<std::int32_t> kept;
      for (const std::int32_t J : cand[std::size_t(I)]) {
        const double b = bound(X, I, Y, J);
        if (!(b < keep_at))  // kept (NaN too)
          kept.push_back(J);
        else
          lost[std::size_t(I)] += dropped(X, I, Y, J, b);
      }
      tested.fetch_add(std::int64_t(cand[std::size_t(I)].size()), std::memory_order_relaxed);
      for (int a = 0; a <= (dx ? 1 : 0); ++a) {
        const std::int64_t I2 = dx ? 2 * I + a : I;
        if (I2 >= Xc.count || !Xc.active[std::size_t(I2)]) continue;
        std::vector<std::int32_t>& o = next[std::size_t(I2)];
        for (const std::int32_t J : kept)
          for (int b = 0; b <= (dy ? 1 : 0); ++b) {
            const std::int64_t J2 = dy ? 2 * std::int64_t(J) + b : J;
            if (J2 < Yc.count && Yc.active[std::size_t(J2)]) o.push_back(std::int32_t(J2));
          }
      }
    });
    cand.swap(next);
    for (const double v : lost) dropped_total += v;
  }
  // Each candidate block pair: the rest of the descent, down to the atoms, as a mask.
  *bx_out = level(tx, steps);
  *by_out = level(ty, steps);
  const int bx = *bx_out, by = *by_out;
  const CellLevel& XB = hx.levels[std::size_t(bx)];
  std::vector<std::vector<std::pair<std::int32_t, std::uint64_t>>>& rec = *rec_out;
  rec.assign(static_cast<std::size_t>(XB.count), {});
  std::vector<double> lost(static_cast<std::size_t>(XB.count), 0.0);
  detail::parallel_for(XB.count, threads, [&](std::int64_t I0) {
    std::int64_t count = 0;
    double lost_here = 0;
    // The cells (I, J) at levels (lx, ly), whose first atoms are a and b atoms into the block.
    auto refine = [&](auto&& self, int lx, int ly, std::int64_t I, std::int64_t J, int a,
                      int b) -> std::uint64_t {
      ++count;
      const CellLevel& X = hx.levels[std::size_t(lx)];
      const CellLevel& Y = hy.levels[std::size_t(ly)];
      const double bnd = bound(X, I, Y, J);
      if (bnd < keep_at) {
        lost_here += dropped(X, I, Y, J, bnd);
        return 0;
      }
      if (lx == 0 && ly == 0) return std::uint64_t(1) << (8 * a + b);
      const bool dx = lx > 0, dy = ly > 0;
      const int cx = dx ? lx - 1 : lx, cy = dy ? ly - 1 : ly;
      const CellLevel& Xc = hx.levels[std::size_t(cx)];
      const CellLevel& Yc = hy.levels[std::size_t(cy)];
      std::uint64_t mask = 0;
      for (int u = 0; u <= (dx ? 1 : 0); ++u) {
        const std::int64_t I2 = dx ? 2 * I + u : I;
        if (I2 >= Xc.count || !Xc.active[std::size_t(I2)]) continue;
        for (int v = 0; v <= (dy ? 1 : 0); ++v) {
          const std::int64_t J2 = dy ? 2 * J + v : J;
          if (J2 >= Yc.count || !Yc.active[std::size_t(J2)]) continue;
          mask |= self(self, cx, cy, I2, J2, dx ? a + (u << cx) : a, dy ? b + (v << cy) : b);
        }
      }
      return mask;
    };
    auto& r = rec[std::size_t(I0)];
    for (const std::int32_t J0 : cand[std::size_t(I0)]) {
      const std::uint64_t mask = refine(refine, bx, by, I0, J0, 0, 0);
      if (mask) r.emplace_back(J0, mask);
    }
    tested.fetch_add(count, std::memory_order_relaxed);
    lost[std::size_t(I0)] = lost_here;
  });
  for (const double v : lost) dropped_total += v;
  *dropped_out = dropped_total;
  return tested.load();
}

// The second stage of the screen: every kept atom pair's maximum on its points from the
// caller's evaluator (Oracle::atom_pair_maxima); pairs below keep_at leave the masks and enter
// the dropped mass with mass_I mass_J e^(max / eps). Returns the dropped mass added; counts the
// atom pairs evaluated and dropped.
double refine_with_maxima(const Hierarchy& hx, const Hierarchy& hy, const AtomPairMaxima& maxima,
                          double keep_at, double eps, int bx, int by, int threads, BlockRows* rec,
                          std::int64_t* tested, std::int64_t* dropped) {
  const std::int64_t rows = std::int64_t(rec->size());
  std::vector<std::int64_t> start(static_cast<std::size_t>(rows + 1), 0);
  for (std::int64_t I0 = 0; I0 < rows; ++I0) {
    std::int64_t k = 0;
    for (const auto& e : (*rec)[std::size_t(I0)]) k += __builtin_popcountll(e.second);
    start[std::size_t(I0 + 1)] = start[std::size_t(I0)] + k;
  }
  const std::int64_t total = start.back();
  // The atom pairs in (block row, record, bit) order, in batches of whole block rows of at most
  // kBatch pairs (2^23 points a side keep ~1e9 atom pairs); the same walk reads the results back.
  constexpr std::int64_t kBatch = std::int64_t(1) << 24;
  auto walk = [&](std::int64_t I0, std::int64_t base, auto&& visit) {
    std::int64_t k = start[std::size_t(I0)] - base;
    for (auto& e : (*rec)[std::size_t(I0)])
      for (std::uint64_t v = e.second; v; v &= v - 1) {
        const int bit = __builtin_ctzll(v);
        visit(k++, (I0 << bx) + (bit >> 3), (std::int64_t(e.first) << by) + (bit & 7), e, bit);
      }
  };
  std::vector<double> lost(static_cast<std::size_t>(rows), 0.0);
  std::vector<std::int64_t> gone(static_cast<std::size_t>(rows), 0);
  std::vector<std::int32_t> pairs;
  std::vector<double> best;
  for (std::int64_t r0 = 0; r0 < rows;) {
    std::int64_t r1 = r0 + 1;
    while (r1 < rows && start[std::size_t(r1 + 1)] - start[std::size_t(r0)] <= kBatch) ++r1;
    const std::int64_t base = start[std::size_t(r0)], count = start[std::size_t(r1)] - base;
    pairs.resize(static_cast<std::size_t>(2 * count));
    detail::parallel_for(r1 - r0, threads, [&](std::int64_t q) {
      walk(r0 + q, base, [&](std::int64_t k, std::int64_t I, std::int64_t J, auto&, int) {
        pairs[std::size_t(2 * k)] = std::int32_t(I);
        pairs[std::size_t(2 * k + 1)] = std::int32_t(J);
      });
    });
    maxima(pairs, keep_at, &best);
    if (std::int64_t(best.size()) != count)
      throw InvalidArgument("multiscale: the atom-pair evaluator returned " +
                            std::to_string(best.size()) + " values for " +
                            std::to_string(count) + " pairs");
    detail::parallel_for(r1 - r0, threads, [&](std::int64_t q) {
      const std::int64_t I0 = r0 + q;
      walk(I0, base, [&](std::int64_t k, std::int64_t I, std::int64_t J, auto& e, int bit) {
        const double v = best[std::size_t(k)];
        if (!(v < keep_at)) return;  // kept (NaN too)
        e.second &= ~(std::uint64_t(1) << bit);
        ++gone[std::size_t(I0)];
        lost[std::size_t(I0)] += hx.levels[0].mass[std::size_t(I)] *
                                 hy.levels[0].mass[std::size_t(J)] * std::exp(v / eps);
      });
      auto& r = (*rec)[std::size_t(I0)];
      r.erase(std::remove_if(r.begin(), r.end(), [](const auto& e) { return e.second == 0; }),
              r.end());
    });
    r0 = r1;
  }
  double total_lost = 0;
  for (std::int64_t I0 = 0; I0 < rows; ++I0) {
    total_lost += lost[std::size_t(I0)];
    *dropped += gone[std::size_t(I0)];
  }
  *tested += total;
  return total_lost;
}

}  // namespace

namespace {

// descend<D> for the clouds' d.
std::int64_t descend_any(const Hierarchy& hx, const Hierarchy& hy, int d, double c, double keep_at,
                         double eps, int threads, int* bx, int* by, BlockRows* rec, double* lost) {
  switch (d) {
    case 1: return descend<1>(hx, hy, d, c, keep_at, eps, threads, bx, by, rec, lost);
    case 2: return descend<2>(hx, hy, d, c, keep_at, eps, threads, bx, by, rec, lost);
    case 3: return descend<3>(hx, hy, d, c, keep_at, eps, threads, bx, by, rec, lost);
    default: return descend<0>(hx, hy, d, c, keep_at, eps, threads, bx, by, rec, lost);
  }
}

}  // namespace

ScreenDescent host_descent(const Hierarchy& hx, const Hierarchy& hy, int d, double c,
                           double keep_at, double eps, int threads, int* bx, int* by) {
  BlockRows rec;
  ScreenDescent r;
  r.tested = descend_any(hx, hy, d, c, keep_at, eps, threads, bx, by, &rec, &r.dropped);
  for (std::size_t I = 0; I < rec.size(); ++I)
    for (const auto& e : rec[I]) {
      r.keys.push_back((std::uint64_t(I) << 32) | std::uint64_t(std::uint32_t(e.first)));
      r.masks.push_back(e.second);
    }
  return r;
}

Screen screen(const Hierarchy& hx, const Hierarchy& hy, std::int64_t n, std::int64_t m, int d,
              double c, double threshold, double margin, double eps, const BlockShape& shape,
              int threads, const AtomPairMaxima* maxima, double drop_budget,
              bool box_lists, const Descent* descent,
              const std::function<void(const char*)>* mark, const EngineLists* engine_lists) {
  auto end = [mark](const char* stage) {
    if (mark) (*mark)(stage);
  };
  if (shape.key_tile <= 0 || shape.row_tile <= 0 || shape.row_tile % shape.key_tile != 0)
    throw InvalidArgument("multiscale: the engine's row tile (" + std::to_string(shape.row_tile) +
                          ") is not a multiple of its key tile (" +
                          std::to_string(shape.key_tile) + ")");
  if (hx.levels.empty() || hy.levels.empty() || hx.levels[0].size != shape.key_tile ||
      hy.levels[0].size != shape.key_tile)
    throw InvalidArgument("multiscale: the hierarchies' atoms are not the engine's key tiles (" +
                          std::to_string(shape.key_tile) + " points)");
  Screen out;
  const double keep_at = -threshold - margin;
  int bx = 0, by = 0;
  BlockRows rec, box_rec;
  double lost = 0;
  bool descended = false;
  const bool points = maxima != nullptr;
  ScreenDescent r;  // the engine's descent (and points stage) when it has one
  if (descent) {
    // The engine's descent: the same pairs (the bound of kantor/screen_bound.hpp, evaluated
    // alike), in blocks of the levels the host descent would use.
    const int tx = int(hx.levels.size()) - 1, ty = int(hy.levels.size()) - 1;
    const int steps = std::max(0, std::max(tx, ty) - kBlockLevels);
    bx = std::max(0, tx - steps);
    by = std::max(0, ty - steps);
    auto views = [](const Hierarchy& h) {
      std::vector<ScreenLevel> v;
      for (const CellLevel& L : h.levels)
        v.push_back({L.count, L.packed.data(), L.mass.data(), L.active.data()});
      return v;
    };
    if ((*descent)(views(hx), views(hy), d, c, keep_at, eps, bx, by, points,
                   points && box_lists, &r)) {
      end("screen descent");
      // The masks as block rows (a mask the points stage emptied has no entry).
      // (The keys increase: each block row is one run of them, found by binary search and
      // copied on the host threads.)
      auto rows_of = [&](const std::vector<std::uint64_t>& masks, BlockRows* to) {
        const std::int64_t rows = hx.levels[std::size_t(bx)].count;
        to->assign(static_cast<std::size_t>(rows), {});
        detail::parallel_for(rows, threads, [&](std::int64_t I) {
          const std::uint64_t first = std::uint64_t(I) << 32;
          const auto b = std::lower_bound(r.keys.begin(), r.keys.end(), first);
          const auto e = std::lower_bound(b, r.keys.end(), first + (std::uint64_t(1) << 32));
          auto& row = (*to)[std::size_t(I)];
          row.reserve(std::size_t(e - b));
          for (auto k = b; k != e; ++k) {
            const std::uint64_t mk = masks[std::size_t(k - r.keys.begin())];
            if (mk != 0) row.emplace_back(std::int32_t(*k & 0xffffffffu), mk);
          }
        });
      };
      if (!r.on_engine) rows_of(r.masks, &rec);  // else the pairs stay on the engine
      if (r.points_done && box_lists) rows_of(r.box_masks, &box_rec);
      out.tested_pairs = r.tested;
      lost = r.dropped;
      descended = true;
    }
  }
  if (!descended) {
    out.tested_pairs = descend_any(hx, hy, d, c, keep_at, eps, threads, &bx, &by, &rec, &lost);
    end("screen descent");
  }
  // The dropped mass as reported: rounding of each term's exp and products (a few units of
  // 2^-53), of the sums of weights behind the masses and of the sum of the terms (below 2^-30
  // relative for any size these lists can index); a term in double's subnormal range carries up
  // to mass_I mass_J 2^-1074 + 2^-1075 absolute: (tests + m_a m_b) 2^-1073 covers them all.
  double ma = 0, mb = 0;
  for (const double v : hx.levels.back().mass) ma += v;
  for (const double v : hy.levels.back().mass) mb += v;
  auto reported = [&](double sum) {
    return sum * (1 + 1e-6) +
           (double(out.tested_pairs + out.point_tests) + ma * mb * (1 + 1e-6)) * 0x1.0p-1073;
  };
  // Over the budget after the box stage: the points stage only adds to the mass, so the caller
  // rejects this screen whatever follows; no lists are built.
  if (!(reported(lost) <= drop_budget)) {
    out.over_budget = true;
    out.dropped_mass = reported(lost);
    return out;
  }
  if (points && r.points_done) {
    lost += r.point_dropped;
    out.point_tests += r.point_tests;
    out.point_drops += r.point_drops;
  } else if (points) {
    if (box_lists) box_rec = rec;
    lost += refine_with_maxima(hx, hy, *maxima, keep_at, eps, bx, by, threads, &rec,
                               &out.point_tests, &out.point_drops);
  }
  end("screen rows");
  // The partners of atoms without a kept pair (A: x atoms when a_is_x, else y atoms; -1 where the
  // other side has no weight at all).
  auto partners_of = [&](const std::vector<std::int64_t>& lonely, bool a_is_x) {
    const CellLevel& A = (a_is_x ? hx : hy).levels[0];
    std::vector<std::int64_t> partner(lonely.size(), -1);
    // The partner: descend B's hierarchy from its top level, at each level taking the child with
    // the best score against A's cell at the matching level (O(levels) per atom; any partner
    // keeps the row non-empty, and a good one keeps its potential sensible).
    const Hierarchy& HA = a_is_x ? hx : hy;
    const Hierarchy& HB = a_is_x ? hy : hx;
    detail::parallel_for(std::int64_t(lonely.size()), threads, [&](std::int64_t q) {
      const std::int64_t I0 = lonely[std::size_t(q)];
      auto score = [&](int la, std::int64_t Ia, int lb, std::int64_t Jb) {
        const CellLevel& Ac = HA.levels[std::size_t(la)];
        const CellLevel& Bc = HB.levels[std::size_t(lb)];
        if (Ac.active[std::size_t(Ia)] && A.active[std::size_t(I0)])
          return a_is_x ? pair_bound(Ac, Ia, Bc, Jb, d, c) : pair_bound(Bc, Jb, Ac, Ia, d, c);
        double v = 0;
        for (int k = 0; k < d; ++k) {
          const double t = 0.5 * (Ac.lo[std::size_t(Ia * d + k)] + Ac.hi[std::size_t(Ia * d + k)]) -
                           0.5 * (Bc.lo[std::size_t(Jb * d + k)] + Bc.hi[std::size_t(Jb * d + k)]);
          v -= t * t;
        }
        return v;
      };
      const int lbt = int(HB.levels.size()) - 1;
      auto a_level = [&](int lb) { return std::min(lb, int(HA.levels.size()) - 1); };
      std::int64_t arg = -1;
      double best = -std::numeric_limits<double>::infinity();
      {
        const int la = a_level(lbt);
        const std::int64_t Ia = I0 >> la;
        for (std::int64_t J = 0; J < HB.levels[std::size_t(lbt)].count; ++J) {
          if (!HB.levels[std::size_t(lbt)].active[std::size_t(J)]) continue;
          const double v = score(la, Ia, lbt, J);
          if (arg < 0 || v > best) {
            best = v;
            arg = J;
          }
        }
      }
      for (int lb = lbt - 1; lb >= 0 && arg >= 0; --lb) {
        const CellLevel& Bc = HB.levels[std::size_t(lb)];
        const int la = a_level(lb);
        std::int64_t next = -1;
        best = -std::numeric_limits<double>::infinity();
        for (std::int64_t J = 2 * arg; J < std::min(Bc.count, 2 * arg + 2); ++J) {
          if (!Bc.active[std::size_t(J)]) continue;
          const double v = score(la, I0 >> la, lb, J);
          if (next < 0 || v > best) {
            best = v;
            next = J;
          }
        }
        arg = next;
      }
      partner[std::size_t(q)] = arg;
    });
    return partner;
  };
  const CellLevel& XB = hx.levels[std::size_t(bx)];
  // The pairs in `kept` as the two sides' lists: repaired (below), flattened, transposed;
  // kept is consumed.
  auto lists = [&](BlockRows& kept, BlockList* f_side, BlockList* g_side, double* covered,
                   std::int64_t* orphans, std::int64_t* atom_pairs) {
    // Every atom keeps a partner of positive weight: its best by the bound (active atoms) or the
    // nearest box centre (atoms without weight, which have no potential model).
    const CellLevel& X = hx.levels[0];
    const CellLevel& Y = hy.levels[0];
    auto add_pair = [&](std::int64_t I, std::int64_t J) {  // atoms I (x) and J (y)
      auto& r = kept[std::size_t(I >> bx)];
      const std::int32_t Jb = std::int32_t(J >> by);
      const std::uint64_t bit = std::uint64_t(1)
                                << (8 * (I - ((I >> bx) << bx)) + (J - (std::int64_t(Jb) << by)));
      auto it = std::lower_bound(r.begin(), r.end(), std::make_pair(Jb, std::uint64_t(0)));
      if (it != r.end() && it->first == Jb)
        it->second |= bit;
      else
        r.insert(it, {Jb, bit});
    };
    auto repair = [&](const CellLevel& A, bool a_is_x) {
      std::vector<std::atomic<unsigned char>> has(static_cast<std::size_t>(A.count));
      for (auto& h : has) h.store(0, std::memory_order_relaxed);
      detail::parallel_for(XB.count, threads, [&](std::int64_t I0) {
        for (const auto& e : kept[std::size_t(I0)]) {
          // x atoms: the mask's non-zero rows (bytes); y atoms: its non-zero columns.
          const std::int64_t first = a_is_x ? I0 << bx : std::int64_t(e.first) << by;
          const std::uint32_t bits = fold_bytes(a_is_x ? transpose_bits(e.second) : e.second);
          for (std::uint32_t v = bits; v; v &= v - 1)
            has[std::size_t(first + __builtin_ctz(v))].store(1, std::memory_order_relaxed);
        }
      });
      std::vector<std::int64_t> lonely;
      for (std::int64_t I = 0; I < A.count; ++I)
        if (!has[std::size_t(I)]) lonely.push_back(I);
      const std::vector<std::int64_t> partner = partners_of(lonely, a_is_x);
      // The partners join the pairs (so the x side's count for the y atoms too).
      for (std::size_t q = 0; q < lonely.size(); ++q) {
        // No weight on the other side at all: validation refuses that.
        if (partner[q] < 0) continue;
        ++*orphans;
        if (a_is_x)
          add_pair(lonely[q], partner[q]);
        else
          add_pair(partner[q], lonely[q]);
      }
    };
    repair(X, true);
    repair(Y, false);
    end("screen repair");
    // Flatten to block pairs (rows: x blocks), then the two sides' lists.
    BlockPairs bp;
    bp.lx = bx;
    bp.ly = by;
    bp.ptr.assign(std::size_t(XB.count + 1), 0);
    for (std::int64_t I = 0; I < XB.count; ++I)
      bp.ptr[std::size_t(I + 1)] = bp.ptr[std::size_t(I)] + std::int64_t(kept[std::size_t(I)].size());
    bp.col.resize(std::size_t(bp.ptr.back()));
    bp.mask.resize(std::size_t(bp.ptr.back()));
    std::vector<std::int64_t> pairs(static_cast<std::size_t>(XB.count), 0);
    detail::parallel_for(XB.count, threads, [&](std::int64_t I) {
      std::int64_t at = bp.ptr[std::size_t(I)], k = 0;
      for (const auto& e : kept[std::size_t(I)]) {
        bp.col[std::size_t(at)] = e.first;
        bp.mask[std::size_t(at++)] = e.second;
        k += __builtin_popcountll(e.second);
      }
      pairs[std::size_t(I)] = k;
      std::vector<std::pair<std::int32_t, std::uint64_t>>().swap(kept[std::size_t(I)]);
    });
    for (const std::int64_t k : pairs) *atom_pairs += k;
    double unused = 0;
    *f_side = block_list(bp, n, m, shape, threads, covered);
    end("screen f list");
    *g_side = block_list(transpose(bp, hy.levels[std::size_t(by)].count, threads), m, n, shape,
                         threads, &unused);
    end("screen g list");
  };
  double covered = 0;
  if (r.on_engine) {
    // The pairs stayed on the engine (Oracle::engine_block_lists): the same repair on the atoms
    // it found without a pair, the x side's first (its partners give y atoms their pair, as
    // add_pair does above), then the lists of both sides made there.
    if (!engine_lists)
      throw InvalidArgument("multiscale: the engine kept the screen's pairs, but no lists of them "
                            "were asked for");
    std::vector<std::int64_t> extra, taken, lonely_y;
    const std::vector<std::int64_t> px = partners_of(r.lonely_x, true);
    for (std::size_t q = 0; q < px.size(); ++q) {
      if (px[q] < 0) continue;
      extra.push_back(r.lonely_x[q]);
      extra.push_back(px[q]);
      taken.push_back(px[q]);
      ++out.orphans;
    }
    std::sort(taken.begin(), taken.end());
    for (const std::int64_t J : r.lonely_y)
      if (!std::binary_search(taken.begin(), taken.end(), J)) lonely_y.push_back(J);
    const std::vector<std::int64_t> py = partners_of(lonely_y, false);
    for (std::size_t q = 0; q < py.size(); ++q) {
      if (py[q] < 0) continue;
      extra.push_back(py[q]);
      extra.push_back(lonely_y[q]);
      ++out.orphans;
    }
    end("screen repair");
    if (!(*engine_lists)(extra, &covered, &out.atom_pairs))
      throw InvalidArgument("multiscale: the engine kept the screen's pairs but made no lists");
    out.on_engine = true;
    out.kept_fraction = covered / (double(n) * double(m));
    end("screen engine lists");
    out.dropped_mass = reported(lost);
    return out;
  }
  lists(rec, &out.f_side, &out.g_side, &covered, &out.orphans, &out.atom_pairs);
  out.kept_fraction = covered / (double(n) * double(m));
  if (points && box_lists) {
    double box_covered = 0;
    std::int64_t box_orphans = 0, box_pairs = 0;
    lists(box_rec, &out.box_f_side, &out.box_g_side, &box_covered, &box_orphans, &box_pairs);
  }
  out.dropped_mass = reported(lost);
  return out;
}

}  // namespace kantor::multiscale
