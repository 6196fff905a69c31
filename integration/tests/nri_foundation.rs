//! topolet speaks NRI to a real containerd (or CRI-O, `TOPOLET_RUNTIME=cri-o`: every test holds
//! there as written, the runtime's own lines being the NRI adaptation's, below).
//!
//! - it registers (its own log and containerd's);
//! - Synchronize lists the pods that existed before it started;
//! - SIGKILL of topolet leaves containerd creating containers normally, without waiting on it;
//! - restarting containerd makes it reconnect by itself (same process, re-registers, re-syncs);
//! - pre-installed mode: containerd launches it from its plugin dir.

use anyhow::{ensure, Context};
use topolet_integration::kube::{PodSpec, Requirements};
use topolet_integration::logs::{self, field};
use topolet_integration::observe;
use topolet_integration::topolet::{self, KillOnDrop, LOG_TIMEOUT};
use topolet_integration::{fixture, Stack, Topolet, TopoletConfig, WithTopolet};

/// containerd's registration lines, as logrus writes them (msg quoted, inner quotes escaped);
/// v2.3 and later append " (with NRI version …)" to the first. They are the NRI adaptation's
/// (containerd/nri pkg/adaptation/plugin.go and adaptation.go), which CRI-O embeds too and logs
/// through logrus the same way (cri-o/cri-o internal/nri/nri.go): the same lines on CRI-O.
const CTRD_REGISTERED: &str = r#"registered as \"50-topolet\""#;
const CTRD_SYNCED: &str = r#"plugin \"50-topolet\" connected and synchronized"#;
/// The same for a pre-installed plugin containerd launched itself.
const CTRD_PRE_REGISTERED: &str = r#"plugin \"pre-connected:50-topolet["#;
const CTRD_PRE_SYNCED: &str = r#"pre-installed NRI plugin \"50-topolet\" synchronization success"#;

