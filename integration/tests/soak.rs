//! The soak. Container create/start/stop/remove cycles across QoS classes
//! through the real stack, then: CPU 1 is back in the shared pool (every remaining container has
//! the whole pool), topolet's state file holds nothing for containers that are gone (none stale)
//! and agrees with `topolet status` and the cgroups, and topolet's resident memory is flat.
//!
//! Cycle count: 1,000 on [`FULL_SOAK_LINE`], 200 on the others, to keep `hack/test.sh` (which runs
//! the suite on both lines) within its time budget; the test prints which it runs.
//! `TOPOLET_SOAK_CYCLES=N` overrides both. The full soak runs on the v2.3 LTS line, the newest one
//! whose NRI (v0.12.0) still has the UpdateContainers deadlock described below: only there does a
//! clean soak prove that topolet never sends UpdateContainers into concurrent CRI calls. v2.4.2
//! (NRI v0.12.3) has the fix and would pass either way; v2.0.14 (NRI v0.8.0) has the bug too and
//! runs the short soak.
//!
//! Load, in rounds of [`ROUND`] cycles: three workers cycle shared containers in parallel, each
//! inside its own three long-lived pods (Guaranteed 500m, Burstable, BestEffort), and, while they
//! do, one cycle of an exclusive container (Guaranteed, one whole CPU, in its own long-lived pod):
//! it must get CPU 1, the two resident containers (alive through the whole soak) must be moved
//! off CPU 1 and, once it is stopped and removed, back onto the whole pool.
//!
//! Why the exclusive cycle runs during the churn: a grant or release moves the shared
//! containers, and a plugin-initiated NRI UpdateContainers that meets a concurrent CRI lifecycle
//! event deadlocks containerd for good in containerd 2.0 to 2.3 (NRI v0.8 to v0.12.0: lock-order
//! inversion between containerd's NRI lock and the NRI adaptation lock, containerd/containerd#13733,
//! fixed upstream in containerd/nri#301: NRI v0.12.3, bundled by containerd v2.4.2, no longer takes
//! the adaptation lock for UpdateContainers). This soak wedged containerd within about 1.5 minutes
//! while topolet still forced such requests out after 5 s of activity; topolet now carries the
//! moves in its replies to the events (`topolet::nri::outbox`), and this is the test that proves it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use topolet_integration::books::{self, TopoletSide, Tracked};
use topolet_integration::churn;
use topolet_integration::cri::Cri;
use topolet_integration::kube::{ContainerSpec, PodSpec, Qos, Requirements};
use topolet_integration::stack::{version_under_test, Runtime};
use topolet_integration::{observe, wait, WithTopolet};

const MIB: u64 = 1 << 20;
/// The containerd line that runs the full 1,000 cycles: the newest without the deadlock fix.
const FULL_SOAK_LINE: &str = "v2.3.7";
const WORKERS: usize = 3;
/// Cycles per round: `ROUND - 1` shared cycles in parallel, then one exclusive cycle alone.
const ROUND: usize = 50;
/// How long the residents may take to be moved after a grant or release: a guard while waiting
/// on state, not a bound. The move rides on the next reply that can carry it, or goes out after
/// a lull (300 ms; 3 s on the NRI lines with the UpdateContainers lock inversion), and a loaded
/// machine stretches the lull and the runtime's work.
const MOVE_TIMEOUT: Duration = Duration::from_secs(60);
/// RSS is sampled every this many cycles; the first sample is the warm-up baseline.
const SAMPLE_EVERY: usize = 100;
/// How much topolet's RSS may grow from the warm-up sample to the end. Allocator noise (arena
/// growth, the log writer's buffers, tracing's span storage) is well below this; a per-container
/// leak of even 2 KiB over 900 cycles would exceed it.
const RSS_SLACK_KIB: u64 = 2 * 1024;

fn cycles() -> anyhow::Result<usize> {
    match std::env::var("TOPOLET_SOAK_CYCLES") {
        Ok(v) => v
            .trim()
            .parse()
            .with_context(|| format!("TOPOLET_SOAK_CYCLES={v:?} is not a number")),
        Err(_) if !Runtime::under_test().is_crio() && version_under_test() == FULL_SOAK_LINE => {
            Ok(1000)
        }
        Err(_) => Ok(200),
    }
}

/// One long-lived pod a worker cycles containers in.
struct LongPod {
    spec: PodSpec,
    id: String,
    req: Requirements,
    /// Whether its containers hold CPU 1 alone.
    exclusive: bool,
}

/// create → start → (check an exclusive container got CPU 1) → stop → remove.
fn cycle(cri: &Cri, image: &str, cap: u64, pod: &LongPod, n: usize) -> anyhow::Result<()> {
    let ctr = ContainerSpec::sleeper(image, &format!("c{n}"), pod.req, cap);
    let c = cri.create(&pod.id, &pod.spec, &ctr)?;
    cri.start(&c.id)?;
    if pod.exclusive {
        let cpus = observe::cgroup_cpuset(&c)?;
        ensure!(
            cpus == books::EXCLUSIVE_CPU,
            "{}/c{n}: exclusive container runs on {cpus}",
            pod.spec.name
        );
    }
    // `crictl rm --force` sends StopContainer (0 s grace) and then RemoveContainer: the same two
    // CRI calls as `crictl stop` + `crictl rm`, one process fewer.
    cri.rm(&c.id)
}

