// The fingerprint of what a measurement depends on: the device (kind, name, compute units), its driver, the
// compiler of generated kernels, the libraries (OpenBLAS / cuBLASLt / cuDNN, as the backend reports them) and
// kiln's own version. Every recipe in the knowledge base carries one; a recipe measured under another
// fingerprint is never reused as if it were this one's (kb.h: FingerprintPolicy).
//
// The canonical string is stable (fields in a fixed order, libraries sorted by name, JSON-escaped), so its hash
// names the same toolchain on every machine and in every kiln build that keeps this format.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "util/result.h"

namespace kiln::kb {

struct Fingerprint {
  std::string device_kind;  // "cpu" | "cuda"
  std::string device_name;  // "NVIDIA H200"
  int compute_units = 0;    // cores / SMs
  std::string driver;       // "" on the CPU
  std::string compiler;     // "g++ (Debian 12.2.0-14) 12.2.0", "nvrtc 12.8"
  std::map<std::string, std::string> libraries;  // name -> version
  std::string kiln_version;

  // {"compiler":...,"compute_units":...,...}: a JSON object with keys sorted, no whitespace.
  std::string canonical() const;
  // 16 hex digits: FNV-1a 64 of canonical().
  std::string hash() const;
  bool operator==(const Fingerprint& other) const = default;
};

// The fingerprint of a backend's device as it describes itself, with this build's KILN_VERSION.
Fingerprint fingerprint_of(const backend::DeviceInfo& device);

// The inverse of canonical(); an Error naming the field that is missing or of the wrong type.
Result<Fingerprint> parse_fingerprint(const std::string& canonical);

// What differs, one line per field: "compiler: g++ 12.2.0 -> g++ 13.1.0", "library cudnn: 9.1 -> (absent)".
// Empty when the fingerprints are equal.
std::vector<std::string> fingerprint_differences(const Fingerprint& recorded, const Fingerprint& current);

}  // namespace kiln::kb
