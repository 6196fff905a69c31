//! Reclaimed CPU beside a real kubelet v1.37, API server and the stock kube-scheduler: the node
//! advertises its idle pool as `topolet.io/reclaimed-cpu`, the scheduler places batch pods
//! against it (and leaves one asking for more Pending), their containers run on the pool with
//! the lowest weight and a CFS quota of their limit, a regular pod's load takes the CPU back
//! and gives it back when it ends, a starved batch pod is evicted through the Eviction API with
//! an Event, and restarts, an API outage and reloads keep every limit and never leave an
//! inflated amount on the Node.
//!
//! The node has 2 CPUs; topolet reserves CPU 0, so the pool (shared CPUs neither reserved nor
//! exclusive) is CPU 1: 1000m. `usage = "pods"`: regular usage is the regular pods' own, so
//! the work of whatever else runs on this shared machine never moves the amounts the tests
//! check (the `cpus` source, which counts it, is checked in the QEMU guest). Every check waits
//! on state: the Node object, the containers' cgroup files, the pods, `topolet status`.

use std::time::Duration;

use anyhow::ensure;
use serde_json::{json, Value};
use topolet_integration::cluster::{ClusterOptions, KubeContainer, KubeNode};
use topolet_integration::manifests::{pod, res, script_ctr, UNTIL_TERM};
use topolet_integration::{observe, wait};

const RES: &str = "topolet.io/reclaimed-cpu";
const POOL: u64 = 1000;
const MARGIN: u64 = 200;
/// How long the amounts may take to follow a change: the window (3 s) and a few intervals, on
/// a machine that may be busy.
const FOLLOW: Duration = Duration::from_secs(60);

/// `[reclaimed]` of these tests; `starved_percent` of a batch pod's request is its floor.
fn reclaimed_toml(starved_percent: u8) -> String {
    format!(
        "[reclaimed]\nenabled = true\nusage = \"pods\"\ninterval = \"1s\"\n\
         suppress_interval = \"100ms\"\nwindow = \"3s\"\nmargin_percent = 20\n\
         min_change_percent = 5\nmax_age = \"10s\"\ngrow_step_percent = 10\n\
         starved_percent = {starved_percent}\nstarved_for = \"3s\"\n"
    )
}

fn start(extra: &str) -> anyhow::Result<KubeNode> {
    start_with(50, extra)
}

fn start_with(starved_percent: u8, extra: &str) -> anyhow::Result<KubeNode> {
    KubeNode::start_with_api_config(
        &format!("{}{extra}", reclaimed_toml(starved_percent)),
        &ClusterOptions::default(),
        "pod_wait_ms = 1000",
    )
}

/// A batch pod: one container asking for `millis` of the reclaimed resource and nothing else,
/// running `script`.
fn batch(name: &str, millis: u64, script: &str) -> Value {
    let r = json!({"requests": {RES: millis.to_string()}, "limits": {RES: millis.to_string()}});
    pod(name, vec![script_ctr("main", script, r)], vec![])
}

/// Spins one CPU until SIGTERM.
const SPIN: &str = "trap 'exit 0' TERM; while :; do :; done";
/// Spins three CPUs until SIGTERM.
const SPIN3: &str =
    "trap 'kill 0; exit 0' TERM; for i in 1 2 3; do (while :; do :; done) & done; wait";

/// A regular Burstable pod spinning three CPUs. Its 1500m request gives it the weight to win
/// most of the node's CPU on a machine busy with other work (its usage is what the tests need
/// to rise); no limit, so it is not throttled either.
fn regular_spinner(name: &str) -> Value {
    pod(
        name,
        vec![script_ctr("main", SPIN3, res("1500m", "", "", ""))],
        vec![],
    )
}

/// The amount the Node's capacity and allocatable hold (they must agree); an absent key is 0
/// (topolet removes the key instead of writing 0).
fn advertised(node: &KubeNode) -> anyhow::Result<Option<u64>> {
    // topolet writes both; a differing allocatable is only ever in flight.
    Ok(match node.cluster.extended_resource(RES)? {
        None => Some(0),
        Some(a) => a.allocatable_agrees.then_some(a.capacity),
    })
}

