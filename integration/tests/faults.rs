//! Faults against the real stack. Each test starts its own containerd and
//! topolet and, after each fault, checks the books (`topolet_integration::books`): CPU 1 (the only
//! exclusive CPU: CPU 0 is reserved) is held by at most one running container, every other
//! running container is exactly on the shared pool, every container's tasks run where its cgroup
//! says, and — once topolet is back — its state file and `topolet status` say the same. The
//! plugin must recover by itself or refuse clearly.
//!
//! - `sigkill_at_random_points_during_parallel_creates`: 20 trials; each kills topolet -9 at a
//!   random point of a burst of parallel mixed-QoS creates (a random delay, or after a random
//!   number of placements), restarts it and checks the books; then removes the trial's pods and
//!   checks CPU 1 came back. Removing everything between trials keeps each trial's kill point the
//!   only variable (a failure names one trial and replays with its seed) and exercises release
//!   after every restart; keeping containers across restarts is covered by the containerd-restart
//!   and state-file tests. The seed is printed; replay with `TOPOLET_FAULT_SEED=<seed>`.
//! - `containerd_restart_mid_burst`: containerd restarts while creates are in flight; topolet
//!   reconnects by itself. The burst's creates may fail (they are in flight at the restart); the
//!   pod made after it may hit containerd's own failure of the kill (`runtime_internal`: a
//!   snapshot id reused, no NRI call involved), and is then made again under a new name, which
//!   the test prints and counts. Every check of topolet stays as strict.
//! - `corrupt_state_file_is_quarantined_and_rebuilt`: truncated, bit-flipped, garbage, empty and
//!   wrong-version files while topolet is stopped.
//! - `unreadable_sysfs_refuses_to_start_and_containerd_carries_on`: a garbled, a missing and a
//!   directory-replaced-by-a-file sysfs entry: exit 1 naming the path; containerd keeps creating.
//! - `full_disk_keeps_serving_and_the_state_catches_up`: the state dir on a full tmpfs.
//! - `a_frozen_shim_never_parks_a_breach`: a shared container's cpuset is widened onto the
//!   exclusive CPU while its shim is frozen, so every update topolet sends it stalls; topolet
//!   reports and counts the breach, keeps retrying, and ends it once the shim thaws, without a
//!   reconnect.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use topolet_integration::books::{self, Balance, TopoletSide, Tracked};
use topolet_integration::churn::{self, Outcome, Rng};
use topolet_integration::freeze::{shim_of, Frozen};
use topolet_integration::kube::Requirements;
use topolet_integration::logs::{field, tail};
use topolet_integration::runtime_internal::{self, Retries};
use topolet_integration::topolet::{binary, metric, LOG_TIMEOUT};
use topolet_integration::{observe, wait, Stack, TopoletConfig, WithTopolet};

const MIB: u64 = 1 << 20;
/// How long the books may take to balance after a fault: a guard while waiting on state, not a
/// bound on topolet (updates wait for a lull of up to 3 s, the drift check for 5 s, and a loaded
/// machine stretches both the lull and the runtime's work).
const SETTLE: Duration = Duration::from_secs(60);
/// SIGKILL trials per run: 20, so that a kill lands in each phase of an event (read, decide,
/// persist, reply) several times.
const KILL_TRIALS: usize = 20;
/// Pods per burst.
const BURST: usize = 6;

/// Checks the books until they balance (or `SETTLE` passes), with topolet's side.
fn settle(t: &WithTopolet, tracked: &[Tracked]) -> anyhow::Result<Balance> {
    let (state, admin) = t.books_side();
    let cri = t.stack.cri();
    wait::until("the books to balance", SETTLE, || {
        books::check(
            &cri,
            tracked,
            Some(TopoletSide {
                state_file: &state,
                admin_socket: &admin,
            }),
        )
        .map(Some)
    })
}

