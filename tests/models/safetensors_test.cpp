// Deterministic graph inputs (random_inputs) and safetensors round trips, plus check_weights_match.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "models/weights.h"
#include "models/zoo.h"

namespace kiln::models {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::temp_directory_path() /
                 ("kiln_st_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
  fs::create_directories(dir);
  return dir;
}

Graph build(const std::string& spec) {
  auto g = build_zoo_model(spec);
  KILN_CHECK(g.ok());
  return std::move(g).value();
}

uint64_t checksum(const std::map<std::string, Tensor>& values) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const auto& [name, t] : values) {
    for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
    for (size_t i = 0; i < t.byte_size(); ++i) h = (h ^ static_cast<uint8_t>(t.data()[i])) * 0x100000001B3ull;
  }
  return h;
}

// ---- random_inputs ----

TEST(WeightsRandom, DeterministicPerNameAndSeed) {
  const Graph g = build("flux1-dev:tiny");
  const auto a = random_inputs(g, 1), b = random_inputs(g, 1), c = random_inputs(g, 2);
  ASSERT_EQ(a.size(), g.inputs().size());
  for (const auto& [name, t] : a) EXPECT_TRUE(t.bitwise_equal(b.at(name))) << name;
  EXPECT_FALSE(a.at("img_in.weight").bitwise_equal(c.at("img_in.weight")));
  // A weight's values do not depend on the rest of the graph.
  const auto d = random_inputs(build("flux1-dev:tiny,double_blocks=3,img_tokens=4"), 1);
  EXPECT_TRUE(a.at("double_blocks.0.img_attn.qkv.weight").bitwise_equal(d.at("double_blocks.0.img_attn.qkv.weight")));
}

TEST(WeightsRandom, GoldenValuesAreThePlatformIndependentOnes) {
  // Pinned: the PRNG uses integer and exactly rounded IEEE arithmetic only, so these never change.
  const Graph g = build("llama3-8b:tiny,embed=1,dtype=f32");
  const auto v = random_inputs(g, 42);
  const Tensor& w = v.at("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(w.shape(), (Shape{64, 64}));
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < w.numel(); ++i) sum += w.get(i), sum_sq += w.get(i) * w.get(i);
  EXPECT_NEAR(sum / w.numel(), 0.0, 0.01);
  EXPECT_NEAR(sum_sq / w.numel(), 1.0 / 64, 0.1 / 64);  // N(0, 1/fan_in)
  EXPECT_EQ(checksum(v), 0xd6ef028aed39787full) << std::hex << checksum(v);
}

TEST(WeightsRandom, KindsOfInputs) {
  const Graph g = build("flux1-dev:tiny,img_tokens=12,txt_tokens=3");
  const auto v = random_inputs(g, 5);
  for (int64_t i = 0; i < 64; ++i) EXPECT_NEAR(v.at("double_blocks.0.img_attn.norm.query_norm.scale").get(i % 32), 1.0, 0.5);
  const Tensor& img_ids = v.at("img_ids");  // 12 tokens: a 3 x 4 grid, (0, row, col)
  EXPECT_EQ(img_ids.get(0 * 3 + 1), 0.0);
  EXPECT_EQ(img_ids.get(5 * 3 + 1), 1.0);
  EXPECT_EQ(img_ids.get(5 * 3 + 2), 1.0);
  EXPECT_EQ(img_ids.get(11 * 3 + 2), 3.0);
  for (int64_t i = 0; i < v.at("txt_ids").numel(); ++i) EXPECT_EQ(v.at("txt_ids").get(i), 0.0);
  EXPECT_GT(v.at("timesteps").get(0), 0.0);
  EXPECT_LT(v.at("timesteps").get(0), 1.0);
  EXPECT_EQ(v.at("guidance").get(0), 3.5);

  const auto q = random_inputs(build("qwen-image:tiny,img_tokens=16,txt_tokens=2,cfg=2"), 5);
  EXPECT_EQ(q.at("img_ids").get(0 * 3 + 1), -2.0);  // 4 x 4 grid, centred: rows -2..1
  EXPECT_EQ(q.at("img_ids").get(15 * 3 + 2), 1.0);
  EXPECT_EQ(q.at("txt_ids").get(1 * 3 + 0), 3.0);  // text after max(h/2, w/2) = 2
  EXPECT_EQ(q.at("guidance_scale").get(0), 4.0);

  const auto f2 = random_inputs(build("flux2-dev:tiny,txt_tokens=3"), 5);
  EXPECT_EQ(f2.at("txt_ids").get(2 * 4 + 3), 2.0);  // (0, 0, 0, l)

  const auto l = random_inputs(build("llama3-8b:tiny,embed=1,mode=decode,past=6"), 5);
  EXPECT_EQ(l.at("position_ids").get(0), 6.0);
  const Graph llama = build("llama3-8b:tiny,embed=1,seq=64");
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const Tensor ids = random_inputs(llama, seed).at("input_ids");  // token ids below the vocabulary (256)
    for (int64_t j = 0; j < ids.numel(); ++j) ASSERT_TRUE(ids.get_int(j) >= 0 && ids.get_int(j) < 256) << ids.get_int(j);
  }
}

