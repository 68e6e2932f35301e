#!/bin/bash
# Interop: dpustack's software RoCEv2 provider against the kernel's rdma_rxe in the
# guest. Our binary runs in the guest netns `peer` (10.99.2.2, veth vp) and talks
# to rxe_r on vr (10.99.2.1): rc-pingpong, uc-pingpong and ud-pingpong both as
# server and as client against ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong
# with -c, and (DPUSTACK_ROCE_IO=xdp) rc/ud-pingpong and rping over our AF_XDP
# datapath on vp. ibv_*_pingpong -c checks one byte per page (always 0) and prints "invalid
# data in page N" but still exits 0: that line fails the check here. Our side checks
# every byte of every received buffer (ibv_*_pingpong echoes what it received, so a
# byte we or rxe got wrong in either direction comes back different) and must report
# all N buffers validated. rping -V both ways (8 KiB, multi-packet) compares whole
# buffers too. The traffic on vr is captured, decoded by tshark as RoCE (no
# malformed frame), and every ICRC (ours and rxe's, UC included) is checked with
# probes/icrc_check.py. Servers are waited for by polling, not by sleeping.
#
# Host side (run.sh): bash 03-roce.sh          (uses $V, $BIN, $ROOT, $P)
# Guest side (internal): bash 03-roce.sh guest BIN PROBES
set -u

