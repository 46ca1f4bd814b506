// CUDA point-cloud oracle. Setup (once): a host problem with a squared-Euclidean cost (not bf16)
// is validated and measured on the host (prepare_problem_scalars: bounds, centre, weight totals)
// and each of its views uploaded once as given; the device centres the clouds and forms the
// certificate's float64 copies and the weights (operand_centre, operand_weights: the host's
// arithmetic, bit for bit). Other problems (labels, bf16, device views) take prepare_problem_data
// on the host (validation, centring, normalized weights, labels) and one upload of each centred
// cloud. The log weights come from the device's weights on either path (operand_logs). From
// the centred clouds the device builds the kernels' copies (lib/cuda/operands.hpp:
// zero-padded, TF32-rounded, 3xTF32 splits, float64, row norms; bf16 rounding stays on the
// host); one cloud given as both sides (a self-problem) is stored once. Then the label pair
// tables in each kernel's units, and a workspace sized for the largest split-K pass. The kernel
// family of the updates comes from the dispatch table (lib/cuda/dispatch.cpp). Passes:
// lib/cuda/lse_params.hpp (conventions and policies), docs/cuda-engine.md (design); the vector
// kernels of ops(): lib/cuda/vector_ops.hpp. Nothing here synchronizes; scalars are written as
// double into device memory.
#include "oracles/cuda/cuda_oracle.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/error.hpp"
#include "lib/core/certificate.hpp"
#include "lib/core/for_chunks.hpp"
#include "lib/costs/problem_data.hpp"
#include "lib/cuda/certify.hpp"
#include "lib/cuda/dispatch.hpp"
#include "lib/cuda/lse_gemm.hpp"
#include "lib/cuda/lse_params.hpp"
#include "lib/cuda/lse_values.hpp"
#include "lib/cuda/operands.hpp"
#include "lib/cuda/pair_maxima.hpp"
#include "lib/cuda/runtime.hpp"
#include "lib/cuda/screen_descent.hpp"
#include "lib/cuda/screen_lists.hpp"
#include "lib/cuda/vector_ops.hpp"
#include "lib/runtime/context_impl.hpp"
#include "oracles/cuda/bf16_round.hpp"
#include "oracles/oracle_base.hpp"

namespace kantor {

static_assert(cuda::kCertifyRows == cuda::kBlockRows,
              "the certificate kernel's rows per block must be the block lists' row tile");
namespace {

using cuda::LseFamily;
using cuda::LseKernel;
using cuda::LsePass;
using cuda::LseSide;
using cuda::LseValuePass;
using cuda::ValueMode;

/// How the stored copies of the coordinates are rounded.
enum class Rounding { kNone, kTf32, kBf16 };

/// VectorOps on device memory (lib/cuda/vector_ops.hpp): every op one or two launches on the
/// oracle's stream, reductions through a workspace of kReduceBlocks doubles owned here (stream
/// ordered, so consecutive calls may reuse it).
template <class T>
class CudaVectorOps final : public VectorOps<T> {
 public:
  CudaVectorOps(const Context& ctx, void* stream)
      : stream_(stream), partials_(ctx, cuda::kReduceBlocks) {}
  void fill(MatrixView<T> dst, T value) override { cuda::vec_fill(dst, value, stream_); }
  void axpby(double alpha, MatrixView<const T> src, double beta, MatrixView<T> dst) override {
    cuda::vec_axpby(alpha, src, beta, dst, stream_);
  }
  void scale_rows(const T* s, MatrixView<const T> src, MatrixView<T> dst) override {
    cuda::vec_scale_rows(s, src, dst, stream_);
  }
  void multiply(std::int64_t n, const T* x, const T* y, T* dst) override {
    cuda::vec_multiply(n, x, y, dst, stream_);
  }
  void divide(std::int64_t n, const T* x, const T* y, T* dst) override {
    cuda::vec_divide(n, x, y, dst, stream_);
  }
  void row_products(MatrixView<const T> U, MatrixView<const T> W, MatrixView<T> dst) override {
    cuda::vec_row_products(U, W, dst, stream_);
  }
  void row_contract(double alpha, MatrixView<const T> u, MatrixView<const T> M, double beta,
                    MatrixView<T> out) override {
    cuda::vec_row_contract(alpha, u, M, beta, out, stream_);
  }
  void row_dots(MatrixView<const T> U, MatrixView<const T> W, T* out) override {
    cuda::vec_row_dots(U, W, out, stream_);
  }
  void dot(std::int64_t n, const T* x, const T* y, double* out) override {
    cuda::vec_dot(n, x, y, out, partials_.data(), stream_);
  }
  void subtract_mean(std::int64_t n, T* x, double* scratch) override {
    cuda::vec_subtract_mean(n, x, scratch, partials_.data(), stream_);
  }
  void axpy_ratio(std::int64_t n, const double* num, const double* den, double sign, const T* x,
                  T* y) override {
    cuda::vec_axpy_ratio(n, num, den, sign, x, y, stream_);
  }
  void xpay_ratio(std::int64_t n, const T* x, const double* num, const double* den, T* y) override {
    cuda::vec_xpay_ratio(n, x, num, den, y, stream_);
  }
  void copy_scalars(const double* src, double* dst, std::int64_t count) override {
    cuda::vec_copy_scalars(src, dst, count, stream_);
  }

 private:
  void* stream_;
  Buffer<double> partials_;
};

template <class T>
class CudaOracle final : public OracleBase<T> {
  using Base = OracleBase<T>;
  using Base::d_;
  using Base::m_;
  using Base::n_;

