#!/usr/bin/env bash
# The README's first command: installs the dependencies, builds seqgrad in Release, and runs the
# main job: a Transformer (the recipe of docs/results.md, configs/g2p-transformer.json)
# trained on CMUdict grapheme-to-phoneme for a few minutes, then its dev WER and PER and some
# words with their predicted pronunciations. runs/quickstart is its scratch directory, replaced on
# every run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
rm -rf runs/quickstart
./build/cli/seqgrad train --task g2p --model transformer --config configs/g2p-transformer.json \
  --minutes "${SEQGRAD_MINUTES:-3}" --dev-limit 1000 --out runs/quickstart
