// Pieces shared by the libFuzzer harnesses of tests/fuzz (fuzz_reader.cpp, fuzz_labels.cpp): a
// finding (message, then abort), the invariant check, the scratch directory and the writer of
// each input to its file (the readers take only a path).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kantor::fuzz {

/// Reports a finding and aborts (libFuzzer keeps the input as a crash artifact).
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "kantor fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond, msg)                                                                 \
  do {                                                                                        \
    if (!(cond)) kantor::fuzz::finding(std::string("invariant failed: ") + #cond + ": " + (msg)); \
  } while (0)

inline bool writable_dir(const char* d) {
  struct stat st;
  return d && *d && ::stat(d, &st) == 0 && S_ISDIR(st.st_mode) && ::access(d, W_OK) == 0;
}

/// The scratch directory: $KANTOR_FUZZ_TMPDIR, else /dev/shm, else $TMPDIR, else /tmp.
inline std::string scratch_dir() {
  const char* env = std::getenv("KANTOR_FUZZ_TMPDIR");
  const char* tmp = std::getenv("TMPDIR");
  return writable_dir(env) ? env : writable_dir("/dev/shm") ? "/dev/shm" : writable_dir(tmp) ? tmp : "/tmp";
}

/// Writes the fuzz input to `path` (created or truncated); a failure is a harness finding.
inline void write_input(const std::string& path, const std::uint8_t* data, std::size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) finding("harness: cannot create " + path + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < size) {
    const ssize_t put = ::write(fd, data + done, size - done);
    if (put < 0) {
      if (errno == EINTR) continue;
      finding("harness: write to " + path + " failed: " + std::strerror(errno));
    }
    done += std::size_t(put);
  }
  ::close(fd);
}

}  // namespace kantor::fuzz
