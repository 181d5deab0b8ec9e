// Fingerprint: canonical string, hash, parse and differences (fingerprint.h).
#include "kb/fingerprint.h"

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>

namespace kiln::kb {

std::string Fingerprint::canonical() const {
  // nlohmann::json objects keep keys sorted, so dump() is canonical for a fixed set of fields.
  nlohmann::json libs = nlohmann::json::object();
  for (const auto& [name, version] : libraries) libs[name] = version;
  const nlohmann::json j = {{"device_kind", device_kind}, {"device_name", device_name},
                            {"compute_units", compute_units}, {"driver", driver},
                            {"compiler", compiler}, {"libraries", libs},
                            {"kiln_version", kiln_version}};
  return j.dump();
}

std::string Fingerprint::hash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : canonical()) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

Fingerprint fingerprint_of(const backend::DeviceInfo& device) {
  Fingerprint f;
  f.device_kind = device.kind;
  f.device_name = device.name;
  f.compute_units = device.compute_units;
  f.driver = device.driver;
  f.compiler = device.compiler;
  for (const auto& [name, version] : device.libraries) f.libraries[name] = version;
  f.kiln_version = KILN_VERSION;
  return f;
}

Result<Fingerprint> parse_fingerprint(const std::string& canonical) {
  const nlohmann::json j = nlohmann::json::parse(canonical, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return make_error(ErrorCode::parse_error, "fingerprint is not a JSON object: " + canonical.substr(0, 80));
  }
  Fingerprint f;
  for (const char* key : {"device_kind", "device_name", "driver", "compiler", "kiln_version"}) {
    if (!j.contains(key) || !j[key].is_string()) {
      return make_error(ErrorCode::parse_error, std::string("fingerprint field '") + key + "' is missing or not a string");
    }
  }
  if (!j.contains("compute_units") || !j["compute_units"].is_number_integer()) {
    return make_error(ErrorCode::parse_error, "fingerprint field 'compute_units' is missing or not an integer");
  }
  if (!j.contains("libraries") || !j["libraries"].is_object()) {
    return make_error(ErrorCode::parse_error, "fingerprint field 'libraries' is missing or not an object");
  }
  f.device_kind = j["device_kind"];
  f.device_name = j["device_name"];
  f.compute_units = j["compute_units"];
  f.driver = j["driver"];
  f.compiler = j["compiler"];
  f.kiln_version = j["kiln_version"];
  for (const auto& [name, version] : j["libraries"].items()) {
    if (!version.is_string()) {
      return make_error(ErrorCode::parse_error, "fingerprint library '" + name + "' version is not a string");
    }
    f.libraries[name] = version;
  }
  return f;
}

std::vector<std::string> fingerprint_differences(const Fingerprint& recorded, const Fingerprint& current) {
  std::vector<std::string> out;
  auto compare = [&](const char* field, const std::string& a, const std::string& b) {
    if (a != b) out.push_back(fmt::format("{}: {} -> {}", field, a.empty() ? "(none)" : a, b.empty() ? "(none)" : b));
  };
  compare("device kind", recorded.device_kind, current.device_kind);
  compare("device name", recorded.device_name, current.device_name);
  compare("compute units", std::to_string(recorded.compute_units), std::to_string(current.compute_units));
  compare("driver", recorded.driver, current.driver);
  compare("compiler", recorded.compiler, current.compiler);
  std::map<std::string, std::string> names = recorded.libraries;
  names.insert(current.libraries.begin(), current.libraries.end());
  for (const auto& entry : names) {
    auto version_in = [&](const Fingerprint& f) {
      auto it = f.libraries.find(entry.first);
      return it == f.libraries.end() ? std::string("(absent)") : it->second;
    };
    compare(("library " + entry.first).c_str(), version_in(recorded), version_in(current));
  }
  compare("kiln version", recorded.kiln_version, current.kiln_version);
  return out;
}

}  // namespace kiln::kb
