"""PyTorch reference of titan.cpp's decoder building blocks, written from the
published Llama 3 / Qwen 3 / Qwen 3 MoE definitions (the MoE block and its
auxiliary loss as Hugging Face's modeling_qwen3_moe computes them), with the
block variants of Qwen 2 (q/k/v biases), OLMo 2 (post-norms only, q/k norm over
the whole projection) and Gemma 2/3 (norms scaling by 1 + w, pre- and
post-norms, GeGLU, query_pre_attn_scalar, attention logit soft-capping, sliding
window). Parameter names match titan's fully-qualified names so weights move
between the two through safetensors. Every variant defaults to off, so the
Llama/Qwen 3 modules (and their parameter order) are as before."""
import torch

import functional as ref


class Linear(torch.nn.Module):
    def __init__(self, in_features, out_features, bias=False):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=torch.float64))
        if bias:
            self.bias = torch.nn.Parameter(torch.zeros(out_features, dtype=torch.float64))

    def forward(self, x):
        y = x @ self.weight.T
        return y + self.bias if hasattr(self, "bias") else y


class RMSNorm(torch.nn.Module):
    """x / rms(x) * (offset + w): Gemma stores w around 0 and scales by 1 + w."""

    def __init__(self, dim, eps, offset=0.0):
        super().__init__()
        self.eps, self.offset = eps, offset
        self.weight = torch.nn.Parameter(torch.ones(dim, dtype=torch.float64))

    def forward(self, x):
        return ref.rms_norm(x, self.weight + self.offset if self.offset else self.weight, self.eps)


class Attention(torch.nn.Module):
    """Causal GQA self-attention with RoPE. Variants, all off by default:
    qkv_bias: biases on wq/wk/wv (Qwen 2);
    qk_norm_whole: q_norm/k_norm span all heads' features of the projection,
      before the split into heads (OLMo 2), instead of each head (Qwen 3, Gemma 3);
    qk_norm_offset: the q/k norms scale by offset + w (Gemma 3: 1);
    scale_dim: scores scale by scale_dim^-1/2 instead of head_dim^-1/2 (Gemma's
      query_pre_attn_scalar);
    softcap: scaled scores become cap * tanh(score / cap) before the mask (Gemma 2);
    sliding_window: key j is visible from query i only when i - j < window (the
      layer's own window, overriding the one forward is given)."""

    def __init__(self, dim, n_heads, n_kv_heads, head_dim, qk_norm, norm_eps, rope_style, qkv_bias=False,
                 qk_norm_whole=False, qk_norm_offset=0.0, scale_dim=None, softcap=0.0, sliding_window=0):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.rope_style = rope_style
        self.wq = Linear(dim, n_heads * head_dim, qkv_bias)
        self.wk = Linear(dim, n_kv_heads * head_dim, qkv_bias)
        self.wv = Linear(dim, n_kv_heads * head_dim, qkv_bias)
        self.wo = Linear(n_heads * head_dim, dim)
        self.qk_norm, self.qk_norm_whole = qk_norm, qk_norm_whole
        if qk_norm:
            self.q_norm = RMSNorm(n_heads * head_dim if qk_norm_whole else head_dim, norm_eps, qk_norm_offset)
            self.k_norm = RMSNorm(n_kv_heads * head_dim if qk_norm_whole else head_dim, norm_eps, qk_norm_offset)
        self.scale = (scale_dim if scale_dim else head_dim) ** -0.5
        self.softcap, self.sliding_window = softcap, sliding_window

    def forward(self, x, positions, freqs, doc_ids=None, window=0):
        b, s, _ = x.shape
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if self.qk_norm and self.qk_norm_whole:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, s, self.n_heads, self.head_dim)
        k = k.view(b, s, self.n_kv_heads, self.head_dim)
        v = v.view(b, s, self.n_kv_heads, self.head_dim)
        if self.qk_norm and not self.qk_norm_whole:
            q, k = self.q_norm(q), self.k_norm(k)
        q = ref.rope(q, positions, freqs, self.rope_style)
        k = ref.rope(k, positions, freqs, self.rope_style)
        window = self.sliding_window or window
        out = ref.attention(q, k, v, self.scale, True, window, doc_ids, self.softcap)
        return self.wo(out.reshape(b, s, -1))


