// kantor::io: .npy / .csv readers against hand-made files, writer round trips, every malformed
// file case, and the atomic-write guarantees (no temporary and no partial file on failure).
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <csignal>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kantor/error.hpp"
#include "kantor/io.hpp"
#include "support/temp_dir.hpp"

namespace {

using kantor::IoError;
namespace io = kantor::io;

// A fresh directory per test, removed (with its files) afterwards.
class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::make_unique<kantor::test::TempDir>("kantor_test_io_");
    dir_ = tmp_->dir();
  }
  void TearDown() override { tmp_.reset(); }

  static std::vector<std::string> list_dir(const std::string& d) {
    return kantor::test::TempDir::list_dir(d);
  }
  std::string path(const std::string& name) const { return tmp_->path(name); }
  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  static bool exists(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
  }

  std::unique_ptr<kantor::test::TempDir> tmp_;
  std::string dir_;
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

// A .npy file built by hand (independently of io::write_array): magic, version, header length
// (2 bytes for 1.x, 4 otherwise), the header text as given (padded to 64 when `pad`), the data.
std::string npy(int major, const std::string& header, const std::string& data, bool pad = true) {
  std::string h = header;
  const std::size_t prefix = major == 1 ? 10 : 12;
  if (pad) {
    while ((prefix + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
  }
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  const std::uint32_t len = std::uint32_t(h.size());
  for (std::size_t k = 0; k < (major == 1 ? 2u : 4u); ++k) out += char((len >> (8 * k)) & 0xff);
  return out + h + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {  // little-endian host (x86, arm64)
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string f8_header(const std::string& shape) {
  return "{'descr': '<f8', 'fortran_order': False, 'shape': " + shape + ", }";
}

// ---- .npy reading -------------------------------------------------------------------------

TEST_F(IoTest, ReadsHandMadeNpyVersions1To3) {
  const std::vector<double> v = {1.5, -2.25, 3e-300, 4e300, -0.0, 6.0};
  for (int major : {1, 2, 3}) {
    const std::string p =
        write_bytes("v" + std::to_string(major) + ".npy", npy(major, f8_header("(2, 3)"), raw(v)));
    const io::Array a = io::read_array(p);
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3})) << "version " << major;
    EXPECT_EQ(a.dtype, "float64");
    EXPECT_EQ(a.data, v);
    EXPECT_EQ(a.rows(), 2);
    EXPECT_EQ(a.cols(), 3);
  }
}

// Files written by numpy itself (np.save; numpy.lib.format.write_array with version (2, 0)) of
// [[1.5, -2.25, 3], [4, 5e-300, -6e300]] and float32 [[0.5, -1.25], [3, 1e-3]].
// f8.npy, 176 bytes, written by numpy 1.24.2
const std::string kNumpyF8(
    "\223NUMPY\001\000v\000{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }"
    "                                                          \012\000\000\000\000\000"
    "\000\370\077\000\000\000\000\000\000\002\300\000\000\000\000\000\000\010@\000\000"
    "\000\000\000\000\020@/0\267\263\247\311\312\0015X\000f-\353a\376",
    176);
// f4.npy, 144 bytes, written by numpy 1.24.2
const std::string kNumpyF4(
    "\223NUMPY\001\000v\000{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }"
    "                                                          \012\000\000\000\077\000"
    "\000\240\277\000\000@@o\022\203:",
    144);
// v2.npy, 176 bytes, written by numpy 1.24.2
const std::string kNumpyV2(
    "\223NUMPY\002\000t\000\000\000{'descr': '<f8', 'fortran_order': False, 'shape': ("
    "2, 3), }                                                        \012\000\000\000\000"
    "\000\000\370\077\000\000\000\000\000\000\002\300\000\000\000\000\000\000\010@\000"
    "\000\000\000\000\000\020@/0\267\263\247\311\312\0015X\000f-\353a\376",
    176);

TEST_F(IoTest, ReadsFilesWrittenByNumpy) {
  const std::vector<double> want = {1.5, -2.25, 3.0, 4.0, 5e-300, -6e300};
  for (const std::string* bytes : {&kNumpyF8, &kNumpyV2}) {
    const io::Array a = io::read_array(write_bytes("numpy.npy", *bytes));
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(a.dtype, "float64");
    EXPECT_EQ(a.data, want);
  }
  const io::Array a = io::read_array(write_bytes("numpy32.npy", kNumpyF4));
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(a.dtype, "float32");
  EXPECT_EQ(a.data, (std::vector<double>{0.5, -1.25, 3.0, double(1e-3f)}));
  // Our writer produces the same bytes as numpy for the same array.
  io::write_array(path("ours.npy"), {2, 3}, want.data());
  std::ifstream in(path("ours.npy"), std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
            kNumpyF8);
}

TEST_F(IoTest, ReadsNpyHeaderVariants) {
  // Double quotes, other key order, no trailing comma, no padding, an 'L' suffix (Python 2).
  const std::vector<float> v = {0.5f, -1.25f, 3.0f};
  const std::string p = write_bytes(
      "variants.npy",
      npy(1, "{\"shape\": (3L,), \"fortran_order\": False, \"descr\": \"<f4\"}", raw(v), false));
  const io::Array a = io::read_array(p);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(a.dtype, "float32");
  EXPECT_EQ(a.data, (std::vector<double>{0.5, -1.25, 3.0}));
}

TEST_F(IoTest, ReadsEmptyAndScalarNpy) {
  io::Array a = io::read_array(write_bytes("e.npy", npy(1, f8_header("(0, 3)"), "")));
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{0, 3}));
  EXPECT_TRUE(a.data.empty());
  a = io::read_array(write_bytes("s.npy", npy(1, f8_header("()"), raw(std::vector<double>{7}))));
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(a.data, (std::vector<double>{7}));
}

