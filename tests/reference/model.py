"""PyTorch reference of titan.cpp's decoder building blocks, written from the
published Llama 3 / Qwen 3 definitions. Parameter names match titan's
fully-qualified names so weights move between the two through safetensors."""
import torch

import functional as ref


class Linear(torch.nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=torch.float64))

    def forward(self, x):
        return x @ self.weight.T


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim, dtype=torch.float64))

    def forward(self, x):
        return ref.rms_norm(x, self.weight, self.eps)


class Attention(torch.nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, head_dim, qk_norm, norm_eps, rope_style):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.rope_style = rope_style
        self.wq = Linear(dim, n_heads * head_dim)
        self.wk = Linear(dim, n_kv_heads * head_dim)
        self.wv = Linear(dim, n_kv_heads * head_dim)
        self.wo = Linear(n_heads * head_dim, dim)
        self.qk_norm = qk_norm
        if qk_norm:
            self.q_norm = RMSNorm(head_dim, norm_eps)
            self.k_norm = RMSNorm(head_dim, norm_eps)

    def forward(self, x, positions, freqs, doc_ids=None, window=0):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = ref.rope(q, positions, freqs, self.rope_style)
        k = ref.rope(k, positions, freqs, self.rope_style)
        out = ref.attention(q, k, v, self.head_dim ** -0.5, True, window, doc_ids)
        return self.wo(out.reshape(b, s, -1))


class FeedForward(torch.nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = Linear(dim, hidden_dim)
        self.w2 = Linear(hidden_dim, dim)
        self.w3 = Linear(dim, hidden_dim)

    def forward(self, x):
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(torch.nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, head_dim, hidden_dim, qk_norm, norm_eps, rope_style):
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads, head_dim, qk_norm, norm_eps, rope_style)
        self.feed_forward = FeedForward(dim, hidden_dim)
        self.attention_norm = RMSNorm(dim, norm_eps)
        self.ffn_norm = RMSNorm(dim, norm_eps)

    def forward(self, x, positions, freqs, doc_ids=None, window=0):
        h = x + self.attention(self.attention_norm(x), positions, freqs, doc_ids, window)
        return h + self.feed_forward(self.ffn_norm(h))


class Decoder(torch.nn.Module):
    """Token embeddings, blocks, final norm, output projection (tied or not)."""

    def __init__(self, vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, hidden_dim, qk_norm, norm_eps,
                 rope_style, rope_theta, rope_scaling, tie, dtype=torch.float64):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(vocab, dim, dtype=dtype)
        self.layers = torch.nn.ModuleList(
            TransformerBlock(dim, n_heads, n_kv_heads, head_dim, hidden_dim, qk_norm, norm_eps, rope_style)
            for _ in range(n_layers))
        self.norm = RMSNorm(dim, norm_eps)
        self.tie = tie
        if not tie:
            self.output = Linear(dim, vocab)
        self.freqs = ref.rope_frequencies(head_dim, rope_theta, rope_scaling)
        self.to(dtype)

    def output_weight(self):
        return self.tok_embeddings.weight if self.tie else self.output.weight

    def forward(self, ids, positions=None, doc_ids=None):
        if positions is None:
            positions = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
        h = self.tok_embeddings(ids)
        for layer in self.layers:
            h = layer(h, positions, self.freqs, doc_ids)
        return self.norm(h) @ self.output_weight().T

    def loss(self, ids, labels, positions=None, doc_ids=None):
        logits = self(ids, positions, doc_ids)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100)


# The debug flavors, as titan's models/*/flavors.cpp define them.
FLAVORS = {
    "llama3": dict(dim=256, n_layers=6, n_heads=16, n_kv_heads=16, head_dim=16, hidden_dim=768, qk_norm=False,
                   norm_eps=1e-5, rope_style="interleaved", rope_theta=500000.0, rope_scaling=None, tie=False),
    "qwen3": dict(dim=256, n_layers=6, n_heads=8, n_kv_heads=4, head_dim=32, hidden_dim=768, qk_norm=True,
                  norm_eps=1e-6, rope_style="half", rope_theta=1000000.0, rope_scaling=None, tie=True),
}


def debug_model(name, vocab, dtype=torch.float64):
    return Decoder(vocab, dtype=dtype, **FLAVORS[name])
