//! Node-pressure eviction through the Eviction API on the real
//! cluster (kubelet v1.37, API server, scheduler; no controller-manager), with topolet's
//! Kubernetes client on as the `topolet` user, which holds only deploy/kubernetes/rbac.yaml's
//! ClusterRole — a missing verb fails these tests.
//!
//! Pressure is produced as in tests/eviction.rs, relative to what this shared host has free now:
//! a `memory.available` hard threshold 2 GiB under the available memory, crossed by a BestEffort
//! pod holding 3 GiB; a `pid.available` threshold 300 under the free count, crossed by a
//! BestEffort pod forking 600 `sleep`s. The kubelet's own thresholds (memory 100Mi, no pid) are
//! never reached. `[eviction] action` is not set: with the client on, `api` is the default.
//!
//! What is waited on is state: the pods and the Node through API watches (every version the API
//! server reports, so a short-lived `DisruptionTarget` condition or a 5 s pressure window is not
//! missed), Events, PodDisruptionBudget status, metrics, the signals from /proc and cgroups.
//! The reaction time (threshold crossed, as the test sees the signal, until the pod is gone from
//! the API) is printed and, with `TOPOLET_BENCH_OUT` (hack/bench.sh), appended as a JSON line
//! beside the kubelet's own housekeeping interval (10 s) for comparison. No timing assertions.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{ensure, Context};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use topolet_integration::cluster::{self, ClusterOptions, KubeNode, Watched};
use topolet_integration::pressure::{memory_available, pid_available, FORK_SCRIPT, MEMORY_SCRIPT};
use topolet_integration::topolet::metrics_text;
use topolet_integration::{field, wait};
use topolet_testkit::metrics_text::{parse_exposition, value};

const GIB: u64 = 1 << 30;
/// The loop's interval in these tests, in seconds.
const INTERVAL_S: u64 = 1;
/// The kubelet's housekeeping (eviction monitoring) interval, for the comparison.
const KUBELET_HOUSEKEEPING_S: u64 = 10;

/// `[eviction]` of a test: 1 s interval, 5 s transition period, 2 s condition heartbeat, `hard`,
/// the pressure taint on or off; no `action` (the default with the client on is `api`).
fn eviction_toml(hard: &str, taint: bool) -> String {
    format!(
        "[eviction]\ninterval = \"{INTERVAL_S}s\"\npressure_transition_period = \"5s\"\n\
         node_condition_heartbeat = \"2s\"\npressure_taint = {taint}\nhard = {{ {hard} }}\n"
    )
}

/// A host-network pod of the suite running `script` in container `main`, with `labels` and
/// `resources`.
fn pod(name: &str, labels: Value, script: &str, resources: Value) -> Value {
    let main = topolet_integration::manifests::script_ctr("main", script, resources);
    topolet_integration::manifests::pod_with_labels(name, labels, vec![main], vec![])
}

const SLEEP: &str = "trap 'exit 0' TERM; sleep 3600 & wait";

