// The knowledge base: schema creation and version checks, fingerprints, exact and near hits with the
// fingerprint policy, lessons, transactions, export -> import round trip, malformed import lines, and gc.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "kb/gc.h"
#include "kb/jsonl.h"
#include "kb/schema.h"
#include "kb_test_util.h"

namespace kiln::kb {
namespace {

using testing::sample_fingerprint;
using testing::sample_recipe;
using testing::TempKb;
using testing::types_2d;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(KbSchema, CreatesTablesInWalModeWithVersion) {
  TempKb file;
  auto kb = KnowledgeBase::open(file.path);
  ASSERT_TRUE(kb.ok()) << kb.error().message;
  Database& db = kb->database();
  EXPECT_EQ(*db.query_integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(*db.query_integer("PRAGMA application_id"), kApplicationId);
  EXPECT_EQ(*db.query_integer("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('runs', "
                              "'recipes', 'lessons', 'decisions', 'fingerprints')"),
            5);
  {
    auto mode = db.prepare("PRAGMA journal_mode");  // scoped: a statement left open holds its transaction
    ASSERT_TRUE(mode.ok());
    ASSERT_TRUE(*mode->step());
    EXPECT_EQ(mode->text(0), "wal");
  }
  EXPECT_EQ(*kb->stats(), KbStats{});
  // Reopening an existing file keeps what it holds.
  ASSERT_TRUE(kb->record_fingerprint(sample_fingerprint()).ok());
  auto again = KnowledgeBase::open(file.path, OpenMode::must_exist);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->stats()->fingerprints, 1);
}

TEST(KbSchema, MissingFileIsAnErrorWhenItMustExist) {
  TempKb file;
  auto kb = KnowledgeBase::open(file.path, OpenMode::must_exist);
  ASSERT_FALSE(kb.ok());
  EXPECT_TRUE(contains(kb.error().message, file.path)) << kb.error().message;
  EXPECT_TRUE(contains(kb.error().message, "does not exist")) << kb.error().message;
  EXPECT_FALSE(std::filesystem::exists(file.path));
}

TEST(KbSchema, NewerSchemaVersionIsRefusedNotReused) {
  TempKb file;
  {
    auto kb = KnowledgeBase::open(file.path);
    ASSERT_TRUE(kb.ok());
    ASSERT_TRUE(kb->database().exec("PRAGMA user_version=7").ok());
  }
  auto kb = KnowledgeBase::open(file.path);
  ASSERT_FALSE(kb.ok());
  EXPECT_EQ(kb.error().code, ErrorCode::unsupported);
  EXPECT_TRUE(contains(kb.error().message, "schema version 7, newer than this kiln's 1")) << kb.error().message;
}

TEST(KbSchema, OlderSchemaVersionWithoutMigrationIsRefusedWithAMessage) {
  TempKb file;
  {
    auto kb = KnowledgeBase::open(file.path);
    ASSERT_TRUE(kb.ok());
    ASSERT_TRUE(kb->database().exec("PRAGMA user_version=0").ok());
  }
  auto kb = KnowledgeBase::open(file.path);
  ASSERT_FALSE(kb.ok());
  EXPECT_TRUE(contains(kb.error().message, "schema version 0, older than this kiln's 1")) << kb.error().message;
  EXPECT_TRUE(contains(kb.error().message, "kiln kb export")) << kb.error().message;
}

TEST(KbSchema, OtherSqliteFilesAndNonDatabasesAreRefused) {
  TempKb file;
  {
    auto db = Database::open(file.path, true);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->exec("CREATE TABLE t (x INTEGER)").ok());
  }
  auto kb = KnowledgeBase::open(file.path);
  ASSERT_FALSE(kb.ok());
  EXPECT_TRUE(contains(kb.error().message, "not a kiln knowledge base")) << kb.error().message;

