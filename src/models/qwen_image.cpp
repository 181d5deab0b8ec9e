// Qwen-Image transformer (diffusers QwenImageTransformer2DModel layout and weight names): 60 double-stream
// blocks with per-block img_mod / txt_mod Linear(D, 6D), separate q/k/v projections per stream, q/k RMSNorm,
// GELU-tanh MLPs, biases; txt_norm (RMSNorm) + txt_in on the 3584-dim text features; norm_out
// AdaLayerNormContinuous (scale before shift) + proj_out. RoPE (16, 56, 56), theta 10000, from img_ids /
// txt_ids (centred image positions: see models/weights.cpp).
//
// cfg=2 models true classifier-free guidance as one batch-2 call: the latents and the timestep are shared,
// the text is [cond; uncond] along the batch, and noise_pred = uncond + guidance_scale * (cond - uncond).
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "models/zoo.h"

namespace kiln::models {
namespace {

struct QwenConfig {
  int64_t hidden = 3072, heads = 24, head_dim = 128, blocks = 60, mlp_hidden = 12288;
  std::vector<int64_t> axes_dim = {16, 56, 56};
  double theta = 10000;
  int64_t in_channels = 64, joint_dim = 3584, out_channels = 64;
  int64_t img_tokens = 4096, txt_tokens = 512, batch = 1, cfg = 1;
  DType act = DType::bf16;
  GemmPrecision gemm;
};

constexpr double kEps = 1e-6;
constexpr int64_t kTimeDim = 256;

struct Mod {
  ValueId shift, scale, gate;
};

// "<name>.1" = Linear(D, 6D) of silu(temb) [B, D] -> two (shift, scale, gate) triples of [B, 1, D].
std::vector<Mod> modulation(Builder& b, const QwenConfig& c, ValueId silu_temb, int64_t batch, const std::string& name) {
  auto s = b.scope(name);
  const ValueId y = b.linear(silu_temb, "1", c.hidden, 6 * c.hidden, true);
  const std::vector<ValueId> m = b.chunk(b.reshape(y, {batch, 1, 6 * c.hidden}), 2, 6);
  return {Mod{m[0], m[1], m[2]}, Mod{m[3], m[4], m[5]}};
}

ValueId modulate(Builder& b, ValueId x, const Mod& m) {
  return b.add(b.mul(b.layer_norm(x, kEps), b.add_scalar(m.scale, 1.0)), m.shift);
}

// FeedForward "<name>": net.0.proj Linear(D, 4D) + GELU-tanh, net.2 Linear(4D, D).
ValueId feed_forward(Builder& b, const QwenConfig& c, ValueId x, const std::string& name) {
  auto s = b.scope(name);
  const ValueId h = b.gelu_tanh(b.linear(x, "net.0.proj", c.hidden, c.mlp_hidden, true));
  return b.linear(h, "net.2", c.mlp_hidden, c.hidden, true);
}

// Projects one stream to RMS-normed q, k and v [B, H, S, Dh].
struct Qkv {
  ValueId q, k, v;
};
Qkv project(Builder& b, const QwenConfig& c, ValueId x, const std::string& q_name, const std::string& k_name,
            const std::string& v_name, const std::string& q_norm, const std::string& k_norm) {
  auto heads = [&](ValueId y) { return split_heads(b, y, c.heads, c.head_dim); };
  const ValueId q = heads(b.linear(x, q_name, c.hidden, c.hidden, true));
  const ValueId k = heads(b.linear(x, k_name, c.hidden, c.hidden, true));
  const ValueId v = heads(b.linear(x, v_name, c.hidden, c.hidden, true));
  return Qkv{b.rms_norm(q, q_norm + ".weight", c.head_dim, kEps), b.rms_norm(k, k_norm + ".weight", c.head_dim, kEps), v};
}

// One QwenImageTransformerBlock: img [B, I, D], txt [B, T, D], cos/sin [T + I, Dh/2] (text rows first).
std::pair<ValueId, ValueId> block(Builder& b, const QwenConfig& c, ValueId img, ValueId txt, ValueId silu_temb,
                                  ValueId cos, ValueId sin) {
  Builder::Fp8Region fp8(&b);
  const int64_t batch = b.shape(img)[0], t_len = b.shape(txt)[1], i_len = b.shape(img)[1];
  const std::vector<Mod> mi = modulation(b, c, silu_temb, batch, "img_mod");
  const std::vector<Mod> mt = modulation(b, c, silu_temb, batch, "txt_mod");
  ValueId img_attn, txt_attn;
  {
    auto s = b.scope("attn");
    const Qkv qi = project(b, c, modulate(b, img, mi[0]), "to_q", "to_k", "to_v", "norm_q", "norm_k");
    const Qkv qt = project(b, c, modulate(b, txt, mt[0]), "add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q",
                           "norm_added_k");
    const ValueId q = b.rope(b.concat({qt.q, qi.q}, 2), cos, sin, "interleaved");
    const ValueId k = b.rope(b.concat({qt.k, qi.k}, 2), cos, sin, "interleaved");
    const ValueId v = b.concat({qt.v, qi.v}, 2);
    const std::vector<ValueId> a = b.split(merge_heads(b, b.attention(q, k, v, false)), 1, {t_len, i_len});
    img_attn = b.linear(a[1], "to_out.0", c.hidden, c.hidden, true);
    txt_attn = b.linear(a[0], "to_add_out", c.hidden, c.hidden, true);
  }
  img = b.add(img, b.mul(mi[0].gate, img_attn));
  txt = b.add(txt, b.mul(mt[0].gate, txt_attn));
  img = b.add(img, b.mul(mi[1].gate, feed_forward(b, c, modulate(b, img, mi[1]), "img_mlp")));
  txt = b.add(txt, b.mul(mt[1].gate, feed_forward(b, c, modulate(b, txt, mt[1]), "txt_mlp")));
  return {img, txt};
}

Graph build_qwen(const QwenConfig& c) {
  Builder b("qwen-image", c.act, c.gemm);
  const int64_t rows = c.batch * c.cfg;  // denoiser batch: [cond; uncond] when cfg = 2
  const int64_t n_axes = static_cast<int64_t>(c.axes_dim.size());
  const ValueId latents = b.input("img", c.act, {c.batch, c.img_tokens, c.in_channels}, Binding::per_call);
  const ValueId img_ids = b.input("img_ids", DType::f32, {c.img_tokens, n_axes}, Binding::per_call);
  const ValueId txt_feats = b.input("txt", c.act, {rows, c.txt_tokens, c.joint_dim}, Binding::per_call);
  const ValueId txt_ids = b.input("txt_ids", DType::f32, {c.txt_tokens, n_axes}, Binding::per_call);
  ValueId timesteps = b.input("timesteps", DType::f32, {c.batch}, Binding::per_step);
  const ValueId guidance_scale = c.cfg == 2 ? b.input("guidance_scale", DType::f32, {}, Binding::per_step) : -1;

  ValueId img = b.linear(latents, "img_in", c.in_channels, c.hidden, true);
  if (c.cfg == 2) {
    img = b.concat({img, img}, 0);
    timesteps = b.concat({timesteps, timesteps}, 0);
  }
  ValueId txt = b.rms_norm(txt_feats, "txt_norm.weight", c.joint_dim, kEps);
  txt = b.linear(txt, "txt_in", c.joint_dim, c.hidden, true);
  ValueId temb;
  {
    auto s = b.scope("time_text_embed");
    auto se = b.scope("timestep_embedder");
    const ValueId t = b.cast(timestep_embedding(b, timesteps, kTimeDim), c.act);
    temb = b.linear(b.silu(b.linear(t, "linear_1", kTimeDim, c.hidden, true)), "linear_2", c.hidden, c.hidden, true);
  }
  const auto [cos, sin] = rope_tables(b, b.concat({txt_ids, img_ids}, 0), c.axes_dim, c.theta);
  const ValueId silu_temb = b.silu(temb);
  {
    auto s = b.scope("transformer_blocks");
    for (int64_t i = 0; i < c.blocks; ++i) {
      auto si = b.scope(i);
      std::tie(img, txt) = block(b, c, img, txt, silu_temb, cos, sin);
    }
  }
  {
    auto s = b.scope("norm_out");
    const ValueId emb = b.linear(silu_temb, "linear", c.hidden, 2 * c.hidden, true);
    const std::vector<ValueId> ss = b.chunk(b.reshape(emb, {rows, 1, 2 * c.hidden}), 2, 2);
    img = b.add(b.mul(b.layer_norm(img, kEps), b.add_scalar(ss[0], 1.0)), ss[1]);  // scale, then shift
  }
  ValueId out = b.linear(img, "proj_out", c.hidden, c.out_channels, true);  // [rows, I, 64]
  if (c.cfg == 2) {
    const std::vector<ValueId> cu = b.split(out, 0, {c.batch, c.batch});
    const ValueId gs = b.cast(guidance_scale, c.act);
    out = b.add(cu[1], b.mul(gs, b.sub(cu[0], cu[1])));
  }
  b.output("noise_pred", out);
  return b.finish();
}

Result<Graph> build_qwen_image(const ModelOptions& o) {
  QwenConfig c;
  KILN_ASSIGN_OR_RETURN(const bool tiny, o.get_bool("tiny"));
  KILN_ASSIGN_OR_RETURN(const ModelOptions::Precision p, o.get_precision());
  c.act = p.act;
  c.gemm = p.gemm;
  KILN_ASSIGN_OR_RETURN(c.batch, o.get_int("batch", 1, 4096));
  KILN_ASSIGN_OR_RETURN(c.blocks, o.get_int("blocks", 0, 1000));
  KILN_ASSIGN_OR_RETURN(c.img_tokens, o.get_int("img_tokens", 1, 1 << 20));
  KILN_ASSIGN_OR_RETURN(c.txt_tokens, o.get_int("txt_tokens", 1, 1 << 20));
  KILN_ASSIGN_OR_RETURN(c.cfg, o.get_int("cfg", 1, 2));
  if (tiny) {
    c.hidden = 64;
    c.heads = 2;
    c.head_dim = 32;
    c.mlp_hidden = 256;
    c.axes_dim = {8, 12, 12};
    c.in_channels = c.out_channels = 16;
    c.joint_dim = 48;
  }
  return build_qwen(c);
}

}  // namespace

std::vector<ZooModel> qwen_image_zoo_models() {
  std::vector<ZooOption> options = {
      {"blocks", "60", "1", "double-stream blocks"},
      {"img_tokens", "4096", "16", "image tokens (1024x1024 px = 4096)"},
      {"txt_tokens", "512", "8", "text tokens (up to 1024)"},
      {"cfg", "1", "", "2: true classifier-free guidance as one batch-2 call (cond and uncond text) per step"},
  };
  for (ZooOption& o : common_zoo_options()) options.push_back(std::move(o));
  return {{{"qwen-image", "Qwen-Image transformer: 3072 hidden, 60 double-stream blocks (~20.4e9 params)", options},
           build_qwen_image}};
}

}  // namespace kiln::models
