// Kernel IR, schedules and the emitter: index simplification, lowering (and its errors), schedule JSON and
// can_implement, the harness ABI entry point verified by the harness, the CPU dialect's reductions, roundings
// and prefetches, and the CUDA dialect compiling (nvcc, no GPU needed).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "harness/kernel_abi.h"
#include "harness/verify.h"
#include "kernel/emit.h"
#include "kernel/emit_cpu.h"
#include "exchange_graphs.h"
#include "kernel/kernel_ir.h"
#include "kernel/kernel_task.h"
#include "kernel/schedule.h"
#include "models/zoo.h"
#include "passes/fuse_rows.h"
#include "passes/pipeline.h"
#include "ref/executor.h"

namespace kiln::kernel {
namespace {

VarExtents extents_of(std::map<int, int64_t> e) {
  return [e](int v) { return e.at(v); };
}

TEST(KernelIndex, ReshapeDivModFoldAway) {
  const VarExtents ext = extents_of({{0, 16}, {1, 64}});
  const IndexExpr flat = index_add(index_scale(IndexExpr::of_var(0), 64), IndexExpr::of_var(1));  // r*64 + j
  EXPECT_TRUE(index_div(flat, 64, ext).is_var(0));
  EXPECT_TRUE(index_mod(flat, 64, ext).is_var(1));
  // The RoPE pair partner: 2*(j/2) + 1 has the same row and differs in parity.
  const IndexExpr half = index_div(IndexExpr::of_var(1), 2, ext);
  const IndexExpr partner = index_add(index_scale(half, 2), IndexExpr::of_constant(1));
  EXPECT_EQ(index_mod(partner, 2, ext).constant, 1);
  EXPECT_TRUE(index_mod(partner, 2, ext).is_constant());
  EXPECT_EQ(index_eval(partner, [](int v) { return v == 1 ? 37 : 0; }), 37);
  // j / 32 stays an atom (it can be 0 or 1).
  EXPECT_FALSE(index_div(IndexExpr::of_var(1), 32, ext).is_constant());
  const IndexRange r = index_range(index_div(IndexExpr::of_var(1), 32, ext), ext);
  EXPECT_EQ(r.lo, 0);
  EXPECT_EQ(r.hi, 1);
}

// A reshape that splits an axis and one that merges it back: 32*(j/32) + j%32 is j again, at any coefficient
// and with other terms around it; an unmatched pair (other divisor, other coefficient) stays as it is.
TEST(KernelIndex, SplitAndMergedAxisIsTheVariableAgain) {
  const VarExtents ext = extents_of({{0, 16}, {1, 64}});
  const IndexExpr j = IndexExpr::of_var(1);
  const IndexExpr merged = index_add(index_scale(index_div(j, 32, ext), 32), index_mod(j, 32, ext));
  EXPECT_TRUE(merged.is_var(1)) << index_key(merged);
  const IndexExpr row = index_scale(IndexExpr::of_var(0), 64);
  const IndexExpr strided = index_add(row, index_add(index_scale(index_div(j, 32, ext), 96),
                                                     index_scale(index_mod(j, 32, ext), 3)));  // 3*(32*(j/32) + j%32)
  EXPECT_EQ(index_key(strided), index_key(index_add(row, index_scale(j, 3))));
  const IndexExpr mismatched = index_add(index_scale(index_div(j, 32, ext), 16), index_mod(j, 32, ext));
  EXPECT_EQ(mismatched.terms.size(), 2u) << index_key(mismatched);
  for (int64_t v = 0; v < 64; ++v) {
    EXPECT_EQ(index_eval(mismatched, [&](int) { return v; }), 16 * (v / 32) + v % 32);
  }
}

Graph layernorm_modulate_graph(DType dtype, int64_t rows, int64_t cols) {
  Graph g;
  const ValueId x = *g.add_input("x", {dtype, {rows, cols}}, Binding::per_call);
  const ValueId shift = *g.add_input("shift", {dtype, {1, cols}}, Binding::per_call);
  const ValueId scale = *g.add_input("scale", {dtype, {1, cols}}, Binding::per_call);
  const ValueId n = (*g.add_node(Op::layernorm, {x}, {}, {"n"}))[0];
  const ValueId m = (*g.add_node(Op::mul, {n, scale}, {}, {"m"}))[0];
  const ValueId y = (*g.add_node(Op::add, {m, shift}, {}, {"y"}))[0];
  KILN_CHECK(g.add_output("y", y).ok());
  return g;
}

Result<std::pair<Graph, Kernel>> fused_kernel(const Graph& g) {
  KILN_ASSIGN_OR_RETURN(passes::PipelineResult r, passes::run_pipeline(g));
  std::vector<passes::FusedGroup> groups = passes::collect_fused_groups(r.graph);
  if (groups.size() != 1) return make_error(ErrorCode::invalid_argument, "expected one group");
  KILN_ASSIGN_OR_RETURN(Kernel k, lower_nodes(r.graph, groups[0].members, "ln_mod"));
  return std::make_pair(std::move(r.graph), std::move(k));
}

TEST(KernelLower, LayernormModulateIsOneRowKernel) {
  auto fk = fused_kernel(layernorm_modulate_graph(DType::bf16, 5, 33));
  ASSERT_TRUE(fk.ok()) << fk.error().message;
  const Kernel& k = fk->second;
  EXPECT_EQ(k.rows, 5);
  EXPECT_EQ(k.inputs.size(), 3u);  // x, shift, scale (eps folded in as a constant)
  EXPECT_EQ(k.outputs.size(), 1u);
  EXPECT_TRUE(k.has_reduction());
  EXPECT_EQ(k.max_row_elements(), 33);
  EXPECT_NE(kernel_to_text(k).find("mean"), std::string::npos) << kernel_to_text(k);
  // Same structure, same hash; other shapes, another hash.
  auto again = fused_kernel(layernorm_modulate_graph(DType::bf16, 5, 33));
  auto other = fused_kernel(layernorm_modulate_graph(DType::bf16, 6, 33));
  EXPECT_EQ(kernel_hash(k), kernel_hash(again->second));
  EXPECT_NE(kernel_hash(k), kernel_hash(other->second));
}

TEST(KernelLower, UnsupportedNodesAreErrorsNamingThem) {
  Graph g;
  const ValueId x = *g.add_input("x", {DType::f32, {3, 4}}, Binding::per_call);
  const ValueId w = *g.add_input("w", {DType::f32, {5, 4}}, Binding::per_call);
  const ValueId y = (*g.add_node(Op::linear, {x, w}, {}, {"y"}))[0];
  const ValueId n = (*g.add_node(Op::rmsnorm, {y}, {}, {"n"}))[0];
  const ValueId i = (*g.add_node(Op::cast, {n}, {{"to", std::string("i32")}}, {"i"}))[0];
  ASSERT_TRUE(g.add_output("i", i).ok());
  auto k = lower_nodes(g, {0}, "k");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.error().code, ErrorCode::unsupported);
  EXPECT_NE(k.error().message.find("%y (linear)"), std::string::npos) << k.error().message;
  k = lower_nodes(g, {1}, "k");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.error().message.find("decompose"), std::string::npos) << k.error().message;
  k = lower_nodes(g, {2}, "k");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.error().message.find("i32"), std::string::npos) << k.error().message;
}

TEST(KernelSchedule, JsonRoundTripAndErrors) {
  const Schedule s{4, 2, 1, 16, false, 2};
  auto back = schedule_from_json(schedule_to_json(s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, s);
  // Each flag is written only when set (older schedules keep their text), round-trips, and shows in the text.
  // Returns `base` with the flag set.
  const auto expect_flag_round_trips = [](Schedule base, bool Schedule::*flag, const std::string& key,
                                          const std::string& shown) {
    EXPECT_EQ(schedule_to_json(base).find(key), std::string::npos) << schedule_to_json(base);
    base.*flag = true;
    auto back = schedule_from_json(schedule_to_json(base));
    EXPECT_TRUE(back.ok()) << back.error().message;
    if (back.ok()) {
      EXPECT_EQ(*back, base) << "with " << key << " set: " << schedule_to_json(base);
    }
    EXPECT_NE(schedule_to_string(base).find(shown), std::string::npos) << schedule_to_string(base);
    return base;
  };
  const Schedule t = expect_flag_round_trips(s, &Schedule::tables, "tables", " tables");
  const Schedule ts = expect_flag_round_trips(t, &Schedule::stream_stores, "stream_stores", " stream");
  expect_flag_round_trips(ts, &Schedule::gathers, "gathers", " gathers");
  expect_flag_round_trips(s, &Schedule::pairs, "pairs", " pairs");
  expect_flag_round_trips(s, &Schedule::moments, "moments", " moments");
  expect_flag_round_trips(s, &Schedule::early_loads, "early_loads", " early");
  // row_loop: written where it is not 1; 0 (one resident wave) and a count both round-trip.
  for (int turns : {0, 3}) {
    Schedule looped = s;
    looped.row_loop = turns;
    auto again = schedule_from_json(schedule_to_json(looped));
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->row_loop, turns);
    EXPECT_NE(schedule_to_string(looped).find(turns == 0 ? " loop=resident" : " loop=3"), std::string::npos);
  }
  EXPECT_EQ(schedule_to_json(s).find("row_loop"), std::string::npos);
  EXPECT_EQ(schedule_to_json(s).find("min_blocks"), std::string::npos);
  {
    Schedule bounded = s;
    bounded.min_blocks = 9;
    auto again = schedule_from_json(schedule_to_json(bounded));
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->min_blocks, 9);
    EXPECT_NE(schedule_to_string(bounded).find(" min_blocks=9"), std::string::npos);
  }
  EXPECT_FALSE(schedule_from_json(R"({"row_loop": true})").ok());
  EXPECT_FALSE(schedule_from_json(R"({"gathers": 1})").ok());
  EXPECT_FALSE(schedule_from_json(R"({"moments": 1})").ok());
  EXPECT_FALSE(schedule_from_json(R"({"tables": 1})").ok());
  EXPECT_FALSE(schedule_from_json(R"({"pairs": "yes"})").ok());
  auto bad = schedule_from_json(R"({"rows_per_task": 2, "lanes": 4})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("lanes"), std::string::npos);
  EXPECT_FALSE(schedule_from_json(R"({"cache_row": 3})").ok());
  EXPECT_FALSE(schedule_from_json("[1, 2").ok());
}

