//! Multipart bodies (OpenFlow 1.3 §7.3.5): FLOW / AGGREGATE requests, PORT_STATS
//! request, and the replies DESC, FLOW, AGGREGATE, TABLE, PORT_STATS, PORT_DESC.

use crate::action::{self, Instruction};
use crate::msg::Port;
use crate::oxm::{self, Oxm};
use crate::{Error, Put, Reader, Result};

/// Body of a FLOW or AGGREGATE request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowStatsRequest<'a> {
    pub table_id: u8,
    pub out_port: u32,
    pub out_group: u32,
    pub cookie: u64,
    pub cookie_mask: u64,
    pub matches: Vec<Oxm<'a>>,
}

impl<'a> FlowStatsRequest<'a> {
    pub fn parse(body: &'a [u8]) -> Result<FlowStatsRequest<'a>> {
        let mut r = Reader::new(body, "flow stats request");
        let table_id = r.u8()?;
        r.skip(3)?;
        let out_port = r.u32()?;
        let out_group = r.u32()?;
        r.skip(4)?;
        let cookie = r.u64()?;
        let cookie_mask = r.u64()?;
        let matches = oxm::parse_match(&mut r)?;
        Ok(FlowStatsRequest {
            table_id,
            out_port,
            out_group,
            cookie,
            cookie_mask,
            matches,
        })
    }
    pub fn emit(&self, buf: &mut Vec<u8>) {
        buf.put_u8(self.table_id);
        buf.put_zeros(3);
        buf.put_u32(self.out_port);
        buf.put_u32(self.out_group);
        buf.put_zeros(4);
        buf.put_u64(self.cookie);
        buf.put_u64(self.cookie_mask);
        oxm::emit_match(buf, &self.matches);
    }
}

/// PORT_STATS request: the port (`OFPP_ANY` = all).
pub fn parse_port_stats_request(body: &[u8]) -> Result<u32> {
    let mut r = Reader::new(body, "port stats request");
    let p = r.u32()?;
    r.skip(4)?;
    Ok(p)
}

/// DESC reply (fixed-size NUL-padded strings).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Desc {
    pub mfr_desc: String,
    pub hw_desc: String,
    pub sw_desc: String,
    pub serial_num: String,
    pub dp_desc: String,
}

fn put_str(buf: &mut Vec<u8>, s: &str, n: usize) {
    let b = s.as_bytes();
    let l = b.len().min(n - 1);
    buf.extend_from_slice(&b[..l]);
    buf.put_zeros(n - l);
}

fn get_str(r: &mut Reader<'_>, n: usize) -> Result<String> {
    Ok(crate::c_string(r.bytes(n)?, n))
}

impl Desc {
    pub fn emit(&self, buf: &mut Vec<u8>) {
        put_str(buf, &self.mfr_desc, 256);
        put_str(buf, &self.hw_desc, 256);
        put_str(buf, &self.sw_desc, 256);
        put_str(buf, &self.serial_num, 32);
        put_str(buf, &self.dp_desc, 256);
    }
    pub fn parse(body: &[u8]) -> Result<Desc> {
        let mut r = Reader::new(body, "desc");
        Ok(Desc {
            mfr_desc: get_str(&mut r, 256)?,
            hw_desc: get_str(&mut r, 256)?,
            sw_desc: get_str(&mut r, 256)?,
            serial_num: get_str(&mut r, 32)?,
            dp_desc: get_str(&mut r, 256)?,
        })
    }
}

/// One entry of a FLOW reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowStats<'a> {
    pub table_id: u8,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub priority: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub flags: u16,
    pub cookie: u64,
    pub packet_count: u64,
    pub byte_count: u64,
    pub matches: Vec<Oxm<'a>>,
    pub instructions: Vec<Instruction<'a>>,
}

