// What happened to a candidate: one class from a closed set, with the evidence that put it there. Outcomes are
// data (recorded in the knowledge base, shown in reports); a harness fault is a class of its own so that our
// failures are never blamed on a candidate.
#pragma once

#include <string>
#include <vector>

#include "harness/compare.h"

namespace kiln::harness {

enum class OutcomeClass {
  compiled,             // compile step succeeded (verification not run yet)
  compile_error,        // the compiler rejected the source; evidence: its log
  compile_timeout,      // the compiler ran past its limit (the whole process group was killed)
  crashed,              // signal, early exit, load failure or a nonzero return from kiln_kernel
  run_timeout,          // the worker ran past its limit (the whole process group was killed)
  wrong_result,         // error over the tolerance, output left unwritten, or not exact when claimed
  nan_mismatch,         // NaN/Inf where the reference has none, or the other way round
  wrote_out_of_bounds,  // a guard zone before or after an output was changed
  mutated_input,        // an input buffer differs after the call
  nondeterministic,     // two calls on identical inputs disagree bitwise
  passed,
  harness_fault,  // the harness failed (cannot write scratch, worker missing, reference failed)
};
inline constexpr int kOutcomeClassCount = 12;

const char* outcome_class_name(OutcomeClass cls);  // "compile-error", "wrote-out-of-bounds", ...

struct Evidence {
  std::string summary;             // one line for a person
  std::string compiler_log;        // compile_error / compile_timeout (tail)
  std::string worker_log;          // the worker's stderr tail (the candidate's prints, sanitizer reports)
  int signal = 0;                  // crashed by a signal
  int exit_code = 0;               // crashed by an early exit
  int trial = -1;                  // the trial at fault (0-based); -1 when not trial-specific
  int run = -1;                    // 0 or 1: which of the two identical calls of that trial
  std::string distribution;        // of that trial's inputs: "normal", "wide"
  int tensor = -1;                 // the output (or input, for mutated_input) at fault
  int64_t offset = -1;             // element (or guard byte offset) at fault
  uint64_t seed = 0;               // the run's secret seed, revealed only after the run, for reproduction
  std::vector<ErrorStats> errors;  // per output, merged over all trials that got that far
};

struct CandidateOutcome {
  OutcomeClass cls = OutcomeClass::harness_fault;
  Evidence evidence;
  double seconds = 0;  // harness wall time spent on this step
  bool ok() const { return cls == OutcomeClass::passed || cls == OutcomeClass::compiled; }
};

std::string describe(const CandidateOutcome& outcome);  // "wrong-result: trial 2 (wide) ..."

}  // namespace kiln::harness
