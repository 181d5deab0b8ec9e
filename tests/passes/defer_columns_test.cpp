// Late columns of a weight-bound GEMM: the golden rewrite of a modulation-shaped GEMV, the GEMMs that stay whole,
// and FLUX's blocks through the pipeline, where the pass runs only for plans of two lanes or more.
#include "passes/defer_columns.h"

#include <gtest/gtest.h>

#include <string>

#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

using testing::expect_golden;

// A modulation GEMV (M = 1, N = 64): shift and scale feed the first GEMM, the gate waits behind the second, and
// the last 16 columns are read by no one. Shift and scale come from one GEMM, the gate from another, and the
// unread columns from none.
TEST(PassDeferColumns, GateColumnsGetTheirOwnGemm) {
  const passes::PassReport r = expect_golden(passes::defer_late_columns, R"(graph g {
      input %x: bf16[1,6,16] per_call
      input %vec: bf16[1,4] per_step
      input %w: bf16[64,4] weight
      input %b: bf16[64] weight
      input %w1: bf16[16,16] weight
      input %w2: bf16[16,16] weight
      %mod: bf16[1,64] = linear(%vec, %w, %b)
      %m3: bf16[1,1,64] = reshape(%mod) {shape=[1,1,64]}
      %shift: bf16[1,1,16], %scale: bf16[1,1,16], %gate: bf16[1,1,16], %unread: bf16[1,1,16] = split(%m3) {axis=2, sizes=[16,16,16,16]}
      %xs: bf16[1,6,16] = mul(%x, %scale)
      %xm: bf16[1,6,16] = add(%xs, %shift)
      %h: bf16[1,6,16] = linear(%xm, %w1)
      %h2: bf16[1,6,16] = linear(%h, %w2)
      %y: bf16[1,6,16] = mul(%gate, %h2)
      output y = %y
    })", R"(graph g {
      input %x: bf16[1,6,16] per_call
      input %vec: bf16[1,4] per_step
      input %w: bf16[64,4] weight
      input %b: bf16[64] weight
      input %w1: bf16[16,16] weight
      input %w2: bf16[16,16] weight
      %w.rows0_32: bf16[32,4] = slice(%w) {axis=0, start=0, end=32, step=1}
      %b.rows0_32: bf16[32] = slice(%b) {axis=0, start=0, end=32, step=1}
      %mod.early: bf16[1,32] = linear(%vec, %w.rows0_32, %b.rows0_32)
      %w.rows32_48: bf16[16,4] = slice(%w) {axis=0, start=32, end=48, step=1}
      %b.rows32_48: bf16[16] = slice(%b) {axis=0, start=32, end=48, step=1}
      %mod.late: bf16[1,16] = linear(%vec, %w.rows32_48, %b.rows32_48)
      %shift.cols: bf16[1,16] = slice(%mod.early) {axis=1, start=0, end=16, step=1}
      %shift: bf16[1,1,16] = reshape(%shift.cols) {shape=[1,1,16]}
      %scale.cols: bf16[1,16] = slice(%mod.early) {axis=1, start=16, end=32, step=1}
      %scale: bf16[1,1,16] = reshape(%scale.cols) {shape=[1,1,16]}
      %gate.cols: bf16[1,16] = slice(%mod.late) {axis=1, start=0, end=16, step=1}
      %gate: bf16[1,1,16] = reshape(%gate.cols) {shape=[1,1,16]}
      %xs: bf16[1,6,16] = mul(%x, %scale)
      %xm: bf16[1,6,16] = add(%xs, %shift)
      %h: bf16[1,6,16] = linear(%xm, %w1)
      %h2: bf16[1,6,16] = linear(%h, %w2)
      %y: bf16[1,6,16] = mul(%gate, %h2)
      output y = %y
    })");
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.found.at("linear: late columns into a GEMM of their own"), 1);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("columns [0, 32) (32 of them) before node %h (linear); columns [32, 48) (16)"),
            std::string::npos)
      << r.notes[0];
}

// The same GEMV with the given reader lines and N: the cases that must stay one GEMM.
Graph modulation(const std::string& vec_rows, const std::string& readers, const std::string& outputs) {
  return testing::parse_or_die(R"(graph g {
      input %x: bf16[1,6,16] per_call
      input %vec: bf16[)" + vec_rows + R"(,4] per_step
      input %w: bf16[64,4] weight
      input %w1: bf16[16,16] weight
      input %w2: bf16[16,16] weight
      %mod: bf16[)" + vec_rows + R"(,64] = linear(%vec, %w)
      %shift: bf16[)" + vec_rows + R"(,32], %gate: bf16[)" + vec_rows + R"(,32] = split(%mod) {axis=1, sizes=[32,32]}
      )" + readers + "\n" + outputs + "\n}");
}

