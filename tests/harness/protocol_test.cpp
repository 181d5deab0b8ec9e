// The pieces under the verifier: tasks, trial inputs, the worker protocol, the compile step, and harness
// faults that must never be blamed on a candidate.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "harness/inputs.h"
#include "harness/worker_protocol.h"
#include "harness_test_util.h"

namespace kiln::harness {
namespace {

using test::compiled;
using test::corpus_task;

TEST(HarnessTask, OpTaskTypesAndReductionLength) {
  const KernelTask& rms = corpus_task("rmsnorm_f32");
  EXPECT_EQ(task_input_types(rms).size(), 2u);
  EXPECT_EQ(task_output_types(rms)[0], (TensorType{DType::f32, {96, 256}}));
  EXPECT_EQ(task_reduction_length(rms), 256);
  EXPECT_EQ(task_reduction_length(corpus_task("add_f32")), 1);
  EXPECT_DOUBLE_EQ(task_min_bytes(rms), 2.0 * 96 * 256 * 4 + 256 * 4);
  auto mm = make_op_task(Op::matmul, {{DType::f32, {8, 300}}, {DType::f32, {300, 5}}});
  ASSERT_TRUE(mm.ok());
  EXPECT_EQ(task_reduction_length(*mm), 300);
  auto sum = make_op_task(Op::reduce_sum, {{DType::f32, {4, 6, 10}}}, {{"axes", std::vector<int64_t>{1, 2}}});
  ASSERT_TRUE(sum.ok()) << sum.error().message;
  EXPECT_EQ(task_reduction_length(*sum), 60);
  EXPECT_FALSE(make_op_task(Op::rmsnorm, {{DType::i32, {2, 3}}}).ok());
}

TEST(HarnessInputs, DistributionsAndSeeds) {
  const TensorType type{DType::f32, {4096}};
  const Tensor normal = draw_input(type, Distribution::normal, 1);
  const Tensor wide = draw_input(type, Distribution::wide, 1);
  double max_normal = 0, min_wide = 1e9, max_wide = 0;
  int negative = 0;
  for (int64_t i = 0; i < type.shape[0]; ++i) {
    max_normal = std::max(max_normal, std::fabs(normal.get(i)));
    min_wide = std::min(min_wide, std::fabs(wide.get(i)));
    max_wide = std::max(max_wide, std::fabs(wide.get(i)));
    negative += wide.get(i) < 0;
  }
  EXPECT_LT(max_normal, 6);
  EXPECT_LT(min_wide, 2e-3);
  EXPECT_GT(max_wide, 5e2);
  EXPECT_GT(negative, 1500);
  EXPECT_LT(negative, 2600);
  EXPECT_TRUE(draw_input(type, Distribution::normal, 1).bitwise_equal(normal));
  EXPECT_FALSE(draw_input(type, Distribution::normal, 2).bitwise_equal(normal));
  EXPECT_NE(fresh_secret_seed(), fresh_secret_seed());
  std::set<uint64_t> seeds;
  for (uint64_t t = 0; t < 8; ++t) {
    for (uint64_t i = 0; i < 4; ++i) seeds.insert(derive_seed(42, t, i));
  }
  EXPECT_EQ(seeds.size(), 32u);
  // Small formats stay finite: the wide range is clamped below their largest value.
  const Tensor fp8 = draw_input({DType::f8e4m3, {1024}}, Distribution::wide, 3);
  for (int64_t i = 0; i < 1024; ++i) EXPECT_TRUE(std::isfinite(fp8.get(i)));
}

TEST(HarnessProtocol, PoisonIsNaNAndDiffersBetweenCalls) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2, DType::i32}) {
    std::byte a[8], b[8];
    fill_poison(dtype, a, 1, 0);
    fill_poison(dtype, b, 1, 1);
    if (dtype_is_float(dtype)) {
      EXPECT_TRUE(std::isnan(load_element(dtype, a))) << dtype_name(dtype);
      EXPECT_TRUE(std::isnan(load_element(dtype, b))) << dtype_name(dtype);
    }
    EXPECT_TRUE(is_poison(dtype, a, 0));
    EXPECT_FALSE(is_poison(dtype, a, 1)) << dtype_name(dtype);
    EXPECT_TRUE(is_poison(dtype, b, 1));
  }
}

TEST(HarnessProtocol, RequestRoundTripsAndRecordLayout) {
  WorkerRequest r;
  r.mode = WorkerMode::bench;
  r.libraries = {"/a.so", "/b.so"};
  r.inputs = {{DType::bf16, {3, 5}}};
  r.outputs = {{DType::f32, {7}}, {DType::i64, {2}}};
  r.guard_bytes = 128;
  r.trials = 1;
  r.bench.slots = 99;
  auto back = request_from_json(request_to_json(r));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->libraries, r.libraries);
  EXPECT_EQ(back->outputs, r.outputs);
  EXPECT_EQ(back->bench.slots, 99);
  const RecordLayout layout = record_layout(r);
  EXPECT_EQ(layout.output_offsets, (std::vector<size_t>{0, 128 + 28 + 128}));
  EXPECT_EQ(layout.input_offsets, (std::vector<size_t>{284 + 128 + 16 + 128}));
  EXPECT_EQ(layout.bytes, 556u + 30u);
  EXPECT_FALSE(request_from_json("{").ok());
  EXPECT_FALSE(request_from_json(R"({"mode": "verify"})").ok());
}

