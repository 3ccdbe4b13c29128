"""A plain-PyTorch CLIP text encoder (the pooled-text encoder FLUX.1 reads),
written from CLIP's and Hugging Face's CLIPTextModel's definitions for
titan's tests, in float64: token plus learned position embeddings, pre-norm
blocks of causal multi-head attention (with biases) and a quick-GELU MLP,
LayerNorms with weight and bias, a final LayerNorm, and the pooled output at
the first end-of-text token (the largest id). Parameter names follow Hugging
Face's CLIPTextModel.
"""
import math

import torch
from torch import nn

F64 = torch.float64

TINY = dict(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=16, layer_norm_eps=1e-5)


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


class Holder(nn.Module):
    """A named node of the parameter tree."""


def norm(width):
    holder = Holder()
    holder.weight = nn.Parameter(torch.ones(width, dtype=F64))
    holder.bias = nn.Parameter(torch.zeros(width, dtype=F64))
    return holder


class ClipText(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d = c["hidden_size"]
        self.text_model = Holder()
        tm = self.text_model
        tm.embeddings = Holder()
        tm.embeddings.token_embedding = nn.Embedding(c["vocab_size"], d, dtype=F64)
        tm.embeddings.position_embedding = nn.Embedding(c["max_position_embeddings"], d, dtype=F64)
        tm.encoder = Holder()
        tm.encoder.layers = nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            layer = Holder()
            layer.self_attn = Holder()
            for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
                setattr(layer.self_attn, name, nn.Linear(d, d, dtype=F64))
            layer.layer_norm1, layer.layer_norm2 = norm(d), norm(d)
            layer.mlp = Holder()
            layer.mlp.fc1 = nn.Linear(d, c["intermediate_size"], dtype=F64)
            layer.mlp.fc2 = nn.Linear(c["intermediate_size"], d, dtype=F64)
            tm.encoder.layers.append(layer)
        tm.final_layer_norm = norm(d)

    def forward(self, ids):
        """-> (last hidden state [B, L, D], pooled [B, D])."""
        c, tm = self.c, self.text_model
        b, length = ids.shape
        heads, eps = c["num_attention_heads"], c["layer_norm_eps"]
        x = tm.embeddings.token_embedding(ids) + tm.embeddings.position_embedding(torch.arange(length))[None]
        future = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
        for layer in tm.encoder.layers:
            h = layer_norm(x, layer.layer_norm1.weight, layer.layer_norm1.bias, eps)
            attn = layer.self_attn

            def heads_of(projection):
                return projection(h).reshape(b, length, heads, -1).transpose(1, 2)

            q, k, v = heads_of(attn.q_proj), heads_of(attn.k_proj), heads_of(attn.v_proj)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            scores = scores.masked_fill(future, float("-inf"))
            out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, length, -1)
            x = x + attn.out_proj(out)
            h = layer_norm(x, layer.layer_norm2.weight, layer.layer_norm2.bias, eps)
            h = layer.mlp.fc1(h)
            x = x + layer.mlp.fc2(h * torch.sigmoid(1.702 * h))
        x = layer_norm(x, tm.final_layer_norm.weight, tm.final_layer_norm.bias, eps)
        pooled = x[torch.arange(b), ids.argmax(dim=-1)]
        return x, pooled
