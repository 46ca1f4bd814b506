// The CPU row pass (declared in row_pass.hpp): scheduling, policies and the Eigen parts, compiled
// with the library's CPU flags (KANTOR_MARCH) and instantiated for float and double. The vector
// loops of the LSE pass live in row_pass_kernels.inc, compiled once per ISA path
// (row_pass_isa_*.cpp) and picked here at run time.
//
// LSE pass (no values). Tasks are blocks of query rows (dense: 32 rows for d <= 8, 256 with a
// pair term or above; with a block list: the row tiles, split into blocks of at most those
// sizes). A task walks its key ranges (all keys, or its row tile's runs clipped to nk, in the
// order given) in chunks of at most 1024 (d <= 8) or 512 buffer entries; a chunk gathers the
// segments of consecutive ranges, each padded to whole vectors (the pad lanes score -inf), so
// short runs do not pay a fold each. Per chunk and row:
//   sweep 1: s_j = <q'_i, k_j> + b'_j with q' = scale log2(e) q, b' = log2(e) (bias [+ pair]),
//            stored in an L1-resident buffer while a lane-wise max runs alongside (direct FMA
//            loops over keys stored transposed for d <= 8; above, the block's scores of the chunk
//            from a register-blocked product over key panels packed per chunk);
//   sweep 2: sum_j exp2_nonpos(s_j - M'), lane-wise, then reduced in double into the row's
//            running (M', S) with the rescale exp2(M'_old - M'_new).
// Pair term: b'_j is read through a per-row pointer. The pass builds one biased key array per
// class present in the rows, log2(e) (bias_j + pair(c, l_j)), once (when they fit in
// RowPassTuning::pair_bias_bytes), or per task and chunk for the classes of the task's rows;
// the values are the same either way. The kernels visit a block's rows class by class
// (prefetching the next class's array), and the direct path then uses blocks of 256 rows.
//
// The value pass (K > 0) keeps the Eigen-expression implementation (costs, P v, the barycentric
// map; not the iterations), with the same tasks and key ranges and the pair term added per row.
#include "lib/cpu/row_pass.hpp"

#include <algorithm>
#include <cmath>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "lib/cpu/row_pass_isa.hpp"