fn guaranteed() -> Value {
    json!({"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "64Mi"}})
}

/// One version of a pod as its watch saw it.
#[derive(Debug, Clone)]
struct PodView {
    uid: String,
    /// The `DisruptionTarget` condition: (status, reason).
    disruption: Option<(String, String)>,
    deleting: bool,
}

fn watch_pod(k: &cluster::Cluster, name: &str) -> anyhow::Result<Watched<PodView>> {
    k.watch(
        |c| Api::<Pod>::namespaced(c, "default"),
        &format!("metadata.name={name}"),
        |p: &Pod| PodView {
            uid: p.metadata.uid.clone().unwrap_or_default(),
            disruption: cluster::condition(p, "DisruptionTarget").map(|(s, r, _)| (s, r)),
            deleting: p.metadata.deletion_timestamp.is_some(),
        },
    )
}

/// One of topolet's conditions on the Node, and whether the kubelet's `MemoryPressure` is
/// still there beside it.
#[derive(Debug, Clone, PartialEq)]
struct CondView {
    status: String,
    reason: String,
    message: String,
    heartbeat: String,
    transition: String,
    kubelet_memory_pressure: bool,
    taints: Vec<String>,
}

fn node_view(n: &Node, type_: &str) -> Option<CondView> {
    let conds = n.status.as_ref()?.conditions.as_ref()?;
    let c = conds.iter().find(|c| c.type_ == type_)?;
    let t = |v: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        v.as_ref().map(|t| t.0.to_string()).unwrap_or_default()
    };
    Some(CondView {
        status: c.status.clone(),
        reason: c.reason.clone().unwrap_or_default(),
        message: c.message.clone().unwrap_or_default(),
        heartbeat: t(&c.last_heartbeat_time),
        transition: t(&c.last_transition_time),
        kubelet_memory_pressure: conds.iter().any(|c| c.type_ == "MemoryPressure"),
        taints: n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|ts| {
                ts.iter()
                    .map(|t| format!("{}:{}", t.key, t.effect))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

fn watch_condition(
    k: &cluster::Cluster,
    type_: &'static str,
) -> anyhow::Result<Watched<Option<CondView>>> {
    let name = k.node_name().to_string();
    k.watch(
        Api::<Node>::all,
        &format!("metadata.name={name}"),
        move |n: &Node| node_view(n, type_),
    )
}

/// The statuses of the condition in the order they were seen, repeats collapsed.
fn status_sequence(seen: &[(Instant, Option<Option<CondView>>)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, v) in seen {
        if let Some(Some(c)) = v {
            if out.last() != Some(&c.status) {
                out.push(c.status.clone());
            }
        }
    }
    out
}

/// The last version of the condition seen.
fn last_condition(w: &Watched<Option<CondView>>) -> Option<CondView> {
    w.seen().into_iter().rev().find_map(|(_, v)| v.flatten())
}

/// Polls the signal until it is under `threshold` (or the pod is already gone: crossing and
/// eviction can both happen between two polls); returns when it was seen crossed.
fn wait_crossed(
    what: &str,
    threshold: u64,
    signal: impl Fn() -> anyhow::Result<u64>,
    pod: &Watched<PodView>,
) -> anyhow::Result<Instant> {
    wait::until_true(
        &format!("{what} under {threshold}"),
        cluster::POD_TIMEOUT,
        || Ok(pod.deleted_at().is_some() || signal()? < threshold),
    )?;
    Ok(Instant::now())
}

/// When a pod's eviction was accepted (its `DisruptionTarget` condition first seen) and when it
/// was gone from the API.
struct EvictedAt {
    accepted: Instant,
    gone: Instant,
}

/// Waits until the watched pod is gone from the API; checks it carried `DisruptionTarget`
/// (`True`, `EvictionByEvictionAPI`: the API server's eviction subresource) on the way.
fn wait_evicted(
    k: &cluster::Cluster,
    name: &str,
    w: &Watched<PodView>,
) -> anyhow::Result<EvictedAt> {
    w.wait(
        &format!("pod {name} gone from the API"),
        cluster::POD_TIMEOUT,
        |seen| seen.iter().any(|(_, v)| v.is_none()),
    )
    .with_context(|| k.pod_summary(name))?;
    let seen = w.seen();
    let target = seen
        .iter()
        .find_map(|(at, v)| Some((*at, v.as_ref()?.disruption.clone()?)));
    let Some((accepted, ("True", "EvictionByEvictionAPI"))) = target
        .as_ref()
        .map(|(at, (st, r))| (*at, (st.as_str(), r.as_str())))
    else {
        anyhow::bail!(
            "pod {name} was deleted without the Eviction API's DisruptionTarget condition: {:?}",
            seen.iter().map(|(_, v)| v).collect::<Vec<_>>()
        );
    };
    let gone = w.deleted_at().context("deleted but no deletion time")?;
    Ok(EvictedAt { accepted, gone })
}

/// The pod never started terminating and is the same pod (uid) as when it was first seen.
fn check_untouched(k: &cluster::Cluster, name: &str, w: &Watched<PodView>) -> anyhow::Result<()> {
    let seen = w.seen();
    let first = seen
        .iter()
        .find_map(|(_, v)| v.clone())
        .with_context(|| format!("pod {name} never seen"))?;
    ensure!(
        seen.iter().all(|(_, v)| v
            .as_ref()
            .is_some_and(|v| !v.deleting && v.disruption.is_none())),
        "pod {name} was touched: {seen:?}",
        seen = seen.iter().map(|(_, v)| v).collect::<Vec<_>>()
    );
    let now = k.get_pod(name)?;
    ensure!(
        now.metadata.uid.as_deref() == Some(first.uid.as_str()) && cluster::all_ready(&now),
        "{}",
        k.pod_summary(name)
    );
    Ok(())
}

/// topolet's `Evicted` Warning Event on pod `name`, waited for.
fn evicted_event(k: &cluster::Cluster, name: &str) -> anyhow::Result<Event> {
    wait::until(
        &format!("topolet's Evicted Event on pod {name}"),
        cluster::POD_TIMEOUT,
        || {
            Ok(k.pod_events(name)?.into_iter().find(|e| {
                e.reason.as_deref() == Some("Evicted")
                    && e.type_.as_deref() == Some("Warning")
                    && e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("topolet")
            }))
        },
    )
}

fn metric(addr: &str, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<f64> {
    let samples = parse_exposition(&metrics_text(addr)?).map_err(anyhow::Error::msg)?;
    Ok(value(&samples, name, labels).unwrap_or(0.0))
}

/// Prints the reaction times from `crossed` and appends them to `TOPOLET_BENCH_OUT` when set.
fn record_reaction(signal: &str, crossed: Instant, at: &EvictedAt) -> anyhow::Result<()> {
    let accepted = at.accepted.saturating_duration_since(crossed);
    let gone = at.gone.saturating_duration_since(crossed);
    println!(
        "{signal}: eviction accepted by the API server {accepted:?} and pod gone from the API \
         {gone:?} after the threshold was crossed (interval {INTERVAL_S}s; the kubelet's \
         housekeeping interval is {KUBELET_HOUSEKEEPING_S}s)"
    );
    let line = json!({
        "signal": signal,
        "action": "api",
        "interval_s": INTERVAL_S,
        "reaction_to_eviction_accepted_s": accepted.as_secs_f64(),
        "reaction_to_gone_from_api_s": gone.as_secs_f64(),
        "kubelet_housekeeping_s": KUBELET_HOUSEKEEPING_S,
    });
    println!("bench figures: {line}");
    if let Some(out) = std::env::var_os("TOPOLET_BENCH_OUT").map(PathBuf::from) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)
            .with_context(|| format!("opening TOPOLET_BENCH_OUT {}", out.display()))?;
        writeln!(f, "{line}").with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

/// The loop runs with action `api` although the config does not name one.
fn check_default_action(node: &mut KubeNode) -> anyhow::Result<()> {
    // The loop is a task of its own, started beside the NRI connection: its first report in the
    // status (after the line) shows the line was written.
    node.t.topolet.wait_status(
        "the eviction loop's first report",
        cluster::POD_TIMEOUT,
        |s| (!s["pressure"].is_null()).then_some(()),
    )?;
    let started = node
        .t
        .topolet
        .lines("eviction loop started", 0)
        .last()
        .cloned()
        .context("no \"eviction loop started\" line")?;
    ensure!(
        field(&started, "action").as_deref() == Some("api"),
        "{started}"
    );
    Ok(())
}

#[test]
fn memory_pressure_evicts_the_best_effort_hog_through_the_api_and_sets_topolets_condition(
) -> anyhow::Result<()> {
    let threshold = memory_available()?.saturating_sub(2 * GIB);
    let extra = eviction_toml(&format!("\"memory.available\" = \"{threshold}\""), false);
    let mut node = KubeNode::start_with_api(&extra, &ClusterOptions::default())?;
    check_default_action(&mut node)?;
    let addr = node.t.topolet.wait_metrics_address()?;
    let k = &node.cluster;
    let cond = watch_condition(k, "TopoletMemoryPressure")?;
    cond.wait(
        "TopoletMemoryPressure False on the Node",
        cluster::POD_TIMEOUT,
        |s| status_sequence(s) == ["False"],
    )?;
    let g_watch = watch_pod(k, "g-sleeper")?;
    let hog_watch = watch_pod(k, "mem-hog")?;
    k.create_pod(pod("g-sleeper", json!({}), SLEEP, guaranteed()))?;
    k.wait_running("g-sleeper")?;
    k.create_pod(pod("mem-hog", json!({}), MEMORY_SCRIPT, json!({})))?;
    let crossed = wait_crossed("memory.available", threshold, memory_available, &hog_watch)?;
    let at = wait_evicted(k, "mem-hog", &hog_watch)?;
    record_reaction("memory.available", crossed, &at)?;

    // The kubelet's words in the Event, with the container using the most.
    let ev = evicted_event(k, "mem-hog")?;
    let msg = ev.message.clone().unwrap_or_default();
    ensure!(
        msg.starts_with("The node was low on resource: memory. Threshold quantity: ")
            && msg.contains(", available: ")
            && msg.contains("Container main was using ")
            && msg.contains(", request is 0, has larger consumption of memory. "),
        "{msg}"
    );

    // TopoletMemoryPressure: False, True while under pressure, False again after the
    // transition period; then a heartbeat that keeps the transition time. The kubelet's own
    // MemoryPressure stays beside it.
    let seen = cond.wait(
        "TopoletMemoryPressure back to False",
        cluster::POD_TIMEOUT,
        |s| status_sequence(s) == ["False", "True", "False"],
    )?;
    let t = seen
        .iter()
        .filter_map(|(_, v)| v.clone().flatten())
        .find(|c| c.status == "True")
        .context("no True version")?;
    ensure!(
        t.reason == "TopoletHasInsufficientMemory"
            && t.message
                .starts_with("memory.available is below the hard threshold"),
        "{t:?}"
    );
    let cleared = last_condition(&cond).context("no condition")?;
    ensure!(
        cleared.reason == "TopoletHasSufficientMemory" && cleared.transition > t.transition,
        "{cleared:?} after {t:?}"
    );
    cond.wait(
        "a heartbeat of the False condition",
        cluster::POD_TIMEOUT,
        |s| {
            s.iter().filter_map(|(_, v)| v.clone().flatten()).any(|c| {
                c.status == "False"
                    && c.transition == cleared.transition
                    && c.heartbeat > cleared.heartbeat
            })
        },
    )?;
    let last = last_condition(&cond).context("no condition")?;
    ensure!(
        last.kubelet_memory_pressure,
        "the kubelet's MemoryPressure condition is gone"
    );

    check_untouched(k, "g-sleeper", &g_watch)?;
    let evicted = metric(
        &addr,
        "topolet_eviction_attempts_total",
        &[("action", "api"), ("result", "evicted")],
    )?;
    ensure!(
        evicted >= 1.0,
        "topolet_eviction_attempts_total evicted = {evicted}"
    );
    let patch_errors = metric(
        &addr,
        "topolet_node_status_patches_total",
        &[("target", "conditions"), ("result", "error")],
    )?;
    ensure!(
        patch_errors == 0.0,
        "condition patches failed: {patch_errors}"
    );
    node.cluster.stop()?;
    Ok(())
}

/// Creates PodDisruptionBudget `name` over `selector` and writes its status as the disruption
/// controller would (none runs here): `allowed` disruptions, observed generation current.
fn pdb(k: &cluster::Cluster, name: &str, selector: Value, pods: i32) -> anyhow::Result<()> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(k.client(), "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": pods, "selector": {"matchLabels": selector}},
    }))?;
    k.block_on(api.create(&PostParams::default(), &pdb))
        .with_context(|| format!("creating PodDisruptionBudget {name}"))?;
    set_pdb_allowed(k, name, pods, 0)
}

fn set_pdb_allowed(
    k: &cluster::Cluster,
    name: &str,
    pods: i32,
    allowed: i32,
) -> anyhow::Result<()> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(k.client(), "default");
    let generation = k
        .block_on(api.get(name))?
        .metadata
        .generation
        .context("PDB without generation")?;
    // With no disruption allowed, one more healthy pod is desired than there are, so that the
    // API server refuses even a pod the kubelet has not reported Ready yet (it lets unready pods
    // go while currentHealthy >= desiredHealthy).
    let desired = if allowed == 0 {
        pods + 1
    } else {
        pods - allowed
    };
    let status = json!({"status": {
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": pods,
        "desiredHealthy": desired,
        "expectedPods": pods,
    }});
    k.block_on(api.patch_status(name, &PatchParams::default(), &Patch::Merge(status)))
        .with_context(|| format!("writing the status of PodDisruptionBudget {name}"))?;
    Ok(())
}

fn has_taint(k: &cluster::Cluster, key: &str) -> anyhow::Result<bool> {
    Ok(k.node()?
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == key && t.effect == "NoSchedule"))
}

