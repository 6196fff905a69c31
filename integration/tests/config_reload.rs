//! Configuration reload on the real binary against a real containerd.
//!
//! SIGHUP with a good configuration (the pids limit of the next container changes, running
//! containers keep theirs), with an invalid one (rejected, logged naming file and key, the old
//! one stays), with one that would break a running container (reserving the CPU a Guaranteed
//! container holds: refused naming the key and the container), and a file change without any
//! signal (picked up by the file watch).

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{ensure, Context};
use topolet_integration::cri::{Created, Cri};
use topolet_integration::kube::Requirements;
use topolet_integration::topolet::{metric, metrics_text, sample, Topolet, LOG_TIMEOUT};
use topolet_integration::{observe, wait, Stack, TopoletConfig, WithTopolet};

/// `topolet_config_reloads_total`: every reload's outcome by trigger and result.
const RELOADS: &str = "topolet_config_reloads_total";

/// Reloads on `trigger` with `result` so far.
fn reloads(t: &mut Topolet, trigger: &str, result: &str) -> anyhow::Result<f64> {
    let addr = t.wait_metrics_address()?;
    metric(&addr, RELOADS, &[("trigger", trigger), ("result", result)])
}

/// Runs `act`, then waits until one more reload on `trigger` ended with `result`. The outcome's
/// log line is written before it is counted, so the caller reads it with `logged` afterwards:
/// the line is where file, key and container are named (the operator's record), which no
/// counter carries.
fn reload_after(
    t: &mut Topolet,
    trigger: &str,
    result: &str,
    act: impl FnOnce(&Topolet) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let before = reloads(t, trigger, result)?;
    act(t)?;
    t.wait_metric(
        RELOADS,
        &[("trigger", trigger), ("result", result)],
        before + 1.0,
        LOG_TIMEOUT + Duration::from_secs(5),
    )?;
    Ok(())
}

/// The outcome line of the reload SIGHUP started (`trigger="SIGHUP"`), after byte `mark`: read
/// once the outcome was counted. The file poll may have tried the same file first (the
/// test writes it before signalling, and a poll can land between the two, even while the file
/// is half written), so the first outcome line after the mark need not be SIGHUP's.
fn sighup_line(t: &Topolet, pattern: &str, mark: usize) -> anyhow::Result<String> {
    t.lines(pattern, mark)
        .into_iter()
        .rfind(|l| l.contains("trigger=\"SIGHUP\""))
        .with_context(|| format!("no {pattern:?} line of a SIGHUP reload after byte {mark}"))
}

/// Rewrites the config with `config` unnoticed by the poll and sends SIGHUP; true when SIGHUP
/// applied it, false when the poll caught the file between the write and the restored mtime
/// (a loaded machine can stall the test there) and applied it first, leaving SIGHUP nothing to
/// change. Waits for SIGHUP's outcome either way.
fn sighup_applies(t: &mut Topolet, path: &Path, config: &TopoletConfig) -> anyhow::Result<bool> {
    write_unnoticed(path, &config.to_toml())?;
    let applied = reloads(t, "sighup", "applied")?;
    let unchanged = reloads(t, "sighup", "unchanged")?;
    sighup(t)?;
    let addr = t.wait_metrics_address()?;
    wait::until(
        "SIGHUP's reload to be counted",
        LOG_TIMEOUT + Duration::from_secs(5),
        || {
            let text = metrics_text(&addr)?;
            let count = |result: &str| -> anyhow::Result<f64> {
                let labels = [("trigger", "sighup"), ("result", result)];
                Ok(sample(&text, RELOADS, &labels)?.unwrap_or(0.0))
            };
            Ok(if count("applied")? > applied {
                Some(true)
            } else if count("unchanged")? > unchanged {
                Some(false)
            } else {
                None
            })
        },
    )
}

/// Creates a BestEffort pod `name` and returns its pids.max.
fn pids_max_of_new(t: &WithTopolet, cri: &Cri, name: &str) -> anyhow::Result<(Created, i64)> {
    let (p, c) = t.pod(name, Requirements::best_effort())?;
    let created = cri.run_pod_with(&p, &c)?;
    let pids = observe::cgroup_values(&created)?
        .pids_max
        .with_context(|| format!("{name}: pids.max is unlimited"))?;
    Ok((created, pids))
}

/// Rewrites the config file in place keeping its inode, size and mtime, so that the file poll
/// does not notice the change, unless it stats the file between the write and the mtime put
/// back ([`sighup_applies`] retries then).
fn write_unnoticed(path: &Path, text: &str) -> anyhow::Result<()> {
    let before = std::fs::metadata(path)?;
    let mtime: SystemTime = before.modified()?;
    ensure!(
        before.len() == text.len() as u64,
        "test bug: same size needed to stay unnoticed"
    );
    std::fs::write(path, text)?;
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.set_modified(mtime)?;
    Ok(())
}

