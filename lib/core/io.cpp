// Array files: .npy (format 1.0 / 2.0 / 3.0, '<f4' and '<f8', C order) and numeric .csv, read
// into doubles; atomic writers (temporary file in the same directory, then rename).
// The .npy layout: "\x93NUMPY", major, minor, header length (uint16 LE for 1.0, uint32 LE for
// 2.0 / 3.0), a Python dict literal {'descr': '<f8', 'fortran_order': False, 'shape': (n, d), }
// padded with spaces and '\n', then the raw little-endian data.
#include "kantor/io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "kantor/error.hpp"

namespace kantor::io {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr std::size_t kNpyMagicLen = 6;

std::string quoted(const std::string& path) { return "'" + path + "'"; }

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IoError(quoted(path) + ": " + what);
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// A printable excerpt of untrusted text for messages (control characters escaped, length capped).
std::string excerpt(const std::string& s, std::size_t max_len = 80) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < max_len; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

bool host_is_little_endian() {
  const std::uint16_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

// Reads the whole file. Missing, unreadable or directory -> "cannot open 'path': reason".
std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open " + quoted(path) + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw IoError("cannot open " + quoted(path) + ": it is a directory (expected a file)");
  }
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    out.reserve(std::size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw IoError("cannot read " + quoted(path) + ": " + std::strerror(err));
    }
    out.append(buf, std::size_t(got));
  }
  ::close(fd);
  return out;
}

// ---- .npy -----------------------------------------------------------------------------------

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

// Parser of the header dict: a Python literal with exactly the keys descr, fortran_order, shape.
class NpyHeaderParser {
 public:
  NpyHeaderParser(const std::string& path, const std::string& text) : path_(path), s_(text) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      const std::string key = parse_string("a key");
      skip_ws();
      expect(':');
      skip_ws();
      if ((key == "descr" && have_descr) || (key == "fortran_order" && have_fortran) ||
          (key == "shape" && have_shape))
        bad("duplicate key '" + key + "' (expected each of descr, fortran_order and shape once)");
      if (key == "descr") {
        if (peek() == '[')
          bad("structured dtype " + excerpt(rest(), 40) +
              " is not supported (expected '<f4' float32 or '<f8' float64)");
        h.descr = parse_string("the dtype string of 'descr'");
        have_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = parse_bool();
        have_fortran = true;
      } else if (key == "shape") {
        h.shape = parse_shape();
        have_shape = true;
      } else {
        bad("unexpected key '" + excerpt(key) + "' (expected descr, fortran_order and shape)");
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != '}') {
        bad("expected ',' or '}' after the value of '" + key + "'");
      }
    }
    skip_ws();
    if (pos_ != s_.size()) bad("unexpected text after the closing '}'");
    if (!have_descr) bad("missing key 'descr'");
    if (!have_fortran) bad("missing key 'fortran_order'");
    if (!have_shape) bad("missing key 'shape'");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail(path_, "malformed .npy header: " + what + " at offset " + std::to_string(pos_) +
                    " of header \"" + excerpt(s_, 120) + "\"");
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  std::string rest() const { return s_.substr(pos_); }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string parse_string(const char* what) {
    const char q = peek();
    if (q != '\'' && q != '"') bad(std::string("expected a quoted string for ") + what);
    const std::size_t end = s_.find(q, pos_ + 1);
    if (end == std::string::npos) bad("unterminated string");
    std::string out = s_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return out;
  }
  bool parse_bool() {
    if (s_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (s_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    bad("expected True or False for 'fortran_order'");
  }
  std::vector<std::int64_t> parse_shape() {
    std::vector<std::int64_t> shape;
    expect('(');
    for (;;) {
      skip_ws();
      if (peek() == ')') {
        ++pos_;
        return shape;
      }
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        bad("expected a non-negative integer in 'shape'");
      std::int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) bad("dimension too large");
        v = v * 10 + (s_[pos_++] - '0');
      }
      if (peek() == 'L') ++pos_;  // Python 2 long suffix
      shape.push_back(v);
      skip_ws();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != ')') {
        bad("expected ',' or ')' in 'shape'");
      }
    }
  }

  const std::string& path_;
  const std::string& s_;
  std::size_t pos_ = 0;
};

