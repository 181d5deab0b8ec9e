#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "backend/cpu/cpu_library.h"
#include "backend/cpu/thread_pool.h"
#include "backend/pitched.h"
#include "harness/compile.h"
#include "harness/kernel_abi.h"
#include "harness/machine.h"
#include "harness/verify.h"
#include "kernel/kernel_ir.h"

namespace kiln::backend {
namespace {

using RowsFn = int (*)(const kiln_tensor*, int, kiln_tensor*, int, int64_t, int64_t);

class CpuModule final : public LoadedModule {
 public:
  ~CpuModule() override {
    if (handle_) dlclose(handle_);
  }
  int kernel_count() const override { return static_cast<int>(kernels_.size()); }
  const kernel::EmittedKernel& kernel(int index) const override { return kernels_.at(static_cast<size_t>(index)); }

  void* handle_ = nullptr;
  std::vector<kernel::EmittedKernel> kernels_;
  std::vector<RowsFn> rows_;
};

int64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

// The OpenBLAS the process loaded, as it describes itself: "0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
// (the version and the core kernels it picked, both of which change its timings).
std::string openblas_version() {
  std::string config = openblas_get_config();
  const std::string prefix = "OpenBLAS ";
  if (config.rfind(prefix, 0) == 0) config.erase(0, prefix.size());
  while (!config.empty() && config.back() == ' ') config.pop_back();
  return config;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

Status reference_op(Op op, const Attrs& attrs, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out) {
  std::vector<Tensor> inputs;
  for (const DeviceTensor& t : in) {
    Tensor host(t.type.dtype, t.type.shape);
    if (host.byte_size()) std::memcpy(host.data(), t.data, host.byte_size());
    inputs.push_back(std::move(host));
  }
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  std::vector<Tensor> outputs;
  for (const DeviceTensor& t : out) outputs.emplace_back(t.type.dtype, t.type.shape);
  KILN_TRY(op_def(op).reference(RefCall{ptrs, attrs, outputs}));
  for (size_t i = 0; i < out.size(); ++i) {
    if (outputs[i].byte_size()) std::memcpy(out[i].data, outputs[i].data(), outputs[i].byte_size());
  }
  return ok_status();
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options) : options_(options) {
    const int cores = std::max(1u, std::thread::hardware_concurrency());
    const int threads = options.threads > 0 ? options.threads : cores;
    pool_ = std::make_unique<ThreadPool>(threads - 1);
    if (options_.cache_dir.empty()) {
      options_.cache_dir = (std::filesystem::temp_directory_path() / "kiln-kernel-cache").string();
    }
    info_.kind = "cpu";
    info_.name = cpu_model();
    info_.compute_units = cores;
    info_.cache_bytes = harness::last_level_cache_bytes();
    info_.memory_bytes = physical_memory();
    // The plan's kernels run on every pool thread, so its copy does too (one core streamed 54-66% of what two did on the dev VM).
    info_.bandwidth_bytes_per_second = harness::memcpy_bandwidth_on(threads);
    info_.flops_per_second = measured_sgemm_flops();
    info_.compiler = harness::compiler_version(options_.compiler);
    info_.libraries = {{"openblas", openblas_version()}};
  }

  const DeviceInfo& device() const override { return info_; }
  kernel::Target target() const override { return kernel::Target::cpu; }

  // Tensors of 4 MiB and more start on a 2 MiB boundary and ask for transparent huge pages (where the kernel
  // offers them only on request): a GEMM streams its weights, and on 4 KiB pages a VM walks two page tables
  // per TLB miss. The modulation GEMV of a FLUX.1-dev block (226 MB of bf16 weights, one row) read its
  // weights 24 ms from one buffer and 32 ms from another of the same size and content on the 2-core Xeon VM
  // (session 27): which one was slow moved with the buffer.
  Result<DeviceTensor> allocate(const TensorType& type) override {
    const size_t bytes = type_bytes(type);
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t align = bytes >= 2 * kHuge ? kHuge : 64;
    const size_t rounded = std::max<size_t>(64, (bytes + align - 1) / align * align);
    void* p = std::aligned_alloc(align, rounded);
    if (!p) return make_error(ErrorCode::unsupported, "cannot allocate " + std::to_string(bytes) + " bytes");
#ifdef MADV_HUGEPAGE
    if (align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);  // advice: ignored where not offered
#endif
    std::memset(p, 0, rounded);
    return DeviceTensor{p, type};
  }
  void release(DeviceTensor& t) override {
    std::free(t.data);
    t.data = nullptr;
  }
  Status copy_to_device(const Tensor& host, const DeviceTensor& device) override {
    if (host.dtype() != device.type.dtype || host.shape() != device.type.shape) {
      return make_error(ErrorCode::shape_error, "copy_to_device: host tensor " +
                                                    type_to_string({host.dtype(), host.shape()}) +
                                                    " does not match device tensor " + type_to_string(device.type));
    }
    if (host.byte_size()) std::memcpy(device.data, host.data(), host.byte_size());
    return ok_status();
  }
  Result<Tensor> copy_to_host(const DeviceTensor& device) override {
    Tensor host(device.type.dtype, device.type.shape);
    if (host.byte_size()) std::memcpy(host.data(), device.data, host.byte_size());
    return host;
  }
  Status copy(const DeviceTensor& from, const DeviceTensor& to) override {
    if (from.bytes() != to.bytes()) {
      return make_error(ErrorCode::shape_error, "copy: " + type_to_string(from.type) + " into " + type_to_string(to.type));
    }
    if (from.bytes()) std::memmove(to.data, from.data, from.bytes());
    return ok_status();
  }

  Result<std::shared_ptr<LoadedModule>> compile(const kernel::EmittedModule& module) override {
    if (module.target != kernel::Target::cpu) {
      return make_error(ErrorCode::invalid_argument, "the CPU backend compiles CPU-dialect source only, got " +
                                                         std::string(kernel::target_name(module.target)));
    }
    harness::CompileOptions co;
    co.compiler = options_.compiler;
    co.flags = options_.flags;
    co.cache_dir = options_.cache_dir;
    co.wall_seconds = options_.compile_seconds;
    co.memory_bytes = 4ll << 30;
    const std::string scratch = harness::make_scratch_dir(options_.scratch_root, "kiln-cpu-compile");
    harness::CompiledCandidate built = harness::compile_candidate(module.source, scratch, co);
    std::error_code ec;
    if (built.outcome.cls != harness::OutcomeClass::compiled) {
      std::filesystem::remove_all(scratch, ec);
      return make_error(ErrorCode::unsupported, "compiling generated kernels failed: " +
                                                    built.outcome.evidence.summary + "\n" +
                                                    built.outcome.evidence.compiler_log);
    }
    auto m = std::make_shared<CpuModule>();
    m->handle_ = dlopen(built.library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::filesystem::remove_all(scratch, ec);
    if (!m->handle_) return make_error(ErrorCode::unsupported, std::string("cannot load generated kernels: ") + dlerror());
    for (const kernel::EmittedKernel& k : module.kernels) {
      auto fn = reinterpret_cast<RowsFn>(dlsym(m->handle_, (k.entry + "_rows").c_str()));
      if (!fn) return make_error(ErrorCode::unsupported, "generated module lacks entry " + k.entry + "_rows");
      m->kernels_.push_back(k);
      m->rows_.push_back(fn);
    }
    return std::shared_ptr<LoadedModule>(m);
  }

  Status launch(const LoadedModule& module, int index, std::span<const DeviceTensor> inputs,
                std::span<const DeviceTensor> outputs) override {
    const auto* m = dynamic_cast<const CpuModule*>(&module);
    if (!m || index < 0 || index >= m->kernel_count()) {
      return make_error(ErrorCode::invalid_argument, "launch: no kernel " + std::to_string(index) + " in this module");
    }
    const kernel::EmittedKernel& k = m->kernels_[index];
    if (static_cast<int>(inputs.size()) != k.n_inputs || static_cast<int>(outputs.size()) != k.n_outputs) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("kernel {} takes {} inputs and {} outputs, got {} and {}", k.entry, k.n_inputs,
                                    k.n_outputs, inputs.size(), outputs.size()));
    }
    std::vector<kiln_tensor> in(inputs.size()), out(outputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      in[i] = {inputs[i].data, inputs[i].type.shape.data(), static_cast<int>(inputs[i].type.shape.size()),
               static_cast<int>(inputs[i].type.dtype)};
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      out[i] = {outputs[i].data, outputs[i].type.shape.data(), static_cast<int>(outputs[i].type.shape.size()),
                static_cast<int>(outputs[i].type.dtype)};
    }
    const RowsFn fn = m->rows_[index];
    const int64_t per_task = std::max<int64_t>(1, k.schedule.rows_per_task);
    const int64_t tasks = (k.rows + per_task - 1) / per_task;
    std::atomic<int> failure{0};
    pool_->parallel_for(tasks, k.schedule.threads, [&](int64_t t) {
      const int64_t r0 = t * per_task, r1 = std::min(k.rows, r0 + per_task);
      const int rc = fn(in.data(), static_cast<int>(in.size()), out.data(), static_cast<int>(out.size()), r0, r1);
      if (rc != 0) failure = rc;
    });
    if (failure != 0) {
      const char* why = failure == 2 ? "a tensor's shape or dtype differs from what the kernel was generated for"
                                     : "bad arguments";
      return make_error(ErrorCode::shape_error, fmt::format("kernel {} returned {}: {}", k.entry, failure.load(), why));
    }
    return ok_status();
  }