impl<'a> FlowStats<'a> {
    /// Appends the entry (its length fixed up).
    pub fn emit(&self, buf: &mut Vec<u8>) {
        let s = buf.len();
        buf.put_u16(0);
        buf.put_u8(self.table_id);
        buf.put_u8(0);
        buf.put_u32(self.duration_sec);
        buf.put_u32(self.duration_nsec);
        buf.put_u16(self.priority);
        buf.put_u16(self.idle_timeout);
        buf.put_u16(self.hard_timeout);
        buf.put_u16(self.flags);
        buf.put_zeros(4);
        buf.put_u64(self.cookie);
        buf.put_u64(self.packet_count);
        buf.put_u64(self.byte_count);
        oxm::emit_match(buf, &self.matches);
        action::emit_instructions(buf, &self.instructions);
        let len = buf.len() - s;
        buf.set_u16(s, len as u16);
    }
    /// Parses every entry of a FLOW reply body.
    pub fn parse_all(body: &'a [u8]) -> Result<Vec<FlowStats<'a>>> {
        let mut r = Reader::new(body, "flow stats");
        let mut v = Vec::new();
        while r.remaining() > 0 {
            let len = r.u16()? as usize;
            if len < 56 || len - 2 > r.remaining() {
                return Err(Error::BadLength {
                    what: "flow stats",
                    len,
                });
            }
            let mut e = Reader::new(r.bytes(len - 2)?, "flow stats");
            let table_id = e.u8()?;
            e.skip(1)?;
            let duration_sec = e.u32()?;
            let duration_nsec = e.u32()?;
            let priority = e.u16()?;
            let idle_timeout = e.u16()?;
            let hard_timeout = e.u16()?;
            let flags = e.u16()?;
            e.skip(4)?;
            let cookie = e.u64()?;
            let packet_count = e.u64()?;
            let byte_count = e.u64()?;
            let matches = oxm::parse_match(&mut e)?;
            let instructions = action::parse_instructions(e.rest())?;
            v.push(FlowStats {
                table_id,
                duration_sec,
                duration_nsec,
                priority,
                idle_timeout,
                hard_timeout,
                flags,
                cookie,
                packet_count,
                byte_count,
                matches,
                instructions,
            });
        }
        Ok(v)
    }
}

/// AGGREGATE reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aggregate {
    pub packet_count: u64,
    pub byte_count: u64,
    pub flow_count: u32,
}

impl Aggregate {
    pub fn emit(&self, buf: &mut Vec<u8>) {
        buf.put_u64(self.packet_count);
        buf.put_u64(self.byte_count);
        buf.put_u32(self.flow_count);
        buf.put_zeros(4);
    }
    pub fn parse(body: &[u8]) -> Result<Aggregate> {
        let mut r = Reader::new(body, "aggregate");
        Ok(Aggregate {
            packet_count: r.u64()?,
            byte_count: r.u64()?,
            flow_count: r.u32()?,
        })
    }
}

/// One entry of a TABLE reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableStats {
    pub table_id: u8,
    pub active_count: u32,
    pub lookup_count: u64,
    pub matched_count: u64,
}

impl TableStats {
    pub fn emit(&self, buf: &mut Vec<u8>) {
        buf.put_u8(self.table_id);
        buf.put_zeros(3);
        buf.put_u32(self.active_count);
        buf.put_u64(self.lookup_count);
        buf.put_u64(self.matched_count);
    }
}

/// One entry of a PORT_STATS reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    pub port_no: u32,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
}

impl PortStats {
    pub fn emit(&self, buf: &mut Vec<u8>) {
        buf.put_u32(self.port_no);
        buf.put_zeros(4);
        for v in [
            self.rx_packets,
            self.tx_packets,
            self.rx_bytes,
            self.tx_bytes,
            self.rx_dropped,
            self.tx_dropped,
            self.rx_errors,
            self.tx_errors,
        ] {
            buf.put_u64(v);
        }
        // rx_frame_err, rx_over_err, rx_crc_err, collisions: not counted (0).
        buf.put_zeros(32);
        buf.put_u32(self.duration_sec);
        buf.put_u32(self.duration_nsec);
    }
}

/// One table of a TABLE_FEATURES reply (`ofp_table_features`) with the eight
/// properties OpenFlow 1.3 requires (ovs-ofctl refuses a reply without them): the
/// instruction and action types, next tables, and the OXM headers of the match,
/// wildcard and set-field properties.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableFeatures {
    pub table_id: u8,
    pub name: String,
    pub metadata_match: u64,
    pub metadata_write: u64,
    pub max_entries: u32,
    pub instructions: Vec<u16>,
    pub next_tables: Vec<u8>,
    pub actions: Vec<u16>,
    pub match_fields: Vec<u32>,
    pub wildcards: Vec<u32>,
    pub set_fields: Vec<u32>,
}

/// Table feature property types (the required ones).
pub mod tfpt {
    pub const INSTRUCTIONS: u16 = 0;
    pub const NEXT_TABLES: u16 = 2;
    pub const WRITE_ACTIONS: u16 = 4;
    pub const APPLY_ACTIONS: u16 = 6;
    pub const MATCH: u16 = 8;
    pub const WILDCARDS: u16 = 10;
    pub const WRITE_SETFIELD: u16 = 12;
    pub const APPLY_SETFIELD: u16 = 14;
}

