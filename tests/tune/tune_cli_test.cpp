// `kiln tune` and `kiln run --schedules` as a user runs them: a tiny zoo model tuned with a small budget, its
// result applied to the fused plan (which must still match the reference), and stale, mismatched and
// malformed schedule files giving a note or one clear error line.
#include <gtest/gtest.h>

#include "../kiln_command.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

using kiln::testing::CommandResult;
using kiln::testing::run_kiln;

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_tune_cli_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

constexpr const char* kModel = "zoo:flux1-double-block:tiny";

TEST(TuneCli, TuneWritesResultsThatRunApplies) {
  const auto file = temp_dir() / "tuned.json";
  auto tuned = run_kiln(std::string("tune ") + kModel + " --backend cpu --budget 10 --max-candidates 1 --no-baseline --jobs 2 --quiet -o " +
                        file.string());
  ASSERT_EQ(tuned.exit_code, 0) << tuned.out;
  EXPECT_NE(tuned.out.find("kernel hash"), std::string::npos) << tuned.out;
  EXPECT_NE(tuned.out.find("library call"), std::string::npos) << tuned.out;
  const nlohmann::json j = nlohmann::json::parse(read(file));
  EXPECT_EQ(j["format"], "kiln-tune/1");
  ASSERT_FALSE(j["kernels"].empty());
  EXPECT_FALSE(j["schedules"].empty());

  auto run = run_kiln(std::string("run ") + kModel + " --backend cpu --schedules " + file.string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("tuned schedules for"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("MISMATCH"), std::string::npos) << run.out;

  // kiln emit shows the tuned schedules where the file has them, the defaults without it.
  auto emitted = run_kiln(std::string("emit ") + kModel + " --backend cpu --schedules " + file.string());
  ASSERT_EQ(emitted.exit_code, 0) << emitted.out.substr(0, 600);
  EXPECT_NE(emitted.out.find(", tuned schedule "), std::string::npos) << emitted.out.substr(0, 1200);
  auto untuned = run_kiln(std::string("emit ") + kModel + " --backend cpu");
  ASSERT_EQ(untuned.exit_code, 0) << untuned.out.substr(0, 600);
  EXPECT_EQ(untuned.out.find(", tuned schedule "), std::string::npos) << untuned.out.substr(0, 1200);
  EXPECT_NE(untuned.out.find(", default schedule "), std::string::npos) << untuned.out.substr(0, 1200);

  // The same file on another model: every schedule is stale, ignored with a note.
  auto other = run_kiln("run zoo:llama3-8b:tiny --backend cpu --schedules " + file.string());
  ASSERT_EQ(other.exit_code, 0) << other.out;
  EXPECT_NE(other.out.find("match no kernel of this model"), std::string::npos) << other.out;
}

TEST(TuneCli, BadSchedulesFilesAreOneClearLine) {
  const auto dir = temp_dir();
  write(dir / "not_json.json", "{ nope");
  auto r = run_kiln(std::string("run ") + kModel + " --backend cpu --schedules " + (dir / "not_json.json").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("not_json.json"), std::string::npos) << r.out;

  write(dir / "cuda.json", R"({"format": "kiln-tune/1", "model": "m", "target": "cuda", "device": "d", "protocol": "p",
    "compiler": "c", "notes": [], "kernels": [], "library": [], "schedules": {}})");
  r = run_kiln(std::string("run ") + kModel + " --backend cpu --schedules " + (dir / "cuda.json").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("tuned for target 'cuda'"), std::string::npos) << r.out;

  r = run_kiln(std::string("run ") + kModel + " --schedules " + (dir / "cuda.json").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("add --backend"), std::string::npos) << r.out;

  r = run_kiln(std::string("run ") + kModel + " --backend cpu --schedules " + (dir / "missing.json").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("missing.json"), std::string::npos) << r.out;
}

}  // namespace