TEST_F(IoTest, ExtensionIsCaseInsensitive) {
  const std::string p =
      write_bytes("UPPER.NPY", npy(1, f8_header("(1,)"), raw(std::vector<double>{2})));
  EXPECT_EQ(io::read_array(p).data, (std::vector<double>{2}));
  EXPECT_EQ(io::extension("a/b.CsV"), ".csv");
  EXPECT_EQ(io::extension("dir.x/file"), "");
  EXPECT_EQ(io::extension("file"), "");
}

struct BadNpy {
  const char* name;
  std::string bytes;
  const char* expected;  // a part of the message
};

TEST_F(IoTest, MalformedNpyFilesAreIoErrorsNamingFileAndProblem) {
  const std::string d6 = raw(std::vector<double>(6, 1.0));
  const std::vector<BadNpy> cases = {
      {"empty", "", "not a .npy file"},
      {"bad_magic", "\x93NUMPX\x01\x00" + std::string(60, ' '), "not a .npy file"},
      {"version4", npy(1, f8_header("(2, 3)"), d6).replace(6, 1, "\x04"),
       "unsupported .npy format version 4.0"},
      {"big_endian_int64",
       npy(1, "{'descr': '>i8', 'fortran_order': False, 'shape': (2, 3), }", d6),
       "unsupported dtype '>i8'"},
      {"complex", npy(1, "{'descr': '<c16', 'fortran_order': False, 'shape': (3,), }", d6),
       "unsupported dtype '<c16'"},
      {"big_endian", npy(1, "{'descr': '>f8', 'fortran_order': False, 'shape': (2, 3), }", d6),
       "unsupported dtype '>f8'"},
      {"object", npy(1, "{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }", d6),
       "unsupported dtype '|O'"},
      {"float16", npy(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", d6),
       "unsupported dtype '<f2'"},
      {"structured",
       npy(1, "{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (6,), }", d6),
       "structured dtype"},
      {"fortran", npy(1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", d6),
       "fortran_order is True"},
      {"truncated_data", npy(1, f8_header("(2, 3)"), d6.substr(0, 40)), "truncated data"},
      {"trailing_bytes", npy(1, f8_header("(2, 3)"), d6 + "xx"), "unexpected bytes"},
      {"truncated_header", npy(1, f8_header("(2, 3)"), "").substr(0, 30), "truncated .npy header"},
      {"truncated_length", std::string("\x93NUMPY\x02\x00\x10", 9), "truncated .npy file"},
      {"missing_shape", npy(1, "{'descr': '<f8', 'fortran_order': False}", d6),
       "missing key 'shape'"},
      {"negative_shape", npy(1, f8_header("(-2, 3)"), d6), "'shape'"},
      {"bad_bool", npy(1, "{'descr': '<f8', 'fortran_order': 0, 'shape': (6,)}", d6),
       "True or False"},
      {"extra_key", npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), 'x': 1}", d6),
       "unexpected key 'x'"},
      {"not_a_dict", npy(1, "hello", d6), "malformed .npy header"},
      {"text_after", npy(1, f8_header("(6,)") + " junk", d6), "after the closing"},
  };
  for (const BadNpy& c : cases) {
    const std::string p = write_bytes(std::string(c.name) + ".npy", c.bytes);
    const std::string msg = io_error([&] { io::read_array(p); });
    EXPECT_HAS(msg, "'" + p + "'");
    EXPECT_HAS(msg, c.expected);
  }
}

