#!/usr/bin/python3
"""Independent PyTorch implementation of mtron's GPT/Llama model, used as the numerical oracle.
With --multi-latent-attention the attention is DeepSeek's multi-latent attention, written here
from Megatron-Core's MLASelfAttention (latent down/up projections, decoupled RoPE on a shared
key, value head dim != query/key head dim).

Reads the dump written by ref_dump (weights, micro-batches, mtron's logits/loss/gradients and
10 training-step losses), rebuilds the model from the weights with torch autograd, and checks:
  - logits of micro-batch 0 (rel-norm error <= 1e-5),
  - loss of iteration 1 (rel <= 1e-5),
  - every parameter gradient (rel-norm error <= 1e-4),
  - 10 AdamW steps (torch.optim.AdamW, clip_grad_norm_, Megatron's sample-based LR schedule
    written here independently): each loss rel <= 1e-4.
MoE models (--num-experts) are Megatron-Core's MoE layer written here from its definitions:
the router (softmax or sigmoid scores, group-limited top-k, top-k scaling factor, Sinkhorn
routing, the aux-loss-free expert bias for the choice only, updated after each global batch from the routed
tokens per expert), the experts and the shared expert, and the aux_loss / seq_aux_loss terms of
the gradient; the final expert biases are compared too. --qk-layernorm normalises each head's
queries and keys before RoPE.
--mtp-num-layers D adds Megatron-Core's multi-token prediction (DeepSeek-V3), written here from
its definition: depth k embeds the input tokens rolled left by k positions, concatenates
enorm(embedding) and hnorm(previous depth's output; depth 1: the decoder's output after its
final norm), projects them with eh_proj, runs one transformer layer and its final_layernorm,
then the shared output layer against the labels rolled left by k (the rolled-in last positions
carry no loss); the gradient adds mtp_loss_scaling_factor / D times the depths' mean losses,
while the reported loss stays the main model's; each depth's mean loss is compared too.
With --hidden-dropout / --attention-dropout > 0 (mtron's default, Megatron's 0.1) every
training forward applies dropout with masks regenerated here by an independent Philox4x32-10
(keyed and indexed as mtron's model/dropout.h documents), so the checks cover dropout too.
Learned absolute position embeddings take Megatron's position ids: 0, 1, ... down each sequence,
with --reset-position-ids from 0 again after each end-of-document token, rolled with the tokens
at each MTP depth. --eod-mask-loss (Megatron's GPTDataset loss mask) leaves out the positions whose input token is
the NullTokenizer's end-of-document id (vocab size - 1), at each MTP depth the rolled input's,
and every loss is the mean over the global batch's positions left in.
Exit code 1 on any failure. Run with Debian's /usr/bin/python3 (python3-torch, python3-numpy).
"""
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
DTYPES = {0: np.float32, 1: np.int32, 2: np.float64, 3: np.uint8}


def read_dump(path):
    out = {}
    with open(path, "rb") as f:
        assert f.read(8) == b"MTRONREF", "not an mtron reference dump"
        while True:
            head = f.read(4)
            if not head:
                break
            (n,) = struct.unpack("<I", head)
            name = f.read(n).decode()
            (dt,) = struct.unpack("<B", f.read(1))
            (nd,) = struct.unpack("<I", f.read(4))
            dims = struct.unpack("<%dq" % nd, f.read(8 * nd))
            count = int(np.prod(dims)) if nd else 1
            arr = np.frombuffer(f.read(count * np.dtype(DTYPES[dt]).itemsize), dtype=DTYPES[dt])
            out[name] = arr.reshape(dims)
    return out


def parse_flags(text):
    toks = text.split()
    cfg = {}
    i = 0
    while i < len(toks):
        key = toks[i][2:].replace("-", "_")
        if i + 1 < len(toks) and not toks[i + 1].startswith("--"):
            cfg[key] = toks[i + 1]
            i += 2
        else:
            cfg[key] = True
            i += 1
    return cfg


M64 = (1 << 64) - 1


