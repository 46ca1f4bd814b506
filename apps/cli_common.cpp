#include "apps/cli_common.hpp"

#include <boost/program_options/errors.hpp>
#include <cstdio>
#include <exception>
#include <iomanip>
#include <new>

#include "kantor/error.hpp"

namespace kantor::cli {

int run_guarded(const std::string& name, Command cmd, const std::vector<std::string>& args) {
  auto fail = [&](const char* what, int code) {
    std::fprintf(stderr, "kantor %s: error: %s\n", name.c_str(), what);
    return code;
  };
  try {
    return cmd(args);
  } catch (const InvalidArgument& e) {
    return fail(e.what(), kExitBadInput);
  } catch (const IoError& e) {
    return fail(e.what(), kExitBadInput);
  } catch (const boost::program_options::error& e) {
    return fail(e.what(), kExitBadInput);
  } catch (const OutOfMemory& e) {
    return fail(e.what(), kExitFailure);
  } catch (const std::bad_alloc&) {
    return fail("out of host memory (the problem is too large for this machine)", kExitFailure);
  } catch (const std::exception& e) {
    return fail(e.what(), kExitFailure);
  } catch (...) {
    return fail("unknown error", kExitFailure);
  }
}

std::string json_escape(const std::string& s) {
  std::ostringstream os;
  os << '"';
  for (const char c : s) {
    switch (c) {
      case '"': os << "\\\""; break;
      case '\\': os << "\\\\"; break;
      case '\n': os << "\\n"; break;
      case '\t': os << "\\t"; break;
      case '\r': os << "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          os << "\\u" << std::hex << std::setw(4) << std::setfill('0') << int(c) << std::dec;
        else
          os << c;
    }
  }
  os << '"';
  return os.str();
}

JsonObject& JsonObject::add(const std::string& key, double v) {
  if (!std::isfinite(v)) return add_raw(key, "null");
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return add_raw(key, os.str());
}
JsonObject& JsonObject::add(const std::string& key, std::int64_t v) {
  return add_raw(key, std::to_string(v));
}
JsonObject& JsonObject::add(const std::string& key, bool v) {
  return add_raw(key, v ? "true" : "false");
}
JsonObject& JsonObject::add(const std::string& key, const std::string& v) {
  return add_raw(key, json_escape(v));
}
JsonObject& JsonObject::add_raw(const std::string& key, const std::string& json) {
  fields_.emplace_back(key, json);
  return *this;
}
std::string JsonObject::str() const {
  std::string out = "{";
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    if (i) out += ", ";
    out += json_escape(fields_[i].first) + ": " + fields_[i].second;
  }
  return out + "}";
}

}  // namespace kantor::cli
