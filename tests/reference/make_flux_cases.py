"""Writes the FLUX reference cases: the transformer's (tests/reference/flux.py)
random weights and inputs (each rounded to float32 first, so that titan's f32
copies are the same numbers), the predicted velocity, the flow-matching loss
against a random target and every parameter's gradient, in float64, and the
weights under Diffusers' names; and the
T5 encoder's (tests/reference/t5_encoder.py): weights, token ids with padding,
the hidden states, and its relative-position buckets; and the CLIP text
encoder's (tests/reference/clip_text.py): weights, token ids ending in the
end-of-text id and padded with it, the hidden states and the pooled output;
and the autoencoder's (tests/reference/flux_autoencoder.py): weights (also
alone, as an ae.safetensors of the tiny config), an image, the encoder's
moments, the scaled latent, and the image decoded from that latent.

Usage: make_flux_cases.py OUTDIR
"""
import math
import os
import sys

import torch

import clip_text
import flux
import flux_autoencoder
import t5_encoder
from safetensors_io import save

BATCH, TEXT_TOKENS, ROWS, COLUMNS = 2, 5, 3, 4


def f32_exact(tensor):
    return tensor.float().to(flux.F64)


def draw_parameters(model, generator, spread):
    """Each parameter drawn from N(mean, std), (mean, std) = spread(its name), rounded to float32."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            mean, std = spread(name)
            p.copy_(f32_exact(mean + std * torch.randn(p.shape, generator=generator, dtype=flux.F64)))


def inputs(c, generator):
    def draw(*shape):
        return f32_exact(torch.randn(*shape, generator=generator, dtype=flux.F64))

    image_tokens = ROWS * COLUMNS
    img_ids = torch.zeros(BATCH, image_tokens, 3, dtype=torch.int64)
    img_ids[..., 1] = torch.arange(ROWS).repeat_interleave(COLUMNS)
    img_ids[..., 2] = torch.arange(COLUMNS).repeat(ROWS)
    # FLUX.1 gives text tokens position zero on every axis; counting them on
    # the first axis here makes that axis's rotation matter too.
    txt_ids = torch.zeros(BATCH, TEXT_TOKENS, 3, dtype=torch.int64)
    txt_ids[..., 0] = torch.arange(TEXT_TOKENS)
    return {
        "img": draw(BATCH, image_tokens, c["in_channels"]),
        "img_ids": img_ids,
        "txt": draw(BATCH, TEXT_TOKENS, c["context_in_dim"]),
        "txt_ids": txt_ids,
        "timesteps": f32_exact(torch.tensor([0.3, 0.85], dtype=flux.F64)),
        "y": draw(BATCH, c["vec_in_dim"]),
        "guidance": f32_exact(torch.tensor([3.5, 1.0], dtype=flux.F64)),
    }


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(11)
    c = flux.TINY
    model = flux.Flux(c)
    # Modulations far from zero, so that every shift, scale and gate matters.
    draw_parameters(model, generator, lambda name: (1.0, 0.1) if name.endswith("norm.weight") else
                    (0.0, 0.1 if "_mod." in name or "modulation" in name else 0.08))
    x = inputs(c, generator)
    velocity = model(**x)
    target = f32_exact(torch.randn(velocity.shape, generator=generator, dtype=flux.F64))
    loss = ((velocity - target) ** 2).mean()
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()))
    tensors = dict(x)
    tensors.update({"velocity": velocity, "target": target, "loss": loss.reshape(())})
    for (name, p), g in zip(params.items(), grads):
        tensors["param." + name] = p
        tensors["grad." + name] = g
    for name, t in flux.diffusers_state(model).items():
        tensors["diffusers." + name] = t
    save(os.path.join(outdir, "flux_tiny.safetensors"), tensors)
    t5_case(outdir)
    clip_case(outdir)
    autoencoder_case(outdir)


def t5_case(outdir):
    generator = torch.Generator().manual_seed(23)
    c = t5_encoder.TINY
    model = t5_encoder.T5Encoder(c)
    draw_parameters(model, generator, lambda name: (1.0, 0.1) if name.endswith("layer_norm.weight") else
                    (0.0, 1.0) if "relative_attention_bias" in name or name == "shared.weight" else (0.0, 0.15))
    # 24 tokens: distances past max_distance (20) reach the last buckets.
    ids = torch.randint(0, c["vocab_size"], (2, 24), generator=generator)
    mask = torch.ones(2, 24, dtype=torch.int64)
    mask[1, 17:] = 0  # the second prompt is 17 tokens and padding
    with torch.no_grad():
        hidden = model(ids, mask)
    tensors = {"input_ids": ids, "attention_mask": mask, "hidden": hidden}
    for name, p in model.named_parameters():
        tensors["param." + name] = p
    # T5 v1.1's own buckets (32 over distances up to 128) for every offset in -300..300.
    offsets = torch.arange(-300, 301)
    tensors["bucket_offsets"] = offsets
    tensors["buckets_32_128"] = t5_encoder.relative_position_bucket(offsets, 32, 128)
    save(os.path.join(outdir, "t5_tiny.safetensors"), tensors)


def clip_case(outdir):
    generator = torch.Generator().manual_seed(29)
    c = clip_text.TINY
    model = clip_text.ClipText(c)
    draw_parameters(model, generator, lambda name: (1.0, 0.1) if "layer_norm" in name and name.endswith("weight")
                    else (0.0, 1.0) if "embedding" in name else (0.0, 0.15))
    # Prompts of 9 and 14 tokens, each closed by the end-of-text id (the
    # largest, 98) and padded with it to the 16 positions.
    end = c["vocab_size"] - 1
    ids = torch.full((2, c["max_position_embeddings"]), end, dtype=torch.int64)
    ids[0, :8] = torch.randint(0, end, (8,), generator=generator)
    ids[1, :13] = torch.randint(0, end, (13,), generator=generator)
    with torch.no_grad():
        hidden, pooled = model(ids)
    tensors = {"input_ids": ids, "hidden": hidden, "pooled": pooled}
    for name, p in model.named_parameters():
        tensors["param." + name] = p
    save(os.path.join(outdir, "clip_tiny.safetensors"), tensors)


def autoencoder_case(outdir):
    generator = torch.Generator().manual_seed(31)
    model = flux_autoencoder.AutoEncoder(flux_autoencoder.TINY)

    # Norm scales near 1 and shifts near 0; each conv's weights ~ 1/sqrt(fan in),
    # so that activations stay of order one through every block.
    def spread(name):
        if "norm" in name:
            return (1.0, 0.1) if name.endswith("weight") else (0.0, 0.1)
        if name.endswith("bias"):
            return (0.0, 0.1)
        p = dict(model.named_parameters())[name]
        return (0.0, 1.0 / math.sqrt(p[0].numel()))

    draw_parameters(model, generator, spread)
    # Height 16, width 12: unequal, so a swapped axis shows.
    image = f32_exact(torch.rand(2, 3, 16, 12, generator=generator, dtype=flux.F64) * 2 - 1)
    with torch.no_grad():
        moments = model.moments(image)
        latent = model.encode(image)
        decoder_input = f32_exact(latent)
        decoded = model.decode(decoder_input)
    tensors = {"image": image, "moments": moments, "latent": latent, "decoder_input": decoder_input,
               "decoded": decoded}
    weights = dict(model.named_parameters())
    for name, p in weights.items():
        tensors["param." + name] = p
    save(os.path.join(outdir, "flux_ae_tiny.safetensors"), tensors)
    save(os.path.join(outdir, "flux_ae_tiny_weights.safetensors"), weights)


if __name__ == "__main__":
    main()
