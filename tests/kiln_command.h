// Running the real `kiln` binary from a test (KILN_CLI_PATH, set by tests/CMakeLists.txt): its exit code and
// what it printed, stdout and stderr together. Shared by every test of a subcommand.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace kiln::testing {

struct CommandResult {
  int exit_code;
  std::string out;  // stdout and stderr together
};

inline CommandResult run_kiln(const std::string& args) {
  const std::string command = std::string(KILN_CLI_PATH) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (!pipe) return {-1, "popen failed: " + command};
  std::string out;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace kiln::testing
