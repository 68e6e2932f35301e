#!/usr/bin/env bash
# Per-packet cost breakdown of the soft RoCE provider (issue 19; docs/roce.md
# "Per-packet costs"): builds the release binary (debug line tables are on in the
# release profile) and runs scripts/roce_profile.py, which prints markdown tables.
#   bash scripts/roce_profile.sh [--scale 0.5] [--cases write4k,write64k,lat2] [--no-callgrind] [--no-strace]
# Needs valgrind and strace (apt-get install valgrind strace). BIN=path skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."
for t in valgrind strace; do
    command -v "$t" >/dev/null || { echo "roce_profile: $t missing (apt-get install valgrind strace)" >&2; exit 1; }
done
if [[ -z "${BIN:-}" ]]; then
    nice -n 19 cargo build --release -p dpustack >&2
    BIN=target/release/dpustack
fi
exec python3 scripts/roce_profile.py --bin "$BIN" "$@"
