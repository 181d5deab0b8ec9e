#include "passes/canonicalize_views.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "passes/graph_copier.h"
#include "passes/staging.h"

namespace kiln::passes {
namespace {

bool is_index_map_view(Op op) { return op_has_trait(op, kTraitView) && op != Op::gather; }

int64_t normalized_axis(const Node& n, const Shape& in) {
  const auto rank = static_cast<int64_t>(in.size());
  const int64_t axis = n.attrs.get_int("axis", 0);
  return axis < 0 ? axis + rank : axis;
}

// A slice along one axis in normal form (Python rules applied): elements start, start + step, ... (length).
struct SliceForm {
  int64_t axis = 0, start = 0, length = 0, step = 1;
};

SliceForm slice_form(const Node& n, const Shape& in) {
  SliceForm f;
  f.axis = normalized_axis(n, in);
  const int64_t dim = in[static_cast<size_t>(f.axis)];
  auto clamp_bound = [dim](int64_t b) { return std::clamp<int64_t>(b < 0 ? b + dim : b, 0, dim); };
  f.start = clamp_bound(n.attrs.get_int("start", 0));
  const int64_t end = clamp_bound(n.attrs.get_int("end", dim));
  f.step = n.attrs.get_int("step", 1);
  f.length = end > f.start ? (end - f.start + f.step - 1) / f.step : 0;
  return f;
}

Attrs slice_attrs(const SliceForm& f, int64_t dim) {
  const int64_t start = std::min(f.start, dim);
  const int64_t end = f.length > 0 ? start + (f.length - 1) * f.step + 1 : start;
  return {{"axis", f.axis}, {"start", start}, {"end", end}, {"step", f.step}};
}

// The view after composing with its producer, or the node itself.
struct Candidate {
  Op op;
  ValueId input;  // target value
  Attrs attrs;
  std::string pattern;  // what was found, for the report ("" when nothing)
};

class ViewCanonicalizer {
 public:
  ViewCanonicalizer(const Graph& source, PassReport& report) : source_(source), report_(report) {}

  // Phase 1: compose chains and drop identities, then remove the views this left without readers.
  Graph compose_and_simplify() {
    Graph out;
    out.name = source_.name;
    std::vector<ValueId> map(source_.values().size(), -1);
    for (const GraphInput& in : source_.inputs()) {
      const Value& v = source_.value(in.value);
      map[in.value] = *out.add_input(v.name, v.type, in.binding);
    }
    for (NodeId id = 0; id < static_cast<NodeId>(source_.nodes().size()); ++id) {
      const Node& node = source_.node(id);
      std::vector<ValueId> inputs;
      for (ValueId v : node.inputs) inputs.push_back(map[v]);
      std::vector<std::string> names;
      for (ValueId v : node.outputs) names.push_back(source_.value(v).name);
      // One view with one input and output, composed and simplified; false: emit `node` as it is.
      auto one_view = [&](Op op, const Attrs& attrs, ValueId result_value, const std::string& name, bool always) {
        Candidate c = compose(out, op, attrs, source_.value(result_value).type.shape, inputs[0]);
        const TensorType& result = source_.value(result_value).type;
        if (is_identity(out, c, result)) {
          map[result_value] = c.input;
          ++report_.found[c.pattern.empty() ? "identity " + std::string(op_name(op)) + " removed"
                                            : c.pattern + " = identity, removed"];
          return true;
        }
        if (c.pattern.empty() && !always) return false;
        if (!c.pattern.empty()) ++report_.found[c.pattern];
        map[result_value] = emit(out, c.op, {c.input}, c.attrs, {name}, node.group)[0];
        return true;
      };
      if (node.op == Op::split && node.outputs.size() > 1) {
        // One slice per piece, so that each piece goes where its own readers are (the q and k of a QKV
        // GEMM's output into their norm kernels, v into attention's concat) rather than all together.
        const Shape in_shape = out.value(inputs[0]).type.shape;  // a copy: emitting grows `out`'s values
        const int64_t axis = normalized_axis(node, in_shape);
        int64_t start = 0;
        for (size_t i = 0; i < node.outputs.size(); ++i) {
          const int64_t length = source_.value(node.outputs[i]).type.shape[static_cast<size_t>(axis)];
          one_view(Op::slice, slice_attrs({axis, start, length, 1}, in_shape[static_cast<size_t>(axis)]), node.outputs[i],
                   names[i], true);
          start += length;
        }
        ++report_.found["split -> one slice per piece"];
        continue;
      }
      if (is_index_map_view(node.op) && node.outputs.size() == 1 && inputs.size() == 1 &&
          one_view(node.op, node.attrs, node.outputs[0], names[0], false)) {
        continue;
      }
      const std::vector<ValueId> outs = emit(out, node.op, inputs, node.attrs, names, node.group);
      for (size_t i = 0; i < outs.size(); ++i) map[node.outputs[i]] = outs[i];
    }
    for (const GraphOutput& o : source_.outputs()) KILN_CHECK(out.add_output(o.name, map[o.value]).ok());
    return drop_unread_views(out);
  }

