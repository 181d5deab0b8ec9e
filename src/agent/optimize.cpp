#include "agent/optimize.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <nlohmann/json.hpp>

#include "agent/task_key.h"
#include "ir/text.h"
#include "passes/pipeline.h"
#include "ref/executor.h"

namespace kiln::agent {
namespace {

using Clock = std::chrono::steady_clock;

// A Plan built, run once on the inputs, and ready to replay as deployed.
struct Deployed {
  PlanConfig config;
  Graph graph;
  std::unique_ptr<backend::Plan> plan;
  std::map<std::string, Tensor> outputs;
  std::function<Status()> replay;
  bool captured = true;
};

class Loop {
 public:
  Loop(const Graph& model, const std::map<std::string, Tensor>& inputs, backend::Backend& backend,
       const OptimizeOptions& options)
      : model_(model), inputs_(inputs), backend_(backend), options_(options), ab_(options.ab), start_(Clock::now()) {}

  Result<OptimizeResult> run();

 private:
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void say(const std::string& line) const {
    if (options_.progress) options_.progress(fmt::format("[{:7.1f}s] {}", elapsed(), line));
  }
  Result<Deployed> deploy(const PlanConfig& config);
  // Tries `opportunity` against current_; keeps it (replacing current_) if it wins.
  void attempt(const Opportunity& opportunity);
  Opportunity tuning_opportunity(const profile::PlanProfile& profile);
  // Re-verifies a stored final config (numerics, one timing) and makes it current; false (with the reason
  // noted) when it does not build, verify or name rewrites the loop does not have.
  bool reuse_plan(const StoredPlan& stored, double baseline_seconds);
  // The rewrites a stored config names, resolved against the loop's starting config; an error names the one
  // this run does not have.
  Result<PlanConfig> stored_config(const StoredPlan& stored, bool with_schedules) const;
  // A near plan (same structure, other sizes) as the prior: built, verified and A/B'd once against the current
  // Plan; when its numerics pass and it is not slower it becomes current and the opportunities it decided are
  // not tried again (a prior that kept nothing is taken without a build or an A/B). False (the attempt recorded
  // with its outcome) otherwise: the loop then decides one by one.
  bool try_near_plan(const StoredPlan& near);
  void finish_knowledge();
  // The final summary, config, graph and Plan into the result; the plan recorded in the knowledge base.
  Result<OptimizeResult> finish();
  Status run_peer_rounds();  // OptimizeOptions::peer_round
  // The current Plan timed as a peer times itself: settle_seconds of idle, then kPeerTiming. Its median.
  Result<double> time_as_peer();

