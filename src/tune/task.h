// Tuning tasks: what `kiln tune` searches, one per distinct piece of work in an optimized graph. A task is a
// generated kernel (a fused group, or a node outside any group, lowered by kernel::lower_nodes) or a library
// op (GEMM, attention, gather), at its exact shapes and dtypes. Tasks are deduplicated by structure: kernels
// by kernel::kernel_hash, library ops by op, attributes and input types, so the identical blocks of a model
// are one task per shape with an occurrence count. The units are the ones backend::Plan runs; views that
// alias their input and constants computed at build time cost nothing at run time and are not tasks.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernel/kernel_ir.h"

namespace kiln::tune {

enum class TaskKind { kernel, library };

struct TuneTask {
  TaskKind kind = TaskKind::kernel;
  std::string hash;   // kernel: kernel_hash; library: "lib:" + op, attributes and input types
  std::string label;  // the first occurrence, for people: "group 3 (5 nodes, first %n = layernorm(...))"
  int occurrences = 0;
  std::vector<NodeId> members;  // of the first occurrence
  kernel::Kernel kernel;        // kind == kernel
  Op op = Op::add;              // kind == library
  Attrs attrs;
  std::vector<TensorType> input_types;
};

struct TaskList {
  std::vector<TuneTask> tasks;  // in order of first occurrence
  int units = 0;                // kernels + library calls before deduplication
  int aliases = 0;              // view units that cost nothing
  int constants = 0;
  std::vector<std::string> notes;  // units that cannot be lowered (the plan runs them on the reference)
};

// The tasks of an optimized graph (after passes::run_pipeline: fused groups marked).
Result<TaskList> collect_tasks(const Graph& graph);

// One line per task kind for people: "kernel rows=64 row=256 f32 -> f32", "linear bf16[64,256] x bf16[512,256]".
std::string task_shape_text(const TuneTask& task);

}  // namespace kiln::tune