TEST_F(IoTest, MissingDirectoryAndUnknownFilesAreIoErrors) {
  const std::string missing = path("missing.npy");
  std::string msg = io_error([&] { io::read_array(missing); });
  EXPECT_HAS(msg, "cannot open '" + missing + "'");
  EXPECT_HAS(msg, "No such file");

  const std::string sub = path("sub.npy");
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  msg = io_error([&] { io::read_array(sub); });
  EXPECT_HAS(msg, "cannot open '" + sub + "'");
  EXPECT_HAS(msg, "directory");

  const std::string txt = write_bytes("points.txt", "1,2\n");
  msg = io_error([&] { io::read_array(txt); });
  EXPECT_HAS(msg, "'" + txt + "'");
  EXPECT_HAS(msg, "unknown file type '.txt'");
}

TEST_F(IoTest, UnreadableFileIsAnIoError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files regardless of their permissions";
  const std::string p = write_bytes("locked.csv", "1,2\n");
  ASSERT_EQ(::chmod(p.c_str(), 0), 0);
  const std::string msg = io_error([&] { io::read_array(p); });
  EXPECT_HAS(msg, "cannot open '" + p + "'");
  EXPECT_HAS(msg, "Permission denied");
}

// ---- .csv reading -------------------------------------------------------------------------

TEST_F(IoTest, ReadsCsvWithHeaderWhitespaceCommentsAndCrlf) {
  const std::string p = write_bytes(
      "h.csv", "\xEF\xBB\xBF# a comment\r\n x , y\t,z\r\n\r\n 1, -2.5 ,3e2\r\n\t4,5,6 \r\n\n");
  const io::Array a = io::read_array(p);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.dtype, "csv");
  EXPECT_EQ(a.data, (std::vector<double>{1, -2.5, 300, 4, 5, 6}));
}

TEST_F(IoTest, ReadsCsvWithoutHeaderAndNonFiniteValues) {
  const std::string p = write_bytes("n.csv", "1,nan\ninf,-inf\n7,8");  // no final newline
  const io::Array a = io::read_array(p);
  ASSERT_EQ(a.shape, (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(a.data[0], 1);
  EXPECT_TRUE(std::isnan(a.data[1]));
  EXPECT_EQ(a.data[2], std::numeric_limits<double>::infinity());
  EXPECT_EQ(a.data[3], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(a.data[5], 8);
}

TEST_F(IoTest, EmptyCsvAndHeaderOnlyCsv) {
  io::Array a = io::read_array(write_bytes("empty.csv", ""));
  EXPECT_EQ(a.rows(), 0);
  EXPECT_TRUE(a.data.empty());
  a = io::read_array(write_bytes("header.csv", "x,y,z\n"));
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{0, 3}));
}

struct BadCsv {
  const char* text;
  const char* expected;
};

TEST_F(IoTest, MalformedCsvNamesFileLineColumnAndField) {
  const std::vector<BadCsv> cases = {
      {"1,2,3\n4,abc,6\n", "line 2, column 2: cannot parse 'abc' as a number"},
      {"x,y\n1,2\n3,\n", "line 3, column 2: empty field"},
      {"1,2,3\n4,5,6\n7,8\n", "line 3 has 2 fields but line 1 has 3"},
      {"x,y,z\n1,2\n", "line 2 has 2 fields but line 1 has 3"},
      {"1,2\n1e999,3\n", "line 2, column 1: '1e999' is out of the float64 range"},
      {"x,1\n2,3\n", "line 1, column 1: cannot parse 'x'"},  // a header is all names
      {"1;2\n", "line 1, column 1: cannot parse '1;2'"},
      {"x;y\n1;2\n", "line 2, column 1: cannot parse '1;2'"},
      {"1,2\n\n# c\n3,4 5\n", "line 4, column 2: cannot parse '4 5'"},
      {"1,2,\n", "line 1, column 3: empty field"},
      {"1,\"2\"\n", "line 1, column 2: cannot parse '\"2\"'"},
  };
  int i = 0;
  for (const BadCsv& c : cases) {
    const std::string p = write_bytes("bad" + std::to_string(i++) + ".csv", c.text);
    const std::string msg = io_error([&] { io::read_array(p); });
    EXPECT_HAS(msg, "'" + p + "'");
    EXPECT_HAS(msg, c.expected);
  }
}

// ---- shapes for points and weights --------------------------------------------------------

TEST_F(IoTest, ReadMatrixNeedsTwoDimensions) {
  const std::string one =
      write_bytes("one.npy", npy(1, f8_header("(5,)"), raw(std::vector<double>(5))));
  std::string msg = io_error([&] { io::read_matrix(one, "--source"); });
  EXPECT_HAS(msg, "--source");
  EXPECT_HAS(msg, "'" + one + "' has shape (5,)");
  EXPECT_HAS(msg, "(n, d)");
  EXPECT_HAS(msg, "(5, 1)");

  // Rank 3 or more (images) is flattened to (n, product of the other dimensions).
  const std::vector<double> six = {1, 2, 3, 4, 5, 6};
  const std::string three = write_bytes("three.npy", npy(1, f8_header("(1, 2, 3)"), raw(six)));
  const io::Array flat = io::read_matrix(three, "--target");
  EXPECT_EQ(flat.shape, (std::vector<std::int64_t>{1, 6}));
  EXPECT_EQ(flat.data, six);
  const std::string scalar =
      write_bytes("scalar.npy", npy(1, f8_header("()"), raw(six).substr(0, 8)));
  msg = io_error([&] { io::read_matrix(scalar, "--target"); });
  EXPECT_HAS(msg, "--target");
  EXPECT_HAS(msg, "has shape ()");

  msg = io_error([&] { io::read_matrix(path("nope.csv"), "--target"); });
  EXPECT_HAS(msg, "--target: cannot open '" + path("nope.csv") + "'");

  const io::Array ok = io::read_matrix(write_bytes("ok.csv", "1,2\n3,4\n5,6\n"), "--source");
  EXPECT_EQ(ok.shape, (std::vector<std::int64_t>{3, 2}));
}

TEST_F(IoTest, ReadVectorAcceptsNAndColumnAndRowShapes) {
  const std::vector<double> w = {0.25, 0.5, 0.25};
  for (const char* shape : {"(3,)", "(3, 1)", "(1, 3)"}) {
    const io::Array a =
        io::read_vector(write_bytes("w.npy", npy(1, f8_header(shape), raw(w))), "--source-weights");
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{3})) << shape;
    EXPECT_EQ(a.data, w);
  }
  EXPECT_EQ(io::read_vector(write_bytes("w.csv", "w\n0.25\n0.5\n0.25\n"), "w").data, w);
  const std::string bad =
      write_bytes("bad.npy", npy(1, f8_header("(2, 3)"), raw(std::vector<double>(6))));
  const std::string msg = io_error([&] { io::read_vector(bad, "--target-weights"); });
  EXPECT_HAS(msg, "--target-weights");
  EXPECT_HAS(msg, "has shape (2, 3)");
}