std::uint32_t read_le(const std::string& bytes, std::size_t at, int n) {
  std::uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

Array read_npy(const std::string& path) {
  const std::string bytes = read_file(path);
  if (bytes.size() < kNpyMagicLen + 2 || bytes.compare(0, kNpyMagicLen, kNpyMagic) != 0)
    fail(path, "not a .npy file (missing the \\x93NUMPY magic string at the start; file has " +
                   std::to_string(bytes.size()) + " bytes)");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    fail(path, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  const std::size_t header_start = 8 + len_bytes;
  if (bytes.size() < header_start)
    fail(path, "truncated .npy file: it ends inside the header length field");
  const std::size_t header_len = read_le(bytes, 8, int(len_bytes));
  if (bytes.size() - header_start < header_len)
    fail(path, "truncated .npy header: the header length field says " + std::to_string(header_len) +
                   " bytes but only " + std::to_string(bytes.size() - header_start) + " follow");
  const std::string header_text = bytes.substr(header_start, header_len);
  const NpyHeader h = NpyHeaderParser(path, header_text).parse();

  std::size_t item = 0;
  Array out;
  if (h.descr == "<f8") {
    item = 8;
    out.dtype = "float64";
  } else if (h.descr == "<f4") {
    item = 4;
    out.dtype = "float32";
  } else {
    fail(path, "unsupported dtype '" + excerpt(h.descr) +
                   "' (expected '<f4' float32 or '<f8' float64, little-endian; convert with "
                   "numpy: a.astype('<f8'))");
  }
  if (h.fortran_order)
    fail(path,
         "fortran_order is True (expected a C-order array; save "
         "numpy.ascontiguousarray(a) instead)");
  std::uint64_t count = 1;
  for (const std::int64_t dim : h.shape) {
    if (dim != 0 && count > (std::uint64_t(1) << 60) / std::uint64_t(dim))
      fail(path, "shape " + shape_string(h.shape) + " is too large");
    count *= std::uint64_t(dim);
  }
  const std::size_t data_start = header_start + header_len;
  const std::uint64_t expected = count * item;
  const std::uint64_t available = bytes.size() - data_start;
  if (available < expected)
    fail(path, "truncated data: shape " + shape_string(h.shape) + " of " + out.dtype + " needs " +
                   std::to_string(expected) + " bytes but the file has " +
                   std::to_string(available) + " after the header");
  if (available > expected)
    fail(path, "has " + std::to_string(available - expected) +
                   " unexpected bytes after the data (shape " + shape_string(h.shape) + " of " +
                   out.dtype + " needs exactly " + std::to_string(expected) + ")");
  out.shape = h.shape;
  out.data.resize(std::size_t(count));
  const bool swap = !host_is_little_endian();
  const char* src = bytes.data() + data_start;
  for (std::size_t i = 0; i < std::size_t(count); ++i) {
    char b[8];
    std::memcpy(b, src + i * item, item);
    if (swap)
      for (std::size_t k = 0; k < item / 2; ++k) std::swap(b[k], b[item - 1 - k]);
    if (item == 8) {
      std::memcpy(&out.data[i], b, 8);
    } else {
      float f;
      std::memcpy(&f, b, 4);
      out.data[i] = double(f);
    }
  }
  return out;
}

std::string npy_bytes(const std::vector<std::int64_t>& shape, const double* data, std::size_t count,
                      bool float32) {
  std::string dict = std::string("{'descr': '") + (float32 ? "<f4" : "<f8") +
                     "', 'fortran_order': False, 'shape': " + shape_string(shape) + ", }";
  // Pad with spaces so that magic + version + length + header is a multiple of 64, ending '\n'.
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const std::size_t prefix = v2 ? 12 : 10;
  std::size_t total = prefix + dict.size() + 1;
  total = (total + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kNpyMagic, kNpyMagicLen);
  out += char(v2 ? 2 : 1);
  out += char(0);
  const std::uint32_t hlen = std::uint32_t(dict.size());
  for (std::size_t k = 0; k < (v2 ? 4u : 2u); ++k) out += char((hlen >> (8 * k)) & 0xff);
  out += dict;
  const std::size_t item = float32 ? 4 : 8;
  const std::size_t start = out.size();
  out.resize(start + count * item);
  const bool swap = !host_is_little_endian();
  for (std::size_t i = 0; i < count; ++i) {
    char b[8];
    if (float32) {
      const float f = float(data[i]);
      std::memcpy(b, &f, 4);
    } else {
      std::memcpy(b, &data[i], 8);
    }
    if (swap)
      for (std::size_t k = 0; k < item / 2; ++k) std::swap(b[k], b[item - 1 - k]);
    std::memcpy(&out[start + i * item], b, item);
  }
  return out;
}

// ---- .csv -----------------------------------------------------------------------------------

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    out.push_back(
        trim(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

enum class FieldStatus { kOk, kEmpty, kNotANumber, kOutOfRange };

bool equals_ignoring_case(const char* s, std::size_t len, const char* word) {
  if (std::strlen(word) != len) return false;
  for (std::size_t i = 0; i < len; ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != word[i]) return false;
  return true;
}

// A decimal literal: [+-] digits [. digits] [(e|E) [+-] digits] with at least one mantissa
// digit, or [+-] inf / infinity / nan in any case. strtod also takes hexadecimal floats
// ("0x1p3") and "nan(chars)", which a .csv of numbers never means.
bool is_decimal_literal(const std::string& field) {
  const char* s = field.c_str();
  std::size_t i = 0, n = field.size();
  if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
  if (equals_ignoring_case(s + i, n - i, "inf") || equals_ignoring_case(s + i, n - i, "infinity") ||
      equals_ignoring_case(s + i, n - i, "nan"))
    return true;
  std::size_t digits = 0;
  while (i < n && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  if (i < n && s[i] == '.') {
    ++i;
    while (i < n && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    std::size_t exp_digits = 0;
    while (i < n && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == n;
}

FieldStatus parse_number(const std::string& field, double* value) {
  if (field.empty()) return FieldStatus::kEmpty;
  if (!is_decimal_literal(field)) return FieldStatus::kNotANumber;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(field.c_str(), &end);
  if (end != field.c_str() + field.size()) return FieldStatus::kNotANumber;
  // A finite literal beyond the float64 range (1e999) is a mistake, not infinity; underflow to
  // a subnormal or zero is fine.
  if (errno == ERANGE && std::isinf(v)) return FieldStatus::kOutOfRange;
  *value = v;
  return FieldStatus::kOk;
}

Array read_csv(const std::string& path) {
  std::string text = read_file(path);
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);  // UTF-8 byte order mark
  Array out;
  out.dtype = "csv";
  std::int64_t cols = -1, rows = 0, cols_line = 0;
  bool first_content = true;
  std::size_t pos = 0;
  std::int64_t line_no = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string content = trim(line);
    if (content.empty() || content[0] == '#') continue;
    if (content.find('\0') != std::string::npos)
      fail(path, "line " + std::to_string(line_no) +
                     " contains a NUL byte (expected a text file of comma-separated numbers)");
    const std::vector<std::string> fields = split_fields(line);
    const std::int64_t nf = std::int64_t(fields.size());
    std::vector<double> values(fields.size());
    std::vector<FieldStatus> status(fields.size());
    // A header is a first line of names: no field is empty, a number or starts like one ("1;2"
    // is a malformed row, not a column name; ",," is a row of empty fields).
    bool names_only = true;
    for (std::size_t k = 0; k < fields.size(); ++k) {
      status[k] = parse_number(fields[k], &values[k]);
      if (fields[k].empty()) {
        names_only = false;
        continue;
      }
      const char c0 = fields[k][0];
      if (status[k] == FieldStatus::kOk || std::isdigit(static_cast<unsigned char>(c0)) ||
          c0 == '+' || c0 == '-' || c0 == '.')
        names_only = false;
    }
    if (first_content) {
      first_content = false;
      if (names_only) {  // a header line of column names
        cols = nf;
        cols_line = line_no;
        continue;
      }
    }
    if (cols < 0) {
      cols = nf;
      cols_line = line_no;
    } else if (nf != cols) {
      fail(path, "line " + std::to_string(line_no) + " has " + std::to_string(nf) +
                     " fields but line " + std::to_string(cols_line) + " has " +
                     std::to_string(cols) + " (expected every row to have the same length)");
    }
    for (std::size_t k = 0; k < fields.size(); ++k) {
      if (status[k] == FieldStatus::kOk) continue;
      std::string where = "line " + std::to_string(line_no) + ", column " + std::to_string(k + 1);
      if (status[k] == FieldStatus::kEmpty) fail(path, where + ": empty field (expected a number)");
      if (status[k] == FieldStatus::kOutOfRange)
        fail(path, where + ": '" + excerpt(fields[k]) + "' is out of the float64 range");
      fail(path, where + ": cannot parse '" + excerpt(fields[k]) +
                     "' as a number (expected a decimal number, inf or nan)");
    }
    out.data.insert(out.data.end(), values.begin(), values.end());
    ++rows;
  }
  out.shape = {rows, cols < 0 ? 0 : cols};
  return out;
}

std::string csv_text(const std::string& path, const std::vector<std::int64_t>& shape,
                     const double* data) {
  if (shape.size() != 1 && shape.size() != 2)
    fail(path, "a .csv file holds a 1-D or 2-D array, got shape " + shape_string(shape));
  const std::int64_t rows = shape[0];
  const std::int64_t cols = shape.size() == 2 ? shape[1] : 1;
  std::string out;
  out.reserve(std::size_t(rows * cols) * 24);
  char buf[40];
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t k = 0; k < cols; ++k) {
      if (k) out += ',';
      std::snprintf(buf, sizeof buf, "%.17g", data[i * cols + k]);
      out += buf;
    }
    out += '\n';
  }
  return out;
}

std::string parent_directory(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void check_array_extension(const std::string& path) {
  const std::string ext = extension(path);
  if (ext != ".npy" && ext != ".csv")
    fail(path, "unknown file type '" + ext + "' (expected a .npy or .csv extension)");
}

}  // namespace

std::string extension(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot);
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

Array read_array(const std::string& path) {
  check_array_extension(path);
  return extension(path) == ".npy" ? read_npy(path) : read_csv(path);
}

Array read_matrix(const std::string& path, const std::string& what) {
  Array a;
  try {
    a = read_array(path);
  } catch (const IoError& e) {
    throw IoError(what + ": " + e.what());
  }
  if (a.shape.size() == 1)
    throw IoError(what + ": " + quoted(path) + " has shape " + shape_string(a.shape) +
                  " but points need a 2-D array of shape (n, d); for 1-D points save shape (" +
                  std::to_string(a.shape[0]) + ", 1)");
  if (a.shape.size() != 2)
    throw IoError(what + ": " + quoted(path) + " has shape " + shape_string(a.shape) +
                  " but points need a 2-D array of shape (n, d)");
  return a;
}

Array read_vector(const std::string& path, const std::string& what) {
  Array a;
  try {
    a = read_array(path);
  } catch (const IoError& e) {
    throw IoError(what + ": " + e.what());
  }
  const auto& s = a.shape;
  const bool ok = s.size() == 1 || (s.size() == 2 && (s[0] == 1 || s[1] == 1));
  if (!ok)
    throw IoError(what + ": " + quoted(path) + " has shape " + shape_string(s) +
                  " but weights need a vector of shape (n,), (n, 1) or (1, n)");
  a.shape = {std::int64_t(a.data.size())};
  return a;
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0)
    throw IoError("cannot write " + quoted(path) + ": cannot create the temporary file " +
                  quoted(tmp) + ": " + std::strerror(errno));
  auto give_up = [&](const std::string& step, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + quoted(path) + ": " + step + ": " + std::strerror(err));
  };
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t put = ::write(fd, text.data() + done, text.size() - done);
    if (put < 0) {
      if (errno == EINTR) continue;
      give_up("write to " + quoted(tmp) + " failed", errno);
    }
    done += std::size_t(put);
  }
  // fsync before rename: a crash must leave the old file or the whole new one, never an empty
  // one. (EINVAL: the file system does not support it, e.g. a pipe or special file.)
  if (::fsync(fd) != 0 && errno != EINVAL) give_up("fsync of " + quoted(tmp) + " failed", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + quoted(path) + ": close of " + quoted(tmp) +
                  " failed: " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + quoted(path) + ": rename from " + quoted(tmp) +
                  " failed: " + std::strerror(err));
  }
}

