//! Packet parsing and the datapath never panic on arbitrary frames.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let k = flow::FlowKey::from_packet(1, data);
    let table = flow::FlowTable::from_rules(
        flow::parse_flows("priority=10,ip,nw_dst=10.0.0.0/8,actions=dec_ttl,mod_vlan_vid:5,output:2\npriority=0,actions=drop\n")
            .unwrap(),
    );
    let x = table.xlate(&k);
    let mut frame = data.to_vec();
    let _ = flow::exec::execute(&x.actions, &mut frame);
});
