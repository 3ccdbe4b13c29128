"""Writes the Qwen3.5 reference cases (tests/reference/qwen3_5.py): the
debugmodel and debugmodel_moe with random weights over 96-token sequences
(past the delta rule's 64-token chunks), their logits, loss and every
parameter gradient in float64, and the logits with each distinctive feature
switched off; and 20 float64 training steps of a tiny hybrid
(TRAIN_TINY, training_run.py).

Usage: make_qwen3_5_cases.py OUTDIR
"""
import math
import os
import sys

import torch

import qwen3_5
import qwen3_5_hf
import training_run
from make_model_cases import CHAIN, VOCAB
from safetensors_io import save

BATCH, SEQ = 2, 96


def batch(generator):
    """make_model_cases' bigram chain with 10% noise."""
    ids = torch.empty(BATCH, SEQ + 1, dtype=torch.long)
    ids[:, 0] = torch.randint(0, 64, (BATCH,), generator=generator)
    for t in range(SEQ):
        noise = torch.randint(0, 64, (BATCH,), generator=generator)
        keep = torch.rand(BATCH, generator=generator) >= 0.1
        ids[:, t + 1] = torch.where(keep, CHAIN[ids[:, t]], noise)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def init_weights(decoder, generator):
    """Weights that make every piece matter: offset norms' w near 0, the GDN
    output norm near 1, decays exp(g) mostly in (0.3, 1) so the state carries
    over tokens, unit-scale convs, a wide router (stable top-k margins)."""
    randn = lambda shape: torch.randn(shape, generator=generator, dtype=torch.float64)  # noqa: E731
    with torch.no_grad():
        for name, p in decoder.named_parameters():
            if name.endswith("attention.norm"):
                p.copy_(1.0 + 0.1 * randn(p.shape))
            elif "norm" in name:
                p.copy_(0.1 * randn(p.shape))
            elif name.endswith("A_log"):
                p.copy_(torch.log(0.05 + 0.45 * torch.rand(p.shape, generator=generator, dtype=torch.float64)))
            elif name.endswith("dt_bias"):
                p.copy_(0.1 * randn(p.shape))
            elif ".conv_" in name:
                p.copy_(0.5 * randn(p.shape))
            elif "router" in name:
                p.copy_(0.1 * randn(p.shape))
            elif "tok_embeddings" in name:
                p.copy_(randn(p.shape))
            else:
                p.copy_(0.02 * randn(p.shape))


def parity_case(outdir, name, config, features):
    generator = torch.Generator().manual_seed(7)
    decoder = qwen3_5.Decoder(config, VOCAB)
    init_weights(decoder, generator)
    ids, labels = batch(generator)
    labels[0, :5] = -100  # ignored positions must not count
    tensors = {"input_ids": ids, "labels": labels, "logits": decoder(ids), "loss": decoder.loss(ids, labels)}
    params = dict(decoder.named_parameters())
    grads = torch.autograd.grad(decoder.loss(ids, labels), list(params.values()))
    for (pname, p), g in zip(params.items(), grads):
        tensors["param." + pname] = p
        tensors["grad." + pname] = g
    with torch.no_grad():
        for feature in features:
            decoder.features = dict(qwen3_5.ALL_FEATURES, **{feature: False})
            tensors["logits_without." + feature] = decoder(ids)
    save(os.path.join(outdir, f"model_{name}.safetensors"), tensors, {"vocab": VOCAB})


# The tiny dense model of the 20-step training case (tests/models/qwen3_5_test.cpp
# builds the same through qwen3_5::to_config): three Gated DeltaNet layers and
# one full-attention layer, trained on 72-token sequences (past a 64-token chunk).
TRAIN_TINY = dict(dim=64, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=16, rotary_dim=8, hidden_dim=96,
                  n_key_heads=2, n_value_heads=4, key_head_dim=16, value_head_dim=16, moe=None)
TRAIN_VOCAB, TRAIN_SEQ = 256, 72


def training_case(outdir):
    """20 float64 AdamW steps of TRAIN_TINY (the delta rule a token loop)."""
    generator = torch.Generator().manual_seed(13)
    decoder = qwen3_5.Decoder(TRAIN_TINY, TRAIN_VOCAB)
    init_weights(decoder, generator)
    tensors, meta = training_run.train(decoder, generator, TRAIN_VOCAB, seq=TRAIN_SEQ)
    save(os.path.join(outdir, "train_qwen3_5_tiny.safetensors"), tensors, meta)


def hf_cases(outdir):
    """Hugging Face folders of the tiny model in transformers' layouts
    (tests/reference/qwen3_5_hf.py): dense text-only (untied), and MoE
    multimodal (tied, with a vision and an MTP tensor titan skips)."""
    for name, moe, multimodal, tie, seed in (("dense", False, False, False, 21), ("moe", True, True, True, 22)):
        tensors, meta = qwen3_5_hf.hf_case(moe, multimodal, tie, seed)
        save(os.path.join(outdir, f"model_qwen3_5_hf_{name}.safetensors"), tensors, meta)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    parity_case(outdir, "qwen3_5_debug", qwen3_5.DEBUGMODEL,
                ["output_gate", "partial_rotary", "offset_norms", "short_conv", "gdn_gate"])
    parity_case(outdir, "qwen3_5_moe_debug", qwen3_5.DEBUGMODEL_MOE, ["shared_expert_gate"])
    training_case(outdir)
    hf_cases(outdir)


if __name__ == "__main__":
    main()
