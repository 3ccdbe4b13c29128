"""Writes the reference cases the C++ op tests compare against: one
safetensors file per case holding inputs, an upstream gradient, and the
outputs and input gradients PyTorch computes in float64.

Inputs are rounded to bf16-representable values, so the same file checks the
f32 kernels and (after an exact cast) the bf16 kernels.

Usage: make_op_cases.py OUTDIR
"""
import json
import os
import sys

import torch

import functional as ref
import model
import nonfinite_cases
import rope_scaling
from safetensors_io import save

torch.manual_seed(1234)


def bf16_exact(*shape, scale=1.0):
    return (torch.randn(*shape) * scale).bfloat16().double()


def leaf(*shape, scale=1.0):
    return bf16_exact(*shape, scale=scale).requires_grad_(True)


def backward(output, inputs):
    """Random upstream gradient; returns it and d<output . grad>/d<inputs>."""
    grad = bf16_exact(*output.shape)
    grads = torch.autograd.grad(output, inputs, grad, allow_unused=True)
    return grad, grads


def write(outdir, name, tensors, **metadata):
    save(os.path.join(outdir, name + ".safetensors"), tensors, metadata)


def gemm_cases(outdir):
    for name, a_shape, b_shape in [("2d", (64, 96), (96, 80)), ("batched", (3, 33, 29), (3, 29, 17)),
                                   ("broadcast_b", (4, 21, 35), (35, 19)), ("long_k", (16, 1024), (1024, 24))]:
        a, b = bf16_exact(*a_shape), bf16_exact(*b_shape)
        write(outdir, f"gemm_{name}", {"a": a, "b": b, "c": a @ b})


def elementwise_cases(outdir):
    x = leaf(37, 53, scale=3.0)
    y = torch.nn.functional.silu(x)
    grad, (dx,) = backward(y, [x])
    write(outdir, "silu", {"x": x, "y": y, "grad_y": grad, "grad_x": dx})

    gate, up = leaf(29, 67, scale=3.0), leaf(29, 67)
    y = torch.nn.functional.silu(gate) * up
    grad, (dgate, dup) = backward(y, [gate, up])
    write(outdir, "swiglu", {"gate": gate, "up": up, "y": y, "grad_y": grad, "grad_gate": dgate, "grad_up": dup})


