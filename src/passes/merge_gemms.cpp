#include "passes/merge_gemms.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "fmt/format.h"
#include "passes/graph_copier.h"
#include "passes/staging.h"
#include "util/format.h"

namespace kiln::passes {
namespace {

constexpr int64_t kScaleBlock = 128;  // rows of one FP8 weight scale block (ir/ops/matmul.cpp)

// How a member's FP8 weight scales join: row scales (per-channel, or per-tensor made per-channel) or blocks.
enum class ScaleClass { none, rows, blocks };

// One GEMM reading a shared activation. Operand ids are source values; -1 where absent.
struct Gemm {
  NodeId node = -1;
  double activation_bytes = 0;  // the shared operands (x, or xq and xs)
  double own_bytes = 0;         // everything else the GEMM moves: weight, scale, bias, output
  ValueId weight = -1, bias = -1, scale = -1;
  int64_t n = 0, k = 0;  // weight [n, k]
  ScaleClass scale_class = ScaleClass::none;
  bool per_tensor_scale = false;
};

// What members share: the op, its activation operands (x, or xq and xs) and its attributes.
using ShareKey = std::tuple<Op, std::vector<ValueId>, Attrs>;

std::optional<std::pair<ShareKey, Gemm>> describe_gemm(const Graph& graph, NodeId id) {
  const Node& node = graph.node(id);
  if (node.op != Op::linear && node.op != Op::scaled_linear) return std::nullopt;
  const size_t activations = node.op == Op::linear ? 1 : 2;  // x | xq, xs
  Gemm gemm;
  gemm.node = id;
  gemm.weight = node.inputs[activations];
  const Shape& w = graph.value(gemm.weight).type.shape;  // [N, K]
  gemm.n = w[0];
  gemm.k = w[1];
  if (node.op == Op::scaled_linear) {
    gemm.scale = node.inputs[3];
    const Shape& ws = graph.value(gemm.scale).type.shape;
    gemm.per_tensor_scale = ws.empty();
    // Same reading as the op's inference: [] per tensor, [N, 1] per channel, anything else 128x128 blocks.
    gemm.scale_class = ws.empty() || ws == Shape{gemm.n, 1} ? ScaleClass::rows : ScaleClass::blocks;
  }
  const size_t bias_at = activations + (node.op == Op::linear ? 1 : 2);
  if (node.inputs.size() > bias_at) gemm.bias = node.inputs[bias_at];
  std::vector<ValueId> shared(node.inputs.begin(), node.inputs.begin() + static_cast<std::ptrdiff_t>(activations));
  for (ValueId v : shared) gemm.activation_bytes += static_cast<double>(type_bytes(graph.value(v).type));
  gemm.own_bytes = node_cost(graph, id).bytes - gemm.activation_bytes;
  return std::make_pair(ShareKey{node.op, std::move(shared), node.attrs}, gemm);
}

// A group being formed: its members in graph order and what a new member must agree with.
struct MergeGroup {
  std::vector<Gemm> members;
  DType weight_dtype = DType::f32;
  std::optional<DType> bias_dtype;
  bool closed = false;  // the last member ends in a partial 128-row scale block: nothing may follow it
  double bytes = 0;     // what the merged GEMM moves: the activation once, every member's own bytes

  double bytes_with(const Gemm& gemm) const {
    return (members.empty() ? gemm.activation_bytes : bytes) + gemm.own_bytes;
  }

