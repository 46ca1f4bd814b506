// libFuzzer harness for one file reader of include/kantor/io.hpp, picked at compile time
// (tests/fuzz/CMakeLists.txt builds five: read_matrix / read_vector x .npy / .csv, and
// read_matrix of a file named .idx):
//   KANTOR_FUZZ_VECTOR  0: kantor::io::read_matrix (points), 1: read_vector (weights)
//   KANTOR_FUZZ_EXT     ".npy", ".csv" or ".idx": the name of the input file. The readers detect
//                       gzip, .npy and IDX by content whatever the name; the name decides only
//                       for other content (.csv: text, .npy: the .npy error, .idx: unknown, or
//                       IDX errors for content starting with two zero bytes).
// The readers take only a path, so each input is written to a per-process temporary file
// (in $KANTOR_FUZZ_TMPDIR, else /dev/shm, else $TMPDIR or /tmp).
//
// A kantor::Error (IoError for malformed input) is the normal outcome for a bad file. Anything
// else is a finding: another exception (reported, then abort()), a crash, a sanitizer report,
// a timeout or memory blow-up (libFuzzer -timeout / -rss_limit_mb), or a broken invariant:
//   - read_array succeeds: every dimension >= 0, product(shape) == data.size(), dtype is one
//     the readers document ("csv" only for a .csv name, and then 2-D), float32 values are
//     exactly representable as float, integer dtypes give integers in their type's range;
//   - read_matrix / read_vector agree with read_array (same data; accepted iff the shape fits;
//     read_matrix flattens rank >= 3 to (n, product of the rest));
//   - small arrays survive write_array + read_array (npy exactly, csv value by value).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <string>
#include <vector>

#include "kantor/error.hpp"
#include "kantor/io.hpp"
#include "fuzz_support.hpp"

#ifndef KANTOR_FUZZ_VECTOR
#error "define KANTOR_FUZZ_VECTOR (0: read_matrix, 1: read_vector)"
#endif
#ifndef KANTOR_FUZZ_EXT
#error "define KANTOR_FUZZ_EXT (\".npy\" or \".csv\")"
#endif

