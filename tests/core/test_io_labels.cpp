// kantor::io readers for labelled datasets (issue #11): IDX files (MNIST) written byte by byte,
// gzip through zlib (files compressed here with zlib's deflate), format detection by content,
// integer .npy dtypes, images as matrices, read_labels / take_label_column, every malformed case,
// and the real Fashion-MNIST test labels when installed.
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kantor/error.hpp"
#include "kantor/io.hpp"
#include "support/temp_dir.hpp"

namespace {

using kantor::IoError;
namespace io = kantor::io;

class IoLabelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::make_unique<kantor::test::TempDir>("kantor_test_io_labels_");
  }
  void TearDown() override { tmp_.reset(); }
  std::string path(const std::string& name) const { return tmp_->path(name); }
  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::unique_ptr<kantor::test::TempDir> tmp_;
};

// The IoError message of f(), or "<no IoError>" when it does not throw one.
std::string io_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  return "<no IoError>";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

std::string be(std::uint64_t v, int bytes) {
  std::string out;
  for (int k = bytes - 1; k >= 0; --k) out += char((v >> (8 * k)) & 0xff);
  return out;
}

// An IDX header: 00 00, type code, number of dimensions, big-endian uint32 sizes.
std::string idx_header(int code, const std::vector<std::uint32_t>& dims) {
  std::string h("\0\0", 2);
  h += char(code);
  h += char(dims.size());
  for (const std::uint32_t d : dims) h += be(d, 4);
  return h;
}

// A whole IDX file of the given type with `values` encoded big-endian.
std::string idx_file(int code, const std::vector<std::uint32_t>& dims,
                     const std::vector<double>& values) {
  std::string out = idx_header(code, dims);
  for (const double v : values) {
    switch (code) {
      case 0x08:
        out += be(std::uint8_t(v), 1);
        break;
      case 0x09:
        out += be(std::uint8_t(std::int8_t(v)), 1);
        break;
      case 0x0B:
        out += be(std::uint16_t(std::int16_t(v)), 2);
        break;
      case 0x0C:
        out += be(std::uint32_t(std::int32_t(v)), 4);
        break;
      case 0x0D: {
        const float f = float(v);
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        out += be(u, 4);
        break;
      }
      default: {
        std::uint64_t u;
        std::memcpy(&u, &v, 8);
        out += be(u, 8);
      }
    }
  }
  return out;
}

// gzip (one member) of `data` through zlib's deflate with a gzip wrapper.
std::string gzip(const std::string& data) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, uLong(data.size())) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = uInt(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(&out[0]);
  zs.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// A .npy (format 1.0) of the given descr and raw little-endian data.
std::string npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(h.size() & 0xff);
  out += char(h.size() >> 8);
  return out + h + data;
}

template <typename T>
std::string le(const std::vector<T>& v) {  // little-endian host (x86, arm64)
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// ---- IDX ----------------------------------------------------------------------------------

TEST_F(IoLabelsTest, IdxEveryTypeReadsBack) {
  struct Case {
    int code;
    const char* dtype;
    std::vector<double> values;
  };
  const std::vector<Case> cases = {
      {0x08, "idx-ubyte", {0, 1, 127, 128, 255, 9}},
      {0x09, "idx-byte", {-128, -1, 0, 1, 127, 5}},
      {0x0B, "idx-int16", {-32768, -2, 0, 300, 32767, 7}},
      {0x0C, "idx-int32", {-2147483648.0, -5, 0, 70000, 2147483647.0, 3}},
      {0x0D, "idx-float32", {-1.5, 0.25, 0, 3.0e38, -0.0, 1e-3f}},
      {0x0E, "idx-float64", {-1.5, 0.1, 0, 1e300, -0.0, 5e-324}},
  };
  for (const Case& c : cases) {
    // No extension (as MNIST's files after gunzip), and a made-up one.
    for (const char* name : {"data-idx2", "data.idx", "data.ubyte"}) {
      const io::Array a = io::read_array(write_bytes(name, idx_file(c.code, {2, 3}, c.values)));
      EXPECT_EQ(a.dtype, c.dtype) << name;
      EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3})) << c.dtype;
      const std::vector<double> f32 = {-1.5, 0.25, 0, double(3.0e38f), -0.0, double(1e-3f)};
      EXPECT_EQ(a.data, c.code == 0x0D ? f32 : c.values) << c.dtype;
    }
  }
  // Rank 1 and rank 4; zero-sized.
  EXPECT_EQ(io::read_array(write_bytes("v", idx_file(0x08, {4}, {1, 2, 3, 4}))).shape,
            (std::vector<std::int64_t>{4}));
  const io::Array r4 =
      io::read_array(write_bytes("r4", idx_file(0x0C, {1, 2, 1, 2}, {1, -2, 3, -4})));
  EXPECT_EQ(r4.shape, (std::vector<std::int64_t>{1, 2, 1, 2}));
  EXPECT_EQ(r4.data, (std::vector<double>{1, -2, 3, -4}));
  EXPECT_TRUE(io::read_array(write_bytes("e", idx_header(0x08, {0, 28, 28}))).data.empty());
}

