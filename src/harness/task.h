// KernelTask: what a kernel candidate must compute. A small graph (usually one node) with exact input types;
// the kernel takes the graph inputs in order and writes the graph outputs in order. The reference executor
// run on the same graph is the oracle (DESIGN.md decision 2).
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::harness {

struct KernelTask {
  std::string name;  // for people and evidence: "rmsnorm f32[96,256]"
  Graph graph;
  // The candidate claims bit-exactness with the reference (an exact rewrite): outputs must match byte for
  // byte instead of within the tolerance policy.
  bool exact = false;
};

// A one-node task: `op` with `attrs` applied to inputs of exactly these types (graph inputs in0, in1, ...).
Result<KernelTask> make_op_task(Op op, std::vector<TensorType> inputs, Attrs attrs = {}, bool exact = false);
// A whole small graph as one kernel; it must verify.
Result<KernelTask> make_graph_task(Graph graph, bool exact = false);

std::vector<TensorType> task_input_types(const KernelTask& task);
std::vector<TensorType> task_output_types(const KernelTask& task);
// The least any implementation must move: every input read once, every output written once.
double task_min_bytes(const KernelTask& task);

// The longest accumulation any output element goes through: the reduced extent of a reduction, the last axis
// of a row op or GEMM operand, the longer of sequence and head_dim for attention; 1 for elementwise tasks.
int64_t task_reduction_length(const KernelTask& task);

// Per output, in graph-output order: the dtype whose rounding the output's values carry. An output that is an
// exact widening cast of a computed value (f32 of a bf16 result) holds that value's precision: a sound
// implementation that lands one bf16 ulp away near a rounding tie is one bf16 ulp away in the f32 output too,
// so its baseline (compare.h) is the narrow dtype's. Every other output carries its own dtype.
std::vector<DType> task_output_precisions(const KernelTask& task);

// The oracle: the reference executor on `inputs` (in graph-input order), outputs in graph-output order.
Result<std::vector<Tensor>> run_task_reference(const KernelTask& task, const std::vector<Tensor>& inputs);

}  // namespace kiln::harness
