"""Float64 PyTorch reference of Hugging Face's Qwen3.5 text decoder
(transformers' modeling_qwen3_5.py / modeling_qwen3_5_moe.py), computed
straight from the tensors of an HF folder under their HF names and layouts,
so that titan's reading of those layouts is checked against transformers'
own maths, independently of titan and of tests/reference/qwen3_5.py
(TorchTitan's form, titan's names):

  q_proj [heads * 2 * head_dim, hidden]: per head the query rows, then the
      output gate's (view(..., heads, 2 * head_dim).chunk(2));
  in_proj_qkv: q, k, v rows; conv1d.weight [channels, 1, kernel]: a
      depthwise causal conv over q | k | v channels, then silu;
  norms: x / rms(x) * (1 + w), but the Gated DeltaNet's output norm
      (Qwen3_5RMSNormGated): x / rms(x) * w * silu(z);
  experts: gate_up_proj [E, 2 * I, hidden] (gate rows, then up rows),
      down_proj [E, hidden, I]; softmax top-k renormalised; the shared expert
      times sigmoid(shared_expert_gate x);
  RoPE: rotate-half on the first int(head_dim * partial_rotary_factor)
      features; text positions give every mrope section the same angle, so
      the table is plain RoPE (rounded to f32 as transformers' is).

The labels are taken as given (titan's convention; transformers' loss
shifts them itself). to_titan() maps HF tensors (and their gradients) to
titan's names: a second, Python statement of the layouts above.
"""
import json
import math

import torch
import torch.nn.functional as F

# A tiny model with every piece of the family: 4 layers (3 Gated DeltaNet,
# 1 full attention), 2 key heads serving 4 value heads, partial RoPE.
TINY = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            intermediate_size=48, vocab_size=96, linear_conv_kernel_dim=4, linear_key_head_dim=8,
            linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
            partial_rotary_factor=0.5, rope_theta=10000.0, rms_norm_eps=1e-6)
TINY_MOE = dict(TINY, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
                shared_expert_intermediate_size=16)


def layer_types(c):
    return ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(c["num_hidden_layers"])]


