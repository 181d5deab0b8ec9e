// The optimize loop (`kiln optimize`, DESIGN.md "agent loop"):
//   1. baseline: the naive lowering (baseline_config: every op its own kernel or library call), verified
//      against the reference executor, timed end to end as deployed (Backend::capture);
//   2. profile it per step (src/profile);
//   3. rank the opportunities (opportunities.h); with a knowledge base, first a stored plan for this model
//      (re-verified, then used as it is) or a near plan for its structure at other sizes (the prior: verified and
//      A/B'd once; unless it is slower, the opportunities it decided are not tried again);
//   4. for each in order, model-level first: apply, build the Plan (generate; tune for the kernel level),
//      verify the whole model against the reference (numerics_gate.h) and A/B it against the current Plan
//      (ab_gate.h); keep it only if it passes numerics and wins beyond noise, else drop it with the reason;
//   5. profile the final Plan. The caller writes the plan, report and trace from the result.
// Seams: a Tuner (src/tune, issue 5) and an OptimizeKnowledge adapter (src/kb, issue 9) plug in through the
// options; extra opportunities (proposers, planted ones in tests) rank with the rest.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/ab_gate.h"
#include "agent/knowledge.h"
#include "agent/numerics_gate.h"
#include "agent/opportunities.h"
#include "backend/plan.h"
#include "profile/profile.h"

