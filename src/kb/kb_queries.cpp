// KnowledgeBase: the reuse queries (exact hits, near hits, lessons) and reading rows back (kb.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kb/kb.h"

namespace kiln::kb {
namespace {

constexpr const char* kRecipeColumns =
    "id, run_id, created_at, task_hash, shapes, dtypes, fingerprint, implementation_kind, implementation, "
    "source_hash, seconds, timings, verification, e2e_gain";

std::optional<double> optional_real(const Statement& stmt, int column) {
  return stmt.is_null(column) ? std::nullopt : std::optional<double>(stmt.real(column));
}

Result<nlohmann::json> json_column(const Statement& stmt, int column, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(stmt.text(column), nullptr, false);
  if (j.is_discarded()) return make_error(ErrorCode::parse_error, what + " is not valid JSON");
  return j;
}

// One recipe row (kRecipeColumns) with its fingerprint looked up.
Result<Recipe> read_recipe(KnowledgeBase& kb, const Statement& stmt) {
  Recipe r;
  r.id = stmt.text(0);
  r.run_id = stmt.text(1);
  r.created_at = stmt.integer(2);
  r.key.task_hash = stmt.text(3);
  auto types = types_from_json(stmt.text(4), stmt.text(5));
  if (!types.ok()) return with_context(types.error(), "recipe " + r.id);
  r.key.types = std::move(types).value();
  KILN_ASSIGN_OR_RETURN(std::optional<Fingerprint> fingerprint, kb.fingerprint(stmt.text(6)));
  if (!fingerprint) {
    return make_error(ErrorCode::verify_error, "recipe " + r.id + " names fingerprint " + stmt.text(6) +
                                                   ", which the knowledge base does not hold");
  }
  r.fingerprint = *fingerprint;
  auto kind = parse_implementation_kind(stmt.text(7));
  if (!kind) return make_error(ErrorCode::parse_error, "recipe " + r.id + ": unknown implementation_kind " + stmt.text(7));
  r.kind = *kind;
  KILN_ASSIGN_OR_RETURN(r.implementation, json_column(stmt, 8, "recipe " + r.id + " implementation"));
  r.source_hash = stmt.text(9);
  r.seconds = stmt.real(10);
  KILN_ASSIGN_OR_RETURN(r.timings, json_column(stmt, 11, "recipe " + r.id + " timings"));
  KILN_ASSIGN_OR_RETURN(r.verification, json_column(stmt, 12, "recipe " + r.id + " verification"));
  r.e2e_gain = optional_real(stmt, 13);
  return r;
}

Result<std::vector<Recipe>> query_recipes(KnowledgeBase& kb, const std::string& where,
                                          const std::vector<std::string>& params) {
  KILN_ASSIGN_OR_RETURN(Statement stmt, kb.database().prepare(std::string("SELECT ") + kRecipeColumns +
                                                               " FROM recipes " + where));
  for (size_t i = 0; i < params.size(); ++i) stmt.bind(static_cast<int>(i + 1), params[i]);
  std::vector<Recipe> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, stmt.step());
    if (!row) break;
    KILN_ASSIGN_OR_RETURN(Recipe r, read_recipe(kb, stmt));
    out.push_back(std::move(r));
  }
  return out;
}

Result<Lesson> read_lesson(const Statement& stmt) {
  Lesson l;
  l.id = stmt.text(0);
  l.run_id = stmt.text(1);
  l.created_at = stmt.integer(2);
  l.pattern = stmt.text(3);
  l.device_kind = stmt.text(4);
  l.device_name = stmt.text(5);
  auto outcome = parse_lesson_outcome(stmt.text(6));
  if (!outcome) return make_error(ErrorCode::parse_error, "lesson " + l.id + ": unknown outcome " + stmt.text(6));
  l.outcome = *outcome;
  l.reason = stmt.text(7);
  KILN_ASSIGN_OR_RETURN(l.evidence, json_column(stmt, 8, "lesson " + l.id + " evidence"));
  return l;
}

Result<std::vector<Lesson>> query_lessons(Database& db, const std::string& where,
                                          const std::vector<std::string>& params) {
  KILN_ASSIGN_OR_RETURN(Statement stmt,
                        db.prepare("SELECT id, run_id, created_at, pattern, device_kind, device_name, outcome, reason, "
                                   "evidence FROM lessons " + where));
  for (size_t i = 0; i < params.size(); ++i) stmt.bind(static_cast<int>(i + 1), params[i]);
  std::vector<Lesson> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, stmt.step());
    if (!row) break;
    KILN_ASSIGN_OR_RETURN(Lesson l, read_lesson(stmt));
    out.push_back(std::move(l));
  }
  return out;
}

