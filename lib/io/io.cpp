// Array files: .npy (format 1.0 / 2.0 / 3.0, '<f4', '<f8' and integer dtypes, C order), IDX
// and numeric .csv, gzip-compressed or not (lib/io/gzip.cpp), read into doubles with the format
// detected from the content; atomic writers (temporary file in the same directory, then rename).
// The .npy layout: "\x93NUMPY", major, minor, header length (uint16 LE for 1.0, uint32 LE for
// 2.0 / 3.0), a Python dict literal {'descr': '<f8', 'fortran_order': False, 'shape': (n, d), }
// padded with spaces and '\n', then the raw little-endian data.
// The IDX layout (MNIST): 0x00 0x00, a type code, the number of dimensions k, k big-endian uint32
// sizes, then the big-endian data in C order.
#include "kantor/io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>

#include "kantor/error.hpp"
#include "io_detail.hpp"

namespace kantor::io {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr std::size_t kNpyMagicLen = 6;

using detail::quoted;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw IoError(quoted(path) + ": " + what);
}

using detail::shape_string;

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

// What kind of non-regular file st describes, for messages.
const char* file_kind(const struct stat& st) {
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISDIR(st.st_mode)) return "a directory";
  return "not a regular file";
}

[[noreturn]] void refuse_non_regular(const std::string& path, const struct stat& st) {
  if (S_ISDIR(st.st_mode))
    throw IoError("cannot open " + quoted(path) + ": it is a directory (expected a file)");
  throw IoError("cannot open " + quoted(path) + ": it is " + file_kind(st) +
                " (expected a regular file)");
}

// Reads the whole file. Missing, unreadable, a directory or any other non-regular file (FIFO,
// device, socket) -> "cannot open 'path': reason". The kind of file is checked with stat before
// it is opened (opening a FIFO would block until a writer comes), and again on the descriptor,
// which is opened non-blocking, in case the name was replaced in between.
std::string read_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw IoError("cannot open " + quoted(path) + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) refuse_non_regular(path, st);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw IoError("cannot open " + quoted(path) + ": " + std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const struct stat now = st;
    ::close(fd);
    refuse_non_regular(path, now);
  }
  std::string out;
  if (st.st_size > 0) out.reserve(std::size_t(st.st_size));
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

// ---- temporaries still on disk, for a signal handler -----------------------------------------

// The names of the temporary files this process has created and not yet renamed or removed, in
// fixed storage so that remove_pending_temporaries() can run in a signal handler (unlink is
// async-signal-safe). A name that does not fit, or a table full, is simply not tracked.
constexpr int kPendingSlots = 32;
constexpr std::size_t kPendingNameMax = 4096;
char g_pending_name[kPendingSlots][kPendingNameMax];
volatile std::sig_atomic_t g_pending_used[kPendingSlots];
std::mutex g_pending_mutex;

void track_pending(const std::string& tmp) {
  if (tmp.size() >= kPendingNameMax) return;
  std::lock_guard<std::mutex> lock(g_pending_mutex);
  for (int i = 0; i < kPendingSlots; ++i) {
    if (g_pending_used[i]) continue;
    std::memcpy(g_pending_name[i], tmp.c_str(), tmp.size() + 1);
    g_pending_used[i] = 1;
    return;
  }
}

void untrack_pending(const std::string& tmp) {
  std::lock_guard<std::mutex> lock(g_pending_mutex);
  for (int i = 0; i < kPendingSlots; ++i)
    if (g_pending_used[i] && tmp == g_pending_name[i]) {
      g_pending_used[i] = 0;
      return;
    }
}

// Owns a temporary file name: tracked from before the file is created, removed (and untracked)
// when the guard goes away unless release() was called (the file was renamed into place, or the
// caller took over its removal).
class PendingTemporary {
 public:
  explicit PendingTemporary(std::string tmp) : tmp_(std::move(tmp)) { track_pending(tmp_); }
  ~PendingTemporary() {
    if (owned_) {
      ::unlink(tmp_.c_str());
      untrack_pending(tmp_);
    }
  }
  PendingTemporary(const PendingTemporary&) = delete;
  PendingTemporary& operator=(const PendingTemporary&) = delete;
  const std::string& name() const { return tmp_; }
  void release() { owned_ = false; }

 private:
  std::string tmp_;
  bool owned_ = true;
};

