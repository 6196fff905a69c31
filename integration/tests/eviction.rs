//! Node-pressure eviction on real containerd.
//!
//! Thresholds are set at test time relative to what the node has free right now (this host is
//! shared with builds, so the margins are wide): a `pid.available` hard threshold a few hundred
//! tasks under the current free count, crossed by a BestEffort pod forking `sleep`s; a
//! `memory.available` hard threshold 2 GiB under the current available memory, crossed by a
//! BestEffort pod holding 3 GiB (two busybox `dd bs=1500M` blocked writing into a pipe nobody
//! reads, so their buffers stay resident). A Guaranteed sleeper runs beside it and must be
//! untouched. `dry-run` decides and logs but touches nothing.
//!
//! Disk pressure on the image filesystem: the stack's containerd root is a tmpfs of its own
//! (`CONTAINERD_ROOT_SIZE_MB`), so its free space moves only with what the test does, and an
//! `imagefs.available` hard threshold is set under what it has free. Unused filler images
//! imported over it are removed by node-level reclaim and no pod is evicted (the pods' images,
//! the pinned sandbox image and the image of an exited container of a live pod are kept); a
//! BestEffort pod filling its own writable layer cannot be relieved that way and is evicted,
//! and its dead container is then removed by the next reclaim (containerd frees the layer
//! when its garbage collector runs: that reclaim holds eviction for an interval).
//!
//! Reaction time (threshold crossed, as this test observes the signal by polling every 50 ms,
//! until the evicted container's cgroup has no process) is printed; the loop's own CPU cost is
//! printed from topolet's `eviction loop` stats line. No timing assertions.
//!
//! With `TOPOLET_BENCH_OUT=<file>` (hack/bench.sh), the two evicting tests also append one JSON
//! line each with their figures: the reaction time against the interval + grace period the config
//! implies, and the loop's own CPU per interval (topolet's cumulative `eviction loop` stats lines,
//! which it logs every 10th iteration: the idle average over the first ≥ 11 intervals, before the
//! pods start, then the average over the window from there to the first stats line after the
//! eviction — pod start-up, pressure and one eviction — and that window minus the idle average of
//! its other intervals: the estimated cost of the interval that evicted). To get the idle figure
//! the test waits ~10 s for the 11th interval before starting the pods.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use topolet_integration::cri::Created;
use topolet_integration::fixture::pod_for;
use topolet_integration::kube::Requirements;
use topolet_integration::observe;
use topolet_integration::pressure::{
    fs_available, image_names, import_filler_image, memory_available, pid_available, FORK_SCRIPT,
    MEMORY_SCRIPT,
};
use topolet_integration::stack::version_under_test;
use topolet_integration::topolet::{metric, LOG_TIMEOUT};
use topolet_integration::{field, wait, Stack, TopoletConfig, WithTopolet};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// How long an eviction may take once the threshold is crossed (interval 1 s; generous for a
/// loaded host).
const EVICT_TIMEOUT: Duration = Duration::from_secs(30);

/// Pods evicted by the loop, by signal (in dry run: decisions).
const EVICTIONS: &str = "topolet_evictions_total";
/// Eviction attempts by action and result.
const ATTEMPTS: &str = "topolet_eviction_attempts_total";

/// The eviction interval of every test, in seconds.
const INTERVAL_S: u64 = 1;

/// The `[eviction]` section of a test: 1 s interval, short transition period, the stack's CRI.
fn eviction_toml(stack: &Stack, action: &str, hard: &str) -> anyhow::Result<String> {
    Ok(format!(
        "[eviction]\naction = {action:?}\ninterval = \"{INTERVAL_S}s\"\npressure_transition_period = \"5s\"\ncri_endpoint = {:?}\nhard = {{ {hard} }}\n",
        stack.env("CRI_ENDPOINT")?
    ))
}

