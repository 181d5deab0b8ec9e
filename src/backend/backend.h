// The backend interface: the narrow set of calls every device implements (DESIGN.md decision 6). A backend
// describes its device, owns device memory, compiles generated source (kernel/emit.h) into loaded kernels,
// launches them, runs library ops (GEMMs, attention) and times work. `supports` says, per op and types,
// whether the backend can run it at all; an unsupported op is reported as an Error naming it, never a crash.
//
// Tensors on a device are dense and row-major (DeviceTensor); views are expressed by pointing into another
// tensor's memory (a contiguous window) or are loaded through index maps inside generated kernels.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "kernel/emit.h"

namespace kiln::backend {

struct DeviceInfo {
  std::string kind;  // "cpu" | "cuda"
  std::string name;  // "Intel(R) Xeon(R) Processor" / "NVIDIA H200"
  int compute_units = 0;               // cores / SMs
  int64_t cache_bytes = 0;             // last-level cache / L2
  int64_t memory_bytes = 0;            // device memory
  double bandwidth_bytes_per_second = 0;  // measured: bytes read + written per second by a large copy (CPU: on
                                          // every thread the backend's kernels use)
  double flops_per_second = 0;            // measured: f32 (CPU) / bf16 (CUDA) GEMM rate
  // The toolchain the device's results depend on; the knowledge base keys recipes by it (kb/fingerprint.h).
  std::string driver;    // "" on the CPU; the CUDA driver version, "13.0"
  std::string compiler;  // what compiles generated kernels: "g++ (Debian 12.2.0-14) 12.2.0", "nvrtc 12.8"
  std::vector<std::pair<std::string, std::string>> libraries;  // {"openblas", "0.3.21"}, {"cublaslt", "13.0.0"}
};

// A row-major tensor in device memory. Does not own its memory. Dense unless `pitch` is set: then its
// elements, in row-major order, come in rows of `row` contiguous elements that start `pitch` elements apart
// (a column window of a wider matrix: the v columns of a QKV GEMM's output, one piece of a concat written in
// place). Only library operands are ever pitched, and only where the backend's takes_pitched says yes.
struct DeviceTensor {
  void* data = nullptr;
  TensorType type;
  int64_t row = 0, pitch = 0;
  size_t bytes() const { return type_bytes(type); }  // of the elements, not of the window's span
  bool pitched() const { return pitch != 0; }
};

// Element strides of a pitched tensor: `dense` (the strides of `shape` row-major, or of the layout an op
// reads it in) with every stride of `row` or more scaled from rows of `row` to rows of `pitch`. Empty when
// `row` is not a product of trailing extents of `shape` (a row would cut an axis), which no stride can say.
std::vector<int64_t> pitched_strides(const Shape& shape, int64_t row, int64_t pitch);

// A compiled module: the kernels of one emitted source, loaded and ready to launch.
class LoadedModule {
 public:
  virtual ~LoadedModule() = default;
  virtual int kernel_count() const = 0;
  virtual const kernel::EmittedKernel& kernel(int index) const = 0;
};

struct TimingOptions {
  int warmup = 2;
  int repetitions = 10;
  // Keep the host's launch latency out of each sample (a GPU is kept busy while the work is enqueued,
  // cuda/timer.h): for kernels and library calls timed alone. Off, each sample starts from an idle device, as a
  // peer times its calls. The CPU runs work as it is launched and has no such latency to keep out.
  bool hold = false;
};

struct Timing {
  double median_seconds = 0;
  double min_seconds = 0;
  int repetitions = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const DeviceInfo& device() const = 0;
  virtual kernel::Target target() const = 0;  // the emitter dialect it compiles

