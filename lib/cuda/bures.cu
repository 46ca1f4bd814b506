// Gaussian (Bures-Wasserstein) label table on the CUDA engine: kantor::otdd::bures_table_cuda
// (declared in include/kantor/otdd.hpp; the host version is solvers/otdd.cpp's gaussian_table).
//
// All in float64 on the context's stream:
//  1. statistics: the groups' rows gathered into class-contiguous blocks (each block at a
//     256-byte aligned offset, so that equal groups meet the same cuBLAS kernels), means by
//     column sums in row order (the host's order), residuals, covariances by DSYRK (lower);
//  2. square roots: cuSOLVER's batched symmetric eigensolver on all covariances at once, then
//     L_u = U_u diag(s), s_k = sqrt(lambda_k) above the floor d 2^-52 lambda_max, else 0
//     (the host's sqrt_factor keeps the same columns);
//  3. pairs, in chunks that fit a memory budget: K = L_u^T L_v and G = K^T K by batched DGEMM,
//     the eigenvalues of G by the batched eigensolver; Tr (S_u^1/2 S_v S_u^1/2)^1/2 = the sum of
//     sqrt(mu) over the eigenvalues above the floor r 2^-52 mu_max, r the smaller of the two
//     factors' kept ranks (the host's trace_term: its Gram matrix is r x r).
// Measured on an H200 (docs/benchmarks.md): 190 eigenvalue problems of size 784 in one batched
// call 0.16 s, against about 1.6 s for the host's threads.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/error.hpp"
#include "kantor/otdd.hpp"
#include "lib/cuda/check.hpp"
#include "lib/cuda/cublas_check.hpp"
#include "lib/cuda/runtime.hpp"
#include "lib/runtime/context_impl.hpp"

namespace kantor::otdd {
namespace {

using Clock = std::chrono::steady_clock;

void solver_check(cusolverStatus_t s, const char* what) {
  if (s == CUSOLVER_STATUS_ALLOC_FAILED)
    throw OutOfMemory(std::string("bures_table_cuda: ") + what + ": cuSOLVER could not allocate");
  if (s != CUSOLVER_STATUS_SUCCESS)
    throw CudaError(std::string("bures_table_cuda: ") + what + " failed (cuSOLVER status " +
                    std::to_string(int(s)) + ")");
}

/// cuSOLVER, opened at the first call (dlopen), not linked: the library and what it pulls in
/// (cuSPARSE, nvJitLink: about 400 MB of shared objects) would otherwise be mapped by every
/// kantor process, CPU runs and `ulimit -v` included (docs/otdd.md). Loaded once, never closed.
struct Cusolver {
  decltype(&::cusolverDnCreate) create = nullptr;
  decltype(&::cusolverDnDestroy) destroy = nullptr;
  decltype(&::cusolverDnSetStream) set_stream = nullptr;
  decltype(&::cusolverDnCreateParams) create_params = nullptr;
  decltype(&::cusolverDnDestroyParams) destroy_params = nullptr;
  decltype(&::cusolverDnXsyevBatched_bufferSize) syev_batched_size = nullptr;
  decltype(&::cusolverDnXsyevBatched) syev_batched = nullptr;
  std::string error;  // why it could not be loaded (empty when loaded)
};

const Cusolver& cusolver() {
  static const Cusolver api = [] {
    Cusolver a;
    const std::string name = "libcusolver.so." + std::to_string(CUSOLVER_VER_MAJOR);
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      a.error = "cannot load " + name + " (" + (e ? e : "unknown error") + ")";
      return a;
    }
    auto sym = [&](auto* fn, const char* symbol) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, symbol));
      if (!*fn && a.error.empty()) a.error = name + " has no symbol " + symbol;
    };
    sym(&a.create, "cusolverDnCreate");
    sym(&a.destroy, "cusolverDnDestroy");
    sym(&a.set_stream, "cusolverDnSetStream");
    sym(&a.create_params, "cusolverDnCreateParams");
    sym(&a.destroy_params, "cusolverDnDestroyParams");
    sym(&a.syev_batched_size, "cusolverDnXsyevBatched_bufferSize");
    sym(&a.syev_batched, "cusolverDnXsyevBatched");
    return a;
  }();
  return api;
}

