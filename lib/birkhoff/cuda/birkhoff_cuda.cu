// Launchers of the Birkhoff CUDA engine (engine.hpp), the device statistics, the device normal
// generator and the benchmark protocol. The kernels are in birkhoff_kernels.cuh; the
// instantiations are the ones named here (2 storage types x {n=4 Newton, n=4 truncated, n=4
// backward, general forward, general backward}).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lib/birkhoff/cuda/birkhoff_kernels.cuh"
#include "lib/birkhoff/engine.hpp"
#include "lib/cuda/check.hpp"

namespace kantor::birkhoff {

namespace {

using cuda::Bf16;
using cuda::KernelParams;
using cuda::kThreads;

constexpr int kStatsWords = 4 + kHistBins;

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

unsigned grid_for(std::int64_t batch) { return unsigned((batch + kThreads - 1) / kThreads); }

KernelParams make_params(BirkhoffMethod method, bool row_first, int iterations, int n,
                         std::int64_t batch) {
  KernelParams p;
  p.batch = batch;
  p.n = n;
  p.method = int(method);
  p.map = TruncatedMap{method == BirkhoffMethod::kDeepSeek, row_first, iterations};
  return p;
}

template <class S>
void launch_forward(const KernelParams& p, bool fast, cudaStream_t s) {
  const unsigned grid = grid_for(p.batch);
  if (fast) {
    if (p.method == int(BirkhoffMethod::kNewton))
      cuda::forward4_kernel<S, true><<<grid, kThreads, 0, s>>>(p);
    else
      cuda::forward4_kernel<S, false><<<grid, kThreads, 0, s>>>(p);
  } else {
    cuda::forward_general_kernel<S><<<grid, kThreads, 0, s>>>(p);
  }
  KANTOR_CUDA_CHECK_LAUNCH();
}

template <class S>
void launch_backward(const KernelParams& p, bool fast, cudaStream_t s) {
  const unsigned grid = grid_for(p.batch);
  if (fast && p.implicit)
    cuda::backward4_kernel<S, true><<<grid, kThreads, 0, s>>>(p);
  else if (fast)
    cuda::backward4_kernel<S, false><<<grid, kThreads, 0, s>>>(p);
  else
    cuda::backward_general_kernel<S><<<grid, kThreads, 0, s>>>(p);
  KANTOR_CUDA_CHECK_LAUNCH();
}

// Counter-based normal generator: splitmix64 of (seed, index) -> two uniforms -> Box-Muller.
__device__ __forceinline__ std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <class S>
__global__ void fill_normal_kernel(S* out, std::int64_t count, float mean, float stddev,
                                   std::uint64_t seed) {
  const std::int64_t pair = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (2 * pair >= count) return;
  const std::uint64_t h = splitmix64(seed * 0x2545F4914F6CDD1Dull + std::uint64_t(pair));
  // u1 in (0, 1]: never log(0).
  const float u1 = (float((h >> 40) & 0xFFFFFF) + 1.0f) * (1.0f / 16777216.0f);
  const float u2 = float((h >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
  const float r = sqrtf(-2.0f * logf(u1));
  float sn, cs;
  sincospif(2.0f * u2, &sn, &cs);
  out[2 * pair] = cuda::from_f<S>(mean + stddev * r * cs);
  if (2 * pair + 1 < count) out[2 * pair + 1] = cuda::from_f<S>(mean + stddev * r * sn);
}

}  // namespace

const char* cuda_kernel_name(int n) {
  return n == 4 ? "cuda n=4 register kernel (smem-staged 16-byte I/O)"
                : "cuda general-n kernel (local memory)";
}

void cuda_forward(const ForwardArgs& a, void* stream_ptr, DeviceStats* stats) {
  if (a.batch == 0) return;
  cudaStream_t s = static_cast<cudaStream_t>(stream_ptr);
  KernelParams p = make_params(a.method, a.row_first, a.iterations, a.n, a.batch);
  p.in0 = a.logits;
  p.out = a.out;
  p.tolerance = a.tolerance;
  // Newton stops at 0.1 tol, or at 0.5 tol once a step no longer halves the error (the fp32
  // noise floor of the column sums is ~1e-7..1e-6).
  p.tol_stop = 0.1f * a.tolerance;
  p.tol_accept = 0.5f * a.tolerance;
  p.max_iter = a.max_newton_iterations;
  const bool fast = a.n == 4 && aligned16(a.logits) && aligned16(a.out);
  // Stream-ordered scratch for the summary counters, freed on every exit path (a throwing CUDA
  // call included).
  struct StatsScratch {
    unsigned long long* p = nullptr;
    cudaStream_t s = nullptr;
    ~StatsScratch() {
      if (p) cudaFreeAsync(p, s);
    }
  } scratch{nullptr, s};
  if (stats) {
    KANTOR_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&scratch.p),
                                    kStatsWords * sizeof(unsigned long long), s));
    KANTOR_CUDA_TRY(cudaMemsetAsync(scratch.p, 0, kStatsWords * sizeof(unsigned long long), s));
    p.stats = scratch.p;
  }
  if (a.storage == Storage::kFloat32)
    launch_forward<float>(p, fast, s);
  else
    launch_forward<Bf16>(p, fast, s);
  if (!stats) return;
  unsigned long long h[kStatsWords];
  KANTOR_CUDA_TRY(cudaMemcpyAsync(h, scratch.p, sizeof(h), cudaMemcpyDeviceToHost, s));
  KANTOR_CUDA_TRY(cudaStreamSynchronize(s));
  const unsigned maxbits = unsigned(h[0]);
  float worst;
  std::memcpy(&worst, &maxbits, 4);
  stats->worst = worst;
  stats->not_converged = std::int64_t(h[1]);
  stats->invalid = std::int64_t(h[2]);
  if (h[3]) {  // ~(b * 8 + status) of the first invalid matrix
    const unsigned long long key = ~h[3];
    stats->first_invalid = std::int64_t(key >> 3);
    stats->first_invalid_status = int(key & 7ull);
  }
  // Median: the bin where the cumulative count reaches ceil(B / 2); its geometric centre.
  const unsigned long long half = (unsigned long long)(a.batch + 1) / 2;
  unsigned long long cum = 0;
  int bin = kHistBins - 1;
  for (int k = 0; k < kHistBins; ++k) {
    cum += h[4 + k];
    if (cum >= half) {
      bin = k;
      break;
    }
  }
  stats->median = bin == kHistBins - 1 && worst == INFINITY
                      ? double(INFINITY)
                      : std::pow(10.0, kHistLo + (bin + 0.5) * kHistWidth);
  stats->median_bin_decades = kHistWidth;
}

