"""Writes the cases tests/cuda/torch_cuda_test.cpp compares titan's CUDA ops
against: PyTorch's own kernels (cuBLAS, its softmax/SDPA/fused AdamW kernels)
run on the device, in f32 and in bf16. The build-time cases
(make_op_cases.py) check the math in float64 on the CPU; these check that
titan's GPU kernels agree with what a PyTorch training run on the same GPU
computes, so they need the GPU machine's PyTorch and are written there by
scripts/gpu_check.sh.

Usage: make_torch_cuda_cases.py OUTDIR [--device cuda|cpu]
(--device cpu is for smoke-testing the script where there is no GPU; it runs
on torch 1.13, so everything newer is guarded.)

One file per case and dtype, OUTDIR/<case>_<dtype>.safetensors. Inputs come
from a CPU generator seeded by the case name and are rounded to
bf16-representable values, so the f32 and bf16 files of a case hold the same
inputs and the bf16 ones are exact casts. Every floating tensor is stored as
f32 (a bf16 result converts exactly) and metadata "dtype.<name>" records the
dtype PyTorch produced it in; "dtype" is the case's compute dtype.

What the bf16 variant runs: where PyTorch has one kernel for the op
(matmul, softmax, silu, embedding, SDPA, fused AdamW) it runs natively on
bf16 tensors. Where the op is a composition of torch ops (rms_norm, swiglu,
RoPE, the cross-entropy over upcast logits) it runs in f32 on the bf16
inputs and rounds the result once, as training code upcasts; that is also
titan's contract for bf16 (f32 math, one rounding), so the comparison stays
tight instead of measuring PyTorch's intermediate roundings.

The C++ test names these cases; keep the two lists in step.
"""
import argparse
import inspect
import os
import sys
import traceback
import zlib

import torch
import torch.nn.functional as F

from safetensors_io import save

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
DTYPE_NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float64: "f64", torch.int64: "i64",
               torch.int32: "i32"}


class Inputs:
    """Random inputs from a CPU generator seeded by the case name: the same
    values for both dtypes and on every device."""

    def __init__(self, name):
        self.generator = torch.Generator().manual_seed(zlib.crc32(name.encode()))

    def normal(self, *shape, scale=1.0):
        return (torch.randn(*shape, generator=self.generator) * scale).bfloat16().float()

    def ints(self, low, high, *shape):
        return torch.randint(low, high, shape, generator=self.generator)


class Writer:
    def __init__(self, outdir, device):
        self.outdir, self.device = outdir, device
        self.written, self.failed = [], []
        self.common = {"torch_version": torch.__version__, "device": str(device)}
        if device.type == "cuda":
            self.common["gpu"] = torch.cuda.get_device_name(device)

    def write(self, name, dtype, tensors, **metadata):
        stored, meta = {}, dict(self.common)
        meta.update(metadata)
        meta["dtype"] = DTYPE_NAMES[dtype]
        for key, tensor in tensors.items():
            tensor = tensor.detach()
            meta["dtype." + key] = DTYPE_NAMES[tensor.dtype]
            stored[key] = tensor.float() if tensor.is_floating_point() else tensor
        file = f"{name}_{DTYPE_NAMES[dtype]}"
        save(os.path.join(self.outdir, file + ".safetensors"), stored, meta)
        self.written.append(file)


def leaf(tensor, device, dtype):
    # A copy even where .to would alias (f32 on the CPU): the stored input must stay as generated.
    return tensor.to(device=device, dtype=dtype, copy=True).requires_grad_(True)


def grads_of(output, inputs, grad_output):
    return torch.autograd.grad(output, inputs, grad_output)


# --- matmul ---------------------------------------------------------------

# name, A [.., M, K], B [.., K, N], A stored transposed, B stored transposed.
# Odd sizes keep every dimension off the tile and vector widths; "nt" is the
# linear layer (x @ W^T); long_k stresses the accumulation order.
MATMUL_CASES = [("matmul_nn", (257, 320), (320, 129), False, False),
                ("matmul_nt", (200, 512), (512, 384), False, True),
                ("matmul_tn", (256, 130), (130, 96), True, False),
                ("matmul_batched_tt", (3, 65, 190), (3, 190, 77), True, True),
                ("matmul_long_k", (64, 4096), (4096, 72), False, False)]


def stored_shape(shape, transposed):
    return shape[:-2] + (shape[-1], shape[-2]) if transposed else shape


