// The tuner (src/tune): task collection and deduplication, the search strategy, the tuner on a small real
// kernel (the winner passes verification and is no slower than the default, by the evidence), planted broken
// candidates recorded with their class, JSON round trip of results, and applying a result to a plan
// (stale, mismatched and unimplementable files). No timed assertions: times are compared as recorded.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/plan.h"
#include "models/weights.h"
#include "passes/pipeline.h"
#include "ref/executor.h"
#include "tune/apply.h"
#include "tune/result_json.h"
#include "tune/search.h"
#include "tune/task.h"
#include "tune/tuner.h"

namespace kiln::tune {
namespace {

using kernel::Schedule;

// `blocks` layernorm-modulate blocks on inputs of their own, each [rows, cols]; then one more of another shape.
Graph modulate_blocks(int blocks, int64_t rows, int64_t cols, bool odd_one = false) {
  Graph g;
  g.name = "modulate_blocks";
  auto block = [&](const std::string& p, int64_t r) {
    const ValueId x = *g.add_input(p + "x", {DType::f32, {r, cols}}, Binding::per_call);
    const ValueId shift = *g.add_input(p + "shift", {DType::f32, {1, cols}}, Binding::per_call);
    const ValueId scale = *g.add_input(p + "scale", {DType::f32, {1, cols}}, Binding::per_call);
    const ValueId n = (*g.add_node(Op::layernorm, {x}, {}, {p + "n"}))[0];
    const ValueId m = (*g.add_node(Op::mul, {n, scale}, {}, {p + "m"}))[0];
    const ValueId y = (*g.add_node(Op::add, {m, shift}, {}, {p + "y"}))[0];
    KILN_CHECK(g.add_output(p + "y", y).ok());
  };
  for (int b = 0; b < blocks; ++b) block("b" + std::to_string(b) + "_", rows);
  if (odd_one) block("odd_", rows + 1);
  return g;
}

Graph optimized(const Graph& g) {
  auto r = passes::run_pipeline(g);
  KILN_CHECK(r.ok());
  return std::move(r->graph);
}

TuneOptions fast_options() {
  TuneOptions o = default_tune_options();
  o.jobs = 2;
  o.cores = 2;
  o.max_candidates = 6;
  o.initial_candidates = 4;
  o.max_rounds = 1;
  o.budget_seconds = 120;
  o.bench.sessions = 1;
  o.bench.min_seconds = 0.02;
  o.bench.max_seconds = 0.1;
  o.verify.trials_per_distribution = 1;
  return o;
}

const CandidateRecord* find_candidate(const KernelTuneResult& r, const std::string& round) {
  for (const CandidateRecord& c : r.candidates) {
    if (c.round == round) return &c;
  }
  return nullptr;
}

// Every candidate in one line each, for failure messages.
std::string dump(const KernelTuneResult& r) {
  std::string out = r.decision + "\n";
  for (const CandidateRecord& c : r.candidates) {
    out += c.round + " " + kernel::schedule_to_string(c.schedule) + " " + c.outcome + " " + c.summary + "\n";
  }
  return out;
}

TEST(TuneTask, IdenticalGroupsAreOneTask) {
  const Graph g = optimized(modulate_blocks(3, 8, 64, /*odd_one=*/true));
  auto list = collect_tasks(g);
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list->tasks.size(), 2u);  // three identical blocks, one of another shape
  EXPECT_EQ(list->units, 4);
  EXPECT_EQ(list->tasks[0].kind, TaskKind::kernel);
  EXPECT_EQ(list->tasks[0].occurrences, 3);
  EXPECT_EQ(list->tasks[1].occurrences, 1);
  EXPECT_NE(list->tasks[0].hash, list->tasks[1].hash);
  EXPECT_GT(list->tasks[0].members.size(), 1u);  // the fused group, not single nodes
}

TEST(TuneTask, LibraryOpsAreTasksAndAModelWithNoneSaysSo) {
  Graph g;
  g.name = "gemms";
  for (int i = 0; i < 2; ++i) {
    const ValueId x = *g.add_input("x" + std::to_string(i), {DType::f32, {4, 16}}, Binding::per_call);
    const ValueId w = *g.add_input("w" + std::to_string(i), {DType::f32, {8, 16}}, Binding::weight);
    const ValueId y = (*g.add_node(Op::linear, {x, w}, {}, {"y" + std::to_string(i)}))[0];
    KILN_CHECK(g.add_output("y" + std::to_string(i), y).ok());
  }
  auto list = collect_tasks(optimized(g));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->tasks.size(), 1u);
  EXPECT_EQ(list->tasks[0].kind, TaskKind::library);
  EXPECT_EQ(list->tasks[0].occurrences, 2);

