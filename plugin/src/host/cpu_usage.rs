//! CPU time as the kernel counts it: each CPU's busy and total time (`/proc/stat`), and a
//! cgroup's CPU usage (v1 `cpuacct.usage`, v2 `cpu.stat` `usage_usec`). Reclaimed CPU
//! (`crate::reclaimed`) turns two readings into rates.
//!
//! `/proc/stat`'s `cpuN` lines give, in clock ticks, `user nice system idle iowait irq softirq
//! steal guest guest_nice` (`Documentation/filesystems/proc.rst`, "1.8 Miscellaneous kernel
//! statistics"); `guest` and `guest_nice` are already counted in `user` and `nice`. Busy is
//! everything but `idle` and `iowait`. Rates are taken as busy ticks over total ticks of the
//! same CPU, so the tick length never matters.
//!
//! Those counters are **sampled**: on a kernel built with `CONFIG_TICK_CPU_ACCOUNTING` (the
//! default unless `CONFIG_VIRT_CPU_ACCOUNTING_GEN` with `nohz_full` or `CONFIG_IRQ_TIME_ACCOUNTING`)
//! each scheduler tick charges its whole length to whatever the CPU is doing at that instant
//! (`kernel/sched/cputime.c`, `account_process_tick`). A load in step with the tick (a task
//! waking every millisecond on a timer, as Go's and many runtimes' tickers do) is then read as
//! anything from nothing to the whole CPU: on a HZ=250 host a thread busy 300 µs of every 1 ms
//! read as 7m, 567m or 829m depending on its phase against the tick. The cgroup v1 root's
//! `cpuacct.usage_percpu` counts every task's run time per CPU in nanoseconds, exactly
//! (`kernel/sched/cpuacct.c`, charged from `update_curr`), so [`CpuTimeSource::detect`] prefers
//! it; cgroup v2 has no per-CPU counterpart (its root `cpu.stat` is summed from the same ticks),
//! and there `/proc/stat` is all there is.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use crate::host::pod_cgroup::{CpuController, PodDir, Version};

/// One CPU's counters: clock ticks, or nanoseconds ([`CpuTimeSource`]); only the ratio of two
/// readings' differences is ever used.
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

/// Where each CPU's busy time is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuTimeSource {
    /// The cgroup v1 root's `cpuacct.usage_percpu`: nanoseconds of task run time per CPU, exact.
    /// The path is that file.
    Cpuacct(PathBuf),
    /// `<proc>/stat`: clock ticks, sampled at each tick.
    ProcStat,
}

impl CpuTimeSource {
    /// The root `cpuacct.usage_percpu` of `controller` when it is a v1 hierarchy whose file can
    /// be read and parsed now; else `/proc/stat`, and why, for the status line.
    pub fn detect(controller: &CpuController) -> (Self, Option<String>) {
        if controller.version != Version::V1 {
            return (
                Self::ProcStat,
                Some("cgroup v2 has no per-CPU run time".to_string()),
            );
        }
        let path = controller.mount_point.join("cpuacct.usage_percpu");
        match fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_cpuacct_percpu(&t))
        {
            Ok(_) => (Self::Cpuacct(path), None),
            Err(e) => (Self::ProcStat, Some(format!("{}: {e}", path.display()))),
        }
    }

    /// The source in words, for `topolet status`.
    pub fn describe(&self) -> String {
        match self {
            Self::Cpuacct(path) => format!("{} (run time per CPU, exact)", path.display()),
            Self::ProcStat => {
                "/proc/stat (clock ticks, sampled: a load in step with the tick reads wrong)"
                    .to_string()
            }
        }
    }

    /// Each CPU's busy and total time now: clock ticks from `<proc_root>/stat`, or nanoseconds
    /// of run time with the monotonic clock's nanoseconds as the total (the same for every CPU:
    /// a rate is the run time over the time that passed).
    pub fn read(&self, proc_root: &Path) -> io::Result<BTreeMap<usize, CpuTicks>> {
        match self {
            Self::ProcStat => read_proc_stat(proc_root),
            Self::Cpuacct(path) => {
                let text = fs::read_to_string(path)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
                let now = monotonic_ns();
                let ns = parse_cpuacct_percpu(&text).map_err(|m| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: {m}", path.display()),
                    )
                })?;
                Ok(run_time_at(ns, now))
            }
        }
    }
}

