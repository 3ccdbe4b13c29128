"""Forward pass, gradients, greedy generation and a short AdamW run of a
Hugging Face folder of one of six architectures, computed the way
transformers' modeling_mistral.py, modeling_qwen2.py, modeling_gemma2.py,
modeling_gemma3.py (text model), modeling_olmo2.py and modeling_phi3.py do:

  MistralForCausalLM  Llama maths; optional head_dim; sliding_window on every layer.
  Qwen2ForCausalLM    Llama maths plus q/k/v biases; a window only with use_sliding_window
                      (then on layers >= max_window_layers).
  Gemma2ForCausalLM   embeddings x sqrt(hidden); norms x_hat * (1 + w), four per layer (pre and
                      post attention, pre and post MLP); GeGLU (tanh GELU); scale
                      query_pre_attn_scalar^-0.5; attention and final logits soft-capped
                      (cap * tanh(s / cap)); even layers sliding, odd layers global.
  Gemma3ForCausalLM   Gemma 2 without soft-capping (unless set) plus per-head q/k norms (1 + w)
                      before RoPE; layer i global iff (i + 1) % sliding_window_pattern == 0;
                      local layers RoPE base rope_local_base_freq, global rope_theta with
                      rope_scaling (linear).
  Olmo2ForCausalLM    no pre-norms: h += post_attention_layernorm(attn(h)),
                      h += post_feedforward_layernorm(mlp(h)); q_norm / k_norm over the whole q / k
                      projections before the head split and RoPE; SwiGLU.
  Phi3ForCausalLM     fused qkv_proj (q rows, k rows, v rows) and gate_up_proj (gate rows, then
                      up); sliding_window on every layer; otherwise Llama maths.

RoPE scaling of every rope_type (rope_scaling.py: linear, dynamic, yarn,
longrope, llama3) with its attention factor, as transformers picks them per
forward (dynamic's base and longrope's factors by the sequence's length), and
partial_rotary_factor (rotate_half on the first int(head_dim * factor)
features, the rest passed through).

All: half-rotation RoPE (rotate_half), repeat_kv grouped-query attention,
causal mask (plus window: key j visible from query i iff j <= i and
i - j < window), `layer_types` honoured when the config has it, lm_head tied
when tie_word_embeddings. Every tensor of the folder must be used and none
may be missing. Plain PyTorch written from the formats' definitions; it
shares nothing with titan.

Usage:
  hf_families.py forward HF_DIR INPUTS.safetensors OUT.safetensors [--dtype float64|float32]
    INPUTS: input_ids [B, S], labels [B, S] (int64, -100 ignored; no shift).
    OUT: logits [B, S, V], loss (mean cross-entropy of the final, soft-capped
    logits over labels != -100), grad.<HF name> for every weight.
  hf_families.py generate HF_DIR PROMPT.safetensors OUT.safetensors --new-tokens N [--dtype ...]
    PROMPT: input_ids [1, S]; OUT: tokens [1, N] (greedy, new tokens only).
  hf_families.py train HF_DIR BATCHES.safetensors OUT.safetensors --steps N --lr L --warmup W
                 --weight-decay WD --max-norm M
    float32 AdamW (betas 0.9/0.95, eps 1e-8; no decay for names containing
    "norm" or "embed_tokens"), titan's default LR schedule (linear warmup,
    then linear decay to 0 over the steps after warmup), clipping to total
    norm M. BATCHES: input_ids.1..N, labels.1..N. OUT: losses [N],
    grad_norms [N] (before clipping), final.<HF name> for every weight.

safetensors_io.save writes float64 tensors as F32 (titan reads no F64), so
the float64 results arrive rounded to float32.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_logits import load_folder  # noqa: E402  (folder + index reading, format = pt check)
from lr_schedule import lr_factor  # noqa: E402
import rope_scaling  # noqa: E402
from safetensors_io import load, save  # noqa: E402

ARCHITECTURES = ("MistralForCausalLM", "Qwen2ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
                 "Olmo2ForCausalLM", "Phi3ForCausalLM")
GEMMA = ("Gemma2ForCausalLM", "Gemma3ForCausalLM")


class Spec:
    """What the forward pass needs from config.json, with transformers' defaults per family."""

    def __init__(self, config):
        arch = config["architectures"][0]
        if arch not in ARCHITECTURES:
            raise SystemExit(f"hf_families.py: unsupported architecture {arch}")
        self.arch = arch
        self.gemma = arch in GEMMA
        self.layers = config["num_hidden_layers"]
        self.hidden = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config.get("num_key_value_heads") or self.heads
        self.head_dim = config.get("head_dim") or self.hidden // self.heads
        self.eps = config.get("rms_norm_eps", 1e-5 if arch in ("Olmo2ForCausalLM", "Phi3ForCausalLM") else 1e-6)
        self.tied = config.get("tie_word_embeddings", self.gemma)
        self.max_positions = config.get("max_position_embeddings", 131072 if self.gemma else 4096)
        act = config.get("hidden_activation") or config.get("hidden_act")
        expected = "gelu_pytorch_tanh" if self.gemma else "silu"
        if act != expected:
            raise SystemExit(f"hf_families.py: {arch} with activation {act} (expected {expected})")

        if self.gemma:
            self.scale = config.get("query_pre_attn_scalar", 256) ** -0.5
            gemma2 = arch == "Gemma2ForCausalLM"
            self.attn_cap = config.get("attn_logit_softcapping", 50.0 if gemma2 else None)
            self.final_cap = config.get("final_logit_softcapping", 30.0 if gemma2 else None)
        else:
            self.scale = self.head_dim ** -0.5
            self.attn_cap = self.final_cap = None

        # Which layers slide, and over how many keys.
        if arch == "Qwen2ForCausalLM":
            self.window = config.get("sliding_window") if config.get("use_sliding_window", False) else None
            default = ["sliding_attention" if self.window is not None and i >= config.get("max_window_layers", 28)
                       else "full_attention" for i in range(self.layers)]
        elif arch == "Gemma2ForCausalLM":
            self.window = config.get("sliding_window", 4096)
            default = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(self.layers)]
        elif arch == "Gemma3ForCausalLM":
            self.window = config.get("sliding_window", 4096)
            pattern = config.get("sliding_window_pattern", config.get("_sliding_window_pattern", 6))
            default = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(self.layers)]
        elif arch == "Olmo2ForCausalLM":
            self.window = None
            default = ["full_attention"] * self.layers
        else:  # Mistral, Phi-3: one window for every layer
            self.window = config.get("sliding_window")
            default = ["sliding_attention"] * self.layers
        self.layer_types = config.get("layer_types") or default
        assert len(self.layer_types) == self.layers, "layer_types needs one entry per layer"
        for kind in self.layer_types:
            assert kind in ("sliding_attention", "full_attention"), f"unknown layer type {kind}"

        self.rope = {kind: self._rope(config, kind == "sliding_attention") for kind in set(self.layer_types)}
        # q/k/v(/o) biases: always on Qwen 2, with attention_bias elsewhere.
        self.qkv_bias = arch == "Qwen2ForCausalLM" or bool(config.get("attention_bias", False))
        self.o_bias = arch != "Qwen2ForCausalLM" and bool(config.get("attention_bias", False))
        if config.get("mlp_bias", False):
            raise SystemExit("hf_families.py: mlp_bias is not supported")

    def _rope(self, config, sliding):
        """(base, scaling dict for rope_scaling.py, rotary dim) of the layer's rotary embedding."""
        gemma3 = self.arch == "Gemma3ForCausalLM"
        params = config.get("rope_parameters")
        fraction = config.get("partial_rotary_factor", 1.0)
        if params:  # transformers 5 layout; Gemma 3 keys it by layer type
            if gemma3 and "full_attention" in params:
                params = params["sliding_attention" if sliding else "full_attention"]
            base, scaling = params["rope_theta"], params
            fraction = params.get("partial_rotary_factor", fraction)
        elif gemma3 and sliding:  # Gemma3's local rotary embedding: its own base, never scaled
            base, scaling = config.get("rope_local_base_freq", 10000.0), None
        else:
            base, scaling = config.get("rope_theta", 1e6 if gemma3 else 10000.0), config.get("rope_scaling")
        rotary = int(self.head_dim * fraction)
        scaling = scaling or {}
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        spec = {"type": kind}
        if kind == "default":
            return base, spec, rotary
        if kind in ("linear", "dynamic", "llama3"):
            spec["factor"] = float(scaling["factor"])
        if kind == "dynamic":  # grows the base past max_position_embeddings
            spec["original"] = self.max_positions
        elif kind == "llama3":
            spec.update(low_freq_factor=scaling["low_freq_factor"], high_freq_factor=scaling["high_freq_factor"],
                        original=scaling["original_max_position_embeddings"])
        elif kind in ("yarn", "longrope"):
            original = scaling.get("original_max_position_embeddings")
            if original is None and kind == "longrope":  # Phi-3 keeps it at the top level
                original = config.get("original_max_position_embeddings")
            spec["original"] = original or self.max_positions
            spec["factor"] = scaling.get("factor") or self.max_positions / spec["original"]
            if scaling.get("attention_factor") is not None:
                spec["attention_factor"] = scaling["attention_factor"]
            if kind == "yarn":
                for key in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"):
                    if scaling.get(key) is not None:
                        spec[key] = scaling[key]
            else:
                spec.update(short_factor=scaling["short_factor"], long_factor=scaling["long_factor"])
        elif kind != "linear":
            raise SystemExit(f"hf_families.py: rope_scaling of type {kind} is not supported")
        return base, spec, rotary


