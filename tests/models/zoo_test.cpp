// The model zoo: parameter counts and FLOPs of the real configurations, every tiny configuration verifying and
// running on the reference executor, option errors, and the FLUX.1 blocks checked against an independent
// loop-level transcription of /work/shared/bench/torch_flux_block.py.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>

#include "models/weights.h"
#include "models/zoo.h"
#include "ref/executor.h"

namespace kiln::models {
namespace {

Graph build(const std::string& spec) {
  auto g = build_zoo_model(spec);
  EXPECT_TRUE(g.ok()) << spec << ": " << (g.ok() ? "" : g.error().message);
  if (!g.ok()) return Graph();
  const Status verified = verify_graph(*g);
  EXPECT_TRUE(verified.ok()) << spec << ": " << (verified.ok() ? "" : verified.error().message);
  return std::move(g).value();
}

void expect_near_rel(double actual, double expected, double rel, const std::string& what) {
  EXPECT_NEAR(actual / expected, 1.0, rel) << what << ": " << actual << " vs " << expected;
}

TEST(ZooParams, Flux1Dev) {
  const Graph g = build("flux1-dev");
  expect_near_rel(static_cast<double>(parameter_count(g)), 11.9e9, 0.01, "flux1-dev parameters");
}

TEST(ZooParams, Flux2Dev) {
  const Graph g = build("flux2-dev");
  expect_near_rel(static_cast<double>(parameter_count(g)), 32e9, 0.03, "flux2-dev parameters");
}

TEST(ZooParams, QwenImage) {
  const Graph g = build("qwen-image");
  expect_near_rel(static_cast<double>(parameter_count(g)), 20.4e9, 0.02, "qwen-image parameters");
}

TEST(ZooParams, Llama3Full) {
  const Graph g = build("llama3-8b:layers=32,embed=1");
  expect_near_rel(static_cast<double>(parameter_count(g)), 8.03e9, 0.01, "llama3-8b parameters");
  // One layer: 4 attention projections + 3 MLP matrices + 2 norms.
  const Graph one = build("llama3-8b");
  EXPECT_EQ(parameter_count(one), 4096LL * (4096 * 2 + 1024 * 2) + 3LL * 4096 * 14336 + 2 * 4096);
}

TEST(ZooParams, Fp8KeepsTheCountAndAddsScales) {
  const Graph bf16 = build("flux1-double-block");
  const Graph fp8 = build("flux1-double-block:dtype=fp8,fp8_scaling=block");
  int64_t f8_elements = 0, scale_elements = 0;
  for (const GraphInput& in : fp8.inputs()) {
    const Value& v = fp8.value(in.value);
    if (v.type.dtype == DType::f8e4m3) f8_elements += shape_numel(v.type.shape);
    if (v.name.ends_with(".weight_scale")) scale_elements += shape_numel(v.type.shape);
  }
  EXPECT_EQ(parameter_count(fp8) - scale_elements, parameter_count(bf16));
  EXPECT_GT(f8_elements, parameter_count(bf16) * 99 / 100);  // all block GEMM weights
  // 128x128 blocks of qkv [9216, 3072]: 72 x 24.
  auto qkv = fp8.find_value("img_attn.qkv.weight_scale");
  ASSERT_TRUE(qkv.has_value());
  EXPECT_EQ(fp8.value(*qkv).type.shape, (Shape{72, 24}));
}

TEST(ZooFlops, DoubleBlockAtFluxShape) {
  const Graph g = build("flux1-double-block");
  const GraphCost cost = graph_cost(g);
  expect_near_rel(cost.flops, 1.305e12, 0.01, "double block FLOPs");
  double gemm = 0, attention = 0;
  for (NodeId i = 0; i < static_cast<NodeId>(g.nodes().size()); ++i) {
    if (g.node(i).op == Op::linear) gemm += node_cost(g, i).flops;
    if (g.node(i).op == Op::attention) attention += node_cost(g, i).flops;
  }
  expect_near_rel(gemm, 1.044e12, 0.01, "double block GEMM FLOPs");
  expect_near_rel(attention, 0.261e12, 0.01, "double block attention FLOPs");
}

TEST(ZooFlops, SingleBlockAtFluxShape) {
  const Graph g = build("flux1-single-block");
  // GEMMs 2*4608*3072*(7*3072) + 2*4608*(5*3072)*3072 plus the same attention as the double block.
  expect_near_rel(graph_cost(g).flops, 2.0 * 4608 * 3072 * 12 * 3072 + 0.261e12, 0.01, "single block FLOPs");
}

// ---- every tiny configuration verifies and runs ----

void expect_runs(const std::string& spec) {
  SCOPED_TRACE(spec);
  const Graph g = build(spec);
  ASSERT_FALSE(g.nodes().empty());
  const Status verified = verify_graph(g);
  ASSERT_TRUE(verified.ok()) << verified.error().message;
  const auto inputs = random_inputs(g, 7);
  auto outputs = ref::run_graph(g, inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.error().message;
  ASSERT_EQ(outputs->size(), g.outputs().size());
  for (const auto& [name, t] : *outputs) {
    ASSERT_GT(t.numel(), 0) << name;
    double sum_sq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double x = t.get(i);
      ASSERT_TRUE(std::isfinite(x)) << name << "[" << i << "]";
      sum_sq += x * x;
    }
    const double rms = std::sqrt(sum_sq / static_cast<double>(t.numel()));
    EXPECT_GT(rms, 1e-3) << name;  // random weights keep activations O(1), not 0 ...
    EXPECT_LT(rms, 1e3) << name;   // ... and not exploding
  }
}

TEST(ZooTiny, EveryModelRuns) {
  for (const ZooEntry& e : zoo_models()) expect_runs(e.name + ":tiny");
}

TEST(ZooTiny, Variants) {
  for (const char* spec : {
           "flux1-dev:tiny,dtype=f32,batch=2",
           "flux1-dev:tiny,dtype=fp8",
           "flux1-dev:tiny,dtype=fp8,fp8_scaling=block,double_blocks=2,single_blocks=2",
           "flux1-dev:tiny,dtype=f16,img_tokens=12,txt_tokens=5",
           "flux2-dev:tiny,dtype=fp8,fp8_scaling=tensor",
           "flux1-double-block:tiny,dtype=fp8",
           "qwen-image:tiny,cfg=2",
           "qwen-image:tiny,cfg=2,batch=2,dtype=fp8",
           "llama3-8b:tiny,layers=2,embed=1",
           "llama3-8b:tiny,mode=decode,layers=2,embed=1,batch=2",
           "llama3-8b:tiny,mode=decode,past=0",
           "llama3-8b:tiny,dtype=fp8,fp8_scaling=block",
       }) {
    expect_runs(spec);
  }
}

TEST(ZooTiny, LlamaCacheShapes) {
  const Graph g = build("llama3-8b:tiny,mode=decode,layers=2,past=5");
  std::set<std::string> outs;
  for (const GraphOutput& o : g.outputs()) outs.insert(o.name);
  EXPECT_EQ(outs, (std::set<std::string>{"hidden_states_out", "present_k.0", "present_k.1", "present_v.0", "present_v.1"}));
  for (const GraphOutput& o : g.outputs()) {
    if (o.name.starts_with("present")) {
      EXPECT_EQ(g.value(o.value).type.shape, (Shape{1, 2, 6, 16})) << o.name;
    }
  }
}

TEST(ZooTiny, QwenCfgCombinesCondAndUncond) {
  // With guidance_scale = 1 the combination is the conditional prediction: equal to a cfg=1 run on the cond text.
  const Graph cfg = build("qwen-image:tiny,cfg=2,dtype=f32");
  const Graph one = build("qwen-image:tiny,dtype=f32");
  auto inputs = random_inputs(cfg, 3);
  inputs.at("guidance_scale").set(0, 1.0);
  auto one_inputs = random_inputs(one, 3);
  const Tensor& txt = inputs.at("txt");
  Tensor& cond = one_inputs.at("txt");
  for (int64_t i = 0; i < cond.numel(); ++i) cond.set(i, txt.get(i));
  for (const char* name : {"img", "timesteps"}) one_inputs.at(name) = inputs.at(name);
  auto a = ref::run_graph(cfg, inputs);
  auto b = ref::run_graph(one, one_inputs);
  ASSERT_TRUE(a.ok() && b.ok());
  const Tensor& x = a->at("noise_pred");
  const Tensor& y = b->at("noise_pred");
  ASSERT_EQ(x.shape(), y.shape());
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_NEAR(x.get(i), y.get(i), 1e-5) << i;
}

TEST(ZooTiny, WeightNamesFollowTheReferences) {
  const Graph flux = build("flux1-dev:tiny");
  for (const char* name : {"img_in.weight", "time_in.in_layer.weight", "vector_in.out_layer.bias",
                           "guidance_in.in_layer.weight", "double_blocks.0.img_mod.lin.weight",
                           "double_blocks.0.txt_attn.qkv.bias", "double_blocks.0.img_attn.norm.query_norm.scale",
                           "double_blocks.0.img_mlp.2.weight", "single_blocks.0.linear1.weight",
                           "single_blocks.0.norm.key_norm.scale", "single_blocks.0.modulation.lin.weight",
                           "final_layer.adaLN_modulation.1.weight", "final_layer.linear.weight"}) {
    EXPECT_TRUE(flux.find_value(name).has_value()) << name;
  }
  const Graph qwen = build("qwen-image:tiny");
  for (const char* name : {"txt_norm.weight", "time_text_embed.timestep_embedder.linear_1.weight",
                           "transformer_blocks.0.img_mod.1.weight", "transformer_blocks.0.attn.add_k_proj.weight",
                           "transformer_blocks.0.attn.norm_added_q.weight", "transformer_blocks.0.attn.to_out.0.bias",
                           "transformer_blocks.0.txt_mlp.net.0.proj.weight", "norm_out.linear.weight",
                           "proj_out.weight"}) {
    EXPECT_TRUE(qwen.find_value(name).has_value()) << name;
  }
  const Graph llama = build("llama3-8b:tiny,embed=1");
  for (const char* name : {"model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.weight",
                           "model.layers.0.mlp.gate_proj.weight", "model.norm.weight", "lm_head.weight"}) {
    EXPECT_TRUE(llama.find_value(name).has_value()) << name;
  }
  EXPECT_FALSE(build("flux2-dev:tiny").find_value("double_blocks.0.img_attn.qkv.bias").has_value());
}

// ---- options ----

std::string error_of(const std::string& spec) {
  auto g = build_zoo_model(spec);
  EXPECT_FALSE(g.ok()) << spec;
  if (g.ok()) return "";
  EXPECT_EQ(g.error().code, ErrorCode::invalid_argument) << spec;
  return g.error().message;
}

TEST(ZooOptions, Errors) {
  EXPECT_NE(error_of("flux3").find("unknown zoo model 'flux3'; the zoo has: flux1-dev"), std::string::npos);
  const std::string key = error_of("flux1-dev:blocks=3");
  EXPECT_NE(key.find("unknown option 'blocks'"), std::string::npos) << key;
  EXPECT_NE(key.find("double_blocks, single_blocks"), std::string::npos) << key;
  const std::string value = error_of("flux1-dev:img_tokens=many");
  EXPECT_NE(value.find("option 'img_tokens' of zoo model flux1-dev must be an integer"), std::string::npos) << value;
  EXPECT_NE(error_of("flux1-dev:img_tokens=0").find("got '0'"), std::string::npos);
  EXPECT_NE(error_of("flux1-dev:img_tokens=12x").find("got '12x'"), std::string::npos);
  const std::string dtype = error_of("llama3-8b:dtype=int4");
  EXPECT_NE(dtype.find("one of bf16, f16, f32, fp8"), std::string::npos) << dtype;
  EXPECT_NE(error_of("llama3-8b:mode=train").find("prefill, decode"), std::string::npos);
  EXPECT_NE(error_of("qwen-image:cfg=3").find("[1, 2]"), std::string::npos);
  EXPECT_NE(error_of("flux1-dev:tiny=2").find("0 or 1"), std::string::npos);
  EXPECT_NE(error_of("flux1-dev:batch=1,batch=2").find("given twice"), std::string::npos);
  EXPECT_NE(error_of("flux1-dev:batch=1,,tiny").find("empty option"), std::string::npos);
  EXPECT_NE(error_of("flux1-dev:batch=").find("has no value"), std::string::npos);
}

TEST(ZooOptions, TinyDefaultsAndOverrides) {
  const Graph g = build("flux1-dev:tiny,double_blocks=2, img_tokens = 9");
  EXPECT_TRUE(g.find_value("double_blocks.1.img_mod.lin.weight").has_value());
  EXPECT_FALSE(g.find_value("double_blocks.2.img_mod.lin.weight").has_value());
  EXPECT_TRUE(g.find_value("single_blocks.0.linear1.weight").has_value());
  EXPECT_FALSE(g.find_value("single_blocks.1.linear1.weight").has_value());
  EXPECT_EQ(g.value(*g.find_value("img")).type.shape, (Shape{1, 9, 16}));
  EXPECT_EQ(g.value(*g.find_value("img")).type.dtype, DType::bf16);
  EXPECT_EQ(g.name, "flux1-dev");
}

TEST(ZooOptions, ListingCoversEveryModelAndOption) {
  std::set<std::string> names;
  for (const ZooEntry& e : zoo_models()) {
    names.insert(e.name);
    EXPECT_FALSE(e.description.empty()) << e.name;
    std::set<std::string> keys;
    for (const ZooOption& o : e.options) {
      EXPECT_TRUE(keys.insert(o.key).second) << e.name << " lists " << o.key << " twice";
      EXPECT_FALSE(o.help.empty()) << e.name << ":" << o.key;
      // Every option accepts its own default.
      if (o.key == "tiny") continue;
      auto g = build_zoo_model(e.name + ":tiny," + o.key + "=" + (o.tiny_value.empty() ? o.default_value : o.tiny_value));
      EXPECT_TRUE(g.ok()) << e.name << ":" << o.key << ": " << (g.ok() ? "" : g.error().message);
    }
    EXPECT_TRUE(keys.count("dtype") && keys.count("tiny") && keys.count("batch")) << e.name;
  }
  EXPECT_EQ(names, (std::set<std::string>{"flux1-dev", "flux2-dev", "flux1-double-block", "flux1-single-block",
                                          "qwen-image", "llama3-8b"}));
}

// ---- the FLUX.1 blocks against torch_flux_block.py, transcribed to loops ----

// A row-major [rows, cols] matrix of doubles.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  double& at(int64_t r, int64_t c) { return v[r * cols + c]; }
  double at(int64_t r, int64_t c) const { return v[r * cols + c]; }
};

Mat mat(int64_t rows, int64_t cols) { return Mat{rows, cols, std::vector<double>(rows * cols, 0.0)}; }
Mat from(const Tensor& t, int64_t rows) { return Mat{rows, t.numel() / rows, t.to_f64()}; }

struct TorchFlux {
  const std::map<std::string, Tensor>& p;
  int64_t D = 64, H = 2, HD = 32;

