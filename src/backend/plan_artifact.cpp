#include "backend/plan_artifact.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ir/json.h"
#include "kernel/emit.h"

namespace kiln::backend {

namespace {

using Json = nlohmann::json;

const char* kFormat = "kiln-plan";

std::string hex_fnv1a(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : text) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

const char* step_kind_name(Plan::Step::Kind kind) {
  switch (kind) {
    case Plan::Step::Kind::kernel: return "kernel";
    case Plan::Step::Kind::library: return "library";
    case Plan::Step::Kind::fallback: return "fallback";
  }
  return "?";
}

// The kernel alone in a module of its own: what the file shows and what loading compares.
Result<std::string> standalone_source(const Plan::PlanKernel& k, kernel::Target target) {
  KILN_ASSIGN_OR_RETURN(kernel::EmittedModule m, kernel::emit_module({{&k.kernel, k.schedule, k.entry}}, target));
  return m.source;
}

Json steps_json(const Plan& plan) {
  Json steps = Json::array();
  for (const Plan::Step& s : plan.steps()) {
    Json j = {{"kind", step_kind_name(s.kind)}, {"stage", binding_name(s.stage)}, {"label", s.label}};
    if (s.kind == Plan::Step::Kind::kernel) j["kernel"] = s.kernel_index;
    if (s.kind == Plan::Step::Kind::library) {
      j["op"] = std::string(op_name(plan.graph().node(s.nodes[0]).op));
      // The backend interface has no per-call algorithm choice yet: each library call runs the backend's
      // own pick (OpenBLAS; on CUDA the algorithm it times on the shape's first run, docs/tuning.md).
      j["algorithm"] = "backend-default";
    }
    steps.push_back(std::move(j));
  }
  return steps;
}

// Reads a required field of `j` at `path`, with the kind `want` names.
template <class T>
Result<T> field(const Json& j, const std::string& key, const std::string& path, const char* want) {
  if (!j.is_object() || !j.contains(key)) {
    return make_error(ErrorCode::parse_error, path + ": missing field \"" + key + "\"");
  }
  try {
    return j.at(key).get<T>();
  } catch (const Json::exception&) {
    return make_error(ErrorCode::parse_error, path + "." + key + ": must be " + want);
  }
}

}  // namespace

std::string device_fingerprint(const DeviceInfo& device) {
  return fmt::format("{}|{}|{} units", device.kind, device.name, device.compute_units);
}

std::string plan_artifact_json(const Plan& plan, const PlanArtifactInfo& info) {
  const Backend& backend = plan.backend();
  const PlanSummary& s = plan.summary();
  Json j;
  j["format"] = kFormat;
  j["format_version"] = kPlanFormatVersion;
  j["kiln_version"] = KILN_VERSION;
  j["device"] = {{"kind", backend.device().kind},
                 {"name", backend.device().name},
                 {"fingerprint", device_fingerprint(backend.device())}};
  j["model"] = {{"spec", info.model}, {"dims", info.model_dims}, {"per_step", info.model_per_step}};
  j["bucket"] = {{"name", info.bucket}, {"dims", info.bucket_dims}};
  j["options"] = {{"reference_fallback", plan.options().reference_fallback},
                  {"reuse_memory", plan.options().reuse_memory},
                  {"per_step_cache_entries", plan.options().per_step_cache_entries},
                  {"lanes", plan.options().lanes}};
  j["stages"] = {{"load", s.load_steps}, {"per_step", s.per_step_steps}, {"per_call", s.per_call_steps}};
  j["memory"] = {{"intermediate_bytes", s.intermediate_bytes},
                 {"arena_bytes", s.arena_bytes},
                 {"memory_bytes", s.memory_bytes},
                 {"memory_bytes_without_reuse", s.memory_bytes_without_reuse}};
  j["steps"] = steps_json(plan);
  Json kernels = Json::array();
  for (const Plan::PlanKernel& k : plan.kernels()) {
    auto source = standalone_source(k, backend.target());
    KILN_CHECK(source.ok());  // the plan compiled exactly this kernel and schedule
    kernels.push_back({{"entry", k.entry},
                       {"hash", k.hash},
                       {"schedule", Json::parse(kernel::schedule_to_json(k.schedule))},
                       {"source_fnv1a", hex_fnv1a(*source)},
                       {"source", *source}});
  }
  j["kernels"] = std::move(kernels);
  j["graph"] = Json::parse(print_graph_json(plan.graph(), -1));
  return j.dump(1);
}

Status save_plan_artifact(const Plan& plan, const PlanArtifactInfo& info, const std::string& path) {
  const std::string text = plan_artifact_json(plan, info);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(ErrorCode::io_error, "cannot write plan file '" + path + "'");
  out << text << "\n";
  out.close();
  if (!out) return make_error(ErrorCode::io_error, "writing plan file '" + path + "' failed");
  return ok_status();
}

Result<LoadedPlan> parse_plan_artifact(Backend& backend, std::string_view text, const std::string& source_name) {
  const std::string& f = source_name;
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    return make_error(ErrorCode::parse_error, f + ": not a complete JSON plan file (truncated or damaged?): " + e.what());
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat) {
    return make_error(ErrorCode::parse_error, f + ": not a kiln plan (expected \"format\": \"kiln-plan\")");
  }
  KILN_ASSIGN_OR_RETURN(const int version, field<int>(j, "format_version", f, "an integer"));
  if (version != kPlanFormatVersion) {
    return make_error(ErrorCode::unsupported, fmt::format("{}: plan format version {}; this kiln reads version {}", f,
                                                          version, kPlanFormatVersion));
  }
  LoadedPlan loaded;
  PlanArtifactInfo& info = loaded.info;
  KILN_ASSIGN_OR_RETURN(info.kiln_version, field<std::string>(j, "kiln_version", f, "a string"));
  if (info.kiln_version != KILN_VERSION) {
    return make_error(ErrorCode::unsupported,
                      fmt::format("{}: saved by kiln {}, this is kiln {}; save the plan again with this kiln "
                                  "(kiln run MODEL --backend {} --save-plan FILE)",
                                  f, info.kiln_version, KILN_VERSION, backend.device().kind));
  }
  const Json device = j.value("device", Json::object());
  KILN_ASSIGN_OR_RETURN(const std::string kind, field<std::string>(device, "kind", f + ": device", "a string"));
  KILN_ASSIGN_OR_RETURN(info.device_fingerprint,
                        field<std::string>(device, "fingerprint", f + ": device", "a string"));
  if (kind != backend.device().kind) {
    return make_error(ErrorCode::invalid_argument, fmt::format("{}: built for the {} backend; run it with --backend {}",
                                                               f, kind, kind));
  }
  if (info.device_fingerprint != device_fingerprint(backend.device())) {
    loaded.warnings.push_back("plan was tuned on " + info.device_fingerprint + ", running on " +
                              device_fingerprint(backend.device()));
  }
  const Json model = j.value("model", Json::object());
  KILN_ASSIGN_OR_RETURN(info.model, field<std::string>(model, "spec", f + ": model", "a string"));
  KILN_ASSIGN_OR_RETURN(info.model_dims, field<std::vector<std::string>>(model, "dims", f + ": model", "a list of strings"));
  KILN_ASSIGN_OR_RETURN(info.model_per_step,
                        field<std::vector<std::string>>(model, "per_step", f + ": model", "a list of strings"));
  const Json bucket = j.value("bucket", Json::object());
  KILN_ASSIGN_OR_RETURN(info.bucket, field<std::string>(bucket, "name", f + ": bucket", "a string"));
  KILN_ASSIGN_OR_RETURN(info.bucket_dims, (field<std::map<std::string, std::string>>(bucket, "dims", f + ": bucket",
                                                                                      "an object of strings")));

