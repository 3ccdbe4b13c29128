"""Float64 PyTorch reference of the Qwen3.5 text decoder, written from its
definition (TorchTitan's torchtitan/models/qwen3_5 and transformers'
Qwen3-Next / Qwen3.5 modeling): parameter names are titan's fully-qualified
names, so weights move between the two through safetensors. Everything is
plain tensor maths, the Gated DeltaNet recurrence a loop over tokens (no
chunking), independent of titan and of tests/reference/functional.py.

  block i: h = x + mixer_i(onorm(x)); out = h + ffn(onorm(h))
           onorm: x / rms(x) * (1 + w), eps 1e-6 (the final norm too)
  mixer_i: full attention when (i + 1) % 4 == 0, else Gated DeltaNet
  full:    q, k per head onormed, RoPE (theta 1e7, rotate-half pairs) on the
           first rotary_dim features only, causal GQA softmax(q k / sqrt(D)) v,
           times sigmoid(o_gate x), then wo
  GDN:     q, k, v = silu(causal depthwise conv_K(in_proj_{q,k,v} x));
           g = -exp(A_log) softplus(in_proj_a x + dt_bias); beta = sigmoid(in_proj_b x);
           S_t = e^g S + k (beta (v - e^g S^T k))^T, o_t = S_t^T q (q, k l2-normed, q / sqrt(Dk),
           value head h reads key head h // (Hv / Hk));
           out_proj(rms(o) * norm * silu(in_proj_z x)), rms per head, eps 1e-6
  ffn:     w2(silu(w1 x) * w3 x), or a softmax top-k MoE (weights renormalised)
           plus a shared expert times sigmoid(shared_expert_gate x)
  logits = output . onorm(x)
"""
import math

import torch

EPS, ROPE_THETA = 1e-6, 10000000.0

DEBUGMODEL = dict(dim=256, n_layers=8, n_heads=4, n_kv_heads=2, head_dim=64, rotary_dim=16, hidden_dim=512,
                  n_key_heads=2, n_value_heads=4, key_head_dim=64, value_head_dim=64, moe=None)
DEBUGMODEL_MOE = dict(DEBUGMODEL, n_layers=4, hidden_dim=0,
                      moe=dict(hidden_dim=256, num_experts=8, top_k=2))

ALL_FEATURES = dict(output_gate=True, partial_rotary=True, offset_norms=True, short_conv=True, gdn_gate=True,
                    shared_expert_gate=True)


def weight(*shape):
    return torch.nn.Parameter(torch.zeros(*shape, dtype=torch.float64))


def rms(x, eps=EPS):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class Norm(torch.nn.Module):
    def __init__(self, dim, model):
        super().__init__()
        self.weight, self.model = weight(dim), [model]  # a list: the model is no submodule

    def forward(self, x):
        return rms(x) * (self.weight + (1.0 if self.model[0].features["offset_norms"] else 0.0))


class Proj(torch.nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = weight(d_out, d_in)

    def forward(self, x):
        return x @ self.weight.T


class Attention(torch.nn.Module):
    def __init__(self, c, model):
        super().__init__()
        self.c, self.model = c, [model]
        h, kv, d = c["n_heads"], c["n_kv_heads"], c["head_dim"]
        self.wq, self.wk, self.wv = Proj(c["dim"], h * d), Proj(c["dim"], kv * d), Proj(c["dim"], kv * d)
        self.wo, self.o_gate = Proj(h * d, c["dim"]), Proj(c["dim"], h * d)
        self.q_norm, self.k_norm = Norm(d, model), Norm(d, model)

    def rotate(self, x, rotary):
        # Rotate-half pairs (i, i + rotary / 2) of the first `rotary` features by
        # position * theta^(-2i / rotary); the table rounded to f32 as titan's is.
        half = rotary // 2
        inv = 1.0 / ROPE_THETA ** (torch.arange(half, dtype=torch.float64) * 2 / rotary)
        angles = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * inv[None, :]
        cos = torch.cos(angles).float().double()[None, :, None, :]
        sin = torch.sin(angles).float().double()[None, :, None, :]
        x1, x2, rest = x[..., :half], x[..., half:rotary], x[..., rotary:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)

    def forward(self, x):
        c, features = self.c, self.model[0].features
        b, t, _ = x.shape
        h, kv, d = c["n_heads"], c["n_kv_heads"], c["head_dim"]
        q = self.q_norm(self.wq(x).view(b, t, h, d))
        k = self.k_norm(self.wk(x).view(b, t, kv, d))
        v = self.wv(x).view(b, t, kv, d)
        rotary = c["rotary_dim"] if features["partial_rotary"] else d
        q, k = self.rotate(q, rotary), self.rotate(k, rotary)
        k, v = k.repeat_interleave(h // kv, dim=2), v.repeat_interleave(h // kv, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        out = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, h * d)
        if features["output_gate"]:
            out = out * torch.sigmoid(self.o_gate(x))
        return self.wo(out)


def causal_conv_silu(x, w):
    """x [B, T, C], w [C, K]: silu(sum_j w[:, j] x[t - (K - 1) + j]), zeros before the start."""
    kernel, out = w.shape[1], torch.zeros_like(x)
    for j in range(kernel):
        shift = kernel - 1 - j
        shifted = torch.cat([torch.zeros_like(x[:, :shift]), x[:, : x.shape[1] - shift]], dim=1)
        out = out + shifted * w[:, j]
    return out * torch.sigmoid(out)


class GatedDeltaNet(torch.nn.Module):
    def __init__(self, c, model):
        super().__init__()
        self.c, self.model = c, [model]
        dim, key_dim = c["dim"], c["n_key_heads"] * c["key_head_dim"]
        value_dim, hv = c["n_value_heads"] * c["value_head_dim"], c["n_value_heads"]
        self.in_proj_q, self.in_proj_k = Proj(dim, key_dim), Proj(dim, key_dim)
        self.in_proj_v, self.in_proj_z = Proj(dim, value_dim), Proj(dim, value_dim)
        self.in_proj_a, self.in_proj_b = Proj(dim, hv), Proj(dim, hv)
        self.out_proj = Proj(value_dim, dim)
        self.conv_q, self.conv_k, self.conv_v = weight(key_dim, 4), weight(key_dim, 4), weight(value_dim, 4)
        self.A_log, self.dt_bias, self.norm = weight(hv), weight(hv), weight(c["value_head_dim"])

    def forward(self, x):
        c, features = self.c, self.model[0].features
        b, t, _ = x.shape
        hk, hv, dk, dv = c["n_key_heads"], c["n_value_heads"], c["key_head_dim"], c["value_head_dim"]
        conv = causal_conv_silu if features["short_conv"] else (lambda y, w: y)
        q = conv(self.in_proj_q(x), self.conv_q).view(b, t, hk, dk)
        k = conv(self.in_proj_k(x), self.conv_k).view(b, t, hk, dk)
        v = conv(self.in_proj_v(x), self.conv_v).view(b, t, hv, dv)
        g = -torch.exp(self.A_log) * torch.nn.functional.softplus(self.in_proj_a(x) + self.dt_bias)
        beta = torch.sigmoid(self.in_proj_b(x))
        q, k = q.repeat_interleave(hv // hk, dim=2), k.repeat_interleave(hv // hk, dim=2)
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dk)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        state, outs = torch.zeros(b, hv, dk, dv, dtype=x.dtype), []
        for i in range(t):
            state = state * g[:, i].exp()[..., None, None]
            recalled = torch.einsum("bhkv,bhk->bhv", state, k[:, i])
            delta = (v[:, i] - recalled) * beta[:, i, :, None]
            state = state + torch.einsum("bhk,bhv->bhkv", k[:, i], delta)
            outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, i]))
        o = rms(torch.stack(outs, dim=1)) * self.norm
        if features["gdn_gate"]:
            z = self.in_proj_z(x).view(b, t, hv, dv)
            o = o * z * torch.sigmoid(z)
        return self.out_proj(o.reshape(b, t, hv * dv))


