"""Reference math for titan.cpp's ops, written directly from the definitions
in PyTorch (float64 unless the caller says otherwise). The C++ tests compare
against outputs and gradients computed here."""
import math

import torch


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_frequencies(head_dim, theta, scaling=None):
    """Per-pair angular frequencies, with Llama 3.1 scaling when `scaling`
    (factor, low_freq_factor, high_freq_factor, original_max_position) is given."""
    freqs = [1.0 / theta ** (2 * i / head_dim) for i in range(head_dim // 2)]
    if scaling:
        factor, low, high, old = scaling
        low_wavelen, high_wavelen = old / low, old / high
        scaled = []
        for f in freqs:
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                scaled.append(f)
            elif wavelen > low_wavelen:
                scaled.append(f / factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                scaled.append((1 - smooth) * f / factor + smooth * f)
        freqs = scaled
    return torch.tensor(freqs, dtype=torch.float64)


def rope(x, positions, freqs, style):
    """x [B, S, H, D]; positions [B, S]; style 'interleaved' (pairs 2i, 2i+1)
    or 'half' (pairs i, i + D/2)."""
    angles = positions.to(torch.float64)[..., None] * freqs  # [B, S, D/2]
    cos = torch.cos(angles).float().to(x.dtype)[:, :, None, :]  # rounded to f32 like the C++ table
    sin = torch.sin(angles).float().to(x.dtype)[:, :, None, :]
    half = x.shape[-1] // 2
    if style == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
        return out.flatten(-2)
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)


def attention_mask(batch, q_len, k_len, causal, window, doc_ids):
    """Boolean [B, Sq, Sk]: True where key j is visible from query i."""
    pos = torch.arange(k_len - q_len, k_len)[:, None]
    key = torch.arange(k_len)[None, :]
    visible = torch.ones(q_len, k_len, dtype=torch.bool)
    if causal:
        visible &= key <= pos
    if window:
        visible &= (pos - key) < window
    visible = visible[None].expand(batch, q_len, k_len).clone()
    if doc_ids is not None:
        q_docs = doc_ids[:, k_len - q_len:]
        visible &= q_docs[:, :, None] == doc_ids[:, None, :]
    return visible


def attention(q, k, v, scale, causal=True, window=0, doc_ids=None, softcap=0.0, sinks=None):
    """q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] -> [B, Sq, Hq, Dv];
    rows with no visible key give zeros. softcap > 0 caps the scaled scores at
    softcap * tanh(s / softcap) before the mask (Gemma 2). sinks [Hq] (gpt-oss)
    join each row's softmax as one more column, dropped after it (no value)."""
    batch, q_len, heads, _ = q.shape
    k_len, kv_heads = k.shape[1], k.shape[2]
    group = heads // kv_heads
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    visible = attention_mask(batch, q_len, k_len, causal, window, doc_ids)[:, None]
    scores = scores.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        column = sinks.reshape(1, heads, 1, 1).expand(batch, heads, q_len, 1)
        probs = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :k_len]
    else:
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", probs, v)


def cross_entropy(logits, targets, ignore_index=-100, softcap=0.0, z_loss=0.0, mean=True):
    if softcap > 0:
        logits = softcap * torch.tanh(logits / softcap)
    keep = targets != ignore_index
    lse = torch.logsumexp(logits, dim=-1)
    safe_targets = torch.where(keep, targets, torch.zeros_like(targets))
    picked = logits.gather(1, safe_targets[:, None])[:, 0]
    per_token = (lse - picked) + z_loss * lse * lse
    total = (per_token * keep).sum()
    count = keep.sum()
    return total / count if mean else total


def gated_delta_rule(q, k, v, g, beta, initial_state, normalize_qk=True, eps=1e-6):
    """Gated DeltaNet's recurrence token by token, as transformers'
    torch_recurrent_gated_delta_rule computes it: q, k [B, T, Hk, Dk] (key
    heads repeated to the value heads), v [B, T, Hv, Dv], g (log decay) and
    beta [B, T, Hv], state [B, Hv, Dk, Dv]. Returns (out [B, T, Hv, Dv],
    final state)."""
    repeat = v.shape[2] // q.shape[2]
    q, k = q.repeat_interleave(repeat, dim=2), k.repeat_interleave(repeat, dim=2)
    if normalize_qk:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + eps)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + eps)
    q = q * q.shape[-1] ** -0.5
    state, outs = initial_state, []
    for t in range(q.shape[1]):
        state = state * g[:, t].exp()[..., None, None]
        delta = (v[:, t] - (state * k[:, t, :, :, None]).sum(-2)) * beta[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        outs.append((state * q[:, t, :, :, None]).sum(-2))
    return torch.stack(outs, dim=1), state
