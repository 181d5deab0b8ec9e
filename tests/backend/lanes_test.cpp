// Lanes: the chain rule and its waits (lanes.h), and whole plans on a two-lane backend whose trace is checked
// for races: every pair of steps that touch the same bytes, one of them writing, must be ordered by the lane
// order and the recorded waits. Memory reuse across lanes is where a missing wait would corrupt data.
#include "backend/lanes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>

#include "backend/plan.h"
#include "backend_test_util.h"
#include "models/zoo.h"
#include "passes/pipeline.h"
#include "plan_test_util.h"

namespace kiln {
namespace {

using backend::LaneSchedule;
using backend::schedule_lanes;

TEST(Lanes, AChainStaysOnLaneZero) {
  const LaneSchedule s = schedule_lanes({{}, {0}, {1}, {2, 0}}, 2);
  EXPECT_EQ(s.lane, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(s.waits_total, 0);
  EXPECT_EQ(s.lanes_used, 1);
  EXPECT_EQ(s.complete_before, (std::vector<int>{1, 2, 3, 4}));
}

// A fork after step 0 into two chains (1-2 and 3-4) that join at step 5, then a tail 6 that only the second
// chain feeds.
TEST(Lanes, TwoChainsRunSideBySideAndJoin) {
  const LaneSchedule s = schedule_lanes({{}, {0}, {1}, {0}, {3}, {2, 4}, {4}}, 2);
  EXPECT_EQ(s.lane, (std::vector<int>{0, 0, 0, 1, 1, 0, 1}));
  EXPECT_EQ(s.waits, (std::vector<std::vector<int>>{{}, {}, {}, {0}, {}, {4}, {}}));
  EXPECT_EQ(s.signals, (std::vector<bool>{true, false, false, false, true, false, false}));
  EXPECT_EQ(s.lanes_used, 2);
  EXPECT_EQ(s.waits_total, 2);
  // Step 1 (lane 0) is unordered with 3 and 4 (lane 1 waits for step 0's event, recorded before step 1 was
  // launched) and with 6 (lane 1 never waits for lane 0 again): its work is complete for certain only at the
  // join that ends the stage.
  EXPECT_EQ(s.complete_before[1], 7);
  // Step 4 is ordered before 5 (which waited for it) and 6 (same lane).
  EXPECT_EQ(s.complete_before[4], 5);
  // One lane: the stage's order.
  const LaneSchedule one = schedule_lanes({{}, {0}, {1}, {0}, {3}, {2, 4}, {4}}, 1);
  EXPECT_EQ(one.lanes_used, 1);
  EXPECT_EQ(one.waits_total, 0);
  EXPECT_EQ(one.complete_before, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
}

// A wait for a step covers the steps of its lane before it: a later read of an earlier step needs none.
TEST(Lanes, OneWaitCoversEarlierSteps) {
  const LaneSchedule s = schedule_lanes({{}, {}, {0}, {1}, {2, 3}, {4, 1}}, 2);
  EXPECT_EQ(s.lane, (std::vector<int>{0, 1, 0, 1, 0, 0}));
  EXPECT_EQ(s.waits[4], (std::vector<int>{3}));
  EXPECT_TRUE(s.waits[5].empty());  // step 1 is before step 3 on lane 1
  EXPECT_EQ(s.waits_total, 1);
}

// The CPU backend behind a two-lane front: work runs at once (in launch order, as the CPU does), and each
// launch is recorded with its lane, its bytes and the waits before it.
class RecordingLanes final : public backend::Backend {
 public:
  explicit RecordingLanes(backend::Backend& inner) : inner_(inner) {}

  struct Access {
    int lane;
    std::vector<std::pair<const std::byte*, const std::byte*>> reads, writes;
    std::vector<int> clock;  // per lane: the last op of that lane this one is ordered after (-1: none)
  };
  std::vector<Access> trace;
  int waits = 0;

  const backend::DeviceInfo& device() const override { return inner_.device(); }
  kernel::Target target() const override { return inner_.target(); }
  Result<backend::DeviceTensor> allocate(const TensorType& t) override { return inner_.allocate(t); }
  void release(backend::DeviceTensor& t) override { inner_.release(t); }
  Status copy_to_device(const Tensor& h, const backend::DeviceTensor& d) override { return inner_.copy_to_device(h, d); }
  Result<Tensor> copy_to_host(const backend::DeviceTensor& d) override { return inner_.copy_to_host(d); }
  Status copy(const backend::DeviceTensor& a, const backend::DeviceTensor& b) override {
    record(std::span<const backend::DeviceTensor>(&a, 1), std::span<const backend::DeviceTensor>(&b, 1));
    return inner_.copy(a, b);
  }
  Result<std::shared_ptr<backend::LoadedModule>> compile(const kernel::EmittedModule& m) override {
    return inner_.compile(m);
  }
  Status launch(const backend::LoadedModule& m, int index, std::span<const backend::DeviceTensor> in,
                std::span<const backend::DeviceTensor> out) override {
    record(in, out);
    return inner_.launch(m, index, in, out);
  }
  Status supports(Op op, std::span<const TensorType> in, const Attrs& a) const override {
    return inner_.supports(op, in, a);
  }
  Status run_library(Op op, const Attrs& a, std::span<const backend::DeviceTensor> in,
                     std::span<const backend::DeviceTensor> out) override {
    record(in, out);
    return inner_.run_library(op, a, in, out);
  }
  int lanes() const override { return 2; }
  Status use_lane(int lane) override {
    if (lane < 0 || lane > 1) return make_error(ErrorCode::invalid_argument, "lane out of range");
    lane_ = lane;
    return ok_status();
  }
  Status record_event(int event) override {
    events_[event] = {known_[lane_][0], known_[lane_][1]};
    return ok_status();
  }
  Status wait_event(int event) override {
    ++waits;
    auto it = events_.find(event);
    if (it == events_.end()) return make_error(ErrorCode::invalid_argument, "wait for an unrecorded event");
    for (int x = 0; x < 2; ++x) known_[lane_][x] = std::max(known_[lane_][x], it->second[x]);
    return ok_status();
  }
  Status synchronize() override { return inner_.synchronize(); }
  Result<backend::Timing> time(const std::function<Status()>& w, const backend::TimingOptions& o) override {
    return inner_.time(w, o);
  }

  // "" when every conflicting pair is ordered; else the first pair.
  std::string first_race() const {
    auto overlap = [](const auto& a, const auto& b) { return a.first < b.second && b.first < a.second; };
    auto touches = [&](const Access& x, const Access& y) {
      for (const auto& w : x.writes) {
        for (const auto& r : y.reads) if (overlap(w, r)) return true;
        for (const auto& v : y.writes) if (overlap(w, v)) return true;
      }
      return false;
    };
    for (size_t j = 0; j < trace.size(); ++j) {
      for (size_t i = 0; i < j; ++i) {
        const bool ordered = trace[j].clock[static_cast<size_t>(trace[i].lane)] >= static_cast<int>(i);
        if (!ordered && (touches(trace[i], trace[j]) || touches(trace[j], trace[i])))
          return "ops " + std::to_string(i) + " (lane " + std::to_string(trace[i].lane) + ") and " + std::to_string(j) +
                 " (lane " + std::to_string(trace[j].lane) + ") touch the same bytes unordered";
      }
    }
    return "";
  }
  void reset() {
    trace.clear();
    known_[0][0] = known_[0][1] = known_[1][0] = known_[1][1] = -1;
    events_.clear();
  }
  int ops_on(int lane) const {
    return static_cast<int>(std::count_if(trace.begin(), trace.end(), [&](const Access& a) { return a.lane == lane; }));
  }

 private:
  void record(std::span<const backend::DeviceTensor> in, std::span<const backend::DeviceTensor> out) {
    Access a{lane_, {}, {}, {}};
    for (const auto& t : in) a.reads.push_back(range(t));
    for (const auto& t : out) a.writes.push_back(range(t));
    const int index = static_cast<int>(trace.size());
    known_[lane_][lane_] = index;
    a.clock = {known_[lane_][0], known_[lane_][1]};
    trace.push_back(std::move(a));
  }
  static std::pair<const std::byte*, const std::byte*> range(const backend::DeviceTensor& t) {
    const auto* p = static_cast<const std::byte*>(t.data);
    return {p, p + t.bytes()};
  }
  backend::Backend& inner_;
  int lane_ = 0;
  int known_[2][2] = {{-1, -1}, {-1, -1}};  // per lane: the last op of each lane it is ordered after
  std::map<int, std::array<int, 2>> events_;
};

// A FLUX double block (two streams) and a Llama decoder (one chain) on two lanes: the same outputs as one
// lane, bit for bit, and no unordered pair of steps touching the same bytes. The graphs are built for two lanes,
// so the FLUX block's modulation GEMV is cut by defer-columns, and its late half runs on lane 1.
TEST(Lanes, PlansOnTwoLanesAreRaceFreeAndMatchOneLane) {
  for (const std::string spec : {"flux1-double-block:tiny", "llama3-8b:tiny"}) {
    const Graph g = testing::optimized_zoo_model(spec, nullptr, 2);
    const auto inputs = models::random_inputs(g, 3);
    auto one = backend::Plan::build(testing::plan_test_backend(), g);
    ASSERT_TRUE(one.ok()) << one.error().message;
    auto expected = (*one)->run(inputs);
    ASSERT_TRUE(expected.ok());

    RecordingLanes lanes(testing::plan_test_backend());
    backend::PlanOptions options;
    options.lanes = 2;
    auto two = backend::Plan::build(lanes, g, options);
    ASSERT_TRUE(two.ok()) << two.error().message;
    ASSERT_TRUE((*two)->set_inputs(inputs).ok());
    lanes.reset();  // what the plan's build ran (constants) is not part of a run
    ASSERT_TRUE((*two)->execute().ok());
    auto got = (*two)->outputs();
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(testing::bitwise_equal(*expected, *got), "") << spec;
    EXPECT_EQ(lanes.first_race(), "") << spec;
    if (spec.rfind("flux1", 0) == 0) {
      EXPECT_EQ((*two)->summary().lanes, 2) << spec;
      EXPECT_GT(lanes.ops_on(1), 0) << spec;
      EXPECT_GT((*two)->summary().lane_waits, 0) << spec;
      int late = 0;
      for (const backend::Plan::Step& step : (*two)->steps()) {
        if (step.label.find(".late") == std::string::npos || step.kind != backend::Plan::Step::Kind::library) continue;
        ++late;
        EXPECT_EQ(step.lane, 1) << step.label;
      }
      EXPECT_EQ(late, 1) << spec;
    }
  }
}

}  // namespace
}  // namespace kiln
