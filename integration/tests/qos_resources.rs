//! Every container's resources rewritten by QoS class, on real containers.
//!
//! The stack host has 2 CPUs and topolet reserves CPU 0, so a Guaranteed 1-CPU container gets
//! CPU 1 to itself and everyone else shares what is left (`0` while CPU 1 is taken, `0-1`
//! otherwise). Values are read from where they take effect: the container's v1 cgroup files,
//! its process's /proc files, and the bundle config.json runc was given (oci-spec).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use topolet_integration::books;
use topolet_integration::cri::{Created, Cri};
use topolet_integration::kube::{self, Qos, Requirements};
use topolet_integration::observe::{self, BundleResources};
use topolet_integration::topolet::metric;
use topolet_integration::{wait, Stack, WithTopolet};

const MIB: u64 = 1 << 20;
/// pids_limit of the test config (TopoletConfig::for_stack).
const PIDS_LIMIT: i64 = 1024;
/// How long shared containers may take to be moved (UpdateContainers is sent off the event path,
/// after the runtime's lull). A guard only: every wait returns as soon as the state is reached,
/// and a loaded machine (CI beside other builds) must not fail a correct run.
const MOVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until both the container's cgroup cpuset.cpus and its process's Cpus_allowed_list are
/// `want`.
fn wait_cpus(cri: &Cri, c: &Created, name: &str, want: &str) -> anyhow::Result<()> {
    let pid = cri.pid(&c.id)?;
    wait::until_true(&format!("{name} on cpus {want}"), MOVE_TIMEOUT, || {
        let cg = observe::cgroup_cpuset(c)?;
        let allowed = observe::cpus_allowed_list(pid)?;
        Ok(cg == want && allowed == want)
    })
    .with_context(|| {
        format!(
            "{name} ({}): cgroup cpuset.cpus={:?}, Cpus_allowed_list={:?}",
            c.id,
            observe::cgroup_cpuset(c).ok(),
            observe::cpus_allowed_list(pid).ok()
        )
    })
}

/// The lowest oom_score_adj the runtime can give a container ([`Stack::oom_floor`]).
fn oom_floor(stack: &Stack) -> anyhow::Result<i64> {
    stack.oom_floor()
}

#[test]
fn guaranteed_gets_cpu1_and_shared_containers_move_off_and_back() -> anyhow::Result<()> {
    let t = WithTopolet::start()?;
    let cri = t.stack.cri();
    let mut shared: Vec<(String, Created)> = Vec::new();

    // Shared containers created before the exclusive one start on the whole shared pool.
    for (name, req) in [
        ("be-before", Requirements::best_effort()),
        (
            "bu-before",
            Requirements::burstable(250, Some(500), 64 * MIB, Some(256 * MIB)),
        ),
    ] {
        let (p, c) = t.pod(name, req)?;
        let created = cri.run_pod_with(&p, &c)?;
        wait_cpus(&cri, &created, name, "0-1")?;
        shared.push((name.to_string(), created));
    }

    let (gp, gc) = t.pod("g-1cpu", Requirements::guaranteed(1000, 128 * MIB))?;
    let g = cri.run_pod_with(&gp, &gc)?;
    // topolet's own books (its status) hold the grant, decided before its reply.
    let (exclusive, _) = books::status_exclusive(&t.config.admin_socket)?;
    ensure!(
        exclusive.get(&g.id).map(String::as_str) == Some("1"),
        "topolet status: want {} ({}) on CPU 1 alone, exclusive grants are {exclusive:?}",
        gp.pod_ref(),
        g.id
    );
    // Exclusive from its very first instruction: the create-time adjustment, no polling needed.
    let gpid = cri.pid(&g.id)?;
    ensure!(
        observe::cgroup_cpuset(&g)? == "1",
        "g-1cpu cgroup cpuset.cpus = {}",
        observe::cgroup_cpuset(&g)?
    );
    ensure!(
        observe::cpus_allowed_list(gpid)? == "1",
        "g-1cpu Cpus_allowed_list = {}",
        observe::cpus_allowed_list(gpid)?
    );
    let inside = cri.exec(&g.id, &["cat", "/proc/self/status"])?;
    ensure!(
        inside
            .lines()
            .any(|l| l.starts_with("Cpus_allowed_list:") && l.ends_with("\t1")),
        "inside g-1cpu, /proc/self/status says:\n{inside}"
    );

    // Shared containers that existed are moved off CPU 1 …
    for (name, c) in &shared {
        wait_cpus(&cri, c, name, "0")?;
    }
    // … and new ones start off it.
    for (name, req) in [
        ("be-after", Requirements::best_effort()),
        (
            "bu-after",
            Requirements::burstable(100, None, 32 * MIB, None),
        ),
    ] {
        let (p, c) = t.pod(name, req)?;
        let created = cri.run_pod_with(&p, &c)?;
        let pid = cri.pid(&created.id)?;
        let (cg, allowed) = (
            observe::cgroup_cpuset(&created)?,
            observe::cpus_allowed_list(pid)?,
        );
        ensure!(
            cg == "0" && allowed == "0",
            "{name} created while CPU 1 is exclusive: cgroup {cg}, Cpus_allowed_list {allowed}"
        );
        shared.push((name.to_string(), created));
    }

    // Removing the exclusive container gives CPU 1 back to everyone.
    cri.rm(&g.id)?;
    for (name, c) in &shared {
        wait_cpus(&cri, c, name, "0-1")?;
    }
    Ok(())
}