/// Waits until the Node lists no amount at all: withdrawn (0 is never written).
fn wait_withdrawn(node: &KubeNode, what: &str) -> anyhow::Result<()> {
    wait::until_true(&format!("the Node's {RES}: {what}"), FOLLOW, || {
        Ok(node.cluster.extended_resource(RES)?.is_none())
    })
}

fn wait_advertised(node: &KubeNode, what: &str, ok: impl Fn(u64) -> bool) -> anyhow::Result<u64> {
    wait::until(&format!("the Node's {RES}: {what}"), FOLLOW, || {
        Ok(advertised(node)?.filter(|v| ok(*v)))
    })
}

/// The batch container `main` of pod `name`: its cgroup's (cpuset, shares, quota).
fn batch_cgroup(node: &KubeNode, name: &str) -> anyhow::Result<(String, u64, i64)> {
    let p = node.cluster.get_pod(name)?;
    cgroup_of(&node.cluster.container(&p, "main")?)
}

/// A container's cgroup (cpuset, shares, quota), read without the API server.
fn cgroup_of(c: &KubeContainer) -> anyhow::Result<(String, u64, i64)> {
    let v = observe::cgroup_values(&c.created())?;
    Ok((v.cpuset_cpus, v.cpu_shares, v.cfs_quota_us))
}

fn wait_quota(
    node: &KubeNode,
    name: &str,
    what: &str,
    ok: impl Fn(i64) -> bool,
) -> anyhow::Result<(String, u64, i64)> {
    wait::until(&format!("pod {name}'s batch quota: {what}"), FOLLOW, || {
        let v = batch_cgroup(node, name)?;
        Ok(ok(v.2).then_some(v))
    })
}

fn restarts(node: &KubeNode, name: &str) -> anyhow::Result<i32> {
    let p = node.cluster.get_pod(name)?;
    Ok(p.status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .iter()
        .map(|c| c.restart_count)
        .sum())
}

fn status_reclaimed(node: &KubeNode) -> anyhow::Result<Value> {
    Ok(node.t.topolet.status()?["reclaimed"].clone())
}