  const Graph& model_;
  const std::map<std::string, Tensor>& inputs_;
  backend::Backend& backend_;
  const OptimizeOptions& options_;
  ABOptions ab_;  // options_.ab with the tie band measured on this machine (measured_tie_threshold)
  Clock::time_point start_;
  std::map<std::string, Tensor> reference_;
  int64_t reduction_length_ = 1;
  Deployed current_;
  OptimizeResult result_;
  std::vector<std::string> kept_;     // opportunities in force in current_ (a near plan's included)
  std::vector<std::string> decided_;  // opportunities decided in this run (or by its near plan)
  std::optional<StoredPlan> prior_;   // the near plan in force
  KnowledgeCounts counts_at_start_;   // the knowledge base may have served earlier buckets
};

Result<Deployed> Loop::deploy(const PlanConfig& config) {
  Deployed d;
  d.config = config;
  // Where a deployment's seconds go (the passes, the plan's build with its compiles, the first run with the
  // GEMM algorithm choices, the capture), said in the log: on a GPU call the loop's time is device time.
  const double started = elapsed();
  KILN_ASSIGN_OR_RETURN(d.graph, build_graph(model_, config, backend_.supports_fn()));
  const double passed = elapsed();
  backend::PlanOptions plan_options;
  plan_options.schedules = config.schedules;
  plan_options.lanes = config.lanes;
  KILN_ASSIGN_OR_RETURN(d.plan, backend::Plan::build(backend_, d.graph, plan_options));
  const double built = elapsed();
  KILN_ASSIGN_OR_RETURN(d.outputs, d.plan->run(inputs_));
  const double ran = elapsed();
  backend::Plan* plan = d.plan.get();
  std::function<Status()> work = [plan] { return plan->execute(); };
  auto captured = backend_.capture(work);
  if (captured.ok()) {
    d.replay = std::move(captured).value();
  } else {
    // A Plan with reference fallbacks copies to the host and cannot be captured; it runs step by step.
    d.replay = work;
    d.captured = false;
    say("not captured, runs uncaptured: " + captured.error().message);
  }
  const double done = elapsed();
  say(fmt::format("deployed in {:.1f} s: passes {:.1f} s, plan build {:.1f} s (compile {:.1f} s), first run {:.1f} s "
                  "(library calls {:.1f} s), capture {:.1f} s",
                  done - started, passed - started, built - passed, d.plan->summary().compile_seconds, ran - built,
                  d.plan->stats().library_seconds, done - ran));
  return d;
}

void Loop::attempt(const Opportunity& opportunity) {
  AttemptRecord a;
  a.opportunity = opportunity.name;
  a.level = opportunity.level;
  a.score = opportunity.score();
  auto finish = [&](std::string outcome, std::string reason) {
    a.outcome = std::move(outcome);
    a.reason = std::move(reason);
    a.elapsed_seconds = elapsed();
    say(fmt::format("{}: {} ({})", a.opportunity, a.outcome, a.reason));
    if (options_.knowledge) options_.knowledge->record(options_.model_key, result_.device.name, a);
    result_.attempts.push_back(a);
  };
  if (elapsed() > options_.budget_seconds) {
    return finish("skipped", fmt::format("the budget of {:.0f} s was spent", options_.budget_seconds));
  }
  if (options_.knowledge) {
    if (auto known = options_.knowledge->known_outcome(options_.model_key, result_.device.name, opportunity.name)) {
      result_.knowledge_reuse.push_back(*known);
      decided_.push_back(opportunity.name);
      return finish("skipped", "knowledge base: " + known->what);
    }
  }
  if (prior_ && opportunity.name != "tune-kernels" &&
      std::count(prior_->decided.begin(), prior_->decided.end(), opportunity.name)) {
    const bool in_force = std::count(prior_->kept.begin(), prior_->kept.end(), opportunity.name) > 0;
    decided_.push_back(opportunity.name);
    return finish("skipped", fmt::format("knowledge base: decided by near plan {} ({}): {}", prior_->id,
                                         prior_->model_key, in_force ? "kept there, in force here" : "not kept there"));
  }
  say(fmt::format("trying {} (score {:.3f} = share {:.1f}% x gain {:.1f}%)", opportunity.name, a.score,
                  opportunity.time_share * 100, opportunity.predicted_gain * 100));
  if (!opportunity.apply) return finish("failed", "the opportunity has nothing to apply");
  decided_.push_back(opportunity.name);
  auto config = opportunity.apply(current_.config);
  if (!config.ok()) return finish("failed", config.error().message);
  // A rewrite that finds nothing to rewrite in this model (FP8 passes on a bf16 model) builds the same plan:
  // no build, no A/B, and nothing for the knowledge base to learn.
  if (config->schedules == current_.config.schedules && config->lanes == current_.config.lanes) {
    auto graph = build_graph(model_, *config, backend_.supports_fn());
    if (graph.ok() && print_graph_text(*graph) == print_graph_text(current_.graph))
      return finish("unchanged", "it leaves this model's graph as it is: nothing to build or A/B");
  }
  auto candidate = deploy(*config);
  if (!candidate.ok()) return finish("failed", "plan: " + candidate.error().message);
  NumericsVerdict verdict =
      judge_numerics(reference_, candidate->outputs, result_.baseline_errors, options_.numerics, reduction_length_);
  a.errors = verdict.outputs;
  if (!verdict.ok) return finish("numerics", verdict.reason);
  auto ab = ab_compare(backend_, current_.replay, candidate->replay, ab_);
  if (!ab.ok()) return finish("failed", "A/B: " + ab.error().message);
  a.current_seconds = ab->a.median;
  a.candidate_seconds = ab->b.median;
  a.ratio = ab->ratio.median;
  a.ratio_ci_low = ab->ratio.ci_low;
  a.ratio_ci_high = ab->ratio.ci_high;
  if (!ab->b_wins) return finish(ab->b_loses ? "slower" : "no win", ab->summary);
  a.kept = true;
  // The waterfall scales the previous figure by the interleaved ratio, so drift between separate
  // measurements does not leak into the gains, and the gains add up to the total.
  const double before = result_.waterfall.back().seconds;
  const double after = before / ab->ratio.median;
  result_.waterfall.push_back({opportunity.name, opportunity_level_name(opportunity.level), after, before - after});
  result_.deployed_capture = result_.deployed_capture && candidate->captured;
  current_ = std::move(candidate).value();
  kept_.push_back(opportunity.name);
  finish("kept", ab->summary);
}

bool Loop::reuse_plan(const StoredPlan& stored, double baseline_seconds) {
  auto reject = [&](const std::string& why) {
    ++options_.knowledge->counts().plan_rejected;
    result_.plan_reuse_note = "stored plan " + stored.id + " not reused: " + why + "; deciding again";
    result_.knowledge_reuse.push_back({"reuse-plan", result_.plan_reuse_note});
    say(result_.plan_reuse_note);
    return false;
  };
  auto config = stored_config(stored, true);
  if (!config.ok()) return reject(config.error().message);
  auto candidate = deploy(*config);
  if (!candidate.ok()) return reject("plan: " + candidate.error().message);
  NumericsVerdict verdict =
      judge_numerics(reference_, candidate->outputs, result_.baseline_errors, options_.numerics, reduction_length_);
  if (!verdict.ok) return reject("numerics: " + verdict.reason);
  auto timed = time_deployed(backend_, candidate->replay, ab_);
  if (!timed.ok()) return reject("timing: " + timed.error().message);
  ++options_.knowledge->counts().plan_hits;
  std::string kept;
  for (const std::string& k : stored.kept) kept += (kept.empty() ? "" : ", ") + k;
  result_.plan_reused = true;
  result_.plan_reuse_note = fmt::format(
      "stored plan {} (run {}, kept: {}) re-verified: numerics within policy, {:.4g} ms now vs {:.4g} ms when decided",
      stored.id, stored.run_id, kept.empty() ? "nothing" : kept, timed->median * 1e3, stored.seconds * 1e3);
  result_.knowledge_reuse.push_back({"reuse-plan", result_.plan_reuse_note});
  AttemptRecord a;
  a.opportunity = "reuse-plan";
  a.level = OpportunityLevel::model;
  a.kept = true;
  a.outcome = "kept";
  a.reason = result_.plan_reuse_note;
  a.current_seconds = baseline_seconds;
  a.candidate_seconds = timed->median;
  a.ratio = baseline_seconds / timed->median;
  a.ratio_ci_low = a.ratio_ci_high = a.ratio;
  a.errors = verdict.outputs;
  a.elapsed_seconds = elapsed();
  say("reuse-plan: " + result_.plan_reuse_note);
  result_.attempts.push_back(a);
  result_.waterfall.push_back({"knowledge base: stored plan" + (kept.empty() ? std::string() : " (" + kept + ")"),
                               "model", timed->median, baseline_seconds - timed->median});
  result_.deployed_capture = result_.deployed_capture && candidate->captured;
  current_ = std::move(candidate).value();
  return true;
}

Result<PlanConfig> Loop::stored_config(const StoredPlan& stored, bool with_schedules) const {
  PlanConfig config = options_.baseline;
  config.disabled_passes = stored.disabled_passes;
  if (with_schedules) config.schedules = stored.schedules;
  config.lanes = stored.lanes;
  config.rewrites.clear();
  for (const std::string& name : stored.rewrites) {
    auto it = std::find_if(options_.baseline.rewrites.begin(), options_.baseline.rewrites.end(),
                           [&](const GraphRewrite& r) { return r.name == name; });
    if (it == options_.baseline.rewrites.end()) {
      return make_error(ErrorCode::unsupported, "it names rewrite '" + name + "', which this run does not have");
    }
    config.rewrites.push_back(*it);
  }
  return config;
}

bool Loop::try_near_plan(const StoredPlan& near) {
  AttemptRecord a;
  a.opportunity = "near-plan";
  a.level = OpportunityLevel::model;
  std::string kept;
  for (const std::string& k : near.kept) kept += (kept.empty() ? "" : ", ") + k;
  const std::string from = fmt::format("near plan {} (decided for {} in run {}; kept: {}; {} opportunities decided)",
                                       near.id, near.model_key, near.run_id, kept.empty() ? "nothing" : kept,
                                       near.decided.size());
  auto finish = [&](std::string outcome, std::string reason) {
    a.outcome = std::move(outcome);
    a.reason = from + ": " + reason;
    a.elapsed_seconds = elapsed();
    say(fmt::format("near-plan: {} ({})", a.outcome, a.reason));
    options_.knowledge->record(options_.model_key, result_.device.name, a);
    result_.attempts.push_back(a);
    result_.knowledge_reuse.push_back({"near-plan", a.outcome + ": " + a.reason});
    if (a.kept) {
      ++options_.knowledge->counts().near_plan_hits;
      result_.near_plan = near.id + " (" + near.model_key + ", run " + near.run_id + ")";
    } else {
      ++options_.knowledge->counts().near_plan_rejected;
    }
    return a.kept;
  };
  // Its schedules are by kernel hash at its own sizes: the tuner decides this run's kernels from the recipes.
  auto config = stored_config(near, false);
  if (!config.ok()) return finish("failed", config.error().message + "; deciding one by one");
  say("trying " + from);
  const bool same_passes = config->disabled_passes == current_.config.disabled_passes;
  const bool same_rewrites =
      config->rewrites.size() == current_.config.rewrites.size() &&
      std::equal(config->rewrites.begin(), config->rewrites.end(), current_.config.rewrites.begin(),
                 [](const GraphRewrite& x, const GraphRewrite& y) { return x.name == y.name; });
  if (same_passes && same_rewrites) {
    // It kept nothing over this run's start: it changes nothing that could be slower here and there is nothing
    // to A/B, so its decisions (every opportunity left off) are taken as they are.
    a.kept = true;
    prior_ = near;
    return finish("kept", "it kept nothing over this run's starting config, nothing to build or A/B; its decisions "
                          "are taken");
  }
  auto candidate = deploy(*config);
  if (!candidate.ok()) return finish("failed", "plan: " + candidate.error().message + "; deciding one by one");
  NumericsVerdict verdict =
      judge_numerics(reference_, candidate->outputs, result_.baseline_errors, options_.numerics, reduction_length_);
  a.errors = verdict.outputs;
  if (!verdict.ok) return finish("numerics", verdict.reason + "; deciding one by one");
  auto ab = ab_compare(backend_, current_.replay, candidate->replay, ab_);
  if (!ab.ok()) return finish("failed", "A/B: " + ab.error().message + "; deciding one by one");
  a.current_seconds = ab->a.median;
  a.candidate_seconds = ab->b.median;
  a.ratio = ab->ratio.median;
  a.ratio_ci_low = ab->ratio.ci_low;
  a.ratio_ci_high = ab->ratio.ci_high;
  // Taken unless it is slower here: beyond noise, or with its median below the tie band. It already won beyond
  // noise at its own sizes; a tie here is no evidence against it, and re-deciding on a tie would make this run
  // a cold one whenever the machine is loaded (a new guess, by contrast, must win beyond noise).
  const bool slower = ab->b_loses || ab->ratio.median < 1.0 - ab_.tie_threshold;
  if (slower) return finish(ab->b_loses ? "slower" : "no win", ab->summary + ": slower here; deciding one by one");
  const double before = result_.waterfall.back().seconds;
  const double after = before / ab->ratio.median;
  const std::string label = "knowledge base: near plan" + (kept.empty() ? std::string() : " (" + kept + ")");
  result_.waterfall.push_back({label, "model", after, before - after});
  result_.deployed_capture = result_.deployed_capture && candidate->captured;
  current_ = std::move(candidate).value();
  a.kept = true;
  prior_ = near;
  kept_.insert(kept_.end(), near.kept.begin(), near.kept.end());
  return finish("kept", "numerics within policy, " + ab->summary +
                           (ab->b_wins ? "" : " (a tie: the prior's decisions are taken)"));
}

void Loop::finish_knowledge() {
  if (!options_.knowledge) return;
  if (!result_.plan_reused) {
    StoredPlan p;
    p.disabled_passes = result_.final_config.disabled_passes;
    p.schedules = result_.final_config.schedules;
    p.lanes = result_.final_config.lanes;
    for (const GraphRewrite& r : result_.final_config.rewrites) p.rewrites.push_back(r.name);
    p.kept = kept_;
    p.decided = decided_;
    if (prior_) {
      // What the near plan decided holds here too (the opportunities it covered were not tried again).
      for (const std::string& d : prior_->decided) {
        if (!std::count(p.decided.begin(), p.decided.end(), d)) p.decided.push_back(d);
      }
      p.prior = result_.near_plan;
    }
    p.seconds = result_.final_seconds();
    options_.knowledge->record_plan({options_.model_key, plan_structure_hash(model_), graph_input_types(model_)}, p);
  }
  result_.knowledge_counts = options_.knowledge->counts().since(counts_at_start_);
}

Opportunity Loop::tuning_opportunity(const profile::PlanProfile& profile) {
  Opportunity o = kernel_tuning_opportunity(profile);
  if (!options_.tuner) return o;  // no apply: recorded as not attempted
  std::vector<std::pair<double, size_t>> hot;
  for (const profile::StepProfile& s : profile.steps) {
    if (s.kind == "kernel") hot.push_back({s.seconds, s.index});
  }
  std::sort(hot.rbegin(), hot.rend());
  std::vector<size_t> steps;
  for (const auto& h : hot) steps.push_back(h.second);
  o.apply = [this, steps](const PlanConfig& config) -> Result<PlanConfig> {
    TuneRequest request{*current_.plan, backend_, steps, config.schedules,
                        std::max(0.0, options_.budget_seconds - elapsed())};
    KILN_ASSIGN_OR_RETURN(auto winners, options_.tuner(request));
    if (winners.empty()) return make_error(ErrorCode::unsupported, "the tuner found nothing better than the defaults");
    PlanConfig c = config;
    for (auto& [hash, schedule] : winners) c.schedules[hash] = schedule;
    return c;
  };
  return o;
}

Result<OptimizeResult> Loop::run() {
  if (options_.knowledge) counts_at_start_ = options_.knowledge->counts();
  result_.model_key = options_.model_key;
  result_.device = backend_.device();
  result_.budget_seconds = options_.budget_seconds;
  say("reference executor (fp64 oracle) on " + (options_.model_key.empty() ? model_.name : options_.model_key));
  KILN_ASSIGN_OR_RETURN(reference_, ref::run_graph(model_, inputs_));
  reduction_length_ = longest_accumulation(model_);

  say("baseline: " + fmt::format("{}", fmt::join(options_.baseline.disabled_passes, ", ")) + " off");
  auto baseline = deploy(options_.baseline);
  if (!baseline.ok()) return with_context(baseline.error(), "baseline plan");
  current_ = std::move(baseline).value();
  NumericsVerdict verdict = judge_numerics(reference_, current_.outputs, {}, options_.numerics, reduction_length_);
  if (!verdict.ok) return make_error(ErrorCode::verify_error, "the baseline plan does not match the reference: " + verdict.reason);
  for (const OutputError& e : verdict.outputs) result_.baseline_errors[e.output] = e.max_error;
  result_.deployed_capture = current_.captured;
  KILN_ASSIGN_OR_RETURN(harness::TimingStats t, time_deployed(backend_, current_.replay, ab_));
  result_.baseline_summary = current_.plan->summary();
  result_.waterfall.push_back({"baseline (one kernel per op)", "baseline", t.median, 0});
  say(fmt::format("baseline: {} kernels + {} library calls, {:.4g} ms end to end", result_.baseline_summary.kernels,
                  result_.baseline_summary.library_calls, t.median * 1e3));

  KILN_ASSIGN_OR_RETURN(result_.baseline_profile, profile::profile_plan(*current_.plan, backend_, options_.profile));
  say(fmt::format("profiled {} steps ({:.4g} ms step by step)", result_.baseline_profile.steps.size(),
                  result_.baseline_profile.steps_seconds * 1e3));

  // A stored final config for this model, bucket and fingerprint: re-verified instead of re-decided.
  if (options_.knowledge) {
    std::string why_not;
    if (auto stored = options_.knowledge->stored_plan(options_.model_key, &why_not)) {
      if (reuse_plan(*stored, t.median)) {
        KILN_ASSIGN_OR_RETURN(result_.final_profile, profile::profile_plan(*current_.plan, backend_, options_.profile));
        return finish();
      }
    } else {
      result_.plan_reuse_note = why_not;
      say("knowledge base: " + why_not);
    }
  }

  // The baseline against itself: how far an A/B strays from 1 here is the tie band for every A/B that follows
  // (a reused plan above is timed, not A/B'd, and needs none).
  KILN_ASSIGN_OR_RETURN(ABVerdict self, ab_compare(backend_, current_.replay, current_.replay, ab_));
  ab_.tie_threshold = measured_tie_threshold(self, options_.ab);
  result_.self_ab = {self.ratio.median, self.ratio.ci_low, self.ratio.ci_high, ab_.tie_threshold};
  say(fmt::format("the baseline A/B'd against itself: {:.4f}x [{:.4f}, {:.4f}]; ties within {:.1f}%", self.ratio.median,
                  self.ratio.ci_low, self.ratio.ci_high, ab_.tie_threshold * 100));

  // No plan for these sizes: the plan of the same structure at the nearest other sizes is the prior.
  if (options_.knowledge) {
    std::string no_near;
    const PlanKey key{options_.model_key, plan_structure_hash(model_), graph_input_types(model_)};
    if (auto near = options_.knowledge->near_plan(key, &no_near)) {
      try_near_plan(*near);
    } else {
      say("knowledge base: " + no_near);
    }
  }

  KILN_ASSIGN_OR_RETURN(std::vector<Opportunity> model_level,
                        pass_opportunities(model_, current_.config, result_.baseline_profile, backend_.supports_fn()));
  if (backend_.lanes() > 1 && current_.config.lanes == 1) model_level.push_back(lanes_opportunity(backend_.lanes()));
  std::vector<Opportunity> kernel_extras;
  for (const Opportunity& o : options_.extra_opportunities) {
    (o.level == OpportunityLevel::model ? model_level : kernel_extras).push_back(o);
  }
  rank_opportunities(model_level, false);
  for (const Opportunity& o : model_level) {
    say(fmt::format("opportunity {}: share {:.1f}% x gain {:.1f}% = {:.3f}", o.name, o.time_share * 100,
                    o.predicted_gain * 100, o.score()));
  }
  result_.ranked = model_level;
  for (const Opportunity& o : model_level) attempt(o);

  // Kernel level, on the graph the model level left: its kernels are the ones worth tuning.
  KILN_ASSIGN_OR_RETURN(profile::PlanProfile after_model, profile::profile_plan(*current_.plan, backend_, options_.profile));
  std::vector<Opportunity> kernel_level = kernel_extras;
  kernel_level.push_back(tuning_opportunity(after_model));
  rank_opportunities(kernel_level, false);
  for (const Opportunity& o : kernel_level) {
    result_.ranked.push_back(o);
    if (!o.apply && o.name == "tune-kernels") {
      AttemptRecord a;
      a.opportunity = o.name;
      a.level = o.level;
      a.score = o.score();
      a.outcome = "skipped";
      a.reason = "no tuner plugged in (--no-kb, or a backend the tuner does not support)";
      a.elapsed_seconds = elapsed();
      say(o.name + ": skipped (" + a.reason + ")");
      result_.attempts.push_back(a);
      continue;
    }
    attempt(o);
  }
  const bool kernels_changed = result_.waterfall.back().level == "kernel";
  if (kernels_changed) {
    KILN_ASSIGN_OR_RETURN(result_.final_profile, profile::profile_plan(*current_.plan, backend_, options_.profile));
  } else {
    result_.final_profile = std::move(after_model);
  }
  return finish();
}

Status Loop::run_peer_rounds() {
  for (int round = 1; options_.peer_round && round <= options_.peer_rounds; ++round) {
    Result<std::map<std::string, double>> peer = options_.peer_round();
    if (!peer.ok()) {
      result_.peer_rounds_error = fmt::format("round {} of {}: {}", round, options_.peer_rounds, peer.error().message);
      say("head to head stopped: " + result_.peer_rounds_error);
      return ok_status();
    }
    KILN_ASSIGN_OR_RETURN(const double kiln_seconds, time_as_peer());
    std::string figures;
    for (const auto& [name, seconds] : *peer) figures += fmt::format(", {} {:.4g} ms", name, seconds * 1e3);
    say(fmt::format("head to head, round {} of {}: kiln {:.4g} ms{}", round, options_.peer_rounds, kiln_seconds * 1e3,
                    figures));
    result_.peer_rounds.push_back({std::move(*peer), kiln_seconds});
  }
  return ok_status();
}

Result<double> Loop::time_as_peer() {
  KILN_TRY(backend_.synchronize());
  if (options_.settle_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(options_.settle_seconds));
  KILN_ASSIGN_OR_RETURN(backend::Timing measured, backend_.time(current_.replay, kPeerTiming));
  return measured.median_seconds;
}

Result<OptimizeResult> Loop::finish() {
  KILN_ASSIGN_OR_RETURN(const double measured_seconds, time_as_peer());
  result_.final_chained_seconds = result_.waterfall.back().seconds;
  if (options_.sustain_seconds > 0) {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(options_.sustain_seconds));
    // The clock is read after every replay (a slow CPU plan overshoots by one run at most); a GPU's queue is
    // drained every 16, so that the host does not run far ahead of the device.
    for (int runs = 1; Clock::now() < until; ++runs) {
      KILN_TRY(current_.replay());
      if (runs % 16 == 0) KILN_TRY(backend_.synchronize());
    }
    KILN_TRY(backend_.synchronize());
    KILN_ASSIGN_OR_RETURN(backend::Timing sustained, backend_.time(current_.replay, {0, kPeerTiming.repetitions}));
    result_.final_sustained_seconds = sustained.median_seconds;
  }
  KILN_TRY(run_peer_rounds());
  result_.waterfall.push_back({"the final Plan timed alone at the end", "measured", measured_seconds,
                               result_.final_chained_seconds - measured_seconds});
  result_.final_summary = current_.plan->summary();
  result_.final_config = current_.config;
  result_.final_graph = current_.graph;
  finish_knowledge();
  result_.final_plan = std::shared_ptr<backend::Plan>(std::move(current_.plan));
  result_.elapsed_seconds = elapsed();
  say(fmt::format("done: {:.4g} ms -> {:.4g} ms ({:.2f}x) in {:.0f} s (the kept A/B ratios chained: {:.4g} ms)",
                  result_.baseline_seconds() * 1e3, result_.final_seconds() * 1e3,
                  result_.baseline_seconds() / result_.final_seconds(), result_.elapsed_seconds,
                  result_.final_chained_seconds * 1e3));
  return std::move(result_);
}

}  // namespace

