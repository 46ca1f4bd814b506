// make_oracle: the one switch on (backend, geometry, precision).
#include <type_traits>

#include "kantor/config.hpp"
#include "kantor/error.hpp"
#include "kantor/oracle.hpp"
#include "lib/core/kernel_check.hpp"
#include "oracles/cpu/cpu_oracle.hpp"
#include "oracles/cuda/cuda_oracle.hpp"

namespace kantor {

template <class T>
std::unique_ptr<Oracle<T>> make_oracle(const Context& ctx, const Problem<T>& problem,
                                       Precision precision) {
  return make_oracle(ctx, problem, precision, ctx.kernel());
}

namespace {

template <class T>
std::unique_ptr<Oracle<T>> make(const Context& ctx, const Problem<T>& problem, Precision precision,
                                KernelChoice kernel, bool clouds_checked) {
  constexpr bool is_double = std::is_same<T, double>::value;
  if (precision == Precision::kFp64 && !is_double)
    throw InvalidArgument("precision fp64 needs double data (Problem<double>)");
  if (precision != Precision::kFp64 && is_double)
    throw InvalidArgument("precision " + to_string(precision) +
                          " needs float data (Problem<float>); double data runs in fp64");
  if (ctx.backend() == Backend::kCuda) {
#if KANTOR_CUDA_ENABLED
    return make_cuda_oracle(ctx, problem, precision, kernel, clouds_checked);
#else
    throw NotCompiled("this kantor build has no CUDA engine");
#endif
  }
  if (precision == Precision::kTf32 || precision == Precision::kBf16)
    throw InvalidArgument("precision " + to_string(precision) +
                          " uses tensor cores and needs the CUDA engine (backend cuda); the CPU "
                          "engine runs fp32 or fp64");
  detail::require_cpu_kernel(kernel, "make_oracle: kernel");
  return make_cpu_oracle(ctx, problem, precision, clouds_checked);
}

}  // namespace

template <class T>
std::unique_ptr<Oracle<T>> make_oracle(const Context& ctx, const Problem<T>& problem,
                                       Precision precision, KernelChoice kernel) {
  return make(ctx, problem, precision, kernel, false);
}

namespace detail {
template <class T>
std::unique_ptr<Oracle<T>> make_oracle_clouds_checked(const Context& ctx, const Problem<T>& problem,
                                                      Precision precision) {
  return make(ctx, problem, precision, ctx.kernel(), true);
}
template std::unique_ptr<Oracle<float>> make_oracle_clouds_checked(const Context&,
                                                                   const Problem<float>&,
                                                                   Precision);
template std::unique_ptr<Oracle<double>> make_oracle_clouds_checked(const Context&,
                                                                    const Problem<double>&,
                                                                    Precision);
}  // namespace detail

template std::unique_ptr<Oracle<float>> make_oracle(const Context&, const Problem<float>&,
                                                    Precision);
template std::unique_ptr<Oracle<double>> make_oracle(const Context&, const Problem<double>&,
                                                     Precision);
template std::unique_ptr<Oracle<float>> make_oracle(const Context&, const Problem<float>&,
                                                    Precision, KernelChoice);
template std::unique_ptr<Oracle<double>> make_oracle(const Context&, const Problem<double>&,
                                                     Precision, KernelChoice);

}  // namespace kantor
