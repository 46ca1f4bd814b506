// kantor otdd: the optimal transport dataset distance between two labelled datasets
// (kantor/otdd.hpp, docs/otdd.md), whole datasets streamed, with the label-distance table as a
// JSON field, a file and an SVG heatmap.
//
//   kantor otdd --source train-images-idx3-ubyte.gz --source-labels train-labels-idx1-ubyte.gz \
//               --target t10k-images-idx3-ubyte.gz --target-labels t10k-labels-idx1-ubyte.gz \
//               --json --output-heatmap labels.svg
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "apps/progress.hpp"
#include "apps/solve_output.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"
#include "kantor/io.hpp"
#include "kantor/otdd.hpp"

namespace kantor::cli {
namespace {

using Clock = std::chrono::steady_clock;

// torchvision's MNIST-family normalization, which the public implementation applies to every
// MNIST-like dataset it loads (FashionMNIST included): ToTensor (pixel / 255), then
// Normalize(mean 0.1307, std 0.3081).
constexpr double kMnistMean = 0.1307, kMnistStd = 0.3081;

struct LabelledData {
  std::string name;  // the features' file, for messages
  std::int64_t n = 0, d = 0;
  std::vector<double> x;
  std::vector<std::int32_t> labels;
  bool bytes = false;  // IDX unsigned bytes (raw pixels)
};

LabelledData load(const std::string& features, const std::string& labels_path,
                  const std::string& label_column, const std::string& opt) {
  LabelledData out;
  out.name = features;
  io::Array a = io::read_matrix(features, "--" + opt);
  out.bytes = a.dtype == "idx-ubyte";
  if (!labels_path.empty()) {
    if (!label_column.empty())
      throw InvalidArgument("--" + opt + "-labels and --" + opt +
                            "-label-column: give one or the other");
    out.labels = io::read_labels(labels_path, "--" + opt + "-labels");
    if (std::int64_t(out.labels.size()) != a.rows())
      throw InvalidArgument("--" + opt + "-labels '" + labels_path + "' has " +
                            std::to_string(out.labels.size()) + " labels but --" + opt + " '" +
                            features + "' has " + std::to_string(a.rows()) + " rows");
  } else if (!label_column.empty()) {
    std::int64_t col = 0;
    try {
      std::size_t used = 0;
      col = std::stoll(label_column, &used);
      if (used != label_column.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw InvalidArgument("--" + opt + "-label-column: expected an integer, got '" +
                            label_column + "'");
    }
    out.labels = io::take_label_column(&a, col, features, "--" + opt);
  } else {
    throw InvalidArgument("--" + opt + " needs labels: --" + opt + "-labels FILE or --" + opt +
                          "-label-column K");
  }
  out.n = a.rows();
  out.d = a.cols();
  out.x = std::move(a.data);
  return out;
}

std::vector<std::int32_t> parse_int_list(const std::string& s, const std::string& opt) {
  std::vector<std::int32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < INT32_MIN || v > INT32_MAX) throw std::invalid_argument("x");
      out.push_back(std::int32_t(v));
    } catch (const std::exception&) {
      throw InvalidArgument(opt + ": '" + item + "' is not an integer (expected a list like 0,1,2)");
    }
  }
  if (out.empty()) throw InvalidArgument(opt + ": empty list");
  return out;
}

/// Keeps the rows whose label is in `keep`.
void filter_classes(LabelledData* x, const std::vector<std::int32_t>& keep, const std::string& opt) {
  std::vector<double> nx;
  std::vector<std::int32_t> nl;
  for (std::int64_t i = 0; i < x->n; ++i)
    if (std::find(keep.begin(), keep.end(), x->labels[std::size_t(i)]) != keep.end()) {
      nx.insert(nx.end(), x->x.begin() + i * x->d, x->x.begin() + (i + 1) * x->d);
      nl.push_back(x->labels[std::size_t(i)]);
    }
  if (nl.empty()) throw InvalidArgument(opt + ": no sample of '" + x->name + "' has one of these classes");
  x->x = std::move(nx);
  x->labels = std::move(nl);
  x->n = std::int64_t(x->labels.size());
}

