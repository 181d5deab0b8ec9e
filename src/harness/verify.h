// The verifier: runs a compiled candidate in a worker on fresh inputs and decides its outcome class. The
// parent owns everything that decides: the secret seed, the inputs, the reference, the comparison. The
// worker only reports what the candidate's calls left behind (worker_protocol.h).
//
// Per trial (distributions interleaved: normal, wide, normal, wide, ...) the candidate is called twice on
// identical inputs, each time with outputs NaN-poisoned in a different pattern, guard zones before and after
// every output, and different stack and heap fills. All trials run in one worker process, one after another,
// so a kernel that returns what it computed in an earlier call is caught. Checks, in order of severity over
// all trials: guard zones intact (else wrote-out-of-bounds), inputs unchanged (mutated-input), every output
// element written (wrong-result), the two calls bitwise equal (nondeterministic), NaN/Inf positions as in the
// reference (nan-mismatch), error within the tolerance policy or exact when claimed (wrong-result).
#pragma once

#include <string>
#include <vector>

#include "harness/compile.h"
#include "harness/inputs.h"
#include "harness/outcome.h"
#include "harness/task.h"
#include "harness/worker_protocol.h"

namespace kiln::harness {

struct WorkerOptions {
  std::string worker_path;  // empty: default_worker_path(device)
  WorkerDevice device = WorkerDevice::cpu;  // cuda: kernels get device pointers (kiln-gpu-worker)
  double wall_seconds = 10;
  // What a candidate may allocate beyond the worker's own buffers: an address-space limit, or in sanitizer
  // builds an RSS watchdog (worker.h).
  int64_t memory_bytes = 1ll << 30;
  bool drop_privileges = true;
  int64_t guard_bytes = 4096;
  std::string scratch_root;   // empty: the system temp dir
  bool keep_scratch = false;  // leave the scratch dir (request, inputs, results) for debugging
};

struct VerifyOptions {
  int trials_per_distribution = 2;
  std::vector<Distribution> distributions = {Distribution::normal, Distribution::wide};
  TolerancePolicy tolerance;
  WorkerOptions worker;
  uint64_t seed = 0;  // 0: a fresh secret per run; else fixed, to reproduce a recorded outcome
};

CandidateOutcome verify_candidate(const KernelTask& task, const std::string& library_path,
                                  const VerifyOptions& options = {});

// Compile, then verify when it compiled; the outcome is the first that is not a success.
CandidateOutcome evaluate_candidate(const KernelTask& task, const std::string& source,
                                    const CompileOptions& compile = {}, const VerifyOptions& options = {});

// kiln-worker next to the running executable or one folder up (build/kiln-worker for build/tests/kiln_tests).
// kiln-worker (cpu) or kiln-gpu-worker (cuda) beside this executable or one folder up; empty when absent.
std::string default_worker_path(WorkerDevice device = WorkerDevice::cpu);

// A fresh scratch directory under `root` (the temp dir when empty), unique in this process.
std::string make_scratch_dir(const std::string& root, const std::string& stem);

}  // namespace kiln::harness
