"""Writes the whole-model reference cases: the llama3, qwen3 and qwen3_moe
debug models (tests/reference/model.py) with random weights, their logits,
loss (and for MoE the auxiliary loss) and every parameter gradient in float64,
and a 20-step float32 training run (AdamW, warmup then linear decay, gradient
clipping) with its per-step losses and final weights.

Usage: make_model_cases.py OUTDIR
"""
import math
import os
import sys

import torch

import model
from lr_schedule import lr_factor
from safetensors_io import save

VOCAB, BATCH, SEQ = 2048, 2, 64


def init_weights(decoder, generator):
    with torch.no_grad():
        for name, p in decoder.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=generator, dtype=torch.float64))
            elif "router" in name:
                # Wider than the other projections: the router's top-k margins then stay far above f32
                # rounding, so titan and the reference pick the same experts throughout.
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.1)
            elif "tok_embeddings" in name:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * (0.0625 if decoder.tie else 1.0))
            else:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.02)


# A fixed bigram chain over 64 of the ids (with 10% noise): learnable in a
# few steps, so the reference loss curve really falls.
CHAIN = torch.randperm(64, generator=torch.Generator().manual_seed(3))


def batch(generator):
    ids = torch.empty(BATCH, SEQ + 1, dtype=torch.long)
    ids[:, 0] = torch.randint(0, 64, (BATCH,), generator=generator)
    for t in range(SEQ):
        noise = torch.randint(0, 64, (BATCH,), generator=generator)
        keep = torch.rand(BATCH, generator=generator) >= 0.1
        ids[:, t + 1] = torch.where(keep, CHAIN[ids[:, t]], noise)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def parity_case(outdir, name):
    generator = torch.Generator().manual_seed(7)
    decoder = model.debug_model(name, VOCAB)
    init_weights(decoder, generator)
    ids, labels = batch(generator)
    labels[0, :5] = -100  # ignored positions must not count
    logits = decoder(ids)
    lm, aux = decoder.losses(ids, labels)
    params = dict(decoder.named_parameters())
    grads = torch.autograd.grad(decoder.loss(ids, labels), list(params.values()))
    tensors = {"input_ids": ids, "labels": labels, "logits": logits, "loss": lm.reshape(())}
    if aux is not None:
        tensors["aux_loss"] = aux.reshape(())
    for (pname, p), g in zip(params.items(), grads):
        tensors["param." + pname] = p
        tensors["grad." + pname] = g
    save(os.path.join(outdir, f"model_{name}_debug.safetensors"), tensors, {"vocab": VOCAB})


def training_case(outdir, name, steps=20, lr=3e-3, warmup=4, max_norm=1.0, weight_decay=0.1):
    generator = torch.Generator().manual_seed(11)
    decoder = model.debug_model(name, VOCAB)
    init_weights(decoder, generator)
    decoder = decoder.float()
    tensors = {"init." + n: p.detach().clone() for n, p in decoder.named_parameters()}
    no_decay = [p for n, p in decoder.named_parameters() if "norm" in n or "tok_embeddings" in n]
    decay = [p for n, p in decoder.named_parameters() if not ("norm" in n or "tok_embeddings" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses, aux_losses, norms = [], [], []
    for step in range(1, steps + 1):
        ids, labels = batch(generator)
        tensors[f"input_ids.{step}"] = ids
        tensors[f"labels.{step}"] = labels
        for group in optimizer.param_groups:
            group["lr"] = lr * lr_factor(step, warmup, steps)
        optimizer.zero_grad()
        lm, aux = decoder.losses(ids, labels)
        (lm if aux is None else lm + decoder.aux_loss_coef * aux).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(decoder.parameters(), max_norm)))
        optimizer.step()
        losses.append(float(lm))
        aux_losses.append(0.0 if aux is None else float(aux))
    tensors["losses"] = torch.tensor(losses, dtype=torch.float64)
    tensors["aux_losses"] = torch.tensor(aux_losses, dtype=torch.float64)
    tensors["grad_norms"] = torch.tensor(norms, dtype=torch.float64)
    for n, p in decoder.named_parameters():
        tensors["final." + n] = p.detach().clone()
    save(os.path.join(outdir, f"train_{name}_debug.safetensors"), tensors,
         dict(vocab=VOCAB, steps=steps, lr=lr, warmup=warmup, max_norm=max_norm, weight_decay=weight_decay))


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    for name in ["llama3", "qwen3", "qwen3_moe"]:
        parity_case(outdir, name)
        training_case(outdir, name)


if __name__ == "__main__":
    main()
