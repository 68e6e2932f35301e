//! Creating a device from a short text spec, for command lines and config files:
//!
//! - `malloc:SIZE` — RAM disk (`64M`, `1G`, `4096`, suffixes K/M/G/T, powers of 1024)
//! - `null:SIZE` — null device (reads zeroes)
//! - `file:PATH[,size=SIZE][,direct][,qd=N]` — io_uring file or block device
//!   (`size` creates/resizes a regular file; `direct` opens with O_DIRECT; `qd` is
//!   the per-channel queue depth, default 128)

use std::sync::Arc;

use crate::malloc::MallocBdev;
use crate::null::NullBdev;
use crate::{BlockDevice, Error};

/// Parse a size such as `64M`, `1G`, `512K`, `4096` (suffixes are powers of 1024,
/// an optional trailing `B`/`iB` is accepted).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 1u64 << 10),
        'm' | 'M' => (&t[..t.len() - 1], 1 << 20),
        'g' | 'G' => (&t[..t.len() - 1], 1 << 30),
        't' | 'T' => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// Create a device named `name` from `spec` with logical block size `block_size`.
pub fn create(name: &str, spec: &str, block_size: u32) -> Result<Arc<dyn BlockDevice>, Error> {
    let (kind, rest) = spec
        .split_once(':')
        .ok_or(Error::Config("bdev spec wants KIND:ARGS, e.g. malloc:64M"))?;
    match kind {
        "malloc" => {
            let size = parse_size(rest).ok_or(Error::Config("bad size in malloc:SIZE"))?;
            Ok(Arc::new(MallocBdev::with_size(name, size, block_size)?))
        }
        "null" => {
            let size = parse_size(rest).ok_or(Error::Config("bad size in null:SIZE"))?;
            Ok(Arc::new(NullBdev::with_size(name, size, block_size)?))
        }
        #[cfg(feature = "uring")]
        "file" => {
            let mut parts = rest.split(',');
            let path = parts
                .next()
                .filter(|p| !p.is_empty())
                .ok_or(Error::Config("file: needs a path"))?;
            let mut opts = crate::file::FileOptions {
                block_size,
                ..Default::default()
            };
            for p in parts {
                match p.split_once('=') {
                    None if p == "direct" => opts.direct = true,
                    Some(("size", v)) => {
                        opts.size =
                            Some(parse_size(v).ok_or(Error::Config("bad size= in file spec"))?)
                    }
                    Some(("qd", v)) => {
                        opts.queue_depth = v
                            .parse()
                            .map_err(|_| Error::Config("bad qd= in file spec"))?
                    }
                    _ => return Err(Error::Config("unknown file option (size=, direct, qd=)")),
                }
            }
            Ok(Arc::new(crate::file::FileBdev::open(name, path, opts)?))
        }
        _ => Err(Error::Config("unknown bdev kind (malloc, null, file)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("2KiB"), Some(2048));
        assert_eq!(parse_size("8MB"), Some(8 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999T"), None);
    }

    #[test]
    fn specs() {
        let d = create("m", "malloc:1M", 512).unwrap();
        assert_eq!(d.num_blocks(), 2048);
        let d = create("n", "null:1G", 4096).unwrap();
        assert_eq!(d.num_blocks(), 262_144);
        assert!(create("x", "malloc", 512).is_err());
        assert!(create("x", "disk:1M", 512).is_err());
        assert!(create("x", "malloc:lots", 512).is_err());
        #[cfg(feature = "uring")]
        {
            let dir = std::env::var_os("CARGO_TARGET_TMPDIR")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(std::env::temp_dir);
            let p = dir.join(format!("dpustack-spec-{}", std::process::id()));
            let spec = format!("file:{},size=1M,qd=16", p.display());
            let d = create("f", &spec, 4096).unwrap();
            assert_eq!(d.num_blocks(), 256);
            assert!(create("f", &format!("file:{},bogus", p.display()), 4096).is_err());
            let _ = std::fs::remove_file(&p);
        }
    }
}
