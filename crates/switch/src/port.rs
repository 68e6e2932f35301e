//! The switch's ports: `N=afpacket:IFNAME` (a Linux interface, AF_PACKET),
//! `N=pcap-rx:FILE` (frames replayed once as received on N), `N=pcap-tx:FILE`
//! (what is output to N is written there).

use flow::driver::{read_pcap, AfPacket, LinkType, PcapWriter};

use crate::{Error, Result};

/// One open port.
pub enum Port {
    Af(AfPacket),
    PcapRx(Vec<Vec<u8>>),
    PcapTx(PcapWriter<std::fs::File>),
}

/// Opens the port a `N=KIND:ARG` spec names.
pub fn open_port(spec: &str) -> Result<(u32, Port)> {
    let (n, rest) = spec
        .split_once('=')
        .ok_or_else(|| Error::Config(format!("port `{spec}`: expected N=SPEC")))?;
    let n: u32 = n
        .parse()
        .map_err(|_| Error::Config(format!("port `{spec}`: bad port number")))?;
    let (kind, arg) = rest.split_once(':').ok_or_else(|| {
        Error::Config(format!(
            "port `{spec}`: expected afpacket:IF, pcap-rx:FILE or pcap-tx:FILE"
        ))
    })?;
    let open = |what: String| move |source| Error::Open { what, source };
    let p = match kind {
        "afpacket" => Port::Af(AfPacket::open(arg).map_err(open(format!("AF_PACKET on {arg}")))?),
        "pcap-rx" => Port::PcapRx(read_pcap(
            std::fs::File::open(arg).map_err(open(format!("opening {arg}")))?,
        )?),
        "pcap-tx" => Port::PcapTx(PcapWriter::new(
            std::fs::File::create(arg).map_err(open(format!("creating {arg}")))?,
            LinkType::Ethernet,
        )?),
        _ => {
            return Err(Error::Config(format!(
                "port `{spec}`: unknown kind `{kind}`"
            )))
        }
    };
    Ok((n, p))
}
