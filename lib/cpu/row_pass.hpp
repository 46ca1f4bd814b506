// The CPU engine's one streaming primitive: a blocked, online log-sum-exp over biased dot-product
// scores, optionally carrying value columns. For every query row i it computes
//
//   s_ij = scale * <q_i, k_j> + bias_j                       (scores, never stored beyond a tile)
//   M_i  = max_j s_ij,  S_i = sum_j exp(s_ij - M_i),  A_ik = sum_j exp(s_ij - M_i) V_jk
//
// so LSE_j s_ij = M_i + log S_i and sum_j exp(s_ij) V_jk = exp(M_i) A_ik. Memory: one
// kRowBlock x kColBlock tile per thread; nothing of size rows x keys exists.
//
// Row blocks are the parallel tasks; each row's reduction runs over the key tiles in a fixed
// order, so results are bitwise identical for any thread count and from run to run.
#pragma once

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <limits>

#include "lib/cpu/thread_pool.hpp"

namespace kantor::cpu {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// Tile shape of the CPU pass: 64 query rows x 256 keys. Measured on this project's 2-core AMD
/// EPYC dev machine (AVX-512), n = m = 20,000: 64 x 256 was within a few percent of 32 x 512 and
/// 128 x 128 for d = 3 and d = 64 (the tile stays in L2).
struct RowPassTile {
  static constexpr std::int64_t kRowBlock = 64;
  static constexpr std::int64_t kColBlock = 256;
};

/// Outputs of row_pass for rows [0, rows): max and sum always, value accumulators when values
/// has columns. Row-wise accumulation across tiles is in double.
struct RowPassResult {
  Vec<double> max;               // M_i (-inf when every key is masked)
  Vec<double> sum;               // S_i
  RowMatrix<double> acc;         // A (rows x K), K = values.cols()
};

/// Runs the pass. `queries` is rows x d, `keys` nk x d, `bias` nk (entries may be -inf: masked
/// keys), `values` nk x K (K may be 0). Blocks of rows run on `pool`.
template <class T>
void row_pass(ThreadPool& pool, const RowMatrix<T>& queries, const RowMatrix<T>& keys,
              const Vec<T>& bias, T scale, const RowMatrix<T>& values, RowPassResult* out) {
  using Tile = RowPassTile;
  const std::int64_t rows = queries.rows(), nk = keys.rows(), K = values.cols();
  out->max.setConstant(rows, -std::numeric_limits<double>::infinity());
  out->sum.setZero(rows);
  out->acc.setZero(rows, K);
  const std::int64_t blocks = (rows + Tile::kRowBlock - 1) / Tile::kRowBlock;
  pool.run(blocks, [&](std::int64_t blk) {
    using Array = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    // Per-thread tile workspace: grows once, then reused by every pass on this thread.
    thread_local Array s_tile;
    thread_local RowMatrix<T> acc_tile;
    const std::int64_t r0 = blk * Tile::kRowBlock;
    const std::int64_t br = std::min(Tile::kRowBlock, rows - r0);
    for (std::int64_t c0 = 0; c0 < nk; c0 += Tile::kColBlock) {
      const std::int64_t bc = std::min(Tile::kColBlock, nk - c0);
      // s = scale * Q_blk K_blk^T + bias  (scores of this tile, in T)
      s_tile.resize(br, bc);
      s_tile.matrix().noalias() =
          queries.middleRows(r0, br) * keys.middleRows(c0, bc).transpose();
      s_tile = s_tile * scale;
      s_tile.rowwise() += bias.segment(c0, bc).transpose().array();
      for (std::int64_t r = 0; r < br; ++r) {
        const T tile_max = s_tile.row(r).maxCoeff();
        const double old_max = out->max[r0 + r];
        const double new_max = std::max(old_max, double(tile_max));
        // Guard: a row whose keys are all masked so far has max -inf; exp(-inf - -inf) would be
        // NaN, so such tiles contribute nothing and leave the row untouched.
        if (new_max == -std::numeric_limits<double>::infinity()) {
          s_tile.row(r).setZero();
          continue;
        }
        const double rescale = std::exp(old_max - new_max);  // 0 when old_max = -inf
        // exp(s - M_new) in T, summed in T over the tile, then accumulated in double.
        s_tile.row(r) = (s_tile.row(r) - T(new_max)).exp();
        out->sum[r0 + r] = out->sum[r0 + r] * rescale + double(s_tile.row(r).sum());
        out->max[r0 + r] = new_max;
        if (K > 0) out->acc.row(r0 + r) *= rescale;
      }
      if (K > 0) {
        acc_tile.noalias() = s_tile.matrix() * values.middleRows(c0, bc);
        out->acc.middleRows(r0, br) += acc_tile.template cast<double>();
      }
    }
  });
}

}  // namespace kantor::cpu
