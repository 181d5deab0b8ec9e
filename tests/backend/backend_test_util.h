// Shared by the backend tests: run a graph's plan on the CPU backend and compare every output with the
// reference executor on the same inputs, under the numerics policy (harness/compare.h).
#pragma once

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/plan.h"
#include "harness/compare.h"
#include "harness/inputs.h"
#include "harness/sensitivity.h"
#include "harness/task.h"
#include "ir/text.h"
#include "passes/fuse_rows.h"
#include "ref/executor.h"

namespace kiln::testing {

inline backend::Backend& cpu_backend() {
  static std::unique_ptr<backend::Backend> b = backend::make_cpu_backend();
  return *b;
}

inline std::map<std::string, Tensor> draw_graph_inputs(const Graph& g, harness::Distribution d, uint64_t seed) {
  std::map<std::string, Tensor> inputs;
  uint64_t i = 0;
  for (const GraphInput& in : g.inputs()) {
    inputs[g.value(in.value).name] = harness::draw_input(g.value(in.value).type, d, harness::derive_seed(seed, i++, 7));
  }
  return inputs;
}

// Runs `graph` (already optimized: groups annotated) as a plan on `on` and compares with the reference of
// `oracle` (same inputs and outputs). Returns a failure message, or "" when every output passes.
inline std::string check_plan_on(backend::Backend& on, const Graph& graph, const Graph& oracle, bool exact,
                                 int64_t reduction_length, const backend::PlanOptions& options = {},
                                 int* fallbacks = nullptr) {
  auto plan = backend::Plan::build(on, graph, options);
  if (!plan.ok()) return "plan build failed: " + plan.error().message;
  if (fallbacks) *fallbacks = (*plan)->summary().fallbacks;
  for (harness::Distribution d : {harness::Distribution::normal, harness::Distribution::wide}) {
    const auto inputs = draw_graph_inputs(oracle, d, 1234);
    auto want = ref::run_graph(oracle, inputs);
    if (!want.ok()) return "reference failed: " + want.error().message;
    auto got = (*plan)->run(inputs);
    if (!got.ok()) return "plan run failed: " + got.error().message;
    // Downstream of an FP8 quantize, one ulp upstream can move a value a whole quantization step: the
    // reference's own spread under such nudges is part of the bound (harness/sensitivity.h).
    std::map<std::string, double> sensitivity;
    if (harness::has_discontinuous_steps(oracle)) {
      auto s = harness::quantize_sensitivity(oracle, inputs, *want);
      if (!s.ok()) return "sensitivity run failed: " + s.error().message;
      sensitivity = std::move(*s);
    }
    for (const auto& [name, ref] : *want) {
      // An output that widens a bf16/f16 value (cast to f32) carries that value's rounding: a row statistic
      // off by one f32 ulp can move it by one bf16 ulp. Judge it in the dtype it was rounded to.
      DType judged = ref.dtype();
      for (const GraphOutput& o : oracle.outputs()) {
        const NodeId p = oracle.value(o.value).producer;
        if (o.name == name && p >= 0 && oracle.node(p).op == Op::cast) {
          const DType from = oracle.value(oracle.node(p).inputs[0]).type.dtype;
          if (dtype_is_float(from) && dtype_size(from) < dtype_size(judged)) judged = from;
        }
      }
      const Tensor r = judged == ref.dtype() ? ref : Tensor::from_f64(judged, ref.shape(), ref.to_f64());
      const Tensor g = judged == ref.dtype() ? got->at(name) : Tensor::from_f64(judged, ref.shape(), got->at(name).to_f64());
      harness::TolerancePolicy policy;
      if (sensitivity.count(name)) policy.sensitivity = sensitivity.at(name);
      const harness::Comparison c = harness::compare_output(r, g, policy, exact, reduction_length);
      if (c.kind != harness::Mismatch::none) {
        return std::string("output ") + name + " (" + harness::distribution_name(d) + " inputs): " + c.describe();
      }
    }
  }
  return "";
}

inline std::string check_plan(const Graph& graph, const Graph& oracle, bool exact, int64_t reduction_length,
                              const backend::PlanOptions& options = {}, int* fallbacks = nullptr) {
  return check_plan_on(cpu_backend(), graph, oracle, exact, reduction_length, options, fallbacks);
}

// A standalone graph of one group: its outside inputs become graph inputs, its outputs graph outputs.
inline Graph group_graph(const Graph& g, const passes::FusedGroup& group) {
  Graph out;
  out.name = "group";
  std::map<ValueId, ValueId> map;
  for (ValueId v : group.inputs) {
    auto id = out.add_input(g.value(v).name, g.value(v).type, Binding::per_call);
    KILN_CHECK(id.ok());
    map[v] = *id;
  }
  for (NodeId m : group.members) {
    const Node& n = g.node(m);
    std::vector<ValueId> in;
    for (ValueId v : n.inputs) in.push_back(map.at(v));
    std::vector<std::string> names;
    for (ValueId v : n.outputs) names.push_back(g.value(v).name);
    auto outs = out.add_node(n.op, in, n.attrs, names);
    KILN_CHECK(outs.ok());
    out.set_node_group(static_cast<NodeId>(out.nodes().size()) - 1, 0);
    for (size_t i = 0; i < n.outputs.size(); ++i) map[n.outputs[i]] = (*outs)[i];
  }
  for (ValueId v : group.outputs) KILN_CHECK(out.add_output(g.value(v).name, map.at(v)).ok());
  return out;
}

inline int64_t row_length(const Graph& g) {
  int64_t k = 1;
  for (const Node& n : g.nodes()) {
    for (ValueId v : n.inputs) {
      if (!g.value(v).type.shape.empty()) k = std::max(k, g.value(v).type.shape.back());
    }
  }
  return k;
}

// The next value of a 64-bit linear congruential sequence (Knuth's MMIX constants): the bit-for-bit checks'
// pseudo-random patterns, the same on every run.
inline uint64_t next_pattern(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return state;
}

// Graph `text` run by the reference and by a plan on `on`, on the same inputs: both outputs, the plan's
// generated source and kernel count, or the error of the step that failed ("parse: ...", "plan: ...").
struct ReferenceAndPlan {
  std::map<std::string, Tensor> want, got;
  std::string source;
  int kernels = 0;
};
inline Result<ReferenceAndPlan> run_reference_and_plan(backend::Backend& on, const std::string& text,
                                                       const std::map<std::string, Tensor>& inputs) {
  auto g = parse_graph_text(text);
  if (!g.ok()) return with_context(g.error(), "parse");
  auto want = ref::run_graph(*g, inputs);
  if (!want.ok()) return with_context(want.error(), "reference");
  auto plan = backend::Plan::build(on, *g);
  if (!plan.ok()) return with_context(plan.error(), "plan");
  auto got = (*plan)->run(inputs);
  if (!got.ok()) return with_context(got.error(), "run");
  return ReferenceAndPlan{std::move(*want), std::move(*got), (*plan)->source(), (*plan)->summary().kernels};
}

// A cast of f32 to e4m3 on `on` against the reference, bit for bit: every f32 whose low 16 bits are zero,
// the neighbours of e4m3's edges (448, the 464 tie, 480, the subnormal range) of either sign, and random bit
// patterns. Returns "" when every byte matches, else the first mismatches and their count.
inline std::string fp8_cast_bit_mismatches(backend::Backend& on) {
  std::vector<float> values;
  for (uint32_t hi = 0; hi < 65536; ++hi) values.push_back(std::bit_cast<float>(hi << 16));
  for (float edge : {448.0f, 464.0f, 480.0f, 0.015625f, 0.001953125f, 0.0009765625f, 0.00146484375f})
    for (float sign : {1.0f, -1.0f})
      for (int step = -2; step <= 2; ++step)
        values.push_back(std::bit_cast<float>(std::bit_cast<uint32_t>(edge * sign) + static_cast<uint32_t>(step)));
  uint64_t state = 12345;
  for (int i = 0; i < 65536; ++i) values.push_back(std::bit_cast<float>(static_cast<uint32_t>(next_pattern(state) >> 32)));
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor x(DType::f32, {n});
  std::memcpy(x.data(), values.data(), values.size() * sizeof(float));
  auto run = run_reference_and_plan(on,
                                    "graph g {\n  input %x: f32[" + std::to_string(n) + "] per_call\n  %y: f8e4m3[" +
                                        std::to_string(n) + "] = cast(%x) {to=\"f8e4m3\"}\n  output y = %y\n}\n",
                                    {{"x", x}});
  if (!run.ok()) return run.error().message;
  if (run->kernels != 1) return "the cast is not one generated kernel";
  const auto* a = reinterpret_cast<const uint8_t*>(run->want.at("y").data());
  const auto* b = reinterpret_cast<const uint8_t*>(run->got.at("y").data());
  int64_t wrong = 0;
  std::string message;
  for (int64_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    if (++wrong <= 5)
      message += fmt::format("x = {} (bits {:#010x}): reference {:#04x}, {} {:#04x}\n", values[static_cast<size_t>(i)],
                             std::bit_cast<uint32_t>(values[static_cast<size_t>(i)]), a[i], on.device().kind, b[i]);
  }
  return wrong == 0 ? "" : fmt::format("{}{} of {} differ", message, wrong, n);
}

// The sum, difference and product of two bf16 tensors (bf16 outputs) on `on` against the reference, bit for bit
// (any NaN matches any NaN): every bf16 pattern `a` against the edge values `b` (zeros, subnormals, the smallest
// normal, ones, the largest finite, infinities, NaN), against -a and itself (exact cancellation and doubling)
// and against pseudo-random patterns. Returns the first mismatches, or "" when every bit agrees. `source`, if
// given, gets the generated source.
inline std::string bf16_arithmetic_bit_mismatches(backend::Backend& on, std::string* source = nullptr) {
  const uint16_t edges[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x8080, 0x0100, 0x3f80, 0xbf80, 0x3f81,
                            0x4000, 0x3400, 0x5f00, 0x7f7f, 0xff7f, 0x7f7e, 0x7f80, 0xff80, 0x7fc0};
  std::vector<uint16_t> a_bits, b_bits;
  uint64_t state = 987654321;
  const auto pair = [&](uint16_t a, uint16_t b) {
    a_bits.push_back(a);
    b_bits.push_back(b);
  };
  for (uint32_t x = 0; x < 65536; ++x) {
    const auto a = static_cast<uint16_t>(x);
    for (uint16_t b : edges) pair(a, b);
    pair(a, static_cast<uint16_t>(a ^ 0x8000u));
    pair(a, a);
    for (int r = 0; r < 2; ++r) pair(a, static_cast<uint16_t>(next_pattern(state) >> 48));
  }
  const int64_t n = static_cast<int64_t>(a_bits.size());
  Tensor a(DType::bf16, {n}), b(DType::bf16, {n});
  std::memcpy(a.data(), a_bits.data(), a_bits.size() * sizeof(uint16_t));
  std::memcpy(b.data(), b_bits.data(), b_bits.size() * sizeof(uint16_t));
  auto run = run_reference_and_plan(
      on,
      fmt::format("graph g {{\n  input %a: bf16[{0}] per_call\n  input %b: bf16[{0}] per_call\n"
                  "  %s: bf16[{0}] = add(%a, %b)\n  %d: bf16[{0}] = sub(%a, %b)\n  %p: bf16[{0}] = mul(%a, %b)\n"
                  "  output s = %s\n  output d = %d\n  output p = %p\n}}\n",
                  n),
      {{"a", a}, {"b", b}});
  if (!run.ok()) return run.error().message;
  if (source) *source = run->source;
  const auto is_nan = [](uint16_t h) { return (h & 0x7fffu) > 0x7f80u; };
  int64_t wrong = 0;
  std::string message;
  for (const char* out : {"s", "d", "p"}) {
    const auto* x = reinterpret_cast<const uint16_t*>(run->want.at(out).data());
    const auto* y = reinterpret_cast<const uint16_t*>(run->got.at(out).data());
    for (int64_t i = 0; i < n; ++i) {
      if (x[i] == y[i] || (is_nan(x[i]) && is_nan(y[i]))) continue;
      if (++wrong <= 5)
        message += fmt::format("{}: a {:#06x}, b {:#06x}: reference {:#06x}, {} {:#06x}\n", out, a_bits[static_cast<size_t>(i)],
                               b_bits[static_cast<size_t>(i)], x[i], on.device().kind, y[i]);
    }
  }
  return wrong == 0 ? "" : fmt::format("{}{} of {} differ", message, wrong, 3 * n);
}

}  // namespace kiln::testing
