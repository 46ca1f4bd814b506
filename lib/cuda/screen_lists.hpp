// The multiscale screen's block lists built where the descent left its kept pairs (docs/
// multiscale.md, "Lists on the device"): the kept atom pairs in blocks (keys (I0 << 32) | J0 in
// increasing order, 64-bit masks, bit 8 a + b), the atoms without a pair, the repair's extra
// pairs merged in, and both sides' kantor::BlockList arrays (run_ptr, runs) formed by scans on
// the device: the same lists as the host's block_list (solvers/multiscale_screen.cpp) from the
// same pairs. Plain C++ declarations; the stream is an opaque cudaStream_t.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lib/cuda/screen_descent.hpp"

namespace kantor::cuda {

/// Whether kept_block_list serves blocks of levels (bx, by) with row tiles of `row_tile` points
/// over atoms of `atom`: a row tile is a power-of-two number of atoms within one block of either
/// side (else the host builds the lists).
bool kept_lists_apply(int bx, int by, std::int64_t atom, std::int64_t row_tile);

/// Which atoms hold a kept pair: bit a of (*has_x)[I0] for the a-th x atom of x block I0 (a
/// non-zero byte a in a mask of its row), bit b of (*has_y)[J0] likewise (byte-wise OR of the
/// masks of its column). x_blocks, y_blocks: the blocks of either side. Synchronizes.
void kept_atoms(const KeptPairs& p, std::int64_t x_blocks, std::int64_t y_blocks,
                const DeviceAlloc& alloc, void* stream, std::vector<std::uint32_t>* has_x,
                std::vector<std::uint32_t>* has_y);

/// p's pairs and the atom pairs `extra` (2 K entries: x atom, y atom) as one set (a key's masks
/// OR-ed). Synchronizes.
void add_atom_pairs(KeptPairs* p, const std::vector<std::int64_t>& extra,
                    const DeviceAlloc& alloc, void* stream);

/// The kept atom pairs (set bits). Synchronizes.
std::int64_t kept_atom_pairs(const KeptPairs& p, const DeviceAlloc& alloc, void* stream);

/// One side's kantor::BlockList on the device: run_ptr (tiles + 1 int64) and runs (2 run_count
/// int32: begin, end key tiles), with the point pairs it covers and its runs' total length in
/// key tiles.
struct DeviceBlockList {
  std::shared_ptr<void> run_ptr, runs;
  std::int64_t tiles = 0, run_count = 0;
  std::uint64_t covered = 0, key_tiles = 0;
};

/// Side 0: rows x (n points), keys y (m points); side 1: rows y, keys x (the pairs transposed).
/// Row tiles of row_tile points, key tiles of `atom` points (the hierarchies' atoms); requires
/// kept_lists_apply(p.bx, p.by, atom, row_tile) (InvalidArgument otherwise). Synchronizes.
void kept_block_list(const KeptPairs& p, int side, std::int64_t n, std::int64_t m,
                     std::int64_t atom, std::int64_t row_tile, const DeviceAlloc& alloc,
                     void* stream, DeviceBlockList* out);

}  // namespace kantor::cuda
