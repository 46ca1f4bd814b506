// Certificate side pass (lib/cuda/certify.hpp): each thread owns one query row i and sweeps every
// key j in tiles of kKeys, in double:
//   sq_ij = sum_k (x_ik - y_jk)^2         (exact differences; coordinates staged kChunk at a time)
//   then certificate_pair / certificate_row (lib/core/certificate.hpp), the CPU engine's math.
// Bytes: query rows and key tiles go global -> shared (double), potentials and weights of the key
// tile too; each block reduces its rows' sums and adds them to p.out with double atomics (the max
// as an unsigned 64-bit max on the bits of a non-negative double). The pass runs once per
// certificate, so it favours plain, obviously right code over speed.
#include <cuda_runtime.h>

#include "lib/core/certificate.hpp"
#include "lib/cuda/certify.hpp"
#include "lib/cuda/check.hpp"

namespace kantor::cuda {
namespace {

constexpr int kRows = kCertifyRows;  // query rows (threads) per block = the list row tile
constexpr int kKeys = 32;   // keys per tile (distances held in registers)
constexpr int kChunk = 8;   // coordinates staged per step

template <class T>
__global__ void __launch_bounds__(kRows) certify_side_kernel(const CertifySide<T> p) {
  __shared__ double qs[kRows][kChunk + 1];
  __shared__ double ks[kKeys][kChunk + 1];
  __shared__ double kpot[kKeys], kw[kKeys];
  __shared__ int klab[kKeys];
  const int t = threadIdx.x;
  const std::int64_t i = std::int64_t(blockIdx.x) * kRows + t;
  const bool row_ok = i < p.nq && p.query_w[i < p.nq ? i : 0] > 0;
  const double pi = i < p.nq ? double(p.query_pot[i]) : 0.0;
  const double inv_eps = 1.0 / p.eps;
  const double* pair_row =
      p.pair ? p.pair + std::int64_t(p.query_labels[i < p.nq ? i : 0]) * p.classes : nullptr;
  CertificateRow row;
  // The key ranges of this row tile: every key, or the runs of the block list.
  const bool listed = p.run_ptr != nullptr;
  const std::int64_t q0 = listed ? p.run_ptr[blockIdx.x] : 0;
  const std::int64_t q1 = listed ? p.run_ptr[blockIdx.x + 1] : 1;
  for (std::int64_t q = q0; q < q1; ++q) {
  const std::int64_t kb = listed ? std::int64_t(p.runs[2 * q]) * p.key_tile : 0;
  const std::int64_t ke_raw = listed ? std::int64_t(p.runs[2 * q + 1]) * p.key_tile : p.nk;
  const std::int64_t ke = ke_raw < p.nk ? ke_raw : p.nk;
  for (std::int64_t j0 = kb; j0 < ke; j0 += kKeys) {
    double sq[kKeys];
#pragma unroll
    for (int jj = 0; jj < kKeys; ++jj) sq[jj] = 0;
    for (int k0 = 0; k0 < p.d; k0 += kChunk) {
      __syncthreads();
      for (int e = t; e < kRows * kChunk; e += kRows) {
        const int r = e / kChunk, c = e % kChunk;
        const std::int64_t gi = std::int64_t(blockIdx.x) * kRows + r;
        qs[r][c] = gi < p.nq && k0 + c < p.d ? p.queries[gi * p.d + k0 + c] : 0.0;
      }
      for (int e = t; e < kKeys * kChunk; e += kRows) {
        const int r = e / kChunk, c = e % kChunk;
        const std::int64_t gj = j0 + r;
        ks[r][c] = gj < ke && k0 + c < p.d ? p.keys[gj * p.d + k0 + c] : 0.0;
      }
      if (k0 == 0 && t < kKeys) {
        const std::int64_t gj = j0 + t;
        kpot[t] = gj < ke ? double(p.key_pot[gj]) : 0.0;
        kw[t] = gj < ke ? p.key_w[gj] : 0.0;
        klab[t] = p.pair && gj < ke ? p.key_labels[gj] : 0;
      }
      __syncthreads();
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        const double xv = qs[t][c];
#pragma unroll
        for (int jj = 0; jj < kKeys; ++jj) {
          const double diff = xv - ks[jj][c];
          sq[jj] += diff * diff;
        }
      }
    }
    if (row_ok) {
#pragma unroll
      for (int jj = 0; jj < kKeys; ++jj)
        // Guard: masked (zero-weight) and padding keys are skipped; their potential may be inf.
        if (kw[jj] > 0)
          certificate_pair(sq[jj], p.cost_scale, pair_row ? pair_row[klab[jj]] : 0.0, inv_eps, pi,
                           kpot[jj], kw[jj], &row);
    }
  }
  }
  CertificateSide s;
  if (row_ok) certificate_row(p.query_w[i], pi, p.rho_inv, row, &s);
  // Block reduction: warp shuffles, then one atomic per warp.
  double e = s.error, ms = s.mass, wt = s.weighted_t, co = s.cost, po = s.potentials,
         wsum = s.weight, tx = s.target_exposure;
  unsigned long long mt = __double_as_longlong(s.max_t);
  for (int off = 16; off > 0; off >>= 1) {
    e += __shfl_down_sync(0xffffffffu, e, off);
    ms += __shfl_down_sync(0xffffffffu, ms, off);
    wt += __shfl_down_sync(0xffffffffu, wt, off);
    co += __shfl_down_sync(0xffffffffu, co, off);
    po += __shfl_down_sync(0xffffffffu, po, off);
    wsum += __shfl_down_sync(0xffffffffu, wsum, off);
    tx += __shfl_down_sync(0xffffffffu, tx, off);
    const unsigned long long o = __shfl_down_sync(0xffffffffu, mt, off);
    mt = o > mt ? o : mt;
  }
  if ((t & 31) == 0) {
    atomicAdd(p.out + 0, e);
    atomicAdd(p.out + 1, ms);
    atomicAdd(p.out + 2, wt);
    atomicMax(reinterpret_cast<unsigned long long*>(p.out + 3), mt);
    atomicAdd(p.out + 4, co);
    atomicAdd(p.out + 5, po);
    atomicAdd(p.out + 6, wsum);
    atomicAdd(p.out + 7, tx);
  }
}

template <class T>
void launch(const CertifySide<T>& p, void* stream) {
  if (p.nq <= 0) return;
  const unsigned blocks = unsigned((p.nq + kRows - 1) / kRows);
  certify_side_kernel<T><<<blocks, kRows, 0, static_cast<cudaStream_t>(stream)>>>(p);
  KANTOR_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_certify_side(const CertifySide<float>& p, void* stream) { launch(p, stream); }
void launch_certify_side(const CertifySide<double>& p, void* stream) { launch(p, stream); }

}  // namespace kantor::cuda
