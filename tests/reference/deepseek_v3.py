"""PyTorch reference of DeepSeek-V3 as Hugging Face transformers computes it
(DeepseekV3ForCausalLM, modeling_deepseek_v3), written from that definition in
plain float64 PyTorch: multi-head latent attention (a low-rank or direct
query, the compressed kv with its norm, one rotary key shared by the heads,
RoPE on the rotary dims in interleaved pairs, which Hugging Face's
rope_interleave computes by regrouping the pairs into halves), dense SwiGLU
layers before first_k_dense_replace, then mixtures of experts: sigmoid (or
softmax) scores, the score correction bias in the choice only, group-limited
top-k (groups scored by their two best biased scores, the experts of the
other groups masked to 0), weights from the unbiased scores, normalised
when norm_topk_prob, times routed_scaling_factor, plus the shared experts.
With num_mtp_layers, DeepSeek-V3's multi-token prediction as TorchTitan
trains it (torchtitan/models/deepseek_v3/mtp.py): depth k fuses the previous
depth's hidden state (the last layer's output for k = 1), zeroed where token
t + k does not exist, with that token's embedding, eh_proj(cat(enorm(emb),
hnorm(h))), runs a block of the last layer's form and mtp_norm, and predicts
token t + k + 1 through the shared output head; the loss adds mtp_scale times
the mean over depths of each depth's summed cross-entropy over the number of
main targets. Logits never include the depths.
Parameter names are titan's FQNs, so weights move through safetensors."""
import torch

import functional as ref
import rope_scaling
from model import FeedForward, Linear, RMSNorm, Experts, Router


def rotate_interleaved_as_hf(x, positions, freqs):
    """x [B, S, H, D]: Hugging Face's apply_rotary_pos_emb_interleave: the
    pairs (2i, 2i+1) regrouped into halves (i, i + D/2), then rotate_half.
    The output's features are in the regrouped order: dot products between
    two such outputs equal those of the interleaved rotation."""
    b, s, h, d = x.shape
    x = x.reshape(b, s, h, d // 2, 2).transpose(-1, -2).reshape(b, s, h, d)
    angles = positions.to(torch.float64)[..., None] * freqs
    cos = torch.cos(angles).float().to(x.dtype)[:, :, None, :].repeat(1, 1, 1, 2)
    sin = torch.sin(angles).float().to(x.dtype)[:, :, None, :].repeat(1, 1, 1, 2)
    rotated_half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)
    return x * cos + rotated_half * sin


class LatentAttention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        dim, h = c["dim"], c["n_heads"]
        qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
        if c["q_lora_rank"] == 0:
            self.wq = Linear(dim, h * qk)
        else:
            self.wq_a = Linear(dim, c["q_lora_rank"])
            self.q_norm = RMSNorm(c["q_lora_rank"], c["norm_eps"])
            self.wq_b = Linear(c["q_lora_rank"], h * qk)
        self.wkv_a = Linear(dim, c["kv_lora_rank"] + c["qk_rope_head_dim"])
        self.kv_norm = RMSNorm(c["kv_lora_rank"], c["norm_eps"])
        self.wkv_b = Linear(c["kv_lora_rank"], h * (c["qk_nope_head_dim"] + c["v_head_dim"]))
        self.wo = Linear(h * c["v_head_dim"], dim)
        # transformers: qk_head_dim^-1/2, times yarn_get_mscale(factor, mscale_all_dim)^2 under YaRN.
        yarn = c.get("yarn")
        self.scale = qk ** -0.5 * (rope_scaling.mscale(yarn["factor"], yarn["mscale_all_dim"]) ** 2 if yarn else 1.0)

    def forward(self, x, positions, freqs):
        c = self.c
        b, s, _ = x.shape
        nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        q = self.wq(x) if c["q_lora_rank"] == 0 else self.wq_b(self.q_norm(self.wq_a(x)))
        q = q.view(b, s, -1, nope + rope)
        q_pass, q_rot = torch.split(q, [nope, rope], dim=-1)
        compressed = self.wkv_a(x)
        kv, k_rot = torch.split(compressed, [c["kv_lora_rank"], rope], dim=-1)
        kv = self.wkv_b(self.kv_norm(kv)).view(b, s, -1, nope + vd)
        k_pass, v = torch.split(kv, [nope, vd], dim=-1)
        q_rot = rotate_interleaved_as_hf(q_rot, positions, freqs)
        k_rot = rotate_interleaved_as_hf(k_rot.view(b, s, 1, rope), positions, freqs)
        q = torch.cat([q_pass, q_rot], dim=-1)
        k = torch.cat([k_pass, k_rot.expand(b, s, k_pass.shape[2], rope)], dim=-1)
        out = ref.attention(q, k, v, self.scale, True, 0, None)
        return self.wo(out.reshape(b, s, -1))


