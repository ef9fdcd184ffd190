#!/usr/bin/python3
"""Hugging Face export/import against an independent PyTorch implementation.

  hf_reference.py MTRON TOOL WORKDIR ARCH
      (ARCH: gpt2, llama, moe, qwen3, qwen3moe_mixed, qwen3moe_pre_softmax or deepseek_v3)

1. trains a tiny ARCH model a few iterations (`mtron train --save`), exports it
   (`mtron export`), and checks that GPT2LMHeadModel / LlamaForCausalLM / MixtralForCausalLM
   (moe) / Qwen3ForCausalLM (qwen3: llama with --qk-layernorm) / Qwen3MoeForCausalLM
   (qwen3moe_mixed: a dense first layer, then experts, as mlp_only_layers [0];
   qwen3moe_pre_softmax: the same with --moe-router-pre-softmax, norm_topk_prob false) /
   DeepseekV3ForCausalLM (deepseek_v3: multi-latent attention, a dense first layer, sigmoid
   routing with the expert bias, groups, a scaling factor, a shared expert) written here from
   the transformers equations (torch, float64; the folder read with numpy only: transformers and
   safetensors are not installed) computes mtron's logits (rel <= 1e-5), and that greedy
   generation (`mtron generate --temperature 0`) picks the reference's argmax tokens; for the MoE
   models, that configurations the class cannot express are refused;
2. the same for a sharded export (model.safetensors.index.json) and a bfloat16 export;
3. `mtron import` of the export gives back the checkpoint's tensors bit for bit (the real
   vocabulary rows), exporting that again gives byte-identical files, and `mtron train --load`
   of the import trains exactly as `--finetune` from the original checkpoint.
"""
import filecmp
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_common import ARCH, COMMON, env, read_metrics  # noqa: E402

torch.set_default_dtype(torch.float64)
TOL = 1e-5


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        buf = raw[8 + n + b:8 + n + end]
        if e["dtype"] == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError("dtype " + e["dtype"])
        out[name] = torch.from_numpy(a.reshape(e["shape"]).astype(np.float64))
    return out


def load_hf(folder):
    cfg = json.load(open(os.path.join(folder, "config.json")))
    index = os.path.join(folder, "model.safetensors.index.json")
    w = {}
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
        for f in files:
            w.update(read_safetensors(os.path.join(folder, f)))
    else:
        w = read_safetensors(os.path.join(folder, "model.safetensors"))
    return cfg, w


def attention(q, k, v, scale=None):
    """q [H, S, D], k/v [H, S, D]: causal softmax attention (scale: 1/sqrt(D) unless given)."""
    S = q.shape[1]
    s = q @ k.transpose(1, 2) * (scale or 1 / math.sqrt(q.shape[-1]))
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    return torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v


