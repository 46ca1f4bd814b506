// The block lists of the multiscale screen on the device (lib/cuda/screen_lists.hpp). A row tile
// of the host's block_list is the union, over the kept entries of its block row, of the key atoms
// its rows keep, merged into runs of consecutive key atoms. Here one thread takes one (entry,
// tile) pair: its tile's 8 bits of the entry's mask (the OR of the tile's row bytes), the run
// starts among them (a set bit whose key atom below is not kept: the bit below unset, or for bit
// 0 the previous entry of the row not the adjacent block or without its top bit), counted, placed
// by an exclusive scan (tile-major, entries in key order: the host's run order), then each start
// follows its run through the adjacent entries to its end. The g side is the same over the
// transposed pairs, sorted by their new keys.
#include <cuda_runtime.h>

#include <cub/cub.cuh>
#include <string>

#include "kantor/error.hpp"
#include "kantor/screen_bound.hpp"
#include "lib/cuda/check.hpp"
#include "lib/cuda/screen_lists.hpp"

namespace kantor::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid(std::int64_t count) { return unsigned((count + kThreads - 1) / kThreads); }

template <class T>
T* as(const std::shared_ptr<void>& p) {
  return static_cast<T*>(p.get());
}

/// The OR of a mask's 8 bytes (bit b: some row keeps the b-th key atom).
__device__ __forceinline__ unsigned fold8(std::uint64_t v) { return detail::screen_fold_bytes(v); }

/// Bit a set when byte a of the mask is non-zero (the a-th row atom keeps some key atom).
__device__ __forceinline__ unsigned rows8(std::uint64_t v) {
  unsigned r = 0;
#pragma unroll
  for (int a = 0; a < 8; ++a)
    if ((v >> (8 * a)) & 0xFFu) r |= 1u << a;
  return r;
}

/// The 8 x 8 bit matrix transposed (bit 8 a + b to 8 b + a), as the host's.
__device__ __forceinline__ std::uint64_t transpose8(std::uint64_t v) {
  return detail::screen_transpose_bits(v);
}

__global__ void has_kernel(const std::uint64_t* keys, const std::uint64_t* masks,
                           std::int64_t count, unsigned* hx, unsigned* hy) {
  const std::int64_t k = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (k >= count) return;
  const std::uint64_t v = masks[k];
  if (!v) return;
  atomicOr(hx + (keys[k] >> 32), rows8(v));
  atomicOr(hy + (keys[k] & 0xFFFFFFFFull), fold8(v));
}

__global__ void popcount_kernel(const std::uint64_t* masks, std::int64_t count,
                                unsigned long long* total) {
  const std::int64_t k = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  unsigned long long c = k < count ? static_cast<unsigned long long>(__popcll(masks[k])) : 0ull;
  for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
  if ((threadIdx.x & 31) == 0 && c) atomicAdd(total, c);
}

__global__ void transpose_kernel(const std::uint64_t* keys, const std::uint64_t* masks,
                                 std::int64_t count, std::uint64_t* tkeys,
                                 std::uint64_t* tmasks) {
  const std::int64_t k = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (k >= count) return;
  const std::uint64_t key = keys[k];
  tkeys[k] = (key << 32) | (key >> 32);
  tmasks[k] = transpose8(masks[k]);
}

/// ptr[r] = the first entry of block row r (r in [0, blocks]: lower bounds of r << 32).
__global__ void row_ptr_kernel(const std::uint64_t* keys, std::int64_t count, std::int64_t blocks,
                               std::int64_t* ptr) {
  const std::int64_t r = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (r > blocks) return;
  const std::uint64_t want = std::uint64_t(r) << 32;
  std::int64_t lo = 0, hi = count;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < want)
      lo = mid + 1;
    else
      hi = mid;
  }
  ptr[r] = lo;
}

struct ListPass {
  const std::uint64_t* keys;
  const std::uint64_t* masks;
  std::int64_t count;
  const std::int64_t* ptr;  // blocks + 1 entries
  std::int64_t blocks;
  int lkey;   // the key side's block level: 2^lkey key atoms a block
  int per;    // atoms of a row tile (a power of two, at most 2^lrow <= 8)
  int tb;     // row tiles of a block, 2^lrow / per
  std::int64_t rows, keys_n, atom, row_tile, tiles;
  std::uint64_t* cnt;        // tb count + 1 run counts (count_kernel), scanned into ...
  const std::uint64_t* off;  // ... their exclusive scan
  std::int64_t* run_ptr;
  std::int32_t* runs;
  unsigned long long* sums;  // [0] covered point pairs, [1] key tiles of the runs
};