 public:
  /// raw: the problem itself when prep is scalars only (prepare_problem_scalars): the copies are
  /// built on the device from one upload of each of its views.
  CudaOracle(const Context& ctx, const PreparedProblem<T>& prep, Precision precision,
             KernelChoice kernel, const Problem<T>* raw = nullptr)
      : Base(prep, precision, BlockShape{cuda::kBlockRows, cuda::kBlockKeys}),
        ctx_(ctx),
        kernel_(kernel),
        stream_(ctx.impl().stream),
        precision_(precision),
        c_(prep.cost_scale),
        ops_(ctx, ctx.impl().stream) {
    // The dense schedule's family (the table; a forced family is checked here, at setup).
    dense_ = cuda::dispatch_lse(traits(false), kernel_);
    dispatch_ = dense_;
    tensor_ = precision == Precision::kTf32   ? LseKernel::kTf32
              : precision == Precision::kBf16 ? LseKernel::kBf16
                                              : LseKernel::kSimt;
    center_ = prep.center;
    // One view for both clouds (a self-problem): the y-side copies are the x side's (ys() etc.).
    same_ = prep.same_clouds;
    // The centred clouds, on the device: every copy below is built from them
    // (lib/cuda/operands.hpp; bf16 rounding and packing stay on the host).
    Buffer<T> x_dense, y_dense;
    if (prep.scalars_only) {
      // From one upload of each of the caller's views: the centred clouds, the certificate's
      // coordinates and the weights in both precisions, as prepare_problem_data computes them
      // on the host (operand_centre, operand_weights); the log weights on the host.
      if (!raw) throw InvalidArgument("CudaOracle: a scalars-only preparation needs the problem");
      const SqEuclidean<T>& pf = raw->features();
      const Buffer<double> center = upload(prep.center);
      auto cloud = [&](const MatrixView<const T>& v, const MatrixView<const double>& ref,
                       Buffer<T>* centred, Buffer<double>* exact) {
        const Buffer<T> given = upload_rows(v);
        *centred = Buffer<T>(ctx_, v.rows * d_);
        *exact = ref.data ? upload_rows(ref) : Buffer<double>(ctx_, v.rows * d_);
        // `given` is freed on return, in stream order after the kernel (or by a cudaFree that
        // waits for the device).
        cuda::operand_centre<T>(given.data(), v.rows, int(d_), center.data(), centred->data(),
                                ref.data ? nullptr : exact->data(), stream_);
      };
      cloud(pf.x, raw->reference_x, &x_dense, &x_ref_);
      if (!same_) cloud(pf.y, raw->reference_y, &y_dense, &y_ref_);
      auto weights = [&](const VectorView<const T>& v, std::int64_t rows, double total,
                         Buffer<double>* ref, Buffer<T>* w, Buffer<T>* logw) {
        const Buffer<T> given = v.data ? upload_rows(MatrixView<const T>{v.data, rows, 1, 1,
                                                                         MemorySpace::kHost})
                                       : Buffer<T>();
        *ref = Buffer<double>(ctx_, rows);
        *w = Buffer<T>(ctx_, rows);
        cuda::operand_weights<T>(v.data ? given.data() : nullptr, rows, total, ref->data(),
                                 w->data(), stream_);
        *logw = Buffer<T>(ctx_, rows);  // the logs: below, on both paths
      };
      weights(raw->a, n_, prep.weight_total_a, &a_ref_, &a_, &la_);
      weights(raw->b, m_, prep.weight_total_b, &b_ref_, &b_, &lb_);
    } else {
      // The certificate's data: the caller's coordinates (uncentred, unrounded) and weights,
      // double.
      x_ref_ = upload(prep.x_ref);
      if (!same_) y_ref_ = upload(prep.y_ref);  // empty when same_ (PreparedProblem)
      a_ref_ = upload(prep.a_ref);
      b_ref_ = upload(prep.b_ref);
      x_dense = upload(prep.x);
      if (!same_) y_dense = upload(prep.y);
      a_ = upload(prep.a);
      b_ = upload(prep.b);
      la_ = Buffer<T>(ctx_, n_);
      lb_ = Buffer<T>(ctx_, m_);
    }
    // The log weights on the device from the engine's weights, on both paths (the same bits
    // either way; the CPU engine's log_weight formula, lib/cuda/operands.hpp): at 2^20 points a
    // side the host's pass and upload cost the GPU machine 3-6 ms per oracle.
    cuda::operand_logs<T>(a_.data(), n_, la_.data(), stream_);
    cuda::operand_logs<T>(b_.data(), m_, lb_.data(), stream_);
    cert_out_ = Buffer<double>(ctx_, 3 * cuda::kCertifyOutputs);  // rows, columns, new pair
    // The weights' totals in double (prepare_problem_data's chunked sums, the same on both
    // paths).
    mass_ref_[0] = prep.mass_a;
    mass_ref_[1] = prep.mass_b;
    if (prep.classes > 0) {
      // Labels, and the pair table c_w W per side (the g side reads W^T) in double (the
      // certificate), in the exact kernels' u units (/ c) and in the shifted form's (/ 2c).
      const std::int64_t L = prep.classes;
      std::vector<double> wt(prep.pair.size());
      for (std::int64_t r = 0; r < L; ++r)
        for (std::int64_t k = 0; k < L; ++k)
          wt[std::size_t(k * L + r)] = prep.pair[std::size_t(r * L + k)];
      auto scaled = [](const std::vector<double>& w, double f) {
        std::vector<T> o(w.size());
        for (std::size_t i = 0; i < w.size(); ++i) o[i] = T(w[i] * f);
        return o;
      };
      labels_x_ = upload(prep.labels_x);
      labels_y_ = upload(prep.labels_y);
      pair_ref_[0] = upload(prep.pair);
      pair_ref_[1] = upload(wt);
      pair_exact_[0] = upload(scaled(prep.pair, 1.0 / c_));
      pair_exact_[1] = upload(scaled(wt, 1.0 / c_));
      pair_shift_[0] = upload(scaled(prep.pair, 0.5 / c_));
      pair_shift_[1] = upload(scaled(wt, 0.5 / c_));
      if (std::is_same<T, float>::value && tensor_ != LseKernel::kSimt) set_label_blocks(prep);
    }

    // Exact-difference copies (every value pass; the updates on fp32/fp64). On tf32 / bf16 they
    // hold the rounded coordinates, so that value passes (P v, <P,C>, marginal errors) see the
    // same cost C~ = c|x~ - y~|^2 as the updates: the potentials are optimal for C~, and pairing
    // them with the unrounded C would leave a plan whose marginals are off by ~|C~ - C|/eps.
    const Rounding rnd = tensor_ == LseKernel::kTf32   ? Rounding::kTf32
                         : tensor_ == LseKernel::kBf16 ? Rounding::kBf16
                                                       : Rounding::kNone;
    ld_simt_ = cuda::simt_padded_dim(int(d_));
    const T* xd = x_dense.data();
    const T* yd = same_ ? xd : y_dense.data();
    auto build = [&](const T* src, const detail::UninitVector<T>& host, std::int64_t rows, int ld,
                     Rounding r) {
      if (r == Rounding::kBf16) return upload(bf16_padded(host, rows, ld));
      Buffer<T> out(ctx_, rows * ld);
      cuda::operand_padded<T, T>(src, rows, int(d_), out.data(), ld,
                                 r == Rounding::kTf32 ? cuda::OperandRounding::kTf32
                                                      : cuda::OperandRounding::kNone,
                                 stream_);
      return out;
    };
    auto row_norms = [&](const T* src, std::int64_t rows, int ld) {
      Buffer<T> out(ctx_, rows);
      cuda::operand_norms<T, T>(src, rows, ld, c_, out.data(), stream_);
      return out;
    };
    xs_ = build(xd, prep.x, n_, ld_simt_, rnd);
    if (!same_) ys_ = build(yd, prep.y, m_, ld_simt_, rnd);
    // Unrounded centred x and y: points() and the values of the barycentric map (y).
    if (rnd != Rounding::kNone) {
      xs_values_ = build(xd, prep.x, n_, ld_simt_, Rounding::kNone);
      if (!same_) ys_values_ = build(yd, prep.y, m_, ld_simt_, Rounding::kNone);
    }
    const bool tensor_copies = !cuda::exact_layout(dense_.family);
    if (dense_.family == LseFamily::kGemmFp64) {
      // Float64 score blocks: double copies of the centred float data (exact conversions), c|x|^2
      // of the same values; the exact kernel's copies stay the LseSide operands (unused there).
      ld_upd_ = ld_simt_;
      if constexpr (std::is_same<T, float>::value) {
        auto to_double = [&](const T* src, std::int64_t rows) {
          Buffer<double> out(ctx_, rows * d_);
          cuda::operand_padded<T, double>(src, rows, int(d_), out.data(), int(d_),
                                          cuda::OperandRounding::kNone, stream_);
          return out;
        };
        auto norms64 = [&](const double* src, std::int64_t rows) {
          Buffer<double> out(ctx_, rows);
          cuda::operand_norms<double, double>(src, rows, int(d_), c_, out.data(), stream_);
          return out;
        };
        x64_ = to_double(xd, n_);
        if (!same_) y64_ = to_double(yd, m_);
        xn64_ = norms64(x64_.data(), n_);
        yn64_ = norms64(y64(), m_);
      }
      xn_ = row_norms(xd, n_, int(d_));
      yn_ = row_norms(yd, m_, int(d_));
    } else if (dense_.family == LseFamily::kGemmFp32) {
      // fp32 cuBLAS score blocks: the GEMM reads the exact kernel's unrounded copies (xs_, ys_);
      // c|x|^2 of the same values.
      ld_upd_ = ld_simt_;
      xn_ = row_norms(xd, n_, int(d_));
      yn_ = row_norms(yd, m_, int(d_));
    } else if (dense_.family == LseFamily::kGemm3xTf32) {
      // fp32 as 3xTF32: split copies of width 3 ld (x: [lo, hi, hi], y: [hi, lo, hi], so that
      // one TF32 GEMM sums lo.hi + hi.lo + hi.hi in either role, the small terms first, while
      // the accumulator is small) and c|x|^2 of the unrounded values (lib/cuda/lse_gemm.hpp).
      ld_upd_ = int((d_ + 7) / 8 * 8);  // 32-byte rows; cuBLAS needs no wider padding
      if constexpr (std::is_same<T, float>::value) {
        // The two sides' splits differ ([lo, hi, hi] against [hi, lo, hi]): both are built, also
        // for one cloud.
        auto split = [&](const T* src, std::int64_t rows, bool x_side) {
          Buffer<T> out(ctx_, rows * 3 * ld_upd_);
          cuda::operand_split3(src, rows, int(d_), out.data(), ld_upd_, x_side, stream_);
          return out;
        };
        xt_ = split(xd, n_, /*x_side=*/true);
        yt_ = split(yd, m_, /*x_side=*/false);
      }
      xn_ = row_norms(xd, n_, int(d_));
      yn_ = row_norms(yd, m_, int(d_));
    } else if (tensor_copies && tensor_ == LseKernel::kTf32) {
      // TF32-rounded copies and c|x~|^2 from the same rounded values (docs/numerics.md 2).
      ld_upd_ = cuda::tf32_padded_dim(int(d_));
      xt_ = build(xd, prep.x, n_, ld_upd_, Rounding::kTf32);
      if (!same_) yt_ = build(yd, prep.y, m_, ld_upd_, Rounding::kTf32);
      xn_ = row_norms(xt_.data(), n_, ld_upd_);
      yn_ = row_norms(same_ ? xt_.data() : yt_.data(), m_, ld_upd_);
    } else if (tensor_copies && tensor_ == LseKernel::kBf16) {
      // bf16-rounded copies (ld/2 words of packed pairs per row, the MMA operands) and c|x~|^2
      // in double from the same rounded values; ld = 16, 32 or 64 (zero columns are exact).
      ld_upd_ = cuda::bf16_padded_dim(int(d_));
      const std::vector<T> xt = bf16_padded(prep.x, n_, ld_upd_);
      xt_ = upload(pack_bf16(xt));
      xn_ = upload(norms(xt, n_, ld_upd_));
      if (same_) {
        yn_ = upload(norms(xt, m_, ld_upd_));
      } else {
        const std::vector<T> yt = bf16_padded(prep.y, m_, ld_upd_);
        yt_ = upload(pack_bf16(yt));
        yn_ = upload(norms(yt, m_, ld_upd_));
      }
    } else {
      ld_upd_ = ld_simt_;
    }

    if (gemm_family(dense_.family)) {
      // Large d on tf32 / fp32: cuBLAS score blocks + row-LSE (lib/cuda/lse_gemm.hpp), no split-K.
      if constexpr (std::is_same<T, float>::value)
        gemm_ = std::make_unique<cuda::LseGemm>(
            stream_, n_, m_,
            dense_.family == LseFamily::kGemmFp32   ? cuda::LseGemm::Scores::kFp32
            : dense_.family == LseFamily::kGemmFp64 ? cuda::LseGemm::Scores::kFp64
                                                    : cuda::LseGemm::Scores::kTf32);
    }
    // The staging copies x_dense / y_dense are freed on return: the kernels that read them
    // must have finished.
    cuda::synchronize_stream(stream_);
    err_partials_ = Buffer<double>(ctx_, cuda::finalize_blocks(n_ + m_));
    stat_partials_ = Buffer<double>(ctx_, 3 * cuda::value_pass_blocks(std::max(n_, m_)));
    f_tmp_ = Buffer<T>(ctx_, n_);
    g_tmp_ = Buffer<T>(ctx_, m_);
    plan_splits();
  }

  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  std::string description() const override {
    std::ostringstream os;
    const LseFamily f = dispatch_.family;
    if (f == LseFamily::kGemm)
      os << "cuda lse tf32 cuBLAS score blocks of " << gemm_->rows_per_chunk()
         << " rows + row-LSE, d padded to " << ld_upd_;
    else if (f == LseFamily::kGemmFp64)
      os << "cuda lse fp32 data, cuBLAS float64 score blocks (DGEMM) of "
         << gemm_->rows_per_chunk() << " rows + row-LSE with double maxima, d = " << d_;
    else if (f == LseFamily::kGemmFp32)
      os << "cuda lse fp32 cuBLAS float32 score blocks of " << gemm_->rows_per_chunk()
         << " rows + row-LSE, d padded to " << ld_upd_;
    else if (f == LseFamily::kGemm3xTf32)
      os << "cuda lse fp32 as 3xTF32 (split operands) cuBLAS score blocks of "
         << gemm_->rows_per_chunk() << " rows + row-LSE, d padded to " << ld_upd_ << " (x3)";
    else if (f == LseFamily::kExpanded)
      os << "cuda lse cuda-core fp32 norm expansion (one FMA chain per score) 128x32, d = " << d_;
    else if (f != LseFamily::kExact && tensor_ == LseKernel::kTf32)
      os << "cuda lse tf32 " << (f == LseFamily::kMma ? "mma.sync m16n8k8 128x64" : "chunked")
         << ", d padded to " << ld_upd_;
    else if (f != LseFamily::kExact)
      os << "cuda lse bf16 mma.sync m16n8k16 128x64 (fp32 accumulation), d padded to " << ld_upd_;
    else
      os << "cuda lse cuda-core exact " << to_string(precision_) << " 128x"
         << (std::is_same<T, double>::value ? 16 : 32) << ", d padded to " << ld_simt_;
    os << " [" << dispatch_.why << "]";
    os << ", " << this->cost_kind() << " cost"
       << (listed(0) || listed(1) ? ", block-list schedule" : "")
       << ", split-K f/g/sym " << splits_f_ << "/" << splits_g_ << "/" << splits_sym_
       << (tensor_values(0) ? "; P V (apply_mat) tf32 mma.sync for scores and values" : "")
       << (tensor_values(1) ? "; P^T U (apply_mat_t) tf32 mma.sync for scores and values" : "")
       << "; value passes cuda-core exact differences"
       << (tensor_ == LseKernel::kTf32   ? " of the TF32-rounded clouds"
           : tensor_ == LseKernel::kBf16 ? " of the bf16-rounded clouds"
                                         : "")
       << ", double arithmetic";
    return os.str();
  }
  const T* a() const override { return a_.data(); }
  const T* b() const override { return b_.data(); }

