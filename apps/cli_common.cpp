#include "apps/cli_common.hpp"

#include <boost/program_options.hpp>
#include <cstdio>
#include <cstdlib>
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

namespace {

// The value given to `option` ("--name") in args: "--name=value" or "--name value".
std::string option_value(const std::vector<std::string>& args, const std::string& option) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind(option + "=", 0) == 0) return args[i].substr(option.size() + 1);
    if (args[i] == option && i + 1 < args.size()) return args[i + 1];
  }
  return "";
}

}  // namespace

boost::program_options::variables_map parse_command_line(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc) {
  namespace po = boost::program_options;
  // Stray words are collected under a hidden name so that the error can quote them.
  std::vector<std::string> stray;
  po::options_description all;
  all.add(desc).add_options()("kantor-stray-argument", po::value(&stray));
  po::positional_options_description positional;
  positional.add("kantor-stray-argument", -1);
  po::variables_map vm;
  try {
    po::store(
        po::command_line_parser(args)
            .options(all)
            .positional(positional)
            .style(po::command_line_style::unix_style ^ po::command_line_style::allow_guessing)
            .run(),
        vm);
  } catch (const po::invalid_option_value& e) {
    // Only numeric options can hold an invalid value: say which kind of number was expected.
    const std::string value = option_value(args, e.get_option_name());
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    const bool is_number = !value.empty() && end == value.c_str() + value.size();
    throw InvalidArgument(e.get_option_name() + ": invalid value '" + value + "' (expected " +
                          (is_number ? "an integer" : "a number") + ")");
  }
  if (vm.count("kantor-stray-argument")) {
    const auto& words = vm["kantor-stray-argument"].as<std::vector<std::string>>();
    throw InvalidArgument("unexpected argument '" + words.front() +
                          "' (options are written --name value; see --help)");
  }
  return vm;
}

std::string json_escape(const std::string& s) {
  std::ostringstream os;
  os << '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        os << "\\\"";
        break;
      case '\\':
        os << "\\\\";
        break;
      case '\n':
        os << "\\n";
        break;
      case '\t':
        os << "\\t";
        break;
      case '\r':
        os << "\\r";
        break;
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