#[test]
fn registers_with_containerd() -> anyhow::Result<()> {
    let mut t = WithTopolet::start()?;
    let synced = t.topolet.wait_synchronized(1)?;
    let registered = t.topolet.logged("nri plugin registered", 0)?;
    let reg = t.stack.wait_runtime_log(CTRD_REGISTERED, 0, LOG_TIMEOUT)?;
    let conn = t.stack.wait_runtime_log(CTRD_SYNCED, 0, LOG_TIMEOUT)?;
    ensure!(
        reg.contains(r#"plugin \"external:50-topolet["#),
        "containerd should name an external plugin with its pid: {reg}"
    );
    let pid = t.topolet.pid().context("topolet not running")?;
    ensure!(
        reg.contains(&format!("[{pid}]")),
        "containerd's registration line should carry topolet's pid {pid}: {reg}"
    );
    ensure!(
        field(&synced, "pods").as_deref() == Some("0"),
        "empty stack: want pods=0 in {synced}"
    );
    let rt = t.stack.runtime().name();
    eprintln!("topolet: {registered}\ntopolet: {synced}\n{rt}: {reg}\n{rt}: {conn}");
    Ok(())
}

#[test]
fn synchronize_lists_pods_that_existed_before() -> anyhow::Result<()> {
    let stack = Stack::start()?;
    let cap = fixture::mem_capacity()?;
    let cri = stack.cri();
    // Two Kubernetes pods with a running container each, one pod without containers, and one
    // non-Kubernetes pod.
    let (bu, bu_c) = fixture::pod_for(
        &stack,
        "pre-bu",
        Requirements::burstable(250, Some(500), 64 << 20, Some(128 << 20)),
        cap,
    )?;
    let (be, be_c) = fixture::pod_for(&stack, "pre-be", Requirements::best_effort(), cap)?;
    let (empty, _) = fixture::pod_for(&stack, "pre-empty", Requirements::best_effort(), cap)?;
    let logs_dir = stack.work_dir("pod-logs")?;
    let foreign = PodSpec::foreign(
        stack.cgroup_base()?,
        &logs_dir.to_string_lossy(),
        "pre-foreign",
    );
    cri.run_pod_with(&bu, &bu_c)?;
    cri.run_pod_with(&be, &be_c)?;
    cri.run_pod(&empty)?;
    cri.run_pod(&foreign)?;

    let work = stack.work_dir("topolet")?;
    let mut topolet = Topolet::start(&work, &TopoletConfig::for_stack(&stack, &work))?;
    let synced = topolet.wait_synchronized(1)?;
    ensure!(
        field(&synced, "pods").as_deref() == Some("4")
            && field(&synced, "containers").as_deref() == Some("2"),
        "want pods=4 containers=2 in: {synced}"
    );
    for p in [&bu, &be, &empty, &foreign] {
        let want = format!("pod={}", p.pod_ref());
        let lines = topolet.lines("synchronize: pod", 0);
        ensure!(
            lines.iter().any(|l| l.split(' ').any(|w| w == want)),
            "no `synchronize: pod` line with {want}; got:\n{}",
            lines.join("\n")
        );
    }
    Ok(())
}

/// containerd's NRI request timeout for the SIGKILL test: far beyond crictl's 10 s call timeout
/// (DIR/crictl.yaml), so a CreateContainer that waited on the dead plugin fails instead of
/// passing late.
const NRI_TIMEOUT_BEYOND_CRICTL: &str = "10m";

#[test]
fn sigkill_leaves_containerd_creating_containers() -> anyhow::Result<()> {
    let stack = Stack::start_with_env(
        &topolet_integration::stack::version_under_test(),
        &[("CONTAINERD_NRI_REQUEST_TIMEOUT", NRI_TIMEOUT_BEYOND_CRICTL)],
    )?;
    let work = stack.work_dir("topolet")?;
    let config = TopoletConfig::for_stack(&stack, &work);
    let mut t = WithTopolet::start_with(stack, work, &config)?;
    let cri = t.stack.cri();
    let (p1, c1) = t.pod(
        "before-kill",
        Requirements::burstable(100, None, 32 << 20, None),
    )?;
    let first = cri.run_pod_with(&p1, &c1)?;
    // topolet took part before the kill: runc was given its adjustment.
    adjusted_by_topolet(&t.stack, &first.id)?;

    let ctrd_mark = t.stack.runtime_log_mark();
    t.topolet.kill9()?;
    let (p2, c2) = t.pod(
        "after-kill",
        Requirements::burstable(100, None, 32 << 20, None),
    )?;
    // containerd's NRI request timeout is 10 minutes here: had containerd waited on the dead
    // plugin, crictl's 10 s deadline would have failed these calls.
    let pod2 = cri.run_pod(&p2)?;
    let second = cri.create(&pod2, &p2, &c2)?;
    cri.start(&second.id)?;
    for id in [&first.id, &second.id] {
        let state = cri.state(id)?;
        ensure!(state == "CONTAINER_RUNNING", "container {id} is {state}");
    }
    let seen = t.stack.runtime_log_lines("50-topolet", ctrd_mark);
    eprintln!(
        "create after SIGKILL: {:?}; containerd lines about the plugin after the kill:\n{}",
        second.create_time,
        seen.join("\n")
    );
    Ok(())
}

#[test]
fn reconnects_after_containerd_restart() -> anyhow::Result<()> {
    let mut t = WithTopolet::start()?;
    let cri = t.stack.cri();
    let (p1, c1) = t.pod("survivor", Requirements::best_effort())?;
    cri.run_pod_with(&p1, &c1)?;
    let pid = t.topolet.pid().context("topolet not running")?;

    let mark = t.topolet.log_mark();
    let ctrd_mark = t.stack.runtime_log_mark();
    let connects = t.topolet.nri_connects()?;
    t.stack.restart_runtime()?;
    // The state: synchronized on a new connection (the old one's end was logged before).
    let synced = t.topolet.wait_synchronized(connects + 1)?;
    let closed = t
        .topolet
        .logged("nri connection closed by runtime", mark)
        .or_else(|_| t.topolet.logged("nri reconnecting", mark))?;
    t.topolet.logged("nri plugin registered", mark)?;
    t.stack
        .wait_runtime_log(CTRD_SYNCED, ctrd_mark, LOG_TIMEOUT)?;
    ensure!(t.topolet.is_running(), "topolet exited");
    ensure!(
        t.topolet.pid() == Some(pid),
        "topolet was restarted (pid {pid} → {:?})",
        t.topolet.pid()
    );
    ensure!(
        field(&synced, "pods").as_deref() == Some("1")
            && field(&synced, "containers").as_deref() == Some("1"),
        "re-synchronize should list the surviving pod and container: {synced}"
    );
    // And it still handles events on the new connection.
    let (p2, c2) = t.pod("after-restart", Requirements::best_effort())?;
    let late = cri.run_pod_with(&p2, &c2)?;
    // Its reply reached containerd on the new connection: runc was given its adjustment.
    adjusted_by_topolet(&t.stack, &late.id)?;
    eprintln!("topolet: {closed}\ntopolet: {synced}");
    Ok(())
}

#[test]
fn preinstalled_mode_is_launched_by_containerd() -> anyhow::Result<()> {
    let stack = Stack::start()?;
    let work = stack.work_dir("topolet")?;
    let config = TopoletConfig::for_stack(&stack, &work);
    let config_path = work.join("preinstalled.toml");
    let log_path = work.join("preinstalled.log");
    let _reap = KillOnDrop(config_path.to_string_lossy().into_owned());
    let wrapper = topolet::install_preinstalled(&stack, &config, &config_path, &log_path)?;
    let ctrd_mark = stack.runtime_log_mark();
    stack.restart_runtime()?;

    // The state: its status says synchronized; the lines were written before.
    topolet::wait_nri_synchronized_at(&config.admin_socket)?;
    let reg = logged(&log_path, "nri plugin registered", 0)?;
    logged(&log_path, " synchronized", 0)?;
    let ctrd_reg = stack.wait_runtime_log(CTRD_PRE_REGISTERED, ctrd_mark, LOG_TIMEOUT)?;
    let ctrd = stack.wait_runtime_log(CTRD_PRE_SYNCED, ctrd_mark, LOG_TIMEOUT)?;
    let launched = topolet::pids_with_cmdline(&config_path.to_string_lossy());
    ensure!(
        launched.len() == 1,
        "want one topolet launched by containerd, found pids {launched:?}"
    );
    // containerd made the socketpair itself, so the peer-credential pid it logs for a
    // pre-connected plugin is its own; the plugin process is its child.
    let ctrd_pid = stack.runtime_pid()?;
    ensure!(
        ctrd_reg.contains(&format!("[{ctrd_pid}]")),
        "containerd (pid {ctrd_pid}) should log its own pid for a pre-connected plugin: {ctrd_reg}"
    );
    let ppid = parent_pid(launched[0])?;
    ensure!(
        ppid == ctrd_pid,
        "topolet pid {} has parent {ppid}, not containerd {ctrd_pid}",
        launched[0]
    );
    let cap = fixture::mem_capacity()?;
    let (p, c) = fixture::pod_for(&stack, "pre-installed", Requirements::best_effort(), cap)?;
    let created = stack.cri().run_pod_with(&p, &c)?;
    adjusted_by_topolet(&stack, &created.id)?;
    eprintln!(
        "wrapper {}: topolet: {reg}\ncontainerd: {ctrd_reg}\ncontainerd: {ctrd}\ncontainerd lines:\n{}",
        wrapper.display(),
        stack.runtime_log_lines("50-topolet", ctrd_mark).join("\n")
    );
    Ok(())
}

/// pids_limit of the test config (`TopoletConfig::for_stack`). The kubelet sets no container
/// pids limit (it limits pods, through their cgroup), so a bundle that carries this one got it
/// from topolet's CreateContainer adjustment.
const PIDS_LIMIT: i64 = 1024;

/// Container `id` was created with topolet's adjustment: its bundle `config.json` (what runc
/// was given) carries the config's pids limit. The effect itself, not topolet's `container
/// placed` line, which is written before the reply reaches containerd.
fn adjusted_by_topolet(stack: &Stack, id: &str) -> anyhow::Result<()> {
    let b = observe::bundle_resources(&observe::bundle_spec(stack, id)?)?;
    ensure!(
        b.pids_limit == Some(PIDS_LIMIT),
        "container {id} was created without topolet's adjustment (bundle pids limit {:?}, want \
         {PIDS_LIMIT}): {b:?}",
        b.pids_limit
    );
    Ok(())
}

/// The first line after byte `after` of the log at `path` containing `pattern`, which must
/// already be there (written before a state the test waited on).
fn logged(path: &std::path::Path, pattern: &str, after: usize) -> anyhow::Result<String> {
    logs::find_line(&logs::read_lossy(path), after, pattern).with_context(|| {
        format!(
            "no line {pattern:?} in {}:\n{}",
            path.display(),
            logs::tail(&logs::read_lossy(path), 30)
        )
    })
}

/// PPid of /proc/<pid>/status.
fn parent_pid(pid: i32) -> anyhow::Result<i32> {
    let p = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("{p} has no PPid"))
}