  void relaxed_update(int side, T eps, T w, const T* other, T* pot, double* err) override {
    this->check_update_side(side);
    // The finalize kernel forms (1 - w) old + w fresh (lib/cuda/lse_finalize.cuh).
    LsePass<T> p = pass(eps, w, err, side == 0 ? splits_f_ : splits_g_);
    p.side[0] = side == 0 ? side_f(other, pot) : side_g(other, pot);
    class_tiles(&p, side == 0 ? class_splits_f_ : class_splits_g_);
    run(p);
  }
  void symmetric_step(T eps, T w, T* f, T* g, double* err) override {
    // One LSE launch for both sides (both read the old f, g), one finalize writing both.
    LsePass<T> p = pass(eps, w, err, splits_sym_);
    p.nsides = 2;
    p.side[0] = side_f(g, f);
    p.side[1] = side_g(f, g);
    class_tiles(&p, class_splits_sym_);
    run(p);
  }
  /// One CUDA graph of body, replayed while the key stays (a step of 4-8 launches becomes one;
  /// the small levels' iterations turned out bound by their kernels' chain on the GPU, not by
  /// the launches: 1.7% at 2,048 points, docs/cuda-engine.md); recorded for a call of two steps
  /// or more, or for the second call in a row with one key. A body the capture refuses runs as
  /// it is, and so does every later one (no second try).
  void repeat(std::int64_t count, std::uint64_t key, const std::function<void()>& body) override {
    if (count <= 0) return;
    const bool cached = graph_.g.exec && key == graph_key_;
    const bool again = key == last_key_;
    last_key_ = key;
    if (!cached && ((count < 2 && !again) || graph_refused_)) {
      for (std::int64_t k = 0; k < count; ++k) body();
      return;
    }
    if (!cached) {
      if (!cuda::graph_record(stream_, body, &graph_.g)) {
        graph_refused_ = true;
        for (std::int64_t k = 0; k < count; ++k) body();
        return;
      }
      graph_key_ = key;
    }
    for (std::int64_t k = 0; k < count; ++k) cuda::graph_launch(graph_.g, stream_);
  }
  /// The class-aligned tiles of every side of pass p, at `splits` splits (0: not used): their
  /// class key potentials from the sides' key potentials (one small pass each), then the fields
  /// the mma.sync launcher reads (LseSide::tile_start).
  void class_tiles(LsePass<T>* p, int splits) {
    if constexpr (std::is_same<T, float>::value) {
      if (splits <= 0) return;
      for (int k = 0; k < p->nsides; ++k) {
        LseSide<T>& s = p->side[k];
        const int sd = s.query_labels == labels_x_.data() ? 0 : 1;
        cuda::class_key_potentials(s.key_pot, s.key_labels, pair_ref_[sd].data(),
                                   int(this->classes_), slot_class_[sd].data(),
                                   int(slot_class_[sd].size()), s.nkeys, class_pot_[sd].data(),
                                   stream_);
        s.tile_start = tile_start_[sd].data();
        s.tile_slot = tile_slot_[sd].data();
        s.tiles = tiles_[sd];
        s.class_pot = class_pot_[sd].data();
      }
      p->splits = splits;
    } else {
      (void)p;
      (void)splits;
    }
  }

  void apply(T eps, const T* f, const T* g, const T* v, T* out) override {
    if (dispatch_.family == LseFamily::kGemmFp64) {  // the float64 score blocks' value pass
      value_matrix(eps, true, f, g, MatrixView<const T>{v, m_, 1, 1, MemorySpace::kDevice},
                   MatrixView<T>{out, n_, 1, 1, MemorySpace::kDevice}, nullptr);
      return;
    }
    LseValuePass<T> p = value_pass(eps, /*f_side=*/true, f, g, ValueMode::kApply);
    p.values = v;
    p.vstride = 1;
    p.vcols = 1;
    p.out = out;
    p.ostride = 1;
    cuda::run_value_pass(p, stream_);
  }
  void apply_t(T eps, const T* f, const T* g, const T* u, T* out) override {
    if (dispatch_.family == LseFamily::kGemmFp64) {
      value_matrix(eps, false, f, g, MatrixView<const T>{u, n_, 1, 1, MemorySpace::kDevice},
                   MatrixView<T>{out, m_, 1, 1, MemorySpace::kDevice}, nullptr);
      return;
    }
    LseValuePass<T> p = value_pass(eps, /*f_side=*/false, f, g, ValueMode::kApply);
    p.values = u;
    p.vstride = 1;
    p.vcols = 1;
    p.out = out;
    p.ostride = 1;
    cuda::run_value_pass(p, stream_);
  }
  void apply_mat(T eps, const T* f, const T* g, MatrixView<const T> V, MatrixView<T> out,
                 T* row_mass) override {
    if (V.rows != m_ || out.rows != n_ || out.cols != V.cols)
      throw InvalidArgument("apply_mat: V must be m x k and out n x k");
    if (V.space != MemorySpace::kDevice || out.space != MemorySpace::kDevice)
      throw InvalidArgument("apply_mat: V and out must be device memory on the CUDA engine");
    value_matrix(eps, /*f_side=*/true, f, g, V, out, row_mass);
  }
  void apply_mat_t(T eps, const T* f, const T* g, MatrixView<const T> U, MatrixView<T> out,
                   T* col_mass) override {
    if (U.rows != n_ || out.rows != m_ || out.cols != U.cols)
      throw InvalidArgument("apply_mat_t: U must be n x k and out m x k");
    if (U.space != MemorySpace::kDevice || out.space != MemorySpace::kDevice)
      throw InvalidArgument("apply_mat_t: U and out must be device memory on the CUDA engine");
    value_matrix(eps, /*f_side=*/false, f, g, U, out, col_mass);
  }
  double cost_scale() const override { return c_; }
  MatrixView<const T> points(int side) const override {
    if (side != 0 && side != 1)
      throw InvalidArgument("points: side must be 0 (x) or 1 (y), got " + std::to_string(side));
    // The exact-difference copies are unrounded on fp32 / fp64; tf32 / bf16 keep separate
    // unrounded copies (xs_values_, ys_values_). Rows padded with zeros to ld_simt_ columns.
    return {side == 0 ? xs_vals() : ys_vals(), side == 0 ? n_ : m_, d_, ld_simt_,
            MemorySpace::kDevice};
  }
  VectorOps<T>& ops() override { return ops_; }
  void barycentric_map(T eps, const T* f, const T* g, MatrixView<T> out) override {
    this->require_sqeuclidean("barycentric_map");
    if (out.rows != n_ || out.cols != d_ || out.space != MemorySpace::kDevice)
      throw InvalidArgument("barycentric_map: out must be a device n x d matrix");
    // T(x_i) = sum_j P_ij y_j / sum_j P_ij: the row factor cancels; values = centred y.
    for (std::int64_t c0 = 0; c0 < d_; c0 += cuda::kValueChunk) {
      LseValuePass<T> p = value_pass(eps, true, f, g, ValueMode::kBarycentric);
      p.values = ys_vals() + c0;
      p.vstride = ld_simt_;
      p.vcols = int(std::min<std::int64_t>(cuda::kValueChunk, d_ - c0));
      p.out = out.data + c0;
      p.ostride = out.stride;
      for (int k = 0; k < p.vcols; ++k) p.center[k] = center_[std::size_t(c0 + k)];
      cuda::run_value_pass(p, stream_);
    }
  }

