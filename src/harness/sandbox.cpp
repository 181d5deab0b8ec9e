#include "harness/sandbox.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace kiln::harness {
namespace {

std::string read_tail(const std::string& path, size_t max_bytes = 64 * 1024) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > static_cast<std::streamoff>(max_bytes) ? size - max_bytes : 0;
  in.seekg(start);
  std::string s(static_cast<size_t>(size - start), '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

void set_limit(int resource, rlim_t value) {
  struct rlimit r{value, value};
  setrlimit(resource, &r);
}

// In the child, after fork: limits, isolation, redirections, exec. Only async-signal-safe calls where it
// matters; on any failure the child exits with 127 and a note on stderr.
[[noreturn]] void exec_child(const SandboxSpec& spec, char* const* argv, const std::string& out_path,
                             const std::string& err_path, int report_fd) {
  setpgid(0, 0);
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out < 0 || err < 0) _exit(127);
  dup2(out, STDOUT_FILENO);
  dup2(err, STDERR_FILENO);
  const int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, STDIN_FILENO);
  char isolated = 0;
  if (spec.limits.isolate_network && unshare(CLONE_NEWNET) == 0) isolated = 1;
  if (write(report_fd, &isolated, 1) != 1) _exit(127);
  close(report_fd);
  const std::string& dir = spec.working_dir.empty() ? spec.scratch_dir : spec.working_dir;
  if (chdir(dir.c_str()) != 0) _exit(127);
  if (spec.limits.cpu_seconds > 0) set_limit(RLIMIT_CPU, static_cast<rlim_t>(spec.limits.cpu_seconds + 0.999));
  if (spec.limits.address_space_bytes > 0) set_limit(RLIMIT_AS, static_cast<rlim_t>(spec.limits.address_space_bytes));
  if (spec.limits.file_size_bytes > 0) set_limit(RLIMIT_FSIZE, static_cast<rlim_t>(spec.limits.file_size_bytes));
  set_limit(RLIMIT_CORE, 0);
  execvp(argv[0], argv);
  const char msg[] = "kiln sandbox: exec failed\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
  _exit(127);
}

}  // namespace

Result<SandboxOutcome> run_sandboxed(const SandboxSpec& spec) {
  if (spec.argv.empty()) return make_error(ErrorCode::invalid_argument, "sandbox: empty command");
  std::error_code ec;
  std::filesystem::create_directories(spec.scratch_dir, ec);
  if (ec) return make_error(ErrorCode::io_error, "sandbox: cannot create scratch dir '" + spec.scratch_dir + "'");
  const std::string out_path = spec.scratch_dir + "/stdout.txt";
  const std::string err_path = spec.scratch_dir + "/stderr.txt";
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return make_error(ErrorCode::io_error, "sandbox: pipe failed");

  // Everything the child needs is prepared before fork: a multithreaded parent's child may not allocate.
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return make_error(ErrorCode::io_error, std::string("sandbox: fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    close(pipe_fds[0]);
    exec_child(spec, argv.data(), out_path, err_path, pipe_fds[1]);
  }
  setpgid(pid, pid);  // also in the parent, so the group exists before we may need to kill it
  close(pipe_fds[1]);
  SandboxOutcome outcome;
  char isolated = 0;
  if (read(pipe_fds[0], &isolated, 1) == 1) outcome.network_isolated = isolated != 0;
  close(pipe_fds[0]);

  int status = 0;
  bool timed_out = false;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > spec.limits.wall_seconds) {
      timed_out = true;
      kill(-pid, SIGKILL);  // the whole process group: compilers and anything the candidate spawned
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(elapsed < 0.1 ? 1 : 5));
  }
  kill(-pid, SIGKILL);  // stragglers left in the group after the leader exited
  outcome.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (timed_out) {
    outcome.kind = ExitKind::timed_out;
  } else if (WIFSIGNALED(status)) {
    outcome.kind = ExitKind::signaled;
    outcome.signal = WTERMSIG(status);
  } else {
    outcome.kind = ExitKind::exited;
    outcome.exit_code = WEXITSTATUS(status);
  }
  outcome.stdout_tail = read_tail(out_path);
  outcome.stderr_tail = read_tail(err_path);
  return outcome;
}

std::string describe_outcome(const SandboxOutcome& o) {
  switch (o.kind) {
    case ExitKind::exited: return "exited " + std::to_string(o.exit_code);
    case ExitKind::signaled: {
      const char* name = sigabbrev_np(o.signal);
      return "signal " + std::to_string(o.signal) + (name ? std::string(" (SIG") + name + ")" : "");
    }
    case ExitKind::timed_out: return "timed out";
  }
  return "?";
}

}  // namespace kiln::harness
