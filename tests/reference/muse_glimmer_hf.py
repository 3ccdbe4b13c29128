"""Float64 PyTorch reference of the Muse Glimmer text decoder as Hugging Face
transformers computes it (MuseGlimmerForConditionalGeneration's text path:
modeling_muse_glimmer.py), on a state dict with transformers' tensor names.
Written from transformers' definition, apart from tests/reference/muse_glimmer.py
(written from TorchTitan's), so that the two agreeing through titan's
conversion is a check of the conversion. Where transformers differs from TorchTitan:

  * q/k rotate by halves (rotate_half: feature j pairs with j + head_dim/2),
    TorchTitan by neighbours (2i, 2i + 1): the HF q/k rows are a per-head
    permutation of TorchTitan's;
  * the query multiplier is the config's qk_scale_factor (TorchTitan: 43.78 /
    sqrt(head_dim)), on top of head_dim^-1/2;
  * which layers slide (layer_types) and which have no RoPE (layer_rope_theta
    zeros) are per-layer lists, the TorchTitan rule being only their default;
  * the multimodal forward embeds image_token_id / video_token_id as id 0
    (not modelled here: those ids exceed the test vocabulary);
  * its loss shifts the labels itself; here, as in titan, labels[t] is the
    target of position t.

  h0      = x / rms(x) of embed_tokens(ids)                 (eps rms_norm_eps)
  layer i: h = x + post_attention_layernorm(attn(input_layernorm(x)))
           out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))
           every layer norm x / rms(x) * (1 + w); the post norms with post_norm_eps
  attn:    q, k per head x / rms(x); q times qk_scale_factor; rotate_half RoPE
           unless layer_rope_theta[i] == 0; softmax(q k^T / sqrt(head_dim)) over
           the causal mask (sliding layers: i - j < sliding_window);
           times sigmoid(gate_proj(x)); o_proj
  logits  = T tanh(m * lm_head(norm(h)) / T)    norm: x / rms(x) * w; T = final_logit_softcapping
"""
import math

import torch


def rms(x, eps):
    return x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(config, weights, ids):
    """Logits [B, S, vocab] of the text config `config` (a dict) and `weights` (HF name -> tensor)."""
    c = config
    p = "model.language_model."
    n, heads, kv_heads, d = c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps, post_eps = c["rms_norm_eps"], c["post_norm_eps"]
    b, s = ids.shape
    w = lambda name: weights[name]  # noqa: E731
    x = rms(w(p + "embed_tokens.weight")[ids], eps)
    theta = c["rope_parameters"]["rope_theta"]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    # The table rounded to f32, as transformers' (and titan's) is.
    cos = torch.cos(angles).float().double()[None, None]
    sin = torch.sin(angles).float().double()[None, None]
    norm = lambda y, name, e: rms(y, e) * (1.0 + w(name))  # noqa: E731
    for i in range(n):
        q_ = f"{p}layers.{i}."
        h = norm(x, q_ + "input_layernorm.weight", eps)
        q = (h @ w(q_ + "self_attn.q_proj.weight").T).view(b, s, heads, d).transpose(1, 2)
        k = (h @ w(q_ + "self_attn.k_proj.weight").T).view(b, s, kv_heads, d).transpose(1, 2)
        v = (h @ w(q_ + "self_attn.v_proj.weight").T).view(b, s, kv_heads, d).transpose(1, 2)
        q = rms(q, eps) * c["qk_scale_factor"]
        k = rms(k, eps)
        if c["layer_rope_theta"][i] != 0:
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        group = heads // kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(2, 3) / math.sqrt(d)
        row, col = torch.arange(s)[:, None], torch.arange(s)[None, :]
        visible = col <= row
        if c["layer_types"][i] == "sliding_attention":
            visible = visible & (row - col < c["sliding_window"])
        scores = scores.masked_fill(~visible, float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, heads * d)
        out = out * torch.sigmoid(h @ w(q_ + "self_attn.gate_proj.weight").T)
        out = out @ w(q_ + "self_attn.o_proj.weight").T
        x = x + norm(out, q_ + "post_attention_layernorm.weight", post_eps)
        h = norm(x, q_ + "pre_feedforward_layernorm.weight", eps)
        gate = torch.nn.functional.silu(h @ w(q_ + "mlp.gate_proj.weight").T)
        ffn = (gate * (h @ w(q_ + "mlp.up_proj.weight").T)) @ w(q_ + "mlp.down_proj.weight").T
        x = x + norm(ffn, q_ + "post_feedforward_layernorm.weight", post_eps)
    x = rms(x, eps) * w(p + "norm.weight")
    head = w(p + "embed_tokens.weight") if c["tie_word_embeddings"] else w("lm_head.weight")
    cap = c["final_logit_softcapping"]
    return cap * torch.tanh(c["output_multiplier"] * (x @ head.T) / cap)
