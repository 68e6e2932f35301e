#!/bin/bash
# In-guest NVMe/RDMA comparison (issue #11 figure): both targets run inside the guest on
# the same emulated CPUs, RAM-backed (dpustack malloc 64 MiB vs nvmet-rdma on a 64 MiB
# brd /dev/ram0), the same kernel initiator (nvme-rdma over the kernel rxe device rxe_r
# on vr, 10.99.2.1) + fio (libaio, O_DIRECT) against each, interleaved rounds:
#   4 KiB randread qd 32 (IOPS) and 128 KiB sequential read qd 32 (bandwidth).
# Paths: dpustack's target is on a soft RoCE device in the guest netns "peer"
# (10.99.2.2, the far end of the vr/vp veth, as 03-roce), since the guest's rxe owns UDP
# 4791 in the initial netns; nvmet-rdma listens on rxe_r's own address 10.99.2.1, so the
# initiator reaches it through rxe's local loopback (no veth). Both are in the guest.
# Prints INFO lines with the medians and their ratios when every run completed (a run
# that gives no figure is retried once, and the retry is reported); measurements are not
# checks: PLAN 0, nothing added to the stage's total. A run of our target that gives no
# figure is a FAIL, one of nvmet a HARNESS FAIL. The goals (>= 1.5x nvmet-rdma's 4 KiB
# IOPS, >= 2x its 128 KiB bandwidth) are reported on GOAL lines.
# NVMF_ENV adds environment to our target (e.g. DPUSTACK_ROCE_IO=xdp, RUST_LOG=...).
#   NVMF_RPERF_ROUNDS (3)  NVMF_RPERF_SECS (5)
set -u
echo "PLAN 0"
echo "INFO perf-binary ${BIN:-?} (build profile ${BIN_PROFILE:-unknown}: a dev build's figures are not the release build's)"
ROUNDS=${NVMF_RPERF_ROUNDS:-3} SECS=${NVMF_RPERF_SECS:-5}
NQN=nqn.2024-01.io.dpustack:rdmaperf KNQN=nqn.2024-01.io.vmh:ram0
OURS=10.99.2.2 KERN=10.99.2.1
MBOX=${VMH_DIR:-/tmp/vmharness}/run/mbox
g() { bash $V exec -t ${GT:-120} "$1"; }
[ -x "$BIN" ] || { echo "FAIL nvmf-rdma-guest-perf ($BIN missing)"; exit 1; }

cat > $MBOX/nvmf-rgperf.sh <<'EOF'
# $1 addr, $2 nqn, $3 seconds, $4 rr|seq; prints "iops=N kib_s=M"
addr=$1; nqn=$2; secs=$3; mode=$4
# rxe_r's counters around the run (retries, NAKs, RNR, duplicates: where a
# slow path waits), the change written to /vmh/rxe-delta.$addr.$mode
rxe_stats() { rdma statistic show link rxe_r/1 2>/dev/null | tr ' ' '\n' | paste - - | grep -v '^link' | grep -v '^$'; }
rxe_stats > /tmp/rxe-before.$$
before=$(ls /dev/ | grep -E '^nvme[0-9]+n[0-9]+$' | sort || true)
nvme connect -t rdma -a $addr -s 4420 -n $nqn >/dev/null || { echo connect-failed; exit 1; }
n=
for i in $(seq 50); do
  n=$(ls /dev/ | grep -E '^nvme[0-9]+n[0-9]+$' | sort | grep -vxF "$before" | head -1)
  [ -n "$n" ] && [ -b /dev/$n ] && break; sleep 0.2
done
if [ $mode = rr ]; then rw=randread bs=4k; else rw=read bs=128k; fi
fio --name=$mode --filename=/dev/$n --rw=$rw --bs=$bs --iodepth=32 --direct=1 --ioengine=libaio \
    --time_based --runtime=$secs --size=60M --output-format=terse --terse-version=3 2>/dev/null \
  | awk -F';' '{ if ($5 == 0) printf "iops=%d kib_s=%d\n", $8, $7; else print "fio-error" }'
