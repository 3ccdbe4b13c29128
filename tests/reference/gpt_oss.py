"""PyTorch reference of gpt-oss as Hugging Face transformers computes it
(GptOssForCausalLM, modeling_gpt_oss), written from that definition in plain
float64 PyTorch: q/k/v/o projections with biases, half-rotation RoPE whose
cos and sin come from YaRN (inverse frequencies and attention factor, as
rope_scaling.py computes them), attention with one learned sink logit per
query head joining every row's softmax (and dropped after it), a sliding
window on the even layers, and a mixture of experts in every layer: a router
Linear with a bias, top-k on its logits, softmax over the k chosen; experts
whose gate_up_proj [E, dim, 2 hidden] holds the gate in its even columns and
the up projection in its odd ones (built here from titan's w1 and w3, so the
interleave is the one the Hugging Face layout has), the clamped SwiGLU
(gate clamped above at limit, up to [-limit, limit], (up + 1) * gate *
sigmoid(alpha * gate)), and biases on both projections.
Parameter names are titan's FQNs, so weights move through safetensors."""
import torch

import functional as ref
import rope_scaling
from model import Linear, RMSNorm


def interleave(gate, up):
    """gate, up [..., n] -> [..., 2n] with gate in the even columns: HF's gate_up layout."""
    return torch.stack([gate, up], dim=-1).flatten(-2)


class Attention(torch.nn.Module):
    def __init__(self, c, sliding):
        super().__init__()
        self.c, self.window = c, c["sliding_window"] if sliding else 0
        dim, h, kv, d = c["dim"], c["n_heads"], c["n_kv_heads"], c["head_dim"]
        self.wq = Linear(dim, h * d, bias=True)
        self.wk = Linear(dim, kv * d, bias=True)
        self.wv = Linear(dim, kv * d, bias=True)
        self.wo = Linear(h * d, dim, bias=c.get("output_bias", True))
        self.sinks = torch.nn.Parameter(torch.zeros(h, dtype=torch.float64))

    def forward(self, x, cos, sin):
        c = self.c
        b, s, _ = x.shape
        d = c["head_dim"]
        q = self.wq(x).view(b, s, -1, d)
        k = self.wk(x).view(b, s, -1, d)
        v = self.wv(x).view(b, s, -1, d)
        q, k = rotate_half(q, cos, sin), rotate_half(k, cos, sin)
        sinks = self.sinks if c.get("sinks", True) else None
        out = ref.attention(q, k, v, d ** -0.5, True, self.window, None, sinks=sinks)
        return self.wo(out.reshape(b, s, -1))


def rotate_half(x, cos, sin):
    """HF's _apply_rotary_emb: halves (i, i + D/2); cos, sin [S, D/2] (scaled by the attention factor)."""
    half = x.shape[-1] // 2
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)


class Router(torch.nn.Module):
    def __init__(self, dim, num_experts):
        super().__init__()
        self.gate = Linear(dim, num_experts, bias=True)


class Experts(torch.nn.Module):
    """titan's stacked weights and biases; the forward reads them in HF's layout."""

    def __init__(self, dim, hidden_dim, num_experts):
        super().__init__()
        E = num_experts
        self.w1 = torch.nn.Parameter(torch.empty(E, hidden_dim, dim, dtype=torch.float64))
        self.w2 = torch.nn.Parameter(torch.empty(E, dim, hidden_dim, dtype=torch.float64))
        self.w3 = torch.nn.Parameter(torch.empty(E, hidden_dim, dim, dtype=torch.float64))
        self.b1 = torch.nn.Parameter(torch.zeros(E, hidden_dim, dtype=torch.float64))
        self.b2 = torch.nn.Parameter(torch.zeros(E, dim, dtype=torch.float64))
        self.b3 = torch.nn.Parameter(torch.zeros(E, hidden_dim, dtype=torch.float64))

    def hf_layout(self):
        """gate_up_proj [E, dim, 2 hidden], gate_up_proj_bias [E, 2 hidden], down_proj [E, hidden, dim], down_proj_bias."""
        gate_up = interleave(self.w1.transpose(1, 2), self.w3.transpose(1, 2))
        return gate_up, interleave(self.b1, self.b3), self.w2.transpose(1, 2), self.b2


class MoE(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.router = Router(c["dim"], c["num_experts"])
        self.experts = Experts(c["dim"], c["hidden_dim"], c["num_experts"])
        self.register_buffer("expert_bias", torch.zeros(c["num_experts"], dtype=torch.float64))

    def forward(self, x):
        c = self.c
        b, s, d = x.shape
        flat = x.reshape(-1, d)
        logits = self.router.gate(flat)
        top, selected = torch.topk(logits, c["top_k"], dim=-1)
        weights = torch.softmax(top, dim=-1)
        gate_up_proj, gate_up_bias, down_proj, down_bias = self.experts.hf_layout()
        limit, alpha = c["swiglu_limit"], c["swiglu_alpha"]
        out = torch.zeros_like(flat)
        for e in range(c["num_experts"]):
            token, slot = torch.where(selected == e)
            if token.numel() == 0:
                continue
            gate_up = flat[token] @ gate_up_proj[e] + gate_up_bias[e]
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
            if c.get("clamp", True):
                gate = gate.clamp(min=None, max=limit)
                up = up.clamp(min=-limit, max=limit)
            glu = gate * torch.sigmoid(gate * alpha)
            y = ((up + 1) * glu) @ down_proj[e] + down_bias[e]
            out = out.index_add(0, token, y * weights[token, slot, None])
        return out.reshape(b, s, d)


class Block(torch.nn.Module):
    def __init__(self, c, sliding):
        super().__init__()
        self.attention = Attention(c, sliding)
        self.attention_norm = RMSNorm(c["dim"], c["norm_eps"])
        self.ffn_norm = RMSNorm(c["dim"], c["norm_eps"])
        self.moe = MoE(c)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.moe(self.ffn_norm(h))


class Decoder(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embeddings = torch.nn.Embedding(c["vocab_size"], c["dim"], dtype=torch.float64)
        self.layers = torch.nn.ModuleList(Block(c, i % 2 == 0) for i in range(c["n_layers"]))
        self.norm = RMSNorm(c["dim"], c["norm_eps"])
        self.output = Linear(c["dim"], c["vocab_size"])

    def tables(self, length):
        c = self.c
        scaling = dict(type="yarn", factor=c["rope_factor"], beta_fast=c["beta_fast"], beta_slow=c["beta_slow"],
                       truncate=False, original=c["original_max_seq_len"])
        cos, sin = rope_scaling.tables(c["head_dim"], c["rope_theta"], scaling, c["max_seq_len"], length)
        return torch.tensor(cos, dtype=torch.float64), torch.tensor(sin, dtype=torch.float64)

    def forward(self, ids):
        cos, sin = self.tables(ids.shape[1])
        h = self.tok_embeddings(ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))

    def loss(self, ids, labels):
        logits = self(ids)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100)


# The tiny model of the C++ tests (tests/models/gpt_oss_test.cpp builds the
# same through gpt_oss::to_config): three layers (sliding, full, sliding) with
# a window shorter than the sequence, and a clamp limit low enough that the
# clamps cut a good share of the gate and up values at these weights.
TINY = dict(dim=64, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=16, hidden_dim=32, num_experts=8, top_k=3,
            sliding_window=8, vocab_size=256, norm_eps=1e-5, rope_theta=150000.0, rope_factor=32.0, beta_fast=32.0,
            beta_slow=1.0, original_max_seq_len=4096, max_seq_len=64, swiglu_alpha=1.702, swiglu_limit=0.5)