TEST(KernelSchedule, CanImplementAndSpace) {
  auto fk = fused_kernel(layernorm_modulate_graph(DType::bf16, 64, 3072));
  ASSERT_TRUE(fk.ok());
  const Kernel& k = fk->second;
  EXPECT_TRUE(can_implement(k, default_schedule(k, Target::cpu, 2), Target::cpu).ok());
  const Schedule cuda = default_schedule(k, Target::cuda, 132);
  EXPECT_TRUE(can_implement(k, cuda, Target::cuda).ok());
  EXPECT_EQ(cuda.vector_width, 8);       // 16 bytes of bf16 per thread and step
  EXPECT_EQ(cuda.threads_per_row, 128);  // 3072 / 8 = 384 steps = 3 per thread
  {
    // A simd loop cannot also carry `GCC unroll` (the compiler rejects the pragma pair): refused up front,
    // and the space never offers it.
    Schedule unrolled = default_schedule(k, Target::cpu, 1);
    unrolled.vector_width = 8;
    unrolled.unroll = 4;
    const Status refused = can_implement(k, unrolled, Target::cpu);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("unroll"), std::string::npos) << refused.error().message;
    for (const Schedule& c : schedule_space(k, Target::cpu, 2)) EXPECT_FALSE(c.unroll > 1 && c.vector_width > 1);
  }
  Schedule s;
  s.threads_per_row = 32;
  Status st = can_implement(k, s, Target::cpu);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("threads_per_row"), std::string::npos);
  s = Schedule{};
  s.vector_width = 3;
  EXPECT_FALSE(can_implement(k, s, Target::cpu).ok());
  s = Schedule{8, 1, 128, 1, true, 1};  // 8 rows x 3072 floats of shared memory
  st = can_implement(k, s, Target::cuda);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("shared memory"), std::string::npos) << st.error().message;
  // Rows narrower than a warp must fill whole warps.
  s = Schedule{1, 1, 16, 8, true, 1};
  st = can_implement(k, s, Target::cuda);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("whole number of warps"), std::string::npos) << st.error().message;
  s.rows_per_task = 2;
  s.cache_row = false;  // two rows of this kernel's buffers are over 48 KiB
  EXPECT_TRUE(can_implement(k, s, Target::cuda).ok());
  // row_loop: CUDA only, 0..16, and never more turns than a block's tasks can fill.
  {
    Schedule turned = cuda;
    for (int turns : {0, 2, 16}) {
      turned.row_loop = turns;
      EXPECT_TRUE(can_implement(k, turned, Target::cuda).ok()) << turns;
    }
    for (int turns : {-1, 17}) {
      turned.row_loop = turns;
      st = can_implement(k, turned, Target::cuda);
      ASSERT_FALSE(st.ok());
      EXPECT_NE(st.error().message.find("row_loop"), std::string::npos) << st.error().message;
    }
    turned.row_loop = 65;  // 64 rows
    EXPECT_FALSE(can_implement(k, turned, Target::cuda).ok());
    // min_blocks: CUDA only, at most 2048 threads an SM; the kernel's launch bounds carry it.
    Schedule bounded = cuda;
    bounded.min_blocks = 16;  // 16 x 128 threads
    EXPECT_TRUE(can_implement(k, bounded, Target::cuda).ok());
    bounded.min_blocks = 17;
    st = can_implement(k, bounded, Target::cuda);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("min_blocks"), std::string::npos) << st.error().message;
    bounded.min_blocks = 9;
    auto m = emit_module({{&k, bounded, "kern"}}, Target::cuda);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_NE(m->source.find("__launch_bounds__(128, 9) kern("), std::string::npos);
    Schedule cpu = default_schedule(k, Target::cpu, 1);
    cpu.row_loop = 2;
    st = can_implement(k, cpu, Target::cpu);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("CUDA field"), std::string::npos) << st.error().message;
    cpu.row_loop = 1;
    cpu.min_blocks = 2;
    st = can_implement(k, cpu, Target::cpu);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("min_blocks"), std::string::npos) << st.error().message;
    cpu.min_blocks = 0;
    cpu.early_loads = true;
    st = can_implement(k, cpu, Target::cpu);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("early_loads"), std::string::npos) << st.error().message;
    // The space offers turns to kernels with several passes over a row, not to one-pass ones.
    const std::vector<Schedule> space = schedule_space(k, Target::cuda, 132);
    for (int turns : {0, 2, 4}) {
      EXPECT_TRUE(std::any_of(space.begin(), space.end(), [&](const Schedule& x) { return x.row_loop == turns; })) << turns;
    }
    for (int turns : {1, 0}) {
      EXPECT_TRUE(std::any_of(space.begin(), space.end(),
                              [&](const Schedule& x) { return x.early_loads && x.row_loop == turns; }))
          << turns;
    }
    Graph one_pass;
    const ValueId x = *one_pass.add_input("x", {DType::bf16, {64, 3072}}, Binding::per_call);
    KILN_CHECK(one_pass.add_output("y", (*one_pass.add_node(Op::silu, {x}, {}, {"y"}))[0]).ok());
    auto silu = lower_nodes(one_pass, {0}, "silu");
    ASSERT_TRUE(silu.ok()) << silu.error().message;
    for (const Schedule& x : schedule_space(*silu, Target::cuda, 132)) {
      EXPECT_EQ(x.row_loop, 1) << schedule_to_string(x);
      EXPECT_FALSE(x.early_loads) << schedule_to_string(x);
    }
  }
  for (Target t : {Target::cpu, Target::cuda}) {
    const std::vector<Schedule> space = schedule_space(k, t, 2);
    EXPECT_GT(space.size(), 4u) << target_name(t);
    for (const Schedule& x : space) EXPECT_TRUE(can_implement(k, x, t).ok()) << schedule_to_string(x);
  }
}

// The harness ABI entry point: the harness verifies the generated kernel in its worker (guard zones, NaN
// poison, two calls per trial, normal and wide inputs).
TEST(KernelEmit, HarnessVerifiesAGeneratedKernel) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Graph g = layernorm_modulate_graph(dtype, 7, 33);
    auto fk = fused_kernel(g);
    ASSERT_TRUE(fk.ok());
    auto source = emit_harness_candidate(fk->second, default_schedule(fk->second, Target::cpu, 1));
    ASSERT_TRUE(source.ok());
    auto task = kernel_task(fk->first, fk->second);
    ASSERT_TRUE(task.ok()) << task.error().message;
    harness::CompileOptions co;
    co.flags = {"-O2", "-std=c++17", "-fopenmp-simd", "-shared", "-fPIC", "-Wl,-z,defs"};
    const harness::CandidateOutcome o = harness::evaluate_candidate(*task, *source, co);
    EXPECT_EQ(o.cls, harness::OutcomeClass::passed) << o.evidence.summary << "\n" << o.evidence.compiler_log;
  }
}

// Rounding a sum to bf16: when both operands hold bf16 values the kernel adds in f32 and rounds once (exact,
// and vectorizable); other operands keep the double + round-to-odd form. Each form is checked against the
// reference by the harness.
TEST(KernelEmit, Bf16SumsOfBf16ValuesRoundInF32) {
  for (DType other : {DType::bf16, DType::f32}) {
    Graph g;
    const ValueId x = *g.add_input("x", {DType::bf16, {9, 40}}, Binding::per_call);
    const ValueId b = *g.add_input("b", {other, {1, 40}}, Binding::per_call);
    ValueId bb = b;
    if (other != DType::bf16) {  // an f32 value (not bf16-valued) added, the result rounded to bf16
      const ValueId xf = (*g.add_node(Op::cast, {x}, {{"to", std::string("f32")}}, {"xf"}))[0];
      const ValueId sum = (*g.add_node(Op::add, {xf, b}, {}, {"sum"}))[0];
      bb = (*g.add_node(Op::cast, {sum}, {{"to", std::string("bf16")}}, {"y"}))[0];
    } else {
      bb = (*g.add_node(Op::add, {x, b}, {}, {"y"}))[0];
    }
    ASSERT_TRUE(g.add_output("y", bb).ok());
    auto fk = fused_kernel(g);
    ASSERT_TRUE(fk.ok()) << fk.error().message;
    auto source = emit_harness_candidate(fk->second, default_schedule(fk->second, Target::cpu, 1));
    ASSERT_TRUE(source.ok());
    const bool double_form = source->find("kiln_round_bf16_d((double)") != std::string::npos;
    EXPECT_EQ(double_form, other != DType::bf16) << *source;
    auto task = kernel_task(fk->first, fk->second);
    ASSERT_TRUE(task.ok()) << task.error().message;
    harness::CompileOptions co;
    co.flags = {"-O2", "-std=c++17", "-fopenmp-simd", "-shared", "-fPIC", "-Wl,-z,defs"};
    const harness::CandidateOutcome o = harness::evaluate_candidate(*task, *source, co);
    EXPECT_EQ(o.cls, harness::OutcomeClass::passed) << o.evidence.summary << "\n" << o.evidence.compiler_log;
  }
}

// ---- the CPU dialect ----

Graph unary_graph_for_test() {
  Graph g;
  const ValueId x = *g.add_input("x", {DType::bf16, {40, 96}}, Binding::per_call);
  const ValueId y = (*g.add_node(Op::gelu, {x}, {{"approximate", std::string("tanh")}}, {"y"}))[0];
  KILN_CHECK(g.add_output("y", y).ok());
  return g;
}

const std::vector<std::string> kCandidateFlags = {"-O2", "-std=c++17", "-fopenmp-simd", "-shared", "-fPIC", "-Wl,-z,defs"};

// The candidate flags for this machine's vector units (-march=native first), as kernels that use them need.
harness::CompileOptions native_compile_options() {
  harness::CompileOptions co;
  co.flags = kCandidateFlags;
  co.flags.insert(co.flags.begin(), "-march=native");
  return co;
}

// The harness's verdict on `source` as kernel `k` of graph `g`, compiled for this machine.
harness::CandidateOutcome native_outcome(const Graph& g, const Kernel& k, const std::string& source) {
  auto task = kernel_task(g, k);
  EXPECT_TRUE(task.ok());
  if (!task.ok()) return {};
  return harness::evaluate_candidate(*task, source, native_compile_options());
}

// The fused groups of a zoo model's optimized graph that lower to a kernel with a RoPE stage.
// The zoo model's fused kernels (its default pipeline) with a stage whose name contains `stage`.
std::vector<Kernel> kernels_with_stage(const std::string& spec, const std::string& stage) {
  std::vector<Kernel> out;
  auto model = models::build_zoo_model(spec);
  EXPECT_TRUE(model.ok());
  if (!model.ok()) return out;
  auto optimized = passes::run_pipeline(*model);
  EXPECT_TRUE(optimized.ok());
  if (!optimized.ok()) return out;
  for (const passes::FusedGroup& fg : passes::collect_fused_groups(optimized->graph)) {
    auto k = lower_nodes(optimized->graph, fg.members, "g" + std::to_string(fg.id));
    if (!k.ok()) continue;
    bool found = false;
    for (const Stage& st : k->stages) found = found || st.name.find(stage) != std::string::npos;
    if (found) out.push_back(std::move(*k));
  }
  return out;
}

std::vector<Kernel> rope_kernels(const std::string& spec) { return kernels_with_stage(spec, "rope"); }

// The tensor-scaled FP8 double block's image layernorm + modulate + amax before the QKV GEMM (group 5 in
// kiln-gpu-bench): of its 4096-row layernorm kernels with an amax, the one with the fewest stages.
std::optional<Kernel> fp8_image_layernorm_amax() {
  std::optional<Kernel> ln;
  for (Kernel& k : kernels_with_stage("flux1-double-block:dtype=fp8,fp8_scaling=tensor", "reduce_amax")) {
    bool norm = false;
    for (const Stage& st : k.stages) norm = norm || st.name.find("layernorm") != std::string::npos;
    if (norm && k.rows == 4096 && (!ln || k.stages.size() < ln->stages.size())) ln = std::move(k);
  }
  return ln;
}