  TempKb text;
  std::ofstream(text.path) << "this is not a database, it is a long enough line of plain text to fill a header\n";
  auto not_db = KnowledgeBase::open(text.path);
  ASSERT_FALSE(not_db.ok());
  EXPECT_TRUE(contains(not_db.error().message, text.path)) << not_db.error().message;
  EXPECT_TRUE(contains(not_db.error().message, "not a database")) << not_db.error().message;
}

TEST(KbFingerprint, CanonicalStringIsStableAndParsesBack) {
  Fingerprint a = sample_fingerprint();
  Fingerprint b = a;
  b.libraries.clear();  // the same libraries inserted in the other order
  b.libraries["cudnn"] = "9.14.0";
  b.libraries["cublaslt"] = "13.0.0";
  EXPECT_EQ(a.canonical(), b.canonical());
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.hash().size(), 16u);
  EXPECT_EQ(a.canonical(),
            "{\"compiler\":\"g++ 12.2.0\",\"compute_units\":132,\"device_kind\":\"cuda\",\"device_name\":\"NVIDIA "
            "H200\",\"driver\":\"13.0\",\"kiln_version\":\"" KILN_VERSION
            "\",\"libraries\":{\"cublaslt\":\"13.0.0\",\"cudnn\":\"9.14.0\"}}");
  auto parsed = parse_fingerprint(a.canonical());
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, a);
  Fingerprint c = a;
  c.kiln_version = "9.9.9";
  EXPECT_NE(c.hash(), a.hash());
  EXPECT_FALSE(parse_fingerprint("{\"device_kind\":\"cpu\"}").ok());
}

TEST(KbFingerprint, DifferencesNameEachField) {
  Fingerprint a = sample_fingerprint();
  Fingerprint b = sample_fingerprint("g++ 13.1.0");
  b.libraries.erase("cudnn");
  const auto diff = fingerprint_differences(a, b);
  ASSERT_EQ(diff.size(), 2u);
  EXPECT_EQ(diff[0], "compiler: g++ 12.2.0 -> g++ 13.1.0");
  EXPECT_EQ(diff[1], "library cudnn: 9.14.0 -> (absent)");
  EXPECT_TRUE(fingerprint_differences(a, a).empty());
}

TEST(KbFingerprint, OfADeviceTakesItsToolchainAndKilnVersion) {
  backend::DeviceInfo d;
  d.kind = "cpu";
  d.name = "Some CPU";
  d.compute_units = 8;
  d.compiler = "g++ (Debian 12.2.0-14) 12.2.0";
  d.libraries = {{"openblas", "0.3.21"}};
  const Fingerprint f = fingerprint_of(d);
  EXPECT_EQ(f.device_kind, "cpu");
  EXPECT_EQ(f.compute_units, 8);
  EXPECT_EQ(f.compiler, d.compiler);
  EXPECT_EQ(f.libraries.at("openblas"), "0.3.21");
  EXPECT_EQ(f.kiln_version, KILN_VERSION);
}