def matmul_cases(w, dtype):
    for name, a_shape, b_shape, ta, tb in MATMUL_CASES:
        src = Inputs(name)
        a, b = src.normal(*stored_shape(a_shape, ta)), src.normal(*stored_shape(b_shape, tb))
        a_dev, b_dev = a.to(w.device, dtype), b.to(w.device, dtype)
        a_view = a_dev.transpose(-1, -2) if ta else a_dev
        b_view = b_dev.transpose(-1, -2) if tb else b_dev
        tensors = {"a": a, "b": b, "c": torch.matmul(a_view, b_view)}
        if dtype == torch.bfloat16:
            # bf16 operands into an f32 result: products of bf16 values are
            # exact in f32, so PyTorch's f32 GEMM on the widened operands is
            # that result up to summation order.
            tensors["c_f32"] = torch.matmul(a_view.float(), b_view.float())
        w.write(name, dtype, tensors, transpose_a=int(ta), transpose_b=int(tb))


# --- normalisation, activations, softmax ------------------------------------

RMS_NORM_CASES = [("rms_norm_d2048", (2, 37, 2048)), ("rms_norm_d96", (5, 33, 96))]


def rms_norm_cases(w, dtype):
    eps = 1e-5
    for name, shape in RMS_NORM_CASES:
        src = Inputs(name)
        x_in, w_in, g_in = src.normal(*shape, scale=2.0), src.normal(shape[-1]), src.normal(*shape)
        x, weight = leaf(x_in, w.device, dtype), leaf(w_in, w.device, dtype)
        xf = x.float()
        y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(dtype)
        dx, dw = grads_of(y, [x, weight], g_in.to(w.device, dtype))
        w.write(name, dtype, {"x": x_in, "weight": w_in, "grad_y": g_in, "y": y, "grad_x": dx, "grad_weight": dw},
                eps=eps)


SOFTMAX_CASES = [("softmax_rows", (64, 1000)), ("softmax_vocab", (4, 32003))]


def softmax_cases(w, dtype):
    for name, shape in SOFTMAX_CASES:
        src = Inputs(name)
        x_in, g_in = src.normal(*shape, scale=4.0), src.normal(*shape)
        x = leaf(x_in, w.device, dtype)
        y = torch.softmax(x, dim=-1)
        (dx,) = grads_of(y, [x], g_in.to(w.device, dtype))
        w.write(name, dtype, {"x": x_in, "grad_y": g_in, "y": y, "grad_x": dx})


def silu_cases(w, dtype):
    src = Inputs("silu")
    x_in, g_in = src.normal(129, 1000, scale=3.0), src.normal(129, 1000)
    x = leaf(x_in, w.device, dtype)
    y = F.silu(x)
    (dx,) = grads_of(y, [x], g_in.to(w.device, dtype))
    w.write("silu", dtype, {"x": x_in, "grad_y": g_in, "y": y, "grad_x": dx})


def swiglu_cases(w, dtype):
    src = Inputs("swiglu")
    shape = (64, 1376)
    gate_in, up_in, g_in = src.normal(*shape, scale=3.0), src.normal(*shape), src.normal(*shape)
    gate, up = leaf(gate_in, w.device, dtype), leaf(up_in, w.device, dtype)
    y = (F.silu(gate.float()) * up.float()).to(dtype)
    dgate, dup = grads_of(y, [gate, up], g_in.to(w.device, dtype))
    w.write("swiglu", dtype, {"gate": gate_in, "up": up_in, "grad_y": g_in, "y": y, "grad_gate": dgate,
                              "grad_up": dup})


# --- embedding, cross-entropy -----------------------------------------------

def embedding_cases(w, dtype):
    src = Inputs("embedding")
    vocab, dim = 1000, 128
    w_in = src.normal(vocab, dim)
    ids = src.ints(0, vocab, 4, 129)
    ids[0, :40] = 7  # one row gathers many contributions: the scatter-add's accumulation
    ids[1, ::3] = vocab - 1
    g_in = src.normal(4, 129, dim)
    weight = leaf(w_in, w.device, dtype)
    y = F.embedding(ids.to(w.device), weight)
    (dw,) = grads_of(y, [weight], g_in.to(w.device, dtype))
    w.write("embedding", dtype, {"weight": w_in, "ids": ids, "grad_y": g_in, "y": y, "grad_weight": dw})


CROSS_ENTROPY_CASES = [("cross_entropy_mean", True), ("cross_entropy_sum", False)]


