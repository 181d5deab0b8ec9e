// JSON-lines export and import of a knowledge base (jsonl.h).
#include "kb/jsonl.h"

#include <fmt/format.h>

#include "kb/schema.h"

namespace kiln::kb {
namespace {

nlohmann::json optional_to_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// Reads the fields of one imported object; the first problem is kept and names the field.
class FieldReader {
 public:
  explicit FieldReader(const nlohmann::json& object) : object_(object) {}

  std::string text(const char* name, bool allow_empty = true) {
    const nlohmann::json* v = field(name);
    if (!v) return {};
    if (!v->is_string()) return fail(name, "is not a string"), std::string();
    if (!allow_empty && v->get<std::string>().empty()) return fail(name, "is empty"), std::string();
    return v->get<std::string>();
  }
  // null or absent -> ""
  std::string optional_text(const char* name) {
    if (!object_.contains(name) || object_[name].is_null()) return {};
    return text(name);
  }
  int64_t integer(const char* name) {
    const nlohmann::json* v = field(name);
    if (!v) return 0;
    if (!v->is_number_integer()) return fail(name, "is not an integer"), 0;
    return v->get<int64_t>();
  }
  std::optional<int64_t> optional_integer(const char* name) {
    if (!object_.contains(name) || object_[name].is_null()) return std::nullopt;
    return integer(name);
  }
  double real(const char* name) {
    const nlohmann::json* v = field(name);
    if (!v) return 0;
    if (!v->is_number()) return fail(name, "is not a number"), 0;
    return v->get<double>();
  }
  std::optional<double> optional_real(const char* name) {
    if (!object_.contains(name) || object_[name].is_null()) return std::nullopt;
    return real(name);
  }
  bool boolean(const char* name) {
    const nlohmann::json* v = field(name);
    if (!v) return false;
    if (!v->is_boolean()) return fail(name, "is not true or false"), false;
    return v->get<bool>();
  }
  nlohmann::json any(const char* name) {
    const nlohmann::json* v = field(name);
    return v ? *v : nlohmann::json();
  }
  // An enum field: the parsed value, or a failure listing the accepted names.
  template <class E>
  E name(const char* field_name, std::optional<E> (*parse)(const std::string&), const char* accepted) {
    const std::string s = text(field_name);
    if (!error_.empty()) return E{};
    auto parsed = parse(s);
    if (!parsed) return fail(field_name, "is '" + s + "', not one of " + accepted), E{};
    return *parsed;
  }
  void fail(const std::string& name, const std::string& problem) {
    if (error_.empty()) error_ = "field '" + name + "' " + problem;
  }
  const std::string& error() const { return error_; }

