#!/usr/bin/python3
"""`seqgrad predict` on a trained checkpoint beside the same decoding in PyTorch: words per second.

Workload (G2P decoding; docs/program.md, "Tasks and data")
    A checkpoint that `seqgrad train` wrote (a directory: its best.safetensors, else its
    model.safetensors; or one such file), and a file of inputs, one a line, e.g. the G2P test words.
    Both sides decode every line with beam 5 (--beam) and GNMT's length penalty 0.6, and write the
    best hypothesis of each.

    seqgrad: `build/cli/seqgrad predict --checkpoint DIR --input WORDS --beam K --threads N`, run
    as a child process. Its wall clock counts the whole program (start, loading the checkpoint,
    reading, decoding, writing); its own `decoded ... in S s` line on standard error gives the
    decoding alone (Translator::translate: tokenizing, batching, the searches, detokenizing).

    PyTorch: the checkpoint's config (metadata "config") builds the parity model of
    tests/fixtures/make_fixtures.py (class Transformer, Seq2Seq or AttnSeq2Seq, imported from that
    file; parameter names as docs/parity.md), and its weights are loaded by name (every parameter,
    exact shapes; a tied one, share_embeddings or tie_output, from the name it is stored under).
    The inputs go through what `seqgrad predict` does (cli/use.cpp, training/translator.cpp):
      - lines read as LineReader reads them (plain or gzip, a trailing \\r dropped), in chunks of
        10,000 (--chunk);
      - tokens as the checkpoint's source tokenizer makes them (metadata "source_tokenizer":
        "char" = Unicode code points, ASCII A-Z read as a-z when "lowercase"; "space" =
        whitespace-separated symbols), ids from the stored vocabulary (metadata "source_vocab";
        a symbol not in it is <unk> = 3); an empty line gives an empty output, undecoded;
      - within a chunk, the inputs sorted by token count (stable) and decoded in batches of
        min(256, 2048 / beam) inputs (256 at beam 5), right-padded with <pad> = 0;
      - at most max(40, 2 x the batch's longest input + 10) output tokens, </s> included
        (--max-len overrides; a Transformer's max_seq_len caps it);
      - beam search as seqgrad's (models/decoding.cpp): beam_search() of bench/torch_decode.py,
        imported from that file (per source the 2k best continuations of its live beams; a </s>
        among the first k ends a hypothesis, the best k others go on; a source is done once k
        hypotheses have ended; at the step limit the live beams compete too); beam 1 is greedy
        (greedy() of the same file), as in seqgrad; and, as seqgrad's decoders do, a source that
        is done leaves the model's batch, so later steps run only the unfinished sources' rows
        (ShrinkingDecoder; --keep-finished steps every row until the whole batch is done);
      - the best hypothesis's ids back to text through the target vocabulary and tokenizer
        ("space": symbols joined by one space; "char": concatenated).
    The decoders keep per-layer caches, as seqgrad's do: a Transformer runs its encoder once,
    projects each decoder layer's cross-attention keys and values once, and appends the newest
    position's self-attention keys and values at each step (Post-LN or Pre-LN, relu or gelu,
    sinusoidal, learned or rotary positions); the LSTM models carry (h, c) and run one LSTM step
    a token. After each step the caches follow the beams' parents (index_select).
    Not supported: SentencePiece tokenizers (Debian's python3 has no sentencepiece module).

Counting: words = input lines (empty ones included, as seqgrad counts them); words per second =
words / seconds. The PyTorch side's seconds are the decoding alone, measured as seqgrad measures
its own (from the raw lines to the output strings), so `ratio` = seqgrad's decoding words/s over
PyTorch's; loading the checkpoint into the parity model is timed apart (`load`), and the time spent
inside the model (encoder and decoder steps, cache reordering) is shown apart from the Python beam
search's bookkeeping around it. seqgrad's wall clock is shown too. Output tokens = the tokens of
the best hypotheses, </s> excluded. With --repeats R each side decodes R times (in rounds whose
order alternates, seqgrad first in the first) and the medians count.

Agreement: seqgrad's outputs and those of PyTorch's best setting compared line by line, as strings.
Both compute the same function in float32, but in different orders of summation, so
log-probabilities differ in the last bits; where two hypotheses are within that noise of each
other the searches can pick differently (so can PyTorch's settings among themselves).
For up to --show differing lines the script prints both outputs with their scores (log-probability
/ length penalty, </s> counted) under the PyTorch model, to show whether they are such near-ties.

Usage, from the repository root (Debian's /usr/bin/python3 has torch), after a build:
    /usr/bin/python3 bench/torch_g2p_predict.py --checkpoint runs/g2p --input words.txt --beam 5 --threads 2
    OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/torch_g2p_predict.py ... --threads 1 --repeats 2
The last line printed is `words/s seqgrad=<n> torch=<n> ratio=<n> agreement=<percent>
torch_best=<setting> torch_default=<n> torch_threads=<n> torch_passive=<n>`: torch= is PyTorch's
best setting.

Threads: seqgrad gets --threads N (the size of its thread pool; its OpenBLAS calls run
single-threaded inside it). PyTorch decodes in each of the three thread settings of
bench/torch_settings.py (--torch-settings), each in a fresh process of this script: `default`
(PyTorch as it comes: one OpenMP thread here, OpenBLAS on every core), `threads`
(torch.set_num_threads(N), OpenBLAS at N threads) and `passive` (the same with
OMP_WAIT_POLICY=PASSIVE before torch loads). The ratio divides by the best of them; at N = 1 the
default, which still runs OpenBLAS on both cores, is shown but left out of it (bench/torch_settings.py
says why). Both sides link the same libopenblas.so.0 and see the same OPENBLAS_CORETYPE, which
picks the kernels of both; the first line printed (starting with #) names the core OpenBLAS chose.
"""
import argparse
import gzip
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import torch_settings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_SEQGRAD = os.path.join("build", "cli", "seqgrad")
MODEL_FORMAT = "seqgrad-model-1"
PAD, SOS, EOS, UNK = 0, 1, 2, 3
ALPHA = 0.6  # seqgrad predict's default --alpha; bench/torch_decode.py's length penalty
SPACES = " \t\n\r\v\f"


