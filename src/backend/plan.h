// Executing an optimized graph (after kiln::passes::run_pipeline) on a backend: every fused group becomes one
// generated kernel (kernel::lower_nodes + emit, all kernels of the plan in one compiled module), every
// library op (GEMM, attention, gather) a backend library call, constants are computed once when the plan is
// built, and view-only groups that read a contiguous window of their input cost nothing (their outputs point
// into the input's memory). Memory is one buffer per value that crosses a step; there is no reuse yet (the
// runtime's memory planner, issue 6).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernel/schedule.h"

namespace kiln::backend {

struct PlanOptions {
  // Schedules by kernel hash (kernel::kernel_hash), e.g. a tuner's winners; other kernels take
  // kernel::default_schedule.
  std::map<std::string, kernel::Schedule> schedules;
  // A group the kernel IR cannot express runs node by node through the reference implementations (each
  // noted in the summary) instead of failing the plan.
  bool reference_fallback = true;
};

struct PlanSummary {
  int kernels = 0;        // generated kernel launches per run
  int library_calls = 0;  // GEMMs, attention, gathers
  int aliases = 0;        // view groups that cost nothing
  int constants = 0;      // computed once at build
  int fallbacks = 0;      // groups run through the reference
  double compile_seconds = 0;
  std::vector<std::string> notes;
};

class Plan {
 public:
  static Result<std::unique_ptr<Plan>> build(Backend& backend, const Graph& graph, const PlanOptions& options = {});
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // Copies every graph input (by value name) to the device; a missing or mistyped one is an error naming it.
  Status set_inputs(const std::map<std::string, Tensor>& inputs);
  // Runs every step once on the inputs last set.
  Status execute();
  Result<std::map<std::string, Tensor>> outputs();
  // set_inputs + execute + outputs.
  Result<std::map<std::string, Tensor>> run(const std::map<std::string, Tensor>& inputs);

  const PlanSummary& summary() const { return summary_; }
  // The generated source of the plan's module (empty when it has no kernels).
  const std::string& source() const { return source_; }
  const Graph& graph() const { return graph_; }

  // One thing execute() does, in order.
  struct Step {
    enum class Kind { kernel, library, fallback } kind = Kind::kernel;
    std::vector<NodeId> nodes;
    int kernel_index = -1;
    std::vector<ValueId> inputs, outputs;  // kernel: its params; library: the node's inputs / outputs
    std::string label;
  };
  const std::vector<Step>& steps() const { return steps_; }
  // Runs step `index` alone on the tensors as they are (no synchronization): the profiler times steps one by
  // one with it (plan_profile.cpp). Out of range is an error.
  Status execute_step(size_t index);

 private:
  Plan(Backend& backend, const Graph& graph) : backend_(backend), graph_(graph) {}
  Status run_fallback(const Step& step);

  Backend& backend_;
  Graph graph_;
  std::vector<Step> steps_;
  std::map<ValueId, DeviceTensor> tensors_;
  std::vector<DeviceTensor> owned_;
  std::shared_ptr<LoadedModule> module_;
  std::string source_;
  PlanSummary summary_;
};

}  // namespace kiln::backend
