// The parent's side of the worker protocol (worker_protocol.h), shared by the verifier and the benchmark:
// start a worker on a request, turn an unclean end into an outcome, and check what one kernel call left
// behind. Nothing here loads candidate code.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/outcome.h"
#include "harness/sandbox.h"
#include "harness/verify.h"
#include "harness/worker_protocol.h"

namespace kiln::harness {

struct WorkerRun {
  SandboxOutcome process;
  std::string in_flight;  // what the worker was doing when it stopped ("trial 2 1", "load 0"); empty if none
  bool done = false;      // the worker finished the request
  std::string results;    // results.bin
  std::string samples;    // samples.txt (bench)
};

// Writes the request (with options.memory_bytes) and `input_sets` (one file each) into `scratch`, runs the
// worker in a sandbox, and reads back what it wrote. An error is a harness fault.
Result<WorkerRun> run_worker(const WorkerRequest& request, const std::vector<std::vector<Tensor>>& input_sets,
                             const WorkerOptions& options, const std::string& scratch);

// The outcome of a worker that did not finish (crashed, run_timeout, or harness_fault when no candidate code
// was running); nullopt when it did. `label` names an in-flight step for people ("trial 2 (wide), call 1").
std::optional<CandidateOutcome> classify_unfinished(const WorkerRun& run, const WorkerOptions& options,
                                                    const std::function<std::string(const std::string&)>& label);

// A finding about a candidate's calls. Lower severity wins when a run has several.
struct Finding {
  int severity = 0;
  OutcomeClass cls = OutcomeClass::passed;
  Evidence evidence;
};

// Checks one record (one call) against the inputs the parent sent and the reference: guard zones, inputs,
// unwritten elements (poison of `call` intact), NaN/Inf positions, error. Appends findings; error statistics
// per output go to `errors` (resized to the output count).
struct Expectation {
  const std::vector<Tensor>& inputs;     // as sent
  const std::vector<Tensor>& reference;  // the oracle's outputs for them
  const TolerancePolicy& policy;
  bool exact;
  int64_t reduction_length;
  std::vector<DType> precisions;  // per output (task_output_precisions); empty: each output's own dtype
};
void check_record(const std::byte* record, const WorkerRequest& request, int call, const Expectation& expected,
                  std::vector<Finding>& findings, std::vector<ErrorStats>& errors);

// The two calls of a trial must leave bitwise equal outputs.
void check_determinism(const std::byte* first, const std::byte* second, const WorkerRequest& request,
                       std::vector<Finding>& findings);

// The most severe finding (the first of equal severity), if any.
const Finding* worst_finding(const std::vector<Finding>& findings);

}  // namespace kiln::harness
