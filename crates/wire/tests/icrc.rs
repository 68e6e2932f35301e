//! `icrc_ipv4`'s length bounds: a RoCE payload from one BTH plus the ICRC up to the
//! largest IPv4 UDP payload (65535 - 20 - 8 bytes); anything longer is refused, not
//! wrapped into a 16-bit UDP/IPv4 length (written for the 4 mutants of the upper bound
//! cargo-mutants found unchecked, docs/mutants.md).

use wire::roce::icrc::{check_icrc_ipv4, fill_icrc_ipv4};
use wire::roce::{icrc_ipv4, Ipv4Pseudo, BTH_LEN, ICRC_LEN};
use wire::Error;

#[test]
fn lengths_from_a_bth_up_to_the_largest_udp_payload() {
    let ip = Ipv4Pseudo::df([10, 0, 0, 1], [10, 0, 0, 2], 49152, 4791);
    let min = BTH_LEN + ICRC_LEN;
    let max = 65535 - 20 - 8;
    assert_eq!(icrc_ipv4(&ip, &vec![0; min - 1]), Err(Error::Truncated));
    for len in [min, min + 1, max - 1, max] {
        let mut p = vec![0x5a; len];
        fill_icrc_ipv4(&ip, &mut p).unwrap_or_else(|e| panic!("{len} bytes: {e:?}"));
        check_icrc_ipv4(&ip, &p).unwrap_or_else(|e| panic!("{len} bytes: {e:?}"));
    }
    for len in [max + 1, max + 2, 65535, 70_000] {
        assert_eq!(
            icrc_ipv4(&ip, &vec![0; len]),
            Err(Error::Truncated),
            "{len} bytes"
        );
    }
}
