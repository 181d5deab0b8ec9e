// kiln kb stats|list|show|export|import|gc [--kb FILE]: look into, share and clean a knowledge base
// (src/kb/, docs/knowledge-base.md). The file is --kb, default ./kiln-kb.sqlite; only import and gc create or
// change it.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "kb/gc.h"
#include "kb/jsonl.h"
#include "kb/kb.h"

namespace kiln::cli {
namespace {

constexpr const char* kDefaultKbPath = "kiln-kb.sqlite";

std::string when(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M", &tm);
  return buffer;
}

std::string types_text(const std::vector<TensorType>& types) {
  std::string out;
  for (const TensorType& t : types) out += (out.empty() ? "" : " ") + type_to_string(t);
  return out;
}

Status stats(kb::KnowledgeBase& kb, bool as_json) {
  KILN_ASSIGN_OR_RETURN(kb::KbStats s, kb.stats());
  if (as_json) {
    fmt::print("{}\n", nlohmann::json{{"path", kb.path()},
                                      {"runs", s.runs},
                                      {"recipes", s.recipes},
                                      {"tasks", s.tasks},
                                      {"lessons", s.lessons},
                                      {"decisions", s.decisions},
                                      {"fingerprints", s.fingerprints}}
                               .dump(1));
    return ok_status();
  }
  fmt::print("knowledge base  {}\n", kb.path());
  fmt::print("runs            {}\nrecipes         {} ({} distinct tasks)\nlessons         {}\ndecisions       {}\n"
             "fingerprints    {}\n",
             s.runs, s.recipes, s.tasks, s.lessons, s.decisions, s.fingerprints);
  return ok_status();
}

Status list(kb::KnowledgeBase& kb, const std::string& table) {
  if (table == "runs") {
    KILN_ASSIGN_OR_RETURN(std::vector<kb::Run> runs, kb.runs());
    for (const kb::Run& r : runs) {
      fmt::print("{}  {}  {:<11}  {}  {}\n", r.id, when(r.started_at), kb::run_status_name(r.status), r.info.backend,
                 r.info.command);
    }
  } else if (table == "recipes") {
    KILN_ASSIGN_OR_RETURN(std::vector<kb::Recipe> recipes, kb.recipes());
    for (const kb::Recipe& r : recipes) {
      fmt::print("{}  {}  {:<8}  {:.3g} s  {}  {}  {}\n", r.id, r.key.task_hash, kb::implementation_kind_name(r.kind),
                 r.seconds, r.fingerprint.device_name, r.fingerprint.hash(), types_text(r.key.types));
    }
  } else if (table == "lessons") {
    KILN_ASSIGN_OR_RETURN(std::vector<kb::Lesson> lessons, kb.all_lessons());
    for (const kb::Lesson& l : lessons) {
      fmt::print("{}  {:<9}  {}  {} {}  {}\n", l.id, kb::lesson_outcome_name(l.outcome), l.pattern, l.device_kind,
                 l.device_name, l.reason);
    }
  } else if (table == "decisions") {
    KILN_ASSIGN_OR_RETURN(std::vector<kb::Decision> decisions, kb.decisions());
    for (const kb::Decision& d : decisions) {
      fmt::print("{}  {}  {:<7}  {}  {}\n", d.id, d.run_id, d.kept ? "kept" : "dropped", d.opportunity, d.reason);
    }
  } else if (table == "fingerprints") {
    KILN_ASSIGN_OR_RETURN(std::vector<kb::Fingerprint> fingerprints, kb.fingerprints());
    for (const kb::Fingerprint& f : fingerprints) fmt::print("{}  {}\n", f.hash(), f.canonical());
  } else {
    return make_error(ErrorCode::invalid_argument,
                      "kb list: unknown table '" + table + "' (runs, recipes, lessons, decisions, fingerprints)");
  }
  return ok_status();
}

Status show(kb::KnowledgeBase& kb, const std::string& id) {
  auto print = [](const nlohmann::json& j) { fmt::print("{}\n", j.dump(2)); };
  // Ids say their table by prefix; fingerprints are 16 hex digits.
  if (id.rfind("run-", 0) == 0) {
    KILN_ASSIGN_OR_RETURN(std::vector<kb::Run> runs, kb.runs());
    for (const kb::Run& r : runs) {
      if (r.id == id) return print(kb::run_to_json(r)), ok_status();
    }
  } else if (id.rfind("rcp-", 0) == 0) {
    KILN_ASSIGN_OR_RETURN(std::vector<kb::Recipe> recipes, kb.recipes());
    for (const kb::Recipe& r : recipes) {
      if (r.id != id) continue;
      nlohmann::json j = kb::recipe_to_json(r);
      j["fingerprint"] = kb::fingerprint_to_json(r.fingerprint);
      return print(j), ok_status();
    }
  } else if (id.rfind("lsn-", 0) == 0) {
    KILN_ASSIGN_OR_RETURN(std::vector<kb::Lesson> lessons, kb.all_lessons());
    for (const kb::Lesson& l : lessons) {
      if (l.id == id) return print(kb::lesson_to_json(l)), ok_status();
    }
  } else if (id.rfind("dec-", 0) == 0) {
    KILN_ASSIGN_OR_RETURN(std::vector<kb::Decision> decisions, kb.decisions());
    for (const kb::Decision& d : decisions) {
      if (d.id == id) return print(kb::decision_to_json(d)), ok_status();
    }
  } else {
    KILN_ASSIGN_OR_RETURN(std::optional<kb::Fingerprint> f, kb.fingerprint(id));
    if (f) return print(kb::fingerprint_to_json(*f)), ok_status();
  }
  return make_error(ErrorCode::invalid_argument,
                    "kb show: no row '" + id + "' in " + kb.path() +
                        " (ids start with run-, rcp-, lsn- or dec-; fingerprints are 16 hex digits; see kiln kb list)");
}

Status export_to(kb::KnowledgeBase& kb, const std::string& file) {
  if (file == "-") {
    KILN_ASSIGN_OR_RETURN(kb::ExportCounts n, kb::export_jsonl(kb, std::cout));
    std::cout.flush();
    std::fprintf(stderr, "exported %lld rows\n", static_cast<long long>(n.total()));
    return ok_status();
  }
  std::ofstream out(file);
  if (!out) return make_error(ErrorCode::io_error, "kb export: cannot write " + file);
  KILN_ASSIGN_OR_RETURN(kb::ExportCounts n, kb::export_jsonl(kb, out));
  out.close();
  if (!out) return make_error(ErrorCode::io_error, "kb export: cannot write " + file);
  fmt::print("exported {} rows to {} ({} fingerprints, {} runs, {} recipes, {} lessons, {} decisions)\n", n.total(),
             file, n.fingerprints, n.runs, n.recipes, n.lessons, n.decisions);
  return ok_status();
}

Status import_from(kb::KnowledgeBase& kb, const std::string& file) {
  std::ifstream in(file);
  if (!in) return make_error(ErrorCode::io_error, "kb import: cannot read " + file);
  KILN_ASSIGN_OR_RETURN(kb::ImportReport r, kb::import_jsonl(kb, in, file));
  fmt::print("imported {} rows from {} ({} fingerprints, {} runs, {} recipes, {} lessons, {} decisions); "
             "{} already present\n",
             r.added.total(), file, r.added.fingerprints, r.added.runs, r.added.recipes, r.added.lessons,
             r.added.decisions, r.already_present.total());
  return ok_status();
}

Status gc(kb::KnowledgeBase& kb, const std::string& backend_name, std::optional<int> older_than_days,
          bool keep_other_devices) {
  if (older_than_days && *older_than_days < 0) {
    return make_error(ErrorCode::invalid_argument, "kb gc: --older-than must be a number of days >= 0");
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> backend, backend::make_backend(backend_name));
  kb::GcOptions options;
  options.current = kb::fingerprint_of(backend->device());
  options.older_than_days = older_than_days;
  options.keep_other_devices = keep_other_devices;
  KILN_ASSIGN_OR_RETURN(kb::GcReport report, kb::collect_garbage(kb, options));
  fmt::print("kb gc: {} (current fingerprint {}, {})\n", report.summary(), options.current.hash(),
             options.current.device_name);
  return ok_status();
}

}  // namespace

void add_kb_command(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("kb", "Look into, share and clean the knowledge base (recipes, lessons, runs)");
  cmd->require_subcommand(1);
  auto path = std::make_shared<std::string>(kDefaultKbPath);
  auto add_kb_option = [path](CLI::App* sub) {
    sub->add_option("--kb", *path, "the knowledge base file")->capture_default_str();
  };
  // Runs `body` on the opened knowledge base and reports its error.
  auto run = [path, exit_code](kb::OpenMode mode, std::function<Status(kb::KnowledgeBase&)> body) {
    if (mode == kb::OpenMode::must_exist && !std::filesystem::exists(*path)) {
      *exit_code = report_error(make_error(ErrorCode::io_error, "no knowledge base at " + *path +
                                                                    " (give --kb FILE, or create one with kiln kb import)"));
      return;
    }
    auto kb = kb::KnowledgeBase::open(*path, mode);
    if (!kb.ok()) return void(*exit_code = report_error(kb.error()));
    Status status = body(*kb);
    if (!status.ok()) *exit_code = report_error(status.error());
  };

  auto* stats_cmd = cmd->add_subcommand("stats", "Count runs, recipes, lessons, decisions and fingerprints");
  auto as_json = std::make_shared<bool>(false);
  add_kb_option(stats_cmd);
  stats_cmd->add_flag("--json", *as_json, "print the counts as JSON");
  stats_cmd->callback([=] { run(kb::OpenMode::must_exist, [=](kb::KnowledgeBase& kb) { return stats(kb, *as_json); }); });

  auto* list_cmd = cmd->add_subcommand("list", "One line per row of a table");
  auto table = std::make_shared<std::string>("recipes");
  add_kb_option(list_cmd);
  list_cmd->add_option("TABLE", *table, "runs, recipes, lessons, decisions or fingerprints")->capture_default_str();
  list_cmd->callback([=] { run(kb::OpenMode::must_exist, [=](kb::KnowledgeBase& kb) { return list(kb, *table); }); });

  auto* show_cmd = cmd->add_subcommand("show", "Print one row (a run, recipe, lesson, decision or fingerprint) as JSON");
  auto id = std::make_shared<std::string>();
  add_kb_option(show_cmd);
  show_cmd->add_option("ID", *id, "run-..., rcp-..., lsn-..., dec-... or a fingerprint hash")->required();
  show_cmd->callback([=] { run(kb::OpenMode::must_exist, [=](kb::KnowledgeBase& kb) { return show(kb, *id); }); });

  auto* export_cmd = cmd->add_subcommand("export", "Write the knowledge base as JSON lines (one object per row)");
  auto export_file = std::make_shared<std::string>("-");
  add_kb_option(export_cmd);
  export_cmd->add_option("FILE", *export_file, "where to write; - for standard output")->capture_default_str();
  export_cmd->callback(
      [=] { run(kb::OpenMode::must_exist, [=](kb::KnowledgeBase& kb) { return export_to(kb, *export_file); }); });

  auto* import_cmd = cmd->add_subcommand("import", "Add the rows of an exported file; rows already present are skipped");
  auto import_file = std::make_shared<std::string>();
  add_kb_option(import_cmd);
  import_cmd->add_option("FILE", *import_file, "a file written by kiln kb export")->required();
  import_cmd->callback(
      [=] { run(kb::OpenMode::create, [=](kb::KnowledgeBase& kb) { return import_from(kb, *import_file); }); });

  auto* gc_cmd = cmd->add_subcommand("gc", "Remove recipes measured under another fingerprint or too old, and orphans");
  auto backend_name = std::make_shared<std::string>("cpu");
  auto older_than = std::make_shared<int>(-1);
  auto keep_other_devices = std::make_shared<bool>(false);
  add_kb_option(gc_cmd);
  gc_cmd->add_option("--backend", *backend_name, "the backend whose fingerprint is current")->capture_default_str();
  auto* older_option = gc_cmd->add_option("--older-than", *older_than, "also remove recipes older than DAYS days");
  gc_cmd->add_flag("--keep-other-devices", *keep_other_devices,
                   "remove only other fingerprints of this device (keep other devices' recipes)");
  gc_cmd->callback([=] {
    const std::optional<int> days = older_option->count() ? std::optional<int>(*older_than) : std::nullopt;
    run(kb::OpenMode::must_exist,
        [=](kb::KnowledgeBase& kb) { return gc(kb, *backend_name, days, *keep_other_devices); });
  });
}

}  // namespace kiln::cli
