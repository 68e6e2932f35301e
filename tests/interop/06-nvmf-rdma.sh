#!/bin/bash
# NVMe/RDMA interop with Linux (issue #11), RoCEv2 between the harness netns and the
# guest's kernel rxe0 (on eth0):
#  1. Linux nvme-rdma (nvme-cli in the guest) against the dpustack target on the host
#     side (harness netns, 10.99.0.1, soft RoCE device): nvme discover -t rdma,
#     nvme connect -t rdma, dd write / read back / cmp (4 MiB and 4 KiB), fio --verify
#     when fio is installed, an unknown NQN refused, nvme disconnect.
#  2. tshark decodes our capture of that traffic as RoCE (InfiniBand) carrying NVMe
#     over Fabrics, with no malformed frames; every frame's ICRC (both directions: our
#     soft device's and the guest's rxe) is checked by tests/peers/probes/icrc_check.py
#     (tshark shows the ICRC but does not verify it).
#  3. dpustack's host against Linux nvmet-rdma in the guest (tests/peers/guest/nvmet.sh):
#     discover, identify, 1 MiB write / read back / compare, perf.
# The target and our host both need 10.99.0.1 (one soft device per address), so part 3
# runs after the target has stopped.
# Prints PLAN and PASS/FAIL(/SKIP) lines. Needs $V (vm.sh), $BIN (dpustack), $ROOT.
set -u
echo "PLAN 13"
NQN=nqn.2024-01.io.dpustack:rdma
KNQN=nqn.2024-01.io.vmh:ram0
TAP=${VMH_TAP:-vmhtap0}
W=$(mktemp -d /tmp/nvmf-rdma-interop.XXXXXX)
MBOX=${VMH_DIR:-/tmp/vmharness}/run/mbox
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
g() { bash $V exec -t ${GT:-60} "$1"; }   # run in the guest

CAP=
stop_srv() {
  [ -s $W/srv.pid ] && kill $(cat $W/srv.pid) 2>/dev/null
  for i in $(seq 50); do [ -s $W/srv.pid ] && kill -0 $(cat $W/srv.pid) 2>/dev/null || break; sleep 0.1; done
  rm -f $W/srv.pid
}
cleanup() {
  [ -n "$CAP" ] && kill $CAP 2>/dev/null
  stop_srv
  wait 2>/dev/null
  g "nvme disconnect -n $NQN >/dev/null 2>&1; true" >/dev/null 2>&1
  rm -rf $W
}
trap cleanup EXIT

[ -x "$BIN" ] || { fail "nvmf-rdma-binary ($BIN missing)"; exit 1; }
g "modprobe -a rdma_rxe rdma_ucm nvme-rdma; rdma link show rxe0 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev eth0" >/dev/null 2>&1

# --- 1. kernel nvme-rdma -> dpustack target ----------------------------------------------
bash $V hostns dumpcap -q -i $TAP -f "udp port 4791" -w $W/rdma.pcap > $W/cap.log 2>&1 &
CAP=$!
(bash $V hostns sh -c "echo \$\$ > $W/srv.pid; exec $BIN nvmf serve --listen rdma://10.99.0.1:4420 \
  --discovery-port 8009 --bdev malloc:64M --nqn $NQN --idle-spins 0 --for 600" > $W/serve.log 2>&1 &)
for i in $(seq 100); do grep -q "^Capturing on" $W/cap.log && break; sleep 0.1; done
for i in $(seq 100); do grep -q "listening rdma://10.99.0.1:8009" $W/serve.log && break; sleep 0.1; done
grep -q "listening rdma://10.99.0.1:4420" $W/serve.log || { fail "nvmf-rdma-serve ($(tail -3 $W/serve.log))"; exit 1; }