  // nn.Linear with weight "<name>.weight" [N, K] and bias "<name>.bias".
  Mat linear(const Mat& x, const std::string& name) const {
    const Mat w = from(p.at(name + ".weight"), p.at(name + ".weight").shape()[0]);
    const std::vector<double> b = p.at(name + ".bias").to_f64();
    Mat y = mat(x.rows, w.rows);
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t n = 0; n < w.rows; ++n) {
        double acc = b[n];
        for (int64_t k = 0; k < x.cols; ++k) acc += x.at(r, k) * w.at(n, k);
        y.at(r, n) = acc;
      }
    return y;
  }
  static Mat map(Mat x, const std::function<double(double)>& f) {
    for (double& e : x.v) e = f(e);
    return x;
  }
  static double silu(double x) { return x / (1 + std::exp(-x)); }
  static double gelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
  // F.layer_norm(x, (D,), eps=1e-6) * (1 + m[scale]) + m[shift], m chunks of width D.
  Mat modulate(const Mat& x, const Mat& m, int shift, int scale) const {
    Mat y = x;
    for (int64_t r = 0; r < x.rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t c = 0; c < D; ++c) mean += x.at(r, c) / D;
      for (int64_t c = 0; c < D; ++c) var += (x.at(r, c) - mean) * (x.at(r, c) - mean) / D;
      for (int64_t c = 0; c < D; ++c)
        y.at(r, c) = (x.at(r, c) - mean) / std::sqrt(var + 1e-6) * (1 + m.at(0, scale * D + c)) + m.at(0, shift * D + c);
    }
    return y;
  }
  // Columns [offset, offset + D) of qkv as heads, RMS-normed with weight `norm` (empty: none), then RoPE.
  Mat heads(const Mat& x, int64_t offset, const std::string& norm, const Mat* cos, const Mat* sin) const {
    Mat y = mat(x.rows, D);
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> e(HD);
        double ms = 0;
        for (int64_t d = 0; d < HD; ++d) ms += (e[d] = x.at(r, offset + h * HD + d)) * e[d] / HD;
        if (!norm.empty()) {
          for (int64_t d = 0; d < HD; ++d) e[d] = e[d] / std::sqrt(ms + 1e-6) * p.at(norm).get(d);
        }
        for (int64_t i = 0; cos && i < HD / 2; ++i) {
          const double x0 = e[2 * i], x1 = e[2 * i + 1], c = cos->at(r, i), s = sin->at(r, i);
          e[2 * i] = x0 * c - x1 * s;
          e[2 * i + 1] = x0 * s + x1 * c;
        }
        for (int64_t d = 0; d < HD; ++d) y.at(r, h * HD + d) = e[d];
      }
    return y;
  }
  Mat sdpa(const Mat& q, const Mat& k, const Mat& v) const {
    Mat out = mat(q.rows, D);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < q.rows; ++i) {
        std::vector<double> s(k.rows);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < k.rows; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < HD; ++d) dot += q.at(i, h * HD + d) * k.at(j, h * HD + d);
          mx = std::max(mx, s[j] = dot / std::sqrt(double(HD)));
        }
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j < k.rows; ++j)
          for (int64_t d = 0; d < HD; ++d) out.at(i, h * HD + d) += s[j] / sum * v.at(j, h * HD + d);
      }
    return out;
  }
  static Mat rows(const Mat& x, int64_t begin, int64_t end) {
    Mat y = mat(end - begin, x.cols);
    std::copy(x.v.begin() + begin * x.cols, x.v.begin() + end * x.cols, y.v.begin());
    return y;
  }
  static Mat cat_rows(const Mat& a, const Mat& b) {
    Mat y = a;
    y.rows += b.rows;
    y.v.insert(y.v.end(), b.v.begin(), b.v.end());
    return y;
  }
  static Mat cat_cols(const Mat& a, const Mat& b) {
    Mat y = mat(a.rows, a.cols + b.cols);
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t c = 0; c < y.cols; ++c) y.at(r, c) = c < a.cols ? a.at(r, c) : b.at(r, c - a.cols);
    return y;
  }
  // x + m[gate] * y
  static Mat gated(const Mat& x, const Mat& m, int gate, const Mat& y, int64_t D) {
    Mat out = x;
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t c = 0; c < D; ++c) out.at(r, c) += m.at(0, gate * D + c) * y.at(r, c);
    return out;
  }
};