def geglu_cases(outdir):
    """Gemma's GeGLU: gelu(approximate="tanh") of the gate times up. A wide gate
    (scale 4) reaches the tails where 1 + tanh(u) cancels for negative x. Drawn
    from a forked RNG so the other cases keep their inputs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4321)
        gate, up = leaf(31, 71, scale=4.0), leaf(31, 71)
        y = torch.nn.functional.gelu(gate, approximate="tanh") * up
        grad, (dgate, dup) = backward(y, [gate, up])
    write(outdir, "geglu", {"gate": gate, "up": up, "y": y, "grad_y": grad, "grad_gate": dgate, "grad_up": dup})


def softmax_cases(outdir):
    x = leaf(13, 257, scale=4.0)
    y = torch.softmax(x, dim=-1)
    grad, (dx,) = backward(y, [x])
    write(outdir, "softmax", {"x": x, "y": y, "grad_y": grad, "grad_x": dx})


def rms_norm_cases(outdir):
    for name, shape in [("small", (4, 7, 96)), ("wide", (3, 1024))]:
        x, w = leaf(*shape, scale=2.0), leaf(shape[-1])
        y = ref.rms_norm(x, w, 1e-5)
        grad, (dx, dw) = backward(y, [x, w])
        write(outdir, f"rms_norm_{name}", {"x": x, "weight": w, "y": y, "grad_y": grad, "grad_x": dx,
                                           "grad_weight": dw}, eps=1e-5)


def embedding_cases(outdir):
    w = leaf(50, 24)
    ids = torch.randint(0, 50, (3, 11))
    ids[0, :4] = 7  # repeated ids exercise the scatter-add
    y = torch.nn.functional.embedding(ids, w)
    grad, (dw,) = backward(y, [w])
    write(outdir, "embedding", {"weight": w, "ids": ids, "y": y, "grad_y": grad, "grad_weight": dw})


def rope_cases(outdir):
    configs = [("interleaved", 10000.0, None, False), ("half", 10000.0, None, True),
               ("interleaved_llama31", 500000.0, (8.0, 1.0, 4.0, 8192), True),
               ("half_llama31", 500000.0, (8.0, 1.0, 4.0, 8192), False)]
    for name, theta, scaling, explicit in configs:
        style = name.split("_")[0]
        x = leaf(2, 9, 3, 16)
        positions = (torch.randint(0, 9000, (2, 9)) if explicit else torch.arange(9).expand(2, 9)).contiguous()
        freqs = ref.rope_frequencies(16, theta, scaling)
        y = ref.rope(x, positions, freqs, style)
        grad, (dx,) = backward(y, [x])
        tensors = {"x": x, "y": y, "grad_y": grad, "grad_x": dx}
        if explicit:
            tensors["positions"] = positions
        meta = dict(style=style, theta=theta, max_positions=9000)
        if scaling:
            meta.update(scaling_factor=scaling[0], low_freq_factor=scaling[1], high_freq_factor=scaling[2],
                        original_max_position=scaling[3])
        write(outdir, f"rope_{name}", tensors, **meta)


def rope_scaling_cases(outdir):
    """Each rope_type's inverse frequencies (exact float64, as JSON metadata),
    attention factor and first 64 table rows (rope_scaling.py), at published
    shapes: Gemma 3's linear 8, Qwen2.5's YaRN 4 from 32768, gpt-oss's YaRN
    (truncate false), DeepSeek's YaRN with mscale / mscale_all_dim, Phi-3.5's
    longrope (long and short tables), Llama 3.1's, dynamic NTK below and
    above its original length, and a rotary width of 12."""
    cases = {
        "default": (16, 10000.0, None, 64),
        "default_partial": (12, 10000.0, None, 64),
        "linear": (256, 1000000.0, dict(type="linear", factor=8.0), 64),
        "dynamic_within": (16, 10000.0, dict(type="dynamic", factor=2.0, original=64), 64),
        "dynamic_beyond": (16, 10000.0, dict(type="dynamic", factor=2.0, original=32), 100),
        "yarn_qwen25": (128, 1000000.0, dict(type="yarn", factor=4.0, original=32768), 64),
        "yarn_gpt_oss": (64, 150000.0, dict(type="yarn", factor=32.0, original=4096, truncate=False), 64),
        "yarn_deepseek": (64, 10000.0, dict(type="yarn", factor=40.0, original=4096, beta_fast=32.0, beta_slow=1.0,
                                            mscale=0.707, mscale_all_dim=1.0), 64),
        "yarn_attention_factor": (32, 10000.0, dict(type="yarn", factor=8.0, original=256, beta_fast=16.0,
                                                    beta_slow=2.0, attention_factor=1.5), 64),
        "llama3": (128, 500000.0, dict(type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                       original=8192), 64),
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2718)
        short = [round(float(v), 4) for v in 1.0 + torch.rand(24) * 0.2]
        long = [round(float(v), 4) for v in 1.0 + torch.rand(24) * 40.0]
    for name, rows in (("longrope_long", 4097), ("longrope_short", 4096)):
        cases[name] = (48, 10000.0, dict(type="longrope", factor=32.0, original=4096, short_factor=short,
                                         long_factor=long), rows)
    for name, (dim, theta, scaling, length) in cases.items():
        freqs = rope_scaling.inverse_frequencies(dim, theta, scaling, length)
        cos, sin = rope_scaling.tables(dim, theta, scaling, length, 64)
        meta = dict(rotary_dim=dim, theta=repr(theta), max_positions=length, inv_freq=json.dumps(freqs),
                    attention_factor=repr(rope_scaling.attention_factor(scaling)),
                    scaling=json.dumps(scaling or {}))
        write(outdir, f"rope_scaling_{name}", {"cos": torch.tensor(cos, dtype=torch.float64),
                                               "sin": torch.tensor(sin, dtype=torch.float64)}, **meta)


def rope_partial_cases(outdir):
    """Partial rotary: the first 12 of 16 features rotate (pairs within them,
    either style), the other 4 pass through; packed positions."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1618)
        for style in ("interleaved", "half"):
            x = leaf(2, 9, 3, 16)
            positions = torch.randint(0, 40, (2, 9))
            freqs = ref.rope_frequencies(12, 10000.0)
            y = torch.cat([ref.rope(x[..., :12], positions, freqs, style), x[..., 12:]], dim=-1)
            grad, (dx,) = backward(y, [x])
            write(outdir, f"rope_partial_{style}", {"x": x, "positions": positions, "y": y, "grad_y": grad,
                                                    "grad_x": dx}, style=style, theta=10000.0, rotary_dim=12,
                  max_positions=40)


