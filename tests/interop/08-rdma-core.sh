#!/bin/bash
# Interop: dpustack's rdma-core verbs provider (cargo feature `rdma-core`) on the
# guest's kernel rxe devices. Builds dpustack and the verbs provider test with
# `--features rdma-core` (needs libibverbs-dev on the host), then in the guest:
#   * `dpustack devices` lists the kernel devices (rdma-core) next to the soft ones;
#   * rc-/ud-pingpong --provider rdma-core -c on rxe_a against ibv_rc_pingpong /
#     ibv_ud_pingpong -c on rxe_b, ours as server and as client (every byte of
#     every received buffer checked on our side), uc-pingpong with completion
#     events (-e);
#   * ours on rdma-core (rxe_r) against ours on the soft provider (guest netns
#     `peer`, 10.99.2.2), RC, both checking;
#   * the verbs API scenario of crates/verbs/tests/providers.rs on rxe_a/rxe_b;
#   * the CM over librdmacm (the `cm` crate's backend for kernel devices): our rping
#     (-V, 5 pings, READ+WRITE, every ping's bytes checked by both rpings), ucmatose
#     (2 connections x 10 messages each way; ours as server migrates its ids to a new
#     channel, -m) and udaddy (SIDR + UD messages) on rxe_a against librdmacm's own
#     tools on rxe_b, ours as client and as server; our rping on rdma-core (rxe_r)
#     against our rping on the soft provider (own CM, netns peer) both ways;
#   * NVMe-oF over RDMA: Linux nvme-rdma (rxe_a) against our target on rdma-core
#     (`nvmf serve` on 10.99.1.2 opens rxe_b, its CM is librdmacm): connect, 4 MiB and
#     4 KiB written with dd, read back, compared, disconnect;
#   * the object store's RPC over RDMA on rdma-core: `dpustack engine --rdma-listen` on
#     rxe_b, the client tools on rxe_a: pool create, cont create, a 3 MB value put and
#     got back, compared;
#   * port down / device removal under live QPs (crates/verbs/tests/providers.rs
#     rdma_core_port_down_and_device_removal, on a veth + rxe pair of its own):
#     PORT_ERR / PORT_ACTIVE async events, the failed SEND (LOC_QP_OP_ERR) and
#     flushed receives (WR_FLUSH_ERR), EBUSY for the wrong destroy order, new QPs
#     after the port is up again, `rdma link delete` waiting for the close, and
#     `rdma resource show` back to baseline;
#   * the CM API scenario of crates/cm/tests/providers.rs on rxe_a/rxe_b (librdmacm
#     backend: RC with private data + ECE, SEND/WRITE, REJ 28/8 on an async channel
#     and its fd, SIDR + UD SEND, close -> DEVICE_REMOVAL/ENODEV, kernel resource
#     counts back to baseline).
#
# Host side (run.sh): bash 08-rdma-core.sh        (uses $V, $ROOT)
# Guest side (internal): bash 08-rdma-core.sh guest BIN VERBS-TESTBIN CM-TESTBIN
#
# Figures (not run by run.sh): bash 08-rdma-core.sh perf [ROUNDS] [SECS] [ITERS]
#   in the guest, same rxe devices (rxe_a -> rxe_b), interleaved rounds (the order
#   ours/perftest alternates between rounds):
#   dpustack perf write-bw / write-lat --provider rdma-core vs perftest's
#   ib_write_bw / ib_write_lat (64 KiB WRITEs for bandwidth, 2 B for latency,
#   MTU 1024 = the veth's rxe MTU); every figure, then median [min-max]. A perftest
#   figure printed as "inf" (its cycle count broke) is a failed attempt, retried.
#   write-lat is ib_write_lat's method on both sides (docs/roce.md).
# Servers are waited for by polling their TCP exchange port (ss), not by sleeping.
set -u
NCHECKS=21
# listening NS PORT PID: until something listens on TCP PORT in netns NS ("-": the
# initial one), polled every 50 ms for up to ${READY_SECS:-30} s (TCG: our binary takes
# seconds to start from 9p); fails at once if the server PID has exited
listening() {
  local x="" i; [ "$1" != - ] && x="ip netns exec $1"
  for i in $(seq $(( ${READY_SECS:-30} * 20 ))); do
    $x ss -Hltn "sport = :$2" | grep -q . && return 0
    kill -0 $3 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

if [ "${1:-}" = perf-guest ]; then
  BIN=$2 ROUNDS=$3 D=$4 N=$5 L=/tmp/rc08perf; mkdir -p $L
  sh $(dirname $0)/../peers/guest/rxe-pair.sh > $L/pair 2>&1
  OUR="$BIN --provider rdma-core perf"
  ours() {  # TEST ARGS -> client JSON in $L/ours.json
    timeout 90 $OUR $1 -d rxe_b -m 1024 > $L/ours.srv 2>&1 & local s=$!
    if ! listening - 18516 $s; then   # our perf's exchange port
      echo "our perf server not listening on TCP 18516 after ${READY_SECS:-30} s" > $L/ours.err
      kill $s 2>/dev/null; wait $s; : > $L/ours.json; return
    fi
    timeout 80 $OUR "$@" -d rxe_a -m 1024 --json 10.99.1.2 > $L/ours.json 2> $L/ours.err
    wait $s
  }
  ptest() {  # TOOL ARGS -> client output
    timeout 90 "$@" -d rxe_b -x 1 -F > $L/pt.srv 2>&1 & local s=$!
    if ! listening - 18515 $s; then   # perftest's exchange port
      echo "$1 server not listening on TCP 18515 after ${READY_SECS:-30} s"
      kill $s 2>/dev/null; wait $s; return
    fi
    timeout 80 "$@" -d rxe_a -x 1 -F 10.99.1.2; wait $s
  }
  prow() { awk '/#bytes/ {getline; print; exit}'; }
  # each measurement is retried (up to 3 times) until it gives a figure; every
  # failed attempt is counted and its output appended to $L/failed
  nfail=0
  try() {  # VAR FUNC: FUNC prints the figure or nothing
    local var=$1 i v; shift
    for i in 1 2 3; do
      v=$("$@"); [ -n "$v" ] && { printf -v $var '%s' "$v"; return; }
      nfail=$((nfail+1)); { echo "== $* (attempt $i)"; cat $L/last $L/ours.err 2>/dev/null; } >> $L/failed; sleep 2
    done
    printf -v $var ''
  }
  m_ob() { ours write-bw -D $D; cp $L/ours.json $L/last
    python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["bw"]/1e6))' < $L/ours.json 2>/dev/null; }
  m_pb() { ptest ib_write_bw -D $D > $L/last 2>&1
    prow < $L/last | awk 'NF >= 5 && $4 ~ /^[0-9.]+$/ && $4+0 > 0 {printf "%.3f", $4 * 1.048576}'; }
  m_ol() { ours write-lat -n $N; cp $L/ours.json $L/last
    python3 -c 'import json,sys; l=json.load(sys.stdin)["lat"]; print("%.2f %.2f" % (l["p50_ns"]/1e3, l["mean_ns"]/1e3))' < $L/ours.json 2>/dev/null; }
  m_pl() { ptest ib_write_lat -n $N > $L/last 2>&1
    prow < $L/last | awk 'NF >= 6 && $5 ~ /^[0-9.]+$/ && $6 ~ /^[0-9.]+$/ && $5+0 > 0 {print $5, $6}'; }
  : > $L/failed
  for r in $(seq $ROUNDS); do
    # the order alternates between rounds (ours first in odd rounds, perftest first in
    # even ones) so that a drift of the guest over a round biases neither side
    if [ $((r % 2)) = 1 ]; then try ob m_ob; try pb m_pb; try ol m_ol; try pl m_pl
    else try pb m_pb; try ob m_ob; try pl m_pl; try ol m_ol; fi
    echo "round $r: write-bw MB/s ours ${ob:-?} perftest ${pb:-?} | write-lat us (typical avg) ours ${ol:-?} perftest ${pl:-?}"
    [ -n "$ob" ] && [ -n "$pb" ] && [ -n "$ol" ] && [ -n "$pl" ] && echo "$ob $pb $ol $pl" >> $L/figs
  done
  python3 - $L/figs <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 6]
