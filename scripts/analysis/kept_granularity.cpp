// How many pairs a block-sparse pass must evaluate at a given block shape, against the exact kept
// set: for potentials (f, g) of a solve, the pairs with f_i + g_j - c |x_i - y_j|^2 >= -theta eps
// ("exact"), and the fraction of R x K blocks of Morton-ordered points holding at least one such
// pair (an oracle-tight screen at that shape: no bound can keep fewer blocks). An analysis tool,
// not part of the build (docs/multiscale.md, "Thirtieth session"):
//   g++ -O3 -march=native -fopenmp scripts/analysis/kept_granularity.cpp -o /tmp/kept_granularity
//   kantor solve --source x.npy --target y.npy --epsilon E --solver multiscale
//       --output-potentials p.npy
//   /tmp/kept_granularity x.npy y.npy p_f.npy p_g.npy E THETA [C [STRIDE]]
// x, y: n x 3 float32/float64 .npy (C order); f, g as kantor writes them (P_ij = a_i b_j
// exp((f_i + g_j - C_ij) / eps)); THETA as the solver note prints it; C the cost scale (1).
// O(n m) on the host threads. Then the points stage's scan orders (scan_orders).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::vector<double> load_npy(const char* path, long* rows, long* cols) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  if (!in.read(magic, 8)) throw std::runtime_error(std::string("cannot read ") + path);
  std::uint16_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 2);  // format version 1.0 headers
  std::string h(len, ' ');
  in.read(&h[0], len);
  const bool f4 = h.find("<f4") != std::string::npos;
  if (!f4 && h.find("<f8") == std::string::npos) throw std::runtime_error("need <f4 or <f8");
  const std::size_t q = h.find('(', h.find("shape"));
  *rows = std::atol(h.c_str() + q + 1);
  const std::size_t comma = h.find(',', q);
  const long c = comma < h.find(')', q) ? std::atol(h.c_str() + comma + 1) : 0;
  *cols = c > 0 ? c : 1;
  std::vector<double> out(std::size_t(*rows * *cols));
  if (f4) {
    std::vector<float> t(out.size());
    in.read(reinterpret_cast<char*>(t.data()), std::streamsize(t.size() * 4));
    std::copy(t.begin(), t.end(), out.begin());
  } else {
    in.read(reinterpret_cast<char*>(out.data()), std::streamsize(out.size() * 8));
  }
  if (!in) throw std::runtime_error(std::string("short file ") + path);
  return out;
}

