// An outside project using an installed kantor through find_package(kantor).
#include <kantor/io.hpp>
#include <kantor/kantor.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  // The 2x2 closed form: a = b = (1/2, 1/2), C = [[0,1],[1,0]], eps = 1 -> <P,C> = 1/(1+e).
  std::vector<double> x = {0.0, 1.0}, y = {0.0, 1.0};
  kantor::Problem<double> p;
  p.features().x = kantor::host_matrix<const double>(x.data(), 2, 1);
  p.features().y = kantor::host_matrix<const double>(y.data(), 2, 1);
  p.epsilon = 1.0;
  kantor::Context ctx({kantor::Backend::kCpu});
  kantor::SinkhornOptions options;
  const auto s = kantor::solve_sinkhorn(ctx, p, options);
  const double expected = 1.0 / (1.0 + std::exp(1.0));
  std::printf("%s\nprimal %.17g expected %.17g\n", s.brief_report().c_str(), s.primal_cost,
              expected);
  // The file-format library (kantor::io): a round trip through .npy.
  kantor::io::write_array("consumer_x.npy", {2, 1}, x.data());
  const kantor::io::Array back = kantor::io::read_matrix("consumer_x.npy", "x");
  const bool io_ok = back.data == x;
  return s.converged() && std::abs(s.primal_cost - expected) < 1e-9 && io_ok ? 0 : 1;
}