// The graph's one fused kernel, emitted at its default CPU schedule, verified by the harness (normal and wide
// inputs, two calls per trial) against the reference; returns the source for checks of its form.
std::string verified_cpu_source(const Graph& g) {
  auto fk = fused_kernel(g);
  EXPECT_TRUE(fk.ok()) << (fk.ok() ? "" : fk.error().message);
  if (!fk.ok()) return "";
  auto source = emit_harness_candidate(fk->second, default_schedule(fk->second, Target::cpu, 1));
  EXPECT_TRUE(source.ok());
  auto task = kernel_task(fk->first, fk->second);
  EXPECT_TRUE(task.ok());
  if (!source.ok() || !task.ok()) return "";
  harness::CompileOptions co;
  co.flags = kCandidateFlags;
  const harness::CandidateOutcome o = harness::evaluate_candidate(*task, *source, co);
  EXPECT_EQ(o.cls, harness::OutcomeClass::passed) << o.evidence.summary << "\n" << o.evidence.compiler_log << "\n" << *source;
  return *source;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

Graph reduce_graph(Op op, DType dtype, const Shape& shape, std::vector<int64_t> axes) {
  Graph g;
  const ValueId x = *g.add_input("x", {dtype, shape}, Binding::per_call);
  const ValueId y = (*g.add_node(op, {x}, {{"axes", std::move(axes)}, {"keepdims", int64_t{1}}}, {"y"}))[0];
  KILN_CHECK(g.add_output("y", y).ok());
  return g;
}

// Reductions accumulate in 64 lanes (blocks of 64 elements and a shorter last block) summed as a tree, not
// with `omp simd reduction`: every kind, row lengths around the block size, and a reduction over two trailing
// axes (the lanes carry across the outer reduced loop). 16 rows: the verifier's bound is normwise, from the
// largest reference value, and a sum of normal terms can cancel to near zero; with 3 rows all three f32 means
// of 63 terms once came out near 0.015, the bound with them (1.1e-8), and a sound tree sum 1.2e-8 off.
TEST(KernelEmit, CpuLaneReductionsMatchTheReference) {
  for (Op op : {Op::reduce_sum, Op::reduce_mean, Op::reduce_max, Op::reduce_amax}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (int64_t n : {17, 63, 64, 65, 200}) {  // rows under 16 get no simd (default_schedule)
        SCOPED_TRACE(fmt::format("{} {} n={}", op_name(op), dtype_name(dtype), n));
        const std::string source = verified_cpu_source(reduce_graph(op, dtype, {16, n}, {-1}));
        EXPECT_NE(source.find("kiln_part"), std::string::npos);
        EXPECT_EQ(source.find("reduction("), std::string::npos);
      }
      SCOPED_TRACE(fmt::format("{} {} [16, 5, 70] over (1, 2)", op_name(op), dtype_name(dtype)));
      verified_cpu_source(reduce_graph(op, dtype, {16, 5, 70}, {1, 2}));
    }
  }
}

