//! InfiniBand MADs: the common MAD header and the CM messages (REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR), and the CMA private-data header.
