//! The soft provider's GSI QP (QP1), the one the own CM runs on: a public
//! verbs object that only the soft provider hands out.

use crate::device::{Pd, QpInitAttr};
use crate::provider::PdImpl;
use crate::types::*;
use crate::{Cq, Qp, Result};

/// The GSI QP (QP1, UD, Q_Key 0x80010000) of a soft device, for MADs (the own
/// CM): the caller owns it like any UD QP; datagrams to QPN 1 on this device
/// land in its receive queue with the 40-byte GRH slot; sends take a UD WR with
/// `remote_qpn = 1` and `remote_qkey = 0x80010000`. One per device (`EBUSY`
/// otherwise). Kernel providers do not give QP1 to user space (their CM is the
/// kernel's, reached through librdmacm): `EINVAL` for a PD of another provider.
pub fn create_gsi_qp(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, cap: QpCap) -> Result<Qp> {
    match &pd.inner().imp {
        PdImpl::Soft(_) => {}
        #[cfg(feature = "rdma-core")]
        _ => return Err(crate::Error::Inval),
    }
    let mut init = QpInitAttr::new(QpType::Ud, send_cq, recv_cq);
    init.cap = cap;
    let qp = pd.create_qp_on(&init, true)?;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey: wire::roce::GSI_QKEY,
        ..Default::default()
    };
    qp.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
    )?;
    a.qp_state = QpState::Rtr;
    qp.modify(&a, QpAttrMask::STATE)?;
    a.qp_state = QpState::Rts;
    qp.modify(&a, QpAttrMask::STATE | QpAttrMask::SQ_PSN)?;
    Ok(qp)
}
