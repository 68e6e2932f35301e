//! Actions (OpenFlow 1.3 §7.2.5, plus the Nicira extensions Open vSwitch sends in
//! OpenFlow 1.3: resubmit, reg_move, reg_load, dec_ttl) and instructions (§7.2.4).

use crate::consts::{at, it, nx};
use crate::oxm::{self, Oxm};
use crate::{Error, Put, Reader, Result};

/// One action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<'a> {
    /// `OFPAT_OUTPUT` (port may be a reserved `OFPP_*`; `max_len` for the controller).
    Output { port: u32, max_len: u16 },
    /// `OFPAT_GROUP`.
    Group(u32),
    /// `OFPAT_PUSH_VLAN` with this TPID.
    PushVlan(u16),
    /// `OFPAT_POP_VLAN`.
    PopVlan,
    /// `OFPAT_DEC_NW_TTL`.
    DecNwTtl,
    /// `OFPAT_SET_NW_TTL`.
    SetNwTtl(u8),
    /// `OFPAT_SET_FIELD` (an unmasked OXM).
    SetField(Oxm<'a>),
    /// `NXAST_RESUBMIT` (`table: None`) / `NXAST_RESUBMIT_TABLE` (255 = current);
    /// `in_port` 0xfff8 (`OFPP_IN_PORT` in 16 bits) = the packet's.
    Resubmit { in_port: u16, table: Option<u8> },
    /// `NXAST_REG_MOVE`: `n_bits` from `src[src_ofs..]` to `dst[dst_ofs..]` (NXM/OXM
    /// 32-bit headers of the fields).
    RegMove {
        n_bits: u16,
        src_ofs: u16,
        dst_ofs: u16,
        src: u32,
        dst: u32,
    },
    /// `NXAST_REG_LOAD`: `value` into bits `ofs_nbits >> 6 ..` (`(ofs_nbits & 63) + 1`
    /// bits) of field `dst` (32-bit header).
    RegLoad {
        ofs_nbits: u16,
        dst: u32,
        value: u64,
    },
    /// `NXAST_DEC_TTL` (no controller ids).
    NxDecTtl,
}

fn bad_len(t: u16) -> Error {
    Error::BadActionLen(t)
}

/// Parses one action from `r`.
pub fn parse_one<'a>(r: &mut Reader<'a>) -> Result<Action<'a>> {
    let ty = r.u16()?;
    let len = r.u16()? as usize;
    if len < 8 || !len.is_multiple_of(8) || len - 4 > r.remaining() {
        return Err(bad_len(ty));
    }
    let mut b = Reader::new(r.bytes(len - 4)?, "action");
    let fixed = |want: usize| {
        if len == want {
            Ok(())
        } else {
            Err(bad_len(ty))
        }
    };
    let a = match ty {
        at::OUTPUT => {
            fixed(16)?;
            let port = b.u32()?;
            let max_len = b.u16()?;
            Action::Output { port, max_len }
        }
        at::GROUP => {
            fixed(8)?;
            Action::Group(b.u32()?)
        }
        at::PUSH_VLAN => {
            fixed(8)?;
            Action::PushVlan(b.u16()?)
        }
        at::POP_VLAN => {
            fixed(8)?;
            Action::PopVlan
        }
        at::DEC_NW_TTL => {
            fixed(8)?;
            Action::DecNwTtl
        }
        at::SET_NW_TTL => {
            fixed(8)?;
            Action::SetNwTtl(b.u8()?)
        }
        at::SET_FIELD => {
            let o = oxm::parse_one(&mut b).map_err(|_| bad_len(ty))?;
            // The rest is padding (zeros) to 8.
            if b.remaining() >= 8 {
                return Err(bad_len(ty));
            }
            Action::SetField(o)
        }
        at::EXPERIMENTER => {
            let exp = b.u32()?;
            if exp != nx::VENDOR_ID {
                return Err(Error::BadExperimenterAction {
                    experimenter: exp,
                    subtype: 0,
                });
            }
            let st = b.u16()?;
            match st {
                nx::AST_RESUBMIT | nx::AST_RESUBMIT_TABLE => {
                    fixed(16)?;
                    let in_port = b.u16()?;
                    let table = b.u8()?;
                    Action::Resubmit {
                        in_port,
                        table: (st == nx::AST_RESUBMIT_TABLE).then_some(table),
                    }
                }
                nx::AST_REG_MOVE => {
                    fixed(24)?;
                    Action::RegMove {
                        n_bits: b.u16()?,
                        src_ofs: b.u16()?,
                        dst_ofs: b.u16()?,
                        src: b.u32()?,
                        dst: b.u32()?,
                    }
                }
                nx::AST_REG_LOAD => {
                    fixed(24)?;
                    Action::RegLoad {
                        ofs_nbits: b.u16()?,
                        dst: b.u32()?,
                        value: b.u64()?,
                    }
                }
                nx::AST_DEC_TTL => {
                    fixed(16)?;
                    Action::NxDecTtl
                }
                _ => {
                    return Err(Error::BadExperimenterAction {
                        experimenter: exp,
                        subtype: st,
                    })
                }
            }
        }
        _ => return Err(Error::BadActionType(ty)),
    };
    Ok(a)
}

