// Message helpers shared by the readers of lib/io (io.cpp, labels.cpp, gzip.cpp): one spelling of
// a quoted path and of an array shape in every IoError.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kantor::io::detail {

/// 'path', as every message names a file.
inline std::string quoted(const std::string& path) { return "'" + path + "'"; }

/// A shape as Python writes it: (3,), (2, 5).
inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace kantor::io::detail
