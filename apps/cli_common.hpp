// Shared pieces of the kantor CLI: subcommand signature, exit codes, exception-to-exit mapping,
// a minimal JSON object writer.
#pragma once

#include <boost/program_options.hpp>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace kantor::cli {

/// Exit codes: 0 the command ran (a solve that did not converge still exits 0), 1 a runtime
/// failure that is not the caller's fault (CUDA error, out of memory, backend not available),
/// 2 bad input or usage, 130 interrupted.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;
/// Interrupted by the user (Ctrl-C, SIGINT): 128 + SIGINT, as a shell reports it.
constexpr int kExitInterrupted = 130;

/// A subcommand: receives its own arguments (argv after the subcommand name), returns the exit
/// code. Exceptions escaping it are mapped by run_guarded.
using Command = int (*)(const std::vector<std::string>& args);

/// Runs cmd, turning exceptions into one line on stderr ("kantor <name>: error: ...") and an
/// exit code: InvalidArgument, IoError and option-parsing errors -> 2, everything else -> 1.
int run_guarded(const std::string& name, Command cmd, const std::vector<std::string>& args);

/// A flat JSON object, written in insertion order. Non-finite numbers become null.
class JsonObject {
 public:
  JsonObject& add(const std::string& key, double v);
  JsonObject& add(const std::string& key, std::int64_t v);
  JsonObject& add(const std::string& key, int v) { return add(key, std::int64_t(v)); }
  JsonObject& add(const std::string& key, bool v);
  JsonObject& add(const std::string& key, const std::string& v);
  JsonObject& add(const std::string& key, const char* v) { return add(key, std::string(v)); }
  /// Adds an already-serialized JSON value (object, array) verbatim.
  JsonObject& add_raw(const std::string& key, const std::string& json);
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

/// Writes `s` as a JSON string literal (quotes included).
std::string json_escape(const std::string& s);

/// Parses a subcommand's arguments against `desc` (no abbreviated option names, no positional
/// arguments: a stray word throws InvalidArgument naming it). Does not call notify().
boost::program_options::variables_map parse_command_line(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc);

}  // namespace kantor::cli