/// One topolet per node: a second `topolet run` with the same state directory, beside a running
/// one, refuses to start, names the running one's pid, and leaves it serving; once the first is
/// gone, the node is free again.
#[test]
fn a_second_topolet_on_the_node_refuses_to_start_naming_the_first() -> anyhow::Result<()> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut t = WithTopolet::start()?;
    t.topolet.wait_synchronized(1)?;
    let first = t.topolet.pid().context("topolet not running")?;
    let log = t.work.join("second.log");
    let mut second = Command::new(topolet::binary()?)
        .arg("run")
        .arg("--config")
        .arg(t.topolet.config_path())
        .arg("--log-file")
        .arg(&log)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawning a second topolet")?;
    let status = topolet_integration::wait::until(
        "the second topolet to exit",
        std::time::Duration::from_secs(30),
        || second.try_wait().context("waiting for the second topolet"),
    );
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            let _ = second.kill();
            let _ = second.wait();
            return Err(e.context("a second topolet kept running beside the first"));
        }
    };
    let mut err = String::new();
    if let Some(mut e) = second.stderr.take() {
        e.read_to_string(&mut err)?;
    }
    let said = format!("{err}{}", logs::read_lossy(&log));
    ensure!(
        !status.success(),
        "the second topolet exited {status}: {said}"
    );
    ensure!(
        said.contains(&format!("held by another topolet (pid {first}")),
        "the refusal names the running topolet (pid {first}): {said}"
    );
    // The first serves on: a container is still placed.
    ensure!(t.topolet.pid() == Some(first), "the first topolet is gone");
    t.topolet.wait_synchronized(1)?;
    // Once it is gone, the node is free: a new topolet takes it (the harness's restart).
    t.topolet.restart()?;
    t.topolet.wait_synchronized(1)?;
    Ok(())
}
