#!/usr/bin/python3
"""PyTorch at its best in code: the benchmarks' models as a PyTorch expert writes them.

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

torch_bench.py's models likewise: ExpertTransformer (nn.LayerNorm, one q/k/v and one cross k/v
product, additive masks made once), ExpertSeq2Seq (the teacher-forced decoder as one nn.LSTM call
over the whole target) and ExpertAttnSeq2Seq, the attention LSTM, whose decoder stays a step loop
because its attention reads the state of the step before, but with only that attention and the
cells in it (one product of [input; h] per layer and step): the encoder, the attention's keys, the
padding mask and the first layer's gates from the embeddings come before the loop, the output
layer in one product over all steps after it. At torch_bench.py's shapes seed, small and g2p
(2 threads, passive, AMD Zen 4) it trained 606-731, 3.2-4.1k and 3.7-5.1k tokens/s against the
twin's 374-447, 1.66-1.80k and 3.1-3.2k; at small and g2p most of that is the encoder run
unpacked, which those batches allow (their sources have no padding), at seed the output layer's
one product. The LSTMs run the twin's own modules; the GPT and the Transformer get the twin's
weights copied (from_twin, transformer_from_twin).

ExpertBert, the BERT of bench/torch_bert.py: ExpertEncoderLayers with GELU (one q/k/v product,
nn.LayerNorm), no mask at all for texts without padding (the benchmarks'), the one segment's row added
rather than looked up; in eval mode without gradients each layer is PyTorch's own fused encoder
layer, torch._transformer_encoder_layer_fwd (nn.TransformerEncoderLayer's inference fast path: one
kernel for the q/k/v product, attention, the norms and the feed-forward). PyTorch 1.13 has no public
F.scaled_dot_product_attention; its private torch._C._nn._scaled_dot_product_attention is the same
composition of products and softmax on the CPU, and timed no faster here than the plain one.

    /usr/bin/python3 bench/torch_expert.py --check   # each expert model against its twin

--check builds each pair at the bench shapes without dropout, with the same weights, and compares
the logits, the loss and every gradient (the LSTMs' on batches with padding, the attention LSTM's
also without, as the bench's), then exits 0 if they agree to float32 rounding (the largest
relative difference, printed, below 1e-5): the timings compare the same function. The BERT's is
checked training (a padded batch with two segments: both heads' logits, their summed loss, every
gradient) and in inference through the fused layers (both heads' logits, with and without padding).
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


# ---- the Transformer (Vaswani et al., 2017) ----

MASK_FILL = -1e9  # added to masked scores: the twin's fill, so that a row's weights are the same


def attend(q, k, v, heads, additive_mask, dropout, training):
    """Multi-head attention over [B, T, D] projections: softmax(q k^T / sqrt(hd) + mask) v; a mask
    of None masks nothing (texts without padding)."""
    b, tq, d = q.shape
    hd = d // heads
    q = q.view(b, tq, heads, hd).transpose(1, 2)
    k = k.view(b, -1, heads, hd).transpose(1, 2)
    v = v.view(b, -1, heads, hd).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    if additive_mask is not None:
        scores = scores + additive_mask
    weights = F.dropout(torch.softmax(scores, dim=-1), dropout, training)
    return (weights @ v).transpose(1, 2).reshape(b, tq, d)


class ExpertEncoderLayer(nn.Module):
    def __init__(self, d, heads, d_ff, pre_norm, dropout, eps, activation="relu"):
        super().__init__()
        self.heads, self.pre_norm, self.dropout, self.eps = heads, pre_norm, dropout, eps
        self.gelu = activation == "gelu"
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm1 = nn.LayerNorm(d, eps=eps)
        self.fc = nn.Linear(d, d_ff)
        self.proj = nn.Linear(d_ff, d)
        self.norm2 = nn.LayerNorm(d, eps=eps)

    def sublayers(self, x, mask):
        drop = lambda t: F.dropout(t, self.dropout, self.training)  # noqa: E731
        attention = lambda h: drop(self.out(attend(*self.qkv(h).chunk(3, dim=-1), self.heads, mask,  # noqa: E731
                                                    self.dropout, self.training)))
        act = F.gelu if self.gelu else F.relu
        feed_forward = lambda h: drop(self.proj(drop(act(self.fc(h)))))  # noqa: E731
        return attention, feed_forward

    def forward(self, x, mask):
        attention, feed_forward = self.sublayers(x, mask)
        if self.pre_norm:
            x = x + attention(self.norm1(x))
            return x + feed_forward(self.norm2(x))
        x = self.norm1(x + attention(x))
        return self.norm2(x + feed_forward(x))

    def forward_first(self, x, mask):
        """forward(x, mask)[:, :1], the first position's output alone (seqgrad's
        EncoderLayer::forward_first): keys and values of every position in one product, the query,
        the attention's output, the feed-forward network and the norms for one position a row."""
        d = x.size(-1)
        drop = lambda t: F.dropout(t, self.dropout, self.training)  # noqa: E731
        act = F.gelu if self.gelu else F.relu

        def attention(first, h):
            if hasattr(self, "query"):  # split_query's layers (int8 ones, after quantize_dynamic)
                q, kv = self.query(first), self.keys_values(h)
            else:
                q = F.linear(first, self.qkv.weight[:d], self.qkv.bias[:d])
                kv = F.linear(h, self.qkv.weight[d:], self.qkv.bias[d:])
            k, v = kv.chunk(2, dim=-1)
            return drop(self.out(attend(q, k, v, self.heads, mask, self.dropout, self.training)))

        def feed_forward(h):
            return drop(self.proj(drop(act(self.fc(h)))))
        first = x[:, :1]
        if self.pre_norm:
            h = self.norm1(x)
            first = first + attention(h[:, :1], h)
            return first + feed_forward(self.norm2(first))
        first = self.norm1(first + attention(first, x))
        return self.norm2(first + feed_forward(first))

    def split_query(self):
        """Copies qkv's query rows and key/value rows into layers of their own, which forward_first
        then uses: a layer quantized by quantize_dynamic has no float weight to slice, and with these
        its int8 products are the first position's query and every position's keys and values
        alone, as the float slices are."""
        d = self.qkv.in_features
        self.query, self.keys_values = nn.Linear(d, d), nn.Linear(d, 2 * d)
        with torch.no_grad():
            self.query.weight.copy_(self.qkv.weight[:d])
            self.query.bias.copy_(self.qkv.bias[:d])
            self.keys_values.weight.copy_(self.qkv.weight[d:])
            self.keys_values.bias.copy_(self.qkv.bias[d:])

    def inference(self, x, key_padding):
        """forward() in eval mode without gradients, as nn.TransformerEncoderLayer's fast path runs
        it: one fused kernel of PyTorch's (torch._transformer_encoder_layer_fwd) for the whole layer,
        its softmax masking the keys where key_padding [B, S] is True (None: no padding)."""
        return torch._transformer_encoder_layer_fwd(
            x, x.size(-1), self.heads, self.qkv.weight, self.qkv.bias, self.out.weight, self.out.bias, self.gelu,
            self.pre_norm, self.eps, self.norm1.weight, self.norm1.bias, self.norm2.weight, self.norm2.bias,
            self.fc.weight, self.fc.bias, self.proj.weight, self.proj.bias, key_padding,
            None if key_padding is None else 1)


