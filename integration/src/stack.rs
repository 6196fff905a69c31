//! An isolated containerd (CRI + NRI, runc, cgroupfs) run by `hack/containerd.sh` in a scratch
//! directory under the target dir. Dropping a [`Stack`] stops it and removes everything it left
//! (processes, mounts, cgroups), even when the test failed.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::paths;

/// The containerd line used when `TOPOLET_CONTAINERD_VERSION` is unset: the newest supported line,
/// as `DEFAULT_CONTAINERD_VERSION` in hack/lib/common.sh.
pub const DEFAULT_VERSION: &str = "v2.4.2";

/// The variables of `DIR/env` the harness uses.
const ENV_KEYS: &[&str] = &[
    "CRI_ENDPOINT",
    "CONTAINER_RUNTIME_ENDPOINT",
    "IMAGE_SERVICE_ENDPOINT",
    "CONTAINERD_ADDRESS",
    "CONTAINERD_NAMESPACE",
    "NRI_SOCKET",
    "NRI_PLUGIN_DIR",
    "NRI_CONF_DIR",
    "CONTAINERD_VERSION",
    "CRI_CONFIG_FILE",
    "CONTAINERD_LOG",
    "CONTAINERD_PID_FILE",
    "RUNC_ROOT",
    "CGROUP_PARENT_BASE",
    "PAUSE_IMAGE",
    "TEST_IMAGE",
    "PATH",
];

/// A running containerd of the test stack.
pub struct Stack {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
    version: String,
    stopped: bool,
}

/// The containerd line under test: `TOPOLET_CONTAINERD_VERSION`, default [`DEFAULT_VERSION`].
pub fn version_under_test() -> String {
    std::env::var("TOPOLET_CONTAINERD_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_VERSION.to_string())
}

fn script() -> PathBuf {
    paths::repo_root().join("hack/containerd.sh")
}

/// Runs `hack/containerd.sh ACTION DIR` and fails with its output if it fails.
fn containerd_sh(
    action: &str,
    dir: &Path,
    version: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<()> {
    let mut cmd = Command::new(script());
    cmd.arg(action).arg(dir).env("CONTAINERD_VERSION", version);
    cmd.envs(env.iter().copied());
    run_hack_script(cmd, "stack", "hack/containerd.sh", action, dir)
}

/// Runs a hack/ script's `ACTION DIR` (`label` prefixes the timing line on stderr); fails with
/// the script's output when it fails.
pub(crate) fn run_hack_script(
    mut cmd: Command,
    label: &str,
    script: &str,
    action: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("running {script} {action} {}", dir.display()))?;
    if !out.status.success() {
        bail!(
            "{script} {action} {} failed ({}) after {:.1?}:\n{}{}",
            dir.display(),
            out.status,
            started.elapsed(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "[{label}] {script} {action} {}: {:.1?}",
        dir.display(),
        started.elapsed()
    );
    Ok(())
}

impl Stack {
    /// Starts a fresh stack of the line under test. Fails (never skips) if it cannot.
    pub fn start() -> anyhow::Result<Stack> {
        Stack::start_version(&version_under_test())
    }

    /// Starts a fresh stack of containerd `version`.
    pub fn start_version(version: &str) -> anyhow::Result<Stack> {
        Stack::start_with_env(version, &[])
    }

    /// Starts a fresh stack of containerd `version` with `hack/containerd.sh`'s optional
    /// settings `env` (e.g. `CONTAINERD_NRI_REQUEST_TIMEOUT`).
    pub fn start_with_env(version: &str, env: &[(&str, &str)]) -> anyhow::Result<Stack> {
        let dir = paths::scratch_dir("s")?;
        let mut stack = Stack {
            dir,
            env: HashMap::new(),
            version: version.to_string(),
            stopped: true,
        };
        // From here on, Drop cleans up whatever part of the start succeeded.
        stack.stopped = false;
        containerd_sh("start", stack.dir.path(), version, env)?;
        stack.env = read_env(&stack.dir.path().join("env"))?;
        Ok(stack)
    }

    /// Stops and starts only the containerd process (containers keep running); returns when
    /// CRI answers again.
    /// DIR/env is rewritten with the same values.
    pub fn restart_containerd(&self) -> anyhow::Result<()> {
        containerd_sh("restart", self.dir.path(), &self.version, &[])
    }

    /// Stops the stack: removes every pod and container, kills containerd and the shims, unmounts
    /// and removes the stack's cgroups.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        containerd_sh("stop", self.dir.path(), &self.version, &[])
    }

    /// Keeps the logs and leaves the stack running when dropped: only for a machine that is thrown
    /// away right after (the QEMU guests of hack/guest.sh power off after their suite).
    pub fn leave_running(&mut self) {
        if !self.stopped {
            match keep_logs(self.dir()) {
                Ok(d) => eprintln!("[stack] left running; logs kept in {}", d.display()),
                Err(e) => eprintln!("[stack] keeping logs: {e:#}"),
            }
        }
        self.stopped = true;
    }

    /// The stack's directory (DIR of hack/containerd.sh).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The containerd line (e.g. `v2.4.2`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// A variable of `DIR/env`.
    pub fn env(&self, key: &str) -> anyhow::Result<&str> {
        self.env
            .get(key)
            .map(String::as_str)
            .with_context(|| format!("{} does not export {key}", self.dir().join("env").display()))
    }

    /// The NRI socket external plugins dial (in a directory of its own, as on a node).
    pub fn nri_socket(&self) -> PathBuf {
        self.dir().join("nri-socket/nri.sock")
    }

    /// The pre-installed plugin directory containerd launches plugins from.
    pub fn nri_plugin_dir(&self) -> PathBuf {
        self.dir().join("nri/plugins")
    }

    /// containerd's log file.
    pub fn containerd_log_path(&self) -> PathBuf {
        self.dir().join("containerd.log")
    }

    /// Current length of containerd's log: pass it to [`Stack::wait_containerd_log`].
    pub fn containerd_log_mark(&self) -> usize {
        crate::logs::mark(&self.containerd_log_path())
    }

    /// Waits until a containerd log line after byte `after` contains `pattern`; returns it.
    pub fn wait_containerd_log(
        &self,
        pattern: &str,
        after: usize,
        timeout: std::time::Duration,
    ) -> anyhow::Result<String> {
        crate::logs::wait_for_line(&self.containerd_log_path(), pattern, after, timeout)
    }

    /// Every containerd log line after byte `after` containing `pattern`.
    pub fn containerd_log_lines(&self, pattern: &str, after: usize) -> Vec<String> {
        crate::logs::lines_matching(
            &crate::logs::read_lossy(&self.containerd_log_path()),
            after,
            pattern,
        )
    }

    /// A scratch directory inside the stack's directory (removed with it).
    pub fn work_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let d = self.dir().join(name);
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(d)
    }

    /// containerd's pid (from DIR/containerd.pid).
    pub fn containerd_pid(&self) -> anyhow::Result<i32> {
        let p = self.dir().join("containerd.pid");
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{} holds {text:?}, not a pid", p.display()))
    }

    /// `CGROUP_PARENT_BASE`: every pod's cgroup parent must be under it.
    pub fn cgroup_base(&self) -> anyhow::Result<&str> {
        self.env("CGROUP_PARENT_BASE")
    }

    /// The test image (busybox with sh, sleep, cat, …).
    pub fn test_image(&self) -> anyhow::Result<&str> {
        self.env("TEST_IMAGE")
    }

    /// A command with the stack's environment (PATH with crictl/ctr/runc, CRI_CONFIG_FILE, …).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Where containerd keeps a task's bundle (`config.json` is in it).
    pub fn bundle_dir(&self, container_id: &str) -> PathBuf {
        self.dir()
            .join("state/io.containerd.runtime.v2.task/k8s.io")
            .join(container_id)
    }
}

/// Keeps the logs of a stack (containerd's, and every `*.log` / `*.stderr` under DIR) in
/// `<target>/it-logs/<DIR name>/` for post-mortems; the scratch DIR itself is removed.
fn keep_logs(dir: &Path) -> anyhow::Result<PathBuf> {
    let name = dir
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    let dest = paths::target_dir().join("it-logs").join(name);
    std::fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()))?;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() && !p.ends_with("root") && !p.ends_with("state") {
                todo.push(p);
            } else if ft.is_file() {
                let n = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if n.ends_with(".log") || n.ends_with(".stderr") || n.ends_with(".toml") {
                    let rel = p
                        .strip_prefix(dir)
                        .unwrap_or(&p)
                        .to_string_lossy()
                        .replace('/', "_");
                    let _ = std::fs::copy(&p, dest.join(rel));
                }
            }
        }
    }
    Ok(dest)
}