def fail(message):
    print(f"torch_g2p_predict.py: {message}", file=sys.stderr)
    sys.exit(1)


def load_by_path(name, *parts):
    path = os.path.join(ROOT, *parts)
    if not os.path.isfile(path):
        fail(f"{path} is missing (run from a seqgrad checkout)")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# bench/torch_decode.py: the safetensors reader, the beam search, greedy decoding, the OpenBLAS
# handle and the parity module's loader. Its errors are reported under this script's name.
decode_bench = load_by_path("seqgrad_torch_decode", "bench", "torch_decode.py")
decode_bench.fail = fail
if decode_bench.ALPHA != ALPHA or (decode_bench.PAD, decode_bench.SOS, decode_bench.EOS) != (PAD, SOS, EOS):
    fail("bench/torch_decode.py should use length penalty 0.6 and ids <pad> 0, <s> 1, </s> 2, as this script does")


# ---- the checkpoint ---------------------------------------------------------------------------------

def model_file_of(checkpoint):
    """As seqgrad's load_model: a directory's best.safetensors, else its model.safetensors; a file
    as it is."""
    if not os.path.exists(checkpoint):
        fail(f"no checkpoint at {checkpoint}")
    if not os.path.isdir(checkpoint):
        return checkpoint
    for name in ("best.safetensors", "model.safetensors"):
        path = os.path.join(checkpoint, name)
        if os.path.exists(path):
            return path
    fail(f"{checkpoint} is a directory without model.safetensors or best.safetensors "
         f"(a checkpoint directory is what `seqgrad train --out DIR` writes)")


def read_metadata(path):
    """The __metadata__ of a safetensors file (a JSON object of strings)."""
    try:
        with open(path, "rb") as f:
            header, _, _ = decode_bench.read_header(f, path)
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or metadata.get("format") != MODEL_FORMAT:
        fail(f"{path}: not a seqgrad model file (metadata \"format\" should be \"{MODEL_FORMAT}\")")
    return metadata


def metadata_json(path, metadata, key):
    if key not in metadata:
        fail(f"{path}: metadata \"{key}\" is missing")
    try:
        return json.loads(metadata[key])
    except json.JSONDecodeError as e:
        fail(f"{path}: metadata \"{key}\" is not JSON: {e}")


