//! The oom_score_adj floor: the lowest value the container runtime can actually apply.
//!
//! runc writes the container's oom_score_adj from inside the runtime's process tree. Without
//! CAP_SYS_RESOURCE a process cannot set a value below its own, and runc then fails the container
//! ("can't get final child's PID from pipe"; runc's debug log names the cause:
//! `nsexec: failed to update /proc/self/oom_score_adj: Permission denied`). So topolet never asks for less than the floor: `-1000` when the runtime holds
//! CAP_SYS_RESOURCE in its effective set, otherwise the runtime's own current oom_score_adj. The
//! runtime is identified by the peer credentials of the NRI socket; the operator may override
//! the result with `[qos] oom_score_adj_floor`.

use std::path::{Path, PathBuf};

/// `CAP_SYS_RESOURCE` (linux/capability.h).
const CAP_SYS_RESOURCE: u32 = 24;

#[derive(Debug, thiserror::Error)]
pub enum OomFloorError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Parse { path: PathBuf, reason: String },
}

/// How the floor was decided, for the log line that reports it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomFloor {
    pub floor: i32,
    pub reason: String,
}

/// The floor for a runtime process `pid`, read from `<proc_root>/<pid>/{status,oom_score_adj}`.
pub fn detect(proc_root: &Path, pid: u32) -> Result<OomFloor, OomFloorError> {
    let status_path = proc_root.join(pid.to_string()).join("status");
    let status = read(&status_path)?;
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .ok_or_else(|| OomFloorError::Parse {
            path: status_path.clone(),
            reason: "no CapEff line".into(),
        })?;
    let caps = u64::from_str_radix(cap_eff.trim(), 16).map_err(|_| OomFloorError::Parse {
        path: status_path.clone(),
        reason: format!("CapEff {:?} is not hexadecimal", cap_eff.trim()),
    })?;
    if caps & (1 << CAP_SYS_RESOURCE) != 0 {
        return Ok(OomFloor {
            floor: -1000,
            reason: format!("runtime pid {pid} holds CAP_SYS_RESOURCE"),
        });
    }
    let adj_path = proc_root.join(pid.to_string()).join("oom_score_adj");
    let text = read(&adj_path)?;
    let value: i32 = text.trim().parse().map_err(|_| OomFloorError::Parse {
        path: adj_path.clone(),
        reason: format!("{:?} is not an integer", text.trim()),
    })?;
    if !(-1000..=1000).contains(&value) {
        return Err(OomFloorError::Parse {
            path: adj_path,
            reason: format!("{value} is outside -1000..=1000"),
        });
    }
    Ok(OomFloor {
        floor: value,
        reason: format!(
            "runtime pid {pid} lacks CAP_SYS_RESOURCE and runs at oom_score_adj {value}"
        ),
    })
}

fn read(path: &Path) -> Result<String, OomFloorError> {
    std::fs::read_to_string(path).map_err(|source| OomFloorError::Read {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(cap_eff: &str, adj: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("42");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(
            p.join("status"),
            format!("Name:\tcontainerd\nCapInh:\t0000000000000000\nCapEff:\t{cap_eff}\n"),
        )
        .unwrap();
        std::fs::write(p.join("oom_score_adj"), adj).unwrap();
        dir
    }

    #[test]
    fn without_cap_sys_resource_the_floor_is_the_runtime_value() {
        // Our CI hosts: every capability but CAP_SYS_RESOURCE.
        let d = fake_proc("000001fffeffffff", "0\n");
        assert_eq!(detect(d.path(), 42).unwrap().floor, 0);
        let d = fake_proc("0000000000000000", "-500\n");
        assert_eq!(detect(d.path(), 42).unwrap().floor, -500);
    }

    #[test]
    fn with_cap_sys_resource_anything_goes() {
        let d = fake_proc("000001ffffffffff", "0\n");
        assert_eq!(detect(d.path(), 42).unwrap().floor, -1000);
    }

    #[test]
    fn malformed_proc_files_name_the_path() {
        let d = fake_proc("zz", "0");
        let e = detect(d.path(), 42).unwrap_err().to_string();
        assert!(e.contains("42/status") && e.contains("CapEff"), "{e}");
        let d = fake_proc("0", "many");
        let e = detect(d.path(), 42).unwrap_err().to_string();
        assert!(e.contains("42/oom_score_adj"), "{e}");
        let d = fake_proc("0", "-5000");
        assert!(detect(d.path(), 42).is_err());
        let e = detect(d.path(), 7).unwrap_err().to_string();
        assert!(e.contains("7/status"), "{e}");
    }

    #[test]
    fn this_process_can_be_read() {
        let me = std::process::id();
        let f = detect(Path::new("/proc"), me).unwrap();
        assert!((-1000..=1000).contains(&f.floor));
    }
}
