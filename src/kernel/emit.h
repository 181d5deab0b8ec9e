// The C-style emitter shared by every backend. It turns a Kernel (kernel_ir.h) plus a Schedule into source
// text; what differs between targets is a Dialect: how a kernel is entered (CPU: the kiln_tensor ABI over a
// range of rows; CUDA: a __global__ function with one block per `rows_per_task` rows), how the loops over a
// row are spread (CPU: plain loops with `omp simd` on the innermost one; CUDA: the innermost loop strided
// over the threads of a row), where row buffers live (CPU: stack or heap arrays; CUDA: shared memory), and
// how a reduction is finished (CPU: nothing; CUDA: warp shuffles and a shared-memory exchange). Expressions,
// index arithmetic, dtype conversions (bf16, f16, fp8 e4m3/e5m2, round-to-nearest-even like the reference)
// and the stage structure are emitted once, here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernel/kernel_ir.h"
#include "kernel/schedule.h"

namespace kiln::kernel {

// One emitted kernel of a module.
struct EmittedKernel {
  std::string entry;  // CPU: `entry` (kiln ABI, all rows) and `entry_rows` (a row range); CUDA: the __global__
  int64_t rows = 0;
  Schedule schedule;
  // CUDA launch shape: grid x blocks of (threads_per_row, rows_per_task) threads.
  int64_t grid = 1;
  int block_x = 1, block_y = 1;
  int n_inputs = 0, n_outputs = 0;
};

struct EmittedModule {
  Target target = Target::cpu;
  std::string source;
  std::vector<EmittedKernel> kernels;
};

struct KernelToEmit {
  const Kernel* kernel;
  Schedule schedule;
  std::string entry;  // a C identifier
};

// Emits every kernel into one translation unit (one compile for a whole plan). Schedules are checked with
// can_implement first; the error names the kernel.
Result<EmittedModule> emit_module(const std::vector<KernelToEmit>& kernels, Target target);

// A single CPU kernel as a harness candidate: defines `kiln_kernel` (kernel_abi.h), single-threaded, so the
// harness can verify and time it (harness/verify.h, harness/bench.h).
Result<std::string> emit_harness_candidate(const Kernel& kernel, const Schedule& schedule);

// How CUDA passes a kernel's tensors: inputs then outputs, one pointer each, in kernel order.
std::string cuda_parameter_doc();

}  // namespace kiln::kernel
