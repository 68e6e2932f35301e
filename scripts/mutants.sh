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
#     bash scripts/mutants.sh                  chosen files (CRATE:FILE-GLOB[,FILE-GLOB...],
#                                              space separated; one cargo-mutants run each)
#   knobs: MUTANTS_TIMEOUT (s per test run, default 120), MUTANTS_JOBS (1),
#          MUTANTS_OUT (mutants.out), MUTANTS_LIST=1 (list the mutants, run nothing),
#          MUTANTS_SHARDING=round-robin (shard k/n = mutants k, k+n, k+2n ... of the
#          target: a sample spread over the whole target; default: cargo-mutants' slice,
#          one contiguous run of mutants), MUTANTS_IN_PLACE=1 (mutate this tree in place
#          and build in its own target dir: no copy, no cold baseline build. Only in a
#          scratch worktree: refused when the tree has uncommitted changes, because a
#          killed run can leave a mutation behind)
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
TARGETS=${MUTANTS_TARGETS:-"wire:crates/wire/src/** nvme:crates/nvme/src/** flow:crates/flow/src/classifier.rs,crates/flow/src/xlate.rs tse:crates/tse/src/**"}
set -f   # the targets' globs are cargo-mutants' (--file), not the shell's
if [ -n "${MUTANTS_IN_PLACE:-}" ] && [ -z "${MUTANTS_LIST:-}" ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "MUTANTS_IN_PLACE=1 mutates the tree: run it in a clean scratch worktree (git worktree add), not here"; exit 2
fi

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
  args=(--package "$crate" --timeout "$TIMEOUT" --output "$dir" --no-shuffle)
  IFS=, read -ra files <<< "$file"
  for f in "${files[@]}"; do args+=(--file "$f"); done
  [ "$crate" = tse ] && args+=(--exclude "crates/tse/src/demo.rs")
  [ -n "$SHARD" ] && args+=(--shard "$SHARD")
  [ -n "$SHARD" ] && [ -n "${MUTANTS_SHARDING:-}" ] && args+=(--sharding "$MUTANTS_SHARDING")
  # in place there is one tree, so one job
  if [ -n "${MUTANTS_IN_PLACE:-}" ]; then args+=(--in-place); else args+=(--jobs "$JOBS"); fi
  echo "=== $crate $file${SHARD:+ (shard $SHARD${MUTANTS_SHARDING:+, $MUTANTS_SHARDING})}"
  if [ -n "${MUTANTS_LIST:-}" ]; then cargo mutants "${args[@]}" --list; continue; fi
  cargo mutants "${args[@]}" > "$dir.log" 2>&1; rc=$?
  # cargo-mutants: 0 all caught, 2 missed, 3 timeouts; 1 usage error, 4 baseline failed
  case $rc in 0|2|3) ;; *) echo "ERROR: cargo mutants exit $rc, no result for $crate $file:"; tail -5 "$dir.log"; total_missed=$((total_missed+1)); continue ;; esac
  m="$dir/mutants.out"
  # one number: grep -c prints 0 (and exits 1) for an empty file, so no "|| echo 0"
  cnt() { local c=0; [ -f "$m/$1.txt" ] && c=$(grep -c . "$m/$1.txt"); echo "${c:-0}"; }
  echo "$crate $file: caught $(cnt caught), missed $(cnt missed), timed out $(cnt timeout), unviable $(cnt unviable) (cargo mutants exit $rc; log $dir.log)"
  [ -s "$m/missed.txt" ] && sed 's/^/  missed: /' "$m/missed.txt"
  total_missed=$((total_missed + $(cnt missed)))
done
echo "missed mutants in total: $total_missed"
