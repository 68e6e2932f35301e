#!/bin/bash
# NVMe/TCP interop with Linux (issue #5):
#  1. Linux kernel initiator (nvme-cli in the guest) against the dpustack target, which
#     runs on the host in the harness netns at 10.99.0.1: nvme discover (8009 and 4420),
#     nvme connect -t tcp (with and without digests), dd write / read back / cmp,
#     fio --verify when fio is installed, nvme disconnect.
#  2. tshark decodes our capture of that traffic as NVMe/TCP.
#  3. dpustack's host against Linux nvmet-tcp in the guest (tests/peers/guest/nvmet.sh),
#     over the hostfwd port: discover, identify, write/read back/compare, digests, perf.
# Prints PLAN and PASS/FAIL(/SKIP) lines. Needs $V (vm.sh), $BIN (dpustack), $ROOT.
set -u
echo "PLAN 17"
NQN=nqn.2024-01.io.dpustack:interop
KNQN=nqn.2024-01.io.vmh:ram0
TAP=${VMH_TAP:-vmhtap0}
FWD=$(( 10000 + ${VMH_HOSTFWD:-4420} ))
W=$(mktemp -d /tmp/nvmf-interop.XXXXXX)
MBOX=${VMH_DIR:-/tmp/vmharness}/run/mbox
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
g() { bash $V exec -t ${GT:-60} "$1"; }   # run in the guest

SRV= CAP=
cleanup() {
  [ -n "$CAP" ] && kill $CAP 2>/dev/null
  [ -n "$SRV" ] && kill $SRV 2>/dev/null
  wait 2>/dev/null
  g "nvme disconnect -n $NQN >/dev/null 2>&1; true" >/dev/null 2>&1
  rm -rf $W
}
trap cleanup EXIT

[ -x "$BIN" ] || { fail "nvmf-binary ($BIN missing)"; exit 1; }

# --- 1. kernel initiator -> dpustack target (host side, harness netns) ---------------
bash $V hostns dumpcap -q -i $TAP -f "tcp port 4420 or tcp port 8009" -w $W/nvmf.pcap > $W/cap.log 2>&1 &
CAP=$!
bash $V hostns $BIN nvmf serve --listen tcp://10.99.0.1:4420 --discovery-port 8009 \
  --bdev malloc:64M --nqn $NQN --for 600 > $W/serve.log 2>&1 &
SRV=$!
# preconditions (not checks): the capture runs, the target listens on both ports
for i in $(seq 100); do grep -q "^Capturing on" $W/cap.log && break; sleep 0.1; done
grep -q "^Capturing on" $W/cap.log || { fail "nvmf-capture (dumpcap did not start: $(cat $W/cap.log))"; exit 1; }
for i in $(seq 100); do
  grep -q "listening tcp://10.99.0.1:4420" $W/serve.log && grep -q "listening tcp://10.99.0.1:8009" $W/serve.log && break
  sleep 0.1
done
grep -q "listening tcp://10.99.0.1:8009" $W/serve.log && grep -q "listening tcp://10.99.0.1:4420" $W/serve.log \
  || { fail "nvmf-serve (not listening on 4420 and 8009 after 10 s)"; cat $W/serve.log; exit 1; }

out=$(g "modprobe nvme-tcp; nvme discover -t tcp -a 10.99.0.1 -s 8009 2>&1")
echo "$out" | grep -q "subnqn: *$NQN" && echo "$out" | grep -q "trsvcid: *4420" \
  && pass "nvmf-kernel-discover-8009" || { fail "nvmf-kernel-discover-8009"; echo "$out" | head -20; }
out=$(g "nvme discover -t tcp -a 10.99.0.1 -s 4420 2>&1")
echo "$out" | grep -q "subnqn: *$NQN" && pass "nvmf-kernel-discover-on-io-port" \
  || { fail "nvmf-kernel-discover-on-io-port"; echo "$out" | head -20; }

