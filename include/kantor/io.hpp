// Array files for the CLI and for applications: .npy (float32 / float64, C order) and .csv
// (numeric, optional header line). Every error is an IoError naming the file, what was wrong and
// where (field, row, column, value). Writers write to a temporary name in the same directory and
// rename, so a failure never leaves half a file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kantor::io {

/// A dense array of doubles, row-major, with its shape (rank 1 or more).
struct Array {
  std::vector<std::int64_t> shape;
  std::vector<double> data;
  /// Source dtype: "float32", "float64" (npy) or "csv".
  std::string dtype;
  std::int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
};

/// Reads a .npy or .csv file (chosen by extension, case-insensitive) into doubles. .npy: dtype
/// '<f4' or '<f8', fortran_order False, any rank. .csv: comma-separated numbers, every row the
/// same length, an optional first line of non-numeric column names; the result is 2-D
/// (rows x columns). NaN/Inf are read as such (the caller validates).
Array read_array(const std::string& path);

/// Reads a 2-D array (points: rows x dimension). A 1-D .npy of length n is rejected with an
/// IoError that says the file needs shape (n, d). `what` names the role in messages
/// (e.g. "--source").
Array read_matrix(const std::string& path, const std::string& what);
/// Reads a 1-D array (weights). Accepts shape (n), (n, 1) or (1, n).
Array read_vector(const std::string& path, const std::string& what);

/// Writes a .npy (dtype float64 or float32 by `float32`) or .csv (by extension) atomically.
void write_array(const std::string& path, const std::vector<std::int64_t>& shape,
                 const double* data, bool float32 = false);

/// Writes text to `path` atomically (temporary file in the same directory, then rename).
void write_text_atomic(const std::string& path, const std::string& text);

}  // namespace kantor::io