  Graph empty;
  empty.name = "identity";
  const ValueId x = *empty.add_input("x", {DType::f32, {4}}, Binding::per_call);
  KILN_CHECK(empty.add_output("x", x).ok());
  auto result = tune_graph(empty, nullptr, fast_options());
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->kernels.empty());
  ASSERT_FALSE(result->notes.empty());
  EXPECT_NE(result->notes.back().find("no tasks"), std::string::npos) << result->notes.back();
}

TEST(TuneSearch, InitialRoundAndNeighbours) {
  std::vector<Schedule> space;
  for (int64_t rows : {1, 4, 16}) {
    for (int vec : {1, 8}) space.push_back(Schedule{rows, 2, 1, vec, true, 1});
  }
  space.push_back(Schedule{1, 1, 1, 1, true, 1});  // the same as space[0] once threads = 1
  const std::vector<Schedule> h = harness_space(space);
  ASSERT_EQ(h.size(), 6u);
  EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](const Schedule& s) { return s.threads == 1; }));

  const Schedule first{4, 1, 1, 8, true, 1};
  const std::vector<Schedule> round0 = initial_candidates(h, first, 3);
  ASSERT_EQ(round0.size(), 3u);
  EXPECT_EQ(round0[0], first);
  EXPECT_EQ(round0[1], h.front());
  EXPECT_EQ(round0[2], h.back());

  const std::vector<Schedule> next = untried_neighbours(h, first, {first, h.front()});
  // One field away from rows=4 vec=8: rows 1 or 16 at vec 8, and vec 1 at rows 4.
  ASSERT_EQ(next.size(), 3u);
  for (const Schedule& s : next) EXPECT_EQ(schedule_distance(s, first), 1);
}

// Each field of a schedule, changed alone, is one step away; a gather-read table is one step from a plain one
// (the distance once skipped `gathers`, so the tuner could never step between the two).
TEST(TuneSearch, EveryFieldIsOneStep) {
  const Schedule base{4, 2, 32, 8, true, 1};
  std::vector<Schedule> steps(11, base);
  steps[0].rows_per_task = 8;
  steps[1].threads = 1;
  steps[2].threads_per_row = 64;
  steps[3].vector_width = 4;
  steps[4].cache_row = false;
  steps[5].unroll = 2;
  steps[6].registers = false;
  steps[7].tables = true;
  steps[8].stream_stores = true;
  steps[9].pairs = true;
  steps[10].moments = true;
  for (const Schedule& s : steps) {
    EXPECT_EQ(schedule_distance(s, base), 1) << schedule_to_string(s);
    EXPECT_EQ(schedule_distance(base, s), 1) << schedule_to_string(s);
  }
  Schedule gathered = steps[7];
  gathered.gathers = true;
  EXPECT_EQ(schedule_distance(gathered, steps[7]), 1);
  EXPECT_EQ(schedule_distance(gathered, base), 2);
  EXPECT_EQ(schedule_distance(base, base), 0);
}

TEST(Tuner, WinnerPassesAndIsNoSlowerThanTheDefault) {
  const Graph g = optimized(modulate_blocks(1, 32, 256));
  auto list = collect_tasks(g);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->tasks.size(), 1u);
  TuneOptions options = fast_options();
  auto r = tune_kernel(g, list->tasks[0], options);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->tuned) << dump(*r);
  const CandidateRecord* by_default = find_candidate(*r, "default");
  ASSERT_NE(by_default, nullptr);
  EXPECT_EQ(by_default->outcome, "passed") << by_default->summary;
  EXPECT_GE(r->tried(), 2);
  EXPECT_LE(r->tried(), options.max_candidates);
  // The winner is a candidate that passed and was timed, at the figure recorded for it.
  Schedule winner_single = r->winner;
  winner_single.threads = 1;
  bool found = false;
  for (const CandidateRecord& c : r->candidates) {
    if (!(c.schedule.vector_width == winner_single.vector_width && c.schedule.cache_row == winner_single.cache_row &&
          c.schedule.unroll == winner_single.unroll)) {
      continue;
    }
    if (c.timed && c.outcome == "passed" && c.time.median == r->winner_seconds) found = true;
  }
  EXPECT_TRUE(found) << kernel::schedule_to_string(r->winner);
  EXPECT_GT(r->default_seconds, 0);
  EXPECT_LE(r->winner_seconds, r->default_seconds);
  EXPECT_GE(r->worst_seconds, r->winner_seconds);
  EXPECT_TRUE(kernel::can_implement(list->tasks[0].kernel, r->winner, kernel::Target::cpu).ok());
  // The unfused baseline: every member (layernorm's primitives, mul, add) timed as its own kernel.
  EXPECT_EQ(r->baseline_kernels, static_cast<int>(list->tasks[0].members.size())) << r->baseline_note;
  EXPECT_GT(r->baseline_seconds, 0);
}

