// The CUDA engine's dispatch table (lib/cuda/dispatch.cpp) as plain C++: every kAuto entry and
// the refusals of forced families, without a GPU (the kernels themselves are run by the
// conformance suite, tests/oracles, each entry forced once on a GPU).
#include <gtest/gtest.h>

#include <string>

#include "kantor/config.hpp"
#include "kantor/error.hpp"

#if KANTOR_CUDA_ENABLED
#include "lib/cuda/dispatch.hpp"

namespace kantor::cuda {
namespace {

PassTraits pass(Precision p, int d, bool labels = false, bool list = false) {
  PassTraits t;
  t.precision = p;
  t.dim = d;
  t.label_cost = labels;
  t.block_list = list;
  return t;
}

LseFamily pick(const PassTraits& t) { return dispatch_lse(t, KernelChoice::kAuto).family; }

TEST(CudaDispatchTable, EveryAutoEntry) {
  // fp64: always exact differences.
  EXPECT_EQ(pick(pass(Precision::kFp64, 3)), LseFamily::kExact);
  EXPECT_EQ(pick(pass(Precision::kFp64, 784, true)), LseFamily::kExact);
  // fp32: exact differences up to d = 16 (dense), for label costs and for block lists above
  // d = 8; the expanded kernel for block lists at d <= 8; float64 score blocks above d = 16 (the
  // float32 GEMM expansions are opt-in).
  EXPECT_EQ(pick(pass(Precision::kFp32, 3)), LseFamily::kExact);
  EXPECT_EQ(pick(pass(Precision::kFp32, 8)), LseFamily::kExact);
  EXPECT_EQ(pick(pass(Precision::kFp32, 16)), LseFamily::kExact);
  EXPECT_EQ(pick(pass(Precision::kFp32, 16, true)), LseFamily::kExact);
  EXPECT_EQ(pick(pass(Precision::kFp32, 1, false, true)), LseFamily::kExpanded);
  EXPECT_EQ(pick(pass(Precision::kFp32, 3, false, true)), LseFamily::kExpanded);
  EXPECT_EQ(pick(pass(Precision::kFp32, 8, false, true)), LseFamily::kExpanded);
  EXPECT_EQ(pick(pass(Precision::kFp32, 9, false, true)), LseFamily::kExact);
  EXPECT_EQ(pick(pass(Precision::kFp32, 3, true, true)), LseFamily::kExact);
  EXPECT_EQ(pick(pass(Precision::kFp64, 3, false, true)), LseFamily::kExact);
  EXPECT_EQ(pick(pass(Precision::kTf32, 3, false, true)), LseFamily::kMma);
  EXPECT_EQ(pick(pass(Precision::kFp32, 17)), LseFamily::kGemmFp64);
  EXPECT_EQ(pick(pass(Precision::kFp32, 784)), LseFamily::kGemmFp64);
  EXPECT_EQ(pick(pass(Precision::kFp32, 784, true)), LseFamily::kGemmFp64);
  EXPECT_EQ(pick(pass(Precision::kFp32, 784, false, true)), LseFamily::kExact);
  EXPECT_EQ(pick(pass(Precision::kFp32, 17, true, true)), LseFamily::kExact);
  // tf32: mma up to 64, chunked at padded 96, cuBLAS from 128 (labels included there).
  EXPECT_EQ(pick(pass(Precision::kTf32, 64)), LseFamily::kMma);
  EXPECT_EQ(pick(pass(Precision::kTf32, 64, true, true)), LseFamily::kMma);
  EXPECT_EQ(pick(pass(Precision::kTf32, 80)), LseFamily::kTf32Chunked);
  EXPECT_EQ(pick(pass(Precision::kTf32, 80, true)), LseFamily::kExact);
  EXPECT_EQ(pick(pass(Precision::kTf32, 130)), LseFamily::kGemm);
  EXPECT_EQ(pick(pass(Precision::kTf32, 784, true)), LseFamily::kGemm);
  EXPECT_EQ(pick(pass(Precision::kTf32, 784, false, true)), LseFamily::kExact);
  // bf16: mma up to 128, refused above.
  EXPECT_EQ(pick(pass(Precision::kBf16, 128)), LseFamily::kMma);
  EXPECT_THROW(pick(pass(Precision::kBf16, 129)), InvalidArgument);
  // Every entry says why.
  EXPECT_FALSE(dispatch_lse(pass(Precision::kFp32, 784), KernelChoice::kAuto).why.empty());
}

TEST(CudaDispatchTable, ForcedFamiliesAreCheckedWithTheReason) {
  // Forced families the pass can take: served as asked.
  struct Served {
    PassTraits pass;
    KernelChoice choice;
    LseFamily family;
  };
  for (const Served& c : {Served{pass(Precision::kFp32, 3), KernelChoice::kGemm3xTf32, LseFamily::kGemm3xTf32},
                          Served{pass(Precision::kFp32, 784), KernelChoice::kExact, LseFamily::kExact},
                          Served{pass(Precision::kFp32, 3, true), KernelChoice::kGemmFp32, LseFamily::kGemmFp32},
                          Served{pass(Precision::kFp32, 784, true), KernelChoice::kGemmFp64, LseFamily::kGemmFp64},
                          Served{pass(Precision::kFp32, 3), KernelChoice::kExpanded, LseFamily::kExpanded},
                          Served{pass(Precision::kFp32, 8, false, true), KernelChoice::kExpanded, LseFamily::kExpanded},
                          Served{pass(Precision::kFp32, 3, false, true), KernelChoice::kExact, LseFamily::kExact}})
    EXPECT_EQ(dispatch_lse(c.pass, c.choice).family, c.family) << kantor::to_string(c.choice);
  // Forced families the pass cannot take: refused, the message says why.
  struct Refused {
    PassTraits pass;
    KernelChoice choice;
    const char* why;
  };
  for (const Refused& c :
       {Refused{pass(Precision::kTf32, 130), KernelChoice::kGemm3xTf32, "needs precision fp32"},
        Refused{pass(Precision::kFp32, 130, false, true), KernelChoice::kGemm3xTf32, "dense score blocks only"},
        Refused{pass(Precision::kFp32, 130), KernelChoice::kGemm, "needs precision tf32"},
        Refused{pass(Precision::kTf32, 130), KernelChoice::kGemmFp32, "needs precision fp32"},
        Refused{pass(Precision::kFp64, 784), KernelChoice::kGemmFp64, "needs precision fp32"},
        Refused{pass(Precision::kFp32, 784, false, true), KernelChoice::kGemmFp64, "dense score blocks only"},
        Refused{pass(Precision::kFp32, 3), KernelChoice::kMma, "tf32 or bf16"},
        Refused{pass(Precision::kTf32, 3), KernelChoice::kExpanded, "needs precision fp32"},
        Refused{pass(Precision::kFp64, 3), KernelChoice::kExpanded, "needs precision fp32"},
        Refused{pass(Precision::kFp32, 9, false, true), KernelChoice::kExpanded, "d <= 8"},
        Refused{pass(Precision::kFp32, 3, true, true), KernelChoice::kExpanded, "no label pair term"}}) {
    std::string what;
    try {
      (void)dispatch_lse(c.pass, c.choice);
    } catch (const InvalidArgument& e) {
      what = e.what();
    }
    EXPECT_NE(what.find(c.why), std::string::npos) << kantor::to_string(c.choice) << ": '" << what << "'";
  }
}

}  // namespace
}  // namespace kantor::cuda
#endif