// Summed |log2(a/b)| over dimensions; another count of tensors, rank or dtype counts as far (1000 each).
double shape_distance(const std::vector<TensorType>& a, const std::vector<TensorType>& b) {
  constexpr double kFar = 1000;
  if (a.size() != b.size()) return kFar * static_cast<double>(std::max(a.size(), b.size()));
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].dtype != b[i].dtype) d += kFar;
    if (a[i].shape.size() != b[i].shape.size()) {
      d += kFar;
      continue;
    }
    for (size_t k = 0; k < a[i].shape.size(); ++k) {
      const double x = static_cast<double>(std::max<int64_t>(1, a[i].shape[k]));
      const double y = static_cast<double>(std::max<int64_t>(1, b[i].shape[k]));
      d += std::abs(std::log2(x / y));
    }
  }
  return d;
}

}  // namespace

Result<std::optional<Fingerprint>> KnowledgeBase::fingerprint(const std::string& hash) {
  KILN_ASSIGN_OR_RETURN(Statement stmt, db_.prepare("SELECT canonical FROM fingerprints WHERE hash = ?1"));
  stmt.bind(1, hash);
  KILN_ASSIGN_OR_RETURN(bool row, stmt.step());
  if (!row) return std::optional<Fingerprint>();
  auto parsed = parse_fingerprint(stmt.text(0));
  if (!parsed.ok()) return with_context(parsed.error(), "fingerprint " + hash);
  return std::optional<Fingerprint>(std::move(parsed).value());
}

Result<std::vector<RecipeHit>> KnowledgeBase::exact_hits(const RecipeKey& key, const Fingerprint& current,
                                                         FingerprintPolicy policy) {
  KILN_ASSIGN_OR_RETURN(std::vector<Recipe> found,
                        query_recipes(*this, "WHERE task_hash = ?1 AND shapes = ?2 AND dtypes = ?3",
                                      {key.task_hash, shapes_json(key.types), dtypes_json(key.types)}));
  const std::string here = current.hash();
  std::vector<RecipeHit> hits;
  for (Recipe& r : found) {
    RecipeHit hit;
    hit.same_fingerprint = r.fingerprint.hash() == here;
    if (!hit.same_fingerprint) {
      if (policy == FingerprintPolicy::ignore) continue;
      hit.differences = fingerprint_differences(r.fingerprint, current);
    }
    hit.recipe = std::move(r);
    hits.push_back(std::move(hit));
  }
  std::stable_sort(hits.begin(), hits.end(), [](const RecipeHit& a, const RecipeHit& b) {
    if (a.same_fingerprint != b.same_fingerprint) return a.same_fingerprint;
    if (a.recipe.seconds != b.recipe.seconds) return a.recipe.seconds < b.recipe.seconds;
    return a.recipe.created_at > b.recipe.created_at;
  });
  return hits;
}

Result<std::vector<RecipeHit>> KnowledgeBase::near_hits(const RecipeKey& key, const Fingerprint& current, int limit) {
  KILN_ASSIGN_OR_RETURN(
      std::vector<Recipe> found,
      query_recipes(*this,
                    "WHERE task_hash = ?1 AND NOT (shapes = ?2 AND dtypes = ?3) AND fingerprint IN "
                    "(SELECT hash FROM fingerprints WHERE device_kind = ?4)",
                    {key.task_hash, shapes_json(key.types), dtypes_json(key.types), current.device_kind}));
  const std::string here = current.hash();
  std::vector<RecipeHit> hits;
  for (Recipe& r : found) {
    RecipeHit hit;
    hit.same_fingerprint = r.fingerprint.hash() == here;
    if (!hit.same_fingerprint) hit.differences = fingerprint_differences(r.fingerprint, current);
    hit.distance = shape_distance(key.types, r.key.types);
    hit.recipe = std::move(r);
    hits.push_back(std::move(hit));
  }
  std::stable_sort(hits.begin(), hits.end(), [](const RecipeHit& a, const RecipeHit& b) {
    if (a.distance != b.distance) return a.distance < b.distance;
    if (a.same_fingerprint != b.same_fingerprint) return a.same_fingerprint;
    return a.recipe.seconds < b.recipe.seconds;
  });
  if (limit >= 0 && hits.size() > static_cast<size_t>(limit)) hits.resize(static_cast<size_t>(limit));
  return hits;
}

