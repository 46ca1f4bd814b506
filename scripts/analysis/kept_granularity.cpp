// How many pairs a block-sparse pass must evaluate at a given block shape, against the exact kept
// set: for potentials (f, g) of a solve, the pairs with f_i + g_j - c |x_i - y_j|^2 >= -theta eps
// ("exact"), and the fraction of R x K blocks of Morton-ordered points holding at least one such
// pair (an oracle-tight screen at that shape: no bound can keep fewer blocks). An analysis tool,
// not part of the build (docs/multiscale.md, "Thirtieth session"):
//   g++ -O3 -march=native -fopenmp scripts/analysis/kept_granularity.cpp -o /tmp/kept_granularity
//   kantor solve --source x.npy --target y.npy --epsilon E --solver multiscale
//       --output-potentials p.npy
//   /tmp/kept_granularity x.npy y.npy p_f.npy p_g.npy E THETA [C]
// x, y: n x 3 float32/float64 .npy (C order); f, g as kantor writes them (P_ij = a_i b_j
// exp((f_i + g_j - C_ij) / eps)); THETA as the solver note prints it; C the cost scale (1).
// O(n m) on the host threads.
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s x.npy y.npy f.npy g.npy eps theta [c]\n", argv[0]);
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
  const int shapes = 7;
  const int R[shapes] = {8, 16, 32, 32, 64, 128, 128}, K[shapes] = {8, 16, 8, 32, 32, 32, 64};
  std::vector<std::vector<unsigned char>> hit(shapes);
  for (int t = 0; t < shapes; ++t)
    hit[t].assign(std::size_t(((n + R[t] - 1) / R[t]) * ((m + K[t] - 1) / K[t])), 0);
  long exact = 0;
  const double keep = -theta * eps;
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
  return 0;
}
