// Typed exceptions for caller mistakes and environment failures (docs/architecture.md, Errors).
// Numerical outcomes (non-convergence, NaN in potentials) are never exceptions: they are
// reported in a Summary.
#pragma once

#include <stdexcept>
#include <string>

namespace kantor {

/// Base of every exception kantor throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A caller-supplied argument is invalid; the message names it, its value and what was expected.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// The feature needs a component this build does not contain (e.g. CUDA in a CPU-only build).
class NotCompiled : public Error {
 public:
  using Error::Error;
};

/// The backend was compiled in but cannot run here (e.g. no CUDA device visible).
class BackendUnavailable : public Error {
 public:
  using Error::Error;
};

/// A CUDA runtime or cuBLAS call failed.
class CudaError : public Error {
 public:
  using Error::Error;
};

/// A file could not be read or written, or its content is malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

/// An allocation (host or device) failed: the problem is too large for the available memory.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

/// A number as error messages print it: up to 10 significant digits, shortest form ("0", "-1",
/// "1.5", "1e-09", "nan", "inf"), never std::to_string's fixed 6 decimals (which shows 1e-9 as
/// "0.000000").
std::string format_number(double v);

}  // namespace kantor