namespace kiln::agent {

// What a tuner is asked: the current Plan, the kernel steps worth tuning (hottest first) and the schedules in
// force. It answers schedules by kernel hash (kernel::kernel_hash), which the loop merges into the config.
struct TuneRequest {
  const backend::Plan& plan;
  backend::Backend& backend;
  std::vector<size_t> kernel_steps;
  const std::map<std::string, kernel::Schedule>& current;
  double budget_seconds = 1e300;  // what the loop's budget has left; the tuner spends at most this
};
using Tuner = std::function<Result<std::map<std::string, kernel::Schedule>>(const TuneRequest& request)>;

// How the final Plan is timed for comparison with a peer: as ../shared/bench/torch_flux_block.py times
// PyTorch (5 warm-up calls, then the median of 30 calls, each timed alone with events).
inline constexpr backend::TimingOptions kPeerTiming{5, 30};

struct OptimizeOptions {
  std::string model_key;       // names the model in the report and to the knowledge base
  double budget_seconds = 600;  // no attempt starts after this much time; the baseline always runs
  PlanConfig baseline = baseline_config();  // where the loop starts (tests start from a planted slow one)
  profile::ProfileOptions profile;
  ABOptions ab;
  NumericsPolicy numerics;
  Tuner tuner;                             // empty: tune-kernels is recorded as not attempted
  OptimizeKnowledge* knowledge = nullptr;  // kb_knowledge.h; none: nothing is looked up or recorded
  std::vector<Opportunity> extra_opportunities;
  std::function<void(const std::string& line)> progress;  // one line per event; may be empty
  // Idle time before the final Plan is timed (kPeerTiming). A peer such as torch_flux_block.py times each
  // model right after compiling it, from an idle GPU; an H200 that has just run a minute of A/Bs sits at its
  // power cap at lower clocks. `kiln optimize` idles 2 s; tests leave it at 0.
  double settle_seconds = 0;
  // Then the final Plan runs back to back for this long and 30 more calls are timed: its time under sustained
  // load (final_sustained_seconds), where the H200 sits at its power cap (its clocks fell within ~70 ms of
  // load in session 21, the plans slowing by 11-15%). 0: not measured.
  double sustain_seconds = 0;
  // Head to head with a peer that runs outside kiln (a PyTorch script in another process): after the timings
  // above, `peer_rounds` rounds, each running peer_round() (the peer's figures by name, in seconds) and then
  // timing the final Plan again (settle_seconds of idle, kPeerTiming). One round's two figures come from one
  // power and clock regime: on an H100 the final Plan's time moved 10% between two calls a minute apart, the
  // peer's 0.4% (session 39), so a ratio of figures from different minutes measures the card's state as much
  // as the Plan. A round that fails ends the rounds and is recorded (OptimizeResult::peer_rounds_error); the
  // loop's result stands.
  std::function<Result<std::map<std::string, double>>()> peer_round;
  int peer_rounds = 0;
};

// One head-to-head round (OptimizeOptions::peer_round): the peer's figures, then the final Plan's.
struct PeerRound {
  std::map<std::string, double> peer_seconds;  // by the peer's name
  double kiln_seconds = 0;
};

struct AttemptRecord {
  std::string opportunity;
  OpportunityLevel level = OpportunityLevel::model;
  double score = 0;
  bool kept = false;
  std::string outcome;  // "kept", "slower", "no win", "numerics", "failed", "skipped"
  std::string reason;
  double current_seconds = 0;    // A's median in the A/B (0 if it never ran)
  double candidate_seconds = 0;  // B's median
  double ratio = 0, ratio_ci_low = 0, ratio_ci_high = 0;
  std::vector<OutputError> errors;
  double elapsed_seconds = 0;  // since the loop began, when the attempt ended
};

struct WaterfallEntry {
  std::string label;
  std::string level;     // "baseline" | "model" | "kernel"
  double seconds = 0;    // end to end after this entry
  double gain_seconds = 0;  // the entry before it minus this one (0 for the baseline)
};

struct OptimizeResult {
  std::string model_key;
  backend::DeviceInfo device;
  PlanConfig final_config;
  backend::PlanSummary baseline_summary, final_summary;
  profile::PlanProfile baseline_profile, final_profile;
  Graph final_graph;
  std::map<std::string, double> baseline_errors;  // per output, vs the reference
  bool deployed_capture = true;  // false when a Plan could not be captured and ran step by step
  std::vector<Opportunity> ranked;
  std::vector<AttemptRecord> attempts;
  std::vector<WaterfallEntry> waterfall;
  std::vector<KnowledgeReuse> knowledge_reuse;
  KnowledgeCounts knowledge_counts;  // the run's own counts (copied from the knowledge adapter at the end)
  bool plan_reused = false;          // the final config is a stored plan, re-verified, not re-decided
  std::string plan_reuse_note;       // why a stored plan was or was not reused
  std::string near_plan;             // the near plan used as the prior: "recipe (model, run)"; empty: none
  std::shared_ptr<backend::Plan> final_plan;  // the Plan as built and verified (saved as the plan artifact)
  double budget_seconds = 0;
  double elapsed_seconds = 0;
  // The waterfall's bars chain each kept A/B's ratio from the baseline's time, and each ratio is measured with
  // the incumbent interleaved: on the H200 a fused plan alternating with a slow memory-bound baseline ran at
  // higher clocks than under sustained load (the 700 W cap), so the chain flattered the FLUX blocks by 8-18%
  // (session 21). Its last bar is therefore the final Plan timed directly once the loop is done, the way a peer
  // times itself (kPeerTiming): final_seconds(), which peers are compared with. This is where the chain ended.
  double final_chained_seconds = 0;
  double final_sustained_seconds = 0;  // OptimizeOptions::sustain_seconds; 0 when not measured
  std::vector<PeerRound> peer_rounds;  // in the order run
  std::string peer_rounds_error;       // why the rounds stopped short; empty when all ran
  // The baseline A/B'd against itself before any attempt (its ratio is 1 in truth), and the tie band it set.
  struct SelfAB {
    double ratio = 0, ci_low = 0, ci_high = 0, tie_threshold = 0;
  } self_ab;
  double baseline_seconds() const { return waterfall.front().seconds; }
  double final_seconds() const { return waterfall.back().seconds; }
};

// `inputs` binds every graph input (weights included). Errors: the baseline cannot be built, run or does
// not match the reference in NaN/Inf placement; a failed attempt is recorded, not an error.
Result<OptimizeResult> optimize(const Graph& model, const std::map<std::string, Tensor>& inputs,
                                backend::Backend& backend, const OptimizeOptions& options);

// The final plan as JSON: the pass list run, the disabled passes, rewrites and schedules by kernel hash (the
// Plan artifact replaces this when Plan save lands).
std::string final_plan_json(const OptimizeResult& result);

}  // namespace kiln::agent
