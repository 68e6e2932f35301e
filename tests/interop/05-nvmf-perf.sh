#!/bin/bash
# In-guest comparison (issue #5 figure): both targets run inside the guest on the same
# emulated CPUs, RAM-backed (dpustack malloc 64 MiB vs nvmet on a 64 MiB brd /dev/ram0),
# the same kernel initiator + fio (4 KiB randread, qd 32, libaio, O_DIRECT) against each,
# interleaved rounds (the host machine is shared, so adjacent runs are compared).
# Prints "INFO nvmf-guest-perf ..." with the IOPS medians and their ratio when every
# run completed (a run that gives no figure is retried once, and the retry is
# reported); measurements are not checks: PLAN 0, nothing added to the stage's total.
# A run of our target that gives no figure is a FAIL, one of nvmet a HARNESS FAIL.
# The >= 1.5x goal is reported on a GOAL line.
#   NVMF_PERF_ROUNDS (3)  NVMF_PERF_SECS (5)  NVMF_PERF_CONNECT (extra nvme connect flags)
set -u
echo "PLAN 0"
echo "INFO perf-binary ${BIN:-?} (build profile ${BIN_PROFILE:-unknown}: a dev build's figures are not the release build's)"
ROUNDS=${NVMF_PERF_ROUNDS:-3} SECS=${NVMF_PERF_SECS:-5} COPTS=${NVMF_PERF_CONNECT:-}
NQN=nqn.2024-01.io.dpustack:guestperf KNQN=nqn.2024-01.io.vmh:ram0
MBOX=${VMH_DIR:-/tmp/vmharness}/run/mbox
g() { bash $V exec -t ${GT:-120} "$1"; }
[ -x "$BIN" ] || { echo "FAIL nvmf-guest-perf ($BIN missing)"; exit 1; }

cat > $MBOX/nvmf-gperf.sh <<'EOF'
# $1 port, $2 nqn, $3 seconds, $4.. connect flags; prints "iops=N lat_us=M"
port=$1; nqn=$2; secs=$3; shift 3
before=$(ls /dev/ | grep -E '^nvme[0-9]+n[0-9]+$' | sort || true)
nvme connect -t tcp -a 127.0.0.1 -s $port -n $nqn "$@" >/dev/null || { echo connect-failed; exit 1; }
n=
for i in $(seq 50); do
  n=$(ls /dev/ | grep -E '^nvme[0-9]+n[0-9]+$' | sort | grep -vxF "$before" | head -1)
  [ -n "$n" ] && [ -b /dev/$n ] && break; sleep 0.2
done
fio --name=rr --filename=/dev/$n --rw=randread --bs=4k --iodepth=32 --direct=1 --ioengine=libaio \
    --time_based --runtime=$secs --size=60M --output-format=terse --terse-version=3 2>/dev/null \
  | awk -F';' '{ if ($5 == 0) printf "iops=%d lat_us=%.0f\n", $8, $40; else print "fio-error" }'
nvme disconnect -n $nqn >/dev/null
EOF

out=$(g "sh $ROOT/tests/peers/guest/nvmet.sh tcp 2>&1; command -v fio || echo no-fio")
echo "$out" | grep -q "nvmet:" || { echo "HARNESS FAIL nvmf-guest-perf (nvmet setup)"; echo "$out"; exit 1; }
echo "$out" | grep -q no-fio && { echo "HARNESS FAIL nvmf-guest-perf (fio not installed: apt-get install fio)"; exit 1; }
# our target inside the guest, event-driven (the guest has 2 emulated CPUs: spinning
# would take one away from the initiator)
rm -f $MBOX/nvmf-gserve.log
bash $V exec -t $(( ROUNDS * (SECS + 20) * 2 + 60 )) "$BIN nvmf serve --listen tcp://127.0.0.1:4421 \
  --discovery-port 0 --bdev malloc:64M --nqn $NQN --idle-spins 0 --for $(( ROUNDS * (SECS + 20) * 2 + 30 )) \
  > /vmh/nvmf-gserve.log 2>&1" >/dev/null 2>&1 &