TEST_F(IoLabelsTest, IdxImagesAreFlattenedByReadMatrix) {
  std::vector<double> px(3 * 2 * 2);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = double(i * 20);
  const std::string p = write_bytes("images-idx3-ubyte", idx_file(0x08, {3, 2, 2}, px));
  EXPECT_EQ(io::read_array(p).shape, (std::vector<std::int64_t>{3, 2, 2}));
  const io::Array m = io::read_matrix(p, "--source");
  EXPECT_EQ(m.shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(m.data, px);  // row i = image i in C order
  EXPECT_EQ(m.dtype, "idx-ubyte");
  // A 1-D IDX is still not points.
  const std::string v = write_bytes("labels-idx1-ubyte", idx_file(0x08, {3}, {1, 2, 3}));
  EXPECT_HAS(io_error([&] { io::read_matrix(v, "--source"); }), "(n, d)");
}

struct BadFile {
  const char* name;
  std::string bytes;
  std::vector<std::string> expected;  // parts of the message
};

void expect_bad(const std::string& p, const std::vector<std::string>& expected) {
  const std::string msg = io_error([&] { io::read_array(p); });
  EXPECT_HAS(msg, "'" + p + "'");
  for (const std::string& e : expected) EXPECT_HAS(msg, e);
}

TEST_F(IoLabelsTest, MalformedIdxFilesAreIoErrorsNamingFileAndProblem) {
  const std::string ok = idx_file(0x0C, {2, 3}, {1, 2, 3, 4, 5, 6});
  const std::vector<BadFile> cases = {
      {"short3", std::string("\0\0\x08", 3), {"truncated IDX header", "3 bytes"}},
      {"short2", std::string("\0\0", 2), {"truncated IDX header", "2 bytes"}},
      {"dims_cut", ok.substr(0, 9), {"truncated IDX header", "2 dimensions need 12", "has 9"}},
      {"bad_type", std::string(ok).replace(2, 1, "\x07"), {"unknown IDX type code 0x07"}},
      {"type_zero",
       std::string(ok).replace(2, 1, std::string(1, '\0')),
       {"unknown IDX type code 0x00"}},
      {"zero_dims", std::string("\0\0\x08\0", 4) + "abc", {"0 dimensions"}},
      {"payload_short",
       ok.substr(0, ok.size() - 3),
       {"truncated IDX data", "(2, 3)", "idx-int32", "needs 24 bytes", "has 21"}},
      {"payload_long",
       ok + "xyz",
       {"3 unexpected bytes after the IDX data", "needs exactly 24", "27 follow"}},
      // The header claims 60000 x 28 x 28 images: nothing of that size is allocated.
      {"lying_dims",
       idx_header(0x08, {60000, 28, 28}) + std::string(100, '\1'),
       {"truncated IDX data", "(60000, 28, 28)", "needs 47040000 bytes", "has 100"}},
      {"overflow",
       idx_header(0x0E, {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}) + "x",
       {"too large", "overflows"}},
  };
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.name);
    expect_bad(write_bytes(std::string(c.name) + ".idx", c.bytes), c.expected);
  }
  // A shape of (0, huge, huge): no values, but not flattenable into (n, d).
  const std::string zero_huge =
      write_bytes("zh.idx", idx_header(0x08, {0, 0xffffffffu, 0xffffffffu, 0xffffffffu}));
  EXPECT_TRUE(io::read_array(zero_huge).data.empty());
  EXPECT_HAS(io_error([&] { io::read_matrix(zero_huge, "--x"); }), "too large to flatten");
}

