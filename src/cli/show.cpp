// kiln show MODEL: the graph's size and where its work is — parameters, FLOPs and minimum bytes per op class.
#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "ir/op_class.h"
#include "ir/text.h"
#include "util/format.h"

namespace kiln::cli {
namespace {

struct ClassTotals {
  int nodes = 0;
  double flops = 0;
  double bytes = 0;
};

void show(const Graph& graph, const std::string& spec, bool print_graph, bool as_json) {
  std::array<ClassTotals, kOpClassCount> by_class{};
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const OpCost c = node_cost(graph, id);
    ClassTotals& t = by_class[static_cast<size_t>(op_class(graph.node(id).op))];
    ++t.nodes;
    t.flops += c.flops;
    t.bytes += c.bytes;
  }
  const GraphCost total = graph_cost(graph);
  int64_t params = parameter_count(graph);
  double weight_bytes = 0;
  std::array<int, 3> inputs_by_binding{};
  for (const GraphInput& in : graph.inputs()) {
    ++inputs_by_binding[static_cast<size_t>(in.binding)];
    if (in.binding == Binding::weight) weight_bytes += static_cast<double>(type_bytes(graph.value(in.value).type));
  }

  if (as_json) {
    nlohmann::json j;
    j["model"] = spec;
    j["name"] = graph.name;
    j["nodes"] = graph.nodes().size();
    j["values"] = graph.values().size();
    j["parameters"] = params;
    j["weight_bytes"] = weight_bytes;
    j["flops"] = total.flops;
    j["bytes"] = total.bytes;
    for (int b = 0; b < 3; ++b) j["inputs"][binding_name(static_cast<Binding>(b))] = inputs_by_binding[b];
    for (int c = 0; c < kOpClassCount; ++c) {
      const ClassTotals& t = by_class[c];
      if (t.nodes == 0) continue;
      j["by_class"][std::string(op_class_name(static_cast<OpClass>(c)))] = {
          {"nodes", t.nodes}, {"flops", t.flops}, {"bytes", t.bytes}};
    }
    fmt::print("{}\n", j.dump(1));
    return;
  }
  if (print_graph) fmt::print("{}\n", print_graph_text(graph));
  fmt::print("model       {} ({})\n", graph.name, spec);
  fmt::print("graph       {} nodes, {} values, {} outputs\n", graph.nodes().size(), graph.values().size(),
             graph.outputs().size());
  fmt::print("inputs      {} weight, {} per_step, {} per_call\n", inputs_by_binding[0], inputs_by_binding[1],
             inputs_by_binding[2]);
  fmt::print("parameters  {} ({} of weights)\n", format_count(static_cast<double>(params)),
             format_bytes(weight_bytes));
  fmt::print("work        {} per call, {} minimum bytes moved (each op alone)\n", format_flops(total.flops),
             format_bytes(total.bytes));
  fmt::print("\n{:<14}{:>7}{:>16}{:>8}{:>14}{:>8}\n", "op class", "nodes", "FLOPs", "share", "bytes", "share");
  for (int c = 0; c < kOpClassCount; ++c) {
    const ClassTotals& t = by_class[c];
    if (t.nodes == 0) continue;
    fmt::print("{:<14}{:>7}{:>16}{:>7.1f}%{:>14}{:>7.1f}%\n", op_class_name(static_cast<OpClass>(c)), t.nodes,
               format_flops(t.flops), total.flops > 0 ? 100.0 * t.flops / total.flops : 0.0, format_bytes(t.bytes),
               total.bytes > 0 ? 100.0 * t.bytes / total.bytes : 0.0);
  }
}

}  // namespace

void add_show_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("show", "Print a model's size and where its work is (FLOPs, bytes per op class)");
  auto model = std::make_shared<std::string>();
  auto print_graph = std::make_shared<bool>(false);
  auto as_json = std::make_shared<bool>(false);
  auto source = std::make_shared<ModelSourceOptions>();
  cmd->add_option("MODEL", *model, "zoo:NAME[:key=value,...] (see `kiln zoo`), a .json/.kiln graph or a .onnx model")
      ->required();
  add_model_source_options(cmd, source.get());
  cmd->add_flag("--graph", *print_graph, "also print the graph in kiln's text form");
  cmd->add_flag("--json", *as_json, "print the summary as JSON");
  cmd->callback([=] {
    auto graph = load_model(*model, *source);
    if (!graph.ok()) return void(*exit_code = report_error(graph.error()));
    show(*graph, *model, *print_graph, *as_json);
  });
}

}  // namespace kiln::cli
