#include "report/peer_command.h"

#include <fmt/format.h>

#include <filesystem>

#include "harness/sandbox.h"
#include "report/report_json.h"

namespace kiln::report {
namespace {

std::string last_line(const std::string& text) {
  const size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  const size_t newline = text.rfind('\n', end);
  const size_t begin = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(begin, end + 1 - begin);
}

}  // namespace

Result<std::map<std::string, double>> run_peer_command(const PeerCommand& peer) {
  harness::SandboxSpec spec;
  spec.argv = {"/bin/sh", "-c", peer.command};
  spec.scratch_dir = peer.scratch_dir;
  std::error_code ec;
  spec.working_dir = peer.working_dir.empty() ? std::filesystem::current_path(ec).string() : peer.working_dir;
  spec.limits.wall_seconds = peer.wall_seconds;
  spec.limits.file_size_bytes = 0;
  spec.limits.isolate_network = false;  // the peer is the user's own program, not a candidate
  KILN_ASSIGN_OR_RETURN(harness::SandboxOutcome outcome, harness::run_sandboxed(spec));
  const std::string what = "peer command '" + peer.command + "'";
  if (outcome.kind != harness::ExitKind::exited || outcome.exit_code != 0) {
    const std::string how = outcome.kind == harness::ExitKind::timed_out
                                ? fmt::format("ran past its {:g} s", peer.wall_seconds)
                                : harness::describe_outcome(outcome);
    const std::string err = last_line(outcome.stderr_tail);
    return make_error(ErrorCode::io_error,
                      what + " " + how + (err.empty() ? "" : " (its last error line: " + err + ")"));
  }
  const std::string line = last_line(outcome.stdout_tail);
  auto figures = parse_peer_line(line);
  if (!figures.ok()) {
    return make_error(ErrorCode::invalid_argument,
                      what + " printed no figures as its last line ('" + line + "'): " + figures.error().message);
  }
  std::map<std::string, double> seconds;
  for (const PeerFigure& f : *figures) seconds[f.name] = f.seconds;
  return seconds;
}

}  // namespace kiln::report