  Status supports(Op op, std::span<const TensorType> inputs, const Attrs& attrs) const override {
    auto infer = infer_node(op, inputs, attrs);
    if (!infer.ok()) return infer.error();
    switch (op) {
      case Op::matmul:
      case Op::linear:
      case Op::scaled_linear:
      case Op::attention:
      case Op::gather:
      case Op::pack_scales:
      case Op::full:
      case Op::arange: return ok_status();
      default: break;
    }
    if (!kernel::kernel_supports_op(op)) {
      return make_error(ErrorCode::unsupported, "the CPU backend has no kernel for op " + std::string(op_name(op)) +
                                                    (op_has_trait(op, kTraitComposite)
                                                         ? " (decompose it first: kiln::passes::decompose)"
                                                         : ""));
    }
    for (const TensorType& t : inputs) {
      if (!dtype_is_float(t.dtype)) {
        return make_error(ErrorCode::unsupported, "the CPU backend's generated kernels take floating inputs; op " +
                                                      std::string(op_name(op)) + " got " + type_to_string(t));
      }
    }
    for (const TensorType& t : *infer) {
      if (!dtype_is_float(t.dtype)) {
        return make_error(ErrorCode::unsupported, "the CPU backend's generated kernels write floating outputs; op " +
                                                      std::string(op_name(op)) + " gives " + type_to_string(t));
      }
    }
    return ok_status();
  }

