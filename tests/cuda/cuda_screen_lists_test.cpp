// The multiscale screen's lists built on the device (lib/cuda/screen_lists.hpp) against a brute
// force on the host: for every row tile, the set of key atoms its rows keep, cut into maximal runs
// of consecutive atoms, and the point pairs they cover; the atoms' flags, the repair's merge and
// the kept pair count. Random block pairs with zero masks, full masks, runs across adjacent blocks
// and partial last blocks, for several block levels and tile shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kantor/buffer.hpp"
#include "kantor/config.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "lib/runtime/context_impl.hpp"
#include "support/gpu.hpp"

#if KANTOR_CUDA_ENABLED
#include "lib/cuda/screen_lists.hpp"

namespace kantor {
namespace {

using testing::have_gpu;

struct Pairs {
  std::map<std::uint64_t, std::uint64_t> blocks;  // (I0 << 32) | J0 -> mask
};

struct HostList {
  std::vector<std::int64_t> run_ptr;
  std::vector<std::int32_t> runs;
  std::uint64_t covered = 0, key_tiles = 0;
};

// The brute force: side 0 rows x, side 1 rows y.
HostList reference(const Pairs& p, int side, int bx, int by, std::int64_t n, std::int64_t m,
                   std::int64_t atom, std::int64_t row_tile) {
  const std::int64_t rows = side == 0 ? n : m, keys = side == 0 ? m : n;
  const std::int64_t row_atoms = (rows + atom - 1) / atom;
  const std::int64_t tiles = (rows + row_tile - 1) / row_tile, per = row_tile / atom;
  std::vector<std::set<std::int64_t>> kept(static_cast<std::size_t>(tiles));
  for (const auto& [key, mask] : p.blocks) {
    const std::int64_t I0 = std::int64_t(key >> 32), J0 = std::int64_t(key & 0xFFFFFFFFu);
    for (int a = 0; a < 8; ++a)
      for (int b = 0; b < 8; ++b) {
        if (!((mask >> (8 * a + b)) & 1u)) continue;
        const std::int64_t xa = (I0 << bx) + a, yb = (J0 << by) + b;
        const std::int64_t row = side == 0 ? xa : yb, key_atom = side == 0 ? yb : xa;
        if (row >= row_atoms) continue;
        kept[std::size_t(row / per)].insert(key_atom);
      }
  }
  HostList out;
  out.run_ptr.push_back(0);
  for (std::int64_t t = 0; t < tiles; ++t) {
    std::int64_t nk = 0;
    const auto& s = kept[std::size_t(t)];
    for (auto it = s.begin(); it != s.end();) {
      const std::int64_t begin = *it;
      std::int64_t end = begin + 1;
      for (++it; it != s.end() && *it == end; ++it) ++end;
      out.runs.push_back(std::int32_t(begin));
      out.runs.push_back(std::int32_t(end));
      nk += std::min(keys, end * atom) - begin * atom;
      out.key_tiles += std::uint64_t(end - begin);
    }
    out.run_ptr.push_back(std::int64_t(out.runs.size() / 2));
    const std::int64_t r0 = t * row_tile, r1 = std::min(rows, r0 + row_tile);
    out.covered += std::uint64_t(nk) * std::uint64_t(r1 - r0);
  }
  return out;
}

// Random kept block pairs over the existing atoms: runs of adjacent blocks, full, sparse and
// zero masks.
Pairs random_pairs(std::mt19937_64& rng, int bx, int by, std::int64_t x_atoms,
                   std::int64_t y_atoms, double density) {
  Pairs p;
  const std::int64_t xb = (x_atoms + (1 << bx) - 1) >> bx, yb = (y_atoms + (1 << by) - 1) >> by;
  std::uniform_real_distribution<double> u(0, 1);
  for (std::int64_t I0 = 0; I0 < xb; ++I0)
    for (std::int64_t J0 = 0; J0 < yb; ++J0) {
      if (u(rng) > density) continue;
      std::uint64_t mask = 0;
      const double kind = u(rng);
      for (int a = 0; a < (1 << bx); ++a)
        for (int b = 0; b < (1 << by); ++b) {
          if ((I0 << bx) + a >= x_atoms || (J0 << by) + b >= y_atoms) continue;
          const bool on = kind < 0.3 ? true : kind < 0.4 ? false : u(rng) < 0.4;
          if (on) mask |= std::uint64_t(1) << (8 * a + b);
        }
      p.blocks[(std::uint64_t(I0) << 32) | std::uint64_t(J0)] = mask;
    }
  return p;
}

struct Device {
  explicit Device(const Context& c) : ctx(c), stream(c.impl().stream) {}
  const Context& ctx;
  void* stream;  // the context's: its pool frees in stream order there
  cuda::DeviceAlloc alloc() const {
    return [this](std::size_t bytes) {
      auto b = std::make_shared<Buffer<double>>(ctx, std::int64_t((bytes + 7) / 8));
      return std::shared_ptr<void>(b, b->data());
    };
  }
  template <class T>
  std::vector<T> download(const std::shared_ptr<void>& p, std::int64_t count) const {
    std::vector<T> h(static_cast<std::size_t>(count));
    if (count > 0)
      detail::copy_bytes(ctx, h.data(), MemorySpace::kHost, p.get(), MemorySpace::kDevice,
                         sizeof(T) * h.size());
    return h;
  }
  cuda::KeptPairs upload(const Pairs& p, int bx, int by) const {
    cuda::KeptPairs k;
    k.bx = bx;
    k.by = by;
    k.count = std::int64_t(p.blocks.size());
    std::vector<std::uint64_t> keys, masks;
    for (const auto& [key, mask] : p.blocks) {
      keys.push_back(key);
      masks.push_back(mask);
    }
    k.keys = alloc()(8 * std::max<std::size_t>(keys.size(), 1));
    k.masks = alloc()(8 * std::max<std::size_t>(keys.size(), 1));
    if (!keys.empty()) {
      detail::copy_bytes(ctx, k.keys.get(), MemorySpace::kDevice, keys.data(), MemorySpace::kHost,
                         8 * keys.size());
      detail::copy_bytes(ctx, k.masks.get(), MemorySpace::kDevice, masks.data(),
                         MemorySpace::kHost, 8 * masks.size());
    }
    return k;
  }
};

void expect_lists(const Device& dev, const cuda::KeptPairs& k, const Pairs& p, std::int64_t n,
                  std::int64_t m, std::int64_t atom, std::int64_t row_tile) {
  for (int side = 0; side < 2; ++side) {
    SCOPED_TRACE("side " + std::to_string(side));
    cuda::DeviceBlockList got;
    cuda::kept_block_list(k, side, n, m, atom, row_tile, dev.alloc(), dev.stream, &got);
    const HostList want = reference(p, side, k.bx, k.by, n, m, atom, row_tile);
    EXPECT_EQ(got.tiles + 1, std::int64_t(want.run_ptr.size()));
    EXPECT_EQ(got.run_count, std::int64_t(want.runs.size() / 2));
    EXPECT_EQ(dev.download<std::int64_t>(got.run_ptr, got.tiles + 1), want.run_ptr);
    EXPECT_EQ(dev.download<std::int32_t>(got.runs, 2 * got.run_count), want.runs);
    EXPECT_EQ(got.covered, want.covered);
    EXPECT_EQ(got.key_tiles, want.key_tiles);
  }
}

TEST(CudaScreenLists, TheDevicesListsAreTheBruteForces) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Context ctx(ContextOptions{Backend::kCuda, 2});
  const Device dev(ctx);
  struct Case {
    int bx, by;
    std::int64_t n, m, atom, row_tile;
    double density;
  };
  const Case cases[] = {
      {3, 3, 70000, 50000, 64, 128, 0.3},  // the CUDA engine's tiles, partial last blocks
      {3, 2, 30000, 20000, 64, 128, 0.4},  // and blocks of 4 y atoms
      {3, 3, 70000, 50000, 32, 128, 0.3},  // 4 atoms a tile
      {3, 3, 8192, 8192, 32, 128, 0.9},    // dense: runs across many blocks
      {2, 3, 5000, 9000, 32, 128, 0.4},    // tiles of a whole block on the x side
      {3, 2, 9000, 5000, 16, 64, 0.4},
      {3, 3, 6000, 6100, 16, 128, 0.5},    // tiles of 8 atoms: one per block
      {0, 3, 3000, 4000, 16, 16, 0.5},     // blocks of one x atom, one atom a tile
      {1, 1, 777, 3001, 8, 16, 0.7},
  };
  std::mt19937_64 rng(11);
  int which = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE("case " + std::to_string(which++));
    ASSERT_TRUE(cuda::kept_lists_apply(c.bx, c.by, c.atom, c.row_tile));
    const std::int64_t xa = (c.n + c.atom - 1) / c.atom, ya = (c.m + c.atom - 1) / c.atom;
    Pairs p = random_pairs(rng, c.bx, c.by, xa, ya, c.density);
    cuda::KeptPairs k = dev.upload(p, c.bx, c.by);
    expect_lists(dev, k, p, c.n, c.m, c.atom, c.row_tile);