void cuda_backward(const BackwardArgs& a, void* stream_ptr) {
  if (a.batch == 0) return;
  cudaStream_t s = static_cast<cudaStream_t>(stream_ptr);
  KernelParams p = make_params(a.method, a.row_first, a.iterations, a.n, a.batch);
  p.implicit = a.implicit;
  p.in0 = a.implicit ? a.P : a.logits;
  p.in1 = a.grad_P;
  p.out = a.grad_logits;
  const bool fast = a.n == 4 && aligned16(p.in0) && aligned16(p.in1) && aligned16(p.out);
  if (a.storage == Storage::kFloat32)
    launch_backward<float>(p, fast, s);
  else
    launch_backward<Bf16>(p, fast, s);
}

void cuda_fill_normal(void* out, std::int64_t count, Storage storage, float mean, float stddev,
                      std::uint64_t seed, void* stream_ptr) {
  if (count == 0) return;
  cudaStream_t s = static_cast<cudaStream_t>(stream_ptr);
  const std::int64_t pairs = (count + 1) / 2;
  const unsigned grid = unsigned((pairs + 255) / 256);
  if (storage == Storage::kFloat32)
    fill_normal_kernel<float>
        <<<grid, 256, 0, s>>>(static_cast<float*>(out), count, mean, stddev, seed);
  else
    fill_normal_kernel<Bf16>
        <<<grid, 256, 0, s>>>(static_cast<Bf16*>(out), count, mean, stddev, seed);
  KANTOR_CUDA_CHECK_LAUNCH();
}

