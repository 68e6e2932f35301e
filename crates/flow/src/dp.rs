//! Datapath cache (filled in below).
