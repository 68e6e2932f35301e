#!/bin/bash
# Interop stage: boots the QEMU guest with real Linux peers (rdma_rxe, rdma-core,
# perftest, nvme-cli, nvmet), runs every tests/interop/[0-9]*.sh against it, stops
# the guest on exit, and prints "N passed, M failed".
#
# Each test script is run with bash and these variables:
#   V    path of vm.sh (the harness)   BIN  the dpustack release binary
#   ROOT the project root              P    the harness's probes/ directory
# and reports one line per check: "PASS name [detail]" or "FAIL name [detail]".
# A script that exits non-zero without printing FAIL counts as one failure.
#   INTEROP_ONLY='03-*' run.sh   runs a subset;  VMH_KEEP=1 leaves the guest up.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export ROOT V=$ROOT/tests/peers/vm.sh P=$ROOT/tests/peers/probes BIN=$ROOT/target/release/dpustack
pass=0 fail=0 t0=$(date +%s)
out=$(mktemp)
started=0
cleanup() { [ $started = 1 ] && [ -z "${VMH_KEEP:-}" ] && bash $V stop >/dev/null 2>&1; rm -f $out; }
trap cleanup EXIT INT TERM

bash $V build >/dev/null || { echo "FAIL harness-build"; echo "0 passed, 1 failed"; exit 1; }
if ! bash $V status >/dev/null 2>&1; then
  bash $V start || { echo "FAIL guest-boot"; echo "0 passed, 1 failed"; exit 1; }
  started=1
fi

for t in $ROOT/tests/interop/${INTEROP_ONLY:-[0-9]*.sh}; do
  [ -f "$t" ] || continue
  name=$(basename $t .sh)
  echo "== $name"
  s0=$(date +%s)
  timeout ${INTEROP_TIMEOUT:-900} bash $t > $out 2>&1; rc=$?
  cat $out | sed 's/^/   /'
  p=$(grep -c '^PASS ' $out); f=$(grep -c '^FAIL ' $out)
  if [ $rc != 0 ] && [ $f = 0 ]; then f=1; echo "FAIL $name (exit $rc, no FAIL line)"; fi
  if [ $p = 0 ] && [ $f = 0 ]; then f=1; echo "FAIL $name (reported nothing)"; fi
  pass=$((pass+p)); fail=$((fail+f))
  echo "   ($name: $p passed, $f failed, $(( $(date +%s)-s0 )) s)"
done
echo "interop stage took $(( $(date +%s)-t0 )) s"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
