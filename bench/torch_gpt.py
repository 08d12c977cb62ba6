#!/usr/bin/python3
"""The PyTorch side of seqgrad_bench's GPT benchmarks: a training step and sampling with a cache.

The model is the GPT of the parity fixtures (tests/fixtures/make_fixtures.py, class GPT): Pre-LN
blocks, learned positions, exact GELU, the output tied to the token embedding, no biases (nanoGPT's
train.py sets bias = False), GPT-2's initialisation; vocabulary 65 (Shakespeare's characters). By
default (--model expert) it runs as a PyTorch expert writes it, bench/torch_expert.py's ExpertGPT
with the twin's weights (F.layer_norm, one q/k/v product, an additive mask, zero_grad with
set_to_none); --model twin times the parity twin itself, written to match seqgrad's parameters.

  train_step/gpt/cpu    nanoGPT's CPU recipe: 4 layers, 4 heads, d_model 128, d_ff 512, context 64,
                        batch 12, dropout 0
  train_step/gpt/baby   nanoGPT's "baby GPT": 6 layers, 6 heads, d_model 384, d_ff 1536, context
                        256, batch 64, dropout 0.2
      One step: zero_grad, forward over batch windows of context + 1 random ids (the first context
      read, the last context scored), cross-entropy ignoring <pad>, backward, clip_grad_norm_ 1.0,
      AdamW (lr 1e-3, betas 0.9 and 0.99, eps 1e-8, weight decay 0.1 on parameters of rank >= 2
      only: matrices and embeddings). tokens_per_second = batch x context / seconds per step.
  generate/gpt/baby     the baby shape in eval mode: batch 1, a 1-token prompt, 256 new tokens
      sampled at temperature 0.8. Each step feeds one token: every layer appends its key and value
      to a cache of its own (preallocated for the context) and the token attends over the cache,
      so nothing is recomputed. tokens_per_second = 256 / seconds per sequence.

    /usr/bin/python3 bench/torch_gpt.py --benchmark train_step/gpt/cpu [--threads 2]
                                        [--setting default|threads|passive] [--min-time 3]
    /usr/bin/python3 bench/torch_gpt.py --self-check

prints one JSON object, as bench/torch_bench.py does: seconds per step (or per generated
sequence; the mean over the timed runs, after warm-up ones), tokens_per_second, the process's
peak resident memory (max_rss_mib), and the thread setting it ran in (bench/torch_settings.py;
bench/compare_gpt.py times all three). --self-check generates 64 tokens with the cache and checks
each step's logits against the whole sequence's forward pass, then exits 0 if they agree. Needs
python3-torch (Debian's build).
"""
import argparse
import json
import math
import os
import resource
import sys

import torch_settings

HERE = os.path.dirname(os.path.abspath(__file__))

# The shapes of the seqgrad side's GPT benchmarks: layers, heads, width, d_ff, context, batch,
# dropout; the vocabulary is 65 for both.
SHAPES = {
    "cpu": dict(layers=4, heads=4, width=128, d_ff=512, context=64, batch=12, dropout=0.0),
    "baby": dict(layers=6, heads=6, width=384, d_ff=1536, context=256, batch=64, dropout=0.2),
}
BENCHMARKS = ("train_step/gpt/cpu", "train_step/gpt/baby", "generate/gpt/baby")
VOCAB = 65
BIAS = False  # nanoGPT's train.py default
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-3, (0.9, 0.99), 1e-8, 0.1, 1.0
NEW_TOKENS, TEMPERATURE = 256, 0.8
FIRST_REAL_TOKEN = 4
SEED = 7


def gpt_config(s):
    return dict(model="gpt", vocab=VOCAB, context=s["context"], d_model=s["width"], n_heads=s["heads"],
                n_layers=s["layers"], d_ff=s["d_ff"], dropout=s["dropout"], bias=BIAS, positional="learned",
                activation="gelu", tie_output=True)