TEST(Tuner, PlantedBrokenCandidatesAreRecordedWithTheirClass) {
  const Graph g = optimized(modulate_blocks(1, 8, 64));
  auto list = collect_tasks(g);
  ASSERT_TRUE(list.ok());
  const Schedule compile_breaker{2, 1, 1, 8, true, 1};
  const Schedule crasher{4, 1, 1, 8, true, 1};
  const Schedule invalid{1, 1, 1, 3, true, 1};  // vector_width 3: not a power of two
  const Schedule good{8, 1, 1, 1, true, 4};
  TuneOptions options = fast_options();
  options.measure_baseline = false;
  options.space = [&](const kernel::Kernel&) { return std::vector<Schedule>{compile_breaker, invalid, crasher, good}; };
  options.rewrite_source = [&](const Schedule& s, std::string source) {
    if (s == compile_breaker) return source + "\nthis is not C++;\n";
    if (s == crasher) return source + "\nstatic int kiln_planted_crash = (__builtin_trap(), 0);\n";
    return source;
  };
  options.initial_candidates = 5;
  auto r = tune_kernel(g, list->tasks[0], options);
  ASSERT_TRUE(r.ok()) << r.error().message;
  std::map<std::string, std::string> outcome_of;
  for (const CandidateRecord& c : r->candidates) outcome_of[kernel::schedule_to_string(c.schedule)] = c.outcome;
  EXPECT_EQ(outcome_of[kernel::schedule_to_string(compile_breaker)], "compile-error");
  EXPECT_EQ(outcome_of[kernel::schedule_to_string(crasher)], "crashed");
  EXPECT_EQ(outcome_of[kernel::schedule_to_string(invalid)], "invalid-schedule");
  EXPECT_EQ(outcome_of[kernel::schedule_to_string(good)], "passed");
  const CandidateRecord* bad = nullptr;
  for (const CandidateRecord& c : r->candidates) {
    if (c.schedule == invalid) bad = &c;
  }
  ASSERT_NE(bad, nullptr);
  EXPECT_NE(bad->summary.find("vector_width"), std::string::npos) << bad->summary;
  // The search went on: the default and the good candidate were timed, and a broken one never wins.
  EXPECT_TRUE(r->tuned) << dump(*r);
  Schedule winner_single = r->winner;
  winner_single.threads = 1;
  EXPECT_NE(winner_single.vector_width, 3);
  EXPECT_FALSE(winner_single == compile_breaker);
  EXPECT_FALSE(winner_single == crasher);
}

TEST(Tuner, BudgetExhaustionReturnsTheBestSoFar) {
  const Graph g = optimized(modulate_blocks(1, 8, 64));
  auto list = collect_tasks(g);
  ASSERT_TRUE(list.ok());
  TuneOptions options = fast_options();
  options.max_candidates = 1;  // the default only
  auto r = tune_kernel(g, list->tasks[0], options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tried(), 1);
  EXPECT_TRUE(r->budget_exhausted);
  EXPECT_TRUE(r->tuned) << dump(*r);
  EXPECT_EQ(r->winner, r->default_schedule);
}

TuneResult sample_result() {
  TuneResult r;
  r.model = "zoo:test";
  r.device = "test cpu";
  r.compiler = "g++ (test) 12";
  r.notes = {"a note"};
  KernelTuneResult k;
  k.hash = "0123456789abcdef";
  k.label = "group 1 (3 nodes)";
  k.shape = "3 nodes, rows=8 row=64";
  k.occurrences = 3;
  k.default_schedule = Schedule{4, 2, 1, 16, true, 1};
  k.winner = Schedule{2, 2, 1, 8, false, 1};
  k.tuned = true;
  k.decision = "faster";
  k.winner_seconds = 1.5e-6;
  k.default_seconds = 2e-6;
  k.worst_seconds = 9e-6;
  k.baseline_seconds = 4e-6;
  k.baseline_kernels = 3;
  k.ab_summary = "B faster";
  k.seconds = 3.25;
  CandidateRecord timed{Schedule{2, 1, 1, 8, false, 4}, "initial", "passed", "ok", true, {}, false, false};
  timed.time.median = 1.5e-6;
  timed.time.min = 1.4e-6;
  timed.time.max = 2e-6;
  timed.time.ci_low = 1.45e-6;
  timed.time.ci_high = 1.6e-6;
  timed.time.samples = 12;
  k.candidates = {timed, CandidateRecord{Schedule{1, 1, 1, 8, true, 1}, "refine 1", "compile-error", "log", false,
                                         {}, false, false}};
  r.kernels.push_back(k);
  r.library.push_back(LibraryTuneResult{"lib:linear(f32[4,16],f32[8,16])", "%y", "linear", 2, 1e-5, "untuned"});
  return r;
}