TEST(KbRecipes, ExactHitsFollowTheFingerprintPolicy) {
  TempKb file;
  auto kb = KnowledgeBase::open(file.path);
  ASSERT_TRUE(kb.ok());
  const Fingerprint here = sample_fingerprint();
  const Fingerprint old_compiler = sample_fingerprint("g++ 11.0.0");
  auto run = kb->begin_run({"kiln optimize zoo:x", "zoo:x", "chat", "cuda"}, here);
  ASSERT_TRUE(run.ok()) << run.error().message;
  Recipe fast = sample_recipe("k1", types_2d(64, 128), here, 1e-5);
  fast.run_id = *run;
  Recipe slow = sample_recipe("k1", types_2d(64, 128), here, 3e-5);
  Recipe stale = sample_recipe("k1", types_2d(64, 128), old_compiler, 0.5e-5);
  ASSERT_TRUE(kb->record_recipe(slow).ok());
  ASSERT_TRUE(kb->record_recipe(stale).ok());
  auto fast_id = kb->record_recipe(fast);
  ASSERT_TRUE(fast_id.ok()) << fast_id.error().message;
  ASSERT_TRUE(kb->record_recipe(sample_recipe("k2", types_2d(64, 128), here, 1e-6)).ok());   // another task
  ASSERT_TRUE(kb->record_recipe(sample_recipe("k1", types_2d(64, 256), here, 1e-6)).ok());   // other shapes
  ASSERT_TRUE(kb->record_recipe(sample_recipe("k1", types_2d(64, 128, DType::f16), here, 1e-6)).ok());  // dtypes

  const RecipeKey key{"k1", types_2d(64, 128)};
  auto ignoring = kb->exact_hits(key, here, FingerprintPolicy::ignore);
  ASSERT_TRUE(ignoring.ok()) << ignoring.error().message;
  ASSERT_EQ(ignoring->size(), 2u);
  EXPECT_EQ((*ignoring)[0].recipe.id, *fast_id);  // fastest first
  EXPECT_TRUE((*ignoring)[0].same_fingerprint);
  EXPECT_EQ((*ignoring)[0].recipe.run_id, *run);
  EXPECT_EQ((*ignoring)[0].recipe.implementation, fast.implementation);
  EXPECT_EQ((*ignoring)[0].recipe.timings, fast.timings);
  EXPECT_EQ((*ignoring)[0].recipe.verification, fast.verification);
  EXPECT_EQ((*ignoring)[0].recipe.e2e_gain, fast.e2e_gain);
  EXPECT_EQ((*ignoring)[1].recipe.seconds, 3e-5);

  // reverify: the stale one too, after those under the current fingerprint, with why it differs.
  auto reverify = kb->exact_hits(key, here, FingerprintPolicy::reverify);
  ASSERT_TRUE(reverify.ok());
  ASSERT_EQ(reverify->size(), 3u);
  EXPECT_FALSE((*reverify)[2].same_fingerprint);
  EXPECT_EQ((*reverify)[2].recipe.fingerprint, old_compiler);
  ASSERT_EQ((*reverify)[2].differences.size(), 1u);
  EXPECT_EQ((*reverify)[2].differences[0], "compiler: g++ 11.0.0 -> g++ 12.2.0");

  // Under a fingerprint nothing was measured with, ignore gives nothing at all.
  EXPECT_TRUE(kb->exact_hits(key, sample_fingerprint("clang 18"), FingerprintPolicy::ignore)->empty());
  EXPECT_EQ(kb->exact_hits(key, sample_fingerprint("clang 18"), FingerprintPolicy::reverify)->size(), 3u);
}

TEST(KbRecipes, NearHitsAreSameTaskOtherShapesSameDeviceKindNearestFirst) {
  TempKb file;
  auto kb = KnowledgeBase::open(file.path);
  ASSERT_TRUE(kb.ok());
  const Fingerprint here = sample_fingerprint();
  Fingerprint cpu = sample_fingerprint();
  cpu.device_kind = "cpu";
  cpu.device_name = "Xeon";
  ASSERT_TRUE(kb->record_recipe(sample_recipe("k1", types_2d(64, 128), here, 1e-5)).ok());    // exact: not near
  auto far = kb->record_recipe(sample_recipe("k1", types_2d(64, 4096), here, 1e-5));          // 5 octaves
  auto near = kb->record_recipe(sample_recipe("k1", types_2d(128, 128), here, 1e-5));         // 1 octave
  auto stale_near = kb->record_recipe(sample_recipe("k1", types_2d(64, 256), sample_fingerprint("g++ 9"), 1e-5));
  ASSERT_TRUE(kb->record_recipe(sample_recipe("k1", types_2d(64, 129), cpu, 1e-5)).ok());    // other device kind
  ASSERT_TRUE(kb->record_recipe(sample_recipe("k9", types_2d(64, 129), here, 1e-5)).ok());   // other task
  ASSERT_TRUE(far.ok() && near.ok() && stale_near.ok());

  auto hits = kb->near_hits({"k1", types_2d(64, 128)}, here);
  ASSERT_TRUE(hits.ok()) << hits.error().message;
  ASSERT_EQ(hits->size(), 3u);
  EXPECT_EQ((*hits)[0].recipe.id, *near);  // 128 vs 64 twice (both tensors): distance 2, same fingerprint first
  EXPECT_TRUE((*hits)[0].same_fingerprint);
  EXPECT_EQ((*hits)[1].recipe.id, *stale_near);
  EXPECT_FALSE((*hits)[1].same_fingerprint);
  EXPECT_FALSE((*hits)[1].differences.empty());
  EXPECT_EQ((*hits)[2].recipe.id, *far);
  EXPECT_DOUBLE_EQ((*hits)[0].distance, 2.0);
  EXPECT_DOUBLE_EQ((*hits)[2].distance, 10.0);
  EXPECT_EQ(kb->near_hits({"k1", types_2d(64, 128)}, here, 1)->size(), 1u);
}

