#!/bin/bash
# Interop: dpustack's software RoCEv2 provider against the kernel's rdma_rxe in the
# guest. Our binary runs in the guest netns `peer` (10.99.2.2, veth vp) and talks
# to rxe_r on vr (10.99.2.1): rc-pingpong, uc-pingpong and ud-pingpong both as
# server and as client against ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong,
# received buffers validated on both sides (-c); the traffic on vr is captured,
# decoded by tshark as RoCE, and every ICRC (ours and rxe's, UC included) is
# checked with probes/icrc_check.py.
#
# Host side (run.sh): bash 03-roce.sh          (uses $V, $BIN, $ROOT, $P)
# Guest side (internal): bash 03-roce.sh guest BIN PROBES
set -u

if [ "${1:-}" = guest ]; then
  BIN=$2 P=$3 L=/tmp/roce03; mkdir -p $L
  pass=0
  ok()  { echo "PASS $1${2:+  ($2)}"; }
  bad() { echo "FAIL $1${2:+  ($2)}"; }
  pair() {  # NAME SERVER-CMD CLIENT-CMD: both must exit 0
    local n=$1
    timeout 60 sh -c "$2" > $L/$n.srv 2>&1 & local s=$!
    sleep 2
    timeout 50 sh -c "$3" > $L/$n.cli 2>&1; local c=$?
    wait $s; local r=$?
    if [ $c = 0 ] && [ $r = 0 ]; then
      ok $n "$(grep -h 'iters in' $L/$n.cli | head -1)"
    else
      bad $n "client rc=$c server rc=$r"; tail -n 4 $L/$n.cli $L/$n.srv
    fi
  }
  [ -x "$BIN" ] || { bad roce-binary "$BIN not visible in the guest"; exit 1; }
  if ! ip link show vr > /dev/null 2>&1; then   # same setup as guest/selftest.sh
    ip netns add peer; ip link add vr type veth peer name vp; ip link set vp netns peer
    ip addr add 10.99.2.1/24 dev vr; ip link set vr up
    ip -n peer addr add 10.99.2.2/24 dev vp; ip -n peer link set vp up; ip -n peer link set lo up
  fi
  rdma link show rxe_r > /dev/null 2>&1 || rdma link add rxe_r type rxe netdev vr 2>/dev/null || true
  rm -f /vmh/roce03.pcap
  dumpcap -i vr -w /vmh/roce03.pcap -q > $L/dumpcap 2>&1 & DC=$!
  for i in $(seq 100); do [ -f /vmh/roce03.pcap ] && break; sleep 0.1; done; sleep 1
  OUR="ip netns exec peer $BIN"
  N=100
  pair rc-pingpong.ours-server "$OUR rc-pingpong -d 10.99.2.2 -g 1 -n $N -c" \
                               "ibv_rc_pingpong -d rxe_r -g 1 -n $N -c 10.99.2.2"
  pair rc-pingpong.ours-client "ibv_rc_pingpong -d rxe_r -g 1 -n $N -c" \
                               "$OUR rc-pingpong -d 10.99.2.2 -g 1 -n $N -c 10.99.2.1"
  pair rc-pingpong.ours-client-mtu256-8k "ibv_rc_pingpong -d rxe_r -g 1 -n $N -c -m 256 -s 8192" \
                               "$OUR rc-pingpong -d 10.99.2.2 -g 1 -n $N -c -m 256 -s 8192 10.99.2.1"
  pair ud-pingpong.ours-server "$OUR ud-pingpong -d 10.99.2.2 -g 1 -n $N -s 1024 -c" \
                               "ibv_ud_pingpong -d rxe_r -g 1 -n $N -s 1024 -c 10.99.2.2"
  pair ud-pingpong.ours-client "ibv_ud_pingpong -d rxe_r -g 1 -n $N -s 1024 -c" \
                               "$OUR ud-pingpong -d 10.99.2.2 -g 1 -n $N -s 1024 -c 10.99.2.1"
  pair uc-pingpong.ours-server "$OUR uc-pingpong -d 10.99.2.2 -g 1 -n $N -c" \
                               "ibv_uc_pingpong -d rxe_r -g 1 -n $N -c 10.99.2.2"
  pair uc-pingpong.ours-client "ibv_uc_pingpong -d rxe_r -g 1 -n $N -c" \
                               "$OUR uc-pingpong -d 10.99.2.2 -g 1 -n $N -c 10.99.2.1"
  pair uc-pingpong.ours-client-mtu256-8k "ibv_uc_pingpong -d rxe_r -g 1 -n $N -c -m 256 -s 8192" \
                               "$OUR uc-pingpong -d 10.99.2.2 -g 1 -n $N -c -m 256 -s 8192 10.99.2.1"
  sleep 1; kill $DC; wait $DC 2>/dev/null
  ours=$(tshark -r /vmh/roce03.pcap -Y 'infiniband && ip.src==10.99.2.2' 2>/dev/null | wc -l)
  theirs=$(tshark -r /vmh/roce03.pcap -Y 'infiniband && ip.src==10.99.2.1' 2>/dev/null | wc -l)
  [ "$ours" -gt 100 ] && [ "$theirs" -gt 100 ] \
    && ok roce-tshark-decodes "$ours BTH frames from us, $theirs from rxe" \
    || bad roce-tshark-decodes "$ours ours, $theirs rxe"
  # UC (opcodes 0x20-0x2b): frames each way, and how many ask for an ACK (we
  # must not; older rxe did on a message's last packet, so theirs is only reported)
  uc='infiniband.bth.opcode >= 0x20 && infiniband.bth.opcode <= 0x2b'
  uc_ours=$(tshark -r /vmh/roce03.pcap -Y "$uc && ip.src==10.99.2.2" 2>/dev/null | wc -l)
  uc_theirs=$(tshark -r /vmh/roce03.pcap -Y "$uc && ip.src==10.99.2.1" 2>/dev/null | wc -l)
  uc_ours_ack=$(tshark -r /vmh/roce03.pcap -Y "$uc && ip.src==10.99.2.2 && infiniband.bth.a == 1" 2>/dev/null | wc -l)
  uc_theirs_ack=$(tshark -r /vmh/roce03.pcap -Y "$uc && ip.src==10.99.2.1 && infiniband.bth.a == 1" 2>/dev/null | wc -l)
  [ "$uc_ours" -ge 600 ] && [ "$uc_theirs" -ge 600 ] && [ "$uc_ours_ack" = 0 ] \
    && ok roce-uc-wire "UC frames: $uc_ours from us (AckReq on $uc_ours_ack), $uc_theirs from rxe (AckReq on $uc_theirs_ack)" \
    || bad roce-uc-wire "UC frames: $uc_ours ours (AckReq $uc_ours_ack), $uc_theirs rxe"
  python3 $P/icrc_check.py /vmh/roce03.pcap > $L/icrc 2>&1 \
    && ok roce-icrc "$(tail -1 $L/icrc)" || { bad roce-icrc "$(tail -1 $L/icrc)"; head -5 $L/icrc; }
  exit 0
fi

# host side
: "${V:?run from tests/interop/run.sh (needs V, BIN, ROOT, P)}"
[ -x "$BIN" ] || { echo "FAIL roce-binary (build it: cargo build --release -p dpustack)"; exit 1; }
bash $V exec -t 400 "bash $ROOT/tests/interop/03-roce.sh guest $BIN $P"
