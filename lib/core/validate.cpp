// Validation of problems at the API boundary: every message names the field, the value and what
// was expected.
#include <algorithm>
#include <cmath>
#include <deque>
#include <utility>
#include <vector>
#include <sstream>
#include <string>

#include "kantor/error.hpp"
#include "lib/core/for_chunks.hpp"
#include "lib/core/validate.hpp"
#include "kantor/oracle.hpp"
#include "kantor/problem.hpp"

namespace kantor {
namespace {

// The content scans of validate(), all in one parallel region (one fork and join instead of one
// per view: at 2^17 points a side a problem with reference coordinates took 2 ms to prepare on
// the 16-core GPU machine, mostly in 14 such regions): each host view is cut into fixed chunks;
// a cloud's chunk records its first non-finite row, a weight chunk (2^16 weights: the total is
// the same for any thread count) its first bad weight and its sum. The checks then read the
// results in validate()'s order, so every message is the one a serial scan would give.
class Scans {
 public:
  Scans() = default;
  Scans(const Scans&) = delete;  // the region's loops hold references into scans_
  Scans& operator=(const Scans&) = delete;
  template <class T>
  int cloud(const MatrixView<const T>& v) {
    Scan& s = add(v.rows, detail::row_grain(v.cols), false);
    region_.add(v.rows, s.chunk, [v, &s](std::int64_t c, std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        bool finite = true;
        for (std::int64_t k = 0; k < v.cols; ++k) finite &= bool(std::isfinite(double(v(i, k))));
        if (!finite) {
          s.bad[std::size_t(c)] = i;
          return;
        }
      }
    });
    return int(scans_.size()) - 1;
  }
  template <class T>
  int weights(const VectorView<const T>& w) {
    Scan& s = add(w.size, detail::kSumChunk, true);
    region_.add(w.size, s.chunk, [w, &s](std::int64_t c, std::int64_t b, std::int64_t e) {
      double sum = 0;
      for (std::int64_t i = b; i < e; ++i) {
        const double v = double(w[i]);
        if (!std::isfinite(v) || v < 0) {
          s.bad[std::size_t(c)] = i;
          return;
        }
        sum += v;
      }
      s.part[std::size_t(c)] = sum;
    });
    return int(scans_.size()) - 1;
  }
  void run() const { region_.run(); }
  /// The first bad entry of scan s (-1: none).
  std::int64_t first_bad(int s) const {
    for (const std::int64_t i : scans_[std::size_t(s)].bad)
      if (i >= 0) return i;
    return -1;
  }
  /// The sum of scan s's chunk sums in chunk order (weights without a bad one).
  double total(int s) const {
    double t = 0;
    for (const double v : scans_[std::size_t(s)].part) t += v;
    return t;
  }

