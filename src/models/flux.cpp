// FLUX.1-dev and FLUX.2-dev transformers (BFL reference layout and weight names), and one FLUX.1 double- or
// single-stream block on its own exactly as /work/shared/bench/torch_flux_block.py computes it.
//
// Layout (BFL flux/model.py, flux2/model.py): img_in / txt_in project latents and text; vec sums MLP
// embeddings of the sinusoidal timestep (and guidance, and FLUX.1's pooled CLIP vector y); double blocks keep
// image and text streams apart except in one joint attention over [txt, img]; single blocks run on the
// concatenation; the final layer is adaLN + Linear. RoPE angles are computed in-graph from txt_ids/img_ids.
// FLUX.1 modulates per block (Linear(D,6D) per stream, Linear(D,3D) single); FLUX.2 shares three modulations
// across all blocks, uses SwiGLU MLPs and no biases.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "models/zoo.h"

namespace kiln::models {
namespace {

struct FluxConfig {
  std::string name;
  int64_t hidden = 3072, heads = 24, head_dim = 128;
  int64_t double_blocks = 19, single_blocks = 38;
  int64_t mlp_hidden = 12288;
  bool swiglu = false;             // FLUX.2: Linear(D, 2F) -> swiglu -> Linear(F, D)
  bool bias = true;                // FLUX.2 has none
  bool shared_modulation = false;  // FLUX.2: one set of modulations for all blocks
  std::vector<int64_t> axes_dim = {16, 56, 56};
  double theta = 10000;
  int64_t in_channels = 64, context_dim = 4096;
  int64_t vec_in_dim = 768;  // 0: no pooled text vector (FLUX.2)
  bool guidance = true;
  int64_t img_tokens = 4096, txt_tokens = 512, batch = 1;
  DType act = DType::bf16;
  GemmPrecision gemm;
};

constexpr double kNormEps = 1e-6;
constexpr int64_t kTimeDim = 256;

// shift, scale, gate: each [B, 1, D].
struct Mod {
  ValueId shift, scale, gate;
};

// Modulation "<scope>.lin" = Linear(D, n*3*D) of silu(vec) [B, D], chunked into n (shift, scale, gate) triples.
std::vector<Mod> modulation(Builder& b, const FluxConfig& c, ValueId silu_vec, const std::string& name, int sets) {
  auto s = b.scope(name);
  const int64_t parts = 3 * sets;
  const ValueId y = b.linear(silu_vec, "lin", c.hidden, parts * c.hidden, c.bias);  // [B, parts*D]
  const std::vector<ValueId> m = b.chunk(b.reshape(y, {c.batch, 1, parts * c.hidden}), 2, parts);
  std::vector<Mod> out;
  for (int i = 0; i < sets; ++i) out.push_back(Mod{m[3 * i], m[3 * i + 1], m[3 * i + 2]});
  return out;
}

// LayerNorm (no affine) then x * (1 + scale) + shift.
ValueId modulate(Builder& b, ValueId x, const Mod& m) {
  return b.add(b.mul(b.layer_norm(x, kNormEps), b.add_scalar(m.scale, 1.0)), m.shift);
}

// x + gate * y
ValueId gated_residual(Builder& b, ValueId x, ValueId gate, ValueId y) { return b.add(x, b.mul(gate, y)); }

// Sequential(Linear(D, F or 2F), GELU-tanh or SwiGLU, Linear(F, D)) named "<name>.0", "<name>.2".
ValueId mlp(Builder& b, const FluxConfig& c, ValueId x, const std::string& name) {
  auto s = b.scope(name);
  const int64_t up = c.swiglu ? 2 * c.mlp_hidden : c.mlp_hidden;
  ValueId h = b.linear(x, "0", c.hidden, up, c.bias);
  h = c.swiglu ? b.swiglu(h) : b.gelu_tanh(h);
  return b.linear(h, "2", c.mlp_hidden, c.hidden, c.bias);
}

// qkv [B, S, 3D] -> q, k, v [B, H, S, Dh] with q and k RMS-normed ("<norm>.query_norm.scale", ".key_norm.scale").
struct Qkv {
  ValueId q, k, v;
};
Qkv split_qkv(Builder& b, const FluxConfig& c, ValueId qkv, const std::string& norm) {
  const std::vector<ValueId> parts = b.chunk(qkv, -1, 3);
  auto s = b.scope(norm);
  const ValueId q = b.rms_norm(split_heads(b, parts[0], c.heads, c.head_dim), "query_norm.scale", c.head_dim, kNormEps);
  const ValueId k = b.rms_norm(split_heads(b, parts[1], c.heads, c.head_dim), "key_norm.scale", c.head_dim, kNormEps);
  return Qkv{q, k, split_heads(b, parts[2], c.heads, c.head_dim)};
}

// Joint attention with RoPE over the rows of q/k/v [B, H, S, Dh]: -> [B, S, D].
ValueId rope_attention(Builder& b, const Qkv& x, ValueId cos, ValueId sin) {
  const ValueId q = b.rope(x.q, cos, sin, "interleaved");
  const ValueId k = b.rope(x.k, cos, sin, "interleaved");
  return merge_heads(b, b.attention(q, k, x.v, false));
}

// One double-stream block: img [B, I, D], txt [B, T, D]; cos/sin [T + I, Dh/2] (text rows first).
// `shared` holds FLUX.2's modulations (img then txt); empty for per-block modulation.
std::pair<ValueId, ValueId> double_block(Builder& b, const FluxConfig& c, ValueId img, ValueId txt, ValueId silu_vec,
                                         ValueId cos, ValueId sin, const std::vector<std::vector<Mod>>& shared) {
  Builder::Fp8Region fp8(&b);
  const int64_t t_len = b.shape(txt)[1], i_len = b.shape(img)[1];
  const std::vector<Mod> mi = shared.empty() ? modulation(b, c, silu_vec, "img_mod", 2) : shared[0];
  const std::vector<Mod> mt = shared.empty() ? modulation(b, c, silu_vec, "txt_mod", 2) : shared[1];
  auto pre = [&](const std::string& stream, ValueId x, const Mod& m) {
    auto s = b.scope(stream + "_attn");
    return split_qkv(b, c, b.linear(modulate(b, x, m), "qkv", c.hidden, 3 * c.hidden, c.bias), "norm");
  };
  const Qkv qi = pre("img", img, mi[0]);
  const Qkv qt = pre("txt", txt, mt[0]);
  const Qkv joint{b.concat({qt.q, qi.q}, 2), b.concat({qt.k, qi.k}, 2), b.concat({qt.v, qi.v}, 2)};
  const std::vector<ValueId> a = b.split(rope_attention(b, joint, cos, sin), 1, {t_len, i_len});
  auto post = [&](const std::string& stream, ValueId x, ValueId attn, const std::vector<Mod>& m) {
    ValueId proj;
    {
      auto s = b.scope(stream + "_attn");
      proj = b.linear(attn, "proj", c.hidden, c.hidden, c.bias);
    }
    x = gated_residual(b, x, m[0].gate, proj);
    return gated_residual(b, x, m[1].gate, mlp(b, c, modulate(b, x, m[1]), stream + "_mlp"));
  };
  const ValueId img_out = post("img", img, a[1], mi);
  const ValueId txt_out = post("txt", txt, a[0], mt);
  return {img_out, txt_out};
}

// One single-stream block on x [B, T + I, D].
ValueId single_block(Builder& b, const FluxConfig& c, ValueId x, ValueId silu_vec, ValueId cos, ValueId sin,
                     const std::vector<Mod>& shared) {
  Builder::Fp8Region fp8(&b);
  const Mod m = shared.empty() ? modulation(b, c, silu_vec, "modulation", 1)[0] : shared[0];
  const int64_t up = c.swiglu ? 2 * c.mlp_hidden : c.mlp_hidden;
  const ValueId h = b.linear(modulate(b, x, m), "linear1", c.hidden, 3 * c.hidden + up, c.bias);
  const std::vector<ValueId> parts = b.split(h, -1, {3 * c.hidden, up});
  const ValueId attn = rope_attention(b, split_qkv(b, c, parts[0], "norm"), cos, sin);
  const ValueId act = c.swiglu ? b.swiglu(parts[1]) : b.gelu_tanh(parts[1]);
  const ValueId out = b.linear(b.concat({attn, act}, -1), "linear2", c.hidden + c.mlp_hidden, c.hidden, c.bias);
  return gated_residual(b, x, m.gate, out);
}

// MLPEmbedder "<name>": in_layer Linear(in, D), SiLU, out_layer Linear(D, D).
ValueId mlp_embedder(Builder& b, const FluxConfig& c, ValueId x, const std::string& name, int64_t in) {
  auto s = b.scope(name);
  return b.linear(b.silu(b.linear(x, "in_layer", in, c.hidden, c.bias)), "out_layer", c.hidden, c.hidden, c.bias);
}

Graph build_flux(const FluxConfig& c) {
  Builder b(c.name, c.act, c.gemm);
  const int64_t n_axes = static_cast<int64_t>(c.axes_dim.size());
  const ValueId img_in = b.input("img", c.act, {c.batch, c.img_tokens, c.in_channels}, Binding::per_call);
  const ValueId img_ids = b.input("img_ids", DType::f32, {c.img_tokens, n_axes}, Binding::per_call);
  const ValueId txt_in = b.input("txt", c.act, {c.batch, c.txt_tokens, c.context_dim}, Binding::per_call);
  const ValueId txt_ids = b.input("txt_ids", DType::f32, {c.txt_tokens, n_axes}, Binding::per_call);
  const ValueId timesteps = b.input("timesteps", DType::f32, {c.batch}, Binding::per_step);
  const ValueId y = c.vec_in_dim ? b.input("y", c.act, {c.batch, c.vec_in_dim}, Binding::per_call) : -1;
  const ValueId guidance = c.guidance ? b.input("guidance", DType::f32, {c.batch}, Binding::per_step) : -1;

  ValueId img = b.linear(img_in, "img_in", c.in_channels, c.hidden, c.bias);
  ValueId vec = mlp_embedder(b, c, b.cast(timestep_embedding(b, timesteps, kTimeDim), c.act), "time_in", kTimeDim);
  if (c.guidance) {
    const ValueId g = b.cast(timestep_embedding(b, guidance, kTimeDim), c.act);
    vec = b.add(vec, mlp_embedder(b, c, g, "guidance_in", kTimeDim));
  }
  if (c.vec_in_dim) vec = b.add(vec, mlp_embedder(b, c, y, "vector_in", c.vec_in_dim));
  ValueId txt = b.linear(txt_in, "txt_in", c.context_dim, c.hidden, c.bias);
  const auto [cos, sin] = rope_tables(b, b.concat({txt_ids, img_ids}, 0), c.axes_dim, c.theta);
  const ValueId silu_vec = b.silu(vec);

  std::vector<std::vector<Mod>> double_mods;
  std::vector<Mod> single_mods;
  if (c.shared_modulation) {
    Builder::Fp8Region fp8(&b);
    double_mods.push_back(modulation(b, c, silu_vec, "double_stream_modulation_img", 2));
    double_mods.push_back(modulation(b, c, silu_vec, "double_stream_modulation_txt", 2));
    single_mods = modulation(b, c, silu_vec, "single_stream_modulation", 1);
  }
  {
    auto s = b.scope("double_blocks");
    for (int64_t i = 0; i < c.double_blocks; ++i) {
      auto si = b.scope(i);
      std::tie(img, txt) = double_block(b, c, img, txt, silu_vec, cos, sin, double_mods);
    }
  }
  ValueId x = b.concat({txt, img}, 1);
  {
    auto s = b.scope("single_blocks");
    for (int64_t i = 0; i < c.single_blocks; ++i) {
      auto si = b.scope(i);
      x = single_block(b, c, x, silu_vec, cos, sin, single_mods);
    }
  }
  img = b.slice(x, 1, c.txt_tokens, c.txt_tokens + c.img_tokens);
  {
    auto s = b.scope("final_layer");
    const ValueId ada = b.linear(silu_vec, "adaLN_modulation.1", c.hidden, 2 * c.hidden, c.bias);
    const std::vector<ValueId> ss = b.chunk(b.reshape(ada, {c.batch, 1, 2 * c.hidden}), 2, 2);
    img = modulate(b, img, Mod{ss[0], ss[1], -1});
    img = b.linear(img, "linear", c.hidden, c.in_channels, c.bias);
  }
  b.output("noise_pred", img);
  return b.finish();
}

// ---- options ----

Result<FluxConfig> read_common(const ModelOptions& o, FluxConfig c, bool tiny_dims) {
  KILN_ASSIGN_OR_RETURN(const bool tiny, o.get_bool("tiny"));
  KILN_ASSIGN_OR_RETURN(const ModelOptions::Precision p, o.get_precision());
  KILN_ASSIGN_OR_RETURN(c.batch, o.get_int("batch", 1, 4096));
  KILN_ASSIGN_OR_RETURN(c.img_tokens, o.get_int("img_tokens", 1, 1 << 20));
  KILN_ASSIGN_OR_RETURN(c.txt_tokens, o.get_int("txt_tokens", 1, 1 << 20));
  c.act = p.act;
  c.gemm = p.gemm;
  if (tiny && tiny_dims) {
    c.hidden = 64;
    c.heads = 2;
    c.head_dim = 32;
    c.mlp_hidden = c.swiglu ? 192 : 256;
    c.axes_dim = c.axes_dim.size() == 4 ? std::vector<int64_t>{8, 8, 8, 8} : std::vector<int64_t>{8, 12, 12};
    c.in_channels = c.swiglu ? 32 : 16;
    c.context_dim = 48;
    if (c.vec_in_dim) c.vec_in_dim = 24;
  }
  return c;
}

std::vector<ZooOption> with_common(std::vector<ZooOption> options) {
  for (ZooOption& o : common_zoo_options()) options.push_back(std::move(o));
  return options;
}

Result<Graph> build_flux1_dev(const ModelOptions& o) {
  FluxConfig c;
  c.name = "flux1-dev";
  KILN_ASSIGN_OR_RETURN(c, read_common(o, c, true));
  KILN_ASSIGN_OR_RETURN(c.double_blocks, o.get_int("double_blocks", 0, 1000));
  KILN_ASSIGN_OR_RETURN(c.single_blocks, o.get_int("single_blocks", 0, 1000));
  return build_flux(c);
}

Result<Graph> build_flux2_dev(const ModelOptions& o) {
  FluxConfig c;
  c.name = "flux2-dev";
  c.hidden = 6144;
  c.heads = 48;
  c.double_blocks = 8;
  c.single_blocks = 48;
  c.mlp_hidden = 18432;
  c.swiglu = true;
  c.bias = false;
  c.shared_modulation = true;
  c.axes_dim = {32, 32, 32, 32};
  c.theta = 2000;
  c.in_channels = 128;
  c.context_dim = 15360;
  c.vec_in_dim = 0;
  KILN_ASSIGN_OR_RETURN(c, read_common(o, c, true));
  KILN_ASSIGN_OR_RETURN(c.double_blocks, o.get_int("double_blocks", 0, 1000));
  KILN_ASSIGN_OR_RETURN(c.single_blocks, o.get_int("single_blocks", 0, 1000));
  return build_flux(c);
}

// A lone FLUX.1 block: inputs as torch_flux_block.py passes them (cos/sin [T + I, Dh/2] f32, text rows first).
Result<Graph> build_flux1_block(const ModelOptions& o, bool is_double) {
  FluxConfig c;
  c.name = is_double ? "flux1-double-block" : "flux1-single-block";
  KILN_ASSIGN_OR_RETURN(c, read_common(o, c, true));
  Builder b(c.name, c.act, c.gemm);
  const int64_t tokens = c.img_tokens + c.txt_tokens;
  auto inputs = [&](const char* name, Shape shape) { return b.input(name, c.act, std::move(shape), Binding::per_call); };
  ValueId img = -1, txt = -1, x = -1;
  if (is_double) {
    img = inputs("img", {c.batch, c.img_tokens, c.hidden});
    txt = inputs("txt", {c.batch, c.txt_tokens, c.hidden});
  } else {
    x = inputs("x", {c.batch, tokens, c.hidden});
  }
  const ValueId vec = inputs("vec", {c.batch, c.hidden});
  const ValueId cos = b.input("cos", DType::f32, {tokens, c.head_dim / 2}, Binding::per_call);
  const ValueId sin = b.input("sin", DType::f32, {tokens, c.head_dim / 2}, Binding::per_call);
  const ValueId silu_vec = b.silu(vec);
  if (is_double) {
    const auto [img_out, txt_out] = double_block(b, c, img, txt, silu_vec, cos, sin, {});
    b.output("img_out", img_out);
    b.output("txt_out", txt_out);
  } else {
    b.output("out", single_block(b, c, x, silu_vec, cos, sin, {}));
  }
  return b.finish();
}

}  // namespace

std::vector<ZooModel> flux_zoo_models() {
  const std::vector<ZooOption> tokens = {
      {"img_tokens", "4096", "16", "image tokens (1024x1024 px = 4096)"},
      {"txt_tokens", "512", "8", "text tokens"},
  };
  auto blocks = [&](const char* d, const char* s) {
    std::vector<ZooOption> o = {{"double_blocks", d, "1", "double-stream blocks"},
                                {"single_blocks", s, "1", "single-stream blocks"}};
    o.insert(o.end(), tokens.begin(), tokens.end());
    return with_common(o);
  };
  return {
      {{"flux1-dev",
        "FLUX.1-dev transformer: 3072 hidden, 19 double + 38 single blocks, per-block modulation (~11.9e9 params)",
        blocks("19", "38")},
       build_flux1_dev},
      {{"flux2-dev",
        "FLUX.2-dev transformer: 6144 hidden, 8 double + 48 single blocks, SwiGLU, shared modulation (~32e9 params)",
        blocks("8", "48")},
       build_flux2_dev},
      {{"flux1-double-block", "one FLUX.1 double-stream block (inputs img, txt, vec, cos, sin)", with_common(tokens)},
       [](const ModelOptions& o) { return build_flux1_block(o, true); }},
      {{"flux1-single-block", "one FLUX.1 single-stream block (inputs x = [txt, img], vec, cos, sin)",
        with_common(tokens)},
       [](const ModelOptions& o) { return build_flux1_block(o, false); }},
  };
}

}  // namespace kiln::models