class Side:
    """A tokenizer and a vocabulary: text <-> ids as text/tokenizer.cpp and vocabulary.cpp."""

    def __init__(self, path, tokenizer, vocab, what):
        if not isinstance(tokenizer, dict) or tokenizer.get("kind") not in ("char", "space", "sentencepiece"):
            fail(f"{path}: metadata \"{what}_tokenizer\" is not a tokenizer: {tokenizer!r:.200}")
        if tokenizer["kind"] == "sentencepiece":
            fail(f"{path}: the {what} side uses a SentencePiece tokenizer, which this script does not "
                 f"support (char and space only)")
        if not (isinstance(vocab, list) and len(vocab) >= 4 and all(isinstance(s, str) for s in vocab)):
            fail(f"{path}: metadata \"{what}_vocab\" is not a list of at least 4 symbols")
        self.kind, self.lowercase = tokenizer["kind"], bool(tokenizer.get("lowercase", False))
        self.symbols = vocab
        self.ids = {s: i for i, s in enumerate(vocab)}

    def tokenize(self, text):
        if self.kind == "space":
            return list(_split_spaces(text))
        if self.lowercase:
            text = "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)
        return list(text)  # code points

    def encode(self, text):
        return [self.ids.get(s, UNK) for s in self.tokenize(text)]

    def decode(self, ids):
        symbols = []
        for i in ids:
            if i == EOS:
                break
            if i not in (PAD, SOS):
                symbols.append(self.symbols[i])
        return (" " if self.kind == "space" else "").join(symbols)


def _split_spaces(text):
    word = []
    for c in text:
        if c in SPACES:
            if word:
                yield "".join(word)
                word = []
        else:
            word.append(c)
    if word:
        yield "".join(word)


def read_checkpoint(checkpoint):
    """(the model file, config, source Side, target Side), from the file's metadata alone."""
    path = model_file_of(checkpoint)
    metadata = read_metadata(path)
    config = metadata_json(path, metadata, "config")
    if not isinstance(config, dict) or config.get("model") not in ("transformer", "seq2seq", "attn_seq2seq"):
        fail(f"{path}: metadata \"config\" names no model this script decodes: {metadata['config']:.200}")
    source = Side(path, metadata_json(path, metadata, "source_tokenizer"),
                  metadata_json(path, metadata, "source_vocab"), "source")
    target = Side(path, metadata_json(path, metadata, "target_tokenizer"),
                  metadata_json(path, metadata, "target_vocab"), "target")
    if len(source.symbols) != config.get("src_vocab") or len(target.symbols) != config.get("tgt_vocab"):
        fail(f"{path}: vocabularies of {len(source.symbols)} and {len(target.symbols)} symbols, config "
             f"src_vocab {config.get('src_vocab')} and tgt_vocab {config.get('tgt_vocab')}")
    return path, config, source, target


def load_model(path, config, fixtures):
    """The parity model of `config` in eval mode, with the weights of the model file `path`."""
    torch.manual_seed(0)  # the constructors draw weights that are all overwritten below
    model = fixtures.build_model(config)
    model.eval()
    tensors = decode_bench.read_safetensors(path)
    if config["model"] == "transformer":  # tied tensors are stored once, under their first name
        if config.get("share_embeddings") and "tgt_embedding.weight" not in tensors:
            tensors["tgt_embedding.weight"] = tensors.get("src_embedding.weight")
        if config.get("tie_output") and "output.weight" not in tensors:
            tensors["output.weight"] = tensors.get("tgt_embedding.weight")
    expected = model.state_dict()
    problem = decode_bench.parameter_problem(path, tensors, expected)  # for the parity model of this config
    if problem:
        fail(problem)
    model.load_state_dict({n: tensors[n] for n in expected}, strict=True)
    for p in model.parameters():
        p.requires_grad_(False)
    return model


# ---- the decoders -------------------------------------------------------------------------------------
# bench/torch_decode.py's interface: the constructor encodes, expand(rows) once (row r of the
# decoder = source rows[r]), then step(tokens [N]) -> log-probabilities [N, V] of the next token,
# and reorder(parents [N]) between steps.

