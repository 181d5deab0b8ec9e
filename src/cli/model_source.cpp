#include "cli/model_source.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "ir/text.h"
#include "models/zoo.h"
#include "onnx/import.h"

namespace kiln::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Result<onnx::ImportOptions> import_options(const ModelSourceOptions& options) {
  onnx::ImportOptions out;
  for (const std::string& d : options.dims) {
    const size_t eq = d.find('=');
    int64_t value = -1;
    if (eq != std::string::npos && eq > 0) {
      try {
        size_t used = 0;
        value = std::stoll(d.substr(eq + 1), &used);
        if (used != d.size() - eq - 1) value = -1;
      } catch (const std::exception&) {
        value = -1;
      }
    }
    if (value < 0) {
      return make_error(ErrorCode::invalid_argument, "--dim '" + d + "' must be NAME=N with N >= 0 (e.g. --dim seq=64)");
    }
    out.dims[d.substr(0, eq)] = value;
  }
  out.per_step.insert(options.per_step.begin(), options.per_step.end());
  return out;
}

}  // namespace

void add_model_source_options(CLI::App* cmd, ModelSourceOptions* options) {
  cmd->add_option("--dim", options->dims, "ONNX: bind a symbolic dimension, NAME=N (repeatable)");
  cmd->add_option("--per-step", options->per_step, "ONNX: graph inputs that change once per step (repeatable)")
      ->delimiter(',');
}

Result<LoadedModel> load_model_with_weights(const std::string& spec, const ModelSourceOptions& options) {
  const bool onnx_file = ends_with(spec, ".onnx");
  if (!onnx_file && (!options.dims.empty() || !options.per_step.empty())) {
    return make_error(ErrorCode::invalid_argument, "--dim and --per-step apply to .onnx models only");
  }
  if (spec.rfind("zoo:", 0) == 0) {
    KILN_ASSIGN_OR_RETURN(Graph g, models::build_zoo_model(std::string_view(spec).substr(4)));
    return LoadedModel{std::move(g), {}};
  }
  if (onnx_file) {
    KILN_ASSIGN_OR_RETURN(onnx::ImportOptions o, import_options(options));
    KILN_ASSIGN_OR_RETURN(onnx::ImportedModel m, onnx::import_onnx_file(spec, o));
    return LoadedModel{std::move(m.graph), std::move(m.weights)};
  }
  KILN_ASSIGN_OR_RETURN(Graph g, load_graph_file(spec));
  return LoadedModel{std::move(g), {}};
}

Result<Graph> load_model(const std::string& spec, const ModelSourceOptions& options) {
  KILN_ASSIGN_OR_RETURN(LoadedModel m, load_model_with_weights(spec, options));
  return std::move(m.graph);
}

int report_error(const Error& error) {
  std::fprintf(stderr, "kiln: error: %s\n", error.message.c_str());
  return 1;
}

}  // namespace kiln::cli