  void add(const Graph& graph, const Gemm& gemm) {
    bytes = bytes_with(gemm);
    if (members.empty()) weight_dtype = graph.value(gemm.weight).type.dtype;
    if (gemm.bias >= 0 && !bias_dtype) bias_dtype = graph.value(gemm.bias).type.dtype;
    closed = gemm.scale_class == ScaleClass::blocks && gemm.n % kScaleBlock != 0;
    members.push_back(gemm);
  }
};

// ---- legality, written once ----

// Why `gemm` may not be merged with anything: an operand that is not a load-time value would make the concat
// run on every call (or every step).
std::optional<std::string> operand_blocker(const Graph& graph, const std::vector<Binding>& times, const Gemm& gemm) {
  // Packed scales (pack_scales) are laid out along N in padded rows: they no longer concatenate along N.
  if (graph.node(gemm.node).attrs.get_string("ws_layout", "row_major") != "row_major") {
    return std::string("its weight scales are already packed into the GEMM layout (ws_layout \"packed\")");
  }
  for (ValueId v : {gemm.weight, gemm.bias, gemm.scale}) {
    if (v >= 0 && times[v] != Binding::weight) {
      return "its operand %" + graph.value(v).name + " is a " + binding_name(times[v]) +
             " value, not a load-time one (its concat would not be computed once at load)";
    }
  }
  return std::nullopt;
}

// Why `gemm` may not join `group` (whose members share its activation and attributes).
std::optional<std::string> join_blocker(const Graph& graph, const MergeGroup& group, const Gemm& gemm,
                                        const MergeOptions& options) {
  const Gemm& first = group.members.front();
  const DType w_dtype = graph.value(gemm.weight).type.dtype;
  if (w_dtype != group.weight_dtype) {
    return "its weight is " + std::string(dtype_name(w_dtype)) + ", the group's " +
           std::string(dtype_name(group.weight_dtype));
  }
  if (gemm.k != first.k) return "its weight has K = " + std::to_string(gemm.k) + ", not " + std::to_string(first.k);
  if (gemm.bias >= 0 && group.bias_dtype && graph.value(gemm.bias).type.dtype != *group.bias_dtype) {
    return "its bias is " + std::string(dtype_name(graph.value(gemm.bias).type.dtype)) + ", the group's " +
           std::string(dtype_name(*group.bias_dtype));
  }
  if (gemm.scale_class != first.scale_class) {
    return std::string("its weight scales are ") +
           (gemm.scale_class == ScaleClass::blocks ? "128x128 blocks" : "per channel or per tensor") +
           ", the group's are not: block and row scales cannot be concatenated";
  }
  // The size rule (merge_gemms.h): the saving of one more member must stay measurable.
  const double saving = gemm.activation_bytes + options.launch_overhead_bytes;
  const double merged = group.bytes_with(gemm);
  if (saving < options.min_relative_saving * merged) {
    return fmt::format("joining would make the merged GEMM move {}, and what it saves (one read of the {} "
                       "activation and one launch, {}) is below {}% of that",
                       format_bytes(merged), format_bytes(gemm.activation_bytes), format_bytes(saving),
                       100 * options.min_relative_saving);
  }
  if (group.closed) {
    return "the group's last member has N = " + std::to_string(group.members.back().n) +
           ", not a multiple of 128: its partial 128-row scale block may only end a block-scaled merge";
  }
  return std::nullopt;
}

// ---- emission ----

class GroupEmitter {
 public:
  GroupEmitter(const Graph& source, const std::vector<Binding>& times)
      : source_(source), times_(times), copier_(source), emitted_(source.nodes().size(), false) {}

  GraphCopier& copier() { return copier_; }
  bool emitted(NodeId id) const { return emitted_[static_cast<size_t>(id)]; }

