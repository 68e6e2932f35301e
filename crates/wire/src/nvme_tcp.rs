//! NVMe/TCP PDUs: ICReq/ICResp, CapsuleCmd/CapsuleResp, H2CData, C2HData, R2T, H2C/C2H TermReq, digests.
