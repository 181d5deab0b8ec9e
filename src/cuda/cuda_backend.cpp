#include "cuda/cuda_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#ifdef KILN_HAS_CUDNN
#include "cuda/attention.h"
#endif
#include "cuda/driver.h"
#include "cuda/gemm.h"
#include "cuda/nvrtc.h"
#include "cuda/timer.h"
#include "ir/ops/op_util.h"
#include "kernel/kernel_ir.h"

namespace kiln::cuda {

namespace {

using backend::DeviceTensor;

class CudaModule final : public backend::LoadedModule {
 public:
  CudaModule(Module module, std::vector<CUfunction> functions, std::vector<kernel::EmittedKernel> kernels)
      : module_(std::move(module)), functions_(std::move(functions)), kernels_(std::move(kernels)) {}
  int kernel_count() const override { return static_cast<int>(kernels_.size()); }
  const kernel::EmittedKernel& kernel(int index) const override { return kernels_.at(static_cast<size_t>(index)); }
  CUfunction function(int index) const { return functions_.at(static_cast<size_t>(index)); }

 private:
  Module module_;
  std::vector<CUfunction> functions_;
  std::vector<kernel::EmittedKernel> kernels_;
};

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

class CudaBackend final : public backend::Backend {
 public:
  CudaBackend(Context context, Stream stream, BlasLt blas)
      : context_(std::move(context)), stream_(std::move(stream)), blas_(std::move(blas)) {
    const DeviceInfo& d = context_.info();
    info_.kind = "cuda";
    info_.name = d.name;
    info_.compute_units = d.multiprocessors;
    info_.cache_bytes = d.l2_bytes;
    info_.memory_bytes = d.memory_bytes;
    info_.driver = fmt::format("{}.{}", d.driver_version / 1000, (d.driver_version % 1000) / 10);
    info_.compiler = "nvrtc " + nvrtc_version();
    info_.libraries = {{"cublaslt", BlasLt::version()}};
#ifdef KILN_HAS_CUDNN
    info_.libraries.push_back({"cudnn", CudnnAttention::version()});
#endif
  }