// A NaN anywhere in a row (a full block or the last one) makes its max and amax NaN; other rows are exact.
TEST(KernelEmit, CpuLaneMaxPropagatesNaN) {
  for (Op op : {Op::reduce_max, Op::reduce_amax}) {
    auto fk = fused_kernel(reduce_graph(op, DType::f32, {3, 130}, {-1}));
    ASSERT_TRUE(fk.ok()) << fk.error().message;
    auto source = emit_harness_candidate(fk->second, default_schedule(fk->second, Target::cpu, 1));
    ASSERT_TRUE(source.ok());
    harness::CompileOptions co;
    co.flags = kCandidateFlags;
    const std::string dir = harness::make_scratch_dir("", "lane-max");
    const harness::CompiledCandidate built = harness::compile_candidate(*source, dir, co);
    ASSERT_EQ(built.outcome.cls, harness::OutcomeClass::compiled) << built.outcome.evidence.compiler_log;
    void* lib = dlopen(built.library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib, nullptr) << dlerror();
    using KernelFn = int (*)(const kiln_tensor*, int, kiln_tensor*, int);
    auto fn = reinterpret_cast<KernelFn>(dlsym(lib, "kiln_kernel"));
    ASSERT_NE(fn, nullptr);
    std::vector<float> x(3 * 130), y(3, 0.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = -1000.0f + static_cast<float>((i * 37) % 101);
    x[130 + 70] = NAN;   // row 1: in the second full block of 64
    x[260 + 129] = NAN;  // row 2: in the last, 2-element block
    const int64_t in_shape[2] = {3, 130}, out_shape[2] = {3, 1};
    kiln_tensor in{x.data(), in_shape, 2, KILN_F32}, out{y.data(), out_shape, 2, KILN_F32};
    ASSERT_EQ(fn(&in, 1, &out, 1), 0);
    float expected = -INFINITY;
    for (int j = 0; j < 130; ++j) expected = std::max(expected, op == Op::reduce_amax ? std::fabs(x[j]) : x[j]);
    EXPECT_EQ(y[0], expected) << op_name(op);
    EXPECT_TRUE(std::isnan(y[1])) << op_name(op);
    EXPECT_TRUE(std::isnan(y[2])) << op_name(op);
    dlclose(lib);
    std::filesystem::remove_all(dir);
  }
}

// bf16 outputs: the store converts the unrounded value (one rounding, not two), and products inside the
// expression stay f32 (a modulated layernorm rounds once per element, not three times). When the value also
// reaches an f32 output, the products are rounded as the reference rounds them: the f32 output would see it.
TEST(KernelEmit, CpuRoundsBf16OnceWhereOnlyBf16OutputsSeeIt) {
  const std::string bf16_out = verified_cpu_source(layernorm_modulate_graph(DType::bf16, 7, 33));
  EXPECT_EQ(count_of(bf16_out.substr(bf16_out.find("// kernel")), "kiln_round_bf16("), 0u) << bf16_out;
  Graph g = layernorm_modulate_graph(DType::bf16, 7, 33);
  const ValueId y = g.outputs()[0].value;
  const ValueId yf = (*g.add_node(Op::cast, {y}, {{"to", std::string("f32")}}, {"yf"}))[0];
  ASSERT_TRUE(g.add_output("yf", yf).ok());
  const std::string f32_out = verified_cpu_source(g);
  EXPECT_GE(count_of(f32_out.substr(f32_out.find("// kernel")), "kiln_round_bf16("), 2u) << f32_out;
}

// A kernel with several passes over a row prefetches the next rows of its row-major inputs (not the broadcast
// weight), a part in each step of the row's first pass (the row's own misses and the next row's requests
// overlap), or before the last pass where the first has no whole steps; a one-pass kernel relies on the
// hardware prefetcher.
TEST(KernelEmit, CpuPrefetchesTheNextRowDuringTheFirstPass) {
  for (int64_t cols : {96, 1024, 40}) {
    Graph g;
    const ValueId x = *g.add_input("x", {DType::bf16, {40, cols}}, Binding::per_call);
    const ValueId w = *g.add_input("w", {DType::bf16, {cols}}, Binding::per_call);
    const ValueId y = (*g.add_node(Op::rmsnorm, {x, w}, {}, {"y"}))[0];
    ASSERT_TRUE(g.add_output("y", y).ok());
    const std::string norm = verified_cpu_source(g);
    const std::string body = norm.substr(norm.find("// kernel"));
    EXPECT_EQ(count_of(body, "__builtin_prefetch("), 1u) << body;
    const int64_t ahead = (2048 + 2 * cols - 1) / (2 * cols);  // 2 KiB ahead
    EXPECT_NE(body.find(fmt::format("(const char*)in0 + (r + {}) * {}LL", ahead, 2 * cols)), std::string::npos) << body;
    const size_t prefetch = body.find("__builtin_prefetch("), second_pass = body.find("{ // stage", body.find("{ // stage") + 1);
    const bool in_first_pass = body.find("for (int64_t kiln_vb") < prefetch && prefetch < second_pass;
    EXPECT_EQ(in_first_pass, cols != 40) << body;  // 40 elements: no whole 64-lane step in the first pass
    EXPECT_EQ(body.find("part by part") != std::string::npos, cols != 40) << body;
  }
  EXPECT_EQ(count_of(verified_cpu_source(unary_graph_for_test()), "__builtin_prefetch("), 0u);
}

// Row caches that are cheap to recompute (the f32 cast of a bf16 row, x - mean) are re-read by default on the
// CPU; one holding exp (softmax) stays cached.
TEST(KernelSchedule, CpuDefaultRecomputesCheapRowCaches) {
  auto ln = fused_kernel(layernorm_modulate_graph(DType::bf16, 64, 3072));
  ASSERT_TRUE(ln.ok());
  EXPECT_FALSE(default_schedule(ln->second, Target::cpu, 1).cache_row);
  EXPECT_TRUE(default_schedule(ln->second, Target::cuda, 132).cache_row);
  Graph g;
  const ValueId x = *g.add_input("x", {DType::bf16, {64, 3072}}, Binding::per_call);
  const ValueId y = (*g.add_node(Op::softmax, {x}, {}, {"y"}))[0];
  ASSERT_TRUE(g.add_output("y", y).ok());
  auto sm = fused_kernel(g);
  ASSERT_TRUE(sm.ok()) << sm.error().message;
  EXPECT_TRUE(default_schedule(sm->second, Target::cpu, 1).cache_row) << kernel_to_text(sm->second);
}

// A generated CPU kernel compiled with the candidate flags and loaded; `run` calls its kiln_kernel on one bf16
// input and one bf16 output.
struct LoadedCpuKernel {
  std::string dir;
  void* lib = nullptr;
  int (*fn)(const kiln_tensor*, int, kiln_tensor*, int) = nullptr;
  explicit LoadedCpuKernel(const std::string& source) {
    const harness::CompileOptions co = native_compile_options();
    dir = harness::make_scratch_dir("", "cpu-kernel");
    const harness::CompiledCandidate built = harness::compile_candidate(source, dir, co);
    EXPECT_EQ(built.outcome.cls, harness::OutcomeClass::compiled) << built.outcome.evidence.compiler_log;
    if (built.outcome.cls != harness::OutcomeClass::compiled) return;
    lib = dlopen(built.library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(lib, nullptr) << dlerror();
    if (lib) fn = reinterpret_cast<decltype(fn)>(dlsym(lib, "kiln_kernel"));
  }
  ~LoadedCpuKernel() {
    if (lib) dlclose(lib);
    std::filesystem::remove_all(dir);
  }
  std::vector<uint16_t> run(std::vector<uint16_t> x, const std::vector<int64_t>& in_shape,
                            const std::vector<int64_t>& out_shape) const {
    int64_t out_n = 1;
    for (int64_t d : out_shape) out_n *= d;
    std::vector<uint16_t> y(static_cast<size_t>(out_n), 0x7fc1);
    kiln_tensor in{x.data(), in_shape.data(), static_cast<int>(in_shape.size()), KILN_BF16};
    kiln_tensor out{y.data(), out_shape.data(), static_cast<int>(out_shape.size()), KILN_BF16};
    EXPECT_EQ(fn ? fn(&in, 1, &out, 1) : -1, 0);
    return y;
  }
};

Graph unary_bf16_graph(Op op, const Attrs& attrs, int64_t rows, int64_t cols, DType dtype = DType::bf16) {
  Graph g;
  const ValueId x = *g.add_input("x", {dtype, {rows, cols}}, Binding::per_call);
  const ValueId y = (*g.add_node(op, {x}, attrs, {"y"}))[0];
  KILN_CHECK(g.add_output("y", y).ok());
  return g;
}

// Schedule::tables: a value that is a transcendental of one bf16/f16 element alone (GELU, SiLU inside SwiGLU,
// exp, an f16 sigmoid) is read from a table of its 65536 values (of its bf16 bits where it is the whole stored
// bf16 value). The harness verifies each such kernel against the reference;
// the table is filled with the exact-form functions, not the coarse ones; kernels without such a value refuse
// the field, and CUDA refuses it.
TEST(KernelEmit, CpuTablesHoldOneElementFunctions) {
  const Attrs tanh_gelu = {{"approximate", std::string("tanh")}};
  const std::vector<Graph> graphs = {unary_bf16_graph(Op::gelu, tanh_gelu, 40, 96),
                                     unary_bf16_graph(Op::swiglu, {}, 9, 192),
                                     unary_bf16_graph(Op::exp, {}, 5, 64),
                                     unary_bf16_graph(Op::sigmoid, {}, 6, 48, DType::f16),
                                     unary_bf16_graph(Op::gelu, tanh_gelu, 3, 45)};  // 11 words and one element
  for (size_t gi = 0; gi < graphs.size(); ++gi) {
    auto fk = fused_kernel(graphs[gi]);
    ASSERT_TRUE(fk.ok()) << fk.error().message;
    const Kernel& k = fk->second;
    SCOPED_TRACE(kernel_to_text(k));
    ASSERT_TRUE(has_tabulated_exprs(k));
    Schedule s = default_schedule(k, Target::cpu, 1);
    EXPECT_FALSE(s.tables);  // too few elements per call to pay for filling a table
    s.tables = true;
    s.pairs = false;  // a table is read an element at a time
    ASSERT_TRUE(can_implement(k, s, Target::cpu).ok());
    EXPECT_FALSE(can_implement(k, s, Target::cuda).ok());
    auto source = emit_harness_candidate(k, s);
    ASSERT_TRUE(source.ok());
    const std::string body = source->substr(source->find("// kernel"));
    // GELU and exp are the whole stored bf16 value: a table of its bf16 bits, stored as read, four elements a
    // 64-bit word. SwiGLU's SiLU is a part: a table of f32 values, multiplied by the other half; so is the f16
    // sigmoid (an f16 store rounds).
    const bool whole = gi == 0 || gi == 2 || gi == 4;
    EXPECT_NE(body.find(whole ? "kiln_t0[(kiln_w >> 48) & 0xffffu]" : "kiln_t0[in0["), std::string::npos) << *source;
    EXPECT_NE(source->find(whole ? "static uint16_t kiln_tv0" : "static float kiln_tv0"), std::string::npos) << *source;
    EXPECT_EQ(body.find("kiln_store_bf16_row(") != std::string::npos, gi == 1) << *source;  // SwiGLU's bf16 row
    EXPECT_EQ(body.find("kiln_gelu_tanh_c("), std::string::npos);
    EXPECT_EQ(body.find("kiln_silu_c("), std::string::npos);
    auto task = kernel_task(fk->first, k);
    ASSERT_TRUE(task.ok()) << task.error().message;
    harness::CompileOptions co;
    co.flags = kCandidateFlags;
    const harness::CandidateOutcome o = harness::evaluate_candidate(*task, *source, co);
    EXPECT_EQ(o.cls, harness::OutcomeClass::passed) << o.evidence.summary << "\n" << o.evidence.compiler_log;
  }
  auto ln = fused_kernel(layernorm_modulate_graph(DType::bf16, 7, 33));
  ASSERT_TRUE(ln.ok());
  EXPECT_FALSE(has_tabulated_exprs(ln->second));  // exp-free, and its values depend on the row's statistics
  Schedule s = default_schedule(ln->second, Target::cpu, 1);
  s.tables = true;
  const Status refused = can_implement(ln->second, s, Target::cpu);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("tables"), std::string::npos) << refused.error().message;
  // Big enough, the default reads the table, and the space offers both.
  auto big = fused_kernel(unary_bf16_graph(Op::gelu, tanh_gelu, 64, 3072));
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(default_schedule(big->second, Target::cpu, 2).tables);
  int with = 0, without = 0;
  for (const Schedule& x : schedule_space(big->second, Target::cpu, 2)) (x.tables ? with : without)++;
  EXPECT_GT(with, 0);
  EXPECT_GT(without, 0);
}

// Schedule::gathers: the tables read by vector gathers (kiln_gather_u16 for a stored bf16 value's bits, blocks of
// kiln_gather_f32 for an f32 part of one) give the same bits as one load an element, and pass the harness against
// the reference: GELU rows of 1037 (a tail past the 16-lane vectors), SwiGLU rows of 2500 (two whole blocks of
// 1024 and a short one), exp rows of 77; inputs include 0xffff, the last table entry, which the 16-bit gather
// reads 32 bits at. gathers needs tables and is a CPU field.
TEST(KernelEmit, CpuGathersReadTheTablesBits) {
  const Attrs tanh_gelu = {{"approximate", std::string("tanh")}};
  struct Case { Op op; Attrs attrs; int64_t rows, cols, out_cols; const char* gather; };
  const Case cases[] = {{Op::gelu, tanh_gelu, 5, 1037, 1037, "kiln_gather_u16(out0"},
                        {Op::swiglu, {}, 3, 5000, 2500, "kiln_gather_f32(kiln_g"},
                        {Op::exp, {}, 4, 77, 77, "kiln_gather_u16(out0"}};
  for (const Case& c : cases) {
    auto fk = fused_kernel(unary_bf16_graph(c.op, c.attrs, c.rows, c.cols));
    ASSERT_TRUE(fk.ok()) << fk.error().message;
    SCOPED_TRACE(kernel_to_text(fk->second));
    std::vector<uint16_t> x(static_cast<size_t>(c.rows * c.cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_bits_from_double(std::sin(0.37 * static_cast<double>(i)) * 6.0);
    x[17] = x.back() = 0xffff;  // a NaN: the table's last entry, in a vector step and in the tail
    x[18] = 0x7f80;             // +inf
    std::vector<uint16_t> outputs[2];
    for (bool gathers : {false, true}) {
      Schedule s = default_schedule(fk->second, Target::cpu, 1);
      s.tables = true;
      s.gathers = gathers;
      s.pairs = false;
      ASSERT_TRUE(can_implement(fk->second, s, Target::cpu).ok());
      auto source = emit_harness_candidate(fk->second, s);
      ASSERT_TRUE(source.ok());
      EXPECT_EQ(source->find(c.gather) != std::string::npos, gathers) << *source;
      const harness::CandidateOutcome o = native_outcome(fk->first, fk->second, *source);
      ASSERT_EQ(o.cls, harness::OutcomeClass::passed) << o.evidence.summary << "\n" << o.evidence.compiler_log;
      const LoadedCpuKernel kernel(*source);
      outputs[gathers] = kernel.run(x, {c.rows, c.cols}, {c.rows, c.out_cols});
    }
    EXPECT_EQ(outputs[0], outputs[1]);
  }
  auto fk = fused_kernel(unary_bf16_graph(Op::gelu, tanh_gelu, 64, 3072));
  ASSERT_TRUE(fk.ok());
  Schedule s = default_schedule(fk->second, Target::cpu, 2);
  EXPECT_EQ(s.gathers, s.tables && vector_gathers_pay());
  s.tables = false;
  s.gathers = true;
  const Status untabled = can_implement(fk->second, s, Target::cpu);
  ASSERT_FALSE(untabled.ok());
  EXPECT_NE(untabled.error().message.find("gathers"), std::string::npos) << untabled.error().message;
  Schedule cuda;
  cuda.threads_per_row = 32;
  cuda.gathers = true;
  EXPECT_FALSE(can_implement(fk->second, cuda, Target::cuda).ok());
  int with = 0;
  for (const Schedule& x : schedule_space(fk->second, Target::cpu, 2)) with += x.gathers ? 1 : 0;
  EXPECT_GT(with, 0);
}

// Every one of the 65536 bf16 bit patterns (NaNs, infinities, subnormals, zeros) through a tabulated GELU-tanh:
// non-finite inputs give the reference's value, and every finite one is within one bf16 ulp of the exact value
// (x / (1 + e^-z) in double, rounded once to bf16) and equal to it but for a few next to a rounding boundary.
// (The reference's own tail, x < -9, is less accurate than the kernels, so the exact value is the oracle there.)
TEST(KernelEmit, CpuTableCoversEveryBf16Input) {
  const Graph g = unary_bf16_graph(Op::gelu, {{"approximate", std::string("tanh")}}, 256, 256);
  auto fk = fused_kernel(g);
  ASSERT_TRUE(fk.ok()) << fk.error().message;
  std::vector<uint16_t> x(65536);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i);
  Tensor input(DType::bf16, {256, 256});
  std::memcpy(input.data(), x.data(), input.byte_size());
  auto reference = ref::run_graph(fk->first, {{"x", input}});
  ASSERT_TRUE(reference.ok()) << reference.error().message;
  const Tensor& want = reference->at("y");
  int mismatches = 0;
  {
    Schedule s = default_schedule(fk->second, Target::cpu, 1);
    s.tables = true;
    auto source = emit_harness_candidate(fk->second, s);
    ASSERT_TRUE(source.ok());
    const LoadedCpuKernel kernel(*source);
    const std::vector<uint16_t> y = kernel.run(x, {256, 256}, {256, 256});
    for (int64_t i = 0; i < 65536; ++i) {
      const double xi = bf16_bits_to_double(static_cast<uint16_t>(i)), got = bf16_bits_to_double(y[static_cast<size_t>(i)]);
      if (!std::isfinite(xi)) {
        const double w = want.get(i);
        EXPECT_TRUE(std::isnan(w) ? std::isnan(got) : got == w) << "input bits " << i << ": " << got << " vs " << w;
        continue;
      }
      const double z = 2.0 * std::sqrt(2.0 / M_PI) * (xi + 0.044715 * xi * xi * xi);
      const double e = xi / (1.0 + std::exp(-z));
      const uint16_t exact = bf16_bits_from_double(e);
      if (y[static_cast<size_t>(i)] == exact || got == bf16_bits_to_double(exact)) continue;  // +-0 alike
      ++mismatches;
      const int64_t ulps = std::abs(static_cast<int64_t>(y[static_cast<size_t>(i)] & 0x7fff) - static_cast<int64_t>(exact & 0x7fff));
      EXPECT_LE(ulps, 1) << "input bits " << i << ": " << got << " vs " << bf16_bits_to_double(exact);
      // Another bf16 than the exact value's only next to the midpoint between the two: the f32 helper is a few
      // f32 ulps (2^-22) from exact, the midpoint must be closer than 2^-18 of the value.
      const double midpoint = 0.5 * (got + bf16_bits_to_double(exact));
      EXPECT_LE(std::fabs(e - midpoint), std::ldexp(std::fabs(e), -18)) << "input bits " << i << ": " << got << " vs " << e;
    }
  }
  EXPECT_LT(mismatches, 65536 / 1000) << mismatches;
}

// Schedule::stream_stores: bf16 output rows written with non-temporal stores from their first 32-byte boundary
// on, fenced at the end: the same bits as cached stores, for rows that start on and off a 32-byte boundary
// and lengths that leave a tail; the default streams only long rows of kernels larger than the cache it is told.
TEST(KernelEmit, CpuStreamedStoresWriteTheSameBits) {
  const Attrs tanh_gelu = {{"approximate", std::string("tanh")}};
  for (int64_t cols : {96, 1000, 1037}) {
    auto fk = fused_kernel(unary_bf16_graph(Op::gelu, tanh_gelu, 7, cols));
    ASSERT_TRUE(fk.ok()) << fk.error().message;
    std::vector<uint16_t> x(static_cast<size_t>(7 * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_bits_from_double(std::sin(0.37 * static_cast<double>(i)) * 6.0);
    std::vector<uint16_t> outputs[2];
    for (bool stream : {false, true}) {
      Schedule s = default_schedule(fk->second, Target::cpu, 1);
      s.stream_stores = stream;
      s.pairs = false;  // the f32 row and its bf16 row store (pairs stream words: CpuPairsMatchTheReference)
      ASSERT_TRUE(can_implement(fk->second, s, Target::cpu).ok());
      auto source = emit_harness_candidate(fk->second, s);
      ASSERT_TRUE(source.ok());
      EXPECT_EQ(source->find("kiln_stream_bf16_row(out0") != std::string::npos, stream) << *source;
      EXPECT_EQ(source->find("_mm_sfence();\n#endif\n}") != std::string::npos, stream) << *source;
      // The harness first: a misaligned streamed store (rows of 1000 and 1037 start off 32 bytes) faults in its
      // worker, not in this process.
      const harness::CandidateOutcome o = native_outcome(fk->first, fk->second, *source);
      ASSERT_EQ(o.cls, harness::OutcomeClass::passed) << o.evidence.summary << "\n" << o.evidence.compiler_log;
      const LoadedCpuKernel kernel(*source);
      outputs[stream] = kernel.run(x, {7, cols}, {7, cols});
    }
    EXPECT_EQ(outputs[0], outputs[1]) << "cols " << cols;
  }
  Schedule cuda;
  cuda.threads_per_row = 32;
  cuda.stream_stores = true;
  auto fk = fused_kernel(unary_bf16_graph(Op::gelu, tanh_gelu, 64, 4096));
  ASSERT_TRUE(fk.ok());
  EXPECT_FALSE(can_implement(fk->second, cuda, Target::cuda).ok());
  EXPECT_FALSE(default_schedule(fk->second, Target::cpu, 2).stream_stores);            // no cache size given
  EXPECT_TRUE(default_schedule(fk->second, Target::cpu, 2, 1 << 19).stream_stores);    // 1 MiB over 512 KiB
  EXPECT_FALSE(default_schedule(fk->second, Target::cpu, 2, 64 << 20).stream_stores);  // fits 64 MiB
  auto heads = fused_kernel(unary_bf16_graph(Op::gelu, tanh_gelu, 8192, 128));  // as long, in rows of 128
  ASSERT_TRUE(heads.ok());
  EXPECT_FALSE(default_schedule(heads->second, Target::cpu, 2, 1 << 19).stream_stores);
}

// Schedule::pairs: stages run over 32-bit words of two bf16 elements. The harness verifies each paired kernel
// against the reference, with the words stored in place and streamed: a modulated layernorm (its scale and
// shift rows kept evens, then odds), an rmsnorm with its weight, rows of 128 (q/k heads) and of 1000 (a
// remainder past the 64-word lanes, rows off 32-byte boundaries), and a GELU through an odd-offset window
// (words at 2-byte alignment). A one-element function gives the same bits paired as not. Odd rows, the RoPE
// partner, tables and CUDA refuse the field.
TEST(KernelEmit, CpuPairsMatchTheReference) {
  const Attrs tanh_gelu = {{"approximate", std::string("tanh")}};
  const auto rmsnorm = testing::rmsnorm_graph;
  Graph window;  // gelu(x[:, 1:97])
  {
    const ValueId x = *window.add_input("x", {DType::bf16, {6, 98}}, Binding::per_call);
    const ValueId s = (*window.add_node(Op::slice, {x}, {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"end", int64_t{97}},
                                                        {"step", int64_t{1}}}, {"s"}))[0];
    KILN_CHECK(window.add_output("y", (*window.add_node(Op::gelu, {s}, tanh_gelu, {"y"}))[0]).ok());
  }
  const std::vector<Graph> graphs = {layernorm_modulate_graph(DType::bf16, 9, 96), rmsnorm(7, 1000), rmsnorm(12, 128),
                                     unary_bf16_graph(Op::gelu, tanh_gelu, 5, 1000), window};
  for (size_t gi = 0; gi < graphs.size(); ++gi) {
    auto fk = fused_kernel(graphs[gi]);
    ASSERT_TRUE(fk.ok()) << fk.error().message;
    const Kernel& k = fk->second;
    SCOPED_TRACE(kernel_to_text(k));
    ASSERT_TRUE(has_pairs(k));
    Schedule base = default_schedule(k, Target::cpu, 1);
    base.pairs = true;
    std::vector<uint16_t> outputs[2];
    for (bool stream : {false, true}) {
      Schedule s = base;
      s.stream_stores = stream;
      ASSERT_TRUE(can_implement(k, s, Target::cpu).ok());
      auto source = emit_harness_candidate(k, s);
      ASSERT_TRUE(source.ok());
      const std::string body = source->substr(source->find("// kernel"));
      EXPECT_NE(body.find("kiln_word(in0 + "), std::string::npos) << body;
      EXPECT_EQ(body.find("kiln_stream_words(out0") != std::string::npos, stream) << body;
      EXPECT_EQ(body.find("kiln_put_word(out0") != std::string::npos, !stream) << body;
      EXPECT_EQ(body.find("_bf16_row("), std::string::npos) << body;  // no f32 row buffer
      const harness::CandidateOutcome o = native_outcome(fk->first, k, *source);
      ASSERT_EQ(o.cls, harness::OutcomeClass::passed) << o.evidence.summary << "\n" << o.evidence.compiler_log << "\n" << body;
      if (gi == 3) {  // GELU of one element: paired or not, the same bits
        std::vector<uint16_t> x(5 * 1000);
        for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_bits_from_double(std::sin(0.37 * static_cast<double>(i)) * 6.0);
        for (bool pairs : {false, true}) {
          Schedule p = s;
          p.pairs = pairs;
          auto src = emit_harness_candidate(k, p);
          ASSERT_TRUE(src.ok());
          outputs[pairs] = LoadedCpuKernel(*src).run(x, {5, 1000}, {5, 1000});
        }
        EXPECT_EQ(outputs[0], outputs[1]);
      }
    }
  }
  // The default pairs rows of kPairMinRow elements or more, not shorter ones.
  auto long_rows = fused_kernel(layernorm_modulate_graph(DType::bf16, 3, kPairMinRow));
  ASSERT_TRUE(long_rows.ok());
  EXPECT_TRUE(default_schedule(long_rows->second, Target::cpu, 1).pairs);
  auto short_rows = fused_kernel(layernorm_modulate_graph(DType::bf16, 3, kPairMinRow - 32));
  ASSERT_TRUE(short_rows.ok());
  EXPECT_FALSE(default_schedule(short_rows->second, Target::cpu, 1).pairs);
  // The layernorm's rows are kept evens, then odds.
  auto ln = fused_kernel(layernorm_modulate_graph(DType::bf16, 9, 96));
  ASSERT_TRUE(ln.ok());
  const std::optional<PairPlan> plan = pair_plan(ln->second);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->split_rows, (std::vector<bool>{false, true, true}));
  // Refusals: an odd row, the RoPE partner (element 2s + 1 reads 2s), a table, CUDA.
  auto odd = fused_kernel(unary_bf16_graph(Op::gelu, tanh_gelu, 7, 1037));
  ASSERT_TRUE(odd.ok());
  EXPECT_FALSE(has_pairs(odd->second));
  Schedule s = default_schedule(odd->second, Target::cpu, 1);
  EXPECT_FALSE(s.pairs);
  s.pairs = true;
  const Status refused = can_implement(odd->second, s, Target::cpu);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("pairs"), std::string::npos) << refused.error().message;
  auto gelu = fused_kernel(unary_bf16_graph(Op::gelu, tanh_gelu, 5, 1000));
  ASSERT_TRUE(gelu.ok());
  s = default_schedule(gelu->second, Target::cpu, 1);
  s.tables = true;
  s.pairs = true;
  EXPECT_FALSE(can_implement(gelu->second, s, Target::cpu).ok());
  Schedule cuda;
  cuda.threads_per_row = 32;
  cuda.pairs = true;
  EXPECT_FALSE(can_implement(gelu->second, cuda, Target::cuda).ok());
  const std::vector<Kernel> ropes = rope_kernels("flux1-double-block:tiny");
  EXPECT_FALSE(ropes.empty());
  for (const Kernel& k : ropes) EXPECT_FALSE(has_pairs(k)) << kernel_to_text(k);
}

// The CUDA dialect emits source nvcc accepts, for every fused group of a FLUX block (fp8 included). No GPU
// is needed; skipped when the toolkit is absent.
TEST(KernelEmit, CudaDialectCompilesWithNvcc) {
  const std::string nvcc = "/usr/local/cuda/bin/nvcc";
  if (!std::filesystem::exists(nvcc)) GTEST_SKIP() << "no CUDA toolkit at " << nvcc;
  for (const char* spec : {"flux1-double-block:tiny", "flux1-single-block:tiny,dtype=fp8",
                           "flux1-double-block:tiny,dtype=fp8,fp8_scaling=tensor,img_tokens=512"}) {
    auto model = models::build_zoo_model(spec);
    ASSERT_TRUE(model.ok());
    auto optimized = passes::run_pipeline(*model);
    ASSERT_TRUE(optimized.ok());
    std::vector<Kernel> kernels;
    for (const passes::FusedGroup& fg : passes::collect_fused_groups(optimized->graph)) {
      auto k = lower_nodes(optimized->graph, fg.members, "g" + std::to_string(fg.id));
      if (k.ok()) kernels.push_back(std::move(*k));
    }
    ASSERT_GT(kernels.size(), 5u);
    // Every kernel at its default schedule (16-byte vectors where rows allow), and again at each vector
    // width and block width of the schedule space's corners, so the lead's GPU run meets no compile error.
    std::vector<KernelToEmit> items;
    std::vector<std::string> names;
    for (size_t i = 0; i < kernels.size(); ++i) {
      std::vector<Schedule> schedules = {default_schedule(kernels[i], Target::cuda, 132)};
      schedules.push_back(schedules[0]);
      schedules.back().registers = false;  // every row buffer in shared memory
      for (int vec : {1, 2, 4, 8}) schedules.push_back(Schedule{1, 1, i % 2 ? 64 : 256, vec, true, 1});
      // Rows narrower than a warp: several rows per warp, the reduction's shuffles within each row's lanes.
      schedules.push_back(Schedule{8, 1, 16, 8, true, 1});
      schedules.push_back(Schedule{16, 1, 4, 2, true, 1});
      // Tasks taken in turns (one resident wave, two a block), the next task's first-pass loads in flight.
      for (int turns : {0, 2}) {
        schedules.push_back(schedules[0]);
        schedules.back().row_loop = turns;
      }
      for (size_t j = 0; j < schedules.size(); ++j) {
        if (!can_implement(kernels[i], schedules[j], Target::cuda).ok()) schedules[j].cache_row = false;
        if (!can_implement(kernels[i], schedules[j], Target::cuda).ok()) continue;
        names.push_back(fmt::format("kiln_g{}_{}", i, j));
        items.push_back({&kernels[i], schedules[j], names.back()});
      }
    }
    auto module = emit_module(items, Target::cuda);
    ASSERT_TRUE(module.ok()) << module.error().message;
    // Vectorized stages: 16-byte words behind an alignment check, with the scalar path beside them.
    EXPECT_NE(module->source.find("((uint4*)(out"), std::string::npos) << spec;
    EXPECT_NE(module->source.find("if (kiln_vec_ok)"), std::string::npos) << spec;
    const std::string dir = harness::make_scratch_dir("", "cuda-emit");
    std::ofstream(dir + "/k.cu") << module->source;
    const std::string cmd = nvcc + " -arch=sm_90 -c -o " + dir + "/k.o " + dir + "/k.cu > " + dir + "/log 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream log(dir + "/log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_EQ(rc, 0) << spec << "\n" << text.substr(0, 4000);
    std::filesystem::remove_all(dir);
  }
}

// A concat along a row axis (the text and image tokens of a joint sequence) is a branch per row on CUDA: each
// branch reads its own piece with 16-byte loads, no clamped per-element loads of both pieces.
TEST(KernelEmit, CudaConcatOverRowsBranchesPerRow) {
  Graph g;
  const ValueId a = *g.add_input("a", {DType::bf16, {2, 8, 128}}, Binding::per_call);
  const ValueId b = *g.add_input("b", {DType::bf16, {2, 24, 128}}, Binding::per_call);
  const ValueId c = (*g.add_node(Op::concat, {a, b}, {{"axis", int64_t{1}}}, {"c"}))[0];
  const ValueId y = (*g.add_node(Op::silu, {c}, {}, {"y"}))[0];
  ASSERT_TRUE(g.add_output("y", y).ok());
  auto k = lower_nodes(g, {0, 1}, "cat");
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_EQ(k->rows, 64);
  auto module = emit_module({{&*k, Schedule{8, 1, 16, 8, true, 1}, "kern"}}, Target::cuda);
  ASSERT_TRUE(module.ok()) << module.error().message;
  const std::string& src = module->source;
  const size_t body = src.find("extern \"C\"");
  ASSERT_NE(body, std::string::npos);
  EXPECT_NE(src.find(") < 8) {", body), std::string::npos) << src.substr(body);
  EXPECT_EQ(src.find("kiln_clamp(", body), std::string::npos) << src.substr(body);
  EXPECT_NE(src.find("((const uint4*)(in0 +", body), std::string::npos) << src.substr(body);
  EXPECT_NE(src.find("((const uint4*)(in1 +", body), std::string::npos) << src.substr(body);
}

// Schedule::row_loop: a block takes tasks blockIdx.x, + gridDim.x, ...; in a kernel with several passes over a
// row, the first pass reads its row's words from registers the previous turn loaded (before the first turn: the
// code before the loop), and loads the next task's right after, before the reductions. Only per-row loads are
// carried (the modulation's shift and scale are the same for every row). The grid is the tasks over the turns,
// or all of them for 0 (the backend lowers it at load). A block's next task writes the reduction exchange only
// after a barrier where two reductions alternate; a lone one (rmsnorm) waits at the end of each task.
TEST(KernelEmit, CudaRowTurnsLoadTheNextTaskEarly) {
  auto ln = fused_kernel(layernorm_modulate_graph(DType::bf16, 67, 3072));
  ASSERT_TRUE(ln.ok()) << ln.error().message;
  Schedule s = default_schedule(ln->second, Target::cuda, 132);
  ASSERT_EQ(s.rows_per_task, 1);
  ASSERT_EQ(s.threads_per_row, 128);
  auto body_of = [](const std::string& src) { return src.substr(src.find("extern \"C\"")); };
  {
    auto plain = emit_module({{&ln->second, s, "kern"}}, Target::cuda);
    ASSERT_TRUE(plain.ok()) << plain.error().message;
    EXPECT_EQ(plain->kernels[0].grid, 67);
    EXPECT_EQ(plain->source.find("kiln_task"), std::string::npos);
    EXPECT_EQ(plain->source.find("kiln_pf"), std::string::npos);
  }
  for (int turns : {0, 4}) {
    s.row_loop = turns;
    auto m = emit_module({{&ln->second, s, "kern"}}, Target::cuda);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->kernels[0].grid, turns == 0 ? 67 : 17);
    const std::string body = body_of(m->source);
    const size_t loop = body.find("for (kiln_idx kiln_task = blockIdx.x; kiln_task < 67; kiln_task += gridDim.x) {");
    ASSERT_NE(loop, std::string::npos) << body;
    // One register array: x's row (in0); shift and scale are read from memory.
    EXPECT_NE(body.find("uint4 kiln_pf0[3][1];"), std::string::npos) << body;
    EXPECT_EQ(body.find("kiln_pf1"), std::string::npos) << body;
    const size_t first_load = body.find("kiln_pf0[kiln_it]))[kiln_q] = ((const uint4*)(in0 + ");
    EXPECT_LT(first_load, loop) << body;
    const size_t second_stage = body.find("{ // stage 1");
    const size_t next = body.find("if (kiln_vec_ok && kiln_task + gridDim.x < 67) {");
    EXPECT_GT(next, body.find("{ // stage 0")) << body;
    EXPECT_LT(next, second_stage) << body;
    EXPECT_NE(body.find("= ((const uint4*)(kiln_pf0[kiln_it]))[kiln_q];"), std::string::npos) << body;
    EXPECT_EQ(body.find("  }\n  __syncthreads();\n  }\n}"), std::string::npos) << body;  // two exchanges alternate
  }
  auto norm = fused_kernel(testing::rmsnorm_graph(40, 3072));
  ASSERT_TRUE(norm.ok()) << norm.error().message;
  Schedule ns = default_schedule(norm->second, Target::cuda, 132);
  ASSERT_GT(ns.threads_per_row, 32);
  ASSERT_EQ(reduction_exchanges(norm->second), 1);
  ns.row_loop = 2;
  auto m = emit_module({{&norm->second, ns, "kern"}}, Target::cuda);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->kernels[0].grid, 20);
  EXPECT_NE(body_of(m->source).find("  }\n  __syncthreads();\n  }\n}"), std::string::npos) << body_of(m->source);
}

