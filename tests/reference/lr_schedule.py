"""TorchTitan's warmup-stable-decay schedule, stepped by PyTorch's LambdaLR.

The formula is TorchTitan's (torchtitan/components/optimizer/lr_scheduler.py:
warmup steps, then stable steps counted with one virtual step past the last,
then a linear, sqrt or cosine decay scaled to end above min_lr_factor), and
the stepping is PyTorch's: the LR of training step s is the optimizer's LR
before the scheduler's s-th step, i.e. the lambda at index s - 1.

usage: lr_schedule.py SETS OUT. Reads one JSON parameter set per line of
SETS (warmup_steps, total_steps, decay_ratio or null, decay_type,
min_lr_factor) and writes to OUT, per set, a JSON list of the LR factor of
every training step 1..total_steps.
"""
import json
import math
import sys

import torch


def torchtitan_lambda(p):
    total = p["total_steps"]
    warmup = min(p["warmup_steps"], total)
    if p["decay_ratio"] is None:
        decay = total - warmup
    else:
        decay = round(total * p["decay_ratio"])  # Python's round: halves to even
        if warmup + decay > total:
            decay = total - warmup
    stable = total + 1 - warmup - decay

    def factor(index):
        if index < warmup:
            return (index + 1) / warmup
        if index < warmup + stable:
            return 1.0
        progress = (index + 1 - (warmup + stable)) / decay
        kind = p["decay_type"]
        if kind == "linear":
            curve = 1 - progress
        elif kind == "sqrt":
            curve = 1 - math.sqrt(progress)
        else:
            curve = 0.5 * (1.0 + math.cos(math.pi * progress))
        return p["min_lr_factor"] + (1 - p["min_lr_factor"]) * curve

    return factor


def lr_factor(step, warmup, total):
    """The factor of training step `step` (1-based) with titan's and TorchTitan's
    defaults (decay over every step after warmup, linear, to 0): the lambda at
    index step - 1. The reference trainers use it."""
    schedule = {"warmup_steps": warmup, "total_steps": total, "decay_ratio": None, "decay_type": "linear",
                "min_lr_factor": 0.0}
    return torchtitan_lambda(schedule)(step - 1)


def factors_of(p):
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, torchtitan_lambda(p))
    factors = []
    for _ in range(p["total_steps"]):
        factors.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return factors


def main():
    with open(sys.argv[1]) as sets, open(sys.argv[2], "w") as out:
        for line in sets:
            if line.strip():
                out.write(json.dumps(factors_of(json.loads(line))) + "\n")


if __name__ == "__main__":
    main()
