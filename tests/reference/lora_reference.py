"""Plain-PyTorch LoRA reference (no peft package): the llama3 debug model of
model.py with LoRA on every projection kind (q, k, v, o, gate, up, down;
rank 4, alpha 16: scale 4), the base frozen, 10 AdamW steps in float32 with
warmup + linear decay and clipping at 1.0. Writes the initial base weights and
adapter A matrices (B starts at zero, as PEFT initialises it), the batches,
per-step losses and gradient norms (over the adapters only: the base has no
gradient), and the final A and B.

Usage: lora_reference.py OUTDIR
"""
import math
import os
import sys

import torch

import model
from make_model_cases import VOCAB, batch, init_weights, lr_factor
from safetensors_io import save

RANK, ALPHA = 4, 16.0
TARGETS = {"wq": "attention", "wk": "attention", "wv": "attention", "wo": "attention",
           "w1": "feed_forward", "w3": "feed_forward", "w2": "feed_forward"}


class LoraLinear(torch.nn.Module):
    """base(x) + (alpha / r) * B(A(x)), as PEFT's lora.Linear computes it (dropout 0)."""

    def __init__(self, base, rank, alpha, generator):
        super().__init__()
        self.base = base
        out_features, in_features = base.weight.shape
        self.lora_A = torch.nn.Parameter(torch.empty(rank, in_features, dtype=base.weight.dtype))
        self.lora_B = torch.nn.Parameter(torch.zeros(out_features, rank, dtype=base.weight.dtype))
        # PEFT: kaiming_uniform_(a=sqrt(5)) on A, i.e. U(-1/sqrt(in), 1/sqrt(in)).
        bound = 1.0 / math.sqrt(in_features)
        with torch.no_grad():
            self.lora_A.copy_(torch.rand(self.lora_A.shape, generator=generator, dtype=torch.float64) * 2 * bound - bound)
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + ((x @ self.lora_A.T) @ self.lora_B.T) * self.scale


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    steps, lr, warmup, max_norm, weight_decay = 10, 3e-3, 2, 1.0, 0.1
    generator = torch.Generator().manual_seed(23)
    decoder = model.debug_model("llama3", VOCAB)
    init_weights(decoder, generator)
    decoder = decoder.float()
    tensors = {"init." + n: p.detach().clone() for n, p in decoder.named_parameters()}
    for p in decoder.parameters():
        p.requires_grad_(False)
    adapters = {}
    for i, layer in enumerate(decoder.layers):
        for attr, parent_name in TARGETS.items():
            parent = getattr(layer, parent_name)
            lora = LoraLinear(getattr(parent, attr), RANK, ALPHA, generator)
            setattr(parent, attr, lora)
            prefix = f"layers.{i}.{parent_name}.{attr}"
            adapters[prefix + ".lora_A.weight"] = lora.lora_A
            adapters[prefix + ".lora_B.weight"] = lora.lora_B
    for name, p in adapters.items():
        tensors["init." + name] = p.detach().clone()
    optimizer = torch.optim.AdamW(list(adapters.values()), lr=lr, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=weight_decay)
    losses, norms = [], []
    for step in range(1, steps + 1):
        ids, labels = batch(generator)
        tensors[f"input_ids.{step}"] = ids
        tensors[f"labels.{step}"] = labels
        for group in optimizer.param_groups:
            group["lr"] = lr * lr_factor(step, warmup, steps)
        optimizer.zero_grad()
        loss = decoder.loss(ids, labels)
        loss.backward()
        assert all(p.grad is None for p in decoder.parameters() if not p.requires_grad)
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(adapters.values()), max_norm)))
        optimizer.step()
        losses.append(float(loss))
    tensors["losses"] = torch.tensor(losses, dtype=torch.float64)
    tensors["grad_norms"] = torch.tensor(norms, dtype=torch.float64)
    for name, p in adapters.items():
        tensors["final." + name] = p.detach().clone()
    save(os.path.join(outdir, "lora_llama3_debug.safetensors"), tensors,
         dict(vocab=VOCAB, steps=steps, lr=lr, warmup=warmup, max_norm=max_norm, weight_decay=weight_decay,
              rank=RANK, alpha=ALPHA))


if __name__ == "__main__":
    main()
