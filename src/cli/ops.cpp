// kiln ops: lists the op registry — each op's inputs, attributes and traits.
#include <fmt/format.h>

#include "cli/commands.h"
#include "ir/op_class.h"

namespace kiln::cli {

void add_ops_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("ops", "List every op kiln knows, with its attributes");
  cmd->callback([=] {
    for (const OpDef* def : all_op_defs()) {
      const std::string arity = def->max_inputs < 0                ? fmt::format("{}+", def->min_inputs)
                                : def->min_inputs == def->max_inputs ? fmt::format("{}", def->min_inputs)
                                                                     : fmt::format("{}-{}", def->min_inputs,
                                                                                   def->max_inputs);
      fmt::print("{:<14} {:<13} inputs {:<5} {}\n", def->name, op_class_name(op_class(def->op)), arity, def->summary);
      for (const AttrSpec& a : def->attrs) {
        fmt::print("{:16}{} ({}{}): {}\n", "", a.name, attr_kind_name(a.kind), a.required ? ", required" : "", a.doc);
      }
    }
    *exit_code = 0;
  });
}

}  // namespace kiln::cli
