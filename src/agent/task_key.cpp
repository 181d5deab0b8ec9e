// Knowledge-base keys of the optimize loop (task_key.h).
#include "agent/task_key.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <sstream>
#include <variant>

namespace kiln::agent {

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `text` with every number that is not part of a name ("f32", "bf16", "v3", "e12" stay) replaced by '#'.
std::string without_numbers(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (std::isdigit(static_cast<unsigned char>(text[i])) && (i == 0 || !word_char(text[i - 1]))) {
      while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
      out += '#';
      continue;
    }
    out += text[i++];
  }
  return out;
}

}  // namespace

std::string kernel_structure_hash(const kernel::Kernel& kernel) {
  // The kernel's text without names (the graph's value names differ between copies of one kernel) and without
  // numbers: extents, shapes, strides, offsets and constants all go, the expression DAG, stages, dtypes and
  // ranks stay.
  kernel::Kernel k = kernel;
  k.name.clear();
  for (kernel::KernelParam& p : k.inputs) p.name.clear();
  for (kernel::KernelParam& p : k.outputs) p.name.clear();
  for (kernel::Stage& st : k.stages) st.name.clear();
  return fmt::format("{:016x}", fnv1a(without_numbers(kernel::kernel_to_text(k))));
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

std::string graph_structure_hash(const Graph& graph) {
  std::string text;
  auto type_text = [](const TensorType& t) { return fmt::format("{}/{}", dtype_name(t.dtype), t.shape.size()); };
  for (const GraphInput& in : graph.inputs()) {
    text += fmt::format("in %{} {} {}\n", in.value, binding_name(in.binding), type_text(graph.value(in.value).type));
  }
  for (const Node& n : graph.nodes()) {
    text += std::string(op_name(n.op)) + "(";
    for (ValueId v : n.inputs) text += fmt::format("%{} ", v);
    text += ") ->";
    for (ValueId v : n.outputs) text += fmt::format(" %{}:{}", v, type_text(graph.value(v).type));
    for (const auto& [name, value] : n.attrs.entries()) {
      text += " " + name;
      if (const double* f = std::get_if<double>(&value)) text += fmt::format("={}", *f);
      if (const std::string* s = std::get_if<std::string>(&value)) text += "=" + *s;
      if (const auto* fs = std::get_if<std::vector<double>>(&value)) text += fmt::format("={}", fmt::join(*fs, ","));
    }
    text += "\n";
  }
  for (const GraphOutput& o : graph.outputs()) text += fmt::format("out {} %{}\n", o.name, o.value);
  return fmt::format("{:016x}", fnv1a(text));
}

std::string plan_structure_hash(const Graph& model) { return "plan-structure:" + graph_structure_hash(model); }

std::vector<TensorType> graph_input_types(const Graph& graph) {
  std::vector<TensorType> types;
  for (const GraphInput& in : graph.inputs()) types.push_back(graph.value(in.value).type);
  return types;
}

}  // namespace kiln::agent
