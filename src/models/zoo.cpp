// The zoo registry (models from flux.cpp, qwen_image.cpp, llama.cpp) and spec parsing:
// "NAME[:key=value,...]" -> resolved ModelOptions -> the model's build function.
#include "models/zoo.h"

#include <charconv>
#include <cstdint>

namespace kiln::models {
namespace {

std::vector<ZooModel> all_models() {
  std::vector<ZooModel> out;
  for (auto* family : {flux_zoo_models, qwen_image_zoo_models, llama_zoo_models}) {
    for (ZooModel& m : family()) out.push_back(std::move(m));
  }
  return out;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

Error invalid(std::string message) { return make_error(ErrorCode::invalid_argument, std::move(message)); }

}  // namespace

std::vector<ZooOption> common_zoo_options() {
  return {
      {"dtype", "bf16", "", "bf16 | f16 | f32 | fp8 (f8e4m3 weights and activations in the block GEMMs, bf16 elsewhere)"},
      {"fp8_scaling", "channel", "", "with dtype=fp8: tensor | channel (per token x per channel) | block (1x128 x 128x128)"},
      {"batch", "1", "", "batch size"},
      {"tiny", "0", "", "1: a tiny configuration for tests (small hidden size, few blocks and tokens)"},
  };
}

std::vector<ZooEntry> zoo_models() {
  std::vector<ZooEntry> out;
  for (ZooModel& m : all_models()) out.push_back(std::move(m.entry));
  return out;
}

Result<Graph> build_zoo_model(std::string_view spec) {
  const size_t colon = spec.find(':');
  const std::string name = trim(spec.substr(0, colon));
  std::vector<ZooModel> models = all_models();
  const ZooModel* model = nullptr;
  std::vector<std::string> names;
  for (const ZooModel& m : models) {
    names.push_back(m.entry.name);
    if (m.entry.name == name) model = &m;
  }
  if (!model) {
    return invalid("unknown zoo model '" + name + "'; the zoo has: " + join(names));
  }
  std::vector<std::string> keys;
  for (const ZooOption& o : model->entry.options) keys.push_back(o.key);

  std::map<std::string, std::string> given;
  if (colon != std::string_view::npos) {
    std::string_view rest = spec.substr(colon + 1);
    while (true) {
      const size_t comma = rest.find(',');
      const std::string item = trim(rest.substr(0, comma));
      if (item.empty()) {
        return invalid("zoo spec '" + std::string(spec) + "' has an empty option; write NAME:key=value,key=value");
      }
      const size_t eq = item.find('=');
      const std::string key = trim(std::string_view(item).substr(0, eq));
      const std::string value = eq == std::string::npos ? "1" : trim(std::string_view(item).substr(eq + 1));
      bool known = false;
      for (const std::string& k : keys) known |= k == key;
      if (!known) {
        return invalid("unknown option '" + key + "' for zoo model " + name + "; its options are: " + join(keys));
      }
      if (value.empty()) return invalid("option '" + key + "' of zoo model " + name + " has no value");
      if (!given.emplace(key, value).second) {
        return invalid("option '" + key + "' of zoo model " + name + " is given twice");
      }
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  }

  // Resolve tiny first: it picks which defaults apply.
  std::map<std::string, std::string> tiny_only = {{"tiny", given.count("tiny") ? given.at("tiny") : "0"}};
  KILN_ASSIGN_OR_RETURN(const bool tiny, ModelOptions(name, tiny_only).get_bool("tiny"));
  std::map<std::string, std::string> resolved;
  for (const ZooOption& o : model->entry.options) {
    auto it = given.find(o.key);
    if (it != given.end()) {
      resolved[o.key] = it->second;
    } else {
      resolved[o.key] = tiny && !o.tiny_value.empty() ? o.tiny_value : o.default_value;
    }
  }
  return model->build(ModelOptions(name, std::move(resolved)));
}

// ---- ModelOptions ----

const std::string& ModelOptions::raw(const std::string& key) const {
  auto it = values_.find(key);
  KILN_CHECK(it != values_.end());  // a model reading a key its entry does not declare
  return it->second;
}

Error ModelOptions::bad_value(const std::string& key, const std::string& value, const std::string& wanted) const {
  return invalid("option '" + key + "' of zoo model " + model_ + " must be " + wanted + ", got '" + value + "'");
}

Result<int64_t> ModelOptions::get_int(const std::string& key, int64_t min_value, int64_t max_value) const {
  const std::string& s = raw(key);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const std::string range = max_value == INT64_MAX
                                ? "an integer >= " + std::to_string(min_value)
                                : "an integer in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]";
  if (ec != std::errc() || end != s.data() + s.size() || v < min_value || v > max_value) {
    return bad_value(key, s, range);
  }
  return v;
}

Result<bool> ModelOptions::get_bool(const std::string& key) const {
  const std::string& s = raw(key);
  if (s == "1" || s == "true") return true;
  if (s == "0" || s == "false") return false;
  return bad_value(key, s, "0 or 1");
}

Result<std::string> ModelOptions::get_choice(const std::string& key, const std::vector<std::string>& choices) const {
  const std::string& s = raw(key);
  for (const std::string& c : choices) {
    if (c == s) return s;
  }
  return bad_value(key, s, "one of " + join(choices));
}

Result<ModelOptions::Precision> ModelOptions::get_precision() const {
  KILN_ASSIGN_OR_RETURN(const std::string dtype, get_choice("dtype", {"bf16", "f16", "f32", "fp8"}));
  KILN_ASSIGN_OR_RETURN(const std::string scaling, get_choice("fp8_scaling", {"tensor", "channel", "block"}));
  Precision p;
  if (dtype == "fp8") {
    p.act = DType::bf16;
    p.gemm.fp8 = true;
  } else {
    p.act = *parse_dtype(dtype);
  }
  p.gemm.scaling = scaling == "tensor" ? Fp8Scaling::tensor : scaling == "block" ? Fp8Scaling::block : Fp8Scaling::channel;
  return p;
}

}  // namespace kiln::models
