#!/bin/bash
# Interop stage: boots the QEMU guest with real Linux peers (rdma_rxe, rdma-core,
# perftest, nvme-cli, nvmet), runs every tests/interop/[0-9]*.sh against it, stops
# the guest on exit, and prints "N passed, M failed" (last line; scripts/test-all.sh
# parses it). N and M count checks of dpustack only.
#
# Each test script is run with bash and these variables:
#   V    path of vm.sh (the harness)   BIN  the dpustack binary (DPUSTACK_BIN, default
#                                        target/release/dpustack)
#   CARGO_FEATS  cargo feature flags the scripts' own cargo commands use (test-all.sh
#                sets the ones of its build, so nothing is rebuilt under other features)
#   ROOT the project root              P    the harness's probes/ directory
# and reports, one per line:
#   PLAN n                 how many checks of dpustack it will report (declared first)
#   PASS name [detail]     a check of dpustack that passed   (counted in N)
#   FAIL name [detail]     a check of dpustack that failed   (counted in M)
#   SKIP name (why)        a planned check that could not run: a failure when CI=true,
#                          otherwise reported and kept out of the total
#   HARNESS PASS|FAIL ...  a check of the harness or of the Linux peers themselves
#                          (self-test, librdmacm-vs-librdmacm baseline): outside the
#                          total; any HARNESS FAIL makes run.sh exit non-zero
#   INFO ... / GOAL ...    figures (measurements, baselines) and goals: not checks
# A script that reports fewer PASS+FAIL(+SKIP) lines than its PLAN, that reports more
# PASS/SKIP lines than planned, that prints no PLAN, or that exits non-zero without a
# FAIL line, counts as failed (one FAIL per missing check).
#   INTEROP_ONLY='03-*' run.sh   runs a subset;  VMH_KEEP=1 leaves the guest up.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export ROOT V=$ROOT/tests/peers/vm.sh P=$ROOT/tests/peers/probes BIN=${DPUSTACK_BIN:-$ROOT/target/release/dpustack}
export CARGO_FEATS=${CARGO_FEATS:-}
# the build profile, for the perf scripts' figures (a dev build's are not the release's)
case "$BIN" in */debug/*) BIN_PROFILE=dev ;; */release/*) BIN_PROFILE=release ;; *) BIN_PROFILE=unknown ;; esac
export BIN_PROFILE
[ -x "$BIN" ] && echo "dpustack binary: $BIN (profile: $BIN_PROFILE)"
pass=0 fail=0 skip=0 hfail=0 hpass=0 t0=$(date +%s)
CI_MODE=0; [ "${CI:-}" = true ] && CI_MODE=1
out=$(mktemp)
started=0
cleanup() { [ $started = 1 ] && [ -z "${VMH_KEEP:-}" ] && bash $V stop >/dev/null 2>&1; rm -f $out; }
trap cleanup EXIT INT TERM

echo "INFO host CPU: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed "s/^ *//") ($(nproc) CPUs)"
bash $V build >/dev/null || { echo "HARNESS FAIL harness-build"; echo "0 passed, 1 failed"; exit 1; }
if ! bash $V status >/dev/null 2>&1; then
  bash $V start || { echo "HARNESS FAIL guest-boot"; echo "0 passed, 1 failed"; exit 1; }
  started=1
fi

for t in $ROOT/tests/interop/${INTEROP_ONLY:-[0-9]*.sh}; do
  [ -f "$t" ] || continue
  name=$(basename $t .sh)
  echo "== $name"
  s0=$(date +%s)
  timeout ${INTEROP_TIMEOUT:-900} bash $t > $out 2>&1; rc=$?
  sed 's/^/   /' $out
  p=$(grep -c '^PASS ' $out); f=$(grep -c '^FAIL ' $out); s=$(grep -c '^SKIP ' $out)
  hp=$(grep -c '^HARNESS PASS ' $out); hf=$(grep -c '^HARNESS FAIL ' $out)
  plan=$(sed -n 's/^PLAN \([0-9][0-9]*\)$/\1/p' $out | tail -1)
  if [ -z "$plan" ]; then
    f=$((f+1)); echo "FAIL $name (no PLAN line: the script does not say how many checks it makes)"
  else
    short=$(( plan - p - f - s ))
    if [ $short -gt 0 ]; then
      f=$((f+short)); echo "FAIL $name ($short of $plan planned checks not reported: the script stopped early)"
    elif [ $((p+s)) -gt $plan ]; then
      f=$((f+1)); echo "FAIL $name ($((p+s)) PASS/SKIP lines, $plan planned: PLAN is out of date)"
    fi
  fi
  if [ $s -gt 0 ] && [ $CI_MODE = 1 ]; then
    f=$((f+s)); echo "FAIL $name ($s SKIP line(s): a skip is a failure in CI)"; s=0
  fi
  if [ $rc != 0 ] && [ $f = 0 ] && [ $hf = 0 ]; then f=1; echo "FAIL $name (exit $rc, no FAIL line)"; fi
  pass=$((pass+p)); fail=$((fail+f)); skip=$((skip+s)); hpass=$((hpass+hp)); hfail=$((hfail+hf))
  echo "   ($name: $p passed, $f failed$([ $s -gt 0 ] && echo ", $s skipped") of ${plan:-?} planned; harness $hp ok, $hf failed; $(( $(date +%s)-s0 )) s)"
done
echo "interop stage took $(( $(date +%s)-t0 )) s"
echo "HARNESS $hpass passed, $hfail failed (self-test and Linux-vs-Linux baselines: not in the total)"
[ $skip -gt 0 ] && echo "SKIPPED $skip planned check(s) (not in the total; a failure when CI=true)"
echo "$pass passed, $fail failed"
[ $fail = 0 ] && [ $hfail = 0 ]
