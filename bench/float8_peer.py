"""PyTorch peer for `titan bench float8`: bench/train_peer.py's Llama 3 debug
model with its block Linears (wq, wk, wv, wo, w1, w2, w3; not the output head)
running emulated float8 GEMMs, as torchao's Float8Linear does with
emulate=True, against the same model's plain bf16-autocast step.

PyTorch 1.13 has no fp8 dtype, so a cast is written in tensor ops: scale =
448 / amax (57344 for e5m2), x * scale saturated to the format's largest
value, rounded to nearest-even on the format's grid (the spacing from
torch.frexp's exponent, torch.round). The GEMM multiplies the cast values and
divides by the two scales. torchao's emulation multiplies in f32; the cast
values are exact in bf16, so this peer multiplies them in bf16 (f32
accumulation), as titan does, and its overhead over the bf16 step is the
casts', as titan's is. (PyTorch returns that product in bf16, rounded once
before the division; titan divides in f32. The casts themselves match
tests/reference/float8_reference.py exactly.)

Recipes (docs/float8.md): tensorwise (e4m3 x and W, e5m2 gradients, one
scale per tensor), rowwise (e4m3, one power-of-two scale per row the GEMM
reduces), mxfp8 (e4m3 in blocks of 32 along the reduced dim, scale
2^(floor(log2 amax) - 8)). Prints one JSON line: the median step seconds of each recipe.

Usage: float8_peer.py --dim 256 --layers 6 --heads 16 --hidden 768 --vocab 2048 --seq 512 --batch 4
                      --steps 5 --warmup 1 --threads 2 [--recipes bf16,tensorwise,rowwise,mxfp8]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_peer import Model  # noqa: E402  (the same model as `titan bench train`'s peer)

# Largest finite value, mantissa bits, smallest normal exponent.
FORMATS = {"e4m3": (448.0, 3, -6), "e5m2": (57344.0, 2, -14)}
MX_BLOCK = 32


def round_to_format(v, fmt):
    """Saturates f32 `v` to the format's range and rounds it to nearest-even on its grid."""
    top, mantissa, min_exponent = FORMATS[fmt]
    v = v.clamp(-top, top)
    _, e = torch.frexp(v)  # v = m * 2^e with 0.5 <= |m| < 1: the value's binade is 2^(e - 1)
    spacing = torch.ldexp(torch.ones_like(v), e.clamp(min=min_exponent + 1) - 1 - mantissa)
    return torch.round(v / spacing) * spacing


def cast(t, dim, fmt, recipe):
    """The f32 values of `t` cast along `dim` (the GEMM's reduced dim) and the scale that divides them."""
    t = t.float()
    top = FORMATS[fmt][0]
    if recipe == "tensorwise":
        scale = (top / t.abs().max().double().clamp(min=1e-12)).float()
        return round_to_format(t * scale, fmt), scale
    if recipe == "rowwise":
        scale = top / t.abs().amax(dim=dim, keepdim=True).clamp(min=1e-12)
        scale = torch.exp2(torch.floor(torch.log2(scale)))
        return round_to_format(t * scale, fmt), scale
    # mxfp8: a power of two per block of 32 along `dim`; the values come back already multiplied by it.
    moved = t.movedim(dim, -1)
    blocks = moved.reshape(*moved.shape[:-1], -1, MX_BLOCK)
    amax = blocks.abs().amax(dim=-1, keepdim=True).clamp(min=2.0**-127)
    block_scale = torch.exp2(torch.floor(torch.log2(amax)) - 8)
    values = round_to_format(blocks / block_scale, fmt) * block_scale
    return values.reshape(moved.shape).movedim(-1, dim), torch.ones((), dtype=torch.float32)


def scaled_mm(a, b, fmt_a, fmt_b, recipe):
    """a [M, K] @ b [K, N] with both operands cast along K."""
    qa, sa = cast(a, 1, fmt_a, recipe)
    qb, sb = cast(b, 0, fmt_b, recipe)
    return torch.mm(qa.bfloat16(), qb.bfloat16()).float() / (sa * sb)


class Float8Matmul(torch.autograd.Function):
    """x [T, in] @ w[out, in]^T; like torchao's Float8Linear, saves x and w in
    high precision and casts them again along the backward GEMMs' dims."""

    @staticmethod
    def forward(ctx, x, w, recipe):
        ctx.save_for_backward(x, w)
        ctx.recipe = recipe
        return scaled_mm(x, w.t(), "e4m3", "e4m3", recipe).to(x.dtype)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        grad_format = "e5m2" if ctx.recipe == "tensorwise" else "e4m3"
        dx = scaled_mm(gy, w, grad_format, "e4m3", ctx.recipe).to(x.dtype)
        dw = scaled_mm(gy.t(), x, grad_format, "e4m3", ctx.recipe).to(w.dtype)
        return dx, dw, None


class Float8Linear(torch.nn.Module):
    def __init__(self, linear, recipe):
        super().__init__()
        self.weight = linear.weight
        self.recipe = recipe

    def forward(self, x):
        # Under autocast a Linear runs in bf16: the same operands here.
        dtype = torch.bfloat16 if torch.is_autocast_cpu_enabled() else x.dtype
        shape = x.shape
        y = Float8Matmul.apply(x.reshape(-1, shape[-1]).to(dtype), self.weight.to(dtype), self.recipe)
        return y.reshape(*shape[:-1], -1)


def build(a, recipe):
    torch.manual_seed(0)
    model = Model(a.vocab, a.dim, a.layers, a.heads, a.hidden)
    if recipe != "bf16":
        for block in model.layers:
            for name in ["wq", "wk", "wv", "wo", "w1", "w2", "w3"]:
                setattr(block, name, Float8Linear(getattr(block, name), recipe))
    return model


def median_step(a, recipe):
    """train_peer.py's step (AdamW, clipping, bf16 autocast) on random tokens; the median seconds."""
    model = build(a, recipe)
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
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(ids[:, :-1], cos, sin, mask)
            loss = F.cross_entropy(logits.float().reshape(-1, a.vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def main():
    p = argparse.ArgumentParser()
    for name in ["dim", "layers", "heads", "hidden", "vocab", "seq", "batch", "steps", "warmup", "threads"]:
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--recipes", default="bf16,tensorwise,rowwise,mxfp8")
    p.add_argument("--no-mkldnn", action="store_true", help="as train_peer.py: no oneDNN bf16 matmuls")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.mkldnn.enabled = not a.no_mkldnn
    # One flat object (the bench reads the last "{" of the output): "<recipe>_step_seconds" per recipe.
    result = {recipe + "_step_seconds": median_step(a, recipe) for recipe in a.recipes.split(",")}
    result.update({"torch": torch.__version__, "threads": torch.get_num_threads()})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