class MoE(torch.nn.Module):
    """DeepseekV3MoE: the router in float64 here (float32 in HF), then a loop over experts."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.router = Router(c["dim"], c["num_experts"])
        self.experts = Experts(c["dim"], c["moe_hidden_dim"], c["num_experts"])
        self.shared_experts = FeedForward(c["dim"], c["moe_hidden_dim"] * c["num_shared_experts"])
        self.register_buffer("expert_bias", torch.zeros(c["num_experts"], dtype=torch.float64))

    def route(self, x):
        c = self.c
        logits = self.router.gate(x)
        scores = torch.sigmoid(logits) if c["score"] == "sigmoid" else torch.softmax(logits, dim=-1)
        choice = scores + self.expert_bias
        groups = c["num_expert_groups"]
        if groups > 1:
            e = c["num_experts"]
            group_scores = choice.view(-1, groups, e // groups).topk(2, dim=-1)[0].sum(dim=-1)
            kept = torch.topk(group_scores, k=c["num_limited_groups"], dim=-1)[1]
            mask = torch.zeros_like(group_scores).scatter_(1, kept, 1.0)
            mask = mask.unsqueeze(-1).expand(-1, groups, e // groups).reshape(-1, e)
            choice = choice.masked_fill(mask == 0, 0.0)
        selected = torch.topk(choice, k=c["top_k"], dim=-1)[1]
        weights = scores.gather(1, selected)
        if c["route_norm"]:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return selected, weights * c["route_scale"]

    def forward(self, x):
        b, s, d = x.shape
        flat = x.reshape(-1, d)
        selected, weights = self.route(flat)
        out = torch.zeros_like(flat)
        for e in range(self.c["num_experts"]):
            token, slot = torch.where(selected == e)
            if token.numel() == 0:
                continue
            out = out.index_add(0, token, self.experts.expert(e, flat[token]) * weights[token, slot, None])
        return (out + self.shared_experts(flat)).reshape(b, s, d)


class Block(torch.nn.Module):
    def __init__(self, c, dense):
        super().__init__()
        self.attention = LatentAttention(c)
        self.attention_norm = RMSNorm(c["dim"], c["norm_eps"])
        self.ffn_norm = RMSNorm(c["dim"], c["norm_eps"])
        if dense:
            self.feed_forward = FeedForward(c["dim"], c["dense_hidden_dim"])
        else:
            self.moe = MoE(c)

    def forward(self, x, positions, freqs):
        h = x + self.attention(self.attention_norm(x), positions, freqs)
        ffn = self.feed_forward if hasattr(self, "feed_forward") else self.moe
        return h + ffn(self.ffn_norm(h))


class MtpBlock(Block):
    """One multi-token prediction depth: the fusion, a block, the norm before the shared head."""

    def __init__(self, c, dense):
        super().__init__(c, dense)
        self.enorm = RMSNorm(c["dim"], c["norm_eps"])
        self.hnorm = RMSNorm(c["dim"], c["norm_eps"])
        self.eh_proj = Linear(2 * c["dim"], c["dim"])
        self.mtp_norm = RMSNorm(c["dim"], c["norm_eps"])

    def forward(self, embedding, previous, positions, freqs):
        fused = self.eh_proj(torch.cat([self.enorm(embedding), self.hnorm(previous)], dim=-1))
        return self.mtp_norm(super().forward(fused, positions, freqs))


class Decoder(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embeddings = torch.nn.Embedding(c["vocab_size"], c["dim"], dtype=torch.float64)
        self.layers = torch.nn.ModuleList(Block(c, i < c["n_dense_layers"]) for i in range(c["n_layers"]))
        # Each depth has the last layer's form (dense only if every layer is).
        last_dense = c["n_layers"] - 1 < c["n_dense_layers"]
        self.mtp_layers = torch.nn.ModuleList(MtpBlock(c, last_dense) for _ in range(c.get("num_mtp_layers", 0)))
        self.norm = RMSNorm(c["dim"], c["norm_eps"])
        self.output = Linear(c["dim"], c["vocab_size"])
        if c.get("yarn"):
            # YaRN's frequencies; mscale == mscale_all_dim makes the cos/sin factor 1 (a pure rotation).
            self.freqs = torch.tensor(rope_scaling.inverse_frequencies(c["qk_rope_head_dim"], c["rope_theta"],
                                                                       c["yarn"], c["max_seq_len"]),
                                      dtype=torch.float64)
        else:
            self.freqs = ref.rope_frequencies(c["qk_rope_head_dim"], c["rope_theta"])

    def trunk(self, ids):
        positions = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
        h = self.tok_embeddings(ids)
        for layer in self.layers:
            h = layer(h, positions, self.freqs)
        return h, positions

    def forward(self, ids):
        return self.output(self.norm(self.trunk(ids)[0]))

    def loss(self, ids, labels):
        h, positions = self.trunk(ids)
        logits = self.output(self.norm(h))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100)
        if len(self.mtp_layers) == 0:
            return loss
        seq = ids.shape[1]
        main_targets = (labels != -100).sum()
        depth_sums = []
        previous = h
        for depth, layer in enumerate(self.mtp_layers, 1):
            # Token t + depth where it exists; elsewhere token 0 and a zeroed previous state.
            tokens = torch.zeros_like(ids)
            tokens[:, :seq - depth] = ids[:, depth:]
            exists = torch.zeros(ids.shape[0], seq, 1, dtype=torch.float64)
            exists[:, :seq - depth] = 1.0
            previous = layer(self.tok_embeddings(tokens), previous * exists, positions, self.freqs)
            targets = torch.full_like(labels, -100)
            targets[:, :seq - depth] = labels[:, depth:]
            depth_logits = self.output(previous)
            depth_sums.append(torch.nn.functional.cross_entropy(depth_logits.reshape(-1, depth_logits.shape[-1]),
                                                                targets.reshape(-1), ignore_index=-100,
                                                                reduction="sum"))
        mtp = torch.stack(depth_sums).mean() / main_targets
        return loss + self.c.get("mtp_scale", 0.3) * mtp


# The tiny models of the C++ tests (tests/models/deepseek_v3_test.cpp builds
# the same through deepseek_v3::to_config): every distinctive feature on
# ("latent": low-rank query, sigmoid scores with a correction bias, group-limited
# top-k, normalised and scaled weights, a dense first layer, qk and v head
# dims that differ), and TorchTitan's debug-model choices ("direct": a direct
# query, softmax scores without groups or normalisation, two shared experts);
# "yarn" is "latent" with YaRN as TorchTitan's flavors set it.
TINY = {
    "latent": dict(dim=64, n_layers=3, n_dense_layers=1, n_heads=4, q_lora_rank=24, kv_lora_rank=32,
                   qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, dense_hidden_dim=96, moe_hidden_dim=32,
                   num_experts=8, num_shared_experts=1, top_k=3, score="sigmoid", num_expert_groups=4,
                   num_limited_groups=2, route_scale=2.5, route_norm=True, vocab_size=256, norm_eps=1e-6,
                   rope_theta=10000.0),
    "direct": dict(dim=64, n_layers=3, n_dense_layers=1, n_heads=4, q_lora_rank=0, kv_lora_rank=32,
                   qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, dense_hidden_dim=96, moe_hidden_dim=32,
                   num_experts=8, num_shared_experts=2, top_k=3, score="softmax", num_expert_groups=0,
                   num_limited_groups=0, route_scale=1.0, route_norm=False, vocab_size=256, norm_eps=1e-5,
                   rope_theta=10000.0),
}
# "latent" with two multi-token prediction depths (of the last layer's MoE form).
TINY["mtp"] = dict(TINY["latent"], num_mtp_layers=2, mtp_scale=0.3)
#The latent model with TorchTitan - style YaRN(a pure rotation, mscale squared in the softmax scale).
TINY["yarn"] = dict(TINY["latent"], max_seq_len=64,
                    yarn=dict(type="yarn", factor=4.0, original=16, beta_fast=32.0, beta_slow=1.0, mscale=0.7,
                              mscale_all_dim=0.7))
