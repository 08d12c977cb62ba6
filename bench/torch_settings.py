"""PyTorch at its best on this machine: the three thread settings every comparison in bench/ times.

Debian's PyTorch 1.13 does its matrix products with OpenBLAS (pthreads, its own pool of threads)
and its other loops with OpenMP (libgomp, another pool). On a 2-core machine it defaults to one
OpenMP thread, with OpenBLAS's threads on every core, and that default is its fastest or close to
it. torch.set_num_threads(2) alone leaves its idle OpenMP threads spinning (libgomp's active wait)
on the cores OpenBLAS's threads need: a Transformer's training step measured 1.6-2x slower that way
than at the default. OMP_WAIT_POLICY=PASSIVE, set before torch loads, puts them to sleep instead.
Which setting wins depends on the workload and the machine, so every comparison times PyTorch in
each of three settings, each in a fresh process, and divides by the fastest:

  default   PyTorch as it comes: no torch.set_num_threads call, OpenBLAS at its own default
            (every core)
  threads   torch.set_num_threads(N), OpenBLAS at N threads (OPENBLAS_NUM_THREADS=N)
  passive   as `threads`, with OMP_WAIT_POLICY=PASSIVE in the environment before torch loads

N is the seqgrad side's thread count. Each setting runs in an environment cleared of the variables
that would make it another (CLEARED below), so a shell that exports OMP_NUM_THREADS or
OMP_WAIT_POLICY does not change what a column means. OPENBLAS_CORETYPE stays: it picks the kernels
of both sides.

What is fair at one thread: at N = 1 PyTorch's default still runs OpenBLAS on every core, so it
uses more of the machine than the one-thread seqgrad side it would be compared with. A ratio
divides by the best of the settings that use at most N cores (each process reports its OpenMP and
OpenBLAS thread counts; at N = 2 on a 2-core machine that is all three). The default's figure is
printed beside the others all the same, marked with the cores it used: it is what a user gets.

The worker scripts (torch_bench.py, torch_decode.py, torch_g2p_predict.py) take --setting and
call apply() before timing anything; the comparing scripts start them with environment() and
pick the denominator with best().
"""
import ctypes
import os
import subprocess
import sys
import time

SETTINGS = ("default", "threads", "passive")

# Variables that change how PyTorch's OpenMP pool or OpenBLAS's pool run.
CLEARED = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_DYNAMIC", "OMP_PROC_BIND", "OMP_PLACES",
           "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS")


def label(setting, threads):
    """The column's name: `default`, `2 threads`, `1 thread, passive`."""
    if setting == "default":
        return "default"
    count = f"{threads} thread{'s' if threads != 1 else ''}"
    return count if setting == "threads" else f"{count}, passive"


def add_comparison_arguments(parser, root, timed):
    """The arguments every comparing script shares: --bench (seqgrad_bench, under `root`'s build/),
    --threads, --rounds, --min-time (seconds of `timed` per run) and --torch-settings."""
    parser.add_argument("--bench", default=os.path.join(root, "build", "bench", "seqgrad_bench"),
                        help="the seqgrad_bench program (default: build/bench/seqgrad_bench)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating; the best counts")
    parser.add_argument("--min-time", type=float, default=3.0, help=f"seconds of {timed} in each run")
    add_argument(parser)


def add_argument(parser):
    """--torch-settings for a comparing script: which settings to time (all three unless told)."""
    parser.add_argument("--torch-settings", nargs="+", choices=SETTINGS, default=list(SETTINGS),
                        help="PyTorch's thread settings to time (bench/torch_settings.py); the best counts")


def environment(setting, threads, base=None):
    """The environment a fresh PyTorch process runs `setting` in."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in CLEARED}
    if setting != "default":
        env["OPENBLAS_NUM_THREADS"] = str(threads)
    if setting == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


def order(sides, round_index):
    """The sides of a round: as given in even rounds, reversed in odd ones."""
    return list(sides) if round_index % 2 == 0 else list(reversed(sides))


def openblas():
    """The OpenBLAS that Debian's PyTorch calls for its matrix products (its libblas.so.3 is a
    wrapper around libopenblas.so.0, one library with one pool of threads); None if absent."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib
    except (OSError, AttributeError):
        return None


def apply(setting, threads):
    """Puts this process in `setting` at `threads` threads and returns what it runs with (see
    describe()). The environment must be right before torch loads: if it is not, the script
    starts again in its place (os.execv) with it, so a worker run by hand gets its setting too."""
    if setting not in SETTINGS or threads < 1:
        sys.exit(f"torch_settings: setting {setting!r} at {threads} threads: expected one of {SETTINGS} "
                 "and a positive thread count")
    wanted = environment(setting, threads)
    if any(os.environ.get(k) != wanted.get(k) for k in CLEARED):
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable] + sys.argv, wanted)
    import torch
    if setting != "default":
        torch.set_num_threads(threads)
    return describe(setting, threads)


