// kantor solve: entropic OT between two point clouds read from .npy / .csv files (or the built-in
// --demo problem), printed as the Summary's full report or as one JSON object.
//
//   kantor solve --source x.npy --target y.npy --epsilon 0.05 --json
//   kantor solve --demo --schedule symmetric --debias
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "kantor/buffer.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"
#include "kantor/io.hpp"
#include "kantor/sinkhorn.hpp"

namespace kantor::cli {
namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

constexpr double kDemoEpsilon = 0.05;
constexpr std::int64_t kDemoN = 2000, kDemoM = 3000, kDemoD = 3;
constexpr double kDefaultScaling = 0.5;
constexpr int kMaxThreads = 1024;

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// ---- the problem in float64, as read or generated ---------------------------------------------

struct Input {
  std::int64_t n = 0, m = 0, d = 0;  // d: of the source (dy: of the target, d once checked)
  std::int64_t dy = 0;
  std::vector<double> x, y;  // row-major n x d, m x d
  std::vector<double> a, b;  // empty = uniform (set by finish_weights)
  // How messages name each array, e.g. "--source 'x.npy'" or "--demo source".
  std::string x_name, y_name, a_name, b_name;
};

// SplitMix64 (Steele, Lea, Flood 2014) + Box-Muller: the demo must not depend on the standard
// library's distributions, whose output is implementation-defined.
class DemoRandom {
 public:
  explicit DemoRandom(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1): 53 random bits, never 0 (log(0) in Box-Muller).
  double uniform() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double t = 6.283185307179586 * uniform();
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// n points of a mixture of equally likely isotropic Gaussians (centers: k x d row-major).
std::vector<double> gaussian_mixture(DemoRandom& rng, std::int64_t n, std::int64_t d,
                                     const std::vector<double>& centers, double sigma) {
  const std::int64_t k = std::int64_t(centers.size()) / d;
  std::vector<double> out(std::size_t(n * d));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t c = std::int64_t(rng.next() % std::uint64_t(k));
    for (std::int64_t j = 0; j < d; ++j)
      out[std::size_t(i * d + j)] = centers[std::size_t(c * d + j)] + sigma * rng.normal();
  }
  return out;
}

/// The --demo problem: 2000 points from 3 Gaussians against 3000 points from 4 Gaussians in R^3.
Input demo_input() {
  Input in;
  in.n = kDemoN;
  in.m = kDemoM;
  in.d = in.dy = kDemoD;
  DemoRandom rng(20261130);
  in.x = gaussian_mixture(rng, in.n, in.d, {0, 0, 0, 1.5, 0.5, 0, 0.5, 1.5, 1.0}, 0.30);
  in.y = gaussian_mixture(rng, in.m, in.d, {0.5, 0.5, 0.5, 2, 1, 0.5, 1, 2, 1.5, 2, 2, 0}, 0.25);
  in.x_name = "--demo source";
  in.y_name = "--demo target";
  return in;
}

void check_cloud(const std::vector<double>& v, std::int64_t rows, std::int64_t cols,
                 const std::string& name) {
  if (rows == 0)
    throw InvalidArgument(name + ": empty point cloud (0 points; expected at least 1)");
  if (cols == 0)
    throw InvalidArgument(name + ": points have 0 coordinates (expected shape (n, d), d >= 1)");
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t k = 0; k < cols; ++k)
      if (!std::isfinite(v[std::size_t(i * cols + k)]))
        throw InvalidArgument(name + ": non-finite coordinate " +
                              fmt(v[std::size_t(i * cols + k)]) + " at point " + std::to_string(i) +
                              ", coordinate " + std::to_string(k) +
                              " (0-based; expected finite numbers)");
}

double check_weights(const std::vector<double>& w, std::int64_t points, const std::string& name,
                     const std::string& cloud_name) {
  if (std::int64_t(w.size()) != points)
    throw InvalidArgument(name + " has " + std::to_string(w.size()) + " weights but " + cloud_name +
                          " has " + std::to_string(points) +
                          " points (expected one weight per point)");
  double total = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i]) || w[i] < 0)
      throw InvalidArgument(name + ": weight " + std::to_string(i) + " is " + fmt(w[i]) +
                            " (0-based; expected finite and >= 0)");
    total += w[i];
  }
  if (!(total > 0))
    throw InvalidArgument(name + ": all weights are zero (expected a positive total mass)");
  if (!std::isfinite(total))
    throw InvalidArgument(name + ": the weights sum to " + fmt(total) +
                          ", beyond the float64 range (expected a finite total mass; rescale "
                          "the weights)");
  return total;
}

