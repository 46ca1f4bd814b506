// Build options and visible devices (for `kantor info` and bug reports).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kantor {

struct BuildInfo {
  std::string version;
  bool cuda_compiled = false;
  std::string cuda_architectures;  ///< e.g. "80;90", empty without CUDA
  std::string compiler;
};
BuildInfo build_info();

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  std::int64_t memory_bytes = 0;
};
/// Visible CUDA devices; empty in a CPU-only build or when no device/driver is present.
std::vector<DeviceInfo> cuda_devices();

}  // namespace kantor
