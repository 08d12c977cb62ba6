#!/usr/bin/python3
"""The PyTorch side of seqgrad_bench's decode/transformer_base benchmarks (bench/decode_bench.cpp).

Workload (as CTranslate2 measures CPU decoding)
    Model: Transformer-base, Post-LN, ReLU, no dropout (eval): d_model 512, 8 heads, 6 encoder and
    6 decoder layers, d_ff 2048, 32,000 symbols on each side (separate embedding tables),
    embeddings times sqrt(d_model) plus the sinusoidal positional encoding, LayerNorm with biased
    variance and eps 1e-6, output projection `output`. Special ids: 0 <pad>, 1 <s>, 2 </s>, 3 <unk>.
    Source keys that are <pad> are masked with -1e9 before the softmax; decoder self-attention is
    causal. It is the parity model of tests/fixtures/make_fixtures.py (class Transformer, imported
    from that file), parameter names as docs/parity.md.

    Weights and sources: build/bench/transformer_base.safetensors (--weights), shared with
    seqgrad_bench so both sides decode the same model: every parameter (F32, parity names) and
    `bench.src` (I64 [32, 25]: 32 source sentences of 25 ids in [4, 32000)). Whichever side runs
    first writes it (see make_weights() for this side's initialisation and write_safetensors()
    for the layout, which is seqgrad's own).

    Decoding: all 32 sentences together, beam 4, GNMT length penalty 0.6:
    score = sum of log-probabilities / ((5 + length) / 6) ** 0.6, length counting </s> if the
    hypothesis ended with it. Two variants:
      fixed  exactly 30 steps: </s> is barred (log-probability -inf) before the 30th token, so
             every hypothesis runs 30 steps (random weights rarely end a sentence anyway);
      eos    at most 30 steps, hypotheses end at </s> (beam_search() documents when a sentence
             is done).
    Latency: the first sentence alone, greedy (beam 1), fixed 30 steps, cached, in milliseconds.

Two implementations, both float32 under torch.inference_mode():
  cached     as OpenNMT-py decodes: the encoder once; each decoder layer's cross-attention keys
             and values projected once from the encoder output (expanded to sentences x beam
             rows); the self-attention keys and values of the tokens so far kept per layer and
             appended at each step, so only the newest position runs through the decoder; after
             each step the caches follow the beams' parents (index_select).
  recompute  as code without a cache does: torch.nn.Transformer(d_model=512, nhead=8, 6 + 6
             layers, dim_feedforward=2048, dropout=0.0, batch_first=True) with the same
             embeddings, positional encoding and output projection; the encoder once, then the
             whole target prefix through nn.Transformer's decoder at every step
             (generate_square_subsequent_mask), the last position projected. By default its layers
             hold the same weights as the parity model (in_proj = [wq; wk; wv], eps 1e-6, and
             without the final LayerNorms nn.Transformer adds, which Post-LN does not have), so
             both implementations compute the same function and decode the same hypotheses;
             --recompute-weights own gives it nn.Transformer's own initialisation (seed 1234)
             and final norms instead.
Both use the same beam search (beam_search()), the same as seqgrad's (models/decoding.cpp).

Counting: target tokens = the tokens of each sentence's best hypothesis, </s> excluded, summed
over the 32 sentences (960 when fixed, unless a best hypothesis ends with </s> at step 30);
tokens per second = that / the median wall time of one decode (encoder included) over --repeats
timed runs after one warm-up run.

Usage, from the repository root (Debian's /usr/bin/python3 has torch):
    /usr/bin/python3 bench/torch_decode.py --threads 2
    /usr/bin/python3 bench/torch_decode.py --threads 1 --setting default --only cached-fixed
    /usr/bin/python3 bench/torch_decode.py --self-check
The last line printed is `tgt_tokens/s=<number>`: the cached, fixed-length, beam-4 figure; the
second, `setting=<JSON>`, what the thread setting became (torch_settings.describe()).

Threads: --setting is one of the three of bench/torch_settings.py, which bench/compare_decode.py
times in turn: `default` (PyTorch as it comes: one OpenMP thread here, OpenBLAS on every core),
`threads` (torch.set_num_threads(N), OpenBLAS at N threads, so that `--threads 1` uses one core)
and `passive` (the same with OMP_WAIT_POLICY=PASSIVE before torch loads, so that PyTorch's idle
OpenMP threads sleep instead of spinning on the cores OpenBLAS's threads need). Debian's PyTorch
does its matrix products with OpenBLAS (pthreads), whose own thread count does not follow
torch.set_num_threads. The first line printed (starting with #) says what was used, and which
kernels OpenBLAS chose (OPENBLAS_CORETYPE overrides its choice).
"""
import argparse
import importlib.util
import json
import math
import os
import struct
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_settings

