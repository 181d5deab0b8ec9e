// The optimize loop's view of the knowledge base (src/kb), through a small adapter so the loop does not
// depend on the database (the adapter over src/kb is kb_knowledge.h):
//   - before an attempt, what is already known about it on this model family and device (a rewrite that
//     regressed here is skipped and reported as reuse); after it, what happened (a decision and a lesson);
//   - the whole plan: a run's final config is stored under (model + bucket shapes + device fingerprint); a
//     later run with the same key re-verifies it (numerics and one timing) instead of re-deciding everything;
//   - a near plan: with no plan for this exact model, the plan of the same model structure at other sizes
//     (another token count) on this fingerprint is the prior: built, verified and A/B'd once against the
//     baseline; unless it is slower here, the opportunities it decided are not tried one by one again;
//   - counts of what was reused, for the report's reuse section (the tuner adapter adds its recipe hits).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/ops.h"
#include "kernel/schedule.h"

namespace kiln::agent {

struct AttemptRecord;

struct KnowledgeReuse {
  std::string opportunity;
  std::string what;  // e.g. "skipped: regressed on this device (run-1f..., 2026-11-30): A/B 0.88x"
};

// What the report's reuse section counts, from the run itself.
struct KnowledgeCounts {
  int plan_hits = 0;        // a stored final config re-verified and used
  int plan_misses = 0;      // no stored config for this model, bucket and fingerprint
  int plan_rejected = 0;    // a stored config found but not used (another fingerprint, failed re-verification)
  int near_plan_hits = 0;      // a near plan (same structure, other sizes) verified, A/B'd and used as the prior
  int near_plan_rejected = 0;  // a near plan found but not used (numerics, slower, unknown rewrites)
  int exact_hits = 0;       // kernel recipes used without tuning (re-verified unless the default schedule)
  int near_hits = 0;        // kernel tasks decided from a recipe at other shapes (kept default, or seed timed)
  int cold_tasks = 0;       // kernel tasks tuned with no recipe
  int tasks_undecided = 0;  // kernel tasks the tuner's budget ran out before (their default schedule stays)
  int tune_candidates = 0;  // schedules the tuner compiled (re-verifications of recipes included)
  int lessons_applied = 0;  // attempts skipped because a lesson says they regress here
  int recipes_recorded = 0, lessons_recorded = 0, decisions_recorded = 0;
  // Each count minus `before`'s: one bucket's share of a knowledge base that served several.
  KnowledgeCounts since(const KnowledgeCounts& before) const;
};

// A run's final config as stored: rewrites by name (resolved against the loop's starting config).
struct StoredPlan {
  std::string id;         // the recipe holding it
  std::string run_id;     // the run that decided it
  std::string model_key;  // the model it was decided for
  std::set<std::string> disabled_passes;
  std::map<std::string, kernel::Schedule> schedules;
  std::vector<std::string> rewrites;
  int lanes = 1;
  std::vector<std::string> kept;     // the optimizations it kept, in order (for the report)
  std::vector<std::string> decided;  // every opportunity it decided (kept or not); not those the budget skipped
  std::string prior;                 // the near plan it started from ("recipe (model, run)"), if any
  double seconds = 0;                // its end-to-end figure when it was decided
};

// What names a model's plan: its spec (sizes included) for the exact plan, its structure (plan_structure_hash:
// sizes left out) and the sizes it ran at (its input types) for near plans.
struct PlanKey {
  std::string model_key;
  std::string structure;
  std::vector<TensorType> sizes;
};

class OptimizeKnowledge {
 public:
  virtual ~OptimizeKnowledge() = default;
  // `model_key` names the model and its shapes; `device` the device (DeviceInfo::name).
  virtual std::optional<KnowledgeReuse> known_outcome(const std::string& model_key, const std::string& device,
                                                      const std::string& opportunity) = 0;
  virtual void record(const std::string& model_key, const std::string& device, const AttemptRecord& attempt) = 0;
  // The stored final config for exactly this model key on this fingerprint; none (with a reason in
  // `why_not`) when there is none or it was measured under another fingerprint.
  virtual std::optional<StoredPlan> stored_plan(const std::string& model_key, std::string* why_not) {
    (void)model_key;
    if (why_not) *why_not = "this knowledge base stores no plans";
    return std::nullopt;
  }
  // The plan stored for the same structure at other sizes (or under another spec) on this fingerprint, nearest
  // sizes first; none (with a reason) when there is none. Never the plan of key.model_key itself.
  virtual std::optional<StoredPlan> near_plan(const PlanKey& key, std::string* why_not) {
    (void)key;
    if (why_not) *why_not = "this knowledge base stores no plans";
    return std::nullopt;
  }
  virtual void record_plan(const PlanKey& key, const StoredPlan& plan) { (void)key, (void)plan; }
  virtual KnowledgeCounts& counts() = 0;
};

}  // namespace kiln::agent