// The CUDA points stage's scan (lib/cuda/screen_descent.cu, fast_scan) of a 64 x 64 atom pair:
// a warp of 32 lanes, each holding rows lane and lane + 32 of the x atom, steps over the y atom's
// keys and asks the warp after every 8 steps whether some score reached the threshold (kept: the
// scan stops there). A scheme is each lane's first key: at step s lane l reads key
// (s + off(l)) mod nk. For every atom pair holding a kept pair (the stage keeps it), the steps
// each scheme runs before it stops; a pair holding none runs all nk steps in every scheme.
void scan_orders(const std::vector<double>& xs, const std::vector<double>& ys,
                 const std::vector<double>& fs, const std::vector<double>& gs, long n, long m,
                 double c, double keep, double theta_, long stride) {
  constexpr int kAtom = 64, kSchemes = 9;
  const char* names[kSchemes] = {"in order (off 0)",    "off 8 (l mod 8)",  "off 9 (l mod 8)",
                                 "off 2 l",             "off 8 (l div 4)",  "off 9, checks /4",
                                 "off 9, check 4,8,16", "interleaved by 8", "interleaved, 4,8,16"};
  // The steps after which scheme sc asks the warp (every 8, every 4, or 4 then every 8).
  auto next_check = [](int sc, int st) {
    if (sc == 5) return (st / 4 + 1) * 4;
    if ((sc == 6 || sc == 8) && st < 4) return 4;
    return (st / 8 + 1) * 8;
  };
  // Schemes 7 and 8: every lane reads the same key at step s, the keys interleaved by 8 (step s
  // reads key (s mod 8) 8 + s / 8: one key of each eighth of the atom in the first 8 steps).
  auto key_at = [](int sc, int l, int st, int nk, int o) {
    if (sc >= 7) {
      const int k = (st % 8) * 8 + st / 8;
      return k < nk ? k : -1;
    }
    return (st + o) % nk;
  };
  auto off = [](int scheme, int l) {
    switch (scheme) {
      case 1: return 8 * (l & 7);
      case 2: return 9 * (l & 7);
      case 3: return 2 * l;
      case 4: return 8 * (l >> 2);
      case 5:
      case 6: return 9 * (l & 7);
      default: return 0;
    }
  };
  const long ax = (n + kAtom - 1) / kAtom, ay = (m + kAtom - 1) / kAtom;
  long kept = 0, empty = 0;
  double steps[kSchemes] = {}, checks[kSchemes] = {};
  constexpr int kBands = 6, kKappas = 4;
  const double band_hi[kBands] = {1, 2, 4, 8, 16, HUGE_VAL}, kappas[kKappas] = {0, 1, 2, 3};
  double band_n[kBands] = {}, band_ub[kBands * kKappas] = {};
  const double eps_ = -keep / theta_;
#pragma omp parallel for reduction(+ : kept, empty, steps[:kSchemes], checks[:kSchemes], band_n[:kBands], \
                                       band_ub[:kBands * kKappas]) schedule(dynamic, 1)
  for (long I = 0; I < ax; I += stride) {
    const long i0 = I * kAtom, i1 = std::min(n, i0 + kAtom);
    std::vector<unsigned char> hit(kAtom * kAtom);
    for (long J = 0; J < ay; ++J) {
      const long j0 = J * kAtom, j1 = std::min(m, j0 + kAtom);
      const int nk = int(j1 - j0);
      bool any = false;
      for (long i = i0; i < i1; ++i)
        for (long j = j0; j < j1; ++j) {
          double s = 0;
          for (int a = 0; a < 3; ++a) {
            const double t = xs[i * 3 + a] - ys[j * 3 + a];
            s += t * t;
          }
          const bool h = fs[i] + gs[j] - c * s >= keep;
          hit[std::size_t((i - i0) * kAtom + (j - j0))] = h;
          any = any || h;
        }
      if (!any) {
        ++empty;
        // The exact largest score and the points' bound, in eps below the threshold.
        double lo_x[3], hi_x[3], lo_y[3], hi_y[3];
        for (int a = 0; a < 3; ++a) {
          lo_x[a] = lo_y[a] = HUGE_VAL;
          hi_x[a] = hi_y[a] = -HUGE_VAL;
        }
        for (long i = i0; i < i1; ++i)
          for (int a = 0; a < 3; ++a) {
            lo_x[a] = std::min(lo_x[a], xs[i * 3 + a]);
            hi_x[a] = std::max(hi_x[a], xs[i * 3 + a]);
          }
        for (long j = j0; j < j1; ++j)
          for (int a = 0; a < 3; ++a) {
            lo_y[a] = std::min(lo_y[a], ys[j * 3 + a]);
            hi_y[a] = std::max(hi_y[a], ys[j * 3 + a]);
          }
        double xc[3], yc[3], cross = 0, dc = 0;
        for (int a = 0; a < 3; ++a) {
          xc[a] = 0.5 * (lo_x[a] + hi_x[a]);
          yc[a] = 0.5 * (lo_y[a] + hi_y[a]);
          cross += 0.25 * (hi_x[a] - lo_x[a]) * (hi_y[a] - lo_y[a]);
          dc += (xc[a] - yc[a]) * (xc[a] - yc[a]);
        }
        double ax = -HUGE_VAL, by = -HUGE_VAL, best = -HUGE_VAL;
        for (long i = i0; i < i1; ++i) {
          double s = 0;
          for (int a = 0; a < 3; ++a) s += (xs[i * 3 + a] - yc[a]) * (xs[i * 3 + a] - yc[a]);
          ax = std::max(ax, fs[i] - c * s);
        }
        for (long j = j0; j < j1; ++j) {
          double s = 0;
          for (int a = 0; a < 3; ++a) s += (ys[j * 3 + a] - xc[a]) * (ys[j * 3 + a] - xc[a]);
          by = std::max(by, gs[j] - c * s);
        }
        for (long i = i0; i < i1; ++i)
          for (long j = j0; j < j1; ++j) {
            double s = 0;
            for (int a = 0; a < 3; ++a) s += (xs[i * 3 + a] - ys[j * 3 + a]) * (xs[i * 3 + a] - ys[j * 3 + a]);
            best = std::max(best, fs[i] + gs[j] - c * s);
          }
        const double ub = ax + by + c * dc + 2 * c * cross;
        const double below = (keep - best) / eps_, ub_below = (keep - ub) / eps_;
        for (int b = 0; b < kBands; ++b)
          if (below < band_hi[b]) {
            band_n[b] += 1;
            for (int k = 0; k < kKappas; ++k) band_ub[b * kKappas + k] += ub_below >= kappas[k];
            break;
          }
        continue;
      }
      ++kept;
      for (int sc = 0; sc < kSchemes; ++sc) {
        const int len = sc >= 7 ? kAtom : nk;  // the interleaved scan runs all slots
        int stop = len;
        for (int st = 0; st < len && stop == len; ++st) {
          bool found = false;
          for (int l = 0; l < 32 && !found; ++l) {
            const int k = key_at(sc, l, st, nk, off(sc, l));
            if (k < 0) continue;
            for (int r = 0; r < 2; ++r) {
              const long i = i0 + l + 32 * r;
              if (i < i1 && hit[std::size_t((i - i0) * kAtom + k)]) found = true;
            }
          }
          if (found) stop = std::min(len, next_check(sc, st));
        }
        steps[sc] += stop;
        for (int st = 0; st < stop; st = next_check(sc, st)) checks[sc] += 1;
      }
    }
  }
  // The atom pair's bound from its points (the identity |x - y|^2 = |x - y_c|^2 + |y - x_c|^2 -
  // |x_c - y_c|^2 - 2 (x - x_c).(y - y_c), x_c and y_c the atoms' box centres): the largest score
  // is at most max_i (f_i - c |x_i - y_c|^2) + max_j (g_j - c |y_j - x_c|^2) + c |x_c - y_c|^2 +
  // 2 c sum_k ax_k ay_k (ax_k, ay_k the boxes' half-widths); 2 n + 2 m terms an atom pair, not n
  // m. How far below the threshold the atom pairs without a kept pair lie, and how many of them
  // that bound puts at least kappa eps below it.
  std::printf("atom pairs (64 x 64) holding a kept pair: %ld of %ld (%.4f)\n", kept,
              kept + empty, double(kept) / double(kept + empty));
  for (int sc = 0; sc < kSchemes; ++sc)
    std::printf("scan %-20s a kept atom pair's mean steps %.2f, checks %.2f\n", names[sc],
                steps[sc] / double(kept > 0 ? kept : 1), checks[sc] / double(kept > 0 ? kept : 1));
  for (int b = 0; b < kBands; ++b) {
    std::printf("no kept pair, largest score %g-%g eps below: %.0f; bound >= 0/1/2/3 eps below:",
                b ? band_hi[b - 1] : 0.0, band_hi[b], band_n[b]);
    for (int k = 0; k < kKappas; ++k) std::printf(" %.0f", band_ub[b * kKappas + k]);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s x.npy y.npy f.npy g.npy eps theta [c [stride]]\n", argv[0]);
    return 2;
  }
  long n, d, m, d2, nf, mg, one;
  const std::vector<double> x = load_npy(argv[1], &n, &d), y = load_npy(argv[2], &m, &d2);
  const std::vector<double> f = load_npy(argv[3], &nf, &one), g = load_npy(argv[4], &mg, &one);
  const double eps = std::atof(argv[5]), theta = std::atof(argv[6]);
  const double c = argc > 7 ? std::atof(argv[7]) : 1.0;
  if (d != 3 || d2 != 3 || nf != n || mg != m) {
    std::fprintf(stderr, "need 3-D clouds and potentials of their sizes\n");
    return 2;
  }
  // A joint Morton order (21 bits an axis), as the solver's.
  double lo[3], hi[3];
  for (int a = 0; a < 3; ++a) {
    lo[a] = HUGE_VAL;
    hi[a] = -HUGE_VAL;
    for (long i = 0; i < n; ++i) {
      lo[a] = std::min(lo[a], x[i * 3 + a]);
      hi[a] = std::max(hi[a], x[i * 3 + a]);
    }
    for (long j = 0; j < m; ++j) {
      lo[a] = std::min(lo[a], y[j * 3 + a]);
      hi[a] = std::max(hi[a], y[j * 3 + a]);
    }
  }
  auto order = [&](const std::vector<double>& p, long rows) {
    std::vector<std::uint64_t> key(std::size_t(rows), 0);
    for (long i = 0; i < rows; ++i)
      for (int a = 0; a < 3; ++a) {
        const double w = hi[a] > lo[a] ? hi[a] - lo[a] : 1.0;
        const auto q = std::uint64_t(std::floor((p[i * 3 + a] - lo[a]) / w * 2097151.0));
        for (int b = 0; b < 21; ++b) key[i] |= ((q >> b) & 1u) << (3 * b + (2 - a));
      }
    std::vector<long> o(static_cast<std::size_t>(rows));
    std::iota(o.begin(), o.end(), 0L);
    std::stable_sort(o.begin(), o.end(), [&](long u, long v) { return key[u] < key[v]; });
    return o;
  };
  const std::vector<long> ox = order(x, n), oy = order(y, m);
  std::vector<double> xs(static_cast<std::size_t>(n * 3)), ys(static_cast<std::size_t>(m * 3));
  std::vector<double> fs(static_cast<std::size_t>(n)), gs(static_cast<std::size_t>(m));
  for (long i = 0; i < n; ++i) {
    for (int a = 0; a < 3; ++a) xs[i * 3 + a] = x[ox[i] * 3 + a];
    fs[i] = f[ox[i]];
  }
  for (long j = 0; j < m; ++j) {
    for (int a = 0; a < 3; ++a) ys[j * 3 + a] = y[oy[j] * 3 + a];
    gs[j] = g[oy[j]];
  }
  const double keep = -theta * eps;
  // STRIDE > 1: only every STRIDE-th x atom in the scan orders, and no block shapes (O(n m)).
  const long stride = argc > 8 ? std::atol(argv[8]) : 1;
  if (stride > 1) {
    scan_orders(xs, ys, fs, gs, n, m, c, keep, theta, stride);
    return 0;
  }
  const int shapes = 7;
  const int R[shapes] = {8, 16, 32, 32, 64, 128, 128}, K[shapes] = {8, 16, 8, 32, 32, 32, 64};
  std::vector<std::vector<unsigned char>> hit(shapes);
  for (int t = 0; t < shapes; ++t)
    hit[t].assign(std::size_t(((n + R[t] - 1) / R[t]) * ((m + K[t] - 1) / K[t])), 0);
  long exact = 0;
#pragma omp parallel for reduction(+ : exact) schedule(dynamic, 64)
  for (long i = 0; i < n; ++i)
    for (long j = 0; j < m; ++j) {
      double s = 0;
      for (int a = 0; a < 3; ++a) {
        const double t = xs[i * 3 + a] - ys[j * 3 + a];
        s += t * t;
      }
      if (fs[i] + gs[j] - c * s < keep) continue;
      ++exact;
      for (int t = 0; t < shapes; ++t) {
        unsigned char& h = hit[t][std::size_t((i / R[t]) * ((m + K[t] - 1) / K[t]) + j / K[t])];
#pragma omp atomic write
        h = 1;
      }
    }
  std::printf("exact pairs kept: %.5f\n", double(exact) / (double(n) * double(m)));
  for (int t = 0; t < shapes; ++t) {
    long blocks = 0;
    for (const unsigned char v : hit[t]) blocks += v;
    std::printf("%3d x %-3d blocks holding a kept pair: %.5f\n", R[t], K[t],
                double(blocks) / double(hit[t].size()));
  }
  scan_orders(xs, ys, fs, gs, n, m, c, keep, theta, 1);
  return 0;
}