if [ "${1:-}" = guest ]; then
  BIN=$2 P=$3 L=/tmp/roce03; mkdir -p $L
  ok()  { echo "PASS $1${2:+  ($2)}"; }
  bad() { echo "FAIL $1${2:+  ($2)}"; }
  # until something listens on TCP PORT in netns NS ("-": the initial one)
  tcp_listen() {
    local i x=""; [ "$1" != - ] && x="ip netns exec $1"
    for i in $(seq 200); do $x ss -Hltn "sport = :$2" | grep -q . && return 0; sleep 0.05; done
    return 1
  }
  # pair NAME SERVER-NETNS OURS(srv|cli) SERVER-CMD CLIENT-CMD: both exit 0, neither
  # printed "invalid data", and our side validated every byte of all $N buffers
  pair() {
    local n=$1 ours=$L/$1.$3
    timeout 60 sh -c "$4" > $L/$n.srv 2>&1 & local s=$!
    if ! tcp_listen $2 18515; then
      bad $n "server not listening on TCP 18515 after 10 s"; kill $s; wait $s; tail -n 4 $L/$n.srv; return
    fi
    timeout 50 sh -c "$5" > $L/$n.cli 2>&1; local c=$?
    [ $c != 0 ] && kill $s 2>/dev/null   # a failed client: do not wait out the server
    wait $s; local r=$?
    local chk=$(grep -h "^data check: " $ours)
    if [ $c = 0 ] && [ $r = 0 ] && ! grep -qi "invalid data" $L/$n.srv $L/$n.cli \
       && [ "$chk" = "data check: $N received buffers validated (every byte)" ]; then
      ok $n "$(grep -h 'iters in' $L/$n.cli | head -1); ours: ${chk#data check: }"
    else
      bad $n "client rc=$c server rc=$r; ours: '${chk:-no data check line}'"
      grep -hi "invalid data" $L/$n.srv $L/$n.cli | head -3; tail -n 4 $L/$n.cli $L/$n.srv
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
  for i in $(seq 100); do grep -q "^Capturing on" $L/dumpcap && break; sleep 0.1; done
  grep -q "^Capturing on" $L/dumpcap || echo "dumpcap did not start: $(cat $L/dumpcap)"
  OUR="ip netns exec peer $BIN"
  N=100
  pair rc-pingpong.ours-server peer srv "$OUR rc-pingpong -d 10.99.2.2 -g 1 -n $N -c" \
                               "ibv_rc_pingpong -d rxe_r -g 1 -n $N -c 10.99.2.2"
  pair rc-pingpong.ours-client - cli "ibv_rc_pingpong -d rxe_r -g 1 -n $N -c" \
                               "$OUR rc-pingpong -d 10.99.2.2 -g 1 -n $N -c 10.99.2.1"
  pair rc-pingpong.ours-client-mtu256-8k - cli "ibv_rc_pingpong -d rxe_r -g 1 -n $N -c -m 256 -s 8192" \
                               "$OUR rc-pingpong -d 10.99.2.2 -g 1 -n $N -c -m 256 -s 8192 10.99.2.1"
  pair ud-pingpong.ours-server peer srv "$OUR ud-pingpong -d 10.99.2.2 -g 1 -n $N -s 1024 -c" \
                               "ibv_ud_pingpong -d rxe_r -g 1 -n $N -s 1024 -c 10.99.2.2"
  pair ud-pingpong.ours-client - cli "ibv_ud_pingpong -d rxe_r -g 1 -n $N -s 1024 -c" \
                               "$OUR ud-pingpong -d 10.99.2.2 -g 1 -n $N -s 1024 -c 10.99.2.1"
  pair uc-pingpong.ours-server peer srv "$OUR uc-pingpong -d 10.99.2.2 -g 1 -n $N -c" \
                               "ibv_uc_pingpong -d rxe_r -g 1 -n $N -c 10.99.2.2"
  pair uc-pingpong.ours-client - cli "ibv_uc_pingpong -d rxe_r -g 1 -n $N -c" \
                               "$OUR uc-pingpong -d 10.99.2.2 -g 1 -n $N -c 10.99.2.1"
  pair uc-pingpong.ours-client-mtu256-8k - cli "ibv_uc_pingpong -d rxe_r -g 1 -n $N -c -m 256 -s 8192" \
                               "$OUR uc-pingpong -d 10.99.2.2 -g 1 -n $N -c -m 256 -s 8192 10.99.2.1"
  # the AF_XDP datapath (DPUSTACK_ROCE_IO=xdp: a socket on vp, frames to rxe_r's MAC
  # from the peer netns' ARP table, port MTU from vp's 1500): against rxe both ways
  XDP="DPUSTACK_ROCE_IO=xdp $OUR"
  pair rc-pingpong.ours-client-xdp - cli "ibv_rc_pingpong -d rxe_r -g 1 -n $N -c" \
                               "$XDP rc-pingpong -d 10.99.2.2 -g 1 -n $N -c 10.99.2.1"
  pair ud-pingpong.ours-server-xdp peer srv "$XDP ud-pingpong -d 10.99.2.2 -g 1 -n $N -s 1024 -c" \
                               "ibv_ud_pingpong -d rxe_r -g 1 -n $N -s 1024 -c 10.99.2.2"
  # rping -V: the client compares its whole buffer with what came back (the server
  # RDMA READs it, then RDMA WRITEs it back), 5 x 8 KiB, both ways
  modprobe rdma_ucm 2>/dev/null
  timeout 60 rping -s -a 10.99.2.1 -C 5 -S 8192 -v > $L/rping1.srv 2>&1 & s=$!
  for i in $(seq 200); do rdma res show cm_id 2>/dev/null | grep LISTEN | grep -q ':7174 ' && break; sleep 0.05; done
  timeout 50 $OUR rping -c -a 10.99.2.1 -I 10.99.2.2 -C 5 -S 8192 -V -v > $L/rping1.cli 2>&1; c=$?
  wait $s; r=$?
  if [ $c = 0 ] && [ $(grep -c "^ping data: rdma-ping-" $L/rping1.cli) = 5 ] && ! grep -qi mismatch $L/rping1.cli; then
    ok rping-V.ours-client "5 x 8 KiB: our buffer read by rxe and written back, every byte compared"
  else bad rping-V.ours-client "client rc=$c server rc=$r"; tail -n 4 $L/rping1.cli $L/rping1.srv; fi
  # the same over AF_XDP (the CM's MADs and the RDMA READ/WRITE): our client on vp
  timeout 60 rping -s -a 10.99.2.1 -C 5 -S 8192 -v > $L/rping3.srv 2>&1 & s=$!
  for i in $(seq 200); do rdma res show cm_id 2>/dev/null | grep LISTEN | grep -q ':7174 ' && break; sleep 0.05; done
  DPUSTACK_ROCE_IO=xdp timeout 50 $OUR rping -c -a 10.99.2.1 -I 10.99.2.2 -C 5 -S 8192 -V -v > $L/rping3.cli 2>&1; c=$?
  wait $s; r=$?
  if [ $c = 0 ] && [ $(grep -c "^ping data: rdma-ping-" $L/rping3.cli) = 5 ] && ! grep -qi mismatch $L/rping3.cli; then
    ok rping-V.ours-client-xdp "5 x 8 KiB over AF_XDP on vp: our buffer read by rxe and written back, every byte compared"
  else bad rping-V.ours-client-xdp "client rc=$c server rc=$r"; tail -n 4 $L/rping3.cli $L/rping3.srv; fi
  timeout 60 $OUR rping -s -a 10.99.2.2 -C 5 -S 8192 -v -d > $L/rping2.srv 2>&1 & s=$!
  for i in $(seq 200); do grep -q "rping: listening on" $L/rping2.srv && break; sleep 0.05; done
  timeout 50 rping -c -a 10.99.2.2 -C 5 -S 8192 -V -v > $L/rping2.cli 2>&1; c=$?
  wait $s; r=$?
  if [ $c = 0 ] && [ $(grep -c "^ping data: rdma-ping-" $L/rping2.cli) = 5 ] && ! grep -qi mismatch $L/rping2.cli; then
    ok rping-V.ours-server "5 x 8 KiB: rxe's buffer read by us and written back, every byte compared by rping"
  else bad rping-V.ours-server "client rc=$c server rc=$r"; tail -n 4 $L/rping2.cli $L/rping2.srv; fi
  kill $DC; wait $DC 2>/dev/null
  ours=$(tshark -r /vmh/roce03.pcap -Y 'infiniband && ip.src==10.99.2.2' 2>/dev/null | wc -l)
  theirs=$(tshark -r /vmh/roce03.pcap -Y 'infiniband && ip.src==10.99.2.1' 2>/dev/null | wc -l)
  [ "$ours" -gt 100 ] && [ "$theirs" -gt 100 ] \
    && ok roce-tshark-decodes "$ours BTH frames from us, $theirs from rxe" \
    || bad roce-tshark-decodes "$ours ours, $theirs rxe"
  mal=$(tshark -r /vmh/roce03.pcap -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null | wc -l)
  [ "$mal" = 0 ] && ok roce-tshark-no-malformed "no malformed or error-level frame in $((ours + theirs)) RoCE frames" \
    || { bad roce-tshark-no-malformed "$mal malformed/error frames"; tshark -r /vmh/roce03.pcap -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null | head -5; }
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
echo "PLAN 17"
: "${V:?run from tests/interop/run.sh (needs V, BIN, ROOT, P)}"
[ -x "$BIN" ] || { echo "FAIL roce-binary (build it: cargo build --release -p dpustack)"; exit 1; }
bash $V exec -t 400 "bash $ROOT/tests/interop/03-roce.sh guest $BIN $P"