/// Parses an action list filling `buf` exactly.
pub fn parse_actions(buf: &[u8]) -> Result<Vec<Action<'_>>> {
    let mut r = Reader::new(buf, "actions");
    let mut v = Vec::new();
    while r.remaining() > 0 {
        v.push(parse_one(&mut r)?);
    }
    Ok(v)
}

fn nx_start(buf: &mut Vec<u8>, subtype: u16) -> usize {
    let s = buf.len();
    buf.put_u16(at::EXPERIMENTER);
    buf.put_u16(0);
    buf.put_u32(nx::VENDOR_ID);
    buf.put_u16(subtype);
    s
}

fn finish(buf: &mut Vec<u8>, start: usize) {
    buf.pad8_from(start);
    let len = buf.len() - start;
    buf.set_u16(start + 2, len as u16);
}

impl Action<'_> {
    /// Appends the action.
    pub fn emit(&self, buf: &mut Vec<u8>) {
        let s = buf.len();
        match self {
            Action::Output { port, max_len } => {
                buf.put_u16(at::OUTPUT);
                buf.put_u16(16);
                buf.put_u32(*port);
                buf.put_u16(*max_len);
                buf.put_zeros(6);
            }
            Action::Group(g) => {
                buf.put_u16(at::GROUP);
                buf.put_u16(8);
                buf.put_u32(*g);
            }
            Action::PushVlan(t) => {
                buf.put_u16(at::PUSH_VLAN);
                buf.put_u16(8);
                buf.put_u16(*t);
                buf.put_u16(0);
            }
            Action::PopVlan | Action::DecNwTtl => {
                buf.put_u16(if matches!(self, Action::PopVlan) {
                    at::POP_VLAN
                } else {
                    at::DEC_NW_TTL
                });
                buf.put_u16(8);
                buf.put_u32(0);
            }
            Action::SetNwTtl(t) => {
                buf.put_u16(at::SET_NW_TTL);
                buf.put_u16(8);
                buf.put_u8(*t);
                buf.put_zeros(3);
            }
            Action::SetField(o) => {
                buf.put_u16(at::SET_FIELD);
                buf.put_u16(0);
                o.emit(buf);
                finish(buf, s);
            }
            Action::Resubmit { in_port, table } => {
                nx_start(
                    buf,
                    if table.is_some() {
                        nx::AST_RESUBMIT_TABLE
                    } else {
                        nx::AST_RESUBMIT
                    },
                );
                buf.put_u16(*in_port);
                buf.put_u8(table.unwrap_or(0));
                finish(buf, s);
            }
            Action::RegMove {
                n_bits,
                src_ofs,
                dst_ofs,
                src,
                dst,
            } => {
                nx_start(buf, nx::AST_REG_MOVE);
                buf.put_u16(*n_bits);
                buf.put_u16(*src_ofs);
                buf.put_u16(*dst_ofs);
                buf.put_u32(*src);
                buf.put_u32(*dst);
                finish(buf, s);
            }
            Action::RegLoad {
                ofs_nbits,
                dst,
                value,
            } => {
                nx_start(buf, nx::AST_REG_LOAD);
                buf.put_u16(*ofs_nbits);
                buf.put_u32(*dst);
                buf.put_u64(*value);
                finish(buf, s);
            }
            Action::NxDecTtl => {
                nx_start(buf, nx::AST_DEC_TTL);
                finish(buf, s);
            }
        }
    }
}

