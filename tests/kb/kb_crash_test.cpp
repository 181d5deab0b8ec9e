// The knowledge base under a real crash and a real concurrent reader. A forked child writes runs in a loop,
// each run with its recipes and decision in one transaction; the parent reads while it writes (WAL: the
// reader is never blocked and sees only whole transactions), then SIGKILLs it at a random point and checks the
// file: PRAGMA integrity_check is "ok", foreign keys hold, and every committed run is complete.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "kb_test_util.h"

namespace kiln::kb {
namespace {

using testing::sample_fingerprint;
using testing::sample_recipe;
using testing::TempKb;
using testing::types_2d;

constexpr int kRecipesPerRun = 3;

// The child: opens its own connection and writes whole runs until killed. Never returns.
[[noreturn]] void write_forever(const std::string& path) {
  auto kb = KnowledgeBase::open(path);
  if (!kb.ok()) _exit(3);
  const Fingerprint here = sample_fingerprint();
  for (int i = 0;; ++i) {
    Status status = kb->atomically([&]() -> Status {
      KILN_ASSIGN_OR_RETURN(std::string run, kb->begin_run({"kiln optimize", "zoo:x", "w", "cuda"}, here));
      for (int k = 0; k < kRecipesPerRun; ++k) {
        Recipe r = sample_recipe("k" + std::to_string(k), types_2d(8 + i, 16), here, 1e-6 * (k + 1));
        r.run_id = run;
        r.timings = nlohmann::json::array();
        for (int t = 0; t < 50; ++t) r.timings.push_back({{"candidate", t}, {"seconds", 1e-6 * t}});  // bulk
        KILN_TRY(kb->record_recipe(r));
      }
      Decision d;
      d.run_id = run;
      d.opportunity = "tune k0..k2";
      d.kept = true;
      KILN_TRY(kb->record_decision(d));
      return kb->finish_run(run, RunStatus::succeeded);
    });
    if (!status.ok()) _exit(4);
  }
}

struct Counts {
  int64_t runs = 0, incomplete_runs = 0, recipes = 0, decisions = 0;
};

// One snapshot (a read transaction) of what the invariant is about.
Counts read_counts(KnowledgeBase& kb) {
  Database& db = kb.database();
  EXPECT_TRUE(db.exec("BEGIN").ok());
  Counts c;
  c.runs = *db.query_integer("SELECT count(*) FROM runs");
  c.recipes = *db.query_integer("SELECT count(*) FROM recipes");
  c.decisions = *db.query_integer("SELECT count(*) FROM decisions");
  c.incomplete_runs = *db.query_integer(
      "SELECT count(*) FROM runs r WHERE r.status != 'succeeded' OR r.finished_at IS NULL OR "
      "(SELECT count(*) FROM recipes WHERE run_id = r.id) != 3 OR "
      "(SELECT count(*) FROM decisions WHERE run_id = r.id) != 1");
  EXPECT_TRUE(db.exec("COMMIT").ok());
  return c;
}

void expect_whole(const Counts& c) {
  EXPECT_EQ(c.incomplete_runs, 0);
  EXPECT_EQ(c.recipes, kRecipesPerRun * c.runs);
  EXPECT_EQ(c.decisions, c.runs);
}

pid_t start_writer(const std::string& path) {
  const pid_t pid = fork();
  if (pid == 0) write_forever(path);
  return pid;
}

void kill_and_reap(pid_t pid) {
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  // Killed by us, not exited on an error of its own.
  ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

// Waits until the writer has committed at least `runs` runs (so the kill lands mid-stream, not before start).
void wait_for_runs(KnowledgeBase& reader, int64_t runs) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_counts(reader).runs >= runs) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  FAIL() << "the writer committed fewer than " << runs << " runs in 20 s";
}

TEST(KbCrash, KillNineLeavesEveryCommittedRunWhole) {
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    TempKb file;
    {
      auto reader = KnowledgeBase::open(file.path);  // created before the child, so no race on creation
      ASSERT_TRUE(reader.ok()) << reader.error().message;
      const pid_t writer = start_writer(file.path);
      ASSERT_GT(writer, 0);
      wait_for_runs(*reader, 2);
      std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 20000)(rng)));
      kill_and_reap(writer);
    }

    auto kb = KnowledgeBase::open(file.path, OpenMode::must_exist);  // recovers the WAL left behind
    ASSERT_TRUE(kb.ok()) << kb.error().message;
    {
      auto check = kb->database().prepare("PRAGMA integrity_check");
      ASSERT_TRUE(check.ok());
      ASSERT_TRUE(*check->step());
      EXPECT_EQ(check->text(0), "ok");
    }
    EXPECT_EQ(*kb->database().query_integer("SELECT count(*) FROM pragma_foreign_key_check"), 0);
    const Counts c = read_counts(*kb);
    EXPECT_GE(c.runs, 2);
    expect_whole(c);
    // And the rows read back as values, JSON and all.
    auto recipes = kb->recipes();
    ASSERT_TRUE(recipes.ok()) << recipes.error().message;
    EXPECT_EQ(static_cast<int64_t>(recipes->size()), c.recipes);
    for (const Recipe& r : *recipes) EXPECT_EQ(r.timings.size(), 50u);
    // The file takes writes again.
    auto after = kb->begin_run({"after", "m", "w", "cpu"}, sample_fingerprint());
    EXPECT_TRUE(after.ok()) << after.error().message;
  }
}

TEST(KbConcurrency, ReaderSeesOnlyWholeTransactionsWhileAWriterWrites) {
  TempKb file;
  auto reader = KnowledgeBase::open(file.path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  const pid_t writer = start_writer(file.path);
  ASSERT_GT(writer, 0);
  wait_for_runs(*reader, 1);
  int64_t first = -1, last = -1;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  int reads = 0;
  while (std::chrono::steady_clock::now() < until) {
    const Counts c = read_counts(*reader);
    expect_whole(c);
    if (first < 0) first = c.runs;
    EXPECT_GE(c.runs, last);  // never goes back
    last = c.runs;
    ++reads;
  }
  kill_and_reap(writer);
  EXPECT_GT(last, first) << "the reader saw no progress: was the writer blocked?";
  EXPECT_GT(reads, 10);
}

}  // namespace
}  // namespace kiln::kb
