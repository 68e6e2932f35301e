#!/bin/bash
# Mutation testing of the protocol cores (issue 21): does a check fail when the code it
# checks is wrong? cargo-mutants changes one thing at a time (a return value, an
# operator, a match arm ...) and runs that crate's tests; a mutant no test notices is
# "missed". Not part of CI (hours on a 2-core machine): run it by hand, time-bounded
# and sharded. Installs cargo-mutants (crates.io) if it is missing.
#
#   bash scripts/mutants.sh                    every target below, all mutants
#   MUTANTS_SHARD=2/8 bash scripts/mutants.sh  the third of 8 slices of each target
#   MUTANTS_TARGETS="wire:crates/wire/src/roce/bth.rs nvme:crates/nvme/src/sgl.rs" \
#     bash scripts/mutants.sh                  chosen files (CRATE:FILE-GLOB, space separated)
#   knobs: MUTANTS_TIMEOUT (s per test run, default 120), MUTANTS_JOBS (1),
#          MUTANTS_OUT (mutants.out), MUTANTS_LIST=1 (list the mutants, run nothing)
#
# Default targets: wire, nvme, flow's classifier and xlate, tse (its demo excluded).
# Output: $MUTANTS_OUT/<crate>[-<n>]/mutants.out/{caught,missed,timeout,unviable}.txt and
# outcomes.json, and one summary line per target: caught / missed / timed out /
# unviable. Missed mutants get a test, or a written reason in docs/mutants.md.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd); cd "$ROOT"
TIMEOUT=${MUTANTS_TIMEOUT:-120}
JOBS=${MUTANTS_JOBS:-1}
OUT=${MUTANTS_OUT:-$ROOT/mutants.out}
SHARD=${MUTANTS_SHARD:-}
TARGETS=${MUTANTS_TARGETS:-"wire:crates/wire/src/** nvme:crates/nvme/src/** flow:crates/flow/src/classifier.rs flow:crates/flow/src/xlate.rs tse:crates/tse/src/**"}

if ! cargo mutants --version >/dev/null 2>&1; then
  echo "installing cargo-mutants (cargo install --locked cargo-mutants) ..."
  cargo install --locked cargo-mutants || { echo "cargo install cargo-mutants failed"; exit 1; }
fi
cargo mutants --version

mkdir -p "$OUT"
n=0 total_missed=0
for t in $TARGETS; do
  crate=${t%%:*} file=${t#*:} n=$((n+1))
  dir="$OUT/$crate-$n"
  args=(--package "$crate" --file "$file" --timeout "$TIMEOUT" --jobs "$JOBS" --output "$dir" --no-shuffle)
  [ "$crate" = tse ] && args+=(--exclude "crates/tse/src/demo.rs")
  [ -n "$SHARD" ] && args+=(--shard "$SHARD")
  echo "=== $crate $file${SHARD:+ (shard $SHARD)}"
  if [ -n "${MUTANTS_LIST:-}" ]; then cargo mutants "${args[@]}" --list; continue; fi
  cargo mutants "${args[@]}" > "$dir.log" 2>&1; rc=$?
  m="$dir/mutants.out"
  # one number: grep -c prints 0 (and exits 1) for an empty file, so no "|| echo 0"
  cnt() { local c=0; [ -f "$m/$1.txt" ] && c=$(grep -c . "$m/$1.txt"); echo "${c:-0}"; }
  echo "$crate $file: caught $(cnt caught), missed $(cnt missed), timed out $(cnt timeout), unviable $(cnt unviable) (cargo mutants exit $rc; log $dir.log)"
  [ -s "$m/missed.txt" ] && sed 's/^/  missed: /' "$m/missed.txt"
  total_missed=$((total_missed + $(cnt missed)))
done
echo "missed mutants in total: $total_missed"
