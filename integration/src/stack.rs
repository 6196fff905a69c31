//! An isolated container runtime (CRI + NRI, runc, cgroupfs) in a scratch directory under the
//! target dir: containerd run by `hack/containerd.sh`, or CRI-O run by `hack/crio.sh` (the same
//! DIR and DIR/env contract) when `TOPOLET_RUNTIME=cri-o`. Dropping a [`Stack`] stops it and
//! removes everything it left (processes, mounts, cgroups), even when the test failed.

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

/// The CRI-O line used when `TOPOLET_CRIO_VERSION` is unset, as `DEFAULT_CRIO_VERSION` in
/// hack/lib/common.sh.
pub const DEFAULT_CRIO_VERSION: &str = "v1.36.3";

/// The container runtime a stack runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Containerd,
    CriO,
}

impl Runtime {
    /// `TOPOLET_RUNTIME`: `containerd` (also when unset or empty) or `cri-o`. Any other value
    /// panics: a typo must not test containerd while the run believes it tested CRI-O.
    pub fn under_test() -> Runtime {
        match std::env::var("TOPOLET_RUNTIME").as_deref() {
            Err(_) | Ok("") | Ok("containerd") => Runtime::Containerd,
            Ok("cri-o") => Runtime::CriO,
            Ok(other) => panic!("TOPOLET_RUNTIME={other:?}: want containerd or cri-o"),
        }
    }

    /// The runtime's name as NRI's Configure request carries it (`runtime_name`).
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
        }
    }

    pub fn is_crio(self) -> bool {
        self == Runtime::CriO
    }

    /// The hack/ script that runs a stack of this runtime.
    fn script(self) -> &'static str {
        match self {
            Runtime::Containerd => "hack/containerd.sh",
            Runtime::CriO => "hack/crio.sh",
        }
    }

    /// The variable the script reads the line from.
    fn version_var(self) -> &'static str {
        match self {
            Runtime::Containerd => "CONTAINERD_VERSION",
            Runtime::CriO => "CRIO_VERSION",
        }
    }

    /// The line under test: `TOPOLET_CONTAINERD_VERSION` or `TOPOLET_CRIO_VERSION`, default
    /// [`DEFAULT_VERSION`] or [`DEFAULT_CRIO_VERSION`].
    pub fn version_under_test(self) -> String {
        let (var, default) = match self {
            Runtime::Containerd => ("TOPOLET_CONTAINERD_VERSION", DEFAULT_VERSION),
            Runtime::CriO => ("TOPOLET_CRIO_VERSION", DEFAULT_CRIO_VERSION),
        };
        std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_string())
    }

    /// The leaf of a container's cgroup under its pod's cgroup parent (cgroupfs driver):
    /// containerd names it by the container id; CRI-O `crio-<id>` (cri-o/cri-o
    /// internal/config/cgmgr/cgmgr_linux.go, `containerCgroupPath`).
    pub fn container_cgroup(self, id: &str) -> String {
        match self {
            Runtime::Containerd => id.to_string(),
            Runtime::CriO => format!("crio-{id}"),
        }
    }

    /// `hack/containerd.sh`'s optional setting `key` as this runtime's script spells it: for
    /// CRI-O, `CONTAINERD_NRI_REQUEST_TIMEOUT` is `hack/crio.sh`'s `CRIO_NRI_REQUEST_TIMEOUT`
    /// and `CONTAINERD_ROOT_SIZE_MB` its `CRIO_ROOT_SIZE_MB`;
    /// a containerd setting CRI-O has no counterpart for is an error (the test needs a runtime
    /// that does not exist here), never dropped.
    fn setting(self, key: &str) -> anyhow::Result<String> {
        match (self, key) {
            (Runtime::Containerd, k) => Ok(k.to_string()),
            (Runtime::CriO, "CONTAINERD_NRI_REQUEST_TIMEOUT") => {
                Ok("CRIO_NRI_REQUEST_TIMEOUT".to_string())
            }
            (Runtime::CriO, "CONTAINERD_ROOT_SIZE_MB") => Ok("CRIO_ROOT_SIZE_MB".to_string()),
            (Runtime::CriO, k) if k.starts_with("CRIO_") || k == "CRICTL_TIMEOUT" => {
                Ok(k.to_string())
            }
            (Runtime::CriO, k) => bail!("hack/crio.sh has no counterpart of {k}"),
        }
    }
}

/// An explicit, named skip: when the runtime under test is CRI-O, prints `SKIPPED on cri-o:
/// <test>: <reason>` and returns true (the test then returns at once, having checked nothing,
/// and says so); on containerd returns false. For a test whose subject does not exist on
/// CRI-O, never for one that merely fails there.
pub fn skipped_on_crio(test: &str, reason: &str) -> bool {
    let skip = Runtime::under_test().is_crio();
    if skip {
        eprintln!("SKIPPED on cri-o: {test}: {reason}");
    }
    skip
}

/// The kubelet's oom_score_adj for a Guaranteed pod's containers (pkg/kubelet/qos/policy.go,
/// `guaranteedOOMScoreAdj`).
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;

