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

inline Graph optimized_zoo_model(const std::string& spec, const backend::Backend* target = nullptr) {
  auto model = models::build_zoo_model(spec);
  KILN_CHECK(model.ok());
  auto optimized = passes::run_pipeline(*model, pipeline_for(target));
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

}  // namespace kiln::testing
