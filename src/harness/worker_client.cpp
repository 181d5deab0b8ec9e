#include "harness/worker_client.h"

#include <fmt/format.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/worker.h"

namespace kiln::harness {
namespace {

bool write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(out);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last "begin X" without its "end X", and whether "done" was reached.
void parse_progress(const std::string& text, WorkerRun& run) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line == "done") run.done = true;
    if (line.rfind("begin ", 0) == 0) run.in_flight = line.substr(6);
    if (line.rfind("end ", 0) == 0 && line.compare(4, run.in_flight.size(), run.in_flight) == 0) run.in_flight.clear();
  }
}

std::string tail(const std::string& text, size_t max_bytes = 8 * 1024) {
  return text.size() <= max_bytes ? text : "...\n" + text.substr(text.size() - max_bytes);
}

Tensor tensor_from(const TensorType& type, const std::byte* data) {
  Tensor t(type.dtype, type.shape);
  std::memcpy(t.data(), data, t.byte_size());
  return t;
}

}  // namespace

Result<WorkerRun> run_worker(const WorkerRequest& request, const std::vector<std::vector<Tensor>>& input_sets,
                             const WorkerOptions& options, const std::string& scratch) {
  const std::string worker = options.worker_path.empty() ? default_worker_path(options.device) : options.worker_path;
  if (worker.empty() || !std::filesystem::exists(worker)) {
    return make_error(ErrorCode::io_error, "kiln-worker not found (looked for '" + worker + "')");
  }
  std::error_code ec;
  std::filesystem::create_directories(scratch, ec);
  WorkerRequest sent = request;
  sent.memory_bytes = options.memory_bytes;
  sent.device = options.device;
  const std::string text = request_to_json(sent);
  if (ec || !write_file(scratch + "/" + kRequestFile, text.data(), text.size())) {
    return make_error(ErrorCode::io_error, "cannot write the worker request into " + scratch);
  }
  for (size_t t = 0; t < input_sets.size(); ++t) {
    std::string packed;
    for (const Tensor& x : input_sets[t]) packed.append(reinterpret_cast<const char*>(x.data()), x.byte_size());
    if (!write_file(scratch + "/" + trial_input_file(static_cast<int>(t)), packed.data(), packed.size())) {
      return make_error(ErrorCode::io_error, "cannot write trial inputs into " + scratch);
    }
  }
  SandboxSpec spec;
  spec.argv = {worker};
  spec.scratch_dir = scratch;
  spec.limits.wall_seconds = options.wall_seconds;
  // The wall limit is the one that should fire. A GPU worker gets no CPU-time limit: the driver's threads
  // spin while a kernel runs, so CPU time outruns wall time.
  spec.limits.cpu_seconds = options.device == WorkerDevice::cuda ? 0 : options.wall_seconds + 1;
  KILN_ASSIGN_OR_RETURN(SandboxOutcome process, run_sandboxed(spec));
  WorkerRun run;
  run.process = std::move(process);
  parse_progress(read_file(scratch + "/" + kProgressFile), run);
  run.results = read_file(scratch + "/" + kResultsFile);
  run.samples = read_file(scratch + "/" + kSamplesFile);
  return run;
}

std::optional<CandidateOutcome> classify_unfinished(const WorkerRun& run, const WorkerOptions& options,
                                                    const std::function<std::string(const std::string&)>& label) {
  const SandboxOutcome& p = run.process;
  if (run.done && p.kind == ExitKind::exited && p.exit_code == 0) return std::nullopt;
  CandidateOutcome o;
  Evidence& e = o.evidence;
  e.worker_log = tail(p.stderr_tail);
  const std::string where = run.in_flight.empty() ? "" : " during " + label(run.in_flight);
  // The worker's own last word ("kiln-worker: ..."), else the first line the process wrote.
  std::string first_line = p.stderr_tail.substr(0, p.stderr_tail.find('\n'));
  const size_t own = p.stderr_tail.rfind("kiln-worker: ");
  if (own != std::string::npos) {
    const size_t end = p.stderr_tail.find('\n', own);
    first_line = p.stderr_tail.substr(own + 13, end == std::string::npos ? std::string::npos : end - own - 13);
  }
  if (p.kind == ExitKind::timed_out) {
    o.cls = OutcomeClass::run_timeout;
    e.summary =
        fmt::format("ran past the {} s limit{}; the worker's process group was killed", options.wall_seconds, where);
  } else if (p.kind == ExitKind::signaled && p.signal == SIGXCPU) {
    o.cls = OutcomeClass::run_timeout;
    e.signal = p.signal;
    e.summary = "ran past the CPU-time limit" + where;
  } else if (p.kind == ExitKind::signaled) {
    o.cls = OutcomeClass::crashed;
    e.signal = p.signal;
    e.summary = "killed by " + describe_outcome(p) + where;
    if (!first_line.empty()) e.summary += ": " + first_line;
  } else if (run.in_flight.empty() && !run.done &&
             (p.exit_code == kWorkerExitBadRequest || p.exit_code == kWorkerExitSetupFailed)) {
    o.cls = OutcomeClass::harness_fault;  // no candidate code was running: it was us
    e.exit_code = p.exit_code;
    e.summary = "the worker failed before running the candidate: " + first_line;
  } else {
    o.cls = OutcomeClass::crashed;
    e.exit_code = p.exit_code;
    if (p.exit_code == kWorkerExitLoadFailed || p.exit_code == kWorkerExitKernelFailed ||
        p.exit_code == kWorkerExitMemoryLimit || p.exit_code == kWorkerExitCalledExit) {
      e.summary = first_line + where;
    } else {
      e.summary = "the worker exited early with code " + std::to_string(p.exit_code) + where;
    }
  }
  return o;
}