nvme disconnect -n $nqn >/dev/null
rxe_stats | awk 'NR==FNR {b[$1]=$2; next} { d = $2 - b[$1]; if (d != 0) printf "%s=%d ", $1, d }' /tmp/rxe-before.$$ - \
  > /vmh/rxe-delta.$addr.$mode 2>/dev/null
rm -f /tmp/rxe-before.$$
EOF

# the guest side of 03-roce's set-up: rxe_r on vr (10.99.2.1) <=veth=> vp (10.99.2.2) in netns peer
out=$(g "modprobe -a rdma_rxe rdma_ucm nvme-rdma veth
if ! ip link show vr >/dev/null 2>&1; then
  ip netns add peer; ip link add vr type veth peer name vp; ip link set vp netns peer
  ip addr add 10.99.2.1/24 dev vr; ip link set vr up
  ip -n peer addr add 10.99.2.2/24 dev vp; ip -n peer link set vp up; ip -n peer link set lo up
fi
rdma link show rxe_r >/dev/null 2>&1 || rdma link add rxe_r type rxe netdev vr
sh $ROOT/tests/peers/guest/nvmet.sh rdma $KERN 4420 2>&1; command -v fio || echo no-fio")
echo "$out" | grep -q "nvmet:" || { echo "HARNESS FAIL nvmf-rdma-guest-perf (nvmet-rdma setup)"; echo "$out"; exit 1; }
echo "$out" | grep -q no-fio && { echo "HARNESS FAIL nvmf-rdma-guest-perf (fio not installed)"; exit 1; }
# our target inside the guest (netns peer), on its soft RoCE device
T=$(( ROUNDS * (SECS + 25) * 4 + 60 ))
rm -f $MBOX/nvmf-rgserve.log $MBOX/nvmf-rgserve.pid
bash $V exec -t $(( T + 30 )) "echo \$\$ > /vmh/nvmf-rgserve.pid; exec env ${NVMF_ENV:-} ip netns exec peer $BIN nvmf serve \
  --listen rdma://$OURS:4420 --discovery-port 0 --bdev malloc:64M --nqn $NQN --idle-spins 0 --for $T \
  > /vmh/nvmf-rgserve.log 2>&1" >/dev/null 2>&1 &
SRV=$!
trap 'g "[ -s /vmh/nvmf-rgserve.pid ] && kill \$(cat /vmh/nvmf-rgserve.pid); true" >/dev/null 2>&1; wait $SRV 2>/dev/null' EXIT
for i in $(seq 120); do grep -q "listening" $MBOX/nvmf-rgserve.log 2>/dev/null && break; sleep 0.5; done
grep -q "listening rdma://$OURS:4420" $MBOX/nvmf-rgserve.log 2>/dev/null \
  || { echo "FAIL nvmf-rdma-guest-perf (target did not start in the guest)"; cat $MBOX/nvmf-rgserve.log 2>/dev/null; exit 1; }

# one fio run (ADDR NQN MODE); a run that gives no figure is retried once, and reported
run() {
  local o
  o=$(g "sh /vmh/nvmf-rgperf.sh $1 $2 $SECS $3")
  case "$o" in iops=*) ;; *)
    echo "   retrying: $2 $3 gave '$(echo $o | tail -c 200)'" >&2
    g "nvme disconnect -n $2 >/dev/null 2>&1; true" >/dev/null 2>&1; sleep 1
    o=$(g "sh /vmh/nvmf-rgperf.sh $1 $2 $SECS $3") ;;
  esac
  echo "$o"
}
val() { echo "$1" | sed -n "s/.*$2=\([0-9]*\).*/\1/p"; }
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "   guest CPU: $(g "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-; nproc" | tr '\n' ' ')"
ok=1 ours_bad=0 kern_bad=0
rr_o=() rr_k=() rr_r=() sq_o=() sq_k=() sq_r=()
for r in $(seq $ROUNDS); do
  for mode in rr seq; do
    # alternate which target goes first, so a drift in the host's load cancels out
    if [ $((r % 2)) = 1 ]; then
      a=$(run $OURS $NQN $mode); b=$(run $KERN $KNQN $mode)
    else
      b=$(run $KERN $KNQN $mode); a=$(run $OURS $NQN $mode)
    fi
    echo "   round $r $mode: dpustack $a | nvmet-rdma $b"
    echo "     rxe_r counters, dpustack run: $(cat $MBOX/rxe-delta.$OURS.$mode 2>/dev/null)"
    echo "     rxe_r counters, nvmet run: $(cat $MBOX/rxe-delta.$KERN.$mode 2>/dev/null)"
    if [ $mode = rr ]; then f=iops; else f=kib_s; fi
    va=$(val "$a" $f); vb=$(val "$b" $f)
    [ -n "$va" ] && [ "$va" -gt 0 ] || ours_bad=$((ours_bad+1))
    [ -n "$vb" ] && [ "$vb" -gt 0 ] || kern_bad=$((kern_bad+1))
    [ -n "$va" ] && [ "$va" -gt 0 ] && [ -n "$vb" ] && [ "$vb" -gt 0 ] || { ok=0; continue; }
    q=$(awk -v a=$va -v b=$vb 'BEGIN { printf "%.3f", a / b }')
    if [ $mode = rr ]; then rr_o+=($va); rr_k+=($vb); rr_r+=($q); else sq_o+=($va); sq_k+=($vb); sq_r+=($q); fi
  done