#[test]
fn pid_pressure_skips_the_hog_a_pdb_protects_evicts_the_next_pod_and_taints_the_node(
) -> anyhow::Result<()> {
    let threshold = pid_available()?.saturating_sub(300);
    let extra = eviction_toml(&format!("\"pid.available\" = \"{threshold}\""), true);
    let mut node = KubeNode::start_with_api(&extra, &ClusterOptions::default())?;
    let addr = node.t.topolet.wait_metrics_address()?;
    let k = &node.cluster;
    // The hog and the Guaranteed pod are covered by a budget allowing no disruption.
    pdb(k, "protect", json!({"protect": "yes"}), 2)?;
    let cond = watch_condition(k, "TopoletPIDPressure")?;
    let g_watch = watch_pod(k, "g-sleeper")?;
    let by_watch = watch_pod(k, "bystander")?;
    let hog_watch = watch_pod(k, "pid-hog")?;
    k.create_pod(pod(
        "g-sleeper",
        json!({"protect": "yes"}),
        SLEEP,
        guaranteed(),
    ))?;
    k.create_pod(pod("bystander", json!({}), SLEEP, json!({})))?;
    k.wait_running("g-sleeper")?;
    k.wait_running("bystander")?;
    k.create_pod(pod(
        "pid-hog",
        json!({"protect": "yes"}),
        FORK_SCRIPT,
        json!({}),
    ))?;

    // The hog ranks first (most processes) but its budget refuses: the bystander goes.
    let crossed = wait_crossed("pid.available", threshold, pid_available, &by_watch)?;
    let at = wait_evicted(k, "bystander", &by_watch)?;
    record_reaction("pid.available", crossed, &at)?;
    let refused = || {
        metric(
            &addr,
            "topolet_eviction_attempts_total",
            &[("action", "api"), ("result", "pdb_refused")],
        )
    };
    let first = refused()?;
    ensure!(
        first >= 1.0,
        "no PDB refusal counted before the bystander's eviction"
    );
    let ev = evicted_event(k, "bystander")?;
    let msg = ev.message.clone().unwrap_or_default();
    ensure!(
        msg.starts_with("The node was low on resource: pids. Threshold quantity: ")
            && msg.contains(", available: "),
        "{msg}"
    );
    // Under pressure: TopoletPIDPressure True and the NoSchedule taint.
    cond.wait("TopoletPIDPressure True", cluster::POD_TIMEOUT, |s| {
        status_sequence(s).last().map(String::as_str) == Some("True")
    })?;
    wait::until_true("the pid-pressure taint", cluster::POD_TIMEOUT, || {
        has_taint(k, "topolet.io/pid-pressure")
    })?;
    // Still under pressure, only protected pods left: each interval asks again (hog, then the
    // Guaranteed pod), is refused, and evicts nothing.
    wait::until_true(
        "two more intervals of refusals",
        cluster::POD_TIMEOUT,
        || Ok(refused()? >= first + 4.0),
    )?;
    ensure!(
        hog_watch.deleted_at().is_none()
            && hog_watch
                .seen()
                .iter()
                .all(|(_, v)| v.as_ref().is_some_and(|v| !v.deleting)),
        "the protected hog was evicted"
    );

    // The budget now allows one disruption: the hog goes, and the API server spends it.
    set_pdb_allowed(k, "protect", 2, 1)?;
    wait_evicted(k, "pid-hog", &hog_watch)?;
    let api: Api<PodDisruptionBudget> = Api::namespaced(k.client(), "default");
    let st = k
        .block_on(api.get("protect"))?
        .status
        .context("PDB without status")?;
    ensure!(
        st.disruptions_allowed == Some(0)
            && st
                .disrupted_pods
                .as_ref()
                .is_some_and(|d| d.contains_key("pid-hog")),
        "the eviction did not go through the budget: {st:?}"
    );
    // Pressure gone: the taint is removed and the condition clears; the Guaranteed pod stayed.
    wait::until_true(
        "the pid-pressure taint removed",
        cluster::POD_TIMEOUT,
        || Ok(!has_taint(k, "topolet.io/pid-pressure")?),
    )?;
    cond.wait(
        "TopoletPIDPressure False again",
        cluster::POD_TIMEOUT,
        |s| status_sequence(s).ends_with(&["True".to_string(), "False".to_string()]),
    )?;
    check_untouched(k, "g-sleeper", &g_watch)?;
    node.cluster.stop()?;
    Ok(())
}