void check_record(const std::byte* record, const WorkerRequest& request, int call, const Expectation& expected,
                  std::vector<Finding>& findings, std::vector<ErrorStats>& errors) {
  const RecordLayout layout = record_layout(request);
  const size_t guard = static_cast<size_t>(request.guard_bytes);
  errors.resize(request.outputs.size());
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    const TensorType& type = request.outputs[i];
    const std::byte* front = record + layout.output_offsets[i];
    const std::byte* data = front + guard;
    const std::byte* back = data + type_bytes(type);
    for (size_t b = 0; b < guard; ++b) {
      // Scan outward from the output: the nearest damaged byte says most about the bug.
      const bool before = front[guard - 1 - b] != guard_byte(guard - 1 - b);
      const bool after = back[b] != guard_byte(b);
      if (!before && !after) continue;
      Finding f{0, OutcomeClass::wrote_out_of_bounds, {}};
      f.evidence.tensor = static_cast<int>(i);
      f.evidence.offset = static_cast<int64_t>(b);
      f.evidence.summary = fmt::format("wrote byte {} {} output {} ({})", b,
                                       after ? "past the end of" : "before the start of", i, type_to_string(type));
      findings.push_back(std::move(f));
      break;
    }
  }
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const std::byte* after = record + layout.input_offsets[i];
    const Tensor& sent = expected.inputs[i];
    if (std::memcmp(after, sent.data(), sent.byte_size()) == 0) continue;
    size_t b = 0;
    while (after[b] == sent.data()[b]) ++b;
    const int64_t element = static_cast<int64_t>(b / dtype_size(sent.dtype()));
    Finding f{1, OutcomeClass::mutated_input, {}};
    f.evidence.tensor = static_cast<int>(i);
    f.evidence.offset = element;
    f.evidence.summary =
        fmt::format("input {} ({}) changed, first at element {}", i, type_to_string(request.inputs[i]), element);
    findings.push_back(std::move(f));
  }
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    const TensorType& type = request.outputs[i];
    const std::byte* data = record + layout.output_offsets[i] + guard;
    const size_t size = dtype_size(type.dtype);
    const int64_t n = shape_numel(type.shape);
    int64_t unwritten = 0, first = -1;
    for (int64_t k = 0; k < n; ++k) {
      if (is_poison(type.dtype, data + k * size, call) && unwritten++ == 0) first = k;
    }
    if (unwritten > 0) {
      Finding f{2, OutcomeClass::wrong_result, {}};
      f.evidence.tensor = static_cast<int>(i);
      f.evidence.offset = first;
      f.evidence.summary = fmt::format("{} of {} elements of output {} ({}) never written, first at element {}",
                                       unwritten, n, i, type_to_string(type), first);
      findings.push_back(std::move(f));
      continue;
    }
    const std::optional<DType> precision =
        i < expected.precisions.size() ? std::optional<DType>(expected.precisions[i]) : std::nullopt;
    const Comparison c = compare_output(expected.reference[i], tensor_from(type, data), expected.policy, expected.exact,
                                        expected.reduction_length, precision);
    merge_error_stats(errors[i], c.stats);
    if (c.kind == Mismatch::none) continue;
    Finding f{c.kind == Mismatch::non_finite ? 4 : 5,
              c.kind == Mismatch::non_finite ? OutcomeClass::nan_mismatch : OutcomeClass::wrong_result,
              {}};
    f.evidence.tensor = static_cast<int>(i);
    f.evidence.offset = c.kind == Mismatch::too_large ? c.stats.worst_element : c.first_element;
    f.evidence.summary = fmt::format("output {}: {}", i, c.describe());
    findings.push_back(std::move(f));
  }
}

void check_determinism(const std::byte* first, const std::byte* second, const WorkerRequest& request,
                       std::vector<Finding>& findings) {
  const RecordLayout layout = record_layout(request);
  const size_t guard = static_cast<size_t>(request.guard_bytes);
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    const TensorType& type = request.outputs[i];
    const std::byte* a = first + layout.output_offsets[i] + guard;
    const std::byte* b = second + layout.output_offsets[i] + guard;
    const size_t bytes = type_bytes(type);
    if (std::memcmp(a, b, bytes) == 0) continue;
    size_t k = 0;
    while (a[k] == b[k]) ++k;
    const size_t size = dtype_size(type.dtype);
    const int64_t element = static_cast<int64_t>(k / size);
    Finding f{3, OutcomeClass::nondeterministic, {}};
    f.evidence.tensor = static_cast<int>(i);
    f.evidence.offset = element;
    f.evidence.summary = fmt::format(
        "two calls on identical inputs disagree at element {} of output {}: {:.9g} then {:.9g} (a kernel that reads "
        "uninitialized memory, races, or keeps state between calls)",
        element, i, load_element(type.dtype, a + element * static_cast<int64_t>(size)),
        load_element(type.dtype, b + element * static_cast<int64_t>(size)));
    findings.push_back(std::move(f));
  }
}

const Finding* worst_finding(const std::vector<Finding>& findings) {
  const Finding* worst = nullptr;
  for (const Finding& f : findings) {
    if (worst == nullptr || f.severity < worst->severity) worst = &f;
  }
  return worst;
}

}  // namespace kiln::harness