SRV=$!
trap 'g "pkill -f \"nvmf serve --listen tcp://127.0.0.1:4421\"; true" >/dev/null 2>&1; wait $SRV 2>/dev/null' EXIT
for i in $(seq 120); do grep -q "listening" $MBOX/nvmf-gserve.log 2>/dev/null && break; sleep 0.5; done
grep -q "listening" $MBOX/nvmf-gserve.log 2>/dev/null || { echo "FAIL nvmf-guest-perf (target did not start in the guest)"; cat $MBOX/nvmf-gserve.log 2>/dev/null; exit 1; }

# one fio run against PORT/NQN; a run that gives no figure (connect or fio failed)
# is retried once, and the failed attempt is reported
run() {
  local o
  o=$(g "sh /vmh/nvmf-gperf.sh $1 $2 $SECS $COPTS")
  case "$o" in iops=*) ;; *)
    echo "   retrying: $2 gave '$(echo $o | tail -c 200)'" >&2
    g "nvme disconnect -n $2 >/dev/null 2>&1; true" >/dev/null 2>&1; sleep 1
    o=$(g "sh /vmh/nvmf-gperf.sh $1 $2 $SECS $COPTS") ;;
  esac
  echo "$o"
}
echo "   guest CPU: $(g "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-; nproc" | tr '\n' ' ')"
ours=() kern=() ratios=() ok=1 ours_bad=0 kern_bad=0
for r in $(seq $ROUNDS); do
  # alternate which target goes first, so a drift in the host's load cancels out
  if [ $((r % 2)) = 1 ]; then
    a=$(run 4421 $NQN); b=$(run 4420 $KNQN)
  else
    b=$(run 4420 $KNQN); a=$(run 4421 $NQN)
  fi
  echo "   round $r: dpustack $a | nvmet $b"
  ia=$(echo "$a" | sed -n 's/^iops=\([0-9]*\).*/\1/p'); ib=$(echo "$b" | sed -n 's/^iops=\([0-9]*\).*/\1/p')
  [ -n "$ia" ] || ours_bad=$((ours_bad+1))
  [ -n "$ib" ] && [ "$ib" -gt 0 ] || kern_bad=$((kern_bad+1))
  [ -n "$ia" ] && [ -n "$ib" ] && [ "$ib" -gt 0 ] || { ok=0; continue; }
  ours+=($ia); kern+=($ib); ratios+=($(awk -v a=$ia -v b=$ib 'BEGIN { printf "%.3f", a / b }'))
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# nvmet's run in the TCG guest sometimes gives no figure in a round (a slow host):
# the comparison then uses the rounds where both gave one, if there are 2 or more
need=$(( ROUNDS < 2 ? ROUNDS : 2 ))
if [ $ours_bad = 0 ] && [ ${#ours[@]} -ge $need ] && [ ${#ours[@]} -gt 0 ]; then
  [ $kern_bad -gt 0 ] && echo "HARNESS NOTE nvmet-perf-baseline (nvmet gave no figure in $kern_bad of $ROUNDS rounds: ratios over the other rounds)"
  mo=$(med "${ours[@]}"); mk=$(med "${kern[@]}")
  rm_=$(awk -v a=$mo -v b=$mk 'BEGIN { printf "%.2f", a / b }')
  rp=$(awk -v r=$(med "${ratios[@]}") 'BEGIN { printf "%.2f", r }')
  echo "   per-round ratios (dpustack/nvmet-tcp): min $(printf '%s\n' "${ratios[@]}" | sort -g | head -1), max $(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)"
  echo "INFO nvmf-guest-perf (4 KiB randread qd32, $ROUNDS x ${SECS}s: median IOPS dpustack $mo, nvmet-tcp $mk (ratio $rm_); median of per-round ratios $rp)"
  awk -v r=$rp 'BEGIN { exit !(r >= 1.5) }' && echo "GOAL met: per-round median dpustack/nvmet-tcp = $rp >= 1.5" \
    || echo "GOAL not met: per-round median dpustack/nvmet-tcp = $rp (< 1.5)"
else
  [ $ours_bad -gt 0 ] && echo "FAIL nvmf-guest-perf-runs (our target gave no figure in $ours_bad of $ROUNDS rounds)"
  [ $kern_bad -gt 0 ] && echo "HARNESS FAIL nvmet-perf-baseline (nvmet gave no figure in $kern_bad of $ROUNDS rounds)"
fi
grep -qi panick $MBOX/nvmf-gserve.log && echo "FAIL nvmf-guest-perf-no-panic"
exit 0