/// Handles of one call, released on every path.
struct Handles {
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;
  cusolverDnParams_t params = nullptr;
  ~Handles() {
    if (params) cusolver().destroy_params(params);
    if (solver) cusolver().destroy(solver);
    if (blas) cublasDestroy(blas);
  }
};

/// R[q d + k] = X[rows[q] stride + k] for q < n.
__global__ void gather_rows(double* __restrict__ R, const double* __restrict__ X,
                            std::int64_t stride, const std::int64_t* __restrict__ rows,
                            std::int64_t n, std::int64_t d) {
  const std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * d) return;
  const std::int64_t q = e / d, k = e - q * d;
  R[e] = X[rows[q] * stride + k];
}

/// mean[k] = (sum over rows q in order of R[q d + k]) / n, then R[q d + k] -= mean[k].
__global__ void center_columns(double* __restrict__ R, double* __restrict__ mean, std::int64_t n,
                               std::int64_t d) {
  const std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= d) return;
  double s = 0;
  for (std::int64_t q = 0; q < n; ++q) s += R[q * d + k];
  s /= double(n);
  mean[k] = s;
  for (std::int64_t q = 0; q < n; ++q) R[q * d + k] -= s;
}

/// trace[u] = sum_k S_u[k, k] in order (one thread per group).
__global__ void traces(const double* __restrict__ S, double* __restrict__ trace, std::int64_t L,
                       std::int64_t d) {
  const std::int64_t u = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (u >= L) return;
  double s = 0;
  for (std::int64_t k = 0; k < d; ++k) s += S[u * d * d + k * d + k];
  trace[u] = s;
}

/// Column k of U_u (column-major d x d, eigenvalues W_u ascending) times sqrt(lambda_k) when
/// lambda_k > d 2^-52 max(0, lambda_max), else 0.
__global__ void scale_factors(double* __restrict__ U, const double* __restrict__ W,
                              std::int64_t L, std::int64_t d) {
  const std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= L * d * d) return;
  const std::int64_t u = e / (d * d), k = (e - u * d * d) / d;
  const double top = fmax(0.0, W[u * d + d - 1]);
  const double lam = W[u * d + k];
  const double floor = double(d) * 0x1p-52 * top;
  U[e] *= lam > floor ? sqrt(lam) : 0.0;
}

/// same[p] = 0 when the means or the covariances' lower triangles of pair p = (pu[p], pv[p])
/// differ in any bit (same[] starts at 1; several threads may write the same 0). Pairs stride
/// over gridDim.y (at most 65535 blocks in y; 363 groups already make more pairs).
__global__ void compare_groups(const double* __restrict__ mean, const double* __restrict__ S,
                               const std::int32_t* __restrict__ pu,
                               const std::int32_t* __restrict__ pv, std::int32_t* same,
                               std::int64_t P, std::int64_t d) {
  const std::int64_t total = d + d * d;
  for (std::int64_t p = blockIdx.y; p < P; p += gridDim.y) {
    const std::int64_t u = pu[p], v = pv[p];
    bool diff = false;
    for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += std::int64_t(gridDim.x) * blockDim.x) {
      if (e < d) {
        diff |= __double_as_longlong(mean[u * d + e]) != __double_as_longlong(mean[v * d + e]);
      } else {
        const std::int64_t f = e - d, col = f / d, row = f - col * d;
        if (row >= col)
          diff |= __double_as_longlong(S[u * d * d + f]) != __double_as_longlong(S[v * d * d + f]);
      }
    }
    if (__syncthreads_or(diff) && threadIdx.x == 0) same[p] = 0;
  }
}

unsigned blocks_for(std::int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

}  // namespace