// Schedule::early_loads: the modulation's shift and scale, which the last pass reads after both reductions, are
// loaded into registers right after the first pass has issued the row's loads and before the first exchange;
// the last pass reads them from there. In one resident wave too (after the next task's loads). Without it, or
// on the unaligned path, they are read where they are used.
TEST(KernelEmit, CudaEarlyLoadsPrecedeTheFirstExchange) {
  auto ln = fused_kernel(layernorm_modulate_graph(DType::bf16, 67, 3072));
  ASSERT_TRUE(ln.ok()) << ln.error().message;
  Schedule s = default_schedule(ln->second, Target::cuda, 132);
  // The default where the row's reduction crosses warps (128 threads a row), not where it is a warp's shuffles.
  ASSERT_EQ(s.threads_per_row, 128);
  EXPECT_TRUE(s.early_loads);
  auto heads = fused_kernel(testing::rmsnorm_graph(64, 128));
  ASSERT_TRUE(heads.ok()) << heads.error().message;
  const Schedule hs = default_schedule(heads->second, Target::cuda, 132);
  ASSERT_LE(hs.threads_per_row, 32);
  EXPECT_FALSE(hs.early_loads);
  auto body_of = [](const std::string& src) { return src.substr(src.find("extern \"C\"")); };
  {
    s.early_loads = false;
    auto plain = emit_module({{&ln->second, s, "kern"}}, Target::cuda);
    ASSERT_TRUE(plain.ok()) << plain.error().message;
    EXPECT_EQ(plain->source.find("kiln_el"), std::string::npos);
  }
  s.early_loads = true;
  for (int turns : {1, 0}) {
    s.row_loop = turns;
    auto m = emit_module({{&ln->second, s, "kern"}}, Target::cuda);
    ASSERT_TRUE(m.ok()) << m.error().message;
    const std::string body = body_of(m->source);
    // Two arrays of three words a thread: shift and scale (in1, in2); x's row (in0) is the first pass's own.
    EXPECT_NE(body.find("uint4 kiln_el0[3][1];"), std::string::npos) << body;
    EXPECT_NE(body.find("uint4 kiln_el1[3][1];"), std::string::npos) << body;
    EXPECT_EQ(body.find("kiln_el2"), std::string::npos) << body;
    EXPECT_EQ(body.find("kiln_el0[kiln_it]))[kiln_q] = ((const uint4*)(in0"), std::string::npos) << body;
    const size_t fill = body.find("kiln_el0[kiln_it]))[kiln_q] = ((const uint4*)(in");
    ASSERT_NE(fill, std::string::npos) << body;
    EXPECT_GT(fill, body.find("{ // stage 0")) << body;
    EXPECT_LT(fill, body.find("{ // stage 1")) << body;
    EXPECT_LT(fill, body.find("__syncthreads()")) << body;
    // The last pass copies its words from the registers on the aligned path, and from memory on the other.
    const size_t last = body.rfind("{ // stage ");
    EXPECT_NE(body.find("= ((const uint4*)(kiln_el0[kiln_it]))[kiln_q];", last), std::string::npos) << body;
    EXPECT_NE(body.find("= ((const uint4*)(kiln_el1[kiln_it]))[kiln_q];", last), std::string::npos) << body;
    const size_t scalar = body.find("} else {", last);
    ASSERT_NE(scalar, std::string::npos) << body;
    EXPECT_EQ(body.find("kiln_el", scalar), std::string::npos) << body.substr(scalar);
    if (turns == 0) EXPECT_LT(body.find("kiln_task + gridDim.x < 67"), fill) << body;
  }
}