  void dual_value(const T* f, const T* g, double* out) override {
    cuda::run_dual_value(a_.data(), f, n_, b_.data(), g, m_, this->rho_inv(0), this->rho_inv(1),
                         out, stream_);
  }
  void plan_statistics(T eps, const T* f, const T* g, double* out) override {
    LseValuePass<T> p = value_pass(eps, true, f, g, ValueMode::kStats);
    p.values = g;  // V = [g_j]: sum_j P_ij g_j
    p.vstride = 1;
    p.vcols = 1;
    p.stat_partials = stat_partials_.data();
    p.stats = out;
    cuda::run_value_pass(p, stream_);
  }
  void marginal_error(T eps, const T* f, const T* g, double* out) override {
    // |P1 - a|_1 + |P^T 1 - b|_1 = the error of a symmetric step from (f, g), run on copies.
    detail::copy_bytes(ctx_, f_tmp_.data(), MemorySpace::kDevice, f, MemorySpace::kDevice,
                       sizeof(T) * std::size_t(n_));
    detail::copy_bytes(ctx_, g_tmp_.data(), MemorySpace::kDevice, g, MemorySpace::kDevice,
                       sizeof(T) * std::size_t(m_));
    symmetric_step(eps, T(1), f_tmp_.data(), g_tmp_.data(), out);
  }
  // The multiscale screen's second stage (lib/cuda/pair_maxima.cu): every pair evaluated in
  // full (stop_at is a permission, not a duty), on the certificate's float64 coordinates.
  void atom_pair_maxima(const T* f, const T* g, std::int64_t atom,
                        const std::vector<std::int32_t>& pairs, double /*stop_at*/,
                        std::vector<double>* out) override {
    this->check_atom_pairs(atom, pairs);
    if (atom > cuda::kMaxPairAtom)
      throw InvalidArgument("atom_pair_maxima: atoms of " + std::to_string(atom) +
                            " points exceed the CUDA engine's " +
                            std::to_string(cuda::kMaxPairAtom));
    const std::int64_t K = std::int64_t(pairs.size() / 2);
    out->assign(std::size_t(K), 0.0);
    if (K == 0) return;
    const Buffer<std::int32_t> dev_pairs = upload(pairs);
    Buffer<double> dev_out(ctx_, K);
    cuda::PairMaxima<T> p;
    p.x = x_ref_.data();
    p.y = y_ref();
    p.a = a_ref_.data();
    p.b = b_ref_.data();
    p.f = f;
    p.g = g;
    p.n = n_;
    p.m = m_;
    p.d = int(d_);
    p.cost_scale = c_;
    p.atom = atom;
    p.pairs = dev_pairs.data();
    p.count = K;
    p.out = dev_out.data();
    cuda::launch_atom_pair_maxima(p, stream_);
    *out = to_host(ctx_, dev_out.cview());  // synchronizes
  }

  // The multiscale screen's descent (lib/cuda/screen_descent.cu): the levels uploaded once, the
  // workspace from the context's stream-ordered pool.
  bool screen_descent(const std::vector<ScreenLevel>& x, const std::vector<ScreenLevel>& y, int d,
                      double c, double keep_at, double eps, int block_x, int block_y,
                      const ScreenPoints<T>* points, ScreenDescent* out) override {
    if (d < 1 || x.empty() || y.empty())
      throw InvalidArgument("screen_descent: d >= 1 and two non-empty hierarchies needed");
    std::vector<Buffer<double>> values;
    std::vector<Buffer<char>> flags;
    auto put = [&](auto* list, const auto* src, std::int64_t count) {
      using U = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
      list->emplace_back(ctx_, count);
      if (count > 0)
        detail::copy_bytes(ctx_, list->back().data(), MemorySpace::kDevice, src,
                           MemorySpace::kHost, sizeof(U) * std::size_t(count));
      return list->back().data();
    };
    cuda::DescentInput in;
    for (const auto* side : {&x, &y})
      for (const ScreenLevel& L : *side) {
        cuda::DescentLevel D;
        D.count = L.count;
        D.packed = put(&values, L.packed, L.count * (3 * std::int64_t(d) + 3));
        D.mass = put(&values, L.mass, L.count);
        D.active = put(&flags, L.active, L.count);
        (side == &x ? in.x : in.y).push_back(D);
      }
    // Every pair of active cells of the top levels.
    const ScreenLevel& tx = x.back();
    const ScreenLevel& ty = y.back();
    for (std::int64_t I = 0; I < tx.count; ++I)
      for (std::int64_t J = 0; J < ty.count; ++J)
        if (tx.active[I] && ty.active[J]) {
          in.top.push_back(std::int32_t(I));
          in.top.push_back(std::int32_t(J));
        }
    in.d = d;
    in.c = c;
    in.keep_at = keep_at;
    in.eps = eps;
    in.block_x = block_x;
    in.block_y = block_y;
    const cuda::DeviceAlloc alloc = [this](std::size_t bytes) {
      auto b = std::make_shared<Buffer<double>>(ctx_, std::int64_t((bytes + 7) / 8));
      return std::shared_ptr<void>(b, b->data());
    };
    // The points stage on the certificate's coordinates, as atom_pair_maxima evaluates it.
    cuda::DescentPoints pts;
    if (points) {
      this->require_sqeuclidean("screen_descent's points stage");
      pts.x = x_ref_.data();
      pts.y = y_ref();
      pts.a = a_ref_.data();
      pts.b = b_ref_.data();
      if constexpr (std::is_same<T, float>::value) {
        pts.f32 = points->f;
        pts.g32 = points->g;
      } else {
        pts.f64 = points->f;
        pts.g64 = points->g;
      }
      pts.n = n_;
      pts.m = m_;
      pts.atom = points->atom;
      pts.keep_box_masks = points->keep_box_masks;
      // The lists built where the pairs are (lib/cuda/screen_lists.hpp) where the tiles fit the
      // blocks and no box masks go to the host.
      in.keep_pairs = points->engine_lists && !points->keep_box_masks &&
                      points->atom == this->block_shape().key_tile &&
                      cuda::kept_lists_apply(block_x, block_y, this->block_shape().key_tile,
                                             this->block_shape().row_tile);
      for (std::size_t k = 0; k < 3 && k < center_.size(); ++k) pts.center[k] = center_[k];
      in.points = &pts;
    }
    // The pairs of an earlier descent not made into lists go now (also when this one throws).
    kept_ = cuda::KeptPairs();
    kept_valid_ = false;
    cuda::DescentOutput o;
    cuda::screen_descent(in, alloc, stream_, &o);
    out->keys = std::move(o.keys);
    out->masks = std::move(o.masks);
    out->tested = o.tested;
    out->dropped = o.dropped;
    out->points_done = o.points_done;
    out->box_masks = std::move(o.box_masks);
    out->point_tests = o.point_tests;
    out->point_drops = o.point_drops;
    out->point_dropped = o.point_dropped;
    out->on_engine = false;
    out->lonely_x.clear();
    out->lonely_y.clear();
    if (in.keep_pairs) {
      // The atoms without a kept pair (the host's repair finds their partners).
      kept_ = std::move(o.kept);
      std::vector<std::uint32_t> has[2];
      const cuda::DescentLevel& bxl = in.x[std::size_t(block_x)];
      const cuda::DescentLevel& byl = in.y[std::size_t(block_y)];
      cuda::kept_atoms(kept_, bxl.count, byl.count, alloc, stream_, &has[0], &has[1]);
      for (int s = 0; s < 2; ++s) {
        const int l = s == 0 ? block_x : block_y;
        const std::int64_t atoms = (s == 0 ? in.x : in.y)[0].count;
        std::vector<std::int64_t>& lonely = s == 0 ? out->lonely_x : out->lonely_y;
        for (std::size_t B = 0; B < has[s].size(); ++B)
          for (int a = 0; a < (1 << l); ++a) {
            const std::int64_t atom = (std::int64_t(B) << l) + a;
            if (atom < atoms && !((has[s][B] >> a) & 1u)) lonely.push_back(atom);
          }
      }
      out->on_engine = true;
      kept_valid_ = true;
    }
    return true;
  }

