// Graph input values: deterministic random initialization for any graph, and safetensors files.
//
// random_inputs gives every graph input a value that depends only on the seed, the input's name, dtype and
// shape: the same weight gets the same values in every graph that has it, on every platform (own PRNG,
// exact arithmetic; no <random> distributions, which differ across standard libraries). Values keep
// activations O(1): matrices ~ N(0, 1/fan_in), norm weights near 1, biases small, FP8 weights quantized with
// scales consistent with their "<name>_scale" input, positions (img_ids, txt_ids, position_ids) laid out as
// the model's reference pipeline does, timesteps in (0, 1), guidance 3.5, guidance_scale 4.
//
// safetensors (https://github.com/huggingface/safetensors): an 8-byte little-endian header length, a JSON
// header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}} and the data.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::models {

std::map<std::string, Tensor> random_inputs(const Graph& graph, uint64_t seed);

// The weight inputs of `graph` taken from `values` (as written to a checkpoint).
std::map<std::string, Tensor> weights_of(const Graph& graph, const std::map<std::string, Tensor>& values);

// safetensors dtype names ("BF16", "F8_E4M3", ...) <-> kiln dtypes.
std::string_view safetensors_dtype_name(DType dtype);
std::optional<DType> parse_safetensors_dtype(std::string_view name);

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

Status save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                        const std::map<std::string, std::string>& metadata = {});
// Reads and checks the whole file: errors name the file and the tensor at fault.
Result<SafetensorsFile> read_safetensors(const std::string& path);
Result<std::map<std::string, Tensor>> load_safetensors(const std::string& path);

// Every weight input of `graph` must be in `weights` with its dtype and shape; extra tensors are allowed.
// The error lists the missing and mistyped weights.
Status check_weights_match(const Graph& graph, const std::map<std::string, Tensor>& weights);

}  // namespace kiln::models
