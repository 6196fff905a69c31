//! The CPUs and memory nodes a process may use, as the kernel enforces them
//! (`Cpus_allowed_list` and `Mems_allowed_list` in `/proc/<pid>/status`).
//!
//! NRI reports a container's cpuset from its stored spec, not from its cgroup. The two part when
//! an update reaches the stored spec while the container's task is being started from the old
//! one; topolet repeats such updates at PostStartContainer, but a topolet restart in between
//! forgets which. After a Synchronize, topolet therefore checks each running container's init
//! process here (the DaemonSet runs with `hostPID`, so containerd's pids are ours) and sends its
//! cpuset again when the process may run outside it. The drift check (`crate::nri::handlers`,
//! during lulls) reads both lists of every running container the same way.

use std::path::{Path, PathBuf};

use topolet_core::machine::cpuset::CpuSet;

/// Why a process's allowed CPUs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no {field} line")]
    Missing { path: PathBuf, field: &'static str },
    #[error("{path}: {field} {value:?}: {reason}")]
    Malformed {
        path: PathBuf,
        field: &'static str,
        value: String,
        reason: String,
    },
}

/// What a process may use: its allowed CPUs and memory nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    pub cpus: CpuSet,
    /// NUMA node ids, in the same list format.
    pub mems: CpuSet,
}

/// The allowed CPUs and memory nodes of process `pid` under `proc_root` (one read).
pub fn allowed(proc_root: &Path, pid: u32) -> Result<Allowed, AffinityError> {
    let (path, text) = status(proc_root, pid)?;
    Ok(Allowed {
        cpus: list(&path, &text, "Cpus_allowed_list")?,
        mems: list(&path, &text, "Mems_allowed_list")?,
    })
}

/// The allowed CPUs of process `pid` under `proc_root` (normally `/proc`).
pub fn cpus_allowed(proc_root: &Path, pid: u32) -> Result<CpuSet, AffinityError> {
    let (path, text) = status(proc_root, pid)?;
    list(&path, &text, "Cpus_allowed_list")
}

fn status(proc_root: &Path, pid: u32) -> Result<(PathBuf, String), AffinityError> {
    let path = proc_root.join(pid.to_string()).join("status");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((path, text)),
        Err(source) => Err(AffinityError::Read { path, source }),
    }
}

/// The list-format value of `field` in a status file's text.
fn list(path: &Path, text: &str, field: &'static str) -> Result<CpuSet, AffinityError> {
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
        .ok_or_else(|| AffinityError::Missing {
            path: path.to_path_buf(),
            field,
        })?;
    CpuSet::parse(value).map_err(|e| AffinityError::Malformed {
        path: path.to_path_buf(),
        field,
        value: value.to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(pid: u32, status: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().join(pid.to_string());
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("status"), status).expect("write status");
        dir
    }

    #[test]
    fn reads_the_allowed_list() {
        let p = fake_proc(
            42,
            "Name:\tsleep\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1,4\nMems_allowed_list:\t0\n",
        );
        let got = cpus_allowed(p.path(), 42).expect("parsed");
        assert_eq!(got, CpuSet::parse("0-1,4").expect("set"));
    }

    #[test]
    fn reads_both_lists_and_names_a_missing_one() {
        let p = fake_proc(
            7,
            "Name:\tsleep\nCpus_allowed_list:\t2-3\nMems_allowed:\t1\nMems_allowed_list:\t0-1\n",
        );
        let got = allowed(p.path(), 7).expect("parsed");
        assert_eq!(got.cpus, CpuSet::parse("2-3").expect("set"));
        assert_eq!(got.mems, CpuSet::parse("0-1").expect("set"));
        let p = fake_proc(8, "Name:\tsleep\nCpus_allowed_list:\t2-3\n");
        let err = allowed(p.path(), 8).expect_err("no mems line").to_string();
        assert!(err.contains("8/status: no Mems_allowed_list line"), "{err}");
        let p = fake_proc(9, "Cpus_allowed_list:\t2-\nMems_allowed_list:\t0\n");
        let err = allowed(p.path(), 9).expect_err("malformed").to_string();
        assert!(err.contains("Cpus_allowed_list \"2-\""), "{err}");
    }

    #[test]
    fn our_own_process_has_cpus() {
        let me = std::process::id();
        let got = cpus_allowed(Path::new("/proc"), me).expect("own status");
        assert!(!got.is_empty());
    }

    #[test]
    fn errors_name_the_file() {
        let p = fake_proc(7, "Name:\tx\n");
        let e = cpus_allowed(p.path(), 7).expect_err("no line").to_string();
        assert!(
            e.contains("7/status") && e.contains("Cpus_allowed_list"),
            "{e}"
        );
        let p = fake_proc(8, "Cpus_allowed_list:\tzero\n");
        let e = cpus_allowed(p.path(), 8).expect_err("bad list").to_string();
        assert!(e.contains("8/status") && e.contains("zero"), "{e}");
        let e = cpus_allowed(p.path(), 9).expect_err("no file").to_string();
        assert!(e.contains("9/status"), "{e}");
    }
}
