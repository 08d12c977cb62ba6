#!/usr/bin/python3
"""seqgrad against PyTorch: a GPT's and a BERT's training steps, sampling and classifying, side by side.

For each of seqgrad_bench's GPT benchmarks (train_step/gpt/cpu, train_step/gpt/baby,
generate/gpt/baby; the default) or BERT benchmarks (train_step/bert/<langid|small|mini>[/mlm],
classify/bert/<langid|small|mini>; `--benchmarks bert` names them all, `bert-bf16` the same in
bfloat16, `bert-int8` the classifying in int8), runs it and
bench/torch_gpt.py's or bench/torch_bert.py's version of the same work in each of
PyTorch's three thread settings (bench/torch_settings.py: its default; torch.set_num_threads(N);
N threads with OMP_WAIT_POLICY=PASSIVE), one fresh process each, alternating the order from round
to round, and prints the best of each with the ratio of seqgrad to PyTorch's best setting.

    cmake --build build --target seqgrad_bench
    /usr/bin/python3 bench/compare_gpt.py [--bench build/bench/seqgrad_bench] [--threads 2]
                                          [--rounds 2] [--min-time 3] [--benchmarks ...]
                                          [--torch-settings default threads passive]

Columns: tokens per second of seqgrad and of PyTorch in each setting (its best in bold; training:
batch x context tokens, sampling: new tokens, classifying: 64 texts' tokens), the ratio of seqgrad
to that best; for training and classifying also seqgrad's model FLOP rate and its fraction of the
sgemm peak (MFU); for training its peak tensor memory,
each process's peak resident memory (PyTorch's from its best setting) and seqgrad's allocations
from the system per step. A benchmark that this seqgrad_bench does not have is named as missing,
and PyTorch's figures are printed without a ratio. At --threads 1 PyTorch's default still runs
OpenBLAS on every core: its figure is printed, marked with its cores, and left out of the ratio
(bench/torch_settings.py says why). PyTorch comes from Debian's python3-torch; without it the
script says so and stops.
"""
import argparse
import json
import os
import subprocess
import sys

import torch_settings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GPT_BENCHMARKS = ("train_step/gpt/cpu", "train_step/gpt/baby", "generate/gpt/baby")
BERT_BENCHMARKS = tuple(f"{kind}/bert/{shape}{suffix}" for shape in ("langid", "small", "mini")
                        for kind, suffix in (("train_step", ""), ("train_step", "/mlm"), ("classify", "")))
BERT_BF16_BENCHMARKS = tuple(f"{kind}/bert/{shape}{suffix}/bf16" for shape in ("langid", "small", "mini")
                             for kind, suffix in (("train_step", ""), ("train_step", "/mlm"), ("classify", "")))
BERT_INT8_BENCHMARKS = tuple(f"classify/bert/{shape}/int8" for shape in ("langid", "small", "mini"))
BENCHMARKS = GPT_BENCHMARKS + BERT_BENCHMARKS + BERT_BF16_BENCHMARKS + BERT_INT8_BENCHMARKS
TRAIN_COUNTERS = ("tokens_per_second", "gflops", "mfu", "peak_mib", "system_allocs_per_step", "max_rss_mib")
CLASSIFY_COUNTERS = ("tokens_per_second", "texts_per_second", "gflops", "mfu")


def run_seqgrad(bench, name, threads, min_time):
    """(context, counters), or (context, None) when seqgrad_bench has no benchmark `name`."""
    out = subprocess.run([bench, f"--threads={threads}", f"--benchmark_filter=^{name}(/real_time)?$",
                          f"--benchmark_min_time={min_time}", "--benchmark_format=json"],
                         capture_output=True, text=True)
    try:
        report = json.loads(out.stdout)
    except json.JSONDecodeError:
        report = None
    if report is None or not report.get("benchmarks"):
        if out.returncode != 0 and "match any benchmark" not in out.stderr:
            sys.exit(f"compare_gpt.py: {bench} failed (exit status {out.returncode}):\n{out.stderr.strip()}")
        return (report or {}).get("context", {}), None
    b = report["benchmarks"][0]
    counters = TRAIN_COUNTERS if name.startswith("train_step/") else \
        CLASSIFY_COUNTERS if name.startswith("classify/") else ("tokens_per_second",)
    missing = [c for c in counters if c not in b]
    if missing:
        sys.exit(f"compare_gpt.py: {bench}'s {name} lacks the counters {', '.join(missing)}")
    return report["context"], {c: b[c] for c in counters}


def cpu_name():
    """The CPU's model name and family/model numbers, from /proc/cpuinfo."""
    fields = {}
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return "?"
    return f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')})"