/// Where the benchmark figures go (`TOPOLET_BENCH_OUT`, set by hack/bench.sh); `None` in a plain
/// test run, which then neither waits nor writes.
fn bench_out() -> Option<PathBuf> {
    std::env::var_os("TOPOLET_BENCH_OUT").map(PathBuf::from)
}

/// (iterations, cumulative average CPU µs per iteration) of an `eviction loop` stats line.
fn loop_stats(line: &str) -> anyhow::Result<(u64, u64)> {
    let num = |k: &str| -> anyhow::Result<u64> {
        field(line, k)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no numeric {k} in {line:?}"))
    };
    Ok((num("iterations")?, num("cpu_us_per_iteration")?))
}

/// The first `eviction loop` stats line (`eviction loop iterations=…`) at byte offset ≥ `after` of topolet's log with at least
/// `min_iterations`, waited for.
fn wait_loop_stats(
    t: &WithTopolet,
    after: usize,
    min_iterations: u64,
) -> anyhow::Result<(u64, u64)> {
    // Stats lines come every 10 intervals; allow two rounds on a loaded host.
    let timeout = Duration::from_secs(25 * INTERVAL_S);
    let mut found = None;
    wait::until_true(
        &format!("an eviction loop stats line with iterations >= {min_iterations}"),
        timeout,
        || {
            for l in t.topolet.lines("eviction loop iterations=", after) {
                let s = loop_stats(&l)?;
                if s.0 >= min_iterations {
                    found = Some(s);
                    return Ok(true);
                }
            }
            Ok(false)
        },
    )?;
    found.context("stats line vanished")
}

/// Idle loop figures before any pod starts: waits for the stats line of the 11th interval.
fn bench_idle(t: &WithTopolet) -> anyhow::Result<Option<(u64, u64)>> {
    if bench_out().is_none() {
        return Ok(None);
    }
    wait_loop_stats(t, 0, 11).map(Some)
}

/// Appends this test's figures to `TOPOLET_BENCH_OUT` (no-op without it): `idle` from
/// [`bench_idle`], `after` the log offset the pods were started at, the measured times.
fn bench_record(
    t: &WithTopolet,
    signal: &str,
    idle: Option<(u64, u64)>,
    after: usize,
    to_cross: Duration,
    reaction: Duration,
) -> anyhow::Result<()> {
    let (Some(out), Some((i_a, c_a))) = (bench_out(), idle) else {
        return Ok(());
    };
    let log = std::fs::read_to_string(t.topolet.log_path())
        .with_context(|| format!("reading {}", t.topolet.log_path().display()))?;
    let evicted_at = log
        .get(after..)
        .and_then(|rest| rest.find("pod evicted"))
        .map(|i| after + i)
        .context("no \"pod evicted\" line in topolet's log")?;
    let met = t
        .topolet
        .lines("threshold met; evicting one pod", after)
        .into_iter()
        .next()
        .context("no \"threshold met; evicting one pod\" line in topolet's log")?;
    let grace_s: u64 = field(&met, "grace_period_s")
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no grace_period_s in {met:?}"))?;
    let (i_b, c_b) = wait_loop_stats(t, evicted_at, i_a + 1)?;
    let idle_ms = c_a as f64 / 1e3;
    let window_intervals = i_b - i_a;
    let window_ms = (c_b * i_b).saturating_sub(c_a * i_a) as f64 / 1e3;
    let implied_s = (INTERVAL_S + grace_s) as f64;
    let line = serde_json::json!({
        "signal": signal,
        "interval_s": INTERVAL_S,
        "grace_period_s": grace_s,
        "crossed_after_s": to_cross.as_secs_f64(),
        "reaction_s": reaction.as_secs_f64(),
        "implied_bound_s": implied_s,
        "reaction_over_bound": reaction.as_secs_f64() / implied_s,
        "idle_intervals": i_a,
        "idle_cpu_ms_per_interval": idle_ms,
        "window_intervals": window_intervals,
        "window_cpu_ms": window_ms,
        "window_cpu_ms_per_interval": window_ms / window_intervals as f64,
        "eviction_interval_cpu_ms_est": window_ms - (window_intervals - 1) as f64 * idle_ms,
    });
    println!("bench figures: {line}");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&out)
        .with_context(|| format!("opening TOPOLET_BENCH_OUT {}", out.display()))?;
    writeln!(f, "{line}").with_context(|| format!("writing {}", out.display()))
}