done
# nvmet-rdma's run in the TCG guest sometimes gives no figure (a slow host): the
# comparison then uses the rounds where both gave one, if there are 2 or more of each
need=$(( ROUNDS < 2 ? ROUNDS : 2 ))
if [ $ours_bad = 0 ] && [ ${#rr_o[@]} -ge $need ] && [ ${#sq_o[@]} -ge $need ] && [ ${#rr_o[@]} -gt 0 ] && [ ${#sq_o[@]} -gt 0 ]; then
  [ $kern_bad -gt 0 ] && echo "HARNESS NOTE nvmet-rdma-perf-baseline (nvmet-rdma gave no figure in $kern_bad of $((ROUNDS * 2)) runs: ratios over the other rounds)"
  rp=$(awk -v r=$(med "${rr_r[@]}") 'BEGIN { printf "%.2f", r }')
  sp=$(awk -v r=$(med "${sq_r[@]}") 'BEGIN { printf "%.2f", r }')
  echo "   per-round ratios 4k: $(echo ${rr_r[@]}), 128k: $(echo ${sq_r[@]})"
  echo "INFO nvmf-rdma-guest-perf-4k (randread qd32, $ROUNDS x ${SECS}s: median IOPS dpustack $(med "${rr_o[@]}"), nvmet-rdma $(med "${rr_k[@]}"); median of per-round ratios $rp)"
  echo "INFO nvmf-rdma-guest-perf-128k (seq read qd32, $ROUNDS x ${SECS}s: median KiB/s dpustack $(med "${sq_o[@]}"), nvmet-rdma $(med "${sq_k[@]}"); median of per-round ratios $sp)"
  awk -v r=$rp 'BEGIN { exit !(r >= 1.5) }' && echo "GOAL met: 4 KiB IOPS dpustack/nvmet-rdma = $rp >= 1.5" \
    || echo "GOAL not met: 4 KiB IOPS dpustack/nvmet-rdma = $rp (< 1.5)"
  awk -v r=$sp 'BEGIN { exit !(r >= 2) }' && echo "GOAL met: 128 KiB bandwidth dpustack/nvmet-rdma = $sp >= 2" \
    || echo "GOAL not met: 128 KiB bandwidth dpustack/nvmet-rdma = $sp (< 2)"
else
  [ $ours_bad -gt 0 ] && echo "FAIL nvmf-rdma-guest-perf-runs (our target gave no figure in $ours_bad of $((ROUNDS * 2)) runs)"
  [ $kern_bad -gt 0 ] && echo "HARNESS FAIL nvmet-rdma-perf-baseline (nvmet-rdma gave no figure in $kern_bad of $((ROUNDS * 2)) runs)"
fi
grep -qi panick $MBOX/nvmf-rgserve.log && echo "FAIL nvmf-rdma-guest-perf-no-panic"
exit 0
