// Executing an optimized graph (after kiln::passes::run_pipeline) on a backend: the runtime Plan. Every fused
// group becomes one generated kernel (kernel::lower_nodes + emit, all kernels of the plan in one compiled
// module), every library op (GEMM, attention, gather) a backend library call, and view-only groups that read
// a contiguous window of their input cost nothing (their outputs point into the input's memory).
//
// Steps run in three stages by binding time (passes/staging.h, DESIGN.md decision 4):
//  - load: weight-only work (transposes, merged weights, scale packing). Constants (source ops) are computed
//    when the plan is built; the other load steps run at the first execute after weights are set.
//  - per step: work that depends on per-step inputs (timestep, guidance), computed once per distinct value of
//    those inputs (key: a content hash of them) and kept in a small cache, so the calls of one denoising step
//    (Qwen-Image's two classifier-free-guidance calls) share it.
//  - per call: everything else, on every execute.
// Memory: inputs, constants, load and per-step values own their buffers; per-call intermediates share one
// arena by liveness (backend/memory_plan.h); graph outputs are never shared. A plan is saved and loaded as a
// self-describing artifact by backend/plan_artifact.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernel/kernel_ir.h"
#include "kernel/schedule.h"

namespace kiln::backend {

// Whether a node outside any fused group runs as a backend library call (GEMMs, attention, gather,
// pack_scales) rather than as a generated kernel; the tuner (tune/task.h) splits work the same way.
bool is_library_op(Op op);

// The optimized graph with every value a step writes (a library call's output, a fused group's value read
// outside the group) as an extra output `step:NAME`, in node order: where a plan first departs from the
// reference (`kiln run --compare-steps`). Groups keep their members, so a plan runs the same kernels, now also
// storing those values (windows and concats in place whose pieces become outputs are copied instead).
Graph with_step_outputs(const Graph& optimized);

struct PlanOptions {
  // Schedules by kernel hash (kernel::kernel_hash), e.g. a tuner's winners; other kernels take
  // kernel::default_schedule.
  std::map<std::string, kernel::Schedule> schedules;
  // A group the kernel IR cannot express runs node by node through the reference implementations (each
  // noted in the summary) instead of failing the plan.
  bool reference_fallback = true;
  // Per-call intermediates share memory by liveness; false gives every value its own buffer.
  bool reuse_memory = true;
  // Distinct per-step input values whose per-step results are kept; 0 recomputes the per-step stage on every
  // execute.
  int per_step_cache_entries = 4;
  // Lanes the steps may spread over (backend.h; lanes.h says which step goes where), at most the backend's.
  // 1 runs every step in order on one queue. A plan with a reference fallback runs on one lane.
  int lanes = 1;
  // Column windows read in place and concat pieces written in place by library calls that take pitched
  // operands (Backend::takes_pitched); false copies them through view kernels.
  bool pitched_windows = true;
};

struct PlanSummary {
  int kernels = 0;        // generated kernel launches per run
  int library_calls = 0;  // GEMMs, attention, gathers
  int aliases = 0;        // view groups that cost nothing
  int windows = 0;        // column windows library calls read in place (pitched, backend.h)
  int in_place_concats = 0;  // concats whose pieces their library producers write in place
  int constants = 0;      // computed once at build
  int fallbacks = 0;      // groups run through the reference
  int load_steps = 0;     // steps of each stage
  int per_step_steps = 0;
  int per_call_steps = 0;
  // Device memory the plan holds: with per-call intermediates in one buffer each, and as planned.
  int64_t memory_bytes_without_reuse = 0;
  int64_t memory_bytes = 0;
  // The per-call intermediates alone: one buffer each, and the shared arena.
  int64_t intermediate_bytes = 0;
  int64_t arena_bytes = 0;
  double compile_seconds = 0;
  int lanes = 1;       // lanes the steps run on
  int lane_waits = 0;  // cross-lane waits per run of all stages
  std::vector<std::string> notes;
};

// What the stages did so far.
struct PlanStats {
  int64_t executes = 0;
  int64_t load_runs = 0;
  int64_t per_step_hits = 0;    // executes that reused cached per-step results
  int64_t per_step_misses = 0;  // executes that computed the per-step stage
  // Host seconds spent inside library calls: enqueues once warm, but a call's first run also chooses its
  // algorithm (the CUDA backend times GEMM candidates, builds cuDNN plans), so after the first run it says
  // what those choices cost.
  double library_seconds = 0;
};

class Plan {
 public:
  static Result<std::unique_ptr<Plan>> build(Backend& backend, const Graph& graph, const PlanOptions& options = {});
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // Copies the given graph inputs (by value name) to the device. An input keeps its value until it is set
  // again, so weights need be given only once; every input must have been given by the first call, else the
  // error names the missing one. Weights and per-step inputs are compared by content hash: given again
  // unchanged they are not copied; changed weights rerun the load stage, new per-step values select (or
  // compute) the per-step results.
  Status set_inputs(const std::map<std::string, Tensor>& inputs);
  // Runs the stages on the inputs last set: load (if weights changed), per step (unless cached), per call.
  Status execute();
  Result<std::map<std::string, Tensor>> outputs();
  // set_inputs + execute + outputs.
  Result<std::map<std::string, Tensor>> run(const std::map<std::string, Tensor>& inputs);

