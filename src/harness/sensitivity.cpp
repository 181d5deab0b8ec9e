#include "harness/sensitivity.h"

#include <cmath>
#include <random>

#include "harness/compare.h"
#include "ref/executor.h"

namespace kiln::harness {

bool has_discontinuous_steps(const Graph& graph) {
  for (const Node& n : graph.nodes()) {
    if (n.op == Op::quantize) return true;
  }
  return false;
}

Result<std::map<std::string, Tensor>> nudged_reference(const Graph& graph, const std::map<std::string, Tensor>& inputs,
                                                       uint64_t seed) {
  std::mt19937_64 random(seed);
  ref::RunOptions options;
  options.replace_inputs = [&](NodeId id, std::span<const Tensor* const> args, std::vector<Tensor>& replaced) {
    if (graph.node(id).op != Op::quantize) return false;
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
