//! RoCEv2: BTH and extension headers, the opcode table, the ICRC.
