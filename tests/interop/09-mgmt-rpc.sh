#!/bin/bash
# Management plane with Linux (issue #16): a target built from nothing over
# JSON-RPC (`dpustack rpc`, SPDK's method names) serves the guest's kernel
# initiator; live changes reach the connected host:
#  1. nvmf serve --empty in the harness netns; bdev_malloc_create, nvmf_create_transport,
#     nvmf_create_subsystem, nvmf_subsystem_add_ns, nvmf_subsystem_add_listener (10.99.0.1:4420)
#  2. nvme connect -t tcp from the guest; dd write / read back / cmp
#  3. nvmf_subsystem_get_controllers lists the guest's controller (its hostnqn)
#  4. the metrics endpoint (127.0.0.1:19464 in the netns) counts the guest's reads
#  5. a namespace added while connected appears in the guest without a reconnect
#     (Namespace Attribute Changed AEN -> Changed Namespace List -> rescan)
#  6. nvmf_subsystem_remove_listener drops the guest's controller
# Prints PLAN and PASS/FAIL lines. Needs $V (vm.sh), $BIN (dpustack), $ROOT.
set -u
echo "PLAN 6"
NQN=nqn.2016-06.io.spdk:interop-rpc
W=$(mktemp -d /tmp/mgmt-interop.XXXXXX)
SOCK=$W/rpc.sock
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
g() { bash $V exec -t ${GT:-60} "$1"; }   # run in the guest
rpc() { $BIN rpc -s $SOCK "$@"; }         # the Unix socket is on the host's file system
metric() {  # $1 = sample name prefix: the first matching sample's value
  bash $V hostns curl -s http://127.0.0.1:19464/metrics | grep "^$1" | head -1 | awk '{print $NF}'
}

SRV=
cleanup() {
  g "nvme disconnect -n $NQN >/dev/null 2>&1; true" >/dev/null 2>&1
  [ -n "$SRV" ] && kill $SRV 2>/dev/null
  wait 2>/dev/null
  rm -rf $W
}
trap cleanup EXIT

[ -x "$BIN" ] || { fail "mgmt-binary ($BIN missing)"; exit 1; }

# --- 1. build the target over JSON-RPC -----------------------------------------------
bash $V hostns $BIN nvmf serve --empty -r $SOCK --metrics-listen 127.0.0.1:19464 --for 600 \
  > $W/serve.log 2>&1 &
SRV=$!
for i in $(seq 100); do [ -S $SOCK ] && break; sleep 0.1; done
LA='{"trtype":"TCP","adrfam":"IPv4","traddr":"10.99.0.1","trsvcid":"4420"}'
if rpc bdev_malloc_create -p name=M0 -p num_blocks=131072 -p block_size=512 >$W/rpc.log 2>&1 \
   && rpc nvmf_create_transport -p trtype=TCP >>$W/rpc.log 2>&1 \
   && rpc nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true}" >>$W/rpc.log 2>&1 \
   && rpc nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"M0\"}}" >>$W/rpc.log 2>&1 \
   && rpc nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$LA}" >>$W/rpc.log 2>&1 \
   && rpc nvmf_get_subsystems | grep -q '"trsvcid": "4420"'; then
  pass "mgmt-rpc-build-target (malloc bdev, TCP transport, subsystem, namespace, listener)"
else
  fail "mgmt-rpc-build-target"; cat $W/rpc.log | tail -10; tail -5 $W/serve.log
fi

