//! Prometheus metrics: the text exposition format (version 0.0.4) built at
//! scrape time from [`Collector`]s, and a small HTTP server for it
//! ([`MetricsServer`], `GET /metrics`; tiny_http on one thread: a scrape every
//! few seconds needs no async runtime).
//!
//! Nothing here runs on the I/O path: collectors read counters that the data
//! path keeps in per-poller cells (`nvmf::stats`, `bdev::StatsCell`) or under
//! the locks the control plane already takes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::{info, warn};

/// Default listen address of the endpoint (`[metrics] listen`).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

/// The type of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

struct Family {
    help: String,
    kind: Kind,
    lines: String,
}

/// A scrape being built: families in name order, each with its samples
/// together (the format requires it), whatever order collectors add them in.
#[derive(Default)]
pub struct Exposition {
    families: BTreeMap<String, Family>,
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn labels_text(labels: &[(&str, &str)], extra: Option<(&str, &str)>) -> String {
    let mut s = String::new();
    let all = labels.iter().copied().chain(extra);
    for (i, (k, v)) in all.enumerate() {
        s.push(if i == 0 { '{' } else { ',' });
        s.push_str(k);
        s.push_str("=\"");
        escape(v, &mut s);
        s.push('"');
    }
    if !s.is_empty() {
        s.push('}');
    }
    s
}

fn num(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Family {
        self.families
            .entry(name.to_string())
            .or_insert_with(|| Family {
                help: help.to_string(),
                kind,
                lines: String::new(),
            })
    }

    /// Declares a family with no samples yet (so it is listed even when empty).
    pub fn declare(&mut self, name: &str, kind: Kind, help: &str) {
        self.family(name, kind, help);
    }

    /// A counter sample (`name` ends in `_total`).
    pub fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: u64) {
        let l = labels_text(labels, None);
        let f = self.family(name, Kind::Counter, help);
        let _ = writeln!(f.lines, "{name}{l} {v}");
    }

    /// A gauge sample.
    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        let l = labels_text(labels, None);
        let f = self.family(name, Kind::Gauge, help);
        let _ = writeln!(f.lines, "{name}{l} {}", num(v));
    }

    /// A histogram: `bounds` are the buckets' upper bounds (ascending, without
    /// +Inf), `counts` the per-bucket counts (non-cumulative, one more than
    /// `bounds` for +Inf), `sum` the sum of the observations.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        bounds: &[f64],
        counts: &[u64],
        sum: f64,
    ) {
        let mut lines = String::new();
        let mut cum = 0u64;
        for (i, c) in counts.iter().enumerate() {
            cum += c;
            let le = bounds.get(i).map_or("+Inf".to_string(), |b| num(*b));
            let l = labels_text(labels, Some(("le", &le)));
            let _ = writeln!(lines, "{name}_bucket{l} {cum}");
        }
        let l = labels_text(labels, None);
        let _ = writeln!(lines, "{name}_sum{l} {}", num(sum));
        let _ = writeln!(lines, "{name}_count{l} {cum}");
        let f = self.family(name, Kind::Histogram, help);
        f.lines.push_str(&lines);
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, f) in &self.families {
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {}", f.kind.as_str());
            out.push_str(&f.lines);
        }
        out
    }
}

/// Something that adds samples to a scrape.
pub trait Collector: Send + Sync {
    fn collect(&self, e: &mut Exposition);
}

/// The collectors of a node; more can be added while serving.
#[derive(Default, Clone)]
pub struct Registry {
    collectors: Arc<Mutex<Vec<Arc<dyn Collector>>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn add(&self, c: Arc<dyn Collector>) {
        if let Ok(mut g) = self.collectors.lock() {
            g.push(c);
        }
    }
    /// One scrape: every collector's samples, rendered.
    pub fn scrape(&self) -> String {
        let cs = self
            .collectors
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default();
        let mut e = Exposition::new();
        for c in cs {
            c.collect(&mut e);
        }
        e.render()
    }
}