  const PlanSummary& summary() const { return summary_; }
  const PlanStats& stats() const { return stats_; }
  const PlanOptions& options() const { return options_; }
  const Graph& graph() const { return graph_; }
  Backend& backend() const { return backend_; }
  // The generated source of the plan's module (empty when it has no kernels).
  const std::string& source() const { return source_; }

  // One thing execute() does, in order: load steps, then per-step steps, then per-call steps.
  struct Step {
    enum class Kind { kernel, library, fallback } kind = Kind::kernel;
    Binding stage = Binding::per_call;
    std::vector<NodeId> nodes;
    int kernel_index = -1;
    std::vector<ValueId> inputs, outputs;  // kernel: its params; library: the node's inputs / outputs
    std::string label;
    int lane = 0;             // lanes.h
    std::vector<int> waits;   // steps of other lanes it waits for before it runs
    bool signals = false;     // another lane waits for it: it records its event
  };
  const std::vector<Step>& steps() const { return steps_; }

  // A generated kernel of the module, by kernel_index.
  struct PlanKernel {
    kernel::Kernel kernel;
    kernel::Schedule schedule;
    std::string entry;  // its symbol in the module
    std::string hash;   // kernel::kernel_hash
  };
  const std::vector<PlanKernel>& kernels() const { return kernels_; }
  // Runs step `index` alone on the tensors as they are (no synchronization): the profiler times steps one by
  // one with it (src/profile). Out of range is an error.
  Status execute_step(size_t index);

 private:
  Plan(Backend& backend, const Graph& graph, const PlanOptions& options)
      : backend_(backend), graph_(graph), options_(options) {}
  // On their lanes (fork and join around them) when `on_lanes`, else in order on lane 0.
  Status run_steps(size_t begin, size_t end, bool on_lanes = true);
  Status run_steps_on_lanes(size_t begin, size_t end, bool on_lanes);
  Status run_fallback(const Step& step);
  Status run_per_step_stage();
  uint64_t per_step_key() const;

  // Results of the per-step stage for one value of the per-step inputs (copies of cached_values_).
  struct PerStepEntry {
    bool valid = false;  // false: free (never filled, or filled before the weights last changed)
    uint64_t key = 0;
    std::vector<DeviceTensor> values;
    uint64_t last_used = 0;
  };

  Backend& backend_;
  Graph graph_;
  PlanOptions options_;
  std::vector<Step> steps_;
  size_t load_end_ = 0, per_step_end_ = 0;  // steps_[0, load_end_) load, [load_end_, per_step_end_) per step
  std::vector<PlanKernel> kernels_;
  std::map<ValueId, DeviceTensor> tensors_;
  std::vector<DeviceTensor> owned_;
  std::shared_ptr<LoadedModule> module_;
  std::string source_;
  PlanSummary summary_;
  PlanStats stats_;

  std::vector<bool> input_given_;  // by position in graph_.inputs()
  bool load_pending_ = true;
  std::map<ValueId, uint64_t> input_hash_;  // content of the weight and per-step inputs last copied
  std::vector<ValueId> cached_values_;  // per-step values the call stage (or an output) reads
  std::vector<PerStepEntry> per_step_cache_;
  std::optional<uint64_t> resident_key_;  // whose per-step results the working buffers hold
  uint64_t cache_clock_ = 0;
};

}  // namespace kiln::backend