// Creates tmp, writes `bytes` to it and fsyncs and closes it. Throws IoError naming `path` (the
// caller removes tmp: PendingTemporary).
void write_file_contents(const std::string& path, const std::string& tmp, const std::string& bytes) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0)
    throw IoError("cannot write " + quoted(path) + ": cannot create the temporary file " +
                  quoted(tmp) + ": " + std::strerror(errno));
  auto give_up = [&](const std::string& step, int err) {
    ::close(fd);
    throw IoError("cannot write " + quoted(path) + ": " + step + ": " + std::strerror(err));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t put = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (put < 0) {
      if (errno == EINTR) continue;
      give_up("write to " + quoted(tmp) + " failed", errno);
    }
    done += std::size_t(put);
  }
  // fsync before rename: a crash must leave the old file or the whole new one, never an empty
  // one. (EINVAL: the file system does not support it, e.g. a pipe or special file.)
  if (::fsync(fd) != 0 && errno != EINVAL) give_up("fsync of " + quoted(tmp) + " failed", errno);
  if (::close(fd) != 0)
    throw IoError("cannot write " + quoted(path) + ": close of " + quoted(tmp) +
                  " failed: " + std::strerror(errno));
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

// What a .npy dtype string means: item size, kind ('f' float, 'i' signed, 'u' unsigned) and
// the Array::dtype name; false for an unsupported descr.
bool npy_dtype(const std::string& descr, std::size_t* item, char* kind, std::string* name) {
  static const struct {
    const char* descr;
    std::size_t item;
    char kind;
    const char* name;
  } kTypes[] = {
      {"<f8", 8, 'f', "float64"}, {"<f4", 4, 'f', "float32"}, {"|i1", 1, 'i', "int8"},
      {"<i1", 1, 'i', "int8"},    {">i1", 1, 'i', "int8"},    {"|u1", 1, 'u', "uint8"},
      {"<u1", 1, 'u', "uint8"},   {">u1", 1, 'u', "uint8"},   {"<i2", 2, 'i', "int16"},
      {"<u2", 2, 'u', "uint16"},  {"<i4", 4, 'i', "int32"},   {"<u4", 4, 'u', "uint32"},
      {"<i8", 8, 'i', "int64"},   {"<u8", 8, 'u', "uint64"},
  };
  for (const auto& t : kTypes)
    if (descr == t.descr) {
      *item = t.item;
      *kind = t.kind;
      *name = t.name;
      return true;
    }
  return false;
}

// One little-endian item of a .npy array as a double; an int64 / uint64 beyond 2^53 in
// magnitude (where doubles no longer hold every integer) is refused.
double npy_value(const std::string& path, const char* p, std::size_t item, char kind,
                 std::size_t index) {
  std::uint64_t u = 0;
  for (std::size_t k = item; k-- > 0;) u = (u << 8) | static_cast<unsigned char>(p[k]);
  if (kind == 'f') {
    if (item == 8) {
      double d;
      std::memcpy(&d, &u, 8);
      return d;
    }
    const std::uint32_t u32 = std::uint32_t(u);
    float f;
    std::memcpy(&f, &u32, 4);
    return double(f);
  }
  constexpr std::uint64_t kExact = std::uint64_t(1) << 53;
  if (kind == 'u') {
    if (u > kExact)
      fail(path, "uint64 value " + std::to_string(u) + " at index " + std::to_string(index) +
                     " is beyond 2^53 = " + std::to_string(kExact) +
                     " (not exactly representable as a float64)");
    return double(u);
  }
  std::int64_t v;
  if (item == 8) {
    std::memcpy(&v, &u, 8);
  } else {  // sign-extend
    const std::uint64_t sign = std::uint64_t(1) << (8 * item - 1);
    v = std::int64_t((u ^ sign)) - std::int64_t(sign);
  }
  if (v > std::int64_t(kExact) || v < -std::int64_t(kExact))
    fail(path, "int64 value " + std::to_string(v) + " at index " + std::to_string(index) +
                   " is beyond 2^53 = " + std::to_string(kExact) +
                   " in magnitude (not exactly representable as a float64)");
  return double(v);
}

