// Keys under which the optimize loop files what it learns in the knowledge base (src/kb):
//   - kernel recipes: the kernel's structure hash without its sizes (so the same kernel at another token
//     count is the same task, and kb near_hits finds it, nearest shapes first) plus its exact tensor types
//     (inputs then outputs), so an exact hit means the same kernel structure at the same shapes
//     (kernel::kernel_hash, which includes shapes, is kept in the recipe's verification). A looser key costs
//     little: a recipe is re-verified before its schedule is used, and a default schedule is always valid;
//   - lessons about rewrites: "optimize:<opportunity>@<model family>", the family being the model spec
//     without its shape options (zoo:flux1-dev:tiny for zoo:flux1-dev:tiny=1,img_tokens=64), so a rewrite
//     that regressed at one token count is skipped at another on the same device;
//   - whole plans: "plan:<model spec>", the spec with its shape options (a workload bucket's model), and the
//     same plan once more under "plan-structure:<graph structure hash>" with the model's input types, so a run
//     on the same model at other sizes (another token count, another bucket) finds it as a near plan (kb
//     near_hits: same structure, other shapes, nearest first).
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernel/kernel_ir.h"

namespace kiln::agent {

// The kernel's text (kernel::kernel_to_text) without value names and with every number left out (extents,
// shapes, strides, offsets, constants), hashed: FNV-1a 64, 16 hex digits. Row axes that are not the outermost
// ones stride by the inner extents (a [batch, heads, tokens, dim] row's head stride is tokens x dim), so
// collapsing extents alone would keep the token count in the key.
std::string kernel_structure_hash(const kernel::Kernel& kernel);
// The kernel's parameter types, inputs then outputs.
std::vector<TensorType> kernel_param_types(const kernel::Kernel& kernel);

// "zoo:NAME" plus ":tiny" when the options select the tiny configuration; any other spec as given.
std::string model_family(const std::string& model_key);
std::string lesson_pattern(const std::string& model_key, const std::string& opportunity);
std::string plan_task_hash(const std::string& model_key);

// The graph with every size left out, hashed (FNV-1a 64, 16 hex digits): per input its binding, dtype and rank;
// per node its op, its inputs (by value index), its outputs' dtypes and ranks and its attributes' names, with
// the values of float and string attributes. Integer attributes are left out with the shapes: they are mostly
// sizes (reshape targets, slice bounds, split lengths), and a looser key only costs a rejected near plan (a near
// plan is verified and A/B'd before it is used). Outputs by name and value index.
std::string graph_structure_hash(const Graph& graph);
// "plan-structure:" + graph_structure_hash(model): the task hash of a plan's structure row.
std::string plan_structure_hash(const Graph& model);
// The model's input types in graph order: where a plan's structure row sits among other sizes.
std::vector<TensorType> graph_input_types(const Graph& graph);

}  // namespace kiln::agent