def cross_entropy_cases(w, dtype):
    for name, mean in CROSS_ENTROPY_CASES:
        src = Inputs(name)
        rows, vocab, ignore_index = 129, 2053, -100
        logits_in = src.normal(rows, vocab, scale=3.0)
        targets = src.ints(0, vocab, rows)
        targets[::7] = ignore_index
        grad_loss = torch.tensor(0.7)  # not 1, so a backward that ignores it shows; f32 on both sides
        logits = leaf(logits_in, w.device, dtype)
        # Training code upcasts the logits: loss and lse in f32, the gradient
        # rounded once to the logits' dtype by the cast's backward.
        loss = F.cross_entropy(logits.float(), targets.to(w.device), ignore_index=ignore_index,
                               reduction="mean" if mean else "sum")
        (dlogits,) = grads_of(loss, [logits], grad_loss.to(w.device))
        lse = torch.logsumexp(logits.detach().float(), dim=-1)
        w.write(name, dtype, {"logits": logits_in, "targets": targets, "grad_loss": grad_loss, "loss": loss,
                              "lse": lse, "grad_logits": dlogits},
                ignore_index=ignore_index, mean=int(mean), counted_tokens=int((targets != ignore_index).sum()))


# --- attention -------------------------------------------------------------

# name, batch, seq, query heads, kv heads, head dim: causal, Sq == Sk (training).
ATTENTION_CASES = [("attention_gqa_d64", 2, 257, 8, 2, 64), ("attention_gqa_d128", 1, 300, 4, 1, 128),
                   ("attention_mha_d32", 2, 130, 4, 4, 32)]


def sdpa_causal(q, k, v):
    """q [B, Hq, S, D], k/v [B, Hkv, S, D]: PyTorch's fused SDPA where this
    torch has it (enable_gqa where supported, else kv heads repeated, which
    autograd sums back), else the math written out in f32."""
    group = q.shape[1] // k.shape[1]
    if hasattr(F, "scaled_dot_product_attention"):
        if group > 1:
            try:  # a builtin: inspect.signature cannot tell whether it takes enable_gqa (torch >= 2.5)
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), "sdpa_enable_gqa"
            except TypeError:
                pass
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True), "sdpa"
    k, v = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
    return causal_attention_math(q.float(), k, v).to(q.dtype), "math"


def causal_attention_math(q, k, v):
    seq = q.shape[2]
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    hidden = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ v