class FeedForward(torch.nn.Module):
    """w2(act(w1 x) * w3 x): SwiGLU (act "silu") or Gemma's GeGLU ("gelu_tanh",
    Hugging Face's gelu_pytorch_tanh)."""

    def __init__(self, dim, hidden_dim, activation="silu"):
        super().__init__()
        self.w1 = Linear(dim, hidden_dim)
        self.w2 = Linear(hidden_dim, dim)
        self.w3 = Linear(dim, hidden_dim)
        self.activation = activation

    def forward(self, x):
        gate = self.w1(x)
        if self.activation == "gelu_tanh":
            gate = torch.nn.functional.gelu(gate, approximate="tanh")
        else:
            gate = torch.nn.functional.silu(gate)
        return self.w2(gate * self.w3(x))


class Router(torch.nn.Module):
    def __init__(self, dim, num_experts):
        super().__init__()
        self.gate = Linear(dim, num_experts)


class Experts(torch.nn.Module):
    """The experts' SwiGLU weights stacked along dim 0, as titan stores them."""

    def __init__(self, dim, hidden_dim, num_experts):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.empty(num_experts, hidden_dim, dim, dtype=torch.float64))
        self.w2 = torch.nn.Parameter(torch.empty(num_experts, dim, hidden_dim, dtype=torch.float64))
        self.w3 = torch.nn.Parameter(torch.empty(num_experts, hidden_dim, dim, dtype=torch.float64))

    def expert(self, e, x):
        return (torch.nn.functional.silu(x @ self.w1[e].T) * (x @ self.w3[e].T)) @ self.w2[e].T


