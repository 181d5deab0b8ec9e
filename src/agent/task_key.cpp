// Knowledge-base keys of the optimize loop (task_key.h).
#include "agent/task_key.h"

#include <set>
#include <sstream>

namespace kiln::agent {

std::string kernel_structure_hash(const kernel::Kernel& kernel) {
  kernel::Kernel k = kernel;
  const size_t row_rank = k.row_shape.size();
  std::set<int> row_vars(k.row_vars.begin(), k.row_vars.end());
  for (kernel::IndexVar& v : k.vars) {
    if (row_vars.count(v.id)) v.extent = 1;
  }
  // Parameters and stages whose leading axes are the row axes: those become 1 too (weights broadcast over
  // rows keep their shapes).
  auto collapse = [&](Shape& s) {
    if (s.size() < row_rank) return;
    for (size_t a = 0; a < row_rank; ++a) {
      if (s[a] != k.row_shape[a]) return;
    }
    for (size_t a = 0; a < row_rank; ++a) s[a] = 1;
  };
  for (kernel::KernelParam& p : k.inputs) collapse(p.type.shape);
  for (kernel::KernelParam& p : k.outputs) collapse(p.type.shape);
  for (kernel::Stage& st : k.stages) collapse(st.type.shape);
  for (auto& extent : k.row_shape) extent = 1;
  k.rows = 1;
  return kernel::kernel_hash(k);
}

std::vector<TensorType> kernel_param_types(const kernel::Kernel& kernel) {
  std::vector<TensorType> types;
  for (const kernel::KernelParam& p : kernel.inputs) types.push_back(p.type);
  for (const kernel::KernelParam& p : kernel.outputs) types.push_back(p.type);
  return types;
}

std::string model_family(const std::string& model_key) {
  if (model_key.rfind("zoo:", 0) != 0) return model_key;
  const size_t name_end = model_key.find(':', 4);
  if (name_end == std::string::npos) return model_key;
  std::string family = model_key.substr(0, name_end);
  std::stringstream options(model_key.substr(name_end + 1));
  std::string option;
  while (std::getline(options, option, ',')) {
    if (option == "tiny" || option == "tiny=1" || option == "tiny=true") return family + ":tiny";
  }
  return family;
}

std::string lesson_pattern(const std::string& model_key, const std::string& opportunity) {
  return "optimize:" + opportunity + "@" + model_family(model_key);
}

std::string plan_task_hash(const std::string& model_key) { return "plan:" + model_key; }

}  // namespace kiln::agent