/// Checks shapes, values and masses, naming the file of each problem; a missing weight file
/// becomes uniform weights with the total mass of the other one (1 when both are missing).
void check_and_finish(Input* in) {
  check_cloud(in->x, in->n, in->d, in->x_name);
  check_cloud(in->y, in->m, in->dy, in->y_name);
  if (in->dy != in->d)
    throw InvalidArgument("dimension mismatch: " + in->x_name +
                          " has d = " + std::to_string(in->d) + " coordinates per point but " +
                          in->y_name + " has d = " + std::to_string(in->dy));
  const bool has_a = !in->a_name.empty(), has_b = !in->b_name.empty();
  const double ma = has_a ? check_weights(in->a, in->n, in->a_name, in->x_name) : 0;
  const double mb = has_b ? check_weights(in->b, in->m, in->b_name, in->y_name) : 0;
  if (has_a && has_b && std::abs(ma - mb) > 1e-6 * std::max(ma, mb))
    throw InvalidArgument("unequal total mass: " + in->a_name + " sums to " + fmt(ma) + " but " +
                          in->b_name + " sums to " + fmt(mb) +
                          " (balanced OT needs equal totals to 1e-6 relative)");
  if (has_a != has_b) {  // uniform weights on the other side, with the same total
    if (has_a) {
      in->b.assign(std::size_t(in->m), ma / double(in->m));
      in->b_name = "uniform target weights (total mass of " + in->a_name + ")";
    }
    if (has_b) {
      in->a.assign(std::size_t(in->n), mb / double(in->n));
      in->a_name = "uniform source weights (total mass of " + in->b_name + ")";
    }
  }
}

Input load_input(const std::string& source, const std::string& target,
                 const std::string& source_weights, const std::string& target_weights) {
  Input in;
  in.x_name = "--source '" + source + "'";
  in.y_name = "--target '" + target + "'";
  io::Array x = io::read_matrix(source, "--source");
  io::Array y = io::read_matrix(target, "--target");
  in.n = x.shape[0];
  in.d = x.shape[1];
  in.m = y.shape[0];
  in.dy = y.shape[1];
  in.x = std::move(x.data);
  in.y = std::move(y.data);
  if (!source_weights.empty()) {
    in.a = io::read_vector(source_weights, "--source-weights").data;
    in.a_name = "--source-weights '" + source_weights + "'";
  }
  if (!target_weights.empty()) {
    in.b = io::read_vector(target_weights, "--target-weights").data;
    in.b_name = "--target-weights '" + target_weights + "'";
  }
  return in;
}

// ---- settings and outputs -----------------------------------------------------------------

struct Settings {
  SinkhornOptions options;
  double epsilon = kDemoEpsilon;
  double cost_scale = 1.0;
  bool debias = false, json = false, quiet = false, demo = false;
  std::string potentials_prefix, map_path;
};

struct PotentialPaths {
  std::string f, g;
};

/// PREFIX -> PREFIX_f.npy, PREFIX_g.npy; a PREFIX ending in .npy or .csv picks that format
/// (pot.csv -> pot_f.csv, pot_g.csv).
PotentialPaths potential_paths(const std::string& prefix) {
  const std::string ext = io::extension(prefix);
  if (ext == ".npy" || ext == ".csv") {
    const std::string stem = prefix.substr(0, prefix.size() - ext.size());
    return {stem + "_f" + ext, stem + "_g" + ext};
  }
  return {prefix + "_f.npy", prefix + "_g.npy"};
}

struct OutputFile {
  std::string option;  // "--output-map", for messages
  std::string path;
  std::vector<std::int64_t> shape;
  std::vector<double> data;
  bool float32 = false;
};

/// Writes every file to its temporary name (io::temporary_path) first, and renames them into
/// place only once all were written: a failed write removes the temporaries and leaves every
/// existing file under the output names untouched. (A rename failing midway, after the up-front
/// checks, leaves the outputs renamed before it complete and in place.) Any exception, and a
/// fatal signal (main's handler: io::remove_pending_temporaries), removes the temporaries.
void write_outputs(const std::vector<OutputFile>& files) {
  struct Staged {
    std::vector<std::string> temps;
    std::size_t committed = 0;
    ~Staged() {
      for (std::size_t i = committed; i < temps.size(); ++i) io::discard_staged(temps[i]);
    }
  } staged;
  for (const OutputFile& f : files) {
    try {
      staged.temps.push_back(io::stage_array(f.path, f.shape, f.data.data(), f.float32));
    } catch (const IoError& e) {
      throw IoError(f.option + ": " + e.what());
    }
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    try {
      io::commit_staged(staged.temps[i], files[i].path);
    } catch (const IoError& e) {
      staged.committed = i + 1;  // commit_staged removed its own temporary
      throw IoError(files[i].option + ": " + e.what());
    }
    staged.committed = i + 1;
  }
}