/// Tile s's bits of a mask: the OR of its rows' bytes (rows s per .. s per + per - 1).
__device__ __forceinline__ unsigned tile_bits(std::uint64_t v, int s, int per) {
  const std::uint64_t sel = per >= 8 ? ~0ull : (((1ull << (8 * per)) - 1ull) << (8 * s * per));
  return fold8(v & sel);
}

/// Entry q's run starts in tile s (and its bits), v its slot in the tile-major order.
__device__ __forceinline__ unsigned starts_of(const ListPass& p, std::int64_t q, int s,
                                              unsigned* bits, std::int64_t* v,
                                              std::int64_t* p1) {
  const std::uint64_t key = p.keys[q];
  const std::int64_t I0 = std::int64_t(key >> 32), J0 = std::int64_t(key & 0xFFFFFFFFull);
  const std::int64_t p0 = p.ptr[I0];
  *p1 = p.ptr[I0 + 1];
  *v = std::int64_t(p.tb) * p0 + std::int64_t(s) * (*p1 - p0) + (q - p0);
  *bits = tile_bits(p.masks[q], s, p.per);
  unsigned carry = 0;
  if (q > p0 && std::int64_t(p.keys[q - 1] & 0xFFFFFFFFull) + 1 == J0 &&
      ((tile_bits(p.masks[q - 1], s, p.per) >> ((1 << p.lkey) - 1)) & 1u))
    carry = 1;
  return *bits & ~((*bits << 1) | carry);
}

/// This thread's (entry q, tile s) pair; false past the last.
__device__ __forceinline__ bool slot_of(const ListPass& p, std::int64_t* q, int* s) {
  const std::int64_t k = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (k >= p.count * p.tb) return false;
  *q = k / p.tb;
  *s = int(k % p.tb);
  return true;
}

__global__ void count_kernel(ListPass p) {
  std::int64_t q, v, p1;
  int s;
  unsigned bits;
  if (!slot_of(p, &q, &s)) return;
  const unsigned st = starts_of(p, q, s, &bits, &v, &p1);
  p.cnt[v] = std::uint64_t(__popc(st));
}

__global__ void write_kernel(ListPass p) {
  std::int64_t q, v, p1;
  int s;
  unsigned bits;
  if (!slot_of(p, &q, &s)) return;
  unsigned st = starts_of(p, q, s, &bits, &v, &p1);
  if (!st) return;
  const int ky = 1 << p.lkey;
  const std::int64_t J0 = std::int64_t(p.keys[q] & 0xFFFFFFFFull);
  const std::int64_t I0 = std::int64_t(p.keys[q] >> 32);
  std::int64_t at = std::int64_t(p.off[v]);
  unsigned long long key_points = 0, key_tiles = 0;
  for (; st; st &= st - 1) {
    const int b = __ffs(st) - 1;
    const std::int64_t begin = (J0 << p.lkey) + b;
    int e = b;
    while (e < ky && ((bits >> e) & 1u)) ++e;
    std::int64_t end = (J0 << p.lkey) + e;
    if (e == ky) {
      // To the block's top: on through the adjacent blocks' entries of this row.
      for (std::int64_t r = q + 1; r < p1; ++r) {
        if (std::int64_t(p.keys[r] & 0xFFFFFFFFull) != (end >> p.lkey)) break;
        const unsigned nb = tile_bits(p.masks[r], s, p.per);
        const int ones = __ffs(~nb) - 1;  // its trailing ones (nb < 256: ~nb has a set bit)
        end += ones < ky ? ones : ky;
        if (ones < ky) break;
      }
    }
    p.runs[2 * at] = std::int32_t(begin);
    p.runs[2 * at + 1] = std::int32_t(end);
    ++at;
    const std::int64_t hi = end * p.atom < p.keys_n ? end * p.atom : p.keys_n;
    key_points += static_cast<unsigned long long>(hi - begin * p.atom);
    key_tiles += static_cast<unsigned long long>(end - begin);
  }
  const std::int64_t t = I0 * p.tb + s;
  const std::int64_t r0 = t * p.row_tile;
  const std::int64_t r1 = r0 + p.row_tile < p.rows ? r0 + p.row_tile : p.rows;
  atomicAdd(p.sums, key_points * static_cast<unsigned long long>(r1 - r0));
  atomicAdd(p.sums + 1, key_tiles);
}

__global__ void run_ptr_kernel(ListPass p) {
  const std::int64_t t = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (t > p.tiles) return;
  const std::int64_t I0 = t / p.tb;
  const int s = int(t % p.tb);
  std::int64_t v = std::int64_t(p.tb) * p.count;
  if (I0 < p.blocks) {
    const std::int64_t p0 = p.ptr[I0];
    v = std::int64_t(p.tb) * p0 + std::int64_t(s) * (p.ptr[I0 + 1] - p0);
  }
  p.run_ptr[t] = std::int64_t(p.off[v]);
}

