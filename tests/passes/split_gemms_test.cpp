// GEMM split by epilogue: golden rewrites (bias, FP8 scales), the shapes that must stay one GEMM, and FLUX's
// single-stream block, where the split lets the MLP GEMM take bias + GELU as its epilogue.
#include "passes/split_gemms.h"

#include <gtest/gtest.h>

#include <string>

#include "models/zoo.h"
#include "pass_test_util.h"
#include "passes/fuse_rows.h"
#include "passes/pipeline.h"

namespace kiln {
namespace {

using testing::expect_golden;

// q/k/v and the MLP's up projection in one GEMM, GELU on the MLP columns only (FLUX's linear1).
TEST(PassSplitGemms, GeluColumnsBecomeTheirOwnGemm) {
  const passes::PassReport r = expect_golden(passes::split_gemms_by_epilogue, R"(graph g {
      input %x: bf16[2,3,8] per_call
      input %w: bf16[20,8] weight
      input %b: bf16[20] weight
      %y: bf16[2,3,20] = linear(%x, %w, %b)
      %q: bf16[2,3,4], %k: bf16[2,3,4], %v: bf16[2,3,4], %m: bf16[2,3,8] = split(%y) {axis=-1, sizes=[4,4,4,8]}
      %qk: bf16[2,3,4] = mul(%q, %k)
      %qkv: bf16[2,3,4] = add(%qk, %v)
      %g: bf16[2,3,8] = gelu(%m) {approximate="tanh"}
      output qkv = %qkv
      output g = %g
    })", R"(graph g {
      input %x: bf16[2,3,8] per_call
      input %w: bf16[20,8] weight
      input %b: bf16[20] weight
      %w.rows0_12: bf16[12,8] = slice(%w) {axis=0, start=0, end=12, step=1}
      %b.rows0_12: bf16[12] = slice(%b) {axis=0, start=0, end=12, step=1}
      %y.cols0_12: bf16[2,3,12] = linear(%x, %w.rows0_12, %b.rows0_12)
      %q: bf16[2,3,4], %k: bf16[2,3,4], %v: bf16[2,3,4] = split(%y.cols0_12) {axis=-1, sizes=[4,4,4]}
      %w.rows12_20: bf16[8,8] = slice(%w) {axis=0, start=12, end=20, step=1}
      %b.rows12_20: bf16[8] = slice(%b) {axis=0, start=12, end=20, step=1}
      %m: bf16[2,3,8] = linear(%x, %w.rows12_20, %b.rows12_20)
      %qk: bf16[2,3,4] = mul(%q, %k)
      %qkv: bf16[2,3,4] = add(%qk, %v)
      %g: bf16[2,3,8] = gelu(%m) {approximate="tanh"}
      output qkv = %qkv
      output g = %g
    })");
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.found.at("linear into 2 GEMMs"), 1);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("N = 12 + N = 8 (GELU)"), std::string::npos) << r.notes[0];
}

