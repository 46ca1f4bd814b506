// kantor birkhoff: batched Birkhoff (doubly stochastic) projection of an [B, n, n] logits file.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "kantor/birkhoff.hpp"
#include "kantor/buffer.hpp"
#include "kantor/error.hpp"
#include "kantor/io.hpp"

namespace po = boost::program_options;

namespace kantor::cli {
namespace {

// The shortest decimal that reads back as v (1e+39, not 1.0000000000000001e+39).
std::string shortest(double v) {
  std::ostringstream os;
  for (int digits = 1; digits <= 17; ++digits) {
    os.str("");
    os.precision(digits);
    os << v;
    if (std::strtod(os.str().c_str(), nullptr) == v) break;
  }
  return os.str();
}

}  // namespace

int cmd_birkhoff(const std::vector<std::string>& args) {
  std::string input, output, method = "newton", order = "row", backend = "auto";
  int iterations = 0, threads = 0;
  double tolerance = 0;
  bool json = false;
  po::options_description desc(
      "kantor birkhoff: project every n x n matrix of logits L [B, n, n] (2 <= n <= 16) onto "
      "the doubly stochastic matrices, P = diag(u) exp(L) diag(v)\n\nexit codes: 0 ran, 1 "
      "runtime failure, 2 bad input or usage, 3 numerical failure (a non-finite result: nothing "
      "written)\n\noptions");
  desc.add_options()("help,h", "show this help")(
      "input", po::value(&input), "logits file, .npy (float32/float64) of shape [B, n, n]")(
      "output", po::value(&output),
      "write P here (.npy float32 [B, n, n], or .csv with B*n rows of n)")(
      "method", po::value(&method), "newton (converged) | sinkhorn | deepseek (truncated)")(
      "order", po::value(&order), "sinkhorn sweep order: row | column")(
      "iterations", po::value(&iterations), "sinkhorn sweeps / deepseek repeat (default 20)")(
      "tolerance", po::value(&tolerance), "Err = |P1-1|_1 + |P^T1-1|_1 threshold (default 1e-5)")(
      "backend", po::value(&backend), "cpu | cuda | auto")(
      "threads", po::value(&threads), "CPU threads (0 = all cores)")("json", po::bool_switch(&json),
                                                                     "print the summary as JSON");
  po::variables_map vm = parse_command_line(args, desc);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return kExitOk;
  }
  po::notify(vm);
  if (input.empty()) throw InvalidArgument("--input is required (an [B, n, n] .npy file)");
  if (vm.count("output") && output.empty())
    throw InvalidArgument("--output: empty file name (expected a .npy or .csv path)");

  BirkhoffOptions o;
  o.method = parse_birkhoff_method(method, "--method");
  o.order = parse_sinkhorn_order(order, "--order");
  o.iterations = iterations;
  o.tolerance = tolerance;
  std::string why;
  if (!o.is_valid(&why))
    throw_invalid_options(why, "BirkhoffOptions",
                          {{"iterations", "--iterations"}, {"tolerance", "--tolerance"}});
  // Refuse an unwritable output, or one that is the input file, before any work.
  if (!output.empty()) {
    io::check_writable_array_path(output, "--output");
    if (io::same_file(output, input))
      throw InvalidArgument("--output '" + output + "' is the input file --input '" + input +
                            "' (writing it would replace the input; choose another name)");
  }

  const io::Array a = io::read_array(input);
  if (a.shape.size() != 3)
    throw InvalidArgument("--input '" + input + "' has rank " + std::to_string(a.shape.size()) +
                          ", expected shape [B, n, n]");
  if (a.shape[1] != a.shape[2])
    throw InvalidArgument("--input '" + input + "' has shape [" + std::to_string(a.shape[0]) +
                          ", " + std::to_string(a.shape[1]) + ", " + std::to_string(a.shape[2]) +
                          "]: the matrices are not square");
  // n in 2..16: project_birkhoff's check, below (with the file's name in front).
  const int n = int(std::min<std::int64_t>(a.shape[1], std::numeric_limits<int>::max()));
  const std::int64_t B = a.shape[0];
  if (B == 0)
    throw InvalidArgument("--input '" + input + "' holds no matrices (shape [0, " +
                          std::to_string(a.shape[1]) + ", " + std::to_string(a.shape[2]) +
                          "]; expected B >= 1)");
  std::vector<float> host(a.data.size());
  for (std::size_t k = 0; k < a.data.size(); ++k) {
    const double v = a.data[k];
    host[k] = float(v);
    // -inf is a legal logit (a forbidden entry); NaN, +inf and a finite value beyond the float32
    // range (which would become +-inf and silently zero the matrix or forbid the entry) are not.
    if (std::isfinite(host[k]) || v == -std::numeric_limits<double>::infinity()) continue;
    const std::size_t nn = std::size_t(n) * std::size_t(n);
    const std::string where = "--input '" + input + "': matrix " + std::to_string(k / nn) +
                              ", row " + std::to_string(k % nn / std::size_t(n)) + ", column " +
                              std::to_string(k % std::size_t(n)) + ": ";
    if (std::isnan(v))
      throw InvalidArgument(where +
                            "logit is NaN (expected a number, or -inf to forbid the entry)");
    if (std::isinf(v))
      throw InvalidArgument(where +
                            "logit is +inf (expected a finite number, or -inf to forbid "
                            "the entry)");
    throw InvalidArgument(where + "logit " + shortest(v) + " overflows float32 (expected |L| <= " +
                          shortest(std::numeric_limits<float>::max()) +
                          ", or exactly -inf to forbid the entry)");
  }

