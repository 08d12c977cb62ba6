#!/usr/bin/python3
"""seqgrad against PyTorch: whole training steps, side by side on this machine.

For each model and shape, runs seqgrad_bench's train_step/<model>/<shape> and
bench/torch_bench.py's version of the same step in each of PyTorch's three thread settings
(bench/torch_settings.py: its default; torch.set_num_threads(N); N threads with
OMP_WAIT_POLICY=PASSIVE), one fresh process each, alternating the order from round to round, and
prints the best of each, with the ratio of seqgrad to PyTorch's best setting.

    cmake --build build --target seqgrad_bench
    /usr/bin/python3 bench/compare.py [--bench build/bench/seqgrad_bench] [--threads 2]
                                      [--rounds 2] [--min-time 3] [--models ...] [--shapes ...]
                                      [--torch-settings default threads passive]

Columns: target tokens per second of seqgrad and of PyTorch in each setting (its best in bold),
the ratio of seqgrad to that best; seqgrad's model FLOP rate and its fraction of the sgemm peak
(MFU, see bench/model_bench.cpp); seqgrad's peak tensor memory; and each process's peak resident
memory (max RSS, PyTorch's from its best setting), the one memory figure both sides share. At
--threads 1 PyTorch's default still runs OpenBLAS on every core: its figure is printed, marked
with its cores, and left out of the ratio (bench/torch_settings.py says why).
PyTorch comes from Debian's python3-torch; without it the script says so and stops.
"""
import argparse
import json
import os
import subprocess
import sys

import torch_settings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ("transformer", "attn_seq2seq", "seq2seq")
SHAPES = ("seed", "small", "g2p")


def run_seqgrad(bench, model, shape, threads, min_time):
    name = f"train_step/{model}/{shape}"
    out = subprocess.run([bench, f"--threads={threads}", f"--benchmark_filter=^{name}(/real_time)?$",
                          f"--benchmark_min_time={min_time}", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True)
    report = json.loads(out.stdout)
    if not report["benchmarks"]:
        sys.exit(f"compare.py: {bench} has no benchmark {name}")
    b = report["benchmarks"][0]
    return report["context"], {
        "tokens_per_second": b["tokens_per_second"],
        "gflops": b["gflops"],
        "mfu": b["mfu"],
        "peak_mib": b["peak_mib"],
        "system_allocs_per_step": b["system_allocs_per_step"],
        "max_rss_mib": b["max_rss_mib"],
    }


def run_torch(model, shape, threads, setting, min_time):
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_bench.py"), "--model", model, "--shape", shape,
                          "--threads", str(threads), "--setting", setting, "--min-time", str(min_time)],
                         check=True, capture_output=True, text=True, env=torch_settings.environment(setting, threads))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    torch_settings.add_comparison_arguments(parser, ROOT, "timed steps")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    args = parser.parse_args()

    torch_version = torch_settings.preflight("compare.py", args.bench)

    settings = list(dict.fromkeys(args.torch_settings))
    best = {}
    context = {}
    for r in range(args.rounds):
        for model in args.models:
            for shape in args.shapes:
                for side in torch_settings.order(["seqgrad"] + settings, r):
                    print(f"round {r + 1}/{args.rounds}: {side} train_step/{model}/{shape}", file=sys.stderr,
                          flush=True)
                    if side == "seqgrad":
                        context, result = run_seqgrad(args.bench, model, shape, args.threads, args.min_time)
                    else:
                        result = run_torch(model, shape, args.threads, side, args.min_time)
                    key = (model, shape, side)
                    if key not in best or result["tokens_per_second"] > best[key]["tokens_per_second"]:
                        best[key] = result

    print(f"seqgrad vs PyTorch {torch_version}, one training step (forward, loss, backward, Adam), "
          f"{args.threads} threads, best of {args.rounds} alternating runs; PyTorch in each setting of "
          "bench/torch_settings.py, the ratio to its best")
    print(f"OpenBLAS core {context.get('openblas_core', '?')}, OPENBLAS_CORETYPE "
          f"{context.get('OPENBLAS_CORETYPE', '?')}, "
          f"sgemm peak {float(context.get('sgemm_peak_gflops', 0)):.0f} GFLOP/s (2048^3, {args.threads} threads)")
    first = (args.models[0], args.shapes[0])
    for setting in settings:
        print(f"PyTorch {torch_settings.summary(best[first + (setting,)])}")
    print()
    columns = " | ".join(f"PyTorch {torch_settings.label(s, args.threads)} tok/s" for s in settings)
    print(f"| step | seqgrad tok/s | {columns} | ratio | seqgrad GFLOP/s | MFU | seqgrad tensors MiB "
          "| max RSS MiB seqgrad / PyTorch | allocs/step |")
    print("|---|---:|" + "---:|" * len(settings) + "---:|---:|---:|---:|---:|---:|")
    for model in args.models:
        for shape in args.shapes:
            s = best[(model, shape, "seqgrad")]
            runs = {setting: best[(model, shape, setting)] for setting in settings}
            _, t, cells = torch_settings.tokens_per_second_cells(runs, args.threads)
            print(f"| {model}/{shape} | {s['tokens_per_second']:,.0f} | {' | '.join(cells)} | "
                  f"{s['tokens_per_second'] / t['tokens_per_second']:.2f}x | {s['gflops']:.0f} | "
                  f"{100 * s['mfu']:.0f}% | "
                  f"{s['peak_mib']:.0f} | {s['max_rss_mib']:.0f} / {t['max_rss_mib']:.0f} | "
                  f"{s['system_allocs_per_step']:g} |")


if __name__ == "__main__":
    main()