// ---- writers ------------------------------------------------------------------------------

// Doubles that need all 17 significant digits, plus extremes.
std::vector<double> awkward_values(std::size_t n) {
  std::vector<double> v = {0.1,    1.0 / 3.0,           -2.0 / 7.0, 1e-310, -1.7976931348623157e308,
                           5e-324, 123456789.123456789, -0.0};
  std::uint64_t s = 12345;
  while (v.size() < n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v.push_back(std::ldexp(double(s >> 11), -53) * std::pow(10.0, int(s % 21) - 10) *
                ((s >> 7) & 1 ? 1 : -1));
  }
  v.resize(n);
  return v;
}

TEST_F(IoTest, NpyFloat64RoundTripIsExact) {
  const std::vector<double> v = awkward_values(24);
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{24}, {4, 6}, {2, 3, 4}}) {
    const std::string p = path("rt.npy");
    io::write_array(p, shape, v.data());
    const io::Array a = io::read_array(p);
    EXPECT_EQ(a.shape, shape);
    EXPECT_EQ(a.dtype, "float64");
    ASSERT_EQ(a.data.size(), v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      EXPECT_EQ(std::memcmp(&a.data[i], &v[i], 8), 0) << i << ": " << a.data[i] << " " << v[i];
  }
}

TEST_F(IoTest, NpyFloat32RoundTripRoundsToFloat) {
  const std::vector<double> v = {0.1, -3.25, 1e30, 1.0 / 3.0, 0.0, 7.0};
  const std::string p = path("rt32.npy");
  io::write_array(p, {3, 2}, v.data(), /*float32=*/true);
  const io::Array a = io::read_array(p);
  EXPECT_EQ(a.dtype, "float32");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{3, 2}));
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(a.data[i], double(float(v[i]))) << i;
  // The file is the header, padded to a multiple of 64 bytes, then exactly 6 * 4 data bytes.
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_GT(st.st_size, 24);
  EXPECT_EQ((st.st_size - 24) % 64, 0) << st.st_size;
}

TEST_F(IoTest, CsvRoundTripWith17DigitsIsExact) {
  const std::vector<double> v = awkward_values(30);
  const std::string p = path("rt.csv");
  io::write_array(p, {10, 3}, v.data());
  io::Array a = io::read_array(p);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{10, 3}));
  ASSERT_EQ(a.data.size(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.data[i], &v[i], 8), 0) << i << ": " << a.data[i] << " " << v[i];
  // 1-D writes one value per line and reads back as a column.
  io::write_array(p, {4}, v.data());
  a = io::read_array(p);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{4, 1}));
  EXPECT_EQ(a.data, std::vector<double>(v.begin(), v.begin() + 4));
}

