//! Where things are: the repository, its target directory and the tests' scratch directories.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// Cargo's target directory (`CARGO_TARGET_DIR` or `<repo>/target`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                repo_root().join(d)
            }
        }
        None => repo_root().join("target"),
    }
}

/// A fresh scratch directory `<target>/it/<prefix>XXXXXX`, removed on drop. Kept short: the
/// containerd socket inside must fit a unix socket path (108 bytes).
pub fn scratch_dir(prefix: &str) -> anyhow::Result<tempfile::TempDir> {
    let parent = target_dir().join("it");
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&parent)
        .with_context(|| format!("creating a scratch directory in {}", parent.display()))
}

/// A TCP port on 127.0.0.1 that nothing listens on now, below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`), for a listener the test starts later (and that may stop
/// and start again, e.g. a DaemonSet pod's). A port inside the range could be taken meanwhile
/// by any `bind(…:0)` or outgoing connection on the machine (another test lane's containerd,
/// topolet or HTTP client); below it only listeners that choose their port do, as
/// hack/kube-node.sh does for the node's (chosen free at start, so a port one of them holds now
/// is not returned).
pub fn free_port() -> anyhow::Result<u16> {
    use std::hash::{BuildHasher, Hasher};
    let low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(32768);
    let top = low.min(32768);
    anyhow::ensure!(
        top > 11000,
        "the ephemeral port range starts at {low}: no room below it"
    );
    let state = std::collections::hash_map::RandomState::new();
    for i in 0..1000u32 {
        let mut h = state.build_hasher();
        h.write_u32(i);
        let port = 10000 + (h.finish() % u64::from(top - 10000)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port on 127.0.0.1 between 10000 and {top} in 1000 tries")
}
