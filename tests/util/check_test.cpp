// KILN_CHECK aborts naming the place, the condition and, when given, why (a printf format and its arguments).
#include "util/check.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

TEST(KilnCheck, AbortsNamingTheConditionAndWhy) {
  const std::string name = "h200";
  EXPECT_DEATH(KILN_CHECK(1 + 1 == 3, "device %s has %d SMs", name.c_str(), 132),
               "internal error at .*check_test.cpp:[0-9]+: check failed: 1 \\+ 1 == 3: device h200 has 132 SMs");
  EXPECT_DEATH(KILN_CHECK(name.empty()), "check failed: name.empty\\(\\)\n");
}

TEST(KilnCheck, PassesSilently) {
  int evaluated = 0;
  KILN_CHECK(++evaluated == 1, "never printed %d", evaluated);
  EXPECT_EQ(evaluated, 1);
}

}  // namespace
}  // namespace kiln
