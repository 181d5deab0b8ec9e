// Schedule: how a kernel's rows map onto the machine, apart from what it computes (kernel_ir.h). Serializable
// (JSON), checked by can_implement before any code is emitted, and enumerated per kernel by schedule_space.
//
//   rows_per_task    rows one task (CPU: one pool work item; CUDA: one thread block) handles
//   threads          CPU: pool workers a launch uses (1: the calling thread only, as the harness requires)
//   threads_per_row  CUDA: threads cooperating on one row (part of a warp, a warp or a block; below 32 a warp
//                    holds several rows); CPU: must be 1
//   vector_width     elements per vector step of the innermost loop (CPU: `omp simd simdlen`; 1: no pragma)
//   cache_row        keep values read several times in a row-local buffer (registers / shared memory on
//                    CUDA) instead of recomputing them from memory (CPU default: off when recomputing is a
//                    few loads, conversions and adds)
//   unroll           unroll factor of the innermost loop
//   registers        CUDA: a row buffer whose every element is read only by the thread that wrote it (the
//                    same vector step of a row of a fixed number of steps) lives in that thread's registers,
//                    not shared memory: no barrier, no bank to share (cuda_row_buffers)
//   tables           CPU: every value that is a function of one bf16/f16 element alone and costs a
//                    transcendental (GELU, SiLU, exp of a loaded value) is read from a 65536-entry table
//                    the module fills once per process with the exact-form functions (tabulated_exprs)
//   stream_stores    CPU: bf16 output rows are written with non-temporal stores, which skip reading the
//                    destination's lines into the cache first (for outputs the cache cannot hold anyway)
//   gathers          CPU, with tables: a row's table lookups go through the vector gather instruction
//                    (AVX-512's; elsewhere one load an element), a block of the row at a time
//                    (kiln_gather_f32 / kiln_gather_u16), instead of one scalar load an element
//   pairs            CPU: a stage's loop runs over 32-bit words of two bf16 elements, which convert to and
//                    from f32 with a shift and a mask (emit_cpu.h, pair_plan)
//   moments          CPU: a mean and the second central moment about it (central_moment_of: layernorm's mean and
//                    variance) accumulate in one pass over the row instead of two: each lane sums its elements'
//                    deviations from its first element and their squares, and the lanes combine as Chan et al.'s
//                    pairwise update, so no sum of squares is cancelled against a large mean
//   row_loop         CUDA: 1, a block per task of rows_per_task rows; otherwise fewer blocks that take the tasks
//                    in turns (block b: tasks b, b + grid, ...): row_loop tasks a block, or 0, as many blocks as
//                    the device holds at once (the backend sets the grid from the kernel's occupancy). In a kernel
//                    with several passes over a row, the first pass's vector loads of the block's next task are
//                    issued into registers as soon as this task's first pass has read them, so they are in flight
//                    while this task reduces and stores
//   early_loads      CUDA: in a kernel with several passes over a row, a later pass's 16-byte loads that depend
//                    only on the row and the vector step (a modulation's scale and shift, a norm's weight) are
//                    issued into registers before the row's first reduction, so their latency overlaps the
//                    exchanges instead of following them (at most 8 words a thread). The CUDA default where a
//                    row's reduction crosses warps (more than 32 threads a row)
//   min_blocks       CUDA: blocks an SM should hold at once (__launch_bounds__' second argument: the compiler keeps
//                    registers within 64K / (threads x min_blocks), spilling past that); 0: no bound
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernel/kernel_ir.h"

