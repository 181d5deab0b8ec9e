// The optimize loop over a workload (src/workload): each shape bucket is its own model and gets its own Plan
// (DESIGN.md decision 10), optimized by agent::optimize with the bucket's share of the budget (its traffic
// weight); the objective is the traffic-weighted sum of end-to-end latency over the buckets.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "agent/optimize.h"

namespace kiln::agent {

struct BucketModel {
  std::string model_key;  // the bucket's model spec (workload::workload_model_spec)
  Graph graph;
  std::map<std::string, Tensor> inputs;  // every graph input, weights included
};

struct BucketSpec {
  std::string name;
  double weight = 1;  // normalized over the workload
  std::function<Result<BucketModel>()> load;  // called when the bucket's turn comes
};

struct BucketResult {
  std::string name;
  double weight = 0;
  OptimizeResult result;
};

struct WorkloadResult {
  std::vector<BucketResult> buckets;
  double baseline_seconds = 0;  // sum of weight x baseline over buckets
  double final_seconds = 0;     // sum of weight x final
  double elapsed_seconds = 0;
};

// `options` is the template of every bucket's run (its model_key and budget are set per bucket; progress
// lines get the bucket's name). `before_bucket` (may be empty) is told each bucket's budget before it runs
// (the CLI sets the tuner's share from it). An error of any bucket is the error, naming the bucket.
Result<WorkloadResult> optimize_workload(const std::vector<BucketSpec>& buckets, backend::Backend& backend,
                                         const OptimizeOptions& options,
                                         const std::function<void(double budget_seconds)>& before_bucket = {});

}  // namespace kiln::agent
