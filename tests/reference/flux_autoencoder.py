"""A plain-PyTorch FLUX.1 autoencoder (Black Forest Labs' ae.safetensors
model: flux/modules/autoencoder.py), written from its definition for titan's
tests, in float64: group norms (written out from the formula), SiLU, 3x3
convolutions (torch.nn.functional.conv2d), resnet blocks with 1x1 shortcuts
where the width changes, downsampling by zero padding on the bottom and right
then a stride-2 conv, nearest-neighbour upsampling (torch's interpolate) then
a conv, and single-head attention over the positions (softmax written out) in
the middle. encode returns the Gaussian's mean scaled as scale * (mean -
shift); decode undoes the scaling. Parameter names are ae.safetensors'.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

F64 = torch.float64

# ch_mult of three levels (two downsamplings), so that two decoder levels share
# their shapes and only the numbers catch a level run in the wrong order; widths
# 8 and 16 in groups of 4, so each group holds several channels.
TINY = dict(resolution=16, in_channels=3, ch=8, out_ch=3, ch_mult=(1, 2, 2), num_res_blocks=1, z_channels=4,
            scale_factor=0.3611, shift_factor=0.1159, num_groups=4)
EPS = 1e-6


def group_norm(x, groups, weight, bias, eps=EPS):
    b, c = x.shape[:2]
    g = x.reshape(b, groups, -1)
    mean = g.mean(-1, keepdim=True)
    var = ((g - mean) ** 2).mean(-1, keepdim=True)
    normed = ((g - mean) / torch.sqrt(var + eps)).reshape(x.shape)
    return normed * weight.reshape(1, c, 1, 1) + bias.reshape(1, c, 1, 1)


def silu(x):
    return x * torch.sigmoid(x)


class Norm(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(torch.ones(channels, dtype=F64))
        self.bias = nn.Parameter(torch.zeros(channels, dtype=F64))

    def forward(self, x):
        return group_norm(x, self.groups, self.weight, self.bias)


class Conv(nn.Module):
    def __init__(self, c_in, c_out, kernel):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(c_out, c_in, kernel, kernel, dtype=F64))
        self.bias = nn.Parameter(torch.zeros(c_out, dtype=F64))

    def forward(self, x, stride=1, padding=0):
        return F.conv2d(x, self.weight, self.bias, stride=stride, padding=padding)


class ResnetBlock(nn.Module):
    def __init__(self, c_in, c_out, groups):
        super().__init__()
        self.norm1 = Norm(c_in, groups)
        self.conv1 = Conv(c_in, c_out, 3)
        self.norm2 = Norm(c_out, groups)
        self.conv2 = Conv(c_out, c_out, 3)
        if c_in != c_out:
            self.nin_shortcut = Conv(c_in, c_out, 1)

    def forward(self, x):
        h = self.conv1(silu(self.norm1(x)), padding=1)
        h = self.conv2(silu(self.norm2(h)), padding=1)
        skip = self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x
        return skip + h


class AttnBlock(nn.Module):
    def __init__(self, c, groups):
        super().__init__()
        self.norm = Norm(c, groups)
        self.q, self.k, self.v, self.proj_out = Conv(c, c, 1), Conv(c, c, 1), Conv(c, c, 1), Conv(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        n = self.norm(x)
        q, k, v = (p(n).reshape(b, c, h * w).transpose(1, 2) for p in (self.q, self.k, self.v))  # [b, hw, c]
        weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(c), dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(b, c, h, w)
        return x + self.proj_out(out)


class Downsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = Conv(c, c, 3)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)), stride=2)  # (left, right, top, bottom)


class Upsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = Conv(c, c, 3)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"), padding=1)


class Holder(nn.Module):
    """A named node of the parameter tree."""


def middle(c, groups):
    mid = Holder()
    mid.block_1 = ResnetBlock(c, c, groups)
    mid.attn_1 = AttnBlock(c, groups)
    mid.block_2 = ResnetBlock(c, c, groups)
    return mid


def run_middle(mid, h):
    return mid.block_2(mid.attn_1(mid.block_1(h)))


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        g, widths = c["num_groups"], [c["ch"] * m for m in c["ch_mult"]]
        self.conv_in = Conv(c["in_channels"], c["ch"], 3)
        self.down = nn.ModuleList()
        block_in = c["ch"]
        for i, width in enumerate(widths):
            level = Holder()
            level.block = nn.ModuleList()
            for _ in range(c["num_res_blocks"]):
                level.block.append(ResnetBlock(block_in, width, g))
                block_in = width
            if i != len(widths) - 1:
                level.downsample = Downsample(block_in)
            self.down.append(level)
        self.mid = middle(block_in, g)
        self.norm_out = Norm(block_in, g)
        self.conv_out = Conv(block_in, 2 * c["z_channels"], 3)

    def forward(self, x):
        h = self.conv_in(x, padding=1)
        for level in self.down:
            for block in level.block:
                h = block(h)
            if hasattr(level, "downsample"):
                h = level.downsample(h)
        h = run_middle(self.mid, h)
        return self.conv_out(silu(self.norm_out(h)), padding=1)


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        g, widths = c["num_groups"], [c["ch"] * m for m in c["ch_mult"]]
        block_in = widths[-1]
        self.conv_in = Conv(c["z_channels"], block_in, 3)
        self.mid = middle(block_in, g)
        levels = []
        for i in reversed(range(len(widths))):
            level = Holder()
            level.block = nn.ModuleList()
            for _ in range(c["num_res_blocks"] + 1):
                level.block.append(ResnetBlock(block_in, widths[i], g))
                block_in = widths[i]
            if i != 0:
                level.upsample = Upsample(block_in)
            levels.insert(0, level)
        self.up = nn.ModuleList(levels)  # up[0]: the highest resolution, run last
        self.norm_out = Norm(block_in, g)
        self.conv_out = Conv(block_in, c["out_ch"], 3)

    def forward(self, z):
        h = run_middle(self.mid, self.conv_in(z, padding=1))
        for level in reversed(self.up):
            for block in level.block:
                h = block(h)
            if hasattr(level, "upsample"):
                h = level.upsample(h)
        return self.conv_out(silu(self.norm_out(h)), padding=1)


class AutoEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.encoder = Encoder(c)
        self.decoder = Decoder(c)

    def moments(self, x):
        """[B, 2 z, h, w]: the Gaussian's mean, then its log-variance."""
        return self.encoder(x)

    def encode(self, x):
        mean = self.moments(x)[:, : self.c["z_channels"]]
        return self.c["scale_factor"] * (mean - self.c["shift_factor"])

    def decode(self, latent):
        return self.decoder(latent / self.c["scale_factor"] + self.c["shift_factor"])