void expect_close(const Tensor& actual, const Mat& expected, const char* what) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.v.size())) << what;
  double worst = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) worst = std::max(worst, std::fabs(actual.get(i) - expected.v[i]));
  EXPECT_LT(worst, 2e-4) << what;
}

TEST(ZooFluxBlock, DoubleMatchesTorchTranscription) {
  const Graph g = build("flux1-double-block:tiny,dtype=f32");
  const auto in = random_inputs(g, 11);
  auto out = ref::run_graph(g, in);
  ASSERT_TRUE(out.ok()) << out.error().message;
  const TorchFlux t{in};
  const int64_t T = 8, I = 16;
  const Mat vec = TorchFlux::map(from(in.at("vec"), 1), TorchFlux::silu);
  const Mat cos = from(in.at("cos"), T + I), sin = from(in.at("sin"), T + I);
  const Mat img = from(in.at("img"), I), txt = from(in.at("txt"), T);
  const Mat mi = t.linear(vec, "img_mod.lin"), mt = t.linear(vec, "txt_mod.lin");
  const Mat qkv_i = t.linear(t.modulate(img, mi, 0, 1), "img_attn.qkv");
  const Mat qkv_t = t.linear(t.modulate(txt, mt, 0, 1), "txt_attn.qkv");
  auto joint = [&](int64_t offset, const char* norm) {
    const std::string n = norm ? std::string(".norm.") + norm : "";
    const Mat raw = TorchFlux::cat_rows(t.heads(qkv_t, offset, norm ? "txt_attn" + n : "", nullptr, nullptr),
                                        t.heads(qkv_i, offset, norm ? "img_attn" + n : "", nullptr, nullptr));
    return norm ? t.heads(raw, 0, "", &cos, &sin) : raw;
  };
  const Mat a = t.sdpa(joint(0, "query_norm.scale"), joint(t.D, "key_norm.scale"), joint(2 * t.D, nullptr));
  auto post = [&](const std::string& s, const Mat& x, const Mat& attn, const Mat& m) {
    const Mat x1 = TorchFlux::gated(x, m, 2, t.linear(attn, s + "_attn.proj"), t.D);
    const Mat h = TorchFlux::map(t.linear(t.modulate(x1, m, 3, 4), s + "_mlp.0"), TorchFlux::gelu);
    return TorchFlux::gated(x1, m, 5, t.linear(h, s + "_mlp.2"), t.D);
  };
  expect_close(out->at("img_out"), post("img", img, TorchFlux::rows(a, T, T + I), mi), "img_out");
  expect_close(out->at("txt_out"), post("txt", txt, TorchFlux::rows(a, 0, T), mt), "txt_out");
}

