//! Shared by the OVS oracle tests: a private OVS 3.1 sandbox driven through
//! `tests/oracles/ovs.sh`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub struct Oracle {
    pub sh: PathBuf,
    pub dir: PathBuf,
}

impl Oracle {
    pub fn start() -> Oracle {
        let sh = std::env::var_os("OVS_SH")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/oracles/ovs.sh")
            });
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = PathBuf::from(format!("/tmp/dps-ovs-{}-{n}", std::process::id()));
        let o = Oracle { sh, dir };
        let st = o.sh_cmd(&["start", o.dir.to_str().unwrap()]);
        assert!(
            st.status.success(),
            "ovs.sh start failed: {}",
            String::from_utf8_lossy(&st.stderr)
        );
        o
    }
    pub fn sh_cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("bash")
            .arg(&self.sh)
            .args(args)
            .env("OVS_ORACLE_DIR", &self.dir)
            .output()
            .expect("run ovs.sh")
    }
    pub fn load(&self, flows: &str) {
        let f = self.dir.join("flows.txt");
        std::fs::write(&f, flows).unwrap();
        let o = self.sh_cmd(&["flows", f.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "OVS rejected the table: {}\n{}",
            String::from_utf8_lossy(&o.stderr),
            flows
        );
    }
    pub fn compose(&self, flow: &str) -> String {
        let o = self.sh_cmd(&["compose", flow]);
        assert!(
            o.status.success(),
            "compose {flow}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
    /// (megaflow, actions) from `ofproto/trace`.
    pub fn trace(&self, flow: &str, hex: Option<&str>) -> (String, String) {
        self.trace_or_error(flow, hex)
            .unwrap_or_else(|e| panic!("trace {flow}: translation failed ({})", e.0))
    }
    /// (megaflow, actions) from `ofproto/trace`, or (REASON, megaflow) for "Translation
    /// failed (REASON), packet is dropped.".
    pub fn trace_or_error(
        &self,
        flow: &str,
        hex: Option<&str>,
    ) -> Result<(String, String), (String, String)> {
        let mut c = Command::new("ovs-appctl");
        c.arg("--timeout=10")
            .arg("-t")
            .arg(self.dir.join("ovs-vswitchd.ctl"))
            .arg("ofproto/trace")
            .arg("br0")
            .arg(flow);
        if let Some(h) = hex {
            c.arg(h);
        }
        let o = c.output().expect("ovs-appctl");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "trace {flow}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let get = |p: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(p))
                .unwrap_or_else(|| panic!("no `{p}` in trace of {flow}:\n{out}"))
                .trim()
                .to_string()
        };
        if let Some(l) = out
            .lines()
            .find_map(|l| l.split("Translation failed (").nth(1))
        {
            return Err((
                l.split(')').next().unwrap_or(l).to_string(),
                get("Megaflow:"),
            ));
        }
        Ok((get("Megaflow:"), get("Datapath actions:")))
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        // no expect() here: a panic in drop while unwinding aborts the test binary
        let _ = Command::new("bash")
            .arg(&self.sh)
            .arg("stop")
            .env("OVS_ORACLE_DIR", &self.dir)
            .output();
    }
}

pub fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