  const Context ctx = make_context(ContextOptions{parse_backend(backend, "--backend"), threads});
  Buffer<float> R(ctx, std::int64_t(host.size())), P(ctx, std::int64_t(host.size()));
  copy(ctx, VectorView<const float>{host.data(), std::int64_t(host.size()), MemorySpace::kHost},
       R.view());
  BirkhoffSummary s;
  try {
    s = project_birkhoff(ctx, BatchView<const float>{R.data(), B, n, R.space()},
                         BatchView<float>{P.data(), B, n, P.space()}, o);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("--input '" + input + "': " + e.what());
  }
  // Invalid matrices (NaN/+inf logits, an all -inf row, column or matrix) are bad input: exit 2
  // naming the first one, nothing written.
  s.throw_if_invalid("--input '" + input + "'");
  std::vector<float> out = to_host(ctx, P.cview());
  // Test hook (as in kantor solve): a non-finite result, which valid logits hardly produce.
  if (const char* v = std::getenv("KANTOR_TEST_INJECT"))
    if (std::string(v) == "numerical-failure") {
      s.worst_error = std::numeric_limits<double>::infinity();
      out[0] = std::numeric_limits<float>::quiet_NaN();
    }
  // A non-finite error statistic or output entry is a numerical failure: nothing is written.
  std::string not_computed;
  if (s.computed && !std::isfinite(s.worst_error)) not_computed += "worst_error";
  if (s.computed && !std::isfinite(s.median_error))
    not_computed += std::string(not_computed.empty() ? "" : ", ") + "median_error";
  std::int64_t bad_entries = 0;
  for (const float v : out) bad_entries += std::isfinite(v) ? 0 : 1;
  if (bad_entries)
    not_computed += std::string(not_computed.empty() ? "" : ", ") + std::to_string(bad_entries) +
                    " entries of P";
  const bool failed = !not_computed.empty();
  if (!output.empty() && !failed) {
    std::vector<double> d(out.begin(), out.end());
    // .csv holds 2-D arrays: the B matrices stacked as B*n rows of n columns. The format is
    // picked by the same (case-insensitive) io::extension as in the check and the writer.
    const bool csv = io::extension(output) == ".csv";
    if (csv)
      io::write_array(output, {B * n, std::int64_t(n)}, d.data(), true);
    else
      io::write_array(output, {B, std::int64_t(n), std::int64_t(n)}, d.data(), true);
  }
  if (json) {
    JsonObject j;
    j.add("command", "birkhoff")
        .add("input", input)
        .add("batch", B)
        .add("n", n)
        .add("method", to_string(o.method))
        .add("order", to_string(o.order))
        .add("iterations", o.method == BirkhoffMethod::kNewton ? 0 : (iterations ? iterations : 20))
        .add("backend", to_string(s.backend))
        .add("backend_note", ctx.backend_note())
        .add("kernel", s.kernel)
        .add("tolerance", s.tolerance)
        .add("worst_error", s.worst_error)
        .add("median_error", s.median_error)
        .add("median_bin_decades", s.median_bin_decades)
        .add("not_converged", s.not_converged)
        .add("invalid_inputs", s.invalid_inputs)
        .add("seconds", s.seconds)
        .add("message", failed ? "numerical failure: not computed (non-finite): " + not_computed
                               : std::string("ok"));
    if (!output.empty() && !failed) j.add("output", output);
    std::cout << j.str() << "\n";
  } else {
    std::cout << replace_non_finite(s.brief_report()) << "\n";
    if (!output.empty() && !failed) std::cout << "wrote " << output << "\n";
  }
  if (failed) {
    std::fprintf(stderr,
                 "kantor birkhoff: error: numerical failure: %s not finite; no output written\n",
                 not_computed.c_str());
    return kExitNumericalFailure;
  }
  return kExitOk;
}

}  // namespace kantor::cli
