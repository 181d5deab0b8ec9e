// Knowledge-base garbage collection (gc.h).
#include "kb/gc.h"

#include <fmt/format.h>

namespace kiln::kb {
namespace {

Result<int64_t> run_counting(Database& db, const std::string& sql, const std::vector<std::string>& text_params,
                             std::optional<int64_t> integer_param = std::nullopt) {
  KILN_ASSIGN_OR_RETURN(Statement stmt, db.prepare(sql));
  int index = 1;
  for (const std::string& p : text_params) stmt.bind(index++, p);
  if (integer_param) stmt.bind(index, *integer_param);
  KILN_TRY(stmt.run());
  return db.changes();
}

}  // namespace

std::string GcReport::summary() const {
  const int64_t recipes = recipes_other_fingerprint + recipes_too_old;
  return fmt::format("removed {} recipe{} ({} under another fingerprint, {} too old), {} orphan fingerprint{}, "
                     "{} dangling run reference{}",
                     recipes, recipes == 1 ? "" : "s", recipes_other_fingerprint, recipes_too_old,
                     orphan_fingerprints, orphan_fingerprints == 1 ? "" : "s", dangling_run_references,
                     dangling_run_references == 1 ? "" : "s");
}

Result<GcReport> collect_garbage(KnowledgeBase& kb, const GcOptions& options) {
  Database& db = kb.database();
  GcReport report;
  const std::string current = options.current.hash();
  KILN_TRY(kb.atomically([&]() -> Status {
    if (options.keep_other_devices) {
      KILN_ASSIGN_OR_RETURN(report.recipes_other_fingerprint,
                            run_counting(db,
                                         "DELETE FROM recipes WHERE fingerprint != ?1 AND fingerprint IN (SELECT hash "
                                         "FROM fingerprints WHERE device_kind = ?2 AND device_name = ?3)",
                                         {current, options.current.device_kind, options.current.device_name}));
    } else {
      KILN_ASSIGN_OR_RETURN(report.recipes_other_fingerprint,
                            run_counting(db, "DELETE FROM recipes WHERE fingerprint != ?1", {current}));
    }
    if (options.older_than_days) {
      const int64_t now = options.now ? options.now : unix_now();
      const int64_t cutoff = now - static_cast<int64_t>(*options.older_than_days) * 86400;
      KILN_ASSIGN_OR_RETURN(report.recipes_too_old,
                            run_counting(db, "DELETE FROM recipes WHERE created_at < ?1", {}, cutoff));
    }
    int64_t n = 0;
    KILN_ASSIGN_OR_RETURN(n, run_counting(db,
                                          "UPDATE recipes SET run_id = NULL WHERE run_id IS NOT NULL AND run_id NOT IN "
                                          "(SELECT id FROM runs)",
                                          {}));
    report.dangling_run_references += n;
    KILN_ASSIGN_OR_RETURN(n, run_counting(db,
                                          "UPDATE lessons SET run_id = NULL WHERE run_id IS NOT NULL AND run_id NOT IN "
                                          "(SELECT id FROM runs)",
                                          {}));
    report.dangling_run_references += n;
    KILN_ASSIGN_OR_RETURN(n, run_counting(db, "DELETE FROM decisions WHERE run_id NOT IN (SELECT id FROM runs)", {}));
    report.dangling_run_references += n;
    // A fingerprint is kept while anything refers to it, and the current one always.
    KILN_ASSIGN_OR_RETURN(report.orphan_fingerprints,
                          run_counting(db,
                                       "DELETE FROM fingerprints WHERE hash != ?1 AND hash NOT IN (SELECT fingerprint "
                                       "FROM recipes) AND hash NOT IN (SELECT fingerprint FROM runs)",
                                       {current}));
    return ok_status();
  }));
  return report;
}

}  // namespace kiln::kb
