// The optimize loop over a workload's buckets (optimize_workload.h).
#include "agent/optimize_workload.h"

#include <chrono>

namespace kiln::agent {

Result<WorkloadResult> optimize_workload(const std::vector<BucketSpec>& buckets, backend::Backend& backend,
                                         const OptimizeOptions& options,
                                         const std::function<void(double budget_seconds)>& before_bucket) {
  if (buckets.empty()) return make_error(ErrorCode::invalid_argument, "the workload has no buckets");
  double total_weight = 0;
  for (const BucketSpec& b : buckets) {
    if (!(b.weight > 0)) return make_error(ErrorCode::invalid_argument, "bucket " + b.name + ": weight must be positive");
    total_weight += b.weight;
  }
  const auto start = std::chrono::steady_clock::now();
  WorkloadResult out;
  for (const BucketSpec& b : buckets) {
    const double weight = b.weight / total_weight;
    auto model = b.load();
    if (!model.ok()) return with_context(model.error(), "bucket " + b.name);
    OptimizeOptions o = options;
    o.model_key = model->model_key;
    o.budget_seconds = options.budget_seconds * weight;
    if (options.progress) {
      o.progress = [&options, name = b.name](const std::string& line) { options.progress("[" + name + "] " + line); };
    }
    if (before_bucket) before_bucket(o.budget_seconds);
    auto result = optimize(model->graph, model->inputs, backend, o);
    if (!result.ok()) return with_context(result.error(), "bucket " + b.name);
    out.baseline_seconds += weight * result->baseline_seconds();
    out.final_seconds += weight * result->final_seconds();
    out.buckets.push_back({b.name, weight, std::move(result).value()});
  }
  out.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace kiln::agent