    // The atoms' flags and the pair count.
    std::vector<std::uint32_t> hx, hy;
    const std::int64_t xb = (xa + (1 << c.bx) - 1) >> c.bx, yb = (ya + (1 << c.by) - 1) >> c.by;
    cuda::kept_atoms(k, xb, yb, dev.alloc(), dev.stream, &hx, &hy);
    std::vector<std::uint32_t> wx(static_cast<std::size_t>(xb), 0);
    std::vector<std::uint32_t> wy(static_cast<std::size_t>(yb), 0);
    std::int64_t bits = 0;
    for (const auto& [key, mask] : p.blocks)
      for (int a = 0; a < 8; ++a)
        for (int b = 0; b < 8; ++b)
          if ((mask >> (8 * a + b)) & 1u) {
            wx[std::size_t(key >> 32)] |= 1u << a;
            wy[std::size_t(key & 0xFFFFFFFFu)] |= 1u << b;
            ++bits;
          }
    EXPECT_EQ(hx, wx);
    EXPECT_EQ(hy, wy);
    EXPECT_EQ(cuda::kept_atom_pairs(k, dev.alloc(), dev.stream), bits);

    // The repair's pairs merged: into kept blocks, new blocks, and a duplicate.
    std::vector<std::int64_t> extra;
    std::uniform_int_distribution<std::int64_t> ux(0, xa - 1), uy(0, ya - 1);
    for (int e = 0; e < 40; ++e) extra.insert(extra.end(), {ux(rng), uy(rng)});
    extra.insert(extra.end(), {extra[0], extra[1]});
    for (std::size_t e = 0; e < extra.size(); e += 2) {
      const std::int64_t I = extra[e], J = extra[e + 1];
      const std::uint64_t key = (std::uint64_t(I >> c.bx) << 32) | std::uint64_t(J >> c.by);
      const std::int64_t a = I - ((I >> c.bx) << c.bx), b = J - ((J >> c.by) << c.by);
      p.blocks[key] |= std::uint64_t(1) << (8 * a + b);
    }
    cuda::add_atom_pairs(&k, extra, dev.alloc(), dev.stream);
    EXPECT_EQ(k.count, std::int64_t(p.blocks.size()));
    expect_lists(dev, k, p, c.n, c.m, c.atom, c.row_tile);
  }
  // No kept pairs: empty rows, and the repair's pairs alone.
  {
    cuda::KeptPairs k;
    k.bx = k.by = 3;
    Pairs p;
    expect_lists(dev, k, p, 1000, 900, 32, 128);
    const std::vector<std::int64_t> extra = {0, 0, 31, 28, 5, 6};
    for (std::size_t e = 0; e < extra.size(); e += 2)
      p.blocks[(std::uint64_t(extra[e] >> 3) << 32) | std::uint64_t(extra[e + 1] >> 3)] |=
          std::uint64_t(1) << (8 * (extra[e] & 7) + (extra[e + 1] & 7));
    cuda::add_atom_pairs(&k, extra, dev.alloc(), dev.stream);
    expect_lists(dev, k, p, 1000, 900, 32, 128);
  }
}