/// The node advertises pool − regular − margin; a batch pod is scheduled against it and runs on
/// the pool (never the reserved CPU) with the lowest weight and its limit as quota; one asking
/// for more stays Pending; a regular pod's load cuts the batch quota and lowers the amount, and
/// both come back when it ends; an exclusive grant taking the pool's last CPU holds the batch
/// container (frozen, never on the reserved CPU) and refuses a new one, until the pool is back.
#[test]
fn batch_pods_run_on_reclaimed_cpu_and_give_it_back() -> anyhow::Result<()> {
    let mut node = start("")?;
    // Nothing regular runs: the whole pool less the margin.
    let idle = wait_advertised(&node, "the idle pool less the margin", |v| {
        v == POOL - MARGIN
    })?;
    let r = node
        .t
        .topolet
        .wait_status("reclaimed CPU on", FOLLOW, |s| {
            (s["reclaimed"]["state"] == "on").then(|| s["reclaimed"].clone())
        })?;
    ensure!(
        r["node"]["pool_millis"] == POOL && r["node"]["margin_millis"] == MARGIN,
        "status terms: {r}"
    );

    node.cluster.create_pod(batch("batch", 300, SPIN))?;
    node.cluster.wait_running("batch")?;
    let (cpus, shares, quota) = wait_quota(&node, "batch", "its limit, 300m", |q| q == 30_000)?;
    ensure!(
        cpus == "1",
        "the batch container runs on {cpus}, not the pool (CPU 1)"
    );
    ensure!(
        shares == 2,
        "the batch container's cpu.shares is {shares}, not BestEffort's 2"
    );
    ensure!(quota == 30_000);
    // Every thread of the batch container runs under SCHED_IDLE ([reclaimed] sched_idle, on by
    // default), read from /proc, where the runtime's NRI carries a scheduling policy
    // (containerd 2.2.1 and later); on an older line, the normal policy and a status line.
    let policies = observe::sched_policies(
        &node
            .cluster
            .container(&node.cluster.get_pod("batch")?, "main")?
            .created(),
    )?;
    let line = topolet_integration::stack::version_under_test();
    // The containerd release, read as a version triple.
    let applies = topolet_nri::version::NriVersion::parse(&line)
        .is_some_and(|v| v >= topolet_nri::version::NriVersion::new(2, 2, 1));
    let want = if applies { 5 } else { 0 };
    ensure!(
        !policies.is_empty() && policies.iter().all(|&(_, p)| p == want),
        "the batch container's threads on containerd {line} (tid, policy): {policies:?}, not all {want} (5 SCHED_IDLE, 0 SCHED_NORMAL)"
    );
    if !applies {
        let r = status_reclaimed(&node)?;
        ensure!(
            r["problems"].as_array().is_some_and(|ps| ps
                .iter()
                .any(|p| p.as_str().is_some_and(|p| p.contains("SCHED_IDLE")))),
            "status does not say why SCHED_IDLE is missing on containerd {line}: {r}"
        );
    }
    let qos = node
        .cluster
        .get_pod("batch")?
        .status
        .and_then(|s| s.qos_class);
    ensure!(qos.as_deref() == Some("BestEffort"), "qosClass {qos:?}");

    // More than the node offers: the scheduler leaves it Pending, naming the resource.
    node.cluster
        .create_pod(batch("too-big", 5000, UNTIL_TERM))?;
    node.cluster
        .wait_pod("too-big", "unschedulable for lack of the resource", |p| {
            topolet_integration::cluster::condition(p, "PodScheduled").is_some_and(
                |(status, reason, message)| {
                    status == "False" && reason == "Unschedulable" && message.contains(RES)
                },
            )
        })?;
    node.cluster.delete_pod("too-big")?;

    // A regular Burstable pod spins three CPUs: the batch quota is cut, the amount falls.
    node.cluster.create_pod(regular_spinner("regular"))?;
    node.cluster.wait_running("regular")?;
    let policies = observe::sched_policies(
        &node
            .cluster
            .container(&node.cluster.get_pod("regular")?, "main")?
            .created(),
    )?;
    ensure!(
        !policies.is_empty() && policies.iter().all(|&(_, p)| p == 0),
        "the regular container's threads (tid, policy): {policies:?}, not all SCHED_NORMAL (0)"
    );
    wait_quota(&node, "batch", "cut below its limit", |q| q < 30_000)?;
    let busy = wait_advertised(&node, "lower than while idle", |v| v < idle)?;
    let terms = status_reclaimed(&node)?;
    ensure!(
        terms["node"]["regular_millis"].as_u64().unwrap_or(0) > 0,
        "the regular pod's usage is not in the terms: {terms}"
    );

    // It ends: the quota grows back to the limit, the amount rises again.
    node.cluster.delete_pod("regular")?;
    wait_quota(&node, "batch", "back to its limit", |q| q == 30_000)?;
    wait_advertised(&node, "back up", |v| v > busy)?;

    // A Guaranteed pod takes CPU 1 exclusively: no CPU is left that a batch container may run
    // on (CPU 0 is reserved), so the batch container is held, frozen, before the exclusive
    // container starts; it is never moved onto the reserved CPU.
    let batch_ctr = node
        .cluster
        .container(&node.cluster.get_pod("batch")?, "main")?;
    node.cluster.create_pod(pod(
        "exclusive",
        vec![script_ctr(
            "main",
            UNTIL_TERM,
            res("1", "1", "64Mi", "64Mi"),
        )],
        vec![],
    ))?;
    node.cluster.wait_running("exclusive")?;
    let state = observe::freezer_state(&batch_ctr.created())?;
    // Written before the exclusive container was created; the kernel may still be freezing.
    ensure!(
        state == "FROZEN" || state == "FREEZING",
        "the exclusive container runs and the batch container is {state}, not frozen"
    );
    let (cpus, _, _) = batch_cgroup(&node, "batch")?;
    ensure!(
        !cpus.contains('0'),
        "the held batch container's cpuset is {cpus}"
    );
    wait_withdrawn(&node, "removed: the pool is empty")?;
    // A batch pod that arrives now is not started: its container is refused until the pool has
    // CPUs. The scheduler no longer places one here (the amount is withdrawn), so it is bound
    // to the node directly, as a pod that bypasses the scheduler arrives (the kubelet admits
    // extended resources its node does not list: `removeMissingExtendedResources`).
    let mut late = batch("late", 100, SPIN);
    late["spec"]["nodeName"] = json!(node.cluster.node_name());
    node.cluster.create_pod(late)?;
    node.cluster.wait_pod(
        "late",
        "its container refused while the pool is empty",
        |p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .any(|c| {
                    c.state
                        .as_ref()
                        .and_then(|s| s.waiting.as_ref())
                        .is_some_and(|w| w.reason.as_deref() == Some("CreateContainerError"))
                })
        },
    )?;
    node.cluster.delete_pod("late")?;
    node.cluster.delete_pod("exclusive")?;
    wait_quota(&node, "batch", "back on the pool at its limit", |q| {
        q == 30_000
    })?;
    ensure!(batch_cgroup(&node, "batch")?.0 == "1");
    wait::until_true("the batch container thawed", FOLLOW, || {
        Ok(observe::freezer_state(&batch_ctr.created())? == "THAWED")
    })?;
    ensure!(
        restarts(&node, "batch")? == 0,
        "the batch container restarted"
    );
    Ok(())
}