/// Starts topolet with `extra` appended to the usual test config.
fn start(stack: Stack, extra: String) -> anyhow::Result<WithTopolet> {
    let work = stack.work_dir("topolet")?;
    let mut config = TopoletConfig::for_stack(&stack, &work);
    config.extra_toml = extra;
    WithTopolet::start_with(stack, work, &config)
}

/// True while the container's cgroup holds a process.
fn has_processes(c: &Created) -> bool {
    let dir: PathBuf = observe::cgroup_dir("pids", &c.cgroup_parent, &c.id);
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| !t.trim().is_empty())
        .unwrap_or(false)
}

/// A Guaranteed sleeper and a BestEffort pod running `script`, both started.
fn guaranteed_and_hog(t: &WithTopolet, script: &str) -> anyhow::Result<(Created, Created)> {
    let cri = t.stack.cri();
    let (gp, gc) = pod_for(
        &t.stack,
        "g-sleeper",
        Requirements::guaranteed(500, 64 * MIB),
        t.mem_capacity,
    )?;
    let g = cri.run_pod_with(&gp, &gc)?;
    let (bp, mut bc) = pod_for(
        &t.stack,
        "be-hog",
        Requirements::best_effort(),
        t.mem_capacity,
    )?;
    bc.command = vec!["/bin/sh".into(), "-c".into(), script.into()];
    let b = cri.run_pod_with(&bp, &bc)?;
    Ok((g, b))
}

/// Polls `signal` until it is under `threshold`, then until `hog` has no process; returns
/// (time to cross, reaction time from crossing to gone).
fn wait_crossed_then_gone(
    what: &str,
    threshold: u64,
    mut signal: impl FnMut() -> anyhow::Result<u64>,
    hog: &Created,
) -> anyhow::Result<(Duration, Duration)> {
    let start = Instant::now();
    wait::until_true(&format!("{what} under {threshold}"), EVICT_TIMEOUT, || {
        // Crossing and eviction can both happen between two polls: gone counts as crossed.
        Ok(signal()? < threshold || !has_processes(hog))
    })?;
    let crossed = Instant::now();
    wait::until_true(
        &format!("the BestEffort pod evicted ({what})"),
        EVICT_TIMEOUT,
        || Ok(!has_processes(hog)),
    )?;
    Ok((crossed - start, crossed.elapsed()))
}

/// Waits until the loop has counted an eviction for `signal`, and checks that it stopped a pod
/// through the CRI (not one already gone). Which pod it was is the containers' state
/// ([`check_outcome`]: the hog's sandbox NotReady, the Guaranteed container running).
fn evicted_by(t: &mut WithTopolet, signal: &str) -> anyhow::Result<()> {
    // Counted after the attempt's result (and its `pod evicted` line).
    t.topolet
        .wait_metric(EVICTIONS, &[("signal", signal)], 1.0, LOG_TIMEOUT)?;
    let addr = t.topolet.wait_metrics_address()?;
    let stopped = metric(&addr, ATTEMPTS, &[("action", "cri"), ("result", "evicted")])?;
    ensure!(
        stopped >= 1.0,
        "{EVICTIONS}{{signal={signal:?}}} counted but no {ATTEMPTS}{{action=\"cri\",result=\"evicted\"}}"
    );
    Ok(())
}

