//! The project's small Go programs the tests run (hack/device-plugin, hack/dra-driver,
//! hack/bench/colocation): their `go build` (the toolchain `GO`, else `go` on PATH, else
//! /usr/local/go/bin/go; static, `CGO_ENABLED=0`; the local toolchain only) and, for the ones
//! that serve the kubelet, one running [`Program`] with its log, stopped on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context};

use crate::wait;

/// How long a stopped [`Program`] has to exit after SIGTERM before it is killed: the upstream
/// kubelet plugin libraries remove their sockets on SIGTERM, well within it.
const STOP_GRACE: Duration = Duration::from_secs(5);

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

/// A running Go program serving the cluster's kubelet (a device plugin, a DRA driver): its
/// stderr in `log`, stopped on drop with SIGTERM, so it unregisters as on a real node, and
/// killed if it has not exited within [`STOP_GRACE`].
pub struct Program {
    child: Child,
    pub log: PathBuf,
}

impl Program {
    /// Starts `cmd` (its stdout discarded, its stderr into a new file `log`).
    pub fn spawn(cmd: &mut Command, log: PathBuf) -> anyhow::Result<Program> {
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {:?}", cmd.get_program()))?;
        Ok(Program { child, log })
    }

    /// What it logged so far.
    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid, not yet reaped (so not reused), with a valid
        // signal number; it touches no memory of this process.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let exited = wait::until(
            "a Go test program to exit after SIGTERM",
            STOP_GRACE,
            || Ok(self.child.try_wait()?),
        );
        if exited.is_err() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