TEST(CudaScreenLists, ShapesTheDeviceCannotServeAreRefused) {
  EXPECT_FALSE(cuda::kept_lists_apply(3, 3, 32, 96));   // 3 atoms a tile
  EXPECT_FALSE(cuda::kept_lists_apply(1, 3, 32, 128));  // 4 atoms a tile, blocks of 2
  EXPECT_FALSE(cuda::kept_lists_apply(3, 1, 32, 128));
  EXPECT_FALSE(cuda::kept_lists_apply(3, 3, 32, 100));  // not a multiple of the atom
  EXPECT_FALSE(cuda::kept_lists_apply(3, 3, 16, 256));  // 16 atoms a tile
  EXPECT_TRUE(cuda::kept_lists_apply(3, 3, 32, 128));
  if (!have_gpu()) return;
  Context ctx(ContextOptions{Backend::kCuda, 2});
  const Device dev(ctx);
  cuda::KeptPairs k;
  k.bx = 1;
  k.by = 3;
  cuda::DeviceBlockList out;
  EXPECT_THROW(cuda::kept_block_list(k, 0, 100, 100, 32, 128, dev.alloc(), dev.stream, &out),
               InvalidArgument);
  EXPECT_THROW(cuda::kept_block_list(k, 2, 100, 100, 32, 64, dev.alloc(), dev.stream, &out),
               InvalidArgument);
  EXPECT_THROW(cuda::add_atom_pairs(&k, {1, 2, 3}, dev.alloc(), dev.stream), InvalidArgument);
}

}  // namespace
}  // namespace kantor
#endif  // KANTOR_CUDA_ENABLED