def rope_tables(spec, kind, seq, dtype):
    """cos, sin [seq, rotary dim] for the layer kind, times the attention factor. As transformers: dynamic's
    base for max(seq, max_position_embeddings); longrope's long factors when seq > the original length."""
    base, scaling, rotary = spec.rope[kind]
    length = max(seq, spec.max_positions) if scaling["type"] == "dynamic" else seq
    inv_freq = torch.tensor(rope_scaling.inverse_frequencies(rotary, base, scaling, length), dtype=torch.float64)
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    factor = rope_scaling.attention_factor(scaling)
    return (emb.cos() * factor).to(dtype), (emb.sin() * factor).to(dtype)


def apply_rope(x, cos, sin):
    """rotate_half on the first cos.shape[-1] features (partial_rotary_factor), the rest passed through."""
    rotary = cos.shape[-1]
    x_rot, x_pass = x[..., :rotary], x[..., rotary:]
    return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def norm(x, weight, eps, gemma):
    x_hat = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x_hat * (1.0 + weight) if gemma else weight * x_hat


def visible(seq, window):
    """[S, S] bool: key j visible from query i."""
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    ok = j <= i
    if window is not None:
        ok = ok & (i - j < window)
    return ok


def softcap(x, cap):
    return x if cap is None else cap * torch.tanh(x / cap)


