#!/usr/bin/python3
"""The PyTorch side of seqgrad_bench's train_step benchmarks.

One training step of the same model, at the same shape, with the same batch recipe as
bench/model_bench.cpp: zero_grad, forward, cross-entropy with label smoothing 0.1 ignoring
padding, backward, Adam (lr 1e-4). The models are the PyTorch versions that make the parity
fixtures (tests/fixtures/make_fixtures.py), so both sides run exactly the same computation; by
default each as a PyTorch expert writes it (--torch-model expert, bench/torch_expert.py, all with
zero_grad(set_to_none=True)): the Transformer as ExpertTransformer with the twin's weights
(nn.LayerNorm, fused q/k/v and k/v products, additive masks), the LSTM encoder-decoder with its
teacher-forced decoder as one nn.LSTM call (ExpertSeq2Seq), and the attention LSTM with only its
attention and cells in the decoder's step loop, which it needs (the attention reads the state of
the step before), and the rest before or after it (ExpertAttnSeq2Seq); `torch_expert.py --check`
holds all three to the twins' function. --torch-model twin times the twins themselves.

    /usr/bin/python3 bench/torch_bench.py --model transformer --shape g2p [--threads 2]
                                          [--setting default|threads|passive]
                                          [--precision float32|bf16]

prints one JSON object: seconds per step (the mean over the timed steps, as Google Benchmark
reports), tokens_per_second, the process's peak resident memory (max_rss_mib), and the thread
setting it ran in with its OpenMP and OpenBLAS threads and OpenBLAS's kernels
(bench/torch_settings.py: `default` is PyTorch as it comes, `threads` torch.set_num_threads(N),
`passive` that with OMP_WAIT_POLICY=PASSIVE; bench/compare.py times all three). With
--precision bf16 the forward pass and the loss run under torch.autocast("cpu", torch.bfloat16),
PyTorch's own mixed precision (its products in bfloat16, weights and optimizer in float32), the
counterpart of seqgrad's "precision": "bf16". Needs python3-torch (Debian's build).
"""
import argparse
import json
import os
import resource
import sys

import torch_settings

HERE = os.path.dirname(os.path.abspath(__file__))

# The shapes of model_bench.cpp: batch, source length, target length, width, heads, d_ff,
# layers, source and target vocabularies.
SHAPES = {
    "seed": dict(batch=32, src_len=10, tgt_len=12, width=512, heads=8, d_ff=2048, layers=6,
                 src_vocab=10000, tgt_vocab=12000),
    "small": dict(batch=64, src_len=32, tgt_len=32, width=256, heads=4, d_ff=1024, layers=3,
                  src_vocab=1000, tgt_vocab=1000),
    "g2p": dict(batch=256, src_len=12, tgt_len=12, width=256, heads=4, d_ff=1024, layers=3,
                src_vocab=40, tgt_vocab=44),
}
MODELS = ("transformer", "attn_seq2seq", "seq2seq")
LSTM_LAYERS = 2
LABEL_SMOOTHING = 0.1
FIRST_REAL_TOKEN = 4
SOS = 1


def model_config(model, s):
    if model == "transformer":
        return dict(model=model, src_vocab=s["src_vocab"], tgt_vocab=s["tgt_vocab"], d_model=s["width"],
                    n_heads=s["heads"], n_layers=s["layers"], d_ff=s["d_ff"], max_seq_len=64, norm="post",
                    activation="relu", dropout=0.1)
    return dict(model=model, src_vocab=s["src_vocab"], tgt_vocab=s["tgt_vocab"], hidden_size=s["width"],
                num_layers=LSTM_LAYERS, decoder="init_state", attention="dot")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--threads", type=int, default=2, help="N of the `threads` and `passive` settings")
    parser.add_argument("--setting", choices=torch_settings.SETTINGS, default="passive",
                        help="PyTorch's thread setting (bench/torch_settings.py)")
    parser.add_argument("--min-time", type=float, default=3.0, help="seconds of timed steps (at least 3 steps)")
    parser.add_argument("--torch-model", choices=("expert", "twin"), default="expert",
                        help="the models as an expert writes them (bench/torch_expert.py), or the parity twins")
    parser.add_argument("--precision", choices=("float32", "bf16"), default="float32",
                        help="bf16: the forward pass and loss under torch.autocast(\"cpu\", torch.bfloat16)")
    args = parser.parse_args()

    try:
        import torch
    except ImportError:
        sys.exit("torch_bench.py: PyTorch is not installed for this interpreter (Debian: apt install python3-torch)")
    setting = torch_settings.apply(args.setting, args.threads)
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
    from make_fixtures import build_model, loss_fn

    torch.manual_seed(7)
    s = SHAPES[args.shape]
    model = build_model(model_config(args.model, s))
    expert = args.torch_model == "expert"
    if expert:  # the same weights in the expert's layout (the LSTMs': the twin's own modules)
        import torch_expert
        if args.model == "transformer":
            twin, model = model, torch_expert.ExpertTransformer(model_config(args.model, s))
            torch_expert.transformer_from_twin(model, twin)
        elif args.model == "seq2seq":
            model = torch_expert.ExpertSeq2Seq(model)
        else:
            model = torch_expert.ExpertAttnSeq2Seq(model)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    src = torch.randint(FIRST_REAL_TOKEN, s["src_vocab"], (s["batch"], s["src_len"]))
    tgt = torch.randint(FIRST_REAL_TOKEN, s["tgt_vocab"], (s["batch"], s["tgt_len"] + 1))
    tgt[:, 0] = SOS
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]

    autocast = args.precision == "bf16"

    def step():
        optimizer.zero_grad(set_to_none=expert)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(model(src, tgt_in), tgt_out, LABEL_SMOOTHING)
        loss.backward()
        optimizer.step()
        return loss.item()

    # Two untimed steps: Adam's state exists, the allocator is warm.
    steps, seconds = torch_settings.time_runs(step, 2, args.min_time)
    print(json.dumps({
        "name": f"train_step/{args.model}/{args.shape}" + ("/bf16" if autocast else ""),
        "precision": args.precision,
        "model": "expert" if expert else "twin",
        "torch_version": torch.__version__,
        **setting,
        "steps": steps,
        "seconds_per_step": seconds,
        "tokens_per_second": s["batch"] * s["tgt_len"] / seconds,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }))


if __name__ == "__main__":
    main()
