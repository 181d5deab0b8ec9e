// Plan artifacts: a saved and reloaded plan computes bit for bit what the original does, and every kind of
// damage (truncation, another version or backend, an edited kernel, an edited graph) is an error naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/plan_artifact.h"
#include "plan_test_util.h"

namespace kiln {
namespace {

using Json = nlohmann::json;

struct Saved {
  Graph graph;
  std::unique_ptr<backend::Plan> plan;
  std::string text;
};

Saved save(const std::string& spec) {
  Saved s;
  s.graph = testing::optimized_zoo_model(spec);
  auto plan = backend::Plan::build(testing::plan_test_backend(), s.graph);
  KILN_CHECK(plan.ok());
  s.plan = std::move(plan).value();
  backend::PlanArtifactInfo info;
  info.model = "zoo:" + spec;
  info.bucket = "tiny";
  info.bucket_dims = {{"batch", "1"}};
  s.text = backend::plan_artifact_json(*s.plan, info);
  return s;
}

std::string load_error(const std::string& text) {
  auto loaded = backend::parse_plan_artifact(testing::plan_test_backend(), text, "p.json");
  return loaded.ok() ? "" : loaded.error().message;
}

TEST(PlanArtifact, RoundTripGivesIdenticalOutputs) {
  for (const std::string spec : {"qwen-image:tiny", "flux1-dev:tiny"}) {
    Saved s = save(spec);
    const std::string path = (std::filesystem::temp_directory_path() / "kiln_plan_artifact_test.json").string();
    backend::PlanArtifactInfo info;
    info.model = "zoo:" + spec;
    ASSERT_TRUE(backend::save_plan_artifact(*s.plan, info, path).ok());
    auto loaded = backend::load_plan_artifact(testing::plan_test_backend(), path);
    std::filesystem::remove(path);
    ASSERT_TRUE(loaded.ok()) << spec << ": " << loaded.error().message;
    EXPECT_EQ(loaded->info.model, "zoo:" + spec);
    EXPECT_TRUE(loaded->warnings.empty());
    backend::Plan& p = *loaded->plan;
    EXPECT_EQ(p.summary().kernels, s.plan->summary().kernels);
    EXPECT_EQ(p.summary().per_step_steps, s.plan->summary().per_step_steps);
    EXPECT_EQ(p.summary().arena_bytes, s.plan->summary().arena_bytes);
    const auto inputs = models::random_inputs(s.graph, 5);
    auto a = s.plan->run(inputs);
    auto b = p.run(inputs);
    ASSERT_TRUE(a.ok() && b.ok()) << spec;
    EXPECT_EQ(testing::bitwise_equal(*a, *b), "") << spec;
    EXPECT_EQ(testing::matches_reference(s.graph, inputs, *b), "") << spec;
  }
}

TEST(PlanArtifact, RecordsTheDecisions) {
  Saved s = save("qwen-image:tiny");
  const Json j = Json::parse(s.text);
  EXPECT_EQ(j["format"], "kiln-plan");
  EXPECT_EQ(j["kiln_version"], KILN_VERSION);
  EXPECT_EQ(j["bucket"]["name"], "tiny");
  EXPECT_EQ(j["device"]["kind"], "cpu");
  EXPECT_EQ(j["kernels"].size(), s.plan->kernels().size());
  EXPECT_GT(j["stages"]["per_step"].get<int>(), 0);
  bool library = false;
  for (const Json& step : j["steps"]) library = library || (step["kind"] == "library" && step.contains("algorithm"));
  EXPECT_TRUE(library);
  const std::string source = j["kernels"][0]["source"];
  EXPECT_NE(source.find(j["kernels"][0]["entry"].get<std::string>()), std::string::npos);
}

TEST(PlanArtifact, TruncatedFileIsAnError) {
  const Saved s = save("qwen-image:tiny");
  const std::string e = load_error(s.text.substr(0, s.text.size() / 2));
  EXPECT_NE(e.find("p.json: not a complete JSON plan file"), std::string::npos) << e;
  EXPECT_NE(load_error("{\"format\": \"something-else\"}").find("not a kiln plan"), std::string::npos);
}

TEST(PlanArtifact, OtherVersionOrBackendIsAnError) {
  const Saved s = save("qwen-image:tiny");
  Json j = Json::parse(s.text);
  j["kiln_version"] = "0.0.1-old";
  std::string e = load_error(j.dump());
  EXPECT_NE(e.find("saved by kiln 0.0.1-old"), std::string::npos) << e;
  j = Json::parse(s.text);
  j["format_version"] = 99;
  e = load_error(j.dump());
  EXPECT_NE(e.find("format version 99"), std::string::npos) << e;
  j = Json::parse(s.text);
  j["device"]["kind"] = "cuda";
  e = load_error(j.dump());
  EXPECT_NE(e.find("built for the cuda backend"), std::string::npos) << e;
  j = Json::parse(s.text);
  j["device"]["fingerprint"] = "cpu|another machine|3 units";
  auto loaded = backend::parse_plan_artifact(testing::plan_test_backend(), j.dump(), "p.json");
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->warnings.size(), 1u);
  EXPECT_NE(loaded->warnings[0].find("another machine"), std::string::npos);
}

TEST(PlanArtifact, TamperedKernelIsAnError) {
  const Saved s = save("qwen-image:tiny");
  Json j = Json::parse(s.text);
  std::string source = j["kernels"][1]["source"];
  const size_t at = source.find("+");
  ASSERT_NE(at, std::string::npos);
  source[at] = '-';
  j["kernels"][1]["source"] = source;
  std::string e = load_error(j.dump());
  EXPECT_NE(e.find("kernels[1]: its source does not match its recorded hash"), std::string::npos) << e;
  // The hash forged too: the rebuild from the graph catches it.
  Json forged = Json::parse(s.text);
  const std::string original = forged["kernels"][1]["source"];
  forged["kernels"][1]["source"] = source;
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : source) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  forged["kernels"][1]["source_fnv1a"] = hex;
  e = load_error(forged.dump());
  EXPECT_NE(e.find("kernels[1] (kiln_k1): its source differs from what kiln emits"), std::string::npos) << e;
  // A schedule the kernel cannot take.
  j = Json::parse(s.text);
  j["kernels"][0]["schedule"]["threads_per_row"] = 7;
  e = load_error(j.dump());
  EXPECT_NE(e.find("threads_per_row"), std::string::npos) << e;
}

TEST(PlanArtifact, EditedGraphIsAnError) {
  const Saved s = save("qwen-image:tiny");
  Json j = Json::parse(s.text);
  j["graph"]["nodes"][3]["inputs"][0] = "no_such_value";
  std::string e = load_error(j.dump());
  EXPECT_NE(e.find("p.json: graph"), std::string::npos) << e;
  EXPECT_NE(e.find("no_such_value"), std::string::npos) << e;
  // A graph edit that still verifies but gives other steps.
  j = Json::parse(s.text);
  j["steps"].erase(j["steps"].size() - 1);
  e = load_error(j.dump());
  EXPECT_NE(e.find("its steps"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