  bool engine_block_lists(const std::vector<std::int64_t>& extra, double* covered,
                          std::int64_t* atom_pairs) override {
    if (!kept_valid_) return false;
    const BlockShape shape = this->block_shape();
    const std::int64_t ax = (n_ + shape.key_tile - 1) / shape.key_tile,
                       ay = (m_ + shape.key_tile - 1) / shape.key_tile;
    if (extra.size() % 2 != 0)
      throw InvalidArgument("engine_block_lists: the extra pairs need 2 entries each, got " +
                            std::to_string(extra.size()));
    for (std::size_t k = 0; k < extra.size(); k += 2)
      if (extra[k] < 0 || extra[k] >= ax || extra[k + 1] < 0 || extra[k + 1] >= ay)
        throw InvalidArgument("engine_block_lists: extra pair " + std::to_string(k / 2) + " (" +
                              std::to_string(extra[k]) + ", " + std::to_string(extra[k + 1]) +
                              ") is outside the " + std::to_string(ax) + " x " +
                              std::to_string(ay) + " atoms of " +
                              std::to_string(shape.key_tile) + " points");
    const cuda::DeviceAlloc alloc = [this](std::size_t bytes) {
      auto b = std::make_shared<Buffer<double>>(ctx_, std::int64_t((bytes + 7) / 8));
      return std::shared_ptr<void>(b, b->data());
    };
    cuda::KeptPairs kept = std::move(kept_);
    kept_ = cuda::KeptPairs();
    kept_valid_ = false;
    cuda::add_atom_pairs(&kept, extra, alloc, stream_);
    cuda::DeviceBlockList lists[2];
    for (int s = 0; s < 2; ++s)
      cuda::kept_block_list(kept, s, n_, m_, shape.key_tile, shape.row_tile, alloc, stream_,
                            &lists[s]);
    *atom_pairs = cuda::kept_atom_pairs(kept, alloc, stream_);
    *covered = double(lists[0].covered);
    if (this->block_list(0) || this->block_list(1)) this->set_block_lists(nullptr, nullptr);
    engine_list_[0] = std::move(lists[0]);
    engine_list_[1] = std::move(lists[1]);
    try {
      install_lists();
    } catch (...) {
      engine_list_[0] = engine_list_[1] = cuda::DeviceBlockList();
      install_lists();
      throw;
    }
    return true;
  }

  // The certificate over every pair, or (kept) over the pairs of the current block lists; fast =
  // the fp32 path (lib/cuda/certify.cu).
  Certificate certify_pass(double eps, const T* f, const T* g, bool kept, bool fast, T* f_next,
                           double rows_stop, const CertificateSide* given) override {
    if (!fast) given = nullptr;
    cuda::CertifySide<T> rows, cols;
    certify_sides(eps, f, g, kept, fast, &rows, &cols);
    rows.next = fast ? f_next : nullptr;  // the float64 sides write no update
    constexpr int kOut = cuda::kCertifyOutputs;
    const bool lists = rows.run_ptr || cols.run_ptr;
    if (!fast && !lists && d_ >= cuda::kCertifyGemmMinDim) {
      // Wide clouds: both sides from float64 DGEMM score blocks (lib/cuda/certify.hpp), the
      // expansion's rounding inside the bound. H200, 50k x 50k (docs/benchmarks.md, tenth
      // session): d = 64 139 -> 77 ms, d = 512 1385 -> 116 ms, d = 784 2083 -> 138 ms.
      if (!cert_gemm_)
        cert_gemm_ = std::make_unique<cuda::CertifyGemm>(stream_, x_ref_.data(), y_ref(), n_, m_,
                                                         int(d_));
      cert_gemm_->run(rows, cols);
    } else {
      cuda::launch_certify_side(rows, stream_);
      if (rows_stop < HUGE_VAL || given) {
        // The row side alone decides a failed try (certify_kept_next): the columns only after.
        const std::vector<double> h = to_host(ctx_, cert_out_.cview());  // synchronizes
        const CertificateSide r = side_of(h, 0);
        if (r.error > rows_stop)
          return this->rows_only_certificate(r, rows.next && this->next_usable(r));
        if (given) {
          Certificate c = certificate_bound(r, *given, n_, m_, d_, eps);
          c.next_written = rows.next && this->next_usable(r);
          return c;
        }
      }
      cuda::launch_certify_side(cols, stream_);
    }
    const std::vector<double> h = to_host(ctx_, cert_out_.cview());  // synchronizes
    Certificate c = certificate_bound(side_of(h, 0), side_of(h, kOut), n_, m_, d_, eps);
    c.next_written = rows.next && this->next_usable(side_of(h, 0));
    return c;
  }

