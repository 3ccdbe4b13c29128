"""Writes the Muse Glimmer reference cases (tests/reference/muse_glimmer.py):
the debugmodel with random weights over 160-token sequences (longer than its
128-token windows, so the sliding layers differ from the global ones), its
logits, loss and every parameter gradient in float64, the logits with each
distinctive feature switched off and with the 30B flavor's output multiplier, and a 20-step float32 training run in the
format of make_model_cases.py's (AdamW, warmup then linear decay, clipping);
and a tiny MuseGlimmerForConditionalGeneration folder (muse_glimmer_hf.py: the
computation as transformers defines it) with per-layer NoPE and window lists
off TorchTitan's rule, two vision tensors titan skips, and its logits, loss and
the gradient of every HF tensor.

Usage: make_muse_glimmer_cases.py OUTDIR
"""
import json
import os
import sys

import torch

import muse_glimmer
import muse_glimmer_hf
import training_run
from make_model_cases import CHAIN, VOCAB, init_weights
from safetensors_io import save

BATCH, SEQ, TRAIN_SEQ = 2, 160, 64


def batch(generator, seq):
    """make_model_cases' bigram chain with 10% noise, at any length."""
    ids = torch.empty(BATCH, seq + 1, dtype=torch.long)
    ids[:, 0] = torch.randint(0, 64, (BATCH,), generator=generator)
    for t in range(seq):
        noise = torch.randint(0, 64, (BATCH,), generator=generator)
        keep = torch.rand(BATCH, generator=generator) >= 0.1
        ids[:, t + 1] = torch.where(keep, CHAIN[ids[:, t]], noise)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def parity_case(outdir):
    generator = torch.Generator().manual_seed(7)
    decoder = muse_glimmer.debug_model(VOCAB)
    init_weights(decoder, generator)
    with torch.no_grad():
        # Logits of a few units (not make_model_cases' ~0.3), where the soft-cap bends them visibly.
        decoder.output.weight.mul_(8.0)
    ids, labels = batch(generator, SEQ)
    labels[0, :5] = -100  # ignored positions must not count
    tensors = {"input_ids": ids, "labels": labels, "logits": decoder(ids), "loss": decoder.loss(ids, labels)}
    params = dict(decoder.named_parameters())
    grads = torch.autograd.grad(decoder.loss(ids, labels), list(params.values()))
    for (name, p), g in zip(params.items(), grads):
        tensors["param." + name] = p
        tensors["grad." + name] = g
    with torch.no_grad():
        for feature in muse_glimmer.ALL_FEATURES:
            decoder.features = dict(muse_glimmer.ALL_FEATURES, **{feature: False})
            tensors["logits_without." + feature] = decoder(ids)
        # The 30B flavor's output multiplier on the same model (the debugmodel's is 1).
        decoder.features, decoder.output_multiplier = dict(muse_glimmer.ALL_FEATURES), 0.19611613513
        tensors["logits_with_multiplier"] = decoder(ids)
    save(os.path.join(outdir, "model_muse_glimmer_debug.safetensors"), tensors, {"vocab": VOCAB})


def training_case(outdir, steps=20, lr=3e-3, warmup=4, max_norm=1.0, weight_decay=0.1):
    generator = torch.Generator().manual_seed(11)
    decoder = muse_glimmer.debug_model(VOCAB)
    init_weights(decoder, generator)
    decoder = decoder.float()
    tensors = training_run.adamw_run(decoder, lambda step: batch(generator, TRAIN_SEQ), steps, lr, warmup, max_norm,
                                     weight_decay)
    tensors["aux_losses"] = torch.zeros(steps, dtype=torch.float64)
    save(os.path.join(outdir, "train_muse_glimmer_debug.safetensors"), tensors,
         dict(vocab=VOCAB, steps=steps, lr=lr, warmup=warmup, max_norm=max_norm, weight_decay=weight_decay))


