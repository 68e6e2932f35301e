#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ (cargo-fuzz, stable toolchain via
# RUSTC_BOOTSTRAP=1) with a time budget each, and prints per target: executions,
# execs/s, coverage (libFuzzer's cov = edges, ft = features), corpus size, and
# crashes (crash/leak/timeout/oom artifacts written by this run).
#
#   scripts/fuzz.sh [TARGET...] [--secs N] [--runs N] [--asan]
#     TARGET   one or more of `scripts/fuzz.sh --list` (default: all)
#     --secs   budget per target in seconds (default 60)
#     --runs   also stop a target after N executions (libFuzzer -runs)
#     --asan   build with AddressSanitizer (default: no sanitizer; overflow
#              checks and debug assertions are always on)
#     FUZZ_NICE (environment): nice level of the build and the runs (default 10)
#
# Seeds: fuzz/seeds/TARGET (in git, small). Working corpus: fuzz/corpus/TARGET,
# crashes: fuzz/artifacts/TARGET (both git-ignored). Exit status 1 if any target
# crashed, 2 on a build or usage error. docs/fuzzing.md has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SECS=60
RUNS=-1
SAN=none
NICE=${FUZZ_NICE:-10}
TARGETS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --secs) SECS=$2; shift 2 ;;
        --secs=*) SECS=${1#--secs=}; shift ;;
        --runs) RUNS=$2; shift 2 ;;
        --runs=*) RUNS=${1#--runs=}; shift ;;
        --asan) SAN=address; shift ;;
        --list) sed -n 's/^name = "\(.*\)"/\1/p' fuzz/Cargo.toml | grep -v dpustack-fuzz; exit 0 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done
ALL=$(sed -n 's/^name = "\(.*\)"/\1/p' fuzz/Cargo.toml | grep -v dpustack-fuzz)
[ ${#TARGETS[@]} -eq 0 ] && read -r -a TARGETS <<<"$(echo $ALL)"
for t in "${TARGETS[@]}"; do
    grep -qx "$t" <<<"$ALL" || { echo "fuzz.sh: no target $t (try --list)" >&2; exit 2; }
done
command -v cargo-fuzz >/dev/null || { echo "fuzz.sh: cargo-fuzz missing: cargo install cargo-fuzz" >&2; exit 2; }

# The AddressSanitizer build goes to a directory of its own, so that switching
# between the two does not rebuild every instrumented crate.
if [ "$SAN" = address ]; then
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/fuzz-asan}
else
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
fi
mkdir -p "$CARGO_TARGET_DIR"   # a fresh clone has none yet (the build log goes there)
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
echo "fuzz.sh: building ${#TARGETS[@]} target(s) (sanitizer: $SAN)" >&2
build_args=(build -O -a -s "$SAN")
[ ${#TARGETS[@]} -eq 1 ] && build_args+=("${TARGETS[0]}")
if ! RUSTC_BOOTSTRAP=1 nice -n "$NICE" cargo fuzz "${build_args[@]}" >"$CARGO_TARGET_DIR/fuzz-build.log" 2>&1; then
    tail -40 "$CARGO_TARGET_DIR/fuzz-build.log" >&2
    exit 2
fi
BIN=$CARGO_TARGET_DIR/$TRIPLE/release

printf '%-16s %10s %9s %7s %7s %6s %7s\n' target execs execs/s cov ft corpus crashes
failed=0
for t in "${TARGETS[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t" "fuzz/seeds/$t"
    log=$CARGO_TARGET_DIR/fuzz-$t.log
    before=$(find "fuzz/artifacts/$t" -type f | wc -l)
    rc=0
    nice -n "$NICE" "$BIN/$t" -max_total_time="$SECS" -runs="$RUNS" -print_final_stats=1 -timeout=10 \
        -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="fuzz/artifacts/$t/" \
        "fuzz/corpus/$t" "fuzz/seeds/$t" >"$log" 2>&1 || rc=$?
    after=$(find "fuzz/artifacts/$t" -type f | wc -l)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
    crashes=$((after - before))
    printf '%-16s %10s %9s %7s %7s %6s %7s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes"
    if [ "$rc" -ne 0 ] || [ "$crashes" -gt 0 ]; then
        failed=1
        echo "  $t: exit $rc; log $log; new artifacts:" >&2
        ls -t "fuzz/artifacts/$t" | head -n "$crashes" | sed "s|^|    fuzz/artifacts/$t/|" >&2
        grep -m3 -E "panicked|ERROR: libFuzzer|SUMMARY" "$log" | sed 's/^/    /' >&2 || true
    fi
done
exit $failed
