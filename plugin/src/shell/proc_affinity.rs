//! The CPUs a process may run on, as the kernel enforces them (`Cpus_allowed_list` in
//! `/proc/<pid>/status`).
//!
//! NRI reports a container's cpuset from its stored spec, not from its cgroup. The two part when
//! an update reaches the stored spec while the container's task is being started from the old
//! one; topolet repeats such updates at PostStartContainer, but a topolet restart in between
//! forgets which. After a Synchronize, topolet therefore checks each running container's init
//! process here (the DaemonSet runs with `hostPID`, so containerd's pids are ours) and sends its
//! cpuset again when the process may run outside it.

use std::path::{Path, PathBuf};

use crate::core::cpuset::CpuSet;

/// Why a process's allowed CPUs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no Cpus_allowed_list line")]
    Missing { path: PathBuf },
    #[error("{path}: Cpus_allowed_list {value:?}: {reason}")]
    Malformed {
        path: PathBuf,
        value: String,
        reason: String,
    },
}

/// The allowed CPUs of process `pid` under `proc_root` (normally `/proc`).
pub fn cpus_allowed(proc_root: &Path, pid: u32) -> Result<CpuSet, AffinityError> {
    let path = proc_root.join(pid.to_string()).join("status");
    let text = std::fs::read_to_string(&path).map_err(|source| AffinityError::Read {
        path: path.clone(),
        source,
    })?;
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(str::trim)
        .ok_or_else(|| AffinityError::Missing { path: path.clone() })?;
    CpuSet::parse(value).map_err(|e| AffinityError::Malformed {
        path,
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