struct BitOr {
  __device__ __forceinline__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const {
    return a | b;
  }
};

/// Sorts (keys, masks) of `count` entries by key into new arrays.
void sort_pairs(const std::uint64_t* keys, const std::uint64_t* masks, std::int64_t count,
                const DeviceAlloc& alloc, cudaStream_t st, std::shared_ptr<void>* skeys,
                std::shared_ptr<void>* smasks) {
  *skeys = alloc(sizeof(std::uint64_t) * std::size_t(count));
  *smasks = alloc(sizeof(std::uint64_t) * std::size_t(count));
  std::size_t temp_bytes = 0;
  KANTOR_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys,
                                                  as<std::uint64_t>(*skeys), masks,
                                                  as<std::uint64_t>(*smasks), count, 0, 64, st));
  const auto temp = alloc(std::max<std::size_t>(temp_bytes, 1));
  KANTOR_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, keys,
                                                  as<std::uint64_t>(*skeys), masks,
                                                  as<std::uint64_t>(*smasks), count, 0, 64, st));
}

}  // namespace

bool kept_lists_apply(int bx, int by, std::int64_t atom, std::int64_t row_tile) {
  if (atom <= 0 || row_tile <= 0 || row_tile % atom != 0) return false;
  const std::int64_t per = row_tile / atom;
  if (per & (per - 1)) return false;
  return per <= 8 && per <= (std::int64_t(1) << bx) && per <= (std::int64_t(1) << by);
}

