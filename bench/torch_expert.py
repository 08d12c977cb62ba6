#!/usr/bin/python3
"""PyTorch at its best in code: the benchmarks' GPT as a PyTorch expert writes it.

The parity twin of tests/fixtures/make_fixtures.py (class GPT) is written to match seqgrad's
parameters one for one: layer norm from mean, var and sqrt (about seven kernels and a dozen
autograd nodes each way), three products for q, k and v, a `mask == 0` and masked_fill in every
layer. ExpertGPT computes the same function the way nanoGPT's model.py does, with what PyTorch
1.13 offers (it has no fused attention for the CPU): F.layer_norm (one kernel; weight without bias
where the model has none), one fused q/k/v product, one additive causal mask made once, F.gelu,
the output tied to the embedding; and the benchmarks call zero_grad(set_to_none=True). At the CPU
recipe's shape it trained 15.4-15.7k tokens/s against the twin's 11.7-13.2k (one core's PyTorch
with OpenBLAS on two, AMD Zen 4). Its dropouts are the twin's (and seqgrad's): the
embedding's, the attention weights', the feed-forward's hidden layer and the two residual
branches'.

    /usr/bin/python3 bench/torch_expert.py --check   # ExpertGPT against the twin, the same weights

--check builds both at the bench shapes without dropout, copies the twin's weights into the expert
(torch_expert.from_twin) and compares the logits, the loss and every gradient, then exits 0 if
they agree to float32 rounding (printed): the timings compare the same function.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class ExpertBlock(nn.Module):
    def __init__(self, d, heads, d_ff, dropout, bias, eps):
        super().__init__()
        self.heads, self.head_dim, self.eps = heads, d // heads, eps
        self.norm1_weight = nn.Parameter(torch.ones(d))
        self.norm1_bias = nn.Parameter(torch.zeros(d)) if bias else None
        self.qkv = nn.Linear(d, 3 * d, bias=bias)
        self.out = nn.Linear(d, d, bias=bias)
        self.norm2_weight = nn.Parameter(torch.ones(d))
        self.norm2_bias = nn.Parameter(torch.zeros(d)) if bias else None
        self.fc = nn.Linear(d, d_ff, bias=bias)
        self.proj = nn.Linear(d_ff, d, bias=bias)
        self.dropout = dropout

    def forward(self, x, additive_mask):
        b, t, d = x.shape
        h = F.layer_norm(x, (d,), self.norm1_weight, self.norm1_bias, self.eps)
        q, k, v = self.qkv(h).split(d, dim=2)
        q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        # One additive mask, made once; on this CPU build faster than baddbmm (whose expanded mask
        # is copied) or masked_fill, by a few percent in a few runs.
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim)) + additive_mask[:t, :t]
        weights = F.dropout(torch.softmax(scores, dim=-1), self.dropout, self.training)
        context = (weights @ v).transpose(1, 2).reshape(b, t, d)
        x = x + F.dropout(self.out(context), self.dropout, self.training)
        h = F.layer_norm(x, (d,), self.norm2_weight, self.norm2_bias, self.eps)
        h = F.dropout(F.gelu(self.fc(h)), self.dropout, self.training)
        return x + F.dropout(self.proj(h), self.dropout, self.training)


class ExpertGPT(nn.Module):
    """forward(ids [B, T]) -> logits [B, T, vocab]: learned positions, Pre-LN blocks, a final norm,
    the output tied to the token embedding (GPT-2's layout, the twin's with "learned" positions)."""

    def __init__(self, cfg, eps=1e-5):
        super().__init__()
        d, bias, dropout = cfg["d_model"], cfg["bias"], cfg.get("dropout", 0.0)
        self.context, self.eps, self.dropout = cfg["context"], eps, dropout
        self.token_embedding = nn.Embedding(cfg["vocab"], d)
        self.position_embedding = nn.Embedding(cfg["context"], d)
        self.blocks = nn.ModuleList([ExpertBlock(d, cfg["n_heads"], cfg["d_ff"], dropout, bias, eps)
                                     for _ in range(cfg["n_layers"])])
        self.final_weight = nn.Parameter(torch.ones(d))
        self.final_bias = nn.Parameter(torch.zeros(d)) if bias else None
        mask = torch.full((cfg["context"], cfg["context"]), float("-inf")).triu(1)  # 0 on and below
        self.register_buffer("additive_mask", mask, persistent=False)

    def forward(self, ids):
        t = ids.size(1)
        x = self.token_embedding(ids) + self.position_embedding.weight[:t]
        x = F.dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x, self.additive_mask)
        x = F.layer_norm(x, (x.size(-1),), self.final_weight, self.final_bias, self.eps)
        return x @ self.token_embedding.weight.t()


class ExpertSampler:
    """ExpertGPT one token at a time: per layer a key and a value cache [1, heads, context, head_dim],
    the new token's q, k and v from one product, its query attending over positions 0..pos (earlier
    or its own: no mask)."""

    def __init__(self, model):
        self.m = model
        block = model.blocks[0]
        shape = (1, block.heads, model.context, block.head_dim)
        self.keys = [torch.zeros(shape) for _ in model.blocks]
        self.values = [torch.zeros(shape) for _ in model.blocks]
        self.position = 0

    def step(self, token):
        """Logits [1, vocab] of the token after `token` [1, 1], which sits at the next position."""
        m, pos = self.m, self.position
        x = m.token_embedding(token) + m.position_embedding.weight[pos]  # [1, 1, d]
        d = x.size(-1)
        for block, keys, values in zip(m.blocks, self.keys, self.values):
            h = F.layer_norm(x, (d,), block.norm1_weight, block.norm1_bias, block.eps)
            q, k, v = block.qkv(h).view(3, block.heads, block.head_dim)
            keys[0, :, pos] = k
            values[0, :, pos] = v
            scores = (keys[0, :, :pos + 1] @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(block.head_dim)
            context = (torch.softmax(scores, dim=-1).unsqueeze(1) @ values[0, :, :pos + 1]).reshape(1, 1, d)
            x = x + block.out(context)
            h = F.layer_norm(x, (d,), block.norm2_weight, block.norm2_bias, block.eps)
            x = x + block.proj(F.gelu(block.fc(h)))
        self.position += 1
        x = F.layer_norm(x[:, -1], (d,), m.final_weight, m.final_bias, m.eps)
        return x @ m.token_embedding.weight.t()


def from_twin(expert, twin):
    """Copies the parity twin's weights into `expert` (q, k and v stacked into one product)."""
    with torch.no_grad():
        expert.token_embedding.weight.copy_(twin.token_embedding.weight)
        expert.position_embedding.weight.copy_(twin.position_embedding.weight)
        for e, t in zip(expert.blocks, twin.blocks):
            a = t.attention
            e.qkv.weight.copy_(torch.cat([a.wq.weight, a.wk.weight, a.wv.weight]))
            if e.qkv.bias is not None:
                e.qkv.bias.copy_(torch.cat([a.wq.bias, a.wk.bias, a.wv.bias]))
            pairs = [(e.out, a.wo), (e.fc, t.feed_forward.w1), (e.proj, t.feed_forward.w2)]
            for mine, theirs in pairs:
                mine.weight.copy_(theirs.weight)
                if mine.bias is not None:
                    mine.bias.copy_(theirs.bias)
            for weight, bias, norm in ((e.norm1_weight, e.norm1_bias, t.attention_norm),
                                       (e.norm2_weight, e.norm2_bias, t.ffn_norm)):
                weight.copy_(norm.gamma)
                if bias is not None:
                    bias.copy_(norm.beta)
        expert.final_weight.copy_(twin.final_norm.gamma)
        if expert.final_bias is not None:
            expert.final_bias.copy_(twin.final_norm.beta)


