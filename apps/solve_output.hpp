// kantor solve's outputs: the files it writes (potentials, barycentric map), checked before the
// work and written all-or-nothing through temporaries.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kantor {
struct BlockList;
struct IterationRecord;
}

namespace kantor::cli {

/// The block mask of a multiscale solve (rows: source points, columns: target points, both in
/// Morton order; kept = the fraction of pairs it holds) as an SVG raster of at most 240 x 240
/// pixels, each shaded by the fraction of its tiles that the truncated passes scan.
std::string mask_svg(const BlockList& list, std::int64_t n, std::int64_t m, double kept,
                     const std::string& title);

/// A solve's iteration records as a JSON array of [iteration, seconds, eps, engine residual,
/// certified error or null, dual cost or null] (`digits` significant digits): `kantor otdd`'s
/// converged_records and `kantor bench solve --phases`'s records.
std::string records_json(const std::vector<IterationRecord>& records, int digits);

struct PotentialPaths {
  std::string f, g;
};

/// PREFIX -> PREFIX_f.npy, PREFIX_g.npy; a PREFIX ending in .npy or .csv picks that format
/// (pot.csv -> pot_f.csv, pot_g.csv).
PotentialPaths potential_paths(const std::string& prefix);

struct OutputFile {
  std::string option;  // "--output-map", for messages
  std::string path;
  std::vector<std::int64_t> shape;
  std::vector<double> data;
  bool float32 = false;
};

/// Writes every file to its temporary name first and renames them into place only once all were
/// written (details in the definition).
void write_outputs(const std::vector<OutputFile>& files);

/// Every output file, checked before any work: writable, no two outputs naming the same file, no
/// output naming an input file. Pairs are (option, path).
void check_outputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                   const std::vector<std::pair<std::string, std::string>>& inputs);

template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace kantor::cli