/// Every pod removed, then: nothing runs, CPU 1 is free, and topolet's state and status agree.
fn remove_all_and_check(t: &WithTopolet) -> anyhow::Result<()> {
    churn::remove_all_pods(&t.stack.cri())?;
    let b = settle(t, &[]).context("after removing every pod")?;
    ensure!(b.cpusets.is_empty(), "containers still run: {b:?}");
    Ok(())
}

fn tracked_of(outcomes: &[Outcome]) -> Vec<Tracked> {
    outcomes.iter().filter_map(Outcome::tracked).collect()
}

/// Where in a burst topolet is killed.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// This long after the burst started.
    Delay(Duration),
    /// Once topolet logged this many placements of the burst.
    Placements(usize),
}

#[test]
fn sigkill_at_random_points_during_parallel_creates() -> anyhow::Result<()> {
    let (mut rng, seed) = Rng::from_env_or_clock()?;
    eprintln!("seed {seed} (replay with TOPOLET_FAULT_SEED={seed})");
    let mut t = WithTopolet::start()?;
    let started = Instant::now();
    let mut after_kill_total = 0;
    for trial in 0..KILL_TRIALS {
        let burst = churn::mixed_burst(&t, &format!("t{trial}"), BURST)?;
        let point = if rng.below(2) == 0 {
            KillPoint::Delay(Duration::from_millis(rng.below(1500)))
        } else {
            KillPoint::Placements(rng.below(BURST as u64 / 2 + 1) as usize)
        };
        let mark = t.topolet.log_mark();
        let (admitted_before, _) = t.topolet.create_decisions()?;
        let stack = &t.stack;
        let topolet = &mut t.topolet;
        let (outcomes, kill_time) = std::thread::scope(|s| -> anyhow::Result<_> {
            let begun = Instant::now();
            let handles = churn::spawn_burst(s, stack, &burst);
            let waited = match point {
                KillPoint::Delay(d) => {
                    std::thread::sleep(d.saturating_sub(begun.elapsed()));
                    Ok(())
                }
                KillPoint::Placements(n) => {
                    wait::until_true(&format!("{n} placements"), Duration::from_secs(30), || {
                        let (admitted, _) = topolet.create_decisions()?;
                        Ok(admitted >= admitted_before + n as u64)
                    })
                }
            };
            topolet.kill9()?;
            let kill_time = Instant::now();
            waited.with_context(|| format!("trial {trial} ({point:?})"))?;
            topolet.restart()?;
            Ok((churn::join_burst(handles)?, kill_time))
        })?;
        let after_kill = outcomes.iter().filter(|o| o.finished > kill_time).count();
        after_kill_total += after_kill;
        t.topolet.wait_nri_synchronized(1)?;
        let log = t.topolet.log();
        let tracked = tracked_of(&outcomes);
        let balance = settle(&t, &tracked).with_context(|| {
            let summaries: Vec<String> = outcomes.iter().map(Outcome::summary).collect();
            format!(
                "seed {seed}, trial {trial}, killed at {point:?}\ncreates:\n{}\ntopolet log since the trial:\n{}",
                summaries.join("\n"),
                tail(log.get(mark..).unwrap_or(&log), 60)
            )
        })?;
        let failed = outcomes.iter().filter(|o| o.error.is_some()).count();
        eprintln!(
            "trial {trial:2}: kill at {point:?}; {after_kill} of {BURST} creates returned after the kill, \
             {failed} failed; holder {:?}, {} running",
            balance.holder,
            balance.cpusets.len()
        );
        remove_all_and_check(&t).with_context(|| format!("seed {seed}, trial {trial}"))?;
    }
    ensure!(
        after_kill_total > 0,
        "no create of any trial was in flight at a kill: the test did not test anything"
    );
    eprintln!("{KILL_TRIALS} SIGKILL trials in {:.1?}", started.elapsed());
    Ok(())
}