/// After an eviction: the hog's container exited and its sandbox is NotReady; the Guaranteed
/// container runs. topolet is stopped first so that no later interval changes the picture.
fn check_outcome(t: &mut WithTopolet, g: &Created, hog: &Created) -> anyhow::Result<()> {
    let stats = t
        .topolet
        .lines("eviction loop", 0)
        .last()
        .cloned()
        .unwrap_or_default();
    t.topolet.kill9()?;
    let cri = t.stack.cri();
    let hog_state = cri.state(&hog.id)?;
    ensure!(hog_state == "CONTAINER_EXITED", "hog is {hog_state}");
    let sandbox = cri.run(&["inspectp", "-o", "json", &hog.pod_id])?;
    let v: serde_json::Value = serde_json::from_str(&sandbox).context("crictl inspectp")?;
    ensure!(
        v["status"]["state"] == "SANDBOX_NOTREADY",
        "hog sandbox is {}",
        v["status"]["state"]
    );
    let g_state = cri.state(&g.id)?;
    ensure!(
        g_state == "CONTAINER_RUNNING",
        "Guaranteed pod is {g_state}"
    );
    ensure!(
        has_processes(g),
        "the Guaranteed container lost its processes"
    );
    println!("eviction loop cost: {stats}");
    Ok(())
}

#[test]
fn pid_pressure_evicts_the_forking_best_effort_pod_not_the_guaranteed_one() -> anyhow::Result<()> {
    let stack = Stack::start()?;
    // Free pids now, minus what topolet and two pods add (shims, pause, sleepers), minus a wide
    // margin for the rest of the host: the fork loop's 600 sleeps cross it, nothing else does.
    let threshold = pid_available()?.saturating_sub(300);
    let hard = format!("\"pid.available\" = \"{threshold}\"");
    let extra = eviction_toml(&stack, "cri", &hard)?;
    let mut t = start(stack, extra)?;
    let script = FORK_SCRIPT;
    let idle = bench_idle(&t)?;
    let mark = t.topolet.log_mark();
    let (g, hog) = guaranteed_and_hog(&t, script)?;
    let (to_cross, reaction) =
        wait_crossed_then_gone("pid.available", threshold, pid_available, &hog)?;
    evicted_by(&mut t, "pid.available")?;
    bench_record(&t, "pid.available", idle, mark, to_cross, reaction)?;
    println!(
        "pid.available threshold {threshold}: crossed {to_cross:?} after start, pod gone {reaction:?} after crossing"
    );
    check_outcome(&mut t, &g, &hog)
}

#[test]
fn memory_pressure_evicts_the_allocating_best_effort_pod_not_the_guaranteed_one(
) -> anyhow::Result<()> {
    let stack = Stack::start()?;
    let threshold = memory_available()?.saturating_sub(2 * GIB);
    let hard = format!("\"memory.available\" = \"{threshold}\"");
    let extra = eviction_toml(&stack, "cri", &hard)?;
    let mut t = start(stack, extra)?;
    let script = MEMORY_SCRIPT;
    let idle = bench_idle(&t)?;
    let mark = t.topolet.log_mark();
    let (g, hog) = guaranteed_and_hog(&t, script)?;
    let (to_cross, reaction) =
        wait_crossed_then_gone("memory.available", threshold, memory_available, &hog)?;
    evicted_by(&mut t, "memory.available")?;
    bench_record(&t, "memory.available", idle, mark, to_cross, reaction)?;
    println!(
        "memory.available threshold {threshold}: crossed {to_cross:?} after start, pod gone {reaction:?} after crossing"
    );
    check_outcome(&mut t, &g, &hog)
}

