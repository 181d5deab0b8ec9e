#include "harness/sensitivity.h"

#include <cmath>
#include <random>

#include "harness/compare.h"
#include "ref/executor.h"

namespace kiln::harness {

namespace {

// A step that rounds to a coarse grid: a quantize, or (once decomposed) the cast of its scaled value to fp8.
bool is_discontinuous(const Graph& graph, const Node& n) {
  if (n.op == Op::quantize) return true;
  const DType to = graph.value(n.outputs[0]).type.dtype;
  return n.op == Op::cast && (to == DType::f8e4m3 || to == DType::f8e5m2);
}

// A cast from a computed floating value to a wider floating dtype: exact, so the value it reads still has the
// narrow dtype's precision, and that is the precision a sound implementation may compute it one ulp away in.
bool is_widening_cast_of_computed_value(const Graph& graph, const Node& n) {
  if (n.op != Op::cast || graph.is_graph_input(n.inputs[0])) return false;
  const DType from = graph.value(n.inputs[0]).type.dtype, to = graph.value(n.outputs[0]).type.dtype;
  return dtype_is_float(from) && dtype_is_float(to) && dtype_size(from) < dtype_size(to);
}

// The nodes whose floating inputs the sensitivity run moves: every discontinuous step, and every widening cast
// whose result reaches one (a decomposed quantize starts with the cast of its bf16 input to f32; moving that f32
// by one f32 ulp flips nothing, moving the bf16 value by one bf16 ulp is what another summation order does).
std::vector<bool> nudged_nodes(const Graph& graph) {
  const auto& nodes = graph.nodes();
  std::vector<bool> reaches(nodes.size(), false), nudged(nodes.size(), false);
  std::vector<bool> value_reaches(graph.values().size(), false);
  for (size_t i = nodes.size(); i-- > 0;) {  // nodes are in topological order: consumers come later
    const Node& n = nodes[i];
    bool r = is_discontinuous(graph, n);
    for (ValueId v : n.outputs) r = r || value_reaches[static_cast<size_t>(v)];
    reaches[i] = r;
    if (r)
      for (ValueId v : n.inputs) value_reaches[static_cast<size_t>(v)] = true;
    nudged[i] = is_discontinuous(graph, n) || (r && is_widening_cast_of_computed_value(graph, n));
  }
  return nudged;
}

}  // namespace

bool has_discontinuous_steps(const Graph& graph) {
  for (const Node& n : graph.nodes()) {
    if (is_discontinuous(graph, n)) return true;
  }
  return false;
}

Result<std::map<std::string, Tensor>> nudged_reference(const Graph& graph, const std::map<std::string, Tensor>& inputs,
                                                       uint64_t seed) {
  std::mt19937_64 random(seed);
  const std::vector<bool> nudged = nudged_nodes(graph);
  ref::RunOptions options;
  options.replace_inputs = [&](NodeId id, std::span<const Tensor* const> args, std::vector<Tensor>& replaced) {
    if (!nudged[static_cast<size_t>(id)]) return false;
    for (const Tensor* t : args) {
      Tensor copy = *t;
      if (dtype_is_float(copy.dtype())) {
        for (int64_t i = 0; i < copy.numel(); ++i) {
          const double v = copy.get(i);
          if (!std::isfinite(v)) continue;
          // One ulp is twice the half spacing at v; set() rounds to the dtype, so the result is the neighbour.
          const double step = 2 * half_ulp(v, copy.dtype());
          copy.set(i, (random() & 1) ? v + step : v - step);
        }
      }
      replaced.push_back(std::move(copy));
    }
    return true;
  };
  return ref::run_graph(graph, inputs, options);
}

Result<std::map<std::string, double>> quantize_sensitivity(const Graph& graph,
                                                           const std::map<std::string, Tensor>& inputs,
                                                           const std::map<std::string, Tensor>& reference,
                                                           uint64_t seed) {
  KILN_ASSIGN_OR_RETURN(auto nudged, nudged_reference(graph, inputs, seed));
  std::map<std::string, double> out;
  for (const auto& [name, want] : reference) {
    auto it = nudged.find(name);
    KILN_CHECK(it != nudged.end());  // the same graph gives the same outputs
    double worst = 0;
    if (dtype_is_float(want.dtype())) {
      for (int64_t i = 0; i < want.numel(); ++i) {
        const double a = want.get(i), b = it->second.get(i);
        if (std::isfinite(a) && std::isfinite(b)) worst = std::max(worst, std::fabs(a - b));
      }
    }
    out[name] = worst;
  }
  return out;
}

}  // namespace kiln::harness
