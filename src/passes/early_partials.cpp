#include "passes/early_partials.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "ir/op_class.h"
#include "passes/graph_copier.h"
#include "passes/staging.h"
#include "passes/value_readers.h"
#include "util/format.h"

namespace kiln::passes {
namespace {

constexpr const char* kPass = "split_early_partials";

// One input of the concat: columns [k0, k1) of the GEMM's K, and the heavy work only it waits for.
struct Piece {
  ValueId value = -1;
  int64_t k0 = 0, k1 = 0;
  double exclusive_flops = 0;
  bool early = false;
};

struct Candidate {
  NodeId gemm = -1, concat = -1;
  std::vector<Piece> pieces;
};

// The nodes `v` depends on: its producer and that node's ancestors.
std::vector<bool> ancestors_of(const Graph& graph, ValueId v) {
  std::vector<bool> mark(graph.nodes().size(), false);
  const NodeId start = graph.value(v).producer;
  if (start < 0) return mark;
  mark[static_cast<size_t>(start)] = true;
  for (NodeId id = start; id >= 0; --id) {
    if (!mark[static_cast<size_t>(id)]) continue;
    for (ValueId in : graph.node(id).inputs) {
      const NodeId p = graph.value(in).producer;
      if (p >= 0) mark[static_cast<size_t>(p)] = true;
    }
  }
  return mark;
}

// Each piece's exclusive heavy work; marks the pieces with less than the most early.
void weigh_pieces(const Graph& graph, std::vector<Piece>& pieces) {
  std::vector<std::vector<bool>> ancestors;
  for (const Piece& p : pieces) ancestors.push_back(ancestors_of(graph, p.value));
  double most = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
      const auto n = static_cast<size_t>(id);
      if (!ancestors[i][n] || !op_is_heavy(graph.node(id).op)) continue;
      const bool shared = std::all_of(ancestors.begin(), ancestors.end(), [&](const auto& a) { return a[n]; });
      if (!shared) pieces[i].exclusive_flops += node_cost(graph, id).flops;
    }
    most = std::max(most, pieces[i].exclusive_flops);
  }
  for (Piece& p : pieces) p.early = p.exclusive_flops < most;
}

std::optional<Candidate> find_candidate(const Graph& graph, const ValueReaders& readers,
                                        const std::vector<Binding>& times, NodeId id) {
  const Node& gemm = graph.node(id);
  if (gemm.op != Op::linear || gemm.attrs.get_string("activation", "none") != "none" ||
      gemm.attrs.get_int("scale", 0) != 0 || gemm.attrs.get_int("residual", 0) != 0) {
    return std::nullopt;
  }
  const ValueId x = gemm.inputs[0];
  const NodeId concat = graph.value(x).producer;
  if (concat < 0 || graph.node(concat).op != Op::concat || readers.only_reader(x) != id) return std::nullopt;
  const int64_t axis = graph.node(concat).attrs.get_int("axis", 0);
  const auto rank = static_cast<int64_t>(graph.value(x).type.shape.size());
  if ((axis != -1 && axis != rank - 1) || times[static_cast<size_t>(gemm.inputs[1])] != Binding::weight) {
    return std::nullopt;
  }
  Candidate c{id, concat, {}};
  int64_t k = 0;
  for (ValueId v : graph.node(concat).inputs) {
    const int64_t width = graph.value(v).type.shape.back();
    c.pieces.push_back({v, k, k + width});
    k += width;
  }
  weigh_pieces(graph, c.pieces);
  if (std::none_of(c.pieces.begin(), c.pieces.end(), [](const Piece& p) { return p.early; })) return std::nullopt;
  return c;
}

// The early (or late) pieces as one GEMM operand pair: the piece, or a concat of them, and w's columns for them
// (one load-time slice per run of neighbouring pieces, concatenated along K when there are several).
struct Operands {
  ValueId x = -1, w = -1;
};