/// Every output file, checked before any work: writable (io::check_writable_array_path), no two
/// outputs naming the same file, no output naming an input file.
void check_outputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                   const std::vector<std::pair<std::string, std::string>>& inputs) {
  for (const auto& o : outputs) io::check_writable_array_path(o.second, o.first);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t k = 0; k < i; ++k)
      if (io::same_file(outputs[i].second, outputs[k].second))
        throw InvalidArgument(outputs[i].first + " '" + outputs[i].second +
                              "' is the same file as " + outputs[k].first + " '" +
                              outputs[k].second + "' (expected a different file for each output)");
    for (const auto& in : inputs)
      if (io::same_file(outputs[i].second, in.second))
        throw InvalidArgument(outputs[i].first + " '" + outputs[i].second +
                              "' is the input file " + in.first + " '" + in.second +
                              "' (writing it would replace the input; choose another name)");
  }
}

template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

/// Converts float64 data minus `shift` (per column; empty: none) to T; a finite value that
/// overflows float32 is a caller error, reported with its value as read.
template <class T>
std::vector<T> convert(const std::vector<double>& v, const std::string& name, const char* what,
                       std::int64_t cols, Precision precision,
                       const std::vector<double>& shift = {}) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    out[i] = T(shift.empty() ? v[i] : v[i] - shift[i % std::size_t(cols)]);
    if (!std::isfinite(double(out[i])))
      throw InvalidArgument(
          name + ": " + what + " " + fmt(v[i]) + " at index " +
          (cols > 1 ? std::to_string(i / std::size_t(cols)) + ", " +
                          std::to_string(i % std::size_t(cols))
                    : std::to_string(i)) +
          (std::is_same<T, float>::value
               ? " overflows float32 (precision " + to_string(precision) + "; use --precision fp64)"
               : std::string(" is not a finite float64 (precision ") + to_string(precision) + ")"));
  }
  return out;
}

/// The joint bounding box of x and y in float64: its midpoint per coordinate, its widest side.
struct Box {
  std::vector<double> mid;
  double width = 0;
};

Box bounding_box(const Input& in) {
  Box box;
  box.mid.resize(std::size_t(in.d));
  for (std::int64_t k = 0; k < in.d; ++k) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::int64_t i = 0; i < in.n; ++i) {
      lo = std::min(lo, in.x[std::size_t(i * in.d + k)]);
      hi = std::max(hi, in.x[std::size_t(i * in.d + k)]);
    }
    for (std::int64_t j = 0; j < in.m; ++j) {
      lo = std::min(lo, in.y[std::size_t(j * in.d + k)]);
      hi = std::max(hi, in.y[std::size_t(j * in.d + k)]);
    }
    box.mid[std::size_t(k)] = lo / 2 + hi / 2;  // no overflow near +-DBL_MAX
    box.width = std::max(box.width, hi - lo);
  }
  return box;
}

/// A float32 solve needs the total masses finite in float32.
void check_float_mass(const std::vector<double>& w, const std::string& name, Precision precision) {
  double total = 0;
  for (const double v : w) total += v;
  if (!(total <= double(std::numeric_limits<float>::max())))
    throw InvalidArgument(name + ": the weights sum to " + fmt(total) +
                          ", beyond the float32 range (precision " + to_string(precision) +
                          "; use --precision fp64 or rescale the weights)");
}

// ---- progress on a terminal ---------------------------------------------------------------

// Ctrl-C during a solve: the context's cancellation flag stops it between row blocks of the
// running pass (CPU) or after the current iteration (CUDA), no output is written, exit 130; the
// handler restores the default action, so a second Ctrl-C ends the process.
volatile std::sig_atomic_t g_interrupted = 0;
std::atomic<bool> g_cancel{false};  // ContextOptions::cancel of the solve's context
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
extern "C" void on_interrupt(int) {
  g_interrupted = 1;
  g_cancel.store(true);
  std::signal(SIGINT, SIG_DFL);
}