def rotate_at(x, position):
    """make_fixtures.rotate for one query or key at `position` (x [N, H, 1, hd]): the same float32
    arithmetic, angle = position * exp(2i * -ln(10000) / hd)."""
    d = x.size(-1)
    log_step = torch.tensor(-math.log(10000.0) / d, dtype=torch.float32)
    inv_freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * log_step)
    angle = torch.tensor(float(position), dtype=torch.float32) * inv_freq  # [d/2]
    cos, sin = torch.cos(angle), torch.sin(angle)
    pairs = x.reshape(*x.shape[:-1], d // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    return torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1).reshape(x.shape)


class TransformerDecoder(decode_bench.CachedDecoder):
    """torch_decode.py's cached decoder (the encoder once, cross-attention keys and values
    projected once, self-attention keys and values appended per step), for every Transformer the
    parity model builds: Post-LN or Pre-LN (its final decoder_norm before `output`), and
    sinusoidal, learned or rotary positions."""

    def __init__(self, model, src):
        super().__init__(model, src)
        self.rotary = model.pos_encoder is None

    def self_attention(self, i, sa, h):
        q, k, v = self.heads(sa, sa.wq(h)), self.heads(sa, sa.wk(h)), self.heads(sa, sa.wv(h))
        if self.rotary:
            q, k = rotate_at(q, self.position), rotate_at(k, self.position)
        if self.self_kv[i] is not None:  # the newest position sees every earlier one: causal
            k = torch.cat([self.self_kv[i][0], k], 2)
            v = torch.cat([self.self_kv[i][1], v], 2)
        self.self_kv[i] = (k, v)
        return self.attend(sa, q, k, v, None)

    def cross_attention(self, i, ca, h):
        return self.attend(ca, self.heads(ca, ca.wq(h)), *self.cross[i], self.src_mask)

    def step(self, tokens):
        m = self.m
        x = m.tgt_embedding(tokens.unsqueeze(1)) * math.sqrt(m.dim)  # [N,1,d]
        if hasattr(m.pos_encoder, "pe"):  # the sinusoidal table, a buffer
            x = x + m.pos_encoder.pe[:, self.position:self.position + 1]
        elif m.pos_encoder is not None:  # learned table
            x = x + m.pos_encoder.weight[self.position:self.position + 1].unsqueeze(0)
        for i, layer in enumerate(m.decoder_layers):
            if m.pre_norm:
                x = x + self.self_attention(i, layer.self_attention, layer.self_attn_norm(x))
                x = x + self.cross_attention(i, layer.cross_attention, layer.cross_attn_norm(x))
                x = x + layer.feed_forward(layer.ffn_norm(x))
            else:
                x = layer.self_attn_norm(x + self.self_attention(i, layer.self_attention, x))
                x = layer.cross_attn_norm(x + self.cross_attention(i, layer.cross_attention, x))
                x = layer.ffn_norm(x + layer.feed_forward(x))
        if m.pre_norm:
            x = m.decoder_norm(x)
        self.position += 1
        return F.log_softmax(m.output(x[:, 0]), dim=-1)

    def keep(self, rows):
        """Only these rows go on (after a step): the source side and the self-attention caches."""
        self.expand(rows)
        self.reorder(rows)


class Seq2SeqDecoder:
    """The LSTM encoder-decoder: the encoder once; the decoder's (h, c) [L, N, h] per row
    (init_state: the encoder's final state; context_input: zeros, with the encoder's last-layer
    final h joined to every input)."""

    def __init__(self, model, src):
        self.m = model
        _, self.h, self.c = model.encoder(src)
        self.context = None
        if model.context_input:
            self.context = self.h[-1]
            self.h, self.c = torch.zeros_like(self.h), torch.zeros_like(self.c)

    def expand(self, rows):
        self.h, self.c = self.h.index_select(1, rows), self.c.index_select(1, rows)
        if self.context is not None:
            self.context = self.context.index_select(0, rows)

    def reorder(self, parents):
        self.h, self.c = self.h.index_select(1, parents), self.c.index_select(1, parents)
        if self.context is not None:
            self.context = self.context.index_select(0, parents)

    def step(self, tokens):
        logits, self.h, self.c = self.m.decoder(tokens, self.h, self.c, self.context)
        return F.log_softmax(logits, dim=-1)

    keep = expand  # only these rows go on


class AttnSeq2SeqDecoder:
    """The attention encoder-decoder: the bidirectional encoder once (its outputs and the bridged
    state, each layer's two directions summed); one attention and LSTM step a token."""

    def __init__(self, model, src):
        self.m = model
        self.enc_out, h, c = model.encoder(src)
        layers, b = model.encoder.rnn.num_layers, src.size(0)
        self.h = h.view(layers, 2, b, -1).sum(dim=1)
        self.c = c.view(layers, 2, b, -1).sum(dim=1)
        self.src_mask = src != PAD

    def expand(self, rows):
        self.enc_out, self.src_mask = self.enc_out.index_select(0, rows), self.src_mask.index_select(0, rows)
        self.h, self.c = self.h.index_select(1, rows), self.c.index_select(1, rows)

    def reorder(self, parents):
        self.h, self.c = self.h.index_select(1, parents), self.c.index_select(1, parents)

    def step(self, tokens):
        logits, self.h, self.c, _ = self.m.decoder(tokens, self.h, self.c, self.enc_out, self.src_mask)
        return F.log_softmax(logits, dim=-1)

    keep = expand  # only these rows go on


DECODERS = {"transformer": TransformerDecoder, "seq2seq": Seq2SeqDecoder, "attn_seq2seq": AttnSeq2SeqDecoder}


class Clock:
    """Seconds spent inside the model (encoding, steps, cache reordering), summed over a decode."""

    def __init__(self):
        self.seconds = 0.0


class ShrinkingDecoder:
    """A decoder above as beam_search() and greedy() see it, with two additions: the seconds spent
    in the model (constructing it encodes) go to `clock`, and, with `drop`, a source that is done
    leaves the model's batch, as in seqgrad's decoders (models/decoding.cpp). The searches keep
    stepping every row, feeding </s> to the rows of a source that is done (and to no live beam,
    which never continues with </s>), so a source whose k rows are all fed </s> is done; its rows
    are dropped from the caches (keep()) and get log-probabilities 0, which the searches ignore.
    Without `drop` every row steps until the whole batch is done."""

    def __init__(self, make, model, src, k, drop, clock):
        self.clock, self.k, self.drop = clock, k, drop
        self.inner = self.timed(make, model, src)
        self.active = None  # the rows still in the model's batch, in order
        self.rows = 0
        self.steps = 0

    def timed(self, fn, *args):
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.clock.seconds += time.perf_counter() - start

    def expand(self, rows):
        self.timed(self.inner.expand, rows)
        self.rows = rows.numel()
        self.active = torch.arange(self.rows)

    def reorder(self, parents):
        if self.active.numel() == self.rows:
            self.timed(self.inner.reorder, parents)
            return
        # Parents stay within their source, so an active row's parent is active too.
        local = torch.full((self.rows,), -1, dtype=torch.long)
        local[self.active] = torch.arange(self.active.numel())
        self.timed(self.inner.reorder, local[parents[self.active]])

    def step(self, tokens):
        if self.drop and self.steps > 0:
            going = ~(tokens[self.active].view(-1, self.k) == EOS).all(1)  # per active source
            if not bool(going.all()) and bool(going.any()):
                rows = going.repeat_interleave(self.k).nonzero().squeeze(1)
                self.timed(self.inner.keep, rows)
                self.active = self.active[rows]
        self.steps += 1
        if self.active.numel() == self.rows:
            return self.timed(self.inner.step, tokens)
        log_probs = self.timed(self.inner.step, tokens[self.active])
        out = log_probs.new_zeros((self.rows, log_probs.size(1)))
        out[self.active] = log_probs
        return out


# ---- predict, as seqgrad does it ----------------------------------------------------------------------

def read_lines(path):
    """LineReader's lines: plain or gzip, split at \\n, one trailing \\r dropped, no last empty line."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            fail(f"{path}: not a readable gzip file: {e}")
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, line in enumerate(lines, 1):
        if line.endswith(b"\r"):
            line = line[:-1]
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            fail(f"{path}:{number}: not valid UTF-8 (seqgrad refuses it too)")
    return out


def inputs_per_batch(beam):
    return max(1, min(256, 2048 // beam))


def predict(model, config, source, target, lines, beam, batch_size, chunk, max_len, drop_finished, clock):
    """(outputs, output tokens of the best hypotheses): seqgrad predict's work on `lines`."""
    make = DECODERS[config["model"]]
    limit = config.get("max_seq_len", 5000) if config["model"] == "transformer" else None
    outputs, tokens_out = [], 0
    for begin in range(0, len(lines), chunk):
        part = lines[begin:begin + chunk]
        sources = [source.encode(line) for line in part]
        order = sorted((i for i, s in enumerate(sources) if s), key=lambda i: len(sources[i]))  # stable
        results = [""] * len(part)
        for first in range(0, len(order), batch_size):
            rows = order[first:first + batch_size]
            width = len(sources[rows[-1]])  # sorted: the longest
            src = torch.full((len(rows), width), PAD, dtype=torch.long)
            for r, i in enumerate(rows):
                src[r, :len(sources[i])] = torch.tensor(sources[i], dtype=torch.long)
            steps = max_len if max_len > 0 else max(40, 2 * width + 10)
            if limit is not None:
                steps = min(steps, limit)
            decoder = ShrinkingDecoder(make, model, src, beam, drop_finished, clock)
            if beam == 1:
                best = decode_bench.greedy(decoder, len(rows), steps, False)
            else:
                best = decode_bench.beam_search(decoder, len(rows), beam, steps, False)
            for r, i in enumerate(rows):
                results[i] = target.decode(best[r])
                tokens_out += len(best[r])
        outputs += results
    return outputs, tokens_out


def hypothesis_score(model, src_ids, output_ids):
    """log P(output </s> | source) / ((5 + length) / 6) ** 0.6, length counting </s>: the score
    seqgrad and beam_search() give an ended hypothesis, here from one teacher-forced pass."""
    src = torch.tensor([src_ids], dtype=torch.long)
    tgt = torch.tensor([[SOS] + output_ids + [EOS]], dtype=torch.long)
    log_probs = F.log_softmax(model(src, tgt[:, :-1]), dim=-1)[0]
    total = log_probs.gather(1, tgt[0, 1:].unsqueeze(1)).sum().item()
    return total / decode_bench.length_penalty(len(output_ids) + 1)


# ---- seqgrad ------------------------------------------------------------------------------------------

def run_seqgrad(binary, checkpoint, input_path, beam, threads, chunk, max_len, int8):
    """(outputs, wall seconds, seqgrad's own decoding seconds, output tokens)."""
    command = [binary, "predict", "--checkpoint", checkpoint, "--input", input_path, "--beam", str(beam),
               "--threads", str(threads), "--chunk", str(chunk)] + (["--int8"] if int8 else [])
    if max_len > 0:
        command += ["--max-len", str(max_len)]
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    stderr = done.stderr.decode("utf-8", "replace")
    if done.returncode != 0:
        fail(f"{' '.join(command)} exited with {done.returncode}:\n{stderr.strip()}")
    decoded = [line for line in stderr.splitlines() if line.startswith("decoded ")]
    # "decoded N lines (T output tokens) in S s: R lines/s, ...": S has two decimals, so the seconds
    # are taken as N / R (R has one decimal), unless R is 0.
    try:
        words = decoded[-1].split()
        lines, tokens, seconds, rate = int(words[1]), int(words[3].lstrip("(")), float(words[7]), float(words[9])
        if rate > 0:
            seconds = lines / rate
    except (IndexError, ValueError):
        fail(f"seqgrad predict printed no `decoded N lines (T output tokens) in S s` line:\n{stderr.strip()}")
    outputs = []
    for line in done.stdout.decode("utf-8").split("\n")[:-1]:
        _, tab, output = line.rpartition("\t")  # "input<TAB>output"; an input may hold tabs
        if not tab:
            fail(f"seqgrad predict wrote a line without a tab: {line!r:.200}")
        outputs.append(output)
    return outputs, wall, seconds, tokens


def openblas_path():
    """The libopenblas file this process runs (its realpath), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libopenblas" in line:
                    return os.path.realpath(line.split()[-1])
    except OSError:
        pass
    return None


def seqgrad_openblas(binary):
    """The libopenblas file the seqgrad program links (ldd), or None."""
    try:
        out = subprocess.run(["ldd", binary], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if "libopenblas" in line and "=>" in line:
            return os.path.realpath(line.split("=>")[1].split()[0])
    return None


def run_torch_worker(args, setting):
    """This script again, in a fresh process in `setting` (the environment is set before torch
    loads), decoding the inputs once: its result (torch_worker()'s JSON)."""
    command = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--setting", setting,
               "--checkpoint", args.checkpoint, "--input", args.input, "--beam", str(args.beam),
               "--threads", str(args.threads), "--chunk", str(args.chunk), "--max-len", str(args.max_len)]
    command += ["--batch", str(args.batch)] if args.batch else []
    command += ["--keep-finished"] if args.keep_finished else []
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=torch_settings.environment(setting, args.threads))
    if done.returncode != 0:
        fail(f"the PyTorch side ({setting}) exited with {done.returncode}:\n"
             f"{done.stderr.decode('utf-8', 'replace').strip()}")
    return json.loads(done.stdout.decode("utf-8").strip().splitlines()[-1])