class FeedForward(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1, self.w2, self.w3 = Proj(dim, hidden), Proj(hidden, dim), Proj(dim, hidden)

    def forward(self, x):
        a = self.w1(x)
        return self.w2(a * torch.sigmoid(a) * self.w3(x))


class Router(torch.nn.Module):
    def __init__(self, dim, experts):
        super().__init__()
        self.gate = Proj(dim, experts)


class Experts(torch.nn.Module):
    def __init__(self, dim, hidden, experts):
        super().__init__()
        self.w1, self.w2, self.w3 = weight(experts, hidden, dim), weight(experts, dim, hidden), weight(experts, hidden, dim)

    def expert(self, e, x):
        a = x @ self.w1[e].T
        return (a * torch.sigmoid(a) * (x @ self.w3[e].T)) @ self.w2[e].T


class MoE(torch.nn.Module):
    def __init__(self, dim, m, model):
        super().__init__()
        self.m, self.model = m, [model]
        self.router, self.experts = Router(dim, m["num_experts"]), Experts(dim, m["hidden_dim"], m["num_experts"])
        self.shared_experts = FeedForward(dim, m["hidden_dim"])
        self.shared_expert_gate = Proj(dim, 1)

    def forward(self, x):
        shape, x = x.shape, x.reshape(-1, x.shape[-1])
        scores = self.router.gate(x).softmax(-1)
        weights, chosen = scores.topk(self.m["top_k"], dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.m["num_experts"]):
            token, slot = torch.where(chosen == e)
            if token.numel():
                out = out.index_add(0, token, self.experts.expert(e, x[token]) * weights[token, slot, None])
        shared = self.shared_experts(x)
        if self.model[0].features["shared_expert_gate"]:
            shared = shared * torch.sigmoid(self.shared_expert_gate(x))
        return (out + shared).reshape(shape)


class Block(torch.nn.Module):
    def __init__(self, c, layer, model):
        super().__init__()
        full = (layer + 1) % 4 == 0
        self.attention = Attention(c, model) if full else GatedDeltaNet(c, model)
        self.attention_norm, self.ffn_norm = Norm(c["dim"], model), Norm(c["dim"], model)
        if c["moe"]:
            self.moe = MoE(c["dim"], c["moe"], model)
        else:
            self.feed_forward = FeedForward(c["dim"], c["hidden_dim"])

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        normed = self.ffn_norm(h)
        return h + (self.moe(normed) if hasattr(self, "moe") else self.feed_forward(normed))


class Decoder(torch.nn.Module):
    def __init__(self, c, vocab):
        super().__init__()
        self.features = dict(ALL_FEATURES)
        self.tok_embeddings = torch.nn.Module()
        self.tok_embeddings.weight = weight(vocab, c["dim"])
        self.layers = torch.nn.ModuleDict({str(i): Block(c, i, self) for i in range(c["n_layers"])})
        self.norm = Norm(c["dim"], self)
        self.output = Proj(c["dim"], vocab)

    def forward(self, ids):
        x = self.tok_embeddings.weight[ids]
        for block in self.layers.values():
            x = block(x)
        return self.output(self.norm(x))

    def loss(self, ids, labels):
        logits = self(ids)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100)