 private:
  /// Both certificate sides' parameters (outputs zeroed: rows, columns, the new pair's side).
  void certify_sides(double eps, const T* f, const T* g, bool kept, bool fast,
                     cuda::CertifySide<T>* rows_out, cuda::CertifySide<T>* cols_out) {
    constexpr int kOut = cuda::kCertifyOutputs;
    cuda::memset_async(cert_out_.data(), 0, 3 * kOut * sizeof(double), stream_);
    cuda::CertifySide<T>& rows = *rows_out;
    rows = cuda::CertifySide<T>();
    rows.queries = x_ref_.data();
    rows.keys = y_ref();
    rows.query_w = a_ref_.data();
    rows.key_w = b_ref_.data();
    rows.query_pot = f;
    rows.key_pot = g;
    rows.nq = n_;
    rows.nk = m_;
    rows.d = int(d_);
    rows.cost_scale = c_;
    rows.eps = eps;
    rows.out = cert_out_.data();
    rows.rho_inv = this->rho_inv(0);
    rows.fast = fast;
    rows.stats = true;
    rows.key_mass = mass_ref_[1];
    if (this->label_cost()) {
      rows.query_labels = labels_x_.data();
      rows.key_labels = labels_y_.data();
      rows.pair = pair_ref_[0].data();
      rows.classes = int(this->classes_);
    }
    cuda::CertifySide<T>& cols = *cols_out;
    cols = rows;
    std::swap(cols.queries, cols.keys);
    std::swap(cols.query_w, cols.key_w);
    std::swap(cols.query_pot, cols.key_pot);
    std::swap(cols.nq, cols.nk);
    std::swap(cols.query_labels, cols.key_labels);
    if (this->label_cost()) cols.pair = pair_ref_[1].data();
    cols.out = cert_out_.data() + kOut;
    cols.rho_inv = this->rho_inv(1);
    cols.stats = false;
    cols.key_mass = mass_ref_[0];
    cols.next = nullptr;
    if (kept) {
      for (int s = 0; s < 2; ++s) {
        if (!listed(s)) continue;
        cuda::CertifySide<T>& side = s == 0 ? rows : cols;
        side.run_ptr = run_ptr_of(s);
        side.runs = runs_of(s);
        side.key_tile = list_key_tile(s);
      }
    }
  }
  void certified_pass(int side, double eps, const T* f, const T* g, double relax, T* next,
                      CertificateSide* old_pair, CertificateSide* new_pair) override {
    constexpr int kOut = cuda::kCertifyOutputs;
    cuda::CertifySide<T> rows, cols;
    certify_sides(eps, f, g, true, true, &rows, &cols);
    cuda::CertifySide<T>& p = side == 0 ? rows : cols;
    p.next = next;
    p.relax = relax;
    p.out_next = cert_out_.data() + 2 * kOut;
    // Guard: only the fp32 kernel writes the update (the *_certified_applies say it runs).
    if (!cuda::certify_fast_applies(p)) {
      *old_pair = *new_pair = CertificateSide();
      new_pair->extra = HUGE_VAL;
      return;
    }
    cuda::launch_certify_side(p, stream_);
    const std::vector<double> h = to_host(ctx_, cert_out_.cview());  // synchronizes
    *old_pair = side_of(h, side == 0 ? 0 : kOut);
    *new_pair = side_of(h, 2 * kOut);
  }
  /// One side's sums from the downloaded outputs (offset o: 0 rows, kCertifyOutputs columns).
  static CertificateSide side_of(const std::vector<double>& h, int o) {
    CertificateSide sd;
    sd.error = h[std::size_t(o)];
    sd.mass = h[std::size_t(o + 1)];
    sd.weighted_t = h[std::size_t(o + 2)];
    std::memcpy(&sd.max_t, &h[std::size_t(o + 3)], sizeof(double));
    sd.cost = h[std::size_t(o + 4)];
    sd.potentials = h[std::size_t(o + 5)];
    sd.weight = h[std::size_t(o + 6)];
    sd.target_exposure = h[std::size_t(o + 7)];
    sd.extra = h[std::size_t(o + 8)];
    return sd;
  }
  cuda::PassTraits traits(bool block_list) const {
    cuda::PassTraits t;
    t.precision = precision_;
    t.label_cost = this->label_cost();
    t.block_list = block_list;
    t.dim = int(d_);
    return t;
  }
  void block_lists_changed() override {
    // Host lists (or none) replace the engine's own (engine_block_lists); a recorded step that
    // reads them goes first. (A set_block_lists the engine refuses leaves the oracle dense where
    // it had its own lists: the base restores only host lists.)
    cuda::graph_destroy(&graph_.g);
    engine_list_[0] = engine_list_[1] = cuda::DeviceBlockList();
    install_lists();
  }
  /// Whether side s has a key schedule: the host's lists or the engine's own.
  bool listed(int s) const { return this->block_list(s) || engine_list_[s].run_ptr; }
  const std::int64_t* run_ptr_of(int s) const {
    return engine_list_[s].run_ptr ? static_cast<const std::int64_t*>(engine_list_[s].run_ptr.get())
                                   : run_ptr_[s].data();
  }
  const std::int32_t* runs_of(int s) const {
    return engine_list_[s].run_ptr ? static_cast<const std::int32_t*>(engine_list_[s].runs.get())
                                   : runs_[s].data();
  }
  int list_key_tile(int s) const {
    const BlockList* l = this->block_list(s);
    return int(l ? l->key_tile : this->block_shape().key_tile);
  }
  void install_lists() {
    cuda::graph_destroy(&graph_.g);  // before the buffers a recorded step reads are replaced
    const bool listed = this->listed(0) || this->listed(1);
    // A family without the block-list schedule hands the passes to the exact kernel (the table
    // says so); a forced family that cannot serve lists is refused here.
    dispatch_ = listed ? cuda::dispatch_lse(traits(true), kernel_) : dense_;
    if (listed && !cuda::exact_layout(dispatch_.family) && dispatch_.family != dense_.family)
      throw InvalidArgument("block lists: the dispatch table chose " +
                            cuda::to_string(dispatch_.family) +
                            " but the oracle was prepared for " + cuda::to_string(dense_.family));
    for (int s = 0; s < 2; ++s) {
      const BlockList* l = this->block_list(s);  // the engine's own lists stay where they are
      run_ptr_[s] = l ? upload(l->run_ptr) : Buffer<std::int64_t>();
      runs_[s] = l ? upload(l->runs) : Buffer<std::int32_t>();
    }
    plan_splits();
  }
  /// Split-K counts and the partials workspace for the current family and schedule: the keys a
  /// row block scans are those of its list's tiles on average (all keys when dense).
  void plan_splits() {
    // The split counts and their buffers may change: a recorded step would use the old ones.
    cuda::graph_destroy(&graph_.g);
    splits_f_ = splits_g_ = splits_sym_ = 1;
    if (!gemm_family(dispatch_.family)) {
      constexpr bool kDouble = std::is_same<T, double>::value;
      const LseKernel k = family_kernel();
      const int ld = k == LseKernel::kSimt || k == LseKernel::kExpanded ? ld_simt_ : ld_upd_;
      auto keys = [&](int s, std::int64_t rows, std::int64_t nk) {
        const BlockList* l = this->block_list(s);
        if (engine_list_[s].run_ptr) {
          const std::int64_t row_tiles = std::max<std::int64_t>(engine_list_[s].tiles, 1);
          const std::int64_t tiles = std::int64_t(engine_list_[s].key_tiles);
          return std::min(nk, tiles * this->block_shape().key_tile / row_tiles);
        }
        if (!l) return nk;
        const std::int64_t row_tiles = (rows + l->row_tile - 1) / l->row_tile;
        std::int64_t tiles = 0;
        for (std::size_t q = 0; 2 * q < l->runs.size(); ++q)
          tiles += l->runs[2 * q + 1] - l->runs[2 * q];
        return std::min(nk, tiles * l->key_tile / std::max<std::int64_t>(row_tiles, 1));
      };
      const std::int64_t kf = keys(0, n_, m_), kg = keys(1, m_, n_);
      splits_f_ = cuda::choose_splits(k, ld, kDouble, n_, kf);
      splits_g_ = cuda::choose_splits(k, ld, kDouble, m_, kg);
      splits_sym_ = cuda::choose_splits(k, ld, kDouble, n_ + m_, std::min(kf, kg));
    }
    // Class-aligned tiles (label costs with rows ordered by class, mma.sync kernels, dense
    // schedules): their own split counts, 0 where the policy variant should be faster.
    class_splits_f_ = class_splits_g_ = class_splits_sym_ = 0;
    if (dispatch_.family == LseFamily::kMma && tensor_ != LseKernel::kSimt) {
      const std::int64_t fx = (n_ + cuda::kBlockRows - 1) / cuda::kBlockRows,
                         fy = (m_ + cuda::kBlockRows - 1) / cuda::kBlockRows;
      const bool cx = tiles_[0] > 0 && !listed(0), cy = tiles_[1] > 0 && !listed(1);
      if (cx)
        class_splits_f_ = cuda::class_tile_splits(tensor_, ld_upd_, tiles_[0], fx, splits_f_, m_);
      if (cy)
        class_splits_g_ = cuda::class_tile_splits(tensor_, ld_upd_, tiles_[1], fy, splits_g_, n_);
      if (cx && cy)
        class_splits_sym_ = cuda::class_tile_splits(tensor_, ld_upd_, tiles_[0] + tiles_[1],
                                                    fx + fy, splits_sym_, std::min(n_, m_));
    }
    const int smax = std::max(
        {splits_f_, splits_g_, splits_sym_, class_splits_f_, class_splits_g_, class_splits_sym_});
    if (pm_f_.size() < smax * n_) {
      pm_f_ = Buffer<T>(ctx_, smax * n_);
      ps_f_ = Buffer<T>(ctx_, smax * n_);
    }
    if (pm_g_.size() < smax * m_) {
      pm_g_ = Buffer<T>(ctx_, smax * m_);
      ps_g_ = Buffer<T>(ctx_, smax * m_);
    }
  }
  /// Whether the matrix value pass of side s (0: apply_mat, rows x; 1: apply_mat_t, rows y) runs
  /// on the tensor cores: tf32 with the mma family, that side's schedule dense, squared-Euclidean
  /// cost (the value kernel has no policies yet: the exact value pass serves the others).
  bool tensor_values(int s) const {
    return tensor_ == LseKernel::kTf32 && dispatch_.family == LseFamily::kMma &&
           !this->label_cost() && !listed(s) && ld_upd_ <= 64;
  }
  /// out = P V (f side: V m x k, out n x k) or P^T V (g side: V n x k, out m x k); shapes and
  /// spaces checked by the caller.
  void value_matrix(T eps, bool f_side, const T* f, const T* g, MatrixView<const T> V,
                    MatrixView<T> out, T* mass) {
    if constexpr (std::is_same<T, float>::value) {
      if (dispatch_.family == LseFamily::kGemmFp64) {
        // Float64 score blocks, P in double, P [V 1] by DGEMM (lib/cuda/lse_gemm.hpp): the
        // masses in the same pass. The sides as update_f / update_g see them.
        cuda::GemmValues gv;
        gv.side = f_side ? side(true, g, const_cast<T*>(f)) : side(false, f, const_cast<T*>(g));
        gv.query_logw = f_side ? la_.data() : lb_.data();
        gv.queries = f_side ? x64_.data() : y64();
        gv.keys = f_side ? y64() : x64_.data();
        gv.key_norms = f_side ? yn64_.data() : xn64_.data();
        gv.query_norms = f_side ? xn64_.data() : yn64_.data();
        gv.ld64 = int(d_);
        gv.values = V.data;
        gv.vstride = V.stride;
        gv.vcols = int(V.cols);
        gv.out = V.cols > 0 ? out.data : nullptr;
        gv.ostride = out.stride;
        gv.row_mass = mass;
        gv.eps = double(eps);
        gv.cost_scale = c_;
        gemm_->values(gv);
        return;
      }
    }
    if (V.cols == 0) {
      if (mass && f_side) apply(eps, f, g, ones(m_), mass);
      if (mass && !f_side) apply_t(eps, f, g, ones(n_), mass);
      return;
    }
    if constexpr (std::is_same<T, float>::value) {
      if (tensor_values(f_side ? 0 : 1)) {
        // On the tensor cores (lib/cuda/lse_values.hpp): scores by TF32 mma.sync, P V by fp16
        // mma.sync (TF32's significand, exact power-of-two scales), every
        // column in one pass (blocks of 64 columns). The kernel is the LSE pass's side with
        // values: the g side swaps the clouds exactly as update_g does (queries y~ with c|y~|^2,
        // keys x~ with f, c|x~|^2 and log a; row prefactor from g and log b), so P^T U is the
        // same kernel with the roles swapped.
        const std::int64_t rows = f_side ? n_ : m_, keys = f_side ? m_ : n_;
        cuda::MmaValuePass vp;
        vp.side = f_side ? side(true, g, const_cast<T*>(f)) : side(false, f, const_cast<T*>(g));
        vp.query_logw = f_side ? la_.data() : lb_.data();
        vp.ld = ld_upd_;
        vp.values = V.data;
        vp.vstride = V.stride;
        vp.vcols = int(V.cols);
        vp.out = out.data;
        vp.ostride = out.stride;
        vp.row_mass = mass;
        vp.eps = eps;
        vp.cost_scale = float(c_);
        vp.splits = cuda::values_tf32_splits(ld_upd_, vp.vcols, rows, keys);
        const std::int64_t need =
            std::int64_t(cuda::values_tf32_workspace_floats(rows, keys, vp.vcols, vp.splits));
        if (value_work_.size() < need) value_work_ = Buffer<float>(ctx_, need);
        vp.workspace = value_work_.data();
        cuda::run_values_tf32(vp, stream_);
        return;
      }
    }
    // Columns in chunks of kValueChunk, one streaming pass each (CUDA cores, double arithmetic).
    for (std::int64_t c0 = 0; c0 < V.cols; c0 += cuda::kValueChunk) {
      LseValuePass<T> p = value_pass(eps, f_side, f, g, ValueMode::kApply);
      p.values = V.data + c0;
      p.vstride = V.stride;
      p.vcols = int(std::min<std::int64_t>(cuda::kValueChunk, V.cols - c0));
      p.out = out.data + c0;
      p.ostride = out.stride;
      cuda::run_value_pass(p, stream_);
    }
    // The exact value pass has no row-sum output: one more pass with V = 1.
    if (mass) {
      if (f_side)
        apply(eps, f, g, ones(m_), mass);
      else
        apply_t(eps, f, g, ones(n_), mass);
    }
  }
  /// A device vector of `count` ones (grown on demand, kept).
  const T* ones(std::int64_t count) {
    if (ones_.size() < count) {
      ones_ = Buffer<T>(ctx_, count);
      ops_.fill(MatrixView<T>{ones_.data(), count, 1, 1, MemorySpace::kDevice}, T(1));
    }
    return ones_.data();
  }
  static bool gemm_family(LseFamily f) {
    return f == LseFamily::kGemm || f == LseFamily::kGemmFp32 || f == LseFamily::kGemm3xTf32 ||
           f == LseFamily::kGemmFp64;
  }
  /// Whether the current family's passes use the shifted form (u = beta + <x, y>, norms apart).
  bool shifted() const { return !cuda::exact_layout(dispatch_.family); }
  /// The LseKernel of the current family.
  LseKernel family_kernel() const {
    return dispatch_.family == LseFamily::kExact      ? LseKernel::kSimt
           : dispatch_.family == LseFamily::kExpanded ? LseKernel::kExpanded
                                                      : tensor_;
  }
  void run(const LsePass<T>& p) {
    if constexpr (std::is_same<T, float>::value) {
      if (dispatch_.family == LseFamily::kGemmFp64) {
        // Each side's double operands: side 0 reads rows x (queries xs_), side 1 rows y.
        cuda::GemmFp64Operands ops;
        ops.queries[0] = ops.keys[1] = x64_.data();
        ops.queries[1] = ops.keys[0] = y64();
        ops.key_norms[0] = yn64_.data();
        ops.key_norms[1] = xn64_.data();
        ops.ld = int(d_);
        int side_of[2] = {0, 1};
        for (int k = 0; k < p.nsides; ++k) side_of[k] = p.side[k].query_w == a_.data() ? 0 : 1;
        gemm_->run(p, &ops, side_of);
        return;
      }
      if (gemm_family(dispatch_.family)) {
        gemm_->run(p);
        return;
      }
    }
    cuda::run_lse_pass(family_kernel(), p, stream_);
  }
  template <class V, class U = typename V::value_type>
  Buffer<U> upload(const V& h) {
    Buffer<U> buf(ctx_, std::int64_t(h.size()));
    detail::copy_bytes(ctx_, buf.data(), MemorySpace::kDevice, h.data(), MemorySpace::kHost,
                       sizeof(U) * h.size());
    return buf;
  }
  /// A host view's rows x cols values as one contiguous device array: one copy from the caller's
  /// memory when its rows are contiguous, else packed on the host first.
  template <class U>
  Buffer<U> upload_rows(const MatrixView<const U>& v) {
    const std::int64_t count = v.rows * v.cols;
    if (v.stride == v.cols || v.rows <= 1) {
      Buffer<U> buf(ctx_, count);
      detail::copy_bytes(ctx_, buf.data(), MemorySpace::kDevice, v.data, MemorySpace::kHost,
                         sizeof(U) * std::size_t(count));
      return buf;
    }
    std::vector<U> packed(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < v.rows; ++i)
      for (std::int64_t k = 0; k < v.cols; ++k) packed[std::size_t(i * v.cols + k)] = v(i, k);
    return upload(packed);
  }
  /// src (rows x d) as rows x ld bf16-rounded values (zero padding); the other roundings are
  /// built on the device (lib/cuda/operands.hpp).
  static std::vector<T> bf16_padded(const detail::UninitVector<T>& src, std::int64_t rows, int ld) {
    const std::int64_t d = rows > 0 ? std::int64_t(src.size()) / rows : 0;
    std::vector<T> out(std::size_t(rows * ld), T(0));
    detail::for_chunks(rows, [&](int, std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i)
        for (std::int64_t k = 0; k < d; ++k)
          out[std::size_t(i * ld + k)] = T(bf16::round(float(src[std::size_t(i * d + k)])));
    }, detail::row_grain(ld));
    return out;
  }
  /// bf16-valued rows x ld (ld even) -> rows x ld/2 words, word w = bf16(v[2w]) | bf16(v[2w+1])
  /// << 16 (the little-endian bf16 array), each word's bits stored in one T (float only).
  static std::vector<T> pack_bf16(const std::vector<T>& v) {
    std::vector<T> out(v.size() / 2, T(0));
    if constexpr (std::is_same<T, float>::value) {
      for (std::size_t w = 0; w < out.size(); ++w) {
        const std::uint32_t word =
            std::uint32_t(bf16::bits(v[2 * w])) | (std::uint32_t(bf16::bits(v[2 * w + 1])) << 16);
        std::memcpy(&out[w], &word, 4);
      }
    }
    return out;
  }
  /// c |row|^2 of each row of xt (rows x ld, the bf16 copies), accumulated in double.
  std::vector<T> norms(const std::vector<T>& xt, std::int64_t rows, int ld) const {
    std::vector<T> out(static_cast<std::size_t>(rows));
    detail::for_chunks(rows, [&](int, std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        double s = 0;
        for (int k = 0; k < ld; ++k)
          s += double(xt[std::size_t(i * ld + k)]) * xt[std::size_t(i * ld + k)];
        out[std::size_t(i)] = T(c_ * s);
      }
    }, detail::row_grain(ld));
    return out;
  }
  /// The update passes' copies: rounded or split on the tensor-core families, else the exact
  /// kernel's (also the float32 GEMM's operands).
  bool own_copies() const {
    return shifted() && dispatch_.family != LseFamily::kGemmFp32 &&
           dispatch_.family != LseFamily::kGemmFp64;
  }
  const T* upd_x() const { return own_copies() ? xt_.data() : xs_.data(); }
  const T* upd_y() const { return own_copies() ? yt() : ys(); }
  /// The y side's copies: the x side's when both clouds are one view (same_).
  const T* ys() const { return same_ ? xs_.data() : ys_.data(); }
  const T* yt() const { return same_ && yt_.empty() ? xt_.data() : yt_.data(); }
  const double* y64() const { return same_ ? x64_.data() : y64_.data(); }
  const double* y_ref() const { return same_ ? x_ref_.data() : y_ref_.data(); }
  /// The unrounded copies (points(), barycentric values): separate on tf32 / bf16.
  const T* xs_vals() const { return xs_values_.empty() ? xs_.data() : xs_values_.data(); }
  const T* ys_vals() const {
    if (same_) return xs_vals();
    return ys_values_.empty() ? ys_.data() : ys_values_.data();
  }

