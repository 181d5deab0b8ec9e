#include "harness/compile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "harness/sandbox.h"

namespace kiln::harness {
namespace {

bool write_file(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  return static_cast<bool>(out);
}

// FNV-1a, 64 bits: stable across builds and platforms, unlike std::hash.
uint64_t fnv1a(std::string_view text, uint64_t hash = 0xcbf29ce484222325ull) {
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

std::string cache_key(const std::string& source, const CompileOptions& options, const std::string& version) {
  uint64_t h = fnv1a(source);
  h = fnv1a(kernel_abi_header_text(), h);
  h = fnv1a(options.compiler + '\n' + version, h);
  for (const std::string& f : options.flags) h = fnv1a(f + '\n', h);
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(h));
  return key;
}

// Publishes `library` as <cache>/<key>/candidate.so: copied into a private directory, then renamed into
// place in one step, so a concurrent reader sees all of it or nothing. Losing the race is fine.
std::string publish_to_cache(const std::string& library, const std::string& cache_dir, const std::string& key) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  chmod(cache_dir.c_str(), 0755);
  const std::string final_dir = cache_dir + "/" + key;
  const std::string staging = final_dir + ".tmp." + std::to_string(getpid());
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  chmod(staging.c_str(), 0755);
  fs::copy_file(library, staging + "/candidate.so", fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(staging, final_dir, ec);
  fs::remove_all(staging, ec);
  return fs::exists(final_dir + "/candidate.so") ? final_dir + "/candidate.so" : "";
}

std::string tail(const std::string& text, size_t max_bytes = 16 * 1024) {
  return text.size() <= max_bytes ? text : "...\n" + text.substr(text.size() - max_bytes);
}

}  // namespace

CompileOptions cuda_compile_options(const std::string& arch, const std::string& nvcc) {
  CompileOptions options;
  options.compiler = nvcc;
  options.flags = {"-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-arch=" + arch, "-cudart", "static",
                   "-x", "cu"};
  options.wall_seconds = 120;
  options.memory_bytes = 8ll << 30;  // nvcc's front end and ptxas together
  return options;
}

std::string compiler_version(const std::string& compiler) {
  static std::mutex mutex;
  static std::map<std::string, std::string> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(compiler);
  if (it != cache.end()) return it->second;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_compiler_version_" + std::to_string(getpid()))).string();
  SandboxLimits limits;
  limits.wall_seconds = 10;
  std::string version = "unknown";
  auto r = run_sandboxed({{compiler, "--version"}, dir, limits, {}});
  if (r.ok() && r->kind == ExitKind::exited && r->exit_code == 0) {
    // The first line names most compilers' version; nvcc's first line is its banner and the last its build.
    std::string text = r->stdout_tail;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    version = text.find("NVIDIA") != std::string::npos ? text.substr(text.rfind('\n') + 1)
                                                       : text.substr(0, text.find('\n'));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  cache[compiler] = version;
  return version;
}

CompiledCandidate compile_candidate(const std::string& source, const std::string& scratch_dir,
                                    const CompileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  CompiledCandidate result;
  result.compiler_version = compiler_version(options.compiler);
  auto finish = [&](OutcomeClass cls, std::string summary) {
    result.outcome.cls = cls;
    result.outcome.evidence.summary = std::move(summary);
    result.outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  };

  const std::string key = options.cache_dir.empty() ? "" : cache_key(source, options, result.compiler_version);
  if (!key.empty()) {
    const std::string cached = options.cache_dir + "/" + key + "/candidate.so";
    if (std::filesystem::exists(cached)) {
      result.library_path = std::filesystem::absolute(cached).string();
      return finish(OutcomeClass::compiled, "cached " + result.library_path + " (" + result.compiler_version + ")");
    }
  }

  std::error_code ec;
  std::filesystem::create_directories(scratch_dir, ec);
  // The worker may run unprivileged (worker.h); it must be able to read what is built here.
  chmod(scratch_dir.c_str(), 0755);
  if (ec || !write_file(scratch_dir + "/candidate.cpp", source) ||
      !write_file(scratch_dir + "/kernel_abi.h", kernel_abi_header_text())) {
    return finish(OutcomeClass::harness_fault, "cannot write the candidate into scratch dir " + scratch_dir);
  }
  const std::string library = scratch_dir + "/candidate.so";
  std::filesystem::remove(library, ec);

  SandboxSpec spec;
  spec.argv.push_back(options.compiler);
  for (const std::string& f : options.flags) spec.argv.push_back(f);
  for (const char* a : {"-I.", "-o", "candidate.so", "candidate.cpp"}) spec.argv.push_back(a);
  spec.scratch_dir = scratch_dir;
  spec.limits.wall_seconds = options.wall_seconds;
  spec.limits.address_space_bytes = options.memory_bytes;
  auto run = run_sandboxed(spec);
  if (!run.ok()) return finish(OutcomeClass::harness_fault, "cannot start the compiler: " + run.error().message);
  const SandboxOutcome& o = *run;
  result.outcome.evidence.compiler_log = tail(o.stderr_tail + o.stdout_tail);
  if (o.kind == ExitKind::timed_out) {
    return finish(OutcomeClass::compile_timeout,
                  "the compiler ran past its " + std::to_string(options.wall_seconds) + " s limit");
  }
  if (o.kind == ExitKind::exited && o.exit_code == 127 && o.stderr_tail.find("exec failed") != std::string::npos) {
    return finish(OutcomeClass::harness_fault, "compiler '" + options.compiler + "' cannot be started");
  }
  if (o.kind == ExitKind::signaled) {
    result.outcome.evidence.signal = o.signal;
    return finish(OutcomeClass::compile_error, "the compiler died: " + describe_outcome(o) + " (a memory limit of " +
                                                   std::to_string(options.memory_bytes >> 20) + " MiB applies)");
  }
  if (o.exit_code != 0 || !std::filesystem::exists(library)) {
    result.outcome.evidence.exit_code = o.exit_code;
    const std::string log = o.stderr_tail;
    const size_t first_error = log.find("error");
    const size_t line_end = first_error == std::string::npos ? std::string::npos : log.find('\n', first_error);
    return finish(OutcomeClass::compile_error, first_error == std::string::npos
                                                   ? "the compiler " + describe_outcome(o)
                                                   : log.substr(first_error, line_end - first_error));
  }
  chmod(library.c_str(), 0755);
  result.library_path = std::filesystem::absolute(library).string();
  if (!key.empty()) {
    const std::string cached = publish_to_cache(library, options.cache_dir, key);
    if (!cached.empty()) result.library_path = std::filesystem::absolute(cached).string();
  }
  return finish(OutcomeClass::compiled, "built " + result.library_path + " with " + result.compiler_version);
}

}  // namespace kiln::harness
