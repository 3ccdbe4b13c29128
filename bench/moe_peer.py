"""PyTorch peer for `titan bench moe`, two measurements:

  layer: one Qwen3-MoE sparse block, forward + backward, written as Hugging
         Face's Qwen3MoeSparseMoeBlock is (softmax router, top k, optional
         renormalisation, then a Python loop over the experts that indexes
         each expert's tokens, runs its SwiGLU and index_adds the weighted rows).
  train: the qwen3_moe debug model (train_peer.py's blocks with q/k RMSNorm
         and that sparse block in place of the dense FFN on the MoE layers)
         trained with torch.optim.AdamW on random tokens.

Prints one JSON line with the median seconds.

Usage: moe_peer.py layer --dim D --hidden H --experts E --top-k K --tokens T --steps N --warmup W --threads N
       moe_peer.py train --dim D --layers L --heads H --kv-heads KV --head-dim HD --hidden H --moe-hidden MH
                         --experts E --top-k K --dense-layers 0,... --vocab V --seq S --batch B
                         --steps N --warmup W --threads N
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F

from train_peer import rope


class SparseMoE(torch.nn.Module):
    def __init__(self, dim, hidden, experts, top_k):
        super().__init__()
        self.top_k = top_k
        self.gate = torch.nn.Linear(dim, experts, bias=False)
        self.w1 = torch.nn.ModuleList(torch.nn.Linear(dim, hidden, bias=False) for _ in range(experts))
        self.w3 = torch.nn.ModuleList(torch.nn.Linear(dim, hidden, bias=False) for _ in range(experts))
        self.w2 = torch.nn.ModuleList(torch.nn.Linear(hidden, dim, bias=False) for _ in range(experts))

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights = torch.softmax(self.gate(x), dim=-1, dtype=torch.float)
        weights, chosen = torch.topk(weights, self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        mask = F.one_hot(chosen, num_classes=len(self.w1)).permute(2, 1, 0)  # [E, k, T]
        for e in range(len(self.w1)):
            slot, token = torch.where(mask[e])
            if token.numel() == 0:
                continue
            rows = x[token]
            y = self.w2[e](F.silu(self.w1[e](rows)) * self.w3[e](rows)) * weights[token, slot, None]
            out.index_add_(0, token, y.to(x.dtype))
        return out.reshape(shape)


def norm(x, weight, eps=1e-6):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


class Block(torch.nn.Module):
    def __init__(self, a, sparse):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = a.heads, a.kv_heads, a.head_dim
        self.wq = torch.nn.Linear(a.dim, a.heads * a.head_dim, bias=False)
        self.wk = torch.nn.Linear(a.dim, a.kv_heads * a.head_dim, bias=False)
        self.wv = torch.nn.Linear(a.dim, a.kv_heads * a.head_dim, bias=False)
        self.wo = torch.nn.Linear(a.heads * a.head_dim, a.dim, bias=False)
        self.q_norm = torch.nn.Parameter(torch.ones(a.head_dim))
        self.k_norm = torch.nn.Parameter(torch.ones(a.head_dim))
        self.attention_norm = torch.nn.Parameter(torch.ones(a.dim))
        self.ffn_norm = torch.nn.Parameter(torch.ones(a.dim))
        if sparse:
            self.ffn = SparseMoE(a.dim, a.moe_hidden, a.experts, a.top_k)
        else:
            self.w1 = torch.nn.Linear(a.dim, a.hidden, bias=False)
            self.w2 = torch.nn.Linear(a.hidden, a.dim, bias=False)
            self.w3 = torch.nn.Linear(a.dim, a.hidden, bias=False)
            self.ffn = lambda h: self.w2(F.silu(self.w1(h)) * self.w3(h))

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        h = norm(x, self.attention_norm)
        q = norm(self.wq(h).view(b, s, self.heads, -1), self.q_norm)
        k = norm(self.wk(h).view(b, s, self.kv_heads, -1), self.k_norm)
        v = self.wv(h).view(b, s, self.kv_heads, -1).transpose(1, 2)
        q, k = rope(q, cos, sin).transpose(1, 2), rope(k, cos, sin).transpose(1, 2)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim) + mask
        out = torch.matmul(torch.softmax(scores.float(), dim=-1).type_as(q), v)
        x = x + self.wo(out.transpose(1, 2).reshape(b, s, -1))
        return x + self.ffn(norm(x, self.ffn_norm))


class Model(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        dense = {int(i) for i in a.dense_layers.split(",") if i != ""}
        self.embed = torch.nn.Embedding(a.vocab, a.dim)
        self.layers = torch.nn.ModuleList(Block(a, i not in dense) for i in range(a.layers))
        self.norm = torch.nn.Parameter(torch.ones(a.dim))
        self.output = torch.nn.Linear(a.dim, a.vocab, bias=False)

    def forward(self, ids, cos, sin, mask):
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.output(norm(h, self.norm))


def timed(step, warmup, steps):
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def layer(a):
    block = SparseMoE(a.dim, a.hidden, a.experts, a.top_k)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.02)
    x = torch.randn(a.tokens, a.dim, requires_grad=True)
    grad = torch.randn(a.tokens, a.dim)

    def step():
        block.zero_grad(set_to_none=True)
        x.grad = None
        block(x).backward(grad)

    return timed(step, a.warmup, a.steps)


def train(a):
    torch.manual_seed(0)
    model = Model(a)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    freqs = 1.0 / 1000000.0 ** (torch.arange(0, a.head_dim, 2).float() / a.head_dim)
    angles = torch.outer(torch.arange(a.seq).float(), freqs)[None, :, None, :]
    cos, sin = torch.cos(angles), torch.sin(angles)
    mask = torch.full((a.seq, a.seq), float("-inf")).triu(1)

    def step():
        ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
        logits = model(ids[:, :-1], cos, sin, mask)
        loss = F.cross_entropy(logits.float().reshape(-1, a.vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return timed(step, a.warmup, a.steps)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["layer", "train"])
    for name in ["dim", "hidden", "experts", "top-k", "steps", "warmup", "threads", "tokens", "layers", "heads",
                 "kv-heads", "head-dim", "moe-hidden", "vocab", "seq", "batch"]:
        p.add_argument("--" + name, type=int, default=0)
    p.add_argument("--dense-layers", default="")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    seconds = layer(a) if a.what == "layer" else train(a)
    print(json.dumps({"median_seconds": seconds, "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