  PlanOptions options;
  const Json opts = j.value("options", Json::object());
  KILN_ASSIGN_OR_RETURN(options.reference_fallback, field<bool>(opts, "reference_fallback", f + ": options", "a bool"));
  KILN_ASSIGN_OR_RETURN(options.reuse_memory, field<bool>(opts, "reuse_memory", f + ": options", "a bool"));
  KILN_ASSIGN_OR_RETURN(options.per_step_cache_entries,
                        field<int>(opts, "per_step_cache_entries", f + ": options", "an integer"));
  if (opts.contains("lanes")) {  // artifacts before lanes ran on one
    KILN_ASSIGN_OR_RETURN(options.lanes, field<int>(opts, "lanes", f + ": options", "an integer"));
    if (options.lanes < 1) return make_error(ErrorCode::parse_error, f + ": options: lanes must be >= 1");
  }

  if (!j.contains("graph")) return make_error(ErrorCode::parse_error, f + ": missing field \"graph\"");
  KILN_ASSIGN_OR_RETURN(Graph graph, parse_graph_json(j["graph"].dump(), f + ": graph"));

  // Kernels: each source must be the one its hash records, and the schedules feed the rebuild.
  if (!j.contains("kernels") || !j["kernels"].is_array()) {
    return make_error(ErrorCode::parse_error, f + ": missing list \"kernels\"");
  }
  const Json& kernels = j["kernels"];
  for (size_t i = 0; i < kernels.size(); ++i) {
    const std::string path = fmt::format("{}: kernels[{}]", f, i);
    KILN_ASSIGN_OR_RETURN(const std::string hash, field<std::string>(kernels[i], "hash", path, "a string"));
    KILN_ASSIGN_OR_RETURN(const std::string source, field<std::string>(kernels[i], "source", path, "a string"));
    KILN_ASSIGN_OR_RETURN(const std::string fnv, field<std::string>(kernels[i], "source_fnv1a", path, "a string"));
    if (!kernels[i].contains("schedule")) return make_error(ErrorCode::parse_error, path + ": missing field \"schedule\"");
    auto schedule = kernel::schedule_from_json(kernels[i]["schedule"].dump());
    if (!schedule.ok()) return with_context(schedule.error(), path + ".schedule");
    if (hex_fnv1a(source) != fnv) {
      return make_error(ErrorCode::verify_error, path + ": its source does not match its recorded hash " + fnv +
                                                     " (the kernel was edited or the file damaged)");
    }
    options.schedules[hash] = *schedule;
  }

