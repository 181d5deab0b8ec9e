// What the parent (verify.cpp, bench.cpp) and the worker process (worker.cpp) exchange through the scratch
// directory. The parent writes request.json and the trial inputs; the worker writes progress.txt (one line
// before and after every kernel call, so a crash can be placed), results.bin (what each call left behind,
// guard zones included) and, when timing, samples.txt. The worker never sees seeds or reference values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/ops.h"

namespace kiln::harness {

enum class WorkerMode { verify, bench };

// Where the candidate's buffers live. cuda: the worker (kiln-gpu-worker) mirrors its host buffers, guard zones
// and poison included, into device memory around every call and hands the kernel device pointers; the
// checks in the parent are the same.
enum class WorkerDevice { cpu, cuda };

// How the worker times (bench.h documents the protocol). One library: a plain benchmark; two: an interleaved
// A/B comparison on the same buffers.
struct BenchParams {
  double warmup_seconds = 0.1;
  double min_seconds = 0.1;
  double max_seconds = 1.0;
  int min_samples = 15;
  int max_samples = 100000;
  double sample_seconds = 2e-4;  // each sample batches calls until it lasts about this long
  int64_t slots = 1;             // rotating copies of the input and output buffers
};

struct WorkerRequest {
  WorkerMode mode = WorkerMode::verify;
  std::vector<std::string> libraries;  // absolute paths of candidate shared objects
  std::vector<TensorType> inputs;
  std::vector<TensorType> outputs;
  int64_t guard_bytes = 4096;        // before and after every output; a multiple of 64
  int trials = 0;                    // verify: input sets input_<t>.bin; bench: input_0.bin
  bool drop_privileges = true;       // a worker started as root runs candidate code as nobody
  int64_t memory_bytes = 1ll << 30;  // what the candidate may allocate beyond the worker's own buffers
  WorkerDevice device = WorkerDevice::cpu;
  BenchParams bench;
};

std::string request_to_json(const WorkerRequest& request);
Result<WorkerRequest> request_from_json(const std::string& text);

inline constexpr const char* kRequestFile = "request.json";
inline constexpr const char* kProgressFile = "progress.txt";
inline constexpr const char* kResultsFile = "results.bin";
inline constexpr const char* kSamplesFile = "samples.txt";
std::string trial_input_file(int trial);  // "input_<t>.bin": the inputs of trial t, concatenated in order

// Worker exit codes besides 0. A harness code while a kernel call is in flight is still the candidate's doing.
inline constexpr int kWorkerExitBadRequest = 2;    // request or scratch files unusable (harness fault)
inline constexpr int kWorkerExitLoadFailed = 3;    // dlopen/dlsym of the candidate failed
inline constexpr int kWorkerExitKernelFailed = 4;  // kiln_kernel returned nonzero
inline constexpr int kWorkerExitSetupFailed = 5;   // privileges, limits or buffers (harness fault)
inline constexpr int kWorkerExitMemoryLimit = 6;   // sanitizer builds: the RSS watchdog fired
inline constexpr int kWorkerExitCalledExit = 7;    // the candidate called exit()

// One record of results.bin: what one call left behind. For every output: front guard, output, back guard;
// then every input as it was after the call. Verify writes records (trial, call) at index 2 * trial + call;
// bench writes one record per library, of a checked call made after the timing.
struct RecordLayout {
  std::vector<size_t> output_offsets;  // where each output's front guard starts
  std::vector<size_t> input_offsets;
  size_t bytes = 0;
};
RecordLayout record_layout(const WorkerRequest& request);

// NaN fill (a distinct pattern per call, 0 or 1, so an element left unwritten is recognisable in both);
// integer dtypes get a byte pattern.
void fill_poison(DType dtype, std::byte* data, int64_t elements, int call);
bool is_poison(DType dtype, const std::byte* element, int call);
std::byte guard_byte(size_t offset);  // the guard zone pattern at byte `offset` of a zone

}  // namespace kiln::harness