/// Appends a list of actions.
pub fn emit_actions(buf: &mut Vec<u8>, actions: &[Action<'_>]) {
    for a in actions {
        a.emit(buf);
    }
}

/// One instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instruction<'a> {
    GotoTable(u8),
    WriteMetadata {
        value: u64,
        mask: u64,
    },
    WriteActions(Vec<Action<'a>>),
    ApplyActions(Vec<Action<'a>>),
    ClearActions,
    /// `OFPIT_METER` (parsed so that it can be refused with the right error).
    Meter(u32),
}

/// Parses an instruction list filling `buf` exactly.
pub fn parse_instructions(buf: &[u8]) -> Result<Vec<Instruction<'_>>> {
    let mut r = Reader::new(buf, "instructions");
    let mut v = Vec::new();
    while r.remaining() > 0 {
        let ty = r.u16()?;
        let len = r.u16()? as usize;
        if len < 8 || !len.is_multiple_of(8) || len - 4 > r.remaining() {
            return Err(Error::BadInstructionLen(ty));
        }
        let mut b = Reader::new(r.bytes(len - 4)?, "instruction");
        let fixed = |want: usize| {
            if len == want {
                Ok(())
            } else {
                Err(Error::BadInstructionLen(ty))
            }
        };
        v.push(match ty {
            it::GOTO_TABLE => {
                fixed(8)?;
                Instruction::GotoTable(b.u8()?)
            }
            it::WRITE_METADATA => {
                fixed(24)?;
                b.skip(4)?;
                Instruction::WriteMetadata {
                    value: b.u64()?,
                    mask: b.u64()?,
                }
            }
            it::WRITE_ACTIONS | it::APPLY_ACTIONS => {
                b.skip(4)?;
                let acts = parse_actions(b.rest())?;
                if ty == it::APPLY_ACTIONS {
                    Instruction::ApplyActions(acts)
                } else {
                    Instruction::WriteActions(acts)
                }
            }
            it::CLEAR_ACTIONS => {
                fixed(8)?;
                Instruction::ClearActions
            }
            it::METER => {
                fixed(8)?;
                Instruction::Meter(b.u32()?)
            }
            _ => return Err(Error::BadInstructionType(ty)),
        });
    }
    Ok(v)
}

/// Appends a list of instructions.
pub fn emit_instructions(buf: &mut Vec<u8>, ins: &[Instruction<'_>]) {
    for i in ins {
        let s = buf.len();
        match i {
            Instruction::GotoTable(t) => {
                buf.put_u16(it::GOTO_TABLE);
                buf.put_u16(8);
                buf.put_u8(*t);
                buf.put_zeros(3);
            }
            Instruction::WriteMetadata { value, mask } => {
                buf.put_u16(it::WRITE_METADATA);
                buf.put_u16(24);
                buf.put_u32(0);
                buf.put_u64(*value);
                buf.put_u64(*mask);
            }
            Instruction::WriteActions(a) | Instruction::ApplyActions(a) => {
                buf.put_u16(if matches!(i, Instruction::ApplyActions(_)) {
                    it::APPLY_ACTIONS
                } else {
                    it::WRITE_ACTIONS
                });
                buf.put_u16(0);
                buf.put_u32(0);
                emit_actions(buf, a);
                let len = buf.len() - s;
                buf.set_u16(s + 2, len as u16);
            }
            Instruction::ClearActions => {
                buf.put_u16(it::CLEAR_ACTIONS);
                buf.put_u16(8);
                buf.put_u32(0);
            }
            Instruction::Meter(m) => {
                buf.put_u16(it::METER);
                buf.put_u16(8);
                buf.put_u32(*m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oxm::basic;

    #[test]
    fn actions_round_trip() {
        let acts = vec![
            Action::Output {
                port: 2,
                max_len: 0,
            },
            Action::Output {
                port: crate::consts::port::CONTROLLER,
                max_len: 0xffff,
            },
            Action::Group(7),
            Action::PushVlan(0x8100),
            Action::PopVlan,
            Action::DecNwTtl,
            Action::SetNwTtl(9),
            Action::SetField(Oxm::basic(basic::TCP_DST, &[0x1f, 0x90])),
            Action::SetField(Oxm::basic(basic::ETH_SRC, &[2, 0, 0, 0, 0, 1])),
            Action::Resubmit {
                in_port: 0xfff8,
                table: Some(3),
            },
            Action::Resubmit {
                in_port: 5,
                table: None,
            },
            Action::RegMove {
                n_bits: 16,
                src_ofs: 0,
                dst_ofs: 16,
                src: 0x0000_1402,
                dst: 0x0001_0204,
            },
            Action::RegLoad {
                ofs_nbits: (4 << 6) | 3,
                dst: 0x0001_0604,
                value: 3,
            },
            Action::NxDecTtl,
        ];
        let mut b = Vec::new();
        emit_actions(&mut b, &acts);
        assert_eq!(b.len() % 8, 0);
        assert_eq!(parse_actions(&b).unwrap(), acts);
        let ins = vec![
            Instruction::ApplyActions(acts.clone()),
            Instruction::ClearActions,
            Instruction::WriteActions(vec![Action::Output {
                port: 1,
                max_len: 0,
            }]),
            Instruction::WriteMetadata {
                value: 0xa0,
                mask: 0xf0,
            },
            Instruction::GotoTable(2),
        ];
        let mut b = Vec::new();
        emit_instructions(&mut b, &ins);
        assert_eq!(parse_instructions(&b).unwrap(), ins);
    }

    #[test]
    fn bad_actions_are_typed_errors() {
        // output with length 8
        let b = [0, 0, 0, 8, 0, 0, 0, 1];
        assert_eq!(parse_actions(&b), Err(Error::BadActionLen(0)));
        // length past the end
        let b = [0, 0, 0, 16, 0, 0, 0, 1];
        assert_eq!(parse_actions(&b), Err(Error::BadActionLen(0)));
        // length 0 (would loop forever if accepted)
        let b = [0, 0, 0, 0, 0, 0, 0, 0];
        assert!(parse_actions(&b).is_err());
        // unknown type
        let b = [0, 99, 0, 8, 0, 0, 0, 0];
        assert_eq!(parse_actions(&b), Err(Error::BadActionType(99)));
        // unknown experimenter
        let b = [0xff, 0xff, 0, 16, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            parse_actions(&b),
            Err(Error::BadExperimenterAction {
                experimenter: 1,
                ..
            })
        ));
        // instruction of length 4
        let b = [0, 1, 0, 4];
        assert_eq!(parse_instructions(&b), Err(Error::BadInstructionLen(1)));
        let b = [0, 9, 0, 8, 0, 0, 0, 0];
        assert_eq!(parse_instructions(&b), Err(Error::BadInstructionType(9)));
    }
}