class ExpertDecoderLayer(nn.Module):
    def __init__(self, d, heads, d_ff, pre_norm, dropout, eps):
        super().__init__()
        self.heads, self.pre_norm, self.dropout = heads, pre_norm, dropout
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm1 = nn.LayerNorm(d, eps=eps)
        self.cross_q = nn.Linear(d, d)
        self.cross_kv = nn.Linear(d, 2 * d)
        self.cross_out = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d, eps=eps)
        self.fc = nn.Linear(d, d_ff)
        self.proj = nn.Linear(d_ff, d)
        self.norm3 = nn.LayerNorm(d, eps=eps)

    def forward(self, x, memory, src_mask, tgt_mask):
        drop = lambda t: F.dropout(t, self.dropout, self.training)  # noqa: E731
        self_attention = lambda h: drop(self.out(attend(*self.qkv(h).chunk(3, dim=-1), self.heads,  # noqa: E731
                                                         tgt_mask, self.dropout, self.training)))
        cross = lambda h: drop(self.cross_out(attend(self.cross_q(h), *self.cross_kv(memory).chunk(2, dim=-1),  # noqa
                                                     self.heads, src_mask, self.dropout, self.training)))
        feed_forward = lambda h: drop(self.proj(drop(F.relu(self.fc(h)))))  # noqa: E731
        if self.pre_norm:
            x = x + self_attention(self.norm1(x))
            x = x + cross(self.norm2(x))
            return x + feed_forward(self.norm3(x))
        x = self.norm1(x + self_attention(x))
        x = self.norm2(x + cross(x))
        return self.norm3(x + feed_forward(x))


