#!/usr/bin/env bash
# The README's first command: installs the dependencies, builds seqgrad in Release, and runs the
# main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
./build/cli/seqgrad demo
