// A fresh scratch directory for a test (under $TMPDIR or /tmp), removed with everything in it
// when the object goes away. Shared by the io and CLI suites.
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace kantor::test {

class TempDir {
 public:
  /// Creates <$TMPDIR or /tmp>/<prefix>XXXXXX; throws std::runtime_error when it cannot.
  explicit TempDir(const std::string& prefix) {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/" + prefix + "XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
    dir_ = templ;
  }
  ~TempDir() { remove_tree(dir_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  /// Entry names of directory d (without "." and "..").
  static std::vector<std::string> list_dir(const std::string& d) {
    std::vector<std::string> out;
    if (DIR* h = ::opendir(d.c_str())) {
      while (dirent* e = ::readdir(h))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
          out.push_back(e->d_name);
      ::closedir(h);
    }
    return out;
  }
  /// Removes d and everything under it (symbolic links are removed, not followed).
  static void remove_tree(const std::string& d) {
    for (const std::string& f : list_dir(d)) {
      const std::string p = d + "/" + f;
      struct stat st;
      if (::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        remove_tree(p);
      else
        ::unlink(p.c_str());
    }
    ::rmdir(d.c_str());
  }

 private:
  std::string dir_;
};

}  // namespace kantor::test
