"""A short float64 training run of a reference model, for the families' "20
training steps" parity tests (tests/support/model_checks.h,
expect_training_tracks_reference): AdamW with betas (0.9, 0.95), eps 1e-8,
weight decay except for norms and embeddings (titan's default groups),
TorchTitan's warmup then linear decay (lr_schedule.py), gradients clipped to
a global norm, on a few batches of a noisy bigram chain cycled so the loss
really falls. The model stays in float64: the test holds titan's f32
training to the exact run, not to PyTorch's own f32 rounding.

Returns the tensors the test reads (init.<param>, init.<buffer> for the
experts' correction biases, input_ids.<step>, labels.<step>, losses,
grad_norms, final.<param>) and the run's settings as metadata.
"""
import torch

from lr_schedule import lr_factor


def bigram_batches(generator, vocab, batch, seq, count):
    """`count` batches [batch, seq] of a fixed random next-token map over
    `vocab` tokens, each token replaced by noise with probability 0.1."""
    chain = torch.randperm(vocab, generator=generator)
    batches = []
    for _ in range(count):
        ids = torch.empty(batch, seq + 1, dtype=torch.long)
        ids[:, 0] = torch.randint(0, vocab, (batch,), generator=generator)
        for t in range(seq):
            noise = torch.randint(0, vocab, (batch,), generator=generator)
            keep = torch.rand(batch, generator=generator) >= 0.1
            ids[:, t + 1] = torch.where(keep, chain[ids[:, t]], noise)
        batches.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))
    return batches


def random_init(decoder, generator):
    """The DeepSeek-V3 and gpt-oss cases' weights: norms near 1, wide router
    logits (top-k margins far above f32 rounding), unit embeddings and sinks,
    small projections."""
    randn = lambda shape: torch.randn(shape, generator=generator, dtype=torch.float64)  # noqa: E731
    with torch.no_grad():
        for name, p in decoder.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * randn(p.shape))
            elif "router" in name:
                p.copy_(0.3 * randn(p.shape))
            elif "tok_embeddings" in name or "sinks" in name:
                p.copy_(randn(p.shape))
            else:
                p.copy_(0.05 * randn(p.shape))


def adamw_run(decoder, next_batch, steps, lr, warmup, max_norm, weight_decay):
    """`steps` AdamW steps of `decoder` on next_batch(step) -> (ids, labels),
    in the decoder's own dtype: the tensors listed above (without metadata)."""
    tensors = {"init." + n: p.detach().clone() for n, p in decoder.named_parameters()}
    for n, b in decoder.named_buffers():
        if n.endswith("expert_bias"):
            tensors["init." + n] = b.detach().clone()
    plain = lambda n: "norm" in n or "tok_embeddings" in n  # noqa: E731 (no weight decay)
    optimizer = torch.optim.AdamW(
        [{"params": [p for n, p in decoder.named_parameters() if not plain(n)], "weight_decay": weight_decay},
         {"params": [p for n, p in decoder.named_parameters() if plain(n)], "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses, norms = [], []
    for step in range(1, steps + 1):
        ids, labels = next_batch(step)
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
    tensors["grad_norms"] = torch.tensor(norms, dtype=torch.float64)
    for n, p in decoder.named_parameters():
        tensors["final." + n] = p.detach().clone()
    return tensors


def train(decoder, generator, vocab, batch=2, seq=32, steps=20, lr=3e-3, warmup=4, max_norm=1.0, weight_decay=0.1,
          distinct_batches=5):
    """adamw_run over `distinct_batches` bigram batches, cycled."""
    batches = bigram_batches(generator, vocab, batch, seq, distinct_batches)
    tensors = adamw_run(decoder, lambda step: batches[(step - 1) % distinct_batches], steps, lr, warmup, max_norm,
                        weight_decay)
    meta = dict(vocab=vocab, steps=steps, lr=lr, warmup=warmup, max_norm=max_norm, weight_decay=weight_decay)
    return tensors, meta
