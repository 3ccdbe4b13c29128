"""Writes the Muse Glimmer reference cases (tests/reference/muse_glimmer.py):
the debugmodel with random weights over 160-token sequences (longer than its
128-token windows, so the sliding layers differ from the global ones), its
logits, loss and every parameter gradient in float64, the logits with each
distinctive feature switched off and with the 30B flavor's output multiplier, and a 20-step float32 training run in the
format of make_model_cases.py's (AdamW, warmup then linear decay, clipping).

Usage: make_muse_glimmer_cases.py OUTDIR
"""
import os
import sys

import torch

import muse_glimmer
from lr_schedule import lr_factor
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
    tensors = {"init." + n: p.detach().clone() for n, p in decoder.named_parameters()}
    plain = lambda n: "norm" in n or "tok_embeddings" in n  # noqa: E731 (no weight decay)
    optimizer = torch.optim.AdamW(
        [{"params": [p for n, p in decoder.named_parameters() if not plain(n)], "weight_decay": weight_decay},
         {"params": [p for n, p in decoder.named_parameters() if plain(n)], "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses, norms = [], []
    for step in range(1, steps + 1):
        ids, labels = batch(generator, TRAIN_SEQ)
        tensors[f"input_ids.{step}"] = ids
        tensors[f"labels.{step}"] = labels
        for group in optimizer.param_groups:
            group["lr"] = lr * lr_factor(step, warmup, steps)
        optimizer.zero_grad()
        loss = decoder.loss(ids, labels)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(decoder.parameters(), max_norm)))
        optimizer.step()
        losses.append(float(loss))
    tensors["losses"] = torch.tensor(losses, dtype=torch.float64)
    tensors["aux_losses"] = torch.zeros(steps, dtype=torch.float64)
    tensors["grad_norms"] = torch.tensor(norms, dtype=torch.float64)
    for n, p in decoder.named_parameters():
        tensors["final." + n] = p.detach().clone()
    save(os.path.join(outdir, "train_muse_glimmer_debug.safetensors"), tensors,
         dict(vocab=VOCAB, steps=steps, lr=lr, warmup=warmup, max_norm=max_norm, weight_decay=weight_decay))


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    parity_case(outdir)
    training_case(outdir)


if __name__ == "__main__":
    main()
