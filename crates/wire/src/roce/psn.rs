//! 24-bit packet sequence numbers with wrapping comparison.

use core::fmt;

/// A 24-bit PSN. Compare with [`Psn::diff`] / [`Psn::before`], never with `<`:
/// the space wraps at 2^24 and "before" means "within half the space behind".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Mask of the 24 meaningful bits.
    pub const MASK: u32 = 0x00ff_ffff;

    /// A PSN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }
    /// The value (0..2^24).
    pub const fn value(self) -> u32 {
        self.0
    }
    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }
    /// `self - n` modulo 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }
    /// Signed distance `self - other` in (-2^23, 2^23], as rxe's `psn_compare`.
    pub const fn diff(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0)) << 8) as i32 >> 8
    }
    /// `self` comes strictly before `other`.
    pub const fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }
    /// `self` comes strictly after `other`.
    pub const fn after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
