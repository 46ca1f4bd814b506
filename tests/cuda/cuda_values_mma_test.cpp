// The tensor-core value pass (lib/cuda/lse_values.hpp: out = P V with the scores and P V on the
// TF32 tensor cores) against a float64 dense P V on the same inputs: TF32-rounded, zero-padded
// clouds, float norms c|x~|^2, float log weights and potentials, exactly as the CUDA oracle
// prepares them (oracles/cuda/cuda_oracle.cpp). Every padded width (8, 16, 32, 64), value widths
// 1 to 200 (one to four column blocks, 1 to 8 column blocks of 8 each), split counts 1 and > 1
// (and more splits than key stages), both directions, odd sizes, n = 1, m = 1, zero weights
// (masked keys, zero rows, all keys masked), unaligned value rows, output strides, and a ramp in
// the key potential that moves the running maximum in every stage. GPU cases skip without a GPU;
// the argument checks run in every CUDA build.
//
// Tolerance, relative to sum_j |P_ij| |V_jk| (out_ik itself may cancel): P and V are rounded to
// fp16 for the second MMA (relative 2^-11 each, as TF32: 2^-10 for the product), with absolute
// floors for fp16's subnormals: keys 2^-32 max_j P_ij max_j |V_jk| (P) and 2^-38 max_j |V_jk|
// sum_j P_ij (V, scaled per column); the scores carry the fp32 error of the
// shifted form, alpha du with du <= (9 W / 8 + 8) 2^-23 (|beta_j| + sum_k |x_ik y_jk|) (W / 8
// MMA k-steps of 8 products + C, generous) + 8 2^-24 (|g_j| + c|y~_j|^2 + eps |log b_j|) / (2c)
// (the bias), plus 2^-24 alpha |u_ij| (alpha rounded to float); exp2.approx and the fp32 offset
// 2^-16; the fp32 accumulation over the keys (9 (keys / 8 + 1) + 16) 2^-23 (each MMA may
// truncate its sum of 8 products + C); the rescales of the
// accumulators (2 + alpha (max u - min u) / 8) 2^-20 per row (at most one per 2^8 growth of the
// maximum). Margin 1.25. A wrong fragment, column or key index moves results by O(1) of the
// bound's reference, far outside it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kantor/config.hpp"
#include "kantor/error.hpp"
#include "support/engine_rounding.hpp"
#include "support/gpu.hpp"
#if KANTOR_CUDA_ENABLED
#include "lib/cuda/lse_params.hpp"
#include "lib/cuda/lse_values.hpp"
#include "lib/cuda/runtime.hpp"
#endif