  /// The side's policies: block list (side s: 0 = rows x, 1 = rows y) and pair term in the units
  /// of the exact (u = beta - C / c) or shifted (u = beta + <x, y> - C / 2c) form.
  void set_policies(LseSide<T>* sd, int s, bool exact_units) const {
    if (listed(s)) {
      sd->run_ptr = run_ptr_of(s);
      sd->runs = runs_of(s);
      sd->key_tile = list_key_tile(s);
    }
    if (this->label_cost()) {
      sd->query_labels = s == 0 ? labels_x_.data() : labels_y_.data();
      sd->key_labels = s == 0 ? labels_y_.data() : labels_x_.data();
      sd->pair = exact_units ? pair_exact_[s].data() : pair_shift_[s].data();
      sd->classes = int(this->classes_);
    }
  }

  /// Class-aligned row tiles of each side (LseSide::tile_start): the runs of equal labels in
  /// row order, cut into tiles of at most kBlockRows rows, each with its label's slot in the
  /// side's class potentials (slots numbered in order of first appearance). Kept only when rows
  /// are ordered by class well enough that the tiles number at most 1/8 more than the fixed
  /// tiling's (plus 8), and the class potentials fit kClassPotBudget floats; else the policy
  /// variant serves the pair term.
  void set_label_blocks(const PreparedProblem<T>& prep) {
    constexpr std::int64_t kClassPotBudget = std::int64_t(1) << 26;  // 256 MB of floats
    for (int s = 0; s < 2; ++s) {
      const std::vector<std::int32_t>& lab = s == 0 ? prep.labels_x : prep.labels_y;
      const std::int64_t rows = s == 0 ? n_ : m_, keys = s == 0 ? m_ : n_;
      const std::int64_t fixed = (rows + cuda::kBlockRows - 1) / cuda::kBlockRows;
      std::vector<std::int64_t> start;
      std::vector<std::int32_t> slot, slot_of(std::size_t(prep.classes), -1), classes;
      for (std::int64_t i = 0; i < rows;) {
        std::int64_t e = i + 1;
        while (e < rows && e - i < cuda::kBlockRows && lab[std::size_t(e)] == lab[std::size_t(i)])
          ++e;
        std::int32_t& k = slot_of[std::size_t(lab[std::size_t(i)])];
        if (k < 0) {
          k = std::int32_t(classes.size());
          classes.push_back(lab[std::size_t(i)]);
        }
        start.push_back(i);
        slot.push_back(k);
        i = e;
        if (std::int64_t(start.size()) > fixed + fixed / 8 + 8) break;
      }
      const std::int64_t tiles = std::int64_t(slot.size());
      if (rows == 0 || tiles > fixed + fixed / 8 + 8 ||
          std::int64_t(classes.size()) * keys > kClassPotBudget)
        continue;
      start.push_back(rows);
      tile_start_[s] = upload(start);
      tile_slot_[s] = upload(slot);
      slot_class_[s] = upload(classes);
      tiles_[s] = tiles;
      class_pot_[s] =
          Buffer<float>(ctx_, std::int64_t(classes.size()) * std::max<std::int64_t>(keys, 1));
    }
  }

