"""A plain-PyTorch T5 v1.1 encoder (the text encoder FLUX.1 reads), written
from the T5 paper's and Hugging Face's T5EncoderModel's definitions for
titan's tests, in float64: RMS layer norms without bias, attention without
score scaling over a learned relative-position bias (bucketed, shared by every
layer, held by the first), a gated-GELU (tanh) feed-forward, pre-norm residual
blocks and a final norm. Parameter names follow Hugging Face's.
"""
import math

import torch
from torch import nn

F64 = torch.float64

TINY = dict(vocab_size=100, d_model=32, d_kv=8, num_heads=4, d_ff=48, num_layers=2,
            relative_attention_num_buckets=8, relative_attention_max_distance=20, layer_norm_epsilon=1e-6)


def relative_position_bucket(relative_position, num_buckets, max_distance):
    """Bidirectional: half the buckets for keys after the query. Within each
    half, distances below half of it have a bucket each; larger ones share
    logarithmically wider buckets up to max_distance, beyond which all share
    the last."""
    num_buckets //= 2
    bucket = (relative_position > 0).to(torch.int64) * num_buckets
    distance = relative_position.abs()
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(distance.to(torch.float32) / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.int64)
    large = torch.minimum(large, torch.full_like(large, num_buckets - 1))
    return bucket + torch.where(distance < max_exact, distance, large)


def rms_norm(x, weight, eps):
    return weight * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class Holder(nn.Module):
    """A named node of the parameter tree."""


def linear(d_in, d_out):
    return nn.Linear(d_in, d_out, bias=False, dtype=F64)


class T5Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        inner = c["num_heads"] * c["d_kv"]
        self.shared = nn.Embedding(c["vocab_size"], c["d_model"], dtype=F64)
        self.encoder = Holder()
        self.encoder.block = nn.ModuleList()
        for i in range(c["num_layers"]):
            block = Holder()
            block.layer = nn.ModuleList([Holder(), Holder()])
            attention = Holder()
            for name in ("q", "k", "v"):
                setattr(attention, name, linear(c["d_model"], inner))
            attention.o = linear(inner, c["d_model"])
            if i == 0:
                attention.relative_attention_bias = nn.Embedding(c["relative_attention_num_buckets"],
                                                                 c["num_heads"], dtype=F64)
            block.layer[0].SelfAttention = attention
            block.layer[0].layer_norm = Holder()
            block.layer[0].layer_norm.weight = nn.Parameter(torch.ones(c["d_model"], dtype=F64))
            ff = Holder()
            ff.wi_0, ff.wi_1, ff.wo = linear(c["d_model"], c["d_ff"]), linear(c["d_model"], c["d_ff"]), \
                linear(c["d_ff"], c["d_model"])
            block.layer[1].DenseReluDense = ff
            block.layer[1].layer_norm = Holder()
            block.layer[1].layer_norm.weight = nn.Parameter(torch.ones(c["d_model"], dtype=F64))
            self.encoder.block.append(block)
        self.encoder.final_layer_norm = Holder()
        self.encoder.final_layer_norm.weight = nn.Parameter(torch.ones(c["d_model"], dtype=F64))

    def position_bias(self, length):
        """[heads, length, length]: the bias of key j for query i."""
        positions = torch.arange(length)
        buckets = relative_position_bucket(positions[None, :] - positions[:, None],
                                           self.c["relative_attention_num_buckets"],
                                           self.c["relative_attention_max_distance"])
        table = self.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight
        return table[buckets].permute(2, 0, 1)

    def forward(self, ids, attention_mask=None):
        c = self.c
        b, length = ids.shape
        heads, d_kv, eps = c["num_heads"], c["d_kv"], c["layer_norm_epsilon"]
        bias = self.position_bias(length)[None]
        if attention_mask is not None:
            bias = bias + (1.0 - attention_mask[:, None, None, :].to(F64)) * torch.finfo(F64).min
        x = self.shared(ids)
        for block in self.encoder.block:
            attention = block.layer[0].SelfAttention
            h = rms_norm(x, block.layer[0].layer_norm.weight, eps)

            def heads_of(projection):
                return projection(h).reshape(b, length, heads, d_kv).transpose(1, 2)

            q, k, v = heads_of(attention.q), heads_of(attention.k), heads_of(attention.v)
            scores = q @ k.transpose(-1, -2) + bias
            out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, length, heads * d_kv)
            x = x + attention.o(out)
            ff = block.layer[1].DenseReluDense
            h = rms_norm(x, block.layer[1].layer_norm.weight, eps)
            x = x + ff.wo(gelu_tanh(ff.wi_0(h)) * ff.wi_1(h))
        return rms_norm(x, self.encoder.final_layer_norm.weight, eps)