// ---- gzip -----------------------------------------------------------------------------------

TEST_F(IoLabelsTest, GzipCompressedIdxNpyAndCsvRead) {
  std::vector<double> px(5 * 3 * 3);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = double((i * 37) % 256);
  const std::string raw_idx = idx_file(0x08, {5, 3, 3}, px);
  const std::string gz = gzip(raw_idx);
  ASSERT_EQ(gz.compare(0, 2, "\x1f\x8b"), 0);
  for (const char* name : {"train-images-idx3-ubyte.gz", "images.npy", "images.csv", "images"}) {
    const io::Array m = io::read_matrix(write_bytes(name, gz), "--source");
    EXPECT_EQ(m.shape, (std::vector<std::int64_t>{5, 9})) << name;
    EXPECT_EQ(m.data, px) << name;
    EXPECT_EQ(m.dtype, "idx-ubyte") << name;
  }
  // Two concatenated members are one file (as gzip -d reads them).
  const std::string two = gzip(raw_idx.substr(0, 20)) + gzip(raw_idx.substr(20));
  EXPECT_EQ(io::read_array(write_bytes("two.gz", two)).data, px);
  // A gzipped .npy, and a gzipped .csv: the name without ".gz" decides for text.
  const std::vector<double> w = {0.5, 1.5, -2};
  const std::string npy_gz = gzip(npy("<f8", "(3,)", le(w)));
  EXPECT_EQ(io::read_vector(write_bytes("w.npy.gz", npy_gz), "w").data, w);
  EXPECT_EQ(io::read_vector(write_bytes("w.gz", npy_gz), "w").data, w);
  const io::Array c = io::read_array(write_bytes("p.csv.gz", gzip("x,y\n1,2\n3,4\n")));
  EXPECT_EQ(c.dtype, "csv");
  EXPECT_EQ(c.shape, (std::vector<std::int64_t>{2, 2}));
  // Text whose name says nothing: unknown, after decompression.
  const std::string t = write_bytes("t.gz", gzip("1,2\n"));
  const std::string msg = io_error([&] { io::read_array(t); });
  EXPECT_HAS(msg, "'" + t + "' (gzip-decompressed): unknown file type");
  // Errors of the decompressed content say so.
  const std::string cut = write_bytes("cut.gz", gzip(raw_idx.substr(0, raw_idx.size() - 1)));
  expect_bad(cut, {"(gzip-decompressed)", "truncated IDX data"});
  const std::string bad_npy = write_bytes("bad.npy.gz", gzip("not numpy"));
  expect_bad(bad_npy, {"(gzip-decompressed)", "not a .npy file"});
}

