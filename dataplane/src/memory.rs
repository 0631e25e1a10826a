//! Admission by memory. Above a watermark of memory in use, every listener closes new
//! connections at accept and `/healthz/ready` fails, so that a flood of connections ends
//! in refused connections (which clients retry elsewhere) instead of the kernel's OOM
//! killer ending every connection the replica holds. Connections already open are served.
//!
//! The measure is memory in use: in the `wharf` binary the bytes its global allocator
//! has handed out and not taken back (a counting wrapper around the system allocator),
//! sampled every [`SAMPLE_EVERY`]. Not the resident set: memory freed after a flood stays
//! resident in the allocator's free lists for reuse, so a watermark on the resident set
//! would keep refusing long after the flood ended (measured: 65 MB resident with 20 MB in
//! use once 400 clients holding 60 KiB each had gone). Envoy's overload manager watches
//! its heap in use for the same reason. Where no counting allocator is installed (the
//! library's own tests), the resident set is the measure.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often resident memory is read.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Where admission by memory starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watermark {
    /// No admission by memory.
    Off,
    /// This many resident bytes.
    Bytes(u64),
    /// This percentage (1–100) of the memory limit of the process's cgroup (the
    /// container's `resources.limits.memory`); off where there is no limit. The rest of the
    /// limit is headroom for what the measure leaves out: the allocator's own overhead and
    /// free lists, thread stacks, the binary.
    OfLimit(u8),
}

impl FromStr for Watermark {
    type Err = String;

    /// `90%` (of the cgroup's memory limit), a size (`400Mi`, `1Gi`, `512m`, bytes), or
    /// `0`/`off`.
    fn from_str(s: &str) -> Result<Watermark, String> {
        let s = s.trim();
        let bad = || {
            format!("{s:?} is not a memory watermark: use a percentage of the memory limit like 90%, a size like 400Mi, or 0 (off)")
        };
        if s == "0" || s.eq_ignore_ascii_case("off") {
            return Ok(Watermark::Off);
        }
        if let Some(p) = s.strip_suffix('%') {
            return match p.trim().parse::<u8>() {
                Ok(p @ 1..=100) => Ok(Watermark::OfLimit(p)),
                _ => Err(bad()),
            };
        }
        let (num, mult) = [("Ki", 1u64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)]
            .into_iter()
            .find_map(|(unit, mult)| s.strip_suffix(unit).map(|n| (n, mult)))
            .unwrap_or((s, 1));
        let bytes = if mult == 1 {
            wharf_model::parse_size(s)
        } else if !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()) {
            num.parse::<u64>().ok().and_then(|n| n.checked_mul(mult))
        } else {
            None
        };
        match bytes {
            Some(0) => Ok(Watermark::Off),
            Some(b) => Ok(Watermark::Bytes(b)),
            None => Err(bad()),
        }
    }
}

impl Watermark {
    /// The watermark in bytes given the cgroup's memory limit; None is off.
    pub fn resolve(self, limit: Option<u64>) -> Option<u64> {
        match self {
            Watermark::Off => None,
            Watermark::Bytes(b) => Some(b),
            Watermark::OfLimit(p) => limit.map(|l| l / 100 * u64::from(p) + l % 100 * u64::from(p) / 100),
        }
    }
}

/// The memory limit of this process's cgroup (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`); None where there is none.
pub fn cgroup_memory_limit() -> Option<u64> {
    ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .into_iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| parse_cgroup_limit(&s))
}

/// `max` (v2) and the v1 "no limit" value (a page-rounded `i64::MAX`) are no limit.
fn parse_cgroup_limit(s: &str) -> Option<u64> {
    let n = s.trim().parse::<u64>().ok()?;
    (n > 0 && n < 1 << 62).then_some(n)
}

/// Resident memory of this process in bytes.
pub fn resident_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status").ok().and_then(|s| parse_vm_rss(&s))
}

/// The `VmRSS:  1234 kB` line of `/proc/<pid>/status`.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kb = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kb.checked_mul(1024)
}

/// The admission state, read by every accept.
#[derive(Debug)]
pub struct Guard {
    /// 0: off.
    watermark: u64,
    measure: fn() -> Option<u64>,
    over: AtomicBool,
}

impl Guard {
    /// A guard refusing at `watermark` bytes in use (None: never), as `measure` counts them.
    pub fn new(watermark: Option<u64>, measure: fn() -> Option<u64>) -> Guard {
        Guard { watermark: watermark.unwrap_or(0), measure, over: AtomicBool::new(false) }
    }

