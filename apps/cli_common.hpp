// Shared pieces of the kantor CLI: subcommand signature, exit codes, exception-to-exit mapping,
// a minimal JSON object writer.
#pragma once

#include <boost/program_options.hpp>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kantor/context.hpp"

namespace kantor::cli {

/// Exit codes: 0 the command ran (a solve that did not converge still exits 0), 1 a runtime
/// failure that is not the caller's fault (CUDA error, out of memory, backend not available, a
/// failed write to standard output), 2 bad input or usage, 3 numerical failure (NaN / Inf in the
/// solve: nothing written), 130 interrupted.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;
/// The solve ran but ended in a numerical failure (TerminationType::kNumericalFailure, or a
/// non-finite Birkhoff result): the report / JSON is printed (non-finite values shown as
/// "not computed" / null), no output file is written.
constexpr int kExitNumericalFailure = 3;
/// Interrupted by the user (Ctrl-C, SIGINT): 128 + SIGINT, as a shell reports it.
constexpr int kExitInterrupted = 130;

/// A subcommand: receives its own arguments (argv after the subcommand name), returns the exit
/// code. Exceptions escaping it are mapped by run_guarded.
using Command = int (*)(const std::vector<std::string>& args);

/// Runs cmd, turning exceptions into one line on stderr ("kantor <name>: error: ...") and an
/// exit code: InvalidArgument, IoError and option-parsing errors -> 2, everything else -> 1.
int run_guarded(const std::string& name, Command cmd, const std::vector<std::string>& args);

/// A flat JSON object, written in insertion order. Non-finite numbers become null (and their
/// keys are listed by null_keys()).
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
  /// Replaces the value of an existing key (or adds it) with a string.
  JsonObject& set(const std::string& key, const std::string& v);
  /// Keys whose double value was not finite (written as null), in insertion order.
  const std::vector<std::string>& null_keys() const { return null_keys_; }
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
  std::vector<std::string> null_keys_;
};

/// `text` with every non-finite number as an ostream prints it ("nan", "-nan", "inf", "-inf")
/// replaced by "not computed": reports never show NaN or Inf.
std::string replace_non_finite(const std::string& text);

/// Flushes standard output and checks it: on a failed write (full disk, closed pipe: SIGPIPE is
/// ignored by main) prints "kantor <name>: error: cannot write to standard output: ..." on
/// stderr and returns kExitFailure when `code` was kExitOk; otherwise returns `code`.
int finish_stdout(const std::string& name, int code);

/// Writes `s` as a JSON string literal (quotes included).
std::string json_escape(const std::string& s);

// ---- the library's checks, with the CLI's names ------------------------------------------------
// The library validates its inputs itself, each message naming the field ("problem.x: ...",
// "max_iterations must be >= 1, got 0"); the CLI does not repeat those checks but puts the file
// or option the field came from in front of the library's message.

/// (library field, CLI option) pairs, e.g. {"max_iterations", "--max-iterations"}.
using FieldOptions = std::vector<std::pair<std::string, std::string>>;

/// The field a library message starts with: its leading identifier ("max_iterations must be >= 1"
/// -> "max_iterations", "ContextOptions::threads must ..." -> "ContextOptions::threads",
/// "problem.cost.scale must ..." -> "problem.cost.scale").
std::string leading_field(const std::string& message);

/// Throws InvalidArgument for a failed Options::is_valid: "<option>: <why>" where <option> is the
/// CLI option that sets the field `why` names (from `options`), or "<what>: <why>" (`what`: the
/// struct, e.g. "SinkhornOptions") when no option sets it.
[[noreturn]] void throw_invalid_options(const std::string& why, const std::string& what,
                                        const FieldOptions& options);

/// A Context for the CLI: ContextOptions' own errors name the option ("--threads: ...").
Context make_context(const ContextOptions& options);

/// Parses a subcommand's arguments against `desc` (no abbreviated option names, no positional
/// arguments: a stray word throws InvalidArgument naming it). Does not call notify().
boost::program_options::variables_map parse_command_line(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc);

}  // namespace kantor::cli