def rng_key(seed, name):
    """mtron's rng_key: splitmix64(seed) xor FNV-1a(name), as two 32-bit words."""
    z = (seed + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    h = 0xcbf29ce484222325
    for ch in name.encode():
        h = ((h ^ ch) * 0x100000001b3) & M64
    z ^= h
    return z & 0xFFFFFFFF, z >> 32


def philox4x32(key, c0, c1):
    """Philox4x32-10 of counters (c0, c1, 0, 0), vectorised over numpy uint64 arrays."""
    lo = np.uint64(0xFFFFFFFF)
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    c = [c0.astype(np.uint64), c1.astype(np.uint64), np.zeros_like(c0, np.uint64),
         np.zeros_like(c0, np.uint64)]
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & lo, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & lo]
        k0 = (k0 + np.uint64(0x9E3779B9)) & lo
        k1 = (k1 + np.uint64(0xBB67AE85)) & lo
    return c


def dropout_mask(key, index, p):
    """Multipliers (0 or 1/(1-p), float32) of elements `index` (uint64 array) of a stream:
    element e is word e % 4 of Philox block e / 4, kept iff (word >> 8) / 2^24 >= p."""
    block = index >> np.uint64(2)
    words = philox4x32(key, block & np.uint64(0xFFFFFFFF), block >> np.uint64(32))
    lane = (index & np.uint64(3)).astype(np.int64)
    w = np.choose(lane, words)
    u = (w >> np.uint64(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    keep = np.float32(1) / (np.float32(1) - np.float32(p))
    return torch.tensor(np.where(u >= np.float32(p), keep, np.float32(0)).astype(np.float32))


def sinkhorn_route(logits, k):
    """Megatron's sinkhorn_load_balancing in training (S-BASE): the top k of the Sinkhorn-
    balanced exp(logits) (written here from moe_utils.sinkhorn: d0 and d1 alternately, eps 1e-8,
    until the mean change of d1 is at most 1e-4), weighted by the sigmoid (k = 1) or the softmax
    over all experts (k > 1) of the logits: (experts [T, k], weights [T, k])."""
    with torch.no_grad():
        cost = torch.exp(logits.float())
        d0 = torch.ones(cost.shape[0])
        d1 = torch.ones(cost.shape[1])
        error, d1_old = 1e9, d1
        while error > 1e-4:
            d0 = (1 / d0.shape[0]) / ((d1 * cost).sum(1) + 1e-8)
            d1 = (1 / d1.shape[0]) / ((d0.unsqueeze(1) * cost).sum(0) + 1e-8)
            error = torch.mean(torch.abs(d1_old - d1))
            d1_old = d1
        idx = torch.topk(d1 * cost * d0.unsqueeze(1), k, dim=1)[1]
    probs = torch.sigmoid(logits) if k == 1 else torch.softmax(logits, dim=-1)
    return idx, probs.gather(1, idx)


class Model:
    def __init__(self, cfg, weights):
        self.L = int(cfg["num_layers"])
        self.h = int(cfg["hidden_size"])
        self.H = int(cfg["num_attention_heads"])
        self.G = int(cfg["num_query_groups"]) if "group_query_attention" in cfg else self.H
        self.D = int(cfg.get("kv_channels", self.h // self.H))
        self.qk_norm = "qk_layernorm" in cfg
        self.aux = 0.0
        self.E = int(cfg.get("num_experts", 0))
        if self.E:
            self.topk = int(cfg.get("moe_router_topk", 2))
            freq = cfg.get("moe_layer_freq", "1")
            # Megatron's moe_freq_type: an integer, or a list expression (digits, [](),+* only)
            assert all(c in "0123456789,[]()+*" for c in freq)
            self.moe_layers = (eval(freq) if "[" in freq else
                               [int(l % int(freq) == 0) for l in range(int(cfg["num_layers"]))])
            self.sigmoid = cfg.get("moe_router_score_function", "softmax") == "sigmoid"
            self.groups = int(cfg.get("moe_router_num_groups", 0))
            self.group_topk = int(cfg.get("moe_router_group_topk", 0))
            self.scale = float(cfg.get("moe_router_topk_scaling_factor", 0))
            self.pre_softmax = "moe_router_pre_softmax" in cfg
            self.aux_coeff = float(cfg.get("moe_aux_loss_coeff", 0))
            balancing = cfg.get("moe_router_load_balancing_type", "aux_loss")
            self.seq_aux = balancing == "seq_aux_loss"
            self.sinkhorn = balancing == "sinkhorn"
            self.rate = (float(cfg.get("moe_router_bias_update_rate", 1e-3))
                         if "moe_router_enable_expert_bias" in cfg else None)
        self.mla = "multi_latent_attention" in cfg
        if self.mla:
            self.q_rank = int(cfg.get("q_lora_rank", 0))  # 0: None
            self.kv_rank = int(cfg.get("kv_lora_rank", 32))
            self.dn = int(cfg.get("qk_head_dim", 128))
            self.dr = int(cfg.get("qk_pos_emb_head_dim", 64))
            self.dv = int(cfg.get("v_head_dim", 128))
            # YaRN (MLA's default rope type): the paper's frequency ramp and attention factor,
            # DeepSeek's original length 4096 and betas 32 and 1
            self.yarn_factor = float(cfg.get("rotary_scaling_factor", 1))
            if cfg.get("rope_type", "yarn") == "rope":
                self.yarn_factor = 1.0
            self.yarn_mscale = float(cfg.get("mscale", 1))
            self.yarn_mscale_all_dim = float(cfg.get("mscale_all_dim", 0))
        self.mtp = int(cfg.get("mtp_num_layers", 0))
        self.mtp_factor = float(cfg.get("mtp_loss_scaling_factor", 0.1))
        if self.E:  # the MTP layers (indices L + k) are of the last layer's kind, as Megatron's
            self.moe_layers = self.moe_layers + self.moe_layers[-1:] * self.mtp
            self.bias = {l: torch.zeros(self.E) for l in range(len(self.moe_layers))
                         if self.moe_layers[l]}
            self.counts = {l: torch.zeros(self.E) for l in self.bias}
        self.swiglu = "swiglu" in cfg
        self.squared_relu = "squared_relu" in cfg
        self.rms = cfg.get("normalization", "LayerNorm") == "RMSNorm"
        self.rope = cfg.get("position_embedding_type", "learned_absolute") == "rope"
        self.rotary_base = cfg.get("rotary_base", "10000")
        self.interleaved = "rotary_interleaved" in cfg
        self.rope_scaling = (float(cfg.get("rope_scaling_factor", 8))
                             if "use_rope_scaling" in cfg else None)
        self.vocab = int(cfg["vocab_size"])
        self.eod = self.vocab - 1 if "eod_mask_loss" in cfg else None
        self.reset_eod = self.vocab - 1 if "reset_position_ids" in cfg else None
        self.eps = float(cfg.get("norm_epsilon", 1e-5))
        self.p = {k[len("param/"):]: torch.tensor(v.copy(), dtype=torch.float32,
                                                   requires_grad=True)
                  for k, v in weights.items() if k.startswith("param/")}
        self.tied = "untie_embeddings_and_output_weights" not in cfg
        self.S = int(cfg["seq_length"])
        self.seed = int(cfg["seed"])
        self.p_hidden = float(cfg.get("hidden_dropout", 0.1))  # mtron's (Megatron's) default
        self.p_attn = float(cfg.get("attention_dropout", 0.1))

    def hidden_drop(self, x, it, sample0, layer, kind):
        """Hidden dropout of x [S, B, h]: element ((sample0 + b) S + s) h + f."""
        if it is None or self.p_hidden == 0:
            return x
        S, B, h = x.shape
        s, b, f = np.meshgrid(np.arange(S), np.arange(B), np.arange(h), indexing="ij")
        idx = (((sample0 + b) * self.S + s) * h + f).astype(np.uint64)
        key = rng_key(self.seed, "dropout/%s/layer %d/iteration %d" % (kind, layer, it))
        return x * dropout_mask(key, idx, self.p_hidden)

    def attn_drop(self, probs, it, sample0, layer):
        """Attention dropout of probs [B, H, S, S]: element (((sample0 + b) H + h) S + i) S + j."""
        if it is None or self.p_attn == 0:
            return probs
        B, H, S, _ = probs.shape
        b, hh, i, j = np.meshgrid(np.arange(B), np.arange(H), np.arange(S), np.arange(S),
                                  indexing="ij")
        idx = ((((sample0 + b) * H + hh) * self.S + i) * self.S + j).astype(np.uint64)
        key = rng_key(self.seed, "dropout/attention/layer %d/iteration %d" % (layer, it))
        return probs * dropout_mask(key, idx, self.p_attn)

    def norm(self, x, prefix):
        w = self.p[prefix + ".weight"]
        if self.rms:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w
        return F.layer_norm(x, (x.shape[-1],), w, self.p[prefix + ".bias"], self.eps)

    def mlp(self, x, pre):
        f = self.lin(x, pre + "linear_fc1")
        if self.swiglu:
            gate, up = f.chunk(2, dim=-1)
            act = F.silu(gate) * up
        elif self.squared_relu:  # Megatron's squared_relu
            act = torch.pow(F.relu(f), 2)
        else:
            act = F.gelu(f, approximate="tanh")
        return self.lin(act, pre + "linear_fc2")

    def route(self, logits, layer):
        """Megatron's topk_routing_with_score_function: (experts [T, k], weights [T, k])."""
        T, E, k = logits.shape[0], self.E, self.topk
        if self.sinkhorn:  # every forward here is a training forward
            return sinkhorn_route(logits, k)
        if self.sigmoid:
            scores = torch.sigmoid(logits)
        else:  # pre-softmax: the probabilities over all experts are chosen and kept as weights
            scores = torch.softmax(logits, dim=-1) if self.pre_softmax else logits
        sel = scores.detach() + (self.bias[layer] if self.rate is not None else 0)
        if self.group_topk:
            per = E // self.groups
            grouped = sel.view(T, self.groups, per).sort(dim=-1, descending=True, stable=True)[0]
            gscore = grouped[:, :, : k // self.group_topk].sum(-1)
            chosen = gscore.sort(dim=-1, descending=True, stable=True)[1][:, : self.group_topk]
            keep = torch.zeros(T, self.groups, dtype=torch.bool)
            keep.scatter_(1, chosen, True)
            sel = sel.masked_fill(~keep.repeat_interleave(per, dim=1), float("-inf"))
        idx = sel.sort(dim=-1, descending=True, stable=True)[1][:, :k]
        s = scores.gather(1, idx)
        if self.sigmoid:
            w = s / (s.sum(-1, keepdim=True) + 1e-20) if k > 1 else s
        else:
            w = s if self.pre_softmax else torch.softmax(s, dim=-1)
        if self.scale:
            w = w * self.scale
        return idx, w

    def aux_loss(self, logits, B):
        """aux_loss / seq_aux_loss of one micro-batch (with its coefficient), Megatron's:
        coeff E / (k T^2) sum_i (sum_t p[t, i]) count_i, count_i from the plain top-k of the
        aux scores p, per sequence and averaged over them for seq_aux_loss."""
        if not self.aux_coeff:
            return 0.0
        T, E, k = logits.shape[0], self.E, self.topk
        p = torch.sigmoid(logits) if self.sigmoid else torch.softmax(logits, -1)
        if self.sigmoid:
            p = p / (p.sum(-1, keepdim=True) + 1e-20)
        top = p.detach().sort(dim=-1, descending=True, stable=True)[1][:, :k]
        cnt = torch.zeros(T, E).scatter_(1, top, 1.0)
        nb = B if self.seq_aux else 1
        Ts = T // nb
        rows = torch.arange(T) % nb  # sequence-major rows: token row n = s B + b
        total = 0.0
        for b in range(nb):
            m = rows == b
            total = total + (p[m].sum(0) * cnt[m].sum(0)).sum()
        return self.aux_coeff * E / (k * Ts * Ts * nb) * total

    def moe(self, x, pre, layer, count):
        """The MoE MLP of x [S, B, h]: routed experts (+ shared expert); adds the micro-batch's
        aux loss to self.aux."""
        S, B, h = x.shape
        t = x.reshape(S * B, h)
        logits = t @ self.p[pre + "router.weight"].t()
        idx, w = self.route(logits, layer)
        if count:
            self.counts[layer] += torch.zeros(self.E).scatter_add_(
                0, idx.reshape(-1), torch.ones(idx.numel()))
        self.aux = self.aux + self.aux_loss(logits, B)
        outs = torch.stack([self.mlp(t, pre + "experts.local_experts.%d." % e)
                            for e in range(self.E)])  # [E, T, h]
        rows = torch.arange(t.shape[0])
        y = sum(w[:, j:j + 1] * outs[idx[:, j], rows] for j in range(self.topk))
        if pre + "shared_experts.linear_fc1.weight" in self.p:
            y = y + self.mlp(t, pre + "shared_experts.")
        return y.reshape(S, B, h)

    def update_expert_bias(self):
        """Megatron's get_updated_expert_bias, after each global batch."""
        if not self.E or self.rate is None:
            return
        for l, c in self.counts.items():
            self.bias[l] = self.bias[l] + torch.sign(c.mean() - c) * self.rate
            self.counts[l] = torch.zeros(self.E)

    def lin(self, x, name):
        y = x @ self.p[name + ".weight"].reshape(-1, x.shape[-1]).t()
        if name + ".bias" in self.p:
            y = y + self.p[name + ".bias"].reshape(-1)
        return y

    @staticmethod
    def yarn_attention_factor(factor, m):
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    def mla_softmax_scale(self):
        m = self.yarn_attention_factor(self.yarn_factor, self.yarn_mscale_all_dim)
        return m * m / math.sqrt(self.dn + self.dr)

    def rotary(self, x, S, yarn=False):  # x [S, B, n, R]: every channel rotated
        R = x.shape[-1]
        base = float(self.rotary_base)
        pos_freq = base ** (torch.arange(0, R, 2, dtype=torch.float32) / R)
        inv_freq, attn = 1.0 / pos_freq, 1.0
        if self.rope_scaling and not yarn:
            # Llama 3.x (Megatron's RotaryEmbedding._apply_scaling): wavelengths above the
            # original context 8192 divided by the factor, below 8192 / 4 kept, blended between
            f = self.rope_scaling
            wavelen = 2 * math.pi / inv_freq
            scaled = torch.where(wavelen > 8192, inv_freq / f, inv_freq)
            smooth = (8192 / wavelen - 1) / (4 - 1)
            blended = (1 - smooth) * scaled / f + smooth * scaled
            medium = ~(wavelen < 8192 / 4) * ~(wavelen > 8192)
            inv_freq = torch.where(medium, blended, scaled)
        if yarn and self.yarn_factor != 1:
            f = self.yarn_factor

            def dim_of(rotations):  # the pair index that turns `rotations` times over 4096
                return R * math.log(4096 / (rotations * 2 * math.pi)) / (2 * math.log(base))

            lo, hi = max(math.floor(dim_of(32)), 0), min(math.ceil(dim_of(1)), R - 1)
            if lo == hi:
                hi += 0.001
            ramp = ((torch.arange(R // 2, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)
            inv_freq = inv_freq / f * ramp + inv_freq * (1 - ramp)
            attn = (self.yarn_attention_factor(f, self.yarn_mscale) /
                    self.yarn_attention_factor(f, self.yarn_mscale_all_dim))
        freqs = torch.outer(torch.arange(S, dtype=torch.float32), inv_freq)
        if self.interleaved and not yarn:  # Megatron's rotary_interleaved: pairs (2i, 2i + 1)
            emb = torch.stack((freqs, freqs), dim=-1).view(S, R)[:, None, None, :]
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return (x * emb.cos() + torch.stack((-x2, x1), dim=-1).view(x.shape) * emb.sin()) * attn
        emb = torch.cat([freqs, freqs], dim=-1)[:, None, None, :]
        x1, x2 = x[..., : R // 2], x[..., R // 2:]
        return (x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()) * attn

    def logits(self, tokens, it=None, sample0=0, count=False):
        """tokens [S, B] (sequence-major, as mtron); it: the training iteration (dropout on),
        sample0: the global-batch index of sequence 0; it None: no dropout; count: add the
        routed pairs to the expert bias counts."""
        return self.head(self.decoder(tokens, it, sample0, count))

    def decoder(self, tokens, it, sample0, count):
        """The decoder's output [S, B, h] after its final norm (arguments as logits')."""
        S, B = tokens.shape
        t = torch.tensor(tokens, dtype=torch.long)
        x = self.p["embedding.word_embeddings.weight"][t]
        if not self.rope:
            x = x + self.p["embedding.position_embeddings.weight"][self.position_ids(t)]
        x = self.hidden_drop(x, it, sample0, -1, "embedding")
        x = self.block(x, [(l, "decoder.layers.%d." % l) for l in range(self.L)], it, sample0,
                       count)
        return self.norm(x, "decoder.final_layernorm")

    def position_ids(self, t):
        """The learned position embedding's indices [S, B] of input tokens t: 0, 1, ... down each
        sequence; with --reset-position-ids from 0 again after each end-of-document token."""
        S, B = t.shape
        pos = torch.arange(S)[:, None].repeat(1, B)
        if self.reset_eod is not None:
            for b in range(B):
                for i in (t[:, b] == self.reset_eod).nonzero().flatten().tolist():
                    pos[i + 1:, b] = torch.arange(S - i - 1)
        return pos

    def block(self, x, layers, it, sample0, count):
        """Transformer layers (layer index, parameter prefix) over x [S, B, h]."""
        S, B = x.shape[:2]
        hpg = self.H // self.G
        for l, pre in layers:
            a = self.norm(x, pre + "input_layernorm")
            if self.mla:
                q, k, v = self.mla_qkv(a, pre + "self_attention.", S, B)
            else:
                qkv = self.lin(a, pre + "self_attention.linear_qkv").view(S, B, self.G, hpg + 2,
                                                                           self.D)
                q = qkv[:, :, :, :hpg, :].reshape(S, B, self.H, self.D)
                k = qkv[:, :, :, hpg, :]
                v = qkv[:, :, :, hpg + 1, :]
                if self.qk_norm:
                    q = self.norm(q, pre + "self_attention.q_layernorm")
                    k = self.norm(k, pre + "self_attention.k_layernorm")
                if self.rope:
                    q, k = self.rotary(q, S), self.rotary(k, S)
                k = k.repeat_interleave(hpg, dim=2)
                v = v.repeat_interleave(hpg, dim=2)
            qb, kb, vb = (z.permute(1, 2, 0, 3) for z in (q, k, v))  # [B, H, S, D or Dv]
            scale = self.mla_softmax_scale() if self.mla else 1 / math.sqrt(q.shape[-1])
            s = qb @ kb.transpose(-1, -2) * scale
            mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
            s = s.masked_fill(mask, float("-inf"))
            probs = self.attn_drop(torch.softmax(s, dim=-1), it, sample0, l)
            o = (probs @ vb).permute(2, 0, 1, 3).reshape(S, B, -1)
            x = x + self.hidden_drop(self.lin(o, pre + "self_attention.linear_proj"), it, sample0,
                                     l, "attention_output")
            a = self.norm(x, pre + "pre_mlp_layernorm")
            if self.E and self.moe_layers[l]:
                out = self.moe(a, pre + "mlp.", l, count)
            else:
                out = self.mlp(a, pre + "mlp.")
            x = x + self.hidden_drop(out, it, sample0, l, "mlp_output")
        return x

    def head(self, x):
        """The output layer's logits of x [S, B, h], padded columns -inf."""
        w = self.p["embedding.word_embeddings.weight" if self.tied else "output_layer.weight"]
        logits = x @ w.t()
        pad = torch.zeros(logits.shape[-1], dtype=torch.bool)
        pad[self.vocab:] = True
        return logits.masked_fill(pad, float("-inf"))

    def latent_norm(self, c, prefix):
        """MLA's q_layernorm / kv_layernorm: present with --qk-layernorm (Megatron's MLA spec)."""
        return self.norm(c, prefix) if self.qk_norm else c

    def mla_qkv(self, a, pre, S, B):
        """Multi-latent attention's q, k [S, B, H, dn + dr] and v [S, B, H, dv] from a."""
        H, dn, dr, dv = self.H, self.dn, self.dr, self.dv
        if self.q_rank > 0:
            cq = self.latent_norm(self.lin(a, pre + "linear_q_down_proj"), pre + "q_layernorm")
            q = self.lin(cq, pre + "linear_q_up_proj")
        else:
            q = self.lin(a, pre + "linear_q_proj")
        q_nope, q_pe = q.view(S, B, H, dn + dr).split([dn, dr], dim=-1)
        ckv, k_pe = self.lin(a, pre + "linear_kv_down_proj").split([self.kv_rank, dr], dim=-1)
        kv = self.lin(self.latent_norm(ckv, pre + "kv_layernorm"), pre + "linear_kv_up_proj")
        k_nope, v = kv.view(S, B, H, dn + dv).split([dn, dv], dim=-1)
        k_pe = self.rotary(k_pe[:, :, None, :], S, yarn=True).expand(S, B, H, dr)
        q = torch.cat([q_nope, self.rotary(q_pe, S, yarn=True)], dim=-1)
        k = torch.cat([k_nope, k_pe], dim=-1)
        return q, k, v

    def mtp_loss_sums(self, tokens, labels, hidden, it, sample0, count):
        """Per MTP depth, the summed token losses of the micro-batch's positions that have a
        target that many tokens further; hidden: the decoder's output after its final norm;
        count: add an MoE depth's routed pairs to the expert bias counts."""
        S = tokens.shape[0]
        t = torch.tensor(tokens, dtype=torch.long)
        y = torch.tensor(labels, dtype=torch.long)
        pos = self.position_ids(t)
        sums = []
        for k in range(self.mtp):
            t = torch.roll(t, -1, 0)
            t[-1] = 0
            y = torch.roll(y, -1, 0)
            pos = torch.roll(pos, -1, 0)  # Megatron's MTP rolls the position ids with the tokens
            pos[-1] = 0
            pre = "mtp.layers.%d." % k
            e = self.p["embedding.word_embeddings.weight"][t]
            if not self.rope:
                e = e + self.p["embedding.position_embeddings.weight"][pos]
            e = self.hidden_drop(e, it, sample0, self.L + k, "embedding")
            x = torch.cat([self.norm(e, pre + "enorm"), self.norm(hidden, pre + "hnorm")], -1)
            x = self.block(self.lin(x, pre + "eh_proj"), [(self.L + k, pre + "transformer_layer.")],
                           it, sample0, count)
            hidden = self.norm(x, pre + "final_layernorm")
            keep = S - k - 1  # positions with a target k + 1 tokens further
            lg = self.head(hidden)[:keep]
            sums.append(self.masked_sum(lg, y[:keep], t[:keep], k + 1))
        return sums

    def masked_sum(self, lg, y, t, depth):
        """The summed token losses of logits lg against labels y, leaving out (--eod-mask-loss)
        the positions whose input token t is the end-of-document id; counts the positions left
        in self.counted[depth]."""
        losses = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1), reduction="none")
        keep = torch.ones_like(losses) if self.eod is None else (t.reshape(-1) != self.eod).float()
        self.counted[depth] += int(keep.sum().item())
        return (losses * keep).sum()

    def loss_sum(self, tokens, labels, it, sample0, count=False):
        """The micro-batch's summed token losses; its aux losses go to self.aux, its MTP
        depths' summed token losses to self.mtp_sums."""
        hidden = self.decoder(tokens, it, sample0, count)
        lg = self.head(hidden)
        if self.mtp:
            sums = self.mtp_loss_sums(tokens, labels, hidden, it, sample0, count)
            self.mtp_sums = [a + b for a, b in zip(self.mtp_sums, sums)]
        return self.masked_sum(lg, torch.tensor(labels, dtype=torch.long),
                               torch.tensor(tokens, dtype=torch.long), 0)

    def objective(self, d, it, M, B, count=False):
        """(lm loss, the loss differentiated: lm loss + each micro-batch's aux losses / M + the
        MTP loss) of iteration it's global batch; each MTP depth's mean loss in self.mtp_means."""
        self.aux = 0.0
        self.mtp_sums = [0.0] * self.mtp
        self.counted = [0] * (1 + self.mtp)
        lm = sum(self.loss_sum(d["tokens/it%d/mb%d" % (it, j)], d["labels/it%d/mb%d" % (it, j)],
                               it, j * B, count) for j in range(M)) / self.counted[0]
        self.mtp_means = [s / self.counted[k + 1] for k, s in enumerate(self.mtp_sums)]
        mtp = self.mtp_factor / self.mtp * sum(self.mtp_means) if self.mtp else 0.0
        return lm, lm + self.aux / M + mtp


def megatron_lr(cfg, iteration):
    """LR of iteration `iteration` (1-based): Megatron's scheduler at (iteration-1)*GBS samples."""
    gbs = int(cfg["global_batch_size"])
    lr, min_lr = float(cfg["lr"]), float(cfg.get("min_lr", 0))
    warm = int(cfg.get("lr_warmup_iters", 0)) * gbs
    decay = int(cfg.get("lr_decay_iters", cfg["train_iters"])) * gbs
    n = (iteration - 1) * gbs
    if warm > 0 and n <= warm:
        return lr * n / warm
    style = cfg.get("lr_decay_style", "linear")
    if style == "constant":
        return lr
    if n > decay:
        return min_lr
    r = (n - warm) / (decay - warm)
    coeff = 1.0 - r if style == "linear" else 0.5 * (math.cos(math.pi * r) + 1.0)
    return min_lr + coeff * (lr - min_lr)


def rel_norm(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    d = read_dump(sys.argv[1])
    cfg = parse_flags(bytes(d["config"]).decode())
    m = Model(cfg, d)
    failures = []

    def check(what, err, tol):
        ok = err <= tol
        print("%-62s %.3e  (tol %.0e) %s" % (what, err, tol, "ok" if ok else "FAIL"))
        if not ok:
            failures.append(what)

    iters = int(cfg["train_iters"])
    M = len([k for k in d if k.startswith("tokens/it0/")])

    B = d["tokens/it0/mb0"].shape[1]
    lg = m.logits(d["tokens/it0/mb0"], 0, 0).detach().numpy()
    V = m.vocab
    ref_logits = d["step0/logits"].reshape(lg.shape[0], lg.shape[1], -1)
    check("logits (micro-batch 0)", rel_norm(ref_logits[:, :, :V], lg[:, :, :V]), 1e-5)

    loss, total = m.objective(d, 0, M, B)
    total.backward()
    check("loss (iteration 1)", abs(float(d["step0/loss"][0]) - loss.item()) / loss.item(), 1e-5)
    for k, v in enumerate(m.mtp_means):
        check("mtp_%d loss (iteration 1)" % (k + 1),
              abs(float(d["step0/mtp_losses"][k]) - v.item()) / v.item(), 1e-5)
    worst = 0.0
    for name, p in m.p.items():
        err = rel_norm(d["grad/" + name], p.grad.numpy())
        worst = max(worst, err)
        check("grad " + name, err, 1e-4)

    # 10 AdamW steps from the initial weights.
    m = Model(cfg, d)
    decay = [p for n, p in m.p.items() if not (n.endswith("bias") or p.dim() == 1)]
    no_decay = [p for n, p in m.p.items() if n.endswith("bias") or p.dim() == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(cfg["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=0.0, betas=(0.9, float(cfg.get("adam_beta2", 0.999))), eps=1e-8)
    for it in range(iters):
        lr = megatron_lr(cfg, it + 1)
        check("lr (iteration %d)" % (it + 1), abs(lr - float(d["lrs"][it])) / max(lr, 1e-12), 1e-9)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        loss, total = m.objective(d, it, M, B, count=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(list(m.p.values()), float(cfg["clip_grad"]))
        opt.step()
        m.update_expert_bias()
        check("loss (training iteration %d)" % (it + 1),
              abs(float(d["losses"][it]) - loss.item()) / loss.item(), 1e-4)
        for k, v in enumerate(m.mtp_means):
            check("mtp_%d loss (training iteration %d)" % (k + 1, it + 1),
                  abs(float(d["mtp_losses"][it, k]) - v.item()) / v.item(), 1e-4)

    for name in [k for k in d if k.startswith("expert_bias/")]:
        # decoder.layers.<l>.mlp.* or mtp.layers.<k>.transformer_layer.mlp.* (layer L + k)
        part = name[len("expert_bias/"):].split(".")
        l = int(part[2]) + (m.L if part[0] == "mtp" else 0)
        check("expert bias " + name[len("expert_bias/"):] + " (after 10 iterations)",
              float(np.abs(d[name] - m.bias[l].numpy()).max()), 1e-7)

    print("worst gradient rel-norm error %.3e" % worst)
    if failures:
        print("FAILED: %d checks" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
