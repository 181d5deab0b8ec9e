// A Plan saved as one self-describing JSON file, and loaded back (`kiln run --plan FILE`). The file holds what
// the plan is and how it was decided: the optimized graph (ir/json.h, fused groups included), every generated
// kernel (entry, kernel hash, schedule, its standalone source and that source's hash), the steps in order with
// their stage and kind (library calls with the algorithm they use), the memory plan's figures, the bucket and
// model it was built for, the kiln version and the device fingerprint. docs/runtime.md gives the fields.
//
// Loading re-derives the plan from the graph and the recorded schedules and checks it against the file: a
// truncated or non-JSON file, another format or kiln version, a plan for another backend kind, a graph that
// fails verification, a kernel whose source or hash differs from what kiln emits for it (a tampered kernel),
// or a step list that differs are errors naming the file and the field at fault. Weights are not stored.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/plan.h"

namespace kiln::backend {

inline constexpr int kPlanFormatVersion = 1;

// What a plan was built for, beyond its graph.
struct PlanArtifactInfo {
  std::string model;                     // the MODEL spec its graph came from ("zoo:qwen-image:tiny")
  std::vector<std::string> model_dims;   // ONNX --dim bindings of that model
  std::vector<std::string> model_per_step;  // ONNX --per-step inputs
  std::string bucket = "default";        // workload bucket (workload/workload.h)
  std::map<std::string, std::string> bucket_dims;
  // Set when saving (from the plan's backend) and read back when loading.
  std::string kiln_version;
  std::string device_fingerprint;
};

// "cpu|Intel(R) Xeon(R) ...|16 units": the device a plan's schedules were chosen on.
std::string device_fingerprint(const DeviceInfo& device);

std::string plan_artifact_json(const Plan& plan, const PlanArtifactInfo& info);
Status save_plan_artifact(const Plan& plan, const PlanArtifactInfo& info, const std::string& path);

struct LoadedPlan {
  std::unique_ptr<Plan> plan;
  PlanArtifactInfo info;
  std::vector<std::string> warnings;  // e.g. saved on another device of the same kind
};
Result<LoadedPlan> parse_plan_artifact(Backend& backend, std::string_view text, const std::string& source_name);
Result<LoadedPlan> load_plan_artifact(Backend& backend, const std::string& path);

}  // namespace kiln::backend