TEST(KbLessons, KnownFailureIsTheNewestLessonWhenNegative) {
  TempKb file;
  auto kb = KnowledgeBase::open(file.path);
  ASSERT_TRUE(kb.ok());
  Lesson regressed;
  regressed.pattern = "merge_gemms";
  regressed.device_kind = "cuda";
  regressed.device_name = "NVIDIA H200";
  regressed.outcome = LessonOutcome::regressed;
  regressed.reason = "merged GEMM 3% slower end to end";
  regressed.evidence = {{"e2e_gain", -0.03}};
  regressed.created_at = 1000;
  ASSERT_TRUE(kb->record_lesson(regressed).ok());
  Lesson works_elsewhere = regressed;
  works_elsewhere.device_name = "NVIDIA L4";
  works_elsewhere.outcome = LessonOutcome::improved;
  works_elsewhere.created_at = 2000;
  ASSERT_TRUE(kb->record_lesson(works_elsewhere).ok());

  auto failure = kb->known_failure("merge_gemms", "cuda", "NVIDIA H200");
  ASSERT_TRUE(failure.ok()) << failure.error().message;
  ASSERT_TRUE(failure->has_value());
  EXPECT_EQ((*failure)->reason, regressed.reason);
  EXPECT_EQ((*failure)->evidence, regressed.evidence);
  EXPECT_FALSE(kb->known_failure("merge_gemms", "cuda", "NVIDIA L4")->has_value());  // it improved there
  EXPECT_FALSE(kb->known_failure("fuse_rows", "cuda", "NVIDIA H200")->has_value());  // no lesson
  EXPECT_FALSE(kb->known_failure("merge_gemms", "cpu", "NVIDIA H200")->has_value());

  // A newer success on the same device (a lesson for the whole kind) supersedes the regression.
  Lesson fixed = regressed;
  fixed.device_name = "";
  fixed.outcome = LessonOutcome::improved;
  fixed.created_at = 3000;
  ASSERT_TRUE(kb->record_lesson(fixed).ok());
  EXPECT_FALSE(kb->known_failure("merge_gemms", "cuda", "NVIDIA H200")->has_value());
  EXPECT_EQ(kb->lessons("merge_gemms", "cuda", "NVIDIA H200")->size(), 2u);
}

TEST(KbTransactions, AnErrorInsideAtomicallyCommitsNothing) {
  TempKb file;
  auto kb = KnowledgeBase::open(file.path);
  ASSERT_TRUE(kb.ok());
  const Fingerprint here = sample_fingerprint();
  Status status = kb->atomically([&]() -> Status {
    KILN_TRY(kb->record_recipe(sample_recipe("k1", types_2d(8, 8), here, 1e-6)));
    Decision d;
    d.run_id = "run-does-not-exist";  // the foreign key fails
    d.opportunity = "x";
    KILN_TRY(kb->record_decision(d));
    return ok_status();
  });
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(contains(status.error().message, "run-does-not-exist")) << status.error().message;
  EXPECT_EQ(kb->stats()->recipes, 0);
  EXPECT_EQ(kb->stats()->fingerprints, 0);
}