impl TableFeatures {
    /// Appends the entry (length fixed up).
    pub fn emit(&self, buf: &mut Vec<u8>) {
        let s = buf.len();
        buf.put_u16(0);
        buf.put_u8(self.table_id);
        buf.put_zeros(5);
        put_str(buf, &self.name, 32);
        buf.put_u64(self.metadata_match);
        buf.put_u64(self.metadata_write);
        buf.put_u32(0);
        buf.put_u32(self.max_entries);
        let prop = |buf: &mut Vec<u8>, ty: u16, body: &dyn Fn(&mut Vec<u8>)| {
            let ps = buf.len();
            buf.put_u16(ty);
            buf.put_u16(0);
            body(buf);
            let len = buf.len() - ps;
            buf.set_u16(ps + 2, len as u16);
            buf.pad8_from(ps);
        };
        let headers = |v: &[u16]| {
            let v = v.to_vec();
            move |b: &mut Vec<u8>| {
                for t in &v {
                    b.put_u16(*t);
                    b.put_u16(4);
                }
            }
        };
        let oxms = |v: &[u32]| {
            let v = v.to_vec();
            move |b: &mut Vec<u8>| {
                for h in &v {
                    b.put_u32(*h);
                }
            }
        };
        prop(buf, tfpt::INSTRUCTIONS, &headers(&self.instructions));
        let nt = self.next_tables.clone();
        prop(buf, tfpt::NEXT_TABLES, &move |b: &mut Vec<u8>| {
            b.extend_from_slice(&nt)
        });
        prop(buf, tfpt::WRITE_ACTIONS, &headers(&self.actions));
        prop(buf, tfpt::APPLY_ACTIONS, &headers(&self.actions));
        prop(buf, tfpt::MATCH, &oxms(&self.match_fields));
        prop(buf, tfpt::WILDCARDS, &oxms(&self.wildcards));
        prop(buf, tfpt::WRITE_SETFIELD, &oxms(&self.set_fields));
        prop(buf, tfpt::APPLY_SETFIELD, &oxms(&self.set_fields));
        let len = buf.len() - s;
        buf.set_u16(s, len as u16);
    }
}

/// PORT_DESC reply: the ports.
pub fn emit_port_desc(buf: &mut Vec<u8>, ports: &[Port]) {
    for p in ports {
        p.emit(buf);
    }
}

/// Parses a PORT_DESC reply body.
pub fn parse_port_desc(body: &[u8]) -> Result<Vec<Port>> {
    if !body.len().is_multiple_of(crate::msg::PORT_LEN) {
        return Err(Error::BadLength {
            what: "port desc",
            len: body.len(),
        });
    }
    let mut r = Reader::new(body, "port desc");
    let mut v = Vec::new();
    while r.remaining() > 0 {
        v.push(Port::parse(&mut r)?);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;
    use crate::oxm::basic;

    #[test]
    fn bodies_round_trip() {
        let req = FlowStatsRequest {
            table_id: 0xff,
            out_port: 0xffff_ffff,
            out_group: 0xffff_ffff,
            cookie: 0,
            cookie_mask: 0,
            matches: vec![Oxm::basic(basic::ETH_TYPE, &[8, 6])],
        };
        let mut b = Vec::new();
        req.emit(&mut b);
        assert_eq!(FlowStatsRequest::parse(&b).unwrap(), req);
        for n in 0..b.len() {
            assert!(FlowStatsRequest::parse(&b[..n]).is_err());
        }
        let fs = FlowStats {
            table_id: 1,
            duration_sec: 2,
            duration_nsec: 3,
            priority: 4,
            idle_timeout: 5,
            hard_timeout: 6,
            flags: 1,
            cookie: 7,
            packet_count: 8,
            byte_count: 9,
            matches: vec![],
            instructions: vec![Instruction::ApplyActions(vec![Action::PopVlan])],
        };
        let mut b = Vec::new();
        fs.emit(&mut b);
        fs.emit(&mut b);
        assert_eq!(FlowStats::parse_all(&b).unwrap(), vec![fs.clone(), fs]);
        let d = Desc {
            mfr_desc: "dpustack".into(),
            dp_desc: "br0".into(),
            ..Desc::default()
        };
        let mut b = Vec::new();
        d.emit(&mut b);
        assert_eq!(b.len(), 1056);
        assert_eq!(Desc::parse(&b).unwrap(), d);
        let a = Aggregate {
            packet_count: 1,
            byte_count: 2,
            flow_count: 3,
        };
        let mut b = Vec::new();
        a.emit(&mut b);
        assert_eq!(b.len(), 24);
        assert_eq!(Aggregate::parse(&b).unwrap(), a);
        let mut b = Vec::new();
        PortStats::default().emit(&mut b);
        assert_eq!(b.len(), 112);
        let mut b = Vec::new();
        TableStats {
            table_id: 0,
            active_count: 1,
            lookup_count: 2,
            matched_count: 3,
        }
        .emit(&mut b);
        assert_eq!(b.len(), 24);
        assert!(parse_port_desc(&[0; 63]).is_err());
    }
}