/// The soak's fixed cast: two residents, each worker's three shared pods, the exclusive pod.
struct Cast {
    residents: Vec<Tracked>,
    shared: Vec<Vec<LongPod>>,
    exclusive: LongPod,
}

fn long_pod(t: &WithTopolet, cri: &Cri, name: &str, req: Requirements) -> anyhow::Result<LongPod> {
    let (spec, _) = t.pod(name, req)?;
    let id = cri.run_pod(&spec)?;
    Ok(LongPod {
        spec,
        id,
        req,
        exclusive: req.qos() == Qos::Guaranteed && req.cpu_request_m.is_some_and(|m| m % 1000 == 0),
    })
}

fn cast(t: &WithTopolet) -> anyhow::Result<Cast> {
    let cri = t.stack.cri();
    let residents: Vec<Tracked> = [
        ("resident-be", Requirements::best_effort()),
        (
            "resident-bu",
            Requirements::burstable(100, Some(300), 16 * MIB, Some(64 * MIB)),
        ),
    ]
    .into_iter()
    .map(|(name, req)| {
        let (p, c) = t.pod(name, req)?;
        let created = cri.run_pod_with(&p, &c)?;
        Ok(Tracked {
            name: name.to_string(),
            qos: req.qos(),
            pod_uid: p.uid.clone(),
            container: c.name.clone(),
            created,
        })
    })
    .collect::<anyhow::Result<_>>()?;
    let mut shared = Vec::new();
    for w in 0..WORKERS {
        shared.push(vec![
            long_pod(
                t,
                &cri,
                &format!("w{w}-g"),
                Requirements::guaranteed(500, 32 * MIB),
            )?,
            long_pod(
                t,
                &cri,
                &format!("w{w}-bu"),
                Requirements::burstable(100, Some(200), 16 * MIB, Some(32 * MIB)),
            )?,
            long_pod(t, &cri, &format!("w{w}-be"), Requirements::best_effort())?,
        ]);
    }
    let exclusive = long_pod(t, &cri, "x-g", Requirements::guaranteed(1000, 32 * MIB))?;
    Ok(Cast {
        residents,
        shared,
        exclusive,
    })
}