namespace kantor::cpu {
namespace {

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLog2e = 1.44269504088896340736;
// Direct path with a pair term: larger blocks, so that each class's biased chunk is fetched once
// per block for more rows (measured at n = m = 20,000, d = 3, 100 classes: 256 rows 1.28x the
// plain pass, 512 1.25x, 1024 1.23x; 10 classes 1.01x at any size).
constexpr std::int64_t kPairDirectRowBlock = 256;
constexpr std::int64_t kMaxRowBlock = 256;

template <class T>
constexpr T ninf() {
  return -std::numeric_limits<T>::infinity();
}

inline std::int64_t round_up(std::int64_t x, std::int64_t w) { return (x + w - 1) / w * w; }
inline std::int64_t ceil_div(std::int64_t x, std::int64_t w) { return (x + w - 1) / w; }

// ---- ISA paths ---------------------------------------------------------------------------------

bool cpu_has_avx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();  // the checks include the OS's support of the zmm state (XCR0)
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

template <class T>
const detail::IsaKernels<T>* compiled_kernels(RowPassIsa isa) {
  constexpr bool f = std::is_same<T, float>::value;
  switch (isa) {
    case RowPassIsa::kBaseline:
      if constexpr (f) return detail::baseline_kernels_f32();
      else return detail::baseline_kernels_f64();
    case RowPassIsa::kAvx2:
      if constexpr (f) return detail::avx2_kernels_f32();
      else return detail::avx2_kernels_f64();
    case RowPassIsa::kAvx512:
      if constexpr (f) return detail::avx512_kernels_f32();
      else return detail::avx512_kernels_f64();
    default:
      return nullptr;
  }
}

template <class T>
const detail::IsaKernels<T>& kernels_for(RowPassIsa isa) {
  if (isa == RowPassIsa::kAuto) isa = row_pass_best_isa();
  if (!row_pass_isa_supported(isa))
    throw std::invalid_argument(std::string("row_pass: ISA path ") + to_string(isa) +
                                " is not available on this machine or build");
  return *compiled_kernels<T>(isa);
}

// ---- buffers and schedules ---------------------------------------------------------------------

// A 64-byte aligned array that only grows (zero-filled when it does).
template <class T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer() { release(); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  T* ensure(std::int64_t n) {
    if (std::size_t(n) > cap_) {
      release();
      p_ = static_cast<T*>(::operator new(std::size_t(n) * sizeof(T), std::align_val_t(64)));
      cap_ = std::size_t(n);
      std::fill(p_, p_ + cap_, T(0));
    }
    return p_;
  }
  T* data() { return p_; }

 private:
  void release() {
    if (p_) ::operator delete(p_, std::align_val_t(64));
    p_ = nullptr;
    cap_ = 0;
  }
  T* p_ = nullptr;
  std::size_t cap_ = 0;
};

// A task: rows [r0, r0 + br) of row tile `tile` (-1: no block list, every key).
struct Task {
  std::int64_t r0, br, tile;
};

template <class T>
bool has_block_list(const RowPassPolicy<T>& p) {
  return p.run_ptr != nullptr;
}
template <class T>
bool has_pair_term(const RowPassPolicy<T>& p) {
  return p.pair_table != nullptr && p.classes > 0 && p.row_labels != nullptr &&
         p.key_labels != nullptr;
}

template <class T>
std::vector<Task> make_tasks(std::int64_t rows, std::int64_t block, const RowPassPolicy<T>& p) {
  std::vector<Task> tasks;
  if (!has_block_list(p)) {
    for (std::int64_t r0 = 0; r0 < rows; r0 += block)
      tasks.push_back({r0, std::min(block, rows - r0), -1});
    return tasks;
  }
  const std::int64_t tiles = ceil_div(rows, p.row_tile);
  for (std::int64_t t = 0; t < tiles; ++t) {
    if (p.run_ptr[t + 1] <= p.run_ptr[t]) continue;  // no runs: the row keeps max -inf, sum 0
    const std::int64_t t0 = t * p.row_tile, t1 = std::min(rows, t0 + p.row_tile);
    for (std::int64_t r0 = t0; r0 < t1; r0 += block) tasks.push_back({r0, std::min(block, t1 - r0), t});
  }
  return tasks;
}

// The key ranges [k0, k1) of a task, as pairs: all keys, or the runs of its row tile clipped to
// nk (empty ones dropped), in the order given.
template <class T>
void key_ranges(const RowPassPolicy<T>& p, std::int64_t tile, std::int64_t nk,
                std::vector<std::int64_t>* out) {
  out->clear();
  if (tile < 0) {
    if (nk > 0) out->insert(out->end(), {std::int64_t(0), nk});
    return;
  }
  const std::int64_t key_tiles = ceil_div(nk, p.key_tile);
  for (std::int64_t q = p.run_ptr[tile]; q < p.run_ptr[tile + 1]; ++q) {
    const std::int64_t b = std::clamp<std::int64_t>(p.runs[2 * q], 0, key_tiles);
    const std::int64_t e = std::min<std::int64_t>(p.runs[2 * q + 1], key_tiles);
    if (b >= e) continue;
    out->insert(out->end(), {b * p.key_tile, std::min(e * p.key_tile, nk)});
  }
}

// Cuts the ranges into chunks of at most `cap` buffer entries (cap a multiple of w), each
// segment padded to whole vectors of w lanes, and calls fn(segs, nsegs, chunk_len) per chunk.
// One range [0, nk) gives the chunks [0, cap), [cap, 2 cap), ...; segment biases are indexed by
// key (bo = k0).
template <class Fn>
void for_each_chunk(const std::vector<std::int64_t>& ranges, std::int64_t cap, std::int64_t w,
                    std::vector<detail::KeySegment>* segs, Fn&& fn) {
  segs->clear();
  std::int64_t off = 0;
  for (std::size_t i = 0; i + 1 < ranges.size(); i += 2) {
    std::int64_t k0 = ranges[i];
    const std::int64_t k1 = ranges[i + 1];
    while (k0 < k1) {
      const std::int64_t len = std::min(k1 - k0, cap - off);
      segs->push_back({k0, len, off, k0});
      off += round_up(len, w);
      k0 += len;
      if (off >= cap) {
        fn(segs->data(), std::int64_t(segs->size()), off);
        segs->clear();
        off = 0;
      }
    }
  }
  if (off > 0) fn(segs->data(), std::int64_t(segs->size()), off);
}

// The distinct classes of rows [r0, r0 + br) (sorted) and each row's index among them.
inline void block_classes(const std::int32_t* labels, std::int64_t r0, std::int64_t br,
                          std::vector<std::int32_t>* classes, std::int32_t* row_slot) {
  classes->assign(labels + r0, labels + r0 + br);
  std::sort(classes->begin(), classes->end());
  classes->erase(std::unique(classes->begin(), classes->end()), classes->end());
  for (std::int64_t r = 0; r < br; ++r)
    row_slot[r] = std::int32_t(std::lower_bound(classes->begin(), classes->end(), labels[r0 + r]) -
                               classes->begin());
}

// log2(e) (bias + pair): the exp2-domain bias of one key for one row class (-inf stays -inf).
template <class T>
inline T lse_bias(T b, T pair) {
  return (b + pair) * T(kLog2e);
}

// ---- the LSE pass ------------------------------------------------------------------------------

template <class T>
struct LseWork {  // per thread, reused by every pass on that thread
  AlignedBuffer<T> s, tile, panel, qsplat, local;
  std::vector<std::int64_t> ranges;
  std::vector<detail::KeySegment> segs;
  std::vector<std::int32_t> classes;
};

template <class T>
void lse_pass(const detail::IsaKernels<T>& kern, const RowPassTuning& tuning, ThreadPool& pool,
              MatrixRef<T> queries, MatrixRef<T> keys, const T* bias, T scale,
              const RowPassPolicy<T>& pol, RowPassResult* out) {
  using Tile = RowPassTile;
  const std::int64_t rows = queries.rows, nk = keys.rows, d = queries.cols;
  out->max.assign(std::size_t(rows), -std::numeric_limits<double>::infinity());
  out->sum.assign(std::size_t(rows), 0.0);
  out->accum.clear();
  out->K = 0;
  if (rows == 0 || nk == 0) return;
  const std::int64_t w = kern.lanes;
  // Key-indexed arrays run one widest vector past nk: a segment's last vector may start at any
  // key and reads whole vectors (its pad lanes are masked).
  constexpr std::int64_t kPad = 64 / std::int64_t(sizeof(T));
  const std::int64_t ldk = round_up(nk, kPad) + kPad;
  const Eigen::Map<const RowMatrix<T>> qm(queries.data, rows, d);
  // exp2 domain: s' = (scale log2 e) <q, k> + log2(e) bias (-inf stays -inf).
  const RowMatrix<T> q2 = qm * T(double(scale) * kLog2e);
  AlignedBuffer<T> b2_buf;
  T* b2 = b2_buf.ensure(ldk);
  for (std::int64_t j = 0; j < ldk; ++j) b2[j] = j < nk ? bias[j] * T(kLog2e) : ninf<T>();
  const bool direct = d <= Tile::kMaxDirectDim;
  AlignedBuffer<T> kt_buf;  // d x ldk: one contiguous array per coordinate, zero padding
  T* kt = kt_buf.ensure(d * ldk);
  for (std::int64_t j = 0; j < nk; ++j)
    for (std::int64_t c = 0; c < d; ++c) kt[c * ldk + j] = keys.data[j * d + c];

  // Pair term: slot[c] = index of class c among the classes of the rows.
  const bool pair = has_pair_term(pol);
  bool pair_global = false;
  std::vector<std::int32_t> slot;
  AlignedBuffer<T> pair_buf;
  const T* pair_arrays = nullptr;
  if (pair) {
    slot.assign(std::size_t(pol.classes), -1);
    std::vector<std::int32_t> present;
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int32_t c = pol.row_labels[i];
      if (slot[std::size_t(c)] < 0) {
        slot[std::size_t(c)] = std::int32_t(present.size());
        present.push_back(c);
      }
    }
    const double bytes = double(present.size()) * double(ldk) * double(sizeof(T));
    pair_global = bytes <= double(tuning.pair_bias_bytes);
    if (pair_global) {
      T* arrays = pair_buf.ensure(std::int64_t(present.size()) * ldk);
      pool.run(std::int64_t(present.size()), [&](std::int64_t u) {
        const T* prow = pol.pair_table + std::int64_t(present[std::size_t(u)]) * pol.classes;
        T* dst = arrays + u * ldk;
        for (std::int64_t j = 0; j < nk; ++j) dst[j] = lse_bias(bias[j], prow[pol.key_labels[j]]);
        for (std::int64_t j = nk; j < ldk; ++j) dst[j] = ninf<T>();
      });
      pair_arrays = arrays;
    }
  }
  const bool pair_local = pair && !pair_global;

