// The fourteenth session's standalone screen harness (docs/benchmarks.md, "The GPU machine's
// host"): not built by CMake. Build against a build tree, e.g.
//   g++ -O2 -std=c++17 -march=x86-64-v3 -I include -I build/generated -I . \
//       docs/bench/screen-harness-fourteenth.cpp build/libkantor.a -lpthread -o screen-harness
// (a CUDA build also needs -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt if the linker asks).
// Usage: screen-harness N REPEATS THREADS.
// Host screen benchmark: the data at n points a side, Brenier potentials, Morton order,
// hierarchies and the block screen as the multiscale solver's points level runs them.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "solvers/multiscale_screen.hpp"
#include <algorithm>
#include "kantor/oracle.hpp"
using namespace kantor::multiscale;
static double ms(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : (1 << 20);
  const int reps = argc > 2 ? std::atoi(argv[2]) : 2;
  const int d = 3;
  std::vector<double> x(n * d), y(n * d);
  std::mt19937_64 r(0);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  for (auto& v : x) v = U(r);
  for (auto& v : y) { const double u = 0.8 * U(r) + 0.1; v = u * u; }
  auto phi = [](double t) { const double a = 0.8 * t + 0.1; return a * a * a / 2.4; };
  auto phis = [&](double s) { const double t = (std::sqrt(s) - 0.1) / 0.8; return t * s - phi(t); };
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<double> lo, hi;
    const int th = argc > 3 ? std::atoi(argv[3]) : 0;
    joint_bounds(x.data(), n, y.data(), n, d, th, &lo, &hi);
    std::vector<std::int64_t> ox, oy;
    morton_order(x.data(), n, y.data(), n, d, &ox, &oy, th, lo, hi);
    const double t_order = ms(t0);
    std::vector<double> xs(n * d), ys(n * d), f(n), g(n), w(n, 1.0 / n);
    for (long k = 0; k < n; ++k) {
      double fx = 0, gy = 0;
      for (int a = 0; a < d; ++a) {
        const double xv = x[ox[k] * d + a], yv = y[oy[k] * d + a];
        xs[k * d + a] = xv - 0.5 * (lo[a] + hi[a]);
        ys[k * d + a] = yv - 0.5 * (lo[a] + hi[a]);
        fx += xv * xv - 2 * phi(xv);
        gy += yv * yv - 2 * phis(yv);
      }
      f[k] = fx, g[k] = gy;
    }
    auto t1 = std::chrono::steady_clock::now();
    const Hierarchy hx = build_hierarchy(xs.data(), w.data(), f.data(), n, d, 64, 64, th);
    const Hierarchy hy = build_hierarchy(ys.data(), w.data(), g.data(), n, d, 64, 64, th);
    const double t_h = ms(t1);
    auto t2 = std::chrono::steady_clock::now();
    const double eps = 0.0025;
    const Screen sc = screen(hx, hy, n, n, d, 1.0, 5.68 * eps, 0.0, eps, kantor::BlockShape{128, 64}, th);
    const double t_s = ms(t2);
    {
      auto tv = std::chrono::steady_clock::now();
      kantor::validate_block_list(sc.f_side, n, n, kantor::BlockShape{128, 64}, "f");
      kantor::validate_block_list(sc.g_side, n, n, kantor::BlockShape{128, 64}, "g");
      const double t_new = ms(tv);
      tv = std::chrono::steady_clock::now();
      long bad = 0;
      for (const auto* l : {&sc.f_side, &sc.g_side}) {
        std::vector<std::pair<int, int>> rr;
        for (size_t r = 0; r + 1 < l->run_ptr.size(); ++r) {
          rr.clear();
          for (long q = l->run_ptr[r]; q < l->run_ptr[r + 1]; ++q) rr.emplace_back(l->runs[2 * q], l->runs[2 * q + 1]);
          std::sort(rr.begin(), rr.end());
          for (size_t k = 1; k < rr.size(); ++k) bad += rr[k].first < rr[k - 1].second;
        }
      }
      std::printf("validate new %.1f ms, old-style serial %.1f ms (%ld, runs %zu) ", t_new, ms(tv), bad, sc.f_side.runs.size() / 2);
    }
    unsigned long long hsh = 1469598103934665603ull;
    for (auto v : sc.f_side.runs) hsh = (hsh ^ (unsigned long long)(unsigned)v) * 1099511628211ull;
    for (auto v : sc.g_side.run_ptr) hsh = (hsh ^ (unsigned long long)v) * 1099511628211ull;
    std::printf("hash %llx dropped %.17g ", hsh, sc.dropped_mass);
    std::printf("order %.1f ms, hierarchies %.1f ms, screen %.1f ms: kept %.4f, tested %lld, atom pairs %lld, dropped %.3g\n",
                t_order, t_h, t_s, sc.kept_fraction, (long long)sc.tested_pairs, (long long)sc.atom_pairs, sc.dropped_mass);
  }
}