// Register rows count against a thread's budget only while live. The FP8 block's modulated layernorm with its
// amax keeps three rows of 24 floats a thread (the f32 cast, x - mean, the bf16 output the amax reads), never
// more than two at once: all three fit in registers, with no shared row and no barrier before the amax (counted
// all at once, 72 floats, the amax's row went to shared memory: 12 KiB a row, one more barrier).
TEST(KernelEmit, CudaRegisterRowsCountOnlyWhileLive) {
  const std::optional<Kernel> ln = fp8_image_layernorm_amax();
  ASSERT_TRUE(ln.has_value());
  const Schedule s = default_schedule(*ln, Target::cuda, 132);
  ASSERT_EQ(s.threads_per_row, 128);
  ASSERT_EQ(s.vector_width, 8);
  const std::vector<RowBuffer> place = cuda_row_buffers(*ln, s);
  EXPECT_EQ(std::count(place.begin(), place.end(), RowBuffer::shared), 0) << kernel_to_text(*ln);
  EXPECT_GE(std::count(place.begin(), place.end(), RowBuffer::registers), 3) << kernel_to_text(*ln);
  auto module = emit_module({{&*ln, s, "kern"}}, Target::cuda);
  ASSERT_TRUE(module.ok()) << module.error().message;
  const std::string body = module->source.substr(module->source.find("extern \"C\""));
  EXPECT_EQ(body.find("__shared__ float s"), std::string::npos) << body;
}

