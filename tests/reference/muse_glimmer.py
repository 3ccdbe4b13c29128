"""Float64 PyTorch reference of the Muse Glimmer text decoder, written from
its definition (TorchTitan's torchtitan/models/muse_glimmer): parameter names
are titan's fully-qualified names, so weights move between the two through
safetensors. Everything here is spelled out with plain tensor maths on
purpose (no shared helper), so the reference is independent of titan's other
families and of tests/reference/functional.py.

  h0      = rmsnorm(embed(ids))                          (no scale, eps 1e-5)
  block i: h = x + gnorm_post(attn_i(gnorm(x))); out = h + gnorm_post(ffn(gnorm(h)))
           gnorm: x / rms(x) * (1 + w), eps 1e-5; the post norms' eps 1e-8
  attn_i:  q, k per head scaleless-RMSNormed (eps 1e-5), q times 43.784 / sqrt(head_dim),
           RoPE (theta 5e5, neighbouring pairs) unless (n_layers - i - 1) % 4 == 0,
           causal GQA softmax(q k / sqrt(head_dim)) v with the layer's window
           pattern[(i + 4 - n_layers % 4) % len(pattern)] (0 = global),
           times sigmoid(o_gate x), then wo
  ffn:     w2(silu(w1 x) * w3 x), hidden int(3 dim)
  logits  = 20 tanh(m * (output . (x / rms(x) * w)) / 20)    (final norm: scale w, eps 1e-5)
"""
import math

import torch

NORM_EPS, POST_NORM_EPS, ROPE_THETA, NOPE_EVERY, SOFTCAP = 1e-5, 1e-8, 500000.0, 4, 20.0
QUERY_SCALE_NUMERATOR = 43.7840518911

DEBUGMODEL = dict(dim=256, n_layers=8, n_heads=4, n_kv_heads=2, head_dim=64, window_pattern=(128, 128, 128, 0),
                  output_multiplier=1.0)


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def uses_rope(layer, n_layers):
    return (n_layers - layer - 1) % NOPE_EVERY != 0


def window_of(layer, n_layers, pattern):
    return pattern[(layer + NOPE_EVERY - n_layers % NOPE_EVERY) % len(pattern)]


def weight(*shape):
    return torch.nn.Parameter(torch.zeros(*shape, dtype=torch.float64))


class Norm(torch.nn.Module):
    def __init__(self, dim, eps, centre):
        super().__init__()
        self.weight, self.eps, self.centre = weight(dim), eps, centre

    def forward(self, x):
        return rms(x, self.eps) * (self.weight + self.centre)


class Proj(torch.nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = weight(d_out, d_in)

    def forward(self, x):
        return x @ self.weight.T


class Attention(torch.nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, head_dim):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.wq, self.wk = Proj(dim, n_heads * head_dim), Proj(dim, n_kv_heads * head_dim)
        self.wv, self.wo = Proj(dim, n_kv_heads * head_dim), Proj(n_heads * head_dim, dim)
        self.o_gate = Proj(dim, n_heads * head_dim)

    def rotate(self, x, angles):
        # Pairs (2i, 2i + 1) rotate by position * theta^(-2i / head_dim); the
        # table is rounded to f32 as titan's is.
        cos = torch.cos(angles).float().to(x.dtype)[None, :, None, :]
        sin = torch.sin(angles).float().to(x.dtype)[None, :, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)

    def forward(self, x, rope, window, features):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
        q, k = rms(q, NORM_EPS), rms(k, NORM_EPS)
        if features["query_scale"]:
            q = q * (QUERY_SCALE_NUMERATOR / math.sqrt(self.head_dim))
        if rope:
            inv = ROPE_THETA ** (-torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim)
            angles = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
            q, k = self.rotate(q, angles), self.rotate(k, angles)
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.head_dim)
        i, j = torch.arange(s)[:, None], torch.arange(s)[None, :]
        visible = (j <= i) & ((i - j < window) if window > 0 else True)
        scores = scores.masked_fill(~visible, float("-inf"))
        out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v).reshape(b, s, -1)
        if features["output_gate"]:
            out = out * torch.sigmoid(self.o_gate(x))
        return self.wo(out)


class FeedForward(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1, self.w2, self.w3 = Proj(dim, hidden), Proj(hidden, dim), Proj(dim, hidden)

    def forward(self, x):
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class Block(torch.nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, head_dim):
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads, head_dim)
        self.feed_forward = FeedForward(dim, int(3.0 * dim))
        self.attention_norm, self.ffn_norm = Norm(dim, NORM_EPS, 1.0), Norm(dim, NORM_EPS, 1.0)
        self.post_attention_norm = Norm(dim, POST_NORM_EPS, 1.0)
        self.post_ffn_norm = Norm(dim, POST_NORM_EPS, 1.0)

    def forward(self, x, rope, window, features):
        post = (lambda n, y: n(y)) if features["post_norms"] else (lambda n, y: y)
        h = x + post(self.post_attention_norm, self.attention(self.attention_norm(x), rope, window, features))
        return h + post(self.post_ffn_norm, self.feed_forward(self.ffn_norm(h)))


# Every distinctive feature, on; a test may switch one off to see it matter.
ALL_FEATURES = dict(query_scale=True, output_gate=True, embedding_norm=True, post_norms=True, nope_layers=True,
                    softcap=True)


class MuseGlimmer(torch.nn.Module):
    tie, aux_loss_coef = False, 0.0  # for make_model_cases' init and training loop

    def __init__(self, vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, window_pattern, output_multiplier,
                 features=None):
        super().__init__()
        self.features = dict(ALL_FEATURES, **(features or {}))
        self.tok_embeddings = torch.nn.Embedding(vocab, dim, dtype=torch.float64)
        self.layers = torch.nn.ModuleList(Block(dim, n_heads, n_kv_heads, head_dim) for _ in range(n_layers))
        self.norm = Norm(dim, NORM_EPS, 0.0)
        self.output = Proj(dim, vocab)
        self.window_pattern, self.output_multiplier = window_pattern, output_multiplier

    def forward(self, ids):
        n = len(self.layers)
        h = self.tok_embeddings(ids)
        if self.features["embedding_norm"]:
            h = rms(h, NORM_EPS)
        for i, layer in enumerate(self.layers):
            rope = uses_rope(i, n) or not self.features["nope_layers"]
            h = layer(h, rope, window_of(i, n, self.window_pattern), self.features)
        z = self.output(self.norm(h))
        if not self.features["softcap"]:
            return z
        return SOFTCAP * torch.tanh(self.output_multiplier * z / SOFTCAP)

    def losses(self, ids, labels):
        logits = self(ids)
        lm = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                               ignore_index=-100)
        return lm, None

    def loss(self, ids, labels):
        return self.losses(ids, labels)[0]


def debug_model(vocab, **overrides):
    return MuseGlimmer(vocab, **dict(DEBUGMODEL, **overrides))