/// Runs cycles `range` on the workers in parallel (cycle `n` in pod `n % 3` of its worker).
fn parallel_cycles(
    stack: &topolet_integration::Stack,
    image: &str,
    cap: u64,
    shared: &[Vec<LongPod>],
    range: std::ops::Range<usize>,
) -> anyhow::Result<()> {
    let next = AtomicUsize::new(range.start);
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = shared
            .iter()
            .map(|mine| {
                let (next, end) = (&next, range.end);
                s.spawn(move || -> anyhow::Result<()> {
                    let cri = stack.cri();
                    loop {
                        let n = next.fetch_add(1, Ordering::SeqCst);
                        if n >= end {
                            return Ok(());
                        }
                        let pod = &mine[n % mine.len()];
                        cycle(&cri, image, cap, pod, n)
                            .with_context(|| format!("cycle {n} in pod {}", pod.spec.name))?;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("a soak worker panicked"))??;
        }
        Ok(())
    })
}

/// Waits until every resident runs on `cpus` (cgroup and the process's affinity; `pids` are the
/// residents' init processes).
fn residents_on(residents: &[Tracked], pids: &[i32], cpus: &str, when: &str) -> anyhow::Result<()> {
    wait::until_true(
        &format!("the residents on {cpus} {when}"),
        MOVE_TIMEOUT,
        || {
            for (r, pid) in residents.iter().zip(pids) {
                if observe::cgroup_cpuset(&r.created)? != cpus
                    || observe::cpus_allowed_list(*pid)? != cpus
                {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
}

/// One exclusive cycle (number `n`): it gets CPU 1 while it runs, the residents leave CPU 1 and
/// come back once it is gone.
fn exclusive_cycle(
    stack: &topolet_integration::Stack,
    image: &str,
    cap: u64,
    cast: &Cast,
    rpids: &[i32],
    n: usize,
) -> anyhow::Result<()> {
    let cri = stack.cri();
    let x = &cast.exclusive;
    let ctr = ContainerSpec::sleeper(image, &format!("c{n}"), x.req, cap);
    let c = cri.create(&x.id, &x.spec, &ctr)?;
    cri.start(&c.id)?;
    let cpus = observe::cgroup_cpuset(&c)?;
    ensure!(
        cpus == books::EXCLUSIVE_CPU,
        "exclusive c{n} runs on {cpus}"
    );
    residents_on(
        &cast.residents,
        rpids,
        books::POOL_WITHOUT_EXCLUSIVE,
        &format!("while c{n} holds CPU 1"),
    )?;
    cri.rm(&c.id)?;
    residents_on(
        &cast.residents,
        rpids,
        books::POOL_FULL,
        &format!("after c{n} released CPU 1"),
    )
}

/// After the soak: only the residents remain, on the whole pool; state file, status and cgroups
/// agree; nothing stale in the state file; topolet manages exactly the residents.
fn check_after(t: &WithTopolet, residents: &[Tracked]) -> anyhow::Result<()> {
    let cri = t.stack.cri();
    let (state, admin) = t.books_side();
    let balance = wait::until(
        "the books to balance after the soak",
        Duration::from_secs(15),
        || {
            books::check(
                &cri,
                residents,
                Some(TopoletSide {
                    state_file: &state,
                    admin_socket: &admin,
                }),
            )
            .map(Some)
        },
    )?;
    ensure!(
        balance.holder.is_none()
            && balance.cpusets.len() == residents.len()
            && balance
                .cpusets
                .values()
                .all(|c| c.as_str() == books::POOL_FULL),
        "after the soak CPU 1 is not back in the shared pool: {balance:?}"
    );
    let keys = books::state_file_keys(&state)?;
    let live: BTreeSet<String> = residents
        .iter()
        .map(|r| format!("{}/{}", r.pod_uid, r.container))
        .collect();
    let stale: Vec<&String> = keys.difference(&live).collect();
    ensure!(
        stale.is_empty(),
        "state file {} holds containers that are gone: {stale:?}",
        state.display()
    );
    let managed = books::status_managed(&admin)?;
    ensure!(
        managed == residents.len() as u64,
        "topolet status manages {managed} containers; {} run",
        residents.len()
    );
    Ok(())
}

#[test]
fn soak_create_stop_remove_cycles_leave_nothing_behind() -> anyhow::Result<()> {
    let total = cycles()?;
    ensure!(
        total >= 2 * SAMPLE_EVERY && total.is_multiple_of(ROUND),
        "TOPOLET_SOAK_CYCLES: at least {} and a multiple of {ROUND}",
        2 * SAMPLE_EVERY
    );
    eprintln!(
        "soak: {total} cycles on {} {} (1000 on containerd {FULL_SOAK_LINE}, 200 on the other \
         lines and on CRI-O; TOPOLET_SOAK_CYCLES overrides)",
        Runtime::under_test().name(),
        version_under_test()
    );
    let t = WithTopolet::start()?;
    let cri = t.stack.cri();
    let cap = t.mem_capacity;
    let image = t.stack.test_image()?.to_string();
    let cast = cast(&t)?;
    let rpids: Vec<i32> = cast
        .residents
        .iter()
        .map(|r| cri.pid(&r.created.id))
        .collect::<anyhow::Result<_>>()?;
    residents_on(&cast.residents, &rpids, books::POOL_FULL, "at the start")?;

    let pid = t.topolet.pid().context("topolet is not running")?;
    let mut samples: Vec<(usize, u64)> = vec![(0, churn::vm_rss_kib(pid)?)];
    let started = Instant::now();
    let log_tail = || topolet_integration::logs::tail(&t.topolet.log(), 40);
    for round in 0..total / ROUND {
        let first = round * ROUND;
        let n = first + ROUND - 1;
        std::thread::scope(|s| -> anyhow::Result<()> {
            // The exclusive cycle, during the shared churn: the grant moves the residents off
            // CPU 1, the release back.
            let exclusive = s.spawn(|| exclusive_cycle(&t.stack, &image, cap, &cast, &rpids, n));
            parallel_cycles(&t.stack, &image, cap, &cast.shared, first..n)?;
            exclusive
                .join()
                .map_err(|_| anyhow::anyhow!("the exclusive cycle panicked"))?
        })
        .with_context(|| format!("round {round}; topolet log:\n{}", log_tail()))?;
        let done = first + ROUND;
        if done.is_multiple_of(SAMPLE_EVERY) {
            samples.push((done, churn::vm_rss_kib(pid)?));
        }
    }
    let elapsed = started.elapsed();
    for p in cast.shared.iter().flatten().chain([&cast.exclusive]) {
        cri.remove_pod(&p.id)?;
    }
    check_after(&t, &cast.residents)?;

    samples.push((total, churn::vm_rss_kib(pid)?));
    let text: Vec<String> = samples
        .iter()
        .map(|(d, kib)| format!("{d}:{kib}"))
        .collect();
    eprintln!(
        "soak: {total} cycles ({} exclusive) in {elapsed:.1?} ({:.0} ms per cycle); \
         topolet VmRSS KiB by cycle: {}",
        total / ROUND,
        elapsed.as_secs_f64() * 1000.0 / total as f64,
        text.join(" ")
    );
    let warm = samples
        .iter()
        .find(|(d, _)| *d == SAMPLE_EVERY)
        .map(|(_, k)| *k)
        .context("no warm-up RSS sample")?;
    let end = samples.last().map(|(_, k)| *k).unwrap_or(warm);
    ensure!(
        end <= warm + RSS_SLACK_KIB,
        "topolet's RSS grew from {warm} KiB (cycle {SAMPLE_EVERY}) to {end} KiB (cycle {total}), \
         more than {RSS_SLACK_KIB} KiB: samples {text:?}"
    );
    Ok(())
}
