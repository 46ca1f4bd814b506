// kantor bench birkhoff: time the batched Birkhoff projection (forward, forward + backward) on
// fresh N(0, scale^2) logits and optionally measure its accuracy; JSON or text.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <iostream>

#include "apps/cli_common.hpp"
#include "apps/commands.hpp"
#include "kantor/birkhoff.hpp"
#include "kantor/buffer.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"

namespace po = boost::program_options;

namespace kantor::cli {

namespace {
constexpr double kHbmBytesPerSecond = 4.27e12;  // H200, performance.md section 1
}

int cmd_bench_birkhoff(const std::vector<std::string>& args) {
  std::int64_t batch = 1 << 20, accuracy = 0;
  int n = 4, runs = 20, warmup = 3, iterations = 0, threads = 0;
  std::string method = "newton", order = "row", backend = "auto", gradient = "implicit";
  double scale = 1.0, tolerance = 0;
  bool backward = false, json = false, bf16 = false, no_graphs = false;
  po::options_description desc(
      "kantor bench birkhoff: time the batched Birkhoff projection on fresh N(0, scale^2) "
      "logits (CUDA events, median of --runs after --warmup; CUDA graphs too)\n\noptions");
  desc.add_options()("help,h", "show this help")("batch", po::value(&batch), "B matrices")(
      "n", po::value(&n), "matrix size (2..16)")("method", po::value(&method),
                                                 "newton | sinkhorn | deepseek")(
      "order", po::value(&order), "row | column")("iterations", po::value(&iterations),
                                                  "sinkhorn sweeps / deepseek repeat")(
      "tolerance", po::value(&tolerance), "Err threshold (0 = default)")(
      "backward", po::bool_switch(&backward), "also time forward + backward")(
      "gradient", po::value(&gradient), "implicit | unrolled")("bf16", po::bool_switch(&bf16),
                                                               "bfloat16 storage")(
      "scale", po::value(&scale), "logits ~ N(0, scale^2)")("runs", po::value(&runs),
                                                            "timed runs (>= 20 recommended)")(
      "warmup", po::value(&warmup), "untimed runs first")("no-graphs", po::bool_switch(&no_graphs),
                                                          "skip the CUDA-graph timing")(
      "accuracy", po::value(&accuracy),
      "also measure Err of the fp32 output on this many fresh matrices (0 = off)")(
      "backend", po::value(&backend), "cpu | cuda | auto")(
      "threads", po::value(&threads), "CPU threads (0 = all)")("json", po::bool_switch(&json),
                                                               "JSON output");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return kExitOk;
  }
  // --n, --runs and --warmup: time_birkhoff's checks (below, naming the option).
  if (batch < 1) throw InvalidArgument("--batch must be >= 1, got " + std::to_string(batch));
  if (!(scale > 0)) throw InvalidArgument("--scale must be > 0");
  if (accuracy < 0) throw InvalidArgument("--accuracy must be >= 0");
  if (gradient != "implicit" && gradient != "unrolled")
    throw InvalidArgument("--gradient: expected implicit or unrolled, got '" + gradient + "'");

  BirkhoffBenchConfig cfg;
  cfg.batch = batch;
  cfg.n = n;
  cfg.bf16 = bf16;
  cfg.backward = backward;
  cfg.runs = runs;
  cfg.warmup = warmup;
  cfg.scale = scale;
  cfg.graphs = !no_graphs;
  cfg.options.method = parse_birkhoff_method(method, "--method");
  cfg.options.order = parse_sinkhorn_order(order, "--order");
  cfg.options.iterations = iterations;
  cfg.options.tolerance = tolerance;
  cfg.options.gradient =
      gradient == "unrolled" ? BirkhoffGradient::kUnrolled : BirkhoffGradient::kImplicit;
  std::string why;
  if (!cfg.options.is_valid(&why))
    throw_invalid_options(why, "BirkhoffOptions",
                          {{"iterations", "--iterations"}, {"tolerance", "--tolerance"}});