/// A batch pod granted, on average over 3 s, under 80 % of its request while a regular pod needs
/// the CPU is evicted through the Eviction API, with an Event saying why; the regular pod stays.
#[test]
fn a_starved_batch_pod_is_evicted_with_an_event() -> anyhow::Result<()> {
    // No pressure thresholds: only reclaimed CPU may evict here. No `action`: with the client
    // on it is `api`.
    let node = start_with(80, "[eviction]\nhard = {}\n")?;
    wait_advertised(&node, "the idle pool less the margin", |v| {
        v == POOL - MARGIN
    })?;
    node.cluster.create_pod(batch("starving", 500, SPIN))?;
    node.cluster.wait_running("starving")?;
    node.cluster.create_pod(regular_spinner("regular"))?;
    node.cluster.wait_running("regular")?;
    wait::until_true("the starved batch pod evicted", FOLLOW, || {
        let pod = node
            .cluster
            .block_on(node.cluster.pods().get_opt("starving"))?;
        Ok(match pod {
            None => true,
            Some(p) => p.metadata.deletion_timestamp.is_some(),
        })
    })?;
    let events = wait::until("the eviction's Event", FOLLOW, || {
        let ev = node.cluster.pod_events("starving")?;
        Ok(ev
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("ReclaimedCPUStarved")))
    })?;
    let message = events.message.unwrap_or_default();
    ensure!(
        message.contains(RES) && message.contains("500m"),
        "Event message: {message}"
    );
    ensure!(
        node.cluster
            .get_pod("regular")?
            .metadata
            .deletion_timestamp
            .is_none(),
        "the regular pod was evicted too"
    );
    Ok(())
}

