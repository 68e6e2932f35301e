//! Packet lines of `switch trace`: an OpenFlow exact-flow string
//! (`in_port=1,tcp,nw_dst=...`), optionally followed by the Ethernet frame as hex
//! (then the frame is parsed and the flow string only supplies `in_port`).

use crate::{Error, Result};

fn is_hex(s: &str) -> bool {
    s.len() >= 28 && s.len().is_multiple_of(2) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Parses one packet line into a flow key; true when it came from packet bytes.
pub fn packet_key(line: &str) -> Result<(flow::FlowKey, bool)> {
    let line = line.trim();
    let mut parts = line.split_whitespace();
    let first = parts.next().unwrap_or("");
    if let Some(h) = parts.next() {
        if is_hex(h) {
            let meta = flow::parse_exact_flow(first)
                .map_err(|e| Error::Config(format!("packet `{line}`: {e}")))?;
            return Ok((
                flow::FlowKey::from_packet(meta.in_port(), &hex_bytes(h)),
                true,
            ));
        }
    }
    let k =
        flow::parse_exact_flow(line).map_err(|e| Error::Config(format!("packet `{line}`: {e}")))?;
    Ok((k, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_strings_and_frames() {
        let (k, bytes) = packet_key("in_port=1,tcp,nw_dst=10.0.0.9,tp_dst=443").unwrap();
        assert!(!bytes);
        assert_eq!(k.in_port(), 1);
        // with a frame, the flow string only gives in_port
        let frame = "in_port=2 020000000002020000000001080045000068000000004006aed8c0a801070a0000099c400050";
        let (f, bytes) = packet_key(frame).unwrap();
        assert!(bytes);
        assert_eq!(f.in_port(), 2);
        assert_ne!(f, k);
        assert!(packet_key("in_port=1,bogus=3").is_err());
    }
}
