// The kantor executable's operator new (apps/host_memory.cpp, linked into this test binary as
// into the executable): a block of 8 MiB from new carries the huge page advice over its aligned
// interior before its first write. Compiled out under AddressSanitizer (its own operator new).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "support/host_pages.hpp"

namespace kantor {
namespace {

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KANTOR_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KANTOR_TEST_ASAN 1
#endif

const void* interior(const void* p) {
  constexpr std::uintptr_t kHuge = std::uintptr_t(2) << 20;
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  return reinterpret_cast<const void*>((a + kHuge - 1) / kHuge * kHuge + kHuge);
}

TEST(CliHostMemory, LargeBlocksFromNewAreAdvisedOntoHugePages) {
#if defined(KANTOR_TEST_ASAN)
  GTEST_SKIP() << "under AddressSanitizer the executable keeps the sanitizer's operator new";
#endif
  const std::string why = test::huge_page_advice_unobservable();
  if (!why.empty()) GTEST_SKIP() << why;
  // new[] and a std::vector's allocator (operator new), neither written yet.
  const std::unique_ptr<double[]> a(new double[std::size_t(1) << 20]);
  EXPECT_TRUE(test::huge_page_advised(interior(a.get())));
  std::vector<std::int64_t> v;
  v.reserve(std::size_t(1) << 20);
  EXPECT_TRUE(test::huge_page_advised(interior(v.data())));
}

}  // namespace
}  // namespace kantor