def adamw(torch, model):
    """AdamW with weight decay on matrices and embeddings alone, as nanoGPT's configure_optimizers."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=LR, betas=BETAS, eps=EPS)


class CachedSampler:
    """The GPT one token at a time: per layer a key and a value cache [1, heads, context, head_dim],
    filled up to the current position; the new token's query attends over positions 0..pos (all of
    them earlier or its own, so no mask is needed)."""

    def __init__(self, torch, model):
        self.torch, self.m = torch, model
        att = model.blocks[0].attention
        if att.rotary:
            raise ValueError("the cached sampler turns no rotary positions; use learned or sinusoidal")
        shape = (1, att.n_heads, model.context, att.head_dim)
        self.keys = [torch.zeros(shape) for _ in model.blocks]
        self.values = [torch.zeros(shape) for _ in model.blocks]
        self.position = 0

    def step(self, token):
        """Logits [1, vocab] of the token after `token` [1, 1], which sits at the next position."""
        torch, m, pos = self.torch, self.m, self.position
        x = m.embed(token, start=pos)  # [1, 1, d]
        for block, keys, values in zip(m.blocks, self.keys, self.values):
            att = block.attention
            h = block.attention_norm(x)
            q = att.wq(h).view(1, 1, att.n_heads, att.head_dim).transpose(1, 2)  # [1, H, 1, hd]
            keys[:, :, pos] = att.wk(h).view(1, att.n_heads, att.head_dim)
            values[:, :, pos] = att.wv(h).view(1, att.n_heads, att.head_dim)
            scores = torch.matmul(q, keys[:, :, :pos + 1].transpose(-2, -1)) / math.sqrt(att.head_dim)
            context = torch.matmul(torch.softmax(scores, dim=-1), values[:, :, :pos + 1])
            x = x + att.wo(context.transpose(1, 2).reshape(1, 1, att.dim))
            x = x + block.feed_forward(block.ffn_norm(x))
        self.position += 1
        return torch.matmul(m.final_norm(x[:, -1]), m.output_weight().t())


def generate(torch, model, prompt, new_tokens, generator, keep_logits=False):
    """prompt [1, 1] and new_tokens tokens sampled at TEMPERATURE after it; with keep_logits also
    each step's logits."""
    if hasattr(model, "blocks") and hasattr(model.blocks[0], "qkv"):
        import torch_expert
        sampler = torch_expert.ExpertSampler(model)
    else:
        sampler = CachedSampler(torch, model)
    tokens, logits_seen = [prompt], []
    token = prompt
    for _ in range(new_tokens):
        logits = sampler.step(token)
        if keep_logits:
            logits_seen.append(logits)
        token = torch.multinomial(torch.softmax(logits / TEMPERATURE, dim=-1), 1, generator=generator)
        tokens.append(token)
    return torch.cat(tokens, dim=1), logits_seen


def self_check(torch, model):
    """The cached sampler's logits at each of 64 steps against the whole sequence's forward pass."""
    with torch.inference_mode():
        tokens, logits = generate(torch, model, torch.tensor([[FIRST_REAL_TOKEN]]), 64,
                                  torch.Generator().manual_seed(SEED), keep_logits=True)
        full = model(tokens[:, :-1])[0]  # [64, vocab]
    diff = (torch.cat(logits, dim=0) - full).abs().max().item()
    ok = diff < 1e-4
    print(f"self-check: 64 sampled tokens, cached logits against the forward pass of the whole sequence: "
          f"max |difference| {diff:.2e}: {'OK' if ok else 'FAILED'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=BENCHMARKS, help="the benchmark to run")
    parser.add_argument("--threads", type=int, default=2, help="N of the `threads` and `passive` settings")
    parser.add_argument("--setting", choices=torch_settings.SETTINGS, default="passive",
                        help="PyTorch's thread setting (bench/torch_settings.py)")
    parser.add_argument("--min-time", type=float, default=3.0, help="seconds of timed runs (at least 3 runs)")
    parser.add_argument("--self-check", action="store_true",
                        help="check the cached sampler against the forward pass (the baby shape) and exit")
    parser.add_argument("--model", choices=("expert", "twin"), default="expert",
                        help="PyTorch as an expert writes it (bench/torch_expert.py), or the parity twin")
    args = parser.parse_args()
    if not args.self_check and args.benchmark is None:
        parser.error("--benchmark or --self-check is required")

    try:
        import torch
    except ImportError:
        sys.exit("torch_gpt.py: PyTorch is not installed for this interpreter (Debian: apt install python3-torch)")
    setting = torch_settings.apply(args.setting, args.threads)
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
    from make_fixtures import build_model, init_gpt, loss_fn

    kind, _, shape = "generate/gpt/baby".split("/") if args.self_check else args.benchmark.split("/")
    s = SHAPES[shape]
    torch.manual_seed(SEED)
    model = build_model(gpt_config(s))
    init_gpt(model, torch.Generator().manual_seed(SEED))
    if args.model == "expert":  # the same weights in the expert's layout
        import torch_expert
        expert = torch_expert.ExpertGPT(gpt_config(s))
        torch_expert.from_twin(expert, model)
        model = expert
    if args.self_check:
        model.eval()
        sys.exit(0 if self_check(torch, model) else 1)

    if kind == "train_step":
        model.train()
        optimizer = adamw(torch, model)
        windows = torch.randint(FIRST_REAL_TOKEN, VOCAB, (s["batch"], s["context"] + 1),
                                generator=torch.Generator().manual_seed(SEED))
        inputs, labels = windows[:, :-1], windows[:, 1:]

        def run():
            optimizer.zero_grad(set_to_none=args.model == "expert")
            loss = loss_fn(model(inputs), labels, 0.0)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()
            return loss.item()

        warm_up, tokens_per_run = 2, s["batch"] * s["context"]  # AdamW's state exists, the allocator is warm
    else:
        model.eval()
        generator = torch.Generator().manual_seed(SEED)
        prompt = torch.tensor([[FIRST_REAL_TOKEN]])

        def run():
            with torch.inference_mode():
                return generate(torch, model, prompt, NEW_TOKENS, generator)[0]

        warm_up, tokens_per_run = 1, NEW_TOKENS

    runs, seconds = torch_settings.time_runs(run, warm_up, args.min_time)
    print(json.dumps({
        "name": args.benchmark,
        "torch_version": torch.__version__,
        "model": args.model,
        **setting,
        "runs": runs,
        "seconds_per_step" if kind == "train_step" else "seconds_per_sequence": seconds,
        "tokens_per_second": tokens_per_run / seconds,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }))


if __name__ == "__main__":
    main()