  const Context ctx = make_context(ContextOptions{parse_backend(backend, "--backend"), threads});
  BirkhoffTiming t;
  try {
    t = time_birkhoff(ctx, cfg);
  } catch (const InvalidArgument& e) {
    // time_birkhoff names its config fields: "bench birkhoff: n = 17 is outside ...".
    const std::string m = e.what(), prefix = "bench birkhoff: ";
    const std::string field =
        m.rfind(prefix, 0) == 0 ? leading_field(m.substr(prefix.size())) : std::string();
    if (field == "n") throw InvalidArgument("--n: " + m);
    if (field == "batch") throw InvalidArgument("--batch: " + m);
    if (field == "runs") throw InvalidArgument("--runs / --warmup: " + m);
    throw;
  }
  const double esize = bf16 ? 2 : 4;
  const double fwd_bytes = 2.0 * n * n * esize * double(batch);
  const double bwd_bytes = 3.0 * n * n * esize * double(batch);
  JsonObject j;
  std::string device = "cpu";
  if (ctx.backend() == Backend::kCuda) {
    const auto devs = cuda_devices();
    if (ctx.device() < int(devs.size())) device = devs[std::size_t(ctx.device())].name;
  }
  j.add("command", "bench birkhoff")
      .add("device", device)
      .add("backend", to_string(ctx.backend()))
      .add("threads", ctx.threads())
      .add("batch", batch)
      .add("n", n)
      .add("dtype", bf16 ? "bf16" : "fp32")
      .add("method", method)
      .add("order", order)
      .add("iterations",
           cfg.options.method == BirkhoffMethod::kNewton ? 0 : (iterations ? iterations : 20))
      .add("scale", scale)
      .add("runs", std::int64_t(t.runs))
      .add("fwd_ms_median", t.forward_ms_median)
      .add("fwd_ms_min", t.forward_ms_min)
      .add("fwd_ms_max", t.forward_ms_max)
      .add("fwd_gbps", fwd_bytes / (t.forward_ms_median * 1e-3) / 1e9)
      .add("fwd_hbm_fraction", fwd_bytes / (t.forward_ms_median * 1e-3) / kHbmBytesPerSecond)
      .add("fwd_matrices_per_s", double(batch) / (t.forward_ms_median * 1e-3));
  if (backward) {
    j.add("gradient", gradient)
        .add("fwd_bwd_ms_median", t.both_ms_median)
        .add("fwd_bwd_ms_min", t.both_ms_min)
        .add("fwd_bwd_ms_max", t.both_ms_max)
        .add("fwd_bwd_gbps", (fwd_bytes + bwd_bytes) / (t.both_ms_median * 1e-3) / 1e9)
        .add("fwd_bwd_hbm_fraction",
             (fwd_bytes + bwd_bytes) / (t.both_ms_median * 1e-3) / kHbmBytesPerSecond)
        .add("fwd_bwd_matrices_per_s", double(batch) / (t.both_ms_median * 1e-3));
  }
  if (t.graphs) {
    j.add("graph_fwd_ms_median", t.graph_forward_ms_median);
    if (backward) j.add("graph_fwd_bwd_ms_median", t.graph_both_ms_median);
  }

  if (accuracy > 0) {
    // Err = |P1-1|_1 + |P^T1-1|_1 in float64 of the float32 output, on fresh logits.
    const std::int64_t count = accuracy * n * n;
    Buffer<float> R(ctx, count), P(ctx, count);
    fill_normal(ctx, batch_view<float>(R, n), 0.0, scale, 424242);
    const BirkhoffSummary s =
        project_birkhoff(ctx, batch_view<const float>(R, n), batch_view<float>(P, n), cfg.options);
    const std::vector<float> h = to_host(ctx, P.cview());
    std::vector<double> err(static_cast<std::size_t>(accuracy));
    std::int64_t nonfinite = 0;
    for (std::int64_t b = 0; b < accuracy; ++b) {
      const float* p = h.data() + b * n * n;
      double e = 0;
      for (int i = 0; i < n; ++i) {
        double r = 0, c = 0;
        for (int k = 0; k < n; ++k) {
          r += double(p[i * n + k]);
          c += double(p[k * n + i]);
        }
        e += std::fabs(r - 1) + std::fabs(c - 1);
      }
      if (!std::isfinite(e)) ++nonfinite;
      err[std::size_t(b)] = std::isfinite(e) ? e : HUGE_VAL;
    }
    std::sort(err.begin(), err.end());
    auto q = [&](double f) { return err[std::size_t(f * double(accuracy - 1))]; };
    j.add("accuracy_matrices", accuracy)
        .add("err_median", q(0.5))
        .add("err_p99", q(0.99))
        .add("err_max", err.back())
        .add("err_nonfinite", nonfinite)
        .add("summary_worst_error", s.worst_error)
        .add("summary_median_error", s.median_error)
        .add("summary_not_converged", s.not_converged);
  }
  if (json) {
    std::cout << j.str() << "\n";
  } else {
    std::cout << "birkhoff " << method << " B=" << batch << " n=" << n << " on " << device
              << ": fwd " << t.forward_ms_median << " ms (min " << t.forward_ms_min << ", max "
              << t.forward_ms_max << ")";
    if (backward) std::cout << ", fwd+bwd " << t.both_ms_median << " ms";
    if (t.graphs) std::cout << ", graph fwd " << t.graph_forward_ms_median << " ms";
    std::cout << "\n" << j.str() << "\n";
  }
  return kExitOk;
}

}  // namespace kantor::cli
