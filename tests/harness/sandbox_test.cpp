#include "harness/sandbox.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>

namespace kiln::harness {
namespace {

SandboxOutcome run_sh(const std::string& script, SandboxLimits limits = {}) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_sandbox_" + std::to_string(getpid()))).string();
  auto r = run_sandboxed({{"/bin/sh", "-c", script}, dir, limits, {}});
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  std::filesystem::remove_all(dir);
  return r.ok() ? *r : SandboxOutcome{};
}

TEST(Sandbox, ExitCodeAndOutputsAreCaptured) {
  auto o = run_sh("echo hello; echo oops >&2; exit 3");
  EXPECT_EQ(o.kind, ExitKind::exited);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.stdout_tail, "hello\n");
  EXPECT_EQ(o.stderr_tail, "oops\n");
  EXPECT_EQ(describe_outcome(o), "exited 3");
}

TEST(Sandbox, CrashIsASignal) {
  auto o = run_sh("kill -SEGV $$");
  EXPECT_EQ(o.kind, ExitKind::signaled);
  EXPECT_EQ(o.signal, SIGSEGV);
  EXPECT_NE(describe_outcome(o).find("SEGV"), std::string::npos);
  auto a = run_sh("kill -ABRT $$");
  EXPECT_EQ(a.signal, SIGABRT);
}

TEST(Sandbox, InfiniteLoopTimesOutAndTheGroupDies) {
  SandboxLimits limits;
  limits.wall_seconds = 0.5;
  const std::string marker =
      (std::filesystem::temp_directory_path() / ("kiln_sandbox_marker_" + std::to_string(getpid()))).string();
  // A grandchild that would write the marker after 1.5 s must be killed with the group.
  auto o = run_sh("(sleep 1.5; touch " + marker + ") & while :; do :; done", limits);
  EXPECT_EQ(o.kind, ExitKind::timed_out);
  EXPECT_LT(o.wall_seconds, 1.4);
  sleep(2);
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a process of the group outlived the timeout";
  std::filesystem::remove(marker);
}

TEST(Sandbox, FileSizeLimitStopsARunawayWriter) {
  SandboxLimits limits;
  limits.file_size_bytes = 1 << 20;
  auto o = run_sh("head -c 4000000 /dev/zero > big.bin", limits);
  EXPECT_NE(o.kind == ExitKind::exited && o.exit_code == 0, true) << describe_outcome(o);
}

TEST(Sandbox, NetworkIsIsolatedWhereTheKernelAllows) {
  // /proc/net/dev lists the interfaces of the caller's network namespace (sysfs would show the host's).
  auto o = run_sh("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
  if (!o.network_isolated) GTEST_SKIP() << "unshare(CLONE_NEWNET) is not permitted here";
  EXPECT_EQ(o.stdout_tail, "lo\n");
}

TEST(Sandbox, MissingProgramIsReportedNotThrown) {
  auto r =
      run_sandboxed({{"/no/such/program"}, std::filesystem::temp_directory_path() / "kiln_sandbox_missing", {}, {}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 127);
  EXPECT_FALSE(run_sandboxed({{}, "/tmp/x", {}, {}}).ok());
}

}  // namespace
}  // namespace kiln::harness
