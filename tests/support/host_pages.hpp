// Whether the kernel holds the transparent huge page advice (madvise MADV_HUGEPAGE) for an
// address: the "hg" flag of its mapping's VmFlags in /proc/self/smaps (Linux). For the tests of
// the host memory advice (kantor/uninit_vector.hpp, apps/host_memory.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kantor::test {

/// Why the advice cannot be observed here ("" when it can): no /proc/self/smaps, a kernel
/// without transparent huge pages, or glibc advising its heap itself (GLIBC_TUNABLES with
/// glibc.malloc.hugetlb: every block would carry the advice, ours or not).
inline std::string huge_page_advice_unobservable() {
  if (!std::ifstream("/proc/self/smaps")) return "no /proc/self/smaps";
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled"))
    return "the kernel has no transparent huge pages";
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::string(tunables).find("glibc.malloc.hugetlb") != std::string::npos)
    return "GLIBC_TUNABLES sets glibc.malloc.hugetlb (glibc advises every heap block)";
  return "";
}

/// Whether the mapping that contains `p` carries the huge page advice (VmFlags "hg").
inline bool huge_page_advised(const void* p) {
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    // A mapping's header: "lo-hi perms offset dev inode [path]" (hex addresses).
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) {
      std::istringstream flags(line.substr(8));
      std::string f;
      while (flags >> f)
        if (f == "hg") return true;
      return false;
    }
  }
  return false;
}

}  // namespace kantor::test
