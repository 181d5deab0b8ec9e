// kiln zoo: lists the built-in models and their options.
#include <fmt/format.h>

#include "cli/commands.h"
#include "models/zoo.h"

namespace kiln::cli {

void add_zoo_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("zoo", "List the built-in models (use as zoo:NAME[:key=value,...])");
  cmd->callback([=] {
    for (const models::ZooEntry& entry : models::zoo_models()) {
      fmt::print("zoo:{}\n    {}\n", entry.name, entry.description);
      for (const models::ZooOption& option : entry.options) {
        fmt::print("    {:<16} {:<10} {}\n", option.key, option.default_value, option.help);
      }
    }
    *exit_code = 0;
  });
}

}  // namespace kiln::cli