/// Installs on_interrupt for its lifetime, unless SIGINT is ignored (a background job of a
/// non-interactive shell, nohup): then it stays ignored.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted = 0;
    g_cancel.store(false);
    struct sigaction current {};
    installed_ = ::sigaction(SIGINT, nullptr, &current) == 0 && current.sa_handler != SIG_IGN;
    if (!installed_) return;
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    installed_ = ::sigaction(SIGINT, &action, &previous_) == 0;
  }
  ~InterruptGuard() {
    if (installed_) ::sigaction(SIGINT, &previous_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  bool installed_ = false;
  struct sigaction previous_ {};
};

/// One overwritten stderr line (iteration, eps, marginal error) for solves running longer than a
/// second, refreshed at most 5 times per second.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled), start_(Clock::now()) {}
  IterationCallback callback() {
    return [this](const IterationRecord& r) {
      if (g_interrupted) return CallbackResult::kAbort;
      const double t = std::chrono::duration<double>(Clock::now() - start_).count();
      if (enabled_ && t >= 1.0 && t - last_ >= 0.2) {
        std::fprintf(stderr, "\r\033[K  solving: iteration %lld, eps %.4g, marginal error %.3e",
                     static_cast<long long>(r.iteration), r.epsilon, r.marginal_error);
        std::fflush(stderr);
        last_ = t;
        shown_ = true;
      }
      return CallbackResult::kContinue;
    };
  }
  void finish() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }
  ~Progress() { finish(); }

 private:
  bool enabled_;
  Clock::time_point start_;
  double last_ = 0;
  bool shown_ = false;
};

// ---- the solve ----------------------------------------------------------------------------

/// The nested summary of a debiased part; the keys written as null are appended to *nulls as
/// "<prefix>.<key>".
std::string summary_json(const SinkhornSummary& s, const std::string& prefix,
                         std::vector<std::string>* nulls) {
  JsonObject o;
  o.add("converged", s.converged())
      .add("termination", to_string(s.termination))
      .add("iterations", s.iterations)
      .add("epsilon", s.epsilon_reached)
      .add("marginal_error", s.marginal_error)
      .add("residual", s.residual)
      .add("dual_cost", s.dual_cost)
      .add("primal_cost", s.primal_cost);
  for (const std::string& k : o.null_keys()) nulls->push_back(prefix + "." + k);
  return o.str();
}

/// Test hook: with KANTOR_TEST_INJECT=numerical-failure in the environment, a solve's Summary is
/// turned into a numerical failure (NaN / Inf in its numbers), so that the CLI tests can check
/// what a failure prints and writes; the validation of the inputs makes a real one hard to
/// provoke on purpose.
void inject_test_failure(SinkhornSummary* s, DivergenceSummary* div) {
  const char* v = std::getenv("KANTOR_TEST_INJECT");
  if (v == nullptr || std::string(v) != "numerical-failure") return;
  auto poison = [](SinkhornSummary* x) {
    x->termination = TerminationType::kNumericalFailure;
    x->message = "marginal error is not finite at iteration " + std::to_string(x->iterations) +
                 " (injected by KANTOR_TEST_INJECT)";
    x->marginal_error = std::numeric_limits<double>::infinity();
    x->primal_cost = -std::numeric_limits<double>::quiet_NaN();
    x->regularized_cost = std::numeric_limits<double>::quiet_NaN();
    x->dual_gap = std::numeric_limits<double>::quiet_NaN();
    x->plan_mass = std::numeric_limits<double>::infinity();
  };
  poison(s);
  if (div) {
    poison(&div->xy);
    poison(&div->xx);
  }
}

/// True when the solve (any of the three of a debiased one) ended in a numerical failure.
bool numerical_failure(const SinkhornSummary& s, const DivergenceSummary& div, bool debias) {
  auto failed = [](const SinkhornSummary& x) {
    return x.termination == TerminationType::kNumericalFailure;
  };
  return failed(s) || (debias && (failed(div.xx) || failed(div.yy)));
}

/// The message of a failed (or partly non-finite) solve: what could not be computed.
std::string not_computed_message(const std::string& message,
                                 const std::vector<std::string>& keys) {
  if (keys.empty()) return message;
  std::string out = message + "; not computed (null): ";
  for (std::size_t i = 0; i < keys.size(); ++i) out += (i ? ", " : "") + keys[i];
  return out;
}

