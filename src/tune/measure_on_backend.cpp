#include "tune/measure_on_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "harness/compare.h"
#include "harness/inputs.h"
#include "kernel/emit.h"
#include "tune/search.h"

namespace kiln::tune {

namespace {

struct DeviceTensors {
  backend::Backend& backend;
  std::vector<backend::DeviceTensor> tensors;
  explicit DeviceTensors(backend::Backend& b) : backend(b) {}
  ~DeviceTensors() {
    for (backend::DeviceTensor& t : tensors) backend.release(t);
  }
  Result<backend::DeviceTensor> add(const TensorType& type) {
    KILN_ASSIGN_OR_RETURN(backend::DeviceTensor t, backend.allocate(type));
    tensors.push_back(t);
    return t;
  }
};

// Runs candidate `index` of `module` once and compares every output with the reference. Returns the failure
// (empty: it matched) and the worst error ratio.
Result<std::string> check_candidate(backend::Backend& backend, const backend::LoadedModule& module, int index,
                                    const std::vector<backend::DeviceTensor>& inputs,
                                    const std::vector<backend::DeviceTensor>& outputs,
                                    const std::vector<Tensor>& reference, const harness::KernelTask& task,
                                    double& worst_ratio) {
  Status ran = backend.launch(module, index, inputs, outputs);
  if (ran.ok()) ran = backend.synchronize();
  if (!ran.ok()) return "launch failed: " + ran.error().message;
  const int64_t k = harness::task_reduction_length(task);
  const std::vector<DType> precisions = harness::task_output_precisions(task);
  for (size_t o = 0; o < outputs.size(); ++o) {
    KILN_ASSIGN_OR_RETURN(Tensor got, backend.copy_to_host(outputs[o]));
    const harness::Comparison c = harness::compare_output(reference[o], got, {}, task.exact, k, precisions.at(o));
    worst_ratio = std::max(worst_ratio, c.stats.baseline_ratio());
    if (c.kind != harness::Mismatch::none) return fmt::format("output {} mismatches the reference: {}", o, c.describe());
  }
  return std::string();
}

// What a schedule runs for `kernel`: how it is launched (CUDA: grid and block; CPU: the pool threads and rows a
// task, which the backend reads from the schedule, not the source) and the code it emits, without the comment
// emit_module writes above each kernel ("// kernel NAME (...), schedule ..."). Two schedules with the same text run
// the same kernel the same way. (The module that is compiled is emitted again: emission costs little next to a
// compile.)
Result<std::string> emitted_code(const kernel::Kernel& kernel, const kernel::Schedule& schedule, kernel::Target target) {
  KILN_ASSIGN_OR_RETURN(kernel::EmittedModule emitted, kernel::emit_module({{&kernel, schedule, "kiln_code"}}, target));
  const kernel::EmittedKernel& k = emitted.kernels.at(0);
  std::string code = fmt::format("grid {} block {}x{} threads {} rows a task {}\n", k.grid, k.block_x, k.block_y,
                                 schedule.threads, schedule.rows_per_task);
  size_t at = 0;
  while (at < emitted.source.size()) {
    size_t end = emitted.source.find('\n', at);
    if (end == std::string::npos) end = emitted.source.size();
    const std::string_view line(emitted.source.data() + at, end - at);
    if (!line.starts_with("// kernel ")) code.append(line).push_back('\n');
    at = end + 1;
  }
  return code;
}

}  // namespace

Result<ReferenceRun> run_reference(const kernel::Kernel& kernel, const harness::KernelTask& task, uint64_t seed) {
  ReferenceRun run;
  for (size_t i = 0; i < kernel.inputs.size(); ++i) {
    run.inputs.push_back(harness::draw_input(kernel.inputs[i].type, harness::Distribution::normal, seed + i));
  }
  KILN_ASSIGN_OR_RETURN(run.outputs, harness::run_task_reference(task, run.inputs));
  if (run.outputs.size() != kernel.outputs.size()) {
    return make_error(ErrorCode::verify_error, fmt::format("kernel {} has {} outputs, its task {}", kernel.name,
                                                       kernel.outputs.size(), run.outputs.size()));
  }
  return run;
}

Result<std::vector<ScheduleMeasurement>> measure_schedules_on_backend(backend::Backend& backend,
                                                                     const kernel::Kernel& kernel,
                                                                     const harness::KernelTask& task,
                                                                     std::span<const kernel::Schedule> schedules,
                                                                     const MeasureOptions& options,
                                                                     const ReferenceRun* given_reference) {
  std::vector<ScheduleMeasurement> results(schedules.size());
  // One module holds every candidate that can be implemented: one compile for the whole search.
  std::vector<kernel::KernelToEmit> to_emit;
  std::vector<size_t> candidate_of_entry;
  std::vector<std::pair<std::string, size_t>> codes;  // each measured candidate's code, its index
  for (size_t i = 0; i < schedules.size(); ++i) {
    results[i].schedule = schedules[i];
    const Status can = kernel::can_implement(kernel, schedules[i], backend.target());
    if (!can.ok()) {
      results[i].failure = "cannot implement: " + can.error().message;
      continue;
    }
    KILN_ASSIGN_OR_RETURN(std::string code, emitted_code(kernel, schedules[i], backend.target()));
    auto same = std::find_if(codes.begin(), codes.end(), [&](const auto& c) { return c.first == code; });
    if (same != codes.end()) {
      results[i].same_code_as = static_cast<int>(same->second);
      continue;
    }
    codes.emplace_back(std::move(code), i);
    to_emit.push_back({&kernel, schedules[i], fmt::format("{}_s{}", kernel.name, i)});
    candidate_of_entry.push_back(i);
  }
  if (to_emit.empty()) return results;
  // One module for all (one compile); when that fails, one module per candidate so that a candidate the
  // compiler rejects is blamed alone and the others still run.
  std::vector<std::shared_ptr<backend::LoadedModule>> module_of_entry(to_emit.size());
  std::vector<int> index_in_module(to_emit.size());
  auto compile = [&](std::span<const kernel::KernelToEmit> emit) -> Result<std::shared_ptr<backend::LoadedModule>> {
    KILN_ASSIGN_OR_RETURN(kernel::EmittedModule emitted,
                          kernel::emit_module(std::vector<kernel::KernelToEmit>(emit.begin(), emit.end()), backend.target()));
    return backend.compile(emitted);
  };
  if (auto all = compile(to_emit); all.ok()) {
    for (size_t e = 0; e < to_emit.size(); ++e) module_of_entry[e] = *all, index_in_module[e] = static_cast<int>(e);
  } else {
    for (size_t e = 0; e < to_emit.size(); ++e) {
      auto one = compile(std::span(to_emit).subspan(e, 1));
      if (one.ok()) module_of_entry[e] = *one;
      else results[candidate_of_entry[e]].failure = "compile failed: " + one.error().message;
    }
  }

  ReferenceRun computed;
  if (!given_reference) {
    KILN_ASSIGN_OR_RETURN(computed, run_reference(kernel, task, options.seed));
  }
  const ReferenceRun& ran = given_reference ? *given_reference : computed;
  const std::vector<Tensor>& host_inputs = ran.inputs;
  const std::vector<Tensor>& reference = ran.outputs;
  DeviceTensors memory(backend);
  std::vector<backend::DeviceTensor> inputs, outputs;
  for (size_t i = 0; i < host_inputs.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(backend::DeviceTensor t, memory.add(kernel.inputs[i].type));
    KILN_TRY(backend.copy_to_device(host_inputs[i], t));
    inputs.push_back(t);
  }
  for (const kernel::KernelParam& p : kernel.outputs) {
    KILN_ASSIGN_OR_RETURN(backend::DeviceTensor t, memory.add(p.type));
    outputs.push_back(t);
  }
  for (size_t e = 0; e < candidate_of_entry.size(); ++e) {
    ScheduleMeasurement& m = results[candidate_of_entry[e]];
    if (!module_of_entry[e]) continue;
    const backend::LoadedModule& module = *module_of_entry[e];
    const int index = index_in_module[e];
    KILN_ASSIGN_OR_RETURN(std::string failure, check_candidate(backend, module, index, inputs, outputs, reference,
                                                               task, m.worst_baseline_ratio));
    if (!failure.empty()) {
      m.failure = std::move(failure);
      continue;
    }
    // A candidate is a kernel timed alone: the host's launch latency is kept out of it (TimingOptions::hold).
    backend::TimingOptions timing_options = options.timing;
    timing_options.hold = true;
    auto timing = backend.time([&] { return backend.launch(module, index, inputs, outputs); }, timing_options);
    if (!timing.ok()) {
      m.failure = "timing failed: " + timing.error().message;
      continue;
    }
    m.passed = true;
    m.median_seconds = timing->median_seconds;
    m.min_seconds = timing->min_seconds;
  }
  // A candidate of the same code takes every result of the one measured; its own schedule and pointer stay.
  for (ScheduleMeasurement& m : results) {
    if (m.same_code_as < 0) continue;
    ScheduleMeasurement same = results[static_cast<size_t>(m.same_code_as)];
    same.schedule = m.schedule;
    same.same_code_as = m.same_code_as;
    m = std::move(same);
  }
  return results;
}

Result<BackendSearch> search_schedules_on_backend(backend::Backend& backend, const kernel::Kernel& kernel,
                                                  const harness::KernelTask& task, const kernel::Schedule& current,
                                                  const BackendSearchOptions& options) {
  const int units = backend.device().compute_units;
  const std::vector<kernel::Schedule> space = kernel::schedule_space(kernel, backend.target(), units);
  KILN_ASSIGN_OR_RETURN(const ReferenceRun reference, run_reference(kernel, task, options.measure.seed));
  BackendSearch search;
  std::vector<kernel::Schedule> tried;
  auto measure_round = [&](std::vector<kernel::Schedule> round) -> Result<bool> {
    if (round.size() > options.max_candidates - tried.size()) round.resize(options.max_candidates - tried.size());
    if (round.empty()) return false;
    KILN_ASSIGN_OR_RETURN(std::vector<ScheduleMeasurement> measured,
                          measure_schedules_on_backend(backend, kernel, task, round, options.measure, &reference));
    ++search.rounds;
    bool improved = false;
    for (ScheduleMeasurement& m : measured) {
      tried.push_back(m.schedule);
      search.measured.push_back(std::move(m));
      const ScheduleMeasurement& last = search.measured.back();
      if (!last.passed) continue;
      if (search.best < 0 || last.median_seconds < search.measured[static_cast<size_t>(search.best)].median_seconds) {
        improved = improved || search.best >= 0;
        search.best = static_cast<int>(search.measured.size()) - 1;
      }
    }
    return improved || search.rounds == 1;
  };
  const size_t first = std::max<size_t>(1, std::min(options.first_round, options.max_candidates));
  KILN_ASSIGN_OR_RETURN(bool go_on, measure_round(initial_candidates(space, current, static_cast<int>(first))));
  while (go_on && search.best >= 0 && tried.size() < options.max_candidates) {
    const kernel::Schedule center = search.measured[static_cast<size_t>(search.best)].schedule;
    KILN_ASSIGN_OR_RETURN(go_on, measure_round(untried_neighbours(space, center, tried)));
  }
  return search;
}

}  // namespace kiln::tune
