// Shared pieces of the CLI suites (test_cli.cpp, test_cli_newton.cpp): a small JSON reader, the
// runner of the built kantor binary (KANTOR_CLI) and the fixture base that gives each test a
// temporary directory with an empty out/ in it, writes input files there and runs the binary.
#pragma once

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kantor/io.hpp"
#include "support/temp_dir.hpp"

#ifndef KANTOR_CLI
#error "KANTOR_CLI (path of the built kantor binary) must be defined by the build"
#endif

namespace kantor::test::cli {

// ---- a small JSON reader (objects, arrays, strings, numbers, literals) -------------------------

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
  bool has(const std::string& k) const { return fields.count(k) > 0; }
  const Json& operator[](const std::string& k) const {
    static const Json missing;
    auto it = fields.find(k);
    return it == fields.end() ? missing : it->second;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}
  // Parses one value followed only by whitespace; false on any syntax error.
  bool parse(Json* out) {
    if (!value(out)) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool lit(const char* w) {
    const std::size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) != 0) return false;
    i_ += n;
    return true;
  }
  bool string(std::string* out) {
    if (s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c == '\\') {
        if (++i_ >= s_.size()) return false;
        const char e = s_[i_];
        if (e == 'u') {
          if (i_ + 4 >= s_.size()) return false;
          *out += char(std::stoi(s_.substr(i_ + 1, 4), nullptr, 16));
          i_ += 4;
        } else {
          *out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        }
      } else {
        *out += c;
      }
    }
    return false;
  }
  bool value(Json* v) {
    ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') {
      v->kind = Json::kObject;
      ++i_;
      ws();
      if (s_[i_] == '}') return ++i_, true;
      for (;;) {
        ws();
        std::string key;
        if (!string(&key)) return false;
        ws();
        if (s_[i_++] != ':') return false;
        if (v->fields.count(key)) return false;  // duplicate key
        if (!value(&v->fields[key])) return false;
        ws();
        if (s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (s_[i_] == '}') return ++i_, true;
        return false;
      }
    }
    if (c == '[') {
      v->kind = Json::kArray;
      ++i_;
      ws();
      if (s_[i_] == ']') return ++i_, true;
      for (;;) {
        v->items.emplace_back();
        if (!value(&v->items.back())) return false;
        ws();
        if (s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (s_[i_] == ']') return ++i_, true;
        return false;
      }
    }
    if (c == '"') {
      v->kind = Json::kString;
      return string(&v->str);
    }
    if (lit("true")) return v->kind = Json::kBool, v->b = true, true;
    if (lit("false")) return v->kind = Json::kBool, v->b = false, true;
    if (lit("null")) return v->kind = Json::kNull, true;
    char* end = nullptr;
    v->num = std::strtod(s_.c_str() + i_, &end);
    if (end == s_.c_str() + i_) return false;
    v->kind = Json::kNumber;
    i_ = std::size_t(end - s_.c_str());
    return std::isfinite(v->num);
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

// ---- test data ------------------------------------------------------------------------------

/// n x d points, row-major.
struct Cloud {
  std::int64_t n = 0, d = 0;
  std::vector<double> p;  // n x d
  double at(std::int64_t i, std::int64_t k) const { return p[std::size_t(i * d + k)]; }
};

/// A refused command line and what its one stderr line must name.
struct BadCase {
  std::string args;
  std::vector<std::string> expected;  // parts of the stderr line
};

// ---- running the binary -------------------------------------------------------------------

struct Result {
  int code = -1;
  std::string out, err;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Runs `kantor <args>` (args already shell-quoted where needed) with stdin from /dev/null,
/// capturing stdout/stderr through files in `scratch_dir` (removed afterwards). `prefix` goes
/// before the command (environment assignments, "timeout 20 ").
inline Result run_kantor(const std::string& scratch_dir, const std::string& args,
                         const std::string& prefix = "") {
  const std::string out = scratch_dir + "/stdout.txt", err = scratch_dir + "/stderr.txt";
  const std::string cmd = prefix + "'" + std::string(KANTOR_CLI) + "' " + args + " >'" + out +
                          "' 2>'" + err + "' </dev/null";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  ::unlink(out.c_str());
  ::unlink(err.c_str());
  return r;
}

/// Each test gets a fresh temporary directory (dir_, named <temp_prefix>XXXXXX) holding an empty
/// out_dir_, removed with everything in it after the test.
class CliFixture : public ::testing::Test {
 protected:
  explicit CliFixture(std::string temp_prefix) : temp_prefix_(std::move(temp_prefix)) {}

  void SetUp() override {
    tmp_ = std::make_unique<TempDir>(temp_prefix_);
    dir_ = tmp_->dir();
    out_dir_ = dir_ + "/out";
    ASSERT_EQ(::mkdir(out_dir_.c_str(), 0755), 0);
  }
  void TearDown() override { tmp_.reset(); }

  static std::vector<std::string> list_dir(const std::string& d) { return TempDir::list_dir(d); }
  std::string path(const std::string& name) const { return tmp_->path(name); }

  /// Runs `kantor <args>` (args already shell-quoted where needed), capturing stdout/stderr.
  /// `prefix` goes before the command (environment assignments, "timeout 20 ").
  Result run(const std::string& args, const std::string& prefix = "") const {
    return run_kantor(dir_, args, prefix);
  }

  /// Runs with --json, expects exit 0 and nothing on stderr, and parses stdout (failing the test
  /// when it is not one JSON object).
  Json run_json(const std::string& args, Result* raw = nullptr) const {
    Result r = run(args + " --json");
    EXPECT_EQ(r.code, 0) << "kantor " << args << "\nstderr: " << r.err;
    EXPECT_EQ(r.err, "") << "a successful run (stderr not a terminal) prints nothing there";
    Json j;
    EXPECT_TRUE(JsonParser(r.out).parse(&j)) << "not JSON: " << r.out;
    EXPECT_EQ(j.kind, Json::kObject);
    if (raw) *raw = r;
    return j;
  }

  std::string save(const std::string& name, const Cloud& c) const {
    kantor::io::write_array(path(name), {c.n, c.d}, c.p.data());
    return path(name);
  }
  std::string save(const std::string& name, const std::vector<double>& v) const {
    kantor::io::write_array(path(name), {std::int64_t(v.size())}, v.data());
    return path(name);
  }
  std::string save_text(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }

  std::unique_ptr<TempDir> tmp_;
  std::string dir_, out_dir_;

 private:
  std::string temp_prefix_;
};

}  // namespace kantor::test::cli
