#!/usr/bin/env python3
"""The PyTorch side of seqgrad_bench's decode/transformer_base benchmarks (bench/decode_bench.cpp).

The workload, as CTranslate2 measures CPU decoding: a Transformer-base (d_model 512, 8 heads, 6 + 6
layers, d_ff 2048, 32,000 symbols a side, Post-LN, ReLU, no dropout), 32 source sentences of 25
tokens decoded together with beam 4 and GNMT's length penalty 0.6 (score = log-probability /
((5 + length) / 6) ** 0.6, length counting </s>), for exactly 30 steps (</s> barred before the 30th
token), and again ending hypotheses at </s> (at most 30 steps); then one sentence, greedy, 30
steps, for the latency. Target tokens are the best hypothesis's tokens (</s> excluded), summed
over the sentences, per second.

The model is tests/fixtures/make_fixtures.py's Transformer (the parity model, docs/parity.md), with
the weights and sources of transformer_base.safetensors beside seqgrad_bench (build/bench/; made
by running seqgrad_bench's decode benchmark if it is missing), so both sides decode the same
model. Two ways to decode it:

  cached     the encoder once; each layer's cross-attention keys and values projected once; the
             self-attention keys and values of the tokens so far kept per layer and appended at
             each step, so only the newest position runs through the decoder; after each step the
             caches follow the beams' parents (index_select): how OpenNMT-py decodes.
  recompute  the whole target prefix through the decoder at every step (the parity model's own
             decode()), as code without a cache does.

The beam search is seqgrad's: per source, the 2k best continuations of its live beams; a </s>
among the first k ends a hypothesis, the best k others go on; a source is done when k hypotheses
have ended; at the end the live beams compete too.

  /usr/bin/python3 bench/torch_decode.py --threads 2     (from the repository root, after a build)

The last line printed is `tgt_tokens/s=<number>`: the cached, fixed-length beam-4 figure.
"""
import argparse
import importlib.util
import json
import math
import os
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SENTENCES, STEPS, BEAM, ALPHA = 32, 30, 4, 0.6
PAD, SOS, EOS = 0, 1, 2
CONFIG = {"src_vocab": 32000, "tgt_vocab": 32000, "d_model": 512, "n_heads": 8, "n_layers": 6,
          "d_ff": 2048, "max_seq_len": 512, "norm": "post", "activation": "relu", "dropout": 0.0}


def load_parity_module():
    spec = importlib.util.spec_from_file_location("make_fixtures",
                                                  os.path.join(ROOT, "tests", "fixtures", "make_fixtures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "I64": np.int64}[entry["dtype"]]
        begin, end = entry["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[begin:end], dtype=dtype).reshape(entry["shape"]).copy())
    return out


def find_or_make_weights(path):
    if not os.path.exists(path):
        bench = os.path.join(ROOT, "build", "bench", "seqgrad_bench")
        if not os.path.exists(bench):
            sys.exit(f"torch_decode: {path} is missing and so is {bench}: build seqgrad first")
        print(f"making {path} with seqgrad_bench", file=sys.stderr)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        subprocess.run([bench, "--threads=1", "--benchmark_filter=decode/transformer_base/beam1_latency",
                        "--benchmark_min_time=0.001"], check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, SEQGRAD_DECODE_WEIGHTS=path))
    tensors = read_safetensors(path)
    src = tensors.pop("bench.src")
    return tensors, src


def length_penalty(length):
    return ((5.0 + length) / 6.0) ** ALPHA


class CachedDecoder:
    """Incremental decoding of the parity Transformer with key/value caches."""

    def __init__(self, model, src):
        self.m = model
        self.src_mask = (src != PAD).unsqueeze(1).unsqueeze(2)  # [B,1,1,S]
        memory = model.encode(src, self.src_mask)
        self.cross = []
        for layer in model.decoder_layers:
            att = layer.cross_attention
            self.cross.append((self.heads(att, att.wk(memory)), self.heads(att, att.wv(memory))))
        self.self_kv = [None] * len(model.decoder_layers)
        self.position = 0

    @staticmethod
    def heads(att, x):
        b = x.size(0)
        return x.view(b, -1, att.n_heads, att.head_dim).transpose(1, 2)  # [B,H,T,hd]

    @staticmethod
    def attend(att, q, k, v, mask):
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(att.head_dim)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        b = q.size(0)
        return att.wo(context.transpose(1, 2).reshape(b, -1, att.dim))

    def expand(self, rows):
        self.src_mask = self.src_mask.index_select(0, rows)
        self.cross = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.cross]

    def reorder(self, rows):
        self.self_kv = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.self_kv]

    def step(self, tokens):  # tokens [N] -> log-probs [N, V]
        m = self.m
        position = m.pos_encoder.pe[:, self.position:self.position + 1]
        x = m.tgt_embedding(tokens.unsqueeze(1)) * math.sqrt(m.dim) + position
        for i, layer in enumerate(m.decoder_layers):
            sa = layer.self_attention
            k, v = self.heads(sa, sa.wk(x)), self.heads(sa, sa.wv(x))
            if self.self_kv[i] is not None:
                k, v = torch.cat([self.self_kv[i][0], k], 2), torch.cat([self.self_kv[i][1], v], 2)
            self.self_kv[i] = (k, v)
            x = layer.self_attn_norm(x + self.attend(sa, self.heads(sa, sa.wq(x)), k, v, None))
            ca = layer.cross_attention
            x = layer.cross_attn_norm(x + self.attend(ca, self.heads(ca, ca.wq(x)), *self.cross[i], self.src_mask))
            x = layer.ffn_norm(x + layer.feed_forward(x))
        self.position += 1
        return F.log_softmax(m.output(x[:, 0]), dim=-1)