// Per-channel FP8 weight scales are cut with the weight; a per-tensor scale is shared by both GEMMs.
TEST(PassSplitGemms, Fp8ScalesAreCutWithTheWeight) {
  expect_golden(passes::split_gemms_by_epilogue, R"(graph g {
      input %xq: f8e4m3[3,8] per_call
      input %xs: f32[3,1] per_call
      input %wq: f8e4m3[6,8] weight
      input %ws: f32[6,1] weight
      %y: bf16[3,6] = scaled_linear(%xq, %xs, %wq, %ws) {out_dtype="bf16"}
      %a: bf16[3,2], %m: bf16[3,4] = split(%y) {axis=1, sizes=[2,4]}
      %g: bf16[3,4] = gelu(%m) {approximate="tanh"}
      output a = %a
      output g = %g
    })", R"(graph g {
      input %xq: f8e4m3[3,8] per_call
      input %xs: f32[3,1] per_call
      input %wq: f8e4m3[6,8] weight
      input %ws: f32[6,1] weight
      %wq.rows0_2: f8e4m3[2,8] = slice(%wq) {axis=0, start=0, end=2, step=1}
      %ws.rows0_2: f32[2,1] = slice(%ws) {axis=0, start=0, end=2, step=1}
      %a: bf16[3,2] = scaled_linear(%xq, %xs, %wq.rows0_2, %ws.rows0_2) {out_dtype="bf16"}
      %wq.rows2_6: f8e4m3[4,8] = slice(%wq) {axis=0, start=2, end=6, step=1}
      %ws.rows2_6: f32[4,1] = slice(%ws) {axis=0, start=2, end=6, step=1}
      %m: bf16[3,4] = scaled_linear(%xq, %xs, %wq.rows2_6, %ws.rows2_6) {out_dtype="bf16"}
      %g: bf16[3,4] = gelu(%m) {approximate="tanh"}
      output a = %a
      output g = %g
    })");
  expect_golden(passes::split_gemms_by_epilogue, R"(graph g {
      input %xq: f8e4m3[3,8] per_call
      input %xs: f32[] per_call
      input %wq: f8e4m3[6,8] weight
      input %ws: f32[] weight
      %y: bf16[3,6] = scaled_linear(%xq, %xs, %wq, %ws) {out_dtype="bf16"}
      %a: bf16[3,2], %m: bf16[3,4] = split(%y) {axis=-1, sizes=[2,4]}
      %g: bf16[3,4] = gelu(%m) {approximate="tanh"}
      output a = %a
      output g = %g
    })", R"(graph g {
      input %xq: f8e4m3[3,8] per_call
      input %xs: f32[] per_call
      input %wq: f8e4m3[6,8] weight
      input %ws: f32[] weight
      %wq.rows0_2: f8e4m3[2,8] = slice(%wq) {axis=0, start=0, end=2, step=1}
      %a: bf16[3,2] = scaled_linear(%xq, %xs, %wq.rows0_2, %ws) {out_dtype="bf16"}
      %wq.rows2_6: f8e4m3[4,8] = slice(%wq) {axis=0, start=2, end=6, step=1}
      %m: bf16[3,4] = scaled_linear(%xq, %xs, %wq.rows2_6, %ws) {out_dtype="bf16"}
      %g: bf16[3,4] = gelu(%m) {approximate="tanh"}
      output a = %a
      output g = %g
    })");
}

TEST(PassSplitGemms, OneEpilogueOrNoSplitStaysOneGemm) {
  for (const char* text : {
           // every piece wants GELU: one run
           R"(graph g {
             input %x: f32[3,8] per_call
             input %w: f32[6,8] weight
             %y: f32[3,6] = linear(%x, %w)
             %a: f32[3,2], %b: f32[3,4] = split(%y) {axis=-1, sizes=[2,4]}
             %ga: f32[3,2] = gelu(%a) {approximate="tanh"}
             %gb: f32[3,4] = gelu(%b) {approximate="tanh"}
             output a = %ga
             output b = %gb
           })",
           // the GELU piece has a second reader: its GEMM could not take the GELU as its epilogue
           R"(graph g {
             input %x: f32[3,8] per_call
             input %w: f32[6,8] weight
             %y: f32[3,6] = linear(%x, %w)
             %a: f32[3,2], %b: f32[3,4] = split(%y) {axis=-1, sizes=[2,4]}
             %gb: f32[3,4] = gelu(%b) {approximate="tanh"}
             %e: f32[3,4] = exp(%b)
             output a = %a
             output b = %gb
             output e = %e
           })",
           // erf GELU: no library epilogue computes it
           R"(graph g {
             input %x: f32[3,8] per_call
             input %w: f32[6,8] weight
             %y: f32[3,6] = linear(%x, %w)
             %a: f32[3,2], %b: f32[3,4] = split(%y) {axis=-1, sizes=[2,4]}
             %gb: f32[3,4] = gelu(%b)
             output a = %a
             output b = %gb
           })",
           // split along another axis
           R"(graph g {
             input %x: f32[4,8] per_call
             input %w: f32[6,8] weight
             %y: f32[4,6] = linear(%x, %w)
             %a: f32[2,6], %b: f32[2,6] = split(%y) {axis=0, sizes=[2,2]}
             %gb: f32[2,6] = gelu(%b) {approximate="tanh"}
             output a = %a
             output b = %gb
           })"}) {
    const passes::PassResult r = passes::split_gemms_by_epilogue(testing::parse_or_die(text));
    EXPECT_FALSE(r.report.changed) << text;
  }
}

