"""Writes the DeepSeek-V3 reference cases (tests/reference/deepseek_v3.py):
for each tiny model, random weights (a random score correction bias
included), a batch, the logits, the loss and every parameter gradient in
float64.

Usage: make_deepseek_v3_cases.py OUTDIR
"""
import os
import sys

import torch

import deepseek_v3
from safetensors_io import save

BATCH, SEQ = 2, 32


def case(outdir, name):
    generator = torch.Generator().manual_seed(5)
    c = deepseek_v3.TINY[name]
    decoder = deepseek_v3.Decoder(c)
    with torch.no_grad():
        for pname, p in decoder.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=generator, dtype=torch.float64))
            elif "router" in pname:
                # Wide router logits keep the top-k margins far above f32 rounding.
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.3)
            elif "tok_embeddings" in pname:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64))
            else:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.05)
        for bname, b in decoder.named_buffers():
            if bname.endswith("expert_bias"):
                b.copy_(torch.randn(b.shape, generator=generator, dtype=torch.float64) * 0.1)
    ids = torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=generator)
    labels = torch.randint(0, c["vocab_size"], (BATCH, SEQ), generator=generator)
    labels[0, :3] = -100
    logits = decoder(ids)
    loss = decoder.loss(ids, labels)
    params = dict(decoder.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()))
    tensors = {"input_ids": ids, "labels": labels, "logits": logits, "loss": loss.reshape(())}
    for bname, b in decoder.named_buffers():
        tensors["buffer." + bname] = b
    for (pname, p), g in zip(params.items(), grads):
        tensors["param." + pname] = p
        tensors["grad." + pname] = g
    save(os.path.join(outdir, f"deepseek_v3_{name}.safetensors"), tensors)

def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    for name in deepseek_v3.TINY:
        case(outdir, name)


if __name__ == "__main__":
    main()
