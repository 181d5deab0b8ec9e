// Benchmark (not a test): generated fused memory-bound kernels on the CPU backend against the machine's
// measured memcpy bandwidth, and a fused vs unfused plan of a FLUX double block.
// Build: g++ -O2 -std=c++20 -Isrc bench/cpu_fused_kernels.cpp build/release/libkiln.a -lfmt -lopenblas -o /tmp/kb
#include <fmt/format.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/plan.h"
#include "harness/inputs.h"
#include "models/zoo.h"
#include "passes/pipeline.h"

using namespace kiln;

Graph norm_graph(bool layernorm, int64_t rows, int64_t cols) {
  Graph g;
  const ValueId x = *g.add_input("x", {DType::bf16, {rows, cols}}, Binding::per_call);
  const ValueId w = *g.add_input("w", {DType::bf16, {cols}}, Binding::weight);
  const ValueId shift = *g.add_input("shift", {DType::bf16, {1, cols}}, Binding::per_call);
  ValueId y;
  if (layernorm) {
    const ValueId n = (*g.add_node(Op::layernorm, {x}, {}, {"n"}))[0];
    const ValueId m = (*g.add_node(Op::mul, {n, shift}, {}, {"m"}))[0];
    y = (*g.add_node(Op::add, {m, shift}, {}, {"y"}))[0];
  } else {
    y = (*g.add_node(Op::rmsnorm, {x, w}, {}, {"y"}))[0];
  }
  KILN_CHECK(g.add_output("y", y).ok());
  return g;
}

std::map<std::string, Tensor> inputs_of(const Graph& g) {
  std::map<std::string, Tensor> in;
  uint64_t i = 0;
  for (const GraphInput& x : g.inputs()) in[g.value(x.value).name] = harness::draw_input(g.value(x.value).type, harness::Distribution::normal, ++i);
  return in;
}

double plan_seconds(backend::Backend& b, const Graph& g, int reps) {
  auto plan = backend::Plan::build(b, g);
  KILN_CHECK(plan.ok());
  KILN_CHECK((*plan)->set_inputs(inputs_of(g)).ok());
  auto t = b.time([&] { return (*plan)->execute(); }, {3, reps});
  KILN_CHECK(t.ok());
  return t->median_seconds;
}

int main() {
  auto backend = backend::make_cpu_backend();
  const backend::DeviceInfo& d = backend->device();
  fmt::print("device {} ({} cores): memcpy {:.2f} GB/s, sgemm {:.1f} GFLOP/s\n", d.name, d.compute_units,
             d.bandwidth_bytes_per_second / 1e9, d.flops_per_second / 1e9);
  for (bool ln : {false, true}) {
    const Graph g = norm_graph(ln, 4096, 3072);
    auto opt = passes::run_pipeline(g);
    KILN_CHECK(opt.ok());
    const double bytes = 2.0 * 4096 * 3072 * 2 + 3072 * 2 * 2;
    const double s = plan_seconds(*backend, opt->graph, 20);
    fmt::print("{} bf16[4096,3072]: {:.3f} ms, {:.2f} GB/s = {:.0f}% of memcpy\n", ln ? "layernorm+modulate" : "rmsnorm",
               s * 1e3, bytes / s / 1e9, 100 * bytes / s / d.bandwidth_bytes_per_second);
  }
  for (const char* spec : {"flux1-double-block:tiny,img_tokens=2048,txt_tokens=256"}) {
    auto model = models::build_zoo_model(spec);
    KILN_CHECK(model.ok());
    auto fused = passes::run_pipeline(*model);
    passes::PipelineOptions no_fusion;
    no_fusion.disabled = {"fuse-rows"};
    auto unfused = passes::run_pipeline(*model, no_fusion);
    KILN_CHECK(fused.ok() && unfused.ok());
    const double f = plan_seconds(*backend, fused->graph, 20), u = plan_seconds(*backend, unfused->graph, 20);
    fmt::print("{}: fused plan {:.3f} ms, unfused plan {:.3f} ms, unfused/fused {:.2f}x\n", spec, f * 1e3, u * 1e3, u / f);
  }
}