  // Replaces the group by concats, one GEMM and a split at the current position; returns the merged name.
  std::string emit(const MergeGroup& group) {
    const Node& lead = source_.node(group.members.front().node);
    const size_t activations = lead.op == Op::linear ? 1 : 2;
    std::vector<ValueId> inputs;
    for (size_t i = 0; i < activations; ++i) inputs.push_back(copier_.map(lead.inputs[i]));
    std::vector<ValueId> weights, biases, scales;
    std::vector<int64_t> sizes;
    const bool any_bias = group.bias_dtype.has_value();
    ValueId first_bias = -1;
    for (const Gemm& m : group.members) {
      sizes.push_back(m.n);
      weights.push_back(available(m.weight));
      if (m.bias >= 0 && first_bias < 0) first_bias = m.bias;
      if (m.bias >= 0) {
        biases.push_back(available(m.bias));
      } else if (any_bias) {
        // -0.0, not 0.0: adding -0.0 is the identity on every value, a -0.0 dot product included.
        biases.push_back(add(Op::full, {},
                             {{"shape", std::vector<int64_t>{m.n}},
                              {"value", -0.0},
                              {"dtype", std::string(dtype_name(*group.bias_dtype))}},
                             source_.value(m.weight).name + ".zero_bias"));
      }
      if (m.scale >= 0) {
        ValueId s = available(m.scale);
        if (m.per_tensor_scale) {
          s = add(Op::broadcast, {s}, {{"shape", std::vector<int64_t>{m.n, 1}}},
                  source_.value(m.scale).name + ".per_channel");
        }
        scales.push_back(s);
      }
    }
    const Gemm& first = group.members.front();
    inputs.push_back(concat(weights, first.weight));
    if (!scales.empty()) inputs.push_back(concat(scales, first.scale));
    if (any_bias) inputs.push_back(concat(biases, first_bias));
    const std::string merged_name = fresh_name(source_.value(lead.outputs[0]).name + ".merged");
    const ValueId merged = add(lead.op, inputs, lead.attrs, merged_name);
    std::vector<std::string> names;
    for (const Gemm& m : group.members) names.push_back(source_.value(source_.node(m.node).outputs[0]).name);
    const std::vector<ValueId> parts =
        add_checked(Op::split, {merged}, {{"axis", int64_t{-1}}, {"sizes", sizes}}, std::move(names));
    for (size_t i = 0; i < group.members.size(); ++i) {
      copier_.set_map(source_.node(group.members[i].node).outputs[0], parts[i]);
    }
    return merged_name;
  }

 private:
  // The target value of a load-time source value, copying its producers first when they come later in the
  // source order (weight-time nodes depend only on weights and constants, so moving them up is safe).
  ValueId available(ValueId v) {
    if (copier_.is_mapped(v)) return copier_.map(v);
    const NodeId producer = source_.value(v).producer;
    KILN_CHECK(producer >= 0 && times_[v] == Binding::weight);
    for (ValueId in : source_.node(producer).inputs) available(in);
    copier_.copy_node(producer);
    emitted_[static_cast<size_t>(producer)] = true;
    return copier_.map(v);
  }

  ValueId concat(const std::vector<ValueId>& parts, ValueId named_after) {
    return add(Op::concat, parts, {{"axis", int64_t{0}}}, source_.value(named_after).name + ".merged");
  }

  ValueId add(Op op, std::vector<ValueId> inputs, Attrs attrs, const std::string& stem) {
    return add_checked(op, std::move(inputs), std::move(attrs), {fresh_name(stem)})[0];
  }

  std::vector<ValueId> add_checked(Op op, std::vector<ValueId> inputs, Attrs attrs, std::vector<std::string> names) {
    return copier_.add("merge_parallel_gemms", op, std::move(inputs), std::move(attrs), std::move(names));
  }
  std::string fresh_name(const std::string& stem) const { return copier_.fresh_name(stem); }

