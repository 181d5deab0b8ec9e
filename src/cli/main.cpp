// kiln: the command-line entry point. Subcommands live one per file (show.cpp, run.cpp, ...).
#ifdef KILN_HAS_CUDA
#include "cuda/cuda_backend.h"
#endif
#include <malloc.h>

#include <climits>
#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // Freed memory stays in the heap for the next allocation of its size instead of going back to the kernel. The
  // fp64 reference allocates and frees buffers of hundreds of MB a node (a FLUX single block's doubles); glibc
  // maps each one afresh and the kernel zeroes every page of it on first touch. Kept, the FLUX single block's
  // reference ran 32.8 -> 24.2-26.0 s on 2 cores (session 35, the same checksum). The process keeps its peak heap.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#ifdef KILN_HAS_CUDA
  kiln::cuda::register_cuda_backend();  // `--backend cuda`; needs a GPU only when asked for
#endif
  CLI::App app{"kiln: makes transformer inference faster for the workload you serve, and proves it safe."};
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  kiln::cli::add_show_command(app, &exit_code);
  kiln::cli::add_run_command(app, &exit_code);
  kiln::cli::add_export_command(app, &exit_code);
  kiln::cli::add_zoo_command(app, &exit_code);
  kiln::cli::add_ops_command(app, &exit_code);
  kiln::cli::add_opt_command(app, &exit_code);
  kiln::cli::add_emit_command(app, &exit_code);
  kiln::cli::add_tune_command(app, &exit_code);
  kiln::cli::add_kb_command(app, &exit_code);
  kiln::cli::add_optimize_command(app, &exit_code);
  std::string names;
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known = known || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::fprintf(stderr, "kiln: error: unknown command '%s' (commands: %s)\n", argv[1], names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; real usage errors print one line and exit 2.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "kiln: error: %s (see kiln --help)\n", e.what());
    return 2;
  }
  return exit_code;
}
