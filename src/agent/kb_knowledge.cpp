// The optimize loop's knowledge base and tuner over src/kb and src/tune (kb_knowledge.h).
#include "agent/kb_knowledge.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
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

// The seed's neighbourhood in the kernel's harness space, nearest first (the seed itself when the space has
// it, then schedules one field away, ...), `count` of them.
std::vector<kernel::Schedule> seeded_space(const kernel::Kernel& k, kernel::Schedule seed, int cores, size_t count) {
  seed.threads = 1;
  const std::vector<kernel::Schedule> space = tune::harness_space(kernel::schedule_space(k, kernel::Target::cpu, cores));
  std::vector<std::pair<int, size_t>> by_distance;
  for (size_t i = 0; i < space.size(); ++i) by_distance.push_back({tune::schedule_distance(space[i], seed), i});
  std::stable_sort(by_distance.begin(), by_distance.end());
  std::vector<kernel::Schedule> out;
  for (const auto& [distance, index] : by_distance) {
    if (out.size() >= count) break;
    out.push_back(space[index]);
  }
  return out;
}

// Whether a kernel recipe's winner was its task's own default schedule (recipes recorded before
// `default_won` say so in their decision).
bool recipe_kept_default(const kb::Recipe& recipe) {
  const nlohmann::json& v = recipe.verification;
  if (v.contains("default_won")) return v.at("default_won").get<bool>();
  const std::string decision = v.value("decision", std::string());
  return decision == "the default schedule is the fastest" ||
         decision.rfind("the fastest candidate did not beat the default", 0) == 0;
}

int logical_cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

std::vector<std::string> string_list(const nlohmann::json& j, const char* field) {
  std::vector<std::string> out;
  if (j.contains(field)) {
    for (const auto& name : j.at(field)) out.push_back(name.get<std::string>());
  }
  return out;
}

// A plan recipe's implementation back as a StoredPlan (plans stored before `model`, `decided` and `prior` were
// recorded have none of those).
Result<StoredPlan> plan_from_recipe(const kb::Recipe& recipe) {
  const nlohmann::json& j = recipe.implementation;
  StoredPlan p;
  p.id = recipe.id;
  p.run_id = recipe.run_id;
  p.seconds = recipe.seconds;
  try {
    p.model_key = j.value("model", std::string());
    p.prior = j.value("prior", std::string());
    for (const std::string& name : string_list(j, "disabled_passes")) p.disabled_passes.insert(name);
    p.rewrites = string_list(j, "rewrites");
    p.lanes = std::max(1, j.value("lanes", 1));  // recipes before lanes ran on one
    p.kept = string_list(j, "kept");
    p.decided = string_list(j, "decided");
    for (const auto& [hash, schedule] : j.at("schedules").items()) {
      auto parsed = kernel::schedule_from_json(schedule.dump());
      if (!parsed.ok()) {
        return make_error(ErrorCode::parse_error,
                          "stored plan " + p.id + ": schedule " + hash + ": " + parsed.error().message);
      }
      p.schedules[hash] = *parsed;
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error(ErrorCode::parse_error, "stored plan " + p.id + " is malformed: " + e.what());
  }
  return p;
}

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
    // The tuner's findings are its recipes; a tuning attempt that found nothing is no lesson about tuning. A near
    // plan is a decision about one stored plan at these sizes, no lesson about a rewrite.
    if (attempt.level == OpportunityLevel::kernel && attempt.opportunity == "tune-kernels") return ok_status();
    if (attempt.opportunity == "near-plan") return ok_status();
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
  auto plan = plan_from_recipe(hit.recipe);
  if (!plan.ok()) {
    ++counts_.plan_rejected;
    return say(plan.error().message);
  }
  if (plan->model_key.empty()) plan->model_key = model_key;  // stored before plans named their model
  return std::move(plan).value();
}

