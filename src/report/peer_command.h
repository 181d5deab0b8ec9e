// A peer timed in another process, once per head-to-head round (kiln optimize --peer-command; the loop's
// agent::OptimizeOptions::peer_round): a shell command whose last line of output holds its figures.
#pragma once

#include <map>
#include <string>

#include "util/result.h"

namespace kiln::report {

struct PeerCommand {
  std::string command;      // run as /bin/sh -c COMMAND in working_dir
  std::string working_dir;  // empty: the current directory
  std::string scratch_dir;  // its stdout and stderr land here (created if missing)
  double wall_seconds = 600;
};

// Runs the command and reads the last non-empty line it printed as NAME=MILLISECONDS tokens (parse_peer_line).
// Returns the figures in seconds by name. Errors name the command and what went wrong: it did not exit 0 (with
// the end of its stderr), ran past wall_seconds, or printed no line of figures.
Result<std::map<std::string, double>> run_peer_command(const PeerCommand& peer);

}  // namespace kiln::report