 private:
  static std::vector<ValueId> emit(Graph& out, Op op, std::vector<ValueId> inputs, Attrs attrs,
                                   std::vector<std::string> names, int32_t group) {
    auto outs = out.add_node(op, std::move(inputs), std::move(attrs), std::move(names));
    if (!outs.ok()) {
      std::fprintf(stderr, "kiln: internal error in canonicalize_views: %s\n", outs.error().message.c_str());
      KILN_CHECK(outs.ok());
    }
    out.set_node_group(static_cast<NodeId>(out.nodes().size()) - 1, group);
    return *outs;
  }

  // A one-input, one-output view (`op`, `attrs`, result shape `result`) reading target value `in`, composed
  // with the views that produce `in` for as long as they are of a kind it composes with.
  Candidate compose(const Graph& out, Op op, const Attrs& attrs, const Shape& result, ValueId in) {
    Candidate c{op, in, attrs, ""};
    for (;;) {
      Candidate next = compose_once(out, c, result);
      if (next.pattern.empty()) return c;
      if (!c.pattern.empty() && c.pattern != next.pattern) next.pattern = c.pattern + ", " + next.pattern;
      c = std::move(next);
    }
  }

  // One step: `c` as a reshape when it is a transpose of unit axes, else composed with its input's producer.
  // The result has an empty pattern when nothing applied.
  Candidate compose_once(const Graph& out, const Candidate& current, const Shape& result) {
    Candidate c{current.op, current.input, current.attrs, ""};
    const ValueId in = c.input;
    const Shape& in_shape = out.value(in).type.shape;
    // A transpose that keeps the order of its non-unit axes moves no data: it is a reshape.
    if (c.op == Op::transpose) {
      const std::vector<int64_t> perm = c.attrs.get_ints("perm");
      int64_t last = -1;
      bool ordered = true;
      for (int64_t p : perm) {
        if (in_shape[static_cast<size_t>(p)] == 1) continue;
        ordered = ordered && p > last;
        last = p;
      }
      if (ordered && !std::is_sorted(perm.begin(), perm.end())) {
        return Candidate{Op::reshape, in, {{"shape", result}}, "transpose of unit axes -> reshape"};
      }
    }
    const NodeId p = out.value(in).producer;
    if (p < 0) return c;
    const Node& producer = out.node(p);
    const ValueId root = producer.inputs.empty() ? -1 : producer.inputs[0];
    if (c.op == Op::reshape && producer.op == Op::reshape) {
      return Candidate{Op::reshape, root, {{"shape", result}}, "reshape∘reshape"};
    }
    if (c.op == Op::broadcast && producer.op == Op::broadcast) {
      return Candidate{Op::broadcast, root, {{"shape", result}}, "broadcast∘broadcast"};
    }
    if (c.op == Op::transpose && producer.op == Op::transpose) {
      const std::vector<int64_t> outer = c.attrs.get_ints("perm"), inner = producer.attrs.get_ints("perm");
      std::vector<int64_t> perm(outer.size());
      for (size_t i = 0; i < outer.size(); ++i) perm[i] = inner[static_cast<size_t>(outer[i])];  // out[i] = x[inner[outer[i]]]
      return Candidate{Op::transpose, root, {{"perm", perm}}, "transpose∘transpose"};
    }
    // (Splits are slices by now: compose_and_simplify writes one slice per piece.)
    if (c.op == Op::slice && producer.op == Op::slice) {
      const Shape& root_shape = out.value(root).type.shape;
      Node as_node;
      as_node.attrs = c.attrs;
      const SliceForm outer = slice_form(as_node, in_shape);
      const SliceForm inner = slice_form(producer, root_shape);
      if (inner.axis != outer.axis) return c;
      SliceForm composed{outer.axis, inner.start + outer.start * inner.step, outer.length, inner.step * outer.step};
      return Candidate{Op::slice, root, slice_attrs(composed, root_shape[static_cast<size_t>(outer.axis)]), "slice∘slice"};
    }
    return c;
  }

  // Whether the candidate returns its input unchanged: same type and, for a transpose, the identity
  // permutation. (A reshape, broadcast, slice, split or concat whose result has its input's type selects every
  // element in order: a slice with step > 1 keeps its dim only when that dim is 0 or 1.)
  static bool is_identity(const Graph& out, const Candidate& c, const TensorType& result) {
    if (out.value(c.input).type != result) return false;
    if (c.op != Op::transpose) return true;
    const std::vector<int64_t> perm = c.attrs.get_ints("perm");
    return std::is_sorted(perm.begin(), perm.end());
  }

  // Removes view nodes that nothing reads (those whose readers now read their input directly).
  static Graph drop_unread_views(const Graph& g) {
    std::vector<int> readers(g.values().size(), 0);
    for (const GraphOutput& o : g.outputs()) ++readers[o.value];
    std::vector<bool> drop(g.nodes().size(), false);
    for (NodeId id = static_cast<NodeId>(g.nodes().size()) - 1; id >= 0; --id) {
      const Node& n = g.node(id);
      bool unread = is_index_map_view(n.op);
      for (ValueId v : n.outputs) unread = unread && readers[v] == 0;
      drop[id] = unread;
      if (!unread) {
        for (ValueId v : n.inputs) ++readers[v];
      }
    }
    GraphCopier copier(g);
    for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
      if (!drop[id]) copier.copy_node(id);
    }
    return copier.finish();
  }