/// The HTTP endpoint: `GET /metrics` (and `/`) answers the scrape; other paths 404.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish()
    }
}

/// Parses `[metrics] listen`: `"0"` or `""` = off (`None`), else `IP:PORT`.
pub fn parse_listen(s: &str) -> Result<Option<SocketAddr>, crate::Error> {
    let s = s.trim();
    if s.is_empty() || s == "0" {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| crate::Error::Config(format!("[metrics] listen {s:?}: want IP:PORT or 0")))
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks one) and serves `reg` on a thread.
    pub fn start(addr: SocketAddr, reg: Registry) -> Result<MetricsServer, crate::Error> {
        let server = tiny_http::Server::http(addr).map_err(|e| crate::Error::Socket {
            path: addr.to_string(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| crate::Error::Config("metrics: not an IP listener".into()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || serve(server, reg, stop2))
            .map_err(|source| crate::Error::Socket {
                path: addr.to_string(),
                source,
            })?;
        info!(%addr, "Prometheus metrics on http://{addr}/metrics");
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    pub fn stop(mut self) {
        self.shutdown();
    }
    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve(server: tiny_http::Server, reg: Registry, stop: Arc<AtomicBool>) {
    let ctype = tiny_http::Header::from_bytes(
        &b"Content-Type"[..],
        &b"text/plain; version=0.0.4; charset=utf-8"[..],
    )
    .ok();
    while !stop.load(Ordering::Relaxed) {
        let req = match server.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                warn!(%e, "metrics: accept");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let path = req.url().split('?').next().unwrap_or("");
        let get = matches!(
            req.method(),
            tiny_http::Method::Get | tiny_http::Method::Head
        );
        let r = if get && (path == "/metrics" || path == "/") {
            let mut resp = tiny_http::Response::from_string(reg.scrape());
            if let Some(h) = ctype.clone() {
                resp.add_header(h);
            }
            req.respond(resp)
        } else if !get {
            req.respond(
                tiny_http::Response::from_string("method not allowed\n").with_status_code(405),
            )
        } else {
            req.respond(
                tiny_http::Response::from_string("not found; try /metrics\n").with_status_code(404),
            )
        };
        if let Err(e) = r {
            warn!(%e, "metrics: answering a scrape");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_group_their_samples_and_escape_labels() {
        let mut e = Exposition::new();
        e.counter("x_total", "X.", &[("a", "1")], 3);
        e.gauge("g", "G.", &[], 1.5);
        e.counter("x_total", "X.", &[("a", "q\"\\\n")], 4);
        e.histogram(
            "h_seconds",
            "H.",
            &[("s", "n")],
            &[0.5, 1.0],
            &[1, 2, 3],
            7.25,
        );
        let t = e.render();
        assert_eq!(
            t,
            "# HELP g G.\n# TYPE g gauge\ng 1.5\n\
             # HELP h_seconds H.\n# TYPE h_seconds histogram\n\
             h_seconds_bucket{s=\"n\",le=\"0.5\"} 1\nh_seconds_bucket{s=\"n\",le=\"1\"} 3\n\
             h_seconds_bucket{s=\"n\",le=\"+Inf\"} 6\nh_seconds_sum{s=\"n\"} 7.25\nh_seconds_count{s=\"n\"} 6\n\
             # HELP x_total X.\n# TYPE x_total counter\nx_total{a=\"1\"} 3\nx_total{a=\"q\\\"\\\\\\n\"} 4\n"
        );
    }

    #[test]
    fn listen_zero_is_off() {
        assert_eq!(parse_listen("0").unwrap(), None);
        assert_eq!(parse_listen("").unwrap(), None);
        assert_eq!(
            parse_listen("127.0.0.1:9464").unwrap(),
            Some("127.0.0.1:9464".parse().unwrap())
        );
        assert!(parse_listen("nope").is_err());
    }
}