/// What one container must end up with.
#[derive(Debug)]
struct Want {
    cpus: &'static str,
    shares: u64,
    /// cpu.cfs_quota_us; -1 = none.
    quota: i64,
    memory: Option<u64>,
    oom: i64,
    /// The bundle's linux.resources.cpu.quota (None: never set, Some(-1): removed by topolet).
    bundle_quota: Option<i64>,
}

#[test]
fn cgroup_values_follow_qos_rules() -> anyhow::Result<()> {
    let t = WithTopolet::start()?;
    let cri = t.stack.cri();
    let cap = t.mem_capacity;
    let floor = oom_floor(&t.stack)?;
    let bu_oom = kube::burstable_oom(64 * MIB, cap);
    let bn_oom = kube::burstable_oom(32 * MIB, cap);
    let cases: Vec<(&str, Requirements, Want)> = vec![
        // Guaranteed, integer CPU: exclusive CPU 1, shares from the request, quota removed,
        // oom_score_adj -997 clamped to the floor (0 here).
        (
            "g-1cpu",
            Requirements::guaranteed(1000, 256 * MIB),
            Want {
                cpus: "1",
                shares: 1024,
                quota: -1,
                memory: Some(256 * MIB),
                oom: kube::GUARANTEED_OOM.max(floor),
                bundle_quota: Some(-1),
            },
        ),
        // Guaranteed, fractional CPU: shared pool, quota kept.
        (
            "g-500m",
            Requirements::guaranteed(500, 128 * MIB),
            Want {
                cpus: "0",
                shares: 512,
                quota: 50_000,
                memory: Some(128 * MIB),
                oom: kube::GUARANTEED_OOM.max(floor),
                bundle_quota: Some(50_000),
            },
        ),
        // Burstable with limits: shares from the request, quota from the limit, its own oom.
        (
            "bu-limits",
            Requirements::burstable(250, Some(500), 64 * MIB, Some(256 * MIB)),
            Want {
                cpus: "0",
                shares: 256,
                quota: 50_000,
                memory: Some(256 * MIB),
                oom: bu_oom,
                bundle_quota: Some(50_000),
            },
        ),
        // Burstable without limits: no quota, no memory limit.
        (
            "bu-nolimit",
            Requirements::burstable(100, None, 32 * MIB, None),
            Want {
                cpus: "0",
                shares: 102,
                quota: -1,
                memory: None,
                oom: bn_oom,
                bundle_quota: None,
            },
        ),
        // BestEffort: shares 2, no quota, no memory limit, oom 1000.
        (
            "besteffort",
            Requirements::best_effort(),
            Want {
                cpus: "0",
                shares: 2,
                quota: -1,
                memory: None,
                oom: kube::BESTEFFORT_OOM,
                bundle_quota: None,
            },
        ),
    ];
    let mut failures = Vec::new();
    for (name, req, want) in &cases {
        let (p, c) = t.pod(name, *req)?;
        let created = cri.run_pod_with(&p, &c)?;
        if let Err(e) = check_values(&t.stack, &cri, name, &created, want) {
            failures.push(format!("{name} ({:?}): {e:#}", req.qos()));
        }
    }
    if !failures.is_empty() {
        bail!(
            "{} of {} containers differ from the rules:\n{}\ntopolet log:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n"),
            topolet_integration::logs::tail(&t.topolet.log(), 30)
        );
    }
    Ok(())
}