TEST_F(IoLabelsTest, MalformedGzipIsAnIoErrorNamingFileAndZlibMessage) {
  const std::string raw_idx = idx_file(0x0C, {64}, std::vector<double>(64, 3));
  const std::string gz = gzip(raw_idx);
  std::string bad_crc = gz;
  bad_crc[gz.size() - 6] = char(bad_crc[gz.size() - 6] ^ 0x55);  // CRC-32 trailer
  std::string bad_len = gz;
  bad_len[gz.size() - 2] = char(bad_len[gz.size() - 2] ^ 0x01);  // ISIZE trailer
  std::string bad_block = gz;
  bad_block[10] = char(0xff);  // first deflate block header: reserved block type 3
  std::string bad_method = gz;
  bad_method[2] = 7;  // compression method: only 8 (deflate) exists
  const std::vector<BadFile> cases = {
      {"truncated", gz.substr(0, gz.size() - 10), {"truncated gzip data", "bytes decompressed"}},
      {"magic_only", std::string("\x1f\x8b", 2), {"truncated gzip data"}},
      {"header_only", gz.substr(0, 10), {"truncated gzip data"}},
      {"bad_crc", bad_crc, {"corrupt gzip data", "zlib: incorrect data check"}},
      {"bad_length", bad_len, {"corrupt gzip data", "zlib: incorrect length check"}},
      {"bad_block", bad_block, {"corrupt gzip data", "zlib: invalid block type"}},
      {"bad_method", bad_method, {"corrupt gzip data", "zlib: unknown compression method"}},
      {"trailing_garbage",
       gz + "junk",
       {"4 bytes after the end of the gzip data at offset " + std::to_string(gz.size()),
        "not another gzip member"}},
      {"trailing_zeros", gz + std::string(8, '\0'), {"8 bytes after the end of the gzip data"}},
      {"second_member_cut",
       gz + gz.substr(0, 15),
       {"truncated gzip data", "member starting at offset " + std::to_string(gz.size())}},
      {"nested", gzip(gz), {"gzip data again"}},
  };
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.name);
    expect_bad(write_bytes(std::string(c.name) + ".gz", c.bytes), c.expected);
  }
}

TEST_F(IoLabelsTest, DecompressGzipStopsAtItsLimit) {
  // 1 MiB of zeros compresses to about 1 KiB: the limit, not the input size, bounds the output.
  const std::string big(std::size_t(1) << 20, '\0');
  const std::string gz = gzip(big);
  EXPECT_LT(gz.size(), 4096u);
  EXPECT_EQ(io::decompress_gzip("z.gz", gz), big);
  EXPECT_EQ(io::decompress_gzip("z.gz", gz, big.size()), big);  // exactly the limit is fine
  const std::string msg = io_error([&] { io::decompress_gzip("z.gz", gz, 100000); });
  EXPECT_HAS(msg, "'z.gz': the gzip data decompresses to more than 100000 bytes");
  EXPECT_EQ(io::kMaxDecompressedBytes, std::uint64_t(16) << 30);
  EXPECT_EQ(io::decompress_gzip("e.gz", gzip("")), "");
}

// ---- detection by content -------------------------------------------------------------------

TEST_F(IoLabelsTest, FormatIsDetectedByContentNotName) {
  const std::string idx = idx_file(0x08, {2, 2}, {1, 2, 3, 4});
  for (const char* name : {"idx.csv", "idx.npy", "idx.txt", "idx"})
    EXPECT_EQ(io::read_array(write_bytes(name, idx)).dtype, "idx-ubyte") << name;
  const std::string f8 = npy("<f8", "(2,)", le(std::vector<double>{1, 2}));
  for (const char* name : {"n.csv", "n.txt", "n.idx", "n"})
    EXPECT_EQ(io::read_array(write_bytes(name, f8)).data, (std::vector<double>{1, 2})) << name;
  // Content that is none of them: the name decides (.npy error, .csv parse, unknown type).
  expect_bad(write_bytes("text.npy", "1,2\n"), {"not a .npy file"});
  EXPECT_EQ(io::read_array(write_bytes("text.csv", "1,2\n")).dtype, "csv");
  expect_bad(write_bytes("text.dat", "1,2\n"), {"unknown file type '.dat'"});
  expect_bad(write_bytes("empty", ""), {"the file is empty"});
  // Two zero bytes without a well-formed IDX signature: IDX errors unless the name says .npy or
  // .csv.
  expect_bad(write_bytes("zeros.bin", std::string(8, '\0')), {"unknown IDX type code 0x00"});
  expect_bad(write_bytes("zeros.npy", std::string(8, '\0')), {"not a .npy file"});
  expect_bad(write_bytes("zeros.csv", std::string(8, '\0')), {"NUL byte"});
  // A directory is never opened; with an extension that names no format it is unknown.
  const std::string dir = path("folder");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  expect_bad(dir, {"unknown file type ''", "a directory"});
  EXPECT_HAS(io_error([&] { io::read_array(path("missing-idx3-ubyte")); }), "No such file");
}

