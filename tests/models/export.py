#!/usr/bin/env python3
"""Exports kiln's ONNX test models with PyTorch's own exporter (tests/onnx/ reads them).

Each model is a tiny transformer block in float32 on the CPU with fixed seeds. For each, OUT/NAME/ holds:
  model.onnx            the exported model (one has its weights in model.onnx.data: external data)
  inputs.safetensors    the inputs the test feeds, named as the ONNX graph inputs
  outputs.safetensors   PyTorch's outputs for them, named as the ONNX graph outputs
  meta.json             exporter, opset, symbolic dims and their values, torch version
Run on a machine with torch, onnx and onnxscript:  python3 export.py --out DIR
(KILN_EXPORT_TEXT=1 also writes each graph's text form beside it, for reading). The committed files came from
torch 2.11.0 and onnx 1.23.1 (see each meta.json); copy OUT/*/ into tests/data/onnx/ to refresh them.
"""
import argparse, json, math, os, shutil, struct, sys, tempfile, traceback
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- safetensors, written by hand (no dependency on the safetensors package) ----

def save_safetensors(path, tensors):
    names = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL"}
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = t.numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


# ---- a FLUX.1-style double-stream block, structured as kiln's zoo:flux1-double-block (src/models/flux.cpp) ----
# Module names follow the BFL layout the zoo uses (img_mod.lin, img_attn.qkv, img_attn.norm.query_norm.scale,
# img_attn.proj, img_mlp.0, img_mlp.2). RoPE, RMSNorm and the modulation are written as the peer benchmark
# (shared/bench/torch_flux_block.py) writes them.

def flux_rope(x, cos, sin):  # x: [B, H, N, Dh], interleaved pairs; cos/sin [N, Dh/2]
    x = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = x[..., 0], x[..., 1]
    o0 = x0 * cos - x1 * sin
    o1 = x0 * sin + x1 * cos
    return torch.stack([o0, o1], -1).flatten(-2)


