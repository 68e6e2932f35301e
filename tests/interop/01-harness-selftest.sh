#!/bin/bash
# The harness's own self-check: kernel peers against each other in the guest
# (rping, ibv_*_pingpong, ucmatose, udaddy, nvme-tcp/rdma ...) and the host
# probes over the tap and hostfwd. Proves the stage itself works on this machine.
# These are not checks of dpustack: every line is reported as HARNESS PASS/FAIL,
# outside the stage's total (run.sh fails the stage on a HARNESS FAIL).
set -u
echo "PLAN 0"
VMH_KEEP=1 bash $ROOT/tests/peers/selftest.sh -q > /tmp/interop-selftest.$$ 2>&1; rc=$?
sed -e 's/^PASS /HARNESS PASS /' -e 's/^FAIL /HARNESS FAIL /' /tmp/interop-selftest.$$
grep -q '^PASS ' /tmp/interop-selftest.$$ || echo "HARNESS FAIL selftest (reported no PASS line, exit $rc)"
[ $rc = 0 ] || grep -q '^FAIL ' /tmp/interop-selftest.$$ || echo "HARNESS FAIL selftest (exit $rc without a FAIL line)"
rm -f /tmp/interop-selftest.$$
exit 0
