// The adversarial corpus (tests/harness/corpus/): planted candidates, each of which must land in its own
// outcome class while this process goes on, and clean candidates that must pass (no false positives).
#include <gtest/gtest.h>

#include <filesystem>

#include "harness/worker.h"
#include "harness_test_util.h"

namespace kiln::harness {
namespace {

using test::compiled;
using test::corpus_task;
using test::read_source;

// Candidates planted to hang get a short wall limit (each costs that much); every other one gets a generous
// limit, so that a loaded machine (parallel ctest, the sanitizer build) never turns a slow candidate, such as
// one touching a gigabyte, into a timeout.
VerifyOptions corpus_options(OutcomeClass expected) {
  VerifyOptions options;
  options.worker.wall_seconds = expected == OutcomeClass::run_timeout ? 2 : 60;
  return options;
}

struct Case {
  const char* file;
  const char* task;
  OutcomeClass expected;
  const char* log_contains = nullptr;  // the worker's stderr must say this
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.file << " on " << c.task; }  // for test names in ctest

class HarnessCorpus : public ::testing::TestWithParam<Case> {};

TEST_P(HarnessCorpus, LandsInItsClass) {
  const Case& c = GetParam();
  const CompiledCandidate& built = compiled(c.file);
  if (c.expected == OutcomeClass::compile_error) {
    EXPECT_EQ(built.outcome.cls, OutcomeClass::compile_error) << describe(built.outcome);
    EXPECT_NE(built.outcome.evidence.compiler_log.find("error"), std::string::npos);
    return;
  }
  ASSERT_EQ(built.outcome.cls, OutcomeClass::compiled) << describe(built.outcome) << "\n"
                                                       << built.outcome.evidence.compiler_log;
  const CandidateOutcome outcome = verify_candidate(corpus_task(c.task), built.library_path, corpus_options(c.expected));
  EXPECT_EQ(outcome_class_name(outcome.cls), std::string(outcome_class_name(c.expected)))
      << c.file << " on " << c.task << ": " << describe(outcome) << "\nworker log:\n"
      << outcome.evidence.worker_log;
  EXPECT_FALSE(outcome.evidence.summary.empty());
  if (c.log_contains != nullptr) {
    EXPECT_NE(outcome.evidence.worker_log.find(c.log_contains), std::string::npos) << outcome.evidence.worker_log;
  }
  std::printf("  %-24s %-22s %-20s %.2f s  %s\n", c.file, c.task, outcome_class_name(outcome.cls), outcome.seconds,
              outcome.evidence.summary.c_str());
}

// Under AddressSanitizer the worker's heap is ASan's, which fills fresh blocks with one fixed byte: reading
// uninitialized memory is then repeatable and shows up as a wrong result instead.
constexpr OutcomeClass kUninitializedRead =
    built_with_sanitizers() ? OutcomeClass::wrong_result : OutcomeClass::nondeterministic;

const Case kCases[] = {
    // clean corpus: must pass
    {"rmsnorm_correct.cpp", "rmsnorm_f32", OutcomeClass::passed},
    {"rmsnorm_correct.cpp", "rmsnorm_f32_long_rows", OutcomeClass::passed},
    {"rmsnorm_unrolled.cpp", "rmsnorm_f32", OutcomeClass::passed},
    {"rmsnorm_unrolled.cpp", "rmsnorm_f32_long_rows", OutcomeClass::passed},
    {"rmsnorm_bf16.cpp", "rmsnorm_bf16", OutcomeClass::passed},
    {"add_correct.cpp", "add_f32", OutcomeClass::passed},
    {"add_correct.cpp", "add_bf16_exact", OutcomeClass::passed},
    {"lazy_after_warmup.cpp", "rmsnorm_f32", OutcomeClass::passed},  // caught by the benchmark instead
    {"skip_large.cpp", "rmsnorm_f32_small", OutcomeClass::passed},   // silent on shapes it handles
    {"rmsnorm_slow.cpp", "rmsnorm_f32", OutcomeClass::passed},
    // planted
    {"segfault.cpp", "rmsnorm_f32", OutcomeClass::crashed},
    {"abort.cpp", "rmsnorm_f32", OutcomeClass::crashed},
    {"infinite_loop.cpp", "rmsnorm_f32", OutcomeClass::run_timeout},
    {"oob_write.cpp", "rmsnorm_f32", OutcomeClass::wrote_out_of_bounds},
    {"wrong_result.cpp", "rmsnorm_f32", OutcomeClass::wrong_result},
    {"off_by_one.cpp", "rmsnorm_f32", OutcomeClass::wrong_result},
    {"nan_output.cpp", "rmsnorm_f32", OutcomeClass::nan_mismatch},
    {"skip_large.cpp", "rmsnorm_f32", OutcomeClass::wrong_result},
    {"cached_result.cpp", "rmsnorm_f32", OutcomeClass::wrong_result},
    {"mutate_input.cpp", "rmsnorm_f32", OutcomeClass::mutated_input},
    {"global_counter.cpp", "rmsnorm_f32", OutcomeClass::nondeterministic},
    {"uses_rand.cpp", "rmsnorm_f32", OutcomeClass::nondeterministic},
    {"uninit_read.cpp", "rmsnorm_f32", kUninitializedRead},
    {"compile_error.cpp", "rmsnorm_f32", OutcomeClass::compile_error},
    {"fork_bomb.cpp", "rmsnorm_f32", OutcomeClass::run_timeout, "forks succeeded: 0"},
    {"memory_hog.cpp", "rmsnorm_f32", OutcomeClass::crashed,
     built_with_sanitizers() ? "memory limit exceeded" : "bad_alloc"},
    {"exit_harness_code.cpp", "rmsnorm_f32", OutcomeClass::crashed, "the candidate called exit()"},
    {"returns_error.cpp", "rmsnorm_f32", OutcomeClass::crashed},
    {"static_init_crash.cpp", "rmsnorm_f32", OutcomeClass::crashed},
    {"missing_entry.cpp", "rmsnorm_f32", OutcomeClass::crashed, "does not define kiln_kernel"},
    {"rmsnorm_correct.cpp", "rmsnorm_bf16", OutcomeClass::crashed},   // returns 1 on a dtype it does not handle
    {"rmsnorm_unrolled.cpp", "add_f32", OutcomeClass::wrong_result},  // the wrong kernel for the task
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = std::string(info.param.file) + "_" + info.param.task;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Harness, HarnessCorpus, ::testing::ValuesIn(kCases), case_name);

TEST(HarnessCorpusCompile, HangingCompileTimesOut) {
  CompileOptions options;
  options.wall_seconds = 2;
  const std::string dir = make_scratch_dir("", "hang");
  const CompiledCandidate built = compile_candidate(read_source("compile_hang.cpp"), dir, options);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(built.outcome.cls, OutcomeClass::compile_timeout) << describe(built.outcome);
  EXPECT_LT(built.outcome.seconds, 4.0);
}

}  // namespace
}  // namespace kiln::harness