namespace kiln::kernel {

struct Schedule {
  int64_t rows_per_task = 1;
  int threads = 1;
  int threads_per_row = 1;
  int vector_width = 8;
  bool cache_row = true;
  int unroll = 1;
  bool registers = true;
  bool tables = false;
  bool stream_stores = false;
  bool pairs = false;
  bool moments = false;
  bool gathers = false;
  int row_loop = 1;
  int min_blocks = 0;
  bool early_loads = false;
  bool operator==(const Schedule& other) const = default;
};

enum class Target { cpu, cuda };
const char* target_name(Target target);

std::string schedule_to_json(const Schedule& schedule);
// Unknown keys, wrong kinds and malformed text are parse errors naming the field.
Result<Schedule> schedule_from_json(const std::string& text);
std::string schedule_to_string(const Schedule& schedule);  // "rows=4 threads=2 tpr=1 vec=8 cache unroll=1"

// CUDA: floats one row buffer of `local_size` elements takes in shared memory under `schedule`. With vectors
// the buffer is stored permuted (element lane * vec + j of each block of threads_per_row * vec lives at
// j * threads_per_row + lane), so the threads of a warp touch consecutive words at every vector step instead
// of every vec-th word (a vec-way bank conflict); the size is rounded up to whole blocks. Rows that share a
// warp (threads_per_row < 32) are `threads_per_row` words apart beyond that, so they fall in other banks too.
// A one-element buffer (a reduction's value) stays one float.
int64_t cuda_row_buffer_floats(int64_t local_size, const Schedule& schedule);

// A reduction whose reduced axes are not the trailing ones: accumulated into its buffer by one thread.
bool general_reduction(const Stage& stage);
// CUDA: how many of the kernel's row reductions exchange partial results through shared memory when a row
// spans several warps (the reductions that are not general ones). Each has its own slot of a word per warp
// (emit.cpp's kiln_red), so one barrier orders its writes before its reads and no second one is needed before
// the next reduction writes (one inside a loop writes its slot again and keeps a second). Counted among the
// stages before `before` (default: all): a stage's slot is the count before it.
int reduction_exchanges(const Kernel& kernel, size_t before = SIZE_MAX);

// CUDA: where each stage's row-local buffer lives under `schedule`. `registers` holds a stage's elements in
// an array per thread, indexed by the vector step and the element within it, both fixed once the step loops
// are unrolled: only for a one-axis stage stored at its loop point whose readers each read, at every loop
// point, an element of their own vector step (the RoPE pair partner included), at most 64 floats a thread
// in all; a reduction's one value per row, which every thread of the row holds after the exchange, too.
enum class RowBuffer : uint8_t { none, shared, registers };
std::vector<RowBuffer> cuda_row_buffers(const Kernel& kernel, const Schedule& schedule);
// The stage whose row `stage` copies element for element (its expression reads that stage at its own loop
// point: the f32 cast of a row already kept in f32), or -1. A copy of a row in registers is that row.
int row_copy_of(const Kernel& kernel, int stage);

// The stage's vector loop on CUDA, when it is written as a fixed number of unrolled steps of
// `vector_width` elements per thread: its variable (the innermost spread axis; for a reduction, of the
// reduced axes) and extent. The emitter writes exactly these loops with a step counter kiln_it.
struct UnrolledVectorLoop {
  int var = -1;
  int64_t extent = 0;
};
std::optional<UnrolledVectorLoop> unrolled_vector_loop(const Stage& stage, const Schedule& schedule);

// A vector loop over `var` in steps of `width` elements from multiples of `width`: var = width * s + j, with
// two variables past the kernel's own, the step s (vector_step_var) and the element j in it (vector_lane_var).
inline int vector_step_var(const Kernel& kernel) { return static_cast<int>(kernel.vars.size()); }
inline int vector_lane_var(const Kernel& kernel) { return static_cast<int>(kernel.vars.size()) + 1; }
// The kernel's variable extents, and those of the step and element of `var` split by `width`.
VarExtents vector_split_extents(const Kernel& kernel, int var, int width);
// `e` with `var` written as width * s + j, simplified.
IndexExpr split_vector_var(const Kernel& kernel, const IndexExpr& e, int var, int width);
// Where a read at `offset` by such a loop lands within the reader's own step: an expression in j alone with
// values in 0..width-1, or nullopt when the element may lie in another step.
std::optional<IndexExpr> offset_within_vector_step(const Kernel& kernel, const IndexExpr& offset, int var, int width);
// Where a read at `offset` by such a loop lands when every element j of a step reads within one aligned span
// of `span` elements: the span's start (without j, a multiple of `span`) and the place in it (j alone,
// 0..span-1). RoPE's cos/sin at j/2 + 4s + 64t: span 4 from 4s + 64t; the pair's weight 2(j/2) + 8s: span 8.
struct VectorSpan {
  IndexExpr base;
  IndexExpr within;
};
std::optional<VectorSpan> offset_in_vector_span(const Kernel& kernel, const IndexExpr& offset, int var, int width,
                                                int64_t span);

// Whether `schedule` is valid for `kernel` on `target`; the error names the field and the limit.
Status can_implement(const Kernel& kernel, const Schedule& schedule, Target target);

// A sensible default for the kernel on the target (what runs before tuning). On the CPU it reads tables where
// a call evaluates at least kTableMinElements tabulable values, streams its stores where the kernel moves
// more bytes than `cache_bytes` (the last-level cache; 0: never) in rows of at least kStreamMinRow elements,
// and pairs (reads no table, streams nothing) in rows of at least kPairMinRow elements. It takes a row's mean and
// variance in one pass (moments) wherever the kernel has them, and reads tables by gathers where this machine has
// AVX-512 (vector_gathers_pay).
inline constexpr int64_t kTableMinElements = 65536;
inline constexpr int64_t kTaskElements = 131072;  // the CPU default's rows a task: about this many elements
inline constexpr int64_t kStreamMinRow = 2048;
// Pairs: q/k-head rows of 128 measured 0.41 -> 0.375 ns an element from cache and 17.4 -> 19.6 GB/s at 2 threads
// paired once a reduction's lanes were combined as vectors (session 26; before, 0.095 -> 0.106 ms slower).
inline constexpr int64_t kPairMinRow = 128;
Schedule default_schedule(const Kernel& kernel, Target target, int cores, int64_t cache_bytes = 0);
// Whether this machine's vector gather beats one load an element for a table lookup: where it has AVX-512. On a
// 2-core Xeon with AVX-512 (session 27) gathers took SiLU-by-table 0.414 -> 0.244 ns an element and GELU's bf16
// bits 0.216 -> 0.148 from cache; on an AVX2 EPYC (Zen 2) an AVX2 gather was the slower (0.64 vs 0.40, session 26).
bool vector_gathers_pay();

// The schedules worth trying for the kernel at its exact shapes, every one passing can_implement.
std::vector<Schedule> schedule_space(const Kernel& kernel, Target target, int cores);

}  // namespace kiln::kernel