 private:
  const nlohmann::json* field(const char* name) {
    if (!object_.contains(name)) {
      fail(name, "is missing");
      return nullptr;
    }
    return &object_[name];
  }
  const nlohmann::json& object_;
  std::string error_;
};

Result<bool> row_exists(Database& db, const char* table, const char* key_column, const std::string& id) {
  KILN_ASSIGN_OR_RETURN(Statement stmt,
                        db.prepare(fmt::format("SELECT 1 FROM {} WHERE {} = ?1", table, key_column)));
  stmt.bind(1, id);
  return stmt.step();
}

// What a row refers to must exist already (earlier in the file, or in the knowledge base).
Status require_row(Database& db, const char* table, const char* key_column, const std::string& id, const char* field) {
  KILN_ASSIGN_OR_RETURN(bool exists, row_exists(db, table, key_column, id));
  if (!exists) {
    return make_error(ErrorCode::parse_error, fmt::format("field '{}' names {} row '{}', which is neither earlier in "
                                                          "the file nor in the knowledge base",
                                                          field, table, id));
  }
  return ok_status();
}

Error line_error(const std::string& problem) { return make_error(ErrorCode::parse_error, problem); }

// Imports one parsed object (a row); `added`/`present` count it.
Status import_row(KnowledgeBase& kb, const nlohmann::json& j, ImportReport& report) {
  Database& db = kb.database();
  FieldReader f(j);
  const std::string type = f.text("type");
  if (!f.error().empty()) return line_error(f.error());

  if (type == "header") return line_error("a second header line");
  if (type == "fingerprint") {
    const std::string hash = f.text("hash", false);
    const nlohmann::json body = f.any("fingerprint");
    if (!f.error().empty()) return line_error(f.error());
    if (!body.is_object()) return line_error("field 'fingerprint' is not an object");
    auto parsed = parse_fingerprint(body.dump());
    if (!parsed.ok()) return parsed.error();
    if (parsed->hash() != hash) {
      return line_error(fmt::format("field 'hash' is {} but the fingerprint hashes to {}", hash, parsed->hash()));
    }
    KILN_ASSIGN_OR_RETURN(bool present, row_exists(db, "fingerprints", "hash", hash));
    if (present) return ++report.already_present.fingerprints, ok_status();
    KILN_TRY(kb.record_fingerprint(*parsed));
    ++report.added.fingerprints;
    return ok_status();
  }
  if (type == "run") {
    Run r;
    r.id = f.text("id", false);
    r.started_at = f.integer("started_at");
    r.finished_at = f.optional_integer("finished_at");
    r.info.command = f.text("command");
    r.info.model = f.text("model");
    r.info.workload = f.text("workload");
    r.info.backend = f.text("backend");
    r.fingerprint = f.text("fingerprint", false);
    r.status = f.name<RunStatus>("status", parse_run_status, "running, succeeded, failed, interrupted");
    if (!f.error().empty()) return line_error(f.error());
    KILN_ASSIGN_OR_RETURN(bool present, row_exists(db, "runs", "id", r.id));
    if (present) return ++report.already_present.runs, ok_status();
    KILN_TRY(require_row(db, "fingerprints", "hash", r.fingerprint, "fingerprint"));
    KILN_TRY(kb.record_run(r));
    ++report.added.runs;
    return ok_status();
  }
  if (type == "recipe") {
    Recipe r;
    r.id = f.text("id", false);
    r.run_id = f.optional_text("run_id");
    r.created_at = f.integer("created_at");
    r.key.task_hash = f.text("task_hash", false);
    const nlohmann::json shapes = f.any("shapes");
    const nlohmann::json dtypes = f.any("dtypes");
    const std::string fingerprint_hash = f.text("fingerprint", false);
    r.kind = f.name<ImplementationKind>("implementation_kind", parse_implementation_kind, "schedule, library");
    r.implementation = f.any("implementation");
    r.source_hash = f.text("source_hash");
    r.seconds = f.real("seconds");
    r.timings = f.any("timings");
    r.verification = f.any("verification");
    r.e2e_gain = f.optional_real("e2e_gain");
    if (!f.error().empty()) return line_error(f.error());
    auto types = types_from_json(shapes.dump(), dtypes.dump());
    if (!types.ok()) return types.error();
    r.key.types = std::move(types).value();
    if (!(r.seconds >= 0)) return line_error("field 'seconds' is negative");
    KILN_ASSIGN_OR_RETURN(bool present, row_exists(db, "recipes", "id", r.id));
    if (present) return ++report.already_present.recipes, ok_status();
    KILN_ASSIGN_OR_RETURN(std::optional<Fingerprint> fingerprint, kb.fingerprint(fingerprint_hash));
    if (!fingerprint) KILN_TRY(require_row(db, "fingerprints", "hash", fingerprint_hash, "fingerprint"));
    r.fingerprint = *fingerprint;
    if (!r.run_id.empty()) KILN_TRY(require_row(db, "runs", "id", r.run_id, "run_id"));
    KILN_TRY(kb.record_recipe(r));
    ++report.added.recipes;
    return ok_status();
  }
  if (type == "lesson") {
    Lesson l;
    l.id = f.text("id", false);
    l.run_id = f.optional_text("run_id");
    l.created_at = f.integer("created_at");
    l.pattern = f.text("pattern", false);
    l.device_kind = f.text("device_kind", false);
    l.device_name = f.text("device_name");
    l.outcome = f.name<LessonOutcome>("outcome", parse_lesson_outcome,
                                      "improved, neutral, regressed, incorrect, failed");
    l.reason = f.text("reason");
    l.evidence = f.any("evidence");
    if (!f.error().empty()) return line_error(f.error());
    KILN_ASSIGN_OR_RETURN(bool present, row_exists(db, "lessons", "id", l.id));
    if (present) return ++report.already_present.lessons, ok_status();
    if (!l.run_id.empty()) KILN_TRY(require_row(db, "runs", "id", l.run_id, "run_id"));
    KILN_TRY(kb.record_lesson(l));
    ++report.added.lessons;
    return ok_status();
  }
  if (type == "decision") {
    Decision d;
    d.id = f.text("id", false);
    d.run_id = f.text("run_id", false);
    d.created_at = f.integer("created_at");
    d.opportunity = f.text("opportunity", false);
    d.predicted_gain = f.optional_real("predicted_gain");
    d.measured_gain = f.optional_real("measured_gain");
    d.kept = f.boolean("kept");
    d.reason = f.text("reason");
    if (!f.error().empty()) return line_error(f.error());
    KILN_ASSIGN_OR_RETURN(bool present, row_exists(db, "decisions", "id", d.id));
    if (present) return ++report.already_present.decisions, ok_status();
    KILN_TRY(require_row(db, "runs", "id", d.run_id, "run_id"));
    KILN_TRY(kb.record_decision(d));
    ++report.added.decisions;
    return ok_status();
  }
  return line_error("unknown type '" + type + "' (expected fingerprint, run, recipe, lesson or decision)");
}

Status check_header(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("type") || j["type"] != "header" || !j.contains("format") ||
      j["format"] != "kiln-kb") {
    return line_error("the first line is not a kiln KB header ({\"type\":\"header\",\"format\":\"kiln-kb\",...})");
  }
  if (!j.contains("schema_version") || !j["schema_version"].is_number_integer()) {
    return line_error("header field 'schema_version' is missing or not an integer");
  }
  const int64_t version = j["schema_version"];
  if (version != kSchemaVersion) {
    return make_error(ErrorCode::unsupported,
                      fmt::format("exported with schema version {}, this kiln reads version {}", version, kSchemaVersion));
  }
  return ok_status();
}

}  // namespace

