// Ranking of the optimize loop's opportunities: share x predicted gain, model level first when asked, and
// the pass opportunities' predictions on a real profile.
#include "agent/opportunities.h"

#include <gtest/gtest.h>

#include "agent_test_util.h"

namespace kiln {
namespace {

agent::Opportunity make(const std::string& name, agent::OpportunityLevel level, double share, double gain) {
  agent::Opportunity o;
  o.name = name;
  o.level = level;
  o.time_share = share;
  o.predicted_gain = gain;
  return o;
}

std::vector<std::string> names(const std::vector<agent::Opportunity>& v) {
  std::vector<std::string> n;
  for (const auto& o : v) n.push_back(o.name);
  return n;
}

TEST(AgentRank, ShareTimesGainBestFirst) {
  using L = agent::OpportunityLevel;
  std::vector<agent::Opportunity> v = {make("small-share", L::model, 0.1, 0.9),   // 0.09
                                       make("big-share", L::model, 0.8, 0.5),     // 0.40
                                       make("kernel", L::kernel, 0.9, 0.6),       // 0.54
                                       make("no-gain", L::model, 0.9, 0.0),       // 0
                                       make("tie-second", L::model, 0.1, 0.9)};   // 0.09, after small-share
  agent::rank_opportunities(v, false);
  EXPECT_EQ(names(v), (std::vector<std::string>{"kernel", "big-share", "small-share", "tie-second", "no-gain"}));
  agent::rank_opportunities(v, true);
  EXPECT_EQ(names(v), (std::vector<std::string>{"big-share", "small-share", "tie-second", "no-gain", "kernel"}));
}

TEST(AgentRank, PassOpportunitiesFromAProfile) {
  backend::Backend& cpu = testing::agent_cpu_backend();
  const Graph model = testing::mlp_block_graph();
  const agent::PlanConfig baseline = agent::baseline_config();
  auto graph = agent::build_graph(model, baseline);
  ASSERT_TRUE(graph.ok()) << graph.error().message;
  auto plan = backend::Plan::build(cpu, *graph);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_TRUE((*plan)->set_inputs(testing::mlp_block_inputs(model)).ok());
  auto p = profile::profile_plan(**plan, cpu, {1, 3});
  ASSERT_TRUE(p.ok()) << p.error().message;
  auto opportunities = agent::pass_opportunities(model, baseline, *p);
  ASSERT_TRUE(opportunities.ok()) << opportunities.error().message;
  // One per fusion pass the baseline leaves out.
  ASSERT_EQ(opportunities->size(), agent::fusion_pass_names().size());
  std::map<std::string, const agent::Opportunity*> by_name;
  for (const auto& o : *opportunities) {
    by_name[o.name] = &o;
    EXPECT_GE(o.predicted_gain, 0);
    EXPECT_LE(o.predicted_gain, 1);
    EXPECT_GE(o.time_share, 0);
    EXPECT_LE(o.time_share, 1 + 1e-9);
  }
  // Fusing the norm, the products and the residual saves launches and bytes; there is nothing FP8 to pack and
  // only one GEMM.
  EXPECT_GT(by_name.at("fuse-rows")->predicted_gain, 0.1);
  EXPECT_EQ(by_name.at("pack-scales")->predicted_gain, 0);
  EXPECT_EQ(by_name.at("merge-gemms")->predicted_gain, 0);
  agent::rank_opportunities(*opportunities, false);
  EXPECT_EQ(opportunities->front().name, "fuse-rows");
  // The baseline with fuse-rows on no longer offers it.
  agent::PlanConfig fused = baseline;
  fused.disabled_passes.erase("fuse-rows");
  auto fewer = agent::pass_opportunities(model, fused, *p);
  ASSERT_TRUE(fewer.ok());
  EXPECT_EQ(fewer->size(), agent::fusion_pass_names().size() - 1);
}

}  // namespace
}  // namespace kiln