// ---- integer .npy -------------------------------------------------------------------------

TEST_F(IoLabelsTest, NpyIntegerDtypesReadAsDoubles) {
  const std::vector<double> want = {-3, 0, 7};
  const std::vector<double> want_u = {0, 7, 200};
  struct Case {
    std::string descr, dtype, data;
    std::vector<double> values;
  };
  const std::vector<Case> cases = {
      {"|i1", "int8", le(std::vector<std::int8_t>{-3, 0, 7}), want},
      {"<i1", "int8", le(std::vector<std::int8_t>{-3, 0, 7}), want},
      {"|u1", "uint8", le(std::vector<std::uint8_t>{0, 7, 200}), want_u},
      {"<u1", "uint8", le(std::vector<std::uint8_t>{0, 7, 200}), want_u},
      {"<i2", "int16", le(std::vector<std::int16_t>{-3, 0, 7}), want},
      {"<u2", "uint16", le(std::vector<std::uint16_t>{0, 7, 200}), want_u},
      {"<i4", "int32", le(std::vector<std::int32_t>{-3, 0, 7}), want},
      {"<u4", "uint32", le(std::vector<std::uint32_t>{0, 7, 200}), want_u},
      {"<i8", "int64", le(std::vector<std::int64_t>{-3, 0, 7}), want},
      {"<u8", "uint64", le(std::vector<std::uint64_t>{0, 7, 200}), want_u},
  };
  for (const Case& c : cases) {
    const io::Array a = io::read_array(write_bytes("i.npy", npy(c.descr, "(3,)", c.data)));
    EXPECT_EQ(a.dtype, c.dtype) << c.descr;
    EXPECT_EQ(a.data, c.values) << c.descr;
  }
  // Extremes of 32 bits, and 2^53 (the last exactly held integer) are fine; beyond is refused.
  const std::int64_t e53 = std::int64_t(1) << 53;
  EXPECT_EQ(
      io::read_array(write_bytes("x.npy", npy("<i4", "(2,)",
                                              le(std::vector<std::int32_t>{
                                                  std::numeric_limits<std::int32_t>::min(),
                                                  std::numeric_limits<std::int32_t>::max()}))))
          .data,
      (std::vector<double>{-2147483648.0, 2147483647.0}));
  EXPECT_EQ(io::read_array(
                write_bytes("x.npy", npy("<i8", "(2,)", le(std::vector<std::int64_t>{-e53, e53}))))
                .data,
            (std::vector<double>{-double(e53), double(e53)}));
  expect_bad(write_bytes("big.npy", npy("<i8", "(2,)", le(std::vector<std::int64_t>{1, e53 + 1}))),
             {"int64 value 9007199254740993 at index 1", "2^53"});
  expect_bad(write_bytes("neg.npy", npy("<i8", "(1,)", le(std::vector<std::int64_t>{-e53 - 1}))),
             {"int64 value -9007199254740993 at index 0"});
  expect_bad(write_bytes("u.npy", npy("<u8", "(1,)", le(std::vector<std::uint64_t>{~0ull}))),
             {"uint64 value 18446744073709551615 at index 0"});
  expect_bad(write_bytes("be.npy", npy(">i4", "(1,)", le(std::vector<std::int32_t>{1}))),
             {"unsupported dtype '>i4'"});
  // Images saved by numpy as uint8 (n, h, w) are points too.
  const io::Array m = io::read_matrix(
      write_bytes("img.npy",
                  npy("|u1", "(2, 2, 2)", le(std::vector<std::uint8_t>{0, 1, 2, 3, 4, 5, 6, 255}))),
      "--x");
  EXPECT_EQ(m.shape, (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(m.data, (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 255}));
}

// ---- labels -------------------------------------------------------------------------------

TEST_F(IoLabelsTest, ReadLabelsFromEveryFormat) {
  const std::vector<std::int32_t> want = {3, 0, 9, 1};
  const std::vector<double> wd(want.begin(), want.end());
  EXPECT_EQ(io::read_labels(write_bytes("l-idx1-ubyte", idx_file(0x08, {4}, wd)), "--y"), want);
  EXPECT_EQ(io::read_labels(write_bytes("l.gz", gzip(idx_file(0x08, {4}, wd))), "--y"), want);
  EXPECT_EQ(io::read_labels(
                write_bytes("l.npy", npy("<i8", "(4,)", le(std::vector<std::int64_t>{3, 0, 9, 1}))),
                "--y"),
            want);
  EXPECT_EQ(
      io::read_labels(
          write_bytes("l4.npy", npy("<f4", "(4, 1)", le(std::vector<float>{3, 0, 9, 1}))), "--y"),
      want);
  EXPECT_EQ(io::read_labels(write_bytes("l.csv", "label\n3\n0\n9\n1\n"), "--y"), want);
  EXPECT_EQ(io::read_labels(write_bytes("row.csv", "3,0,9,1\n"), "--y"), want);
  EXPECT_EQ(io::read_labels(write_bytes("neg.csv", "-2147483648\n2147483647\n-0\n"), "--y"),
            (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(),
                                       std::numeric_limits<std::int32_t>::max(), 0}));
  EXPECT_TRUE(io::read_labels(write_bytes("none.idx", idx_header(0x08, {0})), "--y").empty());
}

