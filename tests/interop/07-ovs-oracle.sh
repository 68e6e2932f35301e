#!/bin/bash
# Conformance of the flow table / megaflow generator with Open vSwitch 3.1 itself
# (tests/oracles/ovs.sh, the project's copy of ../shared/oracles/ovs.sh): the sample table plus random tables, traced through both;
# megaflows and datapath actions must agree on every packet. Runs on the host.
set -u
echo "PLAN 2"
cd "${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
command -v ovs-vswitchd >/dev/null || { echo "FAIL ovs-oracle (openvswitch-switch not installed)"; echo "FAIL ovs-revalidator (openvswitch-switch not installed)"; exit 0; }
out=$(DPUSTACK_OVS_TABLES=${DPUSTACK_OVS_TABLES:-40} \
      DPUSTACK_OVS_PACKETS=${DPUSTACK_OVS_PACKETS:-80} \
      cargo test -q --workspace ${CARGO_FEATS:-} --test ovs_oracle -- --ignored --nocapture 2>&1)
line=$(echo "$out" | grep "OVS conformance" | sed 's/^OVS conformance//' | tr '\n' ';')
if echo "$out" | grep -Eq "test result: ok\. [1-9][0-9]* passed; 0 failed; 0 ignored"; then
  echo "PASS ovs-oracle $line"
else
  echo "FAIL ovs-oracle ${line:-no result}"
  echo "$out" | grep -A8 "disagreements\|panicked" | head -40
fi
# The revalidator's kept / modified / deleted decisions vs OVS's (crates/flow/tests/ovs_reval.rs, ~20 s).
out=$(cargo test -q --workspace ${CARGO_FEATS:-} --test ovs_reval -- --ignored --nocapture 2>&1)
if echo "$out" | grep -Eq "test result: ok\. 1 passed; 0 failed"; then
  echo "PASS ovs-revalidator $(echo "$out" | grep -c 'OVS') scenarios agree"
else
  echo "FAIL ovs-revalidator"
  echo "$out" | grep -A8 "differ\|panicked" | head -30
fi