# find the block device of our subsystem, connect, dd, cmp, disconnect
dd_check() {  # $1 = extra connect flags, $2 = label
  local script="
set -e
before=\$(ls /dev/ | grep -E '^nvme[0-9]+n[0-9]+\$' | sort || true)
nvme connect -t tcp -a 10.99.0.1 -s 4420 -n $NQN $1 >/dev/null
dev=
for i in \$(seq 50); do
  n=\$(ls /dev/ | grep -E '^nvme[0-9]+n[0-9]+\$' | sort | grep -vxF \"\$before\" | head -1)
  [ -n \"\$n\" ] && [ -b /dev/\$n ] && dev=/dev/\$n && break; sleep 0.2
done
[ -b \"\$dev\" ] || { echo no-device; nvme list; exit 1; }
echo dev=\$dev size=\$(blockdev --getsize64 \$dev)
head -c 4194304 /dev/urandom > /tmp/nvmf-a
# 1 MiB I/Os: several H2CData PDUs per R2T (MAXH2CDATA 128 KiB), several C2HData per read
dd if=/tmp/nvmf-a of=\$dev bs=1M oflag=direct status=none
dd if=\$dev of=/tmp/nvmf-b bs=1M count=4 iflag=direct status=none
cmp /tmp/nvmf-a /tmp/nvmf-b && echo dd-ok
# small unaligned-size I/O through the page cache path too
head -c 4096 /dev/urandom > /tmp/nvmf-c
dd if=/tmp/nvmf-c of=\$dev bs=4096 seek=5000 oflag=direct status=none
dd if=\$dev of=/tmp/nvmf-d bs=4096 skip=5000 count=1 iflag=direct status=none
cmp /tmp/nvmf-c /tmp/nvmf-d && echo dd4k-ok
if command -v fio >/dev/null; then
  fio --name=verify --filename=\$dev --rw=randwrite --bs=4k --size=16M --iodepth=16 \
      --ioengine=libaio --direct=1 --verify=crc32c --do_verify=1 --output-format=terse >/dev/null 2>&1 \
    && echo fio-ok || echo fio-bad
else echo fio-missing; fi
nvme disconnect -n $NQN >/dev/null && echo disc-ok
"
  out=$(GT=180 g "$script" 2>&1)
  echo "$out" | grep -q "^dd-ok" && echo "$out" | grep -q "^dd4k-ok" \
    && pass "nvmf-kernel-connect-dd$2 ($(echo "$out" | grep ^dev= | head -1))" \
    || { fail "nvmf-kernel-connect-dd$2"; echo "$out" | tail -20; }
  if echo "$out" | grep -q "^fio-ok"; then pass "nvmf-kernel-fio-verify$2"
  elif echo "$out" | grep -q "^fio-bad"; then fail "nvmf-kernel-fio-verify$2"
  else echo "SKIP nvmf-kernel-fio-verify$2 (fio not installed)"; fi
  echo "$out" | grep -q "^disc-ok" && pass "nvmf-kernel-disconnect$2" || fail "nvmf-kernel-disconnect$2"
}
dd_check "" ""
dd_check "--hdr-digest --data-digest" "-digests"

# an unknown NQN is refused with the specific status: Connect Invalid Parameters on the
# SUBNQN field of the connect data (the kernel names it), and the target logs why ...
NOPE=nqn.2024-01.io.dpustack:nope
out=$(g "n=\$(dmesg | wc -l); nvme connect -t tcp -a 10.99.0.1 -s 4420 -n $NOPE >/dev/null 2>&1; echo rc=\$?; dmesg | tail -n +\$((n+1))")
if echo "$out" | grep -q "^rc=[1-9]" && echo "$out" | grep -q "Connect Invalid Data Parameter, subsysnqn \"$NOPE\"" \
   && grep -q "connect: unknown subsystem.*$NOPE\|$NOPE.*connect: unknown subsystem" $W/serve.log; then
  pass "nvmf-kernel-unknown-nqn-refused (Connect Invalid Data Parameter, subsysnqn; nvme connect $(echo "$out" | grep ^rc=))"
else fail "nvmf-kernel-unknown-nqn-refused"; echo "$out" | tail -8; grep -i "unknown\|nope" $W/serve.log | tail -3; fi
# ... and it keeps serving: a new connection after the refusal reads back what it wrote
out=$(GT=120 g "set -e
before=\$(ls /dev/ | grep -E '^nvme[0-9]+n[0-9]+\$' | sort || true)
nvme connect -t tcp -a 10.99.0.1 -s 4420 -n $NQN >/dev/null
dev=
for i in \$(seq 100); do
  n=\$(ls /dev/ | grep -E '^nvme[0-9]+n[0-9]+\$' | sort | grep -vxF \"\$before\" | head -1)
  [ -n \"\$n\" ] && [ -b /dev/\$n ] && dev=/dev/\$n && break; sleep 0.1
done
head -c 65536 /dev/urandom > /tmp/nvmf-e
dd if=/tmp/nvmf-e of=\$dev bs=64k seek=100 oflag=direct status=none
dd if=\$dev of=/tmp/nvmf-f bs=64k skip=100 count=1 iflag=direct status=none
cmp /tmp/nvmf-e /tmp/nvmf-f && echo after-ok
nvme disconnect -n $NQN >/dev/null" 2>&1)
echo "$out" | grep -q "^after-ok" && pass "nvmf-kernel-serves-after-refusal (connect, 64 KiB write/read back/cmp, disconnect)" \
  || { fail "nvmf-kernel-serves-after-refusal"; echo "$out" | tail -5; }
kill $SRV 2>/dev/null; wait $SRV 2>/dev/null; SRV=
grep -qi "panick" $W/serve.log && fail "nvmf-no-panic" || pass "nvmf-no-panic"

# --- 2. tshark decodes our capture ---------------------------------------------------
kill $CAP 2>/dev/null; wait $CAP 2>/dev/null; CAP=
types=$(tshark -r $W/nvmf.pcap -d tcp.port==8009,nvme-tcp -Y nvme-tcp -T fields -e nvme-tcp.type 2>/dev/null | tr ',' '\n' | sort -u | tr '\n' ' ')
malformed=$(tshark -r $W/nvmf.pcap -d tcp.port==8009,nvme-tcp -Y '_ws.malformed || _ws.expert.severity == error' 2>/dev/null | wc -l)
# types: 0 ICReq 1 ICResp 4 CapsuleCmd 5 CapsuleResp 7 C2HData 9 R2T 6 H2CData
ok=1; for t in 0 1 4 5 6 7 9; do echo " $types " | grep -q " $t " || ok=0; done
[ $ok = 1 ] && [ "$malformed" = 0 ] && pass "nvmf-tshark-decodes (types: $types)" \
  || { fail "nvmf-tshark-decodes (types: $types, malformed/error frames: $malformed)"; \
       tshark -r $W/nvmf.pcap -d tcp.port==8009,nvme-tcp -Y '_ws.malformed || _ws.expert.severity == error' 2>/dev/null | head -5; }

# --- 3. dpustack host -> Linux nvmet-tcp in the guest ---------------------------------
out=$(g "sh $ROOT/tests/peers/guest/nvmet.sh tcp 2>&1")
echo "$out" | grep -q "nvmet:" || { echo "HARNESS FAIL nvmet-setup"; echo "$out"; exit 1; }
A=tcp://127.0.0.1:$FWD
out=$($BIN nvme discover -a $A 2>&1)
echo "$out" | grep -q "subnqn:  $KNQN" && pass "nvme-host-discover-nvmet" || { fail "nvme-host-discover-nvmet"; echo "$out" | head; }
out=$($BIN nvme identify -a $A -n $KNQN 2>&1)
echo "$out" | grep -q "subnqn    : $KNQN" && echo "$out" | grep -q "nsid 1:" \
  && pass "nvme-host-identify-nvmet ($(echo "$out" | grep '^nsid 1' | cut -c1-60))" || { fail "nvme-host-identify-nvmet"; echo "$out" | head; }
head -c 1048576 /dev/urandom > $W/a
for dg in "" "--hdgst --ddgst"; do
  lab=${dg:+-digests}
  if $BIN nvme write -a $A -n $KNQN $dg --slba 2048 --in $W/a > $W/w.log 2>&1 \
     && $BIN nvme read -a $A -n $KNQN $dg --slba 2048 --blocks 2048 --out $W/b > $W/r.log 2>&1 \
     && cmp -s $W/a $W/b; then pass "nvme-host-write-read-nvmet$lab (1 MiB)"
  else fail "nvme-host-write-read-nvmet$lab"; cat $W/w.log $W/r.log | tail -5; fi
done
out=$($BIN nvme perf -a $A -n $KNQN -q 8 -o 4096 -w randrw -M 50 -t 2 2>&1)
echo "$out" | grep -q "(0 errors)" && pass "nvme-host-perf-nvmet ($(echo "$out" | cut -d: -f2 | cut -d, -f1-2))" \
  || { fail "nvme-host-perf-nvmet"; echo "$out" | tail -3; }
exit 0
