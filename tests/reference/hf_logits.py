"""Logits of a Hugging Face LlamaForCausalLM / Qwen3ForCausalLM /
Qwen3MoeForCausalLM folder, computed the way transformers' modeling_llama.py,
modeling_qwen3.py and modeling_qwen3_moe.py do: HF tensor names, half-rotation
RoPE (rotate_half), Qwen3's q/k RMSNorm before RoPE, repeat_kv for
grouped-query attention, Qwen3-MoE's sparse blocks (every decoder_sparse_step-th
layer not in mlp_only_layers: softmax router, top k, optional renormalisation,
each expert a SwiGLU over its tokens), lm_head tied to embed_tokens when
tie_word_embeddings. Plain PyTorch in float64; it shares nothing with model.py
(which follows titan's names and Meta's interleaved RoPE), so titan's HF export
is checked against an independent reading of the format.

Usage: hf_logits.py HF_DIR INPUTS.safetensors OUT.safetensors [RESAVE_DIR]
  INPUTS holds input_ids [B, S] (int64); OUT gets logits [B, S, vocab].
  RESAVE_DIR: the weights written back out, one shard per layer plus one for
  the rest, with an index, to check titan's reader against another writer.
"""
import json
import math
import os
import shutil
import sys

import torch

from safetensors_io import load, save

INDEX = "model.safetensors.index.json"


def load_folder(folder):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    index_path = os.path.join(folder, INDEX)
    if os.path.exists(index_path):
        with open(index_path) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        tensors, metadata = load(os.path.join(folder, name))
        assert metadata.get("format") == "pt", f"{name}: transformers needs metadata format = pt, got {metadata}"
        weights.update(tensors)
    return config, weights


def inv_freq(config, head_dim):
    """transformers' default RoPE frequencies, with its 'llama3' rope_scaling rule."""
    base = config.get("rope_theta", 10000.0)
    freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    scaling = config.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / freq
        scaled = torch.where(wavelen > low_wavelen, freq / factor, freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        freq = torch.where(medium, smoothed, scaled)
    return freq


def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def swiglu(x, get, prefix):
    gate = torch.nn.functional.silu(x @ get(prefix + "gate_proj.weight").T)
    return (gate * (x @ get(prefix + "up_proj.weight").T)) @ get(prefix + "down_proj.weight").T


def is_sparse_layer(config, i):
    """Qwen3MoeDecoderLayer's choice between Qwen3MoeSparseMoeBlock and a dense MLP."""
    return (config["architectures"][0] == "Qwen3MoeForCausalLM" and i not in config.get("mlp_only_layers", [])
            and config["num_experts"] > 0 and (i + 1) % config.get("decoder_sparse_step", 1) == 0)


def sparse_moe(config, x, get, prefix):
    """Qwen3MoeSparseMoeBlock: token by token, its top-k experts weighted by the router."""
    b, s, d = x.shape
    tokens = x.reshape(-1, d)
    probs = torch.softmax(tokens @ get(prefix + "gate.weight").T, dim=-1)
    weights, chosen = torch.topk(probs, config["num_experts_per_tok"], dim=-1)
    if config.get("norm_topk_prob", False):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(tokens)
    for expert in range(config["num_experts"]):
        token, slot = torch.nonzero(chosen == expert, as_tuple=True)
        if token.numel() == 0:
            for name in ("gate_proj", "up_proj", "down_proj"):
                get(f"{prefix}experts.{expert}.{name}.weight")
            continue
        rows = swiglu(tokens[token], get, f"{prefix}experts.{expert}.")
        out.index_add_(0, token, rows * weights[token, slot, None])
    return out.view(b, s, d)


def logits(config, w, ids):
    used = set()

    def get(name):
        used.add(name)
        return w[name].double()

    qwen3 = config["architectures"][0] in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    eps = config["rms_norm_eps"]
    b, s = ids.shape
    angles = torch.arange(s, dtype=torch.float64)[:, None] * inv_freq(config, head_dim)[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [S, D], broadcast over batch and heads
    causal = torch.full((s, s), float("-inf"), dtype=torch.float64).triu(1)

    h = get("model.embed_tokens.weight")[ids]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, get(p + "input_layernorm.weight"), eps)
        q = (x @ get(p + "self_attn.q_proj.weight").T).view(b, s, heads, head_dim)
        k = (x @ get(p + "self_attn.k_proj.weight").T).view(b, s, kv_heads, head_dim)
        v = (x @ get(p + "self_attn.v_proj.weight").T).view(b, s, kv_heads, head_dim)
        if qwen3:
            q = rms_norm(q, get(p + "self_attn.q_norm.weight"), eps)
            k = rms_norm(k, get(p + "self_attn.k_norm.weight"), eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=1)  # repeat_kv
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = q @ k.transpose(2, 3) * head_dim ** -0.5 + causal
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, heads * head_dim)
        h = h + out @ get(p + "self_attn.o_proj.weight").T
        x = rms_norm(h, get(p + "post_attention_layernorm.weight"), eps)
        h = h + (sparse_moe(config, x, get, p + "mlp.") if is_sparse_layer(config, i) else swiglu(x, get, p + "mlp."))
    h = rms_norm(h, get("model.norm.weight"), eps)
    if config.get("tie_word_embeddings", False):
        assert "lm_head.weight" not in w, "tied embeddings: HF folders omit lm_head.weight"
        head = get("model.embed_tokens.weight")
    else:
        head = get("lm_head.weight")
    unused = set(w) - used
    assert not unused, f"tensors a {config['architectures'][0]} does not have: {sorted(unused)}"
    return h @ head.T


def resave(folder, config, weights, out):
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(folder, "config.json"), os.path.join(out, "config.json"))
    groups = {}
    for name, tensor in weights.items():
        parts = name.split(".")
        key = f"layer{parts[2]}" if name.startswith("model.layers.") else "rest"
        groups.setdefault(key, {})[name] = tensor
    weight_map, total = {}, 0
    for key, tensors in sorted(groups.items()):
        file = f"weights-{key}.safetensors"
        save(os.path.join(out, file), tensors, {"format": "pt"})
        for name, tensor in tensors.items():
            weight_map[name] = file
            total += tensor.numel() * tensor.element_size()
    with open(os.path.join(out, INDEX), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def main():
    folder, inputs, output = sys.argv[1:4]
    torch.set_num_threads(1)
    config, weights = load_folder(folder)
    ids = load(inputs)[0]["input_ids"].long()
    with torch.no_grad():
        save(output, {"logits": logits(config, weights, ids)})
    if len(sys.argv) > 4:
        resave(folder, config, weights, sys.argv[4])


if __name__ == "__main__":
    main()
