//! `go build` of the project's small Go programs the tests run (hack/device-plugin,
//! hack/bench/colocation): the toolchain (`GO`, else `go` on PATH, else /usr/local/go/bin/go),
//! static (`CGO_ENABLED=0`), with the local toolchain only.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context};

/// The Go toolchain: `GO`, else `go` on PATH, else /usr/local/go/bin/go.
pub fn go() -> PathBuf {
    std::env::var_os("GO")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("go"))
                    .find(|g| g.is_file())
            })
        })
        .unwrap_or_else(|| PathBuf::from("/usr/local/go/bin/go"))
}

/// The module cache hack/install-kube.sh fills: `$TOPOLET_CACHE/go`, else
/// `$XDG_CACHE_HOME/topolet/go` (`~/.cache`).
fn cache() -> PathBuf {
    if let Some(c) = std::env::var_os("TOPOLET_CACHE") {
        return PathBuf::from(c).join("go");
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache"));
    base.join("topolet/go")
}

/// What a program's build needs besides the standard library.
pub enum Modules {
    /// Standard library only: nothing to fetch.
    None,
    /// Modules from the shared cache ([`cache`]), go.mod read-only.
    Cached,
}

/// Builds the Go program in `src` into `to`.
pub fn build(src: &Path, to: &Path, modules: Modules) -> anyhow::Result<()> {
    let go = go();
    let mut cmd = Command::new(&go);
    cmd.args(["build", "-trimpath", "-o"])
        .arg(to)
        .arg(".")
        .current_dir(src)
        .env("CGO_ENABLED", "0")
        .env("GOTOOLCHAIN", "local");
    match modules {
        Modules::None => {
            cmd.env("GOFLAGS", "-buildvcs=false");
        }
        Modules::Cached => {
            let cache = cache();
            cmd.env("GOPATH", cache.join("path"))
                .env("GOMODCACHE", cache.join("path/pkg/mod"))
                .env("GOCACHE", cache.join("build"))
                .env("GOFLAGS", "-mod=readonly -buildvcs=false");
        }
    }
    let out = cmd
        .output()
        .with_context(|| format!("running {} build in {}", go.display(), src.display()))?;
    ensure!(
        out.status.success(),
        "go build of {} failed: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
