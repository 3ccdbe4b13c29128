"""Reference cases for NaN and Inf propagation: inputs with NaN (and, where
PyTorch's result does not hinge on an order of operations, Inf) planted at
known places, and the float64 results PyTorch gives for them. The C++ op tests
(tests/ops/nonfinite_test.cpp) check, for every CPU kernel set, that each
result is non-finite exactly where the reference's is, and matches it
elsewhere. NaN and Inf are not told apart there: Inf - Inf and 0 * Inf are
NaN in one order of operations and +-Inf in another.

Gradients are written from their formulas with torch.where where autograd
would multiply a masked-out NaN by zero (a visible NaN key's value for a query
that cannot see it, an ignored token's logits): PyTorch's own kernels
(flash attention, cross_entropy with ignore_index) never read those.
"""
import torch

nan, inf = float("nan"), float("inf")


def gemm(write, bf16_exact):
    a, b = bf16_exact(16, 24), bf16_exact(24, 12)
    a[3, 5] = nan  # row 3 of c
    b[7, 2] = inf  # column 2 of c (+-Inf, or NaN where a[:, 7] is 0)
    write("nonfinite_gemm", {"a": a, "b": b, "c": a @ b})


def pointwise(write, bf16_exact):
    x = bf16_exact(8, 33, scale=3.0)
    x[1, 3], x[2, 5], x[4, 7] = nan, inf, -inf
    grad_y = bf16_exact(8, 33)
    grad_y[6, 9] = nan
    s = torch.sigmoid(x)
    write("nonfinite_silu", {"x": x, "y": x * s, "grad_y": grad_y, "grad_x": grad_y * s * (1 + x * (1 - s))})

    gate, up = bf16_exact(8, 33, scale=3.0), bf16_exact(8, 33)
    gate[1, 3], gate[2, 5] = nan, inf
    up[5, 6] = nan
    s = torch.sigmoid(gate)
    silu = gate * s
    write("nonfinite_swiglu", {"gate": gate, "up": up, "y": silu * up, "grad_y": grad_y,
                               "grad_gate": grad_y * up * s * (1 + gate * (1 - s)), "grad_up": grad_y * silu})

    gate2 = gate.clone()
    gate2[2, 5] = 2.0  # gelu's derivative at +Inf is 0 * Inf in PyTorch's formula: NaN only
    g = gate2.clone().requires_grad_(True)
    u = up.clone().requires_grad_(True)
    y = torch.nn.functional.gelu(g, approximate="tanh") * u
    dg, du = torch.autograd.grad(y, [g, u], grad_y)
    write("nonfinite_geglu", {"gate": gate2, "up": up, "y": y.detach(), "grad_y": grad_y, "grad_gate": dg,
                              "grad_up": du})

    capped = 5.0 * torch.tanh(x / 5.0)
    write("nonfinite_soft_cap", {"x": x, "y": capped, "grad_y": grad_y,
                                 "grad_x": grad_y * (1 - (capped / 5.0) ** 2)}, cap=5.0)

    write("nonfinite_sigmoid", {"x": x, "y": torch.sigmoid(x)})


def softmax(write, bf16_exact):
    x = bf16_exact(6, 40, scale=3.0)
    x[1, 4], x[2, 9], x[3, 11] = nan, inf, -inf  # rows 1 and 2 all NaN; row 3 finite
    y = torch.softmax(x, dim=-1)
    grad_y = bf16_exact(6, 40)
    grad_y[4, 2] = nan  # row 4 of grad_x
    grad_x = y * (grad_y - (grad_y * y).sum(-1, keepdim=True))
    write("nonfinite_softmax", {"x": x, "y": y, "grad_y": grad_y, "grad_x": grad_x})


def rms_norm(write, bf16_exact):
    x, w = bf16_exact(5, 64, scale=2.0), bf16_exact(64)
    x[1, 10], x[2, 20] = nan, inf
    w[33] = nan
    eps = 1e-5
    xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = xx * torch.rsqrt(xx.pow(2).mean(-1, keepdim=True) + eps) * ww
    grad_y = bf16_exact(5, 64)
    dx, dw = torch.autograd.grad(y, [xx, ww], grad_y)
    write("nonfinite_rms_norm", {"x": x, "weight": w, "y": y.detach(), "grad_y": grad_y, "grad_x": dx,
                                 "grad_weight": dw}, eps=eps)


def embedding(write, bf16_exact):
    w = bf16_exact(20, 8)
    w[7, 3] = nan
    ids = torch.randint(0, 20, (3, 11))
    ids[0, 2], ids[2, 5] = 7, 7
    ids[ids == 4] = 5
    ids[1, 1] = 4
    grad_y = bf16_exact(3, 11, 8)
    grad_y[1, 1, 6] = nan  # only row 4 of grad_weight
    grad_w = torch.zeros(20, 8, dtype=torch.float64).index_add_(0, ids.flatten(), grad_y.reshape(-1, 8))
    write("nonfinite_embedding", {"weight": w, "ids": ids, "y": w[ids], "grad_y": grad_y, "grad_weight": grad_w})