def describe(setting, threads):
    """The setting as this process runs it: OpenMP and OpenBLAS threads, the cores they reach,
    OpenBLAS's kernels, the wait policy, the level of PyTorch's own kernels."""
    import torch
    blas = openblas()
    blas_threads = blas.openblas_get_num_threads() if blas is not None else 0
    torch_threads = torch.get_num_threads()
    return {
        "setting": setting,
        "label": label(setting, threads),
        "torch_threads": torch_threads,
        "blas_threads": blas_threads,
        "cores": min(os.cpu_count() or 1, max(torch_threads, blas_threads)),
        "openblas_core": blas.openblas_get_corename().decode() if blas is not None else "none",
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
        "aten_capability": aten_capability(),
    }


def aten_capability():
    """The vector level of PyTorch's own kernels (elementwise, norms, softmax): Debian's 1.13 runs
    AVX2 on an AVX-512 CPU unless ATEN_CPU_CAPABILITY=avx512 asks for more."""
    import torch
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip()
    return "?"


def summary(info):
    """One line for a report: `default: torch 1 thread(s), OpenBLAS 2 (SkylakeX), OMP_WAIT_POLICY unset,
    ATen kernels AVX2`."""
    return (f"{info['label']}: torch {info['torch_threads']} thread(s), OpenBLAS {info['blas_threads']} "
            f"({info['openblas_core']}), OMP_WAIT_POLICY {info['omp_wait_policy']}, "
            f"ATen kernels {info.get('aten_capability', '?')}")


def best(results, threads, higher=True):
    """The setting whose value is best among those that used at most `threads` cores.

    results: {setting: (value, describe() of its process)}. If none kept to `threads` cores (only
    the default was timed, at one thread), the best of all of them, so a ratio is still printed."""
    fair = {s: r for s, r in results.items() if r[1]["cores"] <= threads} or results
    pick = max if higher else min
    return pick(fair, key=lambda s: fair[s][0])


def cell(value_text, info, threads):
    """A setting's figure for a table: marked with its cores when it used more than `threads`."""
    return value_text if info["cores"] <= threads else f"{value_text} ({info['cores']} cores)"


def preflight(script, bench):
    """What a comparison script needs before it runs anything: PyTorch importable here, an
    executable seqgrad_bench at `bench`; a warning when OPENBLAS_CORETYPE overrides OpenBLAS's own
    choice of kernels. `script` names the caller in the messages. Returns PyTorch's version."""
    try:
        import torch
    except ImportError:
        sys.exit(f"{script}: PyTorch is not available to {sys.executable}, so there is nothing to compare "
                 "with. On Debian: apt install python3-torch, then run this script with /usr/bin/python3.")
    if not (os.path.isfile(bench) and os.access(bench, os.X_OK)):
        sys.exit(f"{script}: no seqgrad_bench at {bench}; build it with "
                 "`cmake --build build --target seqgrad_bench` or pass --bench")
    if os.environ.get("OPENBLAS_CORETYPE"):
        print(f"warning: OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} is set and overrides OpenBLAS's "
              "choice of kernels for both sides; unset it to measure what users get", file=sys.stderr)
    else:
        # Where OpenBLAS does not recognise the CPU, seqgrad_bench starts itself again with the
        # CPU's core (as the seqgrad program does); PyTorch, on the same OpenBLAS, gets that core too.
        core = subprocess.run([bench, "--print-blas-core"], capture_output=True, text=True,
                              check=True).stdout.strip()
        if core:
            os.environ["OPENBLAS_CORETYPE"] = core
            os.environ["SEQGRAD_BLAS_CORE_RESTART"] = core
            print(f"OpenBLAS does not recognise this CPU and would run its generic kernels: both sides run "
                  f"with OPENBLAS_CORETYPE={core}", file=sys.stderr)
    return torch.__version__


def keep_faster(best, key, result):
    """Keeps `result` as best[key] if there is none yet or it has more tokens per second: the best of
    a comparison's alternating runs."""
    if key not in best or result["tokens_per_second"] > best[key]["tokens_per_second"]:
        best[key] = result


def tokens_per_second_cells(runs, threads):
    """(the winning setting, its run, one table cell per setting) for runs {setting: counters}
    measured in tokens per second, the winner's figure in bold."""
    winner = best({k: (v["tokens_per_second"], v) for k, v in runs.items()}, threads)
    cells = []
    for setting, run in runs.items():
        figure = f"{run['tokens_per_second']:,.0f}"
        cells.append(cell(f"**{figure}**" if setting == winner else figure, run, threads))
    return winner, runs[winner], cells


def time_runs(run, warm_up, min_time):
    """Calls `run` `warm_up` times untimed, then at least 3 times and for at least `min_time`
    seconds, as Google Benchmark does: (timed runs, mean seconds a run)."""
    for _ in range(warm_up):
        run()
    runs = 0
    start = time.perf_counter()
    while runs < 3 or time.perf_counter() - start < min_time:
        run()
        runs += 1
    return runs, (time.perf_counter() - start) / runs
