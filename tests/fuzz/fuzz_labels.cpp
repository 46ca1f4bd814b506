// libFuzzer harness of the label readers of include/kantor/io.hpp: kantor::io::read_labels on a
// file of any format (the input is written to a per-process file named .csv: gzip, .npy and IDX
// are detected by content, anything else is read as .csv text), and take_label_column on what
// read_array gives. The file goes to $KANTOR_FUZZ_TMPDIR, else /dev/shm, else $TMPDIR or /tmp.
//
// A kantor::IoError is the normal outcome for a bad file. Anything else is a finding (another
// exception, a crash, a sanitizer report, a timeout, a memory blow-up, a broken invariant):
//   - read_labels accepts exactly what read_array reads with shape (n), (n, 1) or (1, n) and
//     every value a finite integer in the int32 range, and returns those values; each of its
//     IoErrors starts with the role ("--fuzz: ");
//   - take_label_column on a 2-D array, for the first, the last (-1) and an out-of-range column:
//     accepted iff the column holds such integers (out of range: never) and the array has at
//     least 2 columns; then the labels are the column and the array is (n, d - 1) with the other
//     values in order; on an error the array is unchanged.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "kantor/error.hpp"
#include "kantor/io.hpp"
#include "fuzz_support.hpp"

namespace {

namespace io = kantor::io;

std::string g_input;

using kantor::fuzz::finding;

void remove_input() { ::unlink(g_input.c_str()); }

void write_input(const std::uint8_t* data, std::size_t size) {
  kantor::fuzz::write_input(g_input, data, size);
}

bool is_label(double v) {
  return std::isfinite(v) && v == std::floor(v) && v >= -2147483648.0 && v <= 2147483647.0;
}

void check_label_column(const io::Array& whole, std::int64_t column) {
  const std::int64_t n = whole.shape[0], d = whole.shape[1];
  const bool in_range = column >= -d && column < d;
  const std::int64_t c = column < 0 ? column + d : column;
  bool want_ok = in_range && d >= 2;
  for (std::int64_t i = 0; i < n && want_ok; ++i)
    want_ok = is_label(whole.data[std::size_t(i * d + c)]);
  io::Array a = whole;
  std::vector<std::int32_t> labels;
  bool ok = false;
  try {
    labels = io::take_label_column(&a, column, g_input, "--fuzz");
    ok = true;
  } catch (const kantor::IoError& e) {
    FUZZ_CHECK(std::strncmp(e.what(), "--fuzz: ", 8) == 0,
               std::string("IoError without the role prefix: ") + e.what());
  }
  FUZZ_CHECK(ok == want_ok, "take_label_column(" + std::to_string(column) + ") " +
                                (ok ? "accepted" : "rejected") + " a " + std::to_string(n) + " x " +
                                std::to_string(d) + " array");
  if (!ok) {
    FUZZ_CHECK(a.shape == whole.shape && a.data.size() == whole.data.size() &&
                   (a.data.empty() ||
                    std::memcmp(a.data.data(), whole.data.data(), a.data.size() * 8) == 0),
               "take_label_column changed the array on an error");
    return;
  }
  FUZZ_CHECK(labels.size() == std::size_t(n), "label count");
  FUZZ_CHECK(a.shape == (std::vector<std::int64_t>{n, d - 1}), "shape after take_label_column");
  FUZZ_CHECK(a.dtype == whole.dtype, "dtype after take_label_column");
  std::size_t at = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    FUZZ_CHECK(double(labels[std::size_t(i)]) == whole.data[std::size_t(i * d + c)],
               "label " + std::to_string(i));
    for (std::int64_t k = 0; k < d; ++k) {
      if (k == c) continue;
      const double want = whole.data[std::size_t(i * d + k)], got = a.data[at++];
      FUZZ_CHECK(std::memcmp(&want, &got, 8) == 0, "feature value after take_label_column");
    }
  }
}

void run_one() {
  io::Array whole;
  bool whole_ok = false;
  try {
    whole = io::read_array(g_input);
    whole_ok = true;
  } catch (const kantor::IoError&) {
  }

  std::vector<std::int32_t> labels;
  bool ok = false;
  try {
    labels = io::read_labels(g_input, "--fuzz");
    ok = true;
  } catch (const kantor::IoError& e) {
    FUZZ_CHECK(std::strncmp(e.what(), "--fuzz: ", 8) == 0,
               std::string("IoError without the role prefix: ") + e.what());
  }
  bool want_ok = false;
  if (whole_ok) {
    const auto& s = whole.shape;
    want_ok = s.size() == 1 || (s.size() == 2 && (s[0] == 1 || s[1] == 1));
    for (std::size_t i = 0; i < whole.data.size() && want_ok; ++i)
      want_ok = is_label(whole.data[i]);
  }
  FUZZ_CHECK(ok == want_ok, std::string("read_labels ") + (ok ? "accepted" : "rejected") +
                                " what read_array " + (whole_ok ? "read" : "refused"));
  if (ok) {
    FUZZ_CHECK(labels.size() == whole.data.size(), "label count");
    for (std::size_t i = 0; i < labels.size(); ++i)
      FUZZ_CHECK(double(labels[i]) == whole.data[i], "label " + std::to_string(i));
  }

  if (whole_ok && whole.shape.size() == 2) {
    check_label_column(whole, 0);
    check_label_column(whole, -1);
    check_label_column(whole, whole.shape[1]);  // one past the end: always out of range
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = kantor::fuzz::scratch_dir();
  g_input = dir + "/kantor-fuzz-" + std::to_string(::getpid()) + "-labels.csv";
  std::atexit(remove_input);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  write_input(data, size);
  try {
    run_one();
  } catch (const kantor::Error& e) {
    finding(std::string("unexpected kantor::Error (not IoError): ") + e.what());
  } catch (const std::exception& e) {
    finding(std::string("unexpected exception (not kantor::Error): ") + e.what());
  } catch (...) {
    finding("unexpected exception of unknown type");
  }
  return 0;
}
