#!/bin/bash
# Interop: the tc-linux offload provider (issue 14) against the guest kernel's tc flower
# (Debian 6.1: cls_flower, act_mirred/pedit/csum/vlan/gact). In the guest:
# `dpustack switch run --hw-offload --offload-priority tc-linux` on two afpacket ports
# (veths whose peers live in netns na / nb); raw frames sent into na, captured in nb.
#   * tc-flower-kernel-forwards: after each flow's first frame (upcall) the switch puts
#     a flower filter (skip_hw) on a1's clsact ingress; the next frames are forwarded by
#     the kernel (mirred redirect + pedit/csum rewrite, vlan push), exactly once each
#     (software drops its tap copy);
#   * tc-flower-filter-show: `tc -s filter show dev a1 ingress` lists both filters
#     (flower, skip_hw, not_in_hw) with the kernel's counters;
#   * tc-flower-dump-flows: the revalidator reads the counters back: dump-flows shows
#     dp:tc-linux with packets:N from the kernel;
#   * tc-flower-idle-delete: max-idle=1000 -> the revalidator deletes the idle flows and
#     their filters disappear from the kernel;
#   * tc-flower-kernel-refuses: a filter of someone else on the prio our flows use (other
#     protocol): the kernel refuses ours (EINVAL + extack); the flow stays in software
#     with the kernel's reason in dump-flows, frames still forwarded (by software),
#     nothing of ours left in the kernel;
#   * tc-flower-flush-on-exit: the switch stopped (SIGINT) deletes its filters.
# Host side: PLAN, then the guest part (this script with `guest`). ~1 min of guest time.
set -u
if [ "${1:-}" != guest ]; then
  echo "PLAN 6"
  [ -x "$BIN" ] || { echo "FAIL tc-flower (no binary $BIN)"; exit 0; }
  bash $V exec -t 150 "bash $ROOT/tests/interop/11-tc-flower.sh guest $BIN"
  exit 0
fi
BIN=$2
T=$(mktemp -d /tmp/tcfl.XXXXXX)
SW=
cleanup() {
  [ -n "$SW" ] && kill -INT $SW 2>/dev/null && wait $SW 2>/dev/null
  ip link del a1 2>/dev/null; ip link del b1 2>/dev/null
  ip netns del na 2>/dev/null; ip netns del nb 2>/dev/null
  rm -rf $T
}
trap cleanup EXIT
fail() { echo "FAIL $1 ${2:-}"; }
pass() { echo "PASS $1 ${2:-}"; }
skipall() { for c in kernel-forwards filter-show dump-flows idle-delete kernel-refuses flush-on-exit; do fail tc-flower-$c "$1"; done; exit 0; }

modprobe cls_flower 2>/dev/null
ip netns add na && ip netns add nb || skipall "ip netns add"
ip link add a0 type veth peer name a1 && ip link add b0 type veth peer name b1 || skipall "veth"
ip link set a0 netns na && ip link set b0 netns nb
for i in a1 b1; do sysctl -qw net.ipv6.conf.$i.disable_ipv6=1; ip link set $i up; done
ip netns exec na sh -c "sysctl -qw net.ipv6.conf.a0.disable_ipv6=1; ip link set a0 up"
ip netns exec nb sh -c "sysctl -qw net.ipv6.conf.b0.disable_ipv6=1; ip link set b0 up"