/// A uniform random subsample of `cap` rows without replacement (the public implementation's
/// maxsamples), rows kept in file order.
void subsample(LabelledData* x, std::int64_t cap, std::mt19937_64* rng) {
  if (cap <= 0 || x->n <= cap) return;
  std::vector<std::int64_t> idx(std::size_t(x->n));
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), *rng);
  idx.resize(std::size_t(cap));
  std::sort(idx.begin(), idx.end());
  std::vector<double> nx(static_cast<std::size_t>(cap * x->d));
  std::vector<std::int32_t> nl(static_cast<std::size_t>(cap));
  for (std::int64_t r = 0; r < cap; ++r) {
    std::copy(x->x.begin() + idx[std::size_t(r)] * x->d, x->x.begin() + (idx[std::size_t(r)] + 1) * x->d,
              nx.begin() + r * x->d);
    nl[std::size_t(r)] = x->labels[std::size_t(idx[std::size_t(r)])];
  }
  x->x = std::move(nx);
  x->labels = std::move(nl);
  x->n = cap;
}

/// Shifts square images (d = w * w) right and down by k pixels (zero fill; k < 0: left / up).
void shift_images(LabelledData* x, int k) {
  const std::int64_t w = std::int64_t(std::llround(std::sqrt(double(x->d))));
  if (w * w != x->d)
    throw InvalidArgument("--target-shift needs square images, but '" + x->name + "' has " +
                          std::to_string(x->d) + " features per sample");
  std::vector<double> row(std::size_t(x->d));
  for (std::int64_t i = 0; i < x->n; ++i) {
    double* img = &x->x[std::size_t(i * x->d)];
    std::fill(row.begin(), row.end(), 0.0);
    for (std::int64_t r = 0; r < w; ++r)
      for (std::int64_t c = 0; c < w; ++c) {
        const std::int64_t rs = r - k, cs = c - k;
        if (rs >= 0 && rs < w && cs >= 0 && cs < w) row[std::size_t(r * w + c)] = img[rs * w + cs];
      }
    std::copy(row.begin(), row.end(), img);
  }
}

void normalize(LabelledData* x, const std::string& how) {
  const bool mnist = how == "mnist" || (how == "auto" && x->bytes);
  if (!mnist) return;
  for (double& v : x->x) v = (v / 255.0 - kMnistMean) / kMnistStd;
}

/// A colour of the viridis-like ramp for t in [0, 1] (5 anchors, linear in between).
std::string ramp(double t) {
  static const double anchors[5][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::min(1.0, std::max(0.0, t)) * 4;
  const int i = std::min(3, int(t));
  const double f = t - i;
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x",
                int(std::lround(anchors[i][0] + f * (anchors[i + 1][0] - anchors[i][0]))),
                int(std::lround(anchors[i][1] + f * (anchors[i + 1][1] - anchors[i][1]))),
                int(std::lround(anchors[i][2] + f * (anchors[i + 1][2] - anchors[i][2]))));
  return buf;
}

