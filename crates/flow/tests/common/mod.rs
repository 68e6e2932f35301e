//! Shared by the OVS oracle tests: a private OVS 3.1 sandbox driven through
//! `tests/oracles/ovs.sh`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub struct Oracle {
    pub sh: PathBuf,
    pub dir: PathBuf,
}

impl Oracle {
    pub fn start() -> Oracle {
        let sh = std::env::var_os("OVS_SH")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/oracles/ovs.sh")
            });
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = PathBuf::from(format!("/tmp/dps-ovs-{}-{n}", std::process::id()));
        let o = Oracle { sh, dir };
        let st = o.sh_cmd(&["start", o.dir.to_str().unwrap()]);
        assert!(
            st.status.success(),
            "ovs.sh start failed: {}",
            String::from_utf8_lossy(&st.stderr)
        );
        o
    }
    pub fn sh_cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("bash")
            .arg(&self.sh)
            .args(args)
            .env("OVS_ORACLE_DIR", &self.dir)
            .output()
            .expect("run ovs.sh")
    }
    pub fn load(&self, flows: &str) {
        let f = self.dir.join("flows.txt");
        std::fs::write(&f, flows).unwrap();
        let o = self.sh_cmd(&["flows", f.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "OVS rejected the table: {}\n{}",
            String::from_utf8_lossy(&o.stderr),
            flows
        );
    }
    pub fn compose(&self, flow: &str) -> String {
        let o = self.sh_cmd(&["compose", flow]);
        assert!(
            o.status.success(),
            "compose {flow}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
    /// (megaflow, actions) from `ofproto/trace`.
    pub fn trace(&self, flow: &str, hex: Option<&str>) -> (String, String) {
        self.trace_or_error(flow, hex)
            .unwrap_or_else(|e| panic!("trace {flow}: translation failed ({})", e.0))
    }
    /// (megaflow, actions) from `ofproto/trace`, or (REASON, megaflow) for "Translation
    /// failed (REASON), packet is dropped.".
    pub fn trace_or_error(
        &self,
        flow: &str,
        hex: Option<&str>,
    ) -> Result<(String, String), (String, String)> {
        let mut c = Command::new("ovs-appctl");
        c.arg("--timeout=10")
            .arg("-t")
            .arg(self.dir.join("ovs-vswitchd.ctl"))
            .arg("ofproto/trace")
            .arg("br0")
            .arg(flow);
        if let Some(h) = hex {
            c.arg(h);
        }
        let o = c.output().expect("ovs-appctl");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "trace {flow}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let get = |p: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(p))
                .unwrap_or_else(|| panic!("no `{p}` in trace of {flow}:\n{out}"))
                .trim()
                .to_string()
        };
        if let Some(l) = out
            .lines()
            .find_map(|l| l.split("Translation failed (").nth(1))
        {
            return Err((
                l.split(')').next().unwrap_or(l).to_string(),
                get("Megaflow:"),
            ));
        }
        Ok((get("Megaflow:"), get("Datapath actions:")))
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        // no expect() here: a panic in drop while unwinding aborts the test binary
        let _ = Command::new("bash")
            .arg(&self.sh)
            .arg("stop")
            .env("OVS_ORACLE_DIR", &self.dir)
            .output();
    }
}

pub fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Rules written with ovs-fields(7) aliases and OVS's other spellings (`ip_src`,
/// `eth_type`, `ip_proto`, `in_port_oxm`, `ipv4`, `ip6`, `ip_ecn`, `ip_frag`, `tp_dst`,
/// `icmpv6_type`, ...) and `set_field` / `load` / `move` on every writable packet field
/// the table has (L4 ports of TCP/UDP/SCTP, TTL, ECN, IPv6 label, ARP, ICMP, ICMPv6, ND,
/// masked and partial writes); [`FIELD_PACKETS`] hit every rule.
pub const FIELD_FLOWS: &str = "\
priority=100,in_port=1,tcp,actions=set_field:8080->tp_dst,set_field:81->tp_src,output:2
priority=100,in_port=1,udp,actions=set_field:53->udp_dst,load:0x35->NXM_OF_UDP_SRC[],output:2
priority=100,in_port=1,sctp,actions=set_field:99->sctp_dst,set_field:98->sctp_src,output:2
priority=100,in_port=1,icmp,actions=set_field:0->icmp_type,set_field:1->icmp_code,output:2
priority=100,in_port=1,icmp6,icmpv6_type=128,actions=set_field:129->icmpv6_type,set_field:1->icmpv6_code,output:2
priority=100,in_port=1,arp,actions=set_field:2->arp_op,set_field:1.1.1.1->arp_spa,set_field:2.2.2.2->arp_tpa,set_field:00:11:22:33:44:55->arp_sha,set_field:00:11:22:33:44:66->arp_tha,output:2
priority=90,in_port=2,ipv4,actions=set_field:7->nw_ttl,set_field:1->nw_ecn,output:3
priority=90,in_port=2,ip6,actions=set_field:0x12345->ipv6_label,set_field:9->nw_ttl,set_field:2->ip_ecn,output:3
priority=90,in_port=2,arp,actions=move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[],load:2->NXM_OF_ARP_OP[],output:3
priority=95,in_port=2,tcp,actions=load:0x5->NXM_OF_TCP_DST[0..7],set_field:0x50/0xff->tcp_src,move:NXM_OF_IP_SRC[]->NXM_OF_IP_DST[],output:3
priority=95,in_port=2,icmp6,icmp_type=135,icmp_code=0,actions=set_field:fe80::1->nd_target,set_field:00:11:22:33:44:55->nd_sll,output:3
priority=95,in_port=2,icmp6,icmp_type=136,icmp_code=0,actions=set_field:00:11:22:33:44:66->nd_tll,move:NXM_NX_ND_TARGET[64..127]->NXM_NX_IPV6_DST[64..127],output:3
priority=90,in_port=3,dl_type=0x0800,ip_proto=17,actions=set_field:1.2.3.4/255.255.0.0->ip_src,load:1->NXM_NX_IP_ECN[],load:0x3f->NXM_OF_IP_TOS[2..7],output:4
priority=90,in_port=3,ipv6,actions=move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[],move:NXM_NX_IPV6_LABEL[0..7]->NXM_NX_IP_TTL[],output:4
priority=95,in_port=3,sctp,actions=set_field:0x5/0xf->sctp_src,move:OXM_OF_SCTP_DST[0..7]->OXM_OF_SCTP_SRC[8..15],output:4
priority=95,in_port=3,icmp,actions=move:NXM_OF_ICMP_TYPE[]->NXM_OF_ICMP_CODE[],output:4
priority=95,in_port=3,tcp,ip_src=10.0.0.0/8,ip_dst=10.0.0.2,tp_dst=80,actions=move:NXM_OF_TCP_DST[]->NXM_OF_TCP_SRC[],load:1->tp_src[3],output:4
priority=85,in_port_oxm=4,eth_type=0x86dd,ip_proto=17,ipv6_label=0x5,udp_dst=53,ip_frag=no,actions=set_field:0xabcd->ipv6_label,output:1
priority=84,in_port=4,eth_src=02:00:00:00:00:01,eth_dst=02:00:00:00:00:02/ff:ff:ff:00:00:00,ip,ip_ecn=1,nw_ttl=64,actions=set_field:3->nw_ecn,output:1
priority=83,in_port=4,arp,arp_op=1,arp_spa=10.0.0.0/24,arp_tha=00:00:00:00:00:00,actions=set_field:02:00:00:00:00:99->arp_tha,set_field:2->arp_op,output:1
priority=82,in_port=4,icmp6,icmpv6_type=135,icmpv6_code=0,nd_sll=02:00:00:00:00:01,actions=set_field:02:00:00:00:00:77->nd_sll,output:1
priority=81,in_port=4,icmp,icmp_type=8,icmp_code=0,actions=set_field:0->icmp_type,dec_ttl,output:1
priority=96,in_port=3,dl_vlan=5,actions=load:7->NXM_OF_VLAN_TCI[0..11],output:4
priority=86,in_port=4,dl_vlan=9,actions=set_field:0->vlan_tci,output:1
priority=87,in_port=4,udp,actions=set_field:0x3064->vlan_tci,output:1
priority=80,in_port=1,ip,nw_proto=50,actions=set_field:2->in_port,output:2,output:1,in_port
priority=99,in_port=2,ip,nw_proto=50,actions=move:NXM_OF_IN_PORT[]->NXM_NX_REG0[0..15],set_field:4->in_port,resubmit(,1),output:2
table=1,priority=10,in_port=4,reg0=2,actions=output:1,output:4
priority=79,in_port=1,ip6,nw_proto=50,actions=mod_nw_ttl:7,mod_nw_ecn:2,dec_ttl,output:3
priority=79,in_port=3,ip,nw_proto=50,actions=mod_nw_ecn:1,mod_nw_ttl:5,output:2
priority=1,actions=drop
";

pub const FIELD_PACKETS: [&str; 29] = [
    "in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,tcp_src=1000,tcp_dst=80",
    "in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,udp_src=1,udp_dst=2",
    "in_port=1,sctp,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,sctp_src=5,sctp_dst=6",
    "in_port=1,icmp,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,icmp_type=8,icmp_code=0",
    "in_port=1,icmp6,ipv6_src=fd00::1,ipv6_dst=fd00::2,nw_ttl=64,icmpv6_type=128,icmpv6_code=0",
    "in_port=1,arp,arp_op=1,arp_spa=10.0.0.1,arp_tpa=10.0.0.2,arp_sha=02:00:00:00:00:01",
    "in_port=2,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,nw_tos=0xb8,udp_src=1,udp_dst=2",
    "in_port=2,udp6,ipv6_src=fd00::1,ipv6_dst=fd00::2,ipv6_label=0x777,nw_ttl=64,udp_src=1,udp_dst=2",
    "in_port=2,arp,arp_op=1,arp_spa=10.0.0.1,arp_tpa=10.0.0.2,arp_sha=02:00:00:00:00:01",
    "in_port=2,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,tcp_src=1000,tcp_dst=80",
    "in_port=2,icmp6,ipv6_src=fd00::1,ipv6_dst=ff02::1:ff00:9,nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=fe80::9,nd_sll=02:00:00:00:00:01",
    "in_port=2,icmp6,ipv6_src=fe80::9,ipv6_dst=fd00::1,nw_ttl=255,icmpv6_type=136,icmpv6_code=0,nd_target=fe80::9,nd_tll=02:00:00:00:00:09",
    "in_port=3,udp,nw_src=10.9.8.7,nw_dst=10.0.0.2,nw_ttl=64,nw_tos=0x01,udp_src=1,udp_dst=2",
    "in_port=3,udp6,ipv6_src=fd00::1,ipv6_dst=fd00::2,ipv6_label=0x12345,nw_ttl=64,udp_src=1,udp_dst=2",
    "in_port=3,sctp,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,sctp_src=0x1234,sctp_dst=0x5678",
    "in_port=3,icmp,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,icmp_type=8,icmp_code=0",
    "in_port=3,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,tcp_src=1000,tcp_dst=80",
    "in_port=4,udp6,ipv6_src=fd00::1,ipv6_dst=fd00::2,ipv6_label=0x5,nw_ttl=64,udp_src=1,udp_dst=53",
    "in_port=4,dl_src=02:00:00:00:00:01,dl_dst=02:00:00:11:22:33,ip,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_tos=1,nw_ttl=64,nw_proto=50",
    "in_port=4,arp,arp_op=1,arp_spa=10.0.0.7,arp_tpa=10.0.0.2,arp_sha=02:00:00:00:00:01",
    "in_port=4,icmp6,ipv6_src=fd00::1,ipv6_dst=ff02::1:ff00:9,nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=fe80::9,nd_sll=02:00:00:00:00:01",
    "in_port=4,icmp,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,icmp_type=8,icmp_code=0",
    "in_port=3,dl_vlan=5,dl_vlan_pcp=3,ip,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_proto=50",
    "in_port=4,dl_vlan=9,ip,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_proto=50",
    "in_port=4,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2,udp_src=1,udp_dst=2",
    "in_port=1,ip,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_proto=50",
    "in_port=2,ip,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_proto=50",
    "in_port=1,ipv6,ipv6_src=fd00::1,ipv6_dst=fd00::2,nw_ttl=64,nw_proto=50",
    "in_port=3,ip,nw_src=10.0.0.1,nw_dst=10.0.0.2,nw_ttl=64,nw_proto=50",
];