TEST(TuneJson, RoundTripAndErrorsNameTheField) {
  const TuneResult r = sample_result();
  const std::string text = tune_result_to_json(r);
  auto back = tune_result_from_json(text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(tune_result_to_json(*back), text);
  ASSERT_EQ(back->kernels.size(), 1u);
  EXPECT_EQ(back->kernels[0].winner, r.kernels[0].winner);
  EXPECT_EQ(back->kernels[0].candidates[0].time.ci_high, 1.6e-6);
  EXPECT_EQ(back->kernels[0].candidates[1].outcome, "compile-error");
  EXPECT_EQ(back->schedules(), r.schedules());

  nlohmann::json j = nlohmann::json::parse(text);
  j["kernels"][0]["candidates"][1]["schedule"]["vector_width"] = "eight";
  auto bad = tune_result_from_json(j.dump(), "t.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("kernels[0].candidates[1].schedule"), std::string::npos) << bad.error().message;
  j = nlohmann::json::parse(text);
  j["schedules"]["0123456789abcdef"]["unroll"] = 2;  // the winner has 1
  bad = tune_result_from_json(j.dump(), "t.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("differs"), std::string::npos) << bad.error().message;
  j = nlohmann::json::parse(text);
  j["format"] = "something-else/1";
  bad = tune_result_from_json(j.dump(), "t.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("kiln-tune/1"), std::string::npos) << bad.error().message;
}

TEST(TuneApply, MatchingStaleMismatchedAndUnimplementableFiles) {
  const Graph g = optimized(modulate_blocks(2, 8, 64));
  auto list = collect_tasks(g);
  ASSERT_TRUE(list.ok());
  TuneResult r = sample_result();  // its one kernel hash is not a kernel of g: stale
  auto stale = apply_tune_result(r, g, kernel::Target::cpu, "'stale.json'");
  ASSERT_TRUE(stale.ok()) << stale.error().message;
  EXPECT_EQ(stale->matched, 0);
  EXPECT_EQ(stale->ignored, 1);
  ASSERT_FALSE(stale->notes.empty());
  EXPECT_NE(stale->notes[0].find("match no kernel"), std::string::npos) << stale->notes[0];

  r.kernels[0].hash = list->tasks[0].hash;
  auto matched = apply_tune_result(r, g, kernel::Target::cpu, "'t.json'");
  ASSERT_TRUE(matched.ok()) << matched.error().message;
  EXPECT_EQ(matched->matched, 1);
  EXPECT_EQ(matched->schedules.at(list->tasks[0].hash), r.kernels[0].winner);

  auto wrong_target = apply_tune_result(r, g, kernel::Target::cuda, "'t.json'");
  ASSERT_FALSE(wrong_target.ok());
  EXPECT_NE(wrong_target.error().message.find("tuned for target 'cpu'"), std::string::npos);

  r.kernels[0].winner.threads_per_row = 32;  // a CUDA field on a CPU kernel
  auto unimplementable = apply_tune_result(r, g, kernel::Target::cpu, "'t.json'");
  ASSERT_FALSE(unimplementable.ok());
  EXPECT_NE(unimplementable.error().message.find("threads_per_row"), std::string::npos)
      << unimplementable.error().message;
}

// The tuned plan (winners through PlanOptions::schedules) matches the reference executor.
TEST(TuneApply, TunedPlanMatchesTheReference) {
  const Graph source = modulate_blocks(2, 16, 128);
  const Graph g = optimized(source);
  TuneOptions options = fast_options();
  options.measure_baseline = false;
  auto tuned = tune_graph(g, nullptr, options);
  ASSERT_TRUE(tuned.ok()) << tuned.error().message;
  ASSERT_EQ(tuned->kernels.size(), 1u);
  auto applied = apply_tune_result(*tuned, g, kernel::Target::cpu, "tuned");
  ASSERT_TRUE(applied.ok()) << applied.error().message;
  EXPECT_EQ(applied->matched, 1);
  auto backend = backend::make_backend("cpu");
  ASSERT_TRUE(backend.ok());
  backend::PlanOptions plan_options;
  plan_options.schedules = applied->schedules;
  auto plan = backend::Plan::build(**backend, g, plan_options);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const auto inputs = models::random_inputs(source, 7);
  auto want = ref::run_graph(source, inputs);
  auto got = (*plan)->run(inputs);
  ASSERT_TRUE(want.ok() && got.ok());
  for (const auto& [name, w] : *want) {
    const Tensor& t = got->at(name);
    double worst = 0;
    for (int64_t i = 0; i < w.numel(); ++i) worst = std::max(worst, std::abs(w.get(i) - t.get(i)));
    EXPECT_LT(worst, 1e-4) << name;
  }
}

}  // namespace
}  // namespace kiln::tune