class ExpertTransformer(nn.Module):
    """The benchmarks' Transformer (sinusoidal positions, relu, Post-LN or Pre-LN) with nn.LayerNorm,
    one q/k/v product in self-attention and one k/v product in cross-attention, and additive masks
    made once a batch; forward(src, tgt_in) -> logits, as the twin's."""

    def __init__(self, cfg, pad=0, eps=1e-6):
        super().__init__()
        d, heads, d_ff = cfg["d_model"], cfg["n_heads"], cfg["d_ff"]
        dropout = cfg.get("dropout", 0.0)
        self.pre_norm, self.dim, self.pad, self.dropout = cfg["norm"] == "pre", d, pad, dropout
        self.src_embedding = nn.Embedding(cfg["src_vocab"], d)
        self.tgt_embedding = nn.Embedding(cfg["tgt_vocab"], d)
        position = torch.arange(cfg["max_seq_len"], dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        table = torch.zeros(cfg["max_seq_len"], d)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        self.register_buffer("positions", table, persistent=False)
        n_enc, n_dec = cfg.get("n_enc_layers", cfg["n_layers"]), cfg.get("n_dec_layers", cfg["n_layers"])
        self.encoder_layers = nn.ModuleList(
            [ExpertEncoderLayer(d, heads, d_ff, self.pre_norm, dropout, eps) for _ in range(n_enc)])
        self.decoder_layers = nn.ModuleList(
            [ExpertDecoderLayer(d, heads, d_ff, self.pre_norm, dropout, eps) for _ in range(n_dec)])
        if self.pre_norm:
            self.encoder_norm, self.decoder_norm = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
        self.output = nn.Linear(d, cfg["tgt_vocab"])

    def embed(self, table, ids):
        x = table(ids) * math.sqrt(self.dim) + self.positions[:ids.size(1)]
        return F.dropout(x, self.dropout, self.training)

    def forward(self, src, tgt_in):
        t = tgt_in.size(1)
        src_mask = ((src == self.pad).float() * MASK_FILL)[:, None, None, :]  # [B, 1, 1, S]
        causal = torch.full((t, t), MASK_FILL).triu(1)
        tgt_mask = torch.minimum(causal, ((tgt_in == self.pad).float() * MASK_FILL)[:, None, None, :])
        x = self.embed(self.src_embedding, src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        memory = self.encoder_norm(x) if self.pre_norm else x
        x = self.embed(self.tgt_embedding, tgt_in)
        for layer in self.decoder_layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.output(self.decoder_norm(x) if self.pre_norm else x)


# ---- the LSTM encoder-decoder (Sutskever et al., 2014) ----

class ExpertSeq2Seq(nn.Module):
    """The twin's Seq2Seq (its own modules, the same parameters) with the teacher-forced decoder run
    as one nn.LSTM call over the whole target and one output product, instead of a Python loop of
    one-step calls: the same function, since every input of the decoder is known in advance."""

    def __init__(self, twin):
        super().__init__()
        self.twin = twin

    def forward(self, src, tgt_in):
        m = self.twin
        _, h, c = m.encoder(src)
        x = m.decoder.embedding(tgt_in)  # [B, T, h]
        if m.context_input:  # the encoder's last state beside every input; the decoder starts at zero
            x = torch.cat((x, h[-1].unsqueeze(1).expand(-1, x.size(1), -1)), dim=2)
            h, c = torch.zeros_like(h), torch.zeros_like(c)
        out, _ = m.decoder.rnn(x, (h, c))
        return m.decoder.fc(out)


# ---- the attention LSTM encoder-decoder (Bahdanau et al., 2015) ----

class ExpertAttnSeq2Seq(nn.Module):
    """The twin's AttnSeq2Seq (its own modules, the same parameters) with only what needs the state
    of the step before left in the decoder's loop: the attention, whose query is the top layer's h
    of the step before, and the LSTM's cells. Before the loop: the encoder (the twin's packed
    nn.LSTM call when a source row has padding; on a batch with none, the same call unpacked, since
    PyTorch's CPU backward of a packed sequence zero-fills and adds a gradient of all its steps'
    input gates [B * S, 4h] at every step), the attention's keys (additive: the encoder outputs'
    share of attn, with its bias), one additive padding mask, and the first layer's gates from the
    embeddings, with both its biases, for every step in one product. In the loop, per layer one
    product of [input; h] with [weight_ih | weight_hh] (stacked once a forward) and the gates'
    pointwise ops; after it the output layer in one product over all steps. Teacher forcing at
    every step, as the twin's; no dropout, as the twin has none."""

    def __init__(self, twin, pad=0):
        super().__init__()
        self.twin, self.pad = twin, pad
        self.additive = hasattr(twin.decoder.attention, "attn")  # AttentionParams; else AttentionSimple (dot)

    def forward(self, src, tgt_in):
        m = self.twin
        rnn, attention = m.decoder.rnn, m.decoder.attention
        layers, hidden = rnn.num_layers, rnn.hidden_size
        if bool((src != self.pad).all()):  # no padding: the same nn.LSTM call, unpacked
            out, (h, c) = m.encoder.rnn(m.encoder.embedding(src))
            enc_out = torch.tanh(m.encoder.fc(out))
        else:
            enc_out, h, c = m.encoder(src)
        h = list(h.view(layers, 2, src.size(0), hidden).sum(dim=1).unbind(0))  # each layer's directions added
        c = list(c.view(layers, 2, src.size(0), hidden).sum(dim=1).unbind(0))
        mask = ((src == self.pad).float() * MASK_FILL).unsqueeze(1)  # [B, 1, S]
        if self.additive:
            keys = F.linear(enc_out, attention.attn.weight[:, hidden:], attention.attn.bias)  # [B, S, h]
            query_weight = attention.attn.weight[:, :hidden]
        else:
            keys = enc_out.transpose(1, 2)  # [B, h, S]
            scale = 1.0 / math.sqrt(hidden)
        w_ih = [getattr(rnn, f"weight_ih_l{k}") for k in range(layers)]
        weights = [torch.cat((w_ih[k][:, hidden:] if k == 0 else w_ih[k], getattr(rnn, f"weight_hh_l{k}")), dim=1)
                   for k in range(layers)]
        biases = [getattr(rnn, f"bias_ih_l{k}") + getattr(rnn, f"bias_hh_l{k}") for k in range(layers)]
        # The first layer's gates from the embeddings, T of [B, 4h] (unbind: one stack of their gradients
        # where indexing would zero-fill and add a whole [T, B, 4h] gradient per step); the context's
        # share is added in the loop.
        embedded = F.linear(m.decoder.embedding(tgt_in.t()), w_ih[0][:, :hidden], biases[0]).unbind(0)
        outputs = []
        for t in range(tgt_in.size(1)):
            query = h[-1]  # the previous step's top layer (the bridged state at t = 0)
            if self.additive:
                energy = torch.tanh(keys + (query @ query_weight.t()).unsqueeze(1))
                scores = (energy @ attention.v).unsqueeze(1) + mask
            else:
                scores = torch.baddbmm(mask, query.unsqueeze(1), keys, alpha=scale)
            x = torch.bmm(torch.softmax(scores, dim=-1), enc_out).squeeze(1)  # the context [B, h]
            for k in range(layers):
                gates = torch.addmm(embedded[t] if k == 0 else biases[k], torch.cat((x, h[k]), dim=1),
                                    weights[k].t())
                i, f, g, o = gates.chunk(4, dim=1)
                c[k] = torch.sigmoid(f) * c[k] + torch.sigmoid(i) * torch.tanh(g)
                h[k] = x = torch.sigmoid(o) * torch.tanh(c[k])
            outputs.append(x)
        return m.decoder.fc(torch.stack(outputs, dim=1))


# The expert Transformer's parameters as the twin's: each a list of twin names stacked.
def transformer_names(expert):
    names = {"src_embedding.weight": ["src_embedding.weight"], "tgt_embedding.weight": ["tgt_embedding.weight"],
             "output.weight": ["output.weight"], "output.bias": ["output.bias"]}
    for norm in ("encoder_norm", "decoder_norm"):
        names[f"{norm}.weight"], names[f"{norm}.bias"] = [f"{norm}.gamma"], [f"{norm}.beta"]
    for i in range(len(expert.encoder_layers)):
        e, t = f"encoder_layers.{i}.", f"encoder_layers.{i}."
        for leaf in ("weight", "bias"):
            names[e + "qkv." + leaf] = [t + f"attention.w{n}.{leaf}" for n in "qkv"]
            names[e + "out." + leaf] = [t + "attention.wo." + leaf]
            names[e + "fc." + leaf], names[e + "proj." + leaf] = [t + "feed_forward.w1." + leaf], [
                t + "feed_forward.w2." + leaf]
        for mine, theirs in (("norm1", "attention_norm"), ("norm2", "ffn_norm")):
            names[e + mine + ".weight"], names[e + mine + ".bias"] = [t + theirs + ".gamma"], [t + theirs + ".beta"]
    for i in range(len(expert.decoder_layers)):
        e, t = f"decoder_layers.{i}.", f"decoder_layers.{i}."
        for leaf in ("weight", "bias"):
            names[e + "qkv." + leaf] = [t + f"self_attention.w{n}.{leaf}" for n in "qkv"]
            names[e + "out." + leaf] = [t + "self_attention.wo." + leaf]
            names[e + "cross_q." + leaf] = [t + "cross_attention.wq." + leaf]
            names[e + "cross_kv." + leaf] = [t + f"cross_attention.w{n}.{leaf}" for n in "kv"]
            names[e + "cross_out." + leaf] = [t + "cross_attention.wo." + leaf]
            names[e + "fc." + leaf], names[e + "proj." + leaf] = [t + "feed_forward.w1." + leaf], [
                t + "feed_forward.w2." + leaf]
        for mine, theirs in (("norm1", "self_attn_norm"), ("norm2", "cross_attn_norm"), ("norm3", "ffn_norm")):
            names[e + mine + ".weight"], names[e + mine + ".bias"] = [t + theirs + ".gamma"], [t + theirs + ".beta"]
    return {k: v for k, v in names.items() if k in dict(expert.named_parameters())}


def transformer_from_twin(expert, twin):
    theirs = dict(twin.named_parameters())
    with torch.no_grad():
        for name, p in expert.named_parameters():
            p.copy_(torch.cat([theirs[n] for n in transformer_names(expert)[name]]))


# ---- BERT (Devlin et al., 2019) ----

PAD = 0


class ExpertBert(nn.Module):
    """The twin's BERT (make_fixtures.py, class BERT) with learned positions, Post-LN and the MLM
    output tied to the token embedding, the benchmarks' design: forward(ids [B, T], segments or
    None) -> hidden [B, T, d], mlm_logits(hidden) [B, T, vocab], class_logits(hidden) [B, classes].
    Its layers are ExpertEncoderLayers (nn.LayerNorm, one q/k/v product, F.gelu); texts without
    padding get no mask at all, and without segments the one segment row is added, not looked up.
    In eval mode without gradients each layer is PyTorch's fused encoder layer (the fast path of
    nn.TransformerEncoderLayer, which 1.13 has for inference only). forward_first(ids, segments) is
    forward()[:, :1] with the last layer run for the first position alone, as seqgrad's: what
    class_logits reads."""

    def __init__(self, cfg, eps=1e-6):
        super().__init__()
        if (cfg.get("positional", "learned"), cfg.get("norm", "post"), cfg.get("tie_output", True)) != \
                ("learned", "post", True):
            raise ValueError("ExpertBert is the benchmarks' design: learned positions, Post-LN, a tied output")
        d, dropout, activation = cfg["d_model"], cfg.get("dropout", 0.0), cfg.get("activation", "gelu")
        self.dropout, self.gelu = dropout, activation == "gelu"
        self.token_embedding = nn.Embedding(cfg["vocab"], d)
        self.position_embedding = nn.Embedding(cfg["max_seq_len"], d)
        self.segment_embedding = nn.Embedding(cfg.get("type_vocab", 2), d)
        self.embedding_norm = nn.LayerNorm(d, eps=eps)
        self.layers = nn.ModuleList([ExpertEncoderLayer(d, cfg["n_heads"], cfg["d_ff"], False, dropout, eps, activation)
                                     for _ in range(cfg["n_layers"])])
        self.mlm_dense = nn.Linear(d, d)
        self.mlm_norm = nn.LayerNorm(d, eps=eps)
        self.mlm_bias = nn.Parameter(torch.zeros(cfg["vocab"]))
        self.pooler = nn.Linear(d, d)
        self.classifier = nn.Linear(d, cfg.get("n_classes", 2))

    def forward(self, ids, segments=None):
        return self.encode(ids, segments, False)

    def forward_first(self, ids, segments=None):
        return self.encode(ids, segments, True)

    def encode(self, ids, segments, first_only):
        t = ids.size(1)
        x = self.token_embedding(ids) + self.position_embedding.weight[:t]
        x = x + (self.segment_embedding.weight[0] if segments is None else self.segment_embedding(segments))
        x = F.dropout(self.embedding_norm(x), self.dropout, self.training)
        padding = ids == PAD
        padded = bool(padding.any())
        # PyTorch's fused layer takes float weights: not quantize_dynamic's int8 layers.
        fused = not self.training and not torch.is_grad_enabled() and not callable(self.layers[0].qkv.weight)
        mask = (padding.float() * MASK_FILL)[:, None, None, :] if padded else None  # [B, 1, 1, T]
        for layer in self.layers[:-1] if first_only else self.layers:
            x = layer.inference(x, padding if padded else None) if fused else layer(x, mask)
        return self.layers[-1].forward_first(x, mask) if first_only else x

    def mlm_logits(self, hidden):
        h = self.mlm_dense(hidden)
        h = self.mlm_norm(F.gelu(h) if self.gelu else F.relu(h))
        return F.linear(h, self.token_embedding.weight, self.mlm_bias)

    def class_logits(self, hidden):
        return self.classifier(torch.tanh(self.pooler(hidden[:, 0])))


def bert_names(expert):
    """The expert BERT's parameters as the twin's: each a list of twin names stacked."""
    names = {n: [n] for n in ("token_embedding.weight", "position_embedding.weight", "segment_embedding.weight",
                              "pooler.weight", "pooler.bias", "classifier.weight", "classifier.bias")}
    names.update({"embedding_norm.weight": ["embedding_norm.gamma"], "embedding_norm.bias": ["embedding_norm.beta"],
                  "mlm_dense.weight": ["mlm.dense.weight"], "mlm_dense.bias": ["mlm.dense.bias"],
                  "mlm_norm.weight": ["mlm.norm.gamma"], "mlm_norm.bias": ["mlm.norm.beta"],
                  "mlm_bias": ["mlm.output.bias"]})
    for i in range(len(expert.layers)):
        p = f"layers.{i}."
        for leaf in ("weight", "bias"):
            names[p + "qkv." + leaf] = [p + f"attention.w{n}.{leaf}" for n in "qkv"]
            names[p + "out." + leaf] = [p + "attention.wo." + leaf]
            names[p + "fc." + leaf], names[p + "proj." + leaf] = [p + "feed_forward.w1." + leaf], [
                p + "feed_forward.w2." + leaf]
        for mine, theirs in (("norm1", "attention_norm"), ("norm2", "ffn_norm")):
            names[p + mine + ".weight"], names[p + mine + ".bias"] = [p + theirs + ".gamma"], [p + theirs + ".beta"]
    return names


def bert_from_twin(expert, twin):
    theirs = dict(twin.named_parameters())
    with torch.no_grad():
        for name, p in expert.named_parameters():
            p.copy_(torch.cat([theirs[n] for n in bert_names(expert)[name]]))


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


def relative(want, got):
    """The largest |want - got| over the largest |want|."""
    return ((want - got).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def agree(label, twin, expert, gradients):
    """Prints the largest relative difference between the twin's (logits, loss) and the expert's,
    and between the (name, twin's, expert's) gradients; True if it is below 1e-5."""
    worst = [("logits", relative(twin[0], expert[0])), ("loss", relative(twin[1], expert[1]))]
    worst += [(name, relative(want, got)) for name, want, got in gradients]
    largest = max(worst, key=lambda w: w[1])
    print(f"{label}: {len(gradients)} gradients, logits and loss; largest relative difference "
          f"{largest[1]:.2e} ({largest[0]})")
    return largest[1] < 1e-5


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
        ok = agree(name, (tl, tloss), (el, eloss), [(n, twin_gradient_of(n, tg), g) for n, g in eg.items()]) and ok
    return ok


def pair_batch(s, first_real_token, sos, padded=True):
    """Four pairs of shape s, <s> first; with padding (a short source, a short target) if asked."""
    src = torch.randint(first_real_token, s["src_vocab"], (4, s["src_len"]))
    tgt = torch.randint(first_real_token, s["tgt_vocab"], (4, s["tgt_len"] + 1))
    tgt[:, 0] = sos
    if padded:
        src[1, -3:], tgt[2, -4:] = 0, 0  # the masks must hide it alike
    return src, tgt


def passes_over_twin(twin, models, src, tgt, loss_fn, label_smoothing):
    """Each of `models` (the twin, and an expert made of the twin's own modules) run on one batch:
    its logits, its loss and the twin's parameters' gradients (an unused parameter's: 0)."""
    results = []
    for model in models:
        twin.zero_grad(set_to_none=True)
        logits = model(src, tgt[:, :-1])
        loss = loss_fn(logits, tgt[:, 1:], label_smoothing)
        loss.backward()
        results.append((logits.detach(), loss.detach(),
                        {n: torch.zeros_like(p) if p.grad is None else p.grad.clone()
                         for n, p in twin.named_parameters()}))
    return results


def check_transformer(shapes, model_config, first_real_token, sos, label_smoothing):
    """ExpertTransformer against the twin at each shape without dropout, Post-LN and Pre-LN, on a batch
    with padding: the largest relative differences of the logits, the loss and every gradient."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
    from make_fixtures import build_model, loss_fn
    ok = True
    for name, s in shapes.items():
        for norm in ("post", "pre"):
            cfg = dict(model_config("transformer", s), dropout=0.0, norm=norm)
            torch.manual_seed(3)
            twin = build_model(cfg)
            with torch.no_grad():
                for n, p in twin.named_parameters():
                    if n.endswith(("gamma", "beta", "bias")):
                        p.add_(torch.rand(p.shape) * 0.2 - 0.1)
            expert = ExpertTransformer(cfg)
            transformer_from_twin(expert, twin)
            src, tgt = pair_batch(s, first_real_token, sos)
            results = []
            for model in (twin, expert):
                model.train()
                logits = model(src, tgt[:, :-1])
                loss = loss_fn(logits, tgt[:, 1:], label_smoothing)
                loss.backward()
                results.append((logits.detach(), loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
            (tl, tloss, tg), (el, eloss, eg) = results
            gradients = []
            for n, twin_names in transformer_names(expert).items():
                # A key's bias has a gradient of zero in exact arithmetic, float noise on both sides:
                # its part of a stacked bias is left out.
                parts = [(tg[t], g) for t, g in zip(twin_names, eg[n].split(tg[twin_names[0]].size(0)))
                         if not t.endswith("wk.bias")]
                gradients.append((n, torch.cat([w for w, _ in parts]), torch.cat([g for _, g in parts])))
            ok = agree(f"transformer {name} {norm}-LN", (tl, tloss), (el, eloss), gradients) and ok
    return ok


def check_seq2seq(shapes, model_config, first_real_token, sos, label_smoothing):
    """ExpertSeq2Seq against its twin (the same modules) on a padded batch, for both decoders: the
    largest relative differences of the logits, the loss and every gradient."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
    from make_fixtures import build_model, loss_fn
    ok = True
    for name, s in shapes.items():
        for decoder in ("init_state", "context_input"):
            cfg = dict(model_config("seq2seq", s), decoder=decoder)
            torch.manual_seed(5)
            twin = build_model(cfg)
            src, tgt = pair_batch(s, first_real_token, sos)
            (tl, tloss, tg), (el, eloss, eg) = passes_over_twin(twin, (twin, ExpertSeq2Seq(twin)), src, tgt, loss_fn,
                                                                label_smoothing)
            ok = agree(f"seq2seq {name} {decoder}", (tl, tloss), (el, eloss), [(n, tg[n], eg[n]) for n in tg]) and ok
    return ok


def check_attn_seq2seq(shapes, model_config, first_real_token, sos, label_smoothing):
    """ExpertAttnSeq2Seq against its twin (the same modules), with dot and additive attention, on a
    batch with padding (the packed encoder, the mask) and on one whose sources have none, as the
    bench's (the unpacked one): the largest relative differences of the logits, the loss and every
    gradient. The weights are the parity fixtures' (init_parameters): at PyTorch's default ones the
    additive attention's tanh is nearly linear, so its bias's gradient almost cancels (softmax
    ignores a shift) and comes out of the twin itself 5e-5 away from its float64 value."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
    from make_fixtures import build_model, init_parameters, loss_fn
    ok = True
    for name, s in shapes.items():
        for attention in ("dot", "additive"):
            cfg = dict(model_config("attn_seq2seq", s), attention=attention)
            torch.manual_seed(9)
            twin = build_model(cfg)
            init_parameters(twin, torch.Generator().manual_seed(9))
            for padded in (True, False):
                src, tgt = pair_batch(s, first_real_token, sos, padded)
                (tl, tloss, tg), (el, eloss, eg) = passes_over_twin(twin, (twin, ExpertAttnSeq2Seq(twin)), src, tgt,
                                                                    loss_fn, label_smoothing)
                label = f"attn_seq2seq {name} {attention} {'padded' if padded else 'unpadded'}"
                ok = agree(label, (tl, tloss), (el, eloss), [(n, tg[n], eg[n]) for n in tg]) and ok
    return ok


def bert_batch(s, rows, first_real_token, sos, padded):
    """rows texts of the shape's length, <s> first, each token's segment (the second half 1), MLM labels
    at about 15% of the real positions (<pad> elsewhere) and a class per row; with padding (one row
    shorter) if asked."""
    t, vocab = s["length"], s["vocab"]
    tokens = torch.randint(first_real_token, vocab, (rows, t))
    tokens[:, 0] = sos
    if padded:
        tokens[1, t - t // 4:] = PAD
    segments = torch.zeros_like(tokens)
    segments[:, t // 2:] = 1
    chosen = (torch.rand(rows, t) < 0.15) & (tokens != PAD)
    labels = torch.where(chosen, torch.randint(first_real_token, vocab, (rows, t)), torch.zeros_like(tokens))
    labels[:, 1] = tokens[:, 1]  # at least one scored position a row
    return tokens, segments, labels, torch.randint(0, s["classes"], (rows,))


def check_bert(shapes, bert_config, first_real_token, sos):
    """ExpertBert against the twin at each shape without dropout. Training (autograd on): on a batch with
    padding and segments, both heads' logits, their summed loss (the fixtures') and every gradient. Inference
    (eval mode, no gradients: PyTorch's fused layers): both heads' logits on the bench's batch (no padding,
    no segments) and on the padded one. True if every largest relative difference is below 1e-5."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
    from make_fixtures import build_model
    ok = True
    for name, s in shapes.items():
        cfg = dict(bert_config(s), dropout=0.0)
        torch.manual_seed(13)
        twin = build_model(cfg)
        with torch.no_grad():  # norms and biases away from 1 and 0, so that a wrong one shows
            for n, p in twin.named_parameters():
                if n.endswith(("gamma", "beta", "bias")):
                    p.add_(torch.rand(p.shape) * 0.2 - 0.1)
        expert = ExpertBert(cfg)
        bert_from_twin(expert, twin)
        tokens, segments, labels, classes = bert_batch(s, 4, first_real_token, sos, padded=True)
        results = []
        for model in (twin, expert):
            model.train()
            hidden = model(tokens, segments)
            mlm, class_logits = model.mlm_logits(hidden), model.class_logits(hidden)
            loss = F.cross_entropy(mlm.reshape(-1, mlm.size(-1)), labels.reshape(-1), ignore_index=PAD) + \
                F.cross_entropy(class_logits, classes)
            loss.backward()
            results.append((mlm.detach(), class_logits.detach(), loss.detach(),
                            {n: p.grad for n, p in model.named_parameters()}))
        (tm, tc, tloss, tg), (em, ec, eloss, eg) = results
        compared = [("class_logits", tc, ec)]
        for n, twin_names in bert_names(expert).items():
            # A key's bias has a gradient of zero in exact arithmetic, float noise on both sides:
            # its part of a stacked bias is left out.
            parts = [(tg[t], g) for t, g in zip(twin_names, eg[n].split(tg[twin_names[0]].size(0)))
                     if not t.endswith("wk.bias")]
            compared.append((n, torch.cat([w for w, _ in parts]), torch.cat([g for _, g in parts])))
        ok = agree(f"bert {name} training", (tm, tloss), (em, eloss), compared) and ok
        # forward_first: the classifier's loss and gradients as the whole forward pass gives them.
        results = []
        for first_only in (False, True):
            expert.zero_grad(set_to_none=True)
            hidden = expert.forward_first(tokens, segments) if first_only else expert(tokens, segments)
            class_logits = expert.class_logits(hidden)
            loss = F.cross_entropy(class_logits, classes)
            loss.backward()
            results.append((class_logits.detach(), loss.detach(),
                            {n: p.grad for n, p in expert.named_parameters() if p.grad is not None}))
        (wc, wloss, wg), (fc, floss, fg) = results
        ok = agree(f"bert {name} forward_first, training", (wc, wloss), (fc, floss),
                   [(n, wg[n], fg[n]) for n in wg]) and ok
        for padded in (False, True):
            tokens, segments, _, _ = bert_batch(s, 64 if not padded else 4, first_real_token, sos, padded)
            segments = segments if padded else None
            outputs = []
            for model in (twin, expert):
                model.eval()
                with torch.inference_mode():
                    hidden = model(tokens, segments)
                    outputs.append((model.mlm_logits(hidden), model.class_logits(hidden)))
            with torch.inference_mode():
                first = expert.class_logits(expert.forward_first(tokens, segments))
            (tm, tc), (em, ec) = outputs
            label = f"bert {name} inference, {'padded, two segments' if padded else 'the bench batch'}"
            ok = agree(label, (tm, torch.zeros(())), (em, torch.zeros(())),
                       [("class_logits", tc, ec), ("forward_first's class_logits", tc, first)]) and ok
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the expert models with the twins and exit")
    args = parser.parse_args()
    if not args.check:
        parser.error("--check is the only action (bench/torch_gpt.py and torch_bench.py time the models)")
    import torch_bench
    import torch_bert
    import torch_gpt
    torch.set_num_threads(1)
    ok = check(torch_gpt.SHAPES, torch_gpt.gpt_config, torch_gpt.VOCAB, torch_gpt.FIRST_REAL_TOKEN, torch_gpt.SEED)
    ok = check_transformer(torch_bench.SHAPES, torch_bench.model_config, torch_bench.FIRST_REAL_TOKEN,
                           torch_bench.SOS, torch_bench.LABEL_SMOOTHING) and ok
    ok = check_seq2seq(torch_bench.SHAPES, torch_bench.model_config, torch_bench.FIRST_REAL_TOKEN,
                       torch_bench.SOS, torch_bench.LABEL_SMOOTHING) and ok
    ok = check_attn_seq2seq(torch_bench.SHAPES, torch_bench.model_config, torch_bench.FIRST_REAL_TOKEN,
                            torch_bench.SOS, torch_bench.LABEL_SMOOTHING) and ok
    ok = check_bert(torch_bert.SHAPES, torch_bert.bert_config, torch_bert.FIRST_REAL_TOKEN, torch_bert.SOS) and ok
    print("the expert models compute the twins' functions" if ok else "an expert model DIFFERS from its twin")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
