#!/usr/bin/env bash
# The project's copy of ../shared/oracles/ovs.sh (the OVS 3.1 oracle sandbox), so the
# oracle tests do not depend on where shared/ lies; see ../shared/oracles/README.md.
# ovs.sh - Open vSwitch as a reference oracle for flow classification.
#
# Runs a private, throw-away Open vSwitch (ovsdb-server + ovs-vswitchd) entirely
# inside one directory, with the userspace "dummy" datapath (ovs-vswitchd
# --enable-dummy), so no kernel module, no system service, no real NICs and no
# network traffic are involved.  A test loads an OpenFlow table into OVS and
# asks OVS what it would do with a packet:
#
#   * which OpenFlow rule(s) matched          (ofproto/trace " 0. <match>, priority N")
#   * the resulting datapath actions          ("Datapath actions: ...")
#   * the megaflow (wildcarded cache entry)   ("Megaflow: ...": match + mask)
#
# and compares that with the project's own classifier / megaflow generator.
#
# Requirements: Debian packages openvswitch-switch + openvswitch-common (tested
# with OVS 3.1.0 on Debian 12).  python3 (stdlib only) for the JSON commands.
#
# Usage:  ovs.sh [-d DIR] COMMAND [ARGS...]
#
#   start [DIR]            start a sandbox in DIR (default: $OVS_ORACLE_DIR or
#                          /tmp/ovs-oracle); creates bridge br0 (datapath_type=dummy,
#                          fail-mode=secure) with dummy ports p1..pN, OpenFlow port
#                          number i == datapath port number i.  Prints an
#                          "export OVS_ORACLE_DIR=..." line.
#   flows FILE             replace ALL OpenFlow flows of br0 with FILE
#                          (ovs-ofctl replace-flows syntax; '-' = stdin) and wait
#                          until the datapath flows have been revalidated.
#   trace FLOW [HEX]       print the full `ovs-appctl ofproto/trace` output.
#                          FLOW is OpenFlow syntax ("in_port=1,tcp,nw_dst=10.0.0.9,tp_dst=80")
#                          or datapath syntax ("in_port(1),eth(...),...").  With HEX
#                          (an Ethernet frame as hex), FLOW only supplies metadata
#                          such as in_port=1 and the packet bytes are parsed by OVS.
#   trace -s FLOW [HEX]    short form: "rules:", "megaflow:", "actions:" lines only.
#   trace-json FLOW [HEX]  the same as one JSON object (see README.md).
#   compose FLOW           hex bytes of a packet built from FLOW (ovs-ofctl compose-packet).
#   fixture FLOWS PACKETS  for a flow file and a packet file (one OpenFlow flow
#                          string per line), print a JSON fixture: every packet is
#                          composed into bytes and traced (packet path).
#   inject PORT FLOW|HEX   hand a packet to dummy port PORT (netdev-dummy/receive);
#                          this goes through the real upcall path and installs a
#                          datapath flow.
#   dump-flows [ARGS]      ovs-appctl dpctl/dump-flows [ARGS] (e.g. -m)
#   del-flows              delete all datapath flows AND their upcall ukeys
#                          (revalidator/purge).  Plain dpctl/del-flows leaves the
#                          ukeys behind, and re-injecting the same packet then logs
#                          "upcall_cb failure: ukey installation fails" and installs
#                          no datapath flow.
#   config KEY=VALUE...    set Open_vSwitch other_config, e.g. max-idle=1000,
#                          hw-offload=true, flow-limit=...
#   prefixes FIELDS|none   set the classifier prefix-trie fields of table 0
#                          (default in OVS: ip_dst,ip_src; "none" disables them)
#   appctl|vsctl|ofctl ... run that tool against the sandbox
#   env                    print shell exports to use the ovs-* tools by hand
#   stop                   stop both daemons (pids from DIR) and leave DIR in place
#
# Environment: OVS_ORACLE_DIR (sandbox dir), OVS_ORACLE_PORTS (number of dummy
# ports, default 4), OVS_ORACLE_BRIDGE (default br0), OVS_ORACLE_OF (OpenFlow
# versions for ovs-ofctl, default OpenFlow10,OpenFlow13).
#
# Notes / gotchas (see README.md for more):
#   * ofproto/trace parses FLOW as an *exact* packet: use udp_src/udp_dst,
#     sctp_src/sctp_dst for UDP/SCTP (tp_src/tp_dst there mean TCP only and give
#     "prerequisites not met for setting tp_dst").  In flow *rules* tp_dst works
#     for all three.
#   * Output to the packet's own in_port is silently skipped (OpenFlow rule);
#     use the in_port action if you really want it.
#   * Unix socket paths are limited to ~107 bytes, so keep DIR short.

