#!/usr/bin/python3
"""The PyTorch side of seqgrad_bench's BERT benchmarks: two training steps and classifying texts.

The model is the BERT of the parity fixtures (tests/fixtures/make_fixtures.py, class BERT): Post-LN,
exact GELU, learned positions, two segment types, the MLM output tied to the token embedding,
LayerNorm eps 1e-6, BERT's initialisation (matrices and embeddings N(0, 0.02), biases zero). By
default (--model expert) it runs as a PyTorch expert writes it, bench/torch_expert.py's ExpertBert
with the twin's weights (nn.LayerNorm, one q/k/v product, no mask for texts without padding,
zero_grad with set_to_none, and in inference PyTorch's fused encoder layer); --model twin times
the parity twin itself, written to match seqgrad's parameters.

Shapes (batch, length, width, heads, d_ff, layers, vocabulary, classes), dropout 0.1:
  langid  32,  64, 128, 4,  512, 2, 8004, 11   the recipe (configs/bert-langid.json) on the language-id set
  small   32, 128, 256, 4, 1024, 4,  300, 12   four layers of 256 over rows of 128 characters
  mini    64,  64, 128, 2,  512, 2, 1000,  2   a two-layer BERT of word pieces

  train_step/bert/<shape>       one fine-tuning step: zero_grad, forward_first over batch texts (<s>
                                first, then random ids, no padding, every token segment 0; the last
                                layer for the first position alone), cross-entropy of the
                                classifier's logits on the first position against a class a row,
                                backward, clip_grad_norm_ 1.0, AdamW (lr 1e-4, betas 0.9 and 0.999,
                                eps 1e-8, weight decay 0.01 on parameters of rank >= 2 only)
  train_step/bert/<shape>/mlm   the masked language model's step: the same with cross-entropy of the
                                MLM head's logits over the labelled positions (about 15%), the head
                                run at those positions only (index_select), as seqgrad's mlm_loss
      tokens_per_second = batch x length / seconds per step
  train_step/bert/<shape>[/mlm]/bf16  the same step with its forward pass and loss under
                                torch.autocast("cpu", torch.bfloat16), PyTorch's mixed precision
  classify/bert/<shape>         64 texts in eval mode under torch.inference_mode(): forward_first
                                (PyTorch's fused layers but the last), class_logits and a softmax.
                                tokens_per_second = 64 x length / seconds per batch
                                (texts_per_second beside it)
  classify/bert/<shape>/bf16    the same with the model's weights and activations in bfloat16
                                (model.to(torch.bfloat16)), the probabilities in float32: faster
                                than autocast here, and than torch.quantization.quantize_dynamic's
                                int8 (the /int8 row)
  classify/bert/<shape>/int8    the same with PyTorch's int8 for CPU inference:
                                torch.quantization.quantize_dynamic on the model's nn.Linear layers
                                (int8 weights, each input quantized per product), beside seqgrad's
                                --int8 (compare_gpt.py sets it against PyTorch's best precision too)

    /usr/bin/python3 bench/torch_bert.py --benchmark train_step/bert/langid [--threads 2]
                                         [--setting default|threads|passive] [--min-time 3]
                                         [--model expert|twin]

prints one JSON object, as bench/torch_gpt.py does: seconds per step (or per batch of texts; the
mean over the timed runs, after warm-up ones), tokens_per_second, the process's peak resident memory
(max_rss_mib), and the thread setting it ran in (bench/torch_settings.py; bench/compare_gpt.py times
all three). bench/torch_expert.py --check checks that ExpertBert computes the twin's function. Needs
python3-torch (Debian's build).
"""
import argparse
import json
import os
import resource
import sys

import torch_settings

HERE = os.path.dirname(os.path.abspath(__file__))

# The shapes of the seqgrad side's BERT benchmarks (bench/model_bench.cpp's kBertShapes).
SHAPES = {
    "langid": dict(batch=32, length=64, width=128, heads=4, d_ff=512, layers=2, vocab=8004, classes=11),
    "small": dict(batch=32, length=128, width=256, heads=4, d_ff=1024, layers=4, vocab=300, classes=12),
    "mini": dict(batch=64, length=64, width=128, heads=2, d_ff=512, layers=2, vocab=1000, classes=2),
}
BENCHMARKS = tuple(f"{kind}/bert/{shape}{suffix}" for shape in SHAPES
                   for kind, suffix in (("train_step", ""), ("train_step", "/mlm"), ("classify", ""),
                                        ("train_step", "/bf16"), ("train_step", "/mlm/bf16"), ("classify", "/bf16"),
                                        ("classify", "/int8")))
DROPOUT = 0.1
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 1e-4, (0.9, 0.999), 1e-8, 0.01, 1.0
CLASSIFIED_TEXTS = 64
MASKED = 0.15
FIRST_REAL_TOKEN, SOS, PAD = 4, 1, 0
SEED = 7


