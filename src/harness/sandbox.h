// Sandboxed child processes: how untrusted work (compiling or running a candidate kernel) is started. The
// child gets its own process group, a wall-clock limit (the whole group is killed when it passes), CPU-time,
// address-space and file-size limits, no network (a fresh network namespace where the kernel allows it), a
// scratch directory as its working directory (or one it is given), and stdout/stderr captured to files there.
// The parent learns what happened as data; nothing the child does can take the parent down.
#pragma once

#include <string>
#include <vector>

#include "util/result.h"

namespace kiln::harness {

struct SandboxLimits {
  double wall_seconds = 10.0;
  double cpu_seconds = 0;           // 0: no CPU-time limit beyond the wall limit
  int64_t address_space_bytes = 0;  // 0: unlimited (ASan builds need a large one)
  int64_t file_size_bytes = 256ll << 20;
  bool isolate_network = true;      // unshare(CLONE_NEWNET); recorded whether it took effect
};

struct SandboxSpec {
  std::vector<std::string> argv;  // argv[0] is the program (searched in PATH when it has no '/')
  std::string scratch_dir;        // created if missing; stdout/stderr land here
  SandboxLimits limits;
  std::string working_dir;  // where the child runs; empty: scratch_dir
};

enum class ExitKind { exited, signaled, timed_out };

struct SandboxOutcome {
  ExitKind kind = ExitKind::exited;
  int exit_code = 0;       // for `exited`
  int signal = 0;          // for `signaled` (SIGSEGV, SIGABRT, SIGXCPU, SIGKILL from a memory limit...)
  double wall_seconds = 0;
  bool network_isolated = false;
  std::string stdout_tail;  // last 64 KiB of each stream
  std::string stderr_tail;
};

// Starts the child and waits for it. Errors are harness faults (fork failed, scratch not creatable), never
// something the child did.
Result<SandboxOutcome> run_sandboxed(const SandboxSpec& spec);

std::string describe_outcome(const SandboxOutcome& outcome);  // "exited 0", "signal 11 (SIGSEGV)", "timed out"

}  // namespace kiln::harness
