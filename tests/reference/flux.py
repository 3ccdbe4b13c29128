"""A plain-PyTorch FLUX transformer (the rectified-flow diffusion transformer
of FLUX.1), written from its equations for titan's tests, in float64.

Parameter names follow TorchTitan's `flux` model (double_blocks.N.img_attn.qkv,
single_blocks.N.linear1, final_layer.adaLN_modulation.1, ...). Nothing here is
shared with titan: LayerNorm, RMSNorm, GELU (tanh), the three-axis RoPE and
attention are spelled out below.
"""
import math

import torch
from torch import nn

F64 = torch.float64

# A tiny configuration for the parity tests: 4 heads of 16 features, the
# RoPE axes 4 + 6 + 6 wide, the guidance embedding on.
TINY = dict(in_channels=16, out_channels=16, vec_in_dim=32, context_in_dim=48, hidden_size=64, mlp_ratio=4.0,
            num_heads=4, depth=2, depth_single_blocks=2, axes_dim=(4, 6, 6), theta=10000.0, qkv_bias=True,
            guidance_embed=True)
NORM_EPS = 1e-6


def layer_norm(x, eps=NORM_EPS):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def rms_norm(x, weight, eps=NORM_EPS):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def timestep_embedding(t, dim, max_period=10000.0, time_factor=1000.0):
    """cos then sin of t * time_factor times each frequency. FLUX computes this
    in float32: the scaled time, each frequency and their product are rounded
    to float32 here as they are there; cos and sin are then taken in float64."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=F64) / half).float()
    args = ((time_factor * t.to(F64)).float()[:, None] * freqs[None]).to(F64)
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def rope_angles(ids, axes_dim, theta):
    """ids [B, L, 3] -> cos and sin [B, L, D/2]: axis a's pairs turn by
    ids[..., a] * theta^(-2i / axes_dim[a])."""
    angles = []
    for axis, width in enumerate(axes_dim):
        freqs = theta ** (-torch.arange(0, width, 2, dtype=F64) / width)
        angles.append(ids[..., axis].to(F64)[..., None] * freqs)
    angle = torch.cat(angles, dim=-1)
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x, cos, sin):
    """x [B, L, H, D]: each interleaved pair (x[2i], x[2i+1]) rotated by its angle."""
    even, odd = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    return torch.stack([c * even - s * odd, s * even + c * odd], dim=-1).flatten(-2)


def attention(q, k, v):
    """Non-causal attention of [B, L, H, D] tensors -> [B, L, H * D]."""
    scores = torch.einsum("blhd,bmhd->bhlm", q, k) / math.sqrt(q.shape[-1])
    out = torch.einsum("bhlm,bmhd->blhd", torch.softmax(scores, dim=-1), v)
    return out.flatten(-2)


class Gelu(nn.Module):
    def forward(self, x):
        return gelu_tanh(x)


class MLPEmbedder(nn.Module):
    def __init__(self, in_dim, hidden):
        super().__init__()
        self.in_layer = nn.Linear(in_dim, hidden, dtype=F64)
        self.out_layer = nn.Linear(hidden, hidden, dtype=F64)

    def forward(self, x):
        h = self.in_layer(x)
        return self.out_layer(h * torch.sigmoid(h))


class QKNorm(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.query_norm = nn.Module()
        self.query_norm.weight = nn.Parameter(torch.ones(head_dim, dtype=F64))
        self.key_norm = nn.Module()
        self.key_norm.weight = nn.Parameter(torch.ones(head_dim, dtype=F64))


class Modulation(nn.Module):
    def __init__(self, hidden, pieces):
        super().__init__()
        self.pieces = pieces
        self.lin = nn.Linear(hidden, pieces * hidden, dtype=F64)

    def forward(self, vec):
        """-> shift, scale, gate [B, 1, D] for each branch."""
        out = self.lin(vec * torch.sigmoid(vec))[:, None, :].chunk(self.pieces, dim=-1)
        return [out[i:i + 3] for i in range(0, self.pieces, 3)]


def split_heads(qkv, heads, norm):
    b, l, _ = qkv.shape
    q, k, v = qkv.reshape(b, l, 3, heads, -1).unbind(2)
    return rms_norm(q, norm.query_norm.weight), rms_norm(k, norm.key_norm.weight), v


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads, qkv_bias):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=qkv_bias, dtype=F64)
        self.norm = QKNorm(hidden // heads)
        self.proj = nn.Linear(hidden, hidden, dtype=F64)


class DoubleStreamBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden, mlp = c["hidden_size"], int(c["hidden_size"] * c["mlp_ratio"])
        for stream in ("img", "txt"):
            setattr(self, stream + "_mod", Modulation(hidden, 6))
            setattr(self, stream + "_attn", SelfAttention(hidden, c["num_heads"], c["qkv_bias"]))
            setattr(self, stream + "_mlp", nn.Sequential(nn.Linear(hidden, mlp, dtype=F64), Gelu(),
                                                         nn.Linear(mlp, hidden, dtype=F64)))

    def forward(self, img, txt, vec, cos, sin):
        (i_shift1, i_scale1, i_gate1), (i_shift2, i_scale2, i_gate2) = self.img_mod(vec)
        (t_shift1, t_scale1, t_gate1), (t_shift2, t_scale2, t_gate2) = self.txt_mod(vec)
        iq, ik, iv = split_heads(self.img_attn.qkv((1 + i_scale1) * layer_norm(img) + i_shift1),
                                 self.img_attn.heads, self.img_attn.norm)
        tq, tk, tv = split_heads(self.txt_attn.qkv((1 + t_scale1) * layer_norm(txt) + t_shift1),
                                 self.txt_attn.heads, self.txt_attn.norm)
        q = apply_rope(torch.cat([tq, iq], 1), cos, sin)
        k = apply_rope(torch.cat([tk, ik], 1), cos, sin)
        out = attention(q, k, torch.cat([tv, iv], 1))
        t_out, i_out = out[:, :txt.shape[1]], out[:, txt.shape[1]:]
        img = img + i_gate1 * self.img_attn.proj(i_out)
        img = img + i_gate2 * self.img_mlp((1 + i_scale2) * layer_norm(img) + i_shift2)
        txt = txt + t_gate1 * self.txt_attn.proj(t_out)
        txt = txt + t_gate2 * self.txt_mlp((1 + t_scale2) * layer_norm(txt) + t_shift2)
        return img, txt


class SingleStreamBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden = c["hidden_size"]
        self.hidden, self.heads, self.mlp = hidden, c["num_heads"], int(hidden * c["mlp_ratio"])
        self.linear1 = nn.Linear(hidden, 3 * hidden + self.mlp, dtype=F64)
        self.linear2 = nn.Linear(hidden + self.mlp, hidden, dtype=F64)
        self.norm = QKNorm(hidden // self.heads)
        self.modulation = Modulation(hidden, 3)

    def forward(self, x, vec, cos, sin):
        ((shift, scale, gate),) = self.modulation(vec)
        qkv, mlp = self.linear1((1 + scale) * layer_norm(x) + shift).split([3 * self.hidden, self.mlp], dim=-1)
        q, k, v = split_heads(qkv, self.heads, self.norm)
        out = attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)
        return x + gate * self.linear2(torch.cat([out, gelu_tanh(mlp)], dim=-1))


class LastLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden = c["hidden_size"]
        self.linear = nn.Linear(hidden, c["out_channels"], dtype=F64)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden, dtype=F64))

    def forward(self, x, vec):
        shift, scale = self.adaLN_modulation(vec).chunk(2, dim=1)
        return self.linear((1 + scale[:, None, :]) * layer_norm(x) + shift[:, None, :])


class Flux(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        hidden = c["hidden_size"]
        self.img_in = nn.Linear(c["in_channels"], hidden, dtype=F64)
        self.time_in = MLPEmbedder(256, hidden)
        if c["guidance_embed"]:
            self.guidance_in = MLPEmbedder(256, hidden)
        self.vector_in = MLPEmbedder(c["vec_in_dim"], hidden)
        self.txt_in = nn.Linear(c["context_in_dim"], hidden, dtype=F64)
        self.double_blocks = nn.ModuleList([DoubleStreamBlock(c) for _ in range(c["depth"])])
        self.single_blocks = nn.ModuleList([SingleStreamBlock(c) for _ in range(c["depth_single_blocks"])])
        self.final_layer = LastLayer(c)

    def forward(self, img, img_ids, txt, txt_ids, timesteps, y, guidance=None):
        img = self.img_in(img)
        vec = self.time_in(timestep_embedding(timesteps, 256))
        if self.c["guidance_embed"]:
            vec = vec + self.guidance_in(timestep_embedding(guidance, 256))
        vec = vec + self.vector_in(y)
        txt = self.txt_in(txt)
        cos, sin = rope_angles(torch.cat([txt_ids, img_ids], dim=1), self.c["axes_dim"], self.c["theta"])
        for block in self.double_blocks:
            img, txt = block(img, txt, vec, cos, sin)
        x = torch.cat([txt, img], dim=1)
        for block in self.single_blocks:
            x = block(x, vec, cos, sin)
        return self.final_layer(x[:, txt.shape[1]:], vec)


def diffusers_state(model):
    """The model's weights under Diffusers' FluxTransformer2DModel names: q, k
    and v (and a single block's MLP input) as separate projections, and the
    final modulation's halves in Diffusers' order (scale, then shift)."""
    c, out = model.c, {}
    hidden, mlp = c["hidden_size"], int(c["hidden_size"] * c["mlp_ratio"])
    p = {name: t.detach() for name, t in model.named_parameters()}

    def linear(src, dst):
        for kind in ("weight", "bias"):
            if f"{src}.{kind}" in p:
                out[f"{dst}.{kind}"] = p[f"{src}.{kind}"]

    def split(src, dsts, sizes):
        for kind in ("weight", "bias"):
            for dst, piece in zip(dsts, p[f"{src}.{kind}"].split(sizes, dim=0)):
                out[f"{dst}.{kind}"] = piece

    linear("img_in", "x_embedder")
    linear("txt_in", "context_embedder")
    for src, dst in (("time_in", "timestep_embedder"), ("vector_in", "text_embedder"),
                     ("guidance_in", "guidance_embedder")):
        linear(f"{src}.in_layer", f"time_text_embed.{dst}.linear_1")
        linear(f"{src}.out_layer", f"time_text_embed.{dst}.linear_2")
    for i in range(c["depth"]):
        s, d = f"double_blocks.{i}", f"transformer_blocks.{i}"
        linear(f"{s}.img_mod.lin", f"{d}.norm1.linear")
        linear(f"{s}.txt_mod.lin", f"{d}.norm1_context.linear")
        split(f"{s}.img_attn.qkv", [f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v"], hidden)
        split(f"{s}.txt_attn.qkv", [f"{d}.attn.add_q_proj", f"{d}.attn.add_k_proj", f"{d}.attn.add_v_proj"], hidden)
        out[f"{d}.attn.norm_q.weight"] = p[f"{s}.img_attn.norm.query_norm.weight"]
        out[f"{d}.attn.norm_k.weight"] = p[f"{s}.img_attn.norm.key_norm.weight"]
        out[f"{d}.attn.norm_added_q.weight"] = p[f"{s}.txt_attn.norm.query_norm.weight"]
        out[f"{d}.attn.norm_added_k.weight"] = p[f"{s}.txt_attn.norm.key_norm.weight"]
        linear(f"{s}.img_attn.proj", f"{d}.attn.to_out.0")
        linear(f"{s}.txt_attn.proj", f"{d}.attn.to_add_out")
        linear(f"{s}.img_mlp.0", f"{d}.ff.net.0.proj")
        linear(f"{s}.img_mlp.2", f"{d}.ff.net.2")
        linear(f"{s}.txt_mlp.0", f"{d}.ff_context.net.0.proj")
        linear(f"{s}.txt_mlp.2", f"{d}.ff_context.net.2")
    for i in range(c["depth_single_blocks"]):
        s, d = f"single_blocks.{i}", f"single_transformer_blocks.{i}"
        split(f"{s}.linear1", [f"{d}.attn.to_q", f"{d}.attn.to_k", f"{d}.attn.to_v", f"{d}.proj_mlp"],
              [hidden, hidden, hidden, mlp])
        linear(f"{s}.linear2", f"{d}.proj_out")
        linear(f"{s}.modulation.lin", f"{d}.norm.linear")
        out[f"{d}.attn.norm_q.weight"] = p[f"{s}.norm.query_norm.weight"]
        out[f"{d}.attn.norm_k.weight"] = p[f"{s}.norm.key_norm.weight"]
    linear("final_layer.linear", "proj_out")
    for kind in ("weight", "bias"):
        shift, scale = p[f"final_layer.adaLN_modulation.1.{kind}"].chunk(2, dim=0)
        out[f"norm_out.linear.{kind}"] = torch.cat([scale, shift], dim=0)
    return out