class MoE(torch.nn.Module):
    """Qwen3MoeSparseMoeBlock: softmax router in float32, top-k, optional
    renormalisation, then a loop over experts adding each one's weighted
    output into its tokens (index_add_)."""

    def __init__(self, dim, hidden_dim, num_experts, top_k, norm_topk_prob):
        super().__init__()
        self.num_experts, self.top_k, self.norm_topk_prob = num_experts, top_k, norm_topk_prob
        self.router = Router(dim, num_experts)
        self.experts = Experts(dim, hidden_dim, num_experts)

    def forward(self, x, router_logits_out):
        b, s, d = x.shape
        x = x.reshape(-1, d)
        logits = self.router.gate(x)
        if router_logits_out is not None:
            router_logits_out.append(logits)
        weights = torch.softmax(logits, dim=1, dtype=torch.float)
        weights, selected = torch.topk(weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        mask = torch.nn.functional.one_hot(selected, num_classes=self.num_experts).permute(2, 1, 0)
        for e in range(self.num_experts):
            slot, token = torch.where(mask[e])
            if token.numel() == 0:
                continue
            out = out.index_add(0, token, self.experts.expert(e, x[token]) * weights[token, slot, None])
        return out.reshape(b, s, d)


def load_balancing_loss(router_logits, num_experts, top_k):
    """Hugging Face's load_balancing_loss_func without an attention mask: over
    every MoE layer's tokens at once."""
    logits = torch.cat(router_logits, dim=0)
    weights = torch.softmax(logits, dim=-1)
    _, selected = torch.topk(weights, top_k, dim=-1)
    mask = torch.nn.functional.one_hot(selected, num_experts)
    tokens_per_expert = torch.mean(mask.to(weights.dtype), dim=0)
    router_prob_per_expert = torch.mean(weights, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts


class TransformerBlock(torch.nn.Module):
    """h = x + post_attention_norm(attention(attention_norm(x)));
    out = h + post_ffn_norm(ffn(ffn_norm(h))), a norm the block lacks being the
    identity: pre-norms only (Llama, Qwen), post-norms only (OLMo 2), or both
    (Gemma 2/3). norm_offset: the block's norms scale by offset + w (Gemma: 1).
    attention_options go to Attention (qkv_bias, qk_norm_whole, ...)."""

    def __init__(self, dim, n_heads, n_kv_heads, head_dim, hidden_dim, qk_norm, norm_eps, rope_style, moe=None,
                 activation="silu", norm_offset=0.0, pre_norms=True, post_norms=False, **attention_options):
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads, head_dim, qk_norm, norm_eps, rope_style,
                                   **attention_options)
        if moe is None:
            self.feed_forward = FeedForward(dim, hidden_dim, activation)
        else:
            self.moe = MoE(dim, **moe)
        if pre_norms:
            self.attention_norm = RMSNorm(dim, norm_eps, norm_offset)
            self.ffn_norm = RMSNorm(dim, norm_eps, norm_offset)
        if post_norms:
            self.post_attention_norm = RMSNorm(dim, norm_eps, norm_offset)
            self.post_ffn_norm = RMSNorm(dim, norm_eps, norm_offset)

    def _norm(self, name, x):
        return getattr(self, name)(x) if hasattr(self, name) else x

    def forward(self, x, positions, freqs, doc_ids=None, window=0, router_logits=None):
        attended = self.attention(self._norm("attention_norm", x), positions, freqs, doc_ids, window)
        h = x + self._norm("post_attention_norm", attended)
        normed = self._norm("ffn_norm", h)
        ffn = self.moe(normed, router_logits) if hasattr(self, "moe") else self.feed_forward(normed)
        return h + self._norm("post_ffn_norm", ffn)


class Decoder(torch.nn.Module):
    """Token embeddings, blocks, final norm, output projection (tied or not)."""

    def __init__(self, vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, hidden_dim, qk_norm, norm_eps,
                 rope_style, rope_theta, rope_scaling, tie, moe=None, mlp_only_layers=(), aux_loss_coef=0.0,
                 dtype=torch.float64):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(vocab, dim, dtype=dtype)
        self.moe = moe
        self.aux_loss_coef = aux_loss_coef
        self.layers = torch.nn.ModuleList(
            TransformerBlock(dim, n_heads, n_kv_heads, head_dim, hidden_dim, qk_norm, norm_eps, rope_style,
                             None if (moe is None or i in mlp_only_layers) else moe)
            for i in range(n_layers))
        self.norm = RMSNorm(dim, norm_eps)
        self.tie = tie
        if not tie:
            self.output = Linear(dim, vocab)
        self.freqs = ref.rope_frequencies(head_dim, rope_theta, rope_scaling)
        self.to(dtype)

    def output_weight(self):
        return self.tok_embeddings.weight if self.tie else self.output.weight

    def forward(self, ids, positions=None, doc_ids=None, router_logits=None):
        if positions is None:
            positions = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
        h = self.tok_embeddings(ids)
        for layer in self.layers:
            h = layer(h, positions, self.freqs, doc_ids, router_logits=router_logits)
        return self.norm(h) @ self.output_weight().T

    def losses(self, ids, labels, positions=None, doc_ids=None):
        """(LM loss, auxiliary loss before its coefficient or None): Qwen3MoeForCausalLM's
        loss is lm + router_aux_loss_coef * aux."""
        router_logits = []
        logits = self(ids, positions, doc_ids, router_logits)
        lm = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                               ignore_index=-100)
        if not router_logits or self.aux_loss_coef == 0:
            return lm, None
        return lm, load_balancing_loss(router_logits, self.moe["num_experts"], self.moe["top_k"])

    def loss(self, ids, labels, positions=None, doc_ids=None):
        lm, aux = self.losses(ids, labels, positions, doc_ids)
        return lm if aux is None else lm + self.aux_loss_coef * aux


# The debug flavors, as titan's models/*/flavors.cpp define them.
FLAVORS = {
    "llama3": dict(dim=256, n_layers=6, n_heads=16, n_kv_heads=16, head_dim=16, hidden_dim=768, qk_norm=False,
                   norm_eps=1e-5, rope_style="interleaved", rope_theta=500000.0, rope_scaling=None, tie=False),
    "qwen3": dict(dim=256, n_layers=6, n_heads=8, n_kv_heads=4, head_dim=32, hidden_dim=768, qk_norm=True,
                  norm_eps=1e-6, rope_style="half", rope_theta=1000000.0, rope_scaling=None, tie=True),
    "qwen3_moe": dict(dim=256, n_layers=6, n_heads=8, n_kv_heads=4, head_dim=32, hidden_dim=768, qk_norm=True,
                      norm_eps=1e-6, rope_style="half", rope_theta=1000000.0, rope_scaling=None, tie=False,
                      moe=dict(hidden_dim=384, num_experts=8, top_k=2, norm_topk_prob=True),
                      mlp_only_layers=(0,), aux_loss_coef=0.01),
}


def debug_model(name, vocab, dtype=torch.float64):
    return Decoder(vocab, dtype=dtype, **FLAVORS[name])