// A block's shared memory counts the word per warp a row's reductions exchange through, not only its row
// buffers: the FP8 block's layernorm + amax at 256 threads a row keeps three rows of 4096 floats in shared
// memory (48 KiB) plus 8 exchange words for each of its 3 reductions (one slot each), beyond what ptxas takes
// ("uses too much shared data": session 30 found it at 48 KiB + 32 bytes).
TEST(KernelSchedule, CudaSharedMemoryCountsTheReductionExchange) {
  const std::optional<Kernel> ln = fp8_image_layernorm_amax();
  ASSERT_TRUE(ln.has_value());
  const Status wide = can_implement(*ln, Schedule{1, 1, 256, 8, true, 1}, Target::cuda);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.error().message.find("49248 bytes of shared memory"), std::string::npos) << wide.error().message;
  EXPECT_TRUE(can_implement(*ln, Schedule{1, 1, 128, 8, true, 1}, Target::cuda).ok());
}

// Each row reduction whose row spans several warps exchanges through its own slot of kiln_red: one barrier
// between the warps' writes and the reads, none after (the FP8 block's layernorm + amax: 3 reductions, 3
// barriers a row on each of the vector and scalar paths, not 6). A reduction inside a loop over the row's
// other axes (here a mean per [4] of a [4, 256] row, before a max over the whole row) writes its slot again in
// the next iteration, so it keeps the barrier after its reads.
TEST(KernelEmit, CudaReductionExchangesHaveTheirOwnSlots) {
  auto barriers = [](const std::string& source) {
    size_t n = 0;
    for (size_t at = source.find("__syncthreads();"); at != std::string::npos; at = source.find("__syncthreads();", at + 1)) ++n;
    return n;
  };
  const std::optional<Kernel> ln = fp8_image_layernorm_amax();
  ASSERT_TRUE(ln.has_value());
  EXPECT_EQ(reduction_exchanges(*ln), 3) << kernel_to_text(*ln);
  auto module = emit_module({{&*ln, Schedule{1, 1, 128, 8, true, 1}, "kern"}}, Target::cuda);
  ASSERT_TRUE(module.ok()) << module.error().message;
  EXPECT_NE(module->source.find("__shared__ float kiln_red[1][3][4];"), std::string::npos) << module->source;
  EXPECT_EQ(barriers(module->source), 6u) << module->source;
  for (int slot = 0; slot < 3; ++slot)
    EXPECT_NE(module->source.find(fmt::format("kiln_red[threadIdx.y][{}][kiln_lane >> 5] = acc", slot)), std::string::npos);

  const Graph g = testing::mean_per_part_then_max_graph();
  auto lowered = lower_nodes(g, {0, 1, 2}, "kern");
  ASSERT_TRUE(lowered.ok()) << lowered.error().message;
  const Kernel& k = *lowered;
  ASSERT_EQ(k.rows, 16) << kernel_to_text(k);
  const Schedule wide{1, 1, 64, 4, true, 1};
  ASSERT_TRUE(can_implement(k, wide, Target::cuda).ok());
  auto looped = emit_module({{&k, wide, "kern"}}, Target::cuda);
  ASSERT_TRUE(looped.ok()) << looped.error().message;
  const std::string& src = looped->source;
  // The mean's exchange (slot 0) is followed by a barrier after its reads; the max's (slot 1) is not.
  const size_t mean_reads = src.find("kiln_red[threadIdx.y][0][kiln_w]");
  const size_t max_reads = src.find("kiln_red[threadIdx.y][1][kiln_w]");
  ASSERT_NE(mean_reads, std::string::npos) << src;
  ASSERT_NE(max_reads, std::string::npos) << src;
  const std::string after_mean = src.substr(mean_reads, src.find('\n', src.find('\n', mean_reads) + 1) - mean_reads);
  EXPECT_NE(after_mean.find("__syncthreads();"), std::string::npos) << after_mean;
  const std::string after_max = src.substr(max_reads, src.find('\n', src.find('\n', max_reads) + 1) - max_reads);
  EXPECT_EQ(after_max.find("__syncthreads();"), std::string::npos) << after_max;
}

// q/k RMSNorm + RoPE of a FLUX.1 head (128 values: 16 threads x 8 rows a block): the row and its mean square
// live in registers, the RoPE pair partner is read from the thread's own vector step, so there is no shared
// memory and no barrier; indices are 32-bit and the pair's element choice is fixed per unrolled element (no
// clamped loads). With `registers` off, the same kernel keeps its rows in shared memory behind barriers.
TEST(KernelEmit, CudaRowsLiveInRegistersWhereTheirThreadReadsThem) {
  std::optional<Kernel> qk;
  for (Kernel& k : rope_kernels("flux1-double-block")) {
    if (k.rows != 24 * 4608) continue;  // the joint sequence's heads (join-concat-pieces)
    qk = std::move(k);
    break;
  }
  ASSERT_TRUE(qk.has_value());
  // Its bytes are what its loads touch: the q third of each stream's QKV GEMM output (loaded through a
  // slice), cos and sin, the two norm weights, and the output; not the GEMMs' whole outputs.
  EXPECT_EQ(qk->bytes, 2.0 * (24 * 4608 * 128 * 2) + 2.0 * (4608 * 64 * 4) + 2 * 128 * 4) << kernel_to_text(*qk);
  Schedule s = default_schedule(*qk, Target::cuda, 132);
  EXPECT_EQ(s.threads_per_row, 16);
  EXPECT_EQ(s.vector_width, 8);
  auto count = [](const std::vector<RowBuffer>& place, RowBuffer b) { return std::count(place.begin(), place.end(), b); };
  EXPECT_GE(count(cuda_row_buffers(*qk, s), RowBuffer::registers), 2) << kernel_to_text(*qk);
  EXPECT_EQ(count(cuda_row_buffers(*qk, s), RowBuffer::shared), 0) << kernel_to_text(*qk);
  auto module = emit_module({{&*qk, s, "kern"}}, Target::cuda);
  ASSERT_TRUE(module.ok()) << module.error().message;
  std::string body = module->source.substr(module->source.find("extern \"C\""));
  EXPECT_EQ(body.find("__shared__"), std::string::npos) << body;
  EXPECT_EQ(body.find("__syncthreads"), std::string::npos) << body;
  EXPECT_EQ(body.find("kiln_clamp("), std::string::npos) << body;
  EXPECT_NE(body.find("typedef int kiln_idx;"), std::string::npos) << body;
  EXPECT_NE(body.find("_r[kiln_it][2*((kiln_vj) / 2) + 1]"), std::string::npos) << body;
  EXPECT_NE(body.find("(((kiln_vj) % 2)) < 1 ?"), std::string::npos) << body;
  // cos and sin (j/2 of a step: 4 floats) and the norm weight (both pair elements: the step's 8 floats) are
  // read as whole 16-byte words once per step, not element by element, on the aligned path.
  const size_t rope = body.find("// stage 2");
  ASSERT_NE(rope, std::string::npos);
  const std::string rope_aligned = body.substr(rope, body.find("} else {", rope) - rope);
  EXPECT_NE(rope_aligned.find("float kiln_vin1[4];"), std::string::npos) << rope_aligned;
  EXPECT_NE(rope_aligned.find("[((kiln_vj) / 2)]"), std::string::npos) << rope_aligned;
  EXPECT_NE(rope_aligned.find("kiln_vin0[2*((kiln_vj) / 2) + 1]"), std::string::npos) << rope_aligned;
  EXPECT_EQ(rope_aligned.find(" = in"), std::string::npos) << rope_aligned;

  s.registers = false;
  EXPECT_EQ(count(cuda_row_buffers(*qk, s), RowBuffer::registers), 0);
  module = emit_module({{&*qk, s, "kern"}}, Target::cuda);
  ASSERT_TRUE(module.ok()) << module.error().message;
  body = module->source.substr(module->source.find("extern \"C\""));
  EXPECT_NE(body.find("__shared__ float s0["), std::string::npos) << body;
  EXPECT_NE(body.find("__syncthreads"), std::string::npos) << body;
}

// Indices are 64-bit where a tensor of the kernel has 2^30 elements or more.
TEST(KernelEmit, CudaIndicesWidenForHugeTensors) {
  for (const auto& [tokens, type] : {std::pair<int64_t, const char*>{4096, "int"}, {40000, "long long"}}) {
    Graph g;
    const ValueId x = *g.add_input("x", {DType::bf16, {1, tokens, 32768}}, Binding::per_call);
    const ValueId y = (*g.add_node(Op::silu, {x}, {}, {"y"}))[0];
    ASSERT_TRUE(g.add_output("y", y).ok());
    auto k = lower_nodes(g, {0}, "big");
    ASSERT_TRUE(k.ok()) << k.error().message;
    auto module = emit_module({{&*k, default_schedule(*k, Target::cuda, 132), "kern"}}, Target::cuda);
    ASSERT_TRUE(module.ok()) << module.error().message;
    EXPECT_NE(module->source.find(fmt::format("typedef {} kiln_idx;", type)), std::string::npos) << tokens;
  }
}