class RecomputeDecoder:
    """The whole prefix through the parity model's decode() at every step."""

    def __init__(self, model, src):
        self.m = model
        self.src_mask = (src != PAD).unsqueeze(1).unsqueeze(2)
        self.memory = model.encode(src, self.src_mask)
        self.prefix = None

    def expand(self, rows):
        self.src_mask = self.src_mask.index_select(0, rows)
        self.memory = self.memory.index_select(0, rows)

    def reorder(self, rows):
        self.prefix = self.prefix.index_select(0, rows)

    def step(self, tokens):
        column = tokens.unsqueeze(1)
        self.prefix = column if self.prefix is None else torch.cat([self.prefix, column], 1)
        t = self.prefix.size(1)
        tgt_mask = torch.tril(torch.ones((t, t), dtype=torch.bool)).unsqueeze(0).unsqueeze(0)
        x = self.m.decode(self.prefix, self.memory, self.src_mask, tgt_mask)
        return F.log_softmax(self.m.output(x[:, -1]), dim=-1)


def beam_search(decoder, batch, k, fixed):
    """Returns the best hypothesis (token list) of each source."""
    rows = torch.arange(batch).repeat_interleave(k)
    decoder.expand(rows)
    beams = [[([], 0.0, j == 0) for j in range(k)] for _ in range(batch)]  # (tokens, log_prob, alive)
    finished = [[] for _ in range(batch)]
    done = [False] * batch
    tokens = torch.full((batch * k,), SOS, dtype=torch.long)
    for t in range(STEPS):
        lp = decoder.step(tokens)
        if fixed and t + 1 < STEPS:
            lp[:, EOS] = -math.inf
        alive = torch.tensor([b[2] for row in beams for b in row])
        totals = torch.tensor([b[1] for row in beams for b in row]).unsqueeze(1) + lp
        totals[~alive] = -math.inf
        best, codes = totals.view(batch, -1).topk(2 * k, dim=1)  # ties: topk's order
        best, codes = best.tolist(), codes.tolist()
        parents = list(range(batch * k))
        next_tokens = [EOS] * (batch * k)
        for b in range(batch):
            if done[b]:
                continue
            new, filled = [], 0
            for c in range(2 * k):
                if filled == k or best[b][c] == -math.inf:
                    break
                j, token = divmod(codes[b][c], lp.size(1))
                parent = beams[b][j]
                if token == EOS:
                    if c < k:
                        finished[b].append((parent[0], best[b][c] / length_penalty(len(parent[0]) + 1)))
                    continue
                new.append((parent[0] + [token], best[b][c], True))
                parents[b * k + filled] = b * k + j
                next_tokens[b * k + filled] = token
                filled += 1
            new += [([], 0.0, False)] * (k - len(new))
            beams[b] = new
            if len(finished[b]) >= k or filled == 0:
                done[b] = True
        if all(done):
            break
        decoder.reorder(torch.tensor(parents))
        tokens = torch.tensor(next_tokens)
    out = []
    for b in range(batch):
        ended = list(finished[b])
        if not done[b]:
            ended += [(toks, lp_ / length_penalty(len(toks))) for toks, lp_, alive_ in beams[b] if alive_]
        out.append(max(ended, key=lambda h: h[1])[0] if ended else [])
    return out


def greedy(decoder, steps):
    tokens = torch.full((1,), SOS, dtype=torch.long)
    out = []
    decoder.expand(torch.zeros(1, dtype=torch.long))
    for t in range(steps):
        lp = decoder.step(tokens)
        if t + 1 < steps:
            lp[:, EOS] = -math.inf
        tokens = lp.argmax(dim=1)
        out.append(int(tokens[0]))
    return out


def timed(fn, repeats):
    fn()  # warm-up
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--weights", default=os.path.join(ROOT, "build", "bench", "transformer_base.safetensors"))
    parser.add_argument("--only", choices=["cached-fixed"], help="run this variant alone")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    fixtures = load_parity_module()
    model = fixtures.Transformer(CONFIG)
    tensors, src = find_or_make_weights(args.weights)
    model.load_state_dict(tensors, strict=True)
    model.eval()
    print(f"torch {torch.__version__}, {args.threads} thread(s), BLAS: "
          f"{'MKL' if torch.backends.mkl.is_available() else 'not MKL'}; {SENTENCES} sentences of {src.size(1)} tokens")
    variants = [("cached", True)] if args.only else [("cached", True), ("cached", False), ("recompute", True),
                                                     ("recompute", False)]
    figures = {}
    with torch.inference_mode():
        for kind, fixed in variants:
            make = CachedDecoder if kind == "cached" else RecomputeDecoder
            seconds, best = timed(lambda: beam_search(make(model, src), SENTENCES, BEAM, fixed), args.repeats)
            tokens = sum(len(h) for h in best)
            figures[(kind, fixed)] = tokens / seconds
            print(f"{kind} {'fixed' if fixed else 'eos'} beam{BEAM}: {tokens} target tokens in {seconds:.3f} s: "
                  f"{tokens / seconds:.1f} tokens/s")
        if not args.only:
            seconds, _ = timed(lambda: greedy(CachedDecoder(model, src[:1]), STEPS), args.repeats)
            print(f"cached beam1 latency: {1000 * seconds:.1f} ms for one sentence of {STEPS} tokens")
    print(f"tgt_tokens/s={figures[('cached', True)]:.1f}")


if __name__ == "__main__":
    main()
