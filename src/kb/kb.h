// The knowledge base (DESIGN.md decision 9): one SQLite file (WAL, so readers never block the writer) that
// remembers runs, kernel recipes with all their timings and verification evidence, lessons and decisions,
// keyed by task structure x shapes x dtypes x fingerprint (fingerprint.h).
//
// How the tuner and the optimize loop use it:
//
//   KILN_ASSIGN_OR_RETURN(kb::KnowledgeBase kb, kb::KnowledgeBase::open(options.kb_path));
//   const kb::Fingerprint here = kb::fingerprint_of(backend.device());
//   KILN_ASSIGN_OR_RETURN(std::string run, kb.begin_run({command, model, workload, "cuda"}, here));
//
//   // Per kernel task: an exact hit is re-verified, never trusted; near hits seed the search.
//   const kb::RecipeKey key{kernel::kernel_hash(k), types};
//   KILN_ASSIGN_OR_RETURN(auto exact, kb.exact_hits(key, here, kb::FingerprintPolicy::reverify));
//   if (exact.empty()) { KILN_ASSIGN_OR_RETURN(auto seeds, kb.near_hits(key, here, 4)); ... }
//   // Before trying a rewrite: does a lesson say it fails on this device?
//   KILN_ASSIGN_OR_RETURN(auto failure, kb.known_failure("merge_gemms", here.device_kind, here.device_name));
//
//   // What a run found, all or nothing: the recipes, lessons and decisions of one step in one transaction.
//   KILN_TRY(kb.atomically([&]() -> Status {
//     KILN_TRY(kb.record_recipe(recipe));       // recipe.run_id = run
//     KILN_TRY(kb.record_decision(decision));
//     return ok_status();
//   }));
//   KILN_TRY(kb.finish_run(run, kb::RunStatus::succeeded));
//
// Every write outside atomically() is its own transaction. A process killed at any point leaves the file
// consistent: what was committed is whole, what was not is gone (tests/kb/kb_crash_test.cpp). A
// KnowledgeBase is one connection: use it from one thread at a time; open one per thread or process.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kb/fingerprint.h"
#include "kb/records.h"
#include "kb/sqlite.h"

namespace kiln::kb {

// What to do with a recipe recorded under another fingerprint (another driver, compiler, library or kiln).
enum class FingerprintPolicy {
  reverify,  // return it, marked with the differences, for the caller to re-verify and re-time
  ignore,    // do not return it
};

struct RecipeHit {
  Recipe recipe;
  bool same_fingerprint = false;
  std::vector<std::string> differences;  // fingerprint_differences(recorded, current); empty when the same
  double distance = 0;  // near hits: how far its shapes are from the key's (0 for exact hits)
};

struct KbStats {
  int64_t runs = 0, recipes = 0, lessons = 0, decisions = 0, fingerprints = 0;
  int64_t tasks = 0;  // distinct task hashes among recipes
  bool operator==(const KbStats& other) const = default;
};

enum class OpenMode {
  create,      // create an empty knowledge base when the file does not exist
  must_exist,  // a missing file is an Error (read-only commands: stats, list, show, export)
};

class KnowledgeBase {
 public:
  // Opens `path`, checking its schema version (schema.h): a newer or unknown version, or a file that is not a
  // kiln KB, is an Error saying what to do.
  static Result<KnowledgeBase> open(const std::string& path, OpenMode mode = OpenMode::create);

  // Runs. begin_run records the fingerprint too and returns the run's id.
  Result<std::string> begin_run(const RunInfo& info, const Fingerprint& fingerprint);
  Status finish_run(const std::string& run_id, RunStatus status);

  // Writes; each returns the row's id (the given one, or a new one when empty). A run_id must name a run in
  // this knowledge base.
  Result<std::string> record_recipe(const Recipe& recipe);
  Result<std::string> record_lesson(const Lesson& lesson);
  Result<std::string> record_decision(const Decision& decision);
  Status record_fingerprint(const Fingerprint& fingerprint);
  Status record_run(const Run& run);  // a whole run row (import); its fingerprint must be recorded

  // Runs `body` in one transaction: committed when it returns ok, rolled back when it returns an Error.
  // Nested calls join the outer transaction.
  Status atomically(const std::function<Status()>& body);

  // Recipes for exactly this task, shapes and dtypes. Those under `current` come first; under another
  // fingerprint only with FingerprintPolicy::reverify, with the differences said. Fastest first within each.
  Result<std::vector<RecipeHit>> exact_hits(const RecipeKey& key, const Fingerprint& current,
                                            FingerprintPolicy policy);
  // Recipes for the same task at other shapes or dtypes on the same device kind, nearest first (distance:
  // the summed |log2| ratio of dimensions; another rank or dtype counts as far), at most `limit`.
  Result<std::vector<RecipeHit>> near_hits(const RecipeKey& key, const Fingerprint& current, int limit = 8);

  // Lessons about `pattern` on this device (lessons for the whole device kind, device_name "", included),
  // newest first.
  Result<std::vector<Lesson>> lessons(const std::string& pattern, const std::string& device_kind,
                                      const std::string& device_name);
  // The newest lesson about `pattern` on this device when it is negative (regressed, incorrect, failed);
  // none when there is no lesson or the newest one says it worked.
  Result<std::optional<Lesson>> known_failure(const std::string& pattern, const std::string& device_kind,
                                              const std::string& device_name);

  // Reading back.
  Result<KbStats> stats();
  Result<std::vector<Run>> runs();
  Result<std::vector<Recipe>> recipes();
  Result<std::vector<Lesson>> all_lessons();
  Result<std::vector<Decision>> decisions();
  Result<std::vector<Fingerprint>> fingerprints();
  Result<std::optional<Fingerprint>> fingerprint(const std::string& hash);

  Database& database() { return db_; }
  const std::string& path() const { return db_.path(); }

 private:
  explicit KnowledgeBase(Database db) : db_(std::move(db)) {}
  Database db_;
};

// "run-" + 16 random hex digits (and "rcp-", "lsn-", "dec-").
std::string new_id(const std::string& prefix);
int64_t unix_now();

}  // namespace kiln::kb
