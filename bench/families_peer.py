"""PyTorch peer for `titan bench families`: one decoder model, written the
usual PyTorch way (nn.Linear projections, RoPE, grouped-query matmul attention
with an additive causal / sliding-window mask, a gated FFN), with the switches
that tell the Hugging Face families apart, trained with torch.optim.AdamW on
random tokens, f32 or bf16 autocast. Prints one JSON line with the median step.

titan passes every hyper-parameter from its own config of the family's
flavor, so both sides train the same architecture:
  Llama 3 / Mistral  pre-norms, SwiGLU (Mistral: a window on every layer)
  Qwen 2             plus q/k/v biases
  Gemma 2            (1 + w) norms before and after each sublayer, GeGLU (tanh GELU),
                     embeddings x sqrt(dim), scores x query_pre_attn_scalar^-1/2,
                     attention soft-cap 50 and final soft-cap 30, even layers sliding
  Gemma 3            Gemma 2 without soft-caps, per-head (1 + w) q/k norms, every 6th
                     layer global; local layers rotate with their own RoPE base
  OLMo 2             post-norms only, q/k norms over the whole projections
  Phi-3              fused qkv_proj and gate_up_proj (as Hugging Face stores them), a window
  Muse Glimmer       (1 + w) pre- and post-norms (post eps 1e-8), scaleless q/k and embedding
                     norms, queries x 43.78 / sqrt(head_dim), a sigmoid gate before o_proj,
                     NoPE layers, logits 20 tanh(m z / 20), final norm scaling by w

DeepSeek-V3, gpt-oss and Qwen3.5, whose layers this decoder cannot express
(latent attention and experts with sigmoid or biased routing, sinks and clamped
SwiGLU experts, Gated DeltaNet), train tests/reference's plain-PyTorch model of
the family instead (shipped beside this script as reference/, written from
Hugging Face's and TorchTitan's definitions for the parity tests; run here in
f32): nn.Parameter matmuls, matmul attention, a loop over experts, and the
delta rule as its token-by-token recurrence. titan passes that model's config
as JSON (--reference-family, --reference-config).

Usage: families_peer.py --dim 256 --layers 6 --heads 8 --kv-heads 4 --head-dim 32 --hidden 768
         --vocab 2048 --seq 256 --batch 4 --steps 6 --warmup 2 --threads 2 --dtype f32|bf16
         [--windows 128,0,...] [--local-rope 1,0,...] [family switches: see --help]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps, offset):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * (weight + offset)


class ScalelessNorm(torch.nn.Module):
    def __init__(self, eps):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


class Norm(torch.nn.Module):
    def __init__(self, size, eps, offset):
        super().__init__()
        # Gemma's norms scale by (1 + w) and start at w = 0; the others by w from 1.
        self.weight = torch.nn.Parameter(torch.zeros(size) if offset else torch.ones(size))
        self.eps, self.offset = eps, offset

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps, self.offset)


def rope(x, cos, sin, half):
    """x [B, H, S, D]; cos, sin [S, D / 2]."""
    if half:  # rotate_half: pairs (i, i + D/2)
        x0, x1 = x.chunk(2, dim=-1)
        return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    x0, x1 = x[..., 0::2], x[..., 1::2]  # interleaved pairs (2i, 2i + 1)
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def softcap(x, cap):
    return cap * torch.tanh(x / cap) if cap > 0 else x


class Attention(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        dim, heads, kv_heads, d = a.dim, a.heads, a.kv_heads, a.head_dim
        if a.fused_projections:
            self.qkv_proj = torch.nn.Linear(dim, (heads + 2 * kv_heads) * d, bias=a.qkv_bias)
        else:
            self.q_proj = torch.nn.Linear(dim, heads * d, bias=a.qkv_bias)
            self.k_proj = torch.nn.Linear(dim, kv_heads * d, bias=a.qkv_bias)
            self.v_proj = torch.nn.Linear(dim, kv_heads * d, bias=a.qkv_bias)
        self.o_proj = torch.nn.Linear(heads * d, dim, bias=False)
        if a.qk_norm == "head":
            self.q_norm = Norm(d, a.qk_norm_eps, a.qk_norm_offset)
            self.k_norm = Norm(d, a.qk_norm_eps, a.qk_norm_offset)
        elif a.qk_norm == "whole":
            self.q_norm = Norm(heads * d, a.qk_norm_eps, a.qk_norm_offset)
            self.k_norm = Norm(kv_heads * d, a.qk_norm_eps, a.qk_norm_offset)
        elif a.qk_norm == "scaleless":
            self.q_norm, self.k_norm = ScalelessNorm(a.qk_norm_eps), ScalelessNorm(a.qk_norm_eps)
        if a.output_gate:
            self.o_gate = torch.nn.Linear(dim, heads * d, bias=False)

    def forward(self, x, cos, sin, mask, rotate=True):
        a = self.a
        b, s, _ = x.shape
        if a.fused_projections:
            q, k, v = self.qkv_proj(x).split([a.heads * a.head_dim, a.kv_heads * a.head_dim,
                                              a.kv_heads * a.head_dim], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if a.qk_norm == "whole":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, s, a.heads, a.head_dim).transpose(1, 2)
        k = k.view(b, s, a.kv_heads, a.head_dim).transpose(1, 2)
        v = v.view(b, s, a.kv_heads, a.head_dim).transpose(1, 2)
        if a.qk_norm in ("head", "scaleless"):
            q, k = self.q_norm(q), self.k_norm(k)
        if a.query_scale != 1.0:
            q = q * a.query_scale
        half = a.rope_style == "half"
        if rotate:
            q, k = rope(q, cos, sin, half), rope(k, cos, sin, half)
        groups = a.heads // a.kv_heads
        if groups > 1:  # grouped-query attention: each kv head serves `groups` query heads
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = softcap(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(a.scale_dim), a.attn_softcap) + mask
        out = torch.matmul(torch.softmax(scores.float(), dim=-1).type_as(q), v)
        out = out.transpose(1, 2).reshape(b, s, a.heads * a.head_dim)
        if a.output_gate:
            out = out * torch.sigmoid(self.o_gate(x))
        return self.o_proj(out)


class FeedForward(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        if a.fused_projections:
            self.gate_up_proj = torch.nn.Linear(a.dim, 2 * a.hidden, bias=False)
        else:
            self.gate_proj = torch.nn.Linear(a.dim, a.hidden, bias=False)
            self.up_proj = torch.nn.Linear(a.dim, a.hidden, bias=False)
        self.down_proj = torch.nn.Linear(a.hidden, a.dim, bias=False)

    def forward(self, x):
        if self.a.fused_projections:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        act = F.gelu(gate, approximate="tanh") if self.a.activation == "gelu_tanh" else F.silu(gate)
        return self.down_proj(act * up)


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.attention, self.feed_forward = Attention(a), FeedForward(a)
        norm = lambda: Norm(a.dim, a.eps, a.norm_offset)  # noqa: E731
        identity = torch.nn.Identity
        self.attention_norm = norm() if a.pre_norms else identity()
        self.ffn_norm = norm() if a.pre_norms else identity()
        post_eps = a.post_norm_eps if a.post_norm_eps > 0 else a.eps
        self.post_attention_norm = Norm(a.dim, post_eps, a.norm_offset) if a.post_norms else identity()
        self.post_ffn_norm = Norm(a.dim, post_eps, a.norm_offset) if a.post_norms else identity()

    def forward(self, x, cos, sin, mask, rotate=True):
        x = x + self.post_attention_norm(self.attention(self.attention_norm(x), cos, sin, mask, rotate))
        return x + self.post_ffn_norm(self.feed_forward(self.ffn_norm(x)))


class Model(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.embed = torch.nn.Embedding(a.vocab, a.dim)
        if a.tie:  # as titan initialises a tied table, so the first logits are of a sane size
            torch.nn.init.normal_(self.embed.weight, std=a.dim ** -0.5)
        self.layers = torch.nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = Norm(a.dim, a.eps, a.final_norm_offset if a.final_norm_offset >= 0 else a.norm_offset)
        self.output = None if a.tie else torch.nn.Linear(a.dim, a.vocab, bias=False)

    def forward(self, ids, tables, masks):
        h = self.embed(ids)
        if self.a.embedding_scale > 0:  # Gemma: a tensor of the hidden dtype, as Hugging Face does
            h = h * torch.tensor(self.a.embedding_scale, dtype=h.dtype)
        if self.a.embedding_norm_eps > 0:
            h = ScalelessNorm(self.a.embedding_norm_eps)(h)
        for i, layer in enumerate(self.layers):
            cos, sin = tables[self.a.local_rope[i]]
            h = layer(h, cos, sin, masks[self.a.windows[i]], self.a.rope_layers[i] == 1)
        h = self.norm(h)
        weight = self.embed.weight if self.output is None else self.output.weight
        logits = F.linear(h, weight)
        if self.a.output_multiplier != 1.0:  # Muse Glimmer: cap(m z), in f32 as TorchTitan's head
            logits = logits.float() * self.a.output_multiplier
        return softcap(logits, self.a.final_softcap)


def rope_table(theta, head_dim, seq):
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2).double() / head_dim)
    angles = torch.outer(torch.arange(seq).double(), freqs)
    return torch.cos(angles).float(), torch.sin(angles).float()


def additive_mask(seq, window):
    """[S, S]: 0 where query i sees key j (j <= i, and i - j < window when window > 0), else -inf."""
    i, j = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
    visible = (j <= i) & ((i - j < window) if window > 0 else True)
    return torch.zeros(seq, seq).masked_fill(~visible, float("-inf"))


def chunked_gated_delta_rule(q, k, v, g, beta, chunk=64):
    """The gated delta rule in chunks (the WY / UT form), as PyTorch code:
    q, k [B, T, H, Dk] (normalised, q scaled), v [B, T, H, Dv], g (log decay)
    and beta [B, T, H] -> out [B, T, H, Dv]. Within a chunk with cumulative
    decays G_i = exp(sum_{s<=i} g_s) and entry state S0, the corrections
    d_i = beta_i (v_i - G_i S0^T k_i - sum_{j<i} (G_i / G_j)(k_i . k_j) d_j)
    solve one unit lower-triangular system, d = u - w S0; then
    o_i = G_i S0^T q_i + sum_{j<=i} (G_i / G_j)(q_i . k_j) d_j and the state
    carries G_C S0 + sum_j (G_C / G_j) k_j d_j^T to the next chunk."""
    b, t, h, dk = k.shape
    dv = v.shape[-1]
    pad = (-t) % chunk
    q, k, v = (F.pad(x.transpose(1, 2), (0, 0, 0, pad)) for x in (q, k, v))  # [B, H, T', D]
    g, beta = (F.pad(x.transpose(1, 2), (0, pad)) for x in (g, beta))  # [B, H, T']
    n = (t + pad) // chunk
    q, k, v = (x.reshape(b, h, n, chunk, -1) for x in (q, k, v))
    g, beta = g.reshape(b, h, n, chunk).cumsum(-1), beta.reshape(b, h, n, chunk)
    causal = torch.ones(chunk, chunk, dtype=torch.bool).tril()
    decay = (g[..., :, None] - g[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # G_i / G_j, j <= i
    k_beta = k * beta[..., None]
    eye = torch.eye(chunk, dtype=q.dtype)
    lower = (k_beta @ k.transpose(-1, -2) * decay).masked_fill(causal.logical_not().logical_or(eye.bool()), 0.0)
    solve = lambda rhs: torch.linalg.solve_triangular(eye + lower, rhs, upper=False, unitriangular=True)  # noqa: E731
    u, w = solve(v * beta[..., None]), solve(k_beta * g.exp()[..., None])
    state, outs = torch.zeros(b, h, dk, dv, dtype=q.dtype), []
    for c in range(n):
        gc = g[:, :, c]
        d = u[:, :, c] - w[:, :, c] @ state
        scores = q[:, :, c] @ k[:, :, c].transpose(-1, -2) * decay[:, :, c]
        outs.append((q[:, :, c] * gc.exp()[..., None]) @ state + scores @ d)
        carried = (k[:, :, c] * (gc[..., -1:] - gc).exp()[..., None]).transpose(-1, -2) @ d
        state = state * gc[..., -1].exp()[..., None, None] + carried
    return torch.cat(outs, dim=2)[:, :, :t].transpose(1, 2)


def qwen3_5_chunked_mixer(qwen3_5):
    """qwen3_5.GatedDeltaNet.forward with the delta rule in chunks: the same
    projections, short convs, gates and norm, as a PyTorch user would run the
    layer (the reference's token loop is the definition, not a way to train)."""

    def forward(self, x):
        c = self.c
        b, t, _ = x.shape
        hk, hv, dk, dv = c["n_key_heads"], c["n_value_heads"], c["key_head_dim"], c["value_head_dim"]
        q = qwen3_5.causal_conv_silu(self.in_proj_q(x), self.conv_q).view(b, t, hk, dk)
        k = qwen3_5.causal_conv_silu(self.in_proj_k(x), self.conv_k).view(b, t, hk, dk)
        v = qwen3_5.causal_conv_silu(self.in_proj_v(x), self.conv_v).view(b, t, hv, dv)
        g = -torch.exp(self.A_log) * F.softplus(self.in_proj_a(x) + self.dt_bias)
        beta = torch.sigmoid(self.in_proj_b(x))
        q, k = q.repeat_interleave(hv // hk, dim=2), k.repeat_interleave(hv // hk, dim=2)
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dk)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        o = qwen3_5.rms(chunked_gated_delta_rule(q, k, v, g, beta)) * self.norm
        z = self.in_proj_z(x).view(b, t, hv, dv)
        return self.out_proj((o * z * torch.sigmoid(z)).reshape(b, t, hv * dv))

    return forward


def reference_model(family, config):
    """tests/reference's model of `family` built from `config`, in f32, and its
    loss(ids, labels). The references build their RoPE tables in float64 (for
    the parity tests); here the tables are rounded to f32 so every op runs in
    f32."""
    here = os.path.dirname(os.path.abspath(__file__))
    # Installed: share/titan/bench/reference; in the source tree: tests/reference.
    sys.path[:0] = [os.path.join(here, "reference"), os.path.join(here, "..", "tests", "reference")]
    if family == "deepseek_v3":
        import deepseek_v3
        model = deepseek_v3.Decoder(config)
    elif family == "gpt_oss":
        import gpt_oss

        class Decoder(gpt_oss.Decoder):
            def tables(self, length):
                cos, sin = super().tables(length)
                return cos.float(), sin.float()

        model = Decoder(config)
    elif family == "qwen3_5":
        import qwen3_5

        def rotate(self, x, rotary):  # qwen3_5.Attention.rotate with f32 tables
            half = rotary // 2
            inv = 1.0 / qwen3_5.ROPE_THETA ** (torch.arange(half, dtype=torch.float64) * 2 / rotary)
            angles = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * inv[None, :]
            cos, sin = torch.cos(angles).float()[None, :, None, :], torch.sin(angles).float()[None, :, None, :]
            x1, x2, rest = x[..., :half], x[..., half:rotary], x[..., rotary:]
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)

        qwen3_5.Attention.rotate = rotate
        qwen3_5.GatedDeltaNet.forward = qwen3_5_chunked_mixer(qwen3_5)
        model = qwen3_5.Decoder(config, config["vocab_size"])
    else:
        raise SystemExit(f"families_peer.py: no reference model of {family}")
    model = model.float()
    # The references leave weights to their tests; draw them as a fresh model would be.
    offset_norms = family == "qwen3_5"  # its norms scale by (1 + w)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.fill_(0.0 if offset_norms else 1.0)
            elif name.endswith("A_log"):
                p.uniform_(math.log(1.0), math.log(16.0))
            elif p.dim() == 1:
                p.zero_()
            else:
                p.normal_(0.0, 0.02)
    return model, model.loss