def attention_case(outdir, name, batch, q_len, k_len, heads, kv_heads, dim, causal, window, documents, softcap=0.0,
                   q_scale=1.0, value_dim=None, sinks=False):
    q = leaf(batch, q_len, heads, dim, scale=q_scale)
    k, v = leaf(batch, k_len, kv_heads, dim), leaf(batch, k_len, kv_heads, value_dim or dim)
    docs = None
    if documents:  # documents of random lengths; ids increase along the sequence
        starts = torch.rand(batch, k_len) < 0.08
        starts[:, 0] = True
        docs = torch.cumsum(starts.long(), dim=1) - 1
    scale = dim ** -0.5
    # Sinks around the scores' own scale (|s| ~ 1 here), so each takes a good share of some rows and little of others.
    sink = leaf(heads, scale=1.5) if sinks else None
    y = ref.attention(q, k, v, scale, causal, window, docs, softcap, sink)
    grad, grads = backward(y, [q, k, v] + ([sink] if sinks else []))
    dq, dk, dv = grads[:3]
    tensors = {"q": q, "k": k, "v": v, "y": y, "grad_y": grad, "grad_q": dq, "grad_k": dk, "grad_v": dv}
    if sinks:
        tensors.update(sinks=sink, grad_sinks=grads[3])
    if docs is not None:
        tensors["document_ids"] = docs
    write(outdir, f"attention_{name}", tensors, causal=int(causal), window=window, scale=repr(scale),
          softcap=repr(softcap))


def attention_cases(outdir):
    # name, batch, q_len, k_len, heads, kv_heads, head_dim, causal, window, documents
    configs = [("causal", 2, 37, 37, 4, 4, 16, True, 0, False),
               ("full", 2, 29, 29, 2, 2, 8, False, 0, False),
               ("window", 1, 70, 70, 2, 2, 16, True, 9, False),
               ("documents", 2, 53, 53, 2, 2, 16, True, 0, True),
               ("documents_window", 2, 64, 64, 2, 1, 16, True, 7, True),
               ("gqa", 2, 40, 40, 8, 2, 16, True, 0, False),
               ("head64", 1, 150, 150, 2, 1, 64, True, 0, False),
               ("head128", 1, 96, 96, 2, 2, 128, True, 0, True),
               ("decode", 2, 5, 33, 4, 2, 16, True, 0, False),
               ("long", 1, 300, 300, 2, 2, 32, True, 0, True)]
    for config in configs:
        attention_case(outdir, *config)


def attention_tiled_cases(outdir):
    """Longer than the CPU kernel's 128-row tiles, with a window shorter than a
    tile, so whole tiles are skipped by the window and by the documents.
    (Separate from attention_cases so earlier cases keep their random inputs.)"""
    attention_case(outdir, "tiled_window_documents", 1, 420, 420, 4, 2, 32, True, 100, True)


