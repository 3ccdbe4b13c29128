"""PyTorch peer for `titan bench gpu`: the same Llama 3 model (GQA attention,
RMSNorm, RoPE, SwiGLU, tied or untied output) trained the way a PyTorch user
would on one GPU: f32 master weights under bf16 autocast, torch.compile,
scaled_dot_product_attention (flash), fused AdamW, random tokens. Prints one
JSON line with the median step time and tokens/s over the timed steps.

RoPE uses the plain theta table (Llama 3.1's long-context frequency scaling
changes only the table's values, not the work).
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps=1e-5):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads, hidden):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = torch.nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = torch.nn.Linear(heads * self.head_dim, dim, bias=False)
        self.w1 = torch.nn.Linear(dim, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False)
        self.w3 = torch.nn.Linear(dim, hidden, bias=False)
        self.attention_norm = torch.nn.Parameter(torch.ones(dim))
        self.ffn_norm = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        h = rms_norm(x, self.attention_norm)
        q = rotate(self.wq(h).view(b, s, self.heads, self.head_dim), cos, sin).transpose(1, 2)
        k = rotate(self.wk(h).view(b, s, self.kv_heads, self.head_dim), cos, sin).transpose(1, 2)
        v = self.wv(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(out.transpose(1, 2).reshape(b, s, d))
        h = rms_norm(x, self.ffn_norm)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = torch.nn.Embedding(a.vocab, a.dim)
        self.layers = torch.nn.ModuleList(Block(a.dim, a.heads, a.kv_heads, a.hidden) for _ in range(a.layers))
        self.norm = torch.nn.Parameter(torch.ones(a.dim))
        self.output = torch.nn.Linear(a.dim, a.vocab, bias=False)
        if a.tie:
            self.output.weight = self.embed.weight

    def forward(self, ids, labels, cos, sin):
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        logits = self.output(rms_norm(h, self.norm))
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def main():
    p = argparse.ArgumentParser()
    for name in ["dim", "layers", "heads", "kv-heads", "hidden", "vocab", "seq", "batch", "steps", "warmup", "tie"]:
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    a = p.parse_args()
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = Model(a).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    compiled = torch.compile(model)
    head_dim = a.dim // a.heads
    freqs = a.rope_theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(a.seq, dtype=torch.float64), freqs)
    cos = angles.cos().float().to(device)[None, :, None, :]
    sin = angles.sin().float().to(device)[None, :, None, :]
    seconds = []
    for step in range(a.warmup + a.steps):
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=device)
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(tokens[:, :-1], tokens[:, 1:], cos, sin)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= a.warmup:
            seconds.append(time.perf_counter() - start)
    seconds.sort()
    median = seconds[len(seconds) // 2]
    print(json.dumps({"median_step_seconds": median, "tokens_per_second": a.batch * a.seq / median,
                      "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}))


if __name__ == "__main__":
    main()
