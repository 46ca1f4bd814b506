#include "lib/costs/problem_data.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "kantor/error.hpp"
#include "lib/core/for_chunks.hpp"
#include "lib/core/validate.hpp"
#include "lib/cuda/runtime.hpp"

namespace kantor {
namespace {

using detail::for_chunks;

/// Schedules on `region` the sums of f(i) over [0, count) in fixed chunks of kSumChunk terms,
/// one per entry of *part (resized; read it with in_chunk_order once the region has run).
template <class F>
void add_chunked_sum(detail::ChunkRegion* region, std::int64_t count, F f,
                     std::vector<double>* part) {
  part->assign(static_cast<std::size_t>((count + detail::kSumChunk - 1) / detail::kSumChunk), 0.0);
  region->add(count, detail::kSumChunk, [f, part](std::int64_t c, std::int64_t b, std::int64_t e) {
    double s = 0;
    for (std::int64_t i = b; i < e; ++i) s += f(i);
    (*part)[std::size_t(c)] = s;
  });
}

/// The chunk sums added in chunk order (the same result for any thread count).
double in_chunk_order(const std::vector<double>& part) {
  double total = 0;
  for (const double s : part) total += s;
  return total;
}

/// sum_i f(i) over [0, count) in double: add_chunked_sum's chunks, in chunk order.
template <class F>
double chunked_sum(std::int64_t count, const F& f) {
  detail::ChunkRegion region;
  std::vector<double> part;
  add_chunked_sum(&region, count, [&f](std::int64_t i) { return f(i); }, &part);
  region.run();
  return in_chunk_order(part);
}

/// The divisor of exact_weights (1 for an empty view or weights as given).
template <class T>
double weight_total(const VectorView<const T>& w, std::int64_t count, bool as_given) {
  return w.data == nullptr || as_given ? 1.0 : chunked_sum(count, [&](std::int64_t i) {
    return double(w[i]);
  });
}

/// The weights in double: uniform 1/count for an empty view; normalized to mass 1 unless `as_given`
/// (unbalanced problems use the caller's masses). Written by a parallel loop (the fresh pages
/// fault on the host threads, not on one).
template <class T>
detail::UninitVector<double> exact_weights(const VectorView<const T>& w, std::int64_t count,
                                           bool as_given) {
  detail::UninitVector<double> e(static_cast<std::size_t>(count));
  const double total = weight_total(w, count, as_given);
  for_chunks(count, [&](int, std::int64_t b, std::int64_t end) {
    for (std::int64_t i = b; i < end; ++i)
      e[std::size_t(i)] = exact_weight(w, i, count, total);
  });
  return e;
}

/// The clouds' bounding box: out's n, m, d, cost_scale, same_clouds, center and diameter.
template <class T>
void prepare_geometry(const Problem<T>& problem, PreparedProblem<T>* out) {
  const SqEuclidean<T>& p = problem.features();
  out->cost_scale = p.scale;
  out->n = p.x.rows;
  out->m = p.y.rows;
  out->d = p.x.cols;
  const std::int64_t d = out->d;
  const std::int64_t grain = detail::row_grain(d);  // rows per chunk of the loops below
  std::vector<double> lo(std::size_t(d), std::numeric_limits<double>::infinity());
  std::vector<double> hi(std::size_t(d), -std::numeric_limits<double>::infinity());
  // One view as both sides (a self-problem): checked, bounded and copied once.
  out->same_clouds = same_view(p.x, p.y) && same_view(problem.reference_x, problem.reference_y);
  // Per-chunk extents of both clouds in one region (detail::ChunkRegion), merged after it.
  const bool two = !same_view(p.x, p.y);
  const std::int64_t cx = (p.x.rows + grain - 1) / grain;
  const std::int64_t cy = two ? (p.y.rows + grain - 1) / grain : 0;
  std::vector<double> clo(std::size_t((cx + cy) * d), std::numeric_limits<double>::infinity());
  std::vector<double> chi(std::size_t((cx + cy) * d), -std::numeric_limits<double>::infinity());
  detail::ChunkRegion region;
  auto extend = [&](const MatrixView<const T>& v, std::int64_t first) {
    region.add(v.rows, grain, [&, v, first](std::int64_t c, std::int64_t b, std::int64_t e) {
      double* l = clo.data() + (first + c) * d;
      double* h = chi.data() + (first + c) * d;
      // One coordinate at a time, its extent in registers (a chunk's rows stay in cache).
      for (std::int64_t k = 0; k < d; ++k) {
        double lk = l[k], hk = h[k];
        for (std::int64_t i = b; i < e; ++i) {
          const double x = double(v(i, k));
          lk = std::min(lk, x);
          hk = std::max(hk, x);
        }
        l[k] = lk;
        h[k] = hk;
      }
    });
  };
  extend(p.x, 0);
  if (two) extend(p.y, cx);
  region.run();
  for (std::int64_t t = 0; t < cx + cy; ++t)
    for (std::int64_t k = 0; k < d; ++k) {
      lo[std::size_t(k)] = std::min(lo[std::size_t(k)], clo[std::size_t(t * d + k)]);
      hi[std::size_t(k)] = std::max(hi[std::size_t(k)], chi[std::size_t(t * d + k)]);
    }
  out->center.resize(std::size_t(d));
  double diag2 = 0;
  for (std::int64_t k = 0; k < d; ++k) {
    out->center[std::size_t(k)] = 0.5 * (lo[std::size_t(k)] + hi[std::size_t(k)]);
    diag2 += (hi[std::size_t(k)] - lo[std::size_t(k)]) * (hi[std::size_t(k)] - lo[std::size_t(k)]);
  }
  out->diameter = std::sqrt(diag2);
}

/// max_i |x~_i|^2 in double over the centred rows x~_ik = T(v_ik - center_k) (the stored copies'
/// values, computed on the fly).
template <class T>
double centred_sq_norm_max(const MatrixView<const T>& v, const std::vector<double>& center,
                           std::int64_t b, std::int64_t e) {
  double m = 0;
  for (std::int64_t i = b; i < e; ++i) {
    double s2 = 0;
    for (std::int64_t k = 0; k < v.cols; ++k) {
      const double c = double(T(double(v(i, k)) - center[std::size_t(k)]));
      s2 += c * c;
    }
    m = std::max(m, s2);
  }
  return m;
}

template <class T>
double max_centred_sq_norm(const MatrixView<const T>& v, const std::vector<double>& center) {
  std::vector<double> cmax(detail::kMaxChunks, 0.0);
  const int used = for_chunks(v.rows, [&](int t, std::int64_t b, std::int64_t e) {
    cmax[std::size_t(t)] = centred_sq_norm_max(v, center, b, e);
  }, detail::row_grain(v.cols));
  double out = 0;
  for (int t = 0; t < used; ++t) out = std::max(out, cmax[std::size_t(t)]);
  return out;
}

/// Host copy of a device matrix view (its rows x stride block, stride kept).
template <class T>
std::vector<T> download(const MatrixView<const T>& v) {
  std::vector<T> h(std::size_t((v.rows - 1) * v.stride + v.cols));
  cuda::memcpy_async(h.data(), v.data, sizeof(T) * h.size(), 1, nullptr);
  cuda::synchronize_stream(nullptr);
  return h;
}
template <class T>
std::vector<T> download(const VectorView<const T>& v) {
  std::vector<T> h(std::size_t(v.size));
  cuda::memcpy_async(h.data(), v.data, sizeof(T) * h.size(), 1, nullptr);
  cuda::synchronize_stream(nullptr);
  return h;
}

}  // namespace

template <class T>
PreparedProblem<T> prepare_problem_data(const Problem<T>& problem, bool clouds_checked) {
  detail::validate_with_totals(problem, nullptr, nullptr, !clouds_checked);
  const SqEuclidean<T>& p = problem.features();
  const LabelAugmented<T>* lab = problem.labels();
  const bool x_dev = p.x.space == MemorySpace::kDevice, y_dev = p.y.space == MemorySpace::kDevice;
  const bool a_dev = problem.a.data && problem.a.space == MemorySpace::kDevice;
  const bool b_dev = problem.b.data && problem.b.space == MemorySpace::kDevice;
  const bool l_dev = lab && (lab->labels_x.space == MemorySpace::kDevice ||
                             lab->labels_y.space == MemorySpace::kDevice ||
                             lab->table.space == MemorySpace::kDevice);
  if (x_dev || y_dev || a_dev || b_dev || l_dev) {
    // Device-resident inputs: setup is a host pass anyway (validation, centring, padding), so
    // they are copied to the host once, after all device work (any stream) has finished, and
    // then validated element by element like host inputs.
    cuda::device_synchronize();
    std::vector<T> hx, hy, ha, hb;
    Problem<T> q = problem;
    SqEuclidean<T>& qf = q.features();
    if (x_dev) hx = download(p.x), qf.x = {hx.data(), p.x.rows, p.x.cols, p.x.stride};
    if (y_dev) hy = download(p.y), qf.y = {hy.data(), p.y.rows, p.y.cols, p.y.stride};
    std::vector<std::int32_t> hlx, hly;
    std::vector<double> htab;
    if (l_dev) {
      LabelAugmented<T>& ql = std::get<LabelAugmented<T>>(q.cost);
      if (lab->labels_x.space == MemorySpace::kDevice)
        hlx = download(lab->labels_x), ql.labels_x = {hlx.data(), lab->labels_x.size};
      if (lab->labels_y.space == MemorySpace::kDevice)
        hly = download(lab->labels_y), ql.labels_y = {hly.data(), lab->labels_y.size};
      if (lab->table.space == MemorySpace::kDevice)
        htab = download(lab->table),
        ql.table = {htab.data(), lab->table.rows, lab->table.cols, lab->table.stride};
    }
    if (a_dev) ha = download(problem.a), q.a = {ha.data(), problem.a.size};
    if (b_dev) hb = download(problem.b), q.b = {hb.data(), problem.b.size};
    std::vector<double> hrx, hry;
    const MatrixView<const double>& rx = problem.reference_x;
    const MatrixView<const double>& ry = problem.reference_y;
    if (rx.data && rx.space == MemorySpace::kDevice)
      hrx = download(rx), q.reference_x = {hrx.data(), rx.rows, rx.cols, rx.stride};
    if (ry.data && ry.space == MemorySpace::kDevice)
      hry = download(ry), q.reference_y = {hry.data(), ry.rows, ry.cols, ry.stride};
    return prepare_problem_data(q);
  }
  PreparedProblem<T> out;
  prepare_geometry(problem, &out);
  const std::int64_t d = out.d;
  const std::int64_t grain = detail::row_grain(d);  // rows per chunk of the loops below
  auto copy_centred = [&](const MatrixView<const T>& v, detail::UninitVector<T>* dst) {
    dst->resize(std::size_t(v.rows * d));
    for_chunks(v.rows, [&](int, std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i)
        for (std::int64_t k = 0; k < d; ++k)
          (*dst)[std::size_t(i * d + k)] = T(double(v(i, k)) - out.center[std::size_t(k)]);
    }, grain);
  };
  copy_centred(p.x, &out.x);
  if (!out.same_clouds) copy_centred(p.y, &out.y);
  out.rho_a = problem.rho_a;
  out.rho_b = problem.rho_b;
  out.a_ref = exact_weights(problem.a, out.n, problem.unbalanced());
  out.b_ref = exact_weights(problem.b, out.m, problem.unbalanced());
  auto narrow = [](const detail::UninitVector<double>& src, detail::UninitVector<T>* dst) {
    dst->resize(src.size());
    for_chunks(std::int64_t(src.size()), [&](int, std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) (*dst)[std::size_t(i)] = T(src[std::size_t(i)]);
    });
  };
  narrow(out.a_ref, &out.a);
  narrow(out.b_ref, &out.b);
  out.mass_a = chunked_sum(out.n, [&](std::int64_t i) { return out.a_ref[std::size_t(i)]; });
  out.mass_b = chunked_sum(out.m, [&](std::int64_t i) { return out.b_ref[std::size_t(i)]; });
  // Guard: a zero weight masks its point (log 0 = -inf, which every engine's pass treats as a
  // masked key and never as a NaN source).
  auto logs = [](const detail::UninitVector<T>& w, bool uniform) {
    detail::UninitVector<T> l(w.size());
    // Uniform weights (an empty view): every entry is the same value, and so is its log.
    const T same = uniform && !w.empty() ? log_weight(w[0]) : T(0);
    for_chunks(std::int64_t(w.size()), [&](int, std::int64_t b, std::int64_t e) {
      if (uniform) {
        std::fill(l.begin() + b, l.begin() + e, same);
        return;
      }
      for (std::int64_t i = b; i < e; ++i) l[std::size_t(i)] = log_weight(w[std::size_t(i)]);
    });
    return l;
  };
  out.la = logs(out.a, problem.a.data == nullptr);
  out.lb = logs(out.b, problem.b.data == nullptr);
  out.max_sq_norm = max_centred_sq_norm(p.x, out.center);
  if (!out.same_clouds)
    out.max_sq_norm = std::max(out.max_sq_norm, max_centred_sq_norm(p.y, out.center));
  // The certificate's copies: exact (a float converts to double exactly), uncentred.
  auto exact = [&](const MatrixView<const T>& v, const MatrixView<const double>& ref) {
    detail::UninitVector<double> e(std::size_t(v.rows * d));
    for_chunks(v.rows, [&](int, std::int64_t b, std::int64_t end) {
      for (std::int64_t i = b; i < end; ++i)
        for (std::int64_t k = 0; k < d; ++k)
          e[std::size_t(i * d + k)] = ref.data ? ref(i, k) : double(v(i, k));
    }, grain);
    return e;
  };
  out.x_ref = exact(p.x, problem.reference_x);
  if (!out.same_clouds) out.y_ref = exact(p.y, problem.reference_y);
  if (lab) {
    out.classes = lab->table.rows;
    out.labels_x.assign(lab->labels_x.data, lab->labels_x.data + out.n);
    out.labels_y.assign(lab->labels_y.data, lab->labels_y.data + out.m);
    out.pair.resize(std::size_t(out.classes * out.classes));
    for (std::int64_t r = 0; r < out.classes; ++r)
      for (std::int64_t k = 0; k < out.classes; ++k) {
        const double v = lab->table_scale * lab->table(r, k);
        out.pair[std::size_t(r * out.classes + k)] = v;
        out.max_pair = std::max(out.max_pair, v);
      }
  }
  out.max_cost = p.scale * out.diameter * out.diameter + out.max_pair;
  return out;
}

