"""Float8 training's casts and scaled GEMMs in float64, written from the OCP
FP8 and MX specifications and torchao's recipes (PyTorch 1.13 here has no
fp8 dtype): the reference tests/ops/float8_test.cpp compares titan against.

A cast of x for a GEMM reducing over `axis`:
  - tensorwise / axiswise: scale = f32(fmax / max(amax, 1e-12)) (f64 division),
    optionally 2^floor(log2(scale)); x * scale in f32; saturate; round to
    nearest-even on the fp8 grid.
  - mx: per 32 elements along axis, e = floor(log2(amax)) - emax clamped to
    [-127, 128] (or, "rceil", e = ceil(log2(f32(amax * f32(1 / fmax)))) at
    least -127); x * 2^-e in f32, saturate, round, times 2^e.
The MoE experts' grouped GEMMs (grouped_gemm) cast every operand alike, the
weight gradient's along each expert's tokens padded with zero rows.
"""
import torch

# name: (mantissa bits, largest finite, emax, exponent of the smallest normal)
FORMATS = {"e4m3": (3, 448.0, 8, -6), "e5m2": (2, 57344.0, 15, -14)}
MX_BLOCK = 32


def to_grid(v, fmt):
    """Saturates float64 v to +-fmax and rounds it to nearest-even on fmt's grid."""
    mbits, fmax, _, min_exp = FORMATS[fmt]
    c = v.clamp(-fmax, fmax)
    _, e = torch.frexp(c)  # |c| = m 2^e, m in [0.5, 1): the binade's exponent is e - 1
    e = torch.clamp(e.double() - 1, min=min_exp)
    quantum = torch.pow(2.0, e - mbits)
    return torch.round(c / quantum) * quantum  # torch.round rounds halves to even


def scale_from_amax(amax, fmt, power_of_two):
    fmax = FORMATS[fmt][1]
    scale = (fmax / torch.clamp(amax.double(), min=1e-12)).float()
    if power_of_two:
        _, e = torch.frexp(scale)
        scale = torch.pow(2.0, e.float() - 1)
    return scale


