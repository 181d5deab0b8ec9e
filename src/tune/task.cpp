#include "tune/task.h"

#include <fmt/format.h>

#include <map>

#include "backend/plan.h"

namespace kiln::tune {
namespace {

std::string attr_text(const AttrValue& value) {
  struct Visitor {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return fmt::format("{}", v); }
    std::string operator()(const std::string& v) const { return "\"" + v + "\""; }
    std::string operator()(const std::vector<int64_t>& v) const { return fmt::format("[{}]", fmt::join(v, ",")); }
    std::string operator()(const std::vector<double>& v) const { return fmt::format("[{}]", fmt::join(v, ",")); }
  };
  return std::visit(Visitor{}, value);
}

std::string library_key(Op op, const Attrs& attrs, const std::vector<TensorType>& inputs) {
  std::string key = "lib:" + std::string(op_name(op)) + "(";
  for (size_t i = 0; i < inputs.size(); ++i) key += (i ? "," : "") + type_to_string(inputs[i]);
  key += ")";
  for (const auto& [name, value] : attrs.entries()) key += " " + name + "=" + attr_text(value);
  return key;
}

// The units backend::Plan runs: a fused group, or a node outside any group, in order of their first node.
std::vector<std::vector<NodeId>> plan_units(const Graph& g) {
  std::vector<std::vector<NodeId>> units;
  std::map<int32_t, size_t> unit_of_group;
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const int32_t group = g.node(id).group;
    if (group < 0) {
      units.push_back({id});
      continue;
    }
    auto [it, fresh] = unit_of_group.emplace(group, units.size());
    if (fresh) units.emplace_back();
    units[it->second].push_back(id);
  }
  return units;
}

std::string unit_label(const Graph& g, const std::vector<NodeId>& members) {
  if (members.size() == 1) return g.node_label(members[0]);
  return fmt::format("group {} ({} nodes, first {})", g.node(members[0]).group, members.size(),
                     g.node_label(members[0]));
}

}  // namespace

Result<TaskList> collect_tasks(const Graph& g) {
  TaskList list;
  std::map<std::string, size_t> task_of_hash;
  auto add = [&](TuneTask task) {
    ++list.units;
    auto [it, fresh] = task_of_hash.emplace(task.hash, list.tasks.size());
    if (fresh) {
      task.occurrences = 1;
      list.tasks.push_back(std::move(task));
    } else {
      ++list.tasks[it->second].occurrences;
    }
  };
  for (const std::vector<NodeId>& members : plan_units(g)) {
    const Node& first = g.node(members[0]);
    if (members.size() == 1 && op_has_trait(first.op, kTraitSource)) {
      ++list.constants;
      continue;
    }
    if (members.size() == 1 && backend::is_library_op(first.op)) {
      TuneTask task;
      task.kind = TaskKind::library;
      task.op = first.op;
      task.attrs = first.attrs;
      for (ValueId v : first.inputs) task.input_types.push_back(g.value(v).type);
      task.hash = library_key(first.op, first.attrs, task.input_types);
      task.label = unit_label(g, members);
      task.members = members;
      add(std::move(task));
      continue;
    }
    auto lowered = kernel::lower_nodes(g, members, fmt::format("t{}", list.tasks.size()));
    if (!lowered.ok()) {
      list.notes.push_back(unit_label(g, members) + " cannot be generated (" + lowered.error().message +
                           "); the plan runs it on the reference, it is not tuned");
      continue;
    }
    if (!kernel::alias_offsets(*lowered).empty()) {
      ++list.aliases;
      continue;
    }
    TuneTask task;
    task.kind = TaskKind::kernel;
    task.hash = kernel::kernel_hash(*lowered);
    task.label = unit_label(g, members);
    task.members = members;
    task.kernel = std::move(lowered).value();
    add(std::move(task));
  }
  return list;
}

std::string task_shape_text(const TuneTask& task) {
  if (task.kind == TaskKind::library) {
    std::string text = std::string(op_name(task.op)) + " ";
    for (size_t i = 0; i < task.input_types.size(); ++i) text += (i ? " " : "") + type_to_string(task.input_types[i]);
    return text;
  }
  const kernel::Kernel& k = task.kernel;
  std::string in, out;
  for (const kernel::KernelParam& p : k.inputs) in += (in.empty() ? "" : " ") + type_to_string(p.type);
  for (const kernel::KernelParam& p : k.outputs) out += (out.empty() ? "" : " ") + type_to_string(p.type);
  return fmt::format("{} nodes, rows={} row={}: {} -> {}", k.members.size(), k.rows, k.max_row_elements(), in, out);
}

}  // namespace kiln::tune