# nn.TransformerEncoder's inference fast path packs the batch as a nested tensor and says so.
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors is in prototype stage")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_WEIGHTS = os.path.join("build", "bench", "transformer_base.safetensors")

SENTENCES, SOURCE_LENGTH, STEPS, BEAM, ALPHA = 32, 25, 30, 4, 0.6
PAD, SOS, EOS, UNK = 0, 1, 2, 3
FIRST_REAL_TOKEN = 4
SEED = 1234
CONFIG = {"model": "transformer", "src_vocab": 32000, "tgt_vocab": 32000, "d_model": 512, "n_heads": 8,
          "n_layers": 6, "d_ff": 2048, "max_seq_len": 512, "norm": "post", "activation": "relu", "dropout": 0.0}
SRC_NAME = "bench.src"


def fail(message):
    print(f"torch_decode.py: {message}", file=sys.stderr)
    sys.exit(1)


def load_parity_module():
    """tests/fixtures/make_fixtures.py by path: importing it only defines classes and constants."""
    path = os.path.join(ROOT, "tests", "fixtures", "make_fixtures.py")
    spec = importlib.util.spec_from_file_location("seqgrad_make_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- safetensors, by hand -----------------------------------------------------------------------

DTYPES = {"F32": (np.dtype("<f4"), torch.float32), "I64": (np.dtype("<i8"), torch.int64)}
DTYPE_NAMES = {torch.float32: "F32", torch.int64: "I64"}


def read_header(f, path):
    """(header, file size, header length) of a safetensors file open at its start."""
    size = os.fstat(f.fileno()).st_size
    if size < 8:
        fail(f"{path}: {size} bytes is too short for a safetensors file")
    (n,) = struct.unpack("<Q", f.read(8))
    if n > size - 8:
        fail(f"{path}: header length {n} exceeds the file ({size} bytes): not a safetensors file")
    try:
        header = json.loads(f.read(n).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{path}: the header is not JSON ({e}): not a safetensors file")
    if not isinstance(header, dict):
        fail(f"{path}: the header is not a JSON object")
    return header, size, n


def parameter_problem(path, tensors, expected, also=()):
    """Why the {name: tensor} of `path` are not exactly the parameters of the state dict `expected`
    (plus the names in `also`), each float32 of its parameter's shape; None if they are."""
    def listed(names):
        return f"{names[:8]}{'...' if len(names) > 8 else ''}"
    missing = [n for n in list(expected) + list(also) if tensors.get(n) is None]
    unexpected = [n for n in tensors if n not in expected and n not in also]
    if missing or unexpected:
        return f"{path}: missing tensors {listed(missing)}; unexpected tensors {listed(unexpected)}"
    for name, p in expected.items():
        t = tensors[name]
        if t.dtype != torch.float32 or t.shape != p.shape:
            dtype = DTYPE_NAMES.get(t.dtype, t.dtype)
            return f"{path}: {name} is {dtype} {list(t.shape)}, expected F32 {list(p.shape)}"
    return None


def read_safetensors(path):
    """{name: tensor} of a safetensors file; every entry checked against the file's size."""
    with open(path, "rb") as f:
        header, size, n = read_header(f, path)
        data = bytearray(size - 8 - n)
        if f.readinto(data) != len(data):
            fail(f"{path}: short read")
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or entry.get("dtype") not in DTYPES:
            fail(f"{path}: tensor {name!r}: dtype must be one of {sorted(DTYPES)}, got {entry!r:.200}")
        np_dtype, _ = DTYPES[entry["dtype"]]
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            fail(f"{path}: tensor {name!r}: bad shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            fail(f"{path}: tensor {name!r}: bad data_offsets {offsets!r}")
        begin, end = offsets
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= begin <= end <= len(data)) or end - begin != count * np_dtype.itemsize:
            fail(f"{path}: tensor {name!r}: data_offsets {offsets} do not hold {entry['dtype']} {shape} "
                 f"within {len(data)} bytes of data")
        array = np.frombuffer(data, dtype=np_dtype, count=count, offset=begin).reshape(shape)
        out[name] = torch.from_numpy(array)  # shares `data`, which stays alive with the tensors
    return out


def write_safetensors(path, tensors):
    """Writes {name: tensor} in the given order, atomically (a temporary file, then a rename).

    Layout (the same as seqgrad's SafetensorsFile::save): 8-byte little-endian header length N;
    N bytes of compact JSON, {"name":{"dtype":"F32","shape":[...],"data_offsets":[begin,end]},...}
    with no spaces, tensors in order and their data back to back from offset 0, no __metadata__,
    then spaces up to a multiple of 8 (so the data starts 8-aligned); then the little-endian data.
    """
    assert sys.byteorder == "little", "safetensors data is little-endian"
    entries, offset = {}, 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        entries[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                         "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    header += b" " * ((8 - len(header) % 8) % 8)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(header)))
            f.write(header)
            for t in tensors.values():
                f.write(memoryview(t.detach().contiguous().numpy()).cast("B"))  # native = little-endian
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def make_weights(model):
    """This side's weights and sources when the file is missing: one torch.Generator seeded 1234,
    drawn in state_dict order (= the order of the file), then the sources:
      src_embedding.weight, tgt_embedding.weight   normal(0, d_model ** -0.5): O(1) after the
                                                   sqrt(d_model) scale
      other 2-D `.weight` (Linear, [out, in])      uniform(-1/sqrt(in), 1/sqrt(in))
      `.bias` 0, `.gamma` 1, `.beta` 0             (no draws)
      bench.src [32, 25]                           torch.randint(4, 32000): uniform in [4, 32000)
    """
    gen = torch.Generator().manual_seed(SEED)
    d = CONFIG["d_model"]
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if name in ("src_embedding.weight", "tgt_embedding.weight"):
                p.normal_(0.0, d ** -0.5, generator=gen)
            elif name.endswith(".gamma"):
                p.fill_(1.0)
            elif name.endswith(".beta") or name.endswith(".bias"):
                p.zero_()
            elif name.endswith(".weight") and p.dim() == 2:
                bound = 1.0 / math.sqrt(p.size(1))
                p.uniform_(-bound, bound, generator=gen)
            else:
                raise AssertionError(f"no initialisation rule for {name}")
    src = torch.randint(FIRST_REAL_TOKEN, CONFIG["src_vocab"], (SENTENCES, SOURCE_LENGTH), generator=gen)
    return src


def load_or_make_weights(model, path):
    """Loads the shared file into `model` (every parameter, exact shapes, nothing else) and returns
    the sources; writes the file first if there is none."""
    if not os.path.exists(path):
        print(f"torch_decode.py: {path} does not exist: writing it (seed {SEED})", file=sys.stderr)
        src = make_weights(model)
        write_safetensors(path, {**model.state_dict(), SRC_NAME: src})
    tensors = read_safetensors(path)
    expected = model.state_dict()
    problem = parameter_problem(path, tensors, expected, also=[SRC_NAME])
    if problem:
        fail(problem)
    src = tensors[SRC_NAME]
    if src.dtype != torch.int64 or list(src.shape) != [SENTENCES, SOURCE_LENGTH]:
        fail(f"{path}: {SRC_NAME} is {DTYPE_NAMES.get(src.dtype, src.dtype)} {list(src.shape)}, "
             f"expected I64 {[SENTENCES, SOURCE_LENGTH]}")
    if int(src.min()) < FIRST_REAL_TOKEN or int(src.max()) >= CONFIG["src_vocab"]:
        fail(f"{path}: {SRC_NAME} ids must be in [{FIRST_REAL_TOKEN}, {CONFIG['src_vocab']}), "
             f"got [{int(src.min())}, {int(src.max())}]")
    model.load_state_dict({n: tensors[n] for n in expected}, strict=True)
    return src.clone()


# ---- the two decoders -----------------------------------------------------------------------------
# Interface: expand(rows) once (row r of the decoder = source rows[r]), then step(tokens [N]) ->
# log-probabilities [N, V] of the next token, and reorder(parents [N]) between steps.

class CachedDecoder:
    """The parity Transformer decoding one position per step with key/value caches."""

    def __init__(self, model, src):
        self.m = model
        self.src_mask = (src != PAD).unsqueeze(1).unsqueeze(2)  # [B,1,1,S]
        memory = model.encode(src, self.src_mask)
        self.cross = []  # per layer: cross-attention K, V [B,H,S,hd], projected once
        for layer in model.decoder_layers:
            att = layer.cross_attention
            self.cross.append((self.heads(att, att.wk(memory)), self.heads(att, att.wv(memory))))
        self.self_kv = [None] * len(model.decoder_layers)  # per layer: K, V [N,H,t,hd]
        self.position = 0

    @staticmethod
    def heads(att, x):  # [N,T,d] -> [N,H,T,hd]
        return x.view(x.size(0), -1, att.n_heads, att.head_dim).transpose(1, 2)

    @staticmethod
    def attend(att, q, k, v, mask):
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(att.head_dim)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        context = torch.matmul(torch.softmax(scores, dim=-1), v)  # [N,H,1,hd]
        return att.wo(context.transpose(1, 2).reshape(q.size(0), -1, att.dim))

    def expand(self, rows):
        self.src_mask = self.src_mask.index_select(0, rows)
        self.cross = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.cross]

    def reorder(self, parents):
        self.self_kv = [(k.index_select(0, parents), v.index_select(0, parents)) for k, v in self.self_kv]

    def step(self, tokens):
        m = self.m
        pe = m.pos_encoder.pe[:, self.position:self.position + 1]
        x = m.tgt_embedding(tokens.unsqueeze(1)) * math.sqrt(m.dim) + pe  # [N,1,d]
        for i, layer in enumerate(m.decoder_layers):
            sa = layer.self_attention
            k, v = self.heads(sa, sa.wk(x)), self.heads(sa, sa.wv(x))
            if self.self_kv[i] is not None:  # the newest position sees every earlier one: causal
                k = torch.cat([self.self_kv[i][0], k], 2)
                v = torch.cat([self.self_kv[i][1], v], 2)
            self.self_kv[i] = (k, v)
            x = layer.self_attn_norm(x + self.attend(sa, self.heads(sa, sa.wq(x)), k, v, None))
            ca = layer.cross_attention
            x = layer.cross_attn_norm(x + self.attend(ca, self.heads(ca, ca.wq(x)), *self.cross[i], self.src_mask))
            x = layer.ffn_norm(x + layer.feed_forward(x))
        self.position += 1
        return F.log_softmax(m.output(x[:, 0]), dim=-1)


class ParityRecomputeDecoder:
    """The parity Transformer's own decode() over the whole prefix at every step (no cache): the
    reference the cached decoder is checked against (--self-check)."""

    def __init__(self, model, src):
        self.m = model
        self.src_mask = (src != PAD).unsqueeze(1).unsqueeze(2)
        self.memory = model.encode(src, self.src_mask)
        self.prefix = None

    def expand(self, rows):
        self.src_mask = self.src_mask.index_select(0, rows)
        self.memory = self.memory.index_select(0, rows)

    def reorder(self, parents):
        self.prefix = self.prefix.index_select(0, parents)

    def step(self, tokens):
        column = tokens.unsqueeze(1)
        self.prefix = column if self.prefix is None else torch.cat([self.prefix, column], 1)
        t = self.prefix.size(1)
        causal = torch.tril(torch.ones((t, t), dtype=torch.bool)).unsqueeze(0).unsqueeze(0)
        x = self.m.decode(self.prefix, self.memory, self.src_mask, causal)
        return F.log_softmax(self.m.output(x[:, -1]), dim=-1)


class NNTransformerModel:
    """torch.nn.Transformer between the parity model's embeddings, positional encoding and output
    projection (shared, not copied)."""

    def __init__(self, parity, weights):
        d, heads = CONFIG["d_model"], CONFIG["n_heads"]
        torch.manual_seed(SEED)  # nn.Transformer's own initialisation (xavier_uniform_), reproducible
        self.transformer = nn.Transformer(d_model=d, nhead=heads, num_encoder_layers=CONFIG["n_layers"],
                                          num_decoder_layers=CONFIG["n_layers"], dim_feedforward=CONFIG["d_ff"],
                                          dropout=0.0, batch_first=True)
        self.transformer.eval()
        self.parity = parity
        if weights == "shared":
            self.copy_parity_weights()

    @staticmethod
    def copy_attention(dst, src):
        dst.in_proj_weight.copy_(torch.cat([src.wq.weight, src.wk.weight, src.wv.weight], 0))
        dst.in_proj_bias.copy_(torch.cat([src.wq.bias, src.wk.bias, src.wv.bias], 0))
        dst.out_proj.weight.copy_(src.wo.weight)
        dst.out_proj.bias.copy_(src.wo.bias)

    @staticmethod
    def copy_norm(dst, src):
        dst.weight.copy_(src.gamma)
        dst.bias.copy_(src.beta)
        dst.eps = src.eps

    @staticmethod
    def copy_linear(dst, src):
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)

    def copy_parity_weights(self):
        t, p = self.transformer, self.parity
        with torch.no_grad():
            for dst, src in zip(t.encoder.layers, p.encoder_layers):
                self.copy_attention(dst.self_attn, src.attention)
                self.copy_norm(dst.norm1, src.attention_norm)
                self.copy_linear(dst.linear1, src.feed_forward.w1)
                self.copy_linear(dst.linear2, src.feed_forward.w2)
                self.copy_norm(dst.norm2, src.ffn_norm)
            for dst, src in zip(t.decoder.layers, p.decoder_layers):
                self.copy_attention(dst.self_attn, src.self_attention)
                self.copy_norm(dst.norm1, src.self_attn_norm)
                self.copy_attention(dst.multihead_attn, src.cross_attention)
                self.copy_norm(dst.norm2, src.cross_attn_norm)
                self.copy_linear(dst.linear1, src.feed_forward.w1)
                self.copy_linear(dst.linear2, src.feed_forward.w2)
                self.copy_norm(dst.norm3, src.ffn_norm)
        # Post-LN ends each layer with its norm; nn.Transformer's extra final norms are not in the model.
        t.encoder.norm = None
        t.decoder.norm = None

    def embed(self, table, ids):
        return self.parity.pos_encoder(table(ids) * math.sqrt(self.parity.dim))


class NNTransformerRecomputeDecoder:
    """nn.Transformer: the encoder once, the whole prefix through its decoder at every step."""

    def __init__(self, model, src):
        self.m = model
        self.src_pad = src == PAD  # key_padding_mask: True = ignore
        self.memory = model.transformer.encoder(model.embed(model.parity.src_embedding, src),
                                                src_key_padding_mask=self.src_pad)
        self.prefix = None

    def expand(self, rows):
        self.src_pad = self.src_pad.index_select(0, rows)
        self.memory = self.memory.index_select(0, rows)

    def reorder(self, parents):
        self.prefix = self.prefix.index_select(0, parents)

    def step(self, tokens):
        column = tokens.unsqueeze(1)
        self.prefix = column if self.prefix is None else torch.cat([self.prefix, column], 1)
        t = self.prefix.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(t)
        x = self.m.transformer.decoder(self.m.embed(self.m.parity.tgt_embedding, self.prefix), self.memory,
                                       tgt_mask=causal, memory_key_padding_mask=self.src_pad)
        return F.log_softmax(self.m.parity.output(x[:, -1]), dim=-1)


# ---- search ---------------------------------------------------------------------------------------

def length_penalty(length):
    return ((5.0 + length) / 6.0) ** ALPHA


def beam_search(decoder, batch, k, steps, fixed):
    """The best hypothesis (list of token ids, </s> excluded) of each of `batch` sources, as
    seqgrad's beam_search (models/decoding.cpp) and fairseq decide:

    Each step, per source, the 2k best continuations (beam log-probability + token log-probability)
    of its live beams. Taken best first: a </s> among the first k ends that hypothesis (score =
    log-probability / length_penalty(tokens + 1)); the best k other continuations go on. With
    `fixed`, </s> is barred before step `steps`. A source is done (its rows keep stepping, ignored)
    once k hypotheses have ended or none goes on -- so an ended hypothesis is only recorded when it
    ranks among the k best continuations of that step, and the source stops after k of them
    without comparing them to the live beams again. The search stops when every source is done, or
    after `steps` steps; then the live beams of unfinished sources compete too (score = log-
    probability / length_penalty(tokens)). The best score wins; among equals the first found."""
    rows = torch.arange(batch).repeat_interleave(k)  # row b*k + j: beam j of source b
    decoder.expand(rows)
    beams = [[([], 0.0, j == 0) for j in range(k)] for _ in range(batch)]  # (tokens, log-prob, alive)
    finished = [[] for _ in range(batch)]  # (tokens, score)
    done = [False] * batch
    tokens = torch.full((batch * k,), SOS, dtype=torch.long)
    for t in range(steps):
        lp = decoder.step(tokens)  # [batch*k, V]
        vocab = lp.size(1)
        if fixed and t + 1 < steps:
            lp[:, EOS] = -math.inf
        alive = torch.tensor([beam[2] for row in beams for beam in row])
        totals = torch.tensor([beam[1] for row in beams for beam in row], dtype=torch.float32).unsqueeze(1) + lp
        totals[~alive] = -math.inf
        best, codes = totals.view(batch, k * vocab).topk(2 * k, dim=1)
        best, codes = best.tolist(), codes.tolist()
        parents = list(range(batch * k))
        next_tokens = [EOS] * (batch * k)
        for b in range(batch):
            if done[b]:
                continue
            new = []
            for c in range(2 * k):
                if len(new) == k or best[b][c] == -math.inf:
                    break
                j, token = divmod(codes[b][c], vocab)
                parent = beams[b][j]
                if token == EOS:
                    if c < k:
                        finished[b].append((parent[0], best[b][c] / length_penalty(len(parent[0]) + 1)))
                    continue
                parents[b * k + len(new)] = b * k + j
                next_tokens[b * k + len(new)] = token
                new.append((parent[0] + [token], best[b][c], True))
            filled = len(new)
            beams[b] = new + [([], 0.0, False)] * (k - filled)
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


def greedy(decoder, batch, steps, fixed, with_log_probs=False):
    """Greedy decoding (beam 1, as seqgrad's greedy_decode): each row's best token, </s> barred
    before step `steps` if `fixed`; a row that emits </s> has ended (it keeps stepping, ignored)."""
    decoder.expand(torch.arange(batch))
    tokens = torch.full((batch,), SOS, dtype=torch.long)
    out, ended, log_probs = [[] for _ in range(batch)], [False] * batch, []
    for t in range(steps):
        lp = decoder.step(tokens)
        if fixed and t + 1 < steps:
            lp[:, EOS] = -math.inf
        log_probs.append(lp)
        tokens = lp.argmax(dim=1)
        for b, token in enumerate(tokens.tolist()):
            if not ended[b]:
                if token == EOS:
                    ended[b] = True
                else:
                    out[b].append(token)
        if all(ended):
            break
        tokens = torch.where(torch.tensor(ended), torch.full_like(tokens, EOS), tokens)
    return (out, torch.stack(log_probs, 1)) if with_log_probs else out


# ---- measuring ------------------------------------------------------------------------------------

def timed(fn, repeats):
    """fn() once to warm up, then `repeats` timed runs: (median seconds, the last result)."""
    fn()
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


def self_check(parity, nn_model, src, recompute_weights):
    """The cached decoder against decoding without a cache, on the first 2 sentences, 10 steps."""
    sentences, steps = 2, 10
    ok = True
    cached, cached_lp = greedy(CachedDecoder(parity, src[:sentences]), sentences, steps, True, True)
    references = [("parity recompute", ParityRecomputeDecoder, parity)]
    if recompute_weights == "shared":
        references.append(("nn.Transformer recompute", NNTransformerRecomputeDecoder, nn_model))
    for label, make, model in references:
        out, lp = greedy(make(model, src[:sentences]), sentences, steps, True, True)
        diff = (torch.nan_to_num(lp, neginf=0.0) - torch.nan_to_num(cached_lp, neginf=0.0)).abs().max().item()
        same = out == cached and diff < 1e-3
        ok &= same
        print(f"self-check greedy, {sentences} sentences x {steps} steps, cached vs {label}: "
              f"{'same tokens' if out == cached else 'DIFFERENT tokens'}, max |log-prob difference| {diff:.2e}")
        if out != cached:
            print(f"  cached: {cached}\n  {label}: {out}")
    beam_cached = beam_search(CachedDecoder(parity, src[:sentences]), sentences, BEAM, steps, False)
    beam_ref = beam_search(ParityRecomputeDecoder(parity, src[:sentences]), sentences, BEAM, steps, False)
    print(f"self-check beam {BEAM}, {sentences} sentences x {steps} steps, cached vs parity recompute: "
          f"{'same' if beam_cached == beam_ref else 'DIFFERENT'} best hypotheses")
    ok &= beam_cached == beam_ref
    print(f"  cached greedy: {cached}\n  cached beam {BEAM}: {beam_cached}")
    if recompute_weights == "own":
        out = greedy(NNTransformerRecomputeDecoder(nn_model, src[:sentences]), sentences, steps, True)
        print(f"  nn.Transformer (own weights) greedy: {out}")
    print("self-check: OK" if ok else "self-check: FAILED")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="N of the `threads` and `passive` settings")
    parser.add_argument("--setting", choices=torch_settings.SETTINGS, default="passive",
                        help="PyTorch's thread setting (bench/torch_settings.py)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after one warm-up; the median counts")
    parser.add_argument("--weights", default=DEFAULT_WEIGHTS,
                        help="the shared safetensors file (relative to the repository root); written if missing")
    parser.add_argument("--only", choices=["cached-fixed"], help="run this variant alone")
    parser.add_argument("--recompute-weights", choices=["shared", "own"], default="shared",
                        help="nn.Transformer's layers: the parity model's weights, or its own initialisation")
    parser.add_argument("--self-check", action="store_true",
                        help="compare the cached decoder with decoding without a cache (2 sentences, 10 steps) "
                             "and exit: 0 if they agree, 1 if not")
    args = parser.parse_args()
    if args.threads < 1 or args.repeats < 1:
        parser.error("--threads and --repeats must be positive")

    setting = torch_settings.apply(args.setting, args.threads)
    weights = args.weights if os.path.isabs(args.weights) else os.path.join(ROOT, args.weights)

    fixtures = load_parity_module()
    torch.manual_seed(SEED)
    parity = fixtures.Transformer(CONFIG)
    parity.eval()
    src = load_or_make_weights(parity, weights)
    for p in parity.parameters():
        p.requires_grad_(False)

    need_nn = args.self_check or not args.only
    nn_model = NNTransformerModel(parity, args.recompute_weights) if need_nn else None
    if nn_model is not None:
        for p in nn_model.transformer.parameters():
            p.requires_grad_(False)

    version = f"torch {torch.__version__} {setting['label']}"
    print(f"# torch {torch.__version__} {torch_settings.summary(setting)}, "
          f"OPENBLAS_CORETYPE {os.environ.get('OPENBLAS_CORETYPE', 'unset')}; {SENTENCES} sentences x "
          f"{src.size(1)} source tokens, beam {BEAM}, {STEPS} steps, penalty {ALPHA}; weights {args.weights}; "
          f"median of {args.repeats}", flush=True)
    print(f"setting={json.dumps(setting)}", flush=True)

    with torch.inference_mode():
        if args.self_check:
            sys.exit(0 if self_check(parity, nn_model, src, args.recompute_weights) else 1)
        variants = [("cached", True)]
        if not args.only:
            variants += [("cached", False), ("recompute", True), ("recompute", False)]
        rates = {}
        for kind, fixed in variants:
            if kind == "cached":
                run = lambda: beam_search(CachedDecoder(parity, src), SENTENCES, BEAM, STEPS, fixed)  # noqa: E731
            else:
                run = lambda: beam_search(NNTransformerRecomputeDecoder(nn_model, src),  # noqa: E731
                                          SENTENCES, BEAM, STEPS, fixed)
            seconds, best = timed(run, args.repeats)
            tokens = sum(len(h) for h in best)
            rates[(kind, fixed)] = tokens / seconds
            print(f"{version} {kind} {'fixed' if fixed else 'eos'} beam{BEAM}: {tokens} tgt tokens in "
                  f"{seconds:.3f} s: tgt_tokens/s={tokens / seconds:.1f}", flush=True)
        if not args.only:
            seconds, _ = timed(lambda: greedy(CachedDecoder(parity, src[:1]), 1, STEPS, True), args.repeats)
            print(f"{version} cached beam1 latency: {1000 * seconds:.1f} ms", flush=True)
    print(f"tgt_tokens/s={rates[('cached', True)]:.1f}")


if __name__ == "__main__":
    main()
