// The library's huge page advice for large host blocks (kantor/uninit_vector.hpp): an
// UninitVector and a host Buffer of 8 MiB carry it over their 2 MiB-aligned interior, before
// their first write; the advice itself covers whole 2 MiB pages inside its range only.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>

#include "kantor/buffer.hpp"
#include "kantor/context.hpp"
#include "kantor/uninit_vector.hpp"
#include "support/host_pages.hpp"

namespace kantor {
namespace {

// The first 2 MiB boundary at least 2 MiB into a block (inside its aligned interior).
const void* interior(const void* p) {
  constexpr std::uintptr_t kHuge = std::uintptr_t(2) << 20;
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  return reinterpret_cast<const void*>((a + kHuge - 1) / kHuge * kHuge + kHuge);
}

TEST(HostMemory, LargeUninitVectorsAreAdvisedOntoHugePages) {
  const std::string why = test::huge_page_advice_unobservable();
  if (!why.empty()) GTEST_SKIP() << why;
  detail::UninitVector<double> v(std::size_t(1) << 20);  // 8 MiB, never written
  EXPECT_TRUE(test::huge_page_advised(interior(v.data())));
}

TEST(HostMemory, LargeHostBuffersAreAdvisedOntoHugePages) {
  const std::string why = test::huge_page_advice_unobservable();
  if (!why.empty()) GTEST_SKIP() << why;
  Context ctx(ContextOptions{Backend::kCpu, 1});
  Buffer<double> b(ctx, std::int64_t(1) << 20);
  ASSERT_EQ(b.space(), MemorySpace::kHost);
  EXPECT_TRUE(test::huge_page_advised(interior(b.data())));
}

TEST(HostMemory, TheAdviceCoversTheAlignedInteriorOnly) {
  const std::string why = test::huge_page_advice_unobservable();
  if (!why.empty()) GTEST_SKIP() << why;
  // An anonymous mapping of its own (no neighbour's advice): 4 x 2 MiB, advised from 1 MiB past
  // its first 2 MiB boundary for 4 MiB; only the 2 MiB page after that boundary lies inside.
  constexpr std::size_t kHuge = std::size_t(2) << 20;
  void* map = mmap(nullptr, 4 * kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  char* base = reinterpret_cast<char*>(
      (reinterpret_cast<std::uintptr_t>(map) + kHuge - 1) / kHuge * kHuge);
  detail::advise_huge_pages(base + kHuge / 2, 2 * kHuge);
  EXPECT_FALSE(test::huge_page_advised(base));
  EXPECT_FALSE(test::huge_page_advised(base + 3 * kHuge / 4));  // advised range, partial page
  EXPECT_TRUE(test::huge_page_advised(base + kHuge));
  EXPECT_FALSE(test::huge_page_advised(base + 2 * kHuge + kHuge / 4));
  munmap(map, 4 * kHuge);
}

}  // namespace
}  // namespace kantor