fn sighup(t: &Topolet) -> anyhow::Result<()> {
    let pid = t.pid().context("topolet is not running")? as libc::pid_t;
    // SAFETY: kill(2) on our own running child.
    let rc = unsafe { libc::kill(pid, libc::SIGHUP) };
    ensure!(rc == 0, "kill -HUP {pid}");
    Ok(())
}

#[test]
fn sighup_and_file_change_reload_good_configs_and_reject_bad_ones() -> anyhow::Result<()> {
    let stack = Stack::start()?;
    let work = stack.work_dir("topolet")?;
    let mut config = TopoletConfig::for_stack(&stack, &work);
    config.pids_limit = Some(1024);
    let mut t = WithTopolet::start_with(stack, work, &config)?;
    let cri = t.stack.cri();
    let path = t.topolet.config_path().to_path_buf();

    let (first, pids) = pids_max_of_new(&t, &cri, "before")?;
    ensure!(pids == 1024, "before any reload: pids.max {pids}");

    // 1. A good configuration, noticed only through SIGHUP. The file keeps its inode, size
    // and mtime, but the file watch (inotify, then a stat once the directory is still for
    // 200 ms) can still land between the write and the mtime put back: it then applies the file itself, and the step is tried again with
    // another value of the same width.
    let mut limit = None;
    for candidate in 2048..2053 {
        config.pids_limit = Some(candidate);
        let mark = t.topolet.log_mark();
        if sighup_applies(&mut t.topolet, &path, &config)? {
            limit = Some((candidate, mark));
            break;
        }
        eprintln!("pids_limit {candidate}: the file poll saw the write first; trying again");
    }
    let (limit, mark) = limit.context("the file poll saw every unnoticed write")?;
    let line = sighup_line(&t.topolet, "configuration reloaded", mark)?;
    ensure!(line.contains("qos"), "reload line: {line}");
    let (_, pids) = pids_max_of_new(&t, &cri, "after-good")?;
    ensure!(
        pids == limit,
        "a container created after the reload: pids.max {pids}, want {limit}"
    );
    let kept = observe::cgroup_values(&first)?.pids_max;
    ensure!(
        kept == Some(1024),
        "a running container keeps its value: {kept:?}"
    );

    // 2. An invalid configuration (a CPU this machine does not have): rejected, old one stays.
    let mut bad = config.clone();
    bad.pids_limit = Some(4096);
    bad.reserved_cpus = Some("0,4095".into());
    bad.write(&path)?;
    let mark = t.topolet.log_mark();
    reload_after(&mut t.topolet, "sighup", "rejected", sighup)?;
    let line = sighup_line(&t.topolet, "configuration rejected", mark)?;
    ensure!(
        line.contains(&path.display().to_string())
            && line.contains("cpu.reserved_cpus")
            && line.contains("4095"),
        "the rejection names file, key and value: {line}"
    );
    let (_, pids) = pids_max_of_new(&t, &cri, "after-bad")?;
    ensure!(
        pids == limit,
        "after a rejected config: pids.max {pids}, want {limit}"
    );

    // 3. A configuration that would take a running container's exclusive CPU.
    let (gp, gc) = t.pod("g-1cpu", Requirements::guaranteed(1000, 64 << 20))?;
    let g = cri.run_pod_with(&gp, &gc)?;
    ensure!(
        observe::cgroup_cpuset(&g)? == "1",
        "g-1cpu cpuset {}",
        observe::cgroup_cpuset(&g)?
    );
    let mut taking = config.clone();
    taking.reserved_cpus = Some("1".into());
    taking.write(&path)?;
    let mark = t.topolet.log_mark();
    reload_after(&mut t.topolet, "sighup", "refused", sighup)?;
    let line = sighup_line(&t.topolet, "configuration rejected", mark)?;
    ensure!(
        line.contains("cpu.reserved_cpus") && line.contains("holds cpus 1 exclusively"),
        "the refusal names the key and the container: {line}"
    );
    ensure!(
        observe::cgroup_cpuset(&g)? == "1",
        "g-1cpu still on cpu 1: {}",
        observe::cgroup_cpuset(&g)?
    );

    // 4. A good configuration written without a signal: the poll picks it up.
    config.pids_limit = Some(3000);
    let mark = t.topolet.log_mark();
    reload_after(&mut t.topolet, "file_change", "applied", |_| {
        config.write(&path)
    })?;
    let line = t.topolet.logged("configuration reloaded", mark)?;
    ensure!(line.contains("file change"), "reload line: {line}");
    let (_, pids) = pids_max_of_new(&t, &cri, "after-file")?;
    ensure!(pids == 3000, "after the file change: pids.max {pids}");
    ensure!(t.topolet.is_running(), "topolet exited");
    Ok(())
}