Result<std::vector<Lesson>> KnowledgeBase::lessons(const std::string& pattern, const std::string& device_kind,
                                                   const std::string& device_name) {
  return query_lessons(db_,
                       "WHERE pattern = ?1 AND device_kind = ?2 AND (device_name = ?3 OR device_name = '') "
                       "ORDER BY created_at DESC, rowid DESC",
                       {pattern, device_kind, device_name});
}

Result<std::optional<Lesson>> KnowledgeBase::known_failure(const std::string& pattern, const std::string& device_kind,
                                                           const std::string& device_name) {
  KILN_ASSIGN_OR_RETURN(std::vector<Lesson> found, lessons(pattern, device_kind, device_name));
  if (found.empty() || !is_negative(found.front().outcome)) return std::optional<Lesson>();
  return std::optional<Lesson>(found.front());
}

Result<KbStats> KnowledgeBase::stats() {
  KbStats s;
  KILN_ASSIGN_OR_RETURN(s.runs, db_.query_integer("SELECT count(*) FROM runs"));
  KILN_ASSIGN_OR_RETURN(s.recipes, db_.query_integer("SELECT count(*) FROM recipes"));
  KILN_ASSIGN_OR_RETURN(s.lessons, db_.query_integer("SELECT count(*) FROM lessons"));
  KILN_ASSIGN_OR_RETURN(s.decisions, db_.query_integer("SELECT count(*) FROM decisions"));
  KILN_ASSIGN_OR_RETURN(s.fingerprints, db_.query_integer("SELECT count(*) FROM fingerprints"));
  KILN_ASSIGN_OR_RETURN(s.tasks, db_.query_integer("SELECT count(DISTINCT task_hash) FROM recipes"));
  return s;
}

Result<std::vector<Run>> KnowledgeBase::runs() {
  KILN_ASSIGN_OR_RETURN(Statement stmt, db_.prepare("SELECT id, started_at, finished_at, command, model, workload, "
                                                    "backend, fingerprint, status FROM runs ORDER BY started_at, id"));
  std::vector<Run> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, stmt.step());
    if (!row) break;
    Run r;
    r.id = stmt.text(0);
    r.started_at = stmt.integer(1);
    if (!stmt.is_null(2)) r.finished_at = stmt.integer(2);
    r.info = {stmt.text(3), stmt.text(4), stmt.text(5), stmt.text(6)};
    r.fingerprint = stmt.text(7);
    auto status = parse_run_status(stmt.text(8));
    if (!status) return make_error(ErrorCode::parse_error, "run " + r.id + ": unknown status " + stmt.text(8));
    r.status = *status;
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<Recipe>> KnowledgeBase::recipes() {
  return query_recipes(*this, "ORDER BY created_at, id", {});
}

Result<std::vector<Lesson>> KnowledgeBase::all_lessons() { return query_lessons(db_, "ORDER BY created_at, id", {}); }

Result<std::vector<Decision>> KnowledgeBase::decisions() {
  KILN_ASSIGN_OR_RETURN(Statement stmt, db_.prepare("SELECT id, run_id, created_at, opportunity, predicted_gain, "
                                                    "measured_gain, kept, reason FROM decisions ORDER BY created_at, id"));
  std::vector<Decision> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, stmt.step());
    if (!row) break;
    Decision d;
    d.id = stmt.text(0);
    d.run_id = stmt.text(1);
    d.created_at = stmt.integer(2);
    d.opportunity = stmt.text(3);
    d.predicted_gain = optional_real(stmt, 4);
    d.measured_gain = optional_real(stmt, 5);
    d.kept = stmt.integer(6) != 0;
    d.reason = stmt.text(7);
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::vector<Fingerprint>> KnowledgeBase::fingerprints() {
  KILN_ASSIGN_OR_RETURN(Statement stmt, db_.prepare("SELECT hash, canonical FROM fingerprints ORDER BY hash"));
  std::vector<Fingerprint> out;
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool row, stmt.step());
    if (!row) break;
    auto parsed = parse_fingerprint(stmt.text(1));
    if (!parsed.ok()) return with_context(parsed.error(), "fingerprint " + stmt.text(0));
    out.push_back(std::move(parsed).value());
  }
  return out;
}

}  // namespace kiln::kb