#[test]
fn dry_run_decides_and_logs_but_touches_nothing() -> anyhow::Result<()> {
    let stack = Stack::start()?;
    let threshold = pid_available()?.saturating_sub(300);
    let hard = format!("\"pid.available\" = \"{threshold}\"");
    let extra = eviction_toml(&stack, "dry-run", &hard)?;
    let mut t = start(stack, extra)?;
    let script = FORK_SCRIPT;
    let mark = t.topolet.log_mark();
    let (g, hog) = guaranteed_and_hog(&t, script)?;
    // In dry run every decision counts in topolet_evictions_total (after its log line).
    let labels = [("signal", "pid.available")];
    let first = t
        .topolet
        .wait_metric(EVICTIONS, &labels, 1.0, EVICT_TIMEOUT)?;
    // Which pod a dry run chose is in no state (it touches nothing, and no metric has a pod
    // label), only in its log line, written before the decision was counted.
    let line = t.topolet.logged("dry-run: would evict pod", mark)?;
    ensure!(
        field(&line, "pod").as_deref() == Some("topolet-it/be-hog"),
        "{line}"
    );
    // A few more intervals decide again (and do not act): wait for two more.
    t.topolet
        .wait_metric(EVICTIONS, &labels, first + 2.0, EVICT_TIMEOUT)?;
    t.topolet.kill9()?;
    let cri = t.stack.cri();
    for c in [&g, &hog] {
        let state = cri.state(&c.id)?;
        ensure!(state == "CONTAINER_RUNNING", "{} is {state}", c.id);
        ensure!(has_processes(c), "{} lost its processes", c.id);
    }
    let sandbox = cri.run(&["inspectp", "-o", "json", &hog.pod_id])?;
    let v: serde_json::Value = serde_json::from_str(&sandbox).context("crictl inspectp")?;
    ensure!(
        v["status"]["state"] == "SANDBOX_READY",
        "hog sandbox is {}",
        v["status"]["state"]
    );
    Ok(())
}

/// Node-level reclaims by signal and result.
const RECLAIMS: &str = "topolet_node_reclaim_total";
/// The size of the stack's image filesystem (a tmpfs) in the imagefs tests.
const IMAGEFS_MIB: u64 = 1024;
/// Each filler image's random payload; on the image filesystem it takes about twice this (the
/// layer blob and its unpacked snapshot).
const FILLER_MIB: u64 = 96;

/// A stack whose containerd root (the image filesystem) is a tmpfs of [`IMAGEFS_MIB`].
fn imagefs_stack() -> anyhow::Result<Stack> {
    Stack::start_with_env(
        &version_under_test(),
        &[("CONTAINERD_ROOT_SIZE_MB", &IMAGEFS_MIB.to_string())],
    )
}

/// The `[eviction]` section of the imagefs tests: `imagefs.available < threshold` (bytes) with
/// `minimum_reclaim`, imagefs at the stack's root, images reclaimable at any age.
fn imagefs_toml(stack: &Stack, threshold: u64, minimum_reclaim: &str) -> anyhow::Result<String> {
    let hard = format!("\"imagefs.available\" = \"{threshold}\"");
    Ok(format!(
        "{}imagefs_path = {:?}\nimage_minimum_gc_age = \"0s\"\nminimum_reclaim = {{ \"imagefs.available\" = {minimum_reclaim:?} }}\n",
        eviction_toml(stack, "cri", &hard)?,
        stack.dir().join("root").to_string_lossy()
    ))
}

