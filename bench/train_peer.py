"""PyTorch peer for `titan bench train`: the same Llama 3 debug model written
the usual way (projections, RoPE, causal matmul attention, SwiGLU), trained
with torch.optim.AdamW on random tokens, f32 or bf16 autocast. Prints one JSON
line with the median step time.

Usage: train_peer.py --dim 256 --layers 6 --heads 16 --hidden 768 --vocab 2048
                     --seq 512 --batch 8 --steps 6 --warmup 2 --dtype f32|bf16 --threads N
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.wq = torch.nn.Linear(dim, dim, bias=False)
        self.wk = torch.nn.Linear(dim, dim, bias=False)
        self.wv = torch.nn.Linear(dim, dim, bias=False)
        self.wo = torch.nn.Linear(dim, dim, bias=False)
        self.w1 = torch.nn.Linear(dim, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False)
        self.w3 = torch.nn.Linear(dim, hidden, bias=False)
        self.attention_norm = torch.nn.Parameter(torch.ones(dim))
        self.ffn_norm = torch.nn.Parameter(torch.ones(dim))

    @staticmethod
    def norm(x, weight):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * weight

    def forward(self, x, cos, sin, mask):
        b, s, d = x.shape
        h = self.norm(x, self.attention_norm)
        q = self.wq(h).view(b, s, self.heads, -1)
        k = self.wk(h).view(b, s, self.heads, -1)
        v = self.wv(h).view(b, s, self.heads, -1).transpose(1, 2)
        q, k = rope(q, cos, sin).transpose(1, 2), rope(k, cos, sin).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1]) + mask
        out = torch.matmul(torch.softmax(scores.float(), dim=-1).type_as(q), v)
        x = x + self.wo(out.transpose(1, 2).reshape(b, s, d))
        h = self.norm(x, self.ffn_norm)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def rope(x, cos, sin):
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


class Model(torch.nn.Module):
    def __init__(self, vocab, dim, layers, heads, hidden):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(Block(dim, heads, hidden) for _ in range(layers))
        self.norm = torch.nn.Parameter(torch.ones(dim))
        self.output = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, cos, sin, mask):
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.output(Block.norm(h, self.norm))


def main():
    p = argparse.ArgumentParser()
    for name in ["dim", "layers", "heads", "hidden", "vocab", "seq", "batch", "steps", "warmup", "threads"]:
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--dtype", choices=["f32", "bf16"], required=True)
    p.add_argument("--no-mkldnn", action="store_true",
                   help="run as on a CPU without AVX-512, where PyTorch does not use oneDNN for bf16 matmuls")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.mkldnn.enabled = not a.no_mkldnn
    torch.manual_seed(0)
    model = Model(a.vocab, a.dim, a.layers, a.heads, a.hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    head = a.dim // a.heads
    freqs = 1.0 / 500000.0 ** (torch.arange(0, head, 2).float() / head)
    angles = torch.outer(torch.arange(a.seq).float(), freqs)[None, :, None, :]
    cos, sin = torch.cos(angles), torch.sin(angles)
    mask = torch.full((a.seq, a.seq), float("-inf")).triu(1)
    times = []
    for step in range(a.warmup + a.steps):
        ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = model(ids[:, :-1], cos, sin, mask)
            loss = F.cross_entropy(logits.float().reshape(-1, a.vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    times.sort()
    median = times[len(times) // 2]
    print(json.dumps({"median_step_seconds": median, "tokens_per_second": a.batch * a.seq / median,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