  // With a pair term the direct path takes blocks of 256 rows and visits them class by class:
  // each class's biased chunk is then fetched once per block and reused from L1 (the row block
  // does not change a direct row's arithmetic).
  const std::int64_t row_block =
      !direct ? Tile::kGemmRowBlock : pair ? kPairDirectRowBlock : Tile::kDirectRowBlock;
  const std::int64_t cap = direct ? Tile::kDirectColBlock : Tile::kGemmColBlock;
  static_assert(Tile::kDirectColBlock % 16 == 0 && Tile::kGemmColBlock % 16 == 0,
                "chunks must hold whole vectors");
  static_assert(Tile::kGemmRowBlock <= kMaxRowBlock && Tile::kDirectRowBlock <= kMaxRowBlock,
                "row blocks fit the per-task arrays");
  const std::vector<Task> tasks = make_tasks(rows, row_block, pol);

  pool.run(std::int64_t(tasks.size()), [&](std::int64_t ti) {
    thread_local LseWork<T> work;
    const Task task = tasks[std::size_t(ti)];
    const std::int64_t r0 = task.r0, br = task.br;
    T row_max[kMaxRowBlock];
    double row_sum[kMaxRowBlock];
    const T* row_bias[kMaxRowBlock];
    std::int32_t row_slot[kMaxRowBlock];
    for (std::int64_t r = 0; r < br; ++r) {
      row_max[r] = ninf<T>();
      row_sum[r] = 0;
      row_bias[r] = b2;
    }
    T* local = nullptr;
    std::int32_t order[kMaxRowBlock];
    if (pair) {
      block_classes(pol.row_labels, r0, br, &work.classes, row_slot);
      for (std::int64_t r = 0; r < br; ++r) order[r] = std::int32_t(r);
      std::stable_sort(order, order + br,
                       [&](std::int32_t x, std::int32_t y) { return row_slot[x] < row_slot[y]; });
    }
    if (pair_global) {
      for (std::int64_t r = 0; r < br; ++r)
        row_bias[r] = pair_arrays + std::int64_t(slot[std::size_t(pol.row_labels[r0 + r])]) * ldk;
    } else if (pair_local) {
      local = work.local.ensure(std::int64_t(work.classes.size()) * cap);
      for (std::int64_t r = 0; r < br; ++r) row_bias[r] = local + std::int64_t(row_slot[r]) * cap;
    }
    T* s = direct ? work.s.ensure(cap) : nullptr;
    T* tile = direct ? nullptr : work.tile.ensure(Tile::kGemmRowBlock * cap);
    T* panel = direct ? nullptr : work.panel.ensure(2 * d * cap);
    T* qsplat = direct ? nullptr : work.qsplat.ensure(8 * d * kPad);
    key_ranges(pol, task.tile, nk, &work.ranges);
    for_each_chunk(work.ranges, cap, w, &work.segs,
                   [&](detail::KeySegment* sg, std::int64_t nsg, std::int64_t len) {
      if (pair_local) {  // this chunk's biases for the block's classes, at the buffer offsets
        for (std::size_t u = 0; u < work.classes.size(); ++u) {
          const T* prow = pol.pair_table + std::int64_t(work.classes[u]) * pol.classes;
          T* dst = local + std::int64_t(u) * cap;
          for (std::int64_t g = 0; g < nsg; ++g) {
            const std::int64_t k0 = sg[g].k0, n = sg[g].len, o = sg[g].off;
            for (std::int64_t j = 0; j < n; ++j)
              dst[o + j] = lse_bias(bias[k0 + j], prow[pol.key_labels[k0 + j]]);
            for (std::int64_t j = n; j < round_up(n, w); ++j) dst[o + j] = ninf<T>();
          }
        }
        for (std::int64_t g = 0; g < nsg; ++g) sg[g].bo = sg[g].off;
      }
      if (direct) {
        detail::DirectChunk<T> c;
        c.q = q2.data() + r0 * d;
        c.d = d;
        c.br = br;
        c.kt = kt;
        c.ldk = ldk;
        c.row_bias = row_bias;
        c.order = pair ? order : nullptr;
        c.segs = sg;
        c.nsegs = nsg;
        c.chunk_len = len;
        c.s = s;
        c.row_max = row_max;
        c.row_sum = row_sum;
        kern.direct(c);
      } else {
        detail::GemmChunk<T> c;
        c.q = q2.data() + r0 * d;
        c.d = d;
        c.kt = kt;
        c.ldk = ldk;
        c.panel = panel;
        c.qsplat = qsplat;
        c.tile = tile;
        c.ld = cap;
        c.br = br;
        c.row_bias = row_bias;
        c.order = pair ? order : nullptr;
        c.segs = sg;
        c.nsegs = nsg;
        c.chunk_len = len;
        c.row_max = row_max;
        c.row_sum = row_sum;
        kern.gemm(c);
      }
    });
    for (std::int64_t r = 0; r < br; ++r) {
      out->max[std::size_t(r0 + r)] = double(row_max[r]) * kLn2;
      out->sum[std::size_t(r0 + r)] = row_sum[r];
    }
  });
}

// ---- the value pass ----------------------------------------------------------------------------

// With value columns: scores from a GEMM tile, exp in T, A from a second GEMM.
template <class T>
void value_pass(ThreadPool& pool, MatrixRef<T> queries, MatrixRef<T> keys, const T* bias_ptr,
                T scale, MatrixRef<T> values_ref, const RowPassPolicy<T>& pol,
                RowPassResult* out) {
  using Tile = RowPassTile;
  const std::int64_t rows = queries.rows, nk = keys.rows, d = queries.cols, K = values_ref.cols;
  out->max.assign(std::size_t(rows), -std::numeric_limits<double>::infinity());
  out->sum.assign(std::size_t(rows), 0.0);
  out->accum.assign(std::size_t(rows * K), 0.0);
  out->K = K;
  if (rows == 0 || nk == 0) return;
  const Eigen::Map<const RowMatrix<T>> q(queries.data, rows, d), k(keys.data, nk, d);
  const Eigen::Map<const RowMatrix<T>> values(values_ref.data, nk, K);
  const Eigen::Map<const Vec<T>> bias(bias_ptr, nk);
  Eigen::Map<Vec<double>> omax(out->max.data(), rows), osum(out->sum.data(), rows);
  Eigen::Map<RowMatrix<double>> oacc(out->accum.data(), rows, K);
  const bool pair = has_pair_term(pol);
  const std::vector<Task> tasks = make_tasks(rows, Tile::kValueRowBlock, pol);
  pool.run(std::int64_t(tasks.size()), [&](std::int64_t ti) {
    using Array = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    thread_local Array s_tile;
    thread_local RowMatrix<T> acc_tile, class_bias;
    thread_local std::vector<std::int64_t> ranges;
    thread_local std::vector<std::int32_t> classes;
    const Task task = tasks[std::size_t(ti)];
    const std::int64_t r0 = task.r0, br = task.br;
    std::int32_t row_slot[Tile::kValueRowBlock];
    if (pair) block_classes(pol.row_labels, r0, br, &classes, row_slot);
    key_ranges(pol, task.tile, nk, &ranges);
    for (std::size_t ri = 0; ri + 1 < ranges.size(); ri += 2) {
      for (std::int64_t c0 = ranges[ri]; c0 < ranges[ri + 1]; c0 += Tile::kValueColBlock) {
        const std::int64_t bc = std::min(Tile::kValueColBlock, ranges[ri + 1] - c0);
        s_tile.resize(br, bc);
        s_tile.matrix().noalias() = q.middleRows(r0, br) * k.middleRows(c0, bc).transpose();
        s_tile = s_tile * scale;
        if (!pair) {
          s_tile.rowwise() += bias.segment(c0, bc).transpose().array();
        } else {
          class_bias.resize(std::int64_t(classes.size()), bc);
          for (std::size_t u = 0; u < classes.size(); ++u) {
            const T* prow = pol.pair_table + std::int64_t(classes[u]) * pol.classes;
            for (std::int64_t j = 0; j < bc; ++j)
              class_bias(std::int64_t(u), j) = bias[c0 + j] + prow[pol.key_labels[c0 + j]];
          }
          for (std::int64_t r = 0; r < br; ++r)
            s_tile.row(r) += class_bias.row(row_slot[r]).array();
        }
        for (std::int64_t r = 0; r < br; ++r) {
          const T tile_max = s_tile.row(r).maxCoeff();
          const double old_max = omax[r0 + r];
          const double new_max = std::max(old_max, double(tile_max));
          // Guard: a row whose keys are all masked so far has max -inf; exp(-inf - -inf) would be
          // NaN, so such tiles contribute nothing and leave the row untouched.
          if (new_max == -std::numeric_limits<double>::infinity()) {
            s_tile.row(r).setZero();
            continue;
          }
          const double rescale = std::exp(old_max - new_max);  // 0 when old_max = -inf
          // exp(s - M_new) in T; masked keys (s = -inf) give exactly 0.
          s_tile.row(r) = (s_tile.row(r) - T(new_max)).exp();
          for (std::int64_t j = 0; j < bc; ++j)
            if (bias[c0 + j] == ninf<T>()) s_tile(r, j) = T(0);
          osum[r0 + r] = osum[r0 + r] * rescale + double(s_tile.row(r).sum());
          omax[r0 + r] = new_max;
          oacc.row(r0 + r) *= rescale;
        }
        acc_tile.noalias() = s_tile.matrix() * values.middleRows(c0, bc);
        oacc.middleRows(r0, br) += acc_tile.template cast<double>();
      }
    }
  });
}

}  // namespace

