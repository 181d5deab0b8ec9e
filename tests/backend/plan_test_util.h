// Shared by the plan tests: zoo models through the pass pipeline, and comparisons of plan outputs with the
// reference executor (numerics policy) or with another plan (bitwise).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/plan.h"
#include "harness/compare.h"
#include "models/weights.h"
#include "models/zoo.h"
#include "passes/pipeline.h"
#include "ref/executor.h"

namespace kiln::testing {

inline backend::Backend& plan_test_backend() {
  static std::unique_ptr<backend::Backend> b = backend::make_cpu_backend();
  return *b;
}

// The default pipeline for `target` (its supports(): the forms it runs), or for any target when null.
inline passes::PipelineOptions pipeline_for(const backend::Backend* target) {
  passes::PipelineOptions options;
  if (target != nullptr) options.supports = target->supports_fn();
  return options;
}

// `lanes`: the lanes the plan will run on (PipelineOptions::lanes; 2 or more adds defer-columns).
inline Graph optimized_zoo_model(const std::string& spec, const backend::Backend* target = nullptr, int lanes = 1) {
  auto model = models::build_zoo_model(spec);
  KILN_CHECK(model.ok());
  passes::PipelineOptions options = pipeline_for(target);
  options.lanes = lanes;
  auto optimized = passes::run_pipeline(*model, options);
  KILN_CHECK(optimized.ok());
  return optimized->graph;
}

inline int64_t longest_row(const Graph& g) {
  int64_t k = 1;
  for (const Node& n : g.nodes()) {
    for (ValueId v : n.inputs) {
      if (!g.value(v).type.shape.empty()) k = std::max(k, g.value(v).type.shape.back());
    }
  }
  return k;
}

// "" when every output of `got` is within the numerics policy of the reference run of `graph` on `inputs`.
inline std::string matches_reference(const Graph& graph, const std::map<std::string, Tensor>& inputs,
                                     const std::map<std::string, Tensor>& got) {
  auto want = ref::run_graph(graph, inputs);
  if (!want.ok()) return "reference failed: " + want.error().message;
  for (const auto& [name, ref] : *want) {
    if (!got.count(name)) return "output " + name + " missing";
    const harness::Comparison c = harness::compare_output(ref, got.at(name), {}, false, longest_row(graph));
    if (c.kind != harness::Mismatch::none) return "output " + name + ": " + c.describe();
  }
  return "";
}

// "" when both output sets hold the same bytes.
inline std::string bitwise_equal(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return "different output counts";
  for (const auto& [name, t] : a) {
    if (!b.count(name)) return "output " + name + " missing";
    const Tensor& u = b.at(name);
    if (t.byte_size() != u.byte_size() || std::memcmp(t.data(), u.data(), t.byte_size()) != 0) {
      return "output " + name + " differs";
    }
  }
  return "";
}

// Two GEMMs' q/k/v columns joined along tokens for attention (three joint windows), and attention and a GEMM
// writing the concat the last GEMM reads (an in-place concat): docs/runtime.md's pitched windows, for the CPU
// and GPU plan tests.
inline const char* pitched_windows_graph() {
  return R"(graph g {
      input %xa: bf16[1,8,64] per_call
      input %xb: bf16[1,24,64] per_call
      input %wa: bf16[384,64] weight
      input %wb: bf16[384,64] weight
      input %wm: bf16[256,64] weight
      input %wc: bf16[64,384] weight
      %a: bf16[1,8,384] = linear(%xa, %wa)
      %b: bf16[1,24,384] = linear(%xb, %wb)
      %qa: bf16[1,8,128] = slice(%a) {axis=2, start=0, end=128} @g0
      %qb: bf16[1,24,128] = slice(%b) {axis=2, start=0, end=128} @g0
      %ra: bf16[1,8,2,64] = reshape(%qa) {shape=[1,8,2,64]} @g0
      %rb: bf16[1,24,2,64] = reshape(%qb) {shape=[1,24,2,64]} @g0
      %q: bf16[1,32,2,64] = concat(%ra, %rb) {axis=1} @g0
      %ka: bf16[1,8,128] = slice(%a) {axis=2, start=128, end=256} @g1
      %kb: bf16[1,24,128] = slice(%b) {axis=2, start=128, end=256} @g1
      %sa: bf16[1,8,2,64] = reshape(%ka) {shape=[1,8,2,64]} @g1
      %sb: bf16[1,24,2,64] = reshape(%kb) {shape=[1,24,2,64]} @g1
      %k: bf16[1,32,2,64] = concat(%sa, %sb) {axis=1} @g1
      %va: bf16[1,8,128] = slice(%a) {axis=2, start=256, end=384} @g2
      %vb: bf16[1,24,128] = slice(%b) {axis=2, start=256, end=384} @g2
      %ta: bf16[1,8,2,64] = reshape(%va) {shape=[1,8,2,64]} @g2
      %tb: bf16[1,24,2,64] = reshape(%vb) {shape=[1,24,2,64]} @g2
      %v: bf16[1,32,2,64] = concat(%ta, %tb) {axis=1} @g2
      %o: bf16[1,32,2,64] = attention(%q, %k, %v) {q_layout="bshd", k_layout="bshd", v_layout="bshd", out_layout="bshd", scale=0.125}
      %x: bf16[1,32,64] = concat(%xa, %xb) {axis=1} @g3
      %m: bf16[1,32,256] = linear(%x, %wm)
      %or: bf16[1,32,128] = reshape(%o) {shape=[1,32,128]} @g4
      %c: bf16[1,32,384] = concat(%or, %m) {axis=-1} @g4
      %y: bf16[1,32,64] = linear(%c, %wc)
      output y = %y
    })";
}

}  // namespace kiln::testing