namespace kantor::testing {
namespace {

#if KANTOR_CUDA_ENABLED

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kLog2e = 1.44269504088896340736;
constexpr double kLn2 = 0.69314718055994530942;

// Device memory and a stream (lib/cuda/runtime.hpp), released on scope exit.
class DeviceFloats {
 public:
  explicit DeviceFloats(std::size_t n)
      : p_(static_cast<float*>(cuda::device_malloc(sizeof(float) * std::max<std::size_t>(n, 1)))) {}
  ~DeviceFloats() { cuda::device_free(p_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return p_; }

 private:
  float* p_;
};

class Stream {
 public:
  Stream() : s_(cuda::create_stream()) {}
  ~Stream() { cuda::destroy_stream(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* get() const { return s_; }

 private:
  void* s_;
};

void upload(const DeviceFloats& dst, const std::vector<float>& src, void* stream) {
  if (!src.empty())
    cuda::memcpy_async(dst.get(), src.data(), sizeof(float) * src.size(), 0, stream);
}
std::vector<float> download(const DeviceFloats& src, std::size_t n, void* stream) {
  std::vector<float> h(n);
  if (n) cuda::memcpy_async(h.data(), src.get(), sizeof(float) * n, 1, stream);
  cuda::synchronize_stream(stream);
  return h;
}

// One point cloud as the kernels see it.
struct Cloud {
  std::int64_t rows = 0;
  std::vector<float> pts;   // rows x ld, TF32-rounded, zero padded
  std::vector<float> norm;  // c |x~|^2 (float of the double sum, as the oracle)
  std::vector<float> logw;  // log weights, -inf for zero weights
  std::vector<float> pot;   // potential
};

struct Case {
  std::int64_t n, m;
  int d, K, splits;
  double eps;
  bool g_side = false;        // rows = the y cloud, keys = the x cloud
  bool zero_weights = false;  // some zero rows and masked keys
  bool all_keys_masked = false;
  bool ramp = false;  // key potential increasing along the keys (rescales every stage)
  int vpad = 0;       // value row stride = K + vpad
  double c = 1.0;
  bool spread = false;  // columns 2^-15 .. 2^15 apart, and every 5th key 1e-4 smaller
};

std::string name(const Case& cs) {
  return "n=" + std::to_string(cs.n) + " m=" + std::to_string(cs.m) + " d=" + std::to_string(cs.d) +
         " K=" + std::to_string(cs.K) + " splits=" + std::to_string(cs.splits) +
         " eps=" + std::to_string(cs.eps) + (cs.g_side ? " g-side" : " f-side") +
         (cs.zero_weights ? " zero-weights" : "") + (cs.all_keys_masked ? " all-keys-masked" : "") +
         (cs.ramp ? " ramp" : "") + (cs.spread ? " spread" : "") + " vstride=K+" +
         std::to_string(cs.vpad);
}

// eps and c as the kernel receives them (floats).
double kernel_eps(const Case& cs) { return double(float(cs.eps)); }
double kernel_c(const Case& cs) { return double(float(cs.c)); }

Cloud make_cloud(std::mt19937_64& rng, std::int64_t rows, int d, int ld, double c, double sigma,
                 double shift) {
  std::normal_distribution<double> nd(shift, sigma);
  Cloud cl;
  cl.rows = rows;
  cl.pts.assign(std::size_t(rows * ld), 0.f);
  cl.norm.resize(std::size_t(rows));
  for (std::int64_t i = 0; i < rows; ++i) {
    double s = 0;
    for (int k = 0; k < d; ++k) {
      const float v = round_tf32(float(nd(rng)));
      cl.pts[std::size_t(i * ld + k)] = v;
      s += double(v) * double(v);
    }
    cl.norm[std::size_t(i)] = float(c * s);
  }
  return cl;
}

void set_weights(std::mt19937_64& rng, Cloud& cl, int zero_every, int zero_phase, bool all_zero) {
  std::uniform_real_distribution<double> ud(0.1, 1.1);
  std::vector<double> w(std::size_t(cl.rows));
  double total = 0;
  for (std::int64_t i = 0; i < cl.rows; ++i) {
    const bool zero = all_zero || (zero_every > 0 && i % zero_every == zero_phase && cl.rows > 1);
    w[std::size_t(i)] = zero ? 0.0 : ud(rng);
    total += w[std::size_t(i)];
  }
  cl.logw.resize(std::size_t(cl.rows));
  for (std::int64_t i = 0; i < cl.rows; ++i)
    cl.logw[std::size_t(i)] =
        w[std::size_t(i)] > 0 ? float(std::log(w[std::size_t(i)] / total)) : kNegInf;
}

// C~_ij in the shifted form the kernels evaluate: c|x~_i|^2 + c|y~_j|^2 - 2c <x~_i, y~_j>.
double cost(const Cloud& x, std::int64_t i, const Cloud& y, std::int64_t j, int ld, double c) {
  double dot = 0;
  for (int k = 0; k < ld; ++k)
    dot += double(x.pts[std::size_t(i * ld + k)]) * double(y.pts[std::size_t(j * ld + k)]);
  return double(x.norm[std::size_t(i)]) + double(y.norm[std::size_t(j)]) - 2 * c * dot;
}

// pot_i = -eps log sum_j exp(log w_j + (kpot_j - C_ij) / eps) (one log-domain Sinkhorn half step).
void half_step(const Cloud& q, Cloud& rows_out, const Cloud& k, const std::vector<double>& C,
               bool transposed, double eps) {
  for (std::int64_t i = 0; i < q.rows; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    std::vector<double> e(std::size_t(k.rows));
    for (std::int64_t j = 0; j < k.rows; ++j) {
      const double cij =
          transposed ? C[std::size_t(j * q.rows + i)] : C[std::size_t(i * k.rows + j)];
      e[std::size_t(j)] =
          k.logw[std::size_t(j)] == kNegInf
              ? -std::numeric_limits<double>::infinity()
              : double(k.logw[std::size_t(j)]) + (double(k.pot[std::size_t(j)]) - cij) / eps;
      mx = std::max(mx, e[std::size_t(j)]);
    }
    double s = 0;
    for (double v : e)
      if (v != -std::numeric_limits<double>::infinity()) s += std::exp(v - mx);
    rows_out.pot[std::size_t(i)] = float(-eps * (mx + std::log(s)));
  }
}

struct Inputs {
  int ld = 0;
  Cloud x, y;
};

Inputs make_inputs(const Case& cs, unsigned seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.ld = cuda::tf32_padded_dim(cs.d);
  const double eps = kernel_eps(cs), c = kernel_c(cs);
  const double sigma = 1.0 / std::sqrt(double(cs.d));  // |x|^2 ~ 1 for every d
  in.x = make_cloud(rng, cs.n, cs.d, in.ld, c, sigma, 0.0);
  in.y = make_cloud(rng, cs.m, cs.d, in.ld, c, 0.8 * sigma, 0.1 * sigma);
  const bool zw = cs.zero_weights;
  set_weights(rng, in.x, zw ? 3 : 0, 1, cs.g_side && cs.all_keys_masked);
  set_weights(rng, in.y, zw ? 4 : 0, 0, !cs.g_side && cs.all_keys_masked);
  in.x.pot.assign(std::size_t(cs.n), 0.f);
  in.y.pot.assign(std::size_t(cs.m), 0.f);
  if (!cs.all_keys_masked) {
    // Realistic potentials: three half steps of Sinkhorn from g = 0 (g, f, g), in double.
    std::vector<double> C(std::size_t(cs.n * cs.m));
    for (std::int64_t i = 0; i < cs.n; ++i)
      for (std::int64_t j = 0; j < cs.m; ++j)
        C[std::size_t(i * cs.m + j)] = cost(in.x, i, in.y, j, in.ld, c);
    half_step(in.x, in.x, in.y, C, false, eps);  // f from g = 0
    half_step(in.y, in.y, in.x, C, true, eps);   // g from f
    half_step(in.x, in.x, in.y, C, false, eps);  // f from g
  } else {
    std::uniform_real_distribution<double> ud(-1.0, 1.0);
    for (auto& v : in.x.pot) v = float(ud(rng));
    for (auto& v : in.y.pot) v = float(ud(rng));
  }
  if (cs.ramp) {
    // The key potential falls by eps / log2(e) per key towards the first key (0 at the last):
    // alpha beta grows by 1 per key, 16 per 16-key half stage, beyond the slack of 8, so the
    // running maximum moves (and the accumulators are rescaled) in every half stage; the plan
    // stays bounded (the shift is <= 0).
    Cloud& keys = cs.g_side ? in.x : in.y;
    for (std::int64_t j = 0; j < keys.rows; ++j)
      keys.pot[std::size_t(j)] += float(eps / kLog2e * double(j - (keys.rows - 1)));
  }
  return in;
}

// Float64 reference out = P V, sum |P| |V|, P 1 and the per-row relative bound.
struct Reference {
  std::vector<double> out, abs, mass, tau, pmax, vmax;
};

Reference reference(const Cloud& q, const Cloud& k, int ld, const Case& cs,
                    const std::vector<float>& V, std::int64_t vstride) {
  const double eps = kernel_eps(cs), c = kernel_c(cs), alpha = 2 * kLog2e * c / eps;
  const int K = cs.K;
  Reference r;
  r.out.assign(std::size_t(q.rows * K), 0.0);
  r.abs.assign(std::size_t(q.rows * K), 0.0);
  r.mass.assign(std::size_t(q.rows), 0.0);
  r.tau.assign(std::size_t(q.rows), 0.0);
  r.pmax.assign(std::size_t(q.rows), 0.0);
  r.vmax.assign(std::size_t(K), 0.0);
  for (std::int64_t j = 0; j < k.rows; ++j)
    for (int kc = 0; kc < K; ++kc)
      r.vmax[std::size_t(kc)] =
          std::max(r.vmax[std::size_t(kc)], std::abs(double(V[std::size_t(j * vstride + kc)])));
  std::vector<double> P(std::size_t(k.rows));
  for (std::int64_t i = 0; i < q.rows; ++i) {
    if (q.logw[std::size_t(i)] == kNegInf) continue;  // zero row
    double tau_pair = 0, umax = -1e300, umin = 1e300;
    bool any = false;
    for (std::int64_t j = 0; j < k.rows; ++j) {
      P[std::size_t(j)] = 0;
      if (k.logw[std::size_t(j)] == kNegInf) continue;  // masked key
      any = true;
      double dot = 0, adot = 0;
      for (int kk = 0; kk < ld; ++kk) {
        const double pr =
            double(q.pts[std::size_t(i * ld + kk)]) * double(k.pts[std::size_t(j * ld + kk)]);
        dot += pr;
        adot += std::abs(pr);
      }
      const double gj = k.pot[std::size_t(j)], kn = k.norm[std::size_t(j)],
                   lb = k.logw[std::size_t(j)];
      const double beta = (gj - kn + eps * lb) / (2 * c);
      const double u = beta + dot;
      umax = std::max(umax, u);
      umin = std::min(umin, u);
      const double du =
          (9.0 * ld / 8 + 8) * std::ldexp(1.0, -23) * (std::abs(beta) + adot) +
          8 * std::ldexp(1.0, -24) * (std::abs(gj) + std::abs(kn) + eps * std::abs(lb)) / (2 * c);
      tau_pair = std::max(tau_pair, std::ldexp(1.0, -10) + kLn2 * alpha * du +
                                        kLn2 * std::ldexp(1.0, -24) * alpha * std::abs(u));
      // P_ij = a_i b_j exp((f_i + g_j - C~_ij) / eps), C~ in the shifted form from float norms.
      const double e =
          double(q.logw[std::size_t(i)]) + lb +
          (double(q.pot[std::size_t(i)]) - double(q.norm[std::size_t(i)]) + gj - kn + 2 * c * dot) /
              eps;
      P[std::size_t(j)] = std::exp(e);
    }
    if (!any) continue;
    r.tau[std::size_t(i)] = tau_pair + std::ldexp(1.0, -16) +
                            (9 * (double(k.rows) / 8 + 1) + 16) * std::ldexp(1.0, -23) +
                            (2 + alpha * (umax - umin) / 8) * std::ldexp(1.0, -20);
    for (std::int64_t j = 0; j < k.rows; ++j) {
      const double pj = P[std::size_t(j)];
      if (pj == 0) continue;
      r.mass[std::size_t(i)] += pj;
      r.pmax[std::size_t(i)] = std::max(r.pmax[std::size_t(i)], pj);
      const float* vj = &V[std::size_t(j * vstride)];
      double* o = &r.out[std::size_t(i * K)];
      double* a = &r.abs[std::size_t(i * K)];
      for (int kc = 0; kc < K; ++kc) {
        o[kc] += pj * double(vj[kc]);
        a[kc] += pj * std::abs(double(vj[kc]));
      }
    }
  }
  return r;
}

void run_case(const Case& cs, unsigned seed) {
  SCOPED_TRACE(name(cs));
  const Inputs in = make_inputs(cs, seed);
  const Cloud& q = cs.g_side ? in.y : in.x;
  const Cloud& k = cs.g_side ? in.x : in.y;
  const int ld = in.ld, K = cs.K;
  const std::int64_t vstride = K + cs.vpad, ostride = K + 3;
  std::mt19937_64 rng(seed + 1000);
  std::uniform_real_distribution<double> uv(-1.0, 1.0);
  std::vector<float> V(std::size_t(std::max<std::int64_t>(k.rows, 1) * vstride), 0.f);
  for (std::int64_t j = 0; j < k.rows; ++j)
    for (int kc = 0; kc < K; ++kc)
      V[std::size_t(j * vstride + kc)] = float(
          uv(rng) * (cs.spread ? std::ldexp(1.0, 3 * (kc % 11 - 5)) * (j % 5 ? 1.0 : 1e-4) : 1.0));
  const Reference ref = reference(q, k, ld, cs, V, vstride);

  Stream stream;
  void* st = stream.get();
  DeviceFloats dq(q.pts.size()), dk(k.pts.size()), dqn(q.norm.size()), dkn(k.norm.size()),
      dql(q.logw.size()), dkl(k.logw.size()), dqp(q.pot.size()), dkp(k.pot.size()), dv(V.size()),
      dout(std::size_t(q.rows * ostride)), dmass(std::size_t(q.rows)),
      dws(cuda::values_tf32_workspace_floats(q.rows, k.rows, K, cs.splits));
  upload(dq, q.pts, st);
  upload(dk, k.pts, st);
  upload(dqn, q.norm, st);
  upload(dkn, k.norm, st);
  upload(dql, q.logw, st);
  upload(dkl, k.logw, st);
  upload(dqp, q.pot, st);
  upload(dkp, k.pot, st);
  upload(dv, V, st);
  // Sentinels: the padding columns of out must stay untouched, every output must be written.
  upload(dout,
         std::vector<float>(std::size_t(q.rows * ostride), std::numeric_limits<float>::quiet_NaN()),
         st);
  upload(dmass, std::vector<float>(std::size_t(q.rows), std::numeric_limits<float>::quiet_NaN()),
         st);

  cuda::MmaValuePass p;
  p.side.queries = dq.get();
  p.side.keys = dk.get();
  p.side.key_pot = dkp.get();
  p.side.key_norm = dkn.get();
  p.side.key_logw = dkl.get();
  p.side.query_norm = dqn.get();
  p.side.pot = dqp.get();
  p.side.rows = q.rows;
  p.side.nkeys = k.rows;
  p.query_logw = dql.get();
  p.ld = ld;
  p.values = dv.get();
  p.vstride = vstride;
  p.vcols = K;
  p.out = dout.get();
  p.ostride = ostride;
  p.row_mass = dmass.get();
  p.eps = float(cs.eps);
  p.cost_scale = float(cs.c);
  p.splits = cs.splits;
  p.workspace = dws.get();
  cuda::run_values_tf32(p, st);
  const std::vector<float> out = download(dout, std::size_t(q.rows * ostride), st);
  const std::vector<float> mass = download(dmass, std::size_t(q.rows), st);

  int bad = 0;
  double worst = 0;  // max |out - ref| / bound
  for (std::int64_t i = 0; i < q.rows; ++i) {
    const bool zero_row = q.logw[std::size_t(i)] == kNegInf || ref.tau[std::size_t(i)] == 0;
    for (int kc = 0; kc < K; ++kc) {
      const double o = out[std::size_t(i * ostride + kc)];
      const double rf = ref.out[std::size_t(i * K + kc)];
      const double vmax = ref.vmax[std::size_t(kc)];
      const double bound = 1.25 * ref.tau[std::size_t(i)] * ref.abs[std::size_t(i * K + kc)] +
                           double(k.rows) * std::ldexp(ref.pmax[std::size_t(i)] * vmax, -32) +
                           std::ldexp(vmax * ref.mass[std::size_t(i)], -38) + 1e-35;
      const bool ok = zero_row ? o == 0.0 : std::abs(o - rf) <= bound;
      if (!zero_row) worst = std::max(worst, std::abs(o - rf) / bound);
      if (!ok && ++bad <= 10)
        ADD_FAILURE() << "row " << i << " column " << kc << ": out " << o << ", reference " << rf
                      << ", bound " << bound << " (sum |P||V| " << ref.abs[std::size_t(i * K + kc)]
                      << ")";
    }
    for (std::int64_t kc = K; kc < ostride; ++kc)
      if (!std::isnan(out[std::size_t(i * ostride + kc)]) && ++bad <= 10)
        ADD_FAILURE() << "row " << i << ": padding column " << kc << " of out was written";
    const double ms = mass[std::size_t(i)], mr = ref.mass[std::size_t(i)];
    const bool mass_ok =
        zero_row ? ms == 0.0 : std::abs(ms - mr) <= 1.25 * ref.tau[std::size_t(i)] * mr + 1e-35;
    if (!mass_ok && ++bad <= 10)
      ADD_FAILURE() << "row " << i << ": row mass " << ms << ", reference " << mr;
  }
  EXPECT_EQ(bad, 0) << "worst error / bound " << worst;
  ::testing::Test::RecordProperty("worst_error_over_bound_" + std::to_string(seed),
                                  std::to_string(worst));
}

TEST(CudaValuesMma, MatchesFloat64OnEveryWidthAndValueWidth) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible (or a CPU-only build)";
  // W = tf32_padded_dim(d): d 3 -> 8, 13 -> 16, 20, 32 -> 32, 50, 64 -> 64.
  const std::vector<Case> cases = {
      {300, 257, 3, 1, 1, 0.1},                                         // K = 1, one column block
      {300, 257, 3, 7, 3, 0.2, false, true},                            // masked keys, zero rows
      {129, 200, 13, 8, 1, 0.5, true},                                  // g side
      {129, 200, 13, 16, 2, 0.5},                                       // 2 column blocks of 8
      {257, 333, 20, 64, 2, 0.3},                                       // 16-byte value copies
      {1, 500, 64, 100, 1, 1.0},                                        // n = 1, two 64-blocks
      {200, 1000, 50, 128, 5, 0.25, true},                              // K = 128, g side
      {150, 130, 3, 200, 2, 0.1, true, true},                           // K = 200: 4 blocks
      {100, 90, 8, 33, 4, 0.2, false, false, false, false, 1},          // 4-byte value copies
      {70, 5, 3, 36, 4, 0.3},                                           // splits > key stages
      {64, 1, 2, 3, 1, 0.2},                                            // m = 1
      {1, 1, 1, 1, 1, 0.5},                                             // n = m = 1
      {260, 700, 32, 40, 7, 0.15, false, false, false, false, 0, 0.5},  // c = 0.5
      {33, 2000, 16, 24, 1, 0.05},                                      // many keys, small eps
      {130, 1500, 3, 64, 3, 0.1, false, false, false, true},            // ramp: rescale per stage
      {130, 1500, 64, 9, 2, 0.2, true, false, false, true, 3},          // ramp, g side, W = 64
      {50, 80, 3, 5, 2, 0.2, false, false, true},                       // all keys masked
      {50, 80, 20, 70, 1, 0.2, true, false, true},                      // all keys masked, g side
      {200, 900, 64, 72, 3, 0.2, false, false, false, false, 0, 1.0, true},  // column scales
      {90, 700, 3, 5, 2, 0.1, true, false, false, true, 1, 1.0, true},       // scales, ramp
  };
  unsigned seed = 1;
  for (const Case& cs : cases) run_case(cs, seed++);
}

TEST(CudaValuesMma, SplitCountAndWorkspaceRules) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible (or a CPU-only build)";
  for (int ld : {8, 16, 32, 64}) {
    const int s_small = cuda::values_tf32_splits(ld, 8, 1000, 100000);
    EXPECT_GE(s_small, 1);
    EXPECT_LE(s_small, 64);
    // Few keys on a small grid: at most nkeys / 128 splits (>= 1; lse_pass.cu, wave_splits).
    const int few = cuda::values_tf32_splits(ld, 8, 1000, 600);
    EXPECT_GE(few, 1);
    EXPECT_LE(few, 600 / 128);
    EXPECT_GE(cuda::values_tf32_splits(ld, 128, 1000000, 1000000), 1);
  }
  // The wave rule: a grid under one wave even at 512 keys per split splits down to 128 keys per
  // split, up to one wave (16 row blocks and 2,048 keys: 16 splits where 16 x 16 blocks fit);
  // a grid of a wave or more keeps at least 512 keys per split.
  const int sms = cuda::current_sm_count();
  EXPECT_EQ(cuda::wave_splits(8, 16, 2048), std::min(16, 8 * sms / 16));
  EXPECT_EQ(cuda::wave_splits(8, 16, 100), 1);
  EXPECT_LE(cuda::wave_splits(8, 100000, 100000), 100000 / 512);
  EXPECT_LE(cuda::wave_splits(8, 8 * sms, 4096), 4096 / 512);
  // partials + 2 column words per padded column (kp = vcols rounded up to 8) + the fp16 values
  // (nkeys kp / 2 floats), each part rounded up to 4 floats.
  EXPECT_EQ(cuda::values_tf32_workspace_floats(1000, 500, 1, 3),
            std::size_t(3 * 1000 * 3 + 8 + 8 + 500 * 8 / 2));
  EXPECT_EQ(cuda::values_tf32_workspace_floats(1000, 100, 64, 2),
            std::size_t(2 * 1000 * 66 + 64 + 64 + 100 * 64 / 2));
  EXPECT_EQ(cuda::values_tf32_workspace_floats(1000, 100, 65, 2),
            std::size_t(2 * 2 * 1000 * 66 + 72 + 72 + 100 * 72 / 2));
  EXPECT_EQ(cuda::values_tf32_workspace_floats(1001, 3, 5, 1),
            std::size_t(1001 * 7 + 1 + 8 + 8 + 12));
  EXPECT_EQ(cuda::values_tf32_workspace_floats(0, 100, 8, 2), std::size_t(0));
}

TEST(CudaValuesMmaArguments, RefusesUnsupportedInputs) {
  // Argument checks happen before any CUDA call: they run without a device too.
  alignas(16) static float buf[256] = {};
  cuda::MmaValuePass p;
  p.side.queries = buf;
  p.side.keys = buf;
  p.side.key_pot = buf;
  p.side.key_norm = buf;
  p.side.key_logw = buf;
  p.side.query_norm = buf;
  p.side.pot = buf;
  p.side.rows = 4;
  p.side.nkeys = 4;
  p.query_logw = buf;
  p.ld = 8;
  p.values = buf;
  p.vstride = 2;
  p.vcols = 2;
  p.out = buf;
  p.ostride = 2;
  p.eps = 0.1f;
  p.workspace = buf;
  auto refuses = [](cuda::MmaValuePass q, const char* what) {
    EXPECT_THROW(cuda::run_values_tf32(q, nullptr), InvalidArgument) << what;
  };
  cuda::MmaValuePass q = p;
  q.ld = 24;
  refuses(q, "ld = 24");
  q = p;
  q.ld = 128;
  refuses(q, "ld = 128");
  q = p;
  q.side.queries = buf + 1;
  refuses(q, "misaligned queries");
  q = p;
  q.side.keys = buf + 2;
  refuses(q, "misaligned keys");
  q = p;
  q.vstride = 1;
  refuses(q, "vstride < vcols");
  q = p;
  q.ostride = 1;
  refuses(q, "ostride < vcols");
  q = p;
  q.splits = 0;
  refuses(q, "splits = 0");
  q = p;
  q.eps = 0;
  refuses(q, "eps = 0");
  q = p;
  q.workspace = nullptr;
  refuses(q, "no workspace");
  q = p;
  q.workspace = buf + 1;
  refuses(q, "misaligned workspace");
  q = p;
  q.values = nullptr;
  refuses(q, "no values");
  q = p;
  q.side.pot = nullptr;
  refuses(q, "no row potential");
  EXPECT_THROW(cuda::values_tf32_splits(24, 8, 100, 100), InvalidArgument);
  // Nothing to do: no launch, no error.
  q = p;
  q.vcols = 0;
  EXPECT_NO_THROW(cuda::run_values_tf32(q, nullptr));
  q = p;
  q.side.rows = 0;
  EXPECT_NO_THROW(cuda::run_values_tf32(q, nullptr));
}

#else  // !KANTOR_CUDA_ENABLED

TEST(CudaValuesMma, MatchesFloat64OnEveryWidthAndValueWidth) { GTEST_SKIP() << "CPU-only build"; }

#endif

}  // namespace
}  // namespace kantor::testing
