// The optimize loop's knowledge base (agent::OptimizeKnowledge over src/kb) and its tuner (agent::Tuner over
// src/tune), sharing one KB run:
//   - attempts become decisions and lessons ("optimize:<opportunity>@<family>", task_key.h); a rewrite whose
//     newest lesson here is negative (slower, numerics, failed) is skipped unless `force`;
//   - the final config is a recipe "plan:<model spec>" under the device fingerprint; a later run with the same
//     spec and fingerprint gets it back (stored_plan) and re-verifies it; under another fingerprint it is not
//     reused and the reason says what differs. The same config is a second recipe under the model's structure
//     (plan_structure_hash) with its input types: a run of that structure at other sizes gets the nearest one on
//     this fingerprint back as its near plan (near_plan);
//   - the tuner decides each kernel task of the current Plan once and ends when every task is decided (its
//     budget, min(its share, what the loop has left), caps the total): an exact recipe (same structure hash
//     and types, same fingerprint) is used without tuning, re-verified by the harness (compile + verify, no
//     timing) unless it is the kernel's default schedule (the loop verifies the whole Plan); else a near recipe
//     (same structure, other shapes) is the prior: when it kept its own default the default stays with no
//     compile, else the seed and `seeded_neighbours` schedules around it are timed against the default once
//     (A/B) and the task is decided; else a cold search, decided when it ends. Exact hits go first, then the
//     rest hottest first, sharing out what is left of the budget; tasks the budget does not reach keep their
//     default and are counted undecided. Every searched task's winner is recorded as a recipe.
#pragma once

#include <memory>
#include <string>

#include "agent/knowledge.h"
#include "agent/optimize.h"
#include "kb/kb.h"
#include "tune/tuner.h"

namespace kiln::agent {

struct KbKnowledgeOptions {
  bool force = false;              // retry rewrites that lessons say regress; ignore stored plans
  double tune_budget_seconds = 60;  // the tuner's share of the run, over all its tasks
  int max_candidates = 8;          // per cold task (the default included)
  int seeded_neighbours = 1;       // a seed that is not the default is timed with this many schedules around it
  tune::TuneOptions tune = tune::default_tune_options();
};

class KbKnowledge : public OptimizeKnowledge {
 public:
  // Opens (or creates) the KB at `path` and begins a run under `fingerprint`.
  static Result<std::unique_ptr<KbKnowledge>> open(const std::string& path, const kb::Fingerprint& fingerprint,
                                                   const kb::RunInfo& info, const KbKnowledgeOptions& options);
  ~KbKnowledge() override;

  std::optional<KnowledgeReuse> known_outcome(const std::string& model_key, const std::string& device,
                                              const std::string& opportunity) override;
  void record(const std::string& model_key, const std::string& device, const AttemptRecord& attempt) override;
  std::optional<StoredPlan> stored_plan(const std::string& model_key, std::string* why_not) override;
  std::optional<StoredPlan> near_plan(const PlanKey& key, std::string* why_not) override;
  void record_plan(const PlanKey& key, const StoredPlan& plan) override;
  KnowledgeCounts& counts() override { return counts_; }

  // The tuner for OptimizeOptions::tuner; it lives as long as this object.
  Tuner tuner();
  // Ends the KB run (succeeded or failed). Called by the destructor as failed when not called.
  Status finish(bool succeeded);
  // Errors the KB gave while recording (a failed write never stops the loop; the CLI reports them).
  const std::vector<std::string>& warnings() const { return warnings_; }
  kb::KnowledgeBase& kb() { return kb_; }
  // The tuner's share for the next bucket (the CLI sets it per bucket from its budget).
  void set_tune_budget(double seconds) { options_.tune_budget_seconds = seconds; }

 private:
  KbKnowledge(kb::KnowledgeBase kb, kb::Fingerprint fingerprint, std::string run_id, KbKnowledgeOptions options)
      : kb_(std::move(kb)), fingerprint_(std::move(fingerprint)), run_id_(std::move(run_id)), options_(std::move(options)) {}
  Result<std::map<std::string, kernel::Schedule>> tune(const TuneRequest& request);
  void warn(const std::string& what, const Error& error);

  kb::KnowledgeBase kb_;
  kb::Fingerprint fingerprint_;
  std::string run_id_;
  KbKnowledgeOptions options_;
  KnowledgeCounts counts_;
  std::vector<std::string> warnings_;
  bool finished_ = false;
};

}  // namespace kiln::agent
