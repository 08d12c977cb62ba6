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
                                      [--torch-settings default threads passive] [--bf16]

Columns: target tokens per second of seqgrad and of PyTorch in each setting (its best in bold),
the ratio of seqgrad to that best; seqgrad's model FLOP rate and its fraction of the sgemm peak
(MFU, see bench/model_bench.cpp); seqgrad's peak tensor memory; and each process's peak resident
memory (max RSS, PyTorch's from its best setting), the one memory figure both sides share. At
--threads 1 PyTorch's default still runs OpenBLAS on every core: its figure is printed, marked
with its cores, and left out of the ratio (bench/torch_settings.py says why).
PyTorch comes from Debian's python3-torch; without it the script says so and stops.

With --bf16 (the Transformer): seqgrad's step in float32 and with "precision": "bf16"
(train_step/transformer/<shape>/bf16), PyTorch's in float32 and under its own bfloat16 autocast
(torch_bench.py --precision bf16), each PyTorch precision in every thread setting; the table gives
seqgrad bf16's ratio to PyTorch's best float32 and to its best bf16.
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


def run_seqgrad(bench, model, shape, threads, min_time, precision="float32"):
    name = f"train_step/{model}/{shape}" + ("/bf16" if precision == "bf16" else "")
    out = subprocess.run([bench, f"--threads={threads}", f"--benchmark_filter=^{name}(/real_time)?$",
                          f"--benchmark_min_time={min_time}", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True)
    report = json.loads(out.stdout)
    if not report["benchmarks"]:
        sys.exit(f"compare.py: {bench} has no benchmark {name}")
    b = report["benchmarks"][0]
    if b.get("error_occurred"):
        sys.exit(f"compare.py: {name} did not run: {b.get('error_message', '?')}")
    return report["context"], {
        "tokens_per_second": b["tokens_per_second"],
        "gflops": b["gflops"],
        "mfu": b["mfu"],
        "peak_mib": b["peak_mib"],
        "system_allocs_per_step": b["system_allocs_per_step"],
        "max_rss_mib": b["max_rss_mib"],
    }


def run_torch(model, shape, threads, setting, min_time, precision="float32", torch_model="expert"):
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_bench.py"), "--model", model, "--shape", shape,
                          "--threads", str(threads), "--setting", setting, "--min-time", str(min_time),
                          "--precision", precision, "--torch-model", torch_model],
                         check=True, capture_output=True, text=True, env=torch_settings.environment(setting, threads))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    torch_settings.add_comparison_arguments(parser, ROOT, "timed steps")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--torch-model", choices=("expert", "twin"), default="expert",
                        help="PyTorch's Transformer, LSTM and attention LSTM encoder-decoders as an expert "
                             "writes them (bench/torch_expert.py), or the parity twins")
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--bf16", action="store_true",
                        help="the Transformer in float32 and bf16 on both sides (PyTorch: autocast)")
    args = parser.parse_args()

    torch_version = torch_settings.preflight("compare.py", args.bench)
    if args.bf16:
        compare_bf16(args, torch_version)
        return

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
                        result = run_torch(model, shape, args.threads, side, args.min_time,
                                           torch_model=args.torch_model)
                    torch_settings.keep_faster(best, (model, shape, side), result)

    print(f"seqgrad vs PyTorch {torch_version} (its models: {args.torch_model}), one training step "
          f"(forward, loss, backward, Adam), "
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


def compare_bf16(args, torch_version):
    settings = list(dict.fromkeys(args.torch_settings))
    sides = [("seqgrad", "bf16"), ("seqgrad", "float32")] + [(s, p) for p in ("float32", "bf16") for s in settings]
    best = {}
    context = {}
    for r in range(args.rounds):
        for shape in args.shapes:
            for side, precision in torch_settings.order(sides, r):
                print(f"round {r + 1}/{args.rounds}: {side} {precision} train_step/transformer/{shape}",
                      file=sys.stderr, flush=True)
                if side == "seqgrad":
                    context, result = run_seqgrad(args.bench, "transformer", shape, args.threads, args.min_time,
                                                  precision)
                else:
                    result = run_torch("transformer", shape, args.threads, side, args.min_time, precision,
                                       args.torch_model)
                torch_settings.keep_faster(best, (shape, side, precision), result)

    print(f"seqgrad vs PyTorch {torch_version}, the Transformer's training step in float32 and in bfloat16 "
          f"(seqgrad \"precision\": \"bf16\", PyTorch torch.autocast), {args.threads} threads, best of "
          f"{args.rounds} alternating runs; PyTorch's best thread setting (bench/torch_settings.py) for each")
    print(f"OpenBLAS core {context.get('openblas_core', '?')}, sgemm peak "
          f"{float(context.get('sgemm_peak_gflops', 0)):.0f} GFLOP/s (2048^3, {args.threads} threads); seqgrad's bf16 "
          f"products: oneDNN {context.get('bf16_kernel', '?')}")
    print()
    print("| step | seqgrad bf16 tok/s | seqgrad float32 | PyTorch float32 (best) | PyTorch bf16 autocast (best) "
          "| bf16 / float32, seqgrad | seqgrad bf16 / PyTorch float32 | seqgrad bf16 / PyTorch bf16 "
          "| seqgrad bf16 GFLOP/s (of the float32 peak) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape in args.shapes:
        sb, sf = best[(shape, "seqgrad", "bf16")], best[(shape, "seqgrad", "float32")]
        picks = {}
        for precision in ("float32", "bf16"):
            runs = {s: best[(shape, s, precision)] for s in settings}
            winner, run, _ = torch_settings.tokens_per_second_cells(runs, args.threads)
            picks[precision] = (run, torch_settings.label(winner, args.threads))
        (tf, tf_label), (tb, tb_label) = picks["float32"], picks["bf16"]
        print(f"| transformer/{shape} | {sb['tokens_per_second']:,.0f} | {sf['tokens_per_second']:,.0f} | "
              f"{tf['tokens_per_second']:,.0f} ({tf_label}) | {tb['tokens_per_second']:,.0f} ({tb_label}) | "
              f"{sb['tokens_per_second'] / sf['tokens_per_second']:.2f}x | "
              f"**{sb['tokens_per_second'] / tf['tokens_per_second']:.2f}x** | "
              f"**{sb['tokens_per_second'] / tb['tokens_per_second']:.2f}x** | "
              f"{sb['gflops']:.0f} ({100 * sb['mfu']:.0f}%) |")


if __name__ == "__main__":
    main()
