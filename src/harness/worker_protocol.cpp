#include "harness/worker_protocol.h"

#include <cstring>
#include <nlohmann/json.hpp>

namespace kiln::harness {
namespace {

using nlohmann::json;

json types_to_json(const std::vector<TensorType>& types) {
  json list = json::array();
  for (const TensorType& t : types) list.push_back({{"dtype", static_cast<int>(t.dtype)}, {"shape", t.shape}});
  return list;
}

std::vector<TensorType> types_from_json(const json& list) {
  std::vector<TensorType> types;
  for (const json& j : list) {
    const int dtype = j.at("dtype").get<int>();
    if (dtype < 0 || dtype >= kDTypeCount) throw std::out_of_range("dtype code " + std::to_string(dtype));
    types.push_back({static_cast<DType>(dtype), j.at("shape").get<Shape>()});
  }
  return types;
}

// Poison bit patterns per dtype, for call 0 and call 1: quiet NaNs of both signs for the float dtypes.
uint64_t poison_bits(DType dtype, int call) {
  switch (dtype) {
    case DType::f32: return call ? 0xffc0beefu : 0x7fc0deadu;
    case DType::f16: return call ? 0xfe5bu : 0x7e5au;
    case DType::bf16: return call ? 0xffdbu : 0x7fdau;
    case DType::f8e4m3: return call ? 0xffu : 0x7fu;
    case DType::f8e5m2: return call ? 0xfdu : 0x7eu;
    default: return call ? 0xa5a5a5a5a5a5a5a5ull : 0x5a5a5a5a5a5a5a5aull;
  }
}

}  // namespace

std::string request_to_json(const WorkerRequest& r) {
  const BenchParams& b = r.bench;
  json j = {{"mode", r.mode == WorkerMode::verify ? "verify" : "bench"},
            {"libraries", r.libraries},
            {"inputs", types_to_json(r.inputs)},
            {"outputs", types_to_json(r.outputs)},
            {"guard_bytes", r.guard_bytes},
            {"trials", r.trials},
            {"drop_privileges", r.drop_privileges},
            {"memory_bytes", r.memory_bytes},
            {"device", r.device == WorkerDevice::cuda ? "cuda" : "cpu"},
            {"bench",
             {{"warmup_seconds", b.warmup_seconds},
              {"min_seconds", b.min_seconds},
              {"max_seconds", b.max_seconds},
              {"min_samples", b.min_samples},
              {"max_samples", b.max_samples},
              {"sample_seconds", b.sample_seconds},
              {"slots", b.slots}}}};
  return j.dump(1);
}

Result<WorkerRequest> request_from_json(const std::string& text) {
  try {
    const json j = json::parse(text);
    WorkerRequest r;
    const std::string mode = j.at("mode").get<std::string>();
    if (mode != "verify" && mode != "bench") throw std::out_of_range("mode " + mode);
    r.mode = mode == "verify" ? WorkerMode::verify : WorkerMode::bench;
    r.libraries = j.at("libraries").get<std::vector<std::string>>();
    r.inputs = types_from_json(j.at("inputs"));
    r.outputs = types_from_json(j.at("outputs"));
    r.guard_bytes = j.at("guard_bytes").get<int64_t>();
    r.trials = j.at("trials").get<int>();
    r.drop_privileges = j.at("drop_privileges").get<bool>();
    r.memory_bytes = j.at("memory_bytes").get<int64_t>();
    const std::string device = j.value("device", std::string("cpu"));
    if (device != "cpu" && device != "cuda") throw std::out_of_range("device " + device);
    r.device = device == "cuda" ? WorkerDevice::cuda : WorkerDevice::cpu;
    const json& b = j.at("bench");
    r.bench.warmup_seconds = b.at("warmup_seconds").get<double>();
    r.bench.min_seconds = b.at("min_seconds").get<double>();
    r.bench.max_seconds = b.at("max_seconds").get<double>();
    r.bench.min_samples = b.at("min_samples").get<int>();
    r.bench.max_samples = b.at("max_samples").get<int>();
    r.bench.sample_seconds = b.at("sample_seconds").get<double>();
    r.bench.slots = b.at("slots").get<int64_t>();
    if (r.guard_bytes < 0 || r.guard_bytes % 64 != 0 || r.libraries.empty() || r.bench.slots < 1) {
      throw std::out_of_range("guard_bytes, libraries or slots");
    }
    return r;
  } catch (const std::exception& e) {
    return make_error(ErrorCode::parse_error, std::string("worker request: ") + e.what());
  }
}

std::string trial_input_file(int trial) { return "input_" + std::to_string(trial) + ".bin"; }

RecordLayout record_layout(const WorkerRequest& request) {
  RecordLayout layout;
  const size_t guard = static_cast<size_t>(request.guard_bytes);
  for (const TensorType& t : request.outputs) {
    layout.output_offsets.push_back(layout.bytes);
    layout.bytes += guard + type_bytes(t) + guard;
  }
  for (const TensorType& t : request.inputs) {
    layout.input_offsets.push_back(layout.bytes);
    layout.bytes += type_bytes(t);
  }
  return layout;
}

void fill_poison(DType dtype, std::byte* data, int64_t elements, int call) {
  const uint64_t bits = poison_bits(dtype, call);
  const size_t size = dtype_size(dtype);
  for (int64_t i = 0; i < elements; ++i) std::memcpy(data + i * size, &bits, size);  // little-endian
}

bool is_poison(DType dtype, const std::byte* element, int call) {
  const uint64_t bits = poison_bits(dtype, call);
  return std::memcmp(element, &bits, dtype_size(dtype)) == 0;
}

std::byte guard_byte(size_t offset) { return static_cast<std::byte>((offset * 131 + 0x3d) & 0xff); }

}  // namespace kiln::harness
