"""Files in PyTorch's own formats, written by the PyTorch on this machine
(torch.save, pickle), for titan's readers of them (checkpoint/torch_archive.h,
checkpoint/pickle_reader.h, `titan convert --from meta`):

  archives OUT     torch.save archives of state dicts (dtypes, a Parameter, a
                   strided view, a slice, shared storage, nesting) beside a
                   safetensors twin of the same tensors made contiguous;
                   hostile archives (a __reduce__ calling os.system, an unknown
                   class); plain pickles of known values in protocols 0 to 5.
  bin HF OUT N     the HF folder HF re-saved as pytorch_model.bin (N == 1) or
                   N shards with pytorch_model.bin.index.json.
  meta HF OUT N    the Llama folder HF as Meta's original release lays it out:
                   params.json and N tensor-parallel consolidated.NN.pth shards
                   (Meta's names, q/k rows in Meta's interleaved RoPE order).
"""
import collections
import json
import os
import pickle
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def archives(out):
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(7)
    base = torch.randn(6, 8, generator=gen)
    shared = torch.randn(16, generator=gen)
    state = collections.OrderedDict()
    state["f32"] = torch.randn(3, 4, generator=gen)
    state["bf16"] = torch.randn(5, 2, generator=gen).bfloat16()
    state["f16"] = torch.randn(7, generator=gen).half()
    state["i64"] = torch.arange(-3, 9, dtype=torch.int64).reshape(3, 4)
    state["parameter"] = torch.nn.Parameter(torch.randn(2, 3, generator=gen))
    state["transposed"] = base.t()  # strided: read whole, not as a byte range
    state["slice"] = base[2:4]  # a view at a storage offset
    state["shared_a"] = shared[:8].view(2, 4)  # two tensors of one storage
    state["shared_b"] = shared[8:].view(4, 2)
    state["scalar"] = torch.tensor(2.5)
    state["empty"] = torch.zeros(0, 3)
    nested = {"model": state, "step": 12, "name": "fixture", "optimizer": {"state": {0: {"exp_avg": torch.ones(2)}}}}
    torch.save(nested, os.path.join(out, "nested.pt"))
    torch.save(state, os.path.join(out, "state.bin"))
    twin = {k: v.detach().contiguous() for k, v in state.items()}
    twin["bf16"] = state["bf16"]
    safetensors_io.save(os.path.join(out, "state.safetensors"), twin)

    class CallsSystem:  # unpickling this would run a shell command
        def __reduce__(self):
            return (os.system, ("touch " + os.path.join(out, "PWNED"),))

    torch.save({"weight": torch.ones(2), "payload": CallsSystem()}, os.path.join(out, "calls_system.pt"))
    import argparse
    torch.save({"weight": torch.ones(2), "args": argparse.Namespace(lr=1)}, os.path.join(out, "unknown_class.pt"))
    with open(os.path.join(out, "calls_system.pkl"), "wb") as f:
        pickle.dump(CallsSystem(), f, protocol=2)

    values = {"int": 7, "neg": -300, "big": 2**40, "float": 1.5, "text": "hello", "list": [1, 2, [3]],
              "tuple": (1, "a"), "none": None, "true": True, "false": False, "nested": {"a": [0.25]}}
    for protocol in range(6):
        data = dict(values)
        if protocol >= 3:
            data["bytes"] = b"\x00\x01\xff"
            data["unicode"] = "h\u00e9llo \u4e16"
        shared_list = [9]
        data["shared"] = [shared_list, shared_list]  # the memo: one value twice
        with open(os.path.join(out, "values_p%d.pkl" % protocol), "wb") as f:
            pickle.dump(data, f, protocol=protocol)


def bin_folder(hf, out, shards):
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(hf, "config.json"), out)
    tensors = {}
    index = os.path.join(hf, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else [
        "model.safetensors"]
    for name in files:
        tensors.update(safetensors_io.load(os.path.join(hf, name))[0])
    names = sorted(tensors)
    if shards == 1:
        torch.save(collections.OrderedDict((n, tensors[n]) for n in names), os.path.join(out, "pytorch_model.bin"))
        return
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        file = "pytorch_model-%05d-of-%05d.bin" % (i + 1, shards)
        torch.save(collections.OrderedDict((n, tensors[n]) for n in part), os.path.join(out, file))
        weight_map.update({n: file for n in part})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(out, "pytorch_model.bin.index.json"), "w"), indent=2)


def meta_folder(hf, out, shards):
    os.makedirs(out, exist_ok=True)
    config = json.load(open(os.path.join(hf, "config.json")))
    tensors = safetensors_io.load(os.path.join(hf, "model.safetensors"))[0]
    dim, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)

    def unpermute(w, n):  # HF's rotate-half row order back to Meta's interleaved pairs
        rows = w.shape[0]
        return w.view(n, 2, rows // n // 2, w.shape[1]).transpose(1, 2).reshape(rows, w.shape[1])

    meta = {"tok_embeddings.weight": tensors["model.embed_tokens.weight"], "norm.weight": tensors["model.norm.weight"]}
    if "lm_head.weight" in tensors:
        meta["output.weight"] = tensors["lm_head.weight"]
    names = {"self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk", "self_attn.v_proj": "attention.wv",
             "self_attn.o_proj": "attention.wo", "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
             "mlp.up_proj": "feed_forward.w3", "input_layernorm": "attention_norm",
             "post_attention_layernorm": "ffn_norm"}
    for i in range(config["num_hidden_layers"]):
        for hf_name, meta_name in names.items():
            w = tensors["model.layers.%d.%s.weight" % (i, hf_name)]
            if meta_name == "attention.wq":
                w = unpermute(w, heads)
            elif meta_name == "attention.wk":
                w = unpermute(w, kv_heads)
            meta["layers.%d.%s.weight" % (i, meta_name)] = w
    # Meta's model parallelism: column-parallel weights (and Llama 3's
    # vocabulary-parallel embedding) split by rows, row-parallel ones by
    # columns, norms whole in every shard.
    row_parallel = ("attention.wo.weight", "feed_forward.w2.weight")
    parts = [dict() for _ in range(shards)]
    for name, w in meta.items():
        if name.endswith("norm.weight"):
            pieces = [w.clone() for _ in range(shards)]
        else:
            pieces = torch.chunk(w, shards, dim=1 if name.endswith(row_parallel) else 0)
        for part, piece in zip(parts, pieces):
            part[name] = piece.clone()
    for i, part in enumerate(parts):
        torch.save(part, os.path.join(out, "consolidated.%02d.pth" % i))
    params = {"dim": dim, "n_layers": config["num_hidden_layers"], "n_heads": heads, "n_kv_heads": kv_heads,
              "vocab_size": config["vocab_size"], "multiple_of": 16, "ffn_dim_multiplier": 1.0,
              "norm_eps": config["rms_norm_eps"], "rope_theta": config.get("rope_theta", 10000.0)}
    scaling = config.get("rope_scaling")
    if scaling:
        params["use_scaled_rope"] = True
    json.dump(params, open(os.path.join(out, "params.json"), "w"), indent=2)


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "archives":
        archives(sys.argv[2])
    elif command == "bin":
        bin_folder(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif command == "meta":
        meta_folder(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit("unknown command " + command)