names = ["write-bw MB/s ours", "write-bw MB/s perftest", "write-lat typical us ours",
         "write-lat avg us ours", "write-lat typical us perftest", "write-lat avg us perftest"]
for i, n in enumerate(names):
    v = [float(r[i]) for r in rows]
    if v:
        print(f"{n}: median {st.median(v):.3f} [{min(v):.3f}-{max(v):.3f}] over {len(v)} rounds")
if rows:
    rb = [float(r[0]) / float(r[1]) for r in rows]
    rl = [float(r[2]) / float(r[4]) for r in rows]
    print(f"ratio ours/perftest per round (perftest bw in MB = 2^20 B, converted to 10^6): bw {[round(x, 3) for x in rb]} (median {st.median(rb):.3f}), "
          f"typical latency {[round(x, 3) for x in rl]} (median {st.median(rl):.3f})")
PY
  echo "failed attempts (retried): $nfail"; rm -f $L/figs
  exit 0
fi

if [ "${1:-}" = guest ]; then
  BIN=$2 TB=$3 CB=${4:-} L=/tmp/rc08; mkdir -p $L
  ok()  { echo "PASS $1${2:+  ($2)}"; }
  bad() { echo "FAIL $1${2:+  ($2)}"; }
  # pair NAME SERVER-NETNS SERVER-CMD CLIENT-CMD: the server listens on TCP 18515 (the
  # pingpong exchange) within ${READY_SECS:-30} s, both exit 0, no "invalid data" line
  pair() {
    local n=$1
    timeout 80 sh -c "$3" > $L/$n.srv 2>&1 & local s=$!
    if ! listening $2 18515 $s; then
      bad $n "server not listening on TCP 18515 after ${READY_SECS:-30} s (or it exited)"
      kill $s 2>/dev/null; wait $s; tail -n 4 $L/$n.srv; return
    fi
    timeout 60 sh -c "$4" > $L/$n.cli 2>&1; local c=$?
    [ $c != 0 ] && kill $s 2>/dev/null   # a failed client: do not wait out the server
    wait $s; local r=$?
    if [ $c = 0 ] && [ $r = 0 ] && ! grep -qi 'invalid data' $L/$n.cli $L/$n.srv \
       && grep -q 'buffers validated' $L/$n.cli $L/$n.srv; then
      ok $n "$(grep -h 'iters in' $L/$n.cli | head -1); $(grep -h 'validated' $L/$n.cli $L/$n.srv | head -1)"
    else
      bad $n "client rc=$c server rc=$r"; tail -n 4 $L/$n.cli $L/$n.srv
    fi
  }
  [ -x "$BIN" ] || { bad rdma-core-binary "$BIN not visible in the guest"; exit 1; }
  sh $(dirname $0)/../peers/guest/rxe-pair.sh > $L/pair 2>&1
  if ! ip link show vr > /dev/null 2>&1; then   # as 03-roce.sh / guest/selftest.sh
    ip netns add peer; ip link add vr type veth peer name vp; ip link set vp netns peer
    ip addr add 10.99.2.1/24 dev vr; ip link set vr up
    ip -n peer addr add 10.99.2.2/24 dev vp; ip -n peer link set vp up; ip -n peer link set lo up
  fi
  rdma link show rxe_r > /dev/null 2>&1 || rdma link add rxe_r type rxe netdev vr 2>/dev/null || true
  N=100
  OUR="$BIN --provider rdma-core"
  $BIN devices > $L/devices 2>&1
  if grep -q '^rxe_a (rdma-core)' $L/devices && grep -q '^rxe_b (rdma-core)' $L/devices \
     && grep -q '(soft)' $L/devices && grep -q 'ffff:0a63:0101 RoCE v2' $L/devices; then
    ok devices-lists-both "$(grep -c '(rdma-core)' $L/devices) kernel, $(grep -c '(soft)' $L/devices) soft"
  else
    bad devices-lists-both; head -20 $L/devices
  fi
  pair rc-pingpong.ours-server - "$OUR rc-pingpong -d rxe_a -g 1 -n $N -c" \
                               "ibv_rc_pingpong -d rxe_b -g 1 -n $N -c 10.99.1.1"
  pair rc-pingpong.ours-client - "ibv_rc_pingpong -d rxe_b -g 1 -n $N -c" \
                               "$OUR rc-pingpong -d rxe_a -g 1 -n $N -c 10.99.1.2"
  pair ud-pingpong.ours-server - "$OUR ud-pingpong -d rxe_a -g 1 -n $N -s 1024 -c" \
                               "ibv_ud_pingpong -d rxe_b -g 1 -n $N -s 1024 -c 10.99.1.1"
  pair ud-pingpong.ours-client - "ibv_ud_pingpong -d rxe_b -g 1 -n $N -s 1024 -c" \
                               "$OUR ud-pingpong -d rxe_a -g 1 -n $N -s 1024 -c 10.99.1.2"
  pair uc-pingpong.ours-client-events - "ibv_uc_pingpong -d rxe_b -g 1 -n $N -c -e" \
                               "$OUR uc-pingpong -d 10.99.1.1 -g 1 -n $N -c -e 10.99.1.2"
  # ours (kernel rxe_r, 10.99.2.1) <-> ours (soft provider in netns peer, 10.99.2.2)
  pair rc-pingpong.rdma-core-vs-soft peer "ip netns exec peer $BIN --provider soft rc-pingpong -d 10.99.2.2 -g 1 -n $N -c" \
                               "$OUR rc-pingpong -d rxe_r -g 1 -n $N -c 10.99.2.2"
  pair rc-pingpong.soft-vs-rdma-core - "$OUR rc-pingpong -d 10.99.2.1 -g 1 -n $N -c" \
                               "ip netns exec peer $BIN --provider soft rc-pingpong -d 10.99.2.2 -g 1 -n $N -c 10.99.2.1"
  # --- the CM over librdmacm ---
  # cmready HOW ARG PID FILE: HOW=cm: a kernel CM listener on port ARG (`rdma res`,
  # state LISTEN: librdmacm's tools and ours on rdma-core); HOW=line: ARG in FILE (our
  # tools on the soft provider print it); polled every 0.1 s for ${READY_SECS:-30} s,
  # failing at once if the server PID has exited
  cmready() {
    local i
    for i in $(seq $(( ${READY_SECS:-30} * 10 ))); do
      if [ $1 = cm ]; then rdma res show cm_id 2>/dev/null | grep LISTEN | grep -q ":$2 " && return 0
      else grep -q "$2" $4 2>/dev/null && return 0; fi
      kill -0 $3 2>/dev/null || return 1
      sleep 0.1
    done
    return 1
  }
  # cmpair NAME HOW ARG SERVER-CMD CLIENT-CMD: server in the background until ready,
  # then the client; their outputs in $L/NAME.srv / .cli, exit codes in $sr / $cr
  cmpair() {
    local n=$1
    timeout 80 sh -c "$4" > $L/$n.srv 2>&1 & local s=$!
    if ! cmready $2 "$3" $s $L/$n.srv; then
      echo "server not ready after ${READY_SECS:-30} s (or it exited)" > $L/$n.cli
      kill $s 2>/dev/null; wait $s; sr=$?; cr=99; return
    fi
    timeout 60 sh -c "$5" > $L/$n.cli 2>&1; cr=$?
    [ $cr != 0 ] && { sleep 2; kill $s 2>/dev/null; }   # a failed client: do not wait out the server
    wait $s; sr=$?
  }
  cmshow() { bad $1 "client rc=$cr server rc=$sr"; tail -n 4 $L/$1.cli $L/$1.srv; }
  # rping: 5 pings validated (-V) by the client, each one's data printed by the server
  rpingcheck() {
    if [ $cr = 0 ] && [ $sr = 0 ] && [ $(grep -c "^ping data: rdma-ping-" $L/$1.cli) = 5 ] \
       && [ $(grep -c "server ping data: rdma-ping-" $L/$1.srv) = 5 ]; then
      ok $1 "5 pings, READ+WRITE, validated"
    else cmshow $1; fi
  }
  A=10.99.1.1 B=10.99.1.2
  cmpair rping.ours-client cm 7174 "rping -s -a $B -C 5 -V -v" "$OUR rping -c -a $B -I $A -C 5 -V -v"
  rpingcheck rping.ours-client
  cmpair rping.ours-server cm 7174 "$OUR rping -s -a $A -v" "rping -c -a $A -I $B -C 5 -V -v"
  rpingcheck rping.ours-server
  cmpair ucmatose.ours-client cm 7471 "ucmatose -b $B -c 2" "$OUR ucmatose -b $A -s $B -c 2"
  if [ $cr = 0 ] && [ $sr = 0 ] && grep -q "return status 0" $L/ucmatose.ours-client.srv; then
    ok ucmatose.ours-client "2 connections x 10 messages each way"
  else cmshow ucmatose.ours-client; fi
  cmpair ucmatose.ours-server cm 7471 "$OUR ucmatose -b $A -c 2 -m" "ucmatose -b $B -s $A -c 2"
  if [ $cr = 0 ] && [ $sr = 0 ] && grep -q "return status 0" $L/ucmatose.ours-server.cli \
     && grep -q "^disconnected" $L/ucmatose.ours-server.srv; then
    ok ucmatose.ours-server "2 connections x 10 messages each way, channel migration"
  else cmshow ucmatose.ours-server; fi
  cmpair udaddy.ours-client cm 7174 "udaddy -b $B" "$OUR udaddy -b $A -s $B"
  if [ $cr = 0 ] && [ $sr = 0 ] && grep -q "return status 0" $L/udaddy.ours-client.srv; then
    ok udaddy.ours-client "SIDR, UD messages each way"
  else cmshow udaddy.ours-client; fi
  cmpair udaddy.ours-server cm 7174 "$OUR udaddy -b $A" "udaddy -b $B -s $A"
  if [ $cr = 0 ] && [ $sr = 0 ] && grep -q "return status 0" $L/udaddy.ours-server.cli; then
    ok udaddy.ours-server "SIDR, UD messages each way"
  else cmshow udaddy.ours-server; fi
  # ours on rdma-core (librdmacm, rxe_r 10.99.2.1) <-> ours on the soft provider (own CM, netns peer)
  cmpair rping.rdma-core-client-vs-soft line "rping: listening on" \
    "ip netns exec peer $BIN --provider soft rping -s -a 10.99.2.2 -v -d" \
    "$OUR rping -c -a 10.99.2.2 -I 10.99.2.1 -C 5 -V -v"
  rpingcheck rping.rdma-core-client-vs-soft
  cmpair rping.soft-client-vs-rdma-core cm 7174 "$OUR rping -s -a 10.99.2.1 -v" \
    "ip netns exec peer $BIN --provider soft rping -c -a 10.99.2.1 -I 10.99.2.2 -C 5 -V -v"
  rpingcheck rping.soft-client-vs-rdma-core
  # NVMe-oF over RDMA: the kernel's nvme-rdma host on rxe_a -> our target on rxe_b
  # (port 4430: earlier scripts leave kernel nvmet-rdma ports on 4420 in this guest, and
  # in a full interop run 4420 on rxe_b was found taken: "address in use")
  P8=4430
  NQN=nqn.2024-01.io.dpustack:rc08; modprobe nvme-rdma 2>/dev/null
  timeout 200 $BIN nvmf serve --listen rdma://$B:$P8 --discovery-port 0 --bdev malloc:64M --nqn $NQN \
    --idle-spins 0 --for 150 > $L/nvmf.srv 2>&1 & s=$!
  if cmready cm $P8 $s $L/nvmf.srv; then
    {
      timeout 60 nvme connect -t rdma -a $B -s $P8 -n $NQN -w $A && echo "CONNECT ok"
      for i in $(seq 100); do D=$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -n "$D" ] && break; sleep 0.1; done
      head -c 4194304 /dev/urandom > $L/w.bin; head -c 4096 /dev/urandom > $L/w4.bin
      dd if=$L/w.bin of=$D bs=1M oflag=direct 2>/dev/null
      dd if=$D of=$L/r.bin bs=1M count=4 iflag=direct 2>/dev/null
      cmp $L/w.bin $L/r.bin && echo "CMP4M ok"
      dd if=$L/w4.bin of=$D bs=4k count=1 seek=5000 oflag=direct 2>/dev/null
      dd if=$D of=$L/r4.bin bs=4k count=1 skip=5000 iflag=direct 2>/dev/null
      cmp $L/w4.bin $L/r4.bin && echo "CMP4K ok"
      nvme disconnect -n $NQN
    } > $L/nvmf.cli 2>&1
  else echo "target not listening (kernel CM, port $P8)" > $L/nvmf.cli; fi
  kill $s 2>/dev/null; wait $s
  if grep -q "CONNECT ok" $L/nvmf.cli && grep -q "CMP4M ok" $L/nvmf.cli && grep -q "CMP4K ok" $L/nvmf.cli \
     && grep -q "disconnected 1 controller" $L/nvmf.cli; then
    ok nvmf-rdma.linux-host-ours-target "connect, 4 MiB + 4 KiB dd write/read/cmp, disconnect"
  else
    bad nvmf-rdma.linux-host-ours-target; tail -n 6 $L/nvmf.cli $L/nvmf.srv
    rdma resource show cm_id 2>/dev/null | head -20; ls /sys/kernel/config/nvmet/ports 2>/dev/null
  fi
  # the object store's RPC over RDMA: engine on rxe_b, client tools on rxe_a
  rm -rf $L/objd; mkdir -p $L/objd
  timeout 150 $BIN engine --listen 127.0.0.1:10001 --rdma-listen $B:10002 --data-dir $L/objd \
    --for 140 > $L/obj.srv 2>&1 & s=$!
  if cmready cm 10002 $s $L/obj.srv; then
    E="--engine rdma://$B:10002 --rdma-src $A"
    head -c 3000000 /dev/urandom > $L/v.bin; rm -f $L/v2.bin
    {
      timeout 60 $BIN pool create tank --size 64M $E && echo "POOL ok"
      timeout 60 $BIN cont create tank c1 $E && echo "CONT ok"
      timeout 60 $BIN obj put tank c1 7 d a $L/v.bin $E && echo "PUT ok"
      timeout 60 $BIN obj get tank c1 7 d a -o $L/v2.bin $E && echo "GET ok"
      cmp $L/v.bin $L/v2.bin && echo "CMP ok"
    } > $L/obj.cli 2>&1
  else echo "engine not listening (kernel CM, port 10002)" > $L/obj.cli; fi
  kill $s 2>/dev/null; wait $s
  if [ $(grep -c -E "^(POOL|CONT|PUT|GET|CMP) ok" $L/obj.cli) = 5 ]; then
    ok obj-rpc.rdma-core "pool, container, 3 MB put/get over RDMA, compared"
  else
    bad obj-rpc.rdma-core; tail -n 6 $L/obj.cli $L/obj.srv
  fi
  if timeout 120 $TB --ignored --exact rdma_core_provider > $L/api 2>&1; then
    ok verbs-api.rdma-core "$(grep -h 'test result' $L/api)"
  else
    bad verbs-api.rdma-core; tail -n 15 $L/api
  fi
  if timeout 120 $TB --ignored --exact rdma_core_port_down_and_device_removal --nocapture > $L/pdown 2>&1; then
    ok verbs-port-down.rdma-core "$(grep -h 'SEND completed' $L/pdown | grep -o 'status: [A-Za-z]*'); $(grep -h 'rdma link delete. done' $L/pdown | sed 's/.*done/removal done/')"
  else
    bad verbs-port-down.rdma-core; tail -n 15 $L/pdown
  fi
  if [ -n "$CB" ] && timeout 120 $CB --ignored --exact rdma_core_provider > $L/cmapi 2>&1; then
    ok cm-api.rdma-core "$(grep -h 'test result' $L/cmapi)"
  else
    bad cm-api.rdma-core; tail -n 15 $L/cmapi
  fi
  exit 0
