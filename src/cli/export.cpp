// kiln export MODEL -o FILE: writes a model as JSON (.json) or kiln text (.kiln).
#include <fstream>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "ir/json.h"
#include "ir/text.h"

namespace kiln::cli {

void add_export_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("export", "Write a model's graph to a file (.json, or .kiln for the text form)");
  auto model = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  auto source = std::make_shared<ModelSourceOptions>();
  cmd->add_option("MODEL", *model, "zoo:NAME[:key=value,...], a .json/.kiln graph or a .onnx model")->required();
  add_model_source_options(cmd, source.get());
  cmd->add_option("-o,--output", *output, "output file; the extension picks the format")->required();
  cmd->callback([=] {
    auto graph = load_model(*model, *source);
    if (!graph.ok()) return void(*exit_code = report_error(graph.error()));
    const bool text = output->size() >= 5 && output->substr(output->size() - 5) == ".kiln";
    const bool json = output->size() >= 5 && output->substr(output->size() - 5) == ".json";
    if (!text && !json) {
      *exit_code = report_error(make_error(ErrorCode::invalid_argument,
                                           "output '" + *output + "' must end in .json or .kiln"));
      return;
    }
    std::ofstream out(*output, std::ios::binary);
    out << (text ? print_graph_text(*graph) : print_graph_json(*graph));
    out.close();
    if (!out) {
      *exit_code = report_error(make_error(ErrorCode::io_error, "cannot write '" + *output + "'"));
      return;
    }
    std::printf("wrote %s (%zu nodes, %zu values)\n", output->c_str(), graph->nodes().size(), graph->values().size());
  });
}

}  // namespace kiln::cli
