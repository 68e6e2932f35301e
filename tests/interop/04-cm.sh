#!/bin/bash
# RDMA CM interop with Linux (issue #4). dpustack runs on the host in the harness
# netns (10.99.0.1, soft RoCE on UDP 4791); the kernel's rxe0 sits on the guest's
# eth0 (10.99.0.2); the guest runs rdma-core's librdmacm tools.
#   1. rping both directions (-V: data verified), REJ 8 ("no listener") both ways
#   2. ucmatose (2 connections, ours with -m channel migration) and udaddy (SIDR + UD), both ways
#   3. rdma_client -> our cm-server, our cm-client -> rdma_server
#   4. tshark decodes our capture of all that as IB CM (REQ/REP/RTU/DREQ/DREP/REJ/SIDR)
#   5. cmtime, 100 connections: ours (host) against the guest's cmtime server, and
#      librdmacm against itself on rxe_a <-> rxe_b in the guest, same run (INFO lines;
#      the librdmacm-vs-librdmacm baseline is a HARNESS line, not a check of dpustack)
# Servers are waited for by polling (a Linux CM listener in `rdma res`, or our tool's
# own "listening" line), not by sleeping.
# Prints PLAN and PASS/FAIL lines. Needs $V (vm.sh), $BIN (dpustack), $ROOT.
set -u
echo "PLAN 17"
TAP=${VMH_TAP:-vmhtap0}
W=$(mktemp -d /tmp/cm-interop.XXXXXX)
H=10.99.0.1 G=10.99.0.2
N=${CM_CMTIME_CONNS:-100}
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
g() { bash $V exec -t ${GT:-60} "$1"; }              # run in the guest
ours() { timeout ${OT:-60} bash $V hostns $BIN "$@"; }  # run dpustack in the host netns
# a Linux CM listener on PORT in the guest (rdma res: state LISTEN, src-addr *:PORT)
glisten() {
  g "for i in \$(seq 200); do rdma res show cm_id 2>/dev/null | grep LISTEN | grep -q ':$1 ' && exit 0; sleep 0.1; done; echo 'no CM listener on port $1'; rdma res show cm_id; exit 1"
}
# our server's own readiness line PATTERN in FILE
olisten() {
  for i in $(seq 200); do grep -q "$2" $1 2>/dev/null && return 0; sleep 0.1; done
  echo "no '$2' in $1 after 20 s:"; tail -n 3 $1; return 1
}

CAP=
cleanup() {
  [ -n "$CAP" ] && { kill $CAP 2>/dev/null; wait $CAP 2>/dev/null; }
  rm -rf $W
}
trap cleanup EXIT

[ -x "$BIN" ] || { fail "cm-binary ($BIN missing)"; exit 1; }
g "modprobe -a rdma_rxe rdma_ucm; rdma link show rxe0 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev eth0" >/dev/null 2>&1
bash $V hostns dumpcap -q -i $TAP -f "udp port 4791" -w $W/cm.pcap > $W/cap.log 2>&1 &
CAP=$!
for i in $(seq 100); do grep -q "^Capturing on" $W/cap.log && break; sleep 0.1; done
grep -q "^Capturing on" $W/cap.log || echo "dumpcap did not start: $(cat $W/cap.log)"

# --- 1. rping ------------------------------------------------------------------------
(GT=60 g "rping -s -a $G -C 5 -V -v") > $W/g.log 2>&1 < /dev/null &
glisten 7174
ours rping -c -a $G -I $H -C 5 -V -v > $W/o.log 2>&1; rc=$?
wait $!
if [ $rc = 0 ] && [ $(grep -c "^ping data: rdma-ping-" $W/o.log) = 5 ] && [ $(grep -c "server ping data: rdma-ping-" $W/g.log) = 5 ]; then
  pass "cm-rping-ours-client-linux-server (5 pings, READ+WRITE, validated)"
else fail "cm-rping-ours-client-linux-server (rc $rc)"; tail -n 5 $W/o.log $W/g.log; fi

(ours rping -s -a $H -v -d; echo "rc=$?") > $W/o.log 2>&1 < /dev/null &
olisten $W/o.log "rping: listening on"
out=$(g "rping -c -a $H -C 5 -V -v; echo rc=\$?" 2>&1)
wait $!
if echo "$out" | grep -q "rc=0" && [ $(echo "$out" | grep -c "^ping data: rdma-ping-") = 5 ] \
   && [ $(grep -c "server ping data: rdma-ping-" $W/o.log) = 5 ] && grep -q "rc=0" $W/o.log; then
  pass "cm-rping-linux-client-ours-server (5 pings, validated)"
else fail "cm-rping-linux-client-ours-server"; echo "$out" | tail -5; tail -n 5 $W/o.log; fi

