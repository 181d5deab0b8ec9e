// Shared by the harness tests: the corpus of candidates (tests/harness/corpus/), compiled once per test
// process, and the kernel tasks they are run on.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "harness/compile.h"
#include "harness/verify.h"

namespace kiln::harness::test {

inline const std::string kCorpus = (std::filesystem::path(__FILE__).parent_path() / "corpus").string() + "/";

inline std::string read_source(const std::string& file) {
  std::ifstream in(kCorpus + file);
  std::ostringstream s;
  s << in.rdbuf();
  KILN_CHECK(!s.str().empty());
  return s.str();
}

inline KernelTask rmsnorm_task(DType dtype, int64_t rows, int64_t cols) {
  auto task = make_op_task(Op::rmsnorm, {{dtype, {rows, cols}}, {dtype, {cols}}});
  KILN_CHECK(task.ok());
  return std::move(task).value();
}

inline KernelTask add_task(DType dtype, int64_t rows, int64_t cols, bool exact) {
  auto task = make_op_task(Op::add, {{dtype, {rows, cols}}, {dtype, {rows, cols}}}, {}, exact);
  KILN_CHECK(task.ok());
  return std::move(task).value();
}

inline const KernelTask& corpus_task(const std::string& name) {
  static const std::map<std::string, KernelTask> kTasks = {
      {"rmsnorm_f32", rmsnorm_task(DType::f32, 96, 256)},
      {"rmsnorm_f32_small", rmsnorm_task(DType::f32, 32, 256)},
      {"rmsnorm_f32_long_rows", rmsnorm_task(DType::f32, 8, 4096)},
      {"rmsnorm_bf16", rmsnorm_task(DType::bf16, 96, 256)},
      {"add_f32", add_task(DType::f32, 96, 257, false)},
      {"add_bf16_exact", add_task(DType::bf16, 64, 130, true)},
  };
  return kTasks.at(name);
}

// A corpus file, compiled on first use. The build goes through a compile cache in the temp dir, so the many
// test processes ctest starts (one per test) build each candidate once between them.
inline const CompiledCandidate& compiled(const std::string& file) {
  static std::mutex mutex;
  static std::map<std::string, CompiledCandidate> built;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = built.find(file);
  if (it != built.end()) return it->second;
  CompileOptions options;
  options.cache_dir = (std::filesystem::temp_directory_path() / "kiln-test-compile-cache").string();
  const std::string scratch = make_scratch_dir("", "corpus");
  CompiledCandidate result = compile_candidate(read_source(file), scratch, options);
  if (result.library_path.rfind(scratch, 0) != 0) std::filesystem::remove_all(scratch);  // built into the cache
  return built.emplace(file, std::move(result)).first->second;
}

}  // namespace kiln::harness::test