  const Graph& source_;
  const std::vector<Binding>& times_;
  GraphCopier copier_;
  std::vector<bool> emitted_;  // source nodes already copied ahead of their position
};

std::string value_ref(const Graph& graph, ValueId v) { return "%" + graph.value(v).name; }

// "18432 x 38 + 9216 x 38 + 6144": runs of equal sizes, so a merge of a hundred heads stays one short line.
std::string describe_sizes(const MergeGroup& group) {
  std::string out;
  for (size_t i = 0; i < group.members.size();) {
    size_t j = i;
    while (j < group.members.size() && group.members[j].n == group.members[i].n) ++j;
    out += (out.empty() ? "" : " + ") + std::to_string(group.members[i].n);
    if (j - i > 1) out += " x " + std::to_string(j - i);
    i = j;
  }
  return out;
}

// The members' output names; past a handful, the first ones and a count.
std::string describe_members(const Graph& graph, const MergeGroup& group) {
  constexpr size_t kShown = 4;
  std::string out;
  for (size_t i = 0; i < group.members.size() && i < kShown; ++i) {
    out += (i ? ", " : "") + value_ref(graph, graph.node(group.members[i].node).outputs[0]);
  }
  if (group.members.size() > kShown) out += ", ... (" + std::to_string(group.members.size() - kShown) + " more)";
  return out;
}

}  // namespace

PassResult merge_parallel_gemms(const Graph& graph) { return merge_parallel_gemms_with(graph, MergeOptions{}); }

PassResult merge_parallel_gemms_with(const Graph& graph, const MergeOptions& options) {
  PassReport report{"merge-gemms", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  const std::vector<Binding> times = classify_binding_times(graph);

  // Candidates by what they share, keys in order of their first GEMM.
  std::map<ShareKey, size_t> key_index;
  std::vector<std::vector<Gemm>> candidates;
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    auto described = describe_gemm(graph, id);
    if (!described) continue;
    // A GEMM on a load-time activation runs once at load: merging it gains nothing.
    if (times[std::get<1>(described->first).front()] == Binding::weight) continue;
    auto [it, inserted] = key_index.emplace(std::move(described->first), candidates.size());
    if (inserted) candidates.emplace_back();
    candidates[it->second].push_back(described->second);
  }

  // Groups form greedily in graph order: the first remaining candidate leads, every later one that may join
  // does; the rest try again among themselves.
  std::vector<MergeGroup> groups;
  for (const std::vector<Gemm>& shared : candidates) {
    if (shared.size() < 2) continue;
    const std::string activation = value_ref(graph, graph.node(shared.front().node).inputs[0]);
    std::map<NodeId, std::string> unmerged;  // node -> first reason it could not join
    std::vector<Gemm> remaining;
    for (const Gemm& g : shared) {
      if (auto why = operand_blocker(graph, times, g)) {
        unmerged[g.node] = *why;
      } else {
        remaining.push_back(g);
      }
    }
    while (remaining.size() >= 2) {
      MergeGroup group;
      group.add(graph, remaining.front());
      std::vector<Gemm> rest;
      for (size_t i = 1; i < remaining.size(); ++i) {
        if (auto why = join_blocker(graph, group, remaining[i], options)) {
          unmerged.emplace(remaining[i].node, *why + " (group led by " + graph.node_label(group.members[0].node) + ")");
          rest.push_back(remaining[i]);
        } else {
          group.add(graph, remaining[i]);
        }
      }
      if (group.members.size() >= 2) {
        for (const Gemm& m : group.members) unmerged.erase(m.node);
        groups.push_back(std::move(group));
      } else if (group.closed) {
        unmerged.emplace(group.members[0].node, "its N = " + std::to_string(group.members[0].n) +
                                                    " is not a multiple of 128, so its partial 128-row scale "
                                                    "block may only end a block-scaled merge, and it comes first");
      } else {
        unmerged.emplace(group.members[0].node, "no other GEMM on " + activation + " could join it");
      }
      remaining = std::move(rest);
    }
    for (const Gemm& g : remaining) unmerged.emplace(g.node, "no other GEMM on " + activation + " could join it");
    for (const auto& [node, why] : unmerged) {
      report.notes.push_back("not merged: " + graph.node_label(node) + " reads " + activation + " like " +
                             std::to_string(shared.size() - 1) + " other GEMM(s), but " + why);
    }
  }

  std::vector<int> group_of(graph.nodes().size(), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Gemm& m : groups[g].members) group_of[static_cast<size_t>(m.node)] = static_cast<int>(g);
  }
  GroupEmitter emitter(graph, times);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    if (emitter.emitted(id)) continue;
    const int g = group_of[static_cast<size_t>(id)];
    if (g < 0) {
      emitter.copier().copy_node(id);
      continue;
    }
    const MergeGroup& group = groups[static_cast<size_t>(g)];
    if (group.members.front().node != id) continue;  // emitted with its group's first GEMM
    const std::string merged = emitter.emit(group);
    report.notes.push_back("merged " + std::to_string(group.members.size()) + " " +
                           std::string(op_name(graph.node(id).op)) + " on " +
                           value_ref(graph, graph.node(id).inputs[0]) + " into %" + merged + " (N = " +
                           describe_sizes(group) + ", moving " + format_bytes(group.bytes) +
                           "): " + describe_members(graph, group));
    ++report.found[fmt::format("{} x {} (N = {})", group.members.size(), op_name(graph.node(id).op),
                               describe_sizes(group))];
    report.changed = true;
  }
  Graph out = emitter.copier().finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
