// Schema creation, version check and migration (schema.h).
#include "kb/schema.h"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace kiln::kb {
namespace {

constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE fingerprints (
  hash TEXT PRIMARY KEY,
  canonical TEXT NOT NULL,
  device_kind TEXT NOT NULL,
  device_name TEXT NOT NULL
) STRICT;
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  started_at INTEGER NOT NULL,
  finished_at INTEGER,
  command TEXT NOT NULL,
  model TEXT NOT NULL,
  workload TEXT NOT NULL,
  backend TEXT NOT NULL,
  fingerprint TEXT NOT NULL REFERENCES fingerprints(hash),
  status TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'interrupted'))
) STRICT;
CREATE TABLE recipes (
  id TEXT PRIMARY KEY,
  run_id TEXT REFERENCES runs(id) ON DELETE SET NULL,
  created_at INTEGER NOT NULL,
  task_hash TEXT NOT NULL,
  shapes TEXT NOT NULL,
  dtypes TEXT NOT NULL,
  fingerprint TEXT NOT NULL REFERENCES fingerprints(hash),
  implementation_kind TEXT NOT NULL CHECK (implementation_kind IN ('schedule', 'library')),
  implementation TEXT NOT NULL,
  source_hash TEXT NOT NULL,
  seconds REAL NOT NULL,
  timings TEXT NOT NULL,
  verification TEXT NOT NULL,
  e2e_gain REAL
) STRICT;
CREATE INDEX recipes_by_task ON recipes(task_hash, fingerprint);
CREATE TABLE lessons (
  id TEXT PRIMARY KEY,
  run_id TEXT REFERENCES runs(id) ON DELETE SET NULL,
  created_at INTEGER NOT NULL,
  pattern TEXT NOT NULL,
  device_kind TEXT NOT NULL,
  device_name TEXT NOT NULL,
  outcome TEXT NOT NULL CHECK (outcome IN ('improved', 'neutral', 'regressed', 'incorrect', 'failed')),
  reason TEXT NOT NULL,
  evidence TEXT NOT NULL
) STRICT;
CREATE INDEX lessons_by_pattern ON lessons(pattern, device_kind);
CREATE TABLE decisions (
  id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  created_at INTEGER NOT NULL,
  opportunity TEXT NOT NULL,
  predicted_gain REAL,
  measured_gain REAL,
  kept INTEGER NOT NULL CHECK (kept IN (0, 1)),
  reason TEXT NOT NULL
) STRICT;
CREATE INDEX decisions_by_run ON decisions(run_id);
)sql";

// Migrations from schema version `from` to `from + 1`. None yet: version 1 is the first schema.
struct Migration {
  int from;
  const char* sql;
};
const std::vector<Migration>& migrations() {
  static const std::vector<Migration> kMigrations = {};
  return kMigrations;
}

const Migration* migration_from(int version) {
  for (const Migration& m : migrations()) {
    if (m.from == version) return &m;
  }
  return nullptr;
}

}  // namespace

Status prepare_schema(Database& db) {
  const std::string& path = db.path();
  // Reading the header is where SQLite notices a file that is not a database at all.
  auto app_id = db.query_integer("PRAGMA application_id");
  if (!app_id.ok()) return with_context(app_id.error(), "knowledge base " + path);
  KILN_ASSIGN_OR_RETURN(Statement mode, db.prepare("PRAGMA journal_mode=WAL"));
  KILN_ASSIGN_OR_RETURN(bool row, mode.step());
  if (!row || mode.text(0) != "wal") {
    return make_error(ErrorCode::io_error, "knowledge base " + path + ": cannot switch to WAL journal mode (got '" +
                                               (row ? mode.text(0) : std::string()) + "')");
  }
  mode.reset();
  KILN_TRY(db.exec("PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL"));

  // The common case, a current kiln KB, needs no write lock: readers open it while a writer writes.
  KILN_ASSIGN_OR_RETURN(int64_t version, db.query_integer("PRAGMA user_version"));
  if (*app_id == kApplicationId && version == kSchemaVersion) return ok_status();

  // Check again and create or migrate under the write lock, so that two processes opening a new file do not
  // both create it.
  KILN_ASSIGN_OR_RETURN(Transaction tx, Transaction::begin(db));
  KILN_ASSIGN_OR_RETURN(int64_t application_id, db.query_integer("PRAGMA application_id"));
  KILN_ASSIGN_OR_RETURN(version, db.query_integer("PRAGMA user_version"));
  KILN_ASSIGN_OR_RETURN(int64_t objects, db.query_integer("SELECT count(*) FROM sqlite_master"));
  if (application_id == 0 && version == 0 && objects == 0) {
    KILN_TRY(db.exec(kSchemaV1));
    KILN_TRY(db.exec(fmt::format("PRAGMA application_id={}; PRAGMA user_version={}", kApplicationId, kSchemaVersion)));
    return tx.commit();
  }
  if (application_id != kApplicationId) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} is a SQLite file but not a kiln knowledge base (application_id {:#x}, kiln's is "
                                  "{:#x}); give --kb another file",
                                  path, application_id, kApplicationId));
  }
  if (version > kSchemaVersion) {
    return make_error(ErrorCode::unsupported,
                      fmt::format("knowledge base {} has schema version {}, newer than this kiln's {} (written by a "
                                  "newer kiln): use that kiln, or give --kb another file",
                                  path, version, kSchemaVersion));
  }
  for (int64_t v = version; v < kSchemaVersion; ++v) {
    const Migration* m = migration_from(static_cast<int>(v));
    if (!m) {
      return make_error(ErrorCode::unsupported,
                        fmt::format("knowledge base {} has schema version {}, older than this kiln's {}, and kiln has "
                                    "no migration from it: export it with the kiln that wrote it (kiln kb export) and "
                                    "import the file into a new knowledge base",
                                    path, version, kSchemaVersion));
    }
    KILN_TRY(db.exec(m->sql));
    KILN_TRY(db.exec(fmt::format("PRAGMA user_version={}", v + 1)));
  }
  return tx.commit();
}

}  // namespace kiln::kb
