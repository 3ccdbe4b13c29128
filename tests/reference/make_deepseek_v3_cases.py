"""Writes the DeepSeek-V3 reference cases (tests/reference/deepseek_v3.py):
for each tiny model, random weights (a random score correction bias
included), a batch, the logits, the loss and every parameter gradient in
float64; and 20 float64 training steps of the latent model
(training_run.py).

Usage: make_deepseek_v3_cases.py OUTDIR
"""
import os
import sys

import torch

import deepseek_v3
import training_run
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

ROUTER_STD = 0.1


def training_case(outdir):
    """20 float64 AdamW steps of the latent model (sigmoid scores, group-limited
    top-k, a fixed random correction bias in the choice)."""
    generator = torch.Generator().manual_seed(13)
    decoder = deepseek_v3.Decoder(deepseek_v3.TINY["latent"])
    training_run.random_init(decoder, generator)
    with torch.no_grad():
        # Router logits of about unit size: sigmoid scores spread over (0, 1), where
        # a saturated sigmoid would put near-ties between experts at rounding level.
        for pname, p in decoder.named_parameters():
            if "router" in pname:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * ROUTER_STD)
        for bname, b in decoder.named_buffers():
            if bname.endswith("expert_bias"):
                b.copy_(torch.randn(b.shape, generator=generator, dtype=torch.float64) * 0.1)
    tensors, meta = training_run.train(decoder, generator, deepseek_v3.TINY["latent"]["vocab_size"])
    save(os.path.join(outdir, "train_deepseek_v3_latent.safetensors"), tensors, meta)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    for name in deepseek_v3.TINY:
        case(outdir, name)
    training_case(outdir)


if __name__ == "__main__":
    main()
