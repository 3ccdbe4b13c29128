"""A small random Hugging Face folder (config.json + model.safetensors, or
per-layer shards with an index) of one of the architectures
tests/reference/hf_families.py reads, for tests of titan's HF reader.

Shapes: hidden 64, 4 heads, 2 kv heads, head_dim 16, vocab 128, intermediate
128; sliding_window 4 (smaller than test sequences, so the window matters)
on Mistral, Phi-3 and the Gemma local layers. Mistral, Qwen 2, OLMo 2 and
Phi-3 have 2 layers; Qwen 2 and the Gemmas tie lm_head to the embeddings,
the others do not. Gemma 2 has 3 layers (local, global, local) and soft-caps
small enough to bend the logits (3.0 on attention, 2.0 on the output);
Gemma 3 has 4 layers, sliding_window_pattern 3 (local, local, global,
local). Both Gemmas use query_pre_attn_scalar 24 (not head_dim). Weights are
random with scales that keep activations O(1); norm weights are random
around 1 (around 0 for Gemma's 1 + w).

Usage: make_hf_family_folder.py ARCH OUT_DIR --seed S [--dtype float32|bfloat16] [--sharded]
                                [--set KEY=JSON ...]
  ARCH: mistral, qwen2, gemma2, gemma3, olmo2, phi3 (or the architectures[0] name).
  --sharded: one shard per layer plus one for the rest, with model.safetensors.index.json.
  --set: override a config.json entry (JSON value), e.g. --set sliding_window=null
         --set tie_word_embeddings=false --set 'rope_scaling={"rope_type":"linear","factor":2.0}'.
         Shapes follow the overridden config (tie_word_embeddings decides lm_head.weight).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import save  # noqa: E402

SHORT = {"mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM", "gemma2": "Gemma2ForCausalLM",
         "gemma3": "Gemma3ForCausalLM", "olmo2": "Olmo2ForCausalLM", "phi3": "Phi3ForCausalLM"}
MODEL_TYPE = {"MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2", "Gemma2ForCausalLM": "gemma2",
              "Gemma3ForCausalLM": "gemma3_text", "Olmo2ForCausalLM": "olmo2", "Phi3ForCausalLM": "phi3"}


def base_config(arch, dtype):
    config = {
        "architectures": [arch],
        "model_type": MODEL_TYPE[arch],
        "vocab_size": 128,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": dtype,
    }
    if arch == "MistralForCausalLM":
        config["sliding_window"] = 4
    elif arch == "Qwen2ForCausalLM":
        config.update(tie_word_embeddings=True, use_sliding_window=False, sliding_window=None, max_window_layers=2,
                      rope_theta=1000000.0)
    elif arch == "Gemma2ForCausalLM":
        config.update(num_hidden_layers=3, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
                      tie_word_embeddings=True, query_pre_attn_scalar=24, sliding_window=4,
                      attn_logit_softcapping=3.0, final_logit_softcapping=2.0, attention_bias=False)
    elif arch == "Gemma3ForCausalLM":
        config.update(num_hidden_layers=4, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
                      tie_word_embeddings=True, query_pre_attn_scalar=24, sliding_window=4, sliding_window_pattern=3,
                      rope_theta=1000000.0, rope_local_base_freq=10000.0, attn_logit_softcapping=None,
                      final_logit_softcapping=None, attention_bias=False)
    elif arch == "Olmo2ForCausalLM":
        config.update(rms_norm_eps=1e-5, attention_bias=False, rope_theta=500000.0)
    elif arch == "Phi3ForCausalLM":
        config.update(rms_norm_eps=1e-5, sliding_window=4, partial_rotary_factor=1.0,
                      original_max_position_embeddings=256)
    return config


def weights(config, generator):
    arch = config["architectures"][0]
    gemma = arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM")
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads, d = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]

    def linear(rows, cols):  # std 1/sqrt(fan_in): unit-scale outputs from unit-scale inputs
        return torch.randn(rows, cols, generator=generator) * cols ** -0.5

    def norm_weight(n):  # Gemma multiplies by 1 + w, the others by w
        return 0.1 * torch.randn(n, generator=generator) + (0.0 if gemma else 1.0)

    # Unit rows for an untied model; a tied head needs small rows or each token's own row dominates its
    # logits (the model then repeats its input with huge confidence). Gemma scales embeddings by sqrt(hidden)
    # (8 here): rows of std 0.1 put the embedding at about the size of one layer's (post-normed) output,
    # logits of std ~0.8 that final_logit_softcapping 2.0 still bends (by ~10%).
    embed_std = 0.1 if gemma else hidden ** -0.5 if config["tie_word_embeddings"] else 1.0
    w = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=generator) * embed_std}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if arch == "Phi3ForCausalLM":
            w[p + "self_attn.qkv_proj.weight"] = linear((heads + 2 * kv_heads) * d, hidden)
            w[p + "mlp.gate_up_proj.weight"] = linear(2 * inter, hidden)
        else:
            w[p + "self_attn.q_proj.weight"] = linear(heads * d, hidden)
            w[p + "self_attn.k_proj.weight"] = linear(kv_heads * d, hidden)
            w[p + "self_attn.v_proj.weight"] = linear(kv_heads * d, hidden)
            w[p + "mlp.gate_proj.weight"] = linear(inter, hidden)
            w[p + "mlp.up_proj.weight"] = linear(inter, hidden)
        if arch == "Qwen2ForCausalLM" or config.get("attention_bias"):
            for name, rows in (("q_proj", heads * d), ("k_proj", kv_heads * d), ("v_proj", kv_heads * d)):
                w[p + f"self_attn.{name}.bias"] = 0.1 * torch.randn(rows, generator=generator)
            if arch != "Qwen2ForCausalLM":
                w[p + "self_attn.o_proj.bias"] = 0.1 * torch.randn(hidden, generator=generator)
        w[p + "self_attn.o_proj.weight"] = linear(hidden, heads * d)
        w[p + "mlp.down_proj.weight"] = linear(hidden, inter)
        norms = ["post_attention_layernorm"]
        if arch != "Olmo2ForCausalLM":
            norms.append("input_layernorm")
        if gemma or arch == "Olmo2ForCausalLM":
            norms.append("post_feedforward_layernorm")
        if gemma:
            norms.append("pre_feedforward_layernorm")
        for name in norms:
            w[p + name + ".weight"] = norm_weight(hidden)
        if arch == "Gemma3ForCausalLM":
            w[p + "self_attn.q_norm.weight"] = norm_weight(d)
            w[p + "self_attn.k_norm.weight"] = norm_weight(d)
        elif arch == "Olmo2ForCausalLM":
            w[p + "self_attn.q_norm.weight"] = norm_weight(heads * d)
            w[p + "self_attn.k_norm.weight"] = norm_weight(kv_heads * d)
    w["model.norm.weight"] = norm_weight(hidden)
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = linear(vocab, hidden)
    return w


def write(out, config, tensors, sharded):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if not sharded:
        save(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
        return
    groups = {}
    for name, tensor in tensors.items():
        key = f"layer{name.split('.')[2]}" if name.startswith("model.layers.") else "rest"
        groups.setdefault(key, {})[name] = tensor
    weight_map, total = {}, 0
    for n, (key, group) in enumerate(sorted(groups.items())):
        file = f"model-{n + 1:05d}-of-{len(groups):05d}.safetensors"
        save(os.path.join(out, file), group, {"format": "pt"})
        for name, tensor in group.items():
            weight_map[name] = file
            total += tensor.numel() * tensor.element_size()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("arch")
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--sharded", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON")
    args = parser.parse_args()
    arch = SHORT.get(args.arch, args.arch)
    if arch not in MODEL_TYPE:
        raise SystemExit(f"unknown architecture {args.arch}: one of {sorted(SHORT)}")
    config = base_config(arch, args.dtype)
    for item in args.set:
        key, _, value = item.partition("=")
        config[key] = json.loads(value)
    tensors = weights(config, torch.Generator().manual_seed(args.seed))
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    write(args.out_dir, config, {n: t.to(dtype) for n, t in tensors.items()}, args.sharded)


if __name__ == "__main__":
    main()
