//! Arbitrary and mutated OpenFlow messages never panic the parsers: every input is
//! a message or a typed error (proptest; seeds are proptest's, failures shrink).

use openflow::action::{Action, Instruction};
use openflow::consts::{fc, port, OFP13_VERSION};
use openflow::msg::{self, FlowMod, Message, Multipart, PacketOut};
use openflow::multipart::{self, FlowStats, FlowStatsRequest};
use openflow::oxm::{basic, Oxm};
use proptest::prelude::*;

fn seeds() -> Vec<Vec<u8>> {
    let fm = Message::FlowMod(FlowMod {
        cookie: 1,
        cookie_mask: 0,
        table_id: 0,
        command: fc::ADD,
        idle_timeout: 0,
        hard_timeout: 0,
        priority: 10,
        buffer_id: u32::MAX,
        out_port: port::ANY,
        out_group: u32::MAX,
        flags: 1,
        matches: vec![
            Oxm::basic(basic::ETH_TYPE, &[8, 0]),
            Oxm::basic(basic::IP_PROTO, &[6]),
            Oxm::masked(0x8000, basic::IPV4_DST, &[10, 0, 0, 0], &[255, 0, 0, 0]),
        ],
        instructions: vec![
            Instruction::ApplyActions(vec![
                Action::SetField(Oxm::basic(basic::TCP_DST, &[0, 80])),
                Action::Output {
                    port: 2,
                    max_len: 0,
                },
                Action::Resubmit {
                    in_port: 0xfff8,
                    table: Some(1),
                },
            ]),
            Instruction::GotoTable(3),
        ],
    });
    let po = Message::PacketOut(PacketOut {
        buffer_id: u32::MAX,
        in_port: port::CONTROLLER,
        actions: vec![Action::Output {
            port: 1,
            max_len: 0,
        }],
        data: &[0xff; 20],
    });
    let mut fsr = Vec::new();
    FlowStatsRequest {
        table_id: 0xff,
        out_port: port::ANY,
        out_group: u32::MAX,
        cookie: 0,
        cookie_mask: 0,
        matches: vec![Oxm::basic(basic::IN_PORT, &[0, 0, 0, 1])],
    }
    .emit(&mut fsr);
    let mp = Message::MultipartRequest(Multipart {
        mp_type: 1,
        flags: 0,
        body: &fsr,
    });
    vec![
        fm.to_vec(OFP13_VERSION, 1),
        po.to_vec(OFP13_VERSION, 2),
        mp.to_vec(OFP13_VERSION, 3),
        Message::Hello { bitmap: Some(0x12) }.to_vec(OFP13_VERSION, 4),
    ]
}

fn all_parsers(b: &[u8]) {
    if let Ok((_, Message::MultipartRequest(mp) | Message::MultipartReply(mp))) = msg::parse(b) {
        let _ = FlowStatsRequest::parse(mp.body);
        let _ = FlowStats::parse_all(mp.body);
        let _ = multipart::Desc::parse(mp.body);
        let _ = multipart::parse_port_desc(mp.body);
        let _ = multipart::parse_port_stats_request(mp.body);
    }
    let _ = openflow::action::parse_actions(b);
    let _ = openflow::action::parse_instructions(b);
    let _ = openflow::oxm::parse_fields(b);
    let _ = openflow::header::frame_len(b);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        all_parsers(&b);
    }

    #[test]
    fn arbitrary_bodies_with_a_valid_header(ty in 0u8..32, body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut b = vec![OFP13_VERSION, ty, 0, 0, 0, 0, 0, 1];
        b.extend(&body);
        let n = b.len() as u16;
        b[2..4].copy_from_slice(&n.to_be_bytes());
        all_parsers(&b);
    }

    #[test]
    fn mutated_messages(which in 0usize..4, muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let mut b = seeds()[which].clone();
        for (i, v) in muts {
            let i = i % b.len();
            b[i] = v;
        }
        all_parsers(&b);
        let c = cut % (b.len() + 1);
        all_parsers(&b[..c]);
    }
}
