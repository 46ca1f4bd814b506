// Context: backend resolution (cpu, auto -> cpu with a note, cuda without CUDA or without a
// device), thread counts, option errors; build info consistent with the build.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "kantor/config.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"

namespace kantor {
namespace {

TEST(Context, CpuBackend) {
  Context ctx(ContextOptions{Backend::kCpu, 3});
  EXPECT_EQ(ctx.backend(), Backend::kCpu);
  EXPECT_EQ(ctx.memory_space(), MemorySpace::kHost);
  EXPECT_EQ(ctx.threads(), 3);
  EXPECT_EQ(ctx.cuda_stream(), nullptr);
  EXPECT_EQ(ctx.backend_note(), "requested cpu");
  EXPECT_NO_THROW(ctx.synchronize());
}

TEST(Context, DefaultThreadsAreTheHardwareThreads) {
  Context ctx(ContextOptions{Backend::kCpu, 0});
  const unsigned hw = std::thread::hardware_concurrency();
  EXPECT_EQ(ctx.threads(), int(hw > 0 ? hw : 1));
}

TEST(Context, AutoFallsBackToCpuWithANote) {
  if (!cuda_devices().empty()) GTEST_SKIP() << "a CUDA device is visible: auto picks cuda";
  Context ctx(ContextOptions{Backend::kAuto});
  EXPECT_EQ(ctx.backend(), Backend::kCpu);
  EXPECT_EQ(ctx.memory_space(), MemorySpace::kHost);
  const std::string& note = ctx.backend_note();
  EXPECT_EQ(note.rfind("auto:", 0), 0u) << note;
  EXPECT_NE(note.find("using cpu"), std::string::npos) << note;
#if !KANTOR_CUDA_ENABLED
  EXPECT_NE(note.find("without CUDA"), std::string::npos) << note;
#else
  EXPECT_NE(note.find("no CUDA device"), std::string::npos) << note;
#endif
}

TEST(Context, CudaWithoutCudaOrDevice) {
#if !KANTOR_CUDA_ENABLED
  EXPECT_THROW(Context(ContextOptions{Backend::kCuda}), NotCompiled);
  EXPECT_FALSE(build_info().cuda_compiled);
  EXPECT_TRUE(build_info().cuda_architectures.empty());
  EXPECT_TRUE(cuda_devices().empty());
#else
  EXPECT_TRUE(build_info().cuda_compiled);
  if (!cuda_devices().empty()) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_THROW(Context(ContextOptions{Backend::kCuda}), BackendUnavailable);
#endif
}

TEST(Context, CudaDeviceOrdinalOutOfRange) {
#if KANTOR_CUDA_ENABLED
  const int count = int(cuda_devices().size());
  if (count == 0) GTEST_SKIP() << "no CUDA device visible";
  ContextOptions o{Backend::kCuda};
  o.device = count;
  EXPECT_THROW(Context{o}, BackendUnavailable);
#else
  GTEST_SKIP() << "CPU-only build: covered by CudaWithoutCudaOrDevice";
#endif
}

TEST(Context, InvalidOptions) {
  EXPECT_THROW(Context(ContextOptions{Backend::kCpu, -1}), InvalidArgument);
  ContextOptions o{Backend::kCpu};
  o.device = -2;
  EXPECT_THROW(Context{o}, InvalidArgument);
}

TEST(Context, CpuEngineRefusesCudaKernelFamilies) {
  for (KernelChoice k : {KernelChoice::kMma, KernelChoice::kTf32Chunked, KernelChoice::kGemm,
                         KernelChoice::kGemm3xTf32}) {
    ContextOptions o;
    o.backend = Backend::kCpu;
    o.kernel = k;
    try {
      Context c(o);
      ADD_FAILURE() << to_string(k) << " accepted on the CPU engine";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(to_string(k)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("CPU"), std::string::npos) << e.what();
    }
  }
  for (KernelChoice k : {KernelChoice::kAuto, KernelChoice::kExact}) {
    ContextOptions o;
    o.backend = Backend::kCpu;
    o.kernel = k;
    EXPECT_EQ(Context(o).kernel(), k);
  }
}

TEST(Context, MoveKeepsTheState) {
  Context a(ContextOptions{Backend::kCpu, 2});
  Context b(std::move(a));
  EXPECT_EQ(b.backend(), Backend::kCpu);
  EXPECT_EQ(b.threads(), 2);
  Context c(ContextOptions{Backend::kCpu, 1});
  c = std::move(b);
  EXPECT_EQ(c.threads(), 2);
}

TEST(BuildInfo, VersionAndCompiler) {
  const BuildInfo b = build_info();
  EXPECT_EQ(b.version, KANTOR_VERSION_STRING);
  EXPECT_FALSE(b.compiler.empty());
  EXPECT_EQ(b.cuda_compiled, KANTOR_CUDA_ENABLED != 0);
}

}  // namespace
}  // namespace kantor