def logits(spec, get, ids):
    """Final (soft-capped) logits [B, S, V]; get(name) returns the weight and marks it used."""
    b, s = ids.shape
    H, Hkv, D = spec.heads, spec.kv_heads, spec.head_dim
    g = spec.gemma
    dtype = get("model.embed_tokens.weight").dtype

    def linear(x, prefix, bias):
        y = x @ get(prefix + ".weight").T
        return y + get(prefix + ".bias") if bias else y

    h = get("model.embed_tokens.weight")[ids]
    if g:  # Gemma's normalizer is a tensor of the hidden dtype
        h = h * torch.tensor(spec.hidden ** 0.5, dtype=dtype)
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        kind = spec.layer_types[i]
        cos, sin = rope_tables(spec, kind, s, dtype)
        mask = visible(s, spec.window if kind == "sliding_attention" else None)

        x = h if spec.arch == "Olmo2ForCausalLM" else norm(h, get(p + "input_layernorm.weight"), spec.eps, g)
        if spec.arch == "Phi3ForCausalLM":
            qkv = x @ get(p + "self_attn.qkv_proj.weight").T
            q, k, v = qkv.split([H * D, Hkv * D, Hkv * D], dim=-1)
        else:
            q = linear(x, p + "self_attn.q_proj", spec.qkv_bias)
            k = linear(x, p + "self_attn.k_proj", spec.qkv_bias)
            v = linear(x, p + "self_attn.v_proj", spec.qkv_bias)
        if spec.arch == "Olmo2ForCausalLM":  # norms over the whole projections, before the head split
            q = norm(q, get(p + "self_attn.q_norm.weight"), spec.eps, False)
            k = norm(k, get(p + "self_attn.k_norm.weight"), spec.eps, False)
        q = q.view(b, s, H, D).transpose(1, 2)
        k = k.view(b, s, Hkv, D).transpose(1, 2)
        v = v.view(b, s, Hkv, D).transpose(1, 2)
        if spec.arch == "Gemma3ForCausalLM":  # per head, before RoPE
            q = norm(q, get(p + "self_attn.q_norm.weight"), spec.eps, True)
            k = norm(k, get(p + "self_attn.k_norm.weight"), spec.eps, True)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        k = k.repeat_interleave(H // Hkv, dim=1)  # repeat_kv: query head n reads kv head n // (H / Hkv)
        v = v.repeat_interleave(H // Hkv, dim=1)
        scores = softcap(q @ k.transpose(2, 3) * spec.scale, spec.attn_cap)  # capped before the mask
        scores = scores.masked_fill(~mask, float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, H * D)
        out = linear(out, p + "self_attn.o_proj", spec.o_bias)
        if g or spec.arch == "Olmo2ForCausalLM":
            out = norm(out, get(p + "post_attention_layernorm.weight"), spec.eps, g)
        h = h + out

        if g:
            x = norm(h, get(p + "pre_feedforward_layernorm.weight"), spec.eps, True)
        elif spec.arch == "Olmo2ForCausalLM":
            x = h
        else:
            x = norm(h, get(p + "post_attention_layernorm.weight"), spec.eps, False)
        if spec.arch == "Phi3ForCausalLM":
            gate, up = (x @ get(p + "mlp.gate_up_proj.weight").T).chunk(2, dim=-1)
        else:
            gate, up = x @ get(p + "mlp.gate_proj.weight").T, x @ get(p + "mlp.up_proj.weight").T
        act = torch.nn.functional.gelu(gate, approximate="tanh") if g else torch.nn.functional.silu(gate)
        out = (act * up) @ get(p + "mlp.down_proj.weight").T
        if g or spec.arch == "Olmo2ForCausalLM":
            out = norm(out, get(p + "post_feedforward_layernorm.weight"), spec.eps, g)
        h = h + out
    h = norm(h, get("model.norm.weight"), spec.eps, g)
    head = get("model.embed_tokens.weight" if spec.tied else "lm_head.weight")
    return softcap(h @ head.T, spec.final_cap)


class Weights:
    """The folder's tensors as leaves of one dtype, with a record of which the model read."""

    def __init__(self, spec, tensors, dtype, requires_grad):
        if spec.tied:
            assert "lm_head.weight" not in tensors, "tied embeddings: HF folders omit lm_head.weight"
        self.spec = spec
        self.params = {n: t.to(dtype).detach().requires_grad_(requires_grad) for n, t in sorted(tensors.items())}
        self.used = set()

    def get(self, name):
        if name not in self.params:
            raise SystemExit(f"hf_families.py: {self.spec.arch} needs {name}, which the folder lacks")
        self.used.add(name)
        return self.params[name]

    def check_all_used(self):
        unused = set(self.params) - self.used
        assert not unused, f"tensors a {self.spec.arch} does not have: {sorted(unused)}"


def loss_of(logits_, labels):
    return torch.nn.functional.cross_entropy(logits_.reshape(-1, logits_.shape[-1]), labels.reshape(-1),
                                             ignore_index=-100)


DTYPES = {"float64": torch.float64, "float32": torch.float32}


def cmd_forward(args):
    config, tensors = load_folder(args.hf_dir)
    spec = Spec(config)
    inputs = load(args.inputs)[0]
    ids, labels = inputs["input_ids"].long(), inputs["labels"].long()
    w = Weights(spec, tensors, DTYPES[args.dtype], True)
    out = logits(spec, w.get, ids)
    w.check_all_used()
    loss = loss_of(out, labels)
    names = list(w.params)
    grads = torch.autograd.grad(loss, [w.params[n] for n in names])
    result = {"logits": out.detach(), "loss": loss.detach().reshape(())}
    for n, grad in zip(names, grads):
        result["grad." + n] = grad
    save(args.out, result)


def cmd_generate(args):
    config, tensors = load_folder(args.hf_dir)
    spec = Spec(config)
    ids = load(args.prompt)[0]["input_ids"].long()
    assert ids.shape[0] == 1, "generate takes one prompt"
    w = Weights(spec, tensors, DTYPES[args.dtype], False)
    new = []
    with torch.no_grad():
        for _ in range(args.new_tokens):  # the whole sequence again each step: no cache to get wrong
            nxt = logits(spec, w.get, ids)[:, -1].argmax(dim=-1, keepdim=True)
            w.check_all_used()
            new.append(nxt)
            ids = torch.cat((ids, nxt), dim=1)
    tokens = torch.cat(new, dim=1) if new else torch.zeros(1, 0, dtype=torch.long)
    save(args.out, {"tokens": tokens})


def cmd_train(args):
    config, tensors = load_folder(args.hf_dir)
    spec = Spec(config)
    batches = load(args.batches)[0]
    w = Weights(spec, tensors, torch.float32, True)
    no_decay = [p for n, p in w.params.items() if "norm" in n or "embed_tokens" in n]
    decay = [p for n, p in w.params.items() if not ("norm" in n or "embed_tokens" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    losses, norms = [], []
    for step in range(1, args.steps + 1):
        ids, labels = batches[f"input_ids.{step}"].long(), batches[f"labels.{step}"].long()
        for group in optimizer.param_groups:
            group["lr"] = args.lr * lr_factor(step, args.warmup, args.steps)
        optimizer.zero_grad()
        loss = loss_of(logits(spec, w.get, ids), labels)
        w.check_all_used()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(w.params.values()), args.max_norm)))
        optimizer.step()
        losses.append(float(loss))
    result = {"losses": torch.tensor(losses, dtype=torch.float64),
              "grad_norms": torch.tensor(norms, dtype=torch.float64)}
    for n, p in w.params.items():
        result["final." + n] = p.detach()
    save(args.out, result, dict(steps=args.steps, lr=args.lr, warmup=args.warmup, max_norm=args.max_norm,
                                weight_decay=args.weight_decay))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("forward")
    f.add_argument("hf_dir")
    f.add_argument("inputs")
    f.add_argument("out")
    f.add_argument("--dtype", choices=sorted(DTYPES), default="float64")
    g = sub.add_parser("generate")
    g.add_argument("hf_dir")
    g.add_argument("prompt")
    g.add_argument("out")
    g.add_argument("--new-tokens", type=int, required=True)
    g.add_argument("--dtype", choices=sorted(DTYPES), default="float64")
    t = sub.add_parser("train")
    t.add_argument("hf_dir")
    t.add_argument("batches")
    t.add_argument("out")
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--lr", type=float, required=True)
    t.add_argument("--warmup", type=int, required=True)
    t.add_argument("--weight-decay", type=float, required=True)
    t.add_argument("--max-norm", type=float, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    {"forward": cmd_forward, "generate": cmd_generate, "train": cmd_train}[args.command](args)


if __name__ == "__main__":
    main()
