#include "workload/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "models/zoo.h"

namespace kiln::workload {

namespace {

using Json = nlohmann::json;

Error invalid(const std::string& message) { return make_error(ErrorCode::invalid_argument, message); }

// Dim names of the file -> zoo option keys.
const std::map<std::string, std::string>& zoo_dim_keys() {
  static const std::map<std::string, std::string> keys = {
      {"batch", "batch"},          {"image_tokens", "img_tokens"}, {"img_tokens", "img_tokens"},
      {"text_tokens", "txt_tokens"}, {"txt_tokens", "txt_tokens"}, {"seq", "seq"},
      {"past", "past"},            {"cfg", "cfg"},                 {"mode", "mode"}};
  return keys;
}

std::string bucket_path(const std::string& source, size_t index, const std::string& name) {
  return name.empty() ? fmt::format("{}: buckets[{}]", source, index)
                      : fmt::format("{}: buckets[{}] (\"{}\")", source, index, name);
}

// One dim's value as text, checked by kind: cfg a bool, mode decode|prefill, the rest positive integers.
Result<std::string> dim_value(const std::string& key, const Json& v, const std::string& path) {
  if (key == "cfg") {
    if (!v.is_boolean()) return invalid(path + ": must be true or false (classifier-free guidance on or off)");
    return std::string(v.get<bool>() ? "on" : "off");
  }
  if (key == "mode") {
    if (!v.is_string() || (v != "decode" && v != "prefill")) return invalid(path + ": must be \"decode\" or \"prefill\"");
    return v.get<std::string>();
  }
  if (!v.is_number_integer() || v.get<int64_t>() < 1) return invalid(path + ": must be an integer >= 1");
  return std::to_string(v.get<int64_t>());
}

Result<WorkloadBucket> parse_bucket(const Json& j, size_t index, const std::string& source) {
  std::string name;
  if (j.is_object() && j.contains("name") && j["name"].is_string()) name = j["name"].get<std::string>();
  const std::string path = bucket_path(source, index, name);
  if (!j.is_object()) return invalid(path + ": must be an object with name, weight and dims");
  for (const auto& [key, value] : j.items()) {
    if (key != "name" && key != "weight" && key != "dims") {
      return invalid(path + ": unknown field \"" + key + "\" (fields: name, weight, dims)");
    }
  }
  if (name.empty()) return invalid(path + ": field name must be a non-empty string");
  WorkloadBucket b;
  b.name = name;
  if (j.contains("weight")) {
    const Json& w = j["weight"];
    if (!w.is_number() || !std::isfinite(w.get<double>()) || w.get<double>() <= 0) {
      return invalid(path + ": weight must be a positive number (its share of the traffic)");
    }
    b.weight = w.get<double>();
  }
  if (j.contains("dims")) {
    if (!j["dims"].is_object()) return invalid(path + ": dims must be an object of dim name -> value");
    for (const auto& [key, value] : j["dims"].items()) {
      KILN_ASSIGN_OR_RETURN(b.dims[key], dim_value(key, value, path + ": dims." + key));
    }
  }
  return b;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

Result<BucketModel> zoo_bucket_model(const std::string& base_spec, const WorkloadBucket& bucket) {
  // zoo:NAME[:key=value,...]
  const std::string rest = base_spec.substr(4);
  const size_t colon = rest.find(':');
  const std::string name = rest.substr(0, colon);
  const models::ZooEntry* entry = nullptr;
  const std::vector<models::ZooEntry> zoo = models::zoo_models();
  for (const models::ZooEntry& e : zoo) {
    if (e.name == name) entry = &e;
  }
  if (!entry) return invalid("workload model '" + base_spec + "': unknown zoo model '" + name + "'");
  std::vector<std::string> keys;
  for (const models::ZooOption& o : entry->options) keys.push_back(o.key);
  // The base spec's options in order, then the bucket's, each key once.
  std::vector<std::pair<std::string, std::string>> options;
  if (colon != std::string::npos) {
    std::stringstream items(rest.substr(colon + 1));
    for (std::string item; std::getline(items, item, ',');) {
      const size_t eq = item.find('=');
      options.emplace_back(item.substr(0, eq), eq == std::string::npos ? "1" : item.substr(eq + 1));
    }
  }
  for (const auto& [dim, value] : bucket.dims) {
    const std::string path = "bucket \"" + bucket.name + "\": dims." + dim;
    auto known = zoo_dim_keys().find(dim);
    if (known == zoo_dim_keys().end()) {
      return invalid(path + ": not a dim of zoo models (dims: batch, image_tokens, text_tokens, seq, past, cfg, mode)");
    }
    const std::string& key = known->second;
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return invalid(path + ": zoo model " + name + " has no option '" + key + "' (its options: " + join(keys) + ")");
    }
    const std::string mapped = key == "cfg" ? (value == "on" ? "2" : "1") : value;
    bool replaced = false;
    for (auto& [k, v] : options) {
      if (k == key) v = mapped, replaced = true;
    }
    if (!replaced) options.emplace_back(key, mapped);
  }
  BucketModel m;
  m.spec = "zoo:" + name;
  for (size_t i = 0; i < options.size(); ++i) {
    m.spec += (i == 0 ? ":" : ",") + options[i].first + "=" + options[i].second;
  }
  return m;
}

}  // namespace

Result<Workload> parse_workload(std::string_view text, const std::string& source_name) {
  const std::string& f = source_name;
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    return make_error(ErrorCode::parse_error, f + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) return invalid(f + ": a workload is an object {\"model\": ..., \"buckets\": [...]}");
  for (const auto& [key, value] : j.items()) {
    if (key != "model" && key != "buckets") return invalid(f + ": unknown field \"" + key + "\" (fields: model, buckets)");
  }
  Workload w;
  if (j.contains("model")) {
    if (!j["model"].is_string()) return invalid(f + ": model must be a MODEL spec string");
    w.model = j["model"].get<std::string>();
  }
  if (!j.contains("buckets") || !j["buckets"].is_array() || j["buckets"].empty()) {
    return invalid(f + ": buckets must be a non-empty list of {name, weight, dims}");
  }
  std::set<std::string> names;
  double total = 0;
  for (size_t i = 0; i < j["buckets"].size(); ++i) {
    KILN_ASSIGN_OR_RETURN(WorkloadBucket b, parse_bucket(j["buckets"][i], i, f));
    if (!names.insert(b.name).second) {
      return invalid(bucket_path(f, i, b.name) + ": name is used by an earlier bucket; bucket names must be unique");
    }
    total += b.weight;
    w.buckets.push_back(std::move(b));
  }
  for (WorkloadBucket& b : w.buckets) b.weight /= total;
  if (!w.model.empty()) {
    for (const WorkloadBucket& b : w.buckets) {
      auto mapped = workload_model_spec(w.model, b);
      if (!mapped.ok()) return with_context(mapped.error(), f);
    }
  }
  return w;
}

Result<Workload> load_workload(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot read workload file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse_workload(text.str(), path);
}

Workload default_workload(const std::string& model_spec) {
  return Workload{model_spec, {WorkloadBucket{"default", 1.0, {}}}};
}

Result<BucketModel> workload_model_spec(const std::string& base_spec, const WorkloadBucket& bucket) {
  if (starts_with(base_spec, "zoo:")) return zoo_bucket_model(base_spec, bucket);
  if (ends_with(base_spec, ".onnx")) {
    BucketModel m{base_spec, {}};
    for (const auto& [dim, value] : bucket.dims) {
      if (dim == "cfg" || dim == "mode") {
        return invalid("bucket \"" + bucket.name + "\": dims." + dim + ": applies to zoo models only; an ONNX model's "
                       "dims are its symbolic dimension names");
      }
      m.dims.push_back(dim + "=" + value);
    }
    return m;
  }
  if (!bucket.dims.empty()) {
    return invalid("bucket \"" + bucket.name + "\": dims." + bucket.dims.begin()->first + ": graph file " + base_spec +
                   " has fixed shapes; only zoo and ONNX models take dims");
  }
  return BucketModel{base_spec, {}};
}

}  // namespace kiln::workload