  Status measure() {
    // Copy bandwidth: 512 MiB each way, the best of 5 (bytes read + written).
    const int64_t bytes = 512ll << 20;
    KILN_ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::allocate(bytes));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(bytes));
    KILN_ASSIGN_OR_RETURN(backend::Timing copy, time([&] { return copy_async(b.ptr(), a.ptr(), bytes, stream_.handle()); },
                                                     {2, 5}));
    info_.bandwidth_bytes_per_second = 2.0 * static_cast<double>(bytes) / copy.min_seconds;
    // bf16 GEMM rate at 8192^3 with cuBLASLt's first choice, on zeroed buffers. Zeros draw less power than
    // random data, so this reads high: 894 TFLOP/s on the H200 against ~790 on random data (ANCHORS.md).
    const GemmDesc desc{.m = 8192, .n = 8192, .k = 8192};
    KILN_ASSIGN_OR_RETURN(std::vector<GemmAlgorithm> algorithms, blas_.algorithms(desc, 1));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::allocate(8192ll * 8192 * 2));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::allocate(8192ll * 8192 * 2));
    GemmArgs args{.x = x.data(), .w = x.data(), .y = y.data()};
    KILN_ASSIGN_OR_RETURN(backend::Timing gemm,
                          time([&] { return blas_.run(desc, algorithms[0], args, stream_.handle()); }, {1, 3}));
    info_.flops_per_second = 2.0 * 8192.0 * 8192.0 * 8192.0 / gemm.min_seconds;
    return ok_status();
  }

  const backend::DeviceInfo& device() const override { return info_; }
  kernel::Target target() const override { return kernel::Target::cuda; }

  Result<DeviceTensor> allocate(const TensorType& type) override {
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::allocate(static_cast<int64_t>(std::max<size_t>(1, type_bytes(type)))));
    KILN_TRY(buffer.fill_bytes(0));
    DeviceTensor tensor{buffer.data(), type};
    std::lock_guard<std::mutex> lock(mutex_);
    buffers_.emplace(buffer.data(), std::move(buffer));
    return tensor;
  }

  void release(DeviceTensor& tensor) override {
    std::lock_guard<std::mutex> lock(mutex_);
    buffers_.erase(tensor.data);
    tensor.data = nullptr;
  }

  Status copy_to_device(const Tensor& host, const DeviceTensor& device) override {
    if (host.byte_size() != device.bytes())
      return make_error(ErrorCode::shape_error, fmt::format("copy to device: {} bytes into a {} tensor", host.byte_size(),
                                                            type_to_string(device.type)));
    KILN_TRY(synchronize());
    return cuda::copy_to_device(device.data, host.data(), host.byte_size());
  }

  Result<Tensor> copy_to_host(const DeviceTensor& device) override {
    KILN_TRY(synchronize());
    Tensor host(device.type.dtype, device.type.shape);
    KILN_TRY(cuda::copy_to_host(host.data(), device.data, device.bytes()));
    return host;
  }

  Status copy(const DeviceTensor& from, const DeviceTensor& to) override {
    if (from.bytes() != to.bytes())
      return make_error(ErrorCode::shape_error, fmt::format("device copy: {} into {}", type_to_string(from.type),
                                                            type_to_string(to.type)));
    CUdeviceptr src = reinterpret_cast<CUdeviceptr>(from.data), dst = reinterpret_cast<CUdeviceptr>(to.data);
    const int64_t bytes = static_cast<int64_t>(from.bytes());
    // A 16-byte vector a thread where the pointers and size allow: the copy a generated kernel is measured against
    // (profile/profile.h). The driver's copy, captured into a CUDA graph, took 22.1 us for 50 MB on an H200, where
    // 16-byte copy kernels launched from the host took 13.7-14.5 us (session 41's plan profile and kiln-gpu-bench's
    // copy table); this kernel in a graph is not yet timed.
    if (((src | dst | static_cast<CUdeviceptr>(bytes)) & 15) != 0 || bytes == 0)
      return copy_async(dst, src, bytes, stream());
    KILN_ASSIGN_OR_RETURN(CUfunction copy16, helper("kiln_copy16"));
    long long vectors = bytes / 16;
    return cuda::launch(copy16, {.grid_x = static_cast<unsigned>((vectors + 255) / 256), .block_x = 256}, stream(),
                        {&src, &dst, &vectors});
  }

  Result<std::shared_ptr<backend::LoadedModule>> compile(const kernel::EmittedModule& module) override {
    if (module.target != kernel::Target::cuda)
      return make_error(ErrorCode::invalid_argument, "the CUDA backend compiles CUDA-dialect modules only");
    std::lock_guard<std::mutex> lock(mutex_);
    // One cubin per distinct source: the plan's kernels are emitted into one module, and the same model built
    // twice in one process compiles once.
    auto cached = cubins_.find(module.source);
    if (cached == cubins_.end()) {
      KILN_ASSIGN_OR_RETURN(NvrtcOutput out,
                            nvrtc_compile(module.source, "kiln_plan.cu", NvrtcOptions{context_.info().arch(), {}, true}));
      cached = cubins_.emplace(module.source, std::move(out.cubin)).first;
    }
    KILN_ASSIGN_OR_RETURN(Module loaded, Module::load(cached->second));
    std::vector<CUfunction> functions;
    std::vector<kernel::EmittedKernel> kernels = module.kernels;
    for (kernel::EmittedKernel& k : kernels) {
      KILN_ASSIGN_OR_RETURN(CUfunction f, loaded.function(k.entry));
      functions.push_back(f);
      // Schedule::row_loop 0: one wave, as many blocks as the device holds at once, each taking tasks in turns.
      if (k.schedule.row_loop == 0) {
        KILN_ASSIGN_OR_RETURN(int per_unit, cuda::resident_blocks_per_multiprocessor(f, k.block_x * k.block_y));
        k.grid = std::clamp<int64_t>(int64_t{per_unit} * context_.info().multiprocessors, 1, k.grid);
      }
    }
    return std::shared_ptr<backend::LoadedModule>(
        std::make_shared<CudaModule>(std::move(loaded), std::move(functions), std::move(kernels)));
  }

  Status launch(const backend::LoadedModule& module, int index, std::span<const DeviceTensor> inputs,
                std::span<const DeviceTensor> outputs) override {
    const auto* cuda_module = dynamic_cast<const CudaModule*>(&module);
    if (cuda_module == nullptr) return make_error(ErrorCode::invalid_argument, "not a module of the CUDA backend");
    if (index < 0 || index >= module.kernel_count())
      return make_error(ErrorCode::invalid_argument, fmt::format("kernel index {} of {}", index, module.kernel_count()));
    const kernel::EmittedKernel& k = module.kernel(index);
    if (static_cast<int>(inputs.size()) != k.n_inputs || static_cast<int>(outputs.size()) != k.n_outputs)
      return make_error(ErrorCode::invalid_argument, fmt::format("kernel {} takes {} inputs and {} outputs, got {} and {}",
                                                                 k.entry, k.n_inputs, k.n_outputs, inputs.size(),
                                                                 outputs.size()));
    std::vector<CUdeviceptr> pointers;
    for (const DeviceTensor& t : inputs) pointers.push_back(reinterpret_cast<CUdeviceptr>(t.data));
    for (const DeviceTensor& t : outputs) pointers.push_back(reinterpret_cast<CUdeviceptr>(t.data));
    std::vector<void*> args;
    for (CUdeviceptr& p : pointers) args.push_back(&p);
    LaunchShape shape{.grid_x = static_cast<unsigned>(k.grid), .block_x = static_cast<unsigned>(k.block_x),
                      .block_y = static_cast<unsigned>(k.block_y)};
    return cuda::launch(cuda_module->function(index), shape, stream(), std::move(args));
  }

  Status supports(Op op, std::span<const TensorType> inputs, const Attrs& attrs) const override {
    auto inferred = infer_node(op, inputs, attrs);
    if (!inferred.ok()) return inferred.error();
    switch (op) {
      case Op::linear: {
        if (inputs[0].dtype != DType::bf16 && inputs[0].dtype != DType::f16)
          return make_error(ErrorCode::unsupported, "the CUDA backend's linear takes bf16 or f16, got " +
                                                        type_to_string(inputs[0]));
        // The scale / residual epilogue is cuBLASLt's per-feature alpha mode: only where it offers an algorithm.
        KILN_ASSIGN_OR_RETURN(GemmDesc desc, linear_desc(inputs, attrs));
        if (desc.scale || desc.residual) return offered(desc);
        return ok_status();
      }
      case Op::scaled_linear: {
        KILN_ASSIGN_OR_RETURN(GemmDesc desc, scaled_linear_desc(inputs, attrs, (*inferred)[0].dtype));
        // Fast accumulation and the GELU epilogue (fold-epilogues asks) only where cuBLASLt offers an algorithm
        // for them (fast accumulation: not with block scales on sm_90).
        if (desc.fast_accumulation || desc.epilogue == GemmEpilogue::bias_gelu) return offered(desc);
        return ok_status();
      }
      case Op::attention:
#ifdef KILN_HAS_CUDNN
        if (inputs.size() > 3)
          return make_error(ErrorCode::unsupported, "the CUDA backend's attention takes no explicit mask yet (causal is fine)");
        return ok_status();
#else
        return make_error(ErrorCode::unsupported, "this build has no cuDNN attention (run scripts/setup.sh)");
#endif
      case Op::full:
      case Op::arange:
      case Op::pack_scales:
      case Op::gather: return ok_status();  // on the host, through the reference (plans fold sources at build)
      default: break;
    }
    if (!kernel::kernel_supports_op(op))
      return make_error(ErrorCode::unsupported, "the CUDA backend has no kernel for op " + std::string(op_name(op)));
    return ok_status();
  }

  // cuBLASLt reads x and writes y with any row stride (a pitched y only without a residual: C shares its
  // layout); cuDNN addresses q, k, v and o through strides. Rows must be whole GEMM rows / attention rows.
  bool takes_pitched(Op op, std::span<const TensorType> inputs, const Attrs& attrs, int operand, int64_t row,
                     int64_t pitch) const override {
    if (pitch < row || row <= 0) return false;
    if (op == Op::linear) {
      if (operand == 0) return row == inputs[0].shape.back();
      return operand == -1 && row == inputs[1].shape[0] && ops::linear_inputs(inputs.size(), attrs).residual < 0;
    }
    if (op == Op::attention && inputs.size() <= 3 && operand < 3) {
      auto inferred = infer_node(op, inputs, attrs);
      if (!inferred.ok()) return false;
      const Shape& shape = operand < 0 ? (*inferred)[0].shape : inputs[static_cast<size_t>(operand)].shape;
      return !backend::pitched_strides(shape, row, pitch).empty();
    }
    return false;
  }

  Status run_library(Op op, const Attrs& attrs, std::span<const DeviceTensor> inputs,
                     std::span<const DeviceTensor> outputs) override {
    std::vector<TensorType> types;
    for (const DeviceTensor& t : inputs) types.push_back(t.type);
    for (size_t i = 0; i < inputs.size() + outputs.size(); ++i) {
      const DeviceTensor& t = i < inputs.size() ? inputs[i] : outputs[i - inputs.size()];
      if (t.pitched() && !takes_pitched(op, types, attrs, i < inputs.size() ? static_cast<int>(i) : -1, t.row, t.pitch))
        return make_error(ErrorCode::unsupported, fmt::format("{}: operand {} cannot be pitched (rows of {}, {} apart)",
                                                              op_name(op), i, t.row, t.pitch));
    }
    KILN_TRY(supports(op, types, attrs));
    auto inferred = infer_node(op, types, attrs);
    if (!inferred.ok()) return inferred.error();
    if (inferred->size() != outputs.size() || !((*inferred)[0] == outputs[0].type))
      return make_error(ErrorCode::shape_error, fmt::format("{}: outputs do not match what the op gives ({})", op_name(op),
                                                            type_to_string((*inferred)[0])));
    switch (op) {
      case Op::linear: return run_linear(attrs, types, inputs, outputs[0]);
      case Op::scaled_linear: return run_scaled_linear(attrs, inputs, outputs[0]);
      case Op::attention: return run_attention(attrs, inputs, outputs[0]);
      case Op::full:
      case Op::arange:
      case Op::pack_scales:
      case Op::gather: return run_on_host(op, attrs, inputs, outputs);
      default:
        return make_error(ErrorCode::unsupported,
                          "op " + std::string(op_name(op)) + " is not a CUDA library op (it runs as a generated kernel)");
    }
  }

  // Two streams: the image and text streams of a FLUX double block are two chains of GEMMs and row kernels.
  int lanes() const override { return kLanes; }

  // Each lane past the first has its own stream and cuBLASLt workspace (GEMMs on two streams must not share
  // one); made on first use.
  Status use_lane(int lane) override {
    if (lane < 0 || lane >= kLanes)
      return make_error(ErrorCode::invalid_argument, fmt::format("lane {} of the CUDA backend's {}", lane, kLanes));
    while (static_cast<int>(lane_streams_.size()) < lane) {
      KILN_ASSIGN_OR_RETURN(Stream created, Stream::create());
      KILN_ASSIGN_OR_RETURN(BlasLt blas, BlasLt::create());
      lane_streams_.push_back(std::move(created));
      lane_blas_.push_back(std::move(blas));
    }
    lane_ = lane;
    return ok_status();
  }

  Status record_event(int event) override {
    if (event < 0) return make_error(ErrorCode::invalid_argument, fmt::format("event {}", event));
    while (static_cast<int>(events_.size()) <= event) {
      KILN_ASSIGN_OR_RETURN(Event created, Event::create());
      events_.push_back(std::move(created));
    }
    return events_[static_cast<size_t>(event)].record(stream());
  }

  Status wait_event(int event) override {
    if (event < 0 || event >= static_cast<int>(events_.size()))
      return make_error(ErrorCode::invalid_argument, fmt::format("event {} was never recorded", event));
    return events_[static_cast<size_t>(event)].wait(stream());
  }

  // While a graph is being captured nothing runs, so there is nothing to wait for (and waiting would end
  // the capture).
  Status synchronize() override {
    if (capturing_) return ok_status();
    for (const Stream& s : lane_streams_) KILN_TRY(s.synchronize());
    return stream_.synchronize();
  }

  Result<std::function<Status()>> capture(const std::function<Status()>& work) override {
    KILN_TRY(synchronize());
    // The helper kernels are loaded before a capture begins: a module cannot be loaded while this thread captures,
    // and a copy may be the first thing captured (profile/profile.h times one that way).
    if (!helpers_) {
      auto loaded = helper("kiln_copy16");
      if (!loaded.ok()) return loaded.error();
    }
    KILN_TRY(CapturedGraph::begin_capture(stream_.handle()));
    capturing_ = true;
    Status recorded = work();
    capturing_ = false;
    auto graph = CapturedGraph::end_capture(stream_.handle());  // ends the capture even when work failed
    if (!recorded.ok())
      return with_context(recorded.error(), "while capturing a CUDA graph (a plan runs once before it is captured: its "
                                            "first run chooses GEMM algorithms and makes their buffers)");
    if (!graph.ok()) return graph.error();
    auto shared = std::make_shared<CapturedGraph>(std::move(graph).value());
    CUstream stream = stream_.handle();
    return std::function<Status()>([shared, stream] { return shared->replay(stream); });
  }

  Result<backend::Timing> time(const std::function<Status()>& work, const backend::TimingOptions& options) override {
    std::vector<double> samples;  // seconds
    if (options.hold) {
      KILN_ASSIGN_OR_RETURN(StreamTimer * timer, timer_in(timer_));
      KILN_ASSIGN_OR_RETURN(samples, timer->samples_ms(stream_.handle(), work, options.warmup, options.repetitions));
      for (double& s : samples) s *= 1e-3;
    } else {
      KILN_ASSIGN_OR_RETURN(Event start, Event::create());
      KILN_ASSIGN_OR_RETURN(Event end, Event::create());
      for (int i = 0; i < options.warmup; ++i) KILN_TRY(work());
      for (int i = 0; i < std::max(1, options.repetitions); ++i) {
        KILN_TRY(start.record(stream_.handle()));
        KILN_TRY(work());
        KILN_TRY(end.record(stream_.handle()));
        KILN_ASSIGN_OR_RETURN(double ms, Event::elapsed_ms(start, end));
        samples.push_back(ms * 1e-3);
      }
    }
    std::sort(samples.begin(), samples.end());
    return backend::Timing{samples[samples.size() / 2], samples.front(), static_cast<int>(samples.size())};
  }

 private:
  // Sources (computed once, when a plan is built) and gathers run through the reference implementation on the
  // host: download, compute, upload.
  Status run_on_host(Op op, const Attrs& attrs, std::span<const DeviceTensor> in, std::span<const DeviceTensor> out) {
    std::vector<Tensor> inputs;
    for (const DeviceTensor& t : in) {
      KILN_ASSIGN_OR_RETURN(Tensor host, copy_to_host(t));
      inputs.push_back(std::move(host));
    }
    std::vector<const Tensor*> pointers;
    for (const Tensor& t : inputs) pointers.push_back(&t);
    std::vector<Tensor> outputs;
    for (const DeviceTensor& t : out) outputs.emplace_back(t.type.dtype, t.type.shape);
    KILN_TRY(op_def(op).reference(RefCall{pointers, attrs, outputs}));
    for (size_t i = 0; i < out.size(); ++i) KILN_TRY(copy_to_device(outputs[i], out[i]));
    return ok_status();
  }

  // One of the backend's own small kernels (capturable: no host work), compiled on first use.
  Result<CUfunction> helper(const char* name) {
    if (!helpers_) {
      static const char* kSource = R"(
extern "C" __global__ void kiln_broadcast(const float* s, float* out, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    out[i] = s[0];
}
extern "C" __global__ void kiln_copy16(const uint4* __restrict__ in, uint4* __restrict__ out, long long n) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
)";
      KILN_ASSIGN_OR_RETURN(NvrtcOutput out, nvrtc_compile(kSource, "kiln_helpers.cu", NvrtcOptions{context_.info().arch(), {}, false}));
      KILN_ASSIGN_OR_RETURN(Module module, Module::load(out.cubin));
      helpers_ = std::make_unique<Module>(std::move(module));
    }
    return helpers_->function(name);
  }

  // A device vector of `m` copies of the f32 at `scalar`, by a one-line kernel.
  Result<const void*> broadcast_scale(const void* scalar, int64_t m) {
    KILN_ASSIGN_OR_RETURN(CUfunction broadcast, helper("kiln_broadcast"));
    auto& scratch = scale_vectors_[{lane_, m}];
    if (scratch.bytes() == 0) {
      KILN_ASSIGN_OR_RETURN(scratch, DeviceBuffer::allocate(m * 4));
    }
    CUdeviceptr s = reinterpret_cast<CUdeviceptr>(scalar), out = scratch.ptr();
    long long n = m;
    KILN_TRY(cuda::launch(broadcast, {.grid_x = static_cast<unsigned>(std::min<int64_t>(1024, (m + 255) / 256)), .block_x = 256},
                          stream(), {&s, &out, &n}));
    return static_cast<const void*>(scratch.data());
  }

  // The cuBLASLt scaling mode of scaled_linear(xq, xs, wq, ws, [b]) from its scale shapes, or an unsupported
  // error naming the mix cuBLASLt cannot take.
  static Result<GemmScaling> scaling_of(std::span<const TensorType> in) {
    const Shape& xq = in[0].shape;
    const Shape& xs = in[1].shape;
    const Shape& wq = in[2].shape;
    const Shape& ws = in[3].shape;
    const int64_t n = wq[0], k = wq[1];
    // Per-channel weight scales: [n, 1] as checkpoints hold them, or [n] once pack-scales made them the vector
    // cuBLASLt's OUTER_VEC mode reads; the two are the same bytes.
    const bool w_channel = (ws.size() == 2 && ws[0] == n && ws[1] == 1) || (ws.size() == 1 && ws[0] == n);
    Shape x_row(xq.begin(), xq.end() - 1);
    x_row.push_back(1);
    const bool x_token = !xs.empty() && xs == x_row;
    // Block scales in the layouts cuBLASLt reads (ir/ops/op_util.h). With one K block a grid can have the
    // per-row shape too; the two readings then agree, so the order of the tests below does not matter.
    const bool x_blocks = !xs.empty() && xs == ops::activation_block_scale_shape(xq);
    const bool w_blocks = ws == ops::gemm_weight_block_scale_shape(n, k);
    if (xs.empty() && ws.empty()) return GemmScaling::tensor;
    if (x_token && w_channel) return GemmScaling::channel;
    if (xs.empty() && w_channel) return GemmScaling::tensor_x_channel_w;
    // cuBLASLt's 128-block modes take whole K blocks and token counts that are a multiple of 4 (its
    // heuristic answers NOT_SUPPORTED for m=1, k=64 on the H200); other shapes are refused here, so the plan
    // runs them elsewhere, and the GPU tests hold the shapes it was checked on.
    if (x_blocks && w_blocks) {
      const int64_t m = shape_numel(xq) / k;
      if (k % ops::kScaleBlock == 0 && m % ops::kGemmScaleRowAlign == 0) return GemmScaling::block;
      return make_error(ErrorCode::unsupported,
                        fmt::format("the CUDA backend's block-scaled scaled_linear needs K a multiple of {} and M a "
                                    "multiple of {} (cuBLASLt); got M={}, K={}",
                                    ops::kScaleBlock, ops::kGemmScaleRowAlign, m, k));
    }
    return make_error(ErrorCode::unsupported,
                      "the CUDA backend's scaled_linear takes per-tensor, per-token x per-channel, per-tensor x "
                      "per-channel, or 1x128 x 128x128 block scales (xs [K/128, M] k-block-major, ws [N/128, "
                      "round_up(K/128, 4)] as pack-scales writes it); got xs " + type_to_string(in[1]) + ", ws " +
                      type_to_string(in[3]));
  }

  // The algorithm of each GEMM shape is chosen on its first run, on the call's own buffers, among cuBLASLt's
  // heuristic answers and their neighbours (gemm.h, AlgorithmSearch::neighbours; up to kGemmSearchCount): the
  // GPU is first kept busy with the shape for kGemmWarmupMs, kGemmScreenRounds interleaved rounds time every
  // candidate, the kGemmCandidates fastest go on to kGemmChoiceRounds more, and the fastest of those is kept
  // once its output agrees with the heuristic's first choice (BlasLt::agrees; the heuristic's first choice was
  // up to 1.24x slower than the best on FLUX's shapes, docs/performance.md, and a neighbour cuBLASLt's check
  // accepts may compute something else). A first run under graph capture cannot time anything and keeps the
  // heuristic's first choice; plans run once before they are captured. An algorithm that fails to run is
  // passed over.
  static constexpr int kGemmSearchCount = 160;
  static constexpr int kGemmCandidates = 8;
  // Candidates timed at once after a cold start ran at other clocks than the steady state a served plan runs at:
  // in session 20 the plan's choice for the 4096 x 12288 x 3072 bias+GELU GEMM was 1.12x the best of the same
  // candidates timed again later, interleaved (kiln-gpu-bench's audit), with one screening round and no warm-up.
  static constexpr double kGemmWarmupMs = 50;
  // Three screening rounds, so that each candidate's median is a middle value (of two rounds it is the slower).
  static constexpr int kGemmScreenRounds = 3;
  // Rounds of 3 launches per candidate. A clock that ramps up while candidates are timed one after another
  // favours the last ones: interleaved rounds spread that over all of them (session 19: timed one by one, 5
  // launches each, the choice was up to 1.06x off the best in an audit).
  static constexpr int kGemmChoiceRounds = 7;

  // Each candidate's median over `rounds` interleaved rounds (the median of 3 launches each round); a candidate
  // that fails to run is +inf.
  static std::vector<double> time_candidates(const BlasLt& blas, CUstream stream, const GemmDesc& desc,
                                             const GemmArgs& args, const std::vector<GemmAlgorithm>& candidates,
                                             int rounds) {
    std::vector<std::vector<double>> samples(candidates.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < candidates.size(); ++i) {
        auto ms = blas.benchmark(desc, {candidates[i]}, {args}, stream, 3);
        samples[i].push_back(ms.ok() ? ms->front() : std::numeric_limits<double>::infinity());
      }
    }
    std::vector<double> medians;
    for (std::vector<double>& v : samples) {
      std::sort(v.begin(), v.end());
      medians.push_back(v[v.size() / 2]);
    }
    return medians;
  }

  // `disagreements` counts the faster candidates passed over because their output disagreed.
  Result<size_t> choose_gemm_algorithm(const GemmDesc& desc, const GemmArgs& args, const std::vector<GemmAlgorithm>& found,
                                       int& disagreements) {
    if (found.size() < 2) return size_t{0};
    // Warm-up: the heuristic's first choice, launched until kGemmWarmupMs of GPU time have passed.
    auto once = blas().benchmark(desc, {found[0]}, {args}, stream(), 1);
    if (once.ok() && once->front() > 0) {
      const int launches = static_cast<int>(std::min(2000.0, kGemmWarmupMs / once->front()));
      for (int i = 0; i < launches; ++i) KILN_TRY(blas().run(desc, found[0], args, stream()));
    }
    std::vector<size_t> order(found.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (found.size() > static_cast<size_t>(kGemmCandidates)) {
      const std::vector<double> screen = time_candidates(blas(), stream(), desc, args, found, kGemmScreenRounds);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return screen[a] < screen[b]; });
      order.resize(static_cast<size_t>(kGemmCandidates));
    }
    std::vector<GemmAlgorithm> finalists;
    for (size_t i : order) finalists.push_back(found[i]);
    const std::vector<double> ms = time_candidates(blas(), stream(), desc, args, finalists, kGemmChoiceRounds);
    std::vector<size_t> ranked(finalists.size());
    for (size_t i = 0; i < ranked.size(); ++i) ranked[i] = i;
    std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) { return ms[a] < ms[b]; });
    for (size_t r : ranked) {
      if (!std::isfinite(ms[r])) break;
      if (order[r] == 0 || residual_is_output(desc, args)) return order[r];
      KILN_ASSIGN_OR_RETURN(bool agrees, blas().agrees(desc, found[0], finalists[r], args, stream()));
      if (agrees) return order[r];
      ++disagreements;
    }
    return size_t{0};
  }

  Status gemm(const GemmDesc& desc, const GemmArgs& args) {
    const std::string key = desc.str();
    auto it = algorithms_.find(key);
    if (it == algorithms_.end()) {
      // A residual that is y itself cannot be run twice to compare outputs (BlasLt::agrees): the heuristic's
      // answers only, which are timed, as every candidate is, on y's running sum.
      KILN_ASSIGN_OR_RETURN(std::vector<GemmAlgorithm> found,
                            capturing_                       ? blas_.algorithms(desc, 1)
                            : residual_is_output(desc, args) ? blas_.algorithms(desc, kGemmCandidates)
                                       : blas_.algorithms(desc, kGemmSearchCount, AlgorithmSearch::neighbours));
      int disagreements = 0;
      KILN_ASSIGN_OR_RETURN(size_t best, choose_gemm_algorithm(desc, args, found, disagreements));
      it = algorithms_.emplace(key, found[best]).first;
      gemm_choices_.push_back({desc, args, std::move(found), best, disagreements});
    }
    return blas().run(desc, it->second, args, stream());
  }

 public:
  // audit_gemm_choices (cuda_backend.h): every chosen shape's candidates timed again, interleaved, `reps` rounds.
  Result<std::vector<GemmAudit>> audit_gemm_choices(int reps) {
    KILN_TRY(synchronize());
    std::vector<GemmAudit> audits;
    for (const GemmChoice& c : gemm_choices_) {
      // A choice made for a plan since released has no buffers left to time on.
      if (!live(c.args)) continue;
      GemmAudit a;
      a.desc = c.desc.str();
      a.candidates = static_cast<int>(c.candidates.size());
      a.chosen = static_cast<int>(c.chosen);
      a.disagreements = c.disagreements;
      for (const GemmAlgorithm& g : c.candidates) a.heuristic += g.heuristic_rank >= 0 ? 1 : 0;
      a.chosen_config = c.candidates[c.chosen].description;
      a.flops = 2.0 * static_cast<double>(c.desc.m) * static_cast<double>(c.desc.n) * static_cast<double>(c.desc.k);
      a.candidate_ms = time_candidates(blas_, stream_.handle(), c.desc, c.args, c.candidates, reps);
      KILN_TRY(confirm_audit(c, reps, a));
      audits.push_back(std::move(a));
    }
    return audits;
  }

  // force_gemm_choice (cuda_backend.h).
  Status force_gemm_choice(const std::string& desc, int candidate) {
    for (GemmChoice& c : gemm_choices_) {
      if (c.desc.str() != desc) continue;
      if (candidate < 0 || static_cast<size_t>(candidate) >= c.candidates.size()) {
        return make_error(ErrorCode::invalid_argument, fmt::format("GEMM {}: candidate {} of {} does not exist", desc,
                                                                   candidate, c.candidates.size()));
      }
      const GemmAlgorithm& chosen = c.candidates[static_cast<size_t>(candidate)];
      if (candidate != 0 && chosen.heuristic_rank < 0) {
        // A neighbour of the heuristic's answers runs only once it has agreed with the first answer (gemm.h).
        if (!live(c.args))
          return make_error(ErrorCode::invalid_argument, "GEMM " + desc + ": the plan that chose it has been released");
        if (residual_is_output(c.desc, c.args))
          return make_error(ErrorCode::unsupported, "GEMM " + desc + ": its residual is its output, neighbours cannot be checked");
        KILN_TRY(synchronize());
        KILN_ASSIGN_OR_RETURN(bool agrees, blas_.agrees(c.desc, c.candidates[0], chosen, c.args, stream_.handle()));
        if (!agrees)
          return make_error(ErrorCode::verify_error, fmt::format("GEMM {}: candidate {} ({}) disagrees with the "
                                                                 "heuristic's first answer", desc, candidate, chosen.description));
      }
      c.chosen = static_cast<size_t>(candidate);
      algorithms_[desc] = chosen;
      return ok_status();
    }
    return make_error(ErrorCode::invalid_argument, "no GEMM " + desc + " has been chosen by this backend");
  }

 private:
  // Whether `p` lies in a buffer this backend allocated and has not released (scale vectors and workspace
  // count: the backend owns them for its lifetime).
  bool live(const void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = buffers_.upper_bound(const_cast<void*>(p));
    if (it != buffers_.begin()) {
      --it;
      const char* base = static_cast<const char*>(it->first);
      if (static_cast<const char*>(p) < base + it->second.bytes()) return true;
    }
    for (const auto& [key, buffer] : scale_vectors_)
      if (p == buffer.data()) return true;
    return false;
  }

  // Whether every buffer of a GEMM call is still live.
  bool live(const GemmArgs& a) {
    return live(a.x) && live(a.w) && live(a.y) && (!a.bias || live(a.bias)) && (!a.residual || live(a.residual)) &&
           (!a.scale || live(a.scale)) && (!a.x_scale || live(a.x_scale)) && (!a.w_scale || live(a.w_scale));
  }

  // The GEMM shapes gemm() chose an algorithm for: its candidates and the arguments of the call that chose.
  struct GemmChoice {
    GemmDesc desc;
    GemmArgs args;
    std::vector<GemmAlgorithm> candidates;
    size_t chosen = 0;
    int disagreements = 0;
  };
  std::vector<GemmChoice> gemm_choices_;

  // The head-to-head pass of the audit (cuda_backend.h): the chosen candidate and the 3 fastest others of the
  // first pass that may run (a neighbour must agree with the heuristic's first answer, as the choice requires),
  // timed again over 3 x `reps` interleaved rounds.
  Status confirm_audit(const GemmChoice& c, int reps, GemmAudit& a) {
    constexpr size_t kOthers = 3;
    std::vector<int> order(c.candidates.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return a.candidate_ms[x] < a.candidate_ms[y]; });
    a.finalists = {a.chosen};
    for (int i : order) {
      if (a.finalists.size() > kOthers) break;
      if (i == a.chosen || !std::isfinite(a.candidate_ms[static_cast<size_t>(i)])) continue;
      const GemmAlgorithm& g = c.candidates[static_cast<size_t>(i)];
      if (g.heuristic_rank < 0) {
        if (residual_is_output(c.desc, c.args)) continue;
        KILN_ASSIGN_OR_RETURN(bool agrees, blas_.agrees(c.desc, c.candidates[0], g, c.args, stream_.handle()));
        if (!agrees) {
          a.refused.push_back(i);
          continue;
        }
      }
      a.finalists.push_back(i);
    }
    std::vector<GemmAlgorithm> algorithms;
    for (int i : a.finalists) algorithms.push_back(c.candidates[static_cast<size_t>(i)]);
    a.finalist_ms = time_candidates(blas_, stream_.handle(), c.desc, c.args, algorithms, 3 * reps);
    a.best = a.finalists[static_cast<size_t>(std::min_element(a.finalist_ms.begin(), a.finalist_ms.end()) -
                                             a.finalist_ms.begin())];
    return ok_status();
  }

  // Whether cuBLASLt's heuristic offers any algorithm for `desc` (asked once per form): the GEMM forms only some
  // configurations have (the per-feature alpha epilogue, fast FP8 accumulation).
  Status offered(const GemmDesc& desc) const {
    auto [it, fresh] = offered_.try_emplace(desc.str(), ok_status());
    if (fresh) {
      auto found = blas_.algorithms(desc, 1);
      if (!found.ok()) it->second = found.error();
    }
    return it->second;
  }

  // The GEMM of linear(x, w, [b], [scale], [residual]) on these (inferred) input types.
  static Result<GemmDesc> linear_desc(std::span<const TensorType> in, const Attrs& attrs) {
    const Shape& x = in[0].shape;
    GemmDesc desc;
    desc.k = x.back();
    desc.m = desc.k > 0 ? numel(x) / desc.k : 0;
    desc.n = in[1].shape[0];
    desc.input = in[0].dtype;
    desc.output = in[0].dtype;
    const bool gelu = attrs.get_string("activation", "none") == "gelu_tanh";
    const ops::LinearInputs at = ops::linear_inputs(in.size(), attrs);
    const bool bias = at.bias >= 0;
    if (gelu && !bias)
      return make_error(ErrorCode::unsupported, "the CUDA backend's linear has GELU only with a bias (cuBLASLt GELU_BIAS)");
    desc.epilogue = bias ? (gelu ? GemmEpilogue::bias_gelu : GemmEpilogue::bias) : GemmEpilogue::none;
    desc.scale = at.scale >= 0;
    desc.residual = at.residual >= 0;
    return desc;
  }

  Status run_linear(const Attrs& attrs, std::span<const TensorType> types, std::span<const DeviceTensor> in,
                    const DeviceTensor& out) {
    KILN_ASSIGN_OR_RETURN(GemmDesc desc, linear_desc(types, attrs));
    desc.output = out.type.dtype;
    const ops::LinearInputs at = ops::linear_inputs(in.size(), attrs);
    const bool bias = at.bias >= 0;
    desc.x_ld = in[0].pitch;
    desc.y_ld = out.pitch;
    GemmArgs args{.x = in[0].data, .w = in[1].data, .y = out.data, .bias = bias ? in[static_cast<size_t>(at.bias)].data : nullptr};
    if (desc.scale) args.scale = static_cast<const float*>(in[static_cast<size_t>(at.scale)].data);
    if (desc.residual) args.residual = in[static_cast<size_t>(at.residual)].data;
    return gemm(desc, args);
  }

  // The GEMM of scaled_linear(xq, xs, wq, ws, [b]) on these input types; `out` is its output dtype. A per-tensor
  // x scale with per-channel w scales runs as channel x channel (run_scaled_linear spreads x's scale).
  static Result<GemmDesc> scaled_linear_desc(std::span<const TensorType> in, const Attrs& attrs, DType out) {
    KILN_ASSIGN_OR_RETURN(GemmScaling scaling, scaling_of(in));
    const Shape& x = in[0].shape;
    GemmDesc desc;
    desc.k = x.back();
    desc.m = desc.k > 0 ? numel(x) / desc.k : 0;
    desc.n = in[2].shape[0];
    desc.input = in[0].dtype;
    desc.output = out;
    desc.scaling = scaling == GemmScaling::tensor_x_channel_w ? GemmScaling::channel : scaling;
    desc.fast_accumulation = attrs.get_string("accumulation", "exact") == "fast";
    const bool gelu = attrs.get_string("activation", "none") == "gelu_tanh";
    const bool bias = in.size() > 4;
    if (gelu && !bias)
      return make_error(ErrorCode::unsupported, "the CUDA backend's scaled_linear has GELU only with a bias");
    desc.epilogue = bias ? (gelu ? GemmEpilogue::bias_gelu : GemmEpilogue::bias) : GemmEpilogue::none;
    return desc;
  }

  Status run_scaled_linear(const Attrs& attrs, std::span<const DeviceTensor> in, const DeviceTensor& out) {
    std::vector<TensorType> types;
    for (const DeviceTensor& t : in) types.push_back(t.type);
    KILN_ASSIGN_OR_RETURN(GemmScaling scaling, scaling_of(types));
    KILN_ASSIGN_OR_RETURN(GemmDesc desc, scaled_linear_desc(types, attrs, out.type.dtype));
    const bool bias = in.size() > 4;
    const void* x_scale = in[1].data;
    if (scaling == GemmScaling::tensor_x_channel_w) {
      // cuBLASLt on sm_90 takes no scalar-times-vector mix: spread x's one scale over its m rows.
      KILN_ASSIGN_OR_RETURN(x_scale, broadcast_scale(in[1].data, desc.m));
    }
    GemmArgs args{.x = in[0].data,
                  .w = in[2].data,
                  .y = out.data,
                  .bias = bias ? in[4].data : nullptr,
                  .x_scale = static_cast<const float*>(x_scale),
                  .w_scale = static_cast<const float*>(in[3].data)};
    return gemm(desc, args);
  }

  Status run_attention(const Attrs& attrs, std::span<const DeviceTensor> in, const DeviceTensor& out) {
#ifdef KILN_HAS_CUDNN
    // Each operand head-major [b, h, s, d] or token-major [b, s, h, d] (its *_layout attribute): cuDNN reads and
    // writes both through strides, so neither costs a transpose.
    bool tm[4];
    for (int i = 0; i < 4; ++i) tm[i] = ops::attention_token_major(attrs, i);
    const Shape q = ops::attention_head_major_shape(in[0].type.shape, tm[0]);
    const Shape k = ops::attention_head_major_shape(in[1].type.shape, tm[1]);
    AttentionDesc desc{.batch = q[0], .heads = q[1], .kv_heads = k[1], .q_tokens = q[2], .kv_tokens = k[2], .head_dim = q[3],
                       .dtype = in[0].type.dtype, .causal = attrs.get_int("causal", 0) != 0,
                       .scale = attrs.get_float("scale", 0.0)};
    auto strides = [](bool token_major, int64_t heads, int64_t tokens, int64_t dim) {
      return token_major ? AttentionDesc::token_major(heads, tokens, dim) : AttentionDesc::head_major(heads, tokens, dim);
    };
    desc.q_stride = strides(tm[0], desc.heads, desc.q_tokens, desc.head_dim);
    desc.k_stride = strides(tm[1], desc.kv_heads, desc.kv_tokens, desc.head_dim);
    desc.v_stride = strides(tm[2], desc.kv_heads, desc.kv_tokens, desc.head_dim);
    desc.o_stride = strides(tm[3], desc.heads, desc.q_tokens, desc.head_dim);
    // A pitched operand (a column window of a QKV GEMM's output, o written into a concat): its storage-order
    // strides, pitched, put in [b, h, s, d] order.
    std::array<int64_t, 4>* bhsd[4] = {&desc.q_stride, &desc.k_stride, &desc.v_stride, &desc.o_stride};
    std::string pitches;
    for (int i = 0; i < 4; ++i) {
      const DeviceTensor& t = i < 3 ? in[static_cast<size_t>(i)] : out;
      if (!t.pitched()) continue;
      const std::vector<int64_t> st = backend::pitched_strides(t.type.shape, t.row, t.pitch);
      *bhsd[i] = tm[i] ? std::array<int64_t, 4>{st[0], st[2], st[1], st[3]} : std::array<int64_t, 4>{st[0], st[1], st[2], st[3]};
      pitches += fmt::format(" {}:{}/{}", i, t.row, t.pitch);
    }
    // cuDNN's handle is bound to one stream: one plan per lane.
    const std::string key = desc.str() + fmt::format(" scale={} layouts={}{}{}{}{} lane={}", desc.scale, tm[0], tm[1],
                                                     tm[2], tm[3], pitches, lane_);
    auto it = attention_.find(key);
    if (it == attention_.end()) {
      KILN_ASSIGN_OR_RETURN(CudnnAttention created, CudnnAttention::create(desc, stream()));
      KILN_ASSIGN_OR_RETURN(DeviceBuffer workspace,
                            DeviceBuffer::allocate(std::max<int64_t>(1, created.workspace_bytes())));
      it = attention_.emplace(key, AttentionPlan{std::move(created), std::move(workspace)}).first;
    }
    return it->second.attention.run(in[0].data, in[1].data, in[2].data, out.data, it->second.workspace.data());
#else
    return make_error(ErrorCode::unsupported, "this build has no cuDNN attention");
#endif
  }

  static constexpr int kLanes = 2;
  CUstream stream_of(int lane) const {
    return lane == 0 ? stream_.handle() : lane_streams_[static_cast<size_t>(lane - 1)].handle();
  }
  CUstream stream() const { return stream_of(lane_); }  // the current lane's
  const BlasLt& blas() const { return lane_ == 0 ? blas_ : lane_blas_[static_cast<size_t>(lane_ - 1)]; }

  Context context_;
  Stream stream_;
  bool capturing_ = false;
  BlasLt blas_;
  int lane_ = 0;
  std::vector<Stream> lane_streams_;  // lanes 1..
  std::vector<BlasLt> lane_blas_;     // lanes 1..
  std::vector<Event> events_;         // record_event / wait_event, by number
  backend::DeviceInfo info_;
  std::mutex mutex_;
  std::map<void*, DeviceBuffer> buffers_;
  std::map<std::string, std::vector<char>> cubins_;
  std::map<std::string, GemmAlgorithm> algorithms_;
  mutable std::map<std::string, Status> offered_;  // offered(): whether cuBLASLt has an algorithm for the form
  std::unique_ptr<Module> helpers_;
  std::optional<StreamTimer> timer_;  // for TimingOptions::hold, made on first use
  // By lane and m; one per shape and lane is enough: a lane's GEMMs run in its stream's order.
  std::map<std::pair<int, int64_t>, DeviceBuffer> scale_vectors_;