std::optional<StoredPlan> KbKnowledge::near_plan(const PlanKey& key, std::string* why_not) {
  auto say = [&](std::string reason) {
    if (why_not) *why_not = std::move(reason);
    return std::nullopt;
  };
  if (options_.force) return say("--force: no near plan either");
  if (key.structure.empty()) return say("no structure key for " + key.model_key);
  const kb::RecipeKey structure{key.structure, key.sizes};
  // The same structure at the same sizes under another spec first (the same model named differently), then
  // other sizes, nearest first.
  auto same = kb_.exact_hits(structure, fingerprint_, kb::FingerprintPolicy::ignore);
  auto near = kb_.near_hits(structure, fingerprint_, 8);
  if (!same.ok() || !near.ok()) {
    const Error& e = !same.ok() ? same.error() : near.error();
    warn("reading near plans", e);
    return say("the knowledge base could not be read: " + e.message);
  }
  std::vector<kb::RecipeHit> hits = std::move(same).value();
  for (kb::RecipeHit& h : *near) hits.push_back(std::move(h));
  std::string elsewhere;
  for (const kb::RecipeHit& hit : hits) {
    if (!hit.same_fingerprint) {
      if (elsewhere.empty()) elsewhere = hit.recipe.id;
      continue;
    }
    auto plan = plan_from_recipe(hit.recipe);
    if (!plan.ok()) {
      warn("reading near plan " + hit.recipe.id, plan.error());
      continue;
    }
    if (plan->model_key == key.model_key) continue;  // this model's own plan: stored_plan's business
    return std::move(plan).value();
  }
  if (!elsewhere.empty()) {
    return say("no stored plan for " + key.model_key + " and no near plan on this fingerprint (near plan " + elsewhere +
               " was decided under another one)");
  }
  return say("no stored plan for " + key.model_key + " and none for the same structure at other sizes");
}

