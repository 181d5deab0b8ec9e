// The A/B gate's tie band, measured from an A/B of one plan against itself.
#include <gtest/gtest.h>

#include "agent/ab_gate.h"

namespace kiln {
namespace {

agent::ABVerdict self_ab(double median, double low, double high) {
  agent::ABVerdict v;
  v.ratio.median = median;
  v.ratio.ci_low = low;
  v.ratio.ci_high = high;
  return v;
}

TEST(ABGate, TheTieBandIsHowFarASelfABStraysFromOne) {
  const agent::ABOptions options;  // band within [0.5%, 2%]
  // A quiet machine (a GPU replaying a CUDA graph): the floor.
  EXPECT_DOUBLE_EQ(agent::measured_tie_threshold(self_ab(1.001, 0.999, 1.002), options), 0.005);
  // Its interval's far end, on either side, sets the band.
  EXPECT_NEAR(agent::measured_tie_threshold(self_ab(1.002, 0.988, 1.004), options), 0.012, 1e-12);
  EXPECT_NEAR(agent::measured_tie_threshold(self_ab(1.009, 0.997, 1.013), options), 0.013, 1e-12);
  // A median off by itself (a biased order of runs) counts too.
  EXPECT_NEAR(agent::measured_tie_threshold(self_ab(0.985, 0.984, 0.986), options), 0.016, 1e-12);
  // A noisy machine keeps the fixed band: no wider than tie_threshold.
  EXPECT_DOUBLE_EQ(agent::measured_tie_threshold(self_ab(1.04, 0.9, 1.1), options), 0.02);
  agent::ABOptions wide = options;
  wide.tie_threshold = 0.05;
  EXPECT_NEAR(agent::measured_tie_threshold(self_ab(1.04, 0.97, 1.1), wide), 0.05, 1e-12);
  // A fixed band below the floor: the floor wins, the band is never inverted.
  agent::ABOptions tight = options;
  tight.tie_threshold = 0.001;
  EXPECT_DOUBLE_EQ(agent::measured_tie_threshold(self_ab(1.0, 1.0, 1.0), tight), 0.005);
}

}  // namespace
}  // namespace kiln