set -euo pipefail

BR=${OVS_ORACLE_BRIDGE:-br0}
NPORTS=${OVS_ORACLE_PORTS:-4}
OFVER=${OVS_ORACLE_OF:-OpenFlow10,OpenFlow13}
SCHEMA=/usr/share/openvswitch/vswitch.ovsschema

die() { echo "ovs.sh: $*" >&2; exit 1; }

# ---- global option -d DIR -------------------------------------------------------
DIR=${OVS_ORACLE_DIR:-/tmp/ovs-oracle}
if [[ ${1:-} == -d ]]; then DIR=$2; shift 2; fi
[[ $# -ge 1 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }
CMD=$1; shift
if [[ $CMD == start && $# -ge 1 ]]; then DIR=$1; shift; fi

setup_env() {
    # Everything OVS writes (db, pid files, control sockets, logs) goes to DIR.
    DIR=$(cd "$DIR" 2>/dev/null && pwd || echo "$DIR")
    export OVS_RUNDIR=$DIR OVS_LOGDIR=$DIR OVS_DBDIR=$DIR OVS_SYSCONFDIR=$DIR
    export OVS_PKGDATADIR=/usr/share/openvswitch
    DB=unix:$DIR/db.sock
    VSCTL=(ovs-vsctl --db="$DB" --timeout=10)
    APPCTL=(ovs-appctl --timeout=10 -t "$DIR/ovs-vswitchd.ctl")
    OFCTL_TARGET=unix:$DIR/$BR.mgmt
}

# pid alive and not a zombie (a PID 1 that does not reap leaves zombies behind)
alive() {
    local pid=$1 st
    [[ -r /proc/$pid/stat ]] || return 1
    st=$(awk '{print $3}' "/proc/$pid/stat")
    [[ $st != Z && $st != X ]]
}

cmd_start() {
    command -v ovs-vswitchd >/dev/null || die "ovs-vswitchd not found (apt-get install openvswitch-switch)"
    mkdir -p "$DIR"
    setup_env
    (( ${#DIR} < 80 )) || die "DIR too long for unix socket paths: $DIR"
    if [[ -f $DIR/ovs-vswitchd.pid ]] && alive "$(cat "$DIR/ovs-vswitchd.pid")"; then
        die "sandbox already running in $DIR (ovs.sh -d $DIR stop)"
    fi
    rm -f "$DIR"/conf.db "$DIR"/.conf.db.~lock~ "$DIR"/*.pid "$DIR"/*.ctl "$DIR"/*.sock \
          "$DIR"/*.mgmt "$DIR"/*.snoop "$DIR"/*.log

    # 1. configuration database from the installed schema
    ovsdb-tool create "$DIR/conf.db" "$SCHEMA"

    # 2. ovsdb-server, listening only on a unix socket inside DIR
    ovsdb-server "$DIR/conf.db" --detach --no-chdir \
        --pidfile="$DIR/ovsdb-server.pid" --log-file="$DIR/ovsdb-server.log" \
        --unixctl="$DIR/ovsdb-server.ctl" --remote=punix:"$DIR/db.sock" 2>/dev/null
    "${VSCTL[@]}" --no-wait init

    # 3. ovs-vswitchd with the dummy datapath/netdev classes; --disable-system
    #    keeps it away from the kernel datapath (no openvswitch.ko needed).
    ovs-vswitchd unix:"$DIR/db.sock" --enable-dummy --disable-system --detach --no-chdir \
        --pidfile="$DIR/ovs-vswitchd.pid" --log-file="$DIR/ovs-vswitchd.log" \
        --unixctl="$DIR/ovs-vswitchd.ctl" 2>/dev/null

    # 4. bridge + dummy ports.  Port name pN => OpenFlow port N and (in the dummy
    #    datapath, which takes the number from the name's suffix) datapath port N,
    #    so "Datapath actions: 3" means p3.  options:ifindex is needed only for
    #    the hw-offload test hook of netdev-dummy; tx_pcap records what OVS sends.
    local args=(add-br "$BR" -- set bridge "$BR" datapath_type=dummy fail-mode=secure
                other-config:hwaddr=aa:55:aa:55:00:00 other-config:datapath-id=0000000000000001)
    local i
    for ((i = 1; i <= NPORTS; i++)); do
        args+=(-- add-port "$BR" "p$i" -- set interface "p$i" type=dummy ofport_request="$i"
               options:ifindex=$((1100 + i)) options:tx_pcap="$DIR/p$i-tx.pcap")
    done
    "${VSCTL[@]}" "${args[@]}"
    # fail-mode=secure: no NORMAL flow is added, the table starts empty (=> drop).
    ovs-ofctl -O "$OFVER" del-flows "$OFCTL_TARGET"
    echo "export OVS_ORACLE_DIR=$DIR"
}

cmd_stop() {
    setup_env
    local d pid
    for d in ovs-vswitchd ovsdb-server; do
        [[ -f $DIR/$d.pid ]] || continue
        pid=$(cat "$DIR/$d.pid")
        alive "$pid" || continue
        ovs-appctl --timeout=5 -t "$DIR/$d.ctl" exit >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
        if alive "$pid"; then kill -9 "$pid" 2>/dev/null || true; fi
    done
}

need_running() {
    setup_env
    [[ -S $DIR/ovs-vswitchd.ctl ]] || die "no sandbox in $DIR (run: ovs.sh start $DIR)"
}

cmd_flows() {
    need_running
    local file=${1:?flow file}
    # replace-flows: atomically-ish diff the table to FILE (adds, modifies, deletes).
    ovs-ofctl -O "$OFVER" replace-flows "$OFCTL_TARGET" "$file"
    # make sure already-installed datapath flows reflect the new table
    "${APPCTL[@]}" revalidator/wait >/dev/null
}

# ofproto/trace.  $1 = FLOW, $2 = optional hex packet
raw_trace() {
    local flow=$1 hex=${2:-}
    if [[ $flow == *"("* ]]; then            # datapath (ODP) flow syntax
        "${APPCTL[@]}" ofproto/trace "$flow" ${hex:+"$hex"}
    else                                     # OpenFlow flow syntax on bridge BR
        "${APPCTL[@]}" ofproto/trace "$BR" "$flow" ${hex:+"$hex"}
    fi
}

# Parse ofproto/trace text (stdin) into JSON.  Keys:
#   flow, final_flow, megaflow, megaflow_fields{}, datapath_actions, rules[]
#   rules[i] = {table, match, priority, cookie?, actions[]} in the order visited
PARSE_PY='
import json, re, sys
inp = json.loads(sys.argv[1])
out = dict(inp)
out.update({"flow": None, "rules": [], "final_flow": None, "megaflow": None,
            "megaflow_fields": {}, "datapath_actions": None})
cur = None
for line in sys.stdin.read().splitlines():
    if line.startswith("Flow: "):
        out["flow"] = line[6:]
    elif line.startswith("Final flow: "):
        out["final_flow"] = line[12:]
    elif line.startswith("Megaflow: "):
        out["megaflow"] = line[10:]
        for item in line[10:].split(","):
            k, eq, v = item.partition("=")
            out["megaflow_fields"][k] = v if eq else True
    elif line.startswith("Datapath actions: "):
        out["datapath_actions"] = line[18:]
    else:
        # " 0. tcp,in_port=1,tp_dst=80, priority 200[, cookie 0x5]"  |  " 0. priority 0"
        # " 0. No match."  ; nested tables (resubmit/goto) are indented 4 more
        m = re.match(r"^( *)(\d+)\. (?:(?:(.*), )?priority (\d+)(?:, cookie (0x[0-9a-f]+))?|(No match\.?.*))$", line)
        if m:
            cur = {"table": int(m.group(2)), "depth": len(m.group(1)) // 4,
                   "_ind": len(m.group(1)),
                   "match": m.group(6) if m.group(6) else (m.group(3) or ""),
                   "priority": int(m.group(4)) if m.group(4) else None,
                   "actions": []}
            if m.group(5): cur["cookie"] = m.group(5)
            out["rules"].append(cur)
        elif line.strip() and line.startswith("    ") and out["rules"]:
            # an action line belongs to the latest rule printed with a smaller
            # indentation (so actions after a resubmit go back to the parent)
            ind = len(line) - len(line.lstrip(" "))
            for r in reversed(out["rules"]):
                if r["_ind"] < ind:
                    r["actions"].append(line.strip()); break
for r in out["rules"]:
    del r["_ind"]
print(json.dumps(out))
'

cmd_trace() {
    need_running
    local mode=full
    case ${1:-} in -s|--short) mode=short; shift ;; --json) mode=json; shift ;; esac
    local flow=${1:?FLOW} hex=${2:-}
    case $mode in
        full) raw_trace "$flow" "$hex" ;;
        short) raw_trace "$flow" "$hex" | awk '
                 /^ *[0-9]+\. .*priority [0-9]+/ { sub(/^ */, ""); print "rule:     " $0 }
                 /^ *[0-9]+\. No match/          { sub(/^ */, ""); print "rule:     " $0 }
                 /^Megaflow: /         { sub(/^Megaflow: /, "");         print "megaflow: " $0 }
                 /^Datapath actions: / { sub(/^Datapath actions: /, ""); print "actions:  " $0 }' ;;
        json) raw_trace "$flow" "$hex" | python3 -c "$PARSE_PY" \
                 "$(python3 -c 'import json,sys; print(json.dumps({"input": sys.argv[1], "packet_hex": sys.argv[2] or None}))' "$flow" "$hex")" ;;
    esac
}

# hex string of a packet composed from an OpenFlow flow (in_port= is dropped,
# it is metadata, not packet bytes)
cmd_compose() {
    local flow=${1:?FLOW}
    flow=$(echo "$flow" | sed -E 's/(^|,)in_port=[^,]*//; s/^,//')
    ovs-ofctl compose-packet "$flow" | awk '{ for (i = 2; i <= NF; i++) { gsub("-", " ", $i); n = split($i, b, " "); for (j = 1; j <= n; j++) if (b[j] ~ /^[0-9a-f][0-9a-f]$/) printf "%s", b[j] } } END { print "" }'
}

cmd_fixture() {
    local flows=${1:?flow file} pkts=${2:?packet file}
    cmd_flows "$flows"
    local line inport hex dpflow first=1 n=0
    echo "{"
    printf '  "ovs_version": %s,\n' "$(ovs-vswitchd --version | head -1 | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')"
    printf '  "flow_table": %s,\n' "$(python3 -c 'import json,sys; print(json.dumps([l.rstrip("\n") for l in open(sys.argv[1]) if l.strip() and not l.lstrip().startswith("#")]))' "$flows")"
    echo '  "packets": ['
    while IFS= read -r line || [[ -n $line ]]; do
        [[ -z ${line// } || $line == \#* ]] && continue
        inport=$(echo "$line" | grep -oE '(^|,)in_port=[^,]+' | sed 's/^,//' || true)
        [[ -n $inport ]] || die "packet line needs in_port=: $line"
        hex=$(cmd_compose "$line")
        # Real upcall path too: empty the datapath, hand the bytes to the dummy
        # port, and read back the datapath flow that ovs-vswitchd installed.
        "${APPCTL[@]}" revalidator/purge >/dev/null
        "${APPCTL[@]}" netdev-dummy/receive "p${inport#in_port=}" "$hex" >/dev/null
        dpflow=""
        for _ in $(seq 40); do
            dpflow=$("${APPCTL[@]}" dpctl/dump-flows | grep '^recirc_id' || true)
            [[ -n $dpflow ]] && break
            sleep 0.05
        done
        [[ $first == 1 ]] || echo ","
        first=0
        raw_trace "$inport" "$hex" | python3 -c "$PARSE_PY" \
            "$(python3 -c '
import json, re, sys
line, hexpkt, n, dp = sys.argv[1:5]
d = {"id": int(n), "input": line, "packet_hex": hexpkt}
m = re.match(r"^(.*), packets:\d+, bytes:\d+, used:[^,]*, actions:(.*)$", dp.strip())
d["datapath_flow"] = {"match": m.group(1), "actions": m.group(2)} if m else dp.strip() or None
print(json.dumps(d))' "$line" "$hex" "$n" "$dpflow")" \
            | sed 's/^/    /' | tr -d '\n'
        n=$((n + 1))
    done < "$pkts"
    echo
    echo "  ]"
    echo "}"
}

cmd_inject() {
    need_running
    local port=${1:?port} pkt=${2:?flow-or-hex}
    "${APPCTL[@]}" netdev-dummy/receive "$port" "$pkt"
}

case $CMD in
    start)      cmd_start "$@" ;;
    stop)       cmd_stop ;;
    flows)      cmd_flows "$@" ;;
    trace)      cmd_trace "$@" ;;
    trace-json) cmd_trace --json "$@" ;;
    compose)    cmd_compose "$@" ;;
    fixture)    need_running; cmd_fixture "$@" ;;
    inject)     cmd_inject "$@" ;;
    dump-flows) need_running; "${APPCTL[@]}" dpctl/dump-flows "$@" ;;
    del-flows)  need_running; "${APPCTL[@]}" revalidator/purge ;;
    config)     need_running; for kv in "$@"; do "${VSCTL[@]}" set Open_vSwitch . "other_config:$kv"; done ;;
    prefixes)   need_running
                "${VSCTL[@]}" -- --id=@ft create Flow_Table prefixes="${1:?FIELDS|none}" \
                              -- set Bridge "$BR" flow_tables:0=@ft >/dev/null
                "${APPCTL[@]}" revalidator/wait >/dev/null ;;
    appctl)     need_running; "${APPCTL[@]}" "$@" ;;
    vsctl)      need_running; "${VSCTL[@]}" "$@" ;;
    ofctl)      need_running; sub=${1:?ofctl subcommand}; shift
                ovs-ofctl -O "$OFVER" "$sub" "$OFCTL_TARGET" "$@" ;;
    env)        setup_env
                echo "export OVS_RUNDIR=$DIR OVS_LOGDIR=$DIR OVS_DBDIR=$DIR OVS_SYSCONFDIR=$DIR"
                echo "# ovs-vsctl --db=unix:$DIR/db.sock ...   ovs-appctl -t $DIR/ovs-vswitchd.ctl ..."
                echo "# ovs-ofctl ... unix:$DIR/$BR.mgmt" ;;
    *)          die "unknown command: $CMD (run without arguments for help)" ;;
esac
