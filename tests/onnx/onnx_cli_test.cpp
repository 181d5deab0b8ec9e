// `kiln show|run|opt|optimize|export` take a .onnx model where they take any model: run uses the model's own weights
// (so its outputs are PyTorch's), symbolic dimensions come from --dim, and mistakes are one clear line.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../kiln_command.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "models/weights.h"

namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR) + "/onnx/";

using kiln::testing::CommandResult;
CommandResult kiln(const std::string& args) { return kiln::testing::run_kiln(args); }

TEST(OnnxCli, ShowAndOptTakeAnOnnxFile) {
  CommandResult show = kiln("show " + kData + "vit_block/model.onnx --graph");
  EXPECT_EQ(show.exit_code, 0) << show.out;
  EXPECT_NE(show.out.find("attention("), std::string::npos) << show.out;
  CommandResult opt = kiln("opt " + kData + "flux_double/model.onnx --json");
  EXPECT_EQ(opt.exit_code, 0) << opt.out;
  EXPECT_NE(opt.out.find("merged 2 linear"), std::string::npos) << opt.out;
}

TEST(OnnxCli, RunUsesTheModelsWeightsAndDims) {
  const auto out = std::filesystem::temp_directory_path() / ("kiln_onnx_cli_" + std::to_string(getpid()) + ".safetensors");
  const std::string dir = kData + "gpt2_block/";
  CommandResult run = kiln("run " + dir + "model.onnx --dim batch=2 --dim seq=8 --inputs " + dir +
                           "inputs.safetensors --save-outputs " + out.string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  auto got = kiln::models::load_safetensors(out.string());
  auto want = kiln::models::load_safetensors(dir + "outputs.safetensors");
  ASSERT_TRUE(got.ok() && want.ok());
  const kiln::Tensor& g = got->at("y");
  const kiln::Tensor& w = want->at("y");
  ASSERT_EQ(g.shape(), w.shape());
  double err = 0;
  for (int64_t i = 0; i < w.numel(); ++i) err = std::max(err, std::abs(g.get(i) - w.get(i)));
  EXPECT_LT(err, 1e-4);  // PyTorch's outputs: the initializers were used, not seeded random weights
  std::filesystem::remove(out);
}

TEST(OnnxCli, OptimizeTakesAnOnnxFileAndItsPlanRunsAgain) {
  const auto out = std::filesystem::temp_directory_path() / ("kiln_onnx_optimize_" + std::to_string(getpid()));
  std::filesystem::remove_all(out);
  CommandResult optimize = kiln("optimize " + kData + "gpt2_block/model.onnx --dim batch=1 --dim seq=8 --budget 20s "
                                "--no-kb --peer onnxruntime=0.5 --peer-sustained onnxruntime=0.6 --settle 0 --sustain 0.2 -o " +
                                out.string());
  ASSERT_EQ(optimize.exit_code, 0) << optimize.out;
  for (const char* file : {"plan.json", "report.html", "report.json", "trace.json"}) {
    EXPECT_TRUE(std::filesystem::exists(out / file)) << file << " missing; output:\n" << optimize.out;
  }
  // A peer's figure given on the command line sits in the report next to the final time.
  std::ifstream report_file(out / "report.json");
  const nlohmann::json report = nlohmann::json::parse(report_file);
  ASSERT_EQ(report["peers"].size(), 2u);
  EXPECT_EQ(report["peers"][0]["name"], "onnxruntime");
  EXPECT_DOUBLE_EQ(report["peers"][0]["seconds"].get<double>(), 0.5e-3);
  EXPECT_EQ(report["peers"][0]["regime"], "from idle");
  EXPECT_DOUBLE_EQ(report["peers"][0]["kiln_seconds"].get<double>(), report["final"]["seconds"].get<double>());
  // The sustained peer sits next to kiln's own sustained time, measured after --sustain seconds back to back.
  EXPECT_EQ(report["peers"][1]["regime"], "sustained");
  EXPECT_GT(report["final"]["sustained_seconds"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(report["peers"][1]["kiln_seconds"].get<double>(), report["final"]["sustained_seconds"].get<double>());
  EXPECT_NE(optimize.out.find("next to onnxruntime"), std::string::npos) << optimize.out;
  // The plan artifact names the ONNX model and its dims: `kiln run --plan` rebuilds and checks it.
  CommandResult run = kiln("run --plan " + (out / "plan.json").string() + " --backend cpu");
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(run.out.find("MISMATCH"), std::string::npos) << run.out;
  std::filesystem::remove_all(out);
}

TEST(OnnxCli, MistakesAreOneClearLine) {
  CommandResult unbound = kiln("run " + kData + "gpt2_block/model.onnx");
  EXPECT_EQ(unbound.exit_code, 1);
  EXPECT_NE(unbound.out.find("--dim batch=N"), std::string::npos) << unbound.out;
  CommandResult bad_dim = kiln("show " + kData + "gpt2_block/model.onnx --dim batch");
  EXPECT_EQ(bad_dim.exit_code, 1);
  EXPECT_NE(bad_dim.out.find("NAME=N"), std::string::npos) << bad_dim.out;
  CommandResult not_onnx = kiln("show zoo:flux1-double-block:tiny --dim batch=1");
  EXPECT_EQ(not_onnx.exit_code, 1);
  EXPECT_NE(not_onnx.out.find(".onnx models only"), std::string::npos) << not_onnx.out;
  CommandResult missing = kiln("show /nonexistent/model.onnx");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("/nonexistent/model.onnx"), std::string::npos) << missing.out;
}

}  // namespace
