"""RoPE scaling in float64, written from the formulas of Hugging Face
transformers' modeling_rope_utils (transformers 5) for each rope_type: inverse
frequencies of the first rotary_dim features and the attention factor that
multiplies cos and sin. Plain Python math; shares nothing with
titan or transformers.

  default   f_i = theta^(-2i / d), i < d / 2
  linear    f_i / factor
  dynamic   f_i with theta * (factor * L / L0 - (factor - 1))^(d / (d - 2)) for
            theta, L the sequence length (titan: the table's), when L > L0
  yarn      ramp r_i = clamp((i - low) / (high - low), 0, 1) between the
            dimensions where a frequency turns beta_fast (low) and beta_slow
            (high) times over L0: dim(n) = d ln(L0 / (2 pi n)) / (2 ln theta),
            floored / ceiled when truncate, clipped to [0, d - 1];
            f_i = f_i / factor * r_i + f_i * (1 - r_i);
            attention factor mscale(factor) = 0.1 ln(factor) + 1 (1 when
            factor <= 1), or mscale(factor, mscale) / mscale(factor, mscale_all_dim),
            or the given attention_factor
  longrope  f_i / ext_i with ext = long_factor when L > L0, else short_factor;
            attention factor sqrt(1 + ln(factor) / ln(L0)) when factor > 1
  llama3    wavelength 2 pi / f_i: above L0 / low_freq_factor divided by factor,
            below L0 / high_freq_factor kept, smoothly blended between
"""
import math


def mscale(scale, m=1.0):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def inverse_frequencies(dim, theta, scaling, length):
    """scaling: dict with "type" and the type's keys (original = L0); length: the table's rows."""
    kind = scaling.get("type", "default") if scaling else "default"
    base = float(theta)
    if kind == "dynamic" and length > scaling["original"]:
        factor = scaling["factor"]
        base = theta * (factor * length / scaling["original"] - (factor - 1)) ** (dim / (dim - 2))
    plain = [1.0 / base ** (2 * i / dim) for i in range(dim // 2)]
    if kind in ("default", "dynamic"):
        return plain
    if kind == "linear":
        return [f / scaling["factor"] for f in plain]
    if kind == "yarn":
        def dimension(rotations):
            return dim * math.log(scaling["original"] / (rotations * 2 * math.pi)) / (2 * math.log(theta))
        low, high = dimension(scaling.get("beta_fast", 32.0)), dimension(scaling.get("beta_slow", 1.0))
        if scaling.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        out = []
        for i, f in enumerate(plain):
            r = min(max((i - low) / (high - low), 0.0), 1.0)
            out.append(f / scaling["factor"] * r + f * (1 - r))
        return out
    if kind == "longrope":
        ext = scaling["long_factor"] if length > scaling["original"] else scaling["short_factor"]
        return [1.0 / (e * theta ** (2 * i / dim)) for i, e in enumerate(ext)]
    if kind == "llama3":
        factor, low, high, old = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"], \
            scaling["original"]
        out = []
        for f in plain:
            wavelen = 2 * math.pi / f
            if wavelen < old / high:
                out.append(f)
            elif wavelen > old / low:
                out.append(f / factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        return out
    raise ValueError(f"unknown rope type {kind}")


def attention_factor(scaling):
    kind = scaling.get("type", "default") if scaling else "default"
    if kind not in ("yarn", "longrope"):
        return 1.0
    if scaling.get("attention_factor"):
        return scaling["attention_factor"]
    factor = scaling["factor"]
    if kind == "yarn":
        if scaling.get("mscale") and scaling.get("mscale_all_dim"):
            return mscale(factor, scaling["mscale"]) / mscale(factor, scaling["mscale_all_dim"])
        return mscale(factor)
    return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(scaling["original"]))


def tables(dim, theta, scaling, length, rows):
    """cos, sin [rows, dim / 2] (lists of lists, float64) times the attention factor."""
    freqs = inverse_frequencies(dim, theta, scaling, length)
    a = attention_factor(scaling)
    cos = [[math.cos(p * f) * a for f in freqs] for p in range(rows)]
    sin = [[math.sin(p * f) * a for f in freqs] for p in range(rows)]
    return cos, sin
