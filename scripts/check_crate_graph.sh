#!/usr/bin/env bash
# Checks that the workspace crates depend on each other along exactly the layers of
# docs/design.md, and nothing else:
#
#   symmwin-device <- symmwin-host, symmwin-cuda <- symmwin <- symmwin-capi, symmwin-cli
#
# (symmwin also depends on symmwin-device directly). A new arrow between workspace
# crates, or a missing one, fails with both lists printed; change the expected list
# below only together with the drawing in docs/design.md.
#
# Usage: scripts/check_crate_graph.sh   (reads `cargo metadata`; builds nothing)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

expected="symmwin -> symmwin-cuda
symmwin -> symmwin-device
symmwin -> symmwin-host
symmwin-capi -> symmwin
symmwin-cli -> symmwin
symmwin-cuda -> symmwin-device
symmwin-host -> symmwin-device"

# Normal and build dependencies (not dev) of each workspace member on another member,
# with every feature on, so an optional arrow counts too.
actual="$(cargo metadata --format-version 1 --no-deps --all-features | python3 -c '
import json, sys
meta = json.load(sys.stdin)
members = {p["name"] for p in meta["packages"]}
edges = sorted(
    p["name"] + " -> " + d["name"]
    for p in meta["packages"]
    for d in p["dependencies"]
    if d["name"] in members and d["kind"] in (None, "build")
)
print("\n".join(sorted(set(edges))))
')"

if [[ "$actual" != "$expected" ]]; then
  echo "the workspace crates' dependencies differ from the layers:" >&2
  diff -u <(echo "$expected") <(echo "$actual") --label expected --label actual >&2 || true
  exit 1
fi
echo "crate graph: $(echo "$actual" | wc -l) edges, as drawn"
