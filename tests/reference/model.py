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