fi

# host side
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)} V=${V:-$ROOT/tests/peers/vm.sh}
if [ "${1:-}" = perf ]; then
  cd $ROOT && cargo build --release -p dpustack --features rdma-core >/dev/null 2>&1 || exit 1
  bash $V exec -t 1800 "bash $ROOT/tests/interop/08-rdma-core.sh perf-guest $ROOT/target/release/dpustack ${2:-3} ${3:-3} ${4:-1000}"
  exit $?
fi
echo "PLAN $NCHECKS"
skip_all() { for c in devices-lists-both rc-pingpong.ours-server rc-pingpong.ours-client \
    ud-pingpong.ours-server ud-pingpong.ours-client uc-pingpong.ours-client-events \
    rc-pingpong.rdma-core-vs-soft rc-pingpong.soft-vs-rdma-core rping.ours-client \
    rping.ours-server ucmatose.ours-client ucmatose.ours-server udaddy.ours-client \
    udaddy.ours-server rping.rdma-core-client-vs-soft rping.soft-client-vs-rdma-core \
    nvmf-rdma.linux-host-ours-target obj-rpc.rdma-core verbs-api.rdma-core verbs-port-down.rdma-core \
    cm-api.rdma-core; do
    echo "SKIP $c ($1)"; done; exit 0; }
