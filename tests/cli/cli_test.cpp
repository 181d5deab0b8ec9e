// Runs the real kiln binary as a user would: good commands succeed, bad input gives exit code != 0 and one
// clear line on stderr naming what is wrong.
#include <gtest/gtest.h>

#include "../kiln_command.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

using kiln::testing::CommandResult;
using kiln::testing::run_kiln;

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_cli_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Cli, HelpAndVersion) {
  auto r = run_kiln("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("show"), std::string::npos);
  EXPECT_NE(r.out.find("run"), std::string::npos);
  EXPECT_NE(r.out.find("export"), std::string::npos);
  for (const char* sub : {"show", "run", "export", "zoo", "ops"}) {
    auto s = run_kiln(std::string(sub) + " --help");
    EXPECT_EQ(s.exit_code, 0) << sub;
  }
  EXPECT_EQ(run_kiln("--version").exit_code, 0);
}

// kiln opt lists what each pass found by pattern and what moved to the load-time stage (FP8 weight-scale
// packing among it).
TEST(Cli, OptReportsFindingsAndLoadTimeWork) {
  auto r = run_kiln("opt zoo:flux1-double-block:dtype=fp8");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* expected : {"found 9: pack_scales vector ×9", "load-time stage: +9 nodes",
                               "hoisted to load time: ", "pack_scales ×9", "reduce_amax -> cast f8e4m3",
                               "scaled_linear + bias epilogue", "memory-bound kernels per call: ",
                               "views that still copy: 0"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
  // Block grids are already the layout cuBLASLt reads: pack-scales says so and packs nothing.
  auto block = run_kiln("opt zoo:flux1-double-block:dtype=fp8,fp8_scaling=block");
  ASSERT_EQ(block.exit_code, 0) << block.out;
  EXPECT_NE(block.out.find("128x128 block grid (rows already aligned: the GEMM's layout)"), std::string::npos) << block.out;
  EXPECT_EQ(block.out.find("pack_scales ×"), std::string::npos) << block.out;
  auto only = run_kiln("opt zoo:flux1-double-block:dtype=fp8,fp8_scaling=block --passes pack-scales");
  ASSERT_EQ(only.exit_code, 0) << only.out;
  EXPECT_NE(only.out.find("pack-scales"), std::string::npos);
  EXPECT_EQ(only.out.find("fuse-rows"), std::string::npos) << only.out;
  auto bad = run_kiln("opt zoo:flux1-double-block --passes fuse-everything");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("unknown pass 'fuse-everything'"), std::string::npos) << bad.out;
  auto j = run_kiln("opt zoo:flux1-double-block:dtype=fp8,fp8_scaling=block --json");
  ASSERT_EQ(j.exit_code, 0) << j.out;
  EXPECT_NE(j.out.find("\"hoisted_to_load_time\""), std::string::npos);
  EXPECT_NE(j.out.find("\"found\""), std::string::npos);
}

TEST(Cli, ShowReportsFluxParameters) {
  auto r = run_kiln("show zoo:flux1-dev --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto at = r.out.find("\"parameters\"");
  ASSERT_NE(at, std::string::npos);
  const double params = std::stod(r.out.substr(r.out.find(':', at) + 1));
  EXPECT_NEAR(params / 1e9, 11.9, 0.12);
}

TEST(Cli, RunPrintsChecksumAndIsDeterministic) {
  auto a = run_kiln("run zoo:flux1-dev:tiny --seed 3");
  auto b = run_kiln("run zoo:flux1-dev:tiny --seed 3");
  ASSERT_EQ(a.exit_code, 0) << a.out;
  EXPECT_NE(a.out.find("checksum"), std::string::npos);
  auto strip_time = [](std::string s) { return s.substr(s.find('\n')); };  // line 1 has the wall time
  EXPECT_EQ(strip_time(a.out), strip_time(b.out));
  auto c = run_kiln("run zoo:flux1-dev:tiny --seed 4");
  EXPECT_NE(strip_time(a.out), strip_time(c.out));
}

// --lanes: the CPU backend has one lane, so the plan runs on it and says so; a count below 1, or lanes without
// a backend, is refused by name.
TEST(Cli, RunLanesOption) {
  auto ok = run_kiln("run zoo:flux1-double-block:tiny --backend cpu --lanes 2");
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("on 1 lane(s), 0 cross-lane waits"), std::string::npos) << ok.out;
  auto zero = run_kiln("run zoo:flux1-double-block:tiny --backend cpu --lanes 0");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_NE(zero.out.find("--lanes 0"), std::string::npos) << zero.out;
  auto no_backend = run_kiln("run zoo:flux1-double-block:tiny --lanes 2");
  EXPECT_NE(no_backend.exit_code, 0);
  EXPECT_NE(no_backend.out.find("--lanes applies"), std::string::npos) << no_backend.out;
}

