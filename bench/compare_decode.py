#!/usr/bin/python3
"""seqgrad against PyTorch: decoding a Transformer-base with beam search, side by side.

For each thread count N, runs seqgrad_bench's decode/transformer_base/* benchmarks and
bench/torch_decode.py on the same weights and sources, the latter in each of PyTorch's three thread
settings (bench/torch_settings.py: its default; torch.set_num_threads(N) with OpenBLAS at N
threads; the same with OMP_WAIT_POLICY=PASSIVE), one fresh process each, alternating the order
from round to round, and prints the best of each with the ratios to PyTorch's cached decoder (the
OpenNMT-py way) in its best setting. Both sides link the same OpenBLAS; its core is named.

    cmake --build build --target seqgrad_bench
    /usr/bin/python3 bench/compare_decode.py [--bench build/bench/seqgrad_bench] [--threads 1 2]
                                             [--rounds 2] [--min-time 2]
                                             [--torch-settings default threads passive]

Rows: beam 4 over 32 sentences of 25 tokens, exactly 30 steps (target tokens per second):
seqgrad with its weights packed in float32 (what its Translator does), through sgemm, and in int8
(the option); PyTorch caching keys and values, and nn.Transformer recomputing the prefix. Then the
same ending at </s>, and the latency of one sentence decoded greedily (ms). Each PyTorch row
shows its best figure, the setting that gave it, and the figure of every setting; each row's best
is taken on its own. At one thread PyTorch's default still runs OpenBLAS on both cores: it is
shown, marked with its cores, and left out of the best (bench/torch_settings.py says why).
PyTorch comes from Debian's python3-torch; without it the script says so and stops.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import torch_settings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEQGRAD = {  # benchmark -> row
    "beam4": "seqgrad float32 (packed)",
    "beam4_sgemm": "seqgrad float32 (sgemm)",
    "beam4_int8": "seqgrad int8",
    "beam4_bf16": "seqgrad bf16",
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
    rows, labels, refused = {}, {}, {}
    for b in report["benchmarks"]:
        name = b["name"].split("/")[2]
        row = SEQGRAD[name]
        if b.get("error_occurred"):  # bf16 on a CPU without it: the row says why, in the table
            refused[row] = b.get("error_message", "?")
            continue
        rows[row] = b["ms_per_batch"] if row.endswith(LATENCY) else b["tokens_per_second"]
        labels[row] = b.get("label", "")
    return report["context"], rows, labels, refused


def run_torch(threads, setting, repeats):
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_decode.py"), "--threads", str(threads),
                          "--setting", setting, "--repeats", str(repeats)], check=True, capture_output=True,
                         text=True, cwd=ROOT, env=torch_settings.environment(setting, threads))
    rows, header, info = {}, "", {}
    for line in out.stdout.splitlines():
        if line.startswith("#"):
            header = line
        if line.startswith("setting="):
            info = json.loads(line[len("setting="):])
        for key, row in TORCH.items():
            if f" {key}:" in line:
                number = re.search(r"tgt_tokens/s=([0-9.]+)|([0-9.]+) ms", line)
                rows[row] = float(number.group(1) or number.group(2))
    return header, rows, info


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
    torch_settings.add_argument(parser)
    args = parser.parse_args()
    torch_settings.preflight("compare_decode.py", args.bench)

    settings = list(dict.fromkeys(args.torch_settings))
    measured = {}  # threads -> (best, torch_best, infos, refused)
    for threads in args.threads:
        best, context, labels, headers, infos, refused = {}, {}, {}, {}, {}, {}
        for r in range(args.rounds):
            for side in torch_settings.order(["seqgrad"] + settings, r):
                if side == "seqgrad":
                    context, rows, labels, refused = run_seqgrad(args.bench, threads, args.min_time)
                    keyed = rows
                else:
                    headers[side], rows, infos[side] = run_torch(threads, side, 1)
                    keyed = {(row, side): value for row, value in rows.items()}
                for key, value in keyed.items():
                    row = key if side == "seqgrad" else key[0]
                    best[key] = better(row, best.get(key), value)
        print(f"\n{threads} thread(s): OpenBLAS {context.get('openblas_core', '?')}, OPENBLAS_CORETYPE "
              f"{context.get('OPENBLAS_CORETYPE', '?')}, sgemm peak {float(context.get('sgemm_peak_gflops', 0)):.0f} "
              f"GFLOP/s; best of {args.rounds} alternating rounds; PyTorch in each setting of "
              "bench/torch_settings.py, the ratios to its best")
        for setting in settings:
            print(headers[setting])
        # Each PyTorch row at its best setting: (value, setting).
        torch_best = {}
        for row in TORCH.values():
            results = {s: (best[(row, s)], infos[s]) for s in settings if (row, s) in best}
            if results:
                winner = torch_settings.best(results, threads, higher=not row.endswith(LATENCY))
                torch_best[row] = (results[winner][0], winner)
        reference = torch_best.get("PyTorch cached", (None,))[0]
        latency_reference = torch_best.get("PyTorch, 1 sentence greedy (ms)", (None,))[0]
        for row in SEQGRAD.values():
            if row in refused:
                print(f"  {row:42s} refused: {refused[row]}")
            if row not in best:
                continue
            value = best[row]
            if row.endswith(LATENCY):
                ratio = latency_reference / value if latency_reference else float("nan")
                print(f"  {row:42s} {value:9.1f} ms   {ratio:5.2f}x   {labels.get(row, '')}")
            else:
                ratio = value / reference if reference else float("nan")
                print(f"  {row:42s} {value:9.1f} tok/s {ratio:5.2f}x   {labels.get(row, '')}")
        for row, (value, winner) in torch_best.items():
            unit = "ms   " if row.endswith(LATENCY) else "tok/s"
            each = " | ".join(torch_settings.cell(f"{torch_settings.label(s, threads)} {best[(row, s)]:.1f}", infos[s],
                                                  threads) for s in settings if (row, s) in best)
            print(f"  {row:42s} {value:9.1f} {unit} best: {torch_settings.label(winner, threads)}   ({each})")
        print("  (ratios: tokens per second over PyTorch cached's at its best; latency: PyTorch's best ms over "
              "the row's)")
        measured[threads] = (best, torch_best, infos, refused)
    print_table(measured, settings)


def print_table(measured, settings):
    """The runs above as docs/performance.md's decoding table: a column per thread count."""
    def each(threads, row, unit):
        best, _, infos, _ = measured[threads]
        return " / ".join(torch_settings.cell(f"{best[(row, s)]:,.0f}", infos[s], threads) if (row, s) in best
                          else "-" for s in settings) + unit

    def at_best(threads, row, unit):
        _, torch_best, _, _ = measured[threads]
        if row not in torch_best:
            return "-"
        value, winner = torch_best[row]
        return f"{value:,.0f}{unit} ({torch_settings.label(winner, threads)})"

    def seqgrad(threads, row, bold=False):
        best, torch_best, _, refused = measured[threads]
        if row in refused:  # the reason's first clause: "bf16 needs the avx512 level"
            return "refused: " + refused[row].split(",")[0]
        if row not in best or "PyTorch cached" not in torch_best:
            return "-"
        ratio = f"{best[row] / torch_best['PyTorch cached'][0]:.2f}x"
        return f"{best[row]:,.0f} tok/s, {f'**{ratio}**' if bold else ratio}"

    def pair(threads, rows, unit):
        best, torch_best, _, _ = measured[threads]
        values = [best.get(r) if r.startswith("seqgrad") else torch_best.get(r, (None,))[0] for r in rows]
        return " / ".join("-" if v is None else f"{v:,.0f}" for v in values) + unit

    columns = list(measured)
    names = " / ".join(torch_settings.label(s, "N") for s in settings)
    lines = [
        ("seqgrad, float32, weights packed (what `predict` and the `Translator` do)",
         lambda t: seqgrad(t, "seqgrad float32 (packed)", True)),
        ("seqgrad, float32 through OpenBLAS's sgemm (`beam4_sgemm`)", lambda t: seqgrad(t, "seqgrad float32 (sgemm)")),
        ("seqgrad, int8 (`--int8`, `beam4_int8`)", lambda t: seqgrad(t, "seqgrad int8")),
        ("seqgrad, bf16 (`--bf16`, `beam4_bf16`)", lambda t: seqgrad(t, "seqgrad bf16")),
        ("PyTorch 1.13, key/value cache, at its best", lambda t: at_best(t, "PyTorch cached", " tok/s")),
        (f"PyTorch 1.13, key/value cache: {names}", lambda t: each(t, "PyTorch cached", " tok/s")),
        ("PyTorch 1.13, `nn.Transformer` recomputing the prefix, at its best",
         lambda t: at_best(t, "PyTorch nn.Transformer, recomputing", " tok/s")),
        ("ending at `</s>`: seqgrad float32 / PyTorch cached at its best",
         lambda t: pair(t, ["seqgrad float32, to </s>", "PyTorch cached, to </s>"], " tok/s")),
        ("one sentence, greedy, 30 steps: seqgrad float32 / int8 / PyTorch at its best",
         lambda t: pair(t, ["seqgrad, 1 sentence greedy (ms)", "seqgrad int8, 1 sentence greedy (ms)",
                            "PyTorch, 1 sentence greedy (ms)"], " ms")),
    ]
    print("\n| beam 4, 32 sentences, 30 steps | " +
          " | ".join(f"{t} thread{'s' if t != 1 else ''}" for t in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name, cell in lines:
        print(f"| {name} | " + " | ".join(cell(t) for t in columns) + " |")


if __name__ == "__main__":
    main()
