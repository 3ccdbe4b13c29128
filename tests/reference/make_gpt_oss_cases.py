"""Writes the gpt-oss reference case (tests/reference/gpt_oss.py): random
weights (sinks and every bias included), a batch, the logits, the loss and
every parameter gradient in float64; and 20 float64 training steps of the
same model (training_run.py).

Usage: make_gpt_oss_cases.py OUTDIR
"""
import os
import sys

import torch

import gpt_oss
import training_run
from safetensors_io import save

BATCH, SEQ = 2, 32


def training_case(outdir):
    """20 float64 AdamW steps of the tiny model (windows, sinks, biases, clamps)."""
    generator = torch.Generator().manual_seed(13)
    decoder = gpt_oss.Decoder(gpt_oss.TINY)
    training_run.random_init(decoder, generator)
    tensors, meta = training_run.train(decoder, generator, gpt_oss.TINY["vocab_size"])
    save(os.path.join(outdir, "train_gpt_oss_tiny.safetensors"), tensors, meta)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(7)
    c = gpt_oss.TINY
    decoder = gpt_oss.Decoder(c)
    with torch.no_grad():
        for pname, p in decoder.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=generator, dtype=torch.float64))
            elif "router" in pname:
                # Wide router logits keep the top-k margins far above f32 rounding.
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.3)
            elif "tok_embeddings" in pname or "sinks" in pname:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64))
            else:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.05)
    ids = torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=generator)
    labels = torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=generator)
    labels[0, :3] = -100
    logits = decoder(ids)
    loss = decoder.loss(ids, labels)
    params = dict(decoder.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()))
    tensors = {"input_ids": ids, "labels": labels, "logits": logits, "loss": loss.reshape(())}
    for (pname, p), g in zip(params.items(), grads):
        tensors["param." + pname] = p
        tensors["grad." + pname] = g
    # The HF layout of layer 0's experts, for the adapter's interleave.
    gate_up, gate_up_bias, down, down_bias = decoder.layers[0].moe.experts.hf_layout()
    tensors["hf.gate_up_proj"] = gate_up.detach()
    tensors["hf.gate_up_proj_bias"] = gate_up_bias.detach()
    tensors["hf.down_proj"] = down.detach()
    tensors["hf.down_proj_bias"] = down_bias.detach()
    save(os.path.join(outdir, "gpt_oss_tiny.safetensors"), tensors)
    training_case(outdir)


if __name__ == "__main__":
    main()
