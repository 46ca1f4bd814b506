// kantor solve's outputs (apps/solve_output.hpp).
#include "apps/solve_output.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kantor/error.hpp"
#include "kantor/io.hpp"
#include "kantor/oracle.hpp"
#include "kantor/sinkhorn.hpp"

namespace kantor::cli {

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
        throw InvalidArgument(outputs[i].first + " '" + outputs[i].second + "' is the input file " +
                              in.first + " '" + in.second +
                              "' (writing it would replace the input; choose another name)");
  }
}

std::string records_json(const std::vector<IterationRecord>& records, int digits) {
  std::ostringstream rs;
  rs.precision(digits);
  auto number = [&](double v) {
    if (std::isfinite(v))
      rs << v;
    else
      rs << "null";
  };
  rs << "[";
  for (std::size_t k = 0; k < records.size(); ++k) {
    const IterationRecord& r = records[k];
    rs << (k ? ", " : "") << "[" << r.iteration << ", " << r.seconds << ", " << r.epsilon << ", ";
    number(r.marginal_error);
    rs << ", ";
    number(r.certified_error);
    rs << ", ";
    number(r.dual_cost);
    rs << "]";
  }
  rs << "]";
  return rs.str();
}

// The block mask of a multiscale solve (rows: source points, columns: target points, both in
/// Morton order) as an SVG raster of at most 240 x 240 pixels, each shaded by the fraction of its
/// tiles that the truncated passes scan.
std::string mask_svg(const BlockList& list, std::int64_t n, std::int64_t m, double kept,
                     const std::string& title) {
  const std::int64_t rt = (n + list.row_tile - 1) / list.row_tile;
  const std::int64_t kt = (m + list.key_tile - 1) / list.key_tile;
  const std::int64_t gr = std::min<std::int64_t>(rt, 240), gk = std::min<std::int64_t>(kt, 240);
  std::vector<double> px(static_cast<std::size_t>(gr * gk), 0.0);
  for (std::int64_t r = 0; r < rt; ++r)
    for (std::int64_t q = list.run_ptr[std::size_t(r)]; q < list.run_ptr[std::size_t(r + 1)]; ++q)
      for (std::int64_t t = list.runs[std::size_t(2 * q)];
           t < std::min<std::int64_t>(kt, list.runs[std::size_t(2 * q + 1)]); ++t)
        px[std::size_t((r * gr / rt) * gk + t * gk / kt)] += 1.0;
  const double per_px = double(rt) / double(gr) * double(kt) / double(gk);
  const double cell = 2.5, left = 40, top = 50, w = cell * double(gk), h = cell * double(gr);
  std::ostringstream os;
  os.precision(4);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << std::max(left + w + 20, 780.0)
     << "\" height=\""
     << top + h + 50 << "\" font-family=\"sans-serif\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"10\" y=\"20\" font-size=\"13\">" << title << "</text>\n"
     << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << w << "\" height=\"" << h
     << "\" fill=\"none\" stroke=\"#888\"/>\n";
  // Shades quantized to 9 levels; runs of one shade along a row drawn as one rectangle.
  auto shade_of = [&](std::int64_t i, std::int64_t j) {
    const double v = std::min(1.0, px[std::size_t(i * gk + j)] / per_px);
    return v <= 0 ? -1 : int(std::lround(8 * (1 - v))) * 25;
  };
  for (std::int64_t i = 0; i < gr; ++i)
    for (std::int64_t j = 0; j < gk;) {
      const int shade = shade_of(i, j);
      std::int64_t e = j + 1;
      while (e < gk && shade_of(i, e) == shade) ++e;
      if (shade >= 0)
        os << "<rect x=\"" << left + double(j) * cell << "\" y=\"" << top + double(i) * cell
           << "\" width=\"" << cell * double(e - j) << "\" height=\"" << cell << "\" fill=\"rgb("
           << shade << "," << shade << "," << shade << ")\"/>\n";
      j = e;
    }
  os << "<text x=\"" << left << "\" y=\"" << top - 8
     << "\" font-size=\"11\">target points (Morton order) &#8594;</text>\n"
     << "<text x=\"" << left - 8 << "\" y=\"" << top + h / 2
     << "\" font-size=\"11\" transform=\"rotate(-90 " << left - 8 << " " << top + h / 2
     << ")\" text-anchor=\"middle\">source points (Morton order)</text>\n"
     << "<text x=\"" << left << "\" y=\"" << top + h + 22 << "\" font-size=\"11\">dark: tiles of "
     << list.row_tile << " x " << list.key_tile << " pairs the truncated passes scan ("
     << 100 * kept << "% of all pairs); white: pairs provably below the threshold</text>\n"
     << "</svg>\n";
  return os.str();
}

}  // namespace kantor::cli