/// The largest cost, c * D^2 (D: diagonal of the joint bounding box), must be finite in the
/// arithmetic: otherwise every cost and the first eps of the annealing schedule overflow and the
/// solve can only end in a numerical failure.
void check_cost_range(const Input& in, double cost_scale, double max_value, Precision precision) {
  std::vector<double> range(std::size_t(in.d));
  double widest = 0;
  for (std::int64_t k = 0; k < in.d; ++k) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::int64_t i = 0; i < in.n; ++i) {
      lo = std::min(lo, in.x[std::size_t(i * in.d + k)]);
      hi = std::max(hi, in.x[std::size_t(i * in.d + k)]);
    }
    for (std::int64_t j = 0; j < in.m; ++j) {
      lo = std::min(lo, in.y[std::size_t(j * in.d + k)]);
      hi = std::max(hi, in.y[std::size_t(j * in.d + k)]);
    }
    range[std::size_t(k)] = hi - lo;  // may be inf for finite lo, hi near +-DBL_MAX
    widest = std::max(widest, range[std::size_t(k)]);
  }
  // D = widest * sqrt(sum (range_k / widest)^2): no overflow before the final product.
  double sum = 0;
  for (const double r : range) sum += widest > 0 ? (r / widest) * (r / widest) : 0;
  const double diagonal = widest * std::sqrt(sum);
  const double largest = cost_scale * diagonal * diagonal;
  if (!(largest <= max_value))
    throw InvalidArgument(in.x_name + " and " + in.y_name +
                          ": the points span a box of diagonal D = " + fmt(diagonal) +
                          ", so costs up to c D^2 = " + fmt(largest) + " exceed the " +
                          (precision == Precision::kFp64 ? "float64" : "float32") +
                          " range (precision " + to_string(precision) +
                          "); rescale the coordinates");
}

