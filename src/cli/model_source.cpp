#include "cli/model_source.h"

#include <cstdio>

#include "ir/text.h"
#include "models/zoo.h"

namespace kiln::cli {

Result<Graph> load_model(const std::string& spec) {
  if (spec.rfind("zoo:", 0) == 0) return models::build_zoo_model(std::string_view(spec).substr(4));
  return load_graph_file(spec);
}

int report_error(const Error& error) {
  std::fprintf(stderr, "kiln: error: %s\n", error.message.c_str());
  return 1;
}

}  // namespace kiln::cli