def int_list(text):
    return [int(v) for v in text.split(",")] if text else []


def main():
    p = argparse.ArgumentParser()
    for name in ["seq", "batch", "steps", "warmup", "threads"]:
        p.add_argument("--" + name, type=int, required=True)
    for name in ["dim", "layers", "heads", "kv-heads", "head-dim", "hidden", "vocab"]:
        p.add_argument("--" + name, type=int, default=0, help="required without --reference-family")
    p.add_argument("--reference-family", default="", help="deepseek_v3, gpt_oss or qwen3_5: train tests/reference's model")
    p.add_argument("--reference-config", default="{}", help="its config (JSON), from titan's")
    p.add_argument("--dtype", choices=["f32", "bf16"], required=True)
    p.add_argument("--eps", type=float, default=1e-5, help="the blocks' and final norm's epsilon")
    p.add_argument("--norm-offset", type=float, default=0.0, help="norms scale by (offset + w): Gemma's 1")
    p.add_argument("--pre-norms", type=int, default=1)
    p.add_argument("--post-norms", type=int, default=0)
    p.add_argument("--qk-norm", choices=["none", "head", "whole", "scaleless"], default="none")
    p.add_argument("--qk-norm-eps", type=float, default=1e-6)
    p.add_argument("--qk-norm-offset", type=float, default=0.0)
    p.add_argument("--qkv-bias", type=int, default=0)
    p.add_argument("--fused-projections", type=int, default=0, help="Phi-3's qkv_proj and gate_up_proj")
    p.add_argument("--activation", choices=["silu", "gelu_tanh"], default="silu")
    p.add_argument("--scale-dim", type=float, default=0.0, help="scores scale by scale_dim^-1/2 (0: head_dim)")
    p.add_argument("--attn-softcap", type=float, default=0.0)
    p.add_argument("--final-softcap", type=float, default=0.0)
    p.add_argument("--embedding-scale", type=float, default=0.0)
    p.add_argument("--rope-style", choices=["half", "interleaved"], default="half")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--local-rope-theta", type=float, default=0.0)
    p.add_argument("--windows", default="", help="per layer: sliding window (0 = causal only)")
    p.add_argument("--local-rope", default="", help="per layer: 1 = rotate with the local RoPE base")
    p.add_argument("--tie", type=int, default=0)
    p.add_argument("--rope-layers", default="", help="per layer: 0 = no RoPE (Muse Glimmer's NoPE layers)")
    p.add_argument("--query-scale", type=float, default=1.0, help="queries times this after their norm")
    p.add_argument("--output-gate", type=int, default=0, help="sigmoid(o_gate x) times the attention output")
    p.add_argument("--embedding-norm-eps", type=float, default=0.0, help="> 0: scaleless norm of the embeddings")
    p.add_argument("--post-norm-eps", type=float, default=0.0, help="the post-norms' epsilon (0: --eps)")
    p.add_argument("--final-norm-offset", type=float, default=-1.0, help="the final norm's offset (< 0: --norm-offset)")
    p.add_argument("--output-multiplier", type=float, default=1.0, help="logits m z inside the final soft-cap")
    p.add_argument("--no-mkldnn", action="store_true",
                   help="run as on a CPU without AVX-512, where PyTorch does not use oneDNN for bf16 matmuls")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.mkldnn.enabled = not a.no_mkldnn
    torch.manual_seed(0)
    if a.reference_family:
        config = json.loads(a.reference_config)
        model, loss_of = reference_model(a.reference_family, config)
        a.vocab = config["vocab_size"]
    else:
        model, loss_of = decoder_model(a)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    times = []
    for step in range(a.warmup + a.steps):
        ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = loss_of(ids[:, :-1], ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    times.sort()
    median = times[len(times) // 2]
    print(json.dumps({"median_step_seconds": median, "tokens_per_second": a.batch * a.seq / median,
                      "loss": float(loss), "parameters": sum(t.numel() for t in model.parameters()),
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


def decoder_model(a):
    """The switchable decoder of the families above, and its loss(ids, labels)."""
    assert min(a.dim, a.layers, a.heads, a.kv_heads, a.head_dim, a.hidden, a.vocab) > 0, \
        "--dim, --layers, --heads, --kv-heads, --head-dim, --hidden and --vocab are required"
    a.windows = int_list(a.windows) or [0] * a.layers
    a.local_rope = int_list(a.local_rope) or [0] * a.layers
    a.rope_layers = int_list(a.rope_layers) or [1] * a.layers
    assert len(a.windows) == a.layers and len(a.local_rope) == a.layers and len(a.rope_layers) == a.layers, \
        "one window, local-rope and rope flag per layer"
    assert a.heads % a.kv_heads == 0
    if a.scale_dim <= 0:
        a.scale_dim = a.head_dim
    model = Model(a)
    tables = {0: rope_table(a.rope_theta, a.head_dim, a.seq)}
    if any(a.local_rope):
        tables[1] = rope_table(a.local_rope_theta, a.head_dim, a.seq)
    masks = {w: additive_mask(a.seq, w) for w in set(a.windows)}

    def loss_of(ids, labels):
        logits = model(ids, tables, masks)
        return F.cross_entropy(logits.float().reshape(-1, a.vocab), labels.reshape(-1))

    return model, loss_of


if __name__ == "__main__":
    main()