  auto plan = Plan::build(backend, graph, options);
  if (!plan.ok()) return with_context(plan.error(), f);
  const Plan& p = **plan;
  if (p.kernels().size() != kernels.size()) {
    return make_error(ErrorCode::verify_error, fmt::format("{}: records {} kernels, its graph gives {}", f,
                                                           kernels.size(), p.kernels().size()));
  }
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Plan::PlanKernel& k = p.kernels()[i];
    const std::string path = fmt::format("{}: kernels[{}] ({})", f, i, k.entry);
    if (kernels[i]["hash"] != k.hash) {
      return make_error(ErrorCode::verify_error, path + ": its graph gives kernel hash " + k.hash + ", the file records " +
                                                     kernels[i]["hash"].get<std::string>());
    }
    KILN_ASSIGN_OR_RETURN(const std::string source, standalone_source(k, backend.target()));
    if (kernels[i]["source"] != source) {
      return make_error(ErrorCode::verify_error, path + ": its source differs from what kiln emits for its graph and "
                                                        "schedule (a tampered kernel); save the plan again");
    }
  }
  const Json want_steps = steps_json(p);
  if (!j.contains("steps") || j["steps"] != want_steps) {
    return make_error(ErrorCode::verify_error, f + ": its steps (order, kinds, stages) differ from the plan its graph "
                                                   "gives; save the plan again");
  }
  loaded.plan = std::move(plan).value();
  return loaded;
}

Result<LoadedPlan> load_plan_artifact(Backend& backend, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot read plan file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse_plan_artifact(backend, text.str(), path);
}

}  // namespace kiln::backend