fn check_values(
    stack: &Stack,
    cri: &Cri,
    name: &str,
    c: &Created,
    want: &Want,
) -> anyhow::Result<()> {
    let pid = cri.pid(&c.id)?;
    let cg = observe::cgroup_values(c)?;
    let pr = observe::proc_values(pid)?;
    let got = (
        cg.cpuset_cpus.as_str(),
        pr.cpus_allowed_list.as_str(),
        cg.cpu_shares,
        cg.cfs_quota_us,
        cg.cfs_period_us,
        cg.memory_limit,
        pr.oom_score_adj,
        cg.pids_max,
    );
    let expected = (
        want.cpus,
        want.cpus,
        want.shares,
        want.quota,
        kube::CPU_PERIOD as u64,
        want.memory,
        want.oom,
        Some(PIDS_LIMIT),
    );
    ensure!(
        got == expected,
        "(cpuset.cpus, Cpus_allowed_list, cpu.shares, cfs_quota_us, cfs_period_us, memory.limit, \
         oom_score_adj, pids.max):\n   got {got:?}\n  want {expected:?}"
    );
    let spec = observe::bundle_spec(stack, &c.id)?;
    let b = observe::bundle_resources(&spec)?;
    // CRI-O writes the CRI's cpu_quota into the bundle even when it is 0, the kubelet's "no
    // limit" (cri-o/cri-o internal/factory/container/container.go,
    // SpecSetLinuxContainerResources); runc leaves a 0 quota unset (the cgroup's -1, checked
    // above). containerd leaves the field out.
    let bundle_quota = match want.bundle_quota {
        None if stack.runtime().is_crio() => Some(0),
        q => q,
    };
    let want_b = BundleResources {
        cpus: Some(want.cpus.to_string()),
        mems: b.mems.clone(),
        shares: Some(want.shares),
        quota: bundle_quota,
        period: Some(kube::CPU_PERIOD as u64),
        memory_limit: want.memory.map(|m| m as i64),
        pids_limit: Some(PIDS_LIMIT),
        oom_score_adj: Some(want.oom as i32),
    };
    ensure!(
        b == want_b,
        "{name}: bundle config.json linux.resources/process:\n   got {b:?}\n  want {want_b:?}"
    );
    Ok(())
}

/// One container of the parallel batch.
struct Batch {
    name: String,
    qos: Qos,
    /// Ok: created and started; Err: CreateContainer/StartContainer failed (refused, or the
    /// plugin died mid-request).
    result: Result<Created, String>,
    /// When its create+start returned.
    finished: std::time::Instant,
}

/// The batch container that topolet's state file at `path` gives CPU 1 (`keys`: state-file key →
/// batch name); None when the file gives it to nobody or was never written.
fn saved_holder(
    path: &std::path::Path,
    keys: &BTreeMap<String, String>,
) -> anyhow::Result<Option<String>> {
    if !path.exists() {
        return Ok(None);
    }
    let saved = books::state_file_exclusive(path)?;
    Ok(saved
        .iter()
        .find(|(_, cpus)| cpus.as_str() == "1")
        .and_then(|(key, _)| keys.get(key).cloned()))
}