  LsePass<T> pass(T eps, T relax, double* err, int splits) {
    LsePass<T> p;
    p.ld = !shifted()                                      ? ld_simt_
           : dispatch_.family == LseFamily::kGemm3xTf32 ? 3 * ld_upd_
                                                          : ld_upd_;
    p.dim = int(d_);
    p.splits = splits;
    p.eps = eps;
    p.cost_scale = T(c_);
    p.relax = relax;
    p.err = err;
    p.err_partials = err ? err_partials_.data() : nullptr;
    return p;
  }
  // One side of an update. f side: queries x, keys y with potential g, writes f. g side: the
  // clouds' roles swapped.
  LseSide<T> side(bool f_side, const T* key_pot, T* pot) {
    const bool tf32 = shifted();  // shifted form: every family but the exact one
    LseSide<T> s;
    s.queries = f_side ? upd_x() : upd_y();
    s.keys = f_side ? upd_y() : upd_x();
    s.key_pot = key_pot;
    s.key_norm = tf32 ? (f_side ? yn_.data() : xn_.data()) : nullptr;
    s.key_logw = f_side ? lb_.data() : la_.data();
    s.query_norm = tf32 ? (f_side ? xn_.data() : yn_.data()) : nullptr;
    s.query_w = f_side ? a_.data() : b_.data();
    s.rho_inv = this->rho_inv(f_side ? 0 : 1);
    s.pot = pot;
    s.part_max = f_side ? pm_f_.data() : pm_g_.data();
    s.part_sum = f_side ? ps_f_.data() : ps_g_.data();
    s.rows = f_side ? n_ : m_;
    s.nkeys = f_side ? m_ : n_;
    set_policies(&s, f_side ? 0 : 1, !tf32);
    return s;
  }
  LseSide<T> side_f(const T* g, T* f) { return side(true, g, f); }
  LseSide<T> side_g(const T* f, T* g) { return side(false, f, g); }
  LseValuePass<T> value_pass(T eps, bool f_side, const T* f, const T* g, ValueMode mode) {
    LseValuePass<T> p;
    LseSide<T>& s = p.side;
    s.queries = f_side ? xs_.data() : ys();
    s.keys = f_side ? ys() : xs_.data();
    s.key_pot = f_side ? g : f;
    s.key_logw = f_side ? lb_.data() : la_.data();
    s.pot = const_cast<T*>(f_side ? f : g);  // read only in value passes
    s.rows = f_side ? n_ : m_;
    s.nkeys = f_side ? m_ : n_;
    set_policies(&s, f_side ? 0 : 1, /*exact_units=*/true);
    p.query_logw = f_side ? la_.data() : lb_.data();
    p.ld = ld_simt_;
    p.mode = mode;
    p.eps = eps;
    p.cost_scale = T(c_);
    if (mode == ValueMode::kApply) {
      // Float data (fp32 / tf32 / bf16 engines): P v in float arithmetic, the accuracy of the
      // engine's own LSE passes (the HVP's CG runs two of these per iteration; in double they
      // were the whole cost). Barycentric maps and plan statistics stay in double.
      p.float_arithmetic = std::is_same<T, float>::value;
      // Split-K over the keys, as the LSE passes (one row per thread leaves most of the GPU idle
      // at 10^4 rows: 79 blocks of 128 rows for 132 SMs); the double kernel's occupancy rule.
      p.splits = cuda::choose_splits(LseKernel::kSimt, ld_simt_,
                                     /*is_double=*/!p.float_arithmetic, s.rows, s.nkeys);
      if (p.splits > 1) {
        const std::int64_t need = cuda::value_partials_doubles(s.rows, p.splits);
        if (value_partials_.size() < need) value_partials_ = Buffer<double>(ctx_, need);
        p.partials = value_partials_.data();
      }
    }
    return p;
  }

  const Context& ctx_;
  KernelChoice kernel_;  // this oracle's family choice (ContextOptions::kernel unless given)
  void* stream_;
  Precision precision_;
  double c_;
  cuda::Dispatch dense_, dispatch_;      // the family of a dense schedule / of the current one
  LseKernel tensor_ = LseKernel::kSimt;  // the tensor-core kernel of the precision, if any
  std::vector<double> center_;
  Buffer<std::int32_t> labels_x_, labels_y_;
  Buffer<double> pair_ref_[2];               // c_w W and its transpose (the certificate)
  Buffer<T> pair_exact_[2], pair_shift_[2];  // the same in the kernels' u units
  // Class-aligned row tiles per side (set_label_blocks): tile starts, slots, the slots' classes,
  // the class key potentials (slots x keys, rewritten by every update), the tile count.
  Buffer<std::int64_t> tile_start_[2];
  Buffer<std::int32_t> tile_slot_[2], slot_class_[2];
  Buffer<float> class_pot_[2];
  std::int64_t tiles_[2] = {0, 0};
  Buffer<std::int64_t> run_ptr_[2];
  Buffer<std::int32_t> runs_[2];
  // The engine's own lists (engine_block_lists; empty: none), and the kept pairs of the last
  // screen_descent that left them here (kept_valid_) until they are made into lists.
  cuda::DeviceBlockList engine_list_[2];
  cuda::KeptPairs kept_;
  bool kept_valid_ = false;
  Buffer<double> x_ref_, y_ref_, a_ref_, b_ref_, cert_out_;  // the certificate's data
  std::unique_ptr<cuda::CertifyGemm> cert_gemm_;  // d >= kCertifyGemmMinDim, built on first use
  bool same_ = false;  // one view for both clouds: the y-side copies are the x side's
  double mass_ref_[2] = {0, 0};  // the sums of a_ref_ and b_ref_ (the certificates' m_b)
  int ld_simt_ = 0, ld_upd_ = 0;
  int class_splits_f_ = 0, class_splits_g_ = 0, class_splits_sym_ = 0;
  int splits_f_ = 1, splits_g_ = 1, splits_sym_ = 1;
  Buffer<T> xs_, ys_, xs_values_, ys_values_, xt_, yt_, xn_, yn_, a_, b_, la_, lb_;
  Buffer<double> x64_, y64_;    // gemm-fp64: the centred clouds in double (rows x d)
  Buffer<double> xn64_, yn64_;  // gemm-fp64: c|x|^2, c|y|^2 in double
  Buffer<T> ones_;                 // ones(): the values of a mass pass
  Buffer<double> value_partials_;  // split-K states of the exact value passes
  Buffer<T> pm_f_, ps_f_, pm_g_, ps_g_, f_tmp_, g_tmp_;
  Buffer<double> err_partials_, stat_partials_;
  Buffer<float> value_work_;  // partials of the tensor-core value pass
  std::unique_ptr<cuda::LseGemm> gemm_;
  // repeat()'s recorded step, its key, and whether a capture was refused.
  struct Graph {
    cuda::StreamGraph g;
    Graph() = default;
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    ~Graph() { cuda::graph_destroy(&g); }
  } graph_;
  std::uint64_t graph_key_ = 0, last_key_ = 0;
  bool graph_refused_ = false;
  CudaVectorOps<T> ops_;
};

}  // namespace

template <class T>
std::unique_ptr<Oracle<T>> make_cuda_oracle(const Context& ctx, const Problem<T>& problem,
                                            Precision precision, KernelChoice kernel,
                                            bool clouds_checked) {
  if (precision == Precision::kTf32 && !std::is_same<T, float>::value)
    throw InvalidArgument("precision tf32 needs float data");
  if (precision == Precision::kBf16 && !std::is_same<T, float>::value)
    throw InvalidArgument("precision bf16 needs float data");
  // A host problem with a squared-Euclidean cost: its copies are built on the device from one
  // upload of each view (prepare_problem_scalars; at 2^20 points a side 32 MB uploaded instead of
  // 104 MB of host-made copies). Labels and bf16 (rounded on the host) take the host path, as do
  // device views (downloaded once for validation there).
  if (scalars_preparable(problem) && precision != Precision::kBf16)
    return std::make_unique<CudaOracle<T>>(ctx, prepare_problem_scalars(problem, clouds_checked),
                                           precision, kernel, &problem);
  return std::make_unique<CudaOracle<T>>(ctx, prepare_problem_data(problem, clouds_checked),
                                         precision, kernel);
}

template std::unique_ptr<Oracle<float>> make_cuda_oracle(const Context&, const Problem<float>&,
                                                         Precision, KernelChoice, bool);
template std::unique_ptr<Oracle<double>> make_cuda_oracle(const Context&, const Problem<double>&,
                                                          Precision, KernelChoice, bool);

}  // namespace kantor