[ -f /usr/include/infiniband/verbs.h ] || skip_all "no libibverbs-dev on the host: apt-get install -y libibverbs-dev"
[ -f /usr/include/rdma/rdma_cma.h ] || skip_all "no librdmacm-dev on the host: apt-get install -y librdmacm-dev"
cd $ROOT
BIN=${BIN:-$ROOT/target/release/dpustack}
# the binary must have the rdma-core provider (run.sh's BIN; by hand: built here)
if ! ldd "$BIN" 2>/dev/null | grep libibverbs >/dev/null; then
  cargo build --release -p dpustack --features rdma-core > /tmp/rc08-build.log 2>&1 \
    || { tail -20 /tmp/rc08-build.log; skip_all "cargo build --features rdma-core failed"; }
  BIN=$ROOT/target/release/dpustack
fi
# the verbs and cm provider tests, from the workspace build with the rdma-core
# feature (test-all.sh's: nothing rebuilt)
exes=$(cargo test --workspace --features dpustack/rdma-core --test providers --no-run --message-format=json 2>/dev/null \
       | python3 -c '
import json, sys
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "providers":
        print(m["package_id"], m["executable"])')
TB=$(echo "$exes" | grep -E '^verbs |/verbs#' | awk '{print $NF}' | tail -1)
CB=$(echo "$exes" | grep -E '^cm |/cm#' | awk '{print $NF}' | tail -1)
[ -n "$TB" ] || skip_all "could not build the verbs provider test"
[ -n "$CB" ] || echo "the CM provider test did not build (cm-api.rdma-core will fail)"
bash $V exec -t 900 "bash $ROOT/tests/interop/08-rdma-core.sh guest $BIN $TB ${CB:+$CB}"
