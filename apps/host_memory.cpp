// The kantor executable's global operator new: large blocks are advised onto transparent huge
// pages before their first write (docs/architecture.md, "Host memory in the CLI"). A first solve
// writes some hundreds of MB of fresh host memory at 2^20 points a side, much of it in
// std::vector blocks the library's own advice (kantor/uninit_vector.hpp, host Buffers) does not
// reach; on 4 KiB pages that is one page fault per 4 KiB. Replacing the global allocation
// functions is the executable's choice, not the library's: a program that links libkantor keeps
// its own allocator (or sets glibc.malloc.hugetlb=1 in GLIBC_TUNABLES, which does the same for
// every block glibc maps).
//
// Not under AddressSanitizer, whose own operator new checks new/delete pairing.
#include <cstddef>
#include <cstdlib>
#include <new>

#include "kantor/uninit_vector.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KANTOR_HOST_MEMORY_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KANTOR_HOST_MEMORY_ASAN 1
#endif

#if !defined(KANTOR_HOST_MEMORY_ASAN)

void* operator new(std::size_t bytes) {
  for (;;) {
    if (void* p = std::malloc(bytes ? bytes : 1)) {
      if (bytes >= kantor::detail::kHugePageAdviceBytes)
        kantor::detail::advise_huge_pages(p, bytes);
      return p;
    }
    // The standard's loop: the installed handler frees memory or throws; none left, bad_alloc.
    const std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
}

void* operator new[](std::size_t bytes) { return ::operator new(bytes); }

void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(bytes);
  } catch (...) {
    return nullptr;
  }
}

void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept {
  return ::operator new(bytes, std::nothrow);
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

#endif