  // Device memory. allocate zero-fills; release accepts what allocate returned (once).
  virtual Result<DeviceTensor> allocate(const TensorType& type) = 0;
  virtual void release(DeviceTensor& tensor) = 0;
  virtual Status copy_to_device(const Tensor& host, const DeviceTensor& device) = 0;
  virtual Result<Tensor> copy_to_host(const DeviceTensor& device) = 0;
  virtual Status copy(const DeviceTensor& from, const DeviceTensor& to) = 0;

  // Source (from kernel::emit_module for this backend's target) -> loaded kernels. Compile errors come back
  // with the compiler's log.
  virtual Result<std::shared_ptr<LoadedModule>> compile(const kernel::EmittedModule& module) = 0;
  // Runs kernel `index` of `module` on tensors of exactly the kernel's types, inputs then outputs in kernel
  // order; a type mismatch is an Error naming the tensor.
  virtual Status launch(const LoadedModule& module, int index, std::span<const DeviceTensor> inputs,
                        std::span<const DeviceTensor> outputs) = 0;

  // Whether the backend can run `op` on these input types (as a library call or inside generated kernels).
  virtual Status supports(Op op, std::span<const TensorType> inputs, const Attrs& attrs) const = 0;
  // Whether run_library(op) takes operand `operand` (an input index, or -1 for the output) pitched with rows
  // of `row` elements `pitch` apart (DeviceTensor). Plans place column windows and concat pieces in place
  // only where this says yes; otherwise they copy.
  virtual bool takes_pitched(Op /*op*/, std::span<const TensorType> /*inputs*/, const Attrs& /*attrs*/,
                             int /*operand*/, int64_t /*row*/, int64_t /*pitch*/) const {
    return false;
  }
  // `supports` as the pipeline's passes ask it (passes::SupportsFn); the backend must outlive the function.
  std::function<Status(Op, std::span<const TensorType>, const Attrs&)> supports_fn() const {
    return [this](Op op, std::span<const TensorType> inputs, const Attrs& attrs) { return supports(op, inputs, attrs); };
  }
  // Library ops: matmul, linear, scaled_linear, attention (and gather). Outputs are allocated by the caller
  // with the types inference gives.
  virtual Status run_library(Op op, const Attrs& attrs, std::span<const DeviceTensor> inputs,
                             std::span<const DeviceTensor> outputs) = 0;

  // Lanes: independent queues of work on the device (CUDA streams). Launches, library calls and copies go to
  // the current lane. `record_event(e)` marks event e (a number >= 0, reused freely) at the point the current
  // lane has reached; `wait_event(e)` makes work launched on the current lane from now on wait for what e
  // marked (under capture, a graph edge). A backend that runs work as it is launched (the CPU) has one lane
  // and nothing to wait for. Lane 0 is where work goes outside a plan's steps.
  virtual int lanes() const { return 1; }
  virtual Status use_lane(int lane) {
    if (lane == 0) return ok_status();
    return make_error(ErrorCode::invalid_argument, "this backend has one lane");
  }
  virtual Status record_event(int /*event*/) { return ok_status(); }
  virtual Status wait_event(int /*event*/) { return ok_status(); }

  // Waits for all launched work.
  virtual Status synchronize() = 0;
  // Times `work` (which launches device work) on the device's own clock, after warm-up.
  virtual Result<Timing> time(const std::function<Status()>& work, const TimingOptions& options = {}) = 0;
  // Records `work` (launches only: no host synchronization, no allocation) once and returns what replays it
  // as deployed: a CUDA graph on GPUs; on the CPU, `work` itself.
  virtual Result<std::function<Status()>> capture(const std::function<Status()>& work) { return work; }
};

// "cpu" (always) or another compiled-in backend; the error lists the available names.
Result<std::unique_ptr<Backend>> make_backend(const std::string& name);

// Backends built as their own libraries (the CUDA backend, kiln_cuda) register here at program start, so that
// the core library never links them.
using BackendFactory = std::function<Result<std::unique_ptr<Backend>>()>;
void register_backend_factory(const std::string& name, BackendFactory factory);

}  // namespace kiln::backend