impl Drop for Stack {
    fn drop(&mut self) {
        if !self.stopped {
            match keep_logs(self.dir()) {
                Ok(d) => eprintln!("[stack] logs kept in {}", d.display()),
                Err(e) => eprintln!("[stack] keeping logs: {e:#}"),
            }
        }
        if let Err(e) = self.stop() {
            eprintln!("stack cleanup: {e:#}");
        }
    }
}

/// Reads DIR/env (shell syntax, values escaped with printf %q) by letting bash evaluate it.
fn read_env(path: &Path) -> anyhow::Result<HashMap<String, String>> {
    let env = source_env_file(path, |k| ENV_KEYS.contains(&k))?;
    for k in ["CRI_ENDPOINT", "CGROUP_PARENT_BASE", "TEST_IMAGE", "PATH"] {
        if !env.contains_key(k) {
            bail!("{} does not export {k}", path.display());
        }
    }
    Ok(env)
}

/// The variables `keep` accepts of a shell env file the hack/ scripts write (`export K=V`,
/// values escaped with printf %q), evaluated by bash in an empty environment.
pub fn source_env_file(
    path: &Path,
    keep: impl Fn(&str) -> bool,
) -> anyhow::Result<HashMap<String, String>> {
    let out = Command::new("bash")
        .arg("-c")
        .arg("set -a; source \"$1\"; env -0")
        .arg("bash")
        .arg(path)
        .env_clear()
        .output()
        .with_context(|| format!("sourcing {} with bash", path.display()))?;
    if !out.status.success() {
        bail!(
            "sourcing {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter_map(|e| {
            let e = String::from_utf8_lossy(e);
            let (k, v) = e.split_once('=')?;
            keep(k).then(|| (k.to_string(), v.to_string()))
        })
        .collect())
}
