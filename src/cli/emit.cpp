// kiln emit MODEL: the source kiln generates for a model's fused plan. Each distinct generated kernel (tune/task.h:
// identical kernels once, views and constants left out) at the schedule the plan gives it (kernel::default_schedule
// on the backend's device, or a `kiln tune` result's with --schedules), in one translation unit as the backend compiles it, each
// kernel headed by a comment naming its group, rows, bytes, schedule and launch shape. For reading the code a
// plan runs, and for taking one kernel into a standalone probe (bench/gpu/probe_layernorm.cu).
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <thread>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "kernel/emit.h"
#include "passes/pipeline.h"
#include "tune/apply.h"
#include "tune/result_json.h"
#include "tune/task.h"

namespace kiln::cli {
namespace {

struct EmitArgs {
  std::string model;
  std::string backend = "cuda";
  double min_mb = 0;
  std::string output;
  std::string schedules_file;  // a `kiln tune -o` result: its schedules where they apply, as `kiln run --schedules`
  ModelSourceOptions source;
};

// The CUDA backend's schedules are sized for an H200's 132 SMs where no device can be opened here.
constexpr int kDefaultSms = 132;

Status run_emit(const EmitArgs& args) {
  KILN_ASSIGN_OR_RETURN(Graph graph, load_model(args.model, args.source));
  kernel::Target target;
  if (args.backend == "cuda")
    target = kernel::Target::cuda;
  else if (args.backend == "cpu")
    target = kernel::Target::cpu;
  else
    return make_error(ErrorCode::invalid_argument, "--backend takes cpu or cuda, got '" + args.backend + "'");
  // The backend, where this machine has it, answers which ops are library calls and what its device is, as it
  // does for a plan; without it (a CUDA build on a machine with no GPU) the pipeline runs without those answers.
  passes::PipelineOptions pipeline;
  std::string where;
  int units = target == kernel::Target::cuda ? kDefaultSms
                                             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t cache_bytes = 0;
  auto backend = backend::make_backend(args.backend);
  if (backend.ok()) {
    pipeline.supports = (*backend)->supports_fn();
    units = (*backend)->device().compute_units;
    cache_bytes = (*backend)->device().cache_bytes;
    where = (*backend)->device().name;
  } else {
    where = fmt::format("no {} backend here ({}): the pipeline without its library checks, schedules for {} {}",
                        args.backend, backend.error().message, units, target == kernel::Target::cuda ? "SMs" : "cores");
  }
  KILN_ASSIGN_OR_RETURN(passes::PipelineResult optimized, passes::run_pipeline(graph, pipeline));
  KILN_ASSIGN_OR_RETURN(tune::TaskList tasks, tune::collect_tasks(optimized.graph));
  std::vector<const tune::TuneTask*> chosen;
  for (const tune::TuneTask& t : tasks.tasks) {
    if (t.kind == tune::TaskKind::kernel && t.kernel.bytes >= args.min_mb * 1e6) chosen.push_back(&t);
  }
  if (chosen.empty()) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} has no generated kernel of at least {} MB (of {} tasks)", args.model, args.min_mb,
                                  tasks.tasks.size()));
  }
  std::map<std::string, kernel::Schedule> tuned;
  if (!args.schedules_file.empty()) {
    KILN_ASSIGN_OR_RETURN(tune::TuneResult result, tune::load_tune_result(args.schedules_file));
    KILN_ASSIGN_OR_RETURN(tune::AppliedSchedules applied,
                          tune::apply_tune_result(result, optimized.graph, target, "'" + args.schedules_file + "'"));
    tuned = std::move(applied.schedules);
  }
  std::vector<kernel::KernelToEmit> module;
  for (size_t i = 0; i < chosen.size(); ++i) {
    auto it = tuned.find(chosen[i]->hash);
    module.push_back({&chosen[i]->kernel,
                      it != tuned.end() ? it->second : kernel::default_schedule(chosen[i]->kernel, target, units, cache_bytes),
                      "k" + std::to_string(i)});
  }
  KILN_ASSIGN_OR_RETURN(kernel::EmittedModule emitted, kernel::emit_module(module, target));
  std::string text =
      fmt::format("// kiln emit {} --backend {}: {} kernels ({})\n", args.model, args.backend, chosen.size(), where);
  for (size_t i = 0; i < chosen.size(); ++i) {
    const kernel::Kernel& k = chosen[i]->kernel;
    const kernel::EmittedKernel& e = emitted.kernels[i];
    text += fmt::format("//   {}: {} ({} use{}), {} rows, {:.1f} MB, {} schedule {}", e.entry, chosen[i]->label,
                        chosen[i]->occurrences, chosen[i]->occurrences == 1 ? "" : "s", k.rows, k.bytes / 1e6,
                        tuned.count(chosen[i]->hash) ? "tuned" : "default", kernel::schedule_to_string(e.schedule));
    if (target == kernel::Target::cuda) text += fmt::format(", grid {} of {}x{} threads", e.grid, e.block_x, e.block_y);
    text += "\n";
  }
  text += emitted.source;
  if (args.output.empty()) {
    fmt::print("{}", text);
    return ok_status();
  }
  std::ofstream out(args.output);
  out << text;
  if (!out) return make_error(ErrorCode::io_error, "cannot write " + args.output);
  fmt::print(stderr, "wrote {} kernels to {}\n", chosen.size(), args.output);
  return ok_status();
}

}  // namespace

void add_emit_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "emit", "Print the source of a model's generated kernels as its plan compiles them (untuned, or with --schedules)");
  auto args = std::make_shared<EmitArgs>();
  cmd->add_option("MODEL", args->model, "zoo:NAME[:key=value,...], a .json/.kiln graph or a .onnx model")->required();
  add_model_source_options(cmd, &args->source);
  cmd->add_option("--backend", args->backend, "cuda or cpu: the dialect, and the backend asked about its device")
      ->capture_default_str();
  cmd->add_option("--min-mb", args->min_mb, "only kernels that move at least this many MB")->capture_default_str();
  cmd->add_option("--schedules", args->schedules_file, "a `kiln tune -o` result: its schedules where they apply");
  cmd->add_option("-o,--output", args->output, "write the source to this file");
  cmd->callback([=] {
    Status s = run_emit(*args);
    *exit_code = s.ok() ? 0 : report_error(s.error());
  });
}

}  // namespace kiln::cli
