#!/usr/bin/env bash
# How fast a dead local peer is named, in every host wait (rendezvous, host barrier,
# host wait_signal, host all_to_all) on the host provider, or with --cuda in every
# device wait (device barrier, wait_signal, all_to_all; both ranks may share a GPU):
# RUNS (default 20) runs of a peer that exits cleanly and of one that is SIGKILLed, for
# each wait kind; prints a table of median and max. Host: any Linux machine, no GPU.
#   bench/peer_death.sh            RUNS=50 bench/peer_death.sh        bench/peer_death.sh --cuda
# Where there is no cargo (a GPU machine), BIN=path runs a prebuilt test binary
# (peer_death or cuda_peer_death, from `cargo test --release --no-run`).
set -euo pipefail
cd "$(dirname "$0")/.."
test=peer_death
[[ "${1:-}" == --cuda ]] && test=cuda_peer_death
echo "$(uname -srm), $(nproc) cores, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $test"
if [[ -n "${BIN:-}" ]]; then
  "$BIN" --ignored --exact detection_figures --nocapture 2>&1 | grep -E '^\|'
else
  cargo test --release --quiet -p symmwin --test "$test" -- --ignored --exact detection_figures --nocapture 2>&1 \
    | grep -E '^\|'
fi
