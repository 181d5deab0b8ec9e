// kiln run MODEL: runs a model on the reference executor (the oracle) and prints, per output, its statistics
// and a checksum of its bytes. Inputs are seeded random unless given in a safetensors file.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "models/weights.h"
#include "ref/executor.h"
#include "util/format.h"

namespace kiln::cli {
namespace {

struct RunArgs {
  std::string model = "zoo:flux1-dev:tiny";
  uint64_t seed = 0;
  std::string inputs_file;
  std::string save_outputs;
  double max_memory_gb = 8.0;
  bool as_json = false;
  ModelSourceOptions source;
};

uint64_t fnv1a(const std::byte* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<uint8_t>(data[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

nlohmann::json tensor_summary(const Tensor& t) {
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum_sq = 0;
  int64_t nans = 0, infs = 0, finite = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.get(i);
    if (std::isnan(v)) { ++nans; continue; }
    if (std::isinf(v)) { ++infs; continue; }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_sq += v * v;
    ++finite;
  }
  const double mean = finite ? sum / finite : 0.0;
  const double var = finite ? std::max(0.0, sum_sq / finite - mean * mean) : 0.0;
  return {{"dtype", std::string(dtype_name(t.dtype()))},
          {"shape", t.shape()},
          {"min", finite ? lo : 0.0},
          {"max", finite ? hi : 0.0},
          {"mean", mean},
          {"std", std::sqrt(var)},
          {"nan", nans},
          {"inf", infs},
          {"checksum", fmt::format("{:016x}", fnv1a(t.data(), t.byte_size()))}};
}

// A rough upper bound of what the reference run holds at once: all inputs plus the four largest values.
double estimated_bytes(const Graph& graph) {
  double inputs = 0;
  std::vector<double> sizes;
  for (const GraphInput& in : graph.inputs()) inputs += static_cast<double>(type_bytes(graph.value(in.value).type));
  for (const Value& v : graph.values()) sizes.push_back(static_cast<double>(type_bytes(v.type)));
  std::sort(sizes.rbegin(), sizes.rend());
  double largest = 0;
  for (size_t i = 0; i < sizes.size() && i < 4; ++i) largest += sizes[i];
  return inputs + largest;
}

int run(const RunArgs& args) {
  auto loaded = load_model_with_weights(args.model, args.source);
  if (!loaded.ok()) return report_error(loaded.error());
  Graph* graph = &loaded->graph;
  const double need = estimated_bytes(*graph);
  if (need > args.max_memory_gb * 1e9) {
    return report_error(make_error(
        ErrorCode::invalid_argument,
        fmt::format("{} needs about {} for a reference run, over the --max-memory limit of {:.1f} GB; run a "
                    "smaller configuration (e.g. zoo:flux1-dev:tiny) or raise --max-memory",
                    args.model, format_bytes(need), args.max_memory_gb)));
  }
  std::map<std::string, Tensor> inputs = models::random_inputs(*graph, args.seed);
  for (auto& [name, tensor] : loaded->weights) inputs[name] = std::move(tensor);  // the model file's own weights
  if (!args.inputs_file.empty()) {
    auto loaded = models::load_safetensors(args.inputs_file);
    if (!loaded.ok()) return report_error(loaded.error());
    for (auto& [name, tensor] : *loaded) {
      auto id = graph->find_value(name);
      if (!id || !graph->is_graph_input(*id)) {
        return report_error(make_error(ErrorCode::invalid_argument, "'" + args.inputs_file + "' holds tensor '" +
                                                                        name + "', which is not an input of the model"));
      }
      inputs[name] = std::move(tensor);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto outputs = ref::run_graph(*graph, inputs);
  if (!outputs.ok()) return report_error(outputs.error());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  nlohmann::json result;
  result["model"] = args.model;
  result["seed"] = args.seed;
  result["reference_seconds"] = seconds;
  for (const auto& [name, tensor] : *outputs) result["outputs"][name] = tensor_summary(tensor);
  if (!args.save_outputs.empty()) {
    auto saved = models::save_safetensors(args.save_outputs, *outputs);
    if (!saved.ok()) return report_error(saved.error());
  }
  if (args.as_json) {
    fmt::print("{}\n", result.dump(1));
    return 0;
  }
  fmt::print("model  {} (seed {}), reference executor: {:.3f} s\n", args.model, args.seed, seconds);
  for (const auto& [name, s] : result["outputs"].items()) {
    fmt::print("output {:<10} {}{}  min {:.6g}  max {:.6g}  mean {:.6g}  std {:.6g}  nan {}  inf {}  checksum {}\n",
               name, s["dtype"].get<std::string>(), shape_to_string(s["shape"].get<Shape>()), s["min"].get<double>(),
               s["max"].get<double>(), s["mean"].get<double>(), s["std"].get<double>(), s["nan"].get<int64_t>(),
               s["inf"].get<int64_t>(), s["checksum"].get<std::string>());
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("run", "Run a model on the reference executor: output statistics and checksums");
  auto args = std::make_shared<RunArgs>();
  cmd->add_option("MODEL", args->model, "zoo:NAME[:key=value,...], a .json/.kiln graph or a .onnx model")
      ->capture_default_str();
  add_model_source_options(cmd, &args->source);
  cmd->add_option("--seed", args->seed, "seed of the random inputs and weights")->capture_default_str();
  cmd->add_option("--inputs", args->inputs_file,
                  "safetensors file with weights and/or inputs by value name (the rest are random)");
  cmd->add_option("--save-outputs", args->save_outputs, "write the outputs to this safetensors file");
  cmd->add_option("--max-memory", args->max_memory_gb, "refuse runs estimated above this many GB")
      ->capture_default_str();
  cmd->add_flag("--json", args->as_json, "print the result as JSON");
  cmd->callback([=] { *exit_code = run(*args); });
}

}  // namespace kiln::cli
