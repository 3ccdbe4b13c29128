"""Writes the float8 reference cases (float8_reference.py): for each recipe, a
Linear's inputs and, in float64, its output and gradients; and single casts
of each granularity with their values and scales.

Usage: make_float8_cases.py OUTDIR
"""
import json
import os
import sys

import torch

import float8_reference as f8
from safetensors_io import save


def spread(rows, cols, seed, scale=1.0, octaves=6):
    """bf16-representable values (one case checks f32 and bf16 inputs) whose rows and columns differ in magnitude by up to 2^12, so
    that tensorwise, rowwise and block scales all choose differently, with a
    few exact zeros and values below e4m3's smallest subnormal after scaling."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    x = x * torch.pow(2.0, torch.randint(-octaves, octaves + 1, (rows, 1), generator=g).float())
    x = x * torch.pow(2.0, torch.randint(-octaves, octaves + 1, (1, cols), generator=g).float())
    x[0, :3] = 0.0
    x[1, 5] = 1e-30
    return (x * scale).bfloat16().double()


def llama3_linears(dim, heads, kv_heads, ffn, layers, vocab):
    """TorchTitan's llama3 Linears as (fqn, out, in)."""
    hd = dim // heads
    shapes = {"attention.wq": (heads * hd, dim), "attention.wk": (kv_heads * hd, dim),
              "attention.wv": (kv_heads * hd, dim), "attention.wo": (dim, heads * hd),
              "feed_forward.w1": (ffn, dim), "feed_forward.w2": (dim, ffn), "feed_forward.w3": (ffn, dim)}
    out = [(f"layers.{i}.{name}", o, k) for i in range(layers) for name, (o, k) in shapes.items()]
    return out + [("output", vocab, dim)]


def torchtitan_filter(fqn, n, k, filter_fqns, recipe_name):
    """TorchTitan v0.2.2's module_filter_fn, or with "auto_filter_small_kn" torchao's
    _auto_filter_for_recipe (the thresholds of its H100 benchmarks)."""
    if "auto_filter_small_kn" in filter_fqns:
        names = [f for f in filter_fqns if f != "auto_filter_small_kn"]
        if any(f in fqn for f in names) or k % 16 or n % 16:
            return False
        if recipe_name == "rowwise":
            return not (n <= 2048 or k <= 1024 or (n <= 4096 and k <= 2048))
        return not (k <= 4096 and n <= 1024)
    return k % 16 == 0 and n % 16 == 0 and not any(f in fqn for f in filter_fqns)


def filter_cases(outdir):
    models = {"8B": (4096, 32, 8, 14336, 32, 128256), "70B": (8192, 64, 8, 28672, 80, 128256)}
    settings = {"output": (["output"], "tensorwise"), "none": ([], "tensorwise"),
                "auto_tensorwise": (["output", "auto_filter_small_kn"], "tensorwise"),
                "auto_rowwise": (["output", "auto_filter_small_kn"], "rowwise"),
                "kv": (["attention.wk", "attention.wv", "output"], "rowwise")}
    meta = {}
    for flavor, shape in models.items():
        for setting, (fqns, recipe_name) in settings.items():
            picked = [f for f, n, k in llama3_linears(*shape) if torchtitan_filter(f, n, k, fqns, recipe_name)]
            meta[f"{flavor}/{setting}"] = json.dumps(picked)
    meta.update({f"settings/{k}": json.dumps({"filter_fqns": v[0], "recipe": v[1]}) for k, v in settings.items()})
    save(os.path.join(outdir, "float8_filter.safetensors"), {"unused": torch.zeros(1, dtype=torch.float64)}, meta)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    # MX needs every reduced dim (in, out and the tokens) divisible by 32; the others get odd sizes.
    shapes = {"tensorwise": (40, 72, 56), "rowwise": (40, 72, 56), "rowwise_with_gw_hp": (40, 72, 56),
              "mxfp8": (64, 96, 64)}
    for seed, (name, (m, k, n)) in enumerate(shapes.items()):
        x, w, gy = spread(m, k, 10 + seed), spread(n, k, 20 + seed, 0.05), spread(m, n, 30 + seed, 1e-3)
        y, grad_x, grad_w = f8.linear(x, w, gy, f8.recipe(name))
        save(os.path.join(outdir, f"float8_linear_{name}.safetensors"),
             {"x": x, "w": w, "grad_y": gy, "y": y, "grad_x": grad_x, "grad_w": grad_w}, {"recipe": name})
    x = spread(64, 96, 99)
    casts = {"tensorwise_e4m3": ("tensorwise", "e4m3", False), "tensorwise_e5m2": ("tensorwise", "e5m2", False),
             "rowwise_pow2_e4m3": ("axiswise", "e4m3", True), "rowwise_e5m2": ("axiswise", "e5m2", False),
             "mx_e4m3": ("mx", "e4m3", False), "mx_e5m2": ("mx", "e5m2", False),
             "mx_rceil_e4m3": ("mx", "e4m3", False, "rceil"), "mx_rceil_e5m2": ("mx", "e5m2", False, "rceil")}
    for name, c in casts.items():
        tensors = {"x": x}
        for axis in (0, 1):
            values, scale = f8.cast(x, c, axis)
            tensors[f"values_axis{axis}"] = values
            if scale is not None:
                tensors[f"scale_axis{axis}"] = scale.double()
        save(os.path.join(outdir, f"float8_cast_{name}.safetensors"), tensors,
             {"scaling": c[0], "format": c[1], "power_of_two": str(c[2]).lower(),
              "rounding": c[3] if len(c) > 3 else "floor"})
    # MoE experts: 4 experts, one without tokens, groups that are not multiples of 16 or 32. Rows and
    # columns spread over 2^24, so that within a slice some values fall below e4m3's normal range once
    # scaled: with power-of-two scales only those, and saturation, show which slices the scales cover.
    counts = [37, 0, 45, 22]
    for seed, (name, (c, align)) in enumerate(f8.GROUPED_RECIPES.items()):
        rows = sum(counts)
        x, gy = spread(rows, 64, 40 + seed, octaves=12), spread(rows, 96, 50 + seed, 1e-3, octaves=12)
        w = torch.stack([spread(96, 64, 60 + 4 * seed + e, 0.05, octaves=12) for e in range(len(counts))])
        y, grad_x, grad_w = f8.grouped_gemm(x, w, gy, counts, c, align)
        save(os.path.join(outdir, f"float8_grouped_{name}.safetensors"),
             {"x": x, "w": w, "grad_y": gy, "counts": torch.tensor(counts, dtype=torch.float64), "y": y,
              "grad_x": grad_x, "grad_w": grad_w}, {"recipe": name})
    filter_cases(outdir)
    with open(os.path.join(outdir, ".float8_stamp"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
