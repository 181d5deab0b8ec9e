#include "harness/outcome.h"

namespace kiln::harness {

const char* outcome_class_name(OutcomeClass cls) {
  static constexpr const char* kNames[] = {
      "compiled",     "compile-error",       "compile-timeout", "crashed",          "run-timeout", "wrong-result",
      "nan-mismatch", "wrote-out-of-bounds", "mutated-input",   "nondeterministic", "passed",      "harness-fault"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kOutcomeClassCount, "one name per class");
  return kNames[static_cast<int>(cls)];
}

std::string describe(const CandidateOutcome& outcome) {
  return std::string(outcome_class_name(outcome.cls)) + ": " + outcome.evidence.summary;
}

}  // namespace kiln::harness