/// Per-CPU run times (ns, in CPU order) read at `now` (ns on the monotonic clock).
fn run_time_at(ns: Vec<u64>, now: u64) -> BTreeMap<usize, CpuTicks> {
    ns.into_iter()
        .enumerate()
        .map(|(cpu, busy)| (cpu, CpuTicks { busy, total: now }))
        .collect()
}

/// Nanoseconds on the monotonic clock since this process first asked.
fn monotonic_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A `cpuacct.usage_percpu` text: one count of nanoseconds per possible CPU, in CPU order.
pub fn parse_cpuacct_percpu(text: &str) -> Result<Vec<u64>, String> {
    let values: Vec<u64> = text
        .split_ascii_whitespace()
        .map(|f| {
            f.parse::<u64>()
                .map_err(|_| format!("{f:?} is not a count of nanoseconds"))
        })
        .collect::<Result<_, _>>()?;
    if values.is_empty() {
        return Err("no CPU in it".into());
    }
    Ok(values)
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
    fn cpuacct_percpu_is_nanoseconds_per_cpu_in_order() {
        assert_eq!(
            parse_cpuacct_percpu("100 200 0 \n").unwrap(),
            vec![100, 200, 0]
        );
        let e = parse_cpuacct_percpu("1 x\n").unwrap_err();
        assert!(e.contains("\"x\""), "{e}");
        assert!(parse_cpuacct_percpu("\n").is_err());
    }

    #[test]
    fn the_exact_source_is_taken_where_v1_offers_it() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = CpuController {
            version: Version::V1,
            mount_point: dir.path().to_path_buf(),
        };
        // No file: /proc/stat, and why.
        let (s, why) = CpuTimeSource::detect(&v1);
        assert_eq!(s, CpuTimeSource::ProcStat);
        assert!(why.unwrap().contains("cpuacct.usage_percpu"));
        // A bad file: the same, naming what is wrong.
        std::fs::write(dir.path().join("cpuacct.usage_percpu"), "5 -1\n").unwrap();
        let (s, why) = CpuTimeSource::detect(&v1);
        assert_eq!(s, CpuTimeSource::ProcStat);
        assert!(why.unwrap().contains("\"-1\""));
        std::fs::write(dir.path().join("cpuacct.usage_percpu"), "5000 7000\n").unwrap();
        let (s, why) = CpuTimeSource::detect(&v1);
        assert!(matches!(s, CpuTimeSource::Cpuacct(_)), "{s:?}");
        assert_eq!(why, None);
        let a = s.read(dir.path()).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[&1].busy, 7000);
        assert_eq!(a[&0].total, a[&1].total, "one clock for every CPU");
        let v2 = CpuController {
            version: Version::V2,
            mount_point: dir.path().to_path_buf(),
        };
        assert_eq!(CpuTimeSource::detect(&v2).0, CpuTimeSource::ProcStat);
    }

    #[test]
    fn run_time_rates_are_run_time_over_the_time_that_passed() {
        // 10 ms pass: CPU 0 ran all of it, CPU 1 a quarter, CPU 2 none.
        let a = run_time_at(vec![1_000, 2_000, 3_000], 50_000_000);
        let b = run_time_at(vec![10_001_000, 2_502_000, 3_000], 60_000_000);
        assert_eq!(busy_millis(a[&0], b[&0]), 1000);
        assert_eq!(busy_millis(a[&1], b[&1]), 250);
        assert_eq!(busy_millis(a[&2], b[&2]), 0);
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