TEST(PassDeferColumns, StaysOneGemmWhereNothingWaits) {
  const std::string first = "%s: bf16[1,1,32] = reshape(%shift) {shape=[1,1,32]}\n"
                            "%s16: bf16[1,1,16] = slice(%s) {axis=2, start=0, end=16, step=1}\n"
                            "%xm: bf16[1,6,16] = add(%x, %s16)\n"
                            "%h: bf16[1,6,16] = linear(%xm, %w1)\n";
  const std::string late = "%h2: bf16[1,6,16] = linear(%h, %w2)\n"
                           "%g: bf16[1,1,32] = reshape(%gate) {shape=[1,1,32]}\n"
                           "%g16: bf16[1,1,16] = slice(%g) {axis=-1, start=-16, end=32, step=1}\n"
                           "%y: bf16[1,6,16] = mul(%g16, %h2)\n";
  // The rule's own case first, with slices and reshapes on the way: the gate's last 16 columns are late.
  const Graph deferred = modulation("1", first + late, "output y = %y");
  const passes::PassResult r = passes::defer_late_columns(deferred);
  ASSERT_TRUE(r.report.changed);
  EXPECT_NE(r.report.notes[0].find("columns [0, 16) (16 of them) before node %h (linear); columns [48, 64) (16)"),
            std::string::npos)
      << r.report.notes[0];
  testing::expect_bit_identical(deferred, r.graph);
  // Idempotent: the early GEMM has early readers only, the late one holds up no heavy op alone.
  EXPECT_FALSE(passes::defer_late_columns(r.graph).report.changed);

  // Not weight-bound: 2 rows of input are more than 1/64 of the weights.
  const std::string two_rows = "%xm: bf16[2,32] = add(%shift, %shift)\n"
                               "%h: bf16[2,16] = linear(%xm, %w1.t)\n"
                               "%h2: bf16[2,16] = linear(%h, %w2)\n"
                               "%g: bf16[2,16] = slice(%gate) {axis=1, start=0, end=16, step=1}\n"
                               "%y: bf16[2,16] = mul(%g, %h2)\n";
  const Graph wide = testing::parse_or_die(
      R"(graph g {
      input %vec: bf16[2,4] per_step
      input %w: bf16[64,4] weight
      input %w1.t: bf16[16,32] weight
      input %w2: bf16[16,16] weight
      %mod: bf16[2,64] = linear(%vec, %w)
      %shift: bf16[2,32], %gate: bf16[2,32] = split(%mod) {axis=1, sizes=[32,32]}
      )" + two_rows + "output y = %y\n}");
  EXPECT_FALSE(passes::defer_late_columns(wide).report.changed);

  // Every column read before the first GEMM (an LLM's q/k/v): nothing is late.
  const std::string all_early = first + "%g: bf16[1,1,32] = reshape(%gate) {shape=[1,1,32]}\n"
                                        "%g16: bf16[1,1,16] = slice(%g) {axis=2, start=0, end=16, step=1}\n"
                                        "%y0: bf16[1,6,16] = mul(%g16, %x)\n"
                                        "%y: bf16[1,6,16] = linear(%y0, %w2)\n"
                                        "%z: bf16[1,6,16] = add(%y, %h)\n";
  EXPECT_FALSE(passes::defer_late_columns(modulation("1", all_early, "output z = %z")).report.changed);

  // A window that is a graph output, and a GEMM read whole by something other than a column view.
  EXPECT_FALSE(passes::defer_late_columns(modulation("1", first + late, "output y = %y\noutput gate = %gate")).report.changed);
  const std::string whole = first + late + "%t: bf16[64,1] = transpose(%mod) {perm=[1,0]}\n";
  EXPECT_FALSE(passes::defer_late_columns(modulation("1", whole, "output y = %y\noutput t = %t")).report.changed);
}

// FLUX.1's blocks: with two lanes the double block's merged modulation GEMV (both streams) computes each
// stream's first shift and scale (a third of its 36864 columns) before the q/k/v GEMMs and the rest in a second
// GEMV, and the single block's its gate last; with one lane the pass does not run. Bit-identical on the
// reference, FP8 per-channel scales cut with the weights.
TEST(PassDeferColumns, FluxModulationOnTwoLanes) {
  auto report = [](const passes::PipelineResult& r) {
    for (const passes::PassReport& p : r.reports) {
      if (p.pass == "defer-columns") return p;
    }
    return passes::PassReport{};
  };
  passes::PipelineOptions two;
  two.lanes = 2;
  auto dbl = models::build_zoo_model("flux1-double-block");
  ASSERT_TRUE(dbl.ok());
  auto one_lane = passes::run_pipeline(*dbl);
  auto two_lanes = passes::run_pipeline(*dbl, two);
  ASSERT_TRUE(one_lane.ok() && two_lanes.ok());
  EXPECT_TRUE(report(*one_lane).pass.empty());
  const passes::PassReport d = report(*two_lanes);
  ASSERT_TRUE(d.changed);
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find("columns [0, 6144) [18432, 24576) (12288 of them) before node %img_attn.qkv/linear "
                            "(linear), node %txt_attn.qkv/linear (linear); columns [6144, 18432) [24576, 36864) (24576)"),
            std::string::npos)
      << d.notes[0];
  auto single = models::build_zoo_model("flux1-single-block");
  ASSERT_TRUE(single.ok());
  auto s = passes::run_pipeline(*single, two);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(report(*s).notes.size(), 1u);
  EXPECT_NE(report(*s).notes[0].find("columns [6144, 9216) (3072) in a second GEMM"), std::string::npos)
      << report(*s).notes[0];

  for (const char* tiny : {"flux1-double-block:tiny", "flux1-single-block:tiny", "flux1-double-block:tiny,dtype=fp8",
                           "flux1-double-block:tiny,dtype=fp8,fp8_scaling=tensor"}) {
    auto g = models::build_zoo_model(tiny);
    ASSERT_TRUE(g.ok()) << tiny;
    const passes::PassResult alone = passes::defer_late_columns(*g);
    EXPECT_TRUE(alone.report.changed) << tiny;
    testing::expect_bit_identical(*g, alone.graph);
    auto merged = passes::run_pipeline(*g, two);
    ASSERT_TRUE(merged.ok()) << tiny << ": " << merged.error().message;
    EXPECT_TRUE(report(*merged).changed) << tiny;
  }
}

}  // namespace
}  // namespace kiln
