// gzip decompression through zlib for the readers of include/kantor/io.hpp (read_array detects
// the gzip magic 1f 8b). The output grows as zlib produces it, never sized by what the file
// claims (the ISIZE trailer is only the size modulo 2^32 and is untrusted anyway), and stops at
// a limit, so a gzip bomb is an IoError, not an out-of-memory.
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "kantor/error.hpp"
#include "kantor/io.hpp"
#include "io_detail.hpp"

namespace kantor::io {
namespace {

using detail::quoted;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IoError(quoted(path) + ": " + what);
}

// Ends the zlib stream on every exit.
struct InflateGuard {
  z_stream* zs;
  ~InflateGuard() { inflateEnd(zs); }
};

std::string zlib_message(const z_stream& zs, int ret) {
  return std::string("zlib: ") + (zs.msg != nullptr ? zs.msg : zError(ret));
}

}  // namespace

std::string decompress_gzip(const std::string& path, const std::string& compressed,
                            std::uint64_t max_bytes) {
  z_stream zs{};
  // 16 + MAX_WBITS: a gzip wrapper (header, CRC-32 and length trailer checked), not zlib/raw.
  int ret = inflateInit2(&zs, 16 + MAX_WBITS);
  if (ret != Z_OK) fail(path, "cannot start gzip decompression: " + zlib_message(zs, ret));
  InflateGuard guard{&zs};

  constexpr std::size_t kFirstChunk = std::size_t(1) << 16;
  // zlib counts in uInt (32 bits): feed and drain at most 1 GiB per call.
  constexpr std::size_t kMaxStep = std::size_t(1) << 30;
  const std::uint64_t limit = std::min<std::uint64_t>(max_bytes, std::uint64_t(SIZE_MAX / 2));
  std::string out;
  std::size_t produced = 0, in_pos = 0, member_start = 0;
  const char* const in = compressed.data();
  // The ISIZE trailer (the last member's size mod 2^32) as a first size: one allocation and no
  // copies for a file of one member under 4 GiB. Only a hint: capped at 64x the compressed
  // size and at the limit (a lying trailer costs one bounded allocation; the output still grows
  // as zlib produces it), one byte more so that a correct hint ends with room left.
  if (compressed.size() >= 18) {
    const auto* t = reinterpret_cast<const unsigned char*>(in + compressed.size() - 4);
    const std::uint64_t isize = std::uint64_t(t[0]) | std::uint64_t(t[1]) << 8 |
                                std::uint64_t(t[2]) << 16 | std::uint64_t(t[3]) << 24;
    const std::uint64_t cap = std::min<std::uint64_t>(limit, std::uint64_t(compressed.size()) * 64);
    if (isize > 0 && isize < cap) out.resize(std::size_t(isize + 1));
  }
  for (;;) {
    if (produced == out.size()) {
      if (produced > limit)
        fail(path, "the gzip data decompresses to more than " + std::to_string(max_bytes) +
                       " bytes, the limit of this reader (decompress it separately if it is "
                       "really that large)");
      // Double the buffer, up to one byte past the limit (which is how crossing it is seen).
      const std::uint64_t want =
          std::min<std::uint64_t>(std::max<std::uint64_t>(out.size() * 2, kFirstChunk), limit + 1);
      out.resize(std::size_t(want));
    }
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in + in_pos));
    zs.avail_in = uInt(std::min(compressed.size() - in_pos, kMaxStep));
    zs.next_out = reinterpret_cast<Bytef*>(&out[produced]);
    zs.avail_out = uInt(std::min(out.size() - produced, kMaxStep));
    const uInt in_before = zs.avail_in, out_before = zs.avail_out;
    ret = inflate(&zs, Z_NO_FLUSH);
    in_pos += in_before - zs.avail_in;
    produced += out_before - zs.avail_out;
    if (ret == Z_STREAM_END) {
      if (in_pos == compressed.size()) break;
      // Another member (gzip -d decompresses concatenated members as one file) or garbage.
      if (compressed.size() - in_pos >= 2 && static_cast<unsigned char>(in[in_pos]) == 0x1f &&
          static_cast<unsigned char>(in[in_pos + 1]) == 0x8b) {
        member_start = in_pos;
        ret = inflateReset(&zs);
        if (ret != Z_OK) fail(path, "cannot restart gzip decompression: " + zlib_message(zs, ret));
        continue;
      }
      fail(path, std::to_string(compressed.size() - in_pos) +
                     " bytes after the end of the gzip data at offset " + std::to_string(in_pos) +
                     " are not another gzip member (expected the end of the file)");
    }
    if (ret == Z_OK || ret == Z_BUF_ERROR) {
      // inflate stops when its input runs out, its output is full or the member ends: all the
      // input used with room left is a stream that ends before its end.
      if (in_pos == compressed.size() && zs.avail_out != 0)
        fail(path, "truncated gzip data: the file ends after " + std::to_string(in_pos) +
                       " bytes, inside the gzip member starting at offset " +
                       std::to_string(member_start) + " (" + std::to_string(produced) +
                       " bytes decompressed so far; zlib: unexpected end of the stream)");
      continue;
    }
    if (ret == Z_MEM_ERROR)
      fail(path, "out of memory while decompressing the gzip data (" + zlib_message(zs, ret) + ")");
    fail(path, "corrupt gzip data near compressed byte " + std::to_string(in_pos) + " (" +
                   zlib_message(zs, ret) + ")");
  }
  const bool slack = out.size() - produced > produced / 4;
  out.resize(produced);
  if (slack) out.shrink_to_fit();  // a doubled buffer; not the one byte of a correct hint
  return out;
}

}  // namespace kantor::io