def rope(write, bf16_exact, ref):
    x = bf16_exact(2, 9, 3, 16)
    x[0, 4, 1, 3] = nan  # and its rotation partner
    x[1, 2, 2, 12] = inf
    positions = torch.arange(9).expand(2, 9).contiguous()
    freqs = ref.rope_frequencies(16, 10000.0, None)
    write("nonfinite_rope", {"x": x, "y": ref.rope(x, positions, freqs, "half")}, theta=10000.0, max_positions=9)


def attention_case(write, bf16_exact, ref, name, batch, length, heads, kv_heads, dim, window, documents, plant):
    q, k, v = bf16_exact(batch, length, heads, dim), bf16_exact(batch, length, kv_heads, dim), bf16_exact(
        batch, length, kv_heads, dim)
    grad_y = bf16_exact(batch, length, heads, dim)
    docs = None
    if documents:
        starts = torch.rand(batch, length) < 0.15
        starts[:, 0] = True
        docs = torch.cumsum(starts.long(), dim=1) - 1
    for tensor, index in plant:
        {"q": q, "k": k, "v": v, "grad_y": grad_y}[tensor][index] = nan
    group = heads // kv_heads
    kk, vv = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    scale = dim ** -0.5
    visible = ref.attention_mask(batch, length, length, True, window, docs)[:, None]  # [B, 1, Sq, Sk]
    scores = torch.where(visible, torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale, torch.tensor(-inf, dtype=q.dtype))
    p = torch.where(visible, torch.softmax(scores, dim=-1), torch.tensor(0.0, dtype=q.dtype))
    zero = torch.tensor(0.0, dtype=q.dtype)
    # Only visible keys are summed: a NaN value of a key a query cannot see never reaches it.
    pv = torch.where(visible[..., None], p[..., None] * vv.permute(0, 2, 1, 3)[:, :, None], zero)  # [B,H,Sq,Sk,D]
    y = pv.sum(dim=3).permute(0, 2, 1, 3)  # [B, Sq, H, D]
    # Backward (flash attention's formulas, over visible pairs only).
    dp = torch.where(visible, torch.einsum("bqhd,bkhd->bhqk", grad_y, vv), zero)
    delta = (grad_y * y).sum(-1).permute(0, 2, 1)[..., None]  # [B, H, Sq, 1]
    ds = torch.where(visible, p * (dp - delta), zero) * scale
    masked_k = torch.where(visible[..., None], ds[..., None] * kk.permute(0, 2, 1, 3)[:, :, None], zero)
    dq = masked_k.sum(dim=3).permute(0, 2, 1, 3)
    masked_q = torch.where(visible[..., None], ds[..., None] * q.permute(0, 2, 1, 3)[:, :, :, None], zero)
    dk = masked_q.sum(dim=2).permute(0, 2, 1, 3)
    masked_g = torch.where(visible[..., None], p[..., None] * grad_y.permute(0, 2, 1, 3)[:, :, :, None], zero)
    dv = masked_g.sum(dim=2).permute(0, 2, 1, 3)
    dk = dk.reshape(batch, length, kv_heads, group, dim).sum(3)
    dv = dv.reshape(batch, length, kv_heads, group, dim).sum(3)
    tensors = {"q": q, "k": k, "v": v, "y": y, "grad_y": grad_y, "grad_q": dq, "grad_k": dk, "grad_v": dv}
    if docs is not None:
        tensors["document_ids"] = docs
    write(f"nonfinite_attention_{name}", tensors, window=window, scale=repr(scale))


def attention(write, bf16_exact, ref):
    # A NaN query spoils its own row; a NaN key every query that sees it; a NaN
    # value every query that sees it, and no other (the key at position 30 is
    # hidden from queries 0-29); a NaN upstream gradient its query's gradients.
    plant = [("q", (0, 5, 1, 2)), ("k", (0, 9, 0, 1)), ("v", (1, 30, 1, 0)), ("grad_y", (1, 12, 0, 3))]
    attention_case(write, bf16_exact, ref, "causal", 2, 37, 4, 2, 16, 0, False, plant)
    attention_case(write, bf16_exact, ref, "window_documents", 2, 150, 2, 1, 32, 20, True,
                   [("q", (0, 140, 0, 2)), ("k", (1, 60, 0, 1)), ("v", (0, 99, 0, 0))])


