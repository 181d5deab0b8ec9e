// Shared by the GPU tests: one context per test process, or a skip that says why there is none.
#pragma once

#include <gtest/gtest.h>

#include "cuda/driver.h"

namespace kiln::cuda::test {

// The device context, or nullptr with the reason in `why` (no driver, no device).
inline const Context* gpu_context(std::string* why) {
  static const Result<Context> context = Context::open(0);
  if (!context.ok()) {
    *why = context.error().message;
    return nullptr;
  }
  return &context.value();
}

#define KILN_REQUIRE_GPU()                                                       \
  std::string kiln_gpu_missing_;                                                 \
  const ::kiln::cuda::Context* gpu = ::kiln::cuda::test::gpu_context(&kiln_gpu_missing_); \
  if (gpu == nullptr) GTEST_SKIP() << "needs a GPU: " << kiln_gpu_missing_;      \
  ASSERT_TRUE(gpu->make_current().ok())

#define KILN_ASSERT_OK(expr)                                        \
  do {                                                              \
    const auto& kiln_status_ = (expr);                                   \
    ASSERT_TRUE(kiln_status_.ok()) << kiln_status_.error().message; \
  } while (0)

}  // namespace kiln::cuda::test