// Head to head: the peer command runs before each timing of the final Plan; a failing one ends the rounds, and
// the run's results (plan, report) are written all the same.
TEST(Cli, OptimizeHeadToHeadWithAPeerCommand) {
  const auto dir = temp_dir() / "h2h";
  const std::string base = "optimize zoo:flux1-dev:tiny --no-kb --budget 1s --settle 0 --sustain 0 -o " + dir.string();
  auto ok = run_kiln(base + " --peer-rounds 2 --peer-command 'echo torch.compile=50'");
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("head to head with torch.compile over 2 rounds in turn"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("head to head, round 2 of 2"), std::string::npos) << ok.out;
  std::ifstream report(dir / "report.json");
  std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"head_to_head\""), std::string::npos);
  EXPECT_NE(text.find("\"peer_median_seconds\": 0.05"), std::string::npos) << text.substr(0, 2000);

  std::filesystem::remove_all(dir);
  auto failing = run_kiln(base + " --peer-command 'echo torch.compile=50; exit 4'");
  ASSERT_EQ(failing.exit_code, 0) << failing.out;
  EXPECT_NE(failing.out.find("head to head stopped short: round 1 of 3: peer command"), std::string::npos)
      << failing.out;
  EXPECT_NE(failing.out.find("exited 4"), std::string::npos) << failing.out;
  EXPECT_TRUE(std::filesystem::exists(dir / "report.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "plan.json"));
  std::filesystem::remove_all(dir);
}

TEST(Cli, ExportRoundTripsThroughShow) {
  const auto dir = temp_dir();
  for (const char* ext : {".json", ".kiln"}) {
    const std::string file = (dir / (std::string("m") + ext)).string();
    auto e = run_kiln("export zoo:llama3-8b:tiny -o " + file);
    ASSERT_EQ(e.exit_code, 0) << e.out;
    auto direct = run_kiln("show zoo:llama3-8b:tiny --json");
    auto loaded = run_kiln("show " + file + " --json");
    ASSERT_EQ(loaded.exit_code, 0) << loaded.out;
    // Identical apart from the "model" line, which names the source.
    auto drop_model = [](std::string s) {
      const auto at = s.find("\"model\"");
      return s.erase(at, s.find('\n', at) - at);
    };
    EXPECT_EQ(drop_model(direct.out), drop_model(loaded.out)) << ext;
  }
  std::filesystem::remove_all(dir);
}

// kiln emit: the plan's distinct generated kernels, each headed by its group and schedule, in the backend's
// dialect; --min-mb keeps the big ones. On a machine without a GPU the CUDA dialect still comes out (the pipeline
// without cuBLASLt's answers, schedules for 132 SMs), and says so.
TEST(Cli, EmitPrintsThePlansKernelsInTheBackendsDialect) {
  auto cpu = run_kiln("emit zoo:flux1-double-block:tiny --backend cpu");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.out;
  EXPECT_NE(cpu.out.find("dialect cpu"), std::string::npos) << cpu.out.substr(0, 400);
  EXPECT_NE(cpu.out.find("//   k0: "), std::string::npos) << cpu.out.substr(0, 400);
  EXPECT_NE(cpu.out.find(": group "), std::string::npos) << cpu.out.substr(0, 1200);
  EXPECT_EQ(cpu.out.find("__global__"), std::string::npos);
  auto gpu = run_kiln("emit zoo:flux1-double-block --min-mb 40");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.out.substr(0, 400);
  EXPECT_NE(gpu.out.find("dialect cuda"), std::string::npos) << gpu.out.substr(0, 400);
  // The image layernorm + modulate (50.3 MB, 4096 rows) is among them, with its launch shape; the 6-13 MB text
  // stream's kernels are not.
  EXPECT_NE(gpu.out.find("4096 rows, 50.3 MB"), std::string::npos) << gpu.out.substr(0, 1200);
  EXPECT_NE(gpu.out.find("grid 4096 of 128x1 threads"), std::string::npos) << gpu.out.substr(0, 1200);
  EXPECT_EQ(gpu.out.find(" 6.3 MB"), std::string::npos) << gpu.out.substr(0, 1200);
  // One header line and one __global__ entry per kernel.
  auto count = [&](const std::string& needle) {
    int n = 0;
    for (size_t at = gpu.out.find(needle); at != std::string::npos; at = gpu.out.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_GE(count("\n//   k"), 3);
  EXPECT_EQ(count("\n//   k"), count("__global__ void"));
}

TEST(Cli, BadInputIsOneClearLine) {
  const auto dir = temp_dir();
  const std::string bad_json = (dir / "bad.json").string();
  std::ofstream(bad_json) << "{\"format\": \"kiln.graph\", \"nodes\": [";
  const std::string missing = (dir / "nope.json").string();
  struct Case {
    std::string args;
    std::string needle;
  } cases[] = {
      {"show zoo:no-such-model", "no-such-model"},
      {"show zoo:flux1-dev:bogus_option=3", "bogus_option"},
      {"show zoo:flux1-dev:img_tokens=abc", "img_tokens"},
      {"show " + bad_json, "bad.json"},
      {"show " + missing, "nope.json"},
      {"export zoo:flux1-dev:tiny -o " + (dir / "x.txt").string(), "x.txt"},
      {"run zoo:flux1-dev", "--max-memory"},
      {"run zoo:flux1-dev:tiny --inputs " + missing, "nope.json"},
      {"frobnicate", "frobnicate"},
      {"optimize --no-kb --peer torch.compile", "torch.compile"},
      {"optimize --no-kb --peer eager=fast", "fast"},
      {"optimize --no-kb --sustain 0 --peer-sustained torch.compile=2", "--sustain"},
      {"optimize --no-kb --peer-sustained torch.compile=-1", "--peer-sustained 'torch.compile=-1'"},
      {"optimize --no-kb --peer-rounds 0 --peer-command true", "--peer-rounds 0"},
      {"optimize --no-kb --workload " + missing + " --peer-command true", "--peer-command"},
      {"emit zoo:flux1-double-block:tiny --backend tpu", "tpu"},
      {"emit zoo:flux1-double-block:tiny --min-mb 100000", "at least 100000 MB"},
  };
  for (const Case& c : cases) {
    auto r = run_kiln(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_EQ(count_lines(r.out), 1) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("error"), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.args << "\n" << r.out;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
