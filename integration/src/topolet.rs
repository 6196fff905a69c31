//! The plugin under test: its binary (built once per test run, or `TOPOLET_BIN`), a generated
//! config, the process (spawn, SIGKILL, restart), its state as `topolet status -o json` reports
//! it over the admin socket (wait for NRI to be synchronized, for the metrics endpoint), its
//! `/metrics` text and samples (wait for a counter), and its log (wait for a line, read fields).
//!
//! Log lines are matched by substring; fields follow the message as `key=value`. Where the state
//! a test waits for is in the status or a metric, wait on that rather than on a log line.

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde_json::Value;

use crate::logs::{find_line, lines_matching, read_lossy, strip_ansi, tail};
use crate::paths;
use crate::stack::Stack;
use crate::wait;

/// How long to wait for topolet's usual log lines (registration, synchronize).
pub const LOG_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a SIGTERM'd topolet may take to exit ([`Topolet::terminate`]): a guard, not a bound.
/// A clean exit flushes the state file (bounded by 5 s, `topolet::state::persister::DROP_FLUSH`) and
/// ends its tasks; a loaded machine stretches both.
pub const TERMINATE_TIMEOUT: Duration = Duration::from_secs(60);

/// The topolet binary: `TOPOLET_BIN`, else `cargo build -p topolet --bin topolet` once per test
/// process, then `<target>/debug/topolet`.
pub fn binary() -> anyhow::Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| locate_or_build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn locate_or_build() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("TOPOLET_BIN") {
        let bin = PathBuf::from(bin);
        if !bin.is_file() {
            bail!("TOPOLET_BIN={} is not a file", bin.display());
        }
        return Ok(bin);
    }
    let cargo = std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(option_env!("CARGO").unwrap_or("cargo")));
    let mut build = Command::new(&cargo);
    build
        .args(["build", "-p", "topolet", "--bin", "topolet"])
        .current_dir(paths::repo_root());
    for (name, _) in std::env::vars_os() {
        if is_set_by_cargo_for_this_test(&name) {
            build.env_remove(&name);
        }
    }
    let out = build
        .output()
        .with_context(|| format!("running {} build -p topolet --bin topolet", cargo.display()))?;
    if !out.status.success() {
        bail!(
            "cargo build -p topolet --bin topolet failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let bin = paths::target_dir().join("debug/topolet");
    if !bin.is_file() {
        bail!("cargo built topolet but {} is missing", bin.display());
    }
    Ok(bin)
}

/// Whether `name` is one of the variables cargo sets for the test process it runs (the package's
/// manifest and metadata, the crate's name, its temp dir). A nested `cargo build` must not see
/// them: build scripts (ring's, through cc) declare `rerun-if-env-changed` on several
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...), so a build under the test's values and the next
/// `cargo test` from a shell, without them, would each rebuild ring, rustls, kube and topolet.
pub(crate) fn is_set_by_cargo_for_this_test(name: &std::ffi::OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || name.starts_with("CARGO_BIN_EXE_")
        || matches!(
            name,
            "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// The test configuration of topolet (only the keys the tests set; unknown keys are rejected
/// by topolet, so this writes nothing else).
#[derive(Debug, Clone)]
pub struct TopoletConfig {
    pub socket: PathBuf,
    pub name: String,
    pub index: u8,
    pub policy: String,
    pub reserved_cpus: Option<String>,
    pub state_dir: PathBuf,
    pub pids_limit: Option<i64>,
    /// Lines appended to `[cpu]` (e.g. `full_pcpus_only = true`); empty by default.
    pub cpu_toml: String,
    /// `[admin] socket`: per test, `work/admin.sock`.
    pub admin_socket: PathBuf,
    /// `[metrics] address`: per test, `127.0.0.1:0` (a free port: the bound address is the
    /// status's `metrics_address`, see [`Topolet::wait_metrics_address`]).
    pub metrics_address: String,
    /// TOML appended verbatim (e.g. an `[eviction]` section); empty by default.
    pub extra_toml: String,
    /// More keys of `[nri]` (e.g. `drift_check_s = 1`); empty by default.
    pub nri_toml: String,
    /// The body of `[kubernetes]`: `enabled = "off"` by default, so that a test run inside a pod
    /// (a CI runner with a service account) never sends Events to that cluster.
    pub kubernetes: String,
    /// The body of `[kubelet]`: by default a PodResources socket that does not exist (hermetic:
    /// never a kubelet of the machine running the tests); the API-on kubelet nodes point it at
    /// their kubelet's (`crate::cluster::KubeNode::start_with_api_on`).
    pub kubelet: String,
}

impl TopoletConfig {
    /// Static policy, CPU 0 reserved, pids limit 1024, dialing `stack`'s NRI socket, state in
    /// `work/state`.
    pub fn for_stack(stack: &Stack, work: &Path) -> TopoletConfig {
        TopoletConfig {
            socket: stack.nri_socket(),
            name: "topolet".into(),
            index: 50,
            policy: "static".into(),
            reserved_cpus: Some("0".into()),
            state_dir: work.join("state"),
            pids_limit: Some(1024),
            cpu_toml: String::new(),
            admin_socket: work.join("admin.sock"),
            metrics_address: "127.0.0.1:0".into(),
            extra_toml: String::new(),
            nri_toml: String::new(),
            kubernetes: "enabled = \"off\"".into(),
            kubelet: format!(
                "pod_resources_socket = {:?}",
                work.join("no-kubelet/kubelet.sock").to_string_lossy()
            ),
        }
    }

    /// The TOML text.
    pub fn to_toml(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "[nri]");
        let _ = writeln!(t, "socket = {:?}", self.socket.to_string_lossy());
        let _ = writeln!(t, "name = {:?}", self.name);
        let _ = writeln!(t, "index = {}", self.index);
        if !self.nri_toml.is_empty() {
            let _ = writeln!(t, "{}", self.nri_toml);
        }
        let _ = writeln!(t, "\n[cpu]");
        let _ = writeln!(t, "policy = {:?}", self.policy);
        if let Some(r) = &self.reserved_cpus {
            let _ = writeln!(t, "reserved_cpus = {r:?}");
        }
        if !self.cpu_toml.is_empty() {
            let _ = writeln!(t, "{}", self.cpu_toml);
        }
        let _ = writeln!(t, "\n[admin]");
        let _ = writeln!(t, "socket = {:?}", self.admin_socket.to_string_lossy());
        let _ = writeln!(t, "\n[metrics]");
        let _ = writeln!(t, "address = {:?}", self.metrics_address);
        let _ = writeln!(t, "\n[state]");
        let _ = writeln!(t, "dir = {:?}", self.state_dir.to_string_lossy());
        if let Some(p) = self.pids_limit {
            let _ = writeln!(t, "\n[qos]");
            let _ = writeln!(t, "pids_limit = {p}");
        }
        if !self.kubelet.is_empty() {
            let _ = writeln!(t, "\n[kubelet]\n{}", self.kubelet);
        }
        if !self.kubernetes.is_empty() {
            let _ = writeln!(t, "\n[kubernetes]\n{}", self.kubernetes);
        }
        if !self.extra_toml.is_empty() {
            let _ = writeln!(t, "\n{}", self.extra_toml);
        }
        t
    }

    /// Writes the TOML to `path`.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.to_toml()).with_context(|| format!("writing {}", path.display()))
    }
}

