// kiln kb as a user runs it: export -> import into a fresh file gives the same stats, re-import adds nothing,
// gc says what it removed; bad input gives exit code 1 and one line naming what is wrong (tests/errors style).
#include <gtest/gtest.h>

#include "../kiln_command.h"

#include <array>
#include <cstdio>
#include <fstream>

#include "kb_test_util.h"

namespace kiln::kb {
namespace {

using testing::sample_fingerprint;
using testing::sample_recipe;
using testing::TempKb;
using testing::types_2d;

using kiln::testing::CommandResult;
using kiln::testing::run_kiln;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(KbCli, ExportImportRoundTripAndReimportIsIdempotent) {
  TempKb a, b;
  {
    auto kb = KnowledgeBase::open(a.path);
    ASSERT_TRUE(kb.ok());
    auto run = kb->begin_run({"kiln optimize", "zoo:x", "w", "cuda"}, sample_fingerprint());
    ASSERT_TRUE(run.ok());
    Recipe r = sample_recipe("k1", types_2d(4, 4), sample_fingerprint(), 1e-6);
    r.run_id = *run;
    ASSERT_TRUE(kb->record_recipe(r).ok());
    ASSERT_TRUE(kb->record_recipe(sample_recipe("k2", types_2d(4, 4), sample_fingerprint("g++ 9"), 1e-6)).ok());
  }
  const std::string jsonl = a.path + ".jsonl";
  auto exported = run_kiln("kb export " + jsonl + " --kb " + a.path);
  ASSERT_EQ(exported.exit_code, 0) << exported.out;
  EXPECT_TRUE(contains(exported.out, "exported 5 rows")) << exported.out;
  auto first = run_kiln("kb import " + jsonl + " --kb " + b.path);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_TRUE(contains(first.out, "imported 5 rows")) << first.out;
  auto second = run_kiln("kb import " + jsonl + " --kb " + b.path);
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_TRUE(contains(second.out, "imported 0 rows")) << second.out;
  EXPECT_TRUE(contains(second.out, "5 already present")) << second.out;
  auto stats_a = run_kiln("kb stats --json --kb " + a.path);
  auto stats_b = run_kiln("kb stats --json --kb " + b.path);
  ASSERT_EQ(stats_a.exit_code, 0) << stats_a.out;
  auto ja = nlohmann::json::parse(stats_a.out), jb = nlohmann::json::parse(stats_b.out);
  ja.erase("path");
  jb.erase("path");
  EXPECT_EQ(ja, jb);
  EXPECT_EQ(ja["recipes"], 2);

  auto list = run_kiln("kb list recipes --kb " + b.path);
  ASSERT_EQ(list.exit_code, 0) << list.out;
  EXPECT_TRUE(contains(list.out, "bf16[4,4] bf16[4,4]")) << list.out;
  // Neither recipe was measured on this machine's CPU: gc removes both and says so.
  auto gc = run_kiln("kb gc --kb " + b.path);
  ASSERT_EQ(gc.exit_code, 0) << gc.out;
  EXPECT_TRUE(contains(gc.out, "removed 2 recipes (2 under another fingerprint, 0 too old), 1 orphan fingerprint"))
      << gc.out;
}

TEST(KbCliErrors, EachBadInputNamesWhatIsWrong) {
  TempKb kb_file, bad;
  { ASSERT_TRUE(KnowledgeBase::open(kb_file.path).ok()); }
  std::ofstream(bad.path + ".jsonl") << "{\"type\":\"header\",\"format\":\"kiln-kb\",\"schema_version\":1}\n"
                                     << "{\"type\":\"lesson\",\"id\":\"lsn-1\"}\n";
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"kb stats --kb " + bad.path, "no knowledge base at " + bad.path},
      {"kb import " + bad.path + ".jsonl --kb " + kb_file.path, bad.path + ".jsonl:2: field 'created_at' is missing"},
      {"kb import /nonexistent.jsonl --kb " + kb_file.path, "kb import: cannot read /nonexistent.jsonl"},
      {"kb list tables --kb " + kb_file.path, "kb list: unknown table 'tables'"},
      {"kb show rcp-0 --kb " + kb_file.path, "kb show: no row 'rcp-0'"},
      {"kb gc --backend tpu --kb " + kb_file.path, "tpu"},
      {"kb stats --kb " + bad.path + ".jsonl", "not a database"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    auto r = run_kiln(c.args);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_TRUE(contains(r.out, "kiln: error: ")) << r.out;
    EXPECT_TRUE(contains(r.out, c.message)) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
  auto stats = KnowledgeBase::open(kb_file.path)->stats();
  EXPECT_EQ(*stats, KbStats{}) << "a failed import committed rows";
}

}  // namespace
}  // namespace kiln::kb
