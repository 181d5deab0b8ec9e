// Workload files: parsing (weights normalized), errors naming the bucket and field, and the mapping of a
// bucket onto a zoo model's options or an ONNX model's --dim bindings.
#include "workload/workload.h"

#include <gtest/gtest.h>

#include "models/zoo.h"

namespace kiln {
namespace {

using workload::parse_workload;
using workload::workload_model_spec;

std::string error_of(const std::string& text) {
  auto w = parse_workload(text, "w.json");
  return w.ok() ? "" : w.error().message;
}

TEST(Workload, ParsesBucketsAndNormalizesWeights) {
  auto w = parse_workload(R"({"model": "zoo:qwen-image:tiny", "buckets": [
      {"name": "cfg", "weight": 3, "dims": {"batch": 1, "image_tokens": 32, "text_tokens": 8, "cfg": true}},
      {"name": "plain", "weight": 1, "dims": {"cfg": false}},
      {"name": "default-weight"}]})",
                          "w.json");
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(w->model, "zoo:qwen-image:tiny");
  ASSERT_EQ(w->buckets.size(), 3u);
  EXPECT_DOUBLE_EQ(w->buckets[0].weight, 0.6);
  EXPECT_DOUBLE_EQ(w->buckets[1].weight, 0.2);
  EXPECT_DOUBLE_EQ(w->buckets[2].weight, 0.2);
  EXPECT_EQ(w->buckets[0].dims.at("cfg"), "on");
  EXPECT_EQ(w->buckets[0].dims.at("image_tokens"), "32");
}

TEST(Workload, ErrorsNameTheBucketAndField) {
  EXPECT_NE(error_of("{\"buckets\": [").find("w.json: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{\"buckets\": []}").find("w.json: buckets must be a non-empty list"), std::string::npos);
  EXPECT_NE(error_of(R"({"buckets": [{"weight": 1}]})").find("buckets[0]: field name"), std::string::npos);
  std::string e = error_of(R"({"buckets": [{"name": "a"}, {"name": "b", "weight": -2}]})");
  EXPECT_NE(e.find("buckets[1] (\"b\"): weight must be a positive number"), std::string::npos) << e;
  e = error_of(R"({"buckets": [{"name": "a", "dims": {"cfg": 2}}]})");
  EXPECT_NE(e.find("buckets[0] (\"a\"): dims.cfg: must be true or false"), std::string::npos) << e;
  e = error_of(R"({"buckets": [{"name": "a", "dims": {"mode": "train"}}]})");
  EXPECT_NE(e.find("dims.mode: must be \"decode\" or \"prefill\""), std::string::npos) << e;
  e = error_of(R"({"buckets": [{"name": "a", "dims": {"batch": 0}}]})");
  EXPECT_NE(e.find("dims.batch: must be an integer >= 1"), std::string::npos) << e;
  e = error_of(R"({"buckets": [{"name": "a"}, {"name": "a"}]})");
  EXPECT_NE(e.find("buckets[1] (\"a\"): name is used by an earlier bucket"), std::string::npos) << e;
  e = error_of(R"({"buckets": [{"name": "a", "traffic": 1}]})");
  EXPECT_NE(e.find("unknown field \"traffic\""), std::string::npos) << e;
  // With a model, every bucket must map onto it.
  e = error_of(R"({"model": "zoo:flux1-dev:tiny", "buckets": [{"name": "g", "dims": {"cfg": true}}]})");
  EXPECT_NE(e.find("w.json: bucket \"g\": dims.cfg: zoo model flux1-dev has no option 'cfg'"), std::string::npos) << e;
}

TEST(Workload, BucketsMapOntoZooOptions) {
  workload::WorkloadBucket b{"cfg", 1, {{"image_tokens", "32"}, {"cfg", "on"}, {"batch", "2"}}};
  auto m = workload_model_spec("zoo:qwen-image:tiny,img_tokens=16", b);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->spec, "zoo:qwen-image:tiny=1,img_tokens=32,batch=2,cfg=2");
  EXPECT_TRUE(m->dims.empty());
  // The spec builds the model the bucket describes.
  auto g = models::build_zoo_model(m->spec.substr(4));
  ASSERT_TRUE(g.ok()) << g.error().message;
  const auto img = g->find_value("img");
  ASSERT_TRUE(img.has_value());
  EXPECT_EQ(g->value(*img).type.shape, (Shape{2, 32, 16}));
  EXPECT_TRUE(g->find_value("guidance_scale").has_value());  // cfg on

  workload::WorkloadBucket decode{"decode", 1, {{"mode", "decode"}, {"past", "24"}}};
  m = workload_model_spec("zoo:llama3-8b:tiny", decode);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->spec, "zoo:llama3-8b:tiny=1,mode=decode,past=24");
  EXPECT_TRUE(models::build_zoo_model(m->spec.substr(4)).ok());

  workload::WorkloadBucket bad{"x", 1, {{"heads", "4"}}};
  m = workload_model_spec("zoo:llama3-8b:tiny", bad);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("bucket \"x\": dims.heads: not a dim of zoo models"), std::string::npos);
}

TEST(Workload, BucketsMapOntoOnnxDims) {
  workload::WorkloadBucket b{"b", 1, {{"batch_size", "4"}, {"sequence", "128"}}};
  auto m = workload_model_spec("model.onnx", b);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->spec, "model.onnx");
  EXPECT_EQ(m->dims, (std::vector<std::string>{"batch_size=4", "sequence=128"}));
  workload::WorkloadBucket cfg{"c", 1, {{"cfg", "on"}}};
  EXPECT_FALSE(workload_model_spec("model.onnx", cfg).ok());
  EXPECT_FALSE(workload_model_spec("graph.json", b).ok());
  EXPECT_TRUE(workload_model_spec("graph.json", workload::WorkloadBucket{"d", 1, {}}).ok());
}

TEST(Workload, DefaultIsOneBucketOfTheModelAsGiven) {
  const workload::Workload w = workload::default_workload("zoo:qwen-image:tiny");
  ASSERT_EQ(w.buckets.size(), 1u);
  EXPECT_EQ(w.buckets[0].name, "default");
  EXPECT_DOUBLE_EQ(w.buckets[0].weight, 1.0);
  auto m = workload_model_spec(w.model, w.buckets[0]);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->spec, "zoo:qwen-image:tiny=1");
}

}  // namespace
}  // namespace kiln
