#!/usr/bin/env bash
# How fast a dead local peer is named, in every host wait (rendezvous, host barrier,
# host wait_signal, host all_to_all), on the host provider: RUNS (default 20) runs of
# a peer that exits cleanly and of one that is SIGKILLed, for each wait kind; prints a
# table of median and max. Any Linux machine; no GPU.
#   bench/peer_death.sh            RUNS=50 bench/peer_death.sh
set -euo pipefail
cd "$(dirname "$0")/.."
echo "$(uname -srm), $(nproc) cores, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
cargo test --release --quiet -p symmwin --test peer_death -- --ignored --exact detection_figures --nocapture 2>&1 \
  | grep -E '^\|'
