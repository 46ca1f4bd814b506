// kantor solve's outputs (apps/solve_output.hpp).
#include "apps/solve_output.hpp"

#include <string>
#include <vector>

#include "kantor/error.hpp"
#include "kantor/io.hpp"

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

}  // namespace kantor::cli