TEST(ZooFluxBlock, SingleMatchesTorchTranscription) {
  const Graph g = build("flux1-single-block:tiny,dtype=f32");
  const auto in = random_inputs(g, 12);
  auto out = ref::run_graph(g, in);
  ASSERT_TRUE(out.ok()) << out.error().message;
  const TorchFlux t{in};
  const int64_t N = 24;
  const Mat vec = TorchFlux::map(from(in.at("vec"), 1), TorchFlux::silu);
  const Mat cos = from(in.at("cos"), N), sin = from(in.at("sin"), N);
  const Mat x = from(in.at("x"), N);
  const Mat m = t.linear(vec, "modulation.lin");
  const Mat h = t.linear(t.modulate(x, m, 0, 1), "linear1");
  const Mat q = t.heads(h, 0, "norm.query_norm.scale", &cos, &sin);
  const Mat k = t.heads(h, t.D, "norm.key_norm.scale", &cos, &sin);
  const Mat v = t.heads(h, 2 * t.D, "", nullptr, nullptr);
  Mat mlp = mat(N, 4 * t.D);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < 4 * t.D; ++c) mlp.at(r, c) = TorchFlux::gelu(h.at(r, 3 * t.D + c));
  const Mat y = t.linear(TorchFlux::cat_cols(t.sdpa(q, k, v), mlp), "linear2");
  expect_close(out->at("out"), TorchFlux::gated(x, m, 2, y, t.D), "out");
}

TEST(ZooFluxBlock, FullModelBlockSharesTheBlockWeights) {
  // The standalone block's weights are the full model's double_blocks.0.* (same names, shapes, dtypes).
  const Graph block = build("flux1-double-block:tiny");
  const Graph model = build("flux1-dev:tiny");
  int checked = 0;
  for (const GraphInput& in : block.inputs()) {
    if (in.binding != Binding::weight) continue;
    const Value& v = block.value(in.value);
    auto id = model.find_value("double_blocks.0." + v.name);
    ASSERT_TRUE(id.has_value()) << v.name;
    EXPECT_EQ(model.value(*id).type, v.type) << v.name;
    ++checked;
  }
  EXPECT_EQ(checked, 2 * (2 + 2 + 2 + 2 + 4));  // per stream: mod, qkv, proj (w + b each), 2 norms, mlp (2 x w + b)
}

}  // namespace
}  // namespace kiln::models