TEST_F(IoLabelsTest, BadLabelsAreIoErrorsNamingFileIndexAndValue) {
  struct Case {
    const char* name;
    std::string bytes;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"frac.csv", "1\n2.5\n", {"label 1 is 2.5, not an integer"}},
      {"nan.csv", "1\n2\nnan\n", {"label 2 is nan, not a finite integer"}},
      {"inf.csv", "-inf\n", {"label 0 is -inf, not a finite integer"}},
      {"big.csv", "0\n0\n3000000000\n", {"label 2 is 3000000000, outside the int32 range"}},
      {"small.csv", "-2147483649\n", {"label 0 is -2147483649, outside the int32 range"}},
      {"tiny.npy",
       npy("<f8", "(2,)", le(std::vector<double>{1, 1e-300})),
       {"label 1 is 1e-300, not an integer"}},
      {"u32.npy",
       npy("<u4", "(1,)", le(std::vector<std::uint32_t>{4000000000u})),
       {"label 0 is 4000000000, outside the int32 range"}},
      {"matrix.csv", "1,2\n3,4\n", {"has shape (2, 2)", "labels need a vector"}},
      {"cube.idx", idx_file(0x08, {2, 1, 1}, {1, 2}), {"has shape (2, 1, 1)"}},
      {"scalar.npy", npy("<f8", "()", le(std::vector<double>{1})), {"has shape ()"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string p = write_bytes(c.name, c.bytes);
    const std::string msg = io_error([&] { io::read_labels(p, "--source-labels"); });
    EXPECT_EQ(msg.rfind("--source-labels: '" + p + "'", 0), 0u) << msg;
    for (const std::string& e : c.expected) EXPECT_HAS(msg, e);
  }
  // Reader errors get the prefix too.
  EXPECT_HAS(io_error([&] { io::read_labels(path("missing.npy"), "--y"); }),
             "--y: cannot open '" + path("missing.npy") + "'");
}

TEST_F(IoLabelsTest, TakeLabelColumn) {
  const std::string p = "data.csv";
  const io::Array base{{3, 3}, {1, 2, 0, 4, 5, 1, 7, 8, 2}, "csv"};
  for (const std::int64_t col : {std::int64_t(2), std::int64_t(-1)}) {
    io::Array a = base;
    EXPECT_EQ(io::take_label_column(&a, col, p, "--source"), (std::vector<std::int32_t>{0, 1, 2}));
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{3, 2}));
    EXPECT_EQ(a.data, (std::vector<double>{1, 2, 4, 5, 7, 8}));
    EXPECT_EQ(a.dtype, "csv");
  }
  for (const std::int64_t col : {std::int64_t(0), std::int64_t(-3)}) {
    io::Array a = base;
    EXPECT_EQ(io::take_label_column(&a, col, p, "--source"), (std::vector<std::int32_t>{1, 4, 7}));
    EXPECT_EQ(a.data, (std::vector<double>{2, 0, 5, 1, 8, 2}));
  }
  io::Array mid = base;
  EXPECT_EQ(io::take_label_column(&mid, -2, p, "--source"), (std::vector<std::int32_t>{2, 5, 8}));
  EXPECT_EQ(mid.data, (std::vector<double>{1, 0, 4, 1, 7, 2}));

  // Errors leave the array as it was.
  for (const std::int64_t col : {std::int64_t(3), std::int64_t(-4), std::int64_t(1) << 40}) {
    io::Array a = base;
    const std::string msg = io_error([&] { io::take_label_column(&a, col, p, "--source"); });
    EXPECT_HAS(msg, "--source: 'data.csv': label column " + std::to_string(col) +
                        " is out of range for 3 columns (expected 0..2, or -3..-1");
    EXPECT_EQ(a.data, base.data);
    EXPECT_EQ(a.shape, base.shape);
  }
  io::Array frac = base;
  frac.data[7] = 2.5;  // row 2, column 1
  EXPECT_HAS(io_error([&] { io::take_label_column(&frac, 1, p, "--source"); }),
             "--source: 'data.csv': label 2 (column 1) is 2.5, not an integer");
  EXPECT_EQ(frac.shape, base.shape);
  frac.data[7] = std::nan("");
  EXPECT_HAS(io_error([&] { io::take_label_column(&frac, -2, p, "--source"); }),
             "label 2 (column 1) is nan");
  frac.data[7] = 1e10;
  EXPECT_HAS(io_error([&] { io::take_label_column(&frac, 1, p, "--source"); }),
             "outside the int32 range");

  io::Array one{{2, 1}, {1, 2}, "csv"};
  EXPECT_HAS(io_error([&] { io::take_label_column(&one, 0, p, "--source"); }), "single column");
  io::Array vec{{3}, {1, 2, 3}, "float64"};
  EXPECT_HAS(io_error([&] { io::take_label_column(&vec, 0, p, "--source"); }),
             "has shape (3,) but a label column needs a 2-D array");
  EXPECT_HAS(io_error([&] { io::take_label_column(nullptr, 0, p, "--source"); }), "--source");
  io::Array liar{{2, 3}, {1, 2}, "csv"};
  EXPECT_HAS(io_error([&] { io::take_label_column(&liar, 0, p, "--source"); }),
             "does not match its 2 values");
}