def twin_gradient_of(expert_name, twin_grads):
    """The twin's gradient for one of the expert's parameters (q, k and v stacked)."""
    mapping = {"token_embedding.weight": "token_embedding.weight",
               "position_embedding.weight": "position_embedding.weight",
               "final_weight": "final_norm.gamma", "final_bias": "final_norm.beta"}
    if expert_name in mapping:
        return twin_grads[mapping[expert_name]]
    _, i, rest = expert_name.split(".", 2)
    p = f"blocks.{i}."
    if rest.startswith("qkv."):
        leaf = rest.split(".")[1]
        return torch.cat([twin_grads[p + f"attention.w{n}.{leaf}"] for n in "qkv"])
    simple = {"out": "attention.wo", "fc": "feed_forward.w1", "proj": "feed_forward.w2"}
    head, leaf = rest.split(".")[0], rest.split(".")[-1]
    if head in simple:
        return twin_grads[p + simple[head] + "." + leaf]
    norms = {"norm1_weight": "attention_norm.gamma", "norm1_bias": "attention_norm.beta",
             "norm2_weight": "ffn_norm.gamma", "norm2_bias": "ffn_norm.beta"}
    return twin_grads[p + norms[rest]]


def check(shapes, gpt_config, vocab, first_real_token, seed):
    """ExpertGPT against the twin at each shape (dropout 0): the largest differences of the logits,
    the loss and every gradient, relative to each tensor's largest value. True if all are below 1e-5."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
    from make_fixtures import build_model, init_gpt, loss_fn
    ok = True
    for name, s in shapes.items():
        cfg = dict(gpt_config(s), dropout=0.0)
        torch.manual_seed(seed)
        twin = build_model(cfg)
        init_gpt(twin, torch.Generator().manual_seed(seed))
        with torch.no_grad():  # norms and biases away from 1 and 0, so that a wrong one shows
            gen = torch.Generator().manual_seed(seed + 1)
            for n, p in twin.named_parameters():
                if n.endswith(("gamma", "beta", "bias")):
                    p.add_(torch.rand(p.shape, generator=gen) * 0.2 - 0.1)
        expert = ExpertGPT(cfg)
        from_twin(expert, twin)
        windows = torch.randint(first_real_token, vocab, (2, s["context"] + 1), generator=gen)
        results = []
        for model in (twin, expert):
            model.train()
            logits = model(windows[:, :-1])
            loss = loss_fn(logits, windows[:, 1:], 0.0)
            loss.backward()
            results.append((logits.detach(), loss.detach(),
                            {n: p.grad for n, p in model.named_parameters()}))
        (tl, tloss, tg), (el, eloss, eg) = results
        worst = [("logits", ((tl - el).abs().max() / tl.abs().max()).item()),
                 ("loss", (abs(tloss - eloss) / abs(tloss)).item())]
        for n, g in eg.items():
            want = twin_gradient_of(n, tg)
            worst.append((n, ((want - g).abs().max() / want.abs().max().clamp_min(1e-30)).item()))
        largest = max(worst, key=lambda w: w[1])
        print(f"{name}: {len(worst) - 2} gradients, logits and loss; largest relative difference "
              f"{largest[1]:.2e} ({largest[0]})")
        ok = ok and largest[1] < 1e-5
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare ExpertGPT with the twin and exit")
    args = parser.parse_args()
    if not args.check:
        parser.error("--check is the only action (bench/torch_gpt.py times the models)")
    import torch_gpt
    torch.set_num_threads(1)
    ok = check(torch_gpt.SHAPES, torch_gpt.gpt_config, torch_gpt.VOCAB, torch_gpt.FIRST_REAL_TOKEN, torch_gpt.SEED)
    print("ExpertGPT computes the twin's function" if ok else "ExpertGPT DIFFERS from the twin")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