// ---- public functions --------------------------------------------------------------------------

const char* to_string(RowPassIsa isa) {
  switch (isa) {
    case RowPassIsa::kAuto:
      return "auto";
    case RowPassIsa::kBaseline:
      return "baseline";
    case RowPassIsa::kAvx2:
      return "avx2";
    case RowPassIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool row_pass_isa_supported(RowPassIsa isa) {
  switch (isa) {
    case RowPassIsa::kAuto:
      return true;
    case RowPassIsa::kBaseline:
      return detail::baseline_kernels_f32() != nullptr;
    case RowPassIsa::kAvx2:
      return detail::avx2_kernels_f32() != nullptr && cpu_has_avx2();
    case RowPassIsa::kAvx512:
      return detail::avx512_kernels_f32() != nullptr && cpu_has_avx512();
  }
  return false;
}

RowPassIsa row_pass_best_isa() {
  static const RowPassIsa best = [] {
    if (row_pass_isa_supported(RowPassIsa::kAvx512)) return RowPassIsa::kAvx512;
    if (row_pass_isa_supported(RowPassIsa::kAvx2)) return RowPassIsa::kAvx2;
    return RowPassIsa::kBaseline;
  }();
  return best;
}

std::vector<RowPassIsa> row_pass_supported_isas() {
  std::vector<RowPassIsa> r;
  for (RowPassIsa isa : {RowPassIsa::kBaseline, RowPassIsa::kAvx2, RowPassIsa::kAvx512})
    if (row_pass_isa_supported(isa)) r.push_back(isa);
  return r;
}

template <class T>
void validate_block_list(const RowPassPolicy<T>& p, std::int64_t rows, std::int64_t nk) {
  if (!p.run_ptr) return;
  auto fail = [](const std::string& m) { throw std::invalid_argument("block list: " + m); };
  if (p.row_tile <= 0) fail("row_tile must be > 0, got " + std::to_string(p.row_tile));
  if (p.key_tile <= 0) fail("key_tile must be > 0, got " + std::to_string(p.key_tile));
  if (p.run_ptr[0] != 0) fail("run_ptr[0] must be 0, got " + std::to_string(p.run_ptr[0]));
  const std::int64_t tiles = ceil_div(rows, p.row_tile);
  for (std::int64_t t = 0; t < tiles; ++t)
    if (p.run_ptr[t + 1] < p.run_ptr[t])
      fail("run_ptr decreases at row tile " + std::to_string(t) + " (" +
           std::to_string(p.run_ptr[t]) + " > " + std::to_string(p.run_ptr[t + 1]) + ")");
  if (p.run_ptr[tiles] > 0 && !p.runs) fail("runs is null with " + std::to_string(p.run_ptr[tiles]) + " runs");
  // Overlaps are judged on the runs clipped to the key tiles that exist (a run wholly past nk
  // is empty and overlaps nothing).
  const std::int64_t key_tiles = ceil_div(nk, p.key_tile);
  struct Clipped {
    std::int64_t b, e, q;
  };
  std::vector<Clipped> order;
  for (std::int64_t t = 0; t < tiles; ++t) {
    order.clear();
    for (std::int64_t q = p.run_ptr[t]; q < p.run_ptr[t + 1]; ++q) {
      const std::int64_t b = p.runs[2 * q], e = p.runs[2 * q + 1];
      if (b < 0 || b > e)
        fail("row tile " + std::to_string(t) + ", run " + std::to_string(q) + ": [" +
             std::to_string(b) + ", " + std::to_string(e) + ") is not a range of key tiles");
      const std::int64_t cb = std::min(b, key_tiles), ce = std::min(e, key_tiles);
      if (cb < ce) order.push_back({cb, ce, q});
    }
    std::sort(order.begin(), order.end(), [](const Clipped& x, const Clipped& y) {
      return x.b < y.b || (x.b == y.b && x.q < y.q);
    });
    for (std::size_t i = 1; i < order.size(); ++i) {
      const std::int64_t a = order[i - 1].q, c = order[i].q;
      if (order[i].b < order[i - 1].e)
        fail("row tile " + std::to_string(t) + ": run " + std::to_string(c) + " [" +
             std::to_string(p.runs[2 * c]) + ", " + std::to_string(p.runs[2 * c + 1]) +
             ") overlaps run " + std::to_string(a) + " [" + std::to_string(p.runs[2 * a]) + ", " +
             std::to_string(p.runs[2 * a + 1]) + ")");
    }
  }
}

template <class T>
void validate_pair_term(const RowPassPolicy<T>& p, std::int64_t rows, std::int64_t nk) {
  if (!p.pair_table) return;
  auto fail = [](const std::string& m) { throw std::invalid_argument("pair term: " + m); };
  if (p.classes <= 0) fail("classes must be > 0, got " + std::to_string(p.classes));
  if (p.classes > std::int64_t(1) << 31) fail("classes must fit in int32");
  if (!p.row_labels && rows > 0) fail("row_labels is null");
  if (!p.key_labels && nk > 0) fail("key_labels is null");
  for (std::int64_t i = 0; i < rows; ++i)
    if (p.row_labels[i] < 0 || p.row_labels[i] >= p.classes)
      fail("row_labels[" + std::to_string(i) + "] = " + std::to_string(p.row_labels[i]) +
           " is outside [0, " + std::to_string(p.classes) + ")");
  for (std::int64_t j = 0; j < nk; ++j)
    if (p.key_labels[j] < 0 || p.key_labels[j] >= p.classes)
      fail("key_labels[" + std::to_string(j) + "] = " + std::to_string(p.key_labels[j]) +
           " is outside [0, " + std::to_string(p.classes) + ")");
  for (std::int64_t i = 0; i < p.classes * p.classes; ++i)
    if (!std::isfinite(double(p.pair_table[i])))
      fail("pair_table[" + std::to_string(i / p.classes) + ", " + std::to_string(i % p.classes) +
           "] is not finite");
}

template <class T>
void row_pass_tuned(const RowPassTuning& tuning, ThreadPool& pool, MatrixRef<T> queries,
                    MatrixRef<T> keys, const T* bias, T scale, MatrixRef<T> values,
                    RowPassResult* out, const RowPassPolicy<T>& policy) {
#ifndef NDEBUG
  validate_block_list(policy, queries.rows, keys.rows);
  validate_pair_term(policy, queries.rows, keys.rows);
#endif
  if (values.cols == 0) {
    lse_pass(kernels_for<T>(tuning.isa), tuning, pool, queries, keys, bias, scale, policy, out);
  } else {
    value_pass(pool, queries, keys, bias, scale, values, policy, out);
  }
}

template <class T>
void row_pass(ThreadPool& pool, MatrixRef<T> queries, MatrixRef<T> keys, const T* bias, T scale,
              MatrixRef<T> values, RowPassResult* out, const RowPassPolicy<T>& policy) {
  row_pass_tuned(RowPassTuning{}, pool, queries, keys, bias, scale, values, out, policy);
}

template <class T>
void exp2_nonpos_simd(const T* t, std::int64_t count, T* out, RowPassIsa isa) {
  kernels_for<T>(isa).exp2(t, count, out);
}

#define KANTOR_ROW_PASS_INSTANTIATE(T)                                                            \
  template void exp2_nonpos_simd(const T*, std::int64_t, T*, RowPassIsa);                        \
  template void row_pass(ThreadPool&, MatrixRef<T>, MatrixRef<T>, const T*, T, MatrixRef<T>,      \
                         RowPassResult*, const RowPassPolicy<T>&);                               \
  template void row_pass_tuned(const RowPassTuning&, ThreadPool&, MatrixRef<T>, MatrixRef<T>,     \
                               const T*, T, MatrixRef<T>, RowPassResult*,                         \
                               const RowPassPolicy<T>&);                                         \
  template void validate_block_list(const RowPassPolicy<T>&, std::int64_t, std::int64_t);        \
  template void validate_pair_term(const RowPassPolicy<T>&, std::int64_t, std::int64_t);
KANTOR_ROW_PASS_INSTANTIATE(float)
KANTOR_ROW_PASS_INSTANTIATE(double)
#undef KANTOR_ROW_PASS_INSTANTIATE

}  // namespace kantor::cpu