#[test]
fn containerd_restart_mid_burst() -> anyhow::Result<()> {
    let mut t = WithTopolet::start()?;
    // Residents that must keep their cpusets across the restart.
    let residents = churn::mixed_burst(&t, "res", 3)?;
    let cri = t.stack.cri();
    let resident_outcomes: Vec<Outcome> =
        residents.iter().map(|p| churn::run_one(&cri, p)).collect();
    for o in &resident_outcomes {
        ensure!(o.error.is_none(), "resident {}", o.summary());
    }
    let before = settle(&t, &tracked_of(&resident_outcomes))?;
    ensure!(
        before.holder.is_some(),
        "the Guaranteed resident holds CPU 1: {before:?}"
    );

    let burst = churn::mixed_burst(&t, "burst", 8)?;
    let connects = t.topolet.nri_connects()?;
    let mark = t.topolet.log_mark();
    let (admitted_before, refused_before) = t.topolet.create_decisions()?;
    let decided_before = admitted_before + refused_before;
    let cd_mark = t.stack.runtime_log_mark();
    let stack = &t.stack;
    let topolet = &t.topolet;
    let outcomes = std::thread::scope(|s| -> anyhow::Result<_> {
        let handles = churn::spawn_burst(s, stack, &burst);
        let placed = wait::until_true("2 placements", Duration::from_secs(30), || {
            let (admitted, refused) = topolet.create_decisions()?;
            Ok(admitted + refused >= decided_before + 2)
        });
        let restarted = stack.restart_runtime();
        let outcomes = churn::join_burst(handles)?;
        placed?;
        restarted?;
        Ok(outcomes)
    })?;
    // topolet reconnects by itself.
    t.topolet.wait_nri_synchronized(connects + 1)?;
    ensure!(
        t.topolet.is_running(),
        "topolet exited after containerd's restart:\n{}",
        tail(&t.topolet.log(), 30)
    );
    let reconnects = t.topolet.lines(" synchronized", mark).len();
    let mut tracked = tracked_of(&resident_outcomes);
    tracked.extend(tracked_of(&outcomes));
    let after = settle(&t, &tracked).with_context(|| {
        let summaries: Vec<String> = outcomes.iter().map(Outcome::summary).collect();
        format!("creates:\n{}", summaries.join("\n"))
    })?;
    ensure!(
        after.holder == before.holder,
        "CPU 1 changed hands across containerd's restart: before {before:?}, after {after:?}"
    );
    let summaries: Vec<String> = outcomes.iter().map(Outcome::summary).collect();
    eprintln!(
        "containerd restarted mid-burst; topolet synchronized {reconnects} time(s) since; creates:\n  {}\n\
         containerd log lines about the plugin: {}",
        summaries.join("\n  "),
        t.stack.runtime_log_lines("topolet", cd_mark).len()
    );
    // The plugin serves new containers after the reconnect. containerd's own failure after its
    // kill (a snapshot id reused: runtime_internal::PATTERNS, no NRI call involved) makes the
    // pod again under a new name, reported and counted; any other error fails the test.
    let mut retries = Retries::default();
    let (name, p, c, late) = runtime_internal::retrying("after-restart", &mut retries, |n| {
        let name = runtime_internal::attempt_name("after-restart", n);
        let (p, c) = t.pod(&name, Requirements::best_effort())?;
        let late = cri.run_pod_with(&p, &c)?;
        Ok((name, p, c, late))
    })?;
    retries.report();
    // The effect, not topolet's log line (written before its reply reached containerd): runc
    // was given topolet's adjustment, the config's pids limit (the kubelet sets none).
    let bundle = observe::bundle_resources(&observe::bundle_spec(&t.stack, &late.id)?)?;
    ensure!(
        bundle.pids_limit == t.config.pids_limit,
        "the container created after the reconnect has no adjustment from topolet (bundle pids \
         limit {:?}, config {:?})",
        bundle.pids_limit,
        t.config.pids_limit
    );
    tracked.push(Tracked {
        name,
        qos: c.qos(),
        pod_uid: p.uid.clone(),
        container: c.name.clone(),
        created: late,
    });
    settle(&t, &tracked)?;
    remove_all_and_check(&t)
}

