// The harness on a GPU: the adversarial corpus under tests/cuda/corpus/, compiled by nvcc and verified through
// kiln-gpu-worker with device buffers. Each planted candidate must land in its class and the harness must go
// on after every one (a fault poisons only that worker's context). Skips without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpu_test_util.h"
#include "harness/compile.h"
#include "harness/verify.h"

namespace kiln::harness {
namespace {

const std::string kCorpus = (std::filesystem::path(__FILE__).parent_path() / "corpus").string() + "/";

std::string read_source(const std::string& file) {
  std::ifstream in(kCorpus + file);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct GpuCase {
  const char* file;
  OutcomeClass expected;
  const char* log_contains = nullptr;
};

class GpuHarnessCorpus : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuHarnessCorpus, LandsInItsClass) {
  KILN_REQUIRE_GPU();
  const GpuCase c = GetParam();
  auto task = make_op_task(Op::add, {{DType::f32, {96, 257}}, {DType::f32, {96, 257}}});
  ASSERT_TRUE(task.ok()) << task.error().message;
  CompileOptions compile = cuda_compile_options(gpu->info().arch());
  compile.cache_dir = (std::filesystem::temp_directory_path() / "kiln-gpu-test-compile-cache").string();
  VerifyOptions verify;
  verify.worker.device = WorkerDevice::cuda;
  verify.worker.worker_path = KILN_GPU_WORKER_PATH;
  verify.worker.wall_seconds = 15;  // the CUDA context and module load take a second or two
  const CandidateOutcome outcome = evaluate_candidate(*task, read_source(c.file), compile, verify);
  EXPECT_EQ(outcome_class_name(outcome.cls), std::string(outcome_class_name(c.expected)))
      << c.file << ": " << outcome.evidence.summary << "\ncompiler log:\n"
      << outcome.evidence.compiler_log << "\nworker log:\n"
      << outcome.evidence.worker_log;
  if (c.log_contains != nullptr) {
    EXPECT_NE(outcome.evidence.worker_log.find(c.log_contains), std::string::npos) << outcome.evidence.worker_log;
  }
  std::printf("  %-22s %-20s %.2f s  %s\n", c.file, outcome_class_name(outcome.cls), outcome.seconds,
              outcome.evidence.summary.c_str());
}

const GpuCase kGpuCases[] = {
    {"add_correct.cu", OutcomeClass::passed},
    {"oob_write.cu", OutcomeClass::wrote_out_of_bounds},
    {"illegal_address.cu", OutcomeClass::crashed, "device error"},
    {"trap.cu", OutcomeClass::crashed, "device error"},
    {"wrong_result.cu", OutcomeClass::wrong_result},
    {"off_by_one.cu", OutcomeClass::wrong_result},
    {"nan_output.cu", OutcomeClass::nan_mismatch},
    {"mutate_input.cu", OutcomeClass::mutated_input},
    {"global_counter.cu", OutcomeClass::nondeterministic},
    {"uninit_read.cu", OutcomeClass::nondeterministic},
    {"cached_result.cu", OutcomeClass::wrong_result},
    {"infinite_loop.cu", OutcomeClass::run_timeout},
    {"compile_error.cu", OutcomeClass::compile_error},
};

INSTANTIATE_TEST_SUITE_P(Corpus, GpuHarnessCorpus, ::testing::ValuesIn(kGpuCases), [](const auto& info) {
  std::string name = info.param.file;
  return name.substr(0, name.find('.'));
});

TEST(GpuHarness, CpuWorkerRefusesAGpuRequestAsAHarnessFault) {
  // Needs no GPU: the CPU worker must not run a GPU request, and that is our fault, not the candidate's.
  auto task = make_op_task(Op::add, {{DType::f32, {4, 4}}, {DType::f32, {4, 4}}});
  ASSERT_TRUE(task.ok());
  const std::string source = "#include \"kernel_abi.h\"\nextern \"C\" int kiln_kernel(const kiln_tensor*, int, kiln_tensor*, int) { return 0; }\n";
  VerifyOptions verify;
  verify.worker.device = WorkerDevice::cuda;
  verify.worker.worker_path = KILN_CPU_WORKER_PATH;
  const CandidateOutcome outcome = evaluate_candidate(*task, source, {}, verify);
  EXPECT_EQ(outcome.cls, OutcomeClass::harness_fault) << outcome.evidence.summary << "\n" << outcome.evidence.worker_log;
}

}  // namespace
}  // namespace kiln::harness
