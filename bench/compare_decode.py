#!/usr/bin/python3
"""seqgrad against PyTorch: decoding a Transformer-base with beam search, side by side.

For each thread count, runs seqgrad_bench's decode/transformer_base/* benchmarks and
bench/torch_decode.py on the same weights and sources, one process each, alternating which goes
first from round to round, and prints the best of each side with the ratios to PyTorch's cached
decoder (the OpenNMT-py way). Both sides link the same OpenBLAS; its core is named.

    cmake --build build --target seqgrad_bench
    /usr/bin/python3 bench/compare_decode.py [--bench build/bench/seqgrad_bench] [--threads 1 2]
                                             [--rounds 2] [--min-time 2]

Rows: beam 4 over 32 sentences of 25 tokens, exactly 30 steps (target tokens per second):
seqgrad with its weights packed in float32 (what its Translator does), through sgemm, and in int8
(the option); PyTorch caching keys and values, and nn.Transformer recomputing the prefix. Then the
same ending at </s>, and the latency of one sentence decoded greedily (ms). PyTorch comes from
Debian's python3-torch; without it the script says so and stops.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEQGRAD = {  # benchmark -> row
    "beam4": "seqgrad float32 (packed)",
    "beam4_sgemm": "seqgrad float32 (sgemm)",
    "beam4_int8": "seqgrad int8",
    "beam4_eos": "seqgrad float32, to </s>",
    "beam1_latency": "seqgrad, 1 sentence greedy (ms)",
    "beam1_latency_int8": "seqgrad int8, 1 sentence greedy (ms)",
}
TORCH = {  # torch_decode.py line -> row
    "cached fixed beam4": "PyTorch cached",
    "recompute fixed beam4": "PyTorch nn.Transformer, recomputing",
    "cached eos beam4": "PyTorch cached, to </s>",
    "cached beam1 latency": "PyTorch, 1 sentence greedy (ms)",
}
LATENCY = ("(ms)",)


def run_seqgrad(bench, threads, min_time):
    names = "|".join(SEQGRAD)
    out = subprocess.run([bench, f"--threads={threads}", f"--benchmark_filter=^decode/transformer_base/({names})/",
                          f"--benchmark_min_time={min_time}", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True)
    report = json.loads(out.stdout)
    rows, labels = {}, {}
    for b in report["benchmarks"]:
        name = b["name"].split("/")[2]
        row = SEQGRAD[name]
        rows[row] = b["ms_per_batch"] if row.endswith(LATENCY) else b["tokens_per_second"]
        labels[row] = b.get("label", "")
    return report["context"], rows, labels


def run_torch(threads, repeats):
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_decode.py"), "--threads", str(threads),
                          "--repeats", str(repeats)], check=True, capture_output=True, text=True, cwd=ROOT)
    rows, header = {}, ""
    for line in out.stdout.splitlines():
        if line.startswith("#"):
            header = line
        for key, row in TORCH.items():
            if f" {key}:" in line:
                number = re.search(r"tgt_tokens/s=([0-9.]+)|([0-9.]+) ms", line)
                rows[row] = float(number.group(1) or number.group(2))
    return header, rows


def better(row, a, b):
    if a is None:
        return b
    return min(a, b) if row.endswith(LATENCY) else max(a, b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "seqgrad_bench"),
                        help="the seqgrad_bench program (default: build/bench/seqgrad_bench)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating; the best counts")
    parser.add_argument("--min-time", type=float, default=2.0, help="seconds of timed decoding per benchmark")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("compare_decode.py: PyTorch is missing (apt-get install python3-torch; run /usr/bin/python3)")
    if not os.path.exists(args.bench):
        sys.exit(f"compare_decode.py: {args.bench} is missing (cmake --build build --target seqgrad_bench)")

    for threads in args.threads:
        best, context, labels, header = {}, {}, {}, ""
        for r in range(args.rounds):
            order = ("seqgrad", "torch") if r % 2 == 0 else ("torch", "seqgrad")
            for side in order:
                if side == "seqgrad":
                    context, rows, labels = run_seqgrad(args.bench, threads, args.min_time)
                else:
                    header, rows = run_torch(threads, 1)
                for row, value in rows.items():
                    best[row] = better(row, best.get(row), value)
        print(f"\n{threads} thread(s): OpenBLAS {context.get('openblas_core', '?')}, OPENBLAS_CORETYPE "
              f"{context.get('OPENBLAS_CORETYPE', '?')}, sgemm peak {float(context.get('sgemm_peak_gflops', 0)):.0f} "
              f"GFLOP/s; best of {args.rounds} alternating rounds")
        print(header)
        reference = best.get("PyTorch cached")
        latency_reference = best.get("PyTorch, 1 sentence greedy (ms)")
        for row in list(SEQGRAD.values()) + list(TORCH.values()):
            if row not in best:
                continue
            value = best[row]
            if row.endswith(LATENCY):
                ratio = latency_reference / value if latency_reference else float("nan")
                print(f"  {row:42s} {value:9.1f} ms   {ratio:5.2f}x   {labels.get(row, '')}")
            else:
                ratio = value / reference if reference else float("nan")
                print(f"  {row:42s} {value:9.1f} tok/s {ratio:5.2f}x   {labels.get(row, '')}")
        print("  (ratios: tokens per second over PyTorch cached's; latency: PyTorch's ms over the row's)")


if __name__ == "__main__":
    main()