template <class T>
PreparedProblem<T> prepare_problem_scalars(const Problem<T>& problem, bool clouds_checked) {
  double total_a = 1, total_b = 1;  // check_weights' sums: weight_total's, bit for bit
  detail::validate_with_totals(problem, &total_a, &total_b, !clouds_checked);
  if (!scalars_preparable(problem))
    throw InvalidArgument("prepare_problem_scalars: host views and a squared-Euclidean cost only");
  const SqEuclidean<T>& p = problem.features();
  PreparedProblem<T> out;
  out.scalars_only = true;
  prepare_geometry(problem, &out);
  out.rho_a = problem.rho_a;
  out.rho_b = problem.rho_b;
  const bool given = problem.unbalanced();
  out.weight_total_a = problem.a.data == nullptr || given ? 1.0 : total_a;
  out.weight_total_b = problem.b.data == nullptr || given ? 1.0 : total_b;
  // The masses (chunked sums of exact_weights' values: prepare_problem_data's, bit for bit) and
  // the centred norms (max_centred_sq_norm's) of both sides in one region.
  const std::int64_t grain = detail::row_grain(out.d);
  auto chunks = [](std::int64_t count, std::int64_t chunk) { return (count + chunk - 1) / chunk; };
  std::vector<double> part_a, part_b;
  std::vector<double> norm(std::size_t(chunks(out.n, grain) + chunks(out.m, grain)), 0.0);
  detail::ChunkRegion region;
  auto mass = [&](const VectorView<const T>& w, std::int64_t count, double total,
                  std::vector<double>* part) {
    add_chunked_sum(&region, count,
                    [w, count, total](std::int64_t i) { return exact_weight(w, i, count, total); },
                    part);
  };
  mass(problem.a, out.n, out.weight_total_a, &part_a);
  mass(problem.b, out.m, out.weight_total_b, &part_b);
  auto norms = [&](const MatrixView<const T>& v, std::int64_t first) {
    region.add(v.rows, grain, [&, v, first](std::int64_t c, std::int64_t b, std::int64_t e) {
      norm[std::size_t(first + c)] = centred_sq_norm_max(v, out.center, b, e);
    });
  };
  norms(p.x, 0);
  if (!out.same_clouds) norms(p.y, chunks(out.n, grain));
  region.run();
  out.mass_a = in_chunk_order(part_a);
  out.mass_b = in_chunk_order(part_b);
  out.max_sq_norm = 0;
  for (const double v : norm) out.max_sq_norm = std::max(out.max_sq_norm, v);
  out.max_cost = p.scale * out.diameter * out.diameter;
  return out;
}

template PreparedProblem<float> prepare_problem_data(const Problem<float>&, bool);
template PreparedProblem<double> prepare_problem_data(const Problem<double>&, bool);
template PreparedProblem<float> prepare_problem_scalars(const Problem<float>&, bool);
template PreparedProblem<double> prepare_problem_scalars(const Problem<double>&, bool);

}  // namespace kantor