class FluxRMS(nn.Module):
    def __init__(s, d):
        super().__init__()
        s.scale = nn.Parameter(1 + 0.1 * torch.randn(d))

    def forward(s, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * s.scale


class FluxQKNorm(nn.Module):
    def __init__(s, d):
        super().__init__()
        s.query_norm = FluxRMS(d)
        s.key_norm = FluxRMS(d)


class FluxMod(nn.Module):
    def __init__(s, d):
        super().__init__()
        s.lin = nn.Linear(d, 6 * d)


class FluxAttn(nn.Module):
    def __init__(s, d, hd):
        super().__init__()
        s.qkv = nn.Linear(d, 3 * d)
        s.norm = FluxQKNorm(hd)
        s.proj = nn.Linear(d, d)


class FluxDouble(nn.Module):
    def __init__(s, d=64, heads=2, mlp=256):
        super().__init__()
        s.d, s.h, s.hd = d, heads, d // heads
        for p in ("img", "txt"):
            setattr(s, p + "_mod", FluxMod(d))
            setattr(s, p + "_attn", FluxAttn(d, s.hd))
            setattr(s, p + "_mlp", nn.Sequential(nn.Linear(d, mlp), nn.GELU(approximate="tanh"), nn.Linear(mlp, d)))

    def pre(s, p, x, silu_vec):
        m = getattr(s, p + "_mod").lin(silu_vec)[:, None, :].chunk(6, -1)
        xn = F.layer_norm(x, (s.d,), eps=1e-6) * (1 + m[1]) + m[0]
        attn = getattr(s, p + "_attn")
        q, k, v = attn.qkv(xn).chunk(3, -1)
        heads = lambda t: t.view(x.shape[0], x.shape[1], s.h, s.hd).transpose(1, 2)
        return attn.norm.query_norm(heads(q)), attn.norm.key_norm(heads(k)), heads(v), m

    def post(s, p, x, a, m):
        x = x + m[2] * getattr(s, p + "_attn").proj(a)
        xn = F.layer_norm(x, (s.d,), eps=1e-6) * (1 + m[4]) + m[3]
        return x + m[5] * getattr(s, p + "_mlp")(xn)

    def forward(s, img, txt, vec, cos, sin):
        silu_vec = F.silu(vec)
        qi, ki, vi, mi = s.pre("img", img, silu_vec)
        qt, kt, vt, mt = s.pre("txt", txt, silu_vec)
        q = flux_rope(torch.cat([qt, qi], 2), cos, sin)
        k = flux_rope(torch.cat([kt, ki], 2), cos, sin)
        v = torch.cat([vt, vi], 2)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(img.shape[0], -1, s.d)
        at, ai = a[:, : txt.shape[1]], a[:, txt.shape[1]:]
        return s.post("img", img, ai, mi), s.post("txt", txt, at, mt)


def flux_inputs(d=64, heads=2, ni=16, nt=8):
    g = torch.Generator().manual_seed(1)
    hd = d // heads
    ang = torch.rand(nt + ni, hd // 2, generator=g) * 6.28
    return {"img": torch.randn(1, ni, d, generator=g), "txt": torch.randn(1, nt, d, generator=g),
            "vec": torch.randn(1, d, generator=g), "cos": ang.cos(), "sin": ang.sin()}


# ---- a Llama-style decoder layer: RMSNorm, RoPE (rotate_half), GQA, causal mask, SwiGLU ----

class LlamaRMS(nn.Module):
    def __init__(s, d, eps=1e-5):
        super().__init__()
        s.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        s.eps = eps

    def forward(s, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return s.weight * (x * torch.rsqrt(var + s.eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaLayer(nn.Module):
    def __init__(s, d=64, heads=4, kv_heads=2, inter=128, theta=10000.0):
        super().__init__()
        s.d, s.h, s.kvh, s.hd = d, heads, kv_heads, d // heads
        s.input_layernorm = LlamaRMS(d)
        s.post_attention_layernorm = LlamaRMS(d)
        s.q_proj = nn.Linear(d, heads * s.hd, bias=False)
        s.k_proj = nn.Linear(d, kv_heads * s.hd, bias=False)
        s.v_proj = nn.Linear(d, kv_heads * s.hd, bias=False)
        s.o_proj = nn.Linear(heads * s.hd, d, bias=False)
        s.gate_proj = nn.Linear(d, inter, bias=False)
        s.up_proj = nn.Linear(d, inter, bias=False)
        s.down_proj = nn.Linear(inter, d, bias=False)
        s.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, s.hd, 2).float() / s.hd), persistent=False)

    def forward(s, x):
        b, n, _ = x.shape
        pos = torch.arange(n, dtype=torch.float32)
        freqs = torch.outer(pos, s.inv_freq)
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos(), emb.sin()
        h = s.input_layernorm(x)
        q = s.q_proj(h).view(b, n, s.h, s.hd).transpose(1, 2)
        k = s.k_proj(h).view(b, n, s.kvh, s.hd).transpose(1, 2)
        v = s.v_proj(h).view(b, n, s.kvh, s.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = s.h // s.kvh
        k = k[:, :, None].expand(b, s.kvh, rep, n, s.hd).reshape(b, s.h, n, s.hd)
        v = v[:, :, None].expand(b, s.kvh, rep, n, s.hd).reshape(b, s.h, n, s.hd)
        mask = torch.full((n, n), float("-inf")).triu(1)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(s.hd) + mask
        a = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, n, s.d)
        x = x + s.o_proj(a)
        h = s.post_attention_layernorm(x)
        return x + s.down_proj(F.silu(s.gate_proj(h)) * s.up_proj(h))


# ---- a GPT-2 style block: hand-written LayerNorm at opset 14 decomposes, gelu_new (tanh), causal SDPA ----

class Gpt2Block(nn.Module):
    def __init__(s, d=64, heads=4):
        super().__init__()
        s.d, s.h = d, heads
        s.ln_1 = nn.LayerNorm(d)
        s.c_attn = nn.Linear(d, 3 * d)
        s.c_proj = nn.Linear(d, d)
        s.ln_2 = nn.LayerNorm(d)
        s.c_fc = nn.Linear(d, 4 * d)
        s.mlp_proj = nn.Linear(4 * d, d)
        with torch.no_grad():
            for ln in (s.ln_1, s.ln_2):
                ln.weight.add_(0.1 * torch.randn(d))
                ln.bias.add_(0.1 * torch.randn(d))

    def forward(s, x):
        b, n, _ = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(s.d, dim=2)
        heads = lambda t: t.view(b, n, s.h, s.d // s.h).transpose(1, 2)
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + s.c_proj(a.transpose(1, 2).reshape(b, n, s.d))
        h = s.c_fc(s.ln_2(x))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + s.mlp_proj(h)


# ---- a ViT block with a Conv patch embedding, class token, position embedding, erf GELU ----

class VitBlock(nn.Module):
    def __init__(s, d=64, heads=4, patch=4, image=16, channels=3):
        super().__init__()
        s.d, s.h = d, heads
        s.patch_embed = nn.Conv2d(channels, d, patch, stride=patch)
        n = (image // patch) ** 2 + 1
        s.cls_token = nn.Parameter(0.1 * torch.randn(1, 1, d))
        s.pos_embed = nn.Parameter(0.1 * torch.randn(1, n, d))
        s.norm1 = nn.LayerNorm(d, eps=1e-6)
        s.qkv = nn.Linear(d, 3 * d)
        s.proj = nn.Linear(d, d)
        s.norm2 = nn.LayerNorm(d, eps=1e-6)
        s.fc1 = nn.Linear(d, 4 * d)
        s.fc2 = nn.Linear(4 * d, d)

    def forward(s, pixels):
        x = s.patch_embed(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([s.cls_token.expand(x.shape[0], -1, -1), x], 1) + s.pos_embed
        b, n, _ = x.shape
        qkv = s.qkv(s.norm1(x)).reshape(b, n, 3, s.h, s.d // s.h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, s.d)
        x = x + s.proj(a)
        return x + s.fc2(F.gelu(s.fc1(s.norm2(x))))


# ---- export ----

def export_one(out_dir, name, model, inputs, output_names, dynamo, opset, external=False, dynamic_axes=None,
               dims=None):
    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    model.eval()
    args = tuple(inputs.values())
    with torch.no_grad():
        outputs = model(*args)
    if not isinstance(outputs, tuple):
        outputs = (outputs,)
    used = "dynamo" if dynamo else "torchscript"
    tmp = tempfile.mkdtemp()
    tmp_path = os.path.join(tmp, "model.onnx")
    kwargs = dict(input_names=list(inputs), output_names=output_names, opset_version=opset)
    try:
        if dynamo:
            torch.onnx.export(model, args, tmp_path, dynamo=True, **kwargs)
        else:
            torch.onnx.export(model, args, tmp_path, dynamo=False, dynamic_axes=dynamic_axes,
                              do_constant_folding=True, **kwargs)
    except Exception:
        traceback.print_exc()
        if dynamo:
            raise
        print(f"{name}: torchscript exporter failed; falling back to dynamo", flush=True)
        used = "dynamo (torchscript failed)"
        kwargs["opset_version"] = max(opset, 18)
        torch.onnx.export(model, args, tmp_path, dynamo=True, **kwargs)
    import onnx
    m = onnx.load(tmp_path)  # pulls in any external data the exporter wrote
    for f in os.listdir(path):
        os.remove(os.path.join(path, f))
    target = os.path.join(path, "model.onnx")
    if external:
        onnx.save_model(m, target, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx.data", size_threshold=0)
    else:
        onnx.save_model(m, target)
    shutil.rmtree(tmp)
    save_safetensors(os.path.join(path, "inputs.safetensors"), inputs)
    save_safetensors(os.path.join(path, "outputs.safetensors"), dict(zip(output_names, outputs)))
    opsets = {o.domain or "ai.onnx": o.version for o in m.opset_import}
    graph_inputs = [i.name for i in m.graph.input]
    graph_outputs = [o.name for o in m.graph.output]
    meta = {"exporter": used, "opsets": opsets, "torch": torch.__version__, "onnx": onnx.__version__,
            "external_data": external, "dims": dims or {}, "inputs": graph_inputs, "outputs": graph_outputs}
    with open(os.path.join(path, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    if os.environ.get("KILN_EXPORT_TEXT"):  # the graph as text, for reading (not committed)
        try:
            with open(os.path.join(out_dir, name + ".txt"), "w") as f:
                f.write(onnx.printer.to_text(onnx.load(target, load_external_data=False).graph))
        except Exception as e:
            print(f"   no text form: {e}", flush=True)
    ops = Counter(n.op_type for n in m.graph.node)
    size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    print(f"== {name}: {used}, opsets {opsets}, {len(m.graph.node)} nodes, {size} bytes, inputs {graph_inputs}, "
          f"outputs {graph_outputs}", flush=True)
    print("   ops: " + ", ".join(f"{k}x{v}" for k, v in sorted(ops.items())), flush=True)
    try:  # an independent check of the export, where onnxruntime is installed
        import onnxruntime as ort
        sess = ort.InferenceSession(target, providers=["CPUExecutionProvider"])
        got = sess.run(None, {k: v.numpy() for k, v in inputs.items()})
        err = max(float((torch.from_numpy(g) - o).abs().max()) for g, o in zip(got, outputs))
        print(f"   onnxruntime max abs error vs torch: {err:.3g}", flush=True)
    except ImportError:
        pass
    except Exception as e:
        print(f"   onnxruntime failed: {e}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.out, exist_ok=True)
    print(f"torch {torch.__version__}", flush=True)
    jobs = {
        "flux_double": lambda: (FluxDouble(), flux_inputs(), ["img_out", "txt_out"], False, 17, {}),
        "flux_double_dynamo": lambda: (FluxDouble(), flux_inputs(), ["img_out", "txt_out"], True, 18, {}),
        "llama_layer": lambda: (LlamaLayer(), {"x": torch.randn(1, 8, 64, generator=torch.Generator().manual_seed(2))},
                                ["y"], False, 17, {}),
        "gpt2_block": lambda: (Gpt2Block(), {"x": torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(3))},
                               ["y"], False, 14,
                               dict(external=True, dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}},
                                    dims={"batch": 2, "seq": 8})),
        "vit_block": lambda: (VitBlock(), {"pixels": torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(4))},
                              ["y"], True, 18, {}),
    }
    failed = []
    for name, make in jobs.items():
        if a.only and name not in a.only.split(","):
            continue
        torch.manual_seed(0)
        try:
            model, inputs, outs, dynamo, opset, extra = make()
            export_one(a.out, name, model, inputs, outs, dynamo, opset, **extra)
        except Exception:
            traceback.print_exc()
            failed.append(name)
    print("FAILED: " + ", ".join(failed) if failed else "ALL EXPORTED", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
