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
/// each of its keys once. Only regular files are read: a FIFO, device or socket is refused
/// (checked with stat before opening, so reading never blocks). Memory is the file's size plus
/// the values. Throws IoError: "cannot open 'path': reason" for a missing or unreadable
/// file, otherwise "'path': what is wrong (what was expected)".
Array read_array(const std::string& path);

/// Reads a 2-D array (points: rows x dimension). A 1-D .npy of length n is rejected with an
/// IoError that says the file needs shape (n, d). `what` names the role in messages
/// (e.g. "--source"): every IoError is prefixed with "what: ".
Array read_matrix(const std::string& path, const std::string& what);
/// Reads a 1-D array (weights). Accepts shape (n), (n, 1) or (1, n); the result has shape (n).
Array read_vector(const std::string& path, const std::string& what);

/// Writes a .npy (dtype float64 or float32 by `float32`) or .csv (by extension, case-insensitive:
/// extension(); 17 significant digits, rank 1 or 2 only) atomically: the data goes to
/// temporary_path(path), which is renamed to `path` once complete and removed on any failure
/// (and by remove_pending_temporaries() while it exists). Throws IoError naming the file.
void write_array(const std::string& path, const std::vector<std::int64_t>& shape,
                 const double* data, bool float32 = false);

/// Writes text to `path` atomically (temporary_path(path), then rename).
void write_text_atomic(const std::string& path, const std::string& text);

/// The temporary file name every writer here uses for `path`: `path + ".tmp.<pid>"`, in the same
/// directory (so that the final rename is atomic).
std::string temporary_path(const std::string& path);

/// Writes the file of write_array under temporary_path(path) (complete and fsynced) and returns
/// that name, without renaming it: for several outputs that must all be written before any is
/// replaced. End it with commit_staged (rename to `path`) or discard_staged (remove it); until
/// then remove_pending_temporaries() removes it too.
std::string stage_array(const std::string& path, const std::vector<std::int64_t>& shape,
                        const double* data, bool float32 = false);
/// Renames a staged file onto `path`; on failure removes it and throws IoError naming `path`.
void commit_staged(const std::string& staged, const std::string& path);
/// Removes a staged file (ignoring errors).
void discard_staged(const std::string& staged) noexcept;

/// Removes every temporary file a writer of this process has created and not yet renamed or
/// removed. Async-signal-safe (only unlink): for a handler of SIGINT / SIGTERM that then ends the
/// process, so that a signal during a write leaves no temporary behind.
void remove_pending_temporaries() noexcept;

/// `path` resolved for comparisons: realpath() of the file when it exists, otherwise realpath()
/// of its directory followed by its name (the path as given when neither resolves).
std::string canonical_path(const std::string& path);
/// True when a and b name the same file: equal canonical_path(), or the same inode (hard links).
bool same_file(const std::string& a, const std::string& b);

/// Lower-case extension of `path` including the dot (".npy", ".csv"), or "" when it has none.
std::string extension(const std::string& path);

/// Throws IoError (prefixed "what: ") unless the writers could write `path`: a .npy or .csv
/// extension (the same case-insensitive extension() the writers use), a parent directory that
/// exists and where this user may create files, a temporary_path(path) whose name fits the file
/// system's NAME_MAX, not an existing directory, and (best effort) not an existing file of another
/// user in a sticky directory (the final rename would be refused). Creates nothing: lets a
/// command refuse an unwritable output before doing any work.
void check_writable_array_path(const std::string& path, const std::string& what);

}  // namespace kantor::io