static_assert(sizeof(KnowledgeCounts) == 14 * sizeof(int), "KnowledgeCounts::since must subtract every count");

KnowledgeCounts KnowledgeCounts::since(const KnowledgeCounts& b) const {
  KnowledgeCounts d = *this;
  for (auto [field, before] : {std::pair{&d.plan_hits, b.plan_hits}, {&d.plan_misses, b.plan_misses},
                               {&d.plan_rejected, b.plan_rejected}, {&d.near_plan_hits, b.near_plan_hits},
                               {&d.near_plan_rejected, b.near_plan_rejected}, {&d.exact_hits, b.exact_hits},
                               {&d.near_hits, b.near_hits}, {&d.cold_tasks, b.cold_tasks},
                               {&d.tasks_undecided, b.tasks_undecided}, {&d.tune_candidates, b.tune_candidates},
                               {&d.lessons_applied, b.lessons_applied}, {&d.recipes_recorded, b.recipes_recorded},
                               {&d.lessons_recorded, b.lessons_recorded},
                               {&d.decisions_recorded, b.decisions_recorded}}) {
    *field -= before;
  }
  return d;
}

Result<OptimizeResult> optimize(const Graph& model, const std::map<std::string, Tensor>& inputs,
                                backend::Backend& backend, const OptimizeOptions& options) {
  Loop loop(model, inputs, backend, options);
  return loop.run();
}

