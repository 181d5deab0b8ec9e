// Resolving a MODEL argument: "zoo:NAME[:key=value,...]" builds a zoo model; a path ending in .onnx is
// imported (onnx/import.h) with the --dim / --per-step options; anything else is a graph file (.json or
// .kiln text).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace CLI {
class App;
}

namespace kiln::cli {

// How a model file is read where the file alone does not say: ONNX symbolic dimensions and per-step inputs.
struct ModelSourceOptions {
  std::vector<std::string> dims;      // "name=value"
  std::vector<std::string> per_step;  // graph input names
};
// Adds --dim and --per-step to a command that takes a MODEL.
void add_model_source_options(CLI::App* cmd, ModelSourceOptions* options);

struct LoadedModel {
  Graph graph;
  std::map<std::string, Tensor> weights;  // weights the model file carries (ONNX initializers); else empty
};
Result<LoadedModel> load_model_with_weights(const std::string& spec, const ModelSourceOptions& options = {});
Result<Graph> load_model(const std::string& spec, const ModelSourceOptions& options = {});

// Prints "kiln: error: MESSAGE" to stderr and returns the exit code for a failed command.
int report_error(const Error& error);

}  // namespace kiln::cli