def attention_softcap_cases(outdir):
    """Gemma 2's logit soft cap (cap * tanh(s / cap) on the scaled scores) with
    causal + window + documents and GQA, over more than one 128-row tile. q is
    drawn wider so the cap bends the scores: at cap 50 the largest (~30) lose
    ~10%, at cap 5 tanh saturates. From a forked RNG so the other cases keep
    their inputs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2718)
        # name, batch, q_len, k_len, heads, kv_heads, head_dim, causal, window, documents, softcap, q_scale
        attention_case(outdir, "softcap50", 2, 150, 150, 4, 2, 32, True, 100, True, 50.0, 6.0)
        attention_case(outdir, "softcap5", 1, 300, 300, 4, 2, 32, True, 140, True, 5.0, 3.0)
        attention_case(outdir, "softcap5_full", 2, 45, 45, 2, 1, 16, False, 0, False, 5.0, 3.0)


def attention_value_dim_sink_cases(outdir):
    """A value head dim Dv other than the q/k one (DeepSeek's MLA) and gpt-oss's
    attention sinks, alone and together, under every mask kind, GQA and
    decoding; the tiled ones span several 128-row CPU tiles. From a forked RNG
    so the other cases keep their inputs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3141)
        # name, batch, q_len, k_len, heads, kv_heads, head_dim, causal, window, documents
        configs = [("vdim_narrow", 2, 37, 37, 4, 2, 24, True, 0, False, dict(value_dim=16)),
                   ("vdim_wide_window_documents", 2, 64, 64, 2, 1, 16, True, 7, True, dict(value_dim=32)),
                   ("vdim_tiled_documents", 1, 200, 200, 4, 2, 48, True, 0, True, dict(value_dim=32)),
                   ("vdim_full", 2, 29, 29, 2, 2, 8, False, 0, False, dict(value_dim=12)),
                   ("sinks_causal", 2, 37, 37, 4, 2, 16, True, 0, False, dict(sinks=True)),
                   ("sinks_full", 2, 29, 29, 2, 2, 8, False, 0, False, dict(sinks=True)),
                   ("sinks_tiled_window", 1, 300, 300, 4, 2, 32, True, 20, False, dict(sinks=True)),
                   ("sinks_vdim_documents_window", 2, 64, 64, 2, 1, 24, True, 7, True, dict(sinks=True, value_dim=16)),
                   ("sinks_decode", 2, 5, 33, 4, 2, 16, True, 0, False, dict(sinks=True))]
        for *config, options in configs:
            attention_case(outdir, *config, **options)


def cross_entropy_cases(outdir):
    configs = [("plain", 0.0, 0.0, True), ("sum", 0.0, 0.0, False), ("softcap", 5.0, 0.0, True),
               ("zloss", 0.0, 1e-3, True), ("softcap_zloss_sum", 4.0, 1e-2, False)]
    for name, softcap, z_loss, mean in configs:
        n, d, vocab = 41, 24, 150
        hidden, weight = leaf(n, d), leaf(vocab, d, scale=0.5)
        targets = torch.randint(0, vocab, (n,))
        targets[::7] = -100
        logits_leaf = (hidden @ weight.T).detach().requires_grad_(True)
        loss = ref.cross_entropy(logits_leaf, targets, -100, softcap, z_loss, mean)
        (dlogits,) = torch.autograd.grad(loss, [logits_leaf])
        fused_loss = ref.cross_entropy(hidden @ weight.T, targets, -100, softcap, z_loss, mean)
        dh, dw = torch.autograd.grad(fused_loss, [hidden, weight])
        write(outdir, f"cross_entropy_{name}",
              {"hidden": hidden, "weight": weight, "logits": logits_leaf, "targets": targets, "loss": loss.reshape(()),
               "grad_logits": dlogits, "grad_hidden": dh, "grad_weight": dw},
              softcap=softcap, z_loss=z_loss, mean=int(mean), ignore_index=-100)