  const Graph& source_;
  PassReport& report_;
};

// Phase 2: views whose readers all sit in fused groups of the view's stage join those groups (cloned when
// several groups read them).
Graph push_views_into_groups(const Graph& g, PassReport& report) {
  const std::vector<Binding> time = classify_binding_times(g);
  std::vector<std::vector<NodeId>> readers(g.values().size());
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    for (ValueId v : g.node(id).inputs) readers[v].push_back(id);
  }
  std::set<ValueId> outputs;
  for (const GraphOutput& o : g.outputs()) outputs.insert(o.value);
  std::set<int32_t> computing;
  for (const Node& n : g.nodes()) {
    if (n.group >= 0 && !op_has_trait(n.op, kTraitView)) computing.insert(n.group);
  }
  auto stage = [&](const Node& n) { return n.outputs.empty() ? Binding::weight : time[n.outputs[0]]; };
  // The groups each view will load through, readers first; empty: the view stays where it is.
  std::vector<std::set<int32_t>> target(g.nodes().size());
  for (NodeId id = static_cast<NodeId>(g.nodes().size()) - 1; id >= 0; --id) {
    const Node& n = g.node(id);
    if (!is_index_map_view(n.op) || computing.count(n.group)) continue;
    std::set<int32_t> groups;
    bool ok = true;
    for (ValueId v : n.outputs) {
      ok = ok && !outputs.count(v);
      for (NodeId r : readers[v]) {
        const Node& reader = g.node(r);
        ok = ok && stage(reader) == stage(n);
        if (computing.count(reader.group)) {
          groups.insert(reader.group);
        } else if (!target[r].empty()) {
          groups.insert(target[r].begin(), target[r].end());
        } else if (reader.group >= 0 && is_index_map_view(reader.op)) {
          groups.insert(reader.group);  // a view that stays runs as its group's copy kernel: it loads through n
        } else {
          ok = false;
        }
      }
    }
    if (ok && !groups.empty()) target[id] = std::move(groups);
  }

  Graph out;
  out.name = g.name;
  std::vector<ValueId> map(g.values().size(), -1);
  std::map<std::pair<ValueId, int32_t>, ValueId> clone;  // (source value, group) -> the group's copy
  for (const GraphInput& in : g.inputs()) {
    const Value& v = g.value(in.value);
    map[in.value] = *out.add_input(v.name, v.type, in.binding);
  }
  auto input_for = [&](ValueId v, int32_t group) {
    auto it = clone.find({v, group});
    return it != clone.end() ? it->second : map[v];
  };
  auto emit = [&](const Node& n, int32_t group, std::vector<std::string> names) {
    std::vector<ValueId> inputs;
    for (ValueId v : n.inputs) inputs.push_back(input_for(v, group));
    auto outs = out.add_node(n.op, std::move(inputs), n.attrs, std::move(names));
    KILN_CHECK(outs.ok());
    out.set_node_group(static_cast<NodeId>(out.nodes().size()) - 1, group);
    return *outs;
  };
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    std::vector<std::string> names;
    for (ValueId v : n.outputs) names.push_back(g.value(v).name);
    const std::set<int32_t>& groups = target[id];
    if (groups.empty()) {
      const std::vector<ValueId> outs = emit(n, n.group, names);
      for (size_t i = 0; i < outs.size(); ++i) map[n.outputs[i]] = outs[i];
      continue;
    }
    const bool cloned = groups.size() > 1;
    ++report.found[std::string(op_name(n.op)) + (cloned ? " cloned into " + std::to_string(groups.size()) + " groups"
                                                        : " pushed into its reader's group")];
    for (int32_t grp : groups) {
      std::vector<std::string> clone_names = names;
      if (cloned) {
        for (std::string& name : clone_names) name = out.unique_name(name + ".g" + std::to_string(grp));
      }
      const std::vector<ValueId> outs = emit(n, grp, clone_names);
      for (size_t i = 0; i < outs.size(); ++i) {
        clone[{n.outputs[i], grp}] = outs[i];
        if (!cloned) map[n.outputs[i]] = outs[i];
      }
    }
  }
  for (const GraphOutput& o : g.outputs()) KILN_CHECK(out.add_output(o.name, map[o.value]).ok());
  return out;
}

}  // namespace

PassResult canonicalize_views(const Graph& graph) {
  PassReport report{"canonicalize-views", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  ViewCanonicalizer canonicalizer(graph, report);
  Graph simplified = canonicalizer.compose_and_simplify();
  Graph out = push_views_into_groups(simplified, report);
  report.changed = !report.found.empty();
  for (const auto& [pattern, n] : report.found) report.notes.push_back(fmt::format("{} x {}", n, pattern));
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