cat > $T/flows.txt <<F
priority=200,in_port=1,udp,tp_dst=4000,actions=set_field:aa:bb:cc:dd:ee:ff->eth_dst,dec_ttl,mod_tp_dst:4001,output:2
priority=150,in_port=1,udp,tp_dst=4100,actions=mod_vlan_vid:42,output:2
priority=0,actions=drop
F
# send.py IFACE DPORT COUNT [TAG]: Ethernet/IPv4/UDP frames (TTL 64) out of IFACE
cat > $T/send.py <<'P'
import socket, struct, sys
ifc, dport, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tag = sys.argv[4].encode() if len(sys.argv) > 4 else b''
def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b)//2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff
payload = b'dpustack-tc11' + (tag + bytes(20))[:20]
udp = struct.pack('!HHHH', 12345, dport, 8 + len(payload), 0) + payload
src, dst = bytes([10,7,0,1]), bytes([10,7,0,2])
udp = udp[:6] + struct.pack('!H', csum(src + dst + struct.pack('!BBH', 0, 17, len(udp)) + udp)) + udp[8:]
ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, src, dst)
ip = ip[:10] + struct.pack('!H', csum(ip)) + ip[12:]
eth = bytes.fromhex('020000000b02') + bytes.fromhex('020000000a01') + b'\x08\x00'
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((ifc, 0))
for i in range(n): s.send(eth + ip + udp)
P
# cap.py IFACE SECS STOP: READY once bound, then per test frame "dport ttl dst_mac vid ipck udpck";
# stops after the frame tagged STOP.
cat > $T/cap.py <<'P'
import socket, sys, time, struct
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); s.bind((sys.argv[1], 0))
s.setsockopt(263, 8, 1)
stop = sys.argv[3].encode()
def ck(b):
    if len(b) % 2: b += b'\0'
    t = sum(struct.unpack('!%dH' % (len(b)//2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return t == 0xffff
print('READY', flush=True)
s.settimeout(0.2); end = time.time() + float(sys.argv[2])
while time.time() < end:
    try: f, anc, _, a = s.recvmsg(65535, 256)
    except socket.timeout: continue
    if a[2] == socket.PACKET_OUTGOING or b'dpustack-tc11' not in f: continue
    vid = '-'
    for lvl, typ, data in anc:
        if lvl == 263 and typ == 8:
            st, _, _, _, _, tci, tpid = struct.unpack('IIIHHHH', data[:20])
            if st & 0x10: vid = str(tci & 0xfff)
    o = 14
    if f[12:14] == b'\x81\x00': vid = str(int.from_bytes(f[14:16], 'big') & 0xfff); o = 18
    ip = f[o:o+20]; udp = f[o+20:]
    ph = ip[12:20] + struct.pack('!BBH', 0, 17, len(udp))
    print(int.from_bytes(udp[2:4], 'big'), ip[8], f[0:6].hex(':'), vid,
          'ok' if ck(ip) else 'bad', 'ok' if ck(ph + udp) else 'bad', flush=True)
    if stop in f: break
P
cap_start() {  # SECS STOP
  ip netns exec nb python3 $T/cap.py b0 "$@" > $T/cap.txt & CAPP=$!
  for i in $(seq 300); do grep -q '^READY' $T/cap.txt && return 0; sleep 0.05; done
  return 1
}
cap_frames() { wait $CAPP; grep -v '^READY' $T/cap.txt; }
send() { ip netns exec na python3 $T/send.py a0 "$@"; }
nfilters() { tc filter show dev a1 ingress | grep -c "^filter .*flower.*handle"; }
wait_filters() {  # N SECS: until N of our flower filters are on a1
  local i; for i in $(seq $(( $2 * 10 ))); do [ "$(nfilters)" = "$1" ] && return 0; sleep 0.1; done; return 1
}
dump() { $BIN switch dump-flows -s $T/rpc.sock; }

$BIN switch run --flows $T/flows.txt --port 1=afpacket:a1 --port 2=afpacket:b1 \
  --hw-offload --offload-priority tc-linux -r $T/rpc.sock --duration 140 2>$T/switch.log &
SW=$!
up=
for i in $(seq 100); do $BIN switch stats -s $T/rpc.sock >/dev/null 2>&1 && { up=1; break; }; sleep 0.1; done
[ -n "$up" ] || skipall "switch did not start: $(tail -5 $T/switch.log)"

# first frames: upcalls, forwarded by software; their megaflows go to the kernel
send 4000 1; send 4100 1
if wait_filters 2 10; then
  cap_start 10 end
  send 4100 2; send 4000 4; send 4000 1 end
  out=$(cap_frames)
  n4001=$(echo "$out" | grep -c "^4001 63 aa:bb:cc:dd:ee:ff - ok ok$")
  n42=$(echo "$out" | grep -c "^4100 64 02:00:00:00:0b:02 42 ok ok$")
  hw=$($BIN switch offload-stats -s $T/rpc.sock | sed -n 's/.*hw-forwarded \([0-9]*\).*/\1/p')
  if [ "$n4001" = 5 ] && [ "$n42" = 2 ] && [ "$(echo "$out" | grep -c .)" = 7 ] && [ "${hw:-0}" = 7 ]; then
    pass tc-flower-kernel-forwards "7 frames forwarded by the kernel, once each: 5 rewritten (dl_dst, ttl 63, udp 4001, checksums ok), 2 tagged vid 42; the switch dropped its 7 tap copies"
  else fail tc-flower-kernel-forwards "frames: [$out] hw-forwarded=$hw"; fi
else
  fail tc-flower-kernel-forwards "filters on a1: $(nfilters), want 2: $(tc filter show dev a1 ingress) $(dump) $(tail -5 $T/switch.log)"
fi
show=$(tc -s filter show dev a1 ingress)
if [ "$(echo "$show" | grep -c "skip_hw")" = 2 ] && [ "$(echo "$show" | grep -c "not_in_hw")" = 2 ] \
   && echo "$show" | grep -Eq "Sent [0-9]+ bytes 5 pkt" && echo "$show" | grep -Eq "Sent [0-9]+ bytes 2 pkt" \
   && echo "$show" | grep -Eq "action order 1: +pedit" && echo "$show" | grep -Eq "vlan +push id 42"; then
  pass tc-flower-filter-show "2 flower filters (skip_hw, not_in_hw) with the kernel's counters 5 pkt / 2 pkt"
else fail tc-flower-filter-show "$show"; fi
ok=
for i in $(seq 60); do
  d=$(dump)
  echo "$d" | grep -q "tp_dst=4000.*packets:5, .*offloaded:no, dp:tc-linux" \
    && echo "$d" | grep -q "tp_dst=4100.*packets:2, .*offloaded:no, dp:tc-linux" && { ok=1; break; }
  sleep 0.1
done
[ -n "$ok" ] && pass tc-flower-dump-flows "kernel counters merged by the revalidator: packets:5 and packets:2, dp:tc-linux" \
  || fail tc-flower-dump-flows "$d"

$BIN switch config -s $T/rpc.sock max-idle=1000 >/dev/null
if wait_filters 0 8 && [ -z "$(dump | grep tp_dst)" ]; then
  pass tc-flower-idle-delete "max-idle=1000: both idle flows deleted, their filters gone from the kernel"
else fail tc-flower-idle-delete "filters: $(tc filter show dev a1 ingress) flows: $(dump)"; fi
$BIN switch config -s $T/rpc.sock max-idle=60000 >/dev/null

# Someone else's filter on prio 1 (ours: the first (mask, ethertype) pair), protocol arp.
tc filter add dev a1 ingress prio 1 protocol arp flower skip_hw action pass
cap_start 10 end2
send 4000 1; sleep 1; send 4000 1 end2
out=$(cap_frames)
d=$(dump)
mine=$(tc filter show dev a1 ingress | grep -c "^filter protocol ip ")
if echo "$d" | grep -q "tp_dst=4000.*offloaded:no (tc-linux: device error: kernel: .*errno 22 (EINVAL)), dp:ovs" \
   && [ "$(echo "$out" | grep -c "^4001 63 aa:bb:cc:dd:ee:ff - ok ok$")" = 2 ] && [ "$mine" = 0 ]; then
  pass tc-flower-kernel-refuses "$(echo "$d" | grep -o 'offloaded:no ([^)]*))'); both frames forwarded by software; nothing of ours in the kernel"
else fail tc-flower-kernel-refuses "flows: $d frames: [$out] our filters: $mine"; fi
tc filter del dev a1 ingress prio 1 protocol arp

# flush on exit: a flow in the kernel, then SIGINT
send 4100 1
wait_filters 1 10
before=$(nfilters)
kill -INT $SW; wait $SW; SW=
after=$(nfilters)
[ "$before" = 1 ] && [ "$after" = 0 ] && pass tc-flower-flush-on-exit "1 filter before the switch stopped, 0 after" \
  || fail tc-flower-flush-on-exit "before $before after $after: $(tail -3 $T/switch.log)"
