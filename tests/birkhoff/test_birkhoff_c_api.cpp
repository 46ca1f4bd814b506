// The C API (include/kantor/birkhoff_c.h) without a GPU: argument errors are reported before any
// CUDA call (status code and a message naming the argument, on every build and machine); what a
// CPU-only build or a machine without a device answers for valid arguments; the defaults; the
// last error per thread. Results, streams and stats on a device: CudaBirkhoff in test_birkhoff.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "kantor/birkhoff.hpp"
#include "kantor/birkhoff_c.h"
#include "kantor/config.hpp"
#include "kantor/info.hpp"

namespace kantor {
namespace {

bool cuda_available() { return KANTOR_CUDA_ENABLED && !cuda_devices().empty(); }

// Stand-ins for device pointers. Never dereferenced: every call that gets them with valid
// arguments is made only where no device can run it (the argument checks come first).
float g_fake[64];
void* const kFake = g_fake;

kantor_birkhoff_options defaults() {
  kantor_birkhoff_options o;
  kantor_birkhoff_default_options(&o);
  return o;
}

// `status` is `want` and the last error holds every part.
void expect_error(kantor_status status, kantor_status want, const std::vector<std::string>& parts,
                  const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(status, want) << kantor_birkhoff_last_error();
  const std::string message = kantor_birkhoff_last_error();
  EXPECT_FALSE(message.empty());
  for (const std::string& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << "expected '" << p << "' in: " << message;
}

constexpr kantor_status kBad = KANTOR_STATUS_INVALID_ARGUMENT;

TEST(CpuBirkhoffCApi, ForwardArgumentErrorsNameTheArgument) {
  const kantor_birkhoff_options o = defaults();
  const kantor_dtype f32 = KANTOR_DTYPE_FLOAT32, bf16 = KANTOR_DTYPE_BFLOAT16;
  expect_error(kantor_birkhoff_forward(nullptr, kFake, 3, 4, f32, &o, nullptr, nullptr), kBad,
               {"logits is null but the batch is not empty"}, "null logits");
  expect_error(kantor_birkhoff_forward(kFake, nullptr, 3, 4, bf16, &o, nullptr, nullptr), kBad,
               {"out is null but the batch is not empty"}, "null out (bf16)");
  kantor_birkhoff_stats st;
  expect_error(kantor_birkhoff_forward(nullptr, kFake, 3, 4, f32, &o, nullptr, &st), kBad,
               {"logits is null"}, "null logits, with stats");
  for (const int n : {-1, 0, 1, 17, 1000})
    expect_error(kantor_birkhoff_forward(kFake, kFake, 1, n, f32, &o, nullptr, nullptr), kBad,
                 {"n = " + std::to_string(n), "2..16"}, "n = " + std::to_string(n));
  expect_error(kantor_birkhoff_forward(kFake, kFake, -1, 4, f32, &o, nullptr, nullptr), kBad,
               {"batch must be >= 0, got -1"}, "negative batch");
  // batch * n * n elements must fit in 64 bits.
  expect_error(kantor_birkhoff_forward(kFake, kFake, std::int64_t(1) << 60, 16, f32, &o, nullptr,
                                       nullptr),
               kBad, {"is too large"}, "huge batch");
  expect_error(kantor_birkhoff_forward(kFake, kFake, 1, 4, kantor_dtype(7), &o, nullptr, nullptr),
               kBad, {"dtype must be KANTOR_DTYPE_FLOAT32 or KANTOR_DTYPE_BFLOAT16, got 7"},
               "dtype");
  for (const int m : {-1, 3}) {
    kantor_birkhoff_options b = o;
    b.method = m;
    expect_error(kantor_birkhoff_forward(kFake, kFake, 1, 4, f32, &b, nullptr, nullptr), kBad,
                 {"options.method must be 0 (newton), 1 (sinkhorn) or 2 (deepseek), got " +
                  std::to_string(m)},
                 "method " + std::to_string(m));
  }
  kantor_birkhoff_options b = o;
  b.method = KANTOR_BIRKHOFF_SINKHORN;
  b.iterations = -1;
  expect_error(kantor_birkhoff_forward(kFake, kFake, 1, 4, f32, &b, nullptr, nullptr), kBad,
               {"options: iterations must be in 0..10000 (0 = 20), got -1"}, "iterations");
  b = o;
  b.tolerance = std::nan("");
  expect_error(kantor_birkhoff_forward(kFake, kFake, 1, 4, f32, &b, nullptr, nullptr), kBad,
               {"options: tolerance must be finite and >= 0"}, "tolerance NaN");
  b.tolerance = -1e-3;
  expect_error(kantor_birkhoff_forward(kFake, kFake, 1, 4, f32, &b, nullptr, nullptr), kBad,
               {"options: tolerance must be finite and >= 0"}, "tolerance < 0");
  for (const int cap : {-5, 1001}) {
    b = o;
    b.max_newton_iterations = cap;
    expect_error(kantor_birkhoff_forward(kFake, kFake, 1, 4, f32, &b, nullptr, nullptr), kBad,
                 {"options: max_newton_iterations must be in 1..1000, got " + std::to_string(cap)},
                 "max_newton_iterations " + std::to_string(cap));
  }
  b = o;
  b.unrolled_gradient = 1;  // newton has no truncated map
  expect_error(kantor_birkhoff_forward(kFake, kFake, 1, 4, f32, &b, nullptr, nullptr), kBad,
               {"options: the unrolled gradient exists only for the truncated methods"},
               "unrolled newton");
}

TEST(CpuBirkhoffCApi, BackwardArgumentErrorsNameTheArgument) {
  const kantor_birkhoff_options o = defaults();
  const kantor_dtype f32 = KANTOR_DTYPE_FLOAT32;
  // Implicit gradient: P is needed (the logits may be NULL).
  expect_error(kantor_birkhoff_backward(nullptr, kFake, kFake, kFake, 2, 4, f32, &o, nullptr),
               kBad, {"project_birkhoff_backward: P is null"}, "implicit, null P");
  expect_error(kantor_birkhoff_backward(kFake, kFake, nullptr, kFake, 2, 4, f32, &o, nullptr),
               kBad, {"grad_P is null"}, "null grad_P");
  expect_error(kantor_birkhoff_backward(kFake, kFake, kFake, nullptr, 2, 4, f32, &o, nullptr),
               kBad, {"grad_logits is null"}, "null grad_logits");
  // Unrolled gradient: the logits are needed (P may be NULL).
  kantor_birkhoff_options u = o;
  u.method = KANTOR_BIRKHOFF_DEEPSEEK;
  u.unrolled_gradient = 1;
  expect_error(kantor_birkhoff_backward(kFake, nullptr, kFake, kFake, 2, 4, f32, &u, nullptr),
               kBad, {"logits (unrolled gradient) is null"}, "unrolled, null logits");
  expect_error(kantor_birkhoff_backward(kFake, kFake, kFake, kFake, 2, 17, KANTOR_DTYPE_BFLOAT16,
                                        &u, nullptr),
               kBad, {"n = 17", "2..16"}, "n = 17");
  expect_error(kantor_birkhoff_backward(kFake, kFake, kFake, kFake, -3, 4, f32, &u, nullptr), kBad,
               {"batch must be >= 0, got -3"}, "negative batch");
  u.method = 9;
  expect_error(kantor_birkhoff_backward(kFake, kFake, kFake, kFake, 2, 4, f32, &u, nullptr), kBad,
               {"options.method must be 0 (newton), 1 (sinkhorn) or 2 (deepseek), got 9"},
               "method 9");
  expect_error(kantor_birkhoff_backward(kFake, kFake, kFake, kFake, 2, 4, kantor_dtype(-1), &o,
                                        nullptr),
               kBad, {"dtype must be"}, "dtype -1");
}

TEST(CpuBirkhoffCApi, DefaultsAreTheCppDefaults) {
  kantor_birkhoff_options o;
  o.method = 2;
  o.column_first = 1;
  o.iterations = 5;
  o.tolerance = 1;
  o.max_newton_iterations = 7;
  o.unrolled_gradient = 1;
  kantor_birkhoff_default_options(&o);
  const BirkhoffOptions d;
  EXPECT_EQ(o.method, KANTOR_BIRKHOFF_NEWTON);
  EXPECT_EQ(o.method, int(d.method));
  EXPECT_EQ(o.column_first, 0);
  EXPECT_EQ(o.iterations, d.iterations);
  EXPECT_EQ(o.tolerance, d.tolerance);
  EXPECT_EQ(o.max_newton_iterations, 30);
  EXPECT_EQ(o.max_newton_iterations, d.max_newton_iterations);
  EXPECT_EQ(o.unrolled_gradient, 0);
  kantor_birkhoff_default_options(nullptr);  // no-op
}

// Valid arguments where no device can run them: a CPU-only build answers NOT_COMPILED, a CUDA
// build on a machine without a device CUDA_ERROR naming it; options NULL = the defaults. With a
// device, an empty batch (pointers NULL) is a no-op that succeeds and clears the last error.
TEST(CpuBirkhoffCApi, ValidCallsWithoutADeviceOrWithoutCuda) {
  const kantor_birkhoff_options o = defaults();
  kantor_birkhoff_stats st{};
  if (cuda_available()) {
    st.first_invalid = 5;
    st.worst_error = 3;
    // A failed call first: the successful one below must clear its message.
    ASSERT_EQ(kantor_birkhoff_forward(kFake, kFake, 1, 40, KANTOR_DTYPE_FLOAT32, &o, nullptr,
                                      nullptr),
              kBad);
    EXPECT_EQ(kantor_birkhoff_forward(nullptr, nullptr, 0, 4, KANTOR_DTYPE_FLOAT32, nullptr,
                                      nullptr, &st),
              KANTOR_STATUS_OK)
        << kantor_birkhoff_last_error();
    EXPECT_STREQ(kantor_birkhoff_last_error(), "");
    EXPECT_EQ(st.worst_error, 0);
    EXPECT_EQ(st.median_error, 0);
    EXPECT_EQ(st.not_converged, 0);
    EXPECT_EQ(st.invalid_inputs, 0);
    EXPECT_EQ(st.first_invalid, -1);
    EXPECT_EQ(kantor_birkhoff_backward(nullptr, nullptr, nullptr, nullptr, 0, 4,
                                       KANTOR_DTYPE_BFLOAT16, &o, nullptr),
              KANTOR_STATUS_OK)
        << kantor_birkhoff_last_error();
    return;
  }
  const kantor_status want =
      KANTOR_CUDA_ENABLED ? KANTOR_STATUS_CUDA_ERROR : KANTOR_STATUS_NOT_COMPILED;
  const std::string says = KANTOR_CUDA_ENABLED ? "no CUDA device is visible" : "no CUDA engine";
  for (const kantor_birkhoff_options* opt : {&o, static_cast<const kantor_birkhoff_options*>(nullptr)}) {
    expect_error(kantor_birkhoff_forward(kFake, kFake, 1, 4, KANTOR_DTYPE_FLOAT32, opt, nullptr,
                                         nullptr),
                 want, {says}, "forward");
    expect_error(kantor_birkhoff_forward(kFake, kFake, 1, 4, KANTOR_DTYPE_BFLOAT16, opt, kFake,
                                         &st),
                 want, {says}, "forward, a stream and stats");
    expect_error(kantor_birkhoff_backward(kFake, nullptr, kFake, kFake, 1, 4,
                                          KANTOR_DTYPE_FLOAT32, opt, nullptr),
                 want, {says}, "backward");
    expect_error(kantor_birkhoff_forward(nullptr, nullptr, 0, 4, KANTOR_DTYPE_FLOAT32, opt,
                                         nullptr, nullptr),
                 want, {says}, "empty batch");
  }
}

TEST(CpuBirkhoffCApi, LastErrorIsPerThread) {
  kantor_birkhoff_options o = defaults();
  o.method = 4;
  ASSERT_EQ(kantor_birkhoff_forward(kFake, kFake, 1, 4, KANTOR_DTYPE_FLOAT32, &o, nullptr,
                                    nullptr),
            kBad);
  const std::string mine = kantor_birkhoff_last_error();
  ASSERT_NE(mine.find("options.method"), std::string::npos) << mine;
  std::string other_before, other_after;
  std::thread t([&] {
    other_before = kantor_birkhoff_last_error();
    const kantor_birkhoff_options d = defaults();
    kantor_birkhoff_forward(kFake, kFake, 1, 99, KANTOR_DTYPE_FLOAT32, &d, nullptr, nullptr);
    other_after = kantor_birkhoff_last_error();
  });
  t.join();
  EXPECT_EQ(other_before, "") << "a new thread has no last error";
  EXPECT_NE(other_after.find("n = 99"), std::string::npos) << other_after;
  EXPECT_EQ(std::string(kantor_birkhoff_last_error()), mine);
}

}  // namespace
}  // namespace kantor
