#!/usr/bin/env bash
# seqgrad against PyTorch on this machine, in one command: builds seqgrad_bench (Release, in
# build/), then runs bench/compare.py, which alternates seqgrad's and PyTorch's training steps for
# the three models at the three shapes, PyTorch in each of its three thread settings
# (bench/torch_settings.py), and prints the table of ratios to PyTorch's best. Needs Debian's
# python3-torch for the PyTorch side. Arguments go to compare.py (e.g. --rounds 3, --shapes g2p).
# If OPENBLAS_CORETYPE is set in your environment it forces OpenBLAS's kernels for both sides;
# `env -u OPENBLAS_CORETYPE bash scripts/bench.sh` measures what OpenBLAS picks by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)" --target seqgrad_bench
/usr/bin/python3 bench/compare.py --bench build/bench/seqgrad_bench "$@"
