//! CPU time as the kernel counts it: each CPU's busy and total time (`/proc/stat`), and a
//! cgroup's CPU usage (v1 `cpuacct.usage`, v2 `cpu.stat` `usage_usec`). Reclaimed CPU
//! (`crate::reclaimed`) turns two readings into rates.
//!
//! `/proc/stat`'s `cpuN` lines give, in clock ticks, `user nice system idle iowait irq softirq
//! steal guest guest_nice` (`Documentation/filesystems/proc.rst`, "1.8 Miscellaneous kernel
//! statistics"); `guest` and `guest_nice` are already counted in `user` and `nice`. Busy is
//! everything but `idle` and `iowait`. Rates are taken as busy ticks over total ticks of the
//! same CPU, so the tick length never matters.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use crate::host::pod_cgroup::{PodDir, Version};

/// One CPU's counters, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTicks {
    pub busy: u64,
    pub total: u64,
}

/// Each CPU's counters from a `/proc/stat` text.
pub fn parse_proc_stat(text: &str) -> Result<BTreeMap<usize, CpuTicks>, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(name) = fields.next() else { continue };
        let Some(id) = name.strip_prefix("cpu").filter(|r| !r.is_empty()) else {
            continue;
        };
        let id: usize = id
            .parse()
            .map_err(|_| format!("line {line:?}: {name:?} is not cpu<N>"))?;
        let values: Vec<u64> = fields
            .take(8)
            .map(|f| f.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("line {line:?}: {e}"))?;
        if values.len() < 4 {
            return Err(format!("line {line:?}: fewer than 4 counters"));
        }
        let get = |i: usize| values.get(i).copied().unwrap_or(0);
        let idle = get(3) + get(4);
        let total: u64 = values.iter().sum();
        out.insert(
            id,
            CpuTicks {
                busy: total.saturating_sub(idle),
                total,
            },
        );
    }
    if out.is_empty() {
        return Err("no cpu<N> line".into());
    }
    Ok(out)
}

/// Reads `<proc_root>/stat`.
pub fn read_proc_stat(proc_root: &Path) -> io::Result<BTreeMap<usize, CpuTicks>> {
    let path = proc_root.join("stat");
    let text = fs::read_to_string(&path)?;
    parse_proc_stat(&text).map_err(|m| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {m}", path.display()),
        )
    })
}

/// Milli-CPUs busy on one CPU between two readings (0–1000).
pub fn busy_millis(before: CpuTicks, after: CpuTicks) -> u64 {
    let total = after.total.saturating_sub(before.total);
    if total == 0 {
        return 0;
    }
    let busy = after.busy.saturating_sub(before.busy).min(total);
    busy * 1000 / total
}

/// A cgroup's CPU usage so far, in nanoseconds.
pub fn cgroup_usage_ns(dir: &PodDir) -> io::Result<u64> {
    let invalid = |path: &Path, m: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {m}", path.display()),
        )
    };
    match dir.version {
        Version::V1 => {
            let path = dir.dir.join("cpuacct.usage");
            let text = fs::read_to_string(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            text.trim()
                .parse()
                .map_err(|_| invalid(&path, format!("not a number: {:?}", text.trim())))
        }
        Version::V2 => {
            let path = dir.dir.join("cpu.stat");
            let text = fs::read_to_string(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            let usec = text
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .ok_or_else(|| invalid(&path, "no usage_usec line".into()))?;
            let usec: u64 = usec
                .trim()
                .parse()
                .map_err(|_| invalid(&path, format!("usage_usec {usec:?} is not a number")))?;
            Ok(usec.saturating_mul(1000))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  10 0 10 100 5 0 0 0 0 0\n\
cpu0 4 0 6 50 0 0 0 0 0 0\n\
cpu1 6 0 4 50 5 1 1 1 3 0\n\
intr 1 2 3\n";

    #[test]
    fn busy_is_everything_but_idle_and_iowait() {
        let m = parse_proc_stat(STAT).unwrap();
        assert_eq!(
            m[&0],
            CpuTicks {
                busy: 10,
                total: 60
            }
        );
        // Only the first eight counters: guest (3) is inside user already.
        assert_eq!(
            m[&1],
            CpuTicks {
                busy: 13,
                total: 68
            }
        );
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn rates_are_busy_over_total_ticks() {
        let a = CpuTicks {
            busy: 100,
            total: 1000,
        };
        let b = CpuTicks {
            busy: 150,
            total: 1100,
        };
        assert_eq!(busy_millis(a, b), 500);
        assert_eq!(busy_millis(a, a), 0);
        assert_eq!(busy_millis(b, a), 0);
    }

    #[test]
    fn bad_text_is_an_error_naming_the_line() {
        assert!(parse_proc_stat("cpu0 1 2\n")
            .unwrap_err()
            .contains("cpu0 1 2"));
        assert!(parse_proc_stat("cpux 1 2 3 4\n").is_err());
        assert!(parse_proc_stat("intr 1\n").is_err());
    }

    #[test]
    fn cgroup_usage_is_read_in_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cpuacct.usage"), "12345\n").unwrap();
        std::fs::write(
            dir.path().join("cpu.stat"),
            "usage_usec 7\nuser_usec 5\nsystem_usec 2\n",
        )
        .unwrap();
        let v1 = PodDir {
            version: Version::V1,
            dir: dir.path().to_path_buf(),
        };
        let v2 = PodDir {
            version: Version::V2,
            dir: dir.path().to_path_buf(),
        };
        assert_eq!(cgroup_usage_ns(&v1).unwrap(), 12345);
        assert_eq!(cgroup_usage_ns(&v2).unwrap(), 7000);
        std::fs::remove_file(dir.path().join("cpu.stat")).unwrap();
        let e = cgroup_usage_ns(&v2).unwrap_err();
        assert!(e.to_string().contains("cpu.stat"), "{e}");
    }
}