 private:
  struct Scan {
    std::int64_t chunk;
    std::vector<std::int64_t> bad;
    std::vector<double> part;
  };
  Scan& add(std::int64_t count, std::int64_t chunk, bool sums) {
    const std::size_t chunks = count > 0 ? std::size_t((count + chunk - 1) / chunk) : 0;
    scans_.push_back({chunk, std::vector<std::int64_t>(chunks, -1),
                      std::vector<double>(sums ? chunks : 0, 0.0)});
    return scans_.back();
  }
  std::deque<Scan> scans_;  // stable addresses: the region's bodies hold references
  detail::ChunkRegion region_;
};

// A cloud's shape and data, checked before any scan reads it.
template <class T>
bool cloud_readable(const MatrixView<const T>& v) {
  return v.rows > 0 && v.cols > 0 && v.stride >= v.cols && v.data != nullptr &&
         v.space == MemorySpace::kHost;
}

template <class T>
void check_cloud(const MatrixView<const T>& v, const char* name, const Scans& scans, int scan) {
  if (v.rows <= 0)
    throw InvalidArgument(std::string("problem.") + name + ": empty point cloud (0 points)");
  if (v.cols <= 0)
    throw InvalidArgument(std::string("problem.") + name + ": points have dimension " +
                          std::to_string(v.cols) + " (expected >= 1)");
  if (v.stride < v.cols)
    throw InvalidArgument(std::string("problem.") + name + ": stride " + std::to_string(v.stride) +
                          " < cols " + std::to_string(v.cols));
  if (v.data == nullptr) throw InvalidArgument(std::string("problem.") + name + ": null data");
  if (v.space != MemorySpace::kHost || scan < 0) return;  // device data, or not scanned
  const std::int64_t i = scans.first_bad(scan);
  if (i < 0) return;
  for (std::int64_t k = 0; k < v.cols; ++k)
    if (!std::isfinite(double(v(i, k)))) {
      std::ostringstream os;
      os << "problem." << name << ": non-finite coordinate " << double(v(i, k)) << " at point "
         << i << ", coordinate " << k;
      throw InvalidArgument(os.str());
    }
}

// Weights of the right count with data (or empty: uniform), checked before a scan reads them.
template <class T>
bool weights_readable(const VectorView<const T>& w, std::int64_t expected) {
  return w.data != nullptr && expected > 0 && w.size == expected && w.space == MemorySpace::kHost;
}

template <class T>
double check_weights(const VectorView<const T>& w, std::int64_t expected, const char* name,
                     const Scans& scans, int scan) {
  if (w.data == nullptr && w.size == 0) return 1.0;  // uniform
  if (w.size != expected)
    throw InvalidArgument(std::string("problem.") + name + ": " + std::to_string(w.size) +
                          " weights for " + std::to_string(expected) + " points");
  if (w.data == nullptr)
    throw InvalidArgument(std::string("problem.") + name + ": null data for " +
                          std::to_string(w.size) + " weights (leave the view empty for uniform)");
  if (w.space != MemorySpace::kHost || scan < 0) return std::nan("");  // device data
  if (const std::int64_t i = scans.first_bad(scan); i >= 0) {
    std::ostringstream os;
    os << "problem." << name << ": weight " << i << " is " << double(w[i])
       << " (expected finite and >= 0)";
    throw InvalidArgument(os.str());
  }
  const double total = scans.total(scan);
  if (!(total > 0))
    throw InvalidArgument(std::string("problem.") + name + ": total mass is 0 (all weights zero)");
  // Guard: an overflowing total would normalize every weight to 0.
  if (!std::isfinite(total))
    throw InvalidArgument(std::string("problem.") + name +
                          ": total mass overflows double (rescale the weights)");
  return total;
}

void check_labels(const VectorView<const std::int32_t>& l, std::int64_t expected,
                  std::int64_t classes, const char* name) {
  if (l.size != expected)
    throw InvalidArgument(std::string("problem.cost.") + name + ": " + std::to_string(l.size) +
                          " labels for " + std::to_string(expected) + " points");
  if (l.data == nullptr)
    throw InvalidArgument(std::string("problem.cost.") + name + ": null data for " +
                          std::to_string(l.size) + " labels");
  if (l.space != MemorySpace::kHost) return;
  for (std::int64_t i = 0; i < l.size; ++i)
    if (l[i] < 0 || l[i] >= classes) {
      std::ostringstream os;
      os << "problem.cost." << name << ": label " << l[i] << " at point " << i
         << " is outside the table's label range [0, " << classes << ")";
      throw InvalidArgument(os.str());
    }
}

template <class T>
void check_label_cost(const LabelAugmented<T>& c, std::int64_t n, std::int64_t m) {
  const MatrixView<const double>& w = c.table;
  if (w.rows <= 0 || w.rows != w.cols)
    throw InvalidArgument("problem.cost.table: the label table must be L x L with L >= 1 (one "
                          "label space for both sides), got " +
                          std::to_string(w.rows) + " x " + std::to_string(w.cols));
  if (w.stride < w.cols)
    throw InvalidArgument("problem.cost.table: stride " + std::to_string(w.stride) + " < cols " +
                          std::to_string(w.cols));
  if (w.data == nullptr) throw InvalidArgument("problem.cost.table: null data");
  if (!(c.table_scale >= 0) || !std::isfinite(c.table_scale))
    throw InvalidArgument("problem.cost.table_scale must be finite and >= 0, got " +
                          format_number(c.table_scale));
  if (w.space == MemorySpace::kHost)
    for (std::int64_t r = 0; r < w.rows; ++r)
      for (std::int64_t k = 0; k < w.cols; ++k)
        if (!std::isfinite(w(r, k)) || w(r, k) < 0) {
          std::ostringstream os;
          os << "problem.cost.table: entry (" << r << ", " << k << ") is " << w(r, k)
             << " (expected finite and >= 0)";
          throw InvalidArgument(os.str());
        }
  check_labels(c.labels_x, n, w.rows, "labels_x");
  check_labels(c.labels_y, m, w.rows, "labels_y");
}

}  // namespace