TEST_F(IoTest, AtomicWriteReplacesAndLeavesNoTemporary) {
  const std::string p = path("out.npy");
  const std::vector<double> first(100, 1.0), second = {2.0, 3.0};
  io::write_array(p, {100}, first.data());
  io::write_array(p, {2}, second.data());
  EXPECT_EQ(io::read_array(p).data, second);
  EXPECT_EQ(list_dir(dir_), (std::vector<std::string>{"out.npy"}));
  io::write_text_atomic(path("t.txt"), "hello\n");
  std::ifstream in(path("t.txt"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "hello\n");
}

TEST_F(IoTest, FailedWritesLeaveNoFileAndNoTemporary) {
  const std::vector<double> v(6, 1.0);
  // Into a directory that does not exist.
  const std::string nodir = path("no/such/dir/out.npy");
  std::string msg = io_error([&] { io::write_array(nodir, {6}, v.data()); });
  EXPECT_HAS(msg, "cannot write '" + nodir + "'");
  EXPECT_HAS(msg, "No such file");
  // Onto an existing directory: the rename fails after the data was written.
  const std::string sub = path("taken.npy");
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  msg = io_error([&] { io::write_array(sub, {6}, v.data()); });
  EXPECT_HAS(msg, "cannot write '" + sub + "'");
  EXPECT_HAS(msg, "rename");
  // A rank-3 array in a .csv, and an unknown extension.
  msg = io_error([&] { io::write_array(path("cube.csv"), {1, 2, 3}, v.data()); });
  EXPECT_HAS(msg, "1-D or 2-D");
  msg = io_error([&] { io::write_array(path("out.bin"), {6}, v.data()); });
  EXPECT_HAS(msg, "unknown file type '.bin'");
  msg = io_error([&] { io::write_text_atomic(path("none/x.txt"), "x"); });
  EXPECT_HAS(msg, "cannot write");
  // Only the directory made above remains: no output, no temporary.
  EXPECT_EQ(list_dir(dir_), (std::vector<std::string>{"taken.npy"}));
  EXPECT_TRUE(list_dir(sub).empty());
}

TEST_F(IoTest, CheckWritableArrayPath) {
  io::check_writable_array_path(path("fine.csv"), "--output-map");
  std::string msg =
      io_error([&] { io::check_writable_array_path(path("x/y.npy"), "--output-map"); });
  EXPECT_HAS(msg, "--output-map: cannot write '" + path("x/y.npy") + "'");
  msg = io_error([&] { io::check_writable_array_path(path("y.dat"), "--output-map"); });
  EXPECT_HAS(msg, "unknown file type '.dat'");
  ASSERT_EQ(::mkdir(path("d.npy").c_str(), 0755), 0);
  msg = io_error([&] { io::check_writable_array_path(path("d.npy"), "--output-map"); });
  EXPECT_HAS(msg, "is a directory");
  EXPECT_FALSE(exists(path("fine.csv")));  // checking creates nothing
}

// Review findings: a key given twice in the .npy header, hexadecimal floats in a .csv, and a
// first .csv line of empty fields (not a header: a malformed row).
TEST_F(IoTest, NpyHeaderWithADuplicateKeyIsRejected) {
  const std::string d6 = raw(std::vector<double>(6, 1.0));
  const std::vector<BadNpy> cases = {
      {"dup_descr",
       npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'descr': '<f8'}", d6),
       "duplicate key 'descr'"},
      {"dup_shape",
       npy(1, "{'descr': '<f8', 'shape': (2, 3), 'fortran_order': False, 'shape': (6,)}", d6),
       "duplicate key 'shape'"},
      {"dup_fortran",
       npy(1, "{'descr': '<f8', 'fortran_order': True, 'shape': (6,), 'fortran_order': False}", d6),
       "duplicate key 'fortran_order'"},
  };
  for (const BadNpy& c : cases) {
    const std::string p = write_bytes(std::string(c.name) + ".npy", c.bytes);
    const std::string msg = io_error([&] { io::read_array(p); });
    EXPECT_HAS(msg, "'" + p + "'");
    EXPECT_HAS(msg, c.expected);
  }
}

