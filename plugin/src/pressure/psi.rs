//! Pressure stall information (PSI): the kernel's `some` / `full` stall accounting of CPU, memory
//! and I/O, read from the node (`/proc/pressure/{cpu,memory,io}`) and from cgroup v2 directories
//! (`cpu.pressure`, `memory.pressure`, `io.pressure` of a pod cgroup).
//!
//! PSI is informational: the kubelet (1.37) exposes it (Summary API, `/metrics/cadvisor`,
//! KEP-4205) but does not evict on it, and neither does topolet. The eviction loop reads it with
//! its other signals each interval and exports it as metrics and in `topolet status`.
//!
//! Each file has one `some` line and, except the node's `cpu` on kernels before 5.13, one `full`
//! line: `some avg10=0.12 avg60=0.05 avg300=0.01 total=123456` (averages in percent, `total` in
//! microseconds of stall). A file that does not exist (kernel without PSI, `psi=0`, cgroup v1) is
//! no reading, not an error; a malformed one is an error naming the file.

use std::collections::BTreeMap;
use std::path::Path;

use crate::pressure::SignalError;
use crate::telemetry::metrics::StallLine;

/// The resources PSI accounts, as named by the kernel's files.
pub const RESOURCES: [&str; 3] = ["cpu", "memory", "io"];

/// One line of a pressure file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stall {
    /// Share of wall time stalled over the last 10 s, 60 s and 300 s, in percent.
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    /// Stall time since boot (or the cgroup's creation), in microseconds.
    pub total_us: u64,
}

/// One pressure file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pressure {
    /// At least one task stalled.
    pub some: Stall,
    /// Every non-idle task stalled at once (absent from the node's `cpu` file on old kernels).
    pub full: Option<Stall>,
}

/// Resource (`cpu`, `memory`, `io`) → its pressure, for the resources whose file exists.
pub type PressureByResource = BTreeMap<&'static str, Pressure>;

/// Every line of one reading, by resource, `some` before `full`.
pub fn stall_lines(p: &PressureByResource) -> Vec<StallLine> {
    p.iter()
        .flat_map(|(r, p)| {
            std::iter::once((*r, "some", p.some)).chain(p.full.map(|f| (*r, "full", f)))
        })
        .map(|(resource, kind, s)| StallLine {
            resource,
            kind,
            avg10: s.avg10,
            avg60: s.avg60,
            avg300: s.avg300,
            total_us: s.total_us,
        })
        .collect()
}

/// Parses the text of the pressure file `path`.
pub fn parse(path: &Path, text: &str) -> Result<Pressure, SignalError> {
    let err = |message: String| SignalError::Parse {
        path: path.to_path_buf(),
        message,
    };
    let mut some = None;
    let mut full = None;
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap_or_default();
        let slot = match kind {
            "some" => &mut some,
            "full" => &mut full,
            other => {
                return Err(err(format!(
                    "line {}: {other:?} is neither \"some\" nor \"full\"",
                    n + 1
                )))
            }
        };
        if slot.is_some() {
            return Err(err(format!("line {}: a second {kind:?} line", n + 1)));
        }
        let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| err(format!("line {}: {w:?} is not key=value", n + 1)))?;
            fields.insert(k, v);
        }
        let get = |k: &str| {
            fields
                .get(k)
                .copied()
                .ok_or_else(|| err(format!("line {} ({kind}): no {k}=", n + 1)))
        };
        let avg = |k: &str| -> Result<f64, SignalError> {
            let v = get(k)?;
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| {
                    err(format!(
                        "line {} ({kind}): {k}={v} is not a percentage",
                        n + 1
                    ))
                })
        };
        let total = get("total")?;
        *slot = Some(Stall {
            avg10: avg("avg10")?,
            avg60: avg("avg60")?,
            avg300: avg("avg300")?,
            total_us: total.parse().map_err(|_| {
                err(format!(
                    "line {} ({kind}): total={total} is not a count of microseconds",
                    n + 1
                ))
            })?,
        });
    }
    let some = some.ok_or_else(|| err("no \"some\" line".into()))?;
    Ok(Pressure { some, full })
}

/// Reads the pressure file `path`; `Ok(None)` when it does not exist.
pub fn read(path: &Path) -> Result<Option<Pressure>, SignalError> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(path, &text).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SignalError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Reads `<dir>/<prefix><resource><suffix>` for every resource.
fn read_all(dir: &Path, name: impl Fn(&str) -> String) -> Result<PressureByResource, SignalError> {
    let mut out = PressureByResource::new();
    for r in RESOURCES {
        if let Some(p) = read(&dir.join(name(r)))? {
            out.insert(r, p);
        }
    }
    Ok(out)
}