def config_json(c, moe, multimodal, tie):
    """config.json text in the published forms: rope_parameters with the mrope sections and partial factor."""
    text = {k: v for k, v in c.items() if k not in ("partial_rotary_factor", "rope_theta")}
    if moe:
        text.pop("intermediate_size")
    text.update(hidden_act="silu", max_position_embeddings=256, attention_bias=False, attention_dropout=0.0,
                layer_types=layer_types(c), full_attention_interval=4, attn_output_gate=True,
                mamba_ssm_dtype="float32", mtp_num_hidden_layers=1, tie_word_embeddings=tie,
                rope_parameters=dict(rope_type="default", rope_theta=c["rope_theta"], mrope_section=[1, 1, 0],
                                     mrope_interleaved=True, partial_rotary_factor=c["partial_rotary_factor"]))
    if moe:
        text.update(router_aux_loss_coef=0.001, output_router_logits=False)
    text_type = "qwen3_5_moe_text" if moe else "qwen3_5_text"
    if not multimodal:
        text.update(architectures=["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"], model_type=text_type,
                    torch_dtype="float32")
        return json.dumps(text, indent=2)
    text["model_type"] = text_type
    outer = dict(architectures=["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
                 model_type="qwen3_5_moe" if moe else "qwen3_5", text_config=text, tie_word_embeddings=tie,
                 image_token_id=90, video_token_id=91, vision_start_token_id=92, vision_end_token_id=93,
                 vision_config=dict(model_type="qwen3_5_vision", depth=1, hidden_size=16, num_heads=2,
                                    out_hidden_size=c["hidden_size"]), torch_dtype="float32")
    return json.dumps(outer, indent=2)


def random_weights(c, moe, prefix, tie, generator):
    """HF tensors (float64 holding f32 values) that make every piece matter."""
    randn = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64)  # noqa: E731
    hidden, heads, kv, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    hk, hv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                      c["linear_value_head_dim"])
    key_dim, value_dim, kernel = hk * dk, hv * dv, c["linear_conv_kernel_dim"]
    linear = lambda rows, cols: randn(rows, cols) * cols ** -0.5  # noqa: E731
    w = {prefix + "embed_tokens.weight": randn(c["vocab_size"], hidden) * (hidden ** -0.5 if tie else 1.0)}
    for i, kind in enumerate(layer_types(c)):
        p = f"{prefix}layers.{i}."
        w[p + "input_layernorm.weight"] = 0.1 * randn(hidden)
        w[p + "post_attention_layernorm.weight"] = 0.1 * randn(hidden)
        if kind == "full_attention":
            w[p + "self_attn.q_proj.weight"] = linear(heads * 2 * d, hidden)
            w[p + "self_attn.k_proj.weight"] = linear(kv * d, hidden)
            w[p + "self_attn.v_proj.weight"] = linear(kv * d, hidden)
            w[p + "self_attn.o_proj.weight"] = linear(hidden, heads * d)
            w[p + "self_attn.q_norm.weight"] = 0.1 * randn(d)
            w[p + "self_attn.k_norm.weight"] = 0.1 * randn(d)
        else:
            a = p + "linear_attn."
            w[a + "in_proj_qkv.weight"] = linear(2 * key_dim + value_dim, hidden)
            w[a + "in_proj_z.weight"] = linear(value_dim, hidden)
            w[a + "in_proj_b.weight"] = linear(hv, hidden)
            w[a + "in_proj_a.weight"] = linear(hv, hidden)
            w[a + "conv1d.weight"] = 0.5 * randn(2 * key_dim + value_dim, 1, kernel)
            w[a + "A_log"] = torch.log(0.05 + 0.45 * torch.rand(hv, generator=generator, dtype=torch.float64))
            w[a + "dt_bias"] = 0.1 * randn(hv)
            w[a + "norm.weight"] = 1.0 + 0.1 * randn(dv)
            w[a + "out_proj.weight"] = linear(hidden, value_dim)
        if moe:
            e, inter, shared = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
            w[p + "mlp.gate.weight"] = randn(e, hidden)  # a wide router: stable top-k margins
            w[p + "mlp.experts.gate_up_proj"] = randn(e, 2 * inter, hidden) * hidden ** -0.5
            w[p + "mlp.experts.down_proj"] = randn(e, hidden, inter) * inter ** -0.5
            w[p + "mlp.shared_expert.gate_proj.weight"] = linear(shared, hidden)
            w[p + "mlp.shared_expert.up_proj.weight"] = linear(shared, hidden)
            w[p + "mlp.shared_expert.down_proj.weight"] = linear(hidden, shared)
            w[p + "mlp.shared_expert_gate.weight"] = linear(1, hidden)
        else:
            w[p + "mlp.gate_proj.weight"] = linear(c["intermediate_size"], hidden)
            w[p + "mlp.up_proj.weight"] = linear(c["intermediate_size"], hidden)
            w[p + "mlp.down_proj.weight"] = linear(hidden, c["intermediate_size"])
    w[prefix + "norm.weight"] = 0.1 * randn(hidden)
    if not tie:
        w["lm_head.weight"] = linear(c["vocab_size"], hidden)
    return {name: t.float().double() for name, t in w.items()}  # the values a float32 file holds


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope(x, c):
    """Rotate-half on the first int(head_dim * partial_rotary_factor) features of x [B, T, H, D]."""
    rotary = int(c["head_dim"] * c["partial_rotary_factor"])
    half = rotary // 2
    inv = 1.0 / c["rope_theta"] ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary)
    angles = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([angles.cos(), angles.cos()], -1).float().double()[None, :, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], -1).float().double()[None, :, None, :]
    x_rot, x_pass = x[..., :rotary], x[..., rotary:]
    rotated = torch.cat([-x_rot[..., half:], x_rot[..., :half]], -1)
    return torch.cat([x_rot * cos + rotated * sin, x_pass], -1)


def attention(x, w, p, c):
    b, t, _ = x.shape
    heads, kv, d, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    query, gate = torch.chunk((x @ w[p + "q_proj.weight"].T).view(b, t, heads, 2 * d), 2, dim=-1)
    gate = gate.reshape(b, t, heads * d)
    q = rms(query, eps) * (1.0 + w[p + "q_norm.weight"])
    k = rms((x @ w[p + "k_proj.weight"].T).view(b, t, kv, d), eps) * (1.0 + w[p + "k_norm.weight"])
    v = (x @ w[p + "v_proj.weight"].T).view(b, t, kv, d)
    q, k = rope(q, c), rope(k, c)
    k, v = k.repeat_interleave(heads // kv, dim=2), v.repeat_interleave(heads // kv, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * d ** -0.5
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    out = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, heads * d)
    return (out * torch.sigmoid(gate)) @ w[p + "o_proj.weight"].T