std::vector<double> bures_table_cuda(const Context& ctx, const RowGroups& groups,
                                     double (*seconds)[3]) {
  if (ctx.backend() != Backend::kCuda)
    throw InvalidArgument("bures_table_cuda: the context's backend is " +
                          to_string(ctx.backend()) + ", not cuda");
  const std::int64_t L = groups.size();
  if (std::int64_t(groups.matrix.size()) != L)
    throw InvalidArgument("bures_table_cuda: RowGroups::matrix has " +
                          std::to_string(groups.matrix.size()) + " entries for " +
                          std::to_string(L) + " groups");
  if (groups.matrices.empty()) throw InvalidArgument("bures_table_cuda: no matrices");
  if (groups.max_pairs_per_call < 0)
    throw InvalidArgument("bures_table_cuda: RowGroups::max_pairs_per_call is " +
                          std::to_string(groups.max_pairs_per_call) + " (expected >= 0)");
  const std::int64_t d = groups.matrices.front().cols;
  if (d < 1) throw InvalidArgument("bures_table_cuda: the matrices have no columns");
  for (const auto& m : groups.matrices) {
    if (m.cols != d)
      throw InvalidArgument("bures_table_cuda: matrices of " + std::to_string(m.cols) + " and " +
                            std::to_string(d) + " columns");
    if (m.space != MemorySpace::kHost || (m.rows > 0 && !m.data) || m.stride < m.cols)
      throw InvalidArgument("bures_table_cuda: the matrices must be host row-major views");
  }
  for (std::int64_t u = 0; u < L; ++u) {
    const int mi = groups.matrix[std::size_t(u)];
    if (mi < 0 || mi >= int(groups.matrices.size()))
      throw InvalidArgument("bures_table_cuda: group " + std::to_string(u) + " names matrix " +
                            std::to_string(mi));
    const auto& r = groups.rows[std::size_t(u)];
    if (r.size() < 2)
      throw InvalidArgument("bures_table_cuda: group " + std::to_string(u) + " has " +
                            std::to_string(r.size()) + " rows; a covariance needs at least 2");
    const std::int64_t n = groups.matrices[std::size_t(mi)].rows;
    for (std::int64_t q : r)
      if (q < 0 || q >= n)
        throw InvalidArgument("bures_table_cuda: group " + std::to_string(u) + " names row " +
                              std::to_string(q) + " of a matrix of " + std::to_string(n) +
                              " rows");
  }
  std::vector<double> table(std::size_t(L * L), 0.0);
  if (L < 2) return table;

  cuda::set_device(ctx.impl().device);
  auto stream = static_cast<cudaStream_t>(ctx.cuda_stream());
  const auto t0 = Clock::now();
  Handles h;
  cuda::cublas_check(cublasCreate(&h.blas), "bures_table_cuda: cublasCreate");
  cuda::cublas_check(cublasSetStream(h.blas, stream), "bures_table_cuda: cublasSetStream");
  const Cusolver& api = cusolver();
  if (!api.error.empty())
    throw BackendUnavailable("bures_table_cuda: " + api.error);
  solver_check(api.create(&h.solver), "cusolverDnCreate");
  solver_check(api.set_stream(h.solver, stream), "cusolverDnSetStream");
  solver_check(api.create_params(&h.params), "cusolverDnCreateParams");

  // 1. Statistics. The matrices as they are (row stride kept), the groups' rows gathered.
  std::vector<Buffer<double>> mats;
  for (const auto& m : groups.matrices) {
    mats.emplace_back(ctx, std::max<std::int64_t>(1, m.rows * m.stride));
    if (m.rows > 0)
      cuda::memcpy_async(mats.back().data(), m.data, sizeof(double) * std::size_t(m.rows * m.stride),
                         0, stream);
  }
  std::vector<std::int64_t> offset(std::size_t(L) + 1, 0), row_start(std::size_t(L) + 1, 0);
  for (std::int64_t u = 0; u < L; ++u) {
    const std::int64_t n = std::int64_t(groups.rows[std::size_t(u)].size());
    offset[std::size_t(u) + 1] = (offset[std::size_t(u)] + n * d + 31) / 32 * 32;  // 256 bytes
    row_start[std::size_t(u) + 1] = row_start[std::size_t(u)] + n;
  }
  std::vector<std::int64_t> all_rows;
  all_rows.reserve(std::size_t(row_start.back()));
  for (const auto& r : groups.rows) all_rows.insert(all_rows.end(), r.begin(), r.end());
  Buffer<std::int64_t> rows_d(ctx, row_start.back());
  cuda::memcpy_async(rows_d.data(), all_rows.data(), sizeof(std::int64_t) * all_rows.size(), 0,
                     stream);
  Buffer<double> R(ctx, offset.back()), means(ctx, L * d), S(ctx, L * d * d), tr(ctx, L);
  cuda::memset_async(S.data(), 0, sizeof(double) * std::size_t(L * d * d), stream);
  for (std::int64_t u = 0; u < L; ++u) {
    const std::int64_t n = std::int64_t(groups.rows[std::size_t(u)].size());
    const int mi = groups.matrix[std::size_t(u)];
    double* Ru = R.data() + offset[std::size_t(u)];
    gather_rows<<<blocks_for(n * d, 256), 256, 0, stream>>>(
        Ru, mats[std::size_t(mi)].data(), groups.matrices[std::size_t(mi)].stride,
        rows_d.data() + row_start[std::size_t(u)], n, d);
    KANTOR_CUDA_CHECK_LAUNCH();
    center_columns<<<blocks_for(d, 128), 128, 0, stream>>>(Ru, means.data() + u * d, n, d);
    KANTOR_CUDA_CHECK_LAUNCH();
    // Row-major n x d residuals = column-major d x n: S_u = R R^T / (n - 1), lower triangle.
    const double alpha = 1.0 / double(n - 1), beta = 0.0;
    cuda::cublas_check(cublasDsyrk(h.blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, int(d), int(n),
                                   &alpha, Ru, int(d), &beta, S.data() + u * d * d, int(d)),
                       "bures_table_cuda: cublasDsyrk");
  }
  mats.clear();
  traces<<<blocks_for(L, 64), 64, 0, stream>>>(S.data(), tr.data(), L, d);
  KANTOR_CUDA_CHECK_LAUNCH();
  // Pairs u < v and which of them are equal Gaussians bitwise.
  std::vector<std::int32_t> pu, pv;
  for (std::int64_t u = 0; u < L; ++u)
    for (std::int64_t v = u + 1; v < L; ++v) {
      pu.push_back(std::int32_t(u));
      pv.push_back(std::int32_t(v));
    }
  const std::int64_t P = std::int64_t(pu.size());
  Buffer<std::int32_t> pu_d(ctx, P), pv_d(ctx, P), same_d(ctx, P);
  std::vector<std::int32_t> same(std::size_t(P), 1);
  cuda::memcpy_async(pu_d.data(), pu.data(), sizeof(std::int32_t) * std::size_t(P), 0, stream);
  cuda::memcpy_async(pv_d.data(), pv.data(), sizeof(std::int32_t) * std::size_t(P), 0, stream);
  cuda::memcpy_async(same_d.data(), same.data(), sizeof(std::int32_t) * std::size_t(P), 0, stream);
  compare_groups<<<dim3(unsigned(std::min<std::int64_t>(64, blocks_for(d + d * d, 256))),
                        unsigned(std::min<std::int64_t>(P, 65535))),
                   256, 0, stream>>>(means.data(), S.data(), pu_d.data(), pv_d.data(),
                                     same_d.data(), P, d);
  KANTOR_CUDA_CHECK_LAUNCH();
  std::vector<double> mean_h(std::size_t(L * d)), tr_h(static_cast<std::size_t>(L));
  cuda::memcpy_async(mean_h.data(), means.data(), sizeof(double) * mean_h.size(), 1, stream);
  cuda::memcpy_async(tr_h.data(), tr.data(), sizeof(double) * tr_h.size(), 1, stream);
  cuda::memcpy_async(same.data(), same_d.data(), sizeof(std::int32_t) * same.size(), 1, stream);
  cuda::synchronize_stream(stream);
  R = Buffer<double>();
  const auto t1 = Clock::now();

  // 2. Square roots: U_u diag(s) in place of the eigenvectors.
  Buffer<double> F(ctx, L * d * d), Wf(ctx, L * d);
  Buffer<int> info(ctx, std::max<std::int64_t>(L, P));
  cuda::memcpy_async(F.data(), S.data(), sizeof(double) * std::size_t(L * d * d), 2, stream);
  S = Buffer<double>();
  auto eig_batched = [&](cusolverEigMode_t jobz, double* A, double* W, std::int64_t batch) {
    std::size_t dev_bytes = 0, host_bytes = 0;
    solver_check(api.syev_batched_size(h.solver, h.params, jobz,
                                                   CUBLAS_FILL_MODE_LOWER, d, CUDA_R_64F, A, d,
                                                   CUDA_R_64F, W, CUDA_R_64F, &dev_bytes,
                                                   &host_bytes, batch),
                 "cusolverDnXsyevBatched_bufferSize");
    Buffer<char> work(ctx, std::int64_t(std::max<std::size_t>(1, dev_bytes)));
    std::vector<char> host_work(std::max<std::size_t>(1, host_bytes));
    solver_check(api.syev_batched(h.solver, h.params, jobz, CUBLAS_FILL_MODE_LOWER, d,
                                        CUDA_R_64F, A, d, CUDA_R_64F, W, CUDA_R_64F, work.data(),
                                        dev_bytes, host_work.data(), host_bytes, info.data(),
                                        batch),
                 "cusolverDnXsyevBatched");
    std::vector<int> info_h(static_cast<std::size_t>(batch));
    cuda::memcpy_async(info_h.data(), info.data(), sizeof(int) * info_h.size(), 1, stream);
    cuda::synchronize_stream(stream);  // also keeps `work` alive until the solver is done
    for (std::int64_t i = 0; i < batch; ++i)
      if (info_h[std::size_t(i)] != 0)
        throw Error("bures_table_cuda: the eigensolver did not converge (matrix " +
                    std::to_string(i) + " of a batch, info " +
                    std::to_string(info_h[std::size_t(i)]) + ")");
  };
  eig_batched(CUSOLVER_EIG_MODE_VECTOR, F.data(), Wf.data(), L);
  scale_factors<<<blocks_for(L * d * d, 256), 256, 0, stream>>>(F.data(), Wf.data(), L, d);
  KANTOR_CUDA_CHECK_LAUNCH();
  cuda::synchronize_stream(stream);
  // Each factor's kept rank (scale_factors' floor, in the same double arithmetic): a pair's
  // trace term drops the eigenvalues of K^T K at or below r 2^-52 mu_max, r = the smaller rank,
  // as the host does on its r x r Gram matrix (trace_term in solvers/otdd.cpp); the d - r
  // further eigenvalues here are zeros of the padding.
  std::vector<double> lam(std::size_t(L * d));
  cuda::memcpy_async(lam.data(), Wf.data(), sizeof(double) * lam.size(), 1, stream);
  cuda::synchronize_stream(stream);
  std::vector<std::int64_t> rank(std::size_t(L), 0);
  for (std::int64_t u = 0; u < L; ++u) {
    const double* w = &lam[std::size_t(u * d)];
    const double floor = double(d) * 0x1p-52 * std::max(0.0, w[d - 1]);
    for (std::int64_t k = 0; k < d; ++k) rank[std::size_t(u)] += w[k] > floor;
  }
  const auto t2 = Clock::now();

  // 3. Pairs in chunks: K = L_u^T L_v, G = K^T K, eigenvalues of G. A chunk's K and G and the
  // eigensolver's workspace (about 4 d^2 doubles a matrix, measured at d = 784) stay within
  // min(8 GiB, a third of the free memory): all 190 pairs of Fashion-MNIST's 20 classes in one
  // batched call on an H200, smaller chunks on a smaller card.
  std::size_t free_bytes = 0, total_bytes = 0;
  KANTOR_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::size_t work_all = 0, host_all = 0;
  solver_check(api.syev_batched_size(h.solver, h.params, CUSOLVER_EIG_MODE_NOVECTOR,
                                                 CUBLAS_FILL_MODE_LOWER, d, CUDA_R_64F, F.data(),
                                                 d, CUDA_R_64F, Wf.data(), CUDA_R_64F, &work_all,
                                                 &host_all, P),
               "cusolverDnXsyevBatched_bufferSize");
  const double per_pair =
      double(d * d) * 8 * 2 + double(d) * 8 + 3 * 8 + double(work_all) / double(P);
  const double budget = std::min(8.0 * (1 << 30), double(free_bytes) / 3);
  std::int64_t chunk = std::clamp<std::int64_t>(std::int64_t(budget / per_pair), 1, P);
  if (groups.max_pairs_per_call > 0) chunk = std::min(chunk, groups.max_pairs_per_call);
  Buffer<double> K(ctx, chunk * d * d), G(ctx, chunk * d * d), Wp(ctx, chunk * d);
  Buffer<const double*> ptrs(ctx, 3 * chunk);
  std::vector<const double*> ptrs_h(std::size_t(3 * chunk));
  std::vector<double> mu(std::size_t(chunk * d));
  for (std::int64_t p0 = 0; p0 < P; p0 += chunk) {
    const std::int64_t c = std::min(chunk, P - p0);
    for (std::int64_t i = 0; i < c; ++i) {
      ptrs_h[std::size_t(i)] = F.data() + std::int64_t(pu[std::size_t(p0 + i)]) * d * d;
      ptrs_h[std::size_t(chunk + i)] = F.data() + std::int64_t(pv[std::size_t(p0 + i)]) * d * d;
      ptrs_h[std::size_t(2 * chunk + i)] = K.data() + i * d * d;
    }
    cuda::memcpy_async(ptrs.data(), ptrs_h.data(), sizeof(const double*) * ptrs_h.size(), 0,
                       stream);
    const double one = 1.0, zero = 0.0;
    cuda::cublas_check(
        cublasDgemmBatched(h.blas, CUBLAS_OP_T, CUBLAS_OP_N, int(d), int(d), int(d), &one,
                           ptrs.data(), int(d), ptrs.data() + chunk, int(d), &zero,
                           const_cast<double* const*>(ptrs.data() + 2 * chunk), int(d), int(c)),
        "bures_table_cuda: cublasDgemmBatched");
    cuda::cublas_check(
        cublasDgemmStridedBatched(h.blas, CUBLAS_OP_T, CUBLAS_OP_N, int(d), int(d), int(d), &one,
                                  K.data(), int(d), d * d, K.data(), int(d), d * d, &zero, G.data(),
                                  int(d), d * d, int(c)),
        "bures_table_cuda: cublasDgemmStridedBatched");
    eig_batched(CUSOLVER_EIG_MODE_NOVECTOR, G.data(), Wp.data(), c);
    cuda::memcpy_async(mu.data(), Wp.data(), sizeof(double) * std::size_t(c * d), 1, stream);
    cuda::synchronize_stream(stream);
    for (std::int64_t i = 0; i < c; ++i) {
      const std::int64_t p = p0 + i, u = pu[std::size_t(p)], v = pv[std::size_t(p)];
      double w = 0;
      if (!same[std::size_t(p)]) {
        const double* m = &mu[std::size_t(i * d)];
        const double r = double(std::min(rank[std::size_t(u)], rank[std::size_t(v)]));
        const double floor = r * 0x1p-52 * std::max(0.0, m[d - 1]);
        double s = 0;
        for (std::int64_t k = 0; k < d; ++k)
          if (m[k] > floor) s += std::sqrt(m[k]);
        double mt = 0;
        for (std::int64_t k = 0; k < d; ++k) {
          const double e = mean_h[std::size_t(u * d + k)] - mean_h[std::size_t(v * d + k)];
          mt += e * e;
        }
        w = std::max(0.0, mt + tr_h[std::size_t(u)] + tr_h[std::size_t(v)] - 2 * s);
      }
      table[std::size_t(u * L + v)] = table[std::size_t(v * L + u)] = w;
    }
  }
  if (seconds) {
    (*seconds)[0] = std::chrono::duration<double>(t1 - t0).count();
    (*seconds)[1] = std::chrono::duration<double>(t2 - t1).count();
    (*seconds)[2] = std::chrono::duration<double>(Clock::now() - t2).count();
  }
  return table;
}

}  // namespace kantor::otdd
