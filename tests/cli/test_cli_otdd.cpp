// `kantor otdd` as a user runs it: the built binary (KANTOR_CLI) on small labelled datasets in a
// temporary directory. The JSON's distance equals the library's dataset_distance on the same data
// (both modes); IDX byte images with the automatic MNIST normalization equal the normalized
// features given as .npy; labels from a column; the table file and the SVG heatmap; bad input
// exits 2 naming the file or option and writes nothing.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cli/cli_fixture.hpp"
#include "gtest/gtest.h"
#include "kantor/context.hpp"
#include "kantor/io.hpp"
#include "kantor/otdd.hpp"

namespace {

namespace io = kantor::io;
using namespace kantor::test::cli;

struct LabelledSet {
  Cloud x;
  std::vector<double> labels;
};

/// n samples of d features in `classes` classes (ids offset + k), integers in [0, 255] when
/// `bytes` (image-like), else Gaussian.
LabelledSet make_set(std::mt19937_64& rng, std::int64_t n, std::int64_t d, int classes, int offset,
                     bool bytes) {
  LabelledSet s;
  s.x = Cloud{n, d, std::vector<double>(std::size_t(n * d))};
  std::normal_distribution<double> nd;
  std::uniform_int_distribution<int> px(0, 255);
  for (std::int64_t i = 0; i < n; ++i) {
    const int k = int(i % classes);
    s.labels.push_back(offset + k);
    for (std::int64_t c = 0; c < d; ++c)
      s.x.p[std::size_t(i * d + c)] =
          bytes ? double(std::min<std::int64_t>(255, px(rng) / (1 + (c + k) % 3) + 40 * k)) : nd(rng) + (c == k ? 2.0 : 0.0);
  }
  return s;
}

/// A big-endian IDX file: unsigned bytes of the given shape.
std::string idx_bytes(const std::vector<std::uint32_t>& dims, const std::vector<double>& v) {
  std::string s{char(0), char(0), char(0x08), char(dims.size())};
  for (std::uint32_t dim : dims)
    for (int b = 3; b >= 0; --b) s.push_back(char((dim >> (8 * b)) & 0xff));
  for (double x : v) s.push_back(char(static_cast<unsigned char>(x)));
  return s;
}

class CliOtddTest : public CliFixture {
 protected:
  CliOtddTest() : CliFixture("kantor_cli_otdd_") {}
};

double library_distance(const LabelledSet& a, const LabelledSet& b, kantor::otdd::Mode mode) {
  std::vector<std::int32_t> la(a.labels.begin(), a.labels.end()), lb(b.labels.begin(), b.labels.end());
  kantor::Context ctx(kantor::ContextOptions{kantor::Backend::kCpu, 0});
  kantor::otdd::OtddOptions o;
  o.mode = mode;
  return kantor::otdd::dataset_distance(
             ctx,
             {kantor::host_matrix<const double>(a.x.p.data(), a.x.n, a.x.d),
              kantor::host_vector<const std::int32_t>(la.data(), a.x.n)},
             {kantor::host_matrix<const double>(b.x.p.data(), b.x.n, b.x.d),
              kantor::host_vector<const std::int32_t>(lb.data(), b.x.n)},
             o)
      .distance;
}

TEST_F(CliOtddTest, BothModesMatchTheLibraryAndWriteTheTableAndHeatmap) {
  std::mt19937_64 rng(1);
  const LabelledSet a = make_set(rng, 60, 4, 3, 0, false), b = make_set(rng, 50, 4, 2, 7, false);
  const std::string xa = save("a.npy", a.x), la = save("la.csv", a.labels);
  const std::string xb = save("b.npy", b.x), lb = save("lb.csv", b.labels);
  const std::string table = out_dir_ + "/table.npy", svg = out_dir_ + "/heat.svg";
  const Json j = run_json("otdd --backend cpu --mode both --source " + xa + " --source-labels " + la +
                          " --target " + xb + " --target-labels " + lb +
                          " --output-label-distances " + table + " --output-heatmap " + svg);
  ASSERT_TRUE(j.has("distance"));
  const double compat = library_distance(a, b, kantor::otdd::Mode::kCompatible);
  const double conv = library_distance(a, b, kantor::otdd::Mode::kConverged);
  EXPECT_NEAR(j["distance_compatible"].num, compat, 1e-12 * std::abs(compat));
  EXPECT_NEAR(j["distance_converged"].num, conv, 1e-12 * std::abs(conv));
  EXPECT_EQ(j["distance"].num, j["distance_converged"].num);
  EXPECT_TRUE(j["converged"].b);
  // The cross problem's checks (records_json, shared with bench solve): six fields each.
  ASSERT_FALSE(j["converged_records"].items.empty());
  for (const Json& r : j["converged_records"].items) EXPECT_EQ(r.items.size(), 6u);
  ASSERT_EQ(j["classes_source"].items.size(), 3u);
  ASSERT_EQ(j["classes_target"].items.size(), 2u);
  EXPECT_EQ(j["classes_target"].items[1].num, 8);
  ASSERT_EQ(j["label_distances"].items.size(), 3u);
  ASSERT_EQ(j["label_distances"].items[0].items.size(), 2u);
  const io::Array t = io::read_array(table);
  ASSERT_EQ(t.shape, (std::vector<std::int64_t>{5, 5}));
  EXPECT_NEAR(t.data[0 * 5 + 3], j["label_distances"].items[0].items[0].num, 1e-12);
  EXPECT_EQ(t.data[2 * 5 + 2], 0.0);
  const std::string pic = read_text(svg);
  EXPECT_NE(pic.find("<svg"), std::string::npos);
  EXPECT_NE(pic.find(">8</text>"), std::string::npos) << "target class id on an axis";
  EXPECT_NE(pic.find("source classes"), std::string::npos);
}

TEST_F(CliOtddTest, IdxImagesWithAutomaticNormalizationEqualNormalizedNpyAndLabelColumns) {
  std::mt19937_64 rng(2);
  const LabelledSet a = make_set(rng, 40, 9, 2, 0, true), b = make_set(rng, 30, 9, 2, 0, true);
  save_text("a.idx", idx_bytes({40, 3, 3}, a.x.p));
  save_text("b-images", idx_bytes({30, 3, 3}, b.x.p));
  save_text("la.idx", idx_bytes({40}, a.labels));
  save_text("lb.idx", idx_bytes({30}, b.labels));
  const Json raw = run_json("otdd --backend cpu --source " + path("a.idx") + " --source-labels " +
                            path("la.idx") + " --target " + path("b-images") +
                            " --target-labels " + path("lb.idx"));
  // The same data normalized by hand, as .csv with the label as the last column.
  auto normalized = [](const LabelledSet& s) {
    Cloud c{s.x.n, s.x.d + 1, {}};
    for (std::int64_t i = 0; i < s.x.n; ++i) {
      for (std::int64_t k = 0; k < s.x.d; ++k)
        c.p.push_back((s.x.at(i, k) / 255.0 - 0.1307) / 0.3081);
      c.p.push_back(s.labels[std::size_t(i)]);
    }
    return c;
  };
  const std::string ca = save("a.csv", normalized(a)), cb = save("b.npy", normalized(b));
  const Json norm = run_json("otdd --backend cpu --source " + ca + " --source-label-column -1 --target " +
                             cb + " --target-label-column 9");
  EXPECT_EQ(raw["d"].num, 9);
  EXPECT_EQ(norm["d"].num, 9);
  EXPECT_NEAR(raw["distance"].num, norm["distance"].num, 1e-9 * std::abs(norm["distance"].num));
  const Json none = run_json("otdd --backend cpu --normalization none --source " + path("a.idx") +
                             " --source-labels " + path("la.idx") + " --target " + path("b-images") +
                             " --target-labels " + path("lb.idx"));
  EXPECT_GT(std::abs(none["distance"].num - raw["distance"].num), 1.0) << "raw pixels differ";
}

TEST_F(CliOtddTest, BadInputExitsTwoNamingTheProblemAndWritesNothing) {
  std::mt19937_64 rng(3);
  const LabelledSet a = make_set(rng, 20, 3, 2, 0, false);
  const std::string xa = save("a.npy", a.x), la = save("la.csv", a.labels);
  std::vector<double> short_labels(a.labels.begin(), a.labels.end() - 1);
  const std::string ls = save("short.csv", short_labels);
  std::vector<double> frac = a.labels;
  frac[4] = 0.5;
  const std::string lf = save("frac.csv", frac);
  const std::string out = " --output-label-distances " + out_dir_ + "/t.npy";
  const std::vector<BadCase> cases = {
      {"otdd --source " + xa + " --source-labels " + ls + " --target " + xa + " --target-labels " + la + out,
       {"short.csv", "19 labels", "20 rows"}},
      {"otdd --source " + xa + " --source-labels " + lf + " --target " + xa + " --target-labels " + la + out,
       {"frac.csv", "0.5"}},
      {"otdd --source " + xa + " --target " + xa + " --target-labels " + la + out,
       {"--source needs labels"}},
      {"otdd --source " + xa + " --source-labels " + la + " --target " + xa + " --target-labels " + la +
           " --output-heatmap " + out_dir_ + "/h.png",
       {"--output-heatmap", ".svg"}},
      {"otdd --source " + xa + " --source-labels " + la + " --target " + xa + " --target-labels " + la +
           " --mode fast" + out,
       {"--mode", "fast"}},
      {"otdd --source " + xa + " --source-label-column 7 --target " + xa + " --target-labels " + la + out,
       {"7"}},
      {"otdd --source " + path("missing.npy") + " --source-labels " + la + " --target " + xa +
           " --target-labels " + la + out,
       {"missing.npy"}},
      {"otdd --source " + xa + " --source-labels " + la + " --target " + xa + " --target-labels " + la +
           " --kernel fastest" + out,
       {"--kernel", "fastest"}},
      {"otdd --source " + xa + " --source-labels " + la + " --target " + xa + " --target-labels " + la +
           " --backend cpu --kernel gemm-fp64" + out,
       {"gemm-fp64", "CPU"}},
  };
  for (const BadCase& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    for (const std::string& e : c.expected) EXPECT_NE(r.err.find(e), std::string::npos) << r.err;
    EXPECT_TRUE(list_dir(out_dir_).empty()) << c.args;
  }
}

}  // namespace
