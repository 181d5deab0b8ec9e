// Helpers for the knowledge-base tests: temporary files and sample fingerprints, recipes and lessons.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "kb/kb.h"

namespace kiln::kb::testing {

// A fresh path under the temp dir (the file and its -wal/-shm are removed when the guard goes).
struct TempKb {
  std::string path;
  TempKb() {
    static std::atomic<int> counter{0};
    const auto dir = std::filesystem::temp_directory_path() / "kiln_kb_tests";
    std::filesystem::create_directories(dir);
    path = (dir / ("kb_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".sqlite")).string();
    remove_files();
  }
  ~TempKb() { remove_files(); }
  void remove_files() const {
    for (const char* suffix : {"", "-wal", "-shm", ".jsonl"}) std::filesystem::remove(path + suffix);
  }
};

inline Fingerprint sample_fingerprint(const std::string& compiler = "g++ 12.2.0") {
  Fingerprint f;
  f.device_kind = "cuda";
  f.device_name = "NVIDIA H200";
  f.compute_units = 132;
  f.driver = "13.0";
  f.compiler = compiler;
  f.libraries = {{"cublaslt", "13.0.0"}, {"cudnn", "9.14.0"}};
  f.kiln_version = KILN_VERSION;
  return f;
}

inline Recipe sample_recipe(const std::string& task, std::vector<TensorType> types, const Fingerprint& f,
                            double seconds) {
  Recipe r;
  r.key = {task, std::move(types)};
  r.fingerprint = f;
  r.kind = ImplementationKind::schedule;
  r.implementation = {{"block", 256}, {"vector", 4}};
  r.source_hash = "src-" + task;
  r.seconds = seconds;
  r.timings = nlohmann::json::array({{{"block", 128}, {"seconds", seconds * 1.5}}, {{"block", 256}, {"seconds", seconds}}});
  r.verification = {{"outcome", "passed"}, {"max_rel_error", 1e-6}};
  r.e2e_gain = 0.04;
  return r;
}

inline std::vector<TensorType> types_2d(int64_t rows, int64_t cols, DType dtype = DType::bf16) {
  return {TensorType{dtype, {rows, cols}}, TensorType{dtype, {rows, cols}}};
}

}  // namespace kiln::kb::testing
