// Keys under which the optimize loop files what it learns in the knowledge base (src/kb):
//   - kernel recipes: the kernel's structure hash without its row count (so the same kernel at another token
//     count is the same task, and kb near_hits finds it) plus its exact tensor types (inputs then outputs),
//     so an exact hit means the same kernel at the same shapes (kernel::kernel_hash, which includes shapes,
//     is kept in the recipe's implementation);
//   - lessons about rewrites: "optimize:<opportunity>@<model family>", the family being the model spec
//     without its shape options (zoo:flux1-dev:tiny for zoo:flux1-dev:tiny=1,img_tokens=64), so a rewrite
//     that regressed at one token count is skipped at another on the same device;
//   - whole plans: "plan:<model spec>", the spec with its shape options (a workload bucket's model).
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernel/kernel_ir.h"

namespace kiln::agent {

// kernel::kernel_hash of `kernel` with its row axes collapsed to extent 1.
std::string kernel_structure_hash(const kernel::Kernel& kernel);
// The kernel's parameter types, inputs then outputs.
std::vector<TensorType> kernel_param_types(const kernel::Kernel& kernel);

// "zoo:NAME" plus ":tiny" when the options select the tiny configuration; any other spec as given.
std::string model_family(const std::string& model_key);
std::string lesson_pattern(const std::string& model_key, const std::string& opportunity);
std::string plan_task_hash(const std::string& model_key);

}  // namespace kiln::agent