TEST(WeightsRandom, Fp8WeightsCarryConsistentScales) {
  for (const char* scaling : {"tensor", "channel", "block"}) {
    SCOPED_TRACE(scaling);
    const Graph g = build(std::string("flux1-double-block:tiny,dtype=fp8,fp8_scaling=") + scaling);
    const auto v = random_inputs(g, 9);
    const Tensor& w = v.at("img_mlp.0.weight");  // [256, 64]
    const Tensor& s = v.at("img_mlp.0.weight_scale");
    ASSERT_EQ(w.dtype(), DType::f8e4m3);
    ASSERT_EQ(s.dtype(), DType::f32);
    // Dequantized values approximate N(0, 1/64), and each scale group reaches the FP8 maximum.
    double sum_sq = 0, amax = 0;
    const int64_t cols = 64;
    const bool per_row = s.shape() == Shape{256, 1};
    for (int64_t i = 0; i < w.numel(); ++i) {
      const int64_t r = i / cols;
      const double scale = s.numel() == 1 ? s.get(0) : per_row ? s.get(r) : s.get((r / 128) * 1);
      const double x = w.get(i) * scale;
      sum_sq += x * x;
      amax = std::max(amax, std::fabs(w.get(i)));
    }
    EXPECT_NEAR(sum_sq / w.numel(), 1.0 / 64, 0.2 / 64);
    EXPECT_EQ(amax, 448.0);
  }
}

// ---- safetensors ----

Tensor sample(DType dtype, Shape shape, uint64_t seed) {
  Tensor t(dtype, std::move(shape));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < t.byte_size(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t.data()[i] = static_cast<std::byte>(x);
  }
  if (dtype == DType::boolean) {
    for (int64_t i = 0; i < t.numel(); ++i) t.set_int(i, t.get_int(i) & 1);
  }
  return t;
}

TEST(Safetensors, RoundTripEveryDTypeBitExact) {
  const fs::path path = temp_dir() / "all.safetensors";
  std::map<std::string, Tensor> tensors;
  for (int d = 0; d < kDTypeCount; ++d) {
    const auto dtype = static_cast<DType>(d);
    const std::string name(dtype_name(dtype));
    tensors.emplace(name + ".matrix", sample(dtype, {3, 5}, d));  // raw bytes: NaN patterns included
    tensors.emplace(name + ".scalar", sample(dtype, {}, d + 100));
    tensors.emplace(name + ".empty", Tensor(dtype, {0, 4}));
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"kiln", "test \"quoted\""}};
  ASSERT_TRUE(save_safetensors(path.string(), tensors, metadata).ok());
  auto file = read_safetensors(path.string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  EXPECT_EQ(file->metadata, metadata);
  ASSERT_EQ(file->tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) EXPECT_TRUE(t.bitwise_equal(file->tensors.at(name))) << name;
  // The data section starts 8-byte aligned.
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  // As another writer may lay it out: data in a different order than the names, no padding, no metadata.
  const fs::path path = temp_dir() / "hand.safetensors";
  const std::string header =
      R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  const uint8_t data[] = {0x80, 0x3F, 0x00, 0xC0, 0x00, 0x00, 0x20, 0x41};  // bf16 1, -2; f32 10
  f.write(reinterpret_cast<const char*>(data), sizeof data);
  f.close();
  auto t = load_safetensors(path.string());
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->at("b").dtype(), DType::bf16);
  EXPECT_EQ(t->at("b").get(0), 1.0);
  EXPECT_EQ(t->at("b").get(1), -2.0);
  EXPECT_EQ(t->at("a").get(0), 10.0);
}

TEST(Safetensors, ModelWeightsRoundTripAndMatch) {
  const Graph g = build("flux1-dev:tiny,dtype=fp8,fp8_scaling=block");
  const auto weights = weights_of(g, random_inputs(g, 3));
  const fs::path path = temp_dir() / "flux.safetensors";
  ASSERT_TRUE(save_safetensors(path.string(), weights).ok());
  auto loaded = load_safetensors(path.string());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_TRUE(check_weights_match(g, *loaded).ok());
  EXPECT_EQ(checksum(*loaded), checksum(weights));
}

TEST(Safetensors, CheckWeightsMatchNamesTheProblems) {
  const Graph g = build("llama3-8b:tiny");
  auto weights = weights_of(g, random_inputs(g, 3));
  weights.erase("model.layers.0.mlp.up_proj.weight");
  weights.at("model.layers.0.input_layernorm.weight") = Tensor(DType::f32, {64});
  weights.emplace("unused.extra", Tensor(DType::f32, {1}));
  const Status s = check_weights_match(g, weights);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::invalid_argument);
  const std::string& m = s.error().message;
  EXPECT_NE(m.find("1 missing, 1 mistyped"), std::string::npos) << m;
  EXPECT_NE(m.find("missing model.layers.0.mlp.up_proj.weight (bf16[128,64])"), std::string::npos) << m;
  EXPECT_NE(m.find("model.layers.0.input_layernorm.weight is f32[64], the graph needs bf16[64]"), std::string::npos) << m;
  EXPECT_EQ(m.find("unused.extra"), std::string::npos) << m;
}

TEST(Safetensors, DTypeNames) {
  for (int d = 0; d < kDTypeCount; ++d) {
    const auto dtype = static_cast<DType>(d);
    EXPECT_EQ(parse_safetensors_dtype(safetensors_dtype_name(dtype)), dtype);
  }
  EXPECT_EQ(safetensors_dtype_name(DType::f8e4m3), "F8_E4M3");
  EXPECT_FALSE(parse_safetensors_dtype("F64").has_value());
}

}  // namespace
}  // namespace kiln::models