nlohmann::json fingerprint_to_json(const Fingerprint& f) {
  return {{"type", "fingerprint"}, {"hash", f.hash()}, {"fingerprint", nlohmann::json::parse(f.canonical())}};
}

nlohmann::json run_to_json(const Run& r) {
  return {{"type", "run"},
          {"id", r.id},
          {"started_at", r.started_at},
          {"finished_at", r.finished_at ? nlohmann::json(*r.finished_at) : nlohmann::json(nullptr)},
          {"command", r.info.command},
          {"model", r.info.model},
          {"workload", r.info.workload},
          {"backend", r.info.backend},
          {"fingerprint", r.fingerprint},
          {"status", run_status_name(r.status)}};
}

nlohmann::json recipe_to_json(const Recipe& r) {
  return {{"type", "recipe"},
          {"id", r.id},
          {"run_id", r.run_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.run_id)},
          {"created_at", r.created_at},
          {"task_hash", r.key.task_hash},
          {"shapes", nlohmann::json::parse(shapes_json(r.key.types))},
          {"dtypes", nlohmann::json::parse(dtypes_json(r.key.types))},
          {"fingerprint", r.fingerprint.hash()},
          {"implementation_kind", implementation_kind_name(r.kind)},
          {"implementation", r.implementation},
          {"source_hash", r.source_hash},
          {"seconds", r.seconds},
          {"timings", r.timings},
          {"verification", r.verification},
          {"e2e_gain", optional_to_json(r.e2e_gain)}};
}