/// Why a test that needs a Guaranteed container topolet does not adjust (created while topolet
/// is down, or left to the kubelet's static CPU manager) cannot run on CRI-O here.
pub const CRIO_NO_OOM_CLAMP: &str = "CRI-O v1.36.3 hands the kubelet's oom_score_adj (-997 for \
     a Guaranteed pod) to runc as it is (cri-o/cri-o internal/factory/container/container.go; \
     containerd clamps it to its own value, restrict_oom_score_adj), and runc cannot set a value \
     below its parent's without CAP_SYS_RESOURCE (opencontainers/runc libcontainer/nsenter/\
     nsexec.c, update_oom_score_adj), which the runtime lacks on this host: a Guaranteed \
     container whose value topolet does not raise to the runtime's floor fails to start";

/// [`skipped_on_crio`] with [`CRIO_NO_OOM_CLAMP`], only where it applies: on CRI-O when the
/// runtime cannot give a container the kubelet's Guaranteed value ([`Stack::oom_floor`] above
/// it). With CAP_SYS_RESOURCE (a real node's crio, as root) the test runs.
pub fn skipped_on_crio_without_oom_headroom(stack: &Stack, test: &str) -> anyhow::Result<bool> {
    if !stack.runtime().is_crio() || stack.oom_floor()? <= GUARANTEED_OOM_SCORE_ADJ {
        return Ok(false);
    }
    eprintln!("SKIPPED on cri-o: {test}: {CRIO_NO_OOM_CLAMP}");
    Ok(true)
}