Operands gather(GraphCopier& copier, const Candidate& c, ValueId w, bool early, const std::string& stem) {
  auto add = [&](Op op, std::vector<ValueId> inputs, Attrs attrs, const std::string& name) {
    return copier.add(kPass, op, std::move(inputs), std::move(attrs), {copier.fresh_name(name)})[0];
  };
  std::vector<ValueId> xs, ws;
  for (size_t i = 0; i < c.pieces.size();) {
    if (c.pieces[i].early != early) {
      ++i;
      continue;
    }
    size_t j = i;
    for (; j < c.pieces.size() && c.pieces[j].early == early; ++j) xs.push_back(copier.map(c.pieces[j].value));
    ws.push_back(add(Op::slice, {w},
                     {{"axis", int64_t{1}}, {"start", c.pieces[i].k0}, {"end", c.pieces[j - 1].k1}, {"step", int64_t{1}}},
                     stem + ".w"));
    i = j;
  }
  Operands out{xs[0], ws[0]};
  if (xs.size() > 1) out.x = add(Op::concat, xs, {{"axis", int64_t{-1}}}, stem + ".x");
  if (ws.size() > 1) out.w = add(Op::concat, ws, {{"axis", int64_t{1}}}, stem + ".w");
  return out;
}

// Whether `supports` (empty: every form) runs linear(late inputs..., partial) {residual=1}.
bool residual_runs(const Graph& g, const std::vector<ValueId>& late_inputs, ValueId partial, const Attrs& attrs,
                   const SupportsFn& supports) {
  if (!supports) return true;
  std::vector<TensorType> types;
  for (ValueId v : late_inputs) types.push_back(g.value(v).type);
  types.push_back(g.value(partial).type);
  return supports(Op::linear, types, attrs).ok();
}

std::string describe(const Graph& graph, const Candidate& c) {
  std::string out;
  for (const Piece& p : c.pieces) {
    out += fmt::format("{}{} K {} ({}, waits alone on {})", out.empty() ? "" : ", ", graph.value(p.value).name,
                       p.k1 - p.k0, p.early ? "early" : "late", format_flops(p.exclusive_flops));
  }
  return out;
}

}  // namespace

PassResult split_early_partials(const Graph& graph, const SupportsFn& supports) {
  PassReport report{"early-partials", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  const ValueReaders readers(graph);
  const std::vector<Binding> times = classify_binding_times(graph);
  std::vector<std::optional<Candidate>> at(graph.nodes().size());
  std::vector<bool> skip(graph.nodes().size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    at[static_cast<size_t>(id)] = find_candidate(graph, readers, times, id);
    if (at[static_cast<size_t>(id)]) skip[static_cast<size_t>(at[static_cast<size_t>(id)]->concat)] = true;
  }
  GraphCopier copier(graph);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const std::optional<Candidate>& c = at[static_cast<size_t>(id)];
    if (!c) {
      if (!skip[static_cast<size_t>(id)]) copier.copy_node(id);
      continue;
    }
    const Node& gemm = graph.node(id);
    const std::string& name = graph.value(gemm.outputs[0]).name;
    const ValueId w = copier.map(gemm.inputs[1]);
    const Operands early = gather(copier, *c, w, true, name + ".early");
    const Operands late = gather(copier, *c, w, false, name + ".late");
    const ValueId partial =
        copier.add(kPass, Op::linear, {early.x, early.w}, gemm.attrs, {copier.fresh_name(name + ".early")})[0];
    // The late GEMM adds the partial product as its residual (β = 1) where the target runs that form; else a
    // separate add, which residual-epilogues leaves alone too (the same form).
    std::vector<ValueId> late_inputs = {late.x, late.w};
    if (gemm.inputs.size() > 2) late_inputs.push_back(copier.map(gemm.inputs[2]));  // the bias
    Attrs attrs = gemm.attrs;
    attrs.set("residual", int64_t{1});
    if (residual_runs(copier.target(), late_inputs, partial, attrs, supports)) {
      late_inputs.push_back(partial);
      copier.set_map(gemm.outputs[0], copier.add(kPass, Op::linear, std::move(late_inputs), attrs, {name})[0]);
    } else {
      const ValueId rest =
          copier.add(kPass, Op::linear, std::move(late_inputs), gemm.attrs, {copier.fresh_name(name + ".late")})[0];
      copier.set_map(gemm.outputs[0], copier.add(kPass, Op::add, {rest, partial}, {}, {name})[0]);
    }
    report.changed = true;
    ++report.found["linear over a concat: early partial product"];
    report.notes.push_back(fmt::format("{} starts on its early pieces: {}", graph.node_label(id), describe(graph, *c)));
  }
  Graph out = copier.finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
