#!/usr/bin/env bash
# controller_netns.sh - dpustack switch driven by a real OpenFlow 1.3 controller (issue 17).
#
# os-ken (PyPI, installed into .venv-osken/ of the repository when missing) runs
# learning_switch.py (a learning switch after upstream's simple_switch_13) through
# run_app.py (os-ken's app manager). `dpustack switch run --controller tcp:127.0.0.1:P`
# has three AF_PACKET ports on veths to three network namespaces this script creates
# (10.77.0.1-3/24, nothing outside them). Checks, in order:
#   1. the switch connects; ping between every pair of namespaces succeeds;
#   2. the controller's flows (priority=1,in_port,dl_src,dl_dst) are in dump-rules,
#      with the table-miss rule (priority=0 -> CONTROLLER);
#   3. packet-ins stop once the flows are installed (a second round of pings between
#      every pair: no packet-in);
#   4. the controller is killed: the installed flows keep forwarding (pings succeed);
#   5. the controller is restarted on the same port: the switch reconnects (os-ken
#      sees a new FEATURES exchange) and pings still succeed.
#
# Needs root (namespaces, veths, AF_PACKET), python3 with venv, network access to PyPI
# the first time. Exit status 0 = every check passed; each failure is printed.
#
#   sudo crates/switch/tests/osken/controller_netns.sh
#   DPUSTACK=path/to/dpustack  (default: $CARGO_TARGET_DIR or target/, debug build,
#                               built with `cargo build -p dpustack` when missing)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../../.." && pwd)
VENV=${OSKEN_VENV:-$ROOT/.venv-osken}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
DPUSTACK=${DPUSTACK:-$TARGET/debug/dpustack}

[ "$(id -u)" = 0 ] || { echo "controller_netns: needs root" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import os_ken' 2>/dev/null; then
    echo "controller_netns: installing os-ken into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q os-ken
fi
if [ ! -x "$DPUSTACK" ]; then
    (cd "$ROOT" && cargo build -q -p dpustack)
fi

ID=$$
W=$(mktemp -d /tmp/dps-ofc-XXXXXX)
NS=(ofc1-$ID ofc2-$ID ofc3-$ID)
IFS_SW=(ofcs1$ID ofcs2$ID ofcs3$ID)
CTL_PID=""
SW_PID=""
FAILS=0

cleanup() {
    [ -n "$CTL_PID" ] && kill "$CTL_PID" 2>/dev/null || true
    [ -n "$SW_PID" ] && kill "$SW_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null || true; done
    for i in "${IFS_SW[@]}"; do ip link del "$i" 2>/dev/null || true; done
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok:   $*"; }

for i in 0 1 2; do
    ip netns add "${NS[$i]}"
    ip link add "${IFS_SW[$i]}" type veth peer name eth0 netns "${NS[$i]}"
    ip link set "${IFS_SW[$i]}" up
    ip -n "${NS[$i]}" addr add "10.77.0.$((i + 1))/24" dev eth0
    ip -n "${NS[$i]}" link set eth0 up
    ip -n "${NS[$i]}" link set lo up
    # no IPv6 chatter (router solicitations, DAD) to count as packet-ins
    ip netns exec "${NS[$i]}" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
    ip netns exec "${NS[$i]}" sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1 || true
done
for i in "${IFS_SW[@]}"; do sysctl -qw "net.ipv6.conf.$i.disable_ipv6=1" || true; done

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PI="$W/controller.log"

start_controller() {
    DPUSTACK_OSKEN_LOG="$PI" "$VENV/bin/python" "$HERE/run_app.py" "$HERE/learning_switch.py" \
        --ofp-tcp-listen-port "$PORT" --ofp-listen-host 127.0.0.1 >>"$W/osken.out" 2>&1 &
    CTL_PID=$!
}

# wait_for FILE PATTERN COUNT SECS: until FILE has COUNT lines matching PATTERN
wait_for() {
    local end=$((SECONDS + $4))
    while [ $SECONDS -lt $end ]; do
        local n
        n=$(grep -c "$2" "$1" 2>/dev/null) || n=${n:-0}
        [ "${n:-0}" -ge "$3" ] && return 0
        sleep 0.2
    done
    return 1
}

n_packet_ins() {
    local n
    n=$(grep -c packet_in "$PI" 2>/dev/null) || n=${n:-0}
    echo "${n:-0}"
}

ping_all() {
    local bad=0
    for a in 0 1 2; do
        for b in 0 1 2; do
            [ $a = $b ] && continue
            if ! ip netns exec "${NS[$a]}" ping -q -c 2 -i 0.2 -W 1 "10.77.0.$((b + 1))" >/dev/null; then
                echo "  ping ${NS[$a]} -> 10.77.0.$((b + 1)) failed"
                bad=1
            fi
        done
    done
    return $bad
}

start_controller
"$DPUSTACK" switch run --controller "tcp:127.0.0.1:$PORT" --fail-mode secure \
    --port "1=afpacket:${IFS_SW[0]}" --port "2=afpacket:${IFS_SW[1]}" --port "3=afpacket:${IFS_SW[2]}" \
    -r "$W/sw.sock" >"$W/switch.out" 2>&1 &
SW_PID=$!

if wait_for "$PI" "connected" 1 20 && wait_for "$PI" "^.* ports " 1 10; then
    ok "switch connected to os-ken ($(grep ' ports ' "$PI" | tail -1 | cut -d' ' -f3-))"
else
    fail "switch did not connect to the controller"; tail -20 "$W/switch.out" "$W/osken.out"; exit 1
fi

if ping_all; then ok "ping between every pair (through the controller's packet-outs and flows)"; else fail "ping between every pair"; fi

RULES=$("$DPUSTACK" switch dump-rules -s "$W/sw.sock")
echo "$RULES" | sed 's/^/  /'
N_L2=$(echo "$RULES" | grep -c 'priority=1,in_port=[0-9]*,dl_src=[0-9a-f:]*,dl_dst=[0-9a-f:]* actions=output:[0-9]' || true)
if [ "$N_L2" -ge 6 ] && echo "$RULES" | grep -q 'priority=0 actions=CONTROLLER:65535'; then
    ok "dump-rules holds the controller's $N_L2 learned flows and its table-miss rule"
else
    fail "dump-rules: expected >= 6 learned flows and the table-miss rule, got $N_L2"
fi

BEFORE=$(n_packet_ins)
if ping_all; then ok "second round of pings"; else fail "second round of pings"; fi
AFTER=$(n_packet_ins)
if [ "$AFTER" = "$BEFORE" ]; then
    ok "packet-ins stopped once the flows were installed ($BEFORE during learning, 0 since)"
else
    fail "packet-ins did not stop: $((AFTER - BEFORE)) more during the second round"
fi

kill "$CTL_PID"; wait "$CTL_PID" 2>/dev/null || true; CTL_PID=""
sleep 1
if ping_all; then ok "controller killed: the installed flows keep forwarding"; else fail "forwarding without the controller"; fi

start_controller
if wait_for "$PI" "connected" 2 30; then
    ok "controller restarted: the switch reconnected"
else
    fail "the switch did not reconnect to the restarted controller"
fi
if ping_all; then ok "ping after the reconnect"; else fail "ping after the reconnect"; fi

if [ $FAILS = 0 ]; then
    echo "controller_netns: all checks passed"
else
    echo "controller_netns: $FAILS check(s) failed (logs in $W)"
    trap - EXIT; cleanup; exit 1
fi