// A knowledge base with a bit of everything.
void fill(KnowledgeBase& kb) {
  const Fingerprint here = sample_fingerprint();
  auto run = kb.begin_run({"kiln optimize zoo:llama", "zoo:llama", "chat.json", "cuda"}, here);
  ASSERT_TRUE(run.ok());
  Recipe r = sample_recipe("k1", types_2d(64, 128), here, 1e-5);
  r.run_id = *run;
  ASSERT_TRUE(kb.record_recipe(r).ok());
  Recipe lib = sample_recipe("library:matmul", types_2d(64, 64), sample_fingerprint("g++ 11"), 2e-5);
  lib.kind = ImplementationKind::library;
  lib.implementation = {{"algorithm", 17}, {"workspace", 1 << 20}};
  lib.e2e_gain.reset();
  ASSERT_TRUE(kb.record_recipe(lib).ok());
  Lesson l;
  l.run_id = *run;
  l.pattern = "fuse_rows:rmsnorm+quant";
  l.device_kind = "cuda";
  l.outcome = LessonOutcome::improved;
  l.reason = "4% faster";
  l.evidence = {{"e2e_gain", 0.04}};
  ASSERT_TRUE(kb.record_lesson(l).ok());
  Decision d;
  d.run_id = *run;
  d.opportunity = "fuse rmsnorm+quant";
  d.predicted_gain = 0.05;
  d.measured_gain = 0.04;
  d.kept = true;
  d.reason = "beat noise";
  ASSERT_TRUE(kb.record_decision(d).ok());
  ASSERT_TRUE(kb.finish_run(*run, RunStatus::succeeded).ok());
}

TEST(KbJsonl, ExportImportRoundTripGivesIdenticalStatsAndReimportAddsNothing) {
  TempKb a, b;
  auto source = KnowledgeBase::open(a.path);
  ASSERT_TRUE(source.ok());
  fill(*source);
  std::stringstream exported;
  auto counts = export_jsonl(*source, exported);
  ASSERT_TRUE(counts.ok()) << counts.error().message;
  EXPECT_EQ(counts->total(), 2 + 1 + 2 + 1 + 1);

  auto target = KnowledgeBase::open(b.path);
  ASSERT_TRUE(target.ok());
  std::stringstream in1(exported.str());
  auto first = import_jsonl(*target, in1, "a.jsonl");
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->added.total(), counts->total());
  EXPECT_EQ(*target->stats(), *source->stats());
  std::stringstream in2(exported.str());
  auto second = import_jsonl(*target, in2, "a.jsonl");
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ(second->added.total(), 0);
  EXPECT_EQ(second->already_present.total(), counts->total());
  EXPECT_EQ(*target->stats(), *source->stats());
  // Not only the counts: the rows themselves come back identical.
  std::stringstream reexported;
  ASSERT_TRUE(export_jsonl(*target, reexported).ok());
  EXPECT_EQ(reexported.str(), exported.str());
}

