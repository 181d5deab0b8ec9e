// The rows of the knowledge base as C++ values: runs, kernel recipes, lessons and decisions (schema.h has the
// tables). The tuner writes recipes, the optimize loop writes runs, lessons and decisions; both read them back
// through the reuse queries in kb.h.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ir/ops.h"
#include "kb/fingerprint.h"

namespace kiln::kb {

enum class RunStatus { running, succeeded, failed, interrupted };
const char* run_status_name(RunStatus status);  // "running", ...
std::optional<RunStatus> parse_run_status(const std::string& name);

struct RunInfo {
  std::string command;   // the command line, "kiln optimize zoo:llama3-8b --workload chat.json"
  std::string model;     // model spec or file
  std::string workload;  // workload name or file ("" when none)
  std::string backend;   // "cpu" | "cuda"
};

struct Run {
  std::string id;  // "run-<16 hex>"
  int64_t started_at = 0;
  std::optional<int64_t> finished_at;
  RunInfo info;
  std::string fingerprint;  // hash (Fingerprint::hash)
  RunStatus status = RunStatus::running;
};

// What a recipe is for: a kernel task by structural hash (kernel::kernel_hash) or a library-op key
// ("library:matmul" or whatever the caller names it), at exact shapes and dtypes (inputs then outputs).
struct RecipeKey {
  std::string task_hash;
  std::vector<TensorType> types;
};

enum class ImplementationKind { schedule, library };
const char* implementation_kind_name(ImplementationKind kind);  // "schedule" | "library"
std::optional<ImplementationKind> parse_implementation_kind(const std::string& name);

struct Recipe {
  std::string id;      // "rcp-<16 hex>"; assigned by record_recipe when empty
  std::string run_id;  // the run that found it; "" when none
  int64_t created_at = 0;  // Unix seconds; record_recipe uses now when 0
  RecipeKey key;
  Fingerprint fingerprint;  // what it was measured under
  ImplementationKind kind = ImplementationKind::schedule;
  nlohmann::json implementation;  // schedule JSON (kernel::schedule_to_json) or the library algorithm
  std::string source_hash;        // of the generated source ("" for a library algorithm)
  double seconds = 0;             // the recipe's own median time on its task
  nlohmann::json timings;         // every candidate tried: [{"implementation":..., "seconds":...,...}, ...]
  nlohmann::json verification;    // the harness's evidence that it is correct
  std::optional<double> e2e_gain; // end-to-end gain of the whole Plan (0.05 = 5% faster); none if not measured
};

// Outcome classes of a lesson: successes are lessons too.
enum class LessonOutcome { improved, neutral, regressed, incorrect, failed };
const char* lesson_outcome_name(LessonOutcome outcome);
std::optional<LessonOutcome> parse_lesson_outcome(const std::string& name);
// regressed, incorrect and failed: a lesson that says "do not try this here".
bool is_negative(LessonOutcome outcome);

struct Lesson {
  std::string id;  // "lsn-<16 hex>"
  std::string run_id;
  int64_t created_at = 0;
  std::string pattern;      // the rewrite or pattern: "fuse_rows:rmsnorm+quant", "merge_gemms", "schedule:vec=8"
  std::string device_kind;  // "cpu" | "cuda"
  std::string device_name;  // "" for every device of the kind
  LessonOutcome outcome = LessonOutcome::neutral;
  std::string reason;       // one line for a person
  nlohmann::json evidence;  // timings, outcome classes, the decision it came from
};

struct Decision {
  std::string id;  // "dec-<16 hex>"
  std::string run_id;
  int64_t created_at = 0;
  std::string opportunity;  // what was tried: "fuse rmsnorm+quant at layer 3"
  std::optional<double> predicted_gain;
  std::optional<double> measured_gain;
  bool kept = false;
  std::string reason;
};

// Shapes and dtypes of a key as stored: [[64,128],[128]] and ["bf16","f32"].
std::string shapes_json(const std::vector<TensorType>& types);
std::string dtypes_json(const std::vector<TensorType>& types);
// The inverse; an Error naming what is malformed (a dtype kiln does not know, counts that differ, ...).
Result<std::vector<TensorType>> types_from_json(const std::string& shapes, const std::string& dtypes);

}  // namespace kiln::kb