namespace detail {

template <class T>
void validate_with_totals(const Problem<T>& p, double* total_a, double* total_b,
                          bool scan_clouds) {
  const SqEuclidean<T>& fe = p.features();
  const bool rx = p.reference_x.data != nullptr || p.reference_x.rows != 0;
  const bool ry = p.reference_y.data != nullptr || p.reference_y.rows != 0;
  // Every content scan at once (Scans), then the checks in order.
  Scans scans;
  auto cloud = [&](const auto& v) {
    return scan_clouds && cloud_readable(v) ? scans.cloud(v) : -1;
  };
  const int sx = cloud(fe.x);
  const int sy = same_view(fe.x, fe.y) ? -1 : cloud(fe.y);
  const int sa = weights_readable(p.a, fe.x.rows) ? scans.weights(p.a) : -1;
  const int sb = weights_readable(p.b, fe.y.rows) ? scans.weights(p.b) : -1;
  const int srx = rx ? cloud(p.reference_x) : -1;
  const int sry = rx && !same_view(p.reference_x, p.reference_y) ? cloud(p.reference_y) : -1;
  scans.run();
  check_cloud(fe.x, "x", scans, sx);
  if (!same_view(fe.x, fe.y)) check_cloud(fe.y, "y", scans, sy);
  if (fe.x.cols != fe.y.cols)
    throw InvalidArgument("problem: dimension mismatch, x has " + std::to_string(fe.x.cols) +
                          " coordinates per point and y has " + std::to_string(fe.y.cols));
  const double ma = check_weights(p.a, fe.x.rows, "a", scans, sa);
  const double mb = check_weights(p.b, fe.y.rows, "b", scans, sb);
  if (total_a) *total_a = ma;
  if (total_b) *total_b = mb;
  for (const auto& [rho, name] : {std::pair<double, const char*>{p.rho_a, "rho_a"},
                                  std::pair<double, const char*>{p.rho_b, "rho_b"}})
    if (!(rho > 0))
      throw InvalidArgument(std::string("problem.") + name +
                            " (the marginal penalty) must be > 0 (infinity: a strict marginal), got " +
                            format_number(rho));
  if (!p.unbalanced() && std::isfinite(ma) && std::isfinite(mb) &&
      std::abs(ma - mb) > 1e-6 * std::max(ma, mb)) {
    std::ostringstream os;
    os.precision(17);
    os << "problem: weights have different total mass (a: " << ma << ", b: " << mb
       << "; balanced OT needs equal mass to 1e-6 relative; set rho_a / rho_b for unbalanced OT)";
    throw InvalidArgument(os.str());
  }
  if (!(fe.scale > 0) || !std::isfinite(fe.scale))
    throw InvalidArgument("problem.cost.scale must be finite and > 0, got " +
                          format_number(fe.scale));
  if (const LabelAugmented<T>* l = p.labels()) check_label_cost(*l, fe.x.rows, fe.y.rows);
  if (!(p.epsilon > 0) || !std::isfinite(p.epsilon))
    throw InvalidArgument("problem.epsilon must be finite and > 0, got " +
                          format_number(p.epsilon));
  if (rx != ry)
    throw InvalidArgument(std::string("problem.") + (rx ? "reference_y" : "reference_x") +
                          " is empty while problem." + (rx ? "reference_x" : "reference_y") +
                          " is set (give both or neither)");
  if (rx) {
    check_cloud(p.reference_x, "reference_x", scans, srx);
    if (!same_view(p.reference_x, p.reference_y))
      check_cloud(p.reference_y, "reference_y", scans, sry);
    auto same_shape = [](const auto& r, const auto& v, const char* rn, const char* vn) {
      if (r.rows != v.rows || r.cols != v.cols)
        throw InvalidArgument(std::string("problem.") + rn + " is " + std::to_string(r.rows) +
                              " x " + std::to_string(r.cols) + " but problem." + vn + " is " +
                              std::to_string(v.rows) + " x " + std::to_string(v.cols));
    };
    same_shape(p.reference_x, fe.x, "reference_x", "x");
    same_shape(p.reference_y, fe.y, "reference_y", "y");
  }
}

template void validate_with_totals(const Problem<float>&, double*, double*, bool);
template void validate_with_totals(const Problem<double>&, double*, double*, bool);

template <class T>
void validate_clouds_checked(const Problem<T>& p) {
  validate_with_totals(p, nullptr, nullptr, false);
}

template void validate_clouds_checked(const Problem<float>&);
template void validate_clouds_checked(const Problem<double>&);

}  // namespace detail

template <class T>
void validate(const Problem<T>& p) {
  detail::validate_with_totals(p, nullptr, nullptr);
}

template void validate(const Problem<float>&);
template void validate(const Problem<double>&);

}  // namespace kantor