/// One way to spoil the state file; returns what the log must say about it.
fn spoil(kind: &str, path: &Path) -> anyhow::Result<&'static str> {
    let good = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let nl = good
        .iter()
        .position(|&b| b == b'\n')
        .context("state file has no header line")?;
    let (bytes, says): (Vec<u8>, &str) = match kind {
        "truncated" => (good[..good.len() * 2 / 3].to_vec(), "truncated"),
        "bit-flip" => {
            let mut b = good.clone();
            let i = nl + 1 + (b.len() - nl - 1) / 2;
            b[i] ^= 0x04;
            (b, "checksum mismatch")
        }
        "garbage" => (
            (0..600u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect(),
            "not a topolet state file",
        ),
        "empty" => (Vec::new(), "file is empty"),
        "wrong-version" => {
            // Whatever version this build writes, the header is rewritten to
            // say one it does not read (the format number moved 1 -> 2 once
            // already; the test must not hard-code it).
            let mut header: serde_json::Value = serde_json::from_slice(&good[..nl])
                .context("the state file's header is not JSON")?;
            let shown = header.to_string();
            let slot = header
                .get_mut("version")
                .with_context(|| format!("no version in header {shown}"))?;
            ensure!(slot.is_u64(), "version in header is not a number: {shown}");
            *slot = serde_json::json!(77);
            let mut b = serde_json::to_vec(&header)?;
            b.extend_from_slice(&good[nl..]);
            (b, "state file version 77 is not supported")
        }
        other => bail!("unknown spoil kind {other}"),
    };
    std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))?;
    Ok(says)
}

#[test]
fn corrupt_state_file_is_quarantined_and_rebuilt() -> anyhow::Result<()> {
    let mut t = WithTopolet::start()?;
    let cri = t.stack.cri();
    let pods = churn::mixed_burst(&t, "keep", 3)?;
    let outcomes: Vec<Outcome> = pods.iter().map(|p| churn::run_one(&cri, p)).collect();
    for o in &outcomes {
        ensure!(o.error.is_none(), "{}", o.summary());
    }
    let tracked = tracked_of(&outcomes);
    let before = settle(&t, &tracked)?;
    ensure!(
        before.holder.is_some(),
        "the Guaranteed pod holds CPU 1: {before:?}"
    );
    let state = t.state_file();
    let bad = PathBuf::from(format!("{}.bad", state.display()));
    for kind in ["truncated", "bit-flip", "garbage", "empty", "wrong-version"] {
        // SIGKILL, not SIGTERM: a clean exit would rewrite the file after we spoiled it.
        t.topolet.kill9()?;
        let says = spoil(kind, &state)?;
        let spoiled = std::fs::read(&state)?;
        let mark = t.topolet.log_mark();
        t.topolet.restart()?;
        t.topolet.wait_nri_synchronized(1)?;
        // Read (and logged) at start-up, before topolet dialled containerd.
        let line = t
            .topolet
            .logged("state file unusable", mark)
            .with_context(|| format!("{kind} state file"))?;
        ensure!(
            line.contains(&state.display().to_string()) && line.contains(says),
            "{kind}: the log line does not name the file and the problem ({says:?}): {line}"
        );
        let aside = t.topolet.logged("kept the unusable state file", mark)?;
        ensure!(
            field(&aside, "moved_to").as_deref() == Some(bad.to_string_lossy().as_ref()),
            "{kind}: moved to where? {aside}"
        );
        ensure!(
            std::fs::read(&bad)? == spoiled,
            "{kind}: {} does not hold the spoiled file",
            bad.display()
        );
        // Rebuilt from Synchronize: every container keeps its cpuset, the new file is valid.
        let after = settle(&t, &tracked).with_context(|| format!("after a {kind} state file"))?;
        ensure!(
            after == before,
            "{kind}: cpusets changed:\n before {before:?}\n after  {after:?}"
        );
        eprintln!(
            "{kind}: quarantined ({line}); books balance, holder {:?}",
            after.holder
        );
    }
    remove_all_and_check(&t)
}