# REJ reason 8 when nothing listens: the kernel rejects us, we reject the kernel.
ours rping -c -a $G -I $H -p 9999 -C 1 > $W/o.log 2>&1
grep -q "RDMA_CM_EVENT_REJECTED, error 8" $W/o.log && pass "cm-rej8-from-linux (no listener on 9999)" \
  || { fail "cm-rej8-from-linux"; tail -n 3 $W/o.log; }
(ours rping -s -a $H -d) > $W/o.log 2>&1 < /dev/null &
olisten $W/o.log "rping: listening on"
out=$(g "rping -c -a $H -p 9999 -C 1; rping -c -a $H -C 1 -V" 2>&1)
wait $!
echo "$out" | grep -q "RDMA_CM_EVENT_REJECTED, error 8" && pass "cm-rej8-to-linux (our CM answers a REQ for an unused port)" \
  || { fail "cm-rej8-to-linux"; echo "$out" | tail -3; }

# --- 2. ucmatose / udaddy ------------------------------------------------------------------
(ours ucmatose -b $H -c 2 -m; echo "rc=$?") > $W/o.log 2>&1 < /dev/null &
olisten $W/o.log "cmatose: starting server"
out=$(g "ucmatose -b $G -s $H -c 2" 2>&1)
wait $!
echo "$out" | grep -q "return status 0" && grep -q "rc=0" $W/o.log && grep -q "^disconnected" $W/o.log \
  && pass "cm-ucmatose-linux-client-ours-server (2 conns x 10 msgs each way, channel migration)" \
  || { fail "cm-ucmatose-linux-client-ours-server"; echo "$out" | tail -3; tail -n 3 $W/o.log; }

(GT=60 g "ucmatose -b $G -c 2") > $W/g.log 2>&1 < /dev/null &
glisten 7471
ours ucmatose -b $H -s $G -c 2 > $W/o.log 2>&1; rc=$?
wait $!
[ $rc = 0 ] && grep -q "return status 0" $W/g.log && pass "cm-ucmatose-ours-client-linux-server" \
  || { fail "cm-ucmatose-ours-client-linux-server (rc $rc)"; tail -n 3 $W/o.log $W/g.log; }

(ours udaddy -b $H; echo "rc=$?") > $W/o.log 2>&1 < /dev/null &
olisten $W/o.log "udaddy: starting server"
out=$(g "udaddy -b $G -s $H" 2>&1)
wait $!
echo "$out" | grep -q "return status 0" && grep -q "rc=0" $W/o.log \
  && pass "cm-udaddy-linux-client-ours-server (SIDR, 10 UD msgs each way)" \
  || { fail "cm-udaddy-linux-client-ours-server"; echo "$out" | tail -3; tail -n 3 $W/o.log; }

(GT=60 g "udaddy -b $G") > $W/g.log 2>&1 < /dev/null &
glisten 7174
ours udaddy -b $H -s $G > $W/o.log 2>&1; rc=$?
wait $!
[ $rc = 0 ] && grep -q "return status 0" $W/g.log && pass "cm-udaddy-ours-client-linux-server" \
  || { fail "cm-udaddy-ours-client-linux-server (rc $rc)"; tail -n 3 $W/o.log $W/g.log; }

# --- 3. rdma_client / rdma_server --------------------------------------------------------------
(ours cm-server -b $H; echo "rc=$?") > $W/o.log 2>&1 < /dev/null &
olisten $W/o.log "rdma_server: start"
out=$(g "rdma_client -s $H; echo rc=\$?" 2>&1)
wait $!
echo "$out" | grep -q "rc=0" && grep -q "rc=0" $W/o.log && pass "cm-rdma_client-to-our-cm-server" \
  || { fail "cm-rdma_client-to-our-cm-server"; echo "$out" | tail -3; tail -n 3 $W/o.log; }
(GT=40 g "rdma_server; echo rc=\$?") > $W/g.log 2>&1 < /dev/null &
glisten 7471
ours cm-client -s $G -b $H > $W/o.log 2>&1; rc=$?
wait $!
[ $rc = 0 ] && grep -q "rc=0" $W/g.log && pass "cm-our-cm-client-to-rdma_server" \
  || { fail "cm-our-cm-client-to-rdma_server (rc $rc)"; tail -n 3 $W/o.log $W/g.log; }

# --- 4. tshark ---------------------------------------------------------------------------------
sleep 1; kill $CAP 2>/dev/null; wait $CAP 2>/dev/null; CAP=
info=$(tshark -r $W/cm.pcap -T fields -e _ws.col.Info 2>/dev/null)
ok=1
for m in ConnectRequest ConnectReply ReadyToUse DisconnectRequest DisconnectReply ConnectReject ServiceIDResReq ServiceIDResReqResp; do
  echo "$info" | grep -q "CM: $m\$\|CM: $m " || { ok=0; echo "   missing CM: $m"; }
done
mal=$(tshark -r $W/cm.pcap -Y "_ws.malformed || _ws.expert.severity >= error" 2>/dev/null | wc -l)
[ $ok = 1 ] && [ $mal = 0 ] && pass "cm-tshark-decodes-ib-cm ($(echo "$info" | grep -c 'CM: ') CM MADs, 0 malformed)" \
  || fail "cm-tshark-decodes-ib-cm (malformed $mal)"

