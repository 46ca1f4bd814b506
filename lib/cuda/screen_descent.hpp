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

struct DescentInput {
  std::vector<DescentLevel> x, y;  ///< level 0 (the atoms) first
  std::vector<std::int32_t> top;   ///< host: 2 K entries, the active pairs (I, J) of the top levels
  int d = 0;
  double c = 1, keep_at = 0, eps = 1;
  /// The block levels of the output: the host descent's, max(0, top - steps) a side with steps =
  /// max(0, max(top_x, top_y) - 3) (checked).
  int block_x = 0, block_y = 0;
};

struct DescentOutput {
  std::vector<std::uint64_t> keys, masks;  ///< kantor::ScreenDescent's
  std::int64_t tested = 0;
  double dropped = 0;
};

/// Device memory of at least `bytes` bytes, valid while the returned pointer lives (the caller's
/// allocator: the context's stream-ordered pool).
using DeviceAlloc = std::function<std::shared_ptr<void>(std::size_t bytes)>;

/// Runs the descent on `stream` and waits for it (a few host synchronizations per level: the
/// next level's size, the dropped mass). Throws InvalidArgument for d < 1, block levels other
/// than the host descent's or more than 2^31 cells on a level.
void screen_descent(const DescentInput& in, const DeviceAlloc& alloc, void* stream,
                    DescentOutput* out);

}  // namespace kantor::cuda