namespace {

namespace io = kantor::io;

std::string g_dir;
std::string g_input, g_npy, g_csv;

using kantor::fuzz::finding;

void remove_files() {
  ::unlink(g_input.c_str());
  ::unlink(g_npy.c_str());
  ::unlink(g_csv.c_str());
}

void write_input(const std::uint8_t* data, std::size_t size) {
  kantor::fuzz::write_input(g_input, data, size);
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

bool same_value(double a, double b, bool exact_bits) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (exact_bits) return std::memcmp(&a, &b, sizeof a) == 0;
  return a == b && std::signbit(a) == std::signbit(b);
}

void check_array(const io::Array& a) {
  std::uint64_t count = 1;
  for (const std::int64_t d : a.shape) {
    FUZZ_CHECK(d >= 0, "negative dimension in shape " + shape_str(a.shape));
    count *= std::uint64_t(d);
  }
  FUZZ_CHECK(count == a.data.size(), "shape " + shape_str(a.shape) + " but " +
                                         std::to_string(a.data.size()) + " values");
  // The documented dtypes, with the range of the integer ones.
  static const struct {
    const char* dtype;
    double lo, hi;  // lo > hi: not an integer type
  } kTypes[] = {{"float32", 1, 0},
                {"float64", 1, 0},
                {"int8", -128, 127},
                {"uint8", 0, 255},
                {"int16", -32768, 32767},
                {"uint16", 0, 65535},
                {"int32", -2147483648.0, 2147483647.0},
                {"uint32", 0, 4294967295.0},
                {"int64", -9007199254740992.0, 9007199254740992.0},
                {"uint64", 0, 9007199254740992.0},
                {"idx-ubyte", 0, 255},
                {"idx-byte", -128, 127},
                {"idx-int16", -32768, 32767},
                {"idx-int32", -2147483648.0, 2147483647.0},
                {"idx-float32", 1, 0},
                {"idx-float64", 1, 0},
                {"csv", 1, 0}};
  const auto* type = std::find_if(std::begin(kTypes), std::end(kTypes),
                                  [&](const auto& t) { return a.dtype == t.dtype; });
  FUZZ_CHECK(type != std::end(kTypes), "unknown dtype '" + a.dtype + "'");
  if (a.dtype == "csv") {
    FUZZ_CHECK(std::string(KANTOR_FUZZ_EXT) == ".csv", "csv dtype for a " KANTOR_FUZZ_EXT " name");
    FUZZ_CHECK(a.shape.size() == 2, "csv shape " + shape_str(a.shape));
  }
  if (a.dtype == "float32" || a.dtype == "idx-float32")
    for (const double v : a.data)
      FUZZ_CHECK(std::isnan(v) || double(float(v)) == v, "float32 value not a float");
  if (type->lo <= type->hi)
    for (const double v : a.data)
      FUZZ_CHECK(v == std::floor(v) && v >= type->lo && v <= type->hi,
                 a.dtype + " value " + std::to_string(v));
}

void check_round_trip(const io::Array& a) {
  if (a.data.size() > 4096) return;
  // .npy keeps shape, dtype and every bit (NaN payloads aside).
  io::write_array(g_npy, a.shape, a.data.data(), a.dtype == "float32");
  const io::Array b = io::read_array(g_npy);
  FUZZ_CHECK(b.shape == a.shape, "npy round trip shape " + shape_str(b.shape) + " != " +
                                     shape_str(a.shape));
  FUZZ_CHECK(b.dtype == (a.dtype == "float32" ? "float32" : "float64"), "npy round trip dtype");
  for (std::size_t i = 0; i < a.data.size(); ++i)
    FUZZ_CHECK(same_value(a.data[i], b.data[i], true), "npy round trip value " + std::to_string(i));
  // .csv holds 1-D / 2-D arrays as rows x columns; an empty array reads back as (0, 0).
  if (a.shape.size() < 1 || a.shape.size() > 2 || a.data.empty()) return;
  io::write_array(g_csv, a.shape, a.data.data());
  const io::Array c = io::read_array(g_csv);
  const std::vector<std::int64_t> want = {a.shape[0], a.shape.size() == 2 ? a.shape[1] : 1};
  FUZZ_CHECK(c.shape == want, "csv round trip shape " + shape_str(c.shape) + " != " +
                                  shape_str(want));
  for (std::size_t i = 0; i < a.data.size(); ++i)
    FUZZ_CHECK(same_value(a.data[i], c.data[i], false),
               "csv round trip value " + std::to_string(i) + ": " + std::to_string(a.data[i]) +
                   " -> " + std::to_string(c.data[i]));
}

void run_one() {
  // 1. The generic reader.
  io::Array whole;
  bool whole_ok = false;
  try {
    whole = io::read_array(g_input);
    whole_ok = true;
  } catch (const kantor::Error&) {
  }
  if (whole_ok) check_array(whole);

  // 2. The role reader under test, which must agree with read_array.
  io::Array role;
  bool role_ok = false;
  try {
    role = KANTOR_FUZZ_VECTOR ? io::read_vector(g_input, "--fuzz") : io::read_matrix(g_input, "--fuzz");
    role_ok = true;
  } catch (const kantor::IoError& e) {  // documented: every IoError is prefixed "what: "
    FUZZ_CHECK(std::strncmp(e.what(), "--fuzz: ", 8) == 0,
               std::string("IoError without the role prefix: ") + e.what());
  } catch (const kantor::Error&) {
  }
  bool shape_fits = false;
  if (whole_ok) {
    const auto& s = whole.shape;
    shape_fits = KANTOR_FUZZ_VECTOR ? (s.size() == 1 || (s.size() == 2 && (s[0] == 1 || s[1] == 1)))
                                    : s.size() >= 2;
    // (0, huge, huge): no values, but the flattened width does not fit in int64.
    if (!KANTOR_FUZZ_VECTOR && s.size() > 2) {
      std::int64_t d = 1;
      for (std::size_t k = 1; k < s.size() && shape_fits; ++k)
        if (__builtin_mul_overflow(d, s[k], &d)) shape_fits = false;
    }
  }
  FUZZ_CHECK(role_ok == shape_fits, std::string("role reader ") + (role_ok ? "accepted" : "rejected") +
                                        " shape " + shape_str(whole.shape) +
                                        (whole_ok ? "" : " (read_array failed)"));
  if (!role_ok) return;
  FUZZ_CHECK(role.data.size() == whole.data.size(), "role reader value count");
  for (std::size_t i = 0; i < role.data.size(); ++i)
    FUZZ_CHECK(same_value(role.data[i], whole.data[i], true), "role reader value " + std::to_string(i));
  if (KANTOR_FUZZ_VECTOR)
    FUZZ_CHECK(role.shape == std::vector<std::int64_t>{std::int64_t(role.data.size())},
               "read_vector shape " + shape_str(role.shape));
  else if (whole.shape.size() == 2)
    FUZZ_CHECK(role.shape == whole.shape, "read_matrix shape " + shape_str(role.shape));
  else
    FUZZ_CHECK(
        role.shape.size() == 2 && role.shape[0] == whole.shape[0] &&
            (role.shape[0] == 0 ||
             std::uint64_t(role.shape[0]) * std::uint64_t(role.shape[1]) == role.data.size()),
        "read_matrix flattened shape " + shape_str(role.shape) + " of " + shape_str(whole.shape));

  // 3. Writers and readers agree.
  check_round_trip(whole);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_dir = kantor::fuzz::scratch_dir();
  const std::string base = g_dir + "/kantor-fuzz-" + std::to_string(::getpid());
  g_input = base + "-input" KANTOR_FUZZ_EXT;
  g_npy = base + "-rt.npy";
  g_csv = base + "-rt.csv";
  std::atexit(remove_files);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  write_input(data, size);
  try {
    run_one();
  } catch (const kantor::Error& e) {
    // Only the round trip can get here: writing and re-reading a valid array must not fail.
    finding(std::string("round trip of a valid array threw: ") + e.what());
  } catch (const std::exception& e) {
    finding(std::string("unexpected exception (not kantor::Error): ") + e.what());
  } catch (...) {
    finding("unexpected exception of unknown type");
  }
  return 0;
}
