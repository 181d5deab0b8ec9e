// The CUDA backend against the reference executor: every fused group the pipeline makes of the zoo models'
// tiny configurations, as generated CUDA kernels (NVRTC), and the GEMMs and attention of those models as
// cuBLASLt / cuDNN library calls — the test_backend_ops suite of tests/backend run on the GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <set>

#include "../backend/backend_test_util.h"
#include "../backend/plan_test_util.h"
#include "../kernel/exact_math.h"
#include "../kernel/exchange_graphs.h"
#include "cuda/cuda_backend.h"
#include "cuda/nvrtc.h"
#include "gpu_test_util.h"
#include "ir/text.h"
#include "kernel/kernel_ir.h"
#include "kernel/schedule.h"
#include "models/zoo.h"
#include "../passes/pass_test_util.h"
#include "passes/pipeline.h"
#include "ref/executor.h"

namespace kiln {
namespace {

backend::Backend* gpu_backend(std::string* why) {
  static Result<std::unique_ptr<backend::Backend>> b = cuda::make_cuda_backend();
  if (!b.ok()) {
    *why = b.error().message;
    return nullptr;
  }
  return b->get();
}

#define KILN_REQUIRE_CUDA_BACKEND()                                            \
  std::string why;                                                             \
  backend::Backend* gpu = gpu_backend(&why);                                   \
  if (gpu == nullptr) GTEST_SKIP() << "needs a GPU: " << why

const std::vector<std::string> kModels = {
    "flux1-double-block:tiny", "flux1-double-block:tiny,img_tokens=1,txt_tokens=3",
    "flux1-double-block:tiny,dtype=f16", "flux1-double-block:tiny,dtype=fp8,fp8_scaling=tensor",
    "flux1-double-block:tiny,dtype=fp8", "flux1-single-block:tiny", "flux2-dev:tiny", "qwen-image:tiny",
    "llama3-8b:tiny"};

// Every kernel with a reduction of FLUX.1's blocks at their real sizes, emitted with early loads (Schedule::
// early_loads) in a block a task and in one resident wave, compiles with NVRTC for sm_90. Needs the toolkit only:
// this runs without a GPU, where the correctness of the same schedules (EarlyLoadsMatchTheReference) cannot.
TEST(CudaEmit, FluxBlockKernelsCompileWithEarlyLoads) {
  int kernels = 0, early = 0;
  for (const std::string spec : {"flux1-single-block", "flux1-double-block"}) {
    auto model = models::build_zoo_model(spec);
    ASSERT_TRUE(model.ok()) << spec << ": " << model.error().message;
    auto optimized = passes::run_pipeline(*model, {});
    ASSERT_TRUE(optimized.ok()) << optimized.error().message;
    std::vector<kernel::Kernel> lowered;
    for (const passes::FusedGroup& fg : passes::collect_fused_groups(optimized->graph)) {
      auto k = kernel::lower_nodes(optimized->graph, fg.members, "g");
      if (k.ok() && k->has_reduction()) lowered.push_back(std::move(k).value());
    }
    for (int turns : {1, 0}) {
      std::vector<kernel::KernelToEmit> module;
      for (size_t i = 0; i < lowered.size(); ++i) {
        kernel::Schedule s = kernel::default_schedule(lowered[i], kernel::Target::cuda, 132);
        s.early_loads = true;
        s.row_loop = turns;
        if (kernel::can_implement(lowered[i], s, kernel::Target::cuda).ok()) {
          module.push_back({&lowered[i], s, "k" + std::to_string(i)});
        }
      }
      ASSERT_GE(module.size(), 3u) << spec;
      auto emitted = kernel::emit_module(module, kernel::Target::cuda);
      ASSERT_TRUE(emitted.ok()) << emitted.error().message;
      auto compiled = cuda::nvrtc_compile(emitted->source, spec + ".cu", {});
      ASSERT_TRUE(compiled.ok()) << spec << " row_loop " << turns << ": " << compiled.error().message;
      kernels += static_cast<int>(module.size());
      // A kernel's first register array is declared once (" kiln_el0["); its reads and fills take "(kiln_el0[".
      const std::string& src = emitted->source;
      for (size_t at = src.find(" kiln_el0["); at != std::string::npos; at = src.find(" kiln_el0[", at + 1)) ++early;
    }
  }
  std::printf("  %d kernels compiled, %d with early loads\n", kernels, early);
  EXPECT_GE(early, 8);
}

// Backend::copy takes a 16-byte vector kernel where both pointers and the size are multiples of 16 and the
// driver's copy elsewhere: every case, captured into a CUDA graph and replayed, copies the bytes and only them
// (the element past the end stays).
TEST(GpuBackend, CopyMovesExactlyTheBytesAtEveryAlignment) {
  KILN_REQUIRE_CUDA_BACKEND();
  for (int64_t n : {1, 3, 8, 9, 1027, 1 << 20}) {
    for (int64_t offset : {0, 1, 8}) {
      SCOPED_TRACE("bf16 elements " + std::to_string(n) + " at element " + std::to_string(offset));
      Tensor host(DType::bf16, {offset + n + 1});
      for (int64_t i = 0; i < host.numel(); ++i) host.set(i, static_cast<double>(i % 251) - 100.0);
      const TensorType whole{DType::bf16, {offset + n + 1}};
      auto from = gpu->allocate(whole);
      auto to = gpu->allocate(whole);
      ASSERT_TRUE(from.ok() && to.ok());
      ASSERT_TRUE(gpu->copy_to_device(host, *from).ok());
      ASSERT_TRUE(gpu->copy_to_device(Tensor(whole.dtype, whole.shape), *to).ok());
      backend::DeviceTensor src = *from, dst = *to;
      src.data = static_cast<std::byte*>(src.data) + 2 * offset;
      dst.data = static_cast<std::byte*>(dst.data) + 2 * offset;
      src.type = dst.type = TensorType{DType::bf16, {n}};
      // Captured into a CUDA graph (as profile/profile.h times a copy) and replayed.
      auto replay = gpu->capture([&] { return gpu->copy(src, dst); });
      ASSERT_TRUE(replay.ok()) << replay.error().message;
      ASSERT_TRUE((*replay)().ok());
      ASSERT_TRUE(gpu->synchronize().ok());
      auto back = gpu->copy_to_host(*to);
      ASSERT_TRUE(back.ok()) << back.error().message;
      for (int64_t i = 0; i < host.numel(); ++i) {
        const double expected = i >= offset && i < offset + n ? host.get(i) : 0.0;
        ASSERT_EQ(back->get(i), expected) << "element " << i;
      }
      gpu->release(*from);
      gpu->release(*to);
    }
  }
}

TEST(GpuBackend, DescribesTheDevice) {
  KILN_REQUIRE_CUDA_BACKEND();
  EXPECT_EQ(gpu->device().kind, "cuda");
  EXPECT_GT(gpu->device().compute_units, 0);
  EXPECT_GT(gpu->device().bandwidth_bytes_per_second, 1e11);
  EXPECT_GT(gpu->device().flops_per_second, 1e13);
  std::printf("  %s: %d SMs, copy %.2f TB/s, bf16 GEMM %.0f TFLOP/s\n", gpu->device().name.c_str(),
              gpu->device().compute_units, gpu->device().bandwidth_bytes_per_second / 1e12,
              gpu->device().flops_per_second / 1e12);
}

// Each fused group of the graphs as the pipeline plans them for `gpu`, as a graph of its own and its lowered
// kernel, identical kernels once. Composite leftovers (they run on the reference fallback) are not GPU kernels.
struct GroupKernel {
  std::string where;  // "<graph> group <id>"
  Graph sub;
  kernel::Kernel k;
};
std::vector<GroupKernel> distinct_group_kernels(backend::Backend& gpu, const std::vector<std::pair<std::string, Graph>>& graphs) {
  std::vector<GroupKernel> out;
  std::set<std::string> seen;
  for (const auto& [name, g] : graphs) {
    auto optimized = passes::run_pipeline(g, testing::pipeline_for(&gpu));
    EXPECT_TRUE(optimized.ok()) << name << ": " << optimized.error().message;
    if (!optimized.ok()) continue;
    for (const passes::FusedGroup& fg : passes::collect_fused_groups(optimized->graph)) {
      if (fg.outputs.empty()) continue;
      Graph sub = testing::group_graph(optimized->graph, fg);
      std::vector<NodeId> all;
      for (NodeId i = 0; i < static_cast<NodeId>(sub.nodes().size()); ++i) all.push_back(i);
      auto k = kernel::lower_nodes(sub, all, "g");
      if (!k.ok() || !seen.insert(kernel::kernel_hash(*k)).second) continue;
      out.push_back({name + " group " + std::to_string(fg.id), std::move(sub), std::move(k).value()});
    }
  }
  return out;
}

std::vector<std::pair<std::string, Graph>> zoo_graphs() {
  std::vector<std::pair<std::string, Graph>> out;
  for (const std::string& spec : kModels) {
    auto model = models::build_zoo_model(spec);
    EXPECT_TRUE(model.ok()) << spec << ": " << model.error().message;
    if (model.ok()) out.emplace_back(spec, std::move(model).value());
  }
  return out;
}

TEST(GpuBackend, EveryZooFusedGroupMatchesTheReference) {
  KILN_REQUIRE_CUDA_BACKEND();
  const std::vector<GroupKernel> groups = distinct_group_kernels(*gpu, zoo_graphs());
  for (const GroupKernel& gk : groups) {
    EXPECT_EQ(testing::check_plan_on(*gpu, gk.sub, gk.sub, false, testing::row_length(gk.sub)), "")
        << gk.where << "\n" << kernel::kernel_to_text(gk.k);
  }
  std::printf("  %zu distinct fused groups checked on the GPU\n", groups.size());
  EXPECT_GT(groups.size(), 30u);
}

// Row reductions whose rows span 2, 4 and 8 warps exchange through a slot each (one barrier after the warps'
// writes; a second only where the slot is written again in a loop): a modulated layernorm + amax (three
// reductions, as the FP8 blocks' before their GEMMs) and a mean per part of a [4, 256] row followed by a max
// over the whole row (the mean's exchange runs four times a row), at each width, against the reference.
TEST(GpuBackend, ReductionExchangesMatchTheReferenceAtEveryRowWidth) {
  KILN_REQUIRE_CUDA_BACKEND();
  const Graph ln = testing::layernorm_modulate_amax_graph(64, 3072);
  auto optimized = passes::run_pipeline(ln, testing::pipeline_for(gpu));
  ASSERT_TRUE(optimized.ok()) << optimized.error().message;
  const Graph looped = testing::mean_per_part_then_max_graph();
  struct Case {
    const Graph* planned;
    const Graph* oracle;
  };
  int checked = 0;
  for (const Case& c : {Case{&optimized->graph, &ln}, Case{&looped, &looped}}) {
    for (const passes::FusedGroup& fg : passes::collect_fused_groups(*c.planned)) {
      auto k = kernel::lower_nodes(*c.planned, fg.members, "g");
      if (!k.ok() || kernel::reduction_exchanges(*k) == 0) continue;
      for (int tpr : {64, 128, 256}) {
        kernel::Schedule s{1, 1, tpr, 1, true, 1};
        for (int vec : {8, 4, 2, 1}) {
          s.vector_width = vec;
          if (kernel::can_implement(*k, s, kernel::Target::cuda).ok()) break;
        }
        ASSERT_TRUE(kernel::can_implement(*k, s, kernel::Target::cuda).ok()) << kernel::kernel_to_text(*k);
        backend::PlanOptions options;
        options.schedules[kernel::kernel_hash(*k)] = s;
        EXPECT_EQ(testing::check_plan_on(*gpu, *c.planned, *c.oracle, false, testing::row_length(*c.oracle), options), "")
            << kernel::schedule_to_string(s) << "\n" << kernel::kernel_to_text(*k);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 6);
}

// Schedule::row_loop: blocks that take their tasks in turns, the next task's first-pass loads issued before this
// task's reductions, against the reference: a modulated layernorm + amax (three reductions alternating their
// exchange slots), the same with its rows in shared memory and an rmsnorm (one exchange: a barrier ends each
// task), rows of 128 (eight a block, sub-warp reductions) and a mean per part inside the row loop (the exchange
// written again in a loop), at row counts no grid divides, and with registers bounded (Schedule::min_blocks)
// where that spills. With 0 the backend lowers the grid to one resident wave: fewer blocks than tasks, each
// taking several.
TEST(GpuBackend, RowTurnsMatchTheReference) {
  KILN_REQUIRE_CUDA_BACKEND();
  // `pipeline`: planned from the pipeline's graph. The mean per part is planned as its groups are set (the
  // pipeline would split it in two, each without the exchange written again in a loop that it is here for).
  struct Case {
    Graph graph;
    bool pipeline;
  };
  const std::vector<Case> cases = {{testing::layernorm_modulate_amax_graph(4099, 3072), true},
                                   {testing::rmsnorm_graph(1001, 3072), true},
                                   {testing::rmsnorm_graph(8193, 128), true},
                                   {testing::mean_per_part_then_max_graph(), false}};
  int checked = 0;
  for (const Case& c : cases) {
    const Graph& g = c.graph;
    Graph planned = g;
    if (c.pipeline) {
      auto optimized = passes::run_pipeline(g, testing::pipeline_for(gpu));
      ASSERT_TRUE(optimized.ok()) << optimized.error().message;
      planned = std::move(optimized->graph);
    }
    const std::vector<passes::FusedGroup> groups = passes::collect_fused_groups(planned);
    ASSERT_EQ(groups.size(), 1u);
    auto k = kernel::lower_nodes(planned, groups[0].members, "g");
    ASSERT_TRUE(k.ok()) << k.error().message;
    const kernel::Schedule base = kernel::default_schedule(*k, kernel::Target::cuda, gpu->device().compute_units);
    for (bool registers : {true, false}) {
      for (int turns : {0, 2, 3, -1}) {  // -1: one resident wave, registers bounded for 12 blocks an SM (spilling)
        kernel::Schedule s = base;
        s.registers = registers;
        s.row_loop = std::max(turns, 0);
        s.min_blocks = turns < 0 ? 1536 / static_cast<int>(s.rows_per_task * s.threads_per_row) : 0;
        if (!kernel::can_implement(*k, s, kernel::Target::cuda).ok()) continue;
        backend::PlanOptions options;
        options.schedules[kernel::kernel_hash(*k)] = s;
        EXPECT_EQ(testing::check_plan_on(*gpu, planned, g, false, testing::row_length(g), options), "")
            << kernel::schedule_to_string(s) << "\n" << kernel::kernel_to_text(*k);
        ++checked;
      }
    }
    if (&c == &cases[0]) {
      kernel::Schedule s = base;
      s.row_loop = 0;
      auto emitted = kernel::emit_module({{&*k, s, "g"}}, kernel::Target::cuda);
      ASSERT_TRUE(emitted.ok()) << emitted.error().message;
      ASSERT_EQ(emitted->kernels[0].grid, 4099);
      auto loaded = gpu->compile(*emitted);
      ASSERT_TRUE(loaded.ok()) << loaded.error().message;
      const int64_t grid = (*loaded)->kernel(0).grid;
      EXPECT_LT(grid, 4099);
      EXPECT_GE(grid, gpu->device().compute_units);
      std::printf("  layernorm + amax, one resident wave: %lld blocks for 4099 rows\n", static_cast<long long>(grid));
    }
  }
  EXPECT_GE(checked, 16);
}

// Schedule::early_loads: a later pass's loads issued into registers before the row's first reduction, in a block a
// task and in one resident wave, against the reference: the modulated layernorm + amax (shift and scale), rmsnorms
// whose weight is read after the exchange (rows of 3072 and of 128, eight rows a block), and every fused group with
// a reduction of the zoo's tiny models (RoPE's cos and sin spans after the q/k norms among them). Counts the
// kernels whose source carries early loads, so the test cannot pass by emitting none.
TEST(GpuBackend, EarlyLoadsMatchTheReference) {
  KILN_REQUIRE_CUDA_BACKEND();
  std::vector<std::pair<std::string, Graph>> graphs = zoo_graphs();
  graphs.emplace_back("layernorm + modulate + amax", testing::layernorm_modulate_amax_graph(4099, 3072));
  graphs.emplace_back("rmsnorm of 3072", testing::rmsnorm_graph(1001, 3072));
  graphs.emplace_back("rmsnorm of 128", testing::rmsnorm_graph(8193, 128));
  int checked = 0, early = 0;
  for (const GroupKernel& gk : distinct_group_kernels(*gpu, graphs)) {
    if (!gk.k.has_reduction()) continue;
    for (int turns : {1, 0}) {
      kernel::Schedule s = kernel::default_schedule(gk.k, kernel::Target::cuda, gpu->device().compute_units);
      s.early_loads = true;
      s.row_loop = turns;
      if (!kernel::can_implement(gk.k, s, kernel::Target::cuda).ok()) continue;
      auto emitted = kernel::emit_module({{&gk.k, s, "g"}}, kernel::Target::cuda);
      ASSERT_TRUE(emitted.ok()) << emitted.error().message;
      early += emitted->source.find("kiln_el0") != std::string::npos;
      backend::PlanOptions options;
      options.schedules[kernel::kernel_hash(gk.k)] = s;
      EXPECT_EQ(testing::check_plan_on(*gpu, gk.sub, gk.sub, false, testing::row_length(gk.sub), options), "")
          << gk.where << ", " << kernel::schedule_to_string(s) << "\n" << kernel::kernel_to_text(gk.k);
      ++checked;
    }
  }
  std::printf("  %d kernels with a reduction checked with early loads, %d of them carrying some\n", checked, early);
  EXPECT_GE(early, 10);
}

// Where a failing plan first departs from the reference: every step's value stored and compared (normal
// inputs, as check_plan_on draws them), the first few over the policy listed in node order.
std::string first_departing_steps(backend::Backend& gpu, const Graph& optimized, int64_t k) {
  const Graph g = backend::with_step_outputs(optimized);
  auto plan = backend::Plan::build(gpu, g);
  if (!plan.ok()) return "(steps: " + plan.error().message + ")";
  const auto inputs = testing::draw_graph_inputs(g, harness::Distribution::normal, 1234);
  auto want = ref::run_graph(g, inputs);
  auto got = (*plan)->run(inputs);
  if (!want.ok() || !got.ok()) return "(steps: a run failed)";
  std::string out;
  int listed = 0;
  for (const GraphOutput& o : g.outputs()) {
    const harness::Comparison c = harness::compare_output(want->at(o.name), got->at(o.name), {}, false, k);
    if (c.kind == harness::Mismatch::none) continue;
    out += "  " + o.name + ": " + c.describe() + "\n";
    if (++listed == 6) break;
  }
  return out.empty() ? "(every step within policy on its own)" : "first steps over the policy:\n" + out;
}

// Whole models: generated kernels, cuBLASLt and cuDNN together, against the reference of the optimized graph.
TEST(GpuBackend, ZooModelsRunAsFusedPlans) {
  KILN_REQUIRE_CUDA_BACKEND();
  for (const std::string& spec : {std::string("flux1-double-block:tiny"), std::string("flux1-single-block:tiny"),
                                  std::string("flux1-double-block:tiny,dtype=fp8,fp8_scaling=tensor"),
                                  std::string("flux1-double-block:tiny,dtype=fp8,fp8_scaling=block")}) {
    auto model = models::build_zoo_model(spec);
    ASSERT_TRUE(model.ok()) << spec;
    auto optimized = passes::run_pipeline(*model, testing::pipeline_for(gpu));
    ASSERT_TRUE(optimized.ok()) << spec;
    int64_t k = 1;
    for (const Node& n : optimized->graph.nodes())
      for (ValueId v : n.inputs)
        if (!optimized->graph.value(v).type.shape.empty())
          k = std::max(k, optimized->graph.value(v).type.shape.back());
    int fallbacks = 0;
    const std::string failure = testing::check_plan_on(*gpu, optimized->graph, optimized->graph, false, k, {}, &fallbacks);
    EXPECT_EQ(failure, "") << spec << "\n" << (failure.empty() ? "" : first_departing_steps(*gpu, optimized->graph, k));
    std::printf("  %s: %s (%d reference fallbacks)\n", spec.c_str(), failure.empty() ? "within policy" : failure.c_str(),
                fallbacks);
  }
}

// Block-scaled scaled_linear through cuBLASLt (VEC128_32F x BLK128x128_32F) against the reference, fed by the
// fused quantize group that writes the activation scales k-block-major: full blocks, M off K/128, a ragged
// last N block, a bias + GELU epilogue.
TEST(GpuBackend, BlockScaledLinearMatchesTheReference) {
  KILN_REQUIRE_CUDA_BACKEND();
  const char* full = R"(graph g {
      input %x: bf16[200,512] per_call
      input %wq: f8e4m3[384,512] weight
      input %ws: f32[3,4] weight
      %xq: f8e4m3[200,512], %xs: f32[4,200] = quantize(%x) {granularity="block", block=[1,128], scale_layout="k_major"}
      %y: bf16[200,384] = scaled_linear(%xq, %xs, %wq, %ws) {out_dtype="bf16"}
      output y = %y
    })";
  const char* ragged_n_gelu = R"(graph g {
      input %x: bf16[2,24,256] per_call
      input %wq: f8e4m3[400,256] weight
      input %ws: f32[4,2] weight
      input %b: bf16[400] weight
      %xq: f8e4m3[2,24,256], %xs: f32[2,2,24] = quantize(%x) {granularity="block", block=[1,128], scale_layout="k_major"}
      %y: bf16[2,24,400] = scaled_linear(%xq, %xs, %wq, %ws, %b) {out_dtype="bf16", activation="gelu_tanh"}
      output y = %y
    })";
  for (const char* text : {full, ragged_n_gelu}) {
    const Graph g = testing::parse_or_die(text);
    auto optimized = passes::run_pipeline(g, testing::pipeline_for(gpu));
    ASSERT_TRUE(optimized.ok()) << optimized.error().message;
    int fallbacks = 0;
    EXPECT_EQ(testing::check_plan_on(*gpu, optimized->graph, g, false, 512, {}, &fallbacks), "") << text;
    EXPECT_EQ(fallbacks, 0) << text;
  }
}

