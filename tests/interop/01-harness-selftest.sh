#!/bin/bash
# The harness's own self-check: kernel peers against each other in the guest
# (rping, ibv_*_pingpong, ucmatose, udaddy, nvme-tcp/rdma ...) and the host
# probes over the tap and hostfwd. Proves the stage itself works on this machine.
set -u
VMH_KEEP=1 bash $ROOT/tests/peers/selftest.sh -q