/// Checks the books from what the runtime applied (each running container's cgroup
/// cpuset.cpus and its process's Cpus_allowed_list), never from what topolet logged:
/// - no CPU granted twice: at most one container holds CPU 1, and it is Guaranteed;
/// - every other container runs on the shared pool (`0` while CPU 1 is held, else `0-1`);
/// - no Guaranteed container is left on the shared pool while CPU 1 is free (after a restart's
///   Synchronize, a Guaranteed container created while topolet was away gets it);
/// - `saved_holder`, the container topolet's state file gave CPU 1 when it was killed: when it
///   runs, it is the holder (a restart keeps a decision that nothing contradicts).
///
/// Returns each running container's cpuset.
fn check_books(
    cri: &Cri,
    batch: &[Batch],
    saved_holder: Option<&str>,
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut cpus = BTreeMap::new();
    for b in batch {
        let Ok(c) = &b.result else { continue };
        if cri.state(&c.id)? != "CONTAINER_RUNNING" {
            continue;
        }
        let pid = cri.pid(&c.id)?;
        let (cg, allowed) = (observe::cgroup_cpuset(c)?, observe::cpus_allowed_list(pid)?);
        ensure!(
            cg == allowed,
            "{}: cgroup cpuset {cg} but Cpus_allowed_list {allowed}",
            b.name
        );
        cpus.insert(b.name.clone(), cg);
    }
    let holders: Vec<&String> = cpus
        .iter()
        .filter(|(_, c)| c.as_str() == "1")
        .map(|(n, _)| n)
        .collect();
    ensure!(
        holders.len() <= 1,
        "CPU 1 granted to several containers: {holders:?}"
    );
    let qos_of = |n: &str| batch.iter().find(|b| b.name == n).map(|b| b.qos);
    for h in &holders {
        ensure!(
            qos_of(h) == Some(Qos::Guaranteed),
            "{h} holds CPU 1 but is not Guaranteed"
        );
    }
    if let Some(saved) = saved_holder.filter(|s| cpus.contains_key(*s)) {
        ensure!(
            holders.iter().any(|h| h.as_str() == saved),
            "the state file gave CPU 1 to {saved}, which runs, but the holder is {holders:?}: \
             the restart reshuffled a decision nothing contradicts (running: {cpus:?})"
        );
    }
    let shared_want = if holders.is_empty() { "0-1" } else { "0" };
    let mut wrong = Vec::new();
    for (name, c) in &cpus {
        if holders.contains(&name) {
            continue;
        }
        if holders.is_empty() && qos_of(name) == Some(Qos::Guaranteed) {
            wrong.push(format!(
                "Guaranteed {name} runs on the shared pool {c} while CPU 1 is free"
            ));
        } else if c != shared_want {
            wrong.push(format!(
                "{name} runs on {c}; the shared pool is {shared_want}"
            ));
        }
    }
    ensure!(
        wrong.is_empty(),
        "holder of CPU 1: {holders:?}; {} containers wrong:\n  {}",
        wrong.len(),
        wrong.join("\n  ")
    );
    Ok(cpus)
}

