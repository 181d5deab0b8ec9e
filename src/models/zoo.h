// The model zoo: named transformer graphs with real hyperparameters (FLUX.1-dev, FLUX.2-dev, Qwen-Image,
// Llama-3-8B, single FLUX blocks), each with options and a tiny configuration small enough for the reference
// executor. A spec is "NAME" or "NAME:key=value,key=value"; a bare key means key=1 ("flux1-dev:tiny").
// Options left unset take the model's default, or its tiny default when tiny=1.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "models/builder.h"

namespace kiln::models {

struct ZooOption {
  std::string key;
  std::string default_value;
  std::string tiny_value;  // empty: same as default_value
  std::string help;
};

struct ZooEntry {
  std::string name;
  std::string description;  // one line
  std::vector<ZooOption> options;
};

// Every model, in listing order.
std::vector<ZooEntry> zoo_models();

// Builds the graph a spec names. Unknown models, unknown keys and bad values are invalid_argument errors
// that list what is valid.
Result<Graph> build_zoo_model(std::string_view spec);

// ---- for the model files ----

// Resolved options of one build: every key of the entry has a value (given, tiny default or default).
class ModelOptions {
 public:
  ModelOptions(std::string model, std::map<std::string, std::string> values)
      : model_(std::move(model)), values_(std::move(values)) {}

  const std::string& model() const { return model_; }
  // An integer in [min_value, max_value].
  Result<int64_t> get_int(const std::string& key, int64_t min_value, int64_t max_value = INT64_MAX) const;
  // 0 or 1.
  Result<bool> get_bool(const std::string& key) const;
  // One of `choices`.
  Result<std::string> get_choice(const std::string& key, const std::vector<std::string>& choices) const;

  // The "dtype" option (bf16 | f16 | f32 | fp8) and "fp8_scaling" (tensor | channel | block): the activation
  // dtype and how linears in the transformer blocks run.
  struct Precision {
    DType act = DType::bf16;
    GemmPrecision gemm;
  };
  Result<Precision> get_precision() const;

 private:
  const std::string& raw(const std::string& key) const;
  Error bad_value(const std::string& key, const std::string& value, const std::string& wanted) const;

  std::string model_;
  std::map<std::string, std::string> values_;
};

using ZooBuildFn = Result<Graph> (*)(const ModelOptions& options);

struct ZooModel {
  ZooEntry entry;
  ZooBuildFn build;
};

// Options every model shares: dtype, fp8_scaling, batch, tiny.
std::vector<ZooOption> common_zoo_options();

// The models of each file.
std::vector<ZooModel> flux_zoo_models();
std::vector<ZooModel> qwen_image_zoo_models();
std::vector<ZooModel> llama_zoo_models();

}  // namespace kiln::models
