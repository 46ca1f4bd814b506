// Timing driver for lib/cpu/row_pass (not part of the library, the CLI or the tests). Built and
// run by scripts/bench/pot_cpu.py and scripts/bench/row_pass_policies.py against a build's
// lib/cpu objects (the row pass needs nothing else of the library):
//   c++ -O3 -DNDEBUG -std=c++17 -I<repo> -I/usr/include/eigen3 row_pass_bench.cpp
//       <build>/CMakeFiles/kantor_lib.dir/lib/cpu/*.o -lpthread   (one command line)
//
//   sinkhorn N M D EPS ITERS REPEATS THREADS [fp32|fp64] [isa]
//     ITERS alternating fixed-eps Sinkhorn iterations (update_f + update_g) with the CPU
//     oracle's formulas (bias, row_pass, potential: oracles/cpu/cpu_oracle.cpp) on x, y ~ U[0,1]^d
//     centred, uniform weights, cost |x - y|^2; prints the median and min over REPEATS timed
//     runs (after one warm-up) as one JSON line. isa: auto | baseline | avx2 | avx512.
//   pass N M D THREADS CLASSES DENSITY_PERCENT REPEATS [fp32|fp64] [band|random] [isa]
//     One LSE row pass (N rows, M keys), plain (CLASSES = 0, DENSITY = 100) or with a pair term
//     of CLASSES classes (random labels, table in [-4, 1]) and/or a block list (row_tile 128,
//     key_tile 64) holding DENSITY% of the tiles: a band around the diagonal (one run per row
//     tile) or independent random tiles (adjacent ones merged into runs).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lib/cpu/row_pass.hpp"
#include "lib/core/thread_pool.hpp"

using namespace kantor::cpu;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <class T>
std::vector<T> cloud(std::int64_t n, std::int64_t d, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<T> x(std::size_t(n * d));
  for (auto& v : x) v = T(u(rng));
  // centre (the oracle centres both clouds at the mean of the two)
  return x;
}

RowPassIsa parse_isa(const char* s) {
  const std::string v = s ? s : "auto";
  if (v == "baseline") return RowPassIsa::kBaseline;
  if (v == "avx2") return RowPassIsa::kAvx2;
  if (v == "avx512") return RowPassIsa::kAvx512;
  return RowPassIsa::kAuto;
}

