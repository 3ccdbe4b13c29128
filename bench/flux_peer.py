"""PyTorch peer for `titan bench flux`: one training step of a FLUX
transformer (forward, MSE against the velocity target, backward,
torch.optim.AdamW; no clipping, as titan's side) in float32, written as TorchTitan's flux model is
(nn.Linear projections, LayerNorm without affine, RMSNorm'd q/k, three-axis
RoPE, the tanh GELU), on random packed latents and text states of the given
sizes. Prints one JSON line with the median seconds of the timed steps.

Usage: flux_peer.py --hidden D --heads H --depth N --single-depth M --axes A,B,C --in-channels C
                    --context-dim T --vec-dim V --image-tokens I --text-tokens L --batch B
                    --steps N --warmup W --threads N
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch import nn


def layer_norm(x):
    return F.layer_norm(x, x.shape[-1:], eps=1e-6)


def rope(ids, axes, theta=10000.0):
    cos, sin = [], []
    for i, dim in enumerate(axes):
        freqs = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        angles = ids[..., i].double()[..., None] * freqs
        cos.append(angles.cos())
        sin.append(angles.sin())
    return torch.cat(cos, -1).float()[:, None], torch.cat(sin, -1).float()[:, None]  # [B, 1, L, D/2]


def apply_rope(x, cos, sin):  # x [B, H, L, D], interleaved pairs
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).flatten(-2)


def attention(q, k, v, cos, sin):
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    scores = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1)
    out = scores @ v
    return out.transpose(1, 2).flatten(2)


class QKNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q = nn.Parameter(torch.ones(dim))
        self.k = nn.Parameter(torch.ones(dim))

    def forward(self, q, k):
        rms = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        return rms(q, self.q), rms(k, self.k)


def heads(qkv, n, norm):
    b, l, _ = qkv.shape
    q, k, v = qkv.view(b, l, 3, n, -1).permute(2, 0, 3, 1, 4)
    q, k = norm(q, k)
    return q, k, v


class Double(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.n = n
        for s in ("img", "txt"):
            setattr(self, s + "_mod", nn.Linear(d, 6 * d))
            setattr(self, s + "_qkv", nn.Linear(d, 3 * d))
            setattr(self, s + "_norm", QKNorm(d // n))
            setattr(self, s + "_proj", nn.Linear(d, d))
            setattr(self, s + "_mlp", nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d)))

    def forward(self, img, txt, vec, cos, sin):
        m = {s: getattr(self, s + "_mod")(F.silu(vec))[:, None].chunk(6, -1) for s in ("img", "txt")}
        x = {"img": img, "txt": txt}
        qkv = {s: heads(getattr(self, s + "_qkv")((1 + m[s][1]) * layer_norm(x[s]) + m[s][0]), self.n,
                        getattr(self, s + "_norm")) for s in ("txt", "img")}
        q, k, v = (torch.cat([qkv["txt"][i], qkv["img"][i]], 2) for i in range(3))
        a = attention(q, k, v, cos, sin)
        out = {"txt": a[:, :txt.shape[1]], "img": a[:, txt.shape[1]:]}
        for s in ("img", "txt"):
            h = x[s] + m[s][2] * getattr(self, s + "_proj")(out[s])
            x[s] = h + m[s][5] * getattr(self, s + "_mlp")((1 + m[s][4]) * layer_norm(h) + m[s][3])
        return x["img"], x["txt"]


class Single(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.n, self.d = n, d
        self.mod = nn.Linear(d, 3 * d)
        self.linear1 = nn.Linear(d, 7 * d)
        self.linear2 = nn.Linear(5 * d, d)
        self.norm = QKNorm(d // n)

    def forward(self, x, vec, cos, sin):
        shift, scale, gate = self.mod(F.silu(vec))[:, None].chunk(3, -1)
        qkv, mlp = self.linear1((1 + scale) * layer_norm(x) + shift).split([3 * self.d, 4 * self.d], -1)
        q, k, v = heads(qkv, self.n, self.norm)
        return x + gate * self.linear2(torch.cat([attention(q, k, v, cos, sin), F.gelu(mlp, approximate="tanh")], -1))


class Flux(nn.Module):
    def __init__(self, a):
        super().__init__()
        d = a.hidden
        self.axes = a.axes
        self.img_in = nn.Linear(a.in_channels, d)
        self.time_in = nn.Sequential(nn.Linear(256, d), nn.SiLU(), nn.Linear(d, d))
        self.vector_in = nn.Sequential(nn.Linear(a.vec_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.txt_in = nn.Linear(a.context_dim, d)
        self.double_blocks = nn.ModuleList(Double(d, a.heads) for _ in range(a.depth))
        self.single_blocks = nn.ModuleList(Single(d, a.heads) for _ in range(a.single_depth))
        self.final_mod = nn.Linear(d, 2 * d)
        self.final = nn.Linear(d, a.in_channels)

    def forward(self, img, img_ids, txt, txt_ids, t, y):
        half = 128
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        emb = 1000.0 * t[:, None] * freqs
        vec = self.time_in(torch.cat([emb.cos(), emb.sin()], -1)) + self.vector_in(y)
        img, txt = self.img_in(img), self.txt_in(txt)
        cos, sin = rope(torch.cat([txt_ids, img_ids], 1), self.axes)
        for block in self.double_blocks:
            img, txt = block(img, txt, vec, cos, sin)
        x = torch.cat([txt, img], 1)
        for block in self.single_blocks:
            x = block(x, vec, cos, sin)
        shift, scale = self.final_mod(F.silu(vec))[:, None].chunk(2, -1)
        return self.final((1 + scale) * layer_norm(x[:, txt.shape[1]:]) + shift)


def main():
    p = argparse.ArgumentParser()
    for name in ("hidden", "heads", "depth", "single-depth", "in-channels", "context-dim", "vec-dim", "image-tokens",
                 "text-tokens", "batch", "steps", "warmup", "threads"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--axes", type=lambda s: [int(v) for v in s.split(",")], required=True)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Flux(a)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    b, li, lt = a.batch, a.image_tokens, a.text_tokens
    side = int(math.isqrt(li))
    img_ids = torch.zeros(b, li, 3)
    img_ids[..., 1] = torch.arange(li).div(side, rounding_mode="floor").float()
    img_ids[..., 2] = (torch.arange(li) % side).float()
    txt_ids = torch.zeros(b, lt, 3)
    x0, noise = torch.randn(b, li, a.in_channels), torch.randn(b, li, a.in_channels)
    txt, y = torch.randn(b, lt, a.context_dim), torch.randn(b, a.vec_dim)
    times = []
    for step in range(a.warmup + a.steps):
        start = time.perf_counter()
        t = torch.rand(b)
        xt = (1 - t[:, None, None]) * x0 + t[:, None, None] * noise
        optimizer.zero_grad()
        loss = F.mse_loss(model(xt, img_ids, txt, txt_ids, t, y), noise - x0)
        loss.backward()
        optimizer.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    times.sort()
    print(json.dumps({"median_seconds": times[len(times) // 2], "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