/// The variables of `DIR/env` the harness uses (each runtime's script exports a subset: those
/// only one of them has are optional).
const ENV_KEYS: &[&str] = &[
    "RUNTIME",
    "CRIO_VERSION",
    "CRIO_LOG",
    "CRIO_PID_FILE",
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

/// A running container runtime of the test stack.
pub struct Stack {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
    runtime: Runtime,
    version: String,
    stopped: bool,
}

/// The line of the runtime under test ([`Runtime::under_test`]): `TOPOLET_CONTAINERD_VERSION`
/// (default [`DEFAULT_VERSION`]) or `TOPOLET_CRIO_VERSION` (default [`DEFAULT_CRIO_VERSION`]).
pub fn version_under_test() -> String {
    Runtime::under_test().version_under_test()
}

/// Runs `hack/containerd.sh` or `hack/crio.sh` `ACTION DIR` and fails with its output if it
/// fails.
fn runtime_sh(
    runtime: Runtime,
    action: &str,
    dir: &Path,
    version: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<()> {
    let mut cmd = Command::new(paths::repo_root().join(runtime.script()));
    cmd.arg(action).arg(dir).env(runtime.version_var(), version);
    for (k, v) in env {
        cmd.env(runtime.setting(k)?, v);
    }
    run_hack_script(cmd, "stack", runtime.script(), action, dir)
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
    /// Starts a fresh stack of the runtime and line under test. Fails (never skips) if it
    /// cannot.
    pub fn start() -> anyhow::Result<Stack> {
        Stack::start_version(&version_under_test())
    }

    /// Starts a fresh stack of `version` of the runtime under test.
    pub fn start_version(version: &str) -> anyhow::Result<Stack> {
        Stack::start_with_env(version, &[])
    }

    /// Starts a fresh stack of `version` of the runtime under test with `hack/containerd.sh`'s
    /// optional settings `env` (e.g. `CONTAINERD_NRI_REQUEST_TIMEOUT`; on CRI-O, their
    /// `hack/crio.sh` counterparts, [`Runtime::setting`]).
    pub fn start_with_env(version: &str, env: &[(&str, &str)]) -> anyhow::Result<Stack> {
        let runtime = Runtime::under_test();
        let dir = paths::scratch_dir("s")?;
        let mut stack = Stack {
            dir,
            env: HashMap::new(),
            runtime,
            version: version.to_string(),
            stopped: true,
        };
        // From here on, Drop cleans up whatever part of the start succeeded.
        stack.stopped = false;
        runtime_sh(runtime, "start", stack.dir.path(), version, env)?;
        stack.env = read_env(&stack.dir.path().join("env"))?;
        Ok(stack)
    }

    /// Stops and starts only the runtime's own process (containerd or crio; the shims or
    /// conmons and the containers keep running); returns when CRI answers again.
    /// DIR/env is rewritten with the same values.
    pub fn restart_runtime(&self) -> anyhow::Result<()> {
        runtime_sh(self.runtime, "restart", self.dir.path(), &self.version, &[])
    }

    /// Imports the OCI tarball `tar` as image `name`, so that the CRI lists it: containerd's
    /// `ctr images import` (namespace k8s.io), or `hack/crio.sh import` (CRI-O has no import:
    /// a copy into its storage).
    pub fn import_image(&self, name: &str, tar: &Path) -> anyhow::Result<()> {
        match self.runtime {
            Runtime::Containerd => {
                let out = self
                    .command("ctr")
                    .args(["-n", "k8s.io", "images", "import"])
                    .arg(tar)
                    .output()
                    .context("running ctr images import")?;
                if !out.status.success() {
                    bail!(
                        "ctr images import {name} failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                Ok(())
            }
            Runtime::CriO => {
                let mut cmd = Command::new(paths::repo_root().join(self.runtime.script()));
                cmd.arg("import")
                    .arg(self.dir())
                    .arg(name)
                    .arg(tar)
                    .env(self.runtime.version_var(), &self.version);
                run_hack_script(cmd, "stack", self.runtime.script(), "import", self.dir())
            }
        }
    }

    /// Stops the stack: removes every pod and container, kills the runtime and the shims or
    /// conmons, unmounts and removes the stack's cgroups.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        runtime_sh(self.runtime, "stop", self.dir.path(), &self.version, &[])
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

    /// The runtime this stack runs.
    pub fn runtime(&self) -> Runtime {
        self.runtime
    }

    /// The runtime's line (e.g. `v2.4.2`, `v1.36.3`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The runtime and its line, for messages (`containerd v2.4.2`, `cri-o v1.36.3`).
    pub fn describe(&self) -> String {
        format!("{} {}", self.runtime.name(), self.version)
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

    /// The pre-installed plugin directory the runtime launches plugins from.
    pub fn nri_plugin_dir(&self) -> PathBuf {
        self.dir().join("nri/plugins")
    }

    /// The runtime's log file (DIR/containerd.log or DIR/crio.log).
    pub fn runtime_log_path(&self) -> PathBuf {
        match self.runtime {
            Runtime::Containerd => self.dir().join("containerd.log"),
            Runtime::CriO => self.dir().join("crio.log"),
        }
    }

    /// Current length of the runtime's log: pass it to [`Stack::wait_runtime_log`].
    pub fn runtime_log_mark(&self) -> usize {
        crate::logs::mark(&self.runtime_log_path())
    }

    /// Waits until a runtime log line after byte `after` contains `pattern`; returns it.
    pub fn wait_runtime_log(
        &self,
        pattern: &str,
        after: usize,
        timeout: std::time::Duration,
    ) -> anyhow::Result<String> {
        crate::logs::wait_for_line(&self.runtime_log_path(), pattern, after, timeout)
    }

    /// Every runtime log line after byte `after` containing `pattern`.
    pub fn runtime_log_lines(&self, pattern: &str, after: usize) -> Vec<String> {
        crate::logs::lines_matching(
            &crate::logs::read_lossy(&self.runtime_log_path()),
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

    /// The runtime's pid (from DIR/containerd.pid or DIR/crio.pid).
    pub fn runtime_pid(&self) -> anyhow::Result<i32> {
        let p = match self.runtime {
            Runtime::Containerd => self.dir().join("containerd.pid"),
            Runtime::CriO => self.dir().join("crio.pid"),
        };
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{} holds {text:?}, not a pid", p.display()))
    }

    /// The lowest oom_score_adj the runtime can give a container: its own value when it lacks
    /// CAP_SYS_RESOURCE (this project's machines), else -1000. containerd clamps a lower CRI
    /// value to it (`restrict_oom_score_adj`); CRI-O passes it to runc, which then fails the
    /// container (cri-o/cri-o internal/factory/container/container.go,
    /// SpecSetLinuxContainerResources).
    pub fn oom_floor(&self) -> anyhow::Result<i64> {
        let pid = self.runtime_pid()?;
        let adj_path = format!("/proc/{pid}/oom_score_adj");
        let adj_text =
            std::fs::read_to_string(&adj_path).with_context(|| format!("reading {adj_path}"))?;
        let adj: i64 = adj_text
            .trim()
            .parse()
            .with_context(|| format!("{adj_path} holds {adj_text:?}"))?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        let cap_eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .context("the runtime's CapEff")?;
        const CAP_SYS_RESOURCE: u32 = 24;
        Ok(if cap_eff & (1 << CAP_SYS_RESOURCE) != 0 {
            -1000
        } else {
            adj
        })
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

    /// Where the runtime keeps a container's bundle (`config.json` is in it, as runc was given
    /// it). containerd: its task state directory. CRI-O: the container's run directory in
    /// containers/storage, `<runroot>/<driver>-containers/<id>/userdata` (cri-o/cri-o
    /// server/container_create.go saves config.json into `containerInfo.RunDir`); the driver is
    /// the one hack/crio.sh chose (overlay, or vfs on overlayfs), the one whose directory exists.
    pub fn bundle_dir(&self, container_id: &str) -> PathBuf {
        match self.runtime {
            Runtime::Containerd => self
                .dir()
                .join("state/io.containerd.runtime.v2.task/k8s.io")
                .join(container_id),
            Runtime::CriO => {
                let runroot = self.dir().join("runroot");
                let driver = ["overlay", "vfs"]
                    .into_iter()
                    .find(|d| runroot.join(format!("{d}-containers")).is_dir())
                    .unwrap_or("overlay");
                runroot
                    .join(format!("{driver}-containers"))
                    .join(container_id)
                    .join("userdata")
            }
        }
    }
}

/// Keeps the logs of a stack (the runtime's, and every `*.log` / `*.stderr` under DIR) in
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
