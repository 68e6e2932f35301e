//! `Psn::before` / `Psn::after` are strict and wrap at 2^24; `Display` is the number
//! (written for the mutants cargo-mutants found unchecked, docs/mutants.md).

use wire::roce::Psn;

#[test]
fn before_and_after_are_strict_and_wrap() {
    let (a, b) = (Psn::new(5), Psn::new(6));
    assert!(a.before(b) && !b.before(a) && !a.before(a));
    assert!(b.after(a) && !a.after(b) && !a.after(a));
    // across the wrap: 0xffffff comes just before 0
    let (end, zero) = (Psn::new(0xff_ffff), Psn::new(0));
    assert!(end.before(zero) && zero.after(end));
    assert!(!zero.before(end) && !end.after(zero));
    // half the space away: the far side counts as behind
    assert!(Psn::new(0x80_0001).before(zero));
}

#[test]
fn display_is_the_decimal_value() {
    assert_eq!(Psn::new(0x12_3456).to_string(), "1193046");
    assert_eq!(Psn::new(0x100_0001).to_string(), "1");
}
