// The CUDA point-cloud engine is not written yet (open issue "CUDA engine"): until it lands, a
// CUDA context asked for a point-cloud oracle says so plainly instead of running something else.
#include "kantor/error.hpp"
#include "oracles/cuda/cuda_oracle.hpp"

namespace kantor {

template <class T>
std::unique_ptr<Oracle<T>> make_cuda_oracle(const Context&, const Problem<T>&, Precision) {
  throw BackendUnavailable(
      "the CUDA point-cloud Sinkhorn engine is not implemented in this version; use --backend cpu");
}

template std::unique_ptr<Oracle<float>> make_cuda_oracle(const Context&, const Problem<float>&,
                                                         Precision);
template std::unique_ptr<Oracle<double>> make_cuda_oracle(const Context&, const Problem<double>&,
                                                          Precision);

}  // namespace kantor