std::string final_plan_json(const OptimizeResult& result) {
  nlohmann::json passes = nlohmann::json::array();
  for (const std::string& name : passes::pipeline_pass_names()) {
    if (!result.final_config.disabled_passes.count(name)) passes.push_back(name);
  }
  nlohmann::json rewrites = nlohmann::json::array();
  for (const GraphRewrite& r : result.final_config.rewrites) rewrites.push_back(r.name);
  nlohmann::json schedules = nlohmann::json::object();
  for (const auto& [hash, schedule] : result.final_config.schedules) {
    schedules[hash] = nlohmann::json::parse(kernel::schedule_to_json(schedule));
  }
  const backend::PlanSummary& s = result.final_summary;
  nlohmann::json j = {{"format", "kiln-plan-config/1"},
                      {"model", result.model_key},
                      {"device", result.device.name},
                      {"backend", result.device.kind},
                      {"passes", passes},
                      {"disabled_passes", result.final_config.disabled_passes},
                      {"rewrites", rewrites},
                      {"lanes", result.final_config.lanes},
                      {"schedules", schedules},
                      {"end_to_end_seconds", result.final_seconds()},
                      {"kernels", s.kernels},
                      {"library_calls", s.library_calls},
                      {"fallbacks", s.fallbacks}};
  return j.dump(2);
}

}  // namespace kiln::agent
