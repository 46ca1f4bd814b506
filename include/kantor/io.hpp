// Array files for the CLI and for applications: .npy (float32 / float64, C order) and .csv
// (numeric, optional header line). Every error is an IoError naming the file, what was wrong and
// where (field, row, column, value). Writers write to a temporary name in the same directory and
// rename, so a failure never leaves half a file.
//
//   kantor::io::Array x = kantor::io::read_matrix("points.npy", "--source");   // n x d doubles
//   kantor::io::write_array("out.csv", {x.rows(), x.shape[1]}, x.data.data());
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
  /// Second dimension (1 for a 1-D array, 0 for rank 0).
  std::int64_t cols() const { return shape.size() < 2 ? (shape.empty() ? 0 : 1) : shape[1]; }
};

/// Reads a .npy or .csv file (chosen by extension, case-insensitive) into doubles. .npy: dtype
/// '<f4' or '<f8', fortran_order False, any rank, format versions 1.0, 2.0 and 3.0. .csv:
/// comma-separated decimal numbers, inf or nan (no hexadecimal floats; spaces and tabs around
/// fields are ignored, blank lines and lines starting with '#' are skipped), every row the same
/// length, an optional first line of non-empty, non-numeric column names; the result is 2-D
/// (rows x columns). NaN/Inf are read as such (the caller validates). A .npy header must give
/// each of its keys once. Throws IoError: "cannot open 'path': reason" for a missing or unreadable
/// file, otherwise "'path': what is wrong (what was expected)".
Array read_array(const std::string& path);

/// Reads a 2-D array (points: rows x dimension). A 1-D .npy of length n is rejected with an
/// IoError that says the file needs shape (n, d). `what` names the role in messages
/// (e.g. "--source"): every IoError is prefixed with "what: ".
Array read_matrix(const std::string& path, const std::string& what);
/// Reads a 1-D array (weights). Accepts shape (n), (n, 1) or (1, n); the result has shape (n).
Array read_vector(const std::string& path, const std::string& what);

/// Writes a .npy (dtype float64 or float32 by `float32`) or .csv (by extension; 17 significant
/// digits, rank 1 or 2 only) atomically: the data goes to `path + ".tmp.<pid>"`, which is renamed
/// to `path` once complete and removed on any failure. Throws IoError naming the file.
void write_array(const std::string& path, const std::vector<std::int64_t>& shape,
                 const double* data, bool float32 = false);

/// Writes text to `path` atomically (temporary file in the same directory, then rename).
void write_text_atomic(const std::string& path, const std::string& text);

/// Lower-case extension of `path` including the dot (".npy", ".csv"), or "" when it has none.
std::string extension(const std::string& path);

/// Throws IoError (prefixed "what: ") unless `path` has a .npy or .csv extension and its parent
/// directory exists: lets a command refuse an unwritable output before doing any work.
void check_writable_array_path(const std::string& path, const std::string& what);

}  // namespace kantor::io