template <class T>
int run_solve(const Context& ctx, const Settings& st, const Input& in, Precision precision) {
  constexpr bool is_float = std::is_same<T, float>::value;
  // In float32 the points are first centred in float64 on the midpoint of their joint bounding
  // box: far from the origin (1e8 + N(0, 1)) the float conversion would round away the spread.
  // The cost is translation invariant, so the potentials are unchanged; the map is shifted back.
  // Centred, a coordinate overflows float32 only where the costs do: that check comes first.
  check_cost_range(in, st.cost_scale, std::numeric_limits<T>::max(), precision);
  const Box box = is_float ? bounding_box(in) : Box{};
  const std::vector<double>& shift = box.mid;
  const std::vector<T> x = convert<T>(in.x, in.x_name, "coordinate", in.d, precision, shift);
  const std::vector<T> y = convert<T>(in.y, in.y_name, "coordinate", in.d, precision, shift);
  const std::vector<T> a = convert<T>(in.a, in.a_name, "weight", 1, precision);
  const std::vector<T> b = convert<T>(in.b, in.b_name, "weight", 1, precision);
  if (is_float) {
    check_float_mass(in.a, in.a_name, precision);
    check_float_mass(in.b, in.b_name, precision);
  }
  Problem<T> p;
  p.x = host_matrix(x.data(), in.n, in.d);
  p.y = host_matrix(y.data(), in.m, in.d);
  if (!a.empty()) p.a = host_vector(a.data(), in.n);
  if (!b.empty()) p.b = host_vector(b.data(), in.m);
  p.epsilon = st.epsilon;
  p.cost_scale = st.cost_scale;
  // The certificate is about the file's float64 coordinates, not their centred float32 copies.
  if (is_float) {
    p.reference_x = host_matrix(in.x.data(), in.n, in.d);
    p.reference_y = host_matrix(in.y.data(), in.m, in.d);
  }
  validate(p);

  SinkhornOptions options = st.options;
  options.precision = precision;
  Progress progress(!st.quiet && ::isatty(STDERR_FILENO));
  options.callbacks.push_back(progress.callback());

  const auto t0 = Clock::now();
  // One prepared problem serves the solve and the barycentric map.
  SinkhornSolver<T> solver(ctx, p, precision);
  Potentials<T> pot;
  SinkhornSummary s;
  DivergenceSummary div;
  {
    InterruptGuard guard;
    if (st.debias) {
      div = solver.divergence(options, &pot);
      s = div.xy;
    } else {
      s = solver.solve(options, &pot);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  progress.finish();
  inject_test_failure(&s, st.debias ? &div : nullptr);
  if (g_interrupted) {
    std::fprintf(stderr, "kantor solve: interrupted after %lld iterations; no output written\n",
                 static_cast<long long>(s.iterations));
    return kExitInterrupted;
  }
  // A numerical failure writes no output file and exits kExitNumericalFailure.
  const bool failed = numerical_failure(s, div, st.debias);

  std::vector<OutputFile> outputs;
  if (!failed && !st.potentials_prefix.empty()) {
    const PotentialPaths paths = potential_paths(st.potentials_prefix);
    outputs.push_back(
        {"--output-potentials", paths.f, {in.n}, to_double(to_host(ctx, pot.f.cview())), is_float});
    outputs.push_back(
        {"--output-potentials", paths.g, {in.m}, to_double(to_host(ctx, pot.g.cview())), is_float});
  }
  if (!failed && !st.map_path.empty()) {
    std::vector<T> map(std::size_t(in.n * in.d));
    solver.barycentric_map(pot, host_matrix(map.data(), in.n, in.d));
    std::vector<double> out = to_double(map);
    // Back to the original coordinates. Where the points lie farther from the origin than the
    // widest side of their box, float32 would round the map coarser than the solve: float64.
    double offset = 0;
    for (const double c : shift) offset = std::max(offset, std::abs(c));
    for (std::size_t i = 0; i < out.size() && !shift.empty(); ++i)
      out[i] += shift[i % std::size_t(in.d)];
    outputs.push_back({"--output-map",
                       st.map_path,
                       {in.n, in.d},
                       std::move(out),
                       is_float && offset <= box.width});
  }
  write_outputs(outputs);

  if (st.json) {
    JsonObject o;
    o.add("version", build_info().version)
        .add("demo", st.demo)
        .add("converged", st.debias ? div.converged() : s.converged())
        .add("termination", to_string(s.termination))
        .add("message", s.message)
        .add("dual_cost", s.dual_cost)
        .add("primal_cost", s.primal_cost)
        .add("regularized_cost", s.regularized_cost)
        .add("dual_gap", s.dual_gap)
        .add("divergence", st.debias && !failed ? div.divergence : std::nan(""))
        .add("divergence_raw", st.debias && !failed ? div.divergence_raw : std::nan(""))
        .add("divergence_bound", st.debias && !failed ? div.divergence_bound : std::nan(""))
        .add("marginal_error", s.marginal_error)
        .add("marginal_error_slack", s.marginal_error_slack)
        .add("residual", s.residual)
        .add("certificates", s.certificates)
        .add("plan_mass", s.plan_mass)
        .add("iterations", s.iterations)
        .add("annealing_iterations", s.annealing_iterations)
        .add("epsilon", s.epsilon_reached)
        .add("target_epsilon", s.epsilon)
        .add("resolvable_epsilon", s.resolvable_epsilon)
        .add("initial_epsilon", s.initial_epsilon)
        .add("tolerance", s.tolerance)
        .add("cost_scale", st.cost_scale)
        .add("schedule", to_string(s.schedule))
        .add("backend", to_string(s.backend))
        .add("backend_note", s.backend_note)
        .add("precision", to_string(s.precision))
        .add("engine", s.engine)
        .add("threads", ctx.threads())
        .add("n", s.n)
        .add("m", s.m)
        .add("d", s.d)
        .add("seconds", seconds);
    std::vector<std::string> nulls;
    for (const std::string& k : o.null_keys())
      if ((k != "divergence" && k != "divergence_raw" && k != "divergence_bound") || st.debias)
        nulls.push_back(k);  // null: not asked for
    if (st.debias)
      o.add_raw("xx", summary_json(div.xx, "xx", &nulls))
          .add_raw("yy", summary_json(div.yy, "yy", &nulls));
    o.set("message", not_computed_message(s.message, nulls));
    std::string files = "[";
    for (std::size_t i = 0; i < outputs.size(); ++i)
      files += (i ? ", " : "") + json_escape(outputs[i].path);
    o.add_raw("outputs", files + "]");
    std::cout << o.str() << std::endl;
  } else {
    if (st.demo)
      std::cout << "demo problem: two seeded Gaussian mixtures, n = " << in.n << ", m = " << in.m
                << ", d = " << in.d << ", epsilon = " << st.epsilon << "\n";
    std::string report = st.debias ? div.full_report() : s.full_report();
    if (st.debias && failed)  // the divergence of failed solves is no number
      report = "debiased Sinkhorn divergence not computed" + report.substr(report.find('\n'));
    std::cout << replace_non_finite(report);
    for (const OutputFile& f : outputs) std::cout << "wrote " << f.path << "\n";
    std::cout.flush();
  }
  if (failed) {
    const SinkhornSummary& bad = s.termination == TerminationType::kNumericalFailure ? s
                                 : div.xx.termination == TerminationType::kNumericalFailure
                                     ? div.xx
                                     : div.yy;
    std::fprintf(stderr, "kantor solve: error: numerical failure: %s; no output written\n",
                 bad.message.c_str());
    return kExitNumericalFailure;
  }
  return kExitOk;
}

constexpr const char* kUsage =
    "usage: kantor solve --source X --target Y --epsilon E [options]\n"
    "       kantor solve --demo [options]\n\n"
    "Entropic OT between point clouds X (n x d) and Y (m x d), cost c |x - y|^2. Files: .npy\n"
    "(float32/float64, C order) or .csv (comma-separated, optional header line). Without\n"
    "weight files the weights are uniform; with one, the other side is uniform with the same\n"
    "total mass. Every output file is checked before the solve starts (writable, no two\n"
    "outputs and no output and input naming the same file).\n\n"
    "Exit codes: 0 the solve ran (converged or not); 1 runtime failure (CUDA, memory, a failed\n"
    "write to standard output); 2 bad input or usage; 3 numerical failure (NaN/Inf: the report\n"
    "or JSON says what could not be computed, as 'not computed' / null, and no output file is\n"
    "written); 130 interrupted.\n";

}  // namespace

int cmd_solve(const std::vector<std::string>& args) {
  std::string source, target, source_weights, target_weights, schedule = "alternating";
  std::string backend = "auto", precision_name, potentials_prefix, map_path;
  double epsilon = 0, cost_scale = 1.0, scaling = kDefaultScaling, tolerance = 0;
  std::int64_t max_iterations = 10000, check_every = 10;
  int threads = 0;
  bool fixed_eps = false, debias = false, json = false, quiet = false, demo = false;

  po::options_description desc("options", 100, 50);
  // clang-format off
  desc.add_options()
    ("help,h", "print this help and exit")
    ("source", po::value(&source)->value_name("X"), "source points, .npy or .csv, shape (n, d)")
    ("target", po::value(&target)->value_name("Y"), "target points, .npy or .csv, shape (m, d)")
    ("source-weights", po::value(&source_weights)->value_name("A"),
     "source weights (n), >= 0 (default uniform)")
    ("target-weights", po::value(&target_weights)->value_name("B"),
     "target weights (m), >= 0, same total as A (default uniform)")
    ("epsilon", po::value(&epsilon)->value_name("E"),
     "entropic regularization in cost units, > 0 (required unless --demo; demo: 0.05)")
    ("cost-scale", po::value(&cost_scale)->value_name("C")->default_value(1.0),
     "c in the cost c |x - y|^2, > 0")
    ("schedule", po::value(&schedule)->value_name("NAME")->default_value("alternating"),
     "alternating | symmetric")
    ("scaling", po::value(&scaling)->value_name("S"),
     "eps-annealing factor per iteration, in (0, 1) (default 0.5)")
    ("fixed-epsilon", po::bool_switch(&fixed_eps), "no annealing: every iteration at E")
    ("tolerance", po::value(&tolerance)->value_name("T")->default_value(0),
     "stop when the L1 marginal error <= T (0: default of the precision, 1e-9 for fp64)")
    ("max-iterations", po::value(&max_iterations)->value_name("N")->default_value(10000),
     "iteration budget, annealing included")
    ("check-every", po::value(&check_every)->value_name("K")->default_value(10),
     "check the marginal error every K iterations")
    ("debias", po::bool_switch(&debias),
     "also compute the debiased Sinkhorn divergence OT(a,b) - OT(a,a)/2 - OT(b,b)/2")
    ("backend", po::value(&backend)->value_name("B")->default_value("auto"),
     "cpu | cuda | auto (auto: cuda when compiled in and a GPU is visible, else cpu)")
    ("threads", po::value(&threads)->value_name("N")->default_value(0),
     "CPU threads (0: all hardware threads)")
    ("precision", po::value(&precision_name)->value_name("P"),
     "fp64 | fp32 | tf32 | bf16 (default fp64 on cpu, fp32 on cuda; tf32/bf16: cuda only)")
    ("output-potentials", po::value(&potentials_prefix)->value_name("PREFIX"),
     "write f and g to PREFIX_f.npy, PREFIX_g.npy (PREFIX ending in .csv/.npy picks the format)")
    ("output-map", po::value(&map_path)->value_name("FILE"),
     "write the barycentric map T(x_i) (n x d) to FILE (.npy or .csv; float32 .npy for fp32 "
     "solves unless the points lie farther from the origin than their spread)")
    ("json", po::bool_switch(&json), "print one JSON object instead of the report")
    ("quiet", po::bool_switch(&quiet), "no progress line on stderr")
    ("demo", po::bool_switch(&demo),
     "solve a built-in seeded problem: Gaussian mixtures, n = 2000, m = 3000, d = 3");
  // clang-format on

  po::variables_map vm = parse_command_line(args, desc);
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << desc << std::endl;
    return kExitOk;
  }
  po::notify(vm);

  // Combinations and ranges, all before any file is read.
  for (const char* opt :
       {"source", "target", "source-weights", "target-weights", "output-map", "output-potentials"})
    if (vm.count(opt) && vm[opt].as<std::string>().empty())
      throw InvalidArgument(std::string("--") + opt + ": empty file name");
  if (demo) {
    for (const char* opt : {"source", "target", "source-weights", "target-weights"})
      if (vm.count(opt))
        throw InvalidArgument(std::string("--demo solves a built-in problem; --") + opt +
                              " is not allowed with it");
  } else {
    if (!vm.count("source") || !vm.count("target"))
      throw InvalidArgument(std::string("missing ") +
                            (!vm.count("source") ? "--source X" : "--target Y") +
                            " (expected --source X --target Y, or --demo)");
    if (!vm.count("epsilon"))
      throw InvalidArgument(
          "missing --epsilon E (the entropic regularization, > 0, in cost "
          "units)");
  }
  if (vm.count("scaling") && fixed_eps)
    throw InvalidArgument(
        "--scaling and --fixed-epsilon are mutually exclusive (--scaling sets "
        "the annealing factor, --fixed-epsilon turns annealing off)");
  Settings st;
  st.epsilon = vm.count("epsilon") ? epsilon : kDemoEpsilon;
  if (!(st.epsilon > 0) || !std::isfinite(st.epsilon))
    throw InvalidArgument("--epsilon must be finite and > 0, got " + fmt(st.epsilon));
  if (!(cost_scale > 0) || !std::isfinite(cost_scale))
    throw InvalidArgument("--cost-scale must be finite and > 0, got " + fmt(cost_scale));
  if (!(scaling > 0 && scaling < 1))
    throw InvalidArgument("--scaling must be in (0, 1), got " + fmt(scaling));
  if (!(tolerance >= 0) || !std::isfinite(tolerance))
    throw InvalidArgument(
        "--tolerance must be finite and >= 0 (0: default of the precision), "
        "got " +
        fmt(tolerance));
  if (max_iterations < 1)
    throw InvalidArgument("--max-iterations must be >= 1, got " + std::to_string(max_iterations));
  if (check_every < 1)
    throw InvalidArgument("--check-every must be >= 1, got " + std::to_string(check_every));
  // The upper bound guards against a typo starting thousands of OS threads.
  if (threads < 0 || threads > kMaxThreads)
    throw InvalidArgument("--threads must be in [0, " + std::to_string(kMaxThreads) +
                          "] (0: all hardware threads), got " + std::to_string(threads));
  st.options.schedule = parse_schedule(schedule, "--schedule");
  const Backend backend_choice = parse_backend(backend, "--backend");
  std::optional<Precision> precision;
  if (vm.count("precision")) precision = parse_precision(precision_name, "--precision");
  st.options.anneal = !fixed_eps;
  st.options.scaling = scaling;
  st.options.tolerance = tolerance;
  st.options.max_iterations = max_iterations;
  st.options.check_every = check_every;
  st.cost_scale = cost_scale;
  st.debias = debias;
  st.json = json;
  st.quiet = quiet;
  st.demo = demo;
  st.potentials_prefix = potentials_prefix;
  st.map_path = map_path;
  {
    std::vector<std::pair<std::string, std::string>> outputs, inputs;
    if (vm.count("output-potentials")) {
      const PotentialPaths paths = potential_paths(potentials_prefix);
      outputs.emplace_back("--output-potentials", paths.f);
      outputs.emplace_back("--output-potentials", paths.g);
    }
    if (vm.count("output-map")) outputs.emplace_back("--output-map", map_path);
    for (const char* opt : {"source", "target", "source-weights", "target-weights"})
      if (vm.count(opt)) inputs.emplace_back(std::string("--") + opt, vm[opt].as<std::string>());
    check_outputs(outputs, inputs);
  }

  Input in = demo ? demo_input() : load_input(source, target, source_weights, target_weights);
  check_and_finish(&in);

  ContextOptions co;
  co.backend = backend_choice;
  co.threads = threads;
  co.cancel = &g_cancel;
  const Context ctx(co);
  const Precision prec =
      precision.value_or(ctx.backend() == Backend::kCuda ? Precision::kFp32 : Precision::kFp64);
  if (ctx.backend() == Backend::kCpu && (prec == Precision::kTf32 || prec == Precision::kBf16))
    throw InvalidArgument("--precision " + to_string(prec) +
                          " uses tensor cores and needs --backend cuda (the cpu engine runs "
                          "fp32 or fp64)");
  if (prec == Precision::kFp64) return run_solve<double>(ctx, st, in, prec);
  return run_solve<float>(ctx, st, in, prec);
}

}  // namespace kantor::cli