TEST(HarnessCompile, EmbeddedAbiHeaderMatchesTheFile) {
  const std::filesystem::path header =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "src/harness/kernel_abi.h";
  std::ifstream in(header);
  std::ostringstream s;
  s << in.rdbuf();
  ASSERT_FALSE(s.str().empty()) << header;
  EXPECT_EQ(s.str(), kernel_abi_header_text());
}

TEST(HarnessCompile, CompilerLogAndVersionAreEvidence) {
  const CompiledCandidate& bad = compiled("compile_error.cpp");
  EXPECT_EQ(bad.outcome.cls, OutcomeClass::compile_error);
  EXPECT_NE(bad.outcome.evidence.compiler_log.find("undeclared_value"), std::string::npos);
  EXPECT_NE(bad.outcome.evidence.summary.find("error"), std::string::npos) << bad.outcome.evidence.summary;
  EXPECT_NE(bad.compiler_version.find("g++"), std::string::npos) << bad.compiler_version;
  const CompiledCandidate& good = compiled("rmsnorm_correct.cpp");
  EXPECT_EQ(good.outcome.cls, OutcomeClass::compiled);
  EXPECT_TRUE(std::filesystem::exists(good.library_path));
}

TEST(HarnessCompile, CacheIsKeyedByContent) {
  const std::string root = make_scratch_dir("", "cachetest");
  CompileOptions options;
  options.cache_dir = root + "/cache";
  const std::string source = test::read_source("add_correct.cpp");
  const CompiledCandidate first = compile_candidate(source, root + "/a", options);
  ASSERT_EQ(first.outcome.cls, OutcomeClass::compiled) << describe(first.outcome);
  EXPECT_EQ(first.library_path.rfind(options.cache_dir, 0), 0u) << first.library_path;
  const CompiledCandidate again = compile_candidate(source, root + "/b", options);
  EXPECT_EQ(again.library_path, first.library_path);
  EXPECT_EQ(again.outcome.evidence.summary.rfind("cached", 0), 0u) << again.outcome.evidence.summary;
  CompileOptions other = options;
  other.flags.push_back("-DKILN_SOMETHING_ELSE");
  const CompiledCandidate different = compile_candidate(source, root + "/c", other);
  EXPECT_NE(different.library_path, first.library_path);
  EXPECT_EQ(
      compile_candidate(source + "\n// changed\n", root + "/d", options).outcome.evidence.summary.rfind("built", 0),
      0u);
  std::filesystem::remove_all(root);
}

TEST(HarnessCompile, MissingCompilerIsAHarnessFault) {
  CompileOptions options;
  options.compiler = "/no/such/compiler";
  const std::string dir = make_scratch_dir("", "nocompiler");
  const CompiledCandidate built = compile_candidate("int x;", dir, options);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(built.outcome.cls, OutcomeClass::harness_fault) << describe(built.outcome);
  EXPECT_EQ(built.compiler_version, "unknown");
}

TEST(HarnessVerify, OurFailuresAreHarnessFaultsNotTheCandidates) {
  const KernelTask& task = corpus_task("rmsnorm_f32");
  const std::string& lib = compiled("rmsnorm_correct.cpp").library_path;
  VerifyOptions no_worker;
  no_worker.worker.worker_path = "/no/such/kiln-worker";
  EXPECT_EQ(verify_candidate(task, lib, no_worker).cls, OutcomeClass::harness_fault);
  VerifyOptions no_trials;
  no_trials.distributions.clear();
  EXPECT_EQ(verify_candidate(task, lib, no_trials).cls, OutcomeClass::harness_fault);
  // A library that is not there: the worker cannot read it before any candidate code runs.
  EXPECT_EQ(verify_candidate(task, "/no/such/candidate.so").cls, OutcomeClass::harness_fault);
}

TEST(HarnessVerify, SeedIsRevealedAfterwardsAndReproduces) {
  const KernelTask& task = corpus_task("rmsnorm_f32");
  const std::string& lib = compiled("wrong_result.cpp").library_path;
  const CandidateOutcome first = verify_candidate(task, lib);
  ASSERT_EQ(first.cls, OutcomeClass::wrong_result);
  EXPECT_NE(first.evidence.seed, 0u);
  VerifyOptions again;
  again.seed = first.evidence.seed;
  const CandidateOutcome second = verify_candidate(task, lib, again);
  EXPECT_EQ(second.evidence.summary, first.evidence.summary);
  EXPECT_NE(verify_candidate(task, lib).evidence.seed, first.evidence.seed);
}

TEST(HarnessVerify, PassedOutcomeCarriesErrorStatistics) {
  const CandidateOutcome o = verify_candidate(corpus_task("rmsnorm_f32"), compiled("rmsnorm_correct.cpp").library_path);
  ASSERT_EQ(o.cls, OutcomeClass::passed) << describe(o);
  ASSERT_EQ(o.evidence.errors.size(), 1u);
  EXPECT_EQ(o.evidence.errors[0].elements, 4 * 96 * 256);  // four trials
  EXPECT_GT(o.evidence.errors[0].max_abs_error, 0);
  EXPECT_LE(o.evidence.errors[0].max_abs_error, o.evidence.errors[0].threshold);
}

}  // namespace
}  // namespace kiln::harness