#[test]
fn sigkill_during_parallel_creates_then_books_balance_across_restarts() -> anyhow::Result<()> {
    let mut t = WithTopolet::start()?;
    let mark = t.topolet.log_mark();
    let (admitted_before, _) = t.topolet.create_decisions()?;
    let specs: Vec<_> = (0..20)
        .map(|i| {
            let (name, req) = match i % 3 {
                0 => (format!("g{i}"), Requirements::guaranteed(1000, 64 * MIB)),
                1 => (
                    format!("bu{i}"),
                    Requirements::burstable(200, Some(400), 32 * MIB, Some(64 * MIB)),
                ),
                _ => (format!("be{i}"), Requirements::best_effort()),
            };
            t.pod(&name, req).map(|(p, c)| (name, req.qos(), p, c))
        })
        .collect::<anyhow::Result<_>>()?;

    // State-file key (`pod_uid/container`) → batch name.
    let keys: BTreeMap<String, String> = specs
        .iter()
        .map(|(name, _, p, c)| (format!("{}/{}", p.uid, c.name), name.clone()))
        .collect();
    let state_file = t.state_file();
    let state_file = &state_file;
    let keys = &keys;
    let stack = &t.stack;
    let topolet = &mut t.topolet;
    let (batch, restart_mark, saved) = std::thread::scope(|s| -> anyhow::Result<_> {
        let handles: Vec<_> = specs
            .iter()
            .map(|(name, qos, p, c)| {
                s.spawn(move || Batch {
                    name: name.clone(),
                    qos: *qos,
                    result: stack.cri().run_pod_with(p, c).map_err(|e| format!("{e:#}")),
                    finished: std::time::Instant::now(),
                })
            })
            .collect();
        // Kill it mid-batch: after a few containers were placed, while the rest are in flight.
        let killed_at = wait::until("3 containers placed", Duration::from_secs(60), || {
            let (admitted, _) = topolet.create_decisions()?;
            Ok((admitted >= admitted_before + 3).then_some(()))
        });
        topolet.kill9()?;
        let kill_time = std::time::Instant::now();
        killed_at?;
        // What the restarted topolet will load: the state file as the killed one left it.
        let saved = saved_holder(state_file, keys);
        let restart_mark = topolet.log_mark();
        topolet.restart()?;
        let saved = saved?;
        let batch: Vec<Batch> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a create thread panicked"))
            })
            .collect::<anyhow::Result<_>>()?;
        let after_kill = batch.iter().filter(|b| b.finished > kill_time).count();
        ensure!(
            after_kill > 0,
            "every create finished before the kill: the test did not kill topolet mid-batch"
        );
        eprintln!(
            "{after_kill} of {} creates finished after the SIGKILL",
            batch.len()
        );
        Ok((batch, restart_mark, saved))
    })?;
    t.topolet.wait_nri_synchronized(1)?;
    eprintln!("the state file gave CPU 1 to {saved:?} when topolet was killed");

    let cri = t.stack.cri();
    let before = wait::until(
        "the books to balance after topolet's restart",
        MOVE_TIMEOUT,
        || check_books(&cri, &batch, saved.as_deref()).map(Some),
    )
    .with_context(|| {
        let full = t.topolet.log();
        let since = full.get(restart_mark..).unwrap_or(&full).to_string();
        let results: Vec<String> = batch
            .iter()
            .map(|b| match &b.result {
                Ok(c) => format!("{} ok {}", b.name, &c.id[..12]),
                Err(e) => format!("{} FAILED {}", b.name, e.lines().last().unwrap_or("")),
            })
            .collect();
        format!(
            "creates:\n{}\ntopolet log before the kill:\n{}\ntopolet log since its restart:\n{}",
            results.join("\n"),
            full.get(mark..restart_mark).unwrap_or(""),
            since
        )
    })?;
    let failed: Vec<_> = batch
        .iter()
        .filter_map(|b| b.result.as_ref().err().map(|e| (b.name.as_str(), e)))
        .collect();
    eprintln!("after SIGKILL + restart: running {before:?}\nfailed creates: {failed:#?}");

    // The runtime restarts: topolet re-synchronizes and nothing moves.
    let connects = t.topolet.nri_connects()?;
    t.stack.restart_runtime()?;
    t.topolet.wait_nri_synchronized(connects + 1)?;
    let after = wait::until(
        "the books to balance after the runtime's restart",
        MOVE_TIMEOUT,
        || check_books(&cri, &batch, saved.as_deref()).map(Some),
    )?;
    ensure!(
        before == after,
        "cpusets changed across the runtime's restart:\n before {before:?}\n after {after:?}"
    );

    // Removing every Guaranteed container returns CPU 1 to the shared pool (nothing leaked).
    for b in &batch {
        if let (Qos::Guaranteed, Ok(c)) = (b.qos, &b.result) {
            cri.rm(&c.id)?;
        }
    }
    for b in &batch {
        if let (Qos::Burstable | Qos::BestEffort, Ok(c)) = (b.qos, &b.result) {
            if cri.state(&c.id)? == "CONTAINER_RUNNING" {
                wait_cpus(&cri, c, &b.name, "0-1")?;
            }
        }
    }
    Ok(())
}

/// The drift check: an exclusive container's cgroup cpuset rewritten behind topolet's back (its
/// process may then run on every CPU) is put back by topolet's own update, and counted.
#[test]
fn a_cpuset_rewritten_behind_topolets_back_is_put_back() -> anyhow::Result<()> {
    let mut t = WithTopolet::start_with_fast_drift_check()?;
    let cri = t.stack.cri();
    let (gp, gc) = t.pod("g-drift", Requirements::guaranteed(1000, 128 * MIB))?;
    let g = cri.run_pod_with(&gp, &gc)?;
    wait_cpus(&cri, &g, "g-drift", "1")?;
    let pid = cri.pid(&g.id)?;
    let addr = t.topolet.wait_metrics_address()?;
    let repairs = || metric(&addr, "topolet_drift_repairs_total", &[("field", "cpus")]);
    let before = repairs()?;
    // Someone else writes the container's cgroup: the kernel lets its process on every CPU.
    let cpus_file = observe::cgroup_dir("cpuset", &g.cgroup_parent, &g.id).join("cpuset.cpus");
    std::fs::write(&cpus_file, "0-1")
        .with_context(|| format!("writing {}", cpus_file.display()))?;
    // Not asserted here: the check may already have found and repaired it (with a lull passed
    // since the last runtime event, it runs within a second of the write).
    eprintln!(
        "after the rewrite: Cpus_allowed_list = {:?}",
        observe::cpus_allowed_list(pid).ok()
    );
    // In the next lull (5 s without a runtime event) the check finds the process off its target
    // (counted when it queues the repair, before sending it: only the rewrite can make this
    // container drift) and sends its target. The count is read first, so the cgroup and the
    // process read back on CPU 1 afterwards are the repair's work, not the rewrite not taken.
    wait::until_true(
        "the drift check repairs g-drift",
        Duration::from_secs(300),
        || {
            if repairs()? <= before {
                return Ok(false);
            }
            let cg = observe::cgroup_cpuset(&g)?;
            let allowed = observe::cpus_allowed_list(pid)?;
            Ok(cg == "1" && allowed == "1")
        },
    )
    .with_context(|| {
        format!(
            "repairs counted {:?} (before the rewrite: {before}), cgroup cpuset.cpus={:?}, \
             Cpus_allowed_list={:?}",
            repairs().ok(),
            observe::cgroup_cpuset(&g).ok(),
            observe::cpus_allowed_list(pid).ok()
        )
    })?;
    Ok(())
}

