#include "passes/staging.h"

#include <map>
#include <set>

namespace kiln::passes {

std::vector<Binding> classify_binding_times(const Graph& graph) {
  std::vector<Binding> time(graph.values().size(), Binding::weight);
  for (const GraphInput& in : graph.inputs()) time[in.value] = in.binding;
  for (const Node& node : graph.nodes()) {
    Binding b = Binding::weight;
    for (ValueId v : node.inputs) b = std::max(b, time[v]);  // weight < per_step < per_call
    for (ValueId v : node.outputs) time[v] = b;
  }
  return time;
}

namespace {

// Builds one stage: the nodes whose binding time is `stage`, reading earlier-stage values as inputs.
class StageBuilder {
 public:
  StageBuilder(const Graph& source, const std::vector<Binding>& time, Binding stage)
      : source_(source), time_(time), stage_(stage), map_(source.values().size(), -1) {
    target_.name = source.name + "." + binding_name(stage);
  }

  // Imports a value computed (or bound) before this stage as a graph input of this stage.
  ValueId import(ValueId v) {
    if (map_[v] >= 0) return map_[v];
    const Value& value = source_.value(v);
    // A value from an earlier stage is bound like that stage: constant for load values, per_step for step values.
    const Binding binding = source_.is_graph_input(v) ? source_.binding_of_input(v) : time_[v];
    auto id = target_.add_input(value.name, value.type, binding);
    KILN_CHECK(id.ok());
    map_[v] = *id;
    return *id;
  }

  void add(NodeId id) {
    const Node& node = source_.node(id);
    std::vector<ValueId> inputs;
    for (ValueId v : node.inputs) inputs.push_back(map_[v] >= 0 ? map_[v] : import(v));
    std::vector<std::string> names;
    for (ValueId v : node.outputs) names.push_back(source_.value(v).name);
    auto outs = target_.add_node(node.op, std::move(inputs), node.attrs, std::move(names));
    KILN_CHECK(outs.ok());
    for (size_t i = 0; i < node.outputs.size(); ++i) map_[node.outputs[i]] = (*outs)[i];
  }

  // Exposes a value of this stage (or one it imported) as a named output.
  void expose(const std::string& name, ValueId v) {
    const ValueId mapped = map_[v] >= 0 ? map_[v] : import(v);
    if (exposed_.count(name)) return;
    exposed_.insert(name);
    KILN_CHECK(target_.add_output(name, mapped).ok());
  }

  bool defines(ValueId v) const { return map_[v] >= 0 && !source_.is_graph_input(v) && time_[v] == stage_; }
  Graph finish() { return std::move(target_); }

 private:
  const Graph& source_;
  const std::vector<Binding>& time_;
  Binding stage_;
  Graph target_;
  std::vector<ValueId> map_;
  std::set<std::string> exposed_;
};

}  // namespace

StagedGraph split_stages(const Graph& graph) {
  const std::vector<Binding> time = classify_binding_times(graph);
  StageBuilder load(graph, time, Binding::weight), step(graph, time, Binding::per_step),
      call(graph, time, Binding::per_call);
  StageBuilder* stages[] = {&load, &step, &call};
  int counts[3] = {0, 0, 0};
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Binding b = time[graph.node(id).outputs.empty() ? 0 : graph.node(id).outputs[0]];
    stages[static_cast<int>(b)]->add(id);
    ++counts[static_cast<int>(b)];
  }
  // Every value a later stage reads from an earlier stage's nodes becomes an output of that earlier stage.
  for (const Node& node : graph.nodes()) {
    const int consumer = static_cast<int>(time[node.outputs.empty() ? 0 : node.outputs[0]]);
    for (ValueId v : node.inputs) {
      if (graph.is_graph_input(v)) continue;
      const int producer = static_cast<int>(time[v]);
      if (producer < consumer) stages[producer]->expose(graph.value(v).name, v);
    }
  }
  // Model outputs computed by an earlier stage pass through the call stage unchanged.
  for (const GraphOutput& o : graph.outputs()) {
    if (!graph.is_graph_input(o.value) && time[o.value] != Binding::per_call) {
      stages[static_cast<int>(time[o.value])]->expose(graph.value(o.value).name, o.value);
    }
    call.expose(o.name, o.value);
  }
  StagedGraph staged{load.finish(), step.finish(), call.finish(), {}};
  staged.report.pass = "staging";
  staged.report.nodes_before = static_cast<int>(graph.nodes().size());
  staged.report.nodes_after = counts[2];
  staged.report.changed = counts[0] + counts[1] > 0;
  staged.report.notes.push_back(std::to_string(counts[0]) + " nodes at load time, " + std::to_string(counts[1]) +
                                " per step, " + std::to_string(counts[2]) + " per call");
  return staged;
}

StageWork measure_stage_work(const Graph& graph) {
  const std::vector<Binding> time = classify_binding_times(graph);
  StageWork work;
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& node = graph.node(id);
    const Binding b = node.outputs.empty() ? Binding::weight : time[node.outputs[0]];
    ++work.nodes[static_cast<int>(b)];
    work.bytes[static_cast<int>(b)] += node_cost(graph, id).bytes;
    if (b == Binding::weight) ++work.load_ops[std::string(op_name(node.op))];
    if (b == Binding::per_step) ++work.step_ops[std::string(op_name(node.op))];
  }
  return work;
}

}  // namespace kiln::passes