// ---- the real thing -----------------------------------------------------------------------

const char* const kFashionDir = "/usr/share/datasets/fashion-mnist";

bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

TEST(IoFashionMnist, TestLabelsAreTenBalancedClasses) {
  const std::string p = std::string(kFashionDir) + "/t10k-labels-idx1-ubyte.gz";
  if (!file_exists(p)) GTEST_SKIP() << p << " is not installed";
  const std::vector<std::int32_t> y = io::read_labels(p, "--labels");
  ASSERT_EQ(y.size(), 10000u);
  std::vector<int> count(10, 0);
  for (const std::int32_t v : y) {
    ASSERT_GE(v, 0);
    ASSERT_LE(v, 9);
    ++count[std::size_t(v)];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(count[std::size_t(c)], 1000) << "class " << c;
}

TEST(IoFashionMnist, TestImagesAreA10000By784Matrix) {
  const std::string p = std::string(kFashionDir) + "/t10k-images-idx3-ubyte.gz";
  if (!file_exists(p)) GTEST_SKIP() << p << " is not installed";
  EXPECT_EQ(io::read_array(p).shape, (std::vector<std::int64_t>{10000, 28, 28}));
  const io::Array x = io::read_matrix(p, "--source");
  EXPECT_EQ(x.shape, (std::vector<std::int64_t>{10000, 784}));
  EXPECT_EQ(x.dtype, "idx-ubyte");
  double lo = 255, hi = 0;
  for (const double v : x.data) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 255);
}

}  // namespace
