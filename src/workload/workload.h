// The workload a model serves: shape buckets with traffic weights (DESIGN.md: "workload (shape buckets with
// traffic weights)"). A Plan is built per bucket (decision 10); the optimize loop weighs each bucket's time by
// its share of the traffic. A workload file is JSON (docs/workload.md):
//
//   {"model": "zoo:qwen-image", "buckets": [
//     {"name": "1024px-cfg", "weight": 3, "dims": {"batch": 1, "image_tokens": 4096, "text_tokens": 512, "cfg": true}},
//     {"name": "512px", "weight": 1, "dims": {"image_tokens": 1024, "cfg": false}}]}
//
// A bucket's dims map onto the zoo model's options (batch, image_tokens -> img_tokens, text_tokens ->
// txt_tokens, seq, past, cfg on/off -> cfg=2/1, mode decode|prefill) or, for an ONNX model, onto --dim
// bindings of its symbolic dimensions. Errors name the file, the bucket and the field.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace kiln::workload {

struct WorkloadBucket {
  std::string name;
  double weight = 1;  // share of the traffic; a workload's weights sum to 1
  // Dim name as written in the file -> value ("4096", "on"/"off" for cfg, "decode"/"prefill" for mode).
  std::map<std::string, std::string> dims;
};

struct Workload {
  std::string model;  // the MODEL it is for; empty when the file does not say
  std::vector<WorkloadBucket> buckets;
};

Result<Workload> parse_workload(std::string_view text, const std::string& source_name = "<workload>");
Result<Workload> load_workload(const std::string& path);

// One bucket, "default", weight 1, no dims: the model as its spec configures it.
Workload default_workload(const std::string& model_spec);

// The model of one bucket: a zoo spec with the bucket's dims as options (they override the base spec's), or
// the base ONNX file with the dims as --dim bindings.
struct BucketModel {
  std::string spec;
  std::vector<std::string> dims;  // ONNX --dim "name=value"
};
Result<BucketModel> workload_model_spec(const std::string& base_spec, const WorkloadBucket& bucket);

}  // namespace kiln::workload