#[test]
fn unused_images_are_removed_and_no_pod_is_evicted() -> anyhow::Result<()> {
    let stack = imagefs_stack()?;
    let root = stack.dir().join("root");
    let work = stack.work_dir("fillers")?;
    let image = |n: &str| format!("localhost/topolet/filler-{n}:latest");
    // An image only an exited container uses (a restartable one: its pod's sandbox is ready).
    import_filler_image(&stack, &image("kept"), FILLER_MIB, &work)?;
    let free = fs_available(&root)?;
    // Two and a half fillers under what is free (each takes ~2 × FILLER_MIB): three cross it,
    // two do not.
    let threshold = free.saturating_sub(5 * FILLER_MIB * MIB);
    let extra = imagefs_toml(&stack, threshold, "64Mi")?;
    let mut t = start(stack, extra)?;
    let (g, sleeper) = guaranteed_and_hog(&t, "exec sleep 3600")?;
    let cri = t.stack.cri();
    let (ep, mut ec) = pod_for(
        &t.stack,
        "exited",
        Requirements::best_effort(),
        t.mem_capacity,
    )?;
    ec.image = image("kept");
    ec.command = vec!["/bin/true".into()];
    let exited = cri.run_pod_with(&ep, &ec)?;
    wait::until_true("the exited container exited", EVICT_TIMEOUT, || {
        Ok(cri.state(&exited.id)? == "CONTAINER_EXITED")
    })?;
    let before = metric(&t.topolet.wait_metrics_address()?, EVICTIONS, &[])?;
    let unused = ["a", "b", "c"].map(image);
    for name in &unused {
        import_filler_image(&t.stack, name, FILLER_MIB, &work)?;
    }
    let labels = [("signal", "imagefs.available"), ("result", "relieved")];
    t.topolet
        .wait_metric(RECLAIMS, &labels, 1.0, EVICT_TIMEOUT)?;
    let addr = t.topolet.wait_metrics_address()?;
    let images = metric(&addr, "topolet_node_reclaim_images_total", &[])?;
    let bytes = metric(&addr, "topolet_node_reclaim_image_bytes_total", &[])?;
    let observed = metric(&addr, "topolet_node_reclaim_observed_bytes_total", &[])?;
    let evicted = metric(&addr, EVICTIONS, &[])?;
    let line = t.topolet.logged("node reclaim done", 0)?;
    t.topolet.kill9()?;
    let names = image_names(&t.stack)?;
    let gone: Vec<&String> = unused.iter().filter(|n| !names.contains(n)).collect();
    println!(
        "imagefs threshold {threshold} (free {free} before the fillers): {} images removed ({bytes} bytes as listed, {observed} bytes more available), removed {gone:?}\n{line}",
        images
    );
    ensure!(!gone.is_empty(), "no unused image removed: {names:?}");
    ensure!(
        images >= gone.len() as f64,
        "{images} counted, {gone:?} gone"
    );
    ensure!(
        evicted == before,
        "a pod was evicted ({before} → {evicted})"
    );
    for kept in [
        image("kept"),
        t.stack.test_image()?.to_string(),
        t.stack.env("PAUSE_IMAGE")?.to_string(),
    ] {
        ensure!(names.contains(&kept), "{kept} was removed: {names:?}");
    }
    ensure!(
        fs_available(&root)? >= threshold,
        "imagefs still under the threshold"
    );
    for c in [&g, &sleeper] {
        ensure!(cri.state(&c.id)? == "CONTAINER_RUNNING", "{} stopped", c.id);
        ensure!(has_processes(c), "{} lost its processes", c.id);
    }
    ensure!(
        cri.state(&exited.id)? == "CONTAINER_EXITED",
        "the exited container of a live pod was removed"
    );
    Ok(())
}