/// The cross block of the label table (source classes as rows, target classes as columns) as an
/// SVG heatmap with the class names on the axes, the values in the cells and a colour bar.
std::string heatmap_svg(const otdd::LabelTable& t, const std::vector<std::string>& names_a,
                        const std::vector<std::string>& names_b, const std::string& title) {
  const std::int64_t ra = std::int64_t(t.classes_a.size()), cb = std::int64_t(t.classes_b.size());
  double lo = INFINITY, hi = -INFINITY;
  for (std::int64_t p = 0; p < ra; ++p)
    for (std::int64_t q = 0; q < cb; ++q) {
      lo = std::min(lo, t.cross(p, q));
      hi = std::max(hi, t.cross(p, q));
    }
  const double cell = std::max(18.0, std::min(56.0, 560.0 / double(std::max(ra, cb))));
  const double left = 110, top = 70, w = cell * double(cb), h = cell * double(ra);
  const double width = left + w + 110, height = top + h + 60;
  const bool labels_in_cells = cell >= 40;
  std::ostringstream os;
  os.precision(4);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
     << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"10\" y=\"22\" font-size=\"14\">" << title << "</text>\n"
     << "<text x=\"" << left + w / 2 << "\" y=\"" << top - 30
     << "\" font-size=\"12\" text-anchor=\"middle\">target classes</text>\n"
     << "<text x=\"14\" y=\"" << top + h / 2 << "\" font-size=\"12\" transform=\"rotate(-90 14 "
     << top + h / 2 << ")\" text-anchor=\"middle\">source classes</text>\n";
  for (std::int64_t q = 0; q < cb; ++q)
    os << "<text x=\"" << left + (double(q) + 0.5) * cell << "\" y=\"" << top - 8
       << "\" font-size=\"11\" text-anchor=\"middle\">" << names_b[std::size_t(q)] << "</text>\n";
  for (std::int64_t p = 0; p < ra; ++p) {
    os << "<text x=\"" << left - 6 << "\" y=\"" << top + (double(p) + 0.5) * cell + 4
       << "\" font-size=\"11\" text-anchor=\"end\">" << names_a[std::size_t(p)] << "</text>\n";
    for (std::int64_t q = 0; q < cb; ++q) {
      const double v = t.cross(p, q), f = hi > lo ? (v - lo) / (hi - lo) : 0.0;
      os << "<rect x=\"" << left + double(q) * cell << "\" y=\"" << top + double(p) * cell
         << "\" width=\"" << cell << "\" height=\"" << cell << "\" fill=\"" << ramp(f)
         << "\"><title>" << names_a[std::size_t(p)] << " / " << names_b[std::size_t(q)] << ": " << v
         << "</title></rect>\n";
      if (labels_in_cells)
        os << "<text x=\"" << left + (double(q) + 0.5) * cell << "\" y=\""
           << top + (double(p) + 0.5) * cell + 4 << "\" font-size=\"10\" text-anchor=\"middle\" fill=\""
           << (f > 0.6 ? "black" : "white") << "\">" << v << "</text>\n";
    }
  }
  // Colour bar.
  const double bx = left + w + 30;
  for (int k = 0; k < 50; ++k)
    os << "<rect x=\"" << bx << "\" y=\"" << top + h - (k + 1) * h / 50 << "\" width=\"16\" height=\""
       << h / 50 + 0.5 << "\" fill=\"" << ramp(k / 49.0) << "\"/>\n";
  os << "<text x=\"" << bx + 20 << "\" y=\"" << top + 10 << "\" font-size=\"10\">" << hi << "</text>\n"
     << "<text x=\"" << bx + 20 << "\" y=\"" << top + h << "\" font-size=\"10\">" << lo << "</text>\n"
     << "<text x=\"" << left << "\" y=\"" << top + h + 30
     << "\" font-size=\"11\">cell: label distance W (squared 2-Wasserstein) between a source and a "
        "target class</text>\n</svg>\n";
  return os.str();
}

std::string json_matrix(const otdd::LabelTable& t, bool cross) {
  std::ostringstream os;
  os.precision(17);
  const std::int64_t rows = cross ? std::int64_t(t.classes_a.size()) : t.size();
  const std::int64_t cols = cross ? std::int64_t(t.classes_b.size()) : t.size();
  os << "[";
  for (std::int64_t p = 0; p < rows; ++p) {
    os << (p ? "," : "") << "[";
    for (std::int64_t q = 0; q < cols; ++q) os << (q ? "," : "") << (cross ? t.cross(p, q) : t(p, q));
    os << "]";
  }
  os << "]";
  return os.str();
}

std::string json_ints(const std::vector<std::int32_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

constexpr const char* kUsage =
    "usage: kantor otdd --source X --source-labels LX --target Y --target-labels LY [options]\n\n"
    "The optimal transport dataset distance (Alvarez-Melis & Fusi 2020) between two labelled\n"
    "datasets: the debiased Sinkhorn divergence under the cost |x - x'|^2 / 2 + W[y, y'] / 2,\n"
    "W the squared 2-Wasserstein distance between the classes' feature distributions (Gaussian\n"
    "approximation or exact inner OT). Features: .npy, .csv or IDX (MNIST format), plain or\n"
    "gzip (detected by content); labels: a separate file or a column of the features.\n"
    "--mode compatible reproduces the public implementation (microsoft/otdd defaults);\n"
    "converged runs each problem to a certified tolerance; both runs the two.\n\n"
    "Exit codes: 0 ran; 1 runtime failure; 2 bad input or usage; 3 numerical failure;\n"
    "130 interrupted.\n";

}  // namespace

