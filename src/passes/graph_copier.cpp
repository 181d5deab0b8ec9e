#include "passes/graph_copier.h"

#include <cstdio>

namespace kiln::passes {

GraphCopier::GraphCopier(const Graph& source) : source_(source), map_(source.values().size(), -1) {
  target_.name = source.name;
  for (const GraphInput& in : source.inputs()) {
    const Value& v = source.value(in.value);
    auto id = target_.add_input(v.name, v.type, in.binding);
    KILN_CHECK(id.ok());
    map_[in.value] = *id;
  }
}

ValueId GraphCopier::map(ValueId source_value) const {
  KILN_CHECK(map_[source_value] >= 0);
  return map_[source_value];
}

std::vector<ValueId> GraphCopier::mapped_inputs(NodeId id) const {
  std::vector<ValueId> inputs;
  for (ValueId v : source_.node(id).inputs) inputs.push_back(map(v));
  return inputs;
}

void GraphCopier::copy_node(NodeId id) { copy_node_with(id, source_.node(id).attrs, mapped_inputs(id)); }

void GraphCopier::copy_node_with(NodeId id, Attrs attrs, std::vector<ValueId> target_inputs) {
  const Node& node = source_.node(id);
  std::vector<std::string> names;
  for (ValueId v : node.outputs) names.push_back(source_.value(v).name);
  auto outputs = target_.add_node(node.op, std::move(target_inputs), std::move(attrs), std::move(names));
  if (!outputs.ok()) {
    std::fprintf(stderr, "kiln: internal error copying %s: %s\n", source_.node_label(id).c_str(),
                 outputs.error().message.c_str());
    KILN_CHECK(outputs.ok());
  }
  for (size_t i = 0; i < node.outputs.size(); ++i) map_[node.outputs[i]] = (*outputs)[i];
  target_.set_node_group(static_cast<NodeId>(target_.nodes().size()) - 1, node.group);
}

std::vector<ValueId> GraphCopier::add(const char* pass, Op op, std::vector<ValueId> inputs, Attrs attrs,
                                      std::vector<std::string> names) {
  auto out = target_.add_node(op, std::move(inputs), std::move(attrs), std::move(names));
  if (!out.ok()) {
    std::fprintf(stderr, "kiln: internal error in %s: %s\n", pass, out.error().message.c_str());
    KILN_CHECK(out.ok());
  }
  return *out;
}

std::string GraphCopier::fresh_name(const std::string& stem) const {
  std::string name = stem;
  for (int i = 1; source_.find_value(name) || target_.find_value(name); ++i) name = stem + "." + std::to_string(i);
  return name;
}

Graph GraphCopier::finish() {
  for (const GraphOutput& o : source_.outputs()) KILN_CHECK(target_.add_output(o.name, map(o.value)).ok());
  return std::move(target_);
}

}  // namespace kiln::passes