template <class T>
int sinkhorn(int argc, char** argv) {
  const std::int64_t n = std::atoll(argv[2]), m = std::atoll(argv[3]), d = std::atoll(argv[4]);
  const double epsd = std::atof(argv[5]);
  const int iters = std::atoi(argv[6]), repeats = std::atoi(argv[7]), threads = std::atoi(argv[8]);
  (void)argc;
  std::vector<T> x = cloud<T>(n, d, 1), y = cloud<T>(m, d, 2);
  std::vector<double> c(std::size_t(d), 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < d; ++k) c[std::size_t(k)] += double(x[std::size_t(i * d + k)]);
  for (std::int64_t j = 0; j < m; ++j)
    for (std::int64_t k = 0; k < d; ++k) c[std::size_t(k)] += double(y[std::size_t(j * d + k)]);
  for (auto& v : c) v /= double(n + m);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < d; ++k) x[std::size_t(i * d + k)] -= T(c[std::size_t(k)]);
  for (std::int64_t j = 0; j < m; ++j)
    for (std::int64_t k = 0; k < d; ++k) y[std::size_t(j * d + k)] -= T(c[std::size_t(k)]);
  auto sqn = [&](const std::vector<T>& p, std::int64_t rows) {
    std::vector<T> r(static_cast<std::size_t>(rows));
    for (std::int64_t i = 0; i < rows; ++i) {
      T s = 0;
      for (std::int64_t k = 0; k < d; ++k) s += p[std::size_t(i * d + k)] * p[std::size_t(i * d + k)];
      r[std::size_t(i)] = s;
    }
    return r;
  };
  const std::vector<T> xn = sqn(x, n), yn = sqn(y, m);
  const std::vector<T> la(std::size_t(n), T(-std::log(double(n)))),
      lb(std::size_t(m), T(-std::log(double(m))));
  std::vector<T> f(static_cast<std::size_t>(n)), g(static_cast<std::size_t>(m)),
      bias(static_cast<std::size_t>(std::max(n, m)));
  ThreadPool pool(threads);
  RowPassResult res;
  RowPassTuning tuning;
  tuning.isa = parse_isa(argc > 10 ? argv[10] : nullptr);
  const T eps = T(epsd);
  auto side = [&](bool fs) {
    const std::vector<T>& q = fs ? x : y;
    const std::vector<T>& k = fs ? y : x;
    const std::vector<T>& kn = fs ? yn : xn;
    const std::vector<T>& qn = fs ? xn : yn;
    const std::vector<T>& lk = fs ? lb : la;
    const std::vector<T>& other = fs ? g : f;
    std::vector<T>& out = fs ? f : g;
    const std::int64_t nq = fs ? n : m, nk = fs ? m : n;
    for (std::int64_t j = 0; j < nk; ++j)
      bias[std::size_t(j)] = (other[std::size_t(j)] - kn[std::size_t(j)]) / eps + lk[std::size_t(j)];
    row_pass_tuned<T>(tuning, pool, MatrixRef<T>{q.data(), nq, d}, MatrixRef<T>{k.data(), nk, d},
                      bias.data(), T(2) / eps, MatrixRef<T>{}, &res);
    for (std::int64_t i = 0; i < nq; ++i)
      out[std::size_t(i)] = T(double(qn[std::size_t(i)]) -
                              double(eps) * (res.max[std::size_t(i)] + std::log(res.sum[std::size_t(i)])));
  };
  auto run = [&] {
    std::fill(f.begin(), f.end(), T(0));
    std::fill(g.begin(), g.end(), T(0));
    for (int it = 0; it < iters; ++it) {
      side(true);
      side(false);
    }
  };
  run();  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_ms();
    run();
    ms.push_back(now_ms() - t0);
  }
  std::sort(ms.begin(), ms.end());
  double fsum = 0;
  for (auto v : f) fsum += double(v);
  std::printf("{\"mode\": \"sinkhorn\", \"n\": %lld, \"m\": %lld, \"d\": %lld, \"eps\": %g, "
              "\"iterations\": %d, \"threads\": %d, \"precision\": \"%s\", \"ms_median\": %.3f, "
              "\"ms_min\": %.3f, \"mean_f\": %.9g, \"isa\": \"%s\"}\n",
              (long long)n, (long long)m, (long long)d, epsd, iters, threads,
              sizeof(T) == 4 ? "fp32" : "fp64", ms[ms.size() / 2], ms.front(), fsum / double(n),
              to_string(tuning.isa == RowPassIsa::kAuto ? row_pass_best_isa() : tuning.isa));
  return 0;
}