/// A copy of this machine's captured sysfs tree (the fixture `ci-host-captured`).
fn sysfs_copy(dest: &Path) -> anyhow::Result<()> {
    let src = topolet_integration::paths::repo_root()
        .join("plugin/tests/fixtures/sysfs/ci-host-captured");
    let out = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(dest)
        .output()
        .context("running cp -a")?;
    ensure!(
        out.status.success(),
        "cp -a {} {}: {}",
        src.display(),
        dest.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Runs `topolet run --sysfs-root root` and waits for it to exit (at most 20 s).
fn run_with_sysfs(config: &Path, root: &Path, log: &Path) -> anyhow::Result<(Option<i32>, String)> {
    let mut child = Command::new(binary()?)
        .arg("run")
        .arg("--config")
        .arg(config)
        .arg("--sysfs-root")
        .arg(root)
        .arg("--log-file")
        .arg(log)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawning topolet run")?;
    let status = wait::until("topolet to exit", Duration::from_secs(20), || {
        child.try_wait().context("waiting for topolet")
    });
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e.context("topolet kept running on a broken sysfs tree"));
        }
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err)?;
    }
    Ok((status.code(), err))
}

/// Breaks one path of a sysfs copy.
type Breaker = fn(&Path) -> std::io::Result<()>;

#[test]
fn unreadable_sysfs_refuses_to_start_and_containerd_carries_on() -> anyhow::Result<()> {
    let stack = Stack::start()?;
    let work = stack.work_dir("topolet")?;
    let config = TopoletConfig::for_stack(&stack, &work);
    let config_path = work.join("topolet.toml");
    config.write(&config_path)?;
    let cri = stack.cri();
    let cap = topolet_integration::fixture::mem_capacity()?;

    // Control: the intact copy is a valid machine for this config.
    let intact = work.join("sysfs-intact");
    sysfs_copy(&intact)?;
    let check = Command::new(binary()?)
        .args(["config", "check"])
        .arg(&config_path)
        .arg("--sysfs-root")
        .arg(&intact)
        .output()?;
    ensure!(
        check.status.success(),
        "the intact sysfs copy fails config check: {}",
        String::from_utf8_lossy(&check.stderr)
    );

    let cases: [(&str, &str, Breaker); 3] = [
        ("garbled", "devices/system/cpu/online", |p| {
            std::fs::write(p, "0-x\n")
        }),
        ("missing", "devices/system/cpu/online", |p| {
            std::fs::remove_file(p)
        }),
        ("dir-is-a-file", "devices/system/cpu/cpu1/topology", |p| {
            std::fs::remove_dir_all(p)?;
            std::fs::write(p, "not a directory\n")
        }),
    ];
    for (i, (kind, rel, breakit)) in cases.iter().enumerate() {
        let root = work.join(format!("sysfs-{kind}"));
        sysfs_copy(&root)?;
        let target = root.join(rel);
        breakit(&target).with_context(|| format!("breaking {}", target.display()))?;
        let log = work.join(format!("topolet-{kind}.log"));
        let cd_mark = stack.runtime_log_mark();
        let (code, stderr) = run_with_sysfs(&config_path, &root, &log)?;
        ensure!(
            code == Some(1),
            "{kind}: topolet exited with {code:?}, want 1 (docs/src/exit-codes.md: the command failed); stderr: {stderr}"
        );
        let named = root.join(if *kind == "dir-is-a-file" {
            "devices/system/cpu/cpu1/topology"
        } else {
            rel
        });
        ensure!(
            stderr.contains(&named.display().to_string())
                || stderr.contains(&root.display().to_string()),
            "{kind}: the error does not name {}: {stderr}",
            named.display()
        );
        ensure!(
            stderr.contains("reading the machine from"),
            "{kind}: the error does not say what failed: {stderr}"
        );
        let plugin_lines: Vec<String> = stack
            .runtime_log_lines("topolet", cd_mark)
            .into_iter()
            .filter(|l| !l.contains("topolet-it"))
            .collect();
        ensure!(
            plugin_lines.is_empty(),
            "{kind}: containerd saw topolet although it refused to start: {plugin_lines:?}"
        );
        // containerd keeps creating containers normally, with the kubelet's values.
        for (name, req) in [
            (format!("g-{i}"), Requirements::guaranteed(1000, 64 * MIB)),
            (format!("be-{i}"), Requirements::best_effort()),
        ] {
            let (p, mut c) = topolet_integration::fixture::pod_for(&stack, &name, req, cap)?;
            if stack.runtime().is_crio() {
                // No topolet, and CRI-O clamps nothing (Stack::oom_floor): a runtime without
                // CAP_SYS_RESOURCE cannot start the kubelet's -997; the test sends the floor.
                c.resources.oom_score_adj = c.resources.oom_score_adj.max(stack.oom_floor()?);
            }
            let created = cri.run_pod_with(&p, &c)?;
            ensure!(
                cri.state(&created.id)? == "CONTAINER_RUNNING",
                "{kind}: {name} not running"
            );
            let cpus = topolet_integration::observe::cgroup_cpuset(&created)?;
            ensure!(
                cpus == books::POOL_FULL,
                "{kind}: {name} runs on {cpus}; without topolet containerd gives every CPU"
            );
        }
        eprintln!("{kind} {rel}: exit {code:?}: {}", stderr.trim());
    }
    Ok(())
}