def cast(x, c, axis):
    """x [R, C] float64 holding f32 values; c = (scaling, fmt, power_of_two) or None
    (high precision). Returns (values float64, scale f32 tensor or None)."""
    if c is None:
        return x, None
    scaling, fmt, pow2 = c[:3]
    xf = x.float()
    if scaling == "tensorwise":
        scale = scale_from_amax(xf.abs().max().reshape(1), fmt, pow2)
        return to_grid((xf * scale).double(), fmt), scale
    if scaling == "axiswise":
        amax = xf.abs().amax(dim=axis)
        scale = scale_from_amax(amax, fmt, pow2)
        scaled = xf * (scale.reshape(-1, 1) if axis == 1 else scale.reshape(1, -1))
        return to_grid(scaled.double(), fmt), scale
    assert scaling == "mx"
    emax = FORMATS[fmt][2]
    blocks = xf if axis == 1 else xf.t()
    rows, cols = blocks.shape
    blocks = blocks.reshape(rows, cols // MX_BLOCK, MX_BLOCK)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    if len(c) > 3 and c[3] == "rceil":
        # the smallest power of two at least amax / fmax, computed in f32 (torchao's _to_mx_rceil)
        descale = amax * torch.tensor(1.0 / FORMATS[fmt][1], dtype=torch.float32)
        m, k = torch.frexp(descale)
        e = torch.where(m == 0.5, k - 1, k)
        e = torch.where(descale > 0, e, torch.full_like(e, -127))
        e = torch.clamp(e, min=-127).double()
    else:
        _, e = torch.frexp(amax)
        e = torch.where(amax > 0, e - 1, torch.full_like(e, -127))
        e = torch.clamp(e - emax, -127, 128).double()
    values = to_grid((blocks * torch.pow(2.0, -e).float()).double(), fmt) * torch.pow(2.0, e)
    values = values.reshape(rows, cols)
    return (values if axis == 1 else values.t()), None


def scaled_mm(a, a_scale, b, b_scale):
    y = a @ b
    if a_scale is not None:
        y = y / a_scale.double().reshape(-1, 1)
    if b_scale is not None:
        y = y / b_scale.double().reshape(1, -1)
    return y


def linear(x, w, gy, recipe):
    """Forward y = x w^T and both gradients, each GEMM on operands cast as
    `recipe` (a dict of six casts) along the dim it reduces."""
    xa, sx = cast(x, recipe["input"], 1)
    wa, sw = cast(w, recipe["weight"], 1)
    y = scaled_mm(xa, sx, wa.t(), sw)
    ga, sg = cast(gy, recipe["grad_output"], 1)
    wb, swb = cast(w, recipe["weight_for_grad_input"], 0)
    grad_x = scaled_mm(ga, sg, wb, swb)
    gb, sgb = cast(gy, recipe["grad_output_for_grad_weight"], 0)
    xb, sxb = cast(x, recipe["input_for_grad_weight"], 0)
    grad_w = scaled_mm(gb.t(), sgb, xb, sxb)
    return y, grad_x, grad_w


def recipe(name):
    """torchao's recipes by TorchTitan's names (torchao/float8/config.py, prototype/mx_formats)."""
    if name == "tensorwise":
        e4, e5 = ("tensorwise", "e4m3", False), ("tensorwise", "e5m2", False)
        return {"input": e4, "weight": e4, "grad_output": e5, "weight_for_grad_input": e4,
                "input_for_grad_weight": e4, "grad_output_for_grad_weight": e5}
    row = ("axiswise", "e4m3", True)
    if name == "rowwise":
        return {k: row for k in ["input", "weight", "grad_output", "weight_for_grad_input", "input_for_grad_weight",
                                 "grad_output_for_grad_weight"]}
    if name == "rowwise_with_gw_hp":
        return {"input": row, "weight": row, "grad_output": row, "weight_for_grad_input": ("tensorwise", "e4m3", True),
                "input_for_grad_weight": None, "grad_output_for_grad_weight": None}
    assert name == "mxfp8"
    mx = ("mx", "e4m3", False)
    return {k: mx for k in ["input", "weight", "grad_output", "weight_for_grad_input", "input_for_grad_weight",
                            "grad_output_for_grad_weight"]}


def dequantize(values, scale, axis):
    """A cast operand's values divided by their scales (MX values carry theirs)."""
    if scale is None:
        return values
    return values / (scale.double().reshape(-1, 1) if axis == 1 else scale.double().reshape(1, -1))


def grouped_gemm(x, w, gy, counts, c, align):
    """The MoE experts' GEMMs y_e = x_e w[e]^T and both gradients, as torchao's
    MoE training casts them (every operand with cast c along the dim its GEMM
    reduces): x and gy per row, w[e] along in for the forward and along out
    for the input gradient, and for the weight gradient gy_e and x_e down
    expert e's tokens, padded with zero rows to a multiple of `align`
    (TorchTitan's token-group alignment), the padding dropped after."""
    experts, out, inner = w.shape
    rows = x.shape[0]

    def fake(t, axis):
        return dequantize(*cast(t, c, axis), axis)

    xq, gq = fake(x, 1), fake(gy, 1)
    y = torch.zeros(rows, out, dtype=torch.float64)
    grad_x = torch.zeros(rows, inner, dtype=torch.float64)
    grad_w = torch.zeros(experts, out, inner, dtype=torch.float64)
    start = 0
    for e, n in enumerate(counts):
        part = slice(start, start + n)
        start += n
        y[part] = xq[part] @ fake(w[e], 1).t()
        grad_x[part] = gq[part] @ fake(w[e], 0)
        if n == 0:
            continue
        padded = -(-n // align) * align

        def pad(t):
            return torch.cat([t, torch.zeros(padded - n, t.shape[1], dtype=t.dtype)])

        grad_w[e] = fake(pad(gy[part]), 0)[:n].t() @ fake(pad(x[part]), 0)[:n]
    return y, grad_x, grad_w


# TorchTitan's grouped-GEMM converters' casts and token-group alignments.
GROUPED_RECIPES = {"rowwise": (("axiswise", "e4m3", True), 16), "mxfp8": (("mx", "e4m3", False, "rceil"), 32)}