  // Library ops read pitched operands through a dense copy and write pitched results through one (the copy a
  // plan's view kernel would have made); generated kernels and sources take dense tensors only.
  bool takes_pitched(Op op, std::span<const TensorType> /*inputs*/, const Attrs& /*attrs*/, int /*operand*/,
                     int64_t row, int64_t pitch) const override {
    return (op == Op::linear || op == Op::scaled_linear || op == Op::matmul || op == Op::attention) && row > 0 &&
           pitch >= row;
  }

  Status run_library_dense(Op op, const Attrs& attrs, std::span<const DeviceTensor> inputs,
                           std::span<const DeviceTensor> outputs) {
    for (size_t i = 0; i < inputs.size() + outputs.size(); ++i) {
      const DeviceTensor& t = i < inputs.size() ? inputs[i] : outputs[i - inputs.size()];
      if (t.pitched() && !takes_pitched(op, {}, attrs, i < inputs.size() ? static_cast<int>(i) : -1, t.row, t.pitch)) {
        return make_error(ErrorCode::unsupported, fmt::format("{}: operand {} cannot be pitched (rows of {}, {} apart)",
                                                              op_name(op), i, t.row, t.pitch));
      }
    }
    std::vector<std::vector<std::byte>> copies;
    auto dense = [&](const DeviceTensor& t) {
      if (!t.pitched()) return t;
      copies.emplace_back(t.bytes());
      return DeviceTensor{copies.back().data(), t.type};
    };
    std::vector<DeviceTensor> in, out;
    copies.reserve(inputs.size() + outputs.size());
    for (const DeviceTensor& t : inputs) {
      in.push_back(dense(t));
      if (t.pitched()) gather_pitched(t, in.back().data);
    }
    for (const DeviceTensor& t : outputs) out.push_back(dense(t));
    KILN_TRY(run_library(op, attrs, in, out));
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].pitched()) scatter_pitched(out[i].data, outputs[i]);
    }
    return ok_status();
  }

  Status run_library(Op op, const Attrs& attrs, std::span<const DeviceTensor> inputs,
                     std::span<const DeviceTensor> outputs) override {
    if (std::any_of(inputs.begin(), inputs.end(), [](const DeviceTensor& t) { return t.pitched(); }) ||
        std::any_of(outputs.begin(), outputs.end(), [](const DeviceTensor& t) { return t.pitched(); })) {
      return run_library_dense(op, attrs, inputs, outputs);
    }
    std::vector<TensorType> types;
    for (const DeviceTensor& t : inputs) types.push_back(t.type);
    auto inferred = infer_node(op, types, attrs);
    if (!inferred.ok()) return with_context(inferred.error(), std::string(op_name(op)));
    if (inferred->size() != outputs.size()) {
      return make_error(ErrorCode::invalid_argument, fmt::format("{}: {} outputs given, it has {}", op_name(op),
                                                                 outputs.size(), inferred->size()));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!(outputs[i].type == (*inferred)[i])) {
        return make_error(ErrorCode::shape_error, fmt::format("{}: output {} is {}, the op gives {}", op_name(op), i,
                                                              type_to_string(outputs[i].type),
                                                              type_to_string((*inferred)[i])));
      }
    }
    switch (op) {
      case Op::linear: return cpu::run_linear(attrs, inputs, outputs[0]);
      case Op::scaled_linear: return cpu::run_scaled_linear(attrs, inputs, outputs[0]);
      case Op::matmul: return cpu::run_matmul(inputs, outputs[0]);
      case Op::attention: return cpu::run_attention(attrs, inputs, outputs[0]);
      case Op::gather:
      case Op::pack_scales:
      case Op::full:
      case Op::arange: return reference_op(op, attrs, inputs, outputs);
      default:
        return make_error(ErrorCode::unsupported, "op " + std::string(op_name(op)) +
                                                      " is not a CPU library op (it runs as a generated kernel)");
    }
  }

  Status synchronize() override { return ok_status(); }

  Result<Timing> time(const std::function<Status()>& work, const TimingOptions& options) override {
    for (int i = 0; i < options.warmup; ++i) KILN_TRY(work());
    std::vector<double> samples;
    for (int i = 0; i < std::max(1, options.repetitions); ++i) {
      const auto start = std::chrono::steady_clock::now();
      KILN_TRY(work());
      samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(samples.begin(), samples.end());
    return Timing{samples[samples.size() / 2], samples.front(), static_cast<int>(samples.size())};
  }

 private:
  CpuBackendOptions options_;
  DeviceInfo info_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace

double measured_sgemm_flops() {
  static const double kFlops = [] {
    const int n = 512;
    std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n);
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, 2.0 * n * n * n / s);
    }
    return best;
  }();
  return kFlops;
}

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

static std::map<std::string, BackendFactory>& backend_factories() {
  static std::map<std::string, BackendFactory> factories;
  return factories;
}

void register_backend_factory(const std::string& name, BackendFactory factory) {
  backend_factories()[name] = std::move(factory);
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  auto it = backend_factories().find(name);
  if (it != backend_factories().end()) return it->second();
  std::string available = "cpu";
  for (const auto& [known, factory] : backend_factories()) available += ", " + known;
  return make_error(ErrorCode::invalid_argument,
                    "unknown backend '" + name + "' (available in this build: " + available + ")");
}

}  // namespace kiln::backend