void kept_atoms(const KeptPairs& p, std::int64_t x_blocks, std::int64_t y_blocks,
                const DeviceAlloc& alloc, void* stream, std::vector<std::uint32_t>* has_x,
                std::vector<std::uint32_t>* has_y) {
  auto st = static_cast<cudaStream_t>(stream);
  has_x->assign(std::size_t(x_blocks), 0u);
  has_y->assign(std::size_t(y_blocks), 0u);
  if (p.count == 0 || x_blocks == 0 || y_blocks == 0) return;
  const auto hx = alloc(sizeof(unsigned) * std::size_t(x_blocks));
  const auto hy = alloc(sizeof(unsigned) * std::size_t(y_blocks));
  KANTOR_CUDA_TRY(cudaMemsetAsync(hx.get(), 0, sizeof(unsigned) * std::size_t(x_blocks), st));
  KANTOR_CUDA_TRY(cudaMemsetAsync(hy.get(), 0, sizeof(unsigned) * std::size_t(y_blocks), st));
  has_kernel<<<grid(p.count), kThreads, 0, st>>>(as<std::uint64_t>(p.keys),
                                                 as<std::uint64_t>(p.masks), p.count,
                                                 as<unsigned>(hx), as<unsigned>(hy));
  KANTOR_CUDA_CHECK_LAUNCH();
  KANTOR_CUDA_TRY(cudaMemcpyAsync(has_x->data(), hx.get(), sizeof(unsigned) * has_x->size(),
                                  cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaMemcpyAsync(has_y->data(), hy.get(), sizeof(unsigned) * has_y->size(),
                                  cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaStreamSynchronize(st));
}

void add_atom_pairs(KeptPairs* p, const std::vector<std::int64_t>& extra,
                    const DeviceAlloc& alloc, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (extra.size() % 2 != 0)
    throw InvalidArgument("add_atom_pairs: the extra pairs need 2 entries each, got " +
                          std::to_string(extra.size()));
  const std::int64_t K = std::int64_t(extra.size() / 2);
  if (K == 0) return;
  std::vector<std::uint64_t> hk(static_cast<std::size_t>(K)), hm(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k) {
    const std::int64_t I = extra[std::size_t(2 * k)], J = extra[std::size_t(2 * k + 1)];
    if (I < 0 || J < 0)
      throw InvalidArgument("add_atom_pairs: a negative atom in pair " + std::to_string(k));
    const std::int64_t I0 = I >> p->bx, J0 = J >> p->by;
    hk[std::size_t(k)] = (std::uint64_t(I0) << 32) | std::uint64_t(J0);
    hm[std::size_t(k)] = std::uint64_t(1) << (8 * (I - (I0 << p->bx)) + (J - (J0 << p->by)));
  }
  const std::int64_t total = p->count + K;
  const auto keys = alloc(sizeof(std::uint64_t) * std::size_t(total));
  const auto masks = alloc(sizeof(std::uint64_t) * std::size_t(total));
  if (p->count > 0) {
    KANTOR_CUDA_TRY(cudaMemcpyAsync(keys.get(), p->keys.get(), sizeof(std::uint64_t) * p->count,
                                    cudaMemcpyDeviceToDevice, st));
    KANTOR_CUDA_TRY(cudaMemcpyAsync(masks.get(), p->masks.get(), sizeof(std::uint64_t) * p->count,
                                    cudaMemcpyDeviceToDevice, st));
  }
  KANTOR_CUDA_TRY(cudaMemcpyAsync(as<std::uint64_t>(keys) + p->count, hk.data(),
                                  sizeof(std::uint64_t) * K, cudaMemcpyHostToDevice, st));
  KANTOR_CUDA_TRY(cudaMemcpyAsync(as<std::uint64_t>(masks) + p->count, hm.data(),
                                  sizeof(std::uint64_t) * K, cudaMemcpyHostToDevice, st));
  std::shared_ptr<void> skeys, smasks;
  sort_pairs(as<std::uint64_t>(keys), as<std::uint64_t>(masks), total, alloc, st, &skeys, &smasks);
  // Equal keys (a pair's block already kept) into one entry, their masks OR-ed.
  const auto ukeys = alloc(sizeof(std::uint64_t) * std::size_t(total));
  const auto umasks = alloc(sizeof(std::uint64_t) * std::size_t(total));
  const auto runs = alloc(sizeof(std::int64_t));
  std::size_t temp_bytes = 0;
  KANTOR_CUDA_TRY(cub::DeviceReduce::ReduceByKey(
      nullptr, temp_bytes, as<std::uint64_t>(skeys), as<std::uint64_t>(ukeys),
      as<std::uint64_t>(smasks), as<std::uint64_t>(umasks), as<std::int64_t>(runs), BitOr(),
      total, st));
  {
    const auto temp = alloc(std::max<std::size_t>(temp_bytes, 1));
    KANTOR_CUDA_TRY(cub::DeviceReduce::ReduceByKey(
        temp.get(), temp_bytes, as<std::uint64_t>(skeys), as<std::uint64_t>(ukeys),
        as<std::uint64_t>(smasks), as<std::uint64_t>(umasks), as<std::int64_t>(runs), BitOr(),
        total, st));
  }
  std::int64_t unique = 0;
  KANTOR_CUDA_TRY(
      cudaMemcpyAsync(&unique, runs.get(), sizeof(unique), cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaStreamSynchronize(st));  // the host arrays go out of scope
  p->keys = ukeys;
  p->masks = umasks;
  p->count = unique;
}

std::int64_t kept_atom_pairs(const KeptPairs& p, const DeviceAlloc& alloc, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (p.count == 0) return 0;
  const auto total = alloc(sizeof(unsigned long long));
  KANTOR_CUDA_TRY(cudaMemsetAsync(total.get(), 0, sizeof(unsigned long long), st));
  popcount_kernel<<<grid(p.count), kThreads, 0, st>>>(as<std::uint64_t>(p.masks), p.count,
                                                      as<unsigned long long>(total));
  KANTOR_CUDA_CHECK_LAUNCH();
  unsigned long long h = 0;
  KANTOR_CUDA_TRY(cudaMemcpyAsync(&h, total.get(), sizeof(h), cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaStreamSynchronize(st));
  return std::int64_t(h);
}

void kept_block_list(const KeptPairs& p, int side, std::int64_t n, std::int64_t m,
                     std::int64_t atom, std::int64_t row_tile, const DeviceAlloc& alloc,
                     void* stream, DeviceBlockList* out) {
  auto st = static_cast<cudaStream_t>(stream);
  if (side != 0 && side != 1)
    throw InvalidArgument("kept_block_list: side must be 0 or 1, got " + std::to_string(side));
  if (!kept_lists_apply(p.bx, p.by, atom, row_tile))
    throw InvalidArgument("kept_block_list: row tiles of " + std::to_string(row_tile) +
                          " points over atoms of " + std::to_string(atom) +
                          " do not fit blocks of levels (" + std::to_string(p.bx) + ", " +
                          std::to_string(p.by) + ")");
  const int lrow = side == 0 ? p.bx : p.by, lkey = side == 0 ? p.by : p.bx;
  const std::int64_t rows = side == 0 ? n : m, keys_n = side == 0 ? m : n;
  const std::int64_t row_atoms = (rows + atom - 1) / atom;
  const std::int64_t blocks = (row_atoms + (std::int64_t(1) << lrow) - 1) >> lrow;
  *out = DeviceBlockList();
  out->tiles = (rows + row_tile - 1) / row_tile;
  ListPass lp{};
  lp.count = p.count;
  lp.blocks = blocks;
  lp.lkey = lkey;
  lp.per = int(row_tile / atom);
  lp.tb = (1 << lrow) / lp.per;
  lp.rows = rows;
  lp.keys_n = keys_n;
  lp.atom = atom;
  lp.row_tile = row_tile;
  lp.tiles = out->tiles;
  std::shared_ptr<void> tkeys, tmasks;  // side 1: the transposed pairs, sorted
  if (side == 1 && p.count > 0) {
    const auto k = alloc(sizeof(std::uint64_t) * std::size_t(p.count));
    const auto v = alloc(sizeof(std::uint64_t) * std::size_t(p.count));
    transpose_kernel<<<grid(p.count), kThreads, 0, st>>>(
        as<std::uint64_t>(p.keys), as<std::uint64_t>(p.masks), p.count, as<std::uint64_t>(k),
        as<std::uint64_t>(v));
    KANTOR_CUDA_CHECK_LAUNCH();
    sort_pairs(as<std::uint64_t>(k), as<std::uint64_t>(v), p.count, alloc, st, &tkeys, &tmasks);
  }
  lp.keys = side == 0 ? as<std::uint64_t>(p.keys) : as<std::uint64_t>(tkeys);
  lp.masks = side == 0 ? as<std::uint64_t>(p.masks) : as<std::uint64_t>(tmasks);
  const auto ptr = alloc(sizeof(std::int64_t) * std::size_t(blocks + 1));
  lp.ptr = as<std::int64_t>(ptr);
  row_ptr_kernel<<<grid(blocks + 1), kThreads, 0, st>>>(lp.keys, p.count, blocks,
                                                         as<std::int64_t>(ptr));
  KANTOR_CUDA_CHECK_LAUNCH();
  const std::int64_t slots = std::int64_t(lp.tb) * p.count;
  const auto cnt = alloc(sizeof(std::uint64_t) * std::size_t(slots + 1));
  const auto off = alloc(sizeof(std::uint64_t) * std::size_t(slots + 1));
  lp.cnt = as<std::uint64_t>(cnt);
  lp.off = as<std::uint64_t>(off);
  KANTOR_CUDA_TRY(cudaMemsetAsync(as<std::uint64_t>(cnt) + slots, 0, sizeof(std::uint64_t), st));
  if (slots > 0) {
    count_kernel<<<grid(slots), kThreads, 0, st>>>(lp);
    KANTOR_CUDA_CHECK_LAUNCH();
  }
  std::size_t temp_bytes = 0;
  KANTOR_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, lp.cnt, as<std::uint64_t>(off),
                                                slots + 1, st));
  {
    const auto temp = alloc(std::max<std::size_t>(temp_bytes, 1));
    KANTOR_CUDA_TRY(cub::DeviceScan::ExclusiveSum(temp.get(), temp_bytes, lp.cnt,
                                                  as<std::uint64_t>(off), slots + 1, st));
  }
  std::uint64_t total = 0;
  KANTOR_CUDA_TRY(cudaMemcpyAsync(&total, as<std::uint64_t>(off) + slots, sizeof(total),
                                  cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaStreamSynchronize(st));
  out->run_count = std::int64_t(total);
  out->run_ptr = alloc(sizeof(std::int64_t) * std::size_t(out->tiles + 1));
  out->runs = alloc(sizeof(std::int32_t) * std::size_t(std::max<std::int64_t>(2 * total, 1)));
  const auto sums = alloc(2 * sizeof(unsigned long long));
  KANTOR_CUDA_TRY(cudaMemsetAsync(sums.get(), 0, 2 * sizeof(unsigned long long), st));
  lp.run_ptr = as<std::int64_t>(out->run_ptr);
  lp.runs = as<std::int32_t>(out->runs);
  lp.sums = as<unsigned long long>(sums);
  if (slots > 0) {
    write_kernel<<<grid(slots), kThreads, 0, st>>>(lp);
    KANTOR_CUDA_CHECK_LAUNCH();
  }
  run_ptr_kernel<<<grid(out->tiles + 1), kThreads, 0, st>>>(lp);
  KANTOR_CUDA_CHECK_LAUNCH();
  unsigned long long h[2] = {0, 0};
  KANTOR_CUDA_TRY(cudaMemcpyAsync(h, sums.get(), sizeof(h), cudaMemcpyDeviceToHost, st));
  KANTOR_CUDA_TRY(cudaStreamSynchronize(st));
  out->covered = h[0];
  out->key_tiles = h[1];
}

}  // namespace kantor::cuda