/// The second cpuset owner (`src/bin/cpuset_owner.rs`), killed when dropped.
struct Owner(std::process::Child);

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Another NRI plugin that sets every container's cpuset at a lower index (as
/// kubernetes-sigs/dra-driver-cpu does at 00; topolet's default index is 50): every container
/// starts with that owner's cpuset, none fails on NRI's field ownership, topolet sets nothing and
/// books nothing for them (status, `topolet_left_alone_containers`); once the owner is gone,
/// topolet places new containers again.
#[test]
fn another_cpuset_owner_at_a_lower_index_keeps_every_container_it_set_up() -> anyhow::Result<()> {
    let mut t = WithTopolet::start()?;
    let cri = t.stack.cri();
    let ready = t.work.join("cpuset-owner.ready");
    let mut owner_cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cpuset_owner"));
    owner_cmd
        .arg("--socket")
        .arg(t.stack.nri_socket())
        .args(["--cpus", "0", "--idx", "00", "--ready"])
        .arg(&ready);
    if t.stack.runtime().is_crio() {
        // CRI-O passes the kubelet's -997 to runc unclamped (no restrict_oom_score_adj); the
        // owner of the containers topolet leaves alone clamps it instead (cpuset_owner's docs).
        owner_cmd.args(["--oom-floor", &oom_floor(&t.stack)?.to_string()]);
    }
    let child = owner_cmd
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("starting cpuset_owner")?;
    let mut owner = Owner(child);
    wait::until_true(
        "cpuset_owner synchronized by the runtime",
        Duration::from_secs(60),
        || Ok(ready.exists()),
    )?;

    let mut owned = Vec::new();
    for (name, req) in [
        ("g-owned", Requirements::guaranteed(1000, 128 * MIB)),
        ("be-owned", Requirements::best_effort()),
    ] {
        let (p, c) = t.pod(name, req)?;
        let created = cri
            .run_pod_with(&p, &c)
            .with_context(|| format!("{name}: created beside another cpuset owner"))?;
        ensure!(
            cri.state(&created.id)? == "CONTAINER_RUNNING",
            "{name} is {}",
            cri.state(&created.id)?
        );
        let cpus = observe::cgroup_cpuset(&created)?;
        ensure!(cpus == "0", "{name}: cpuset.cpus {cpus}, not the owner's 0");
        owned.push(created);
    }
    let status = t.topolet.status()?;
    ensure!(
        status["left_alone_containers"] == 2
            && status["exclusive"].as_array().is_some_and(|e| e.is_empty()),
        "topolet status: left alone {}, exclusive {}",
        status["left_alone_containers"],
        status["exclusive"]
    );
    let addr = t.topolet.wait_metrics_address()?;
    let gauge = metric(&addr, "topolet_left_alone_containers", &[])?;
    ensure!(gauge == 2.0, "topolet_left_alone_containers = {gauge}");

    // The owner goes (containerd drops its connection before its next event): topolet places
    // the next Guaranteed container on CPU 1, and leaves the owner's containers where they are.
    owner.0.kill().context("stopping cpuset_owner")?;
    owner.0.wait().context("reaping cpuset_owner")?;
    let (gp, gc) = t.pod("g-after", Requirements::guaranteed(1000, 128 * MIB))?;
    let g = cri.run_pod_with(&gp, &gc)?;
    let cpus = observe::cgroup_cpuset(&g)?;
    ensure!(cpus == "1", "g-after: cpuset.cpus {cpus}, not topolet's 1");
    for c in &owned {
        let cpus = observe::cgroup_cpuset(c)?;
        ensure!(cpus == "0", "{}: moved to {cpus}", c.id);
    }
    Ok(())
}