// The cast to f8e4m3 in generated CUDA (one hardware conversion, kFp8ConversionCuda in kernel/emit.cpp) gives
// the reference's bits for every bf16-representable f32 (all 65536 patterns: every exponent, both signs,
// subnormals, infinities, NaNs), the rounding boundaries around 448, 464 and 480 one f32 ulp either side, the
// e4m3 subnormal range, and random f32 bit patterns.
TEST(GpuBackend, Fp8CastMatchesTheReferenceBitForBit) {
  KILN_REQUIRE_CUDA_BACKEND();
  EXPECT_EQ(testing::fp8_cast_bit_mismatches(*gpu), "");
}

// bf16 sums, differences and products of two bf16 values are one fma.rn.bf16 in generated CUDA (kArithmeticCuda
// in kernel/emit.cpp) and give the reference's bits (f32 arithmetic, then one rounding to bf16): every bf16
// pattern against zeros, subnormals, the normal edge, ones, the largest finite, infinities, NaN, its negation,
// itself and random patterns.
TEST(GpuBackend, Bf16ArithmeticMatchesTheReferenceBitForBit) {
  KILN_REQUIRE_CUDA_BACKEND();
  std::string source;
  EXPECT_EQ(testing::bf16_arithmetic_bit_mismatches(*gpu, &source), "");
  for (const char* helper : {"kiln_bf16_add(", "kiln_bf16_sub(", "kiln_bf16_mul("})
    EXPECT_NE(source.find(helper, source.find("extern \"C\"")), std::string::npos) << helper << " is not used\n" << source;
}