template <class T>
int pass(int argc, char** argv) {
  const std::int64_t n = std::atoll(argv[2]), m = std::atoll(argv[3]), d = std::atoll(argv[4]);
  const int threads = std::atoi(argv[5]);
  const std::int64_t classes = std::atoll(argv[6]);
  const double density = std::atof(argv[7]) / 100;
  const int repeats = std::atoi(argv[8]);
  const std::string layout = argc > 10 ? argv[10] : "band";
  RowPassTuning tuning;
  tuning.isa = parse_isa(argc > 11 ? argv[11] : nullptr);
  std::vector<T> x = cloud<T>(n, d, 1), y = cloud<T>(m, d, 2);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<T> bias(static_cast<std::size_t>(m));
  for (auto& b : bias) b = T(-std::log(double(m)) + 0.1 * u(rng));
  RowPassPolicy<T> pol;
  std::vector<std::int32_t> rl, kl;
  std::vector<T> table;
  if (classes > 0) {
    std::uniform_int_distribution<std::int32_t> lab(0, std::int32_t(classes - 1));
    rl.resize(static_cast<std::size_t>(n));
    kl.resize(static_cast<std::size_t>(m));
    for (auto& l : rl) l = lab(rng);
    for (auto& l : kl) l = lab(rng);
    table.resize(static_cast<std::size_t>(classes * classes));
    for (auto& t : table) t = T(-4 + 5 * u(rng));
    pol.row_labels = rl.data();
    pol.key_labels = kl.data();
    pol.pair_table = table.data();
    pol.classes = classes;
  }
  std::vector<std::int64_t> run_ptr;
  std::vector<std::int32_t> runs;
  std::int64_t listed = 0, total = 0;
  if (density < 1) {
    const std::int64_t rt = 128, kt = 64, nrt = (n + rt - 1) / rt, nkt = (m + kt - 1) / kt;
    const std::int64_t width = std::max<std::int64_t>(1, std::int64_t(std::llround(density * double(nkt))));
    run_ptr.push_back(0);
    for (std::int64_t r = 0; r < nrt; ++r) {
      if (layout == "band") {
        const std::int64_t centre = (r * nkt) / nrt;
        const std::int64_t b = std::clamp<std::int64_t>(centre - width / 2, 0, nkt - width);
        runs.push_back(std::int32_t(b));
        runs.push_back(std::int32_t(b + width));
        listed += width;
      } else {
        std::int64_t t = 0;
        while (t < nkt) {
          if (u(rng) < density) {
            std::int64_t e = t + 1;
            while (e < nkt && u(rng) < density) ++e;
            runs.push_back(std::int32_t(t));
            runs.push_back(std::int32_t(e));
            listed += e - t;
            t = e;
          }
          ++t;
        }
      }
      run_ptr.push_back(std::int64_t(runs.size() / 2));
    }
    total = nrt * nkt;
    pol.run_ptr = run_ptr.data();
    pol.runs = runs.data();
    pol.row_tile = rt;
    pol.key_tile = kt;
    validate_block_list(pol, n, m);
  }
  ThreadPool pool(threads);
  RowPassResult res;
  auto once = [&] {
    row_pass_tuned<T>(tuning, pool, MatrixRef<T>{x.data(), n, d}, MatrixRef<T>{y.data(), m, d},
                      bias.data(), T(40), MatrixRef<T>{}, &res, pol);
  };
  once();
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_ms();
    once();
    ms.push_back(now_ms() - t0);
  }
  std::sort(ms.begin(), ms.end());
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a of the result bits
  for (const std::vector<double>* v : {&res.max, &res.sum}) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(v->data());
    for (std::size_t i = 0; i < v->size() * sizeof(double); ++i) hash = (hash ^ b[i]) * 1099511628211ull;
  }
  double chk = 0;
  for (std::int64_t i = 0; i < n; ++i)
    if (res.sum[std::size_t(i)] > 0) chk += res.max[std::size_t(i)] + std::log(res.sum[std::size_t(i)]);
  std::printf("{\"mode\": \"pass\", \"n\": %lld, \"m\": %lld, \"d\": %lld, \"threads\": %d, "
              "\"classes\": %lld, \"tiles_listed\": %lld, \"tiles_total\": %lld, "
              "\"layout\": \"%s\", \"runs\": %lld, \"precision\": \"%s\", \"isa\": \"%s\", "
              "\"ms_median\": %.3f, \"ms_min\": %.3f, \"check\": %.9g, \"bits\": \"%016llx\"}\n",
              (long long)n, (long long)m, (long long)d, threads, (long long)classes,
              (long long)listed, (long long)total, density < 1 ? layout.c_str() : "dense",
              (long long)(runs.size() / 2), sizeof(T) == 4 ? "fp32" : "fp64",
              to_string(tuning.isa == RowPassIsa::kAuto ? row_pass_best_isa() : tuning.isa),
              ms[ms.size() / 2], ms.front(), chk / double(n), (unsigned long long)hash);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: see the header of row_pass_bench.cpp\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "sinkhorn" && argc >= 9) {
    const bool fp64 = argc > 9 && std::string(argv[9]) == "fp64";
    return fp64 ? sinkhorn<double>(argc, argv) : sinkhorn<float>(argc, argv);
  }
  if (mode == "pass" && argc >= 9) {
    const bool fp64 = argc > 9 && std::string(argv[9]) == "fp64";
    return fp64 ? pass<double>(argc, argv) : pass<float>(argc, argv);
  }
  std::fprintf(stderr, "bad arguments\n");
  return 2;
}
