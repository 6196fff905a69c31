//! A runtime that cannot act on one container for a while: the container's shim stopped
//! (SIGSTOP) until the guard drops (SIGCONT), so every update containerd tries to apply to it
//! waits on the shim, as on a node too slow to answer. Used to show that topolet never parks a
//! breach behind a runtime that does not apply its updates.

use anyhow::{bail, ensure, Context};

/// A process stopped with SIGSTOP until this is dropped (SIGCONT, also when a test fails).
pub struct Frozen(i32);

impl Frozen {
    pub fn freeze(pid: i32) -> anyhow::Result<Frozen> {
        // SAFETY: kill(2) with a pid read from /proc and a valid signal number; it touches no
        // memory of this process.
        if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
            bail!("SIGSTOP {pid}: {}", std::io::Error::last_os_error());
        }
        Ok(Frozen(pid))
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: as in `freeze`.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// The containerd shim serving the container whose init process is `pid`: its parent.
/// containerd only: CRI-O's conmon is the parent there, but CRI-O runs `runc update` itself
/// (cri-o/cri-o internal/oci/runtime_oci.go, runtimeOCI.UpdateContainer), so freezing conmon
/// stalls no update; the test that uses this skips on CRI-O by name.
pub fn shim_of(pid: i32) -> anyhow::Result<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let ppid: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no PPid in /proc/{pid}/status"))?;
    let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm"))
        .with_context(|| format!("reading /proc/{ppid}/comm"))?;
    ensure!(
        comm.trim().starts_with("containerd-shim"),
        "the parent of {pid} is {ppid} ({}), not a containerd shim",
        comm.trim()
    );
    Ok(ppid)
}