# --- 2. the kernel initiator on it -------------------------------------------------
out=$(GT=120 g "set -e
modprobe nvme-tcp
before=\$(ls /dev/ | grep -E '^nvme[0-9]+n[0-9]+\$' | sort || true)
nvme connect -t tcp -a 10.99.0.1 -s 4420 -n $NQN >/dev/null
dev=
for i in \$(seq 50); do
  n=\$(ls /dev/ | grep -E '^nvme[0-9]+n[0-9]+\$' | sort | grep -vxF \"\$before\" | head -1)
  [ -n \"\$n\" ] && [ -b /dev/\$n ] && dev=/dev/\$n && break; sleep 0.2
done
[ -b \"\$dev\" ] || { echo no-device; nvme list; exit 1; }
echo dev=\$dev
head -c 4194304 /dev/urandom > /tmp/mgmt-a
dd if=/tmp/mgmt-a of=\$dev bs=1M oflag=direct status=none
dd if=\$dev of=/tmp/mgmt-b bs=1M count=4 iflag=direct status=none
cmp /tmp/mgmt-a /tmp/mgmt-b && echo dd-ok
cat /sys/class/nvme-fabrics/ctl/*/hostnqn 2>/dev/null | head -1 | sed 's/^/hostnqn=/'" 2>&1)
DEV=$(echo "$out" | sed -n 's/^dev=//p' | head -1)
HOSTNQN=$(echo "$out" | sed -n 's/^hostnqn=//p' | head -1)
echo "$out" | grep -q "^dd-ok" && pass "mgmt-kernel-connect-dd (dev $DEV, 4 MiB written, read back, cmp)" \
  || { fail "mgmt-kernel-connect-dd"; echo "$out" | tail -10; }

# --- 3. the controller as the RPC sees it --------------------------------------------
c=$(rpc nvmf_subsystem_get_controllers -p nqn=$NQN 2>&1)
if [ -n "$HOSTNQN" ] && echo "$c" | grep -q "\"hostnqn\": \"$HOSTNQN\""; then
  pass "mgmt-rpc-get-controllers (the guest's $HOSTNQN)"
else fail "mgmt-rpc-get-controllers (guest hostnqn '$HOSTNQN')"; echo "$c" | head -20; fi

# --- 4. metrics count the guest's reads ----------------------------------------------
rb=$(metric "dpustack_nvmf_read_bytes_total{subsystem=\"$NQN\"")
if [ -n "$rb" ] && [ "${rb%.*}" -ge 4194304 ] 2>/dev/null; then
  pass "mgmt-metrics-kernel-reads (dpustack_nvmf_read_bytes_total $rb >= 4 MiB)"
else fail "mgmt-metrics-kernel-reads (read bytes '$rb')"; fi

# --- 5. a namespace added while connected appears in the guest ----------------------
rpc bdev_malloc_create -p name=M1 -p num_blocks=65536 -p block_size=512 >/dev/null 2>&1
rpc nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"M1\",\"nsid\":2}}" >/dev/null 2>&1
ctl=${DEV%n1}
out=$(GT=60 g "for i in \$(seq 100); do [ -b ${ctl}n2 ] && break; sleep 0.1; done
[ -b ${ctl}n2 ] && echo ns2=\$(blockdev --getsize64 ${ctl}n2); dmesg | grep -i 'rescan\\|changed ns\\|ns_change' | tail -2" 2>&1)
if [ -n "$DEV" ] && echo "$out" | grep -q "^ns2=33554432"; then
  pass "mgmt-kernel-ns-added-live (${ctl}n2, 32 MiB, without a reconnect)"
else fail "mgmt-kernel-ns-added-live (${ctl}n2)"; echo "$out" | tail -5; fi

# --- 6. removing the listener drops the connected controller -------------------------
rpc nvmf_subsystem_remove_listener "{\"nqn\":\"$NQN\",\"listen_address\":$LA}" >/dev/null 2>&1
n=1
for i in $(seq 100); do
  n=$(rpc nvmf_subsystem_get_controllers -p nqn=$NQN 2>/dev/null | grep -c '"cntlid"')
  [ "$n" = 0 ] && break; sleep 0.1
done
[ "$n" = 0 ] && pass "mgmt-remove-listener-drops-controller" \
  || fail "mgmt-remove-listener-drops-controller ($n controllers left)"
g "nvme disconnect -n $NQN >/dev/null 2>&1; true" >/dev/null 2>&1
kill $SRV 2>/dev/null; wait $SRV 2>/dev/null; SRV=