/// A topolet process started by the test (external plugin: it dials the NRI socket).
pub struct Topolet {
    bin: PathBuf,
    config_path: PathBuf,
    admin_socket: PathBuf,
    log_path: PathBuf,
    stderr_path: PathBuf,
    child: Option<Child>,
}

impl Topolet {
    /// Writes `config` to `work/topolet.toml` and starts `topolet run` with its log in
    /// `work/topolet.log` (stderr, e.g. a panic, in `work/topolet.stderr`). Does not wait for
    /// registration: see [`Topolet::wait_nri_synchronized`].
    pub fn start(work: &Path, config: &TopoletConfig) -> anyhow::Result<Topolet> {
        let bin = binary()?;
        std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
        let config_path = work.join("topolet.toml");
        config.write(&config_path)?;
        let mut t = Topolet {
            bin,
            config_path,
            admin_socket: config.admin_socket.clone(),
            log_path: work.join("topolet.log"),
            stderr_path: work.join("topolet.stderr"),
            child: None,
        };
        t.spawn()?;
        Ok(t)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr_path)
            .with_context(|| format!("opening {}", self.stderr_path.display()))?;
        let child = Command::new(&self.bin)
            .arg("run")
            .arg("--config")
            .arg(&self.config_path)
            .arg("--log-file")
            .arg(&self.log_path)
            .env(
                "TOPOLET_LOG",
                std::env::var("TOPOLET_LOG").unwrap_or_else(|_| "debug".into()),
            )
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| {
                format!(
                    "spawning {} run --config {}",
                    self.bin.display(),
                    self.config_path.display()
                )
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// The process id, if running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            // kill() sends SIGKILL; an already exited child is fine.
            let _ = c.kill();
            c.wait().context("waiting for the killed topolet")?;
        }
        Ok(())
    }

    /// SIGTERM and wait up to `timeout` for a clean exit; returns its exit status.
    pub fn terminate(&mut self, timeout: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let Some(mut c) = self.child.take() else {
            bail!("topolet is not running");
        };
        let pid = c.id() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child's pid (not yet reaped, so not reused).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = wait::until("topolet to exit after SIGTERM", timeout, || {
            c.try_wait().context("waiting for topolet")
        });
        if status.is_err() {
            let _ = c.kill();
            let _ = c.wait();
        }
        status
    }

    /// Starts the same binary with the same config again (the log is appended to).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9()?;
        self.spawn()
    }

    /// The log so far (ANSI colours stripped), including anything written to stderr.
    pub fn log(&self) -> String {
        let mut text = read_lossy(&self.log_path);
        let err = read_lossy(&self.stderr_path);
        if !err.trim().is_empty() {
            text.push_str("\n--- stderr ---\n");
            text.push_str(&err);
        }
        strip_ansi(&text)
    }

    /// Current length of the log: pass it to [`Topolet::lines`] or [`Topolet::logged`] to only see
    /// later lines.
    pub fn log_mark(&self) -> usize {
        read_lossy(&self.log_path).len()
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Every log line after byte `after` containing `pattern`.
    pub fn lines(&self, pattern: &str, after: usize) -> Vec<String> {
        lines_matching(&read_lossy(&self.log_path), after, pattern)
    }

    /// The first log line after byte `after` containing `pattern`, which must already be there:
    /// for lines written before a state the caller has waited on (a CRI call that returned, a
    /// status reached). An error shows the log's last lines.
    pub fn logged(&self, pattern: &str, after: usize) -> anyhow::Result<String> {
        find_line(&read_lossy(&self.log_path), after, pattern).with_context(|| {
            format!(
                "no topolet log line {pattern:?} after byte {after}; log:\n{}",
                tail(&self.log(), 40)
            )
        })
    }

    /// The last log line containing `pattern`, which must already be there (see
    /// [`Topolet::logged`]).
    pub fn last_logged(&self, pattern: &str) -> anyhow::Result<String> {
        lines_matching(&read_lossy(&self.log_path), 0, pattern)
            .pop()
            .with_context(|| {
                format!(
                    "no topolet log line {pattern:?}; log:\n{}",
                    tail(&self.log(), 40)
                )
            })
    }

    /// Waits until the status says NRI is synchronized on connection `connects` or a later one
    /// ([`Topolet::wait_nri_synchronized`]), then returns the Synchronize log line of the latest
    /// connection (`pods=… containers=…`; written before the status turns synchronized).
    pub fn wait_synchronized(&mut self, connects: u64) -> anyhow::Result<String> {
        self.wait_nri_synchronized(connects)?;
        self.last_logged("nri synchronized")
    }

    /// `topolet status -o json` over the admin socket.
    pub fn status(&self) -> anyhow::Result<Value> {
        status_of(&self.bin, &self.admin_socket)
    }

    /// The `devices` entry of container `full` (`namespace/pod/container`) in `topolet status`,
    /// once it has one, waiting at most `timeout`.
    pub fn wait_container_devices(
        &mut self,
        full: &str,
        source: &str,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        self.wait_status(
            &format!("{full} holds a device from {source}"),
            timeout,
            |s| {
                s["devices"]
                    .as_array()?
                    .iter()
                    .find(|d| d["name"] == full)
                    .cloned()
            },
        )
    }

    /// Polls the status until `probe` returns `Some`; returns that. Fails early if the process
    /// exited. A status request that fails (the socket not bound yet) is retried.
    pub fn wait_status<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut(&Value) -> Option<T>,
    ) -> anyhow::Result<T> {
        let r = wait::until(&format!("topolet status: {what}"), timeout, || {
            if !self.is_running() {
                bail!("topolet exited");
            }
            Ok(probe(&self.status()?))
        });
        r.with_context(|| format!("topolet log:\n{}", tail(&self.log(), 40)))
    }

    /// Waits until the status says NRI is synchronized on connection number `connects` or a
    /// later one (1: the first; the status's `nri.connects` before a containerd restart, plus
    /// one, for the reconnection); returns the status.
    pub fn wait_nri_synchronized(&mut self, connects: u64) -> anyhow::Result<Value> {
        self.wait_status(
            &format!("NRI synchronized, connection {connects} or later"),
            LOG_TIMEOUT,
            |s| {
                let nri = &s["nri"];
                (nri["synchronized"] == true && nri["connects"].as_u64() >= Some(connects))
                    .then(|| s.clone())
            },
        )
    }

    /// NRI connections made so far (the status's `nri.connects`): before a containerd restart,
    /// for [`Topolet::wait_nri_synchronized`] after it.
    pub fn nri_connects(&self) -> anyhow::Result<u64> {
        let status = self.status()?;
        status["nri"]["connects"]
            .as_u64()
            .with_context(|| format!("no nri.connects in the status: {status}"))
    }

    /// What this topolet process decided at CreateContainer so far: (admitted, refused), from
    /// `topolet_admissions_total` and `topolet_refusals_total{operation="create"}` summed over
    /// their labels. Both count when the decision is made, before the reply; a restart starts
    /// them at 0.
    pub fn create_decisions(&self) -> anyhow::Result<(u64, u64)> {
        let status = self.status()?;
        let addr = status["metrics_address"]
            .as_str()
            .with_context(|| format!("no metrics_address in the status: {status}"))?;
        let text = metrics_text(addr)?;
        let admitted = sum(&text, "topolet_admissions_total", &[])?;
        let refused = sum(&text, "topolet_refusals_total", &[("operation", "create")])?;
        Ok((admitted as u64, refused as u64))
    }

    /// The status's open exclusive-CPU breaches: (container id, the exclusive CPUs it may run
    /// on, seconds so far).
    pub fn breaches(&self) -> anyhow::Result<Vec<(String, String, f64)>> {
        Ok(breaches_of(&self.status()?))
    }

    /// The address `/metrics` is served on, once it listens (the status's `metrics_address`).
    pub fn wait_metrics_address(&mut self) -> anyhow::Result<String> {
        self.wait_status("the metrics endpoint listening", LOG_TIMEOUT, |s| {
            s["metrics_address"].as_str().map(str::to_string)
        })
    }

    /// Waits until the `/metrics` sample `name` whose labels include `labels` reaches `at_least`
    /// (a counter: a sample not exposed yet counts as 0); returns its value. Fails early if the
    /// process exited.
    pub fn wait_metric(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        at_least: f64,
        timeout: Duration,
    ) -> anyhow::Result<f64> {
        let addr = self.wait_metrics_address()?;
        let what = format!("{name}{labels:?} >= {at_least}");
        let r = wait::until(&what, timeout, || {
            if !self.is_running() {
                bail!("topolet exited");
            }
            let v = metric(&addr, name, labels)?;
            Ok((v >= at_least).then_some(v))
        });
        r.with_context(|| format!("topolet log:\n{}", tail(&self.log(), 40)))
    }
}