TEST_F(IoTest, CsvAcceptsOnlyDecimalNumbersInfAndNan) {
  const std::vector<BadCsv> cases = {
      {"1,2\n0x1p3,4\n", "line 2, column 1: cannot parse '0x1p3' as a number (expected a decimal"},
      {"1,0X10\n", "line 1, column 2: cannot parse '0X10'"},
      {"1,2\n-0x.8p1,4\n", "line 2, column 1: cannot parse '-0x.8p1'"},
      {"1,nan(123)\n", "line 1, column 2: cannot parse 'nan(123)'"},
      {"1,.\n", "line 1, column 2: cannot parse '.'"},
      {"1,1e\n", "line 1, column 2: cannot parse '1e'"},
      {"1,infx\n", "line 1, column 2: cannot parse 'infx'"},
  };
  int i = 0;
  for (const BadCsv& c : cases) {
    const std::string p = write_bytes("hex" + std::to_string(i++) + ".csv", c.text);
    const std::string msg = io_error([&] { io::read_array(p); });
    EXPECT_HAS(msg, "'" + p + "'");
    EXPECT_HAS(msg, c.expected);
  }
  // Every decimal spelling strtod takes (and inf / infinity / nan in any case) still reads.
  const io::Array a = io::read_array(
      write_bytes("dec.csv", "+1.5,-.25,3.,1E2\n2e-1,-INF,Infinity,NaN\n-nan,+inf,0,-0\n"));
  ASSERT_EQ(a.shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(a.data[0], 1.5);
  EXPECT_EQ(a.data[1], -0.25);
  EXPECT_EQ(a.data[2], 3.0);
  EXPECT_EQ(a.data[3], 100.0);
  EXPECT_EQ(a.data[4], 0.2);
  EXPECT_EQ(a.data[5], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(a.data[6], std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(a.data[7]));
  EXPECT_TRUE(std::isnan(a.data[8]));
  EXPECT_EQ(a.data[9], std::numeric_limits<double>::infinity());
}

TEST_F(IoTest, CsvFirstLineOfEmptyFieldsIsNotAHeader) {
  const std::vector<BadCsv> cases = {
      {",,\n1,2,3\n", "line 1, column 1: empty field"},
      {"  ,\t, \n1,2,3\n", "line 1, column 1: empty field"},
      {",\n1,2\n", "line 1, column 1: empty field"},
      {"x,,z\n1,2,3\n", "line 1"},  // a header needs a name in every column
  };
  int i = 0;
  for (const BadCsv& c : cases) {
    const std::string p = write_bytes("eh" + std::to_string(i++) + ".csv", c.text);
    const std::string msg = io_error([&] { io::read_array(p); });
    EXPECT_HAS(msg, "'" + p + "'");
    EXPECT_HAS(msg, c.expected);
  }
  // A real header still works.
  EXPECT_EQ(io::read_array(write_bytes("ok.csv", "a,b,c\n1,2,3\n")).shape,
            (std::vector<std::int64_t>{1, 3}));
}

// ---- reliability: bounded readers, non-regular files, output checks, temporaries ----------

// Runs fn in a forked child (after `setup`, with an alarm of `seconds`) and returns what it
// returned, "IoError: <message>", "bad_alloc" or "exception: <what>"; "child died: ..." when the
// child did not exit normally (alarm: it blocked).
std::string in_child(const std::function<std::string()>& fn,
                     const std::function<void()>& setup = [] {}, unsigned seconds = 30) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(seconds);
    std::string out;
    try {
      setup();
      out = fn();
    } catch (const IoError& e) {
      out = std::string("IoError: ") + e.what();
    } catch (const std::bad_alloc&) {
      out = "bad_alloc";
    } catch (const std::exception& e) {
      out = std::string("exception: ") + e.what();
    }
    if (::write(fds[1], out.data(), out.size()) < 0) _exit(3);
    _exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t got; (got = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, std::size_t(got));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "child died: " + std::string(WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                                            : "exit " + std::to_string(WEXITSTATUS(status))) +
           " " + out;
  return out;
}

// The virtual memory size of this process in bytes (VmSize of /proc/self/status).
std::uint64_t vm_size() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  return 0;
}

// A 50 MB line of commas is 50 million empty fields: the reader must fail at the first one
// without materializing them (one std::string per field was ~50x the file: gigabytes).
TEST_F(IoTest, CsvLineOfCommasFailsFastUnderAMemoryLimit) {
  const std::string p = write_bytes("commas.csv", std::string(50u << 20, ',') + "\n1,2\n");
  const std::string digits = write_bytes("digits.csv", std::string(20u << 20, '1') + ",x\n");
  ASSERT_GT(vm_size(), 0u);
  const auto limit = [] {
    // The file (50 MB), once, plus room: far below the ~2 GB of a copy per field.
    const rlim_t bytes = rlim_t(vm_size() + (200u << 20));
    const struct rlimit rl = {bytes, bytes};
    if (::setrlimit(RLIMIT_AS, &rl) != 0) throw std::runtime_error("setrlimit failed");
  };
  std::string got = in_child([&] { return io::read_array(p).dtype; }, limit);
  EXPECT_HAS(got, "IoError: '" + p + "': line 1, column 1: empty field");
  got = in_child([&] { return io::read_array(digits).dtype; }, limit);
  EXPECT_HAS(got, "IoError: '" + digits + "': line 1, column 1: '111");  // excerpt, capped
  EXPECT_HAS(got, "...' is out of the float64 range");
}

