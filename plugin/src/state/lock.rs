//! One topolet per node: an exclusive lock on the state directory, held for the life of the
//! process.
//!
//! Two topolets on one node (a node moved between pools, a hand-started one beside the
//! DaemonSet) would both place containers, run eviction and overwrite one state file. The lock is
//! `flock(2)` on `<state dir>/topolet.lock`: the kernel drops it when the holder dies however it
//! dies (SIGKILL included), so there is never a stale lock to clean up, and it holds across mount
//! and PID namespaces (two pods mounting the same host directory lock the same inode). The holder
//! writes its PID (as its own PID namespace sees it: the host's under the chart's `hostPID`) into
//! the file, so that a second instance names it in its refusal.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The lock file's name in the state directory.
pub const LOCK_FILE: &str = "topolet.lock";

/// The node is held by another topolet, or the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("state directory {dir}: held by another topolet ({holder}); one topolet runs per node: stop that one first (or give this one another [state] dir only if it manages another runtime)")]
    Held { dir: PathBuf, holder: String },
    #[error("state directory {dir}: cannot take the node lock {path}: {source}")]
    Io {
        dir: PathBuf,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct NodeLock {
    _file: File,
    path: PathBuf,
}

impl NodeLock {
    /// Takes the lock of `dir` (created 0700 when missing), without waiting.
    pub fn acquire(dir: &Path) -> Result<NodeLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            dir: dir.to_path_buf(),
            path: path.clone(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        // SAFETY: flock only reads the descriptor number; `file` owns that descriptor and stays
        // open for the whole call (and, on success, for the life of the returned lock).
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Held {
                    dir: dir.to_path_buf(),
                    holder: describe_holder(text.trim()),
                });
            }
            return Err(io(e));
        }
        let pid = std::process::id();
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
            .and_then(|()| writeln!(file, "{pid}"))
            .map_err(io)?;
        Ok(NodeLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `pid N (cmdline)` from the PID the holder wrote; the command line when this process can see
/// it (same PID namespace).
fn describe_holder(pid_text: &str) -> String {
    let Ok(pid) = pid_text.parse::<u32>() else {
        return "its pid not recorded yet".to_string();
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|c| !c.is_empty());
    match cmdline {
        Some(c) => format!("pid {pid}: {c}"),
        None => format!("pid {pid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_freed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let held = NodeLock::acquire(&state).unwrap();
        let text = std::fs::read_to_string(held.path()).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        // flock locks belong to the open file description: a second open in this process is
        // refused just as another process would be.
        let e = NodeLock::acquire(&state).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "held by another topolet (pid {}",
                std::process::id()
            )),
            "{e}"
        );
        assert!(e.contains(&state.display().to_string()), "{e}");
        drop(held);
        NodeLock::acquire(&state).unwrap();
    }

    #[test]
    fn an_unusable_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        let e = NodeLock::acquire(&file).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("state directory {}", file.display())),
            "{e}"
        );
    }
}