namespace {

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { KANTOR_CUDA_TRY(cudaMalloc(&p, bytes)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { KANTOR_CUDA_TRY(cudaEventCreate(&e)); }
  ~Event() { cudaEventDestroy(e); }
};

void summarize(std::vector<double> v, double& med, double& lo, double& hi) {
  std::sort(v.begin(), v.end());
  med = v[v.size() / 2];
  lo = v.front();
  hi = v.back();
}

}  // namespace

BirkhoffTiming cuda_time(const BirkhoffBenchConfig& cfg, void* stream_ptr) {
  cudaStream_t s = static_cast<cudaStream_t>(stream_ptr);
  const Storage st = cfg.bf16 ? Storage::kBFloat16 : Storage::kFloat32;
  const std::size_t esize = cfg.bf16 ? 2 : 4;
  const std::int64_t count = cfg.batch * cfg.n * cfg.n;
  const std::size_t bytes = std::size_t(count) * esize;
  DeviceBuffer R(bytes), P(bytes), G(bytes), D(bytes);
  const BirkhoffOptions& o = cfg.options;
  ForwardArgs fa;
  fa.logits = R.p;
  fa.out = P.p;
  fa.batch = cfg.batch;
  fa.n = cfg.n;
  fa.storage = st;
  fa.method = o.method;
  fa.row_first = o.order == SinkhornOrder::kRowFirst;
  fa.iterations = o.iterations > 0 ? o.iterations : 20;
  fa.tolerance = float(o.tolerance > 0 ? o.tolerance : (cfg.bf16 ? 3e-2 : 1e-5));
  fa.max_newton_iterations = o.max_newton_iterations;
  BackwardArgs ba;
  ba.P = P.p;
  ba.logits = R.p;
  ba.grad_P = G.p;
  ba.grad_logits = D.p;
  ba.batch = cfg.batch;
  ba.n = cfg.n;
  ba.storage = st;
  ba.implicit = o.gradient == BirkhoffGradient::kImplicit;
  ba.method = o.method;
  ba.row_first = fa.row_first;
  ba.iterations = fa.iterations;
  cuda_fill_normal(G.p, count, st, 0.f, 1.f, 77, s);

  BirkhoffTiming t;
  t.runs = cfg.runs;
  Event e0, e1, e2;
  std::vector<double> fwd, both;
  for (int r = 0; r < cfg.warmup + cfg.runs; ++r) {
    // Fresh logits every run, generated before (outside) the timed region.
    cuda_fill_normal(R.p, count, st, 0.f, float(cfg.scale), 1000 + std::uint64_t(r), s);
    KANTOR_CUDA_TRY(cudaEventRecord(e0.e, s));
    cuda_forward(fa, s, nullptr);
    KANTOR_CUDA_TRY(cudaEventRecord(e1.e, s));
    if (cfg.backward) cuda_backward(ba, s);
    KANTOR_CUDA_TRY(cudaEventRecord(e2.e, s));
    KANTOR_CUDA_TRY(cudaEventSynchronize(e2.e));
    if (r < cfg.warmup) continue;
    float a = 0, b = 0;
    KANTOR_CUDA_TRY(cudaEventElapsedTime(&a, e0.e, e1.e));
    KANTOR_CUDA_TRY(cudaEventElapsedTime(&b, e0.e, e2.e));
    fwd.push_back(a);
    both.push_back(b);
  }
  summarize(fwd, t.forward_ms_median, t.forward_ms_min, t.forward_ms_max);
  if (cfg.backward) summarize(both, t.both_ms_median, t.both_ms_min, t.both_ms_max);

  // Graph timing: kCalls back-to-back calls on kCalls distinct fresh inputs (so the data is not
  // the previous output and, beyond the 60 MB L2, comes from HBM), captured once, replayed; the
  // per-call time is the graph time / kCalls. Only when the inputs fit in 4 GiB.
  constexpr int kCalls = 20;
  if (cfg.graphs && bytes * kCalls <= (std::size_t(4) << 30)) {
    DeviceBuffer Rs(bytes * kCalls);
    for (int pass = 0; pass < (cfg.backward ? 2 : 1); ++pass) {
      // Graph objects and the capture state are released on every exit path: a throw inside the
      // capture must not leave the context's stream capturing (every later call would fail).
      struct GraphGuard {
        cudaStream_t s;
        bool capturing = false;
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        ~GraphGuard() {
          if (capturing) {
            cudaGraph_t g = nullptr;
            cudaStreamEndCapture(s, &g);
            if (g) cudaGraphDestroy(g);
            cudaGetLastError();  // the error that unwound us is already being reported
          }
          if (exec) cudaGraphExecDestroy(exec);
          if (graph) cudaGraphDestroy(graph);
        }
      } guard{s};
      KANTOR_CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      guard.capturing = true;
      for (int c = 0; c < kCalls; ++c) {
        ForwardArgs f = fa;
        f.logits = static_cast<char*>(Rs.p) + bytes * c;
        cuda_forward(f, s, nullptr);
        if (pass == 1) {
          BackwardArgs b = ba;
          b.logits = f.logits;
          cuda_backward(b, s);
        }
      }
      guard.capturing = false;
      KANTOR_CUDA_TRY(cudaStreamEndCapture(s, &guard.graph));
      KANTOR_CUDA_TRY(cudaGraphInstantiate(&guard.exec, guard.graph, 0));
      cudaGraphExec_t exec = guard.exec;
      std::vector<double> g;
      for (int r = 0; r < cfg.warmup + cfg.runs; ++r) {
        cuda_fill_normal(Rs.p, count * kCalls, st, 0.f, float(cfg.scale), 5000 + std::uint64_t(r),
                         s);
        KANTOR_CUDA_TRY(cudaEventRecord(e0.e, s));
        KANTOR_CUDA_TRY(cudaGraphLaunch(exec, s));
        KANTOR_CUDA_TRY(cudaEventRecord(e1.e, s));
        KANTOR_CUDA_TRY(cudaEventSynchronize(e1.e));
        float a = 0;
        KANTOR_CUDA_TRY(cudaEventElapsedTime(&a, e0.e, e1.e));
        if (r >= cfg.warmup) g.push_back(a / kCalls);
      }
      double med, lo, hi;
      summarize(g, med, lo, hi);
      (pass == 0 ? t.graph_forward_ms_median : t.graph_both_ms_median) = med;
    }
    t.graphs = true;
  }
  return t;
}

}  // namespace kantor::birkhoff