void write_array(const std::string& path, const std::vector<std::int64_t>& shape,
                 const double* data, bool float32) {
  check_array_extension(path);
  std::uint64_t count = 1;
  for (const std::int64_t dim : shape) {
    if (dim < 0) fail(path, "cannot write an array of negative shape " + shape_string(shape));
    count *= std::uint64_t(dim);
  }
  if (count > 0 && data == nullptr) fail(path, "cannot write a null data pointer");
  if (extension(path) == ".npy")
    write_text_atomic(path, npy_bytes(shape, data, std::size_t(count), float32));
  else
    write_text_atomic(path, csv_text(path, shape, data));
}

void check_writable_array_path(const std::string& path, const std::string& what) {
  try {
    check_array_extension(path);
    const std::string dir = parent_directory(path);
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0)
      throw IoError("cannot write " + quoted(path) + ": directory " + quoted(dir) + ": " +
                    std::strerror(errno));
    if (!S_ISDIR(st.st_mode))
      throw IoError("cannot write " + quoted(path) + ": " + quoted(dir) + " is not a directory");
    if (::access(dir.c_str(), W_OK) != 0)
      throw IoError("cannot write " + quoted(path) + ": directory " + quoted(dir) + ": " +
                    std::strerror(errno));
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      throw IoError("cannot write " + quoted(path) + ": it is a directory (expected a file name)");
  } catch (const IoError& e) {
    throw IoError(what + ": " + e.what());
  }
}

}  // namespace kantor::io
