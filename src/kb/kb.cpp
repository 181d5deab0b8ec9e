// KnowledgeBase: opening and writing (kb.h). The reuse queries and reading back are in kb_queries.cpp.
#include "kb/kb.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include "kb/schema.h"

namespace kiln::kb {

std::string new_id(const std::string& prefix) {
  // Reseeded in a forked child, which would otherwise repeat its parent's ids.
  static thread_local std::mt19937_64 rng;
  static thread_local pid_t seeded_for = 0;
  if (seeded_for != getpid()) {
    seeded_for = getpid();
    std::random_device device;
    rng.seed((static_cast<uint64_t>(device()) << 32) ^ device() ^
             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  }
  return fmt::format("{}-{:016x}", prefix, rng());
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

std::optional<std::string> null_if_empty(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

void bind_optional(Statement& stmt, int index, const std::optional<double>& value) {
  if (value) {
    stmt.bind(index, *value);
  } else {
    stmt.bind_null(index);
  }
}

}  // namespace

Result<KnowledgeBase> KnowledgeBase::open(const std::string& path, OpenMode mode) {
  KILN_ASSIGN_OR_RETURN(Database db, Database::open(path, mode == OpenMode::create));
  KILN_TRY(prepare_schema(db));
  return KnowledgeBase(std::move(db));
}

Status KnowledgeBase::atomically(const std::function<Status()>& body) {
  if (db_.in_transaction()) return body();
  KILN_ASSIGN_OR_RETURN(Transaction tx, Transaction::begin(db_));
  KILN_TRY(body());
  return tx.commit();
}

Status KnowledgeBase::record_fingerprint(const Fingerprint& fingerprint) {
  KILN_ASSIGN_OR_RETURN(Statement stmt,
                        db_.prepare("INSERT OR IGNORE INTO fingerprints (hash, canonical, device_kind, device_name) "
                                    "VALUES (?1, ?2, ?3, ?4)"));
  stmt.bind(1, fingerprint.hash()).bind(2, fingerprint.canonical()).bind(3, fingerprint.device_kind);
  stmt.bind(4, fingerprint.device_name);
  return stmt.run();
}

Result<std::string> KnowledgeBase::begin_run(const RunInfo& info, const Fingerprint& fingerprint) {
  Run run;
  run.id = new_id("run");
  run.started_at = unix_now();
  run.info = info;
  run.fingerprint = fingerprint.hash();
  KILN_TRY(atomically([&]() -> Status {
    KILN_TRY(record_fingerprint(fingerprint));
    return record_run(run);
  }));
  return run.id;
}

Status KnowledgeBase::record_run(const Run& run) {
  KILN_ASSIGN_OR_RETURN(Statement stmt,
                        db_.prepare("INSERT INTO runs (id, started_at, finished_at, command, model, workload, backend, "
                                    "fingerprint, status) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
  stmt.bind(1, run.id).bind(2, run.started_at);
  if (run.finished_at) {
    stmt.bind(3, *run.finished_at);
  } else {
    stmt.bind_null(3);
  }
  stmt.bind(4, run.info.command).bind(5, run.info.model).bind(6, run.info.workload).bind(7, run.info.backend);
  stmt.bind(8, run.fingerprint).bind(9, run_status_name(run.status));
  Status status = stmt.run();
  if (!status.ok()) return with_context(status.error(), "record run " + run.id);
  return ok_status();
}

Status KnowledgeBase::finish_run(const std::string& run_id, RunStatus status) {
  KILN_ASSIGN_OR_RETURN(Statement stmt, db_.prepare("UPDATE runs SET finished_at = ?1, status = ?2 WHERE id = ?3"));
  stmt.bind(1, unix_now()).bind(2, run_status_name(status)).bind(3, run_id);
  KILN_TRY(stmt.run());
  if (db_.changes() != 1) return make_error(ErrorCode::invalid_argument, "finish_run: no run " + run_id);
  return ok_status();
}

Result<std::string> KnowledgeBase::record_recipe(const Recipe& recipe) {
  const std::string id = recipe.id.empty() ? new_id("rcp") : recipe.id;
  KILN_TRY(atomically([&]() -> Status {
    KILN_TRY(record_fingerprint(recipe.fingerprint));
    KILN_ASSIGN_OR_RETURN(
        Statement stmt,
        db_.prepare("INSERT INTO recipes (id, run_id, created_at, task_hash, shapes, dtypes, fingerprint, "
                    "implementation_kind, implementation, source_hash, seconds, timings, verification, e2e_gain) "
                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"));
    stmt.bind(1, id).bind(2, null_if_empty(recipe.run_id)).bind(3, recipe.created_at ? recipe.created_at : unix_now());
    stmt.bind(4, recipe.key.task_hash).bind(5, shapes_json(recipe.key.types)).bind(6, dtypes_json(recipe.key.types));
    stmt.bind(7, recipe.fingerprint.hash()).bind(8, implementation_kind_name(recipe.kind));
    stmt.bind(9, recipe.implementation.dump()).bind(10, recipe.source_hash).bind(11, recipe.seconds);
    stmt.bind(12, recipe.timings.dump()).bind(13, recipe.verification.dump());
    bind_optional(stmt, 14, recipe.e2e_gain);
    Status status = stmt.run();
    if (!status.ok()) return with_context(status.error(), "record recipe " + id);
    return ok_status();
  }));
  return id;
}

Result<std::string> KnowledgeBase::record_lesson(const Lesson& lesson) {
  const std::string id = lesson.id.empty() ? new_id("lsn") : lesson.id;
  KILN_ASSIGN_OR_RETURN(Statement stmt,
                        db_.prepare("INSERT INTO lessons (id, run_id, created_at, pattern, device_kind, device_name, "
                                    "outcome, reason, evidence) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
  stmt.bind(1, id).bind(2, null_if_empty(lesson.run_id)).bind(3, lesson.created_at ? lesson.created_at : unix_now());
  stmt.bind(4, lesson.pattern).bind(5, lesson.device_kind).bind(6, lesson.device_name);
  stmt.bind(7, lesson_outcome_name(lesson.outcome)).bind(8, lesson.reason).bind(9, lesson.evidence.dump());
  Status status = stmt.run();
  if (!status.ok()) return with_context(status.error(), "record lesson " + id);
  return id;
}

Result<std::string> KnowledgeBase::record_decision(const Decision& decision) {
  const std::string id = decision.id.empty() ? new_id("dec") : decision.id;
  KILN_ASSIGN_OR_RETURN(Statement stmt,
                        db_.prepare("INSERT INTO decisions (id, run_id, created_at, opportunity, predicted_gain, "
                                    "measured_gain, kept, reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
  stmt.bind(1, id).bind(2, decision.run_id).bind(3, decision.created_at ? decision.created_at : unix_now());
  stmt.bind(4, decision.opportunity);
  bind_optional(stmt, 5, decision.predicted_gain);
  bind_optional(stmt, 6, decision.measured_gain);
  stmt.bind(7, decision.kept ? 1 : 0).bind(8, decision.reason);
  Status status = stmt.run();
  if (!status.ok()) return with_context(status.error(), "record decision " + id + " of run " + decision.run_id);
  return id;
}

}  // namespace kiln::kb