// The CUDA dialect's coarse forms (kernel/emit.cpp, kCudaCoarseMath) swept against double precision, as the
// plans run them: f32 x -> function -> bf16 output, one generated kernel whose stage only the bf16 store sees.
// Every f32 with its low 13 bits zero (all signs and binades) and the values around the saturation and
// underflow edges. Each bf16 result must be the exact value rounded to nearest within 2^-14 of the value's
// magnitude (the coarse bound, kernel/emit_cpu.h) plus half a bf16 ulp, or infinity where that rounding
// overflows bf16; NaN and infinities as the exact function has them, zeros with their sign.
TEST(GpuBackend, CoarseMathWithinItsBound) {
  KILN_REQUIRE_CUDA_BACKEND();
  std::vector<float> values;
  for (uint32_t hi = 0; hi < (1u << 19); ++hi) values.push_back(std::bit_cast<float>(hi << 13));
  for (float centre : {-87.0f, -88.7f, -103.0f, -120.0f, -175.0f, -13.0f, -11.0f, 9.0f, 20.0f})
    for (int i = -3000; i <= 3000; ++i) values.push_back(centre + static_cast<float>(i) * std::fabs(centre) * 0x1p-16f);
  const int64_t n = static_cast<int64_t>(values.size());
  struct Function {
    const char* op;
    const char* attrs;
    const char* helper;
    double (*exact)(double);
  };
  const Function functions[] = {
      {"gelu", " {approximate=\"tanh\"}", "kiln_gelu_tanh_c(", testing::exact_gelu_tanh},
      {"silu", "", "kiln_silu_c(", testing::exact_silu},
      {"sigmoid", "", "kiln_sigmoid_c(", testing::exact_sigmoid},
  };
  Tensor x(DType::f32, {n});
  std::memcpy(x.data(), values.data(), values.size() * sizeof(float));
  for (const Function& f : functions) {
    auto g = parse_graph_text(fmt::format("graph g {{\n  input %x: f32[{0}] per_call\n  %a: f32[{0}] = {1}(%x){2}\n"
                                          "  %y: bf16[{0}] = cast(%a) {{to=\"bf16\"}}\n  output y = %y\n}}\n",
                                          n, f.op, f.attrs));
    ASSERT_TRUE(g.ok()) << g.error().message;
    auto optimized = passes::run_pipeline(*g, testing::pipeline_for(gpu));
    ASSERT_TRUE(optimized.ok()) << optimized.error().message;
    auto plan = backend::Plan::build(*gpu, optimized->graph);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    ASSERT_EQ((*plan)->summary().kernels, 1) << f.op;
    const std::string& source = (*plan)->source();
    ASSERT_NE(source.find(f.helper, source.find("extern \"C\"")), std::string::npos) << f.op << " does not take its coarse form";
    auto got = (*plan)->run({{"x", x}});
    ASSERT_TRUE(got.ok()) << got.error().message;
    const auto* y = reinterpret_cast<const uint16_t*>(got->at("y").data());
    int64_t wrong = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double e = f.exact(values[static_cast<size_t>(i)]);
      const float r = std::bit_cast<float>(static_cast<uint32_t>(y[i]) << 16);
      bool ok;
      if (std::isnan(e) || std::isinf(e) || e == 0) {
        ok = (std::isnan(e) && std::isnan(r)) || (r == e && std::signbit(r) == std::signbit(e));
      } else if (std::isinf(r)) {
        // bf16 overflows to infinity from halfway between its largest finite value and 2^128.
        ok = std::signbit(r) == std::signbit(e) && std::fabs(e) >= 0x1.ffp+127 * (1 - 0x1p-14);
      } else {
        int exponent = 0;
        std::frexp(e, &exponent);
        const double half_ulp = std::ldexp(1.0, std::max(exponent - 1, -126) - 8);  // bf16: 8 significant bits
        const double excess = (std::fabs(static_cast<double>(r) - e) - half_ulp) / std::fabs(e);
        worst = std::max(worst, excess);
        ok = std::isfinite(r) && excess <= 0x1p-14;
      }
      if (!ok && ++wrong <= 5) {
        ADD_FAILURE() << fmt::format("{}({:a}) = {:a} exactly, the GPU gave {:a}", f.op, values[static_cast<size_t>(i)], e, r);
      }
    }
    EXPECT_EQ(wrong, 0) << f.op << ": of " << n;
    std::printf("  %s: worst error beyond half a bf16 ulp %.3g of the value (bound 2^-14 = %.3g)\n", f.op, worst, 0x1p-14);
  }
}

TEST(GpuBackend, UnsupportedOpsAreErrors) {
  KILN_REQUIRE_CUDA_BACKEND();
  const std::vector<TensorType> f32_linear = {{DType::f32, {4, 8}}, {DType::f32, {16, 8}}};
  Status st = gpu->supports(Op::linear, f32_linear, {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("bf16"), std::string::npos) << st.error().message;
  cuda::register_cuda_backend();
  auto bad = backend::make_backend("no-such-backend");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("cuda"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace kiln
