// Entropic OT between two point clouds with the public API: read (or make) the clouds, solve,
// print the summary, save the potentials. Usage: solve_point_clouds [x.npy y.npy [epsilon]]
#include <cmath>
#include <cstdio>
#include <exception>
#include <kantor/io.hpp>
#include <kantor/kantor.hpp>
#include <string>

int main(int argc, char** argv) try {
  kantor::io::Array x, y;
  if (argc >= 3) {  // .npy or .csv files of shape (n, d) and (m, d)
    x = kantor::io::read_matrix(argv[1], "x");
    y = kantor::io::read_matrix(argv[2], "y");
  } else {  // two small clouds on circles of radius 1 and 2
    for (int i = 0; i < 200; ++i)
      x.data.insert(x.data.end(), {std::cos(i * 0.1), std::sin(i * 0.1)});
    for (int j = 0; j < 300; ++j)
      y.data.insert(y.data.end(), {2 * std::cos(j * 0.07), 2 * std::sin(j * 0.07)});
    x.shape = {200, 2};
    y.shape = {300, 2};
  }
  kantor::Problem<double> problem;  // uniform weights, cost |x - y|^2
  problem.features().x = kantor::host_matrix<const double>(x.data.data(), x.rows(), x.cols());
  problem.features().y = kantor::host_matrix<const double>(y.data.data(), y.rows(), y.cols());
  problem.epsilon = argc >= 4 ? std::stod(argv[3]) : 0.05;

  kantor::Context ctx({kantor::Backend::kAuto});  // CUDA when available, else CPU
  kantor::SinkhornOptions options;                // alternating, eps-annealing, tol 1e-9
  kantor::Potentials<double> potentials;
  const kantor::SinkhornSummary summary =
      kantor::solve_sinkhorn(ctx, problem, options, &potentials);
  std::printf("%s\n", summary.full_report().c_str());

  const auto f = kantor::to_host(ctx, potentials.f.cview());
  kantor::io::write_array("potential_f.npy", {std::int64_t(f.size())}, f.data());
  return summary.converged() ? 0 : 1;
} catch (const std::exception& e) {  // kantor::Error (bad file, bad argument) and others
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