def adamw_cases(outdir):
    shapes = [(33, 17), (5,), (1000,)]
    params = [bf16_exact(*s).float() for s in shapes]
    initial = [p.clone() for p in params]
    torch_params = [torch.nn.Parameter(p.clone()) for p in params]
    lr, betas, eps, wd, steps = 3e-3, (0.9, 0.95), 1e-8, 0.1, 6
    optimizer = torch.optim.AdamW(torch_params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    tensors = {f"param{i}": p for i, p in enumerate(initial)}
    for step in range(steps):
        for i, p in enumerate(torch_params):
            p.grad = bf16_exact(*p.shape).float()
            tensors[f"grad{i}_step{step}"] = p.grad.clone()
        optimizer.step()
    for i, p in enumerate(torch_params):
        state = optimizer.state[p]
        tensors[f"final{i}"] = p.detach().clone()
        tensors[f"exp_avg{i}"] = state["exp_avg"].clone()
        tensors[f"exp_avg_sq{i}"] = state["exp_avg_sq"].clone()
    write(outdir, "adamw", tensors, lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=wd, steps=steps,
          count=len(shapes))


def block_case(outdir, name, block, x, positions, docs, freqs, **meta):
    """Writes the block's output and every gradient for a random upstream gradient."""
    y = block(x, positions, freqs, docs)
    params = dict(block.named_parameters())
    grad, grads = backward(y, [x] + list(params.values()))
    tensors = {"x": x, "y": y, "grad_y": grad, "grad_x": grads[0], "positions": positions}
    for (pname, p), g in zip(params.items(), grads[1:]):
        tensors["param." + pname] = p
        tensors["grad." + pname] = g
    if docs is not None:
        tensors["document_ids"] = docs
    write(outdir, f"block_{name}", tensors, **meta)


def block_cases(outdir):
    """A whole decoder block, Llama-style (interleaved RoPE, GQA) and
    Qwen-style (half RoPE, q/k norm), with packed documents in one case."""
    configs = [("llama", "interleaved", False, False), ("qwen", "half", True, False),
               ("llama_documents", "interleaved", False, True)]
    dim, heads, kv_heads, head_dim, hidden, eps, theta = 64, 4, 2, 16, 96, 1e-5, 500000.0
    for name, style, qk_norm, documents in configs:
        block = model.TransformerBlock(dim, heads, kv_heads, head_dim, hidden, qk_norm, eps, style)
        with torch.no_grad():
            for pname, p in block.named_parameters():
                p.copy_(bf16_exact(*p.shape, scale=0.2 if "norm" not in pname else 1.0)
                        + (1.0 if "norm" in pname else 0.0))
        batch, seq = 2, 24
        x = leaf(batch, seq, dim)
        docs = None
        positions = torch.arange(seq).expand(batch, seq).contiguous()
        if documents:
            docs = torch.zeros(batch, seq, dtype=torch.long)
            docs[:, 9:] = 1
            docs[1, 17:] = 2
            positions = torch.stack([torch.cat([torch.arange(n) for n in torch.unique_consecutive(docs[b],
                                     return_counts=True)[1].tolist()]) for b in range(batch)])
        freqs = ref.rope_frequencies(head_dim, theta)
        block_case(outdir, name, block, x, positions, docs, freqs, dim=dim, n_heads=heads, n_kv_heads=kv_heads,
                   head_dim=head_dim, hidden_dim=hidden, norm_eps=eps, rope_theta=theta, rope_style=style,
                   qk_norm=int(qk_norm))


def block_family_cases(outdir):
    """The block variants of the Hugging Face families, one case each:
    gemma2: pre- and post-norms scaling by 1 + w, GeGLU, scores scaled by
      query_pre_attn_scalar^-1/2 (24, not head_dim 16), soft cap 2 (binds: the
      scores reach several times the cap), a sliding window of 7 over 24 tokens;
    gemma3: pre- and post-norms and per-head q/k norms, all scaling by 1 + w,
      GeGLU, sliding window 9;
    olmo2: post-norms only, q/k norms over the whole projection;
    qwen2: non-zero q/k/v biases.
    Every norm weight and bias is random, so each term shows in the gradients
    (offset-1 norms draw w around 0, offset-0 ones around 1). From a forked RNG
    so the other cases keep their inputs."""
    dim, heads, kv_heads, head_dim, hidden, eps, theta = 64, 4, 2, 16, 96, 1e-6, 10000.0
    gemma = dict(norm_offset=1.0, pre_norms=True, post_norms=True, activation="gelu_tanh")
    configs = {
        "gemma2": dict(gemma, qk_norm=False, rope_style="half", scale_dim=24, softcap=2.0, sliding_window=7),
        "gemma3": dict(gemma, qk_norm=True, qk_norm_offset=1.0, rope_style="half", sliding_window=9),
        "olmo2": dict(qk_norm=True, qk_norm_whole=True, rope_style="half", pre_norms=False, post_norms=True),
        "qwen2": dict(qk_norm=False, qkv_bias=True, rope_style="half"),
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5678)
        for name, options in configs.items():
            options = dict(options)
            qk_norm, style = options.pop("qk_norm"), options.pop("rope_style")
            block = model.TransformerBlock(dim, heads, kv_heads, head_dim, hidden, qk_norm, eps, style, **options)
            with torch.no_grad():
                for pname, p in block.named_parameters():
                    if "norm" in pname:
                        offset = (options.get("qk_norm_offset", 0.0) if "q_norm" in pname or "k_norm" in pname
                                  else options.get("norm_offset", 0.0))
                        p.copy_(bf16_exact(*p.shape, scale=0.5) + (1.0 - offset))
                    else:
                        p.copy_(bf16_exact(*p.shape, scale=0.2))
            batch, seq = 2, 24
            x = leaf(batch, seq, dim)
            positions = torch.arange(seq).expand(batch, seq).contiguous()
            freqs = ref.rope_frequencies(head_dim, theta)
            block_case(outdir, name, block, x, positions, None, freqs, dim=dim, n_heads=heads, n_kv_heads=kv_heads,
                       head_dim=head_dim, hidden_dim=hidden, norm_eps=eps, rope_theta=theta, rope_style=style,
                       qk_norm=int(qk_norm), qk_norm_whole_projection=int(options.get("qk_norm_whole", False)),
                       qk_norm_weight_offset=options.get("qk_norm_offset", 0.0),
                       qkv_bias=int(options.get("qkv_bias", False)), scale_dim=options.get("scale_dim", 0),
                       logit_softcap=options.get("softcap", 0.0), sliding_window=options.get("sliding_window", 0),
                       norm_weight_offset=options.get("norm_offset", 0.0),
                       pre_norms=int(options.get("pre_norms", True)), post_norms=int(options.get("post_norms", False)),
                       activation=options.get("activation", "silu"))


def gated_delta_rule_cases(outdir):
    """Gated DeltaNet's delta rule: 70 tokens (chunks of 32: two whole and a
    partial one), one key head shared by two value heads, an initial state, and
    gradients through both the output and the final state. From a forked RNG
    so the other cases keep their inputs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3141)
        batch, tokens, key_heads, value_heads, dk, dv = 2, 70, 1, 2, 16, 8
        q, k = leaf(batch, tokens, key_heads, dk), leaf(batch, tokens, key_heads, dk)
        v = leaf(batch, tokens, value_heads, dv)
        g = (-0.02 - 0.6 * torch.rand(batch, tokens, value_heads)).bfloat16().double().requires_grad_(True)
        beta = (0.05 + 0.9 * torch.rand(batch, tokens, value_heads)).bfloat16().double().requires_grad_(True)
        state = leaf(batch, value_heads, dk, dv, scale=0.5)
        out, final = ref.gated_delta_rule(q, k, v, g, beta, state)
        grad_out, grad_final = bf16_exact(*out.shape), bf16_exact(*final.shape)
        grads = torch.autograd.grad((out, final), [q, k, v, g, beta, state], (grad_out, grad_final))
        names = ["grad_q", "grad_k", "grad_v", "grad_g", "grad_beta", "grad_initial_state"]
        write(outdir, "gated_delta_rule", {"q": q, "k": k, "v": v, "g": g, "beta": beta, "initial_state": state,
                                           "out": out, "final_state": final, "grad_out": grad_out,
                                           "grad_final_state": grad_final, **dict(zip(names, grads))},
              chunk_size=32)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    for make in [gemm_cases, elementwise_cases, geglu_cases, softmax_cases, rms_norm_cases, embedding_cases,
                 rope_cases, attention_cases, cross_entropy_cases, adamw_cases, block_cases, attention_tiled_cases,
                 attention_softcap_cases, block_family_cases, attention_value_dim_sink_cases, gated_delta_rule_cases,
                 rope_scaling_cases, rope_partial_cases]:
        make(outdir)
    nonfinite_cases.write_all(lambda name, tensors, **meta: write(outdir, name, tensors, **meta), bf16_exact, ref)
    with open(os.path.join(outdir, ".stamp"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