    /// Memory in use now.
    pub fn measure(&self) -> Option<u64> {
        (self.measure)()
    }

    /// The watermark in bytes, if any.
    pub fn watermark(&self) -> Option<u64> {
        (self.watermark > 0).then_some(self.watermark)
    }

    /// Whether a new connection may be accepted: memory in use, measured now, is below the
    /// watermark (one atomic load with the counting allocator).
    pub fn admits(&self) -> bool {
        self.watermark == 0 || self.measure().is_none_or(|m| m < self.watermark)
    }

    /// True while memory in use was at or above the watermark at the last sample.
    pub fn over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    /// Records a sample; returns the new state when it changed.
    pub fn record(&self, in_use: u64) -> Option<bool> {
        let over = self.watermark > 0 && in_use >= self.watermark;
        (self.over.swap(over, Ordering::Relaxed) != over).then_some(over)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermarks_parse_as_percentages_sizes_or_off() {
        let ok = |s: &str| s.parse::<Watermark>().unwrap();
        assert_eq!(ok("90%"), Watermark::OfLimit(90));
        assert_eq!(ok(" 100% "), Watermark::OfLimit(100));
        assert_eq!(ok("1%"), Watermark::OfLimit(1));
        assert_eq!(ok("400Mi"), Watermark::Bytes(400 << 20));
        assert_eq!(ok("2Gi"), Watermark::Bytes(2 << 30));
        assert_eq!(ok("64Ki"), Watermark::Bytes(64 << 10));
        assert_eq!(ok("512m"), Watermark::Bytes(512 << 20));
        assert_eq!(ok("1048576"), Watermark::Bytes(1 << 20));
        assert_eq!(ok("0"), Watermark::Off);
        assert_eq!(ok("off"), Watermark::Off);
        assert_eq!(ok("0Mi"), Watermark::Off);
        for bad in ["0%", "101%", "-5%", "%", "90 %x", "Mi", "1.5Gi", "lots", "", "-1", "99999999999Gi"] {
            let e = bad.parse::<Watermark>().unwrap_err();
            assert!(e.contains("90%"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_percentage_needs_a_limit() {
        assert_eq!(Watermark::OfLimit(90).resolve(Some(512 << 20)), Some(483_183_820));
        assert_eq!(Watermark::OfLimit(100).resolve(Some(1000)), Some(1000));
        assert_eq!(Watermark::OfLimit(50).resolve(Some(u64::MAX)), Some(u64::MAX / 2));
        assert_eq!(Watermark::OfLimit(90).resolve(None), None);
        assert_eq!(Watermark::Bytes(7).resolve(None), Some(7));
        assert_eq!(Watermark::Bytes(7).resolve(Some(1)), Some(7));
        assert_eq!(Watermark::Off.resolve(Some(1000)), None);
    }

    #[test]
    fn cgroup_limits_v1_and_v2() {
        assert_eq!(parse_cgroup_limit("536870912\n"), Some(512 << 20));
        assert_eq!(parse_cgroup_limit("max\n"), None);
        assert_eq!(parse_cgroup_limit("9223372036854771712\n"), None);
        assert_eq!(parse_cgroup_limit("0"), None);
        assert_eq!(parse_cgroup_limit(""), None);
    }

    #[test]
    fn resident_memory_from_proc_status() {
        let status = "Name:\twharf\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 100 kB\n";
        assert_eq!(parse_vm_rss(status), Some(12345 * 1024));
        assert_eq!(parse_vm_rss("VmHWM:\t 5 kB\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\t x kB\n"), None);
        // This process has some.
        assert!(resident_bytes().is_some_and(|b| b > 1 << 20));
    }

    #[test]
    fn over_at_and_above_the_watermark_and_changes_are_reported_once() {
        let g = Guard::new(Some(100), || Some(7));
        assert_eq!(g.measure(), Some(7));
        assert!(g.admits());
        assert!(!Guard::new(Some(7), || Some(7)).admits());
        assert!(Guard::new(Some(7), || None).admits());
        assert!(Guard::new(None, || Some(u64::MAX)).admits());
        assert_eq!(g.watermark(), Some(100));
        assert_eq!(g.record(99), None);
        assert!(!g.over());
        assert_eq!(g.record(100), Some(true));
        assert!(g.over());
        assert_eq!(g.record(150), None);
        assert_eq!(g.record(99), Some(false));
        assert!(!g.over());
        let off = Guard::new(None, resident_bytes);
        assert_eq!(off.watermark(), None);
        assert_eq!(off.record(u64::MAX), None);
        assert!(!off.over());
    }
}