#[test]
fn a_pod_filling_its_writable_layer_is_evicted_then_its_dead_container_reclaimed(
) -> anyhow::Result<()> {
    let stack = imagefs_stack()?;
    let root = stack.dir().join("root");
    let threshold = fs_available(&root)?.saturating_sub(300 * MIB);
    let extra = imagefs_toml(&stack, threshold, "0")?;
    let mut t = start(stack, extra)?;
    let (g, hog) = guaranteed_and_hog(
        &t,
        "dd if=/dev/zero of=/fill bs=1M count=400 2>/dev/null; exec sleep 3600",
    )?;
    let (to_cross, reaction) =
        wait_crossed_then_gone("imagefs.available", threshold, || fs_available(&root), &hog)?;
    println!("imagefs.available threshold {threshold}: crossed {to_cross:?} after start, pod gone {reaction:?} after crossing");
    // Reclaim found nothing to remove, then the hog was evicted through the CRI.
    let not_enough = [("signal", "imagefs.available"), ("result", "not_enough")];
    t.topolet
        .wait_metric(RECLAIMS, &not_enough, 1.0, LOG_TIMEOUT)?;
    evicted_by(&mut t, "imagefs.available")?;
    // Its layer stays with its dead container until the next reclaim removes both (its pod's
    // sandbox is not ready and no API knows it); containerd frees the layer when its garbage
    // collector runs, and the pressure goes.
    let containers = t.topolet.wait_metric(
        "topolet_node_reclaim_containers_total",
        &[("signal", "imagefs.available")],
        1.0,
        EVICT_TIMEOUT,
    )?;
    let addr = t.topolet.wait_metrics_address()?;
    let sandboxes = metric(&addr, "topolet_node_reclaim_sandboxes_total", &[])?;
    wait::until_true("imagefs back over the threshold", EVICT_TIMEOUT, || {
        Ok(fs_available(&root)? >= threshold)
    })?;
    let line = t.topolet.logged("node reclaim done", 0)?;
    println!("{line}");
    t.topolet.kill9()?;
    let cri = t.stack.cri();
    let all = cri.containers()?;
    ensure!(
        !all.contains(&hog.id),
        "the evicted container is still listed"
    );
    ensure!(
        !cri.pods()?.contains(&hog.pod_id),
        "the evicted sandbox is still listed"
    );
    ensure!(
        containers >= 1.0 && sandboxes >= 1.0,
        "{containers} containers, {sandboxes} sandboxes counted"
    );
    ensure!(
        fs_available(&root)? >= threshold,
        "imagefs still under the threshold"
    );
    ensure!(
        cri.state(&g.id)? == "CONTAINER_RUNNING",
        "the Guaranteed pod stopped"
    );
    ensure!(
        has_processes(&g),
        "the Guaranteed container lost its processes"
    );
    Ok(())
}

#[test]
fn dry_run_reclaim_plans_and_logs_but_removes_no_image() -> anyhow::Result<()> {
    let stack = imagefs_stack()?;
    let root = stack.dir().join("root");
    let work = stack.work_dir("fillers")?;
    let threshold = fs_available(&root)?.saturating_sub(FILLER_MIB * MIB);
    let hard = format!("\"imagefs.available\" = \"{threshold}\"");
    let extra = format!(
        "{}imagefs_path = {:?}\nimage_minimum_gc_age = \"0s\"\n",
        eviction_toml(&stack, "dry-run", &hard)?,
        root.to_string_lossy()
    );
    let mut t = start(stack, extra)?;
    let mark = t.topolet.log_mark();
    let name = "localhost/topolet/filler-dry:latest";
    import_filler_image(&t.stack, name, FILLER_MIB, &work)?;
    let labels = [("signal", "imagefs.available"), ("result", "dry_run")];
    let first = t
        .topolet
        .wait_metric(RECLAIMS, &labels, 1.0, EVICT_TIMEOUT)?;
    // The plan is logged before the reclaim is counted.
    let line = t
        .topolet
        .logged("dry-run: node reclaim would remove", mark)?;
    ensure!(field(&line, "kind").as_deref() == Some("image"), "{line}");
    // Later intervals plan again (the image is still there): wait for two more.
    t.topolet
        .wait_metric(RECLAIMS, &labels, first + 2.0, EVICT_TIMEOUT)?;
    let addr = t.topolet.wait_metrics_address()?;
    let removed = metric(&addr, "topolet_node_reclaim_images_total", &[])?;
    t.topolet.kill9()?;
    ensure!(
        removed == 0.0,
        "{removed} images counted as removed in dry run"
    );
    let names = image_names(&t.stack)?;
    ensure!(
        names.iter().any(|n| n == name),
        "{name} was removed: {names:?}"
    );
    ensure!(
        fs_available(&root)? < threshold,
        "imagefs is no longer under the threshold: something was removed"
    );
    Ok(())
}
