// The optimize loop's knowledge base and tuner over src/kb and src/tune (kb_knowledge.h).
#include "agent/kb_knowledge.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "agent/task_key.h"
#include "tune/search.h"
#include "tune/task.h"

namespace kiln::agent {
namespace {

using Clock = std::chrono::steady_clock;

std::optional<kb::LessonOutcome> lesson_outcome(const std::string& outcome) {
  if (outcome == "kept") return kb::LessonOutcome::improved;
  if (outcome == "no win") return kb::LessonOutcome::neutral;
  if (outcome == "slower") return kb::LessonOutcome::regressed;
  if (outcome == "numerics") return kb::LessonOutcome::incorrect;
  if (outcome == "failed") return kb::LessonOutcome::failed;
  return std::nullopt;  // skipped: nothing was learned
}

std::string date_of(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[16];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d", &tm);
  return buffer;
}

// The seed's neighbourhood in the kernel's harness space: the seed (when the space has it), then every
// schedule one field away, then the nearest others until there are at least `count`.
std::vector<kernel::Schedule> seeded_space(const kernel::Kernel& k, kernel::Schedule seed, int cores, size_t count) {
  seed.threads = 1;
  const std::vector<kernel::Schedule> space = tune::harness_space(kernel::schedule_space(k, kernel::Target::cpu, cores));
  std::vector<std::pair<int, size_t>> by_distance;
  for (size_t i = 0; i < space.size(); ++i) by_distance.push_back({tune::schedule_distance(space[i], seed), i});
  std::stable_sort(by_distance.begin(), by_distance.end());
  std::vector<kernel::Schedule> out;
  for (const auto& [distance, index] : by_distance) {
    if (distance > 1 && out.size() >= count) break;
    out.push_back(space[index]);
  }
  return out;
}

int logical_cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

}  // namespace

Result<std::unique_ptr<KbKnowledge>> KbKnowledge::open(const std::string& path, const kb::Fingerprint& fingerprint,
                                                       const kb::RunInfo& info, const KbKnowledgeOptions& options) {
  auto opened = kb::KnowledgeBase::open(path);
  if (!opened.ok()) return with_context(opened.error(), "knowledge base " + path);
  kb::KnowledgeBase base = std::move(opened).value();
  KILN_ASSIGN_OR_RETURN(std::string run, base.begin_run(info, fingerprint));
  return std::unique_ptr<KbKnowledge>(new KbKnowledge(std::move(base), fingerprint, std::move(run), options));
}

KbKnowledge::~KbKnowledge() {
  if (!finished_) (void)finish(false);
}

Status KbKnowledge::finish(bool succeeded) {
  finished_ = true;
  return kb_.finish_run(run_id_, succeeded ? kb::RunStatus::succeeded : kb::RunStatus::failed);
}

void KbKnowledge::warn(const std::string& what, const Error& error) {
  warnings_.push_back(what + ": " + error.message);
}

std::optional<KnowledgeReuse> KbKnowledge::known_outcome(const std::string& model_key, const std::string& device,
                                                         const std::string& opportunity) {
  if (options_.force) return std::nullopt;
  auto failure = kb_.known_failure(lesson_pattern(model_key, opportunity), fingerprint_.device_kind, device);
  if (!failure.ok()) {
    warn("reading lessons", failure.error());
    return std::nullopt;
  }
  if (!*failure) return std::nullopt;
  const kb::Lesson& l = **failure;
  ++counts_.lessons_applied;
  return KnowledgeReuse{opportunity, fmt::format("{} on this device ({}, {}): {}; --force tries it again",
                                                 kb::lesson_outcome_name(l.outcome), l.run_id, date_of(l.created_at),
                                                 l.reason)};
}

void KbKnowledge::record(const std::string& model_key, const std::string& device, const AttemptRecord& attempt) {
  const std::optional<kb::LessonOutcome> outcome = lesson_outcome(attempt.outcome);
  if (!outcome) return;
  Status st = kb_.atomically([&]() -> Status {
    kb::Decision d;
    d.run_id = run_id_;
    d.opportunity = attempt.opportunity + " on " + model_key;
    d.predicted_gain = attempt.score;
    if (attempt.ratio > 0) d.measured_gain = attempt.ratio - 1;
    d.kept = attempt.kept;
    d.reason = attempt.outcome + ": " + attempt.reason;
    KILN_TRY(kb_.record_decision(d));
    ++counts_.decisions_recorded;
    // The tuner's findings are its recipes; a tuning attempt that found nothing is no lesson about tuning.
    if (attempt.level == OpportunityLevel::kernel && attempt.opportunity == "tune-kernels") return ok_status();
    kb::Lesson l;
    l.run_id = run_id_;
    l.pattern = lesson_pattern(model_key, attempt.opportunity);
    l.device_kind = fingerprint_.device_kind;
    l.device_name = device;
    l.outcome = *outcome;
    l.reason = attempt.outcome + ": " + attempt.reason;
    l.evidence = {{"model", model_key}, {"ratio", attempt.ratio}, {"ratio_ci", {attempt.ratio_ci_low, attempt.ratio_ci_high}}};
    KILN_TRY(kb_.record_lesson(l));
    ++counts_.lessons_recorded;
    return ok_status();
  });
  if (!st.ok()) warn("recording " + attempt.opportunity, st.error());
}

std::optional<StoredPlan> KbKnowledge::stored_plan(const std::string& model_key, std::string* why_not) {
  auto say = [&](std::string reason) {
    if (why_not) *why_not = std::move(reason);
    return std::nullopt;
  };
  if (options_.force) return say("--force: every opportunity is decided again");
  auto hits = kb_.exact_hits({plan_task_hash(model_key), {}}, fingerprint_, kb::FingerprintPolicy::reverify);
  if (!hits.ok()) {
    warn("reading stored plans", hits.error());
    return say("the knowledge base could not be read: " + hits.error().message);
  }
  if (hits->empty()) {
    ++counts_.plan_misses;
    return say("no stored plan for " + model_key + " yet");
  }
  const kb::RecipeHit& hit = hits->front();
  if (!hit.same_fingerprint) {
    ++counts_.plan_rejected;
    std::string differences;
    for (const std::string& d : hit.differences) differences += (differences.empty() ? "" : "; ") + d;
    return say(fmt::format("stored plan {} was decided under another fingerprint ({}): not reused, decided again",
                           hit.recipe.id, differences));
  }
  const nlohmann::json& j = hit.recipe.implementation;
  StoredPlan p;
  p.id = hit.recipe.id;
  p.run_id = hit.recipe.run_id;
  p.seconds = hit.recipe.seconds;
  try {
    for (const auto& name : j.at("disabled_passes")) p.disabled_passes.insert(name.get<std::string>());
    for (const auto& name : j.at("rewrites")) p.rewrites.push_back(name.get<std::string>());
    for (const auto& name : j.at("kept")) p.kept.push_back(name.get<std::string>());
    for (const auto& [hash, schedule] : j.at("schedules").items()) {
      auto parsed = kernel::schedule_from_json(schedule.dump());
      if (!parsed.ok()) {
        ++counts_.plan_rejected;
        return say("stored plan " + p.id + ": schedule " + hash + ": " + parsed.error().message);
      }
      p.schedules[hash] = *parsed;
    }
  } catch (const nlohmann::json::exception& e) {
    ++counts_.plan_rejected;
    return say("stored plan " + p.id + " is malformed: " + e.what());
  }
  return p;
}

void KbKnowledge::record_plan(const std::string& model_key, const StoredPlan& plan) {
  kb::Recipe r;
  r.run_id = run_id_;
  r.key = {plan_task_hash(model_key), {}};
  r.fingerprint = fingerprint_;
  r.kind = kb::ImplementationKind::library;
  nlohmann::json schedules = nlohmann::json::object();
  for (const auto& [hash, s] : plan.schedules) schedules[hash] = nlohmann::json::parse(kernel::schedule_to_json(s));
  r.implementation = {{"disabled_passes", plan.disabled_passes}, {"rewrites", plan.rewrites},
                      {"kept", plan.kept}, {"schedules", schedules}};
  r.seconds = plan.seconds;
  r.timings = nlohmann::json::array();
  r.verification = {{"numerics", "every output within the numerics policy vs the reference executor"}};
  auto id = kb_.record_recipe(r);
  if (!id.ok()) return warn("recording the plan", id.error());
  ++counts_.recipes_recorded;
}

Tuner KbKnowledge::tuner() {
  return [this](const TuneRequest& request) { return tune(request); };
}

Result<std::map<std::string, kernel::Schedule>> KbKnowledge::tune(const TuneRequest& request) {
  const Graph& graph = request.plan.graph();
  KILN_ASSIGN_OR_RETURN(tune::TaskList list, tune::collect_tasks(graph));
  // Hottest first: the order of the request's kernel steps; tasks no step names go last.
  std::map<std::string, size_t> heat;
  for (size_t step : request.kernel_steps) {
    const auto& s = request.plan.steps().at(step);
    if (s.kernel_index < 0) continue;
    heat.emplace(request.plan.kernels().at(static_cast<size_t>(s.kernel_index)).hash, heat.size());
  }
  std::vector<const tune::TuneTask*> tasks;
  for (const tune::TuneTask& t : list.tasks) {
    if (t.kind == tune::TaskKind::kernel) tasks.push_back(&t);
  }
  auto rank = [&](const tune::TuneTask* t) { return heat.count(t->hash) ? heat.at(t->hash) : heat.size(); };
  std::stable_sort(tasks.begin(), tasks.end(), [&](auto* a, auto* b) { return rank(a) < rank(b); });

  const int cores = options_.tune.cores > 0 ? options_.tune.cores : logical_cores();
  const auto start = Clock::now();
  auto spent = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  std::map<std::string, kernel::Schedule> winners;
  size_t left = tasks.size();
  for (const tune::TuneTask* task : tasks) {
    const size_t share_of = left--;
    const kb::RecipeKey key{kernel_structure_hash(task->kernel), kernel_param_types(task->kernel)};
    const kernel::Schedule fallback = kernel::default_schedule(task->kernel, kernel::Target::cpu, cores);
    // An exact recipe on this fingerprint: re-verified (compiled and checked against the reference), then used.
    KILN_ASSIGN_OR_RETURN(auto exact, kb_.exact_hits(key, fingerprint_, kb::FingerprintPolicy::ignore));
    bool reused = false;
    for (const kb::RecipeHit& hit : exact) {
      auto schedule = kernel::schedule_from_json(hit.recipe.implementation.dump());
      if (!schedule.ok()) continue;
      tune::CandidateRecord check = tune::verify_schedule(graph, *task, *schedule, options_.tune);
      if (check.outcome != "passed") continue;
      ++counts_.exact_hits;
      if (!(*schedule == fallback)) {
        winners[task->hash] = *schedule;
      }
      reused = true;
      break;
    }
    if (reused) continue;
    const double left_seconds = options_.tune_budget_seconds - spent();
    if (left_seconds <= 0) continue;  // the tuner's share is spent: the default schedule stays
    tune::TuneOptions o = options_.tune;
    o.cores = cores;
    o.measure_baseline = false;
    o.budget_seconds = left_seconds / static_cast<double>(share_of);
    o.max_candidates = options_.max_candidates;
    KILN_ASSIGN_OR_RETURN(auto near, kb_.near_hits(key, fingerprint_, 1));
    std::optional<kernel::Schedule> seed;
    if (!near.empty()) {
      auto parsed = kernel::schedule_from_json(near.front().recipe.implementation.dump());
      if (parsed.ok()) seed = *parsed;
    }
    if (seed) {
      ++counts_.near_hits;
      const size_t count = static_cast<size_t>(std::max(2, options_.seeded_candidates));
      o.space = [seed, cores, count](const kernel::Kernel& k) { return seeded_space(k, *seed, cores, count); };
      o.initial_candidates = options_.seeded_candidates;
      o.max_rounds = 1;
      o.max_candidates = options_.seeded_candidates + 1;
    } else {
      ++counts_.cold_tasks;
    }
    auto tuned = tune::tune_kernel(graph, *task, o);
    if (!tuned.ok()) {
      warn("tuning " + task->label, tuned.error());
      continue;
    }
    if (!tuned->tuned) continue;
    if (!(tuned->winner == tuned->default_schedule)) winners[task->hash] = tuned->winner;
    kb::Recipe r;
    r.run_id = run_id_;
    r.key = key;
    r.fingerprint = fingerprint_;
    r.kind = kb::ImplementationKind::schedule;
    r.implementation = nlohmann::json::parse(kernel::schedule_to_json(tuned->winner));
    r.seconds = tuned->winner_seconds;
    r.timings = nlohmann::json::array();
    for (const tune::CandidateRecord& c : tuned->candidates) {
      r.timings.push_back({{"implementation", nlohmann::json::parse(kernel::schedule_to_json(c.schedule))},
                           {"round", c.round}, {"outcome", c.outcome},
                           {"seconds", c.timed ? c.time.median : 0.0}});
    }
    r.verification = {{"kernel_hash", task->hash}, {"outcome", "passed"}, {"decision", tuned->decision},
                      {"seeded_from", seed ? near.front().recipe.id : ""}};
    auto id = kb_.record_recipe(r);
    if (!id.ok()) {
      warn("recording the recipe of " + task->label, id.error());
    } else {
      ++counts_.recipes_recorded;
    }
  }
  return winners;
}

}  // namespace kiln::agent