def gated_delta_net(x, w, p, c):
    b, t, _ = x.shape
    hk, hv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                      c["linear_value_head_dim"])
    conv_weight = w[p + "conv1d.weight"]
    mixed = (x @ w[p + "in_proj_qkv.weight"].T).transpose(1, 2)  # [B, C, T]
    mixed = F.conv1d(mixed, conv_weight, padding=conv_weight.shape[-1] - 1, groups=mixed.shape[1])[..., :t]
    mixed = F.silu(mixed).transpose(1, 2)
    q, k, v = torch.split(mixed, [hk * dk, hk * dk, hv * dv], dim=-1)
    q, k, v = q.reshape(b, t, hk, dk), k.reshape(b, t, hk, dk), v.reshape(b, t, hv, dv)
    z = (x @ w[p + "in_proj_z.weight"].T).reshape(b, t, hv, dv)
    beta = torch.sigmoid(x @ w[p + "in_proj_b.weight"].T)
    g = -w[p + "A_log"].exp() * F.softplus(x @ w[p + "in_proj_a.weight"].T + w[p + "dt_bias"])
    q, k = q.repeat_interleave(hv // hk, dim=2), k.repeat_interleave(hv // hk, dim=2)
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dk)
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    state, outs = torch.zeros(b, hv, dk, dv, dtype=x.dtype), []
    for i in range(t):  # torch_recurrent_gated_delta_rule
        state = state * g[:, i].exp()[..., None, None]
        memory = (state * k[:, i].unsqueeze(-1)).sum(-2)
        delta = (v[:, i] - memory) * beta[:, i].unsqueeze(-1)
        state = state + k[:, i].unsqueeze(-1) * delta.unsqueeze(-2)
        outs.append((state * q[:, i].unsqueeze(-1)).sum(-2))
    o = rms(torch.stack(outs, dim=1), c["rms_norm_eps"]) * w[p + "norm.weight"] * F.silu(z)
    return o.reshape(b, t, hv * dv) @ w[p + "out_proj.weight"].T