TEST_F(IoTest, NonRegularFilesAreRefusedBeforeTheyAreOpened) {
  const std::string fifo = path("fifo.csv"), fifo_npy = path("fifo.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo(fifo_npy.c_str(), 0644), 0);
  ASSERT_EQ(::symlink("/dev/zero", path("zero.npy").c_str()), 0);
  ASSERT_EQ(::symlink("/dev/null", path("null.csv").c_str()), 0);
  // In a child with an alarm: opening a FIFO for reading would block until a writer comes.
  std::string got = in_child([&] { return io::read_array(fifo).dtype; }, [] {}, 10);
  EXPECT_HAS(got, "IoError: cannot open '" + fifo + "': it is a FIFO");
  EXPECT_HAS(got, "expected a regular file");
  got = in_child([&] { return io::read_matrix(fifo_npy, "--source").dtype; }, [] {}, 10);
  EXPECT_HAS(got, "IoError: --source: cannot open '" + fifo_npy + "': it is a FIFO");
  got = in_child([&] { return io::read_array(path("zero.npy")).dtype; }, [] {}, 10);
  EXPECT_HAS(got, "it is a character device");
  got = in_child([&] { return io::read_array(path("null.csv")).dtype; }, [] {}, 10);
  EXPECT_HAS(got, "it is a character device");
}

TEST_F(IoTest, ExtensionIsCheckedCaseInsensitivelyByTheCheckAndTheWriter) {
  const std::vector<double> v = {1, 2, 3, 4};
  for (const char* name : {"UP.CSV", "mixed.Csv", "UP.NPY", "mixed.nPy"}) {
    io::check_writable_array_path(path(name), "--output-map");
    io::write_array(path(name), {2, 2}, v.data());
    const io::Array a = io::read_array(path(name));
    EXPECT_EQ(a.dtype, io::extension(name) == ".csv" ? "csv" : "float64") << name;
    EXPECT_EQ(a.data, v) << name;
  }
  for (const char* name : {"x.txt", "x.csv.bak", "x"}) {
    EXPECT_HAS(io_error([&] { io::check_writable_array_path(path(name), "--o"); }),
               "unknown file type");
    EXPECT_HAS(io_error([&] { io::write_array(path(name), {4}, v.data()); }), "unknown file type");
  }
}

// The up-front check uses the writer's own temporary name: a name that fits but whose temporary
// does not is refused before any work, and the longest accepted name can really be written.
TEST_F(IoTest, CheckRefusesANameWhoseTemporaryExceedsNameMax) {
  long name_max = ::pathconf(dir_.c_str(), _PC_NAME_MAX);
  if (name_max <= 0) name_max = NAME_MAX;
  const std::string tmp_suffix = io::temporary_path("x").substr(1);  // ".tmp.<pid>"
  EXPECT_EQ(io::temporary_path(path("a.npy")), path("a.npy") + tmp_suffix);
  const std::size_t longest = std::size_t(name_max) - tmp_suffix.size();
  const std::string ok = path(std::string(longest - 4, 'n') + ".npy");
  const std::string too_long = path(std::string(longest - 3, 'n') + ".npy");
  io::check_writable_array_path(ok, "--output-map");
  const std::vector<double> v = {1, 2};
  io::write_array(ok, {2}, v.data());
  EXPECT_EQ(io::read_array(ok).data, v);
  const std::string msg = io_error([&] { io::check_writable_array_path(too_long, "--output-map"); });
  EXPECT_HAS(msg, "--output-map: cannot write '" + too_long + "'");
  EXPECT_HAS(msg, "temporary file name");
  EXPECT_HAS(msg, "more than the " + std::to_string(name_max));
  // And the writer itself fails there, leaving nothing.
  EXPECT_HAS(io_error([&] { io::write_array(too_long, {2}, v.data()); }), "cannot write");
  EXPECT_EQ(list_dir(dir_).size(), 1u);
}

// Runs `fn` as an unprivileged user: as root, in a child that switched to uid/gid 65534
// (nobody); otherwise directly. The directory must be reachable by that user.
std::string as_unprivileged(const std::function<std::string()>& fn) {
  return in_child(fn, [] {
    if (::geteuid() != 0) return;
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) throw std::runtime_error("setuid failed");
  });
}

TEST_F(IoTest, CheckRefusesAnUnwritableDirectory) {
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  const std::string ro = path("ro");
  ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
  const std::string got = as_unprivileged([&] {
    io::check_writable_array_path(ro + "/map.npy", "--output-map");
    return std::string("accepted");
  });
  EXPECT_HAS(got, "IoError: --output-map: cannot write '" + ro + "/map.npy': directory '" + ro + "'");
  EXPECT_HAS(got, "Permission denied");
}