/// A clean stop withdraws the amount (the key removed) and leaves the batch containers' quotas;
/// the kubelet restarted then keeps both batch pods Running; a topolet restart puts
/// both back without touching the container; while the API server is down the quota stays and,
/// once it is back, the Node holds what topolet computes; a reload turning the feature off
/// withdraws the amount and gives the container plain BestEffort values (shared pool, no
/// quota), and turning it on again restores them — the container never restarts.
#[test]
fn restarts_outages_and_reloads_keep_limits_and_never_leave_a_stale_amount() -> anyhow::Result<()> {
    let mut node = start("")?;
    wait_advertised(&node, "the idle pool less the margin", |v| {
        v == POOL - MARGIN
    })?;
    node.cluster.create_pod(batch("batch", 400, SPIN))?;
    node.cluster.create_pod(batch("batch2", 200, SPIN))?;
    node.cluster.wait_running("batch")?;
    node.cluster.wait_running("batch2")?;
    wait_quota(&node, "batch", "its limit, 400m", |q| q == 40_000)?;

    node.t
        .topolet
        .terminate(topolet_integration::topolet::TERMINATE_TIMEOUT)?;
    wait_withdrawn(&node, "removed by the clean stop")?;
    ensure!(
        batch_cgroup(&node, "batch")?.2 == 40_000,
        "quota changed while topolet was down"
    );
    // The kubelet restarts while the key is absent: it re-admits the running batch pods (a key
    // at 0 would fail them, OutOf<resource>). A pod created after the restart runs only once the
    // kubelet has admitted the pods it found at start.
    node.cluster.restart_kubelet()?;
    node.cluster.create_pod(pod(
        "marker",
        vec![script_ctr("main", UNTIL_TERM, res("", "", "", ""))],
        vec![],
    ))?;
    node.cluster.wait_running("marker")?;
    for name in ["batch", "batch2"] {
        let p = node.cluster.get_pod(name)?;
        let status = p.status.unwrap_or_default();
        ensure!(
            status.phase.as_deref() == Some("Running"),
            "after the kubelet's restart pod {name} is {:?}: {:?}",
            status.phase,
            status.message
        );
        ensure!(restarts(&node, name)? == 0, "pod {name} restarted");
    }
    node.cluster.delete_pod("marker")?;
    node.t.topolet.restart()?;
    node.t.topolet.wait_nri_synchronized(1)?;
    // The restart's Synchronize keeps the container where it runs (a positive quota on a pod
    // without a CPU request is a batch container's), before the pod watch says it is batch.
    let (cpus, _, quota) = batch_cgroup(&node, "batch")?;
    ensure!(
        cpus == "1" && quota == 40_000,
        "right after the restart's Synchronize: cpus {cpus}, quota {quota}"
    );
    wait_advertised(&node, "back after the restart", |v| v == POOL - MARGIN)?;
    let (cpus, _, quota) = batch_cgroup(&node, "batch")?;
    ensure!(
        cpus == "1" && quota == 40_000,
        "after the restart: cpus {cpus}, quota {quota}"
    );

    let container = node
        .cluster
        .container(&node.cluster.get_pod("batch")?, "main")?;
    node.cluster.stop_apiserver()?;
    // Locally nothing waits on the API server: the quota holds, the loop keeps running.
    let s = status_reclaimed(&node)?;
    ensure!(s["state"] == "on", "{s}");
    ensure!(cgroup_of(&container)?.2 == 40_000);
    node.cluster.start_apiserver()?;
    wait::until_true(
        "the Node agrees with topolet's amount after the outage",
        FOLLOW,
        || {
            let want = status_reclaimed(&node)?["advertised_millis"].as_u64();
            Ok(want.is_some() && advertised(&node)? == want)
        },
    )?;

    // Off by reload: withdrawn, plain BestEffort, same container.
    let config = node.t.topolet.config_path().to_path_buf();
    let text = std::fs::read_to_string(&config)?;
    std::fs::write(&config, text.replace("enabled = true", "enabled = false"))?;
    wait_withdrawn(&node, "removed by the reload")?;
    let (cpus, _, quota) = wait_quota(&node, "batch", "none (BestEffort)", |q| q == -1)?;
    ensure!(
        cpus == "0-1",
        "off: batch container on {cpus}, not the shared pool"
    );
    // On again.
    std::fs::write(&config, text)?;
    wait_quota(&node, "batch", "its limit again", |q| q == 40_000)?;
    ensure!(batch_cgroup(&node, "batch")?.0 == "1");
    wait_advertised(&node, "back after the reload", |v| v == POOL - MARGIN)?;
    ensure!(
        restarts(&node, "batch")? == 0,
        "the batch container restarted"
    );
    let _ = quota;
    Ok(())
}