TEST(KbJsonl, MalformedLineNamesItsLineAndCommitsNothing) {
  TempKb a, b;
  auto source = KnowledgeBase::open(a.path);
  ASSERT_TRUE(source.ok());
  fill(*source);
  std::stringstream exported;
  ASSERT_TRUE(export_jsonl(*source, exported).ok());
  std::vector<std::string> lines;
  for (std::string line; std::getline(exported, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 8u);  // header, 2 fingerprints, run, 2 recipes, lesson, decision

  struct Case {
    const char* label;
    int line;  // 1-based line to replace
    std::function<std::string(nlohmann::json)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"not json", 5, [](nlohmann::json) { return std::string("{\"type\": \"recipe\", "); }, "x.jsonl:5: not valid JSON"},
      {"missing field", 5, [](nlohmann::json j) { j.erase("seconds"); return j.dump(); },
       "x.jsonl:5: field 'seconds' is missing"},
      {"bad dtype", 5, [](nlohmann::json j) { j["dtypes"][0] = "f13"; return j.dump(); },
       "x.jsonl:5: dtypes[0] is not a kiln dtype: \"f13\""},
      {"bad enum", 4, [](nlohmann::json j) { j["status"] = "done"; return j.dump(); },
       "x.jsonl:4: field 'status' is 'done', not one of running, succeeded, failed, interrupted"},
      {"dangling run", 8, [](nlohmann::json j) { j["run_id"] = "run-nowhere"; return j.dump(); },
       "x.jsonl:8: field 'run_id' names runs row 'run-nowhere'"},
      {"wrong hash", 2, [](nlohmann::json j) { j["hash"] = "0000000000000000"; return j.dump(); },
       "x.jsonl:2: field 'hash' is 0000000000000000 but the fingerprint hashes to"},
      {"unknown type", 7, [](nlohmann::json j) { j["type"] = "lessons"; return j.dump(); },
       "x.jsonl:7: unknown type 'lessons'"},
      {"no header", 1, [](nlohmann::json j) { j["format"] = "other"; return j.dump(); },
       "x.jsonl:1: the first line is not a kiln KB header"},
      {"newer export", 1, [](nlohmann::json j) { j["schema_version"] = 2; return j.dump(); },
       "x.jsonl:1: exported with schema version 2, this kiln reads version 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    std::string text;
    for (size_t i = 0; i < lines.size(); ++i) {
      text += (static_cast<int>(i) + 1 == c.line ? c.edit(nlohmann::json::parse(lines[i])) : lines[i]) + "\n";
    }
    auto target = KnowledgeBase::open(b.path);
    ASSERT_TRUE(target.ok());
    std::stringstream in(text);
    auto result = import_jsonl(*target, in, "x.jsonl");
    ASSERT_FALSE(result.ok());
    EXPECT_TRUE(contains(result.error().message, c.expected)) << result.error().message;
    EXPECT_EQ(*target->stats(), KbStats{}) << "rows before the bad line were committed";
  }
}

TEST(KbGc, RemovesOtherFingerprintsOldRecipesAndOrphansAndSaysSo) {
  TempKb file;
  auto kb = KnowledgeBase::open(file.path);
  ASSERT_TRUE(kb.ok());
  const Fingerprint here = sample_fingerprint();
  Fingerprint other_device = sample_fingerprint();
  other_device.device_name = "NVIDIA L4";
  const int64_t now = 100 * 86400;
  Recipe fresh = sample_recipe("k1", types_2d(8, 8), here, 1e-6);
  fresh.created_at = now - 86400;
  Recipe old = sample_recipe("k2", types_2d(8, 8), here, 1e-6);
  old.created_at = now - 40 * 86400;
  Recipe stale = sample_recipe("k3", types_2d(8, 8), sample_fingerprint("g++ 9"), 1e-6);
  stale.created_at = now;
  Recipe elsewhere = sample_recipe("k4", types_2d(8, 8), other_device, 1e-6);
  elsewhere.created_at = now;
  for (const Recipe* r : {&fresh, &old, &stale, &elsewhere}) ASSERT_TRUE(kb->record_recipe(*r).ok());

  GcOptions options;
  options.current = here;
  options.keep_other_devices = true;
  options.now = now;
  auto first = collect_garbage(*kb, options);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->recipes_other_fingerprint, 1);  // the stale compiler, not the other device
  EXPECT_EQ(first->orphan_fingerprints, 1);        // g++ 9's fingerprint, now unreferenced
  EXPECT_EQ(first->recipes_too_old, 0);
  EXPECT_EQ(kb->stats()->recipes, 3);

  options.keep_other_devices = false;
  options.older_than_days = 30;
  auto second = collect_garbage(*kb, options);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->recipes_other_fingerprint, 1);  // the other device
  EXPECT_EQ(second->recipes_too_old, 1);
  EXPECT_EQ(second->orphan_fingerprints, 1);
  EXPECT_EQ(second->summary(),
            "removed 2 recipes (1 under another fingerprint, 1 too old), 1 orphan fingerprint, 0 dangling run "
            "references");
  auto left = kb->recipes();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ(left->front().key.task_hash, "k1");
  EXPECT_EQ(kb->stats()->fingerprints, 1);
}

TEST(KbGc, ClearsReferencesToRunsThatAreGone) {
  TempKb file;
  auto kb = KnowledgeBase::open(file.path);
  ASSERT_TRUE(kb.ok());
  fill(*kb);
  // Another tool with foreign keys off (the sqlite3 shell's default) deleted the run.
  ASSERT_TRUE(kb->database().exec("PRAGMA foreign_keys=OFF; DELETE FROM runs; PRAGMA foreign_keys=ON").ok());
  GcOptions options;
  options.current = sample_fingerprint();
  options.keep_other_devices = true;
  auto report = collect_garbage(*kb, options);
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_EQ(report->dangling_run_references, 3);  // recipe and lesson run_ids cleared, decision removed
  EXPECT_EQ(kb->stats()->decisions, 0);
  EXPECT_EQ(*kb->database().query_integer("SELECT count(*) FROM pragma_foreign_key_check"), 0);
}

}  // namespace
}  // namespace kiln::kb