/// Beside the real kubelet (its image GC off at 100%/99% and its `imagefs.available` eviction
/// threshold at 256Mi, hack/kube-node.sh): the runtime's root is a 1 GiB tmpfs, topolet's
/// `imagefs.available` threshold is two and a half filler images under what is free, and three
/// unused 96 MiB fillers are imported. topolet removes unused images, the pod stays Running in
/// the API, nothing is evicted, and the Node gets topolet's Normal `FreedDiskSpace` Event.
#[test]
fn unused_images_are_reclaimed_beside_the_kubelet_and_the_pod_stays_running() -> anyhow::Result<()>
{
    use topolet_integration::pressure::{fs_available, image_names, import_filler_image};
    use topolet_integration::stack::version_under_test;
    use topolet_integration::Stack;
    const MIB: u64 = 1 << 20;
    const FILLER_MIB: u64 = 96;
    let stack = Stack::start_with_env(
        &version_under_test(),
        &[("CONTAINERD_ROOT_SIZE_MB", "1024")],
    )?;
    let root = stack.dir().join("root");
    // Two and a half fillers' worth of the image filesystem: containerd keeps each imported
    // image twice (its content store's blob and the unpacked snapshot), containers/storage
    // (CRI-O) once (the unpacked layer; an imported archive's blobs are not kept).
    let copies = if stack.runtime().is_crio() { 1 } else { 2 };
    let threshold = fs_available(&root)?.saturating_sub(5 * copies * FILLER_MIB * MIB / 2);
    let extra = format!(
        "{}imagefs_path = {:?}\ncri_endpoint = {:?}\nimage_minimum_gc_age = \"0s\"\nimage_gc_high_threshold_percent = 100\nimage_gc_low_threshold_percent = 99\n",
        eviction_toml(&format!("\"imagefs.available\" = \"{threshold}\""), false),
        root.to_string_lossy(),
        stack.env("CRI_ENDPOINT")?
    );
    let mut node = KubeNode::start_with_api_on(stack, &extra, &ClusterOptions::default(), "")?;
    let k = &node.cluster;
    let g_watch = watch_pod(k, "g-sleeper")?;
    k.create_pod(pod("g-sleeper", json!({}), SLEEP, guaranteed()))?;
    k.wait_running("g-sleeper")?;
    let work = node.t.stack.work_dir("fillers")?;
    let unused = ["a", "b", "c"].map(|n| format!("localhost/topolet/filler-{n}:latest"));
    for name in &unused {
        import_filler_image(&node.t.stack, name, FILLER_MIB, &work)?;
    }
    let relieved = [("signal", "imagefs.available"), ("result", "relieved")];
    node.t.topolet.wait_metric(
        "topolet_node_reclaim_total",
        &relieved,
        1.0,
        cluster::POD_TIMEOUT,
    )?;
    let event = wait::until(
        "topolet's FreedDiskSpace Event on the Node",
        cluster::POD_TIMEOUT,
        || {
            Ok(k.node_events()?.into_iter().find(|e| {
                e.reason.as_deref() == Some("FreedDiskSpace")
                    && e.type_.as_deref() == Some("Normal")
                    && e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("topolet")
            }))
        },
    )?;
    let msg = event.message.clone().unwrap_or_default();
    ensure!(
        msg.starts_with("imagefs.available: removed ") && msg.ends_with("; no pod evicted"),
        "{msg}"
    );
    let addr = node.t.topolet.wait_metrics_address()?;
    let evicted = metric(&addr, "topolet_evictions_total", &[])?;
    let names = image_names(&node.t.stack)?;
    let gone: Vec<&String> = unused.iter().filter(|n| !names.contains(n)).collect();
    println!("beside the kubelet: threshold {threshold}, removed {gone:?}; Event: {msg}");
    ensure!(!gone.is_empty(), "no unused image removed: {names:?}");
    ensure!(evicted == 0.0, "{evicted} pods evicted");
    let p = k.get_pod("g-sleeper")?;
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    ensure!(phase == "Running", "g-sleeper is {phase}");
    ensure!(
        g_watch.seen().iter().all(|(_, v)| v
            .as_ref()
            .is_none_or(|v| !v.deleting && v.disruption.is_none())),
        "g-sleeper was disrupted: {:?}",
        g_watch.seen()
    );
    node.t.topolet.kill9()?;
    Ok(())
}
