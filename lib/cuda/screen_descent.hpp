// Oracle::screen_descent on the GPU: the multiscale screen's descent (docs/multiscale.md, "The
// screen"), level-synchronous from the top cells to the block levels (one thread per tested
// pair of cells), then one thread per block pair down to the atoms; the bound of
// kantor/screen_bound.hpp. Plain C++ declarations; the stream is an opaque
// cudaStream_t.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace kantor::cuda {

/// One level of a hierarchy in device memory (kantor::ScreenLevel's arrays).
struct DescentLevel {
  std::int64_t count = 0;
  const double* packed = nullptr;  ///< count x (3 d + 3)
  const double* mass = nullptr;
  const char* active = nullptr;
};

/// The points stage after the descent (Oracle::screen_descent with ScreenPoints): every kept
/// atom pair's largest f_i + g_j - c |x_i - y_j|^2 over its points of positive weight, as
/// lib/cuda/pair_maxima.hpp computes it (float64 on the caller's coordinates, the rounding model
/// of lib/core/certificate.hpp), one warp per atom pair; a pair below keep_at leaves its mask and
/// adds mass_I mass_J e^(max / eps) (atom masses: the hierarchies' level 0) to the dropped mass. A
/// warp stops as soon as its pair is certainly kept. One of f32 / f64 (and g likewise) is set.
struct DescentPoints {
  const double* x = nullptr;  ///< n x d, device
  const double* y = nullptr;  ///< m x d
  const double* a = nullptr;  ///< weights (only their sign matters)
  const double* b = nullptr;
  const float* f32 = nullptr;
  const float* g32 = nullptr;
  const double* f64 = nullptr;
  const double* g64 = nullptr;
  std::int64_t n = 0, m = 0, atom = 0;
  bool keep_box_masks = false;  ///< DescentOutput::box_masks too
  /// The points' centre (d entries; host): the fp32 pre-scan's origin (d <= 3).
  double center[3] = {0, 0, 0};
};

struct DescentInput {
  std::vector<DescentLevel> x, y;  ///< level 0 (the atoms) first
  std::vector<std::int32_t> top;   ///< host: 2 K entries, the active pairs (I, J) of the top levels
  int d = 0;
  double c = 1, keep_at = 0, eps = 1;
  /// The block levels of the output: the host descent's, max(0, top - steps) a side with steps =
  /// max(0, max(top_x, top_y) - 3) (checked).
  int block_x = 0, block_y = 0;
  const DescentPoints* points = nullptr;  ///< the points stage, when asked
  /// Leave the kept pairs on the device (DescentOutput::kept) instead of downloading them.
  bool keep_pairs = false;
};

/// Kept atom pairs in blocks of levels (bx, by) on the device (DescentOutput::kept): `count`
/// keys (I0 << 32) | J0, strictly increasing, and their masks (bit 8 a + b: the block's a-th x
/// atom with its b-th y atom; zero masks allowed).
struct KeptPairs {
  std::shared_ptr<void> keys, masks;
  std::int64_t count = 0;
  int bx = 0, by = 0;
};

struct DescentOutput {
  std::vector<std::uint64_t> keys, masks;  ///< kantor::ScreenDescent's
  /// With DescentInput::keep_pairs: the kept pairs stay on the device here (keys, masks empty).
  KeptPairs kept;
  std::int64_t tested = 0;
  double dropped = 0;
  /// With points: masks after the points stage (zero where it emptied one), box_masks (when
  /// asked) before it; its evaluated and dropped atom pairs and their mass bound (ordered sums).
  bool points_done = false;
  std::vector<std::uint64_t> box_masks;
  std::int64_t point_tests = 0, point_drops = 0;
  double point_dropped = 0;
};

/// Device memory of at least `bytes` bytes, valid while the returned pointer lives (the caller's
/// allocator: the context's stream-ordered pool).
using DeviceAlloc = std::function<std::shared_ptr<void>(std::size_t bytes)>;

/// Runs the descent (and the points stage) on `stream` and waits for it (a few host
/// synchronizations per level: the next level's size, the dropped mass). Throws InvalidArgument
/// for d < 1, block levels other than the host descent's, more than 2^31 cells on a level or a
/// points stage without its data or with atoms other than the hierarchies'.
void screen_descent(const DescentInput& in, const DeviceAlloc& alloc, void* stream,
                    DescentOutput* out);

}  // namespace kantor::cuda