nlohmann::json lesson_to_json(const Lesson& l) {
  return {{"type", "lesson"},
          {"id", l.id},
          {"run_id", l.run_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(l.run_id)},
          {"created_at", l.created_at},
          {"pattern", l.pattern},
          {"device_kind", l.device_kind},
          {"device_name", l.device_name},
          {"outcome", lesson_outcome_name(l.outcome)},
          {"reason", l.reason},
          {"evidence", l.evidence}};
}

nlohmann::json decision_to_json(const Decision& d) {
  return {{"type", "decision"},
          {"id", d.id},
          {"run_id", d.run_id},
          {"created_at", d.created_at},
          {"opportunity", d.opportunity},
          {"predicted_gain", optional_to_json(d.predicted_gain)},
          {"measured_gain", optional_to_json(d.measured_gain)},
          {"kept", d.kept},
          {"reason", d.reason}};
}

Result<ExportCounts> export_jsonl(KnowledgeBase& kb, std::ostream& out) {
  // One read transaction: the rows written are one snapshot even while another process writes.
  Database& db = kb.database();
  KILN_TRY(db.exec("BEGIN"));
  struct EndRead {
    Database& db;
    ~EndRead() { (void)db.exec("COMMIT"); }
  } end_read{db};
  ExportCounts n;
  out << nlohmann::json{{"type", "header"}, {"format", "kiln-kb"}, {"schema_version", kSchemaVersion},
                        {"kiln_version", KILN_VERSION}}
             .dump()
      << "\n";
  KILN_ASSIGN_OR_RETURN(std::vector<Fingerprint> fingerprints, kb.fingerprints());
  for (const Fingerprint& f : fingerprints) out << fingerprint_to_json(f).dump() << "\n", ++n.fingerprints;
  KILN_ASSIGN_OR_RETURN(std::vector<Run> runs, kb.runs());
  for (const Run& r : runs) out << run_to_json(r).dump() << "\n", ++n.runs;
  KILN_ASSIGN_OR_RETURN(std::vector<Recipe> recipes, kb.recipes());
  for (const Recipe& r : recipes) out << recipe_to_json(r).dump() << "\n", ++n.recipes;
  KILN_ASSIGN_OR_RETURN(std::vector<Lesson> lessons, kb.all_lessons());
  for (const Lesson& l : lessons) out << lesson_to_json(l).dump() << "\n", ++n.lessons;
  KILN_ASSIGN_OR_RETURN(std::vector<Decision> decisions, kb.decisions());
  for (const Decision& d : decisions) out << decision_to_json(d).dump() << "\n", ++n.decisions;
  if (!out) return make_error(ErrorCode::io_error, "cannot write the export");
  return n;
}

Result<ImportReport> import_jsonl(KnowledgeBase& kb, std::istream& in, const std::string& source) {
  ImportReport report;
  int line_number = 0;
  bool seen_header = false;
  Status status = kb.atomically([&]() -> Status {
    std::string line;
    while (std::getline(in, line)) {
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      Status row = ok_status();
      if (j.is_discarded()) {
        row = line_error("not valid JSON");
      } else if (!j.is_object()) {
        row = line_error("not a JSON object");
      } else if (!seen_header) {
        row = check_header(j);
        seen_header = true;
      } else {
        row = import_row(kb, j, report);
      }
      if (!row.ok()) return with_context(row.error(), fmt::format("{}:{}", source, line_number));
    }
    if (!seen_header) return line_error(source + ": empty (no kiln KB header line)");
    return ok_status();
  });
  if (!status.ok()) return status.error();
  return report;
}

}  // namespace kiln::kb