/// The node's pressure: `<proc>/pressure/{cpu,memory,io}` (`proc` is `/proc` on a node). Empty
/// when the kernel has no PSI.
pub fn node(proc: &Path) -> Result<PressureByResource, SignalError> {
    read_all(&proc.join("pressure"), |r| r.to_string())
}

/// A cgroup v2 directory's pressure: its `{cpu,memory,io}.pressure` (hierarchical: the pod's
/// containers included). Empty on cgroup v1 or without PSI.
pub fn cgroup(dir: &Path) -> Result<PressureByResource, SignalError> {
    read_all(dir, |r| format!("{r}.pressure"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE_MEMORY: &str = "some avg10=1.50 avg60=0.25 avg300=0.05 total=1234567\nfull avg10=0.75 avg60=0.10 avg300=0.00 total=234567\n";

    #[test]
    fn parses_some_and_full() {
        let p = parse(Path::new("/proc/pressure/memory"), NODE_MEMORY).unwrap();
        assert_eq!(
            p.some,
            Stall {
                avg10: 1.5,
                avg60: 0.25,
                avg300: 0.05,
                total_us: 1_234_567
            }
        );
        assert_eq!(p.full.unwrap().total_us, 234_567);
        assert_eq!(p.full.unwrap().avg10, 0.75);
    }

    #[test]
    fn old_kernels_cpu_file_has_no_full_line() {
        let p = parse(
            Path::new("cpu"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n",
        )
        .unwrap();
        assert_eq!(p.some.total_us, 42);
        assert_eq!(p.full, None);
    }

    #[test]
    fn errors_name_the_file_and_what_is_wrong() {
        let path = Path::new("/sys/fs/cgroup/kubepods/memory.pressure");
        for (text, want) in [
            ("", "no \"some\" line"),
            (
                "full avg10=0 avg60=0 avg300=0 total=1\n",
                "no \"some\" line",
            ),
            ("half avg10=0 avg60=0 avg300=0 total=1\n", "\"half\""),
            ("some avg10=0 avg60=0 avg300=0\n", "no total="),
            ("some avg10=x avg60=0 avg300=0 total=1\n", "avg10=x"),
            ("some avg10=-1 avg60=0 avg300=0 total=1\n", "avg10=-1"),
            ("some avg10=0 avg60=0 avg300=0 total=-5\n", "total=-5"),
            (
                "some avg10 avg60=0 avg300=0 total=1\n",
                "\"avg10\" is not key=value",
            ),
            (
                "some avg10=0 avg60=0 avg300=0 total=1\nsome avg10=0 avg60=0 avg300=0 total=1\n",
                "a second \"some\" line",
            ),
        ] {
            let e = parse(path, text).unwrap_err().to_string();
            assert!(e.starts_with(&path.display().to_string()), "{e}");
            assert!(e.contains(want), "{text:?}: {e} does not say {want}");
        }
    }

    #[test]
    fn reads_the_node_and_a_cgroup_and_skips_missing_files() {
        let root = tempfile::tempdir().unwrap();
        let pressure = root.path().join("proc/pressure");
        std::fs::create_dir_all(&pressure).unwrap();
        std::fs::write(pressure.join("memory"), NODE_MEMORY).unwrap();
        std::fs::write(
            pressure.join("cpu"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
        )
        .unwrap();
        let n = node(&root.path().join("proc")).unwrap();
        assert_eq!(n.keys().copied().collect::<Vec<_>>(), ["cpu", "memory"]);
        assert_eq!(n["cpu"].some.total_us, 7);

        let pod = root.path().join("pod");
        std::fs::create_dir_all(&pod).unwrap();
        assert!(cgroup(&pod).unwrap().is_empty(), "cgroup v1: no files");
        std::fs::write(pod.join("io.pressure"), NODE_MEMORY).unwrap();
        assert_eq!(cgroup(&pod).unwrap()["io"].some.total_us, 1_234_567);
        std::fs::write(pod.join("cpu.pressure"), "some total=1\n").unwrap();
        let e = cgroup(&pod).unwrap_err().to_string();
        assert!(
            e.contains("pod/cpu.pressure") && e.contains("no avg10="),
            "{e}"
        );
    }
}
