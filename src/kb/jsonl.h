// Export and import of a knowledge base as JSON lines, so that teams can share what their runs learned.
// One object per row, each with a "type": first {"type":"header","format":"kiln-kb","schema_version":1,...},
// then "fingerprint", "run", "recipe", "lesson" and "decision" lines, each row's references before it.
//
// Import validates every line (fields, types, enum names, dtypes, that what a row refers to exists) and runs
// in one transaction: a bad line is an Error naming "<file>:<line>" and the field, and nothing from that file
// is committed. Rows whose id the knowledge base already holds are skipped, so importing a file twice adds
// nothing the second time.
#pragma once

#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "kb/kb.h"

namespace kiln::kb {

// The JSON object of one row, as exported (and shown by `kiln kb show`).
nlohmann::json fingerprint_to_json(const Fingerprint& fingerprint);
nlohmann::json run_to_json(const Run& run);
nlohmann::json recipe_to_json(const Recipe& recipe);
nlohmann::json lesson_to_json(const Lesson& lesson);
nlohmann::json decision_to_json(const Decision& decision);

struct ExportCounts {
  int64_t fingerprints = 0, runs = 0, recipes = 0, lessons = 0, decisions = 0;
  int64_t total() const { return fingerprints + runs + recipes + lessons + decisions; }
};

// Writes the whole knowledge base (one consistent snapshot) and returns how many rows of each type.
Result<ExportCounts> export_jsonl(KnowledgeBase& kb, std::ostream& out);

struct ImportReport {
  ExportCounts added;
  ExportCounts already_present;  // skipped: the knowledge base holds a row with that id
};

// Imports `in`; `source` names it in errors ("team.jsonl").
Result<ImportReport> import_jsonl(KnowledgeBase& kb, std::istream& in, const std::string& source);

}  // namespace kiln::kb