def mlp(x, w, p):
    return (F.silu(x @ w[p + "gate_proj.weight"].T) * (x @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T


def sparse_moe(x, w, p, c):
    shape, x = x.shape, x.reshape(-1, x.shape[-1])
    probs = (x @ w[p + "gate.weight"].T).softmax(-1)
    top, chosen = probs.topk(c["num_experts_per_tok"], dim=-1)
    top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(c["num_experts"]):
        token, slot = torch.where(chosen == e)
        if token.numel():
            gate, up = (x[token] @ w[p + "experts.gate_up_proj"][e].T).chunk(2, dim=-1)
            y = (F.silu(gate) * up) @ w[p + "experts.down_proj"][e].T
            out = out.index_add(0, token, y * top[token, slot, None])
    shared = mlp(x, w, p + "shared_expert.") * torch.sigmoid(x @ w[p + "shared_expert_gate.weight"].T)
    return (out + shared).reshape(shape)


def forward(w, c, moe, prefix, tie, ids):
    eps = c["rms_norm_eps"]
    x = w[prefix + "embed_tokens.weight"][ids]
    for i, kind in enumerate(layer_types(c)):
        p = f"{prefix}layers.{i}."
        h = rms(x, eps) * (1.0 + w[p + "input_layernorm.weight"])
        x = x + (attention(h, w, p + "self_attn.", c) if kind == "full_attention"
                 else gated_delta_net(h, w, p + "linear_attn.", c))
        h = rms(x, eps) * (1.0 + w[p + "post_attention_layernorm.weight"])
        x = x + (sparse_moe(h, w, p + "mlp.", c) if moe else mlp(h, w, p + "mlp."))
    x = rms(x, eps) * (1.0 + w[prefix + "norm.weight"])
    head = w[prefix + "embed_tokens.weight"] if tie else w["lm_head.weight"]
    return x @ head.T


def loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


def to_titan(tensors, c, prefix, tie):
    """HF tensors (or gradients) under titan's names and layouts."""
    out = {"tok_embeddings.weight": tensors[prefix + "embed_tokens.weight"],
           "norm.weight": tensors[prefix + "norm.weight"]}
    if not tie:
        out["output.weight"] = tensors["lm_head.weight"]
    heads, d = c["num_attention_heads"], c["head_dim"]
    key_dim = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    value_dim = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    for i, kind in enumerate(layer_types(c)):
        p, t = f"{prefix}layers.{i}.", f"layers.{i}."
        out[t + "attention_norm.weight"] = tensors[p + "input_layernorm.weight"]
        out[t + "ffn_norm.weight"] = tensors[p + "post_attention_layernorm.weight"]
        if kind == "full_attention":
            q_and_gate = tensors[p + "self_attn.q_proj.weight"].view(heads, 2, d, -1)
            out[t + "attention.wq.weight"] = q_and_gate[:, 0].reshape(heads * d, -1)
            out[t + "attention.o_gate.weight"] = q_and_gate[:, 1].reshape(heads * d, -1)
            for hf, titan in (("k_proj", "wk"), ("v_proj", "wv"), ("o_proj", "wo"), ("q_norm", "q_norm"),
                              ("k_norm", "k_norm")):
                out[t + f"attention.{titan}.weight"] = tensors[p + f"self_attn.{hf}.weight"]
        else:
            a = p + "linear_attn."
            q, k, v = tensors[a + "in_proj_qkv.weight"].split([key_dim, key_dim, value_dim])
            cq, ck, cv = tensors[a + "conv1d.weight"].squeeze(1).split([key_dim, key_dim, value_dim])
            out.update({t + "attention.in_proj_q.weight": q, t + "attention.in_proj_k.weight": k,
                        t + "attention.in_proj_v.weight": v, t + "attention.conv_q": cq, t + "attention.conv_k": ck,
                        t + "attention.conv_v": cv, t + "attention.A_log": tensors[a + "A_log"],
                        t + "attention.dt_bias": tensors[a + "dt_bias"], t + "attention.norm": tensors[a + "norm.weight"]})
            for name in ("in_proj_z", "in_proj_b", "in_proj_a", "out_proj"):
                out[t + f"attention.{name}.weight"] = tensors[a + f"{name}.weight"]
        if p + "mlp.gate.weight" in tensors:
            gate, up = tensors[p + "mlp.experts.gate_up_proj"].chunk(2, dim=1)
            out.update({t + "moe.router.gate.weight": tensors[p + "mlp.gate.weight"], t + "moe.experts.w1": gate,
                        t + "moe.experts.w3": up, t + "moe.experts.w2": tensors[p + "mlp.experts.down_proj"],
                        t + "moe.shared_expert_gate.weight": tensors[p + "mlp.shared_expert_gate.weight"]})
            for hf, titan in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")):
                out[t + f"moe.shared_experts.{titan}.weight"] = tensors[p + f"mlp.shared_expert.{hf}.weight"]
        else:
            for hf, titan in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")):
                out[t + f"feed_forward.{titan}.weight"] = tensors[p + f"mlp.{hf}.weight"]
    return {name: tensor.contiguous() for name, tensor in out.items()}


def hf_case(moe, multimodal, tie, seed):
    """The folder's tensors ("hf." + name; a multimodal one also holds a vision
    tensor and an MTP one, which titan skips), its config.json (metadata
    "config"), inputs, logits, loss and each titan parameter's gradient."""
    c = TINY_MOE if moe else TINY
    prefix = "model.language_model." if multimodal else "model."
    generator = torch.Generator().manual_seed(seed)
    w = {n: t.requires_grad_() for n, t in random_weights(c, moe, prefix, tie, generator).items()}
    ids = torch.randint(0, c["vocab_size"], (2, 20), generator=generator)
    labels = torch.randint(0, c["vocab_size"], (2, 20), generator=generator)
    labels[0, :3] = -100
    logits = forward(w, c, moe, prefix, tie, ids)
    value = loss(logits, labels)
    grads = dict(zip(w, torch.autograd.grad(value, list(w.values()))))
    tensors = {"hf." + n: t.detach() for n, t in w.items()}
    tensors.update({"grad." + n: g for n, g in to_titan(grads, c, prefix, tie).items()})
    if multimodal:
        tensors["hf.model.visual.patch_embed.proj.weight"] = torch.randn(16, 3, 2, 2, 2, generator=generator)
        tensors["hf.mtp.fc.weight"] = torch.randn(c["hidden_size"], 2 * c["hidden_size"], generator=generator)
    tensors.update(input_ids=ids, labels=labels, logits=logits.detach(), loss=value.detach())
    return tensors, {"config": config_json(c, moe, multimodal, tie)}
