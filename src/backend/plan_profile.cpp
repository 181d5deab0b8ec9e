// Plan::execute_step: one step of a Plan on its own, for the per-step profiler (src/profile). Kept apart from
// plan.cpp so that the step-by-step entry point stays a small addition to the Plan.
#include "backend/plan.h"

#include <fmt/format.h>

namespace kiln::backend {

Status Plan::execute_step(size_t index) {
  if (index >= steps_.size()) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("plan: step {} does not exist (the plan has {} steps)", index, steps_.size()));
  }
  const Step& step = steps_[index];
  std::vector<DeviceTensor> in, out;
  for (ValueId v : step.inputs) in.push_back(tensors_.at(v));
  for (ValueId v : step.outputs) out.push_back(tensors_.at(v));
  Status st = ok_status();
  switch (step.kind) {
    case Step::Kind::kernel: st = backend_.launch(*module_, step.kernel_index, in, out); break;
    case Step::Kind::library: {
      const Node& n = graph_.node(step.nodes[0]);
      st = backend_.run_library(n.op, n.attrs, in, out);
      break;
    }
    case Step::Kind::fallback: st = run_fallback(step); break;
  }
  if (!st.ok()) return with_context(st.error(), step.label);
  return ok_status();
}

}  // namespace kiln::backend