Array read_npy(const std::string& path, const std::string& bytes) {
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
  char kind = 'f';
  Array out;
  if (!npy_dtype(h.descr, &item, &kind, &out.dtype))
    fail(path, "unsupported dtype '" + excerpt(h.descr) +
                   "' (expected '<f4' float32 or '<f8' float64, or an integer type '|i1', '|u1', "
                   "'<i2', '<u2', '<i4', '<u4', '<i8' or '<u8', little-endian; convert with "
                   "numpy: a.astype('<f8'))");
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
  const char* src = bytes.data() + data_start;
  for (std::size_t i = 0; i < std::size_t(count); ++i)
    out.data[i] = npy_value(path, src + i * item, item, kind, i);
  return out;
}

// ---- IDX --------------------------------------------------------------------------------------

struct IdxType {
  int code;
  std::size_t item;
  const char* name;
};
constexpr IdxType kIdxTypes[] = {{0x08, 1, "idx-ubyte"},   {0x09, 1, "idx-byte"},
                                 {0x0B, 2, "idx-int16"},   {0x0C, 4, "idx-int32"},
                                 {0x0D, 4, "idx-float32"}, {0x0E, 8, "idx-float64"}};

const IdxType* idx_type(int code) {
  for (const IdxType& t : kIdxTypes)
    if (t.code == code) return &t;
  return nullptr;
}

std::string hex_byte(int b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", b & 0xff);
  return buf;
}

// True when `bytes` starts with a well-formed IDX magic: two zero bytes, a known type code and
// at least one dimension.
bool has_idx_signature(const std::string& bytes) {
  return bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0 &&
         idx_type(static_cast<unsigned char>(bytes[2])) != nullptr && bytes[3] != 0;
}