/// One `GET /metrics` of the endpoint at `addr`; returns the body (Prometheus text format).
pub fn metrics_text(addr: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)
        .with_context(|| format!("reading GET /metrics from {addr}"))?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET /metrics: no header end in {raw:?}"))?;
    ensure!(
        head.starts_with("HTTP/1.1 200"),
        "GET /metrics answered {head:?}"
    );
    Ok(body.to_string())
}

/// The value of the `/metrics` sample `name` whose labels include `labels` at `addr`; 0 when
/// there is none yet (a counter whose label set has not been seen).
pub fn metric(addr: &str, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<f64> {
    Ok(sample(&metrics_text(addr)?, name, labels)?.unwrap_or(0.0))
}

/// The value of the first sample `name` in the exposition `text` whose labels include `labels`
/// (label values as written, without escapes: topolet's are plain words). The harness does not
/// link a full parser (`topolet_testkit::metrics_text`), which the observability suite uses to
/// check the format itself.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<Option<f64>> {
    Ok(samples(text, name, labels)?.first().copied())
}

/// The sum of every sample `name` in `text` whose labels include `labels` (0 when none).
pub fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<f64> {
    Ok(samples(text, name, labels)?.iter().sum())
}

/// The values of the samples `name` in `text` whose labels include `labels`, in order.
fn samples(text: &str, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once("} ") {
                Some(split) => split,
                None => bail!("malformed sample line {line:?}"),
            },
            None => match rest.strip_prefix(' ') {
                Some(v) => ("", v),
                // Another family whose name starts with `name`.
                None => continue,
            },
        };
        let pairs: Vec<&str> = label_text.split(',').collect();
        if labels
            .iter()
            .all(|(k, v)| pairs.contains(&format!("{k}={v:?}").as_str()))
        {
            let v = value.split(' ').next().unwrap_or("");
            out.push(v.parse().with_context(|| format!("value of {line:?}"))?);
        }
    }
    Ok(out)
}