out=$(g "nvme discover -t rdma -a 10.99.0.1 -s 8009 2>&1")
echo "$out" | grep -q "subnqn:  $NQN" && echo "$out" | grep -q "trtype:  rdma" \
  && echo "$out" | grep -q "rdma_cms:    rdma-cm" && echo "$out" | grep -q "rdma_qptype: connected" \
  && pass "linux-discover-rdma (8009: trtype rdma, qptype connected, cms rdma-cm)" \
  || { fail "linux-discover-rdma"; echo "$out" | head; }

cat > $W/g.sh <<GEOF
set -e
nvme connect -t rdma -a 10.99.0.1 -s 4420 -n $NQN
for i in \$(seq 50); do D=\$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -n "\$D" ] && break; sleep 0.1; done
echo "dev \$D"
head -c 4194304 /dev/urandom > /tmp/w.bin
dd if=/tmp/w.bin of=\$D bs=1M oflag=direct 2>/dev/null
dd if=\$D of=/tmp/r.bin bs=1M count=4 iflag=direct 2>/dev/null
cmp /tmp/w.bin /tmp/r.bin && echo "CMP4M ok"
head -c 4096 /tmp/w.bin > /tmp/w4.bin
dd if=/tmp/w4.bin of=\$D bs=4k count=1 seek=5000 oflag=direct 2>/dev/null
dd if=\$D of=/tmp/r4.bin bs=4k count=1 skip=5000 iflag=direct 2>/dev/null
cmp /tmp/w4.bin /tmp/r4.bin && echo "CMP4K ok"
if command -v fio >/dev/null; then
  fio --name=v --filename=\$D --direct=1 --rw=randwrite --bs=4k --size=8M --iodepth=16 \
    --ioengine=libaio --verify=crc32c --do_verify=1 > /tmp/fio.out 2>&1 && echo "FIO ok" || { echo "FIO bad"; tail -5 /tmp/fio.out; }
else echo "FIO none"; fi
nvme disconnect -n $NQN | grep -q "disconnected 1 controller" && echo "DISC ok"
dmesg | grep -q "Bogus remote invalidation" && echo "INV bogus" || echo "INV clean"
GEOF
cp $W/g.sh $MBOX/nvmf-rdma-g.sh
out=$(GT=180 g "sh /vmh/nvmf-rdma-g.sh 2>&1"); out_io=$out
echo "$out" | grep -q "CMP4M ok" && pass "linux-connect-rdma-dd-4MiB (write, read back, cmp)" || { fail "linux-connect-rdma-dd-4MiB"; echo "$out" | tail -5; }
echo "$out" | grep -q "CMP4K ok" && pass "linux-rdma-dd-4KiB (write, read back, cmp)" || fail "linux-rdma-dd-4KiB"
if echo "$out" | grep -q "FIO none"; then echo "SKIP linux-rdma-fio-verify (fio not installed)"
else echo "$out" | grep -q "FIO ok" && pass "linux-rdma-fio-verify (8 MiB randwrite qd16 crc32c)" || { fail "linux-rdma-fio-verify"; echo "$out" | tail -5; }; fi
echo "$out" | grep -q "DISC ok" && pass "linux-rdma-disconnect" || fail "linux-rdma-disconnect"
out=$(g "nvme connect -t rdma -a 10.99.0.1 -s 4420 -n nqn.2024-01.io.dpustack:nope 2>&1; echo rc=\$?; dmesg | tail -5")
# the kernel logs the Fabrics Connect status: Invalid Parameters (SCT 1, SC 0x82)
! echo "$out" | grep -q "rc=0" && echo "$out" | grep -q "Connect Invalid" \
  && pass "linux-rdma-unknown-nqn-refused ($(echo "$out" | grep -m1 'Connect Invalid' | sed 's/.*\] //' | cut -c1-70))" \
  || { fail "linux-rdma-unknown-nqn-refused"; echo "$out"; }
stop_srv
kill $CAP 2>/dev/null; wait $CAP 2>/dev/null; CAP=

