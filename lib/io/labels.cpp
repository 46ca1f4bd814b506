// Class labels for labelled datasets (include/kantor/io.hpp): a 1-D file of integers, or one
// column of a feature matrix, checked to be finite integers in the int32 range.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "kantor/error.hpp"
#include "kantor/io.hpp"
#include "io_detail.hpp"

namespace kantor::io {
namespace {

using detail::quoted;

using detail::shape_string;

// The shortest of %.15g / %.17g that reads back as v ("2.5", not "2.5000000000000000").
std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// v as a label, or IoError "'path': label <where> is <v>, <what is wrong>".
std::int32_t checked_label(double v, const std::string& path, const std::string& where) {
  auto bad = [&](const std::string& why) {
    throw IoError(quoted(path) + ": label " + where + " is " + number(v) + ", " + why);
  };
  if (!std::isfinite(v)) bad("not a finite integer");
  if (v != std::floor(v)) bad("not an integer");
  if (v < double(std::numeric_limits<std::int32_t>::min()) ||
      v > double(std::numeric_limits<std::int32_t>::max()))
    bad("outside the int32 range [-2147483648, 2147483647]");
  return std::int32_t(v);
}

}  // namespace

std::vector<std::int32_t> read_labels(const std::string& path, const std::string& what) {
  try {
    const Array a = read_array(path);
    const auto& s = a.shape;
    if (!(s.size() == 1 || (s.size() == 2 && (s[0] == 1 || s[1] == 1))))
      throw IoError(quoted(path) + " has shape " + shape_string(s) +
                    " but labels need a vector of shape (n,), (n, 1) or (1, n)");
    std::vector<std::int32_t> labels(a.data.size());
    for (std::size_t i = 0; i < a.data.size(); ++i)
      labels[i] = checked_label(a.data[i], path, std::to_string(i));
    return labels;
  } catch (const IoError& e) {
    throw IoError(what + ": " + e.what());
  }
}

std::vector<std::int32_t> take_label_column(Array* features, std::int64_t column,
                                            const std::string& path, const std::string& what) {
  try {
    if (features == nullptr) throw IoError(quoted(path) + ": no array to take a label column from");
    Array& a = *features;
    if (a.shape.size() != 2)
      throw IoError(quoted(path) + " has shape " + shape_string(a.shape) +
                    " but a label column needs a 2-D array of shape (n, d)");
    const std::int64_t n = a.shape[0], d = a.shape[1];
    if (n < 0 || d < 0 || (d != 0 && std::uint64_t(n) > a.data.size() / std::uint64_t(d)) ||
        std::uint64_t(n) * std::uint64_t(d) != a.data.size())
      throw IoError(quoted(path) + ": shape " + shape_string(a.shape) + " does not match its " +
                    std::to_string(a.data.size()) + " values");
    if (column < -d || column >= d)
      throw IoError(quoted(path) + ": label column " + std::to_string(column) +
                    " is out of range for " + std::to_string(d) + " columns (expected 0.." +
                    std::to_string(d - 1) + ", or -" + std::to_string(d) +
                    "..-1 counting from the end)");
    const std::int64_t c = column < 0 ? column + d : column;
    if (d == 1)
      throw IoError(quoted(path) +
                    " has a single column: with it as the labels no feature "
                    "column is left (expected at least 2 columns)");
    std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      labels[std::size_t(i)] =
          checked_label(a.data[std::size_t(i * d + c)], path,
                        std::to_string(i) + " (column " + std::to_string(c) + ")");
    // Every label is good: now remove the column in place.
    std::size_t out = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < d; ++k)
        if (k != c) a.data[out++] = a.data[std::size_t(i * d + k)];
    a.data.resize(out);
    a.shape[1] = d - 1;
    return labels;
  } catch (const IoError& e) {
    throw IoError(what + ": " + e.what());
  }
}

}  // namespace kantor::io