// The CUDA row buffers' permutation, as emitted: the `kiln_at` line of a generated kernel is compiled for the
// host and checked to be one-to-one into the buffer it indexes, and to put the 32 threads of a warp into 32
// different banks at every vector step (with a vec-way conflict per access, the H200's LN+modulate kernel
// took 100 us; 76 us without, with the sub-warp rows), also when rows narrower than a warp share one.
TEST(KernelEmit, CudaRowBuffersAreOneToOneAndBankConflictFree) {
  auto fk = fused_kernel(layernorm_modulate_graph(DType::bf16, 64, 384));
  ASSERT_TRUE(fk.ok());
  const Kernel& k = fk->second;
  const std::string dir = harness::make_scratch_dir("", "cuda-buffers");
  std::string checks;
  for (const Schedule& s : {Schedule{1, 1, 32, 8, true, 1, false}, Schedule{1, 1, 128, 4, true, 1, false},
                            Schedule{8, 1, 16, 8, true, 1, false}, Schedule{8, 1, 4, 2, true, 1, false},
                            Schedule{2, 1, 64, 1, true, 1, false}}) {
    ASSERT_TRUE(can_implement(k, s, Target::cuda).ok()) << schedule_to_string(s);
    auto module = emit_module({{&k, s, "kern"}}, Target::cuda);
    ASSERT_TRUE(module.ok()) << module.error().message;
    const size_t at = module->source.find("auto kiln_at");
    ASSERT_NE(at, std::string::npos) << schedule_to_string(s);
    const std::string line = module->source.substr(at, module->source.find('\n', at) - at);
    checks += fmt::format("  {{\n    {}\n    if (!check(kiln_at, {}, {}, {}, {}, {})) return 1;\n  }}\n", line, 384,
                          cuda_row_buffer_floats(384, s), s.threads_per_row, s.vector_width, s.rows_per_task);
  }
  std::ofstream(dir + "/check.cpp") << R"(#include <cstdint>
#include <cstdio>
#include <set>
typedef int kiln_idx;  // as in a kernel whose indices fit in 32 bits
template <class F> bool check(F at, int64_t n, int64_t size, int64_t tpr, int64_t vec, int64_t rows) {
  std::set<int64_t> seen;
  for (int64_t o = 0; o < n; ++o) {
    const int64_t slot = at(o);
    if (slot < 0 || slot >= size || !seen.insert(slot).second) { std::printf("slot %lld of %lld\n", (long long)slot, (long long)o); return false; }
  }
  for (int64_t step = 0; step * tpr * vec < n; ++step) {
    for (int64_t j = 0; j < vec; ++j) {
      std::set<int64_t> banks;
      int64_t live = 0;
      for (int64_t t = 0; t < 32 && t < tpr * rows; ++t) {
        const int64_t row = t / tpr, lane = t % tpr, o = step * tpr * vec + lane * vec + j;
        if (o < n) banks.insert((row * size + at(o)) % 32), ++live;
      }
      if ((int64_t)banks.size() != live) { std::printf("tpr %lld vec %lld: %zu banks at step %lld\n", (long long)tpr, (long long)vec, banks.size(), (long long)j); return false; }
    }
  }
  return true;
}
int main() {
)" << checks << "  std::printf(\"ok\\n\");\n}\n";
  const std::string cmd = "c++ -std=c++20 -o " + dir + "/check " + dir + "/check.cpp > " + dir + "/log 2>&1 && " + dir +
                          "/check >> " + dir + "/log 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(dir + "/log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("ok"), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

// var = mean over the last axis of (x - mean(m))^2, f32 [rows, cols], where m is x itself (the variance) or,
// with `other_mean`, a second input y.
Graph squared_deviation_graph(int64_t rows, int64_t cols, bool other_mean) {
  Graph g;
  const ValueId x = *g.add_input("x", {DType::f32, {rows, cols}}, Binding::per_call);
  const ValueId m = other_mean ? *g.add_input("y", {DType::f32, {rows, cols}}, Binding::per_call) : x;
  const Attrs last = {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}};
  const ValueId mean = (*g.add_node(Op::reduce_mean, {m}, last, {"mean"}))[0];
  const ValueId d = (*g.add_node(Op::sub, {x, mean}, {}, {"d"}))[0];
  const ValueId sq = (*g.add_node(Op::mul, {d, d}, {}, {"sq"}))[0];
  KILN_CHECK(g.add_output("var", (*g.add_node(Op::reduce_mean, {sq}, last, {"var"}))[0]).ok());
  return g;
}

// Schedule::moments: a layernorm's mean and variance in one pass (central_moment_of finds the pair by its
// structure). The harness verifies modulated bf16 layernorms paired and not, in rows of 96, 1000 (past whole
// 64-lane blocks) and 3072, and rows of 33 (lanes left empty). A variance output in f32 is then checked against
// fp64 on rows that break a plain sum of squares: an offset of 10^4 with a spread of 10^-2, a first element far
// out (it is a lane's shift), a constant row; an infinity or a NaN gives NaN. A variance of one input about
// another input's mean is no central moment; rmsnorm and CUDA refuse the field.
TEST(KernelEmit, CpuMomentsMatchTheReference) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{9, 96}, {7, 1000}, {5, 3072}, {6, 33}}) {
    auto fk = fused_kernel(layernorm_modulate_graph(DType::bf16, rows, cols));
    ASSERT_TRUE(fk.ok()) << fk.error().message;
    const Kernel& k = fk->second;
    SCOPED_TRACE(kernel_to_text(k));
    ASSERT_TRUE(has_central_moments(k));
    Schedule base = default_schedule(k, Target::cpu, 1);
    EXPECT_TRUE(base.moments);
    for (bool pairs : {false, true}) {
      if (pairs && !has_pairs(k)) continue;
      Schedule s = base;
      s.pairs = pairs;
      ASSERT_TRUE(can_implement(k, s, Target::cpu).ok());
      auto source = emit_harness_candidate(k, s);
      ASSERT_TRUE(source.ok());
      const std::string body = source->substr(source->find("// kernel"));
      EXPECT_NE(body.find("in one pass"), std::string::npos) << body;
      EXPECT_EQ(body.find("stage 3:"), std::string::npos) << body;  // the variance has no pass of its own
      const harness::CandidateOutcome o = native_outcome(fk->first, k, *source);
      ASSERT_EQ(o.cls, harness::OutcomeClass::passed) << o.evidence.summary << "\n" << o.evidence.compiler_log << "\n" << body;
    }
  }
  // The variance itself, f32, against fp64.
  const int64_t cols = 1000;
  auto var = fused_kernel(squared_deviation_graph(7, cols, false));
  ASSERT_TRUE(var.ok()) << var.error().message;
  ASSERT_TRUE(has_central_moments(var->second)) << kernel_to_text(var->second);
  std::vector<float> x(7 * cols);
  for (int64_t c = 0; c < cols; ++c) {
    const double wave = std::sin(0.7 * static_cast<double>(c)) + 0.3 * std::cos(2.3 * static_cast<double>(c));
    x[c] = static_cast<float>(wave);                       // row 0: plain
    x[cols + c] = static_cast<float>(1e4 + 0.01 * wave);   // row 1: offset 10^4, spread 10^-2
    x[2 * cols + c] = c == 0 ? 3e4f : static_cast<float>(wave);  // row 2: the first element far out
    x[3 * cols + c] = 2.5f;                                // row 3: constant
    x[4 * cols + c] = c == 500 ? INFINITY : static_cast<float>(wave);
    x[5 * cols + c] = c == 999 ? NAN : static_cast<float>(wave);
    x[6 * cols + c] = static_cast<float>(-3e3 + wave);
  }
  std::vector<double> want(7);
  for (int64_t r = 0; r < 7; ++r) {
    double mean = 0, m2 = 0;
    for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
    mean /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) m2 += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
    want[r] = m2 / static_cast<double>(cols);
  }
  for (bool moments : {false, true}) {
    Schedule s = default_schedule(var->second, Target::cpu, 1);
    s.moments = moments;
    auto source = emit_harness_candidate(var->second, s);
    ASSERT_TRUE(source.ok());
    EXPECT_EQ(source->find("in one pass") != std::string::npos, moments);
    const LoadedCpuKernel kernel(*source);
    ASSERT_NE(kernel.fn, nullptr);
    const std::vector<int64_t> in_shape = {7, cols}, out_shape = {7, 1};
    std::vector<float> got(7, -1.0f);
    kiln_tensor in{x.data(), in_shape.data(), 2, KILN_F32};
    kiln_tensor out{got.data(), out_shape.data(), 2, KILN_F32};
    ASSERT_EQ(kernel.fn(&in, 1, &out, 1), 0);
    for (int64_t r : {0, 1, 2, 6}) {
      EXPECT_NEAR(got[r], want[r], 5e-5 * want[r]) << "row " << r << (moments ? " (one pass)" : " (two passes)");
    }
    EXPECT_EQ(got[3], 0.0f) << (moments ? "one pass" : "two passes");
    EXPECT_TRUE(std::isnan(got[4])) << got[4];
    EXPECT_TRUE(std::isnan(got[5])) << got[5];
  }
  // Not a central moment: x's squared deviation from y's mean.
  auto not_moment = fused_kernel(squared_deviation_graph(4, 64, true));
  ASSERT_TRUE(not_moment.ok()) << not_moment.error().message;
  EXPECT_FALSE(has_central_moments(not_moment->second)) << kernel_to_text(not_moment->second);
  Schedule refused = default_schedule(not_moment->second, Target::cpu, 1);
  EXPECT_FALSE(refused.moments);
  refused.moments = true;
  const Status st = can_implement(not_moment->second, refused, Target::cpu);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("moments"), std::string::npos) << st.error().message;
  auto ln = fused_kernel(layernorm_modulate_graph(DType::bf16, 4, 64));
  ASSERT_TRUE(ln.ok());
  Schedule scalar = default_schedule(ln->second, Target::cpu, 1);
  scalar.vector_width = 1;
  EXPECT_FALSE(can_implement(ln->second, scalar, Target::cpu).ok());
  Schedule cuda;
  cuda.threads_per_row = 32;
  cuda.moments = true;
  EXPECT_FALSE(can_implement(ln->second, cuda, Target::cuda).ok());
}

// A transcendental whose every use rounds it to bf16 or fp8 takes its coarse form (2^-14 relative) in any
// stage, a reduction's included: a bf16 GELU's per-row amax (the FP8 MLP's quantization reads it so). A GELU
// whose f32 value the amax sees keeps the accurate form. On both targets.
TEST(KernelEmit, CoarseFormsWhereEveryUseRoundsToBf16) {
  for (DType dtype : {DType::bf16, DType::f32}) {
    Graph g;
    const ValueId x = *g.add_input("x", {dtype, {4, 64}}, Binding::per_call);
    const ValueId a = (*g.add_node(Op::gelu, {x}, {{"approximate", std::string("tanh")}}, {"a"}))[0];
    const ValueId c = (*g.add_node(Op::cast, {a}, {{"to", std::string("f32")}}, {"c"}))[0];
    const ValueId m = (*g.add_node(Op::reduce_amax, {c}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}}, {"m"}))[0];
    ASSERT_TRUE(g.add_output("m", m).ok());
    auto fk = fused_kernel(g);
    ASSERT_TRUE(fk.ok()) << fk.error().message;
    const Kernel& k = fk->second;
    ASSERT_EQ(k.stages.size(), 1u) << kernel_to_text(k);
    EXPECT_TRUE(k.stages[0].reduce);
    for (Target t : {Target::cpu, Target::cuda}) {
      auto module = emit_module({{&k, default_schedule(k, t, t == Target::cuda ? 132 : 1), "kern"}}, t);
      ASSERT_TRUE(module.ok()) << module.error().message;
      const std::string body = module->source.substr(module->source.find("// kernel"));
      EXPECT_EQ(body.find("kiln_gelu_tanh_c(") != std::string::npos, dtype == DType::bf16)
          << dtype_name(dtype) << " " << target_name(t) << "\n" << body;
    }
  }
}

// A vector step that reads one element of an input (a per-tensor scale) reads that element, as one word; an
// input whose elements a span does not divide is read element by element: no word reaches past its end.
TEST(KernelEmit, CudaSpanLoadsStayInsideTheInput) {
  for (int64_t n : {1, 3}) {
    Graph g;
    const ValueId x = *g.add_input("x", {DType::bf16, {n, 256}}, Binding::per_call);
    const ValueId s = *g.add_input("s", {DType::f32, {n, 1}}, Binding::per_call);
    const ValueId xf = (*g.add_node(Op::cast, {x}, {{"to", std::string("f32")}}, {"xf"}))[0];
    const ValueId y = (*g.add_node(Op::mul, {xf, s}, {}, {"y"}))[0];
    const ValueId q = (*g.add_node(Op::cast, {y}, {{"to", std::string("bf16")}}, {"q"}))[0];
    ASSERT_TRUE(g.add_output("q", q).ok());
    auto fk = fused_kernel(g);
    ASSERT_TRUE(fk.ok()) << fk.error().message;
    auto module = emit_module({{&fk->second, Schedule{1, 1, 32, 8, true, 1}, "kern"}}, Target::cuda);
    ASSERT_TRUE(module.ok()) << module.error().message;
    const std::string body = module->source.substr(module->source.find("extern \"C\""));
    EXPECT_NE(body.find("float kiln_vin1[1];"), std::string::npos) << body;
    EXPECT_NE(body.find("((uint32_t*)(kiln_vin1))[kiln_q] = ((const uint32_t*)(in1 + "), std::string::npos) << body;
    EXPECT_EQ(body.find("(const uint2*)(in1"), std::string::npos) << body;
  }
}

}  // namespace
}  // namespace kiln::kernel