int cmd_otdd(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  std::string source, target, source_labels, target_labels, source_col, target_col;
  std::string source_classes, target_classes, target_relabel;
  std::string label_distance = "gaussian", mode_name = "compatible", normalization = "auto";
  std::string backend = "auto", precision_name = "fp32", table_path, heatmap_path;
  std::string kernel = "auto";
  double epsilon = 0.1, tolerance = 5e-2, inner_epsilon = 0.1, target_noise = 0, relaxation = 1;
  std::int64_t max_samples = 0, max_iterations = 20000, max_class_samples = 0;
  std::uint64_t seed = 0;
  int threads = 0, target_shift = 0;
  bool json = false, quiet = false, diagonal = false, no_coarse = false;
  po::options_description desc("options", 100, 50);
  desc.add_options()("help,h", "print this help and exit")(
      "source", po::value(&source)->value_name("FILE"), "source features (n x d; images: n x h x w)")(
      "source-labels", po::value(&source_labels)->value_name("FILE"), "source labels (n integers)")(
      "source-label-column", po::value(&source_col)->value_name("K"),
      "the labels are column K of --source (negative: from the end)")(
      "target", po::value(&target)->value_name("FILE"), "target features (m x d)")(
      "target-labels", po::value(&target_labels)->value_name("FILE"), "target labels (m integers)")(
      "target-label-column", po::value(&target_col)->value_name("K"), "as --source-label-column")(
      "label-distance", po::value(&label_distance), "gaussian | exact (default gaussian)")(
      "mode", po::value(&mode_name), "compatible | converged | both (default compatible)")(
      "epsilon", po::value(&epsilon), "entropic regularization (default 0.1, the public one)")(
      "tolerance", po::value(&tolerance),
      "converged mode: certified L1 marginal error of each problem (default 5e-2; docs/otdd.md "
      "says why)")(
      "max-iterations", po::value(&max_iterations), "converged mode: budget (default 20000)")(
      "relaxation", po::value(&relaxation),
      "converged mode: over-relaxation of the cross problem: 1 = plain Sinkhorn (default), 0 = "
      "automatic, or a factor in (1, 2)")(
      "no-coarse-correction", po::bool_switch(&no_coarse),
      "converged mode: no class-level coarse correction of the cross problem")(
      "max-samples", po::value(&max_samples),
      "use a uniform random subsample of at most N samples per dataset (default: all)")(
      "seed", po::value(&seed), "seed of the subsamples and the noise (default 0)")(
      "source-classes", po::value(&source_classes)->value_name("LIST"),
      "keep only these source classes, e.g. 0,1,2,3,4")(
      "target-classes", po::value(&target_classes)->value_name("LIST"), "as --source-classes")(
      "target-relabel", po::value(&target_relabel)->value_name("LIST"),
      "rename the target's class k to LIST[k] (a permutation test)")(
      "target-shift", po::value(&target_shift),
      "shift the target's square images by K pixels right and down (zero fill)")(
      "target-noise", po::value(&target_noise),
      "add Gaussian noise of this std to the target's normalized features")(
      "normalization", po::value(&normalization),
      "auto | mnist | none (default auto: mnist for IDX byte images, as the public "
      "implementation's torchvision loaders; none otherwise)")(
      "diagonal-covariance", po::bool_switch(&diagonal),
      "gaussian: diagonal covariances only")(
      "inner-epsilon", po::value(&inner_epsilon), "exact: eps of the inner problems (default 0.1)")(
      "max-class-samples", po::value(&max_class_samples),
      "exact: at most N samples per class in an inner problem (default: all)")(
      "backend", po::value(&backend), "cpu | cuda | auto (default auto)")(
      "precision", po::value(&precision_name), "fp32 | fp64 | tf32 (default fp32)")(
      "threads", po::value(&threads), "CPU threads (default: all cores)")(
      "kernel", po::value(&kernel),
      (kernel_choice_names(" | ") +
       ": force a CUDA kernel family of the dispatch table (default auto; for comparisons)")
          .c_str())(
      "output-label-distances", po::value(&table_path)->value_name("FILE"),
      "write the label table over both datasets' classes (.npy or .csv)")(
      "output-heatmap", po::value(&heatmap_path)->value_name("FILE"),
      "write an SVG heatmap of the source-by-target label distances")(
      "json", po::bool_switch(&json), "print one JSON object")(
      "quiet", po::bool_switch(&quiet), "no progress line");
  po::variables_map vm = parse_command_line(args, desc);
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << desc << std::endl;
    return kExitOk;
  }
  po::notify(vm);
  if (source.empty() || target.empty()) throw InvalidArgument("--source and --target are required");
  if (mode_name != "compatible" && mode_name != "converged" && mode_name != "both")
    throw InvalidArgument("--mode: expected compatible, converged or both, got '" + mode_name + "'");
  if (normalization != "auto" && normalization != "mnist" && normalization != "none")
    throw InvalidArgument("--normalization: expected auto, mnist or none, got '" + normalization + "'");
  if (max_samples < 0) throw InvalidArgument("--max-samples must be >= 0, got " + std::to_string(max_samples));
  if (!(target_noise >= 0) || !std::isfinite(target_noise))
    throw InvalidArgument("--target-noise must be >= 0 and finite");
  if (!heatmap_path.empty() && io::extension(heatmap_path) != ".svg")
    throw InvalidArgument("--output-heatmap '" + heatmap_path + "': the picture is SVG: use a .svg name");
  otdd::OtddOptions options;
  options.labels.method = otdd::parse_label_distance(label_distance, "--label-distance");
  options.labels.diagonal_covariance = diagonal;
  options.labels.inner_epsilon = inner_epsilon;
  options.labels.max_class_samples = max_class_samples;
  options.labels.seed = seed + 1;
  options.epsilon = epsilon;
  options.tolerance = tolerance;
  options.max_iterations = max_iterations;
  options.relaxation = relaxation;
  options.coarse_correction = !no_coarse;
  options.precision = parse_precision(precision_name, "--precision");
  {
    std::string why;
    if (!options.is_valid(&why))
      throw_invalid_options(why, "OtddOptions",
                            {{"epsilon", "--epsilon"},
                             {"tolerance", "--tolerance"},
                             {"max_iterations", "--max-iterations"},
                             {"relaxation", "--relaxation"},
                             {"labels.inner_epsilon", "--inner-epsilon"},
                             {"labels.max_class_samples", "--max-class-samples"}});
  }
  {
    std::vector<std::pair<std::string, std::string>> outputs, inputs;
    if (!table_path.empty()) outputs.emplace_back("--output-label-distances", table_path);
    for (const char* opt : {"source", "target", "source-labels", "target-labels"})
      if (vm.count(opt)) inputs.emplace_back(std::string("--") + opt, vm[opt].as<std::string>());
    check_outputs(outputs, inputs);
    if (!heatmap_path.empty())
      for (const auto& f : inputs)
        if (io::same_file(f.second, heatmap_path))
          throw InvalidArgument("--output-heatmap '" + heatmap_path + "' names the input " + f.first);
  }

  ContextOptions co;
  co.backend = parse_backend(backend, "--backend");
  co.threads = threads;
  co.kernel = parse_kernel_choice(kernel, "--kernel");
  co.cancel = &g_cancel;
  const auto t0 = Clock::now();
  // The context (a CUDA context takes a few hundred ms to start) comes up while the two datasets
  // are read at once (inflating and converting the larger one dominates).
  auto future_ctx = std::async(std::launch::async, [&] { return make_context(co); });
  auto future_b = std::async(std::launch::async, [&] {
    return load(target, target_labels, target_col, "target");
  });
  LabelledData a = load(source, source_labels, source_col, "source");
  LabelledData b = future_b.get();
  if (a.d != b.d)
    throw InvalidArgument("--source '" + source + "' has " + std::to_string(a.d) +
                          " features per sample but --target '" + target + "' has " +
                          std::to_string(b.d));
  if (!source_classes.empty()) filter_classes(&a, parse_int_list(source_classes, "--source-classes"), "--source-classes");
  if (!target_classes.empty()) filter_classes(&b, parse_int_list(target_classes, "--target-classes"), "--target-classes");
  if (!target_relabel.empty()) {
    const auto map = parse_int_list(target_relabel, "--target-relabel");
    for (auto& l : b.labels) {
      if (l < 0 || std::size_t(l) >= map.size())
        throw InvalidArgument("--target-relabel has " + std::to_string(map.size()) +
                              " entries but the target has class " + std::to_string(l));
      l = map[std::size_t(l)];
    }
  }
  std::mt19937_64 rng(seed);
  subsample(&a, max_samples, &rng);
  subsample(&b, max_samples, &rng);
  if (target_shift != 0) shift_images(&b, target_shift);
  normalize(&a, normalization);
  normalize(&b, normalization);
  if (target_noise > 0) {
    std::normal_distribution<double> noise(0.0, target_noise);
    for (double& v : b.x) v += noise(rng);
  }
  const double seconds_read = std::chrono::duration<double>(Clock::now() - t0).count();

  const Context ctx = future_ctx.get();
  const double seconds_context =
      std::chrono::duration<double>(Clock::now() - t0).count() - seconds_read;
  if (ctx.backend() == Backend::kCpu &&
      (*options.precision == Precision::kTf32 || *options.precision == Precision::kBf16))
    throw InvalidArgument("--precision " + to_string(*options.precision) + " needs --backend cuda");

  const otdd::Dataset da{host_matrix<const double>(a.x.data(), a.n, a.d),
                         host_vector<const std::int32_t>(a.labels.data(), a.n)};
  const otdd::Dataset db{host_matrix<const double>(b.x.data(), b.n, b.d),
                         host_vector<const std::int32_t>(b.labels.data(), b.n)};
  const bool show = !quiet && ::isatty(STDERR_FILENO);
  auto last = Clock::now() - std::chrono::seconds(1);
  otdd::ProgressCallback progress;
  if (show)
    progress = [&](const std::string& phase, double fraction) {
      const auto now = Clock::now();
      if (fraction < 1 && now - last < std::chrono::milliseconds(200)) return;
      last = now;
      std::fprintf(stderr, "\r\033[K  otdd: %s %3.0f%%", phase.c_str(), 100 * fraction);
      std::fflush(stderr);
    };
  Progress sinkhorn_progress(show);
  options.callbacks.push_back(sinkhorn_progress.callback());

  std::vector<otdd::OtddSummary> runs;
  {
    InterruptGuard guard;
    // One table for every mode run: the public implementation's inner problems when the
    // compatible mode is the only one, else the converged ones.
    options.mode = mode_name == "compatible" ? otdd::Mode::kCompatible : otdd::Mode::kConverged;
    otdd::LabelTable table =
        otdd::label_distances(ctx, da, db, otdd::effective_label_options(options), progress);
    const double seconds_labels = std::chrono::duration<double>(Clock::now() - t0).count() -
                                  seconds_read - seconds_context;
    options.table = &table;
    std::vector<otdd::Mode> modes;
    if (mode_name != "converged") modes.push_back(otdd::Mode::kCompatible);
    if (mode_name != "compatible") modes.push_back(otdd::Mode::kConverged);
    for (otdd::Mode m : modes) {
      options.mode = m;
      if (g_interrupted) break;
      runs.push_back(otdd::dataset_distance(ctx, da, db, options, progress));
      runs.back().seconds_labels = seconds_labels;
    }
  }
  sinkhorn_progress.finish();
  if (show) std::fprintf(stderr, "\r\033[K");
  if (g_interrupted) {
    std::fprintf(stderr, "kantor otdd: interrupted; no output written\n");
    return kExitInterrupted;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const otdd::OtddSummary& main_run = runs.back();
  const otdd::LabelTable& table = main_run.table;
  bool failed = false;
  for (const auto& r : runs) failed = failed || !std::isfinite(r.distance);
  for (double v : table.values) failed = failed || !std::isfinite(v);
  if (!failed) {
    std::vector<OutputFile> outputs;
    if (!table_path.empty())
      outputs.push_back({"--output-label-distances", table_path, {table.size(), table.size()},
                         table.values, false});
    write_outputs(outputs);
    if (!heatmap_path.empty()) {
      std::vector<std::string> na, nb;
      for (auto c : table.classes_a) na.push_back(std::to_string(c));
      for (auto c : table.classes_b) nb.push_back(std::to_string(c));
      std::ostringstream title;
      title.precision(6);
      title << "OTDD label distances (" << otdd::to_string(options.labels.method)
            << "); distance " << main_run.distance << " (" << otdd::to_string(main_run.mode) << ")";
      io::write_text_atomic(heatmap_path, heatmap_svg(table, na, nb, title.str()));
    }
  }
  const otdd::OtddSummary* compat = nullptr;
  const otdd::OtddSummary* conv = nullptr;
  for (const auto& r : runs) (r.mode == otdd::Mode::kCompatible ? compat : conv) = &r;
  if (json) {
    JsonObject o;
    o.add("version", build_info().version)
        .add("source", source)
        .add("target", target)
        .add("n", main_run.n)
        .add("m", main_run.m)
        .add("d", main_run.d)
        .add("mode", mode_name)
        .add("label_distance", otdd::to_string(options.labels.method))
        .add("epsilon", epsilon)
        .add("feature_scale", main_run.feature_scale)
        .add("label_scale", main_run.label_scale)
        .add("backend", to_string(ctx.backend()))
        .add("precision", to_string(main_run.precision))
        .add("kernel", kernel)
        .add("distance", main_run.distance)
        .add("distance_compatible", compat ? compat->distance : std::nan(""))
        .add("distance_converged", conv ? conv->distance : std::nan(""));
    if (compat)
      o.add("compatible_iterations", compat->iterations)
          .add("compatible_marginal_error", compat->marginal_error_xy)
          .add("compatible_kernel", compat->compatible_kernel)
          .add("compatible_seconds", compat->seconds_ot + compat->seconds_setup)
          .add("diameter", compat->diameter);
    if (conv)
      o.add("converged", conv->converged)
          .add("converged_iterations", conv->iterations)
          .add("converged_marginal_error", conv->marginal_error_xy)
          .add("converged_seconds", conv->seconds_ot + conv->seconds_setup)
          .add("converged_message", conv->message);
    if (conv && conv->divergence) {
      // The cross problem's checks: [iteration, seconds, eps, residual, certificate or null,
      // dual cost].
      o.add_raw("converged_records", records_json(conv->divergence->xy.records, 9));
      o.add("converged_iterations_xy", conv->divergence->xy.iterations)
          .add("converged_iterations_xx", conv->divergence->xx.iterations)
          .add("converged_iterations_yy", conv->divergence->yy.iterations);
    }
    o.add_raw("classes_source", json_ints(table.classes_a))
        .add_raw("classes_target", json_ints(table.classes_b))
        .add_raw("label_distances", json_matrix(table, true))
        .add_raw("label_table", json_matrix(table, false))
        .add("seconds_read", seconds_read)
        .add("seconds_context", seconds_context)
        .add("seconds_labels", main_run.seconds_labels)
        .add("seconds_label_statistics", table.seconds_statistics)
        .add("seconds_label_square_roots", table.seconds_square_roots)
        .add("seconds_label_pairs", table.seconds_pairs)
        .add("seconds_prepare", main_run.seconds_prepare)
        .add("seconds_setup", main_run.seconds_setup)
        .add("seconds_ot", main_run.seconds_ot)
        .add("seconds_certificate", main_run.seconds_certificate)
        .add("seconds", seconds);
    std::cout << o.str() << std::endl;
  } else {
    for (const auto& r : runs) std::cout << replace_non_finite(r.full_report()) << "\n";
    std::cout << "  read            " << seconds_read << " s\n  end to end      " << seconds
              << " s" << std::endl;
  }
  if (failed) {
    std::fprintf(stderr, "kantor otdd: error: numerical failure (a non-finite distance); no output written\n");
    return kExitNumericalFailure;
  }
  return kExitOk;
}

}  // namespace kantor::cli
