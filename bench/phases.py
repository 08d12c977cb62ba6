#!/usr/bin/python3
"""Where a training step's time goes: seqgrad_bench's phases/ benchmarks as a table.

Runs phases/<model>/<shape> (bench/model_bench.cpp: the train_step benchmarks' steps, timed by
phase and, inside the forward and backward passes, by operation) and prints, for each, the
milliseconds per step and their share of it:

    products         linear and matmul, forward and backward (sgemm, or oneDNN in bf16), and
                     the weight gradients the engine sums after a weight's last use
    attention        the fused attention (its per-head products, softmax, masking, dropout)
    LSTM cells       lstm_sequence and lstm_cell: their recurrent products and their gates
    layer_norm, dropout, elementwise (add, relu, ...), softmax_loss, embedding, shape, reduce
    gradient sums    the backward pass adding gradients that meet at a tensor
    optimizer        clipping (the GPT) and Adam/AdamW
    zero_grad, unattributed (the engine's own walk, the loss's last steps)

and two lines on MFU: the step's, and what it would be if everything but the products took no
time (the products' own rate against the sgemm peak; attention and the LSTM layers count with
them, as their own products are inside them). With --ops, a second table lists each operation's
forward and backward time.

    cmake --build build --target seqgrad_bench
    /usr/bin/python3 bench/phases.py [--bench build/bench/seqgrad_bench] [--threads 2]
                                     [--min-time 3] [--filter 'phases/attn_seq2seq/g2p'] [--ops]
                                     [--json saved-output.json]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KINDS = [
    ("products", "products (linear, matmul)"),
    ("attention", "attention"),
    ("layer_norm", "layer norm"),
    ("dropout", "dropout"),
    ("elementwise", "elementwise (add, relu, gelu, ...)"),
    ("softmax_loss", "softmax and loss"),
    ("embedding", "embedding"),
    ("shape", "reshape, slice, concat"),
    ("reduce", "sum, max"),
    ("lstm", "LSTM cells"),
    ("accumulate", "gradient sums (backward)"),
]


def run(bench, threads, min_time, pattern):
    out = subprocess.run([bench, f"--threads={threads}", f"--benchmark_filter={pattern}",
                          f"--benchmark_min_time={min_time}", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True)
    if not out.stdout.strip():  # Google Benchmark prints nothing and exits 0 when the filter matches nothing
        sys.exit(f"phases.py: no benchmark matches --filter {pattern!r} (the names end in /real_time, e.g. "
                 "phases/gpt/cpu/real_time)")
    return json.loads(out.stdout)


def split(b):
    """(pass, kind, op) -> ms from one benchmark's counters."""
    ops = {}
    for key, value in b.items():
        if not isinstance(value, (int, float)) or not key.endswith("_ms") or "/" not in key:
            continue
        direction, kind, op = key[:-3].split("/", 2)
        ops[(direction, kind, op)] = value
    return ops


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "seqgrad_bench"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-time", type=float, default=3)
    parser.add_argument("--filter", default="^phases/")
    parser.add_argument("--ops", action="store_true", help="also each operation's forward and backward time")
    parser.add_argument("--json", help="read this saved --benchmark_format=json output instead of running")
    args = parser.parse_args()

    if args.json:
        with open(args.json) as f:
            report = json.load(f)
    else:
        if not os.path.exists(args.bench):
            sys.exit(f"phases.py: no {args.bench}; build it with cmake --build build --target seqgrad_bench")
        report = run(args.bench, args.threads, args.min_time, args.filter)
    benches = [b for b in report["benchmarks"] if b["name"].startswith("phases/") and not b.get("error_occurred")]
    if not benches:
        sys.exit("phases.py: no phases/ benchmark ran")
    context = report["context"]
    print(f"seqgrad_bench on {context.get('host_name', '?')}: OpenBLAS core {context.get('openblas_core', '?')}, "
          f"{context.get('seqgrad_threads', '?')} thread(s), sgemm peak "
          f"{float(context.get('sgemm_peak_gflops', 'nan')):.0f} GFLOP/s\n")

    names = [b["name"].removeprefix("phases/").removesuffix("/real_time") for b in benches]
    print("| ms per step (share) | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))

    def row(label, values):
        print(f"| {label} | " + " | ".join(values) + " |")

    steps = [b["step_ms"] for b in benches]
    row("**step**", [f"**{s:.1f}**" for s in steps])
    row("forward / backward / optimizer",
        [f"{b['forward_ms']:.0f} / {b['backward_ms']:.0f} / {b['update_ms']:.1f}" for b in benches])
    per = [split(b) for b in benches]
    for kind, label in KINDS:
        values = []
        for ops, step in zip(per, steps):
            ms = sum(v for (_, k, _), v in ops.items() if k == kind)
            values.append(f"{ms:.1f} ({100 * ms / step:.1f}%)" if ms > 0 else "")
        if any(values):
            row(label, values)
    for label, key in (("optimizer (and clipping)", "update_ms"), ("zero_grad", "zero_grad_ms")):
        row(label, [f"{b[key]:.1f} ({100 * b[key] / step:.1f}%)" for b, step in zip(benches, steps)])
    row("unattributed", [
        f"{sum(v for (_, k, _), v in ops.items() if k in ('other',)):.1f}" for ops in per])
    row("MFU of the step", [f"{100 * b['mfu']:.1f}%" for b in benches])
    # The LSTM layers' time holds their recurrent products (and their gates' nonlinearities).
    products = [sum(v for (_, k, _), v in ops.items() if k in ("products", "attention", "lstm")) for ops in per]
    row("MFU if only products, attention and LSTM layers took time",
        [f"{100 * b['mfu'] * step / p:.1f}%" for b, step, p in zip(benches, steps, products)])

    if args.ops:
        print("\n| operation (kind) | " + " | ".join(f"{n} fwd / bwd ms" for n in names) + " |")
        print("|---|" + "---:|" * len(names))
        keys = sorted({(k, op) for ops in per for (_, k, op) in ops})
        for kind, op in keys:
            cells = []
            for ops in per:
                f, g = ops.get(("fwd", kind, op)), ops.get(("bwd", kind, op))
                cells.append("" if f is None and g is None else f"{f or 0:.2f} / {g or 0:.2f}")
            row(f"{op} ({kind})", cells)


if __name__ == "__main__":
    main()