def run_torch(name, threads, setting, min_time, model):
    worker = "torch_bert.py" if "/bert/" in name else "torch_gpt.py"
    out = subprocess.run([sys.executable, os.path.join(HERE, worker), "--benchmark", name, "--threads",
                          str(threads), "--setting", setting, "--min-time", str(min_time), "--model", model],
                         check=True, capture_output=True, text=True, env=torch_settings.environment(setting, threads))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    torch_settings.add_comparison_arguments(parser, ROOT, "timed steps or sampling")
    parser.add_argument("--benchmarks", nargs="+", choices=BENCHMARKS + ("gpt", "bert", "bert-bf16", "bert-int8"),
                        default=["gpt"], help="benchmarks to compare; `gpt` and `bert` name each model's, "
                        "`bert-bf16` the BERT's in bfloat16 (PyTorch: torch.autocast for steps, bfloat16 weights to "
                        "classify), `bert-int8` classifying in int8 (PyTorch: quantize_dynamic) (default: gpt)")
    parser.add_argument("--torch-model", choices=("expert", "twin"), default="expert",
                        help="PyTorch's model as an expert writes it (bench/torch_expert.py), or the parity twin")
    args = parser.parse_args()
    groups = {"gpt": GPT_BENCHMARKS, "bert": BERT_BENCHMARKS, "bert-bf16": BERT_BF16_BENCHMARKS,
              "bert-int8": BERT_INT8_BENCHMARKS}
    args.benchmarks = [b for name in args.benchmarks for b in groups.get(name, (name,))]

    torch_version = torch_settings.preflight("compare_gpt.py", args.bench)

    settings = list(dict.fromkeys(args.torch_settings))
    benchmarks = list(dict.fromkeys(args.benchmarks))
    best, context, missing = {}, {}, set()
    for r in range(args.rounds):
        for name in benchmarks:
            sides = [s for s in ["seqgrad"] + settings if not (s == "seqgrad" and name in missing)]
            for side in torch_settings.order(sides, r):
                print(f"round {r + 1}/{args.rounds}: {side} {name}", file=sys.stderr, flush=True)
                if side == "seqgrad":
                    found, result = run_seqgrad(args.bench, name, args.threads, args.min_time)
                    context = found or context
                    if result is None:
                        missing.add(name)
                        print(f"compare_gpt.py: {args.bench} has no benchmark {name}: it is missing from "
                              "bench/model_bench.cpp or from this build; PyTorch is timed alone", file=sys.stderr)
                        continue
                else:
                    result = run_torch(name, args.threads, side, args.min_time, args.torch_model)
                torch_settings.keep_faster(best, (name, side), result)

    print(f"seqgrad vs PyTorch {torch_version} (bench/torch_gpt.py, torch_bert.py; PyTorch's model: "
          f"{args.torch_model}): training steps (forward, loss, backward, clipping, AdamW), sampling with a "
          f"key/value cache, classifying 64 texts; {args.threads} threads, best of {args.rounds} alternating runs; "
          f"PyTorch in each setting of bench/torch_settings.py, the ratio to its best")
    print(f"CPU {cpu_name()}; seqgrad's kernels {context.get('kernels', '?')}, products of weights on "
          f"{context.get('products of weights', '?')}, oneDNN {context.get('oneDNN', '?')}")
    print(f"OpenBLAS core {context.get('openblas_core', '?')}, OPENBLAS_CORETYPE "
          f"{context.get('OPENBLAS_CORETYPE', '?')}, "
          f"sgemm peak {float(context.get('sgemm_peak_gflops', 0)):.0f} GFLOP/s (2048^3, {args.threads} threads)")
    for setting in settings:
        print(f"PyTorch {torch_settings.summary(best[(benchmarks[0], setting)])}")
    for name in benchmarks:
        if name in missing:
            print(f"MISSING: seqgrad_bench has no benchmark {name}; its row shows PyTorch alone")
    print()
    columns = " | ".join(f"PyTorch {torch_settings.label(s, args.threads)} tok/s" for s in settings)
    print(f"| benchmark | seqgrad tok/s | {columns} | ratio | seqgrad GFLOP/s | MFU | seqgrad tensors MiB "
          "| max RSS MiB seqgrad / PyTorch | allocs/step |")
    print("|---|---:|" + "---:|" * len(settings) + "---:|---:|---:|---:|---:|---:|")
    for name in benchmarks:
        runs = {setting: best[(name, setting)] for setting in settings}
        _, t, cells = torch_settings.tokens_per_second_cells(runs, args.threads)
        s = best.get((name, "seqgrad"))
        if s is None:
            print(f"| {name} | missing | {' | '.join(cells)} | - | - | - | - | - / {t['max_rss_mib']:.0f} | - |")
            continue
        ratio = f"{s['tokens_per_second'] / t['tokens_per_second']:.2f}x"
        if name.startswith("train_step/"):
            extra = (f"{s['gflops']:.0f} | {100 * s['mfu']:.0f}% | {s['peak_mib']:.0f} | "
                     f"{s['max_rss_mib']:.0f} / {t['max_rss_mib']:.0f} | {s['system_allocs_per_step']:g}")
        elif name.startswith("classify/"):
            extra = f"{s['gflops']:.0f} | {100 * s['mfu']:.0f}% | - | - / {t['max_rss_mib']:.0f} | -"
        else:
            extra = f"- | - | - | - / {t['max_rss_mib']:.0f} | -"
        print(f"| {name} | {s['tokens_per_second']:,.0f} | {' | '.join(cells)} | {ratio} | {extra} |")
    # seqgrad's int8 classification against PyTorch's fastest classification of the same shape in
    # any precision timed in this run (its int8 is slower than its float32 on these models).
    for name in benchmarks:
        s = best.get((name, "seqgrad"))
        if s is None or not (name.startswith("classify/") and name.endswith("/int8")):
            continue
        base = name[:-len("/int8")]
        torch_best = {n: torch_settings.tokens_per_second_cells({st: best[(n, st)] for st in settings},
                                                                 args.threads)[1]
                      for n in (base, base + "/bf16", name) if n in benchmarks}
        fastest = max(torch_best, key=lambda n: torch_best[n]["tokens_per_second"])
        t = torch_best[fastest]
        print(f"\n{name}: seqgrad {s['tokens_per_second']:,.0f} tok/s against PyTorch's fastest classification in "
              f"this run ({fastest}, {t['tokens_per_second']:,.0f} tok/s): "
              f"{s['tokens_per_second'] / t['tokens_per_second']:.2f}x")


if __name__ == "__main__":
    main()
