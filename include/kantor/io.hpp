// Array files for the CLI and for applications: .npy (float32 / float64 / integer, C order),
// .csv (numeric, optional header line), IDX (MNIST / Fashion-MNIST) and any of these
// gzip-compressed. Every error is an IoError naming the file, what was wrong and where (field,
// row, column, value). Writers (.npy / .csv) write to a temporary name in the same directory and
// rename, so a failure never leaves half a file.
//
//   kantor::io::Array x = kantor::io::read_matrix("points.npy", "--source");   // n x d doubles
//   kantor::io::write_array("out.csv", {x.rows(), x.shape[1]}, x.data.data());
//   kantor::io::Array img = kantor::io::read_matrix("train-images-idx3-ubyte.gz", "--x");
//   std::vector<std::int32_t> y = kantor::io::read_labels("train-labels-idx1-ubyte.gz", "--y");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kantor::io {

/// A dense array of doubles, row-major, with its shape (rank 1 or more).
struct Array {
  std::vector<std::int64_t> shape;
  std::vector<double> data;
  /// Source dtype: "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
  /// "int64", "uint64" (npy), "csv", or "idx-ubyte", "idx-byte", "idx-int16", "idx-int32",
  /// "idx-float32", "idx-float64" (IDX).
  std::string dtype;
  std::int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  /// Second dimension (1 for a 1-D array, 0 for rank 0).
  std::int64_t cols() const { return shape.size() < 2 ? (shape.empty() ? 0 : 1) : shape[1]; }
};

/// The most bytes decompress_gzip (and so read_array) produces from one gzip file: 16 GiB.
constexpr std::uint64_t kMaxDecompressedBytes = std::uint64_t(16) << 30;

/// Reads an array file into doubles. The format is chosen by the content, not the name:
///  - gzip (first bytes 1f 8b): decompressed (decompress_gzip), then the decompressed content
///    is detected the same way (npy or IDX; otherwise the extension of the name without its
///    ".gz" decides: "points.csv.gz" is a gzipped .csv). gzip inside gzip is refused.
///  - .npy ("\x93NUMPY"): dtype '<f4', '<f8' or an integer type ('|i1', '|u1', '<i2', '<u2',
///    '<i4', '<u4', '<i8', '<u8'; '<i1' / '<u1' too), fortran_order False, any rank, format
///    versions 1.0, 2.0 and 3.0; an int64 / uint64 value beyond 2^53 in magnitude (not exactly a
///    double) is refused.
///  - IDX (two zero bytes, a type code 0x08 ubyte, 0x09 signed byte, 0x0B int16, 0x0C int32,
///    0x0D float32 or 0x0E float64, the number of dimensions >= 1, that many big-endian uint32
///    sizes, then the big-endian data in C order): any rank. A file whose content starts with
///    two zero bytes is read as IDX (and its header errors reported) unless its name ends in
///    .npy or .csv, where only a well-formed IDX signature (a known type code, >= 1 dimension)
///    counts.
///  - otherwise the extension (case-insensitive) decides: .csv is read as text: comma-separated
///    decimal numbers, inf or nan (no hexadecimal floats; spaces and tabs around fields are
///    ignored, blank lines and lines starting with '#' are skipped), every row the same length,
///    an optional first line of non-empty, non-numeric column names; the result is 2-D (rows x
///    columns). .npy gives the .npy error (no magic string); any other name is an unknown file
///    type.
/// NaN/Inf are read as such (the caller validates). A .npy header must give each of its keys
/// once. The data must fill the file exactly (.npy and IDX: a short or a long payload is an
/// error naming both sizes). Only regular files are read: a FIFO, device, socket or directory
/// is refused (checked with stat before opening, so reading never blocks; one whose extension
/// is not .npy or .csv is reported as an unknown file type, as no content can tell). Memory is
/// the file's size (plus its decompressed size) plus the values. Throws IoError: "cannot open
/// 'path': reason" for a missing or unreadable file, otherwise "'path': what is wrong (what was
/// expected)" ("'path' (gzip-decompressed): ..." for a problem of the decompressed content).
Array read_array(const std::string& path);

/// Decompresses the gzip data `compressed` (read from `path`, which names it in messages)
/// incrementally into a growing buffer (never sized by what the file claims). Concatenated
/// gzip members are decompressed one after the other (as gzip -d does); anything after the
/// last member that is not another member (trailing garbage, zero padding) is an error.
/// Throws IoError "'path': ..." for corrupt data (zlib's message and the compressed offset),
/// a truncated stream, or more than `max_bytes` of output.
std::string decompress_gzip(const std::string& path, const std::string& compressed,
                            std::uint64_t max_bytes = kMaxDecompressedBytes);

/// Reads a 2-D array (points: rows x dimension). An array of rank 3 or more (images: IDX or
/// .npy of shape (n, 28, 28)) is flattened to (n, product of the other dimensions): row i is
/// item i in C order. A 1-D array of length n is rejected with an IoError that says the file
/// needs shape (n, d). `what` names the role in messages (e.g. "--source"): every IoError is
/// prefixed with "what: ".
Array read_matrix(const std::string& path, const std::string& what);
/// Reads a 1-D array (weights). Accepts shape (n), (n, 1) or (1, n); the result has shape (n).
Array read_vector(const std::string& path, const std::string& what);

/// Reads class labels: a file read_array reads (IDX such as MNIST's labels-idx1-ubyte, .npy of
/// an integer or float dtype, .csv, gzipped or not) holding shape (n), (n, 1) or (1, n). Every
/// value must be a finite integer in the int32 range. Throws IoError prefixed "what: ": the
/// read_array errors, a wrong shape, or "'path': label 17 is 2.5, not an integer" (the index
/// counts from 0; also NaN / infinite and out-of-range values).
std::vector<std::int32_t> read_labels(const std::string& path, const std::string& what);

/// Removes column `column` of the 2-D array *features (negative counts from the end: -1 is the
/// last column) and returns it as labels, with read_labels' checks (the message names the row
/// and the column). `path` names the file in messages, which are prefixed "what: ". Throws
/// IoError for a null pointer, an array that is not 2-D, a column out of range (naming it and
/// the valid range), an array of a single column (no feature would be left) or a bad label; on
/// any error *features is unchanged. Otherwise *features becomes (n, d - 1), dtype unchanged.
std::vector<std::int32_t> take_label_column(Array* features, std::int64_t column,
                                            const std::string& path, const std::string& what);

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