TEST_F(IoTest, CheckRefusesAnotherUsersFileInAStickyDirectory) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to own a file that the test user cannot";
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  const std::string sticky = path("sticky");
  ASSERT_EQ(::mkdir(sticky.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
  const std::vector<double> v = {1};
  io::write_array(sticky + "/root.npy", {1}, v.data());  // owned by root
  std::string got = as_unprivileged([&] {
    io::check_writable_array_path(sticky + "/root.npy", "--output-map");
    return std::string("accepted");
  });
  EXPECT_HAS(got, "IoError: --output-map: cannot write '" + sticky + "/root.npy'");
  EXPECT_HAS(got, "sticky");
  // A new name there is fine, and the unprivileged user can really write it.
  got = as_unprivileged([&] {
    io::check_writable_array_path(sticky + "/mine.npy", "--output-map");
    io::write_array(sticky + "/mine.npy", {1}, v.data());
    return std::string("accepted");
  });
  EXPECT_EQ(got, "accepted");
}

TEST_F(IoTest, SameFileComparesCanonicalPathsAndInodes) {
  const std::vector<double> v = {1};
  io::write_array(path("a.npy"), {1}, v.data());
  ASSERT_EQ(::mkdir(path("sub").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(path("a.npy").c_str(), path("link.npy").c_str()), 0);
  ASSERT_EQ(::link(path("a.npy").c_str(), path("hard.npy").c_str()), 0);
  EXPECT_TRUE(io::same_file(path("a.npy"), dir_ + "/./sub/../a.npy"));
  EXPECT_TRUE(io::same_file(path("a.npy"), path("link.npy")));
  EXPECT_TRUE(io::same_file(path("a.npy"), path("hard.npy")));
  EXPECT_TRUE(io::same_file(path("new.npy"), dir_ + "/sub/../new.npy"));  // neither exists
  EXPECT_FALSE(io::same_file(path("a.npy"), path("b.npy")));
  EXPECT_FALSE(io::same_file(path("new_f.npy"), path("new_g.npy")));
  EXPECT_EQ(io::canonical_path(dir_ + "/sub/../x.csv"), io::canonical_path(dir_) + "/x.csv");
}

// A signal arriving during the write (here SIGXFSZ: the file exceeds RLIMIT_FSIZE inside
// write()) whose handler calls remove_pending_temporaries() leaves no temporary behind.
TEST_F(IoTest, SignalDuringAWriteLeavesNoTemporary) {
  const std::vector<double> big(1 << 17, 0.5);  // 1 MB of float64
  const std::string got = in_child(
      [&] {
        io::write_array(path("big.npy"), {std::int64_t(big.size())}, big.data());
        return std::string("written");
      },
      [] {
        struct sigaction action {};
        action.sa_handler = [](int) {
          io::remove_pending_temporaries();
          _exit(42);
        };
        sigemptyset(&action.sa_mask);
        ::sigaction(SIGXFSZ, &action, nullptr);
        const struct rlimit rl = {64 * 1024, 64 * 1024};
        ::setrlimit(RLIMIT_FSIZE, &rl);
      });
  EXPECT_HAS(got, "child died: exit 42");
  EXPECT_TRUE(list_dir(dir_).empty()) << "left: " << list_dir(dir_).front();
}

TEST_F(IoTest, StagedFilesAreCommittedDiscardedOrRemovedOnASignal) {
  const std::vector<double> v = {1, 2, 3};
  std::string staged = io::stage_array(path("s.npy"), {3}, v.data());
  EXPECT_EQ(staged, io::temporary_path(path("s.npy")));
  EXPECT_FALSE(exists(path("s.npy")));
  io::commit_staged(staged, path("s.npy"));
  EXPECT_EQ(io::read_array(path("s.npy")).data, v);
  staged = io::stage_array(path("t.csv"), {3}, v.data());
  EXPECT_TRUE(exists(staged));
  io::discard_staged(staged);
  EXPECT_EQ(list_dir(dir_), (std::vector<std::string>{"s.npy"}));
  // A staged file still pending when a fatal signal arrives is removed by the handler.
  const std::string got = in_child(
      [&] {
        io::stage_array(path("u.npy"), {3}, v.data());
        ::raise(SIGTERM);
        return std::string("survived");
      },
      [] {
        struct sigaction action {};
        action.sa_handler = [](int) {
          io::remove_pending_temporaries();
          _exit(43);
        };
        sigemptyset(&action.sa_mask);
        ::sigaction(SIGTERM, &action, nullptr);
      });
  EXPECT_HAS(got, "child died: exit 43");
  EXPECT_EQ(list_dir(dir_), (std::vector<std::string>{"s.npy"}));
}

}  // namespace