# The tiny HF model: NoPE and window lists that TorchTitan's rule would not give,
# a soft-cap and multiplier that bend the logits, and a few vision keys.
HF_TEXT_CONFIG = dict(
    model_type="muse_glimmer_text", vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_activation="silu", max_position_embeddings=64,
    rms_norm_eps=1e-5, rope_parameters=dict(rope_type="default", rope_theta=500000.0), attention_bias=False,
    attention_dropout=0.0, sliding_window=4,
    layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
    final_logit_softcapping=5.0, qk_scale_factor=2.0, output_multiplier=0.5, post_norm_eps=1e-6,
    layer_rope_theta=[0, 500000.0, 500000.0, 0], tie_word_embeddings=False, initializer_range=0.02, use_cache=True,
    bos_token_id=200000, eos_token_id=200001, pad_token_id=None)
HF_SEQ = 12


def hf_case(outdir):
    generator = torch.Generator().manual_seed(13)
    c = HF_TEXT_CONFIG
    dim, hidden, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q_rows, kv_rows = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    randn = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64)  # noqa: E731
    p = "model.language_model."
    weights = {p + "embed_tokens.weight": randn(vocab, dim), p + "norm.weight": 1.0 + 0.1 * randn(dim),
               "lm_head.weight": 0.3 * randn(vocab, dim)}
    for i in range(c["num_hidden_layers"]):
        q = f"{p}layers.{i}."
        for name, shape in [("self_attn.q_proj", (q_rows, dim)), ("self_attn.k_proj", (kv_rows, dim)),
                            ("self_attn.v_proj", (kv_rows, dim)), ("self_attn.o_proj", (dim, q_rows)),
                            ("self_attn.gate_proj", (q_rows, dim)), ("mlp.gate_proj", (hidden, dim)),
                            ("mlp.up_proj", (hidden, dim)), ("mlp.down_proj", (dim, hidden))]:
            weights[q + name + ".weight"] = 0.1 * randn(*shape)
        for name in ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"]:
            weights[q + name + ".weight"] = 0.1 * randn(dim)  # stored as w: the norm scales by 1 + w
    # The folder holds f32; the reference computes in float64 from those values.
    weights = {name: t.float().double().requires_grad_() for name, t in weights.items()}
    ids = torch.randint(0, vocab, (2, HF_SEQ), generator=generator)
    labels = torch.randint(0, vocab, (2, HF_SEQ), generator=generator)
    labels[0, :2] = -100
    logits = muse_glimmer_hf.forward(c, weights, ids)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), ignore_index=-100)
    grads = torch.autograd.grad(loss, list(weights.values()))
    folder = os.path.join(outdir, "hf_muse_glimmer_tiny")
    os.makedirs(folder, exist_ok=True)
    vision = {"model.vision_tower.ln_pre.weight": torch.ones(8), "model.vision_projection.weight": randn(dim, 8)}
    save(os.path.join(folder, "model.safetensors"), dict(weights, **vision), {"format": "pt"})
    config = dict(architectures=["MuseGlimmerForConditionalGeneration"], model_type="muse_glimmer",
                  text_config=c, vision_config=dict(model_type="muse_glimmer_vision", hidden_size=8,
                                                    num_hidden_layers=1, num_attention_heads=2),
                  image_token_id=200092, video_token_id=200091, out_hidden_size=8, projector_hidden_size=8,
                  projector_hidden_act="gelu", tie_word_embeddings=False, torch_dtype="float32",
                  transformers_version="5.15.0")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tensors = {"input_ids": ids, "labels": labels, "logits": logits, "loss": loss}
    for (name, _), g in zip(weights.items(), grads):
        tensors["grad." + name] = g
    save(os.path.join(outdir, "hf_muse_glimmer_tiny.safetensors"), tensors)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    parity_case(outdir)
    training_case(outdir)
    hf_case(outdir)


if __name__ == "__main__":
    main()