std::uint64_t read_be(const char* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

Array read_idx(const std::string& path, const std::string& bytes) {
  if (bytes.size() < 4)
    fail(path, "truncated IDX header: the file has " + std::to_string(bytes.size()) +
                   " bytes (expected at least 4: two zero bytes, a type code and the number of "
                   "dimensions)");
  if (bytes[0] != 0 || bytes[1] != 0)
    fail(path, "not an IDX file: it starts with " + hex_byte(bytes[0]) + " " + hex_byte(bytes[1]) +
                   " (expected 0x00 0x00)");
  const int code = static_cast<unsigned char>(bytes[2]);
  const IdxType* type = idx_type(code);
  if (type == nullptr)
    fail(path, "unknown IDX type code " + hex_byte(code) +
                   " (expected 0x08 unsigned byte, 0x09 signed byte, 0x0B int16, 0x0C int32, "
                   "0x0D float32 or 0x0E float64)");
  const std::size_t ndim = static_cast<unsigned char>(bytes[3]);
  if (ndim == 0) fail(path, "the IDX header gives 0 dimensions (expected at least 1)");
  const std::size_t header = 4 + 4 * ndim;
  if (bytes.size() < header)
    fail(path, "truncated IDX header: " + std::to_string(ndim) + " dimensions need " +
                   std::to_string(header) + " header bytes but the file has " +
                   std::to_string(bytes.size()));
  Array out;
  out.dtype = type->name;
  out.shape.resize(ndim);
  for (std::size_t k = 0; k < ndim; ++k)
    out.shape[k] = std::int64_t(read_be(bytes.data() + 4 + 4 * k, 4));
  std::uint64_t count = 1;
  for (const std::int64_t dim : out.shape) {
    if (dim != 0 && count > (std::uint64_t(1) << 60) / std::uint64_t(dim))
      fail(path, "IDX shape " + shape_string(out.shape) +
                     " is too large (the product of the dimensions overflows)");
    count *= std::uint64_t(dim);
  }
  const std::uint64_t expected = count * type->item;
  const std::uint64_t available = bytes.size() - header;
  if (available < expected)
    fail(path, "truncated IDX data: shape " + shape_string(out.shape) + " of " + out.dtype +
                   " needs " + std::to_string(expected) + " bytes but the file has " +
                   std::to_string(available) + " after the " + std::to_string(header) +
                   "-byte header");
  if (available > expected)
    fail(path, "has " + std::to_string(available - expected) +
                   " unexpected bytes after the IDX data: shape " + shape_string(out.shape) +
                   " of " + out.dtype + " needs exactly " + std::to_string(expected) +
                   " bytes but " + std::to_string(available) + " follow the " +
                   std::to_string(header) + "-byte header");
  out.data.resize(std::size_t(count));
  const char* src = bytes.data() + header;
  const std::size_t item = type->item;
  if (code == 0x08) {
    // Unsigned bytes (MNIST images): a plain conversion loop (vectorized), no per-item dispatch.
    const unsigned char* u8 = reinterpret_cast<const unsigned char*>(src);
    for (std::size_t i = 0; i < std::size_t(count); ++i) out.data[i] = double(u8[i]);
    return out;
  }
  for (std::size_t i = 0; i < std::size_t(count); ++i) {
    const std::uint64_t u = read_be(src + i * item, item);
    double v = 0;
    switch (code) {
      case 0x08:
        v = double(u);
        break;
      case 0x09:
        v = double(std::int8_t(std::uint8_t(u)));
        break;
      case 0x0B:
        v = double(std::int16_t(std::uint16_t(u)));
        break;
      case 0x0C:
        v = double(std::int32_t(std::uint32_t(u)));
        break;
      case 0x0D: {
        const std::uint32_t u32 = std::uint32_t(u);
        float f;
        std::memcpy(&f, &u32, 4);
        v = double(f);
        break;
      }
      default:
        std::memcpy(&v, &u, 8);
        break;
    }
    out.data[i] = v;
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

// A range of the file's text (no copy).
struct Span {
  const char* b = nullptr;
  const char* e = nullptr;
  std::size_t size() const { return std::size_t(e - b); }
  bool empty() const { return b == e; }
};

Span trim(Span s) {
  while (s.b < s.e && (*s.b == ' ' || *s.b == '\t')) ++s.b;
  while (s.e > s.b && (s.e[-1] == ' ' || s.e[-1] == '\t')) --s.e;
  return s;
}

// The field of `line` starting at `from`: up to the next comma or the end; *next is past the
// comma (nullptr after the last field).
Span next_field(Span line, const char* from, const char** next) {
  const char* comma = static_cast<const char*>(std::memchr(from, ',', std::size_t(line.e - from)));
  *next = comma ? comma + 1 : nullptr;
  return trim(Span{from, comma ? comma : line.e});
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

// Reads a .csv in one pass over the file's text without copying lines or fields beyond the
// field being parsed: memory is the text plus the values (a 50 MB line of commas fails at its
// first empty field, it does not become 50 million strings).
Array read_csv(const std::string& path, const std::string& text) {
  Array out;
  out.dtype = "csv";
  std::int64_t cols = -1, rows = 0, cols_line = 0;
  bool first_content = true;
  std::size_t pos = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;  // UTF-8 byte order mark
  std::int64_t line_no = 0;
  std::string field;  // the field being parsed, NUL-terminated for strtod
  auto status_of = [&](Span f, double* value) {
    field.assign(f.b, f.size());
    return parse_number(field, value);
  };
  auto field_error = [&](std::int64_t column, FieldStatus st, Span f) {
    const std::string where = "line " + std::to_string(line_no) + ", column " + std::to_string(column);
    const std::string shown = excerpt(std::string(f.b, std::min<std::size_t>(f.size(), 81)));
    if (st == FieldStatus::kEmpty) fail(path, where + ": empty field (expected a number)");
    if (st == FieldStatus::kOutOfRange)
      fail(path, where + ": '" + shown + "' is out of the float64 range");
    fail(path, where + ": cannot parse '" + shown +
                   "' as a number (expected a decimal number, inf or nan)");
  };
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    Span line{text.data() + pos, text.data() + nl};
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.e[-1] == '\r') --line.e;
    const Span content = trim(line);
    if (content.empty() || *content.b == '#') continue;
    if (std::memchr(content.b, '\0', content.size()) != nullptr)
      fail(path, "line " + std::to_string(line_no) +
                     " contains a NUL byte (expected a text file of comma-separated numbers)");
    const std::int64_t nf = 1 + std::int64_t(std::count(line.b, line.e, ','));
    if (first_content) {
      first_content = false;
      // A header is a first line of names: no field is empty, a number or starts like one
      // ("1;2" is a malformed row, not a column name; ",," is a row of empty fields).
      bool names_only = true;
      for (const char* at = line.b; at != nullptr && names_only;) {
        const Span f = next_field(line, at, &at);
        double v;
        const char c0 = f.empty() ? '\0' : *f.b;
        if (f.empty() || status_of(f, &v) == FieldStatus::kOk ||
            std::isdigit(static_cast<unsigned char>(c0)) || c0 == '+' || c0 == '-' || c0 == '.')
          names_only = false;
      }
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
    std::int64_t column = 0;
    for (const char* at = line.b; at != nullptr;) {
      const Span f = next_field(line, at, &at);
      ++column;
      double v = 0;
      const FieldStatus st = status_of(f, &v);
      if (st != FieldStatus::kOk) field_error(column, st, f);
      out.data.push_back(v);
    }
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

constexpr char kGzipMagic[] = "\x1f\x8b";

// The content `bytes` of `path` as an array, the format detected from the content (read_array's
// order); `ext` is the extension that decides when the content does not (for decompressed
// content: the name's without ".gz"). `decompressed`: bytes came out of gzip.
Array decode(const std::string& path, std::string bytes, const std::string& ext,
             bool decompressed) {
  if (bytes.compare(0, 2, kGzipMagic) == 0) {
    if (decompressed)
      fail(path,
           "the gzip-decompressed content is gzip data again (nested compression is not "
           "supported: decompress the outer layer first)");
    std::string inner = decompress_gzip(path, bytes);
    std::string().swap(bytes);  // free the compressed bytes before parsing
    std::string inner_ext = ext;
    if (ext == ".gz") inner_ext = extension(path.substr(0, path.size() - 3));
    try {
      return decode(path, std::move(inner), inner_ext, true);
    } catch (const IoError& e) {
      // "'path': ..." -> "'path' (gzip-decompressed): ..."
      const std::string msg = e.what(), head = quoted(path) + ":";
      if (msg.compare(0, head.size(), head) == 0)
        throw IoError(quoted(path) + " (gzip-decompressed)" + msg.substr(head.size() - 1));
      throw;
    }
  }
  if (bytes.compare(0, kNpyMagicLen, kNpyMagic) == 0) return read_npy(path, bytes);
  const bool csv = ext == ".csv", npy = ext == ".npy";
  if (has_idx_signature(bytes) ||
      (!csv && !npy && bytes.size() >= 2 && bytes[0] == 0 && bytes[1] == 0))
    return read_idx(path, bytes);
  if (npy) return read_npy(path, bytes);  // "not a .npy file ..."
  if (csv) return read_csv(path, bytes);
  if (bytes.empty()) fail(path, "the file is empty (expected a .npy, IDX, gzip or .csv file)");
  fail(path, "unknown file type '" + ext +
                 "' (expected the content of a .npy, IDX or gzip file, or a .csv extension for "
                 "text)");
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
  const std::string ext = extension(path);
  // Something that is not a regular file is never opened (read_file refuses it): with an
  // extension that names no format, no content can tell either.
  struct stat st;
  if (ext != ".npy" && ext != ".csv" && ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(path, "unknown file type '" + ext + "' (expected a .npy, IDX, gzip or .csv file; " +
                   "it is " + (S_ISDIR(st.st_mode) ? "a directory" : file_kind(st)) + ")");
  return decode(path, read_file(path), ext, false);
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
  if (a.shape.size() < 2)
    throw IoError(what + ": " + quoted(path) + " has shape " + shape_string(a.shape) +
                  " but points need a 2-D array of shape (n, d)");
  if (a.shape.size() > 2) {  // images (n, h, w): one row of h * w values per item
    std::int64_t d = 1;
    for (std::size_t k = 1; k < a.shape.size(); ++k)
      if (__builtin_mul_overflow(d, a.shape[k], &d))  // only possible when shape[0] is 0
        throw IoError(what + ": " + quoted(path) + " has shape " + shape_string(a.shape) +
                      ", too large to flatten into a 2-D array (n, d)");
    a.shape = {a.shape[0], d};
  }
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

std::string temporary_path(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

void remove_pending_temporaries() noexcept {
  for (int i = 0; i < kPendingSlots; ++i)
    if (g_pending_used[i]) ::unlink(g_pending_name[i]);
}

void write_text_atomic(const std::string& path, const std::string& text) {
  PendingTemporary tmp(temporary_path(path));
  write_file_contents(path, tmp.name(), text);
  if (::rename(tmp.name().c_str(), path.c_str()) != 0)
    throw IoError("cannot write " + quoted(path) + ": rename from " + quoted(tmp.name()) +
                  " failed: " + std::strerror(errno));
  untrack_pending(tmp.name());
  tmp.release();
}

namespace {

// The bytes of `path`'s file (format by extension, checked first).
std::string array_bytes(const std::string& path, const std::vector<std::int64_t>& shape,
                        const double* data, bool float32) {
  check_array_extension(path);
  std::uint64_t count = 1;
  for (const std::int64_t dim : shape) {
    if (dim < 0) fail(path, "cannot write an array of negative shape " + shape_string(shape));
    count *= std::uint64_t(dim);
  }
  if (count > 0 && data == nullptr) fail(path, "cannot write a null data pointer");
  if (extension(path) == ".npy") return npy_bytes(shape, data, std::size_t(count), float32);
  return csv_text(path, shape, data);
}

}  // namespace

void write_array(const std::string& path, const std::vector<std::int64_t>& shape,
                 const double* data, bool float32) {
  write_text_atomic(path, array_bytes(path, shape, data, float32));
}

std::string stage_array(const std::string& path, const std::vector<std::int64_t>& shape,
                        const double* data, bool float32) {
  const std::string bytes = array_bytes(path, shape, data, float32);
  PendingTemporary tmp(temporary_path(path));
  write_file_contents(path, tmp.name(), bytes);
  tmp.release();  // still tracked: commit_staged or discard_staged ends it
  return tmp.name();
}

void commit_staged(const std::string& staged, const std::string& path) {
  if (::rename(staged.c_str(), path.c_str()) != 0) {
    const int err = errno;
    discard_staged(staged);
    throw IoError("cannot write " + quoted(path) + ": rename from " + quoted(staged) +
                  " failed: " + std::strerror(err));
  }
  untrack_pending(staged);
}

void discard_staged(const std::string& staged) noexcept {
  ::unlink(staged.c_str());
  try {
    untrack_pending(staged);
  } catch (...) {
  }
}

std::string canonical_path(const std::string& path) {
  if (char* full = ::realpath(path.c_str(), nullptr)) {
    std::string out(full);
    std::free(full);
    return out;
  }
  // The file does not exist (yet): its directory, resolved, and its name.
  const std::size_t slash = path.find_last_of('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string dir = parent_directory(path);
  if (char* full = ::realpath(dir.c_str(), nullptr)) {
    std::string out(full);
    std::free(full);
    return (out == "/" ? "" : out) + "/" + name;
  }
  return path;
}

bool same_file(const std::string& a, const std::string& b) {
  if (canonical_path(a) == canonical_path(b)) return true;
  struct stat sa, sb;  // hard links
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

void check_writable_array_path(const std::string& path, const std::string& what) {
  try {
    check_array_extension(path);
    const std::string dir = parent_directory(path);
    auto cannot = [&](const std::string& why) -> IoError {
      return IoError("cannot write " + quoted(path) + ": " + why);
    };
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0)
      throw cannot("directory " + quoted(dir) + ": " + std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) throw cannot(quoted(dir) + " is not a directory");
    const struct stat dir_st = st;
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      throw cannot("directory " + quoted(dir) + ": " + std::strerror(errno) +
                   " (cannot create files in it)");
    // The name and the temporary name the writer will use (temporary_path) must both fit.
    long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
    if (name_max <= 0) name_max = NAME_MAX;
    const std::string tmp = temporary_path(path);
    const std::size_t slash = tmp.find_last_of('/');
    const std::size_t tmp_name_len = slash == std::string::npos ? tmp.size() : tmp.size() - slash - 1;
    if (tmp_name_len > std::size_t(name_max))
      throw cannot("the file name is too long: its temporary file name " +
                   quoted(tmp.substr(slash == std::string::npos ? 0 : slash + 1)) + " has " +
                   std::to_string(tmp_name_len) + " characters, more than the " +
                   std::to_string(name_max) + " the file system allows (shorten the name)");
    if (::stat(path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) throw cannot("it is a directory (expected a file name)");
      // In a sticky directory (/tmp) only the owner of a file (or of the directory) may replace
      // it: the final rename would fail after all the work.
      const uid_t me = ::geteuid();
      if ((dir_st.st_mode & S_ISVTX) && me != 0 && st.st_uid != me && dir_st.st_uid != me)
        throw cannot("it exists, belongs to user id " + std::to_string(st.st_uid) +
                     " and the directory " + quoted(dir) +
                     " is sticky: only its owner can replace it (choose another name)");
    }
  } catch (const IoError& e) {
    throw IoError(what + ": " + e.what());
  }
}

}  // namespace kantor::io