/// A tmpfs of `size` mounted on a directory; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> anyhow::Result<Tmpfs> {
        std::fs::create_dir_all(dir)?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output()
            .context("running mount")?;
        ensure!(
            out.status.success(),
            "mount -t tmpfs {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // The stack's own clean-up may have unmounted it already: quiet either way.
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

/// Fills the filesystem of `dir` with `dir/filler` until a write fails with ENOSPC.
fn fill(dir: &Path) -> anyhow::Result<u64> {
    let p = dir.join("filler");
    let mut f = std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?;
    let chunk = vec![0xa5u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => return Err(e).with_context(|| format!("filling {}", p.display())),
        }
    }
    Ok(total)
}

/// One HTTP GET of `/metrics`; returns the body.
fn metrics_text(addr: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (_, body) = raw.split_once("\r\n\r\n").context("no HTTP header end")?;
    Ok(body.to_string())
}

fn state_write_errors(addr: &str) -> anyhow::Result<f64> {
    let text = metrics_text(addr)?;
    Ok(text
        .lines()
        .find(|l| l.starts_with("topolet_state_file_writes_total{result=\"error\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0))
}

/// Decided behaviour on a full disk: topolet keeps placing containers from memory (the state
/// file only breaks ties at restart: assignments come back from what containers run on), logs
/// the failed write once as an error, counts it in `topolet_state_file_writes_total{result=
/// "error"}`, and retries the write every second; once there is space the file catches up
/// without any further event. Refusing exclusive grants it cannot persist would take
/// containers down for a file that is not needed for correctness.
#[test]
fn full_disk_keeps_serving_and_the_state_catches_up() -> anyhow::Result<()> {
    let stack = Stack::start()?;
    let work = stack.work_dir("topolet")?;
    let config = TopoletConfig::for_stack(&stack, &work);
    let _tmpfs = Tmpfs::mount(&config.state_dir, "256k")?;
    let mut t = WithTopolet::start_with(stack, work, &config)?;
    let addr = t.topolet.wait_metrics_address()?;
    let state = t.state_file();
    wait::until_true("the first state write", LOG_TIMEOUT, || Ok(state.exists()))?;

    let filled = fill(&config.state_dir)?;
    let errors_before = state_write_errors(&addr)?;
    let mark = t.topolet.log_mark();
    let cri = t.stack.cri();
    let pods = churn::mixed_burst(&t, "full", 3)?;
    let outcomes: Vec<Outcome> = pods.iter().map(|p| churn::run_one(&cri, p)).collect();
    for o in &outcomes {
        ensure!(o.error.is_none(), "on a full disk: {}", o.summary());
    }
    let tracked = tracked_of(&outcomes);
    // The failed write is counted after its error line is logged; the line names the directory.
    wait::until_true(
        "topolet_state_file_writes_total{result=\"error\"} to grow",
        LOG_TIMEOUT,
        || Ok(state_write_errors(&addr)? > errors_before),
    )?;
    let failed = t.topolet.logged("state file not written", mark)?;
    ensure!(
        failed.contains(&state.parent().unwrap_or(&state).display().to_string()),
        "the error does not name the state dir: {failed}"
    );
    // The containers are placed (CPU 1 to the Guaranteed one) though nothing could be saved.
    let cgroups_only = wait::until("the books (cgroups) to balance", SETTLE, || {
        books::check(&cri, &tracked, None).map(Some)
    })?;
    ensure!(
        cgroups_only.holder.is_some(),
        "nobody holds CPU 1: {cgroups_only:?}"
    );
    let stale = books::state_file_exclusive(&state)?;
    ensure!(
        stale.is_empty(),
        "the state file changed on a full disk: {stale:?}"
    );
    ensure!(t.topolet.is_running(), "topolet exited on a full disk");

    // Free the space: the state catches up by itself (no new event): the books, which wait
    // for the state file to hold the exclusive grant the cgroups show, balance.
    std::fs::remove_file(config.state_dir.join("filler"))?;
    let after = settle(&t, &tracked)?;
    ensure!(
        after == cgroups_only,
        "cpusets changed: {cgroups_only:?} -> {after:?}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&config.state_dir)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // The state file and the node lock (one topolet per node) belong there.
        .filter(|n| n != "assignments.json" && n != topolet::state::lock::LOCK_FILE)
        .collect();
    ensure!(
        leftovers.is_empty(),
        "litter in the state dir: {leftovers:?}"
    );
    eprintln!(
        "filled {filled} bytes; {} failed writes counted; state caught up: {after:?}",
        state_write_errors(&addr)?
    );
    remove_all_and_check(&t)
}

/// A runtime that cannot apply updates for a while (the shim of a shared container frozen, as a
/// very slow node's runtime times out) never parks a breach: while the container's process may
/// run on the exclusive CPU, topolet reports it (status `breaches`, the breach gauge) and keeps
/// resending its target with back-off; once the shim answers again the breach ends by topolet's
/// own update, with no reconnect (no Synchronize) in between, and its seconds are counted.
#[test]
fn a_frozen_shim_never_parks_a_breach() -> anyhow::Result<()> {
    if topolet_integration::stack::skipped_on_crio(
        "a_frozen_shim_never_parks_a_breach",
        "CRI-O applies an update by running `runc update` itself (cri-o/cri-o \
         internal/oci/runtime_oci.go, runtimeOCI.UpdateContainer), not through the container's \
         monitor: a frozen conmon stalls no update, so this fault has no CRI-O form here",
    ) {
        return Ok(());
    }
    let mut t = WithTopolet::start_with_fast_drift_check()?;
    let cri = t.stack.cri();
    let (gp, gc) = t.pod("g-holder", Requirements::guaranteed(1000, 128 * MIB))?;
    let g = cri.run_pod_with(&gp, &gc)?;
    let (bp, bc) = t.pod(
        "bu-frozen",
        Requirements::burstable(100, Some(500), 32 * MIB, Some(64 * MIB)),
    )?;
    let b = cri.run_pod_with(&bp, &bc)?;
    let bpid = cri.pid(&b.id)?;
    wait::until_true("g-holder on 1, bu-frozen on 0", SETTLE, || {
        Ok(observe::cgroup_cpuset(&g)? == "1"
            && observe::cgroup_cpuset(&b)? == "0"
            && observe::cpus_allowed_list(bpid)? == "0")
    })?;
    let addr = t.topolet.wait_metrics_address()?;
    let connects = t.topolet.nri_connects()?;
    let breach_seconds = || metric(&addr, "topolet_exclusive_breach_seconds_total", &[]);
    let breaching = || metric(&addr, "topolet_exclusive_breach_containers", &[]);
    ensure!(breaching()? == 0.0, "a breach before the fault");

    let frozen = Frozen::freeze(shim_of(bpid)?)?;
    // Someone widens the container's cpuset behind topolet's back: its process may now run on
    // g-holder's CPU, and every update that would put it back waits on the frozen shim.
    let cpus_file = observe::cgroup_dir("cpuset", &b.cgroup_parent, &b.id).join("cpuset.cpus");
    std::fs::write(&cpus_file, "0-1")
        .with_context(|| format!("writing {}", cpus_file.display()))?;
    // topolet sees it, says so, and the kernel agrees it is real; it lasts while the shim is
    // frozen (long enough for several failed sends: the back-off starts at 0.5 s).
    wait::until_true("the breach reported for 8 s", SETTLE, || {
        let reported = t.topolet.breaches()?;
        let real = observe::cpus_allowed_list(bpid)? == "0-1";
        Ok(real
            && breaching()? == 1.0
            && reported
                .iter()
                .any(|(id, cpus, seconds)| id == &b.id && cpus == "1" && *seconds >= 8.0))
    })
    .with_context(|| {
        format!(
            "breaches {:?}, gauge {:?}, bu-frozen Cpus_allowed_list {:?}",
            t.topolet.breaches().ok(),
            breaching().ok(),
            observe::cpus_allowed_list(bpid).ok()
        )
    })?;
    let during = breach_seconds()?;
    drop(frozen);
    // Thawed: the next retry lands; the container is back on the shared pool by topolet's
    // update (no reconnect), and the breach is over and was counted.
    wait::until_true("the breach ended by topolet's retry", SETTLE, || {
        Ok(observe::cgroup_cpuset(&b)? == "0"
            && observe::cpus_allowed_list(bpid)? == "0"
            && breaching()? == 0.0
            && t.topolet.breaches()?.is_empty())
    })
    .with_context(|| {
        format!(
            "breaches {:?}, gauge {:?}, bu-frozen cgroup {:?} Cpus_allowed_list {:?}",
            t.topolet.breaches().ok(),
            breaching().ok(),
            observe::cgroup_cpuset(&b).ok(),
            observe::cpus_allowed_list(bpid).ok()
        )
    })?;
    // The counter follows the same ledger as the status: it grew while the breach was open,
    // and once it closed it holds at least the 8 s the status reported before the thaw.
    ensure!(
        during > 0.0 && breach_seconds()? >= 8.0,
        "breach seconds counted: {during} while frozen, {:?} after",
        breach_seconds().ok()
    );
    ensure!(
        t.topolet.nri_connects()? == connects,
        "topolet reconnected ({} connects, {connects} before): the breach was ended by a \
         Synchronize, not by topolet's retries",
        t.topolet.nri_connects()?
    );
    ensure!(
        observe::cgroup_cpuset(&g)? == "1",
        "g-holder left CPU 1: {}",
        observe::cgroup_cpuset(&g)?
    );
    Ok(())
}
