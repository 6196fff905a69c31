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