def gpt2_logits(cfg, w, ids):
    h, H = cfg["n_embd"], cfg["n_head"]
    D, eps = h // H, cfg["layer_norm_epsilon"]
    S = len(ids)
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (h,), w[p + ".weight"], w[p + ".bias"], eps)
    gelu = lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:S]
    for i in range(cfg["n_layer"]):
        p = "transformer.h.%d." % i
        qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (t.reshape(S, H, D).transpose(0, 1) for t in qkv.split(h, -1))
        a = attention(q, k, v).transpose(0, 1).reshape(S, h)
        x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = gelu(ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = ln(x, "transformer.ln_f")
    head = w["transformer.wte.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def llama_mlp(cfg, w, p, m, prefix="mlp."):
    lin = lambda n, t: t @ w[p + prefix + "%s.weight" % n].T + w.get(p + prefix + "%s.bias" % n, 0.0)
    return lin("down_proj", torch.nn.functional.silu(lin("gate_proj", m)) * lin("up_proj", m))


def mixtral_moe(cfg, w, p, m):
    """MixtralSparseMoeBlock: softmax over all router logits, top-k, the k weights renormalised,
    each token's output the weighted sum of its experts' w2(silu(w1 x) * w3 x)."""
    k = cfg["num_experts_per_tok"]
    probs = torch.softmax(m @ w[p + "block_sparse_moe.gate.weight"].T, -1)
    top, idx = torch.topk(probs, k, -1)
    top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(m)
    for e in range(cfg["num_local_experts"]):
        x = p + "block_sparse_moe.experts.%d." % e
        y = (torch.nn.functional.silu(m @ w[x + "w1.weight"].T) * (m @ w[x + "w3.weight"].T)) @ \
            w[x + "w2.weight"].T
        weight = (top * (idx == e)).sum(-1, keepdim=True)  # 0 for tokens not routed to e
        out = out + weight * y
    return out


def qwen3_moe(cfg, w, p, m):
    """Qwen3MoeSparseMoeBlock: the router mlp.gate, softmax over all logits, top-k, the k weights
    renormalised when norm_topk_prob, each expert down_proj(silu(gate_proj x) * up_proj x)."""
    probs = torch.softmax(m @ w[p + "mlp.gate.weight"].T, -1)
    top, idx = torch.topk(probs, cfg["num_experts_per_tok"], -1)
    if cfg["norm_topk_prob"]:
        top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(m)
    for e in range(cfg["num_experts"]):
        x = p + "mlp.experts.%d." % e
        f = lambda n: m @ w[x + n + ".weight"].T
        y = (torch.nn.functional.silu(f("gate_proj")) * f("up_proj")) @ w[x + "down_proj.weight"].T
        out = out + (top * (idx == e)).sum(-1, keepdim=True) * y
    return out


def mlp_of(cfg, layer):
    """The MLP of `layer`: Mixtral's experts everywhere; Qwen3-MoE's where the layer is not in
    mlp_only_layers and (layer + 1) is a multiple of decoder_sparse_step; else the dense MLP."""
    if cfg["model_type"] == "mixtral":
        return mixtral_moe
    if cfg["model_type"] == "qwen3_moe" and layer not in cfg.get("mlp_only_layers", []) and \
            (layer + 1) % cfg.get("decoder_sparse_step", 1) == 0:
        return qwen3_moe
    return llama_mlp


def llama_logits(cfg, w, ids):
    """LlamaForCausalLM, MixtralForCausalLM, Qwen3ForCausalLM and Qwen3MoeForCausalLM (Qwen3:
    RMSNorm q_norm/k_norm over each head's head_dim, before RoPE)."""
    h, H, G = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D, eps, S = cfg["head_dim"], cfg["rms_norm_eps"], len(ids)
    bias = lambda name: w.get(name, 0.0)

    def rms(x, p):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[p + ".weight"]

    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2) / D))
    ys = cfg.get("rope_scaling")
    if ys:  # transformers' "llama3" rope_scaling (_compute_llama3_parameters)
        assert ys["rope_type"] == "llama3", ys
        f, old = ys["factor"], ys["original_max_position_embeddings"]
        lo, hi = ys["low_freq_factor"], ys["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / f, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        blended = (1 - smooth) * scaled / f + smooth * scaled
        medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
        inv = torch.where(medium, blended, scaled)
    ang = torch.arange(S)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    rot = lambda t: torch.cat([-t[..., D // 2:], t[..., :D // 2]], -1)  # rotate_half
    rope = lambda t: t * cos + rot(t) * sin
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        a = rms(x, p + "input_layernorm")
        proj = lambda n: a @ w[p + "self_attn.%s.weight" % n].T + bias(p + "self_attn.%s.bias" % n)
        q = proj("q_proj").reshape(S, H, D).transpose(0, 1)
        k = proj("k_proj").reshape(S, G, D).transpose(0, 1)
        if cfg["model_type"] in ("qwen3", "qwen3_moe"):
            q, k = rms(q, p + "self_attn.q_norm"), rms(k, p + "self_attn.k_norm")
        q, k = rope(q), rope(k)
        v = proj("v_proj").reshape(S, G, D).transpose(0, 1)
        k, v = k.repeat_interleave(H // G, 0), v.repeat_interleave(H // G, 0)  # repeat_kv
        o = attention(q, k, v).transpose(0, 1).reshape(S, H * D)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T + bias(p + "self_attn.o_proj.bias")
        m = rms(x, p + "post_attention_layernorm")
        x = x + mlp_of(cfg, i)(cfg, w, p, m)
    x = rms(x, "model.norm")
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def deepseek_moe(cfg, w, p, m):
    """DeepseekV3MoE: sigmoid scores; the choice by scores + e_score_correction_bias within the
    topk_group groups of the highest sums of their top 2; the chosen experts' sigmoid scores
    renormalised (norm_topk_prob) times routed_scaling_factor; plus the shared experts' MLP."""
    T, E, k = m.shape[0], cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    scores = torch.sigmoid(m @ w[p + "mlp.gate.weight"].T)
    choice = scores + w[p + "mlp.gate.e_score_correction_bias"]
    g = cfg["n_group"]
    group_scores = choice.view(T, g, -1).topk(2, dim=-1)[0].sum(-1)
    keep = torch.zeros(T, g, dtype=torch.bool)
    keep.scatter_(1, group_scores.topk(cfg["topk_group"], dim=-1)[1], True)
    choice = choice.masked_fill(~keep.repeat_interleave(E // g, dim=1), 0.0)
    idx = choice.topk(k, dim=-1)[1]
    top = scores.gather(1, idx)
    top = top / (top.sum(-1, keepdim=True) + 1e-20) * cfg["routed_scaling_factor"]
    out = torch.zeros_like(m)
    for e in range(E):
        x = p + "mlp.experts.%d." % e
        f = lambda n: m @ w[x + n + ".weight"].T
        y = (torch.nn.functional.silu(f("gate_proj")) * f("up_proj")) @ w[x + "down_proj.weight"].T
        out = out + (top * (idx == e)).sum(-1, keepdim=True) * y
    if cfg["n_shared_experts"]:
        out = out + llama_mlp(cfg, w, p + "mlp.shared_experts.", m, prefix="")
    return out


def deepseek_logits(cfg, w, ids):
    """DeepseekV3ForCausalLM (transformers' modeling_deepseek_v3 equations, rope_interleave):
    multi-latent attention, dense layers below first_k_dense_replace, DeepseekV3MoE above; the
    MTP layers (model.layers.N + k) are not part of the causal LM."""
    h, H, S, eps = cfg["hidden_size"], cfg["num_attention_heads"], len(ids), cfg["rms_norm_eps"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    kvr = cfg["kv_lora_rank"]

    def rms(x, p):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[p + ".weight"]

    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, dr, 2) / dr))
    scale, attn = 1 / math.sqrt(dn + dr), 1.0
    ys = cfg.get("rope_scaling")
    if ys:  # transformers' "yarn" rope_scaling and DeepseekV3Attention's softmax scale
        assert ys["rope_type"] == "yarn", ys
        f, base = ys["factor"], cfg["rope_theta"]
        mscale = lambda m: 1.0 if f <= 1 else 0.1 * m * math.log(f) + 1.0
        turns = lambda r: dr * math.log(ys["original_max_position_embeddings"] /
                                        (r * 2 * math.pi)) / (2 * math.log(base))
        lo = max(math.floor(turns(ys["beta_fast"])), 0)
        hi = min(math.ceil(turns(ys["beta_slow"])), dr - 1)
        ramp = ((torch.arange(dr // 2, dtype=torch.float32) - lo) / max(hi - lo, 1e-3)).clamp(0, 1)
        extrapolate = 1 - ramp
        inv = inv / f * (1 - extrapolate) + inv * extrapolate
        attn = mscale(ys["mscale"]) / mscale(ys["mscale_all_dim"])
        scale = scale * mscale(ys["mscale_all_dim"]) ** 2
    ang = torch.arange(S)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos()] * 2, -1)[:, None] * attn
    sin = torch.cat([ang.sin()] * 2, -1)[:, None] * attn

    def rope(t):  # t [S, n, dr], interleaved pairs: de-interleave, then rotate_half
        t = t.reshape(S, t.shape[1], dr // 2, 2).transpose(-1, -2).reshape(S, t.shape[1], dr)
        return t * cos + torch.cat([-t[..., dr // 2:], t[..., :dr // 2]], -1) * sin

    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        a = rms(x, p + "input_layernorm")
        lin = lambda n, t: t @ w[p + "self_attn.%s.weight" % n].T
        if cfg["q_lora_rank"]:
            q = lin("q_b_proj", rms(lin("q_a_proj", a), p + "self_attn.q_a_layernorm"))
        else:
            q = lin("q_proj", a)
        q_nope, q_pe = q.reshape(S, H, dn + dr).split([dn, dr], -1)
        ckv, k_pe = lin("kv_a_proj_with_mqa", a).split([kvr, dr], -1)
        kv = lin("kv_b_proj", rms(ckv, p + "self_attn.kv_a_layernorm")).reshape(S, H, dn + dv)
        k_nope, v = kv.split([dn, dv], -1)
        q = torch.cat([q_nope, rope(q_pe)], -1).transpose(0, 1)
        k = torch.cat([k_nope, rope(k_pe[:, None, :]).expand(S, H, dr)], -1).transpose(0, 1)
        o = attention(q, k, v.transpose(0, 1), scale).transpose(0, 1).reshape(S, H * dv)
        x = x + lin("o_proj", o)
        m = rms(x, p + "post_attention_layernorm")
        moe = i >= cfg["first_k_dense_replace"]
        x = x + (deepseek_moe(cfg, w, p, m) if moe else llama_mlp(cfg, w, p, m))
    x = rms(x, "model.norm")
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def reference_logits(folder, ids):
    cfg, w = load_hf(folder)
    f = {"gpt2": gpt2_logits, "deepseek_v3": deepseek_logits}.get(cfg["model_type"], llama_logits)
    return f(cfg, w, torch.tensor(ids))


def run(cmd, stdout_only=False):
    p = subprocess.run(cmd, env=env(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE if stdout_only else subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        sys.exit("failed (exit %d): %s" % (p.returncode, " ".join(cmd)))
    return p.stdout


def mtron_logits(tool, ck, ids, work):
    out = os.path.join(work, "logits.bin")
    run([tool, "logits", ck, out] + [str(i) for i in ids])
    return torch.from_numpy(np.fromfile(out, dtype="<f4").astype(np.float64)).reshape(len(ids), -1)


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def main():
    mtron, tool, work, arch = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = COMMON + ARCH[arch]
    ck = os.path.join(work, "ck")
    run([mtron, "train"] + model + ["--train-iters", "3", "--save", ck, "--save-interval", "3",
                                    "--metrics-file", os.path.join(work, "train.jsonl")])
    ids = [3, 141, 59, 265, 358, 97, 93, 238, 462, 64, 33, 83, 279, 1, 499, 0, 288, 41, 97, 169,
           399, 375, 105, 82, 9, 74, 94, 459, 230, 78, 164, 62]
    ours = mtron_logits(tool, ck, ids, work)
    ok = True

    def check(name, folder, tol):
        nonlocal ok
        r = rel(ours, reference_logits(folder, ids))
        ok &= r <= tol
        print("%s %s: logits rel %.2e (tol %.0e) %s" % (arch, name, r, tol,
                                                         "ok" if r <= tol else "FAIL"), flush=True)

    hf = os.path.join(work, "hf")
    run([mtron, "export", "--load", ck, "--output", hf])
    check("export float32", hf, TOL)
    hf_sharded = os.path.join(work, "hf_sharded")
    run([mtron, "export", "--load", ck, "--output", hf_sharded, "--max-shard-size", "200KB"])
    shards = [f for f in os.listdir(hf_sharded) if f.startswith("model-")]
    assert len(shards) > 1 and os.path.exists(os.path.join(hf_sharded, "model.safetensors.index.json"))
    check("export sharded (%d files + index)" % len(shards), hf_sharded, TOL)
    hf_bf16 = os.path.join(work, "hf_bf16")
    run([mtron, "export", "--load", ck, "--output", hf_bf16, "--dtype", "bfloat16"])
    check("export bfloat16", hf_bf16, 3e-2)

    # Greedy generation picks the reference model's argmax at every step.
    prompt = ids[:5]
    out = run([mtron, "generate", "--load", ck, "--prompt-ids", " ".join(map(str, prompt)),
               "--max-new-tokens", "12", "--temperature", "0", "--ignore-eos", "--print-ids"],
              stdout_only=True)
    gen = [int(t) for t in out.split()]
    seq = list(prompt)
    for _ in range(12):
        seq.append(int(reference_logits(hf, seq)[-1].argmax()))
    same = gen == seq
    ok &= same
    print("%s greedy generation: mtron %s, reference %s %s" % (arch, gen[5:], seq[5:],
                                                               "ok" if same else "FAIL"))

    # Import gives the checkpoint back; exporting the import gives the same files.
    for name, folder in (("import", hf), ("import sharded", hf_sharded)):
        ck2 = os.path.join(work, "ck_" + name.replace(" ", "_"))
        run([mtron, "import", "--input", folder, "--output", ck2])
        p = subprocess.run([tool, "compare", ck, ck2, "--model-only"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        ok &= p.returncode == 0
        print("%s %s: %s" % (arch, name, p.stdout.strip().splitlines()[-1]))
    ck2 = os.path.join(work, "ck_import")
    hf2 = os.path.join(work, "hf2")
    run([mtron, "export", "--load", ck2, "--output", hf2])
    same = all(filecmp.cmp(os.path.join(hf, f), os.path.join(hf2, f), shallow=False)
               for f in ("model.safetensors", "config.json"))
    ok &= same
    print("%s export(import(export)) byte-identical: %s" % (arch, same))

    # Training continues from the import exactly as from the original weights.
    a = read_metrics_of(mtron, model + ["--load", ck, "--finetune"], work, "ft")
    b = read_metrics_of(mtron, model + ["--load", ck2], work, "imp")
    same = [(r["lm_loss"], r["grad_norm"]) for r in a] == [(r["lm_loss"], r["grad_norm"]) for r in b]
    ok &= same and len(a) == 3
    print("%s train --load import == train --load original --finetune: %s (losses %s)" %
          (arch, same, " ".join("%.6f" % r["lm_loss"] for r in b)))
    if arch in REFUSALS:
        ok &= moe_refusals(mtron, work, arch)
    return 0 if ok else 1


# MoE models the exported class cannot express, and the reason export names.
REFUSALS = {
    "moe": (("--moe-router-score-function sigmoid", "MixtralForCausalLM routes by softmax"),
            ("--moe-shared-expert-intermediate-size 64",
             "MixtralForCausalLM has no shared experts"),
            ("--moe-layer-freq 2", "MixtralForCausalLM has experts in every layer"),
            ("--moe-router-pre-softmax",
             "MixtralForCausalLM renormalises the top-k probabilities"),
            ("--moe-router-load-balancing-type sinkhorn --moe-aux-loss-coeff 0",
             "MixtralForCausalLM weighs by softmax")),
    "qwen3moe_mixed": (("--moe-router-score-function sigmoid",
                        "Qwen3MoeForCausalLM routes by softmax"),
                       ("--moe-shared-expert-intermediate-size 64",
                        "Qwen3MoeForCausalLM has no shared experts")),
    "deepseek_v3": (("--moe-layer-freq ([1]+[0]+[1]*2)",
                     "DeepseekV3ForCausalLM has its dense layers first"),
                    ("--moe-router-group-topk 2",
                     "DeepseekV3ForCausalLM scores a group by its top 2 experts")),
}


def moe_refusals(mtron, work, arch):
    """MoE models the architecture cannot express: export exits 2 with the reason."""
    ok = True
    for flags, why in REFUSALS[arch]:
        ck = os.path.join(work, "refuse_" + flags.split()[0].strip("-"))
        run([mtron, "train"] + COMMON + ARCH[arch] + flags.split() +
            ["--train-iters", "1", "--save", ck, "--save-interval", "1",
             "--metrics-file", ck + ".jsonl"])
        p = subprocess.run([mtron, "export", "--load", ck, "--output", ck + "_hf"], env=env(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        good = p.returncode == 2 and why in p.stdout and not os.path.exists(ck + "_hf")
        ok &= good
        print("export of an MoE model with %s: exit %d, %s %s" % (
            flags, p.returncode, p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "",
            "ok" if good else "FAIL"))
    return ok


def read_metrics_of(mtron, args, work, tag):
    m = os.path.join(work, tag + ".jsonl")
    run([mtron, "train"] + args + ["--train-iters", "3", "--metrics-file", m])
    return read_metrics(m)


if __name__ == "__main__":
    sys.exit(main())