void KbKnowledge::record_plan(const PlanKey& key, const StoredPlan& plan) {
  nlohmann::json schedules = nlohmann::json::object();
  for (const auto& [hash, s] : plan.schedules) schedules[hash] = nlohmann::json::parse(kernel::schedule_to_json(s));
  kb::Recipe r;
  r.run_id = run_id_;
  r.fingerprint = fingerprint_;
  r.kind = kb::ImplementationKind::library;
  r.implementation = {{"model", key.model_key}, {"disabled_passes", plan.disabled_passes}, {"rewrites", plan.rewrites},
                      {"lanes", plan.lanes}, {"kept", plan.kept}, {"decided", plan.decided}, {"prior", plan.prior}, {"schedules", schedules}};
  r.seconds = plan.seconds;
  r.timings = nlohmann::json::array();
  r.verification = {{"numerics", "every output within the numerics policy vs the reference executor"}};
  int recorded = 0;
  // Two rows, one plan: under the exact spec (the next run of this model re-verifies it) and under its
  // structure with its sizes (a run at other sizes takes it as its near plan).
  Status st = kb_.atomically([&]() -> Status {
    r.key = {plan_task_hash(key.model_key), {}};
    KILN_TRY(kb_.record_recipe(r));
    ++recorded;
    if (key.structure.empty()) return ok_status();
    r.key = {key.structure, key.sizes};
    KILN_TRY(kb_.record_recipe(r));
    ++recorded;
    return ok_status();
  });
  if (!st.ok()) return warn("recording the plan", st.error());
  counts_.recipes_recorded += recorded;
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
  const double budget = std::min(options_.tune_budget_seconds, request.budget_seconds);
  const auto start = Clock::now();
  auto left_seconds = [&] { return budget - std::chrono::duration<double>(Clock::now() - start).count(); };
  std::map<std::string, kernel::Schedule> winners;

  // An exact recipe decides its task with a re-verification at most: none when the recipe is the kernel's
  // default schedule (the loop's numerics gate checks it with the whole Plan).
  std::set<const tune::TuneTask*> had_exact;  // re-verified once already: not again
  auto decide_exact = [&](const tune::TuneTask& task) -> Result<bool> {
    if (had_exact.count(&task)) return false;
    const kb::RecipeKey key{kernel_structure_hash(task.kernel), kernel_param_types(task.kernel)};
    const kernel::Schedule fallback = kernel::default_schedule(task.kernel, kernel::Target::cpu, cores);
    KILN_ASSIGN_OR_RETURN(auto exact, kb_.exact_hits(key, fingerprint_, kb::FingerprintPolicy::ignore));
    if (!exact.empty()) had_exact.insert(&task);
    for (const kb::RecipeHit& hit : exact) {
      auto schedule = kernel::schedule_from_json(hit.recipe.implementation.dump());
      if (!schedule.ok()) continue;
      if (*schedule == fallback) return true;
      if (left_seconds() <= 0) return false;
      ++counts_.tune_candidates;
      tune::CandidateRecord check = tune::verify_schedule(graph, task, *schedule, options_.tune);
      if (check.outcome != "passed") continue;
      winners[task.hash] = *schedule;
      return true;
    }
    return false;
  };
  // Exact recipes of earlier runs first, so the budget left after those cheap decisions goes to the searches.
  std::vector<const tune::TuneTask*> open;
  for (const tune::TuneTask* task : tasks) {
    KILN_ASSIGN_OR_RETURN(bool decided, decide_exact(*task));
    if (decided) {
      ++counts_.exact_hits;
    } else {
      open.push_back(task);
    }
  }

  // The rest, hottest first, each decided once: by a recipe recorded earlier in this run (the same kernel
  // elsewhere), seeded from a near recipe, or searched cold. The budget left is shared out over the tasks
  // still open; what a seeded task does not use goes to the ones after it.
  size_t left = open.size();
  int untimed = 0;
  std::string first_untimed;
  for (const tune::TuneTask* task : open) {
    const size_t share_of = left--;
    if (left_seconds() <= 0) {
      ++counts_.tasks_undecided;  // the tuner's share is spent: the default schedule stays
      continue;
    }
    KILN_ASSIGN_OR_RETURN(bool decided, decide_exact(*task));
    if (decided) {
      ++counts_.exact_hits;
      continue;
    }
    const kb::RecipeKey key{kernel_structure_hash(task->kernel), kernel_param_types(task->kernel)};
    const kernel::Schedule fallback = kernel::default_schedule(task->kernel, kernel::Target::cpu, cores);
    KILN_ASSIGN_OR_RETURN(auto near, kb_.near_hits(key, fingerprint_, 1));
    std::optional<kernel::Schedule> seed;
    if (!near.empty()) {
      auto parsed = kernel::schedule_from_json(near.front().recipe.implementation.dump());
      if (parsed.ok()) seed = *parsed;
    }
    tune::TuneOptions o = options_.tune;
    o.cores = cores;
    o.measure_baseline = false;
    o.budget_seconds = left_seconds() / static_cast<double>(share_of);
    o.max_candidates = options_.max_candidates;
    if (seed) {
      ++counts_.near_hits;
      // The near recipe kept its own default: the prior is "the default wins", and this kernel's default is
      // what the plan already runs. Nothing to verify or time apart from the whole Plan.
      kernel::Schedule seed_single = *seed, default_single = fallback;
      seed_single.threads = default_single.threads = 1;
      if (recipe_kept_default(near.front().recipe) || seed_single == default_single) continue;
      // Else the seed (and `seeded_neighbours` schedules one field from it) against the default, one round,
      // the A/B against the default deciding (tune_kernel: a tie keeps the default).
      const size_t count = static_cast<size_t>(1 + std::max(0, options_.seeded_neighbours));
      o.space = [seed, cores, count](const kernel::Kernel& k) { return seeded_space(k, *seed, cores, count); };
      o.initial_candidates = static_cast<int>(count) + 1;
      o.max_rounds = 0;
      o.max_candidates = static_cast<int>(count) + 1;
    } else {
      ++counts_.cold_tasks;
    }
    auto tuned = tune::tune_kernel(graph, *task, o);
    if (!tuned.ok()) {
      warn("tuning " + task->label, tuned.error());
      continue;
    }
    counts_.tune_candidates += tuned->tried();
    if (!tuned->tuned) {
      // Nothing passed and was timed (a compiler or harness fault, not a slow schedule): said once per call.
      if (untimed++ == 0 && !tuned->candidates.empty()) {
        const tune::CandidateRecord& c = tuned->candidates.front();
        first_untimed = task->label + ": " + c.outcome + ": " + c.summary;
      }
      continue;
    }
    const bool default_won = tuned->winner == tuned->default_schedule;
    if (!default_won) winners[task->hash] = tuned->winner;
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
                      {"default_won", default_won}, {"seeded_from", seed ? near.front().recipe.id : ""}};
    auto id = kb_.record_recipe(r);
    if (!id.ok()) {
      warn("recording the recipe of " + task->label, id.error());
    } else {
      ++counts_.recipes_recorded;
    }
  }
  if (untimed > 0) {
    warn("tuning", make_error(ErrorCode::unsupported,
                              fmt::format("{} kernel task(s) kept their default schedule because no candidate passed "
                                          "and was timed; the first: {}",
                                          untimed, first_untimed)));
  }
  return winners;
}

}  // namespace kiln::agent
