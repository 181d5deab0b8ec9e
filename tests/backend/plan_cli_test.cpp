// `kiln run --save-plan` / `--plan` / `--workload` as a user runs them: a saved plan runs and matches the
// reference; a damaged plan file or a bad workload is one clear error line and a failing exit code.
#include <gtest/gtest.h>

#include "../kiln_command.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using kiln::testing::CommandResult;
using kiln::testing::run_kiln;

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_plan_cli_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(PlanCli, SavedPlanRunsAndDamagedPlanIsAClearError) {
  const std::string plan = (temp_dir() / "q.json").string();
  CommandResult saved = run_kiln("run zoo:qwen-image:tiny --backend cpu --save-plan " + plan);
  ASSERT_EQ(saved.exit_code, 0) << saved.out;
  EXPECT_NE(saved.out.find("plan saved to"), std::string::npos) << saved.out;
  CommandResult loaded = run_kiln("run --plan " + plan + " --backend cpu");
  ASSERT_EQ(loaded.exit_code, 0) << loaded.out;
  EXPECT_NE(loaded.out.find("plan loaded from"), std::string::npos) << loaded.out;
  EXPECT_NE(loaded.out.find(": ok"), std::string::npos) << loaded.out;
  EXPECT_EQ(loaded.out.find("MISMATCH"), std::string::npos) << loaded.out;
  // Same checksum as the run that saved it: the same model and seeded inputs.
  const auto checksum = [](const std::string& out) { return out.substr(out.find("checksum")); };
  EXPECT_EQ(checksum(saved.out), checksum(loaded.out));

  std::string text;
  {
    std::ifstream in(plan);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  {
    std::ofstream out(plan, std::ios::trunc);
    out << text.substr(0, text.size() / 3);
  }
  CommandResult truncated = run_kiln("run --plan " + plan + " --backend cpu");
  EXPECT_NE(truncated.exit_code, 0);
  EXPECT_NE(truncated.out.find("kiln: error: " + plan + ": not a complete JSON plan file"), std::string::npos)
      << truncated.out;
  EXPECT_NE(run_kiln("run --plan " + plan).out.find("--plan needs --backend"), std::string::npos);
  std::filesystem::remove_all(temp_dir());
}

TEST(PlanCli, WorkloadBucketPicksTheModel) {
  const std::string path = (temp_dir() / "w.json").string();
  {
    std::ofstream out(path);
    out << R"({"model": "zoo:qwen-image:tiny", "buckets": [{"name": "small", "dims": {"image_tokens": 8}},
              {"name": "cfg", "weight": 2, "dims": {"cfg": true}}]})";
  }
  CommandResult r = run_kiln("run --workload " + path + " --bucket cfg --backend cpu");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("zoo:qwen-image:tiny=1,cfg=2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bucket cfg"), std::string::npos) << r.out;
  r = run_kiln("run --workload " + path + " --bucket huge");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("has no bucket 'huge'; its buckets: small, cfg"), std::string::npos) << r.out;
  std::filesystem::remove_all(temp_dir());
}

}  // namespace

namespace kiln {
namespace {

// --compare-steps stores and compares every value a step writes, in node order: on the CPU every step of the
// tiny single block is within the policy, and the windows the extra outputs would break are copied instead.
TEST(PlanCli, CompareStepsListsEveryStepInOrder) {
  const kiln::testing::CommandResult r = kiln::testing::run_kiln("run zoo:flux1-single-block:tiny --backend cpu --compare-steps --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto& steps = j["backend"]["steps"];
  ASSERT_GE(steps.size(), 8u) << r.out;
  EXPECT_EQ(steps[0]["name"], "silu") << r.out;
  std::vector<std::string> names;
  for (const auto& s : steps) {
    names.push_back(s["name"].get<std::string>());
    EXPECT_TRUE(s["within_policy"].get<bool>()) << s.dump();
  }
  // attention comes after the q/k/v GEMM (%split) and before linear2 reads it through the concat.
  const auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  EXPECT_LT(at("split"), at("attention")) << r.out;
  EXPECT_LT(at("attention"), static_cast<std::ptrdiff_t>(names.size())) << r.out;
  EXPECT_EQ(j["backend"]["in_place_concats"], 0) << r.out;  // attention's output is a step output now
}

// An FP8 tensor-scaled block at 2048 image tokens: the CPU plan lands a few quantize inputs on the other side
// of a rounding boundary, which moves the image output by 0.19, twelve correctly-rounded errors. The
// reference itself moves by more when those inputs move one ulp, so that is sound: within the policy, as the
// backend tests judge it. A bf16 model has no such step and keeps the plain bound.
TEST(PlanCli, Fp8PlansAreJudgedWithTheReferencesOwnQuantizeSensitivity) {
  const CommandResult fp8 = run_kiln("run \"zoo:flux1-double-block:tiny,dtype=fp8,fp8_scaling=tensor,img_tokens=2048\" "
                                     "--backend cpu --json");
  ASSERT_EQ(fp8.exit_code, 0) << fp8.out;
  const auto j = nlohmann::json::parse(fp8.out);
  for (const auto& [name, o] : j["backend"]["outputs"].items()) {
    EXPECT_GT(o["quantize_sensitivity"].get<double>(), 0) << name;
    EXPECT_TRUE(o["within_policy"].get<bool>()) << name << ": " << o.dump();
  }
  EXPECT_GT(j["backend"]["outputs"]["img_out"]["baseline_ratio_vs_optimized"].get<double>(), 8) << fp8.out;
  const CommandResult bf16 = run_kiln("run zoo:flux1-double-block:tiny --backend cpu --json");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.out;
  const auto plain = nlohmann::json::parse(bf16.out);
  for (const auto& [name, o] : plain["backend"]["outputs"].items()) {
    EXPECT_EQ(o["quantize_sensitivity"].get<double>(), 0) << name;
  }
}

}  // namespace
}  // namespace kiln
