// One registration function per subcommand, each in its own file.
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::cli {

// Each adds its subcommand to `app`; the subcommand's callback stores its exit code in `*exit_code`.
void add_show_command(CLI::App& app, int* exit_code);
void add_run_command(CLI::App& app, int* exit_code);
void add_export_command(CLI::App& app, int* exit_code);
void add_zoo_command(CLI::App& app, int* exit_code);
void add_ops_command(CLI::App& app, int* exit_code);
void add_opt_command(CLI::App& app, int* exit_code);
void add_tune_command(CLI::App& app, int* exit_code);
void add_kb_command(CLI::App& app, int* exit_code);
void add_optimize_command(CLI::App& app, int* exit_code);
void add_emit_command(CLI::App& app, int* exit_code);

}  // namespace kiln::cli