# --- 5. cmtime, same run: ours vs librdmacm ----------------------------------------------------------
g "sh $ROOT/tests/peers/guest/rxe-pair.sh" >/dev/null 2>&1
# cmtime's server never exits by itself: bound it with timeout in the guest.
(GT=200 g "timeout 150 cmtime -b $G -c $N") > $W/g.log 2>&1 < /dev/null &
glisten 7471
OT=140 ours cmtime -b $H -s $G -c $N > $W/o.log 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "^connect" $W/o.log; then
  pass "cm-cmtime-ours-vs-linux-server ($N connections)"
  sed -n '/^step/,$p' $W/o.log | sed 's/^/INFO ours->linux /'
else fail "cm-cmtime-ours-vs-linux-server (rc $rc)"; tail -n 5 $W/o.log $W/g.log; fi
(GT=200 g "timeout 150 cmtime -b 10.99.1.2 -p 7472 -c $N") > $W/g2.log 2>&1 < /dev/null &
glisten 7472
out=$(GT=140 g "cmtime -b 10.99.1.1 -s 10.99.1.2 -p 7472 -c $N" 2>&1)
if echo "$out" | grep -q "^connect"; then
  echo "HARNESS PASS cm-cmtime-librdmacm-baseline ($N connections, rxe_a -> rxe_b in the guest)"
  echo "$out" | sed -n '/^step/,$p' | sed 's/^/INFO linux->linux /'
else echo "HARNESS FAIL cm-cmtime-librdmacm-baseline"; echo "$out" | tail -5; fi

# --- 6. the CM as a node service: `dpustack up` (rdma + cm parts) on the host-netns address ----
# As the cm-rping-linux-client-ours-server check places our server: $H in the harness netns.
mkdir -p $W/node
cat > $W/up.toml <<EOT
[node]
listen_ip = "$H"
data_dir = "$W/node"
[nvmf]
enabled = false
[switch]
enabled = false
[cm]
rping_port = 7174
EOT
(timeout 120 bash $V hostns sh -c "echo \$\$ > $W/up.pid; exec $BIN --config $W/up.toml up"; echo "rc=$?") > $W/up.log 2>&1 < /dev/null &
UP=$!
olisten $W/up.log "running  cm .*rping echo server on $H:7174"
out=$(g "rping -c -a $H -C 3 -v -V; echo rc=\$?; rping -c -a $H -p 9998 -C 1; udaddy -b $G -s $H" 2>&1)
[ -s $W/up.pid ] && kill -INT $(cat $W/up.pid) 2>/dev/null
wait $UP
if grep -q "running  cm .*rping echo server on $H:7174" $W/up.log && echo "$out" | grep -q "^rc=0" \
   && [ $(echo "$out" | grep -c "^ping data: rdma-ping-") = 3 ] && ! echo "$out" | grep -qi mismatch; then
  pass "cm-up-node-service-rping (Linux rping -C 3 -V against dpustack up, validated)"
else fail "cm-up-node-service-rping"; echo "$out" | tail -5; tail -n 8 $W/up.log; fi
echo "$out" | grep -q "RDMA_CM_EVENT_REJECTED, error 8" && pass "cm-up-node-service-rej8 (REQ to a port nobody listens on)" \
  || { fail "cm-up-node-service-rej8"; echo "$out" | tail -3; }
echo "$out" | grep -q "RDMA_CM_EVENT_UNREACHABLE, error: 1" && pass "cm-up-node-service-sidr-status1 (udaddy: SIDR_REQ for a UDP port nobody serves)" \
  || { fail "cm-up-node-service-sidr-status1"; echo "$out" | tail -3; }
grep -q "^stopping" $W/up.log && grep -q "^rc=0" $W/up.log && pass "cm-up-node-service-stops (Ctrl-C: clean shutdown)" \
  || { fail "cm-up-node-service-stops"; tail -n 5 $W/up.log; }

# --- 7. rdma_resolve_addr without a route: the call itself fails with ENETUNREACH on both -----
# (no event: the kernel's rdma_resolve_ip returns the route lookup's error; 10.200.0.0/16 is
# routed neither in the guest nor in the harness netns, so nothing is sent)
out=$(g "rping -c -a 10.200.0.1 -C 1" 2>&1); o=$(ours rping -c -a 10.200.0.1 -I $H -C 1 2>&1)
echo "$out" | grep -q "rdma_resolve_addr: Network is unreachable" && echo "$o" | grep -q "rdma_resolve_addr: Network is unreachable" \
  && pass "cm-resolve-no-route-like-linux (rdma_resolve_addr fails: Network is unreachable)" \
  || { fail "cm-resolve-no-route-like-linux"; echo "$out" | tail -2; echo "$o" | head -2; }