// 128x128 block scales cut only at multiples of 128 columns; elsewhere the GEMM stays whole, with a note.
TEST(PassSplitGemms, BlockScalesCutOnlyAtBlockBoundaries) {
  const std::string text = R"(graph g {
      input %xq: f8e4m3[4,128] per_call
      input %xs: f32[1,4] per_call
      input %wq: f8e4m3[320,128] weight
      input %ws: f32[3,1] weight
      %y: bf16[4,320] = scaled_linear(%xq, %xs, %wq, %ws) {out_dtype="bf16"}
      %a: bf16[4,CUT], %m: bf16[4,REST] = split(%y) {axis=-1, sizes=[CUT,REST]}
      %g: bf16[4,REST] = gelu(%m) {approximate="tanh"}
      output a = %a
      output g = %g
    })";
  auto with_cut = [&](int cut) {
    std::string s = text;
    for (auto [key, value] : {std::pair<std::string, int>{"CUT", cut}, {"REST", 320 - cut}}) {
      for (size_t at; (at = s.find(key)) != std::string::npos;) s.replace(at, key.size(), std::to_string(value));
    }
    return testing::parse_or_die(s);
  };
  const passes::PassResult aligned = passes::split_gemms_by_epilogue(with_cut(256));
  EXPECT_TRUE(aligned.report.changed);
  EXPECT_TRUE(verify_graph(aligned.graph).ok());
  // The second GEMM's scales are block row 2 alone (columns 256..319, a partial block).
  EXPECT_NE(print_graph_text(aligned.graph).find("%ws.rows2_3: f32[1,1] = slice(%ws)"), std::string::npos)
      << print_graph_text(aligned.graph);
  testing::expect_bit_identical(with_cut(256), aligned.graph);

  const passes::PassResult ragged = passes::split_gemms_by_epilogue(with_cut(200));
  EXPECT_FALSE(ragged.report.changed);
  ASSERT_EQ(ragged.report.notes.size(), 1u);
  EXPECT_NE(ragged.report.notes[0].find("cannot be cut at column 200"), std::string::npos) << ragged.report.notes[0];
}

// FLUX.1's single-stream block: linear1 splits into the q/k/v GEMM and the MLP GEMM; fold-epilogues then gives
// the MLP GEMM bias + GELU and the q/k/v GEMM its bias, and the per-call memory-bound bytes drop by the bias/GELU
// pass over 4608 x 21504. The tiny block's outputs are bit-identical on the reference with the pass alone.
TEST(PassSplitGemms, FluxSingleBlockMlpGemmTakesGelu) {
  auto tiny = models::build_zoo_model("flux1-single-block:tiny");
  ASSERT_TRUE(tiny.ok());
  const passes::PassResult alone = passes::split_gemms_by_epilogue(*tiny);
  EXPECT_TRUE(alone.report.changed);
  testing::expect_bit_identical(*tiny, alone.graph);

  auto block = models::build_zoo_model("flux1-single-block");
  ASSERT_TRUE(block.ok());
  auto with = passes::run_pipeline(*block);
  auto without = passes::run_pipeline(*block, testing::pipeline_without({"split-gemms"}));
  ASSERT_TRUE(with.ok() && without.ok());
  auto report = [](const passes::PipelineResult& r, const std::string& pass) {
    for (const passes::PassReport& p : r.reports) {
      if (p.pass == pass) return p;
    }
    return passes::PassReport{};
  };
  const passes::PassReport fold = report(*with, "fold-epilogues");
  EXPECT_EQ(fold.found.count("linear + bias + GELU epilogue"), 1u);
  EXPECT_EQ(fold.found.count("linear + bias epilogue"), 1u);
  EXPECT_TRUE(report(*without, "fold-epilogues").found.empty());
  // Without the fold it prepares, the split would only add a GEMM: the pipeline runs it only with fold-epilogues.
  auto no_fold = passes::run_pipeline(*block, testing::pipeline_without({"fold-epilogues"}));
  ASSERT_TRUE(no_fold.ok());
  EXPECT_TRUE(report(*no_fold, "split-gemms").pass.empty());
  EXPECT_FALSE(report(*with, "split-gemms").pass.empty());
  const passes::KernelSummary k_with = passes::summarize_memory_bound_kernels(*block, with->graph);
  const passes::KernelSummary k_without = passes::summarize_memory_bound_kernels(*block, without->graph);
  // 4608 x 21504 bf16 read and written by the bias + GELU kernel: 396 MB; what is left of it is a v gather.
  EXPECT_LT(k_with.bytes_after, k_without.bytes_after - 300e6);
}

}  // namespace
}  // namespace kiln