def torch_worker(args):
    """The PyTorch side in one thread setting: loads the checkpoint, decodes every line once and
    prints one JSON object (outputs, seconds, model seconds, load seconds, output tokens, setting)."""
    setting = torch_settings.apply(args.setting, args.threads)
    fixtures = decode_bench.load_parity_module()
    start = time.perf_counter()
    path, config, source, target = read_checkpoint(args.checkpoint)
    model = load_model(path, config, fixtures)
    load_seconds = time.perf_counter() - start
    lines = read_lines(args.input)
    batch = args.batch or inputs_per_batch(args.beam)
    clock = Clock()
    start = time.perf_counter()
    with torch.inference_mode():
        outputs, tokens = predict(model, config, source, target, lines, args.beam, batch, args.chunk, args.max_len,
                                  not args.keep_finished, clock)
    seconds = time.perf_counter() - start
    print(json.dumps({"outputs": outputs, "seconds": seconds, "model_seconds": clock.seconds,
                      "load_seconds": load_seconds, "tokens": tokens, "setting": setting}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a checkpoint directory (or model file) of seqgrad train")
    parser.add_argument("--input", required=True, help="inputs, one a line (plain or gzip), e.g. the G2P test words")
    parser.add_argument("--beam", type=int, default=5, help="beam size (1: greedy)")
    parser.add_argument("--threads", type=int, default=2,
                        help="seqgrad --threads; N of PyTorch's `threads` and `passive` settings")
    torch_settings.add_argument(parser)
    parser.add_argument("--batch", type=int, default=None,
                        help="inputs decoded together (default: seqgrad's, min(256, 2048 / beam)); "
                             "the PyTorch side only: seqgrad's own is fixed")
    parser.add_argument("--chunk", type=int, default=10000, help="lines read and decoded at a time (both sides)")
    parser.add_argument("--max-len", type=int, default=0,
                        help="longest output in tokens (0: seqgrad's default, max(40, 2 x longest input + 10))")
    parser.add_argument("--keep-finished", action="store_true",
                        help="PyTorch: step every row until the whole batch is done, instead of dropping the "
                             "sources that are done as seqgrad does")
    parser.add_argument("--repeats", type=int, default=1, help="decodes per side and setting; the medians count")
    parser.add_argument("--seqgrad", default=DEFAULT_SEQGRAD,
                        help="the seqgrad program (relative to the repository root)")
    parser.add_argument("--int8", action="store_true",
                        help="seqgrad predict --int8 (int8 weights); PyTorch stays float32")
    parser.add_argument("--show", type=int, default=5, help="differing lines to print, with their scores")
    # The PyTorch side alone, in one setting: what the script runs itself as (run_torch_worker()).
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--setting", choices=torch_settings.SETTINGS, default="passive", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.beam, args.threads, args.chunk, args.repeats) < 1 or args.max_len < 0 or args.show < 0:
        parser.error("--beam, --threads, --chunk and --repeats must be positive, --max-len and --show not negative")
    if args.beam > 256:
        parser.error("--beam is at most 256 (as seqgrad's)")
    if args.batch is not None and args.batch < 1:
        parser.error("--batch must be positive")
    if args.torch_worker:
        torch_worker(args)
        return
    binary = args.seqgrad if os.path.isabs(args.seqgrad) else os.path.join(ROOT, args.seqgrad)
    if not os.access(binary, os.X_OK):
        fail(f"{binary} is not an executable program: build it first (cmake --build build --target seqgrad)")
    if not os.path.isfile(args.input):
        fail(f"{args.input}: no such file")

    model_path, config, source, target = read_checkpoint(args.checkpoint)
    lines = read_lines(args.input)
    if not lines:
        fail(f"{args.input}: no input lines")
    batch = args.batch or inputs_per_batch(args.beam)
    settings = list(dict.fromkeys(args.torch_settings))

    ours, theirs = openblas_path(), seqgrad_openblas(binary)
    same = "the same library as seqgrad's" if ours and ours == theirs else f"seqgrad links {theirs or 'unknown'}"
    shape = {k: config[k] for k in ("d_model", "n_heads", "n_enc_layers", "n_dec_layers", "d_ff", "norm",
                                    "activation", "positional", "hidden_size", "num_layers", "decoder", "attention")
             if k in config}
    print(f"# torch {torch.__version__} in {len(settings)} setting(s) (bench/torch_settings.py), OpenBLAS "
          f"{ours or 'not loaded'} ({same}), OPENBLAS_CORETYPE {os.environ.get('OPENBLAS_CORETYPE', 'unset')}; "
          f"seqgrad --threads {args.threads}{' --int8' if args.int8 else ''}", flush=True)
    print(f"# {model_path}: {config['model']} {json.dumps(shape, separators=(',', ':'))}, vocabularies "
          f"{len(source.symbols)}/{len(target.symbols)}; {args.input}: {len(lines)} lines; beam {args.beam}, "
          f"penalty {ALPHA}, {batch} inputs a batch (torch), chunks of {args.chunk}, finished sources "
          f"{'kept stepping' if args.keep_finished else 'dropped'} (torch); {args.repeats} repeat(s)",
          flush=True)

    seqgrad_runs, torch_runs, infos, torch_outputs = [], {s: [] for s in settings}, {}, {}
    for repeat in range(args.repeats):
        for side in torch_settings.order(["seqgrad"] + settings, repeat):
            if side == "seqgrad":
                sg_out, wall, seconds, sg_tokens = run_seqgrad(binary, args.checkpoint, args.input, args.beam,
                                                               args.threads, args.chunk, args.max_len, args.int8)
                seqgrad_runs.append((wall, seconds))
                print(f"seqgrad run {repeat + 1}: {len(lines) / seconds:.1f} words/s decoding ({seconds:.3f} s), "
                      f"wall {wall:.3f} s with start-up and load ({len(lines) / wall:.1f} words/s), "
                      f"{sg_tokens} output tokens", flush=True)
                continue
            run = run_torch_worker(args, side)
            if side not in infos:
                infos[side] = run["setting"]
                print(f"# torch {torch_settings.summary(infos[side])}", flush=True)
            torch_outputs[side] = run["outputs"]
            seconds, model_seconds = run["seconds"], run["model_seconds"]
            torch_runs[side].append((seconds, model_seconds))
            print(f"torch {infos[side]['label']} run {repeat + 1}: {len(lines) / seconds:.1f} words/s decoding "
                  f"({seconds:.3f} s: model {model_seconds:.3f} s, search and text in Python "
                  f"{seconds - model_seconds:.3f} s), load {run['load_seconds']:.3f} s, "
                  f"{run['tokens']} output tokens", flush=True)
    if len(sg_out) != len(lines):
        fail(f"seqgrad predict wrote {len(sg_out)} lines for {len(lines)} inputs")

    rates = {s: len(lines) / statistics.median(t for t, _ in runs) for s, runs in torch_runs.items()}
    winner = torch_settings.best({s: (rates[s], infos[s]) for s in settings}, args.threads)
    th_out = torch_outputs[winner]
    same = sum(a == b for a, b in zip(sg_out, th_out))
    agreement = 100.0 * same / len(lines)
    differing = [i for i in range(len(lines)) if sg_out[i] != th_out[i]]
    print(f"agreement: {same} of {len(lines)} outputs identical ({agreement:.2f}%) with PyTorch's best setting "
          f"({infos[winner]['label']})")
    for setting in settings:
        if setting != winner:
            alike = sum(a == b for a, b in zip(torch_outputs[setting], th_out))
            print(f"  PyTorch {infos[setting]['label']}: {alike} of {len(lines)} outputs as in its best setting")
    if differing and args.show:
        print("differing lines (scores under the PyTorch model; the higher wins a search):")
        model = load_model(model_path, config, decode_bench.load_parity_module())
        with torch.inference_mode():
            for i in differing[:args.show]:
                src = source.encode(lines[i])
                a, b = (hypothesis_score(model, src, target.encode(o)) if src else float("nan")
                        for o in (sg_out[i], th_out[i]))
                print(f"  {lines[i]!r}: seqgrad {sg_out[i]!r} ({a:.5f}) | torch {th_out[i]!r} ({b:.5f})")

    sg_seconds = statistics.median(s for _, s in seqgrad_runs)
    sg_wall = statistics.median(w for w, _ in seqgrad_runs)
    sg_rate = len(lines) / sg_seconds
    print(f"seqgrad: {sg_rate:.1f} words/s decoding (median {sg_seconds:.3f} s), {len(lines) / sg_wall:.1f} words/s "
          f"wall (median {sg_wall:.3f} s, start-up and load included)")
    for setting in settings:
        model_seconds = statistics.median(m for _, m in torch_runs[setting])
        figure = torch_settings.cell(f"{rates[setting]:.1f} words/s", infos[setting], args.threads)
        print(f"torch {infos[setting]['label']}: {figure} decoding (median {len(lines) / rates[setting]:.3f} s, of "
              f"which model {model_seconds:.3f} s){'  <- best' if setting == winner else ''}")
    each = " ".join(f"torch_{s}={rates[s]:.1f}" for s in settings)
    print(f"words/s seqgrad={sg_rate:.1f} torch={rates[winner]:.1f} ratio={sg_rate / rates[winner]:.2f} "
          f"agreement={agreement:.2f}% torch_best={winner} {each}")

if __name__ == "__main__":
    main()