# --- 2. tshark ---------------------------------------------------------------------------
n=$(tshark -r $W/rdma.pcap -Y infiniband 2>/dev/null | wc -l)
nv=$(tshark -r $W/rdma.pcap -Y nvme-rdma 2>/dev/null | wc -l)
mal=$(tshark -r $W/rdma.pcap -Y "_ws.malformed || _ws.expert.severity >= error" 2>/dev/null | wc -l)
[ $n -gt 0 ] && [ $nv -gt 0 ] && [ $mal = 0 ] \
  && pass "nvmf-rdma-tshark ($n RoCE frames, $nv decoded as NVMe/RDMA, 0 malformed)" \
  || fail "nvmf-rdma-tshark ($n RoCE, $nv NVMe/RDMA, $mal malformed/error)"
python3 $ROOT/tests/peers/probes/icrc_check.py $W/rdma.pcap > $W/icrc 2>&1 \
  && pass "nvmf-rdma-icrc ($(tail -1 $W/icrc))" \
  || { fail "nvmf-rdma-icrc ($(tail -1 $W/icrc))"; head -5 $W/icrc; }
# Linux's host asks for remote invalidation of its fast-registered MRs (keyed SGL subtype
# Invalidate Key): our responses must be SEND with Invalidate (0x17) of exactly that key,
# else the kernel logs "Bogus remote invalidation" and fails the I/O
ninv=$(tshark -r $W/rdma.pcap -Y "ip.src == 10.99.0.1 && infiniband.bth.opcode == 0x17" 2>/dev/null | wc -l)
[ "$ninv" -gt 0 ] && echo "$out_io" | grep -q "INV clean" \
  && pass "nvmf-rdma-send-with-invalidate ($ninv SEND_ONLY_WITH_INVALIDATE responses, kernel accepted every key)" \
  || fail "nvmf-rdma-send-with-invalidate ($ninv frames; $(echo "$out_io" | grep INV))"

# --- 3. dpustack host -> Linux nvmet-rdma in the guest -----------------------------------
out=$(g "sh $ROOT/tests/peers/guest/nvmet.sh rdma 10.99.0.2 4420 2>&1")
echo "$out" | grep -q "nvmet:" || { echo "HARNESS FAIL nvmet-rdma-setup"; echo "$out"; exit 1; }
A=rdma://10.99.0.2:4420
ours() { timeout ${OT:-60} bash $V hostns $BIN "$@"; }
out=$(ours nvme discover -a $A 2>&1)
echo "$out" | grep -q "subnqn:  $KNQN" && pass "nvme-host-rdma-discover-nvmet" || { fail "nvme-host-rdma-discover-nvmet"; echo "$out" | head; }
out=$(ours nvme identify -a $A -n $KNQN 2>&1)
echo "$out" | grep -q "subnqn    : $KNQN" && echo "$out" | grep -q "nsid 1:" \
  && pass "nvme-host-rdma-identify-nvmet ($(echo "$out" | grep '^nsid 1' | cut -c1-60))" || { fail "nvme-host-rdma-identify-nvmet"; echo "$out" | head; }
head -c 1048576 /dev/urandom > $W/a
if ours nvme write -a $A -n $KNQN --slba 2048 --in $W/a > $W/w.log 2>&1 \
   && ours nvme read -a $A -n $KNQN --slba 2048 --blocks 2048 --out $W/b > $W/r.log 2>&1 \
   && cmp -s $W/a $W/b; then pass "nvme-host-rdma-write-read-nvmet (1 MiB)"
else fail "nvme-host-rdma-write-read-nvmet"; cat $W/w.log $W/r.log | tail -5; fi
out=$(ours nvme perf -a $A -n $KNQN -q 8 -o 4096 -w randrw -M 50 -t 2 2>&1)
echo "$out" | grep -q "(0 errors)" && pass "nvme-host-rdma-perf-nvmet ($(echo "$out" | tail -1 | cut -d: -f2 | cut -d, -f1-2))" \
  || { fail "nvme-host-rdma-perf-nvmet"; echo "$out" | tail -3; }
exit 0
