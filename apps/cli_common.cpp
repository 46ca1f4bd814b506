#include "apps/cli_common.hpp"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
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

// Is s an integer literal ([+-] digits)?
bool is_integer_literal(const std::string& s) {
  std::size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

template <class T>
bool holds(const boost::program_options::value_semantic* v) {
  return dynamic_cast<const boost::program_options::typed_value<T>*>(v) != nullptr;
}

template <class T>
std::string integer_error(const std::string& option, const std::string& value) {
  if (is_integer_literal(value))
    return option + " expects an integer in [" + std::to_string(std::numeric_limits<T>::min()) +
           ", " + std::to_string(std::numeric_limits<T>::max()) + "], got '" + value + "'";
  return option + " expects an integer, got '" + value + "'";
}

// "--max-iterations expects an integer, got '1.5'": the kind of number is the option's type.
std::string numeric_option_error(const boost::program_options::options_description& desc,
                                 const std::string& option, const std::string& value) {
  std::string name = option;
  while (!name.empty() && name[0] == '-') name.erase(0, 1);
  const auto* d = desc.find_nothrow(name, false);
  const boost::program_options::value_semantic* v = d ? d->semantic().get() : nullptr;
  if (holds<int>(v)) return integer_error<int>(option, value);
  if (holds<long>(v)) return integer_error<long>(option, value);
  if (holds<long long>(v)) return integer_error<long long>(option, value);
  if (holds<unsigned>(v)) return integer_error<unsigned>(option, value);
  if (holds<double>(v) || holds<float>(v))
    return option + " expects a number, got '" + value + "'";
  return option + ": invalid value '" + value + "'";
}

}  // namespace

std::string leading_field(const std::string& message) {
  std::size_t end = 0;
  while (end < message.size()) {
    const unsigned char c = static_cast<unsigned char>(message[end]);
    if (std::isalnum(c) || c == '_' || c == '.') {
      ++end;
    } else if (message.compare(end, 2, "::") == 0) {
      end += 2;
    } else {
      break;
    }
  }
  return message.substr(0, end);
}

void throw_invalid_options(const std::string& why, const std::string& what,
                           const FieldOptions& options) {
  const std::string field = leading_field(why);
  for (const auto& fo : options)
    if (fo.first == field) throw InvalidArgument(fo.second + ": " + why);
  throw InvalidArgument(what + ": " + why);
}

Context make_context(const ContextOptions& options) {
  try {
    return Context(options);
  } catch (const InvalidArgument& e) {
    // "ContextOptions::threads must be in [0, 1024] (0 = all cores), got -2"
    if (leading_field(e.what()) == "ContextOptions::threads")
      throw InvalidArgument(std::string("--threads: ") + e.what());
    throw;
  }
}

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
    throw InvalidArgument(numeric_option_error(desc, e.get_option_name(),
                                               option_value(args, e.get_option_name())));
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
  if (!std::isfinite(v)) {
    null_keys_.push_back(key);
    return add_raw(key, "null");
  }
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
JsonObject& JsonObject::set(const std::string& key, const std::string& v) {
  for (auto& f : fields_)
    if (f.first == key) {
      f.second = json_escape(v);
      return *this;
    }
  return add(key, v);
}
std::string JsonObject::str() const {
  std::string out = "{";
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    if (i) out += ", ";
    out += json_escape(fields_[i].first) + ": " + fields_[i].second;
  }
  return out + "}";
}

std::string replace_non_finite(const std::string& text) {
  static const char* const kWords[] = {"-nan", "+nan", "nan", "-inf", "+inf", "inf"};
  auto word_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    bool replaced = false;
    if (i == 0 || !word_char(text[i - 1])) {
      for (const char* w : kWords) {
        const std::size_t n = std::strlen(w);
        if (text.compare(i, n, w) == 0 && (i + n == text.size() || !word_char(text[i + n]))) {
          out += "not computed";
          i += n;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out += text[i++];
  }
  return out;
}

int finish_stdout(const std::string& name, int code) {
  errno = 0;
  std::cout.flush();
  const bool flush_failed = std::fflush(stdout) != 0;
  int err = errno;
  if (!flush_failed && !std::ferror(stdout) && std::cout.good()) return code;
  // The write that failed may lie behind (std::endl): the stream is already incomplete, so one
  // more byte tells why (ENOSPC, EPIPE) for the message.
  if (err == 0 && ::write(STDOUT_FILENO, "\n", 1) < 0) err = errno;
  std::fprintf(stderr, "kantor %s: error: cannot write to standard output: %s\n", name.c_str(),
               err ? std::strerror(err) : "write error");
  return code == kExitOk ? kExitFailure : code;
}

}  // namespace kantor::cli