def bert_config(s):
    return dict(model="bert", vocab=s["vocab"], max_seq_len=s["length"], d_model=s["width"], n_heads=s["heads"],
                n_layers=s["layers"], d_ff=s["d_ff"], n_classes=s["classes"], type_vocab=2, dropout=DROPOUT,
                norm="post", activation="gelu", positional="learned", tie_output=True)


def init_bert(torch, model, gen):
    """BERT's initialisation, seqgrad's Bert's: matrices and embeddings N(0, 0.02), biases zero."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02, generator=gen)
            elif name.endswith(".bias"):
                p.zero_()


def adamw(torch, model):
    """AdamW with weight decay on matrices and embeddings alone."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS)


def texts(torch, s, rows, gen):
    """rows texts of the shape's length: <s> first, then random ids, no padding."""
    ids = torch.randint(FIRST_REAL_TOKEN, s["vocab"], (rows, s["length"]), generator=gen)
    ids[:, 0] = SOS
    return ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=BENCHMARKS, required=True, help="the benchmark to run")
    parser.add_argument("--threads", type=int, default=2, help="N of the `threads` and `passive` settings")
    parser.add_argument("--setting", choices=torch_settings.SETTINGS, default="passive",
                        help="PyTorch's thread setting (bench/torch_settings.py)")
    parser.add_argument("--min-time", type=float, default=3.0, help="seconds of timed runs (at least 3 runs)")
    parser.add_argument("--model", choices=("expert", "twin"), default="expert",
                        help="PyTorch as an expert writes it (bench/torch_expert.py), or the parity twin")
    args = parser.parse_args()

    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        sys.exit("torch_bert.py: PyTorch is not installed for this interpreter (Debian: apt install python3-torch)")
    setting = torch_settings.apply(args.setting, args.threads)
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
    from make_fixtures import build_model

    parts = args.benchmark.split("/")
    kind, s, mlm, bf16, int8 = parts[0], SHAPES[parts[2]], "mlm" in parts[3:], parts[-1] == "bf16", parts[-1] == "int8"
    cfg = bert_config(s)
    torch.manual_seed(SEED)
    model = build_model(cfg)
    init_bert(torch, model, torch.Generator().manual_seed(SEED))
    if args.model == "expert":  # the same weights in the expert's layout
        import torch_expert
        expert = torch_expert.ExpertBert(cfg)
        torch_expert.bert_from_twin(expert, model)
        model = expert
    gen = torch.Generator().manual_seed(SEED)
    # What the classifier reads: the expert runs the last layer for the first position alone, as
    # seqgrad does; the twin runs every layer in full.
    first_of = model.forward_first if args.model == "expert" else model

    if kind == "train_step":
        model.train()
        optimizer = adamw(torch, model)
        tokens = texts(torch, s, s["batch"], gen)
        if mlm:
            chosen = torch.rand(tokens.shape, generator=gen) < MASKED
            labels = torch.where(chosen, torch.randint(FIRST_REAL_TOKEN, s["vocab"], tokens.shape, generator=gen),
                                 torch.full_like(tokens, PAD))

            chosen_rows = chosen.view(-1).nonzero().squeeze(1)
            chosen_labels = labels.view(-1)[chosen_rows]

            def loss_of(tokens):  # the head at the labelled positions only, as seqgrad's mlm_loss
                hidden = model(tokens)
                picked = hidden.reshape(-1, hidden.size(-1)).index_select(0, chosen_rows)
                return F.cross_entropy(model.mlm_logits(picked), chosen_labels)
        else:
            classes = torch.randint(0, s["classes"], (s["batch"],), generator=gen)

            def loss_of(tokens):
                return F.cross_entropy(model.class_logits(first_of(tokens)), classes)

        def run():
            optimizer.zero_grad(set_to_none=args.model == "expert")
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = loss_of(tokens)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()
            return loss.item()

        warm_up, rows = 2, s["batch"]  # AdamW's state exists, the allocator is warm
    else:
        model.eval()
        if bf16:
            model.to(torch.bfloat16)
        if int8:
            if args.model == "expert":  # the last layer's query and keys/values as layers of their own
                model.layers[-1].split_query()
            model = torch.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            first_of = model.forward_first if args.model == "expert" else model
        batch = texts(torch, s, CLASSIFIED_TEXTS, gen)

        def run():
            with torch.inference_mode():
                return torch.softmax(model.class_logits(first_of(batch)).float(), dim=-1)

        warm_up, rows = 1, CLASSIFIED_TEXTS

    runs, seconds = torch_settings.time_runs(run, warm_up, args.min_time)
    print(json.dumps({
        "name": args.benchmark,
        "torch_version": torch.__version__,
        "model": args.model,
        **setting,
        "runs": runs,
        "seconds_per_step" if kind == "train_step" else "seconds_per_batch": seconds,
        "tokens_per_second": rows * s["length"] / seconds,
        "texts_per_second": rows / seconds,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }))


if __name__ == "__main__":
    main()