#ifdef KILN_HAS_CUDNN
  struct AttentionPlan {
    CudnnAttention attention;
    DeviceBuffer workspace;
  };
  std::map<std::string, AttentionPlan> attention_;
#endif
};

}  // namespace

Result<std::unique_ptr<backend::Backend>> make_cuda_backend() {
  KILN_ASSIGN_OR_RETURN(Context context, Context::open(0));
  KILN_ASSIGN_OR_RETURN(Stream stream, Stream::create());
  KILN_ASSIGN_OR_RETURN(BlasLt blas, BlasLt::create());
  auto backend = std::make_unique<CudaBackend>(std::move(context), std::move(stream), std::move(blas));
  KILN_TRY(backend->measure());
  return std::unique_ptr<backend::Backend>(std::move(backend));
}

Result<std::vector<GemmAudit>> audit_gemm_choices(backend::Backend& cuda, int reps) {
  auto* b = dynamic_cast<CudaBackend*>(&cuda);
  if (b == nullptr) return make_error(ErrorCode::invalid_argument, "audit_gemm_choices needs the CUDA backend");
  return b->audit_gemm_choices(std::max(1, reps));
}

Status force_gemm_choice(backend::Backend& cuda, const std::string& desc, int candidate) {
  auto* b = dynamic_cast<CudaBackend*>(&cuda);
  if (b == nullptr) return make_error(ErrorCode::invalid_argument, "force_gemm_choice needs the CUDA backend");
  return b->force_gemm_choice(desc, candidate);
}

void register_cuda_backend() { backend::register_backend_factory("cuda", make_cuda_backend); }

}  // namespace kiln::cuda