namespace kantor {

void validate_block_list(const BlockList& list, std::int64_t rows, std::int64_t keys,
                         const BlockShape& shape, const std::string& what) {
  const std::string w = "block list (" + what + "): ";
  if (list.row_tile != shape.row_tile)
    throw InvalidArgument(w + "row_tile is " + std::to_string(list.row_tile) +
                          " but this engine's row tile is " + std::to_string(shape.row_tile) +
                          " (Oracle::block_shape)");
  if (list.key_tile <= 0 || list.key_tile % shape.key_tile != 0)
    throw InvalidArgument(w + "key_tile is " + std::to_string(list.key_tile) +
                          " (expected a positive multiple of " + std::to_string(shape.key_tile) +
                          ", Oracle::block_shape)");
  const std::int64_t row_tiles = (rows + list.row_tile - 1) / list.row_tile;
  const std::int64_t key_tiles = (keys + list.key_tile - 1) / list.key_tile;
  if (std::int64_t(list.run_ptr.size()) != row_tiles + 1)
    throw InvalidArgument(w + "run_ptr has " + std::to_string(list.run_ptr.size()) +
                          " entries for " + std::to_string(row_tiles) +
                          " row tiles (expected row tiles + 1)");
  if (list.run_ptr[0] != 0) throw InvalidArgument(w + "run_ptr[0] must be 0");
  for (std::int64_t r = 0; r < row_tiles; ++r)
    if (list.run_ptr[std::size_t(r + 1)] < list.run_ptr[std::size_t(r)])
      throw InvalidArgument(w + "run_ptr decreases at row tile " + std::to_string(r));
  if (std::int64_t(list.runs.size()) != 2 * list.run_ptr.back())
    throw InvalidArgument(w + "runs has " + std::to_string(list.runs.size()) + " entries but " +
                          "run_ptr ends at " + std::to_string(list.run_ptr.back()) +
                          " runs (expected 2 per run)");
  // Row tile r's runs: inside [0, key_tiles], not reversed, not overlapping. Throws (message)
  // or returns false (quiet) at the first defect. Runs in increasing order (what the multiscale
  // screen emits) are checked in one pass; others are sorted first.
  auto check_tile = [&](std::int64_t r, bool quiet) -> bool {
    const std::int64_t q0 = list.run_ptr[std::size_t(r)], q1 = list.run_ptr[std::size_t(r + 1)];
    bool ordered = true;
    std::int32_t last_end = 0;
    for (std::int64_t q = q0; q < q1; ++q) {
      const std::int32_t b = list.runs[std::size_t(2 * q)], e = list.runs[std::size_t(2 * q + 1)];
      if (b < 0 || e < b || e > key_tiles) {
        if (quiet) return false;
        throw InvalidArgument(w + "row tile " + std::to_string(r) + ", run " + std::to_string(q) +
                              ": key tiles [" + std::to_string(b) + ", " + std::to_string(e) +
                              ") outside [0, " + std::to_string(key_tiles) + "] or reversed");
      }
      if (e == b) continue;
      if (b < last_end) ordered = false;
      last_end = e;
    }
    if (ordered) return true;
    std::vector<std::pair<std::int32_t, std::int32_t>> rr;
    for (std::int64_t q = q0; q < q1; ++q) {
      const std::int32_t b = list.runs[std::size_t(2 * q)], e = list.runs[std::size_t(2 * q + 1)];
      if (e > b) rr.emplace_back(b, e);
    }
    std::sort(rr.begin(), rr.end());
    for (std::size_t k = 1; k < rr.size(); ++k)
      if (rr[k].first < rr[k - 1].second) {
        if (quiet) return false;
        throw InvalidArgument(w + "row tile " + std::to_string(r) + ": runs [" +
                              std::to_string(rr[k - 1].first) + ", " +
                              std::to_string(rr[k - 1].second) + ") and [" +
                              std::to_string(rr[k].first) + ", " + std::to_string(rr[k].second) +
                              ") overlap");
      }
    return true;
  };
  // On the host threads (lists of millions of runs: the multiscale solver's at 2^20 points);
  // the first defective tile, in tile order, is checked again to name its defect.
  std::vector<char> bad(static_cast<std::size_t>(row_tiles), 0);
  detail::for_chunks(row_tiles, [&](int, std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) bad[std::size_t(r)] = !check_tile(r, true);
  }, 256);
  for (std::int64_t r = 0; r < row_tiles; ++r)
    if (bad[std::size_t(r)]) check_tile(r, false);
}

}  // namespace kantor
