#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ (libfuzzer-sys, stable toolchain via
# RUSTC_BOOTSTRAP=1) with a time budget each, and prints per target: executions,
# execs/s, coverage (libFuzzer's cov = edges, ft = features), corpus size, and
# crashes (crash/leak/timeout/oom artifacts written by this run).
#
#   scripts/fuzz.sh [TARGET...] [--secs N] [--runs N] [--asan] [--dev]
#     TARGET   one or more of `scripts/fuzz.sh --list` (default: all)
#     --secs   budget per target in seconds (default 60)
#     --runs   also stop a target after N executions (libFuzzer -runs)
#     --asan   build with AddressSanitizer (default: no sanitizer; overflow
#              checks and debug assertions are always on)
#     --dev    dev profile instead of release (builds several times faster, runs
#              slower: the test suite's 2-s smoke uses it; campaigns should not)
#     FUZZ_NICE (environment): nice level of the build and the runs (default 10)
#
# The build is `cargo fuzz build -O -a` (cargo-fuzz 0.13) spelled out: the same
# RUSTFLAGS (SanitizerCoverage instrumentation, --cfg fuzzing, debug assertions)
# through plain cargo, so cargo-fuzz need not be installed (installing it took
# minutes of every fresh CI run).
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
DEV=0
NICE=${FUZZ_NICE:-10}
TARGETS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --secs) SECS=$2; shift 2 ;;
        --secs=*) SECS=${1#--secs=}; shift ;;
        --runs) RUNS=$2; shift 2 ;;
        --runs=*) RUNS=${1#--runs=}; shift ;;
        --asan) SAN=address; shift ;;
        --dev) DEV=1; shift ;;
        --list) sed -n 's/^name = "\(.*\)"/\1/p' fuzz/Cargo.toml | grep -v dpustack-fuzz; exit 0 ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done
ALL=$(sed -n 's/^name = "\(.*\)"/\1/p' fuzz/Cargo.toml | grep -v dpustack-fuzz)
[ ${#TARGETS[@]} -eq 0 ] && read -r -a TARGETS <<<"$(echo $ALL)"
for t in "${TARGETS[@]}"; do
    grep -qx "$t" <<<"$ALL" || { echo "fuzz.sh: no target $t (try --list)" >&2; exit 2; }
done

# The AddressSanitizer build goes to a directory of its own, so that switching
# between the two does not rebuild every instrumented crate.
if [ "$SAN" = address ]; then
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/fuzz-asan}
else
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
fi
mkdir -p "$CARGO_TARGET_DIR"   # a fresh clone has none yet (the build log goes there)
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
PROFILE=release; [ "$DEV" = 1 ] && PROFILE=debug
echo "fuzz.sh: building ${#TARGETS[@]} target(s) (sanitizer: $SAN, profile: $PROFILE)" >&2
# what `cargo fuzz build -O -a [-s address]` passes (cargo-fuzz 0.13 src/project.rs)
FLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
FLAGS+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
FLAGS+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
FLAGS+=" -Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cllvm-args=-sanitizer-coverage-stack-depth"
FLAGS+=" -Cdebug-assertions"
[ "$SAN" = address ] && FLAGS+=" -Zsanitizer=address"
# release: one codegen unit (the coverage passes block ThinLTO imports otherwise)
build_args=(build --manifest-path fuzz/Cargo.toml --target "$TRIPLE" --bins)
if [ "$DEV" = 1 ]; then
    build_args+=(--config 'profile.dev.debug="line-tables-only"')
    BIN=$CARGO_TARGET_DIR/$TRIPLE/debug
else
    FLAGS+=" -Ccodegen-units=1"
    build_args+=(--release --config 'profile.release.debug="line-tables-only"')
    BIN=$CARGO_TARGET_DIR/$TRIPLE/release
fi
# one target: only its binary (`--bin=NAME` in place of `--bins`, one word: a bare
# `--bin` followed by the other options would take none of them as its value)
[ ${#TARGETS[@]} -eq 1 ] && build_args=("${build_args[@]/#--bins/--bin=${TARGETS[0]}}")
[ "$SAN" = address ] && export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_odr_violation=0}
if ! RUSTFLAGS="$FLAGS ${RUSTFLAGS:-}" RUSTC_BOOTSTRAP=1 nice -n "$NICE" cargo "${build_args[@]}" \
        >"$CARGO_TARGET_DIR/fuzz-build.log" 2>&1; then
    tail -40 "$CARGO_TARGET_DIR/fuzz-build.log" >&2
    exit 2
fi

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