def cross_entropy(write, bf16_exact):
    n, d, vocab = 29, 16, 60
    hidden, weight = bf16_exact(n, d), bf16_exact(vocab, d, scale=0.5)
    targets = torch.randint(0, vocab, (n,))
    targets[::7] = -100
    keep = targets != -100
    count = keep.sum()

    def loss_and_grads(logits):
        lse = torch.logsumexp(logits, dim=-1)
        safe = torch.where(keep, targets, torch.zeros_like(targets))
        per_token = lse - logits.gather(1, safe[:, None])[:, 0]
        loss = torch.where(keep, per_token, torch.zeros_like(per_token)).sum() / count
        onehot = torch.nn.functional.one_hot(safe, vocab).double()
        grad = torch.where(keep[:, None], torch.softmax(logits, -1) - onehot, torch.zeros_like(logits)) / count
        return loss.reshape(()), grad

    logits = hidden @ weight.T
    logits[3, 4], logits[7, 8] = nan, nan  # row 3 counts (the loss is NaN); row 7 is ignored
    loss, grad = loss_and_grads(logits)
    write("nonfinite_cross_entropy", {"logits": logits, "targets": targets, "loss": loss, "grad_logits": grad},
          ignore_index=-100)
    clean_logits = logits.clone()
    clean_logits[3, 4] = 0.5
    loss, grad = loss_and_grads(clean_logits)  # an ignored NaN row leaves the loss finite
    write("nonfinite_cross_entropy_ignored", {"logits": clean_logits, "targets": targets, "loss": loss,
                                              "grad_logits": grad}, ignore_index=-100)
    h = hidden.clone()
    h[14, 2] = nan  # an ignored token's hidden state: its logits are never counted...
    h[5, 1] = nan  # ...a counted one's make the loss NaN
    loss, grad = loss_and_grads(h @ weight.T)
    write("nonfinite_fused_cross_entropy", {"hidden": h, "weight": weight, "targets": targets, "loss": loss,
                                            "grad_hidden": grad @ weight, "grad_weight": grad.T @ h},
          ignore_index=-100)


def adamw(write, bf16_exact):
    p = bf16_exact(40).float()
    g = bf16_exact(40).float()
    g[3], g[17] = nan, inf
    param = torch.nn.Parameter(p.clone())
    optimizer = torch.optim.AdamW([param], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    param.grad = g.clone()
    optimizer.step()
    state = optimizer.state[param]
    write("nonfinite_adamw", {"param": p, "grad": g, "final": param.detach().clone(), "exp_avg": state["exp_avg"],
                              "exp_avg_sq": state["exp_avg_sq"]}, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8,
          weight_decay=0.1)


def reductions(write, bf16_exact):
    x = bf16_exact(7, 13)
    y = bf16_exact(30)
    x[2, 3] = nan
    y[4] = inf
    write("nonfinite_reductions", {"x": x, "y": y, "sum_x": x.sum().reshape(()), "max_x": x.max().reshape(()),
                                   "sum_squares_x": (x * x).sum().reshape(()), "sum_y": y.sum().reshape(()),
                                   "max_y": y.max().reshape(()),
                                   "l2_norm": torch.sqrt((x * x).sum() + (y * y).sum()).reshape(())})
    # clip_grad_norm_ with a NaN norm: its factor min(1, max_norm / (NaN + 1e-6)) is NaN and so is every gradient
    # (clipped0/1). titan checks the NaN norm and deliberately leaves the gradients as they are (ops/grad_clip.h).
    grads = [bf16_exact(9), bf16_exact(4, 5)]
    grads[0][2] = nan
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for param, grad in zip(params, grads):
        param.grad = grad.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
    write("nonfinite_clip", {"grad0": grads[0], "grad1": grads[1], "norm": norm.reshape(()),
                             "clipped0": params[0].grad, "clipped1": params[1].grad}, max_norm=1.0)


def moe(write, bf16_exact):
    scores = bf16_exact(6, 8)
    scores[2, 5] = nan  # PyTorch's topk ranks NaN above every number
    values, indices = torch.topk(scores, 3, dim=-1)
    normalized = values / values.sum(-1, keepdim=True)
    write("nonfinite_topk", {"scores": scores, "values": values, "indices": indices, "normalized": normalized})
    # A grouped GEMM: a NaN row of expert 1's tokens spoils only its own output row; a NaN in expert 2's
    # weight every row routed to expert 2 (and, in the weight gradient, that expert alone).
    counts = torch.tensor([3, 4, 0, 5])
    x, w = bf16_exact(12, 10), bf16_exact(4, 6, 10)
    x[4, 7] = nan
    w[3, 2, 1] = nan
    grad_y = bf16_exact(12, 6)
    bounds = [0] + torch.cumsum(counts, 0).tolist()
    ys, gxs, gws = [], [], []
    for e in range(4):
        rows = slice(bounds[e], bounds[e + 1])
        ys.append(x[rows] @ w[e].T)
        gxs.append(grad_y[rows] @ w[e])
        gws.append(grad_y[rows].T @ x[rows])
    write("nonfinite_grouped_gemm", {"x": x, "w": w, "counts": counts, "grad_y": grad_y, "y": torch.cat(ys),
                                     "grad_x": torch.cat(gxs), "grad_w": torch.stack(gws)})


def write_all(write, bf16_exact, ref):
    """Drawn from a forked RNG so the other op cases keep their inputs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(9090)
        gemm(write, bf16_exact)
        pointwise(write, bf16_exact)
        softmax(write, bf16_exact)
        rms_norm(write, bf16_exact)
        embedding(write, bf16_exact)
        rope(write, bf16_exact, ref)
        attention(write, bf16_exact, ref)
        cross_entropy(write, bf16_exact)
        adamw(write, bf16_exact)
        reductions(write, bf16_exact)
        moe(write, bf16_exact)