def attention_cases(w, dtype):
    for name, batch, seq, heads, kv_heads, dim in ATTENTION_CASES:
        src = Inputs(name)
        # titan's layout [B, S, H, D]; SDPA's is [B, H, S, D].
        q_in, k_in, v_in = (src.normal(batch, seq, heads, dim), src.normal(batch, seq, kv_heads, dim),
                            src.normal(batch, seq, kv_heads, dim))
        g_in = src.normal(batch, seq, heads, dim)
        q, k, v = (leaf(t, w.device, dtype) for t in (q_in, k_in, v_in))
        out, impl = sdpa_causal(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        out = out.transpose(1, 2)
        dq, dk, dv = grads_of(out, [q, k, v], g_in.to(w.device, dtype))
        # The log-sum-exp titan saves for its backward, [B, Hq, S], in f32 from
        # the same (bf16-exact) inputs: SDPA does not return it.
        group = heads // kv_heads
        qf = q_in.to(w.device).transpose(1, 2)
        kf = k_in.to(w.device).transpose(1, 2).repeat_interleave(group, dim=1)
        scores = qf @ kf.transpose(-1, -2) * dim ** -0.5
        hidden = torch.ones(seq, seq, dtype=torch.bool, device=w.device).triu(1)
        lse = torch.logsumexp(scores.masked_fill(hidden, float("-inf")), dim=-1)
        w.write(name, dtype, {"q": q_in, "k": k_in, "v": v_in, "grad_out": g_in, "out": out, "lse": lse,
                              "grad_q": dq, "grad_k": dk, "grad_v": dv},
                causal=1, scale=repr(dim ** -0.5), impl=impl)


# --- RoPE --------------------------------------------------------------------

# name, [B, S, H, D], theta, packed: positions restarting per document (with
# large values) instead of 0..S-1 (which the C++ side then leaves implicit).
ROPE_CASES = [("rope_half_d64", (2, 40, 4, 64), 10000.0, False),
              ("rope_half_d128_packed", (2, 96, 4, 128), 500000.0, True)]


def rope_cases(w, dtype):
    for name, shape, theta, packed in ROPE_CASES:
        src = Inputs(name)
        batch, seq, _, dim = shape
        x_in, g_in = src.normal(*shape, scale=2.0), src.normal(*shape)
        if packed:
            starts = src.ints(0, 6000, batch, 4)  # each row: 4 documents of seq/4 tokens at random offsets
            positions = (starts[:, :, None] + torch.arange(seq // 4)).reshape(batch, seq)
        else:
            positions = torch.arange(seq).expand(batch, seq).contiguous()
        # The angle table as titan builds it (and HF does, in f64): theta^(-2i/D)
        # times the position, in f64, rounded once to f32 for cos and sin.
        freqs = 1.0 / theta ** (torch.arange(dim // 2, dtype=torch.float64, device=w.device) * 2 / dim)
        angles = positions.to(w.device, torch.float64)[..., None] * freqs
        cos = torch.cat([angles.cos(), angles.cos()], dim=-1).float()[:, :, None, :]
        sin = torch.cat([angles.sin(), angles.sin()], dim=-1).float()[:, :, None, :]
        x = leaf(x_in, w.device, dtype)
        xf = x.float()
        rotated = torch.cat([-xf[..., dim // 2:], xf[..., :dim // 2]], dim=-1)  # HF's rotate_half: half pairing
        y = (xf * cos + rotated * sin).to(dtype)
        (dx,) = grads_of(y, [x], g_in.to(w.device, dtype))
        tensors = {"x": x_in, "grad_y": g_in, "y": y, "grad_x": dx}
        if packed:
            tensors["positions"] = positions
        w.write(name, dtype, tensors, theta=theta, max_positions=int(positions.max()) + 1, style="half")


# --- AdamW -------------------------------------------------------------------

def adamw_cases(w, dtype):
    """A few steps of torch.optim.AdamW (fused on CUDA) over tensors whose
    gradient scales differ, the smallest near eps; state in the parameters'
    dtype as PyTorch keeps it. Several steps, so bias correction and both
    betas show (the first step alone is lr * sign(g) to within eps)."""
    src = Inputs("adamw")
    shapes, grad_scales = [(257, 129), (1000,), (3,)], [1.0, 1e-3, 1e-6]
    lr, betas, eps, weight_decay, steps = 1e-2, (0.9, 0.95), 1e-8, 0.1, 3
    initial = [src.normal(*s) for s in shapes]
    grads = [[src.normal(*s, scale=scale) for s, scale in zip(shapes, grad_scales)] for _ in range(steps)]
    params = [torch.nn.Parameter(p.to(device=w.device, dtype=dtype, copy=True)) for p in initial]  # updated in place
    options = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    fused = w.device.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW.__init__).parameters
    optimizer = torch.optim.AdamW(params, **options, **({"fused": True} if fused else {"foreach": True}))
    tensors = {}
    for i, p in enumerate(initial):
        tensors[f"param{i}"] = p
    for step in range(steps):
        for i, p in enumerate(params):
            p.grad = grads[step][i].to(w.device, dtype)
            tensors[f"grad{i}_step{step}"] = grads[step][i]
        optimizer.step()
    for i, p in enumerate(params):
        state = optimizer.state[p]
        tensors[f"final{i}"] = p.detach().clone()
        tensors[f"exp_avg{i}"] = state["exp_avg"]
        tensors[f"exp_avg_sq{i}"] = state["exp_avg_sq"]
    w.write("adamw", dtype, tensors, lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=weight_decay,
            steps=steps, count=len(shapes), impl="fused" if fused else "foreach")


MAKERS = [matmul_cases, rms_norm_cases, softmax_cases, silu_cases, swiglu_cases, embedding_cases,
          cross_entropy_cases, attention_cases, rope_cases, adamw_cases]


def exact_f32_on(device):
    """f32 results must be f32 math: no TF32 in cuBLAS, and no bf16 partial
    sums in split-K bf16 GEMMs (both off by default today; set explicitly)."""
    torch.set_float32_matmul_precision("highest")
    if device.type != "cuda":
        return
    try:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    except Exception as e:  # noqa: BLE001 - older torch: no such switch (torch 1.13 raises AssertionError)
        print(f"make_torch_cuda_cases: cannot disable bf16 reduced-precision reductions: {e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (smoke test)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"make_torch_cuda_cases: torch {torch.__version__} sees no CUDA device")
    os.makedirs(args.outdir, exist_ok=True)
    exact_f32_on(device)
    writer = Writer(args.outdir, device)
    # Each maker on its own: one that this torch cannot run leaves the others'
    # cases (the C++ test skips the missing ones by name).
    for make in MAKERS:
        for dtype in DTYPES.values():
            try:
                make(writer, dtype)
            except Exception:  # noqa: BLE001 - reported below, and the exit status says so
                writer.failed.append(f"{make.__name__}({DTYPE_NAMES[dtype]})")
                traceback.print_exc()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"make_torch_cuda_cases: torch {torch.__version__} on {writer.common.get('gpu', device)}: "
          f"{len(writer.written)} cases in {args.outdir}")
    if writer.failed:
        sys.exit("make_torch_cuda_cases: failed: " + ", ".join(writer.failed))


if __name__ == "__main__":
    main()