/// The open exclusive-CPU breaches of a `topolet status -o json` document: (container id, the
/// exclusive CPUs it may run on, seconds so far).
pub fn breaches_of(status: &Value) -> Vec<(String, String, f64)> {
    status["breaches"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|b| {
                    (
                        b["id"].as_str().unwrap_or_default().to_string(),
                        b["cpus"].as_str().unwrap_or_default().to_string(),
                        b["seconds"].as_f64().unwrap_or(0.0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for Topolet {
    fn drop(&mut self) {
        let _ = self.kill9();
    }
}

/// `topolet status -o json` of the topolet serving `admin_socket`, with binary `bin`.
pub fn status_of(bin: &Path, admin_socket: &Path) -> anyhow::Result<Value> {
    let out = Command::new(bin)
        .args(["status", "-o", "json", "--admin-socket"])
        .arg(admin_socket)
        .output()
        .with_context(|| format!("running {} status", bin.display()))?;
    ensure!(
        out.status.success(),
        "topolet status --admin-socket {} failed ({}): {}",
        admin_socket.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    serde_json::from_slice(&out.stdout).context("parsing topolet status -o json")
}

/// Waits until the topolet serving `admin_socket` (one this test did not start, e.g. a
/// pre-installed plugin containerd launched) says NRI is synchronized; returns its status.
pub fn wait_nri_synchronized_at(admin_socket: &Path) -> anyhow::Result<Value> {
    let bin = binary()?;
    wait::until(
        &format!("topolet at {}: NRI synchronized", admin_socket.display()),
        LOG_TIMEOUT,
        || {
            let s = status_of(&bin, admin_socket)?;
            Ok((s["nri"]["synchronized"] == true).then_some(s))
        },
    )
}

/// Installs topolet as a pre-installed plugin `NN-name` in the stack's plugin dir: a `#!/bin/sh`
/// wrapper that execs the binary with absolute paths (containerd gives it no arguments and no
/// PATH). Returns the wrapper's path. The config's socket is ignored in this mode (containerd
/// passes the connection as fd `NRI_PLUGIN_SOCKET`).
pub fn install_preinstalled(
    stack: &Stack,
    config: &TopoletConfig,
    config_path: &Path,
    log_path: &Path,
) -> anyhow::Result<PathBuf> {
    let bin = binary()?;
    config.write(config_path)?;
    let dir = stack.nri_plugin_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let wrapper = dir.join(format!("{:02}-{}", config.index, config.name));
    let script = format!(
        "#!/bin/sh\nTOPOLET_LOG=debug NO_COLOR=1 exec '{}' run --config '{}' --log-file '{}' 2>>'{}.stderr'\n",
        bin.display(),
        config_path.display(),
        log_path.display(),
        log_path.display()
    );
    std::fs::write(&wrapper, script).with_context(|| format!("writing {}", wrapper.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("chmod 755 {}", wrapper.display()))?;
    Ok(wrapper)
}

/// Pids of processes whose command line contains `needle` (e.g. a unique config path).
pub fn pids_with_cmdline(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    let me = std::process::id() as i32;
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

/// Kills (SIGKILL) every process whose command line contains `needle` when dropped: cleans up
/// processes the test did not spawn itself (a pre-installed plugin launched by containerd).
pub struct KillOnDrop(pub String);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in pids_with_cmdline(&self.0) {
            // SAFETY: kill(2) with a pid read from /proc; at worst it no longer exists.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{is_set_by_cargo_for_this_test, sample};

    #[test]
    fn the_nested_build_drops_the_test_runs_variables_and_keeps_the_users() {
        // This test runs under `cargo test`, so its own environment has them.
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        for set_by_cargo in [
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_MANIFEST_DIR",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_EXE_topolet",
            "OUT_DIR",
        ] {
            assert!(
                is_set_by_cargo_for_this_test(set_by_cargo.as_ref()),
                "{set_by_cargo}"
            );
        }
        for users in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "PATH",
        ] {
            assert!(!is_set_by_cargo_for_this_test(users.as_ref()), "{users}");
        }
    }

    #[test]
    fn sample_matches_name_and_every_label() {
        let text = "# TYPE topolet_x_total counter\n\
                    topolet_x_total{trigger=\"sighup\",result=\"applied\"} 2\n\
                    topolet_x_total{trigger=\"file_change\",result=\"applied\"} 5\n\
                    topolet_x_total_more 9\n\
                    topolet_y 1.5 1700000000\n";
        let v = |n: &str, l: &[(&str, &str)]| sample(text, n, l).unwrap();
        assert_eq!(v("topolet_x_total", &[("result", "applied")]), Some(2.0));
        assert_eq!(
            v(
                "topolet_x_total",
                &[("trigger", "file_change"), ("result", "applied")]
            ),
            Some(5.0)
        );
        assert_eq!(v("topolet_x_total", &[("result", "rejected")]), None);
        assert_eq!(v("topolet_y", &[]), Some(1.5));
        assert_eq!(v("topolet_x", &[]), None);
        assert!(sample("topolet_x{a=\"b\" 1\n", "topolet_x", &[]).is_err());
    }
}
