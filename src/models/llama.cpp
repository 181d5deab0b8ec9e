// Llama-3-8B decoder (Hugging Face LlamaForCausalLM layout and weight names): RMSNorm (eps 1e-5) pre-norm
// layers with grouped-query attention (32 query, 8 KV heads of 128), half-split RoPE (theta 500000, no
// Llama-3.1 frequency scaling) from position_ids, and a SwiGLU MLP (14336) written as HF does:
// down_proj(silu(gate_proj(x)) * up_proj(x)).
//
// mode=prefill runs `seq` tokens with causal attention; mode=decode runs one token against a KV cache of
// `past` tokens given as past_k.<i> / past_v.<i> [B, 8, past, 128]. Both return the new cache as
// present_k.<i> / present_v.<i>. embed=1 adds the token embedding, the final norm and lm_head (logits out);
// embed=0 takes and returns hidden states.
#include <cstdint>
#include <string>

#include "models/zoo.h"

namespace kiln::models {
namespace {

struct LlamaConfig {
  int64_t hidden = 4096, heads = 32, kv_heads = 8, head_dim = 128, intermediate = 14336, vocab = 128256;
  double eps = 1e-5, theta = 500000;
  int64_t layers = 1, seq = 512, past = 512, batch = 1;
  bool embed = false, decode = false;
  DType act = DType::bf16;
  GemmPrecision gemm;
};

Graph build_llama(const LlamaConfig& c) {
  Builder b("llama3-8b", c.act, c.gemm);
  const int64_t s_len = c.decode ? 1 : c.seq;
  ValueId x = -1;
  ValueId ids = -1;
  if (c.embed) {
    ids = b.input("input_ids", DType::i32, {c.batch, s_len}, Binding::per_call);
  } else {
    x = b.input("hidden_states", c.act, {c.batch, s_len, c.hidden}, Binding::per_call);
  }
  const ValueId positions = b.input("position_ids", DType::f32, {s_len}, Binding::per_call);
  std::vector<ValueId> past_k, past_v;
  if (c.decode) {
    for (int64_t i = 0; i < c.layers; ++i) {
      const Shape cache = {c.batch, c.kv_heads, c.past, c.head_dim};
      past_k.push_back(b.input("past_k." + std::to_string(i), c.act, cache, Binding::per_call));
      past_v.push_back(b.input("past_v." + std::to_string(i), c.act, cache, Binding::per_call));
    }
  }
  const auto [cos, sin] = rope_tables(b, b.reshape(positions, {s_len, 1}), {c.head_dim}, c.theta);  // [S, Dh/2]
  {
    auto sm = b.scope("model");
    if (c.embed) x = b.gather(b.weight("embed_tokens.weight", {c.vocab, c.hidden}), ids, 0);  // [B, S, D]
    auto sl = b.scope("layers");
    for (int64_t i = 0; i < c.layers; ++i) {
      auto si = b.scope(i);
      Builder::Fp8Region fp8(&b);
      ValueId attn;
      {
        const ValueId h = b.rms_norm(x, "input_layernorm.weight", c.hidden, c.eps);
        auto sa = b.scope("self_attn");
        auto heads = [&](ValueId y, int64_t n) { return split_heads(b, y, n, c.head_dim); };
        const ValueId q = b.rope(heads(b.linear(h, "q_proj", c.hidden, c.heads * c.head_dim, false), c.heads), cos, sin, "half");
        ValueId k = b.rope(heads(b.linear(h, "k_proj", c.hidden, c.kv_heads * c.head_dim, false), c.kv_heads), cos, sin, "half");
        ValueId v = heads(b.linear(h, "v_proj", c.hidden, c.kv_heads * c.head_dim, false), c.kv_heads);
        if (c.decode) {
          k = b.concat({past_k[i], k}, 2);
          v = b.concat({past_v[i], v}, 2);
        }
        b.output("present_k." + std::to_string(i), k);
        b.output("present_v." + std::to_string(i), v);
        attn = b.linear(merge_heads(b, b.attention(q, k, v, true)), "o_proj", c.heads * c.head_dim, c.hidden, false);
      }
      x = b.add(x, attn);
      const ValueId h = b.rms_norm(x, "post_attention_layernorm.weight", c.hidden, c.eps);
      auto sp = b.scope("mlp");
      const ValueId gate = b.silu(b.linear(h, "gate_proj", c.hidden, c.intermediate, false));
      const ValueId up = b.linear(h, "up_proj", c.hidden, c.intermediate, false);
      x = b.add(x, b.linear(b.mul(gate, up), "down_proj", c.intermediate, c.hidden, false));
    }
  }
  if (c.embed) {
    {
      auto sm = b.scope("model");
      x = b.rms_norm(x, "norm.weight", c.hidden, c.eps);
    }
    b.output("logits", b.linear(x, "lm_head", c.hidden, c.vocab, false));
  } else {
    b.output("hidden_states_out", x);
  }
  return b.finish();
}

Result<Graph> build_llama3_8b(const ModelOptions& o) {
  LlamaConfig c;
  KILN_ASSIGN_OR_RETURN(const bool tiny, o.get_bool("tiny"));
  KILN_ASSIGN_OR_RETURN(const ModelOptions::Precision p, o.get_precision());
  c.act = p.act;
  c.gemm = p.gemm;
  KILN_ASSIGN_OR_RETURN(c.batch, o.get_int("batch", 1, 4096));
  KILN_ASSIGN_OR_RETURN(c.layers, o.get_int("layers", 0, 1000));
  KILN_ASSIGN_OR_RETURN(c.embed, o.get_bool("embed"));
  KILN_ASSIGN_OR_RETURN(const std::string mode, o.get_choice("mode", {"prefill", "decode"}));
  c.decode = mode == "decode";
  KILN_ASSIGN_OR_RETURN(c.seq, o.get_int("seq", 1, 1 << 20));
  KILN_ASSIGN_OR_RETURN(c.past, o.get_int("past", 0, 1 << 20));
  if (tiny) {
    c.hidden = 64;
    c.heads = 4;
    c.kv_heads = 2;
    c.head_dim = 16;
    c.intermediate = 128;
    c.vocab = 256;
  }
  return build_llama(c);
}

}  // namespace

std::vector<ZooModel> llama_zoo_models() {
  std::vector<ZooOption> options = {
      {"layers", "1", "", "decoder layers (32 = the whole model)"},
      {"embed", "0", "", "1: token embedding in, final norm and lm_head out (logits); 0: hidden states in and out"},
      {"mode", "prefill", "", "prefill (seq tokens, causal) | decode (one token against a KV cache of past tokens)"},
      {"seq", "512", "8", "prefill: tokens"},
      {"past", "512", "8", "decode: KV-cache length"},
  };
  for (ZooOption& o : common_zoo_options()) options.push_back(std::move(o));
  return {{{"llama3-8b", "Llama-3-8B decoder: 4096 hidden, 32 heads / 8 KV heads, SwiGLU 14336 (~8.03e9 params with "
                         "layers=32,embed=1)",
            options},
           build_llama3_8b}};
}

}  // namespace kiln::models
