//! topolet beside a real kubelet (v1.37, cgroupfs, `cpuManagerPolicy: none`) and API server: every
//! pod is created through the API as a user creates it, and each container's real cgroup files
//! and process are checked. The hand-built CRI suites stay for protocol corner cases.
//!
//! The node has 2 CPUs; topolet reserves CPU 0, so CPU 1 is the one exclusive CPU.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context};
use k8s_openapi::api::core::v1::{Event, Pod};
use serde_json::json;
use topolet_integration::books;
use topolet_integration::cluster::{self, ClusterOptions, KubeNode};
use topolet_integration::kube::{burstable_oom, BESTEFFORT_OOM};
use topolet_integration::manifests::{ctr, guaranteed, init_ctr, one_pod_per_class, pod, res};
use topolet_integration::observe::{self, CgroupValues};
use topolet_integration::{paths, wait};

const MI: u64 = 1 << 20;
const EXCLUSIVE_CPU: &str = "1";
const SHARED_ALL: &str = "0-1";
const SHARED_WITHOUT_EXCLUSIVE: &str = "0";

fn start_node() -> anyhow::Result<KubeNode> {
    KubeNode::start("", &ClusterOptions::default())
}

/// Waits until container `cname` of `pod` is on `cpus` (cgroup and process).
fn wait_cpuset(node: &KubeNode, pod: &Pod, cname: &str, cpus: &str) -> anyhow::Result<()> {
    let c = node.cluster.container(pod, cname)?;
    wait::until_true(
        &format!("container {cname} on CPUs {cpus}"),
        cluster::POD_TIMEOUT,
        || {
            let cg = observe::cgroup_cpuset(&c.created())?;
            let pid = node.t.stack.cri().pid(&c.id)?;
            Ok(cg == cpus && observe::cpus_allowed_list(pid)? == cpus)
        },
    )
}

/// The pod cgroup's CFS quota (cgroup v1 `cpu.cfs_quota_us`), and its shares.
fn pod_cgroup_cpu(cgroup_parent: &str) -> anyhow::Result<(i64, u64)> {
    let dir = std::path::Path::new(observe::CGROUP_ROOT)
        .join("cpu")
        .join(cgroup_parent.trim_start_matches('/'));
    let q = std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
        .with_context(|| format!("reading {}/cpu.cfs_quota_us", dir.display()))?;
    let s = std::fs::read_to_string(dir.join("cpu.shares"))
        .with_context(|| format!("reading {}/cpu.shares", dir.display()))?;
    Ok((q.trim().parse()?, s.trim().parse()?))
}

fn termination_message(pod: &Pod, cname: &str, init: bool) -> Option<String> {
    let st = pod.status.as_ref()?;
    let list = if init {
        st.init_container_statuses.as_ref()
    } else {
        st.container_statuses.as_ref()
    }?;
    let c = list.iter().find(|c| c.name == cname)?;
    let t = c
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.as_ref()))?;
    t.message.clone()
}

#[test]
fn every_qos_class_gets_the_kubelets_values_and_exclusive_cpus_come_and_go() -> anyhow::Result<()> {
    let node = start_node()?;
    let k = &node.cluster;
    let cap = observe::mem_capacity()?;

    for p in one_pod_per_class() {
        k.create_pod(p)?;
    }
    let be = k.wait_running("be")?;
    let bu = k.wait_running("bu")?;
    let gf = k.wait_running("gf")?;

    let expect = |cpus: &str, shares, quota, mem: Option<u64>| CgroupValues {
        cpuset_cpus: cpus.into(),
        cpuset_mems: "0".into(),
        cpu_shares: shares,
        cfs_quota_us: quota,
        cfs_period_us: 100_000,
        memory_limit: mem,
        pids_max: Some(1024),
    };
    let (cg, pr) = node.observe(&be, "main")?;
    assert_eq!(cg, expect(SHARED_ALL, 2, -1, None), "BestEffort cgroup");
    assert_eq!(pr.oom_score_adj, BESTEFFORT_OOM, "BestEffort oom_score_adj");
    let (cg, pr) = node.observe(&bu, "main")?;
    assert_eq!(
        cg,
        expect(SHARED_ALL, 102, 50_000, Some(64 * MI)),
        "Burstable cgroup"
    );
    assert_eq!(
        pr.oom_score_adj,
        burstable_oom(32 * MI, cap),
        "Burstable oom_score_adj (capacity {cap} B, /proc/meminfo as the kubelet's cadvisor)"
    );
    let (cg, pr) = node.observe(&gf, "main")?;
    assert_eq!(
        cg,
        expect(SHARED_ALL, 512, 50_000, Some(64 * MI)),
        "fractional Guaranteed: shared pool"
    );
    // The kubelet asks -997; topolet sends the runtime's floor, 0 here (containerd would clamp
    // it to its own 0 too, restrict_oom_score_adj; CRI-O clamps nothing).
    assert_eq!(pr.oom_score_adj, 0, "Guaranteed oom_score_adj, clamped");
    // topolet's capacity is the kubelet's: the Node's status.capacity.memory (cadvisor's
    // /proc/meminfo MemTotal), not the sum of the NUMA nodes' meminfo.
    let node_mem = k
        .node()?
        .status
        .and_then(|s| s.capacity)
        .and_then(|c| c.get("memory").map(|q| q.0.clone()))
        .context("node status.capacity.memory")?;
    let status = node.t.topolet.status()?;
    assert_eq!(
        status["machine"]["memory_bytes"].as_u64(),
        Some(cap),
        "topolet status memory = /proc/meminfo MemTotal: {}",
        status["machine"]
    );
    assert_eq!(
        node_mem,
        format!("{}Ki", cap / 1024),
        "the kubelet's capacity is the same"
    );

    // An integer Guaranteed pod: exclusive CPU 1, no CFS quota (container and pod level), and
    // everybody else leaves CPU 1.
    k.create_pod(pod(
        "gx",
        vec![ctr("main", guaranteed("1", "64Mi"))],
        vec![],
    ))?;
    let gx = k.wait_running("gx")?;
    let (cg, pr) = node.observe(&gx, "main")?;
    assert_eq!(
        cg,
        expect(EXCLUSIVE_CPU, 1024, -1, Some(64 * MI)),
        "exclusive"
    );
    assert_eq!(pr.cpus_allowed_list, EXCLUSIVE_CPU);
    let gx_ctr = k.container(&gx, "main")?;
    let (pod_quota, pod_shares) = pod_cgroup_cpu(&gx_ctr.cgroup_parent)?;
    assert_eq!(
        (pod_quota, pod_shares),
        (-1, 1024),
        "the exclusive pod's own cgroup has no quota (as the kubelet's static policy leaves it)"
    );
    for (p, name) in [(&be, "be"), (&bu, "bu"), (&gf, "gf")] {
        wait_cpuset(&node, p, "main", SHARED_WITHOUT_EXCLUSIVE)
            .with_context(|| format!("pod {name} leaves the exclusive CPU"))?;
    }
    let (ex, shared) = books::status_exclusive(&node.t.config.admin_socket)?;
    assert_eq!(ex.get(&gx_ctr.id).map(String::as_str), Some(EXCLUSIVE_CPU));
    assert_eq!(shared, SHARED_WITHOUT_EXCLUSIVE);

    // A second integer pod is refused: the kubelet shows CreateContainerError with topolet's
    // reason in `kubectl describe pod`. The Burstable and fractional pods go first so that the
    // scheduler and the kubelet's admission (2 allocatable CPUs: topolet's reserved CPU is not
    // subtracted on this kubelet) let it through to topolet.
    k.delete_pod("bu")?;
    k.delete_pod("gf")?;
    k.create_pod(pod(
        "gx2",
        vec![ctr("main", guaranteed("1", "64Mi"))],
        vec![],
    ))?;
    let gx2 = k.wait_pod("gx2", "CreateContainerError", |p| {
        cluster::waiting(p, "main").is_some_and(|(r, _)| r == "CreateContainerError")
    })?;
    let (_, msg) = cluster::waiting(&gx2, "main").context("gx2 waits")?;
    ensure!(
        msg.contains("topolet") && msg.contains("exclusive"),
        "the refusal names topolet and what it could not give: {msg:?}"
    );
    let describe = k.kubectl(&["describe", "pod", "gx2"])?;
    ensure!(
        describe.contains("CreateContainerError") && describe.contains("topolet"),
        "kubectl describe pod gx2 shows the refusal:\n{describe}"
    );

    // Deleting the holder releases CPU 1, and the refused pod is created on one of the kubelet's
    // retries, with CPU 1.
    k.delete_pod("gx")?;
    let gx2 = k.wait_pod("gx2", "created on a retry", cluster::all_ready)?;
    wait_cpuset(&node, &gx2, "main", EXCLUSIVE_CPU)?;
    wait_cpuset(&node, &be, "main", SHARED_WITHOUT_EXCLUSIVE)?;
    k.delete_pod("gx2")?;
    wait_cpuset(&node, &be, "main", SHARED_ALL).context("pod be back on CPU 1")?;
    let (ex, shared) = books::status_exclusive(&node.t.config.admin_socket)?;
    assert!(ex.is_empty(), "no exclusive grant left: {ex:?}");
    assert_eq!(shared, SHARED_ALL);
    Ok(())
}

/// Waits until pod `name` has a topolet Warning Event counted at least `count` times (the
/// kubelet's retries), and checks it is the only Warning object (repeats aggregate into it).
fn the_one_warning(
    k: &cluster::Cluster,
    name: &str,
    count: i32,
    what: &str,
) -> anyhow::Result<(Event, Vec<Event>)> {
    let events = wait::until(
        &format!("a Warning Event on {name} counted {count} times ({what})"),
        cluster::POD_TIMEOUT,
        || {
            let ev = topolet_events(k, name)?;
            let counted = ev
                .iter()
                .any(|e| e.type_.as_deref() == Some("Warning") && e.count.unwrap_or(0) >= count);
            Ok(counted.then_some(ev))
        },
    )
    .with_context(|| k.pod_summary(name))?;
    let warnings: Vec<&Event> = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one Event object for {what}:\n{}",
        describe_events(&events)
    );
    Ok((warnings[0].clone(), events))
}

/// topolet's own Events on pod `name` (source.component topolet), oldest first.
fn topolet_events(k: &cluster::Cluster, name: &str) -> anyhow::Result<Vec<Event>> {
    Ok(k.pod_events(name)?
        .into_iter()
        .filter(|e| e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("topolet"))
        .collect())
}

fn describe_events(events: &[Event]) -> String {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {} x{}: {}",
                e.type_.as_deref().unwrap_or("?"),
                e.reason.as_deref().unwrap_or("?"),
                e.count.unwrap_or(0),
                e.message.as_deref().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// With `[kubernetes]` on (the cluster's `topolet` user, bound to deploy/kubernetes/rbac.yaml's
/// ClusterRole only): an exclusive grant is a Normal Event on its pod, a refused exclusive pod a
/// Warning Event with the reason and what is free per NUMA node, and the kubelet's retries count
/// into that one Event instead of creating more.
#[test]
fn refusals_and_exclusive_grants_are_events_on_the_pod() -> anyhow::Result<()> {
    let mut node = KubeNode::start_with_api("", &ClusterOptions::default())?;
    let k = &node.cluster;
    let node_name = k.node_name().to_string();

    // The grant: a Normal Event naming the CPU and the memory node.
    let mut c = ctr("main", guaranteed("1", "64Mi"));
    c["resizePolicy"] = json!([{"resourceName": "cpu", "restartPolicy": "NotRequired"}]);
    k.create_pod(pod("gx", vec![c], vec![]))?;
    let gx = k.wait_running("gx")?;
    wait_cpuset(&node, &gx, "main", EXCLUSIVE_CPU)?;
    let grants = wait::until("the grant's Event on pod gx", cluster::POD_TIMEOUT, || {
        let ev = topolet_events(k, "gx")?;
        Ok(ev
            .iter()
            .any(|e| e.reason.as_deref() == Some("ExclusiveCPUsAssigned"))
            .then_some(ev))
    })?;
    let grant = grants
        .iter()
        .find(|e| e.reason.as_deref() == Some("ExclusiveCPUsAssigned"))
        .context("grant event")?;
    assert_eq!(grant.type_.as_deref(), Some("Normal"));
    assert_eq!(
        grant.message.as_deref(),
        Some("container main got 1 exclusive CPU 1, memory nodes 0"),
        "{}",
        describe_events(&grants)
    );
    let uid = gx.metadata.uid.clone().context("gx uid")?;
    assert_eq!(grant.involved_object.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(grant.involved_object.kind.as_deref(), Some("Pod"));
    assert_eq!(
        grant.source.as_ref().and_then(|s| s.host.as_deref()),
        Some(node_name.as_str())
    );
    assert_eq!(grant.reporting_component.as_deref(), Some("topolet"));

    // The refusal: the scheduler and the kubelet admit a second 1-CPU pod (2 allocatable CPUs),
    // topolet has no exclusive CPU left. The kubelet retries the creation; each refusal is the
    // same, so the one Warning Event's count grows.
    k.create_pod(pod(
        "gx2",
        vec![ctr("main", guaranteed("1", "64Mi"))],
        vec![],
    ))?;
    let (w, events) = the_one_warning(k, "gx2", 2, "the repeated refusal")?;
    assert_eq!(
        w.reason.as_deref(),
        Some("InsufficientExclusiveCPUs"),
        "{}",
        describe_events(&events)
    );
    let msg = w.message.clone().unwrap_or_default();
    ensure!(
        msg.contains("container main of pod default/gx2 asks 1 exclusive CPU")
            && msg.contains("free per NUMA node: node0 0"),
        "the message names the request and the free CPUs per NUMA node: {msg:?}"
    );
    // Every (reason, message) is one object.
    let mut seen = BTreeSet::new();
    for e in &events {
        ensure!(
            seen.insert((e.reason.clone(), e.message.clone())),
            "two Event objects for one (reason, message):\n{}",
            describe_events(&events)
        );
    }
    // The kubelet's own Event shows the same refusal text (`kubectl describe pod`).
    let describe = k.kubectl(&["describe", "pod", "gx2"])?;
    ensure!(
        describe.contains("InsufficientExclusiveCPUs"),
        "kubectl describe pod gx2 shows topolet's Event:\n{describe}"
    );

    k.delete_pod("gx2")?;

    // A refused in-place resize (1 → 2 exclusive CPUs): the kubelet retries it about every
    // second; the retries count into one Warning Event on the pod.
    resize_cpu(k, "gx", "2", "2")?;
    let (w, _) = the_one_warning(k, "gx", 3, "the retried resize")?;
    assert_eq!(w.reason.as_deref(), Some("InsufficientExclusiveCPUs"));
    let msg = w.message.clone().unwrap_or_default();
    ensure!(
        msg.contains("asks 2 exclusive CPUs (in-place resize); free per NUMA node: node0 0"),
        "the resize's message: {msg:?}"
    );
    // Nothing topolet asked the API was refused (its RBAC is exactly what it uses).
    let addr = node.t.topolet.wait_metrics_address()?;
    let metrics = topolet_integration::topolet::metrics_text(&addr)?;
    ensure!(
        !metrics
            .lines()
            .any(|l| l.starts_with("topolet_kube_api_errors_total{")),
        "no failed API request:\n{metrics}"
    );
    ensure!(
        metrics.contains("topolet_kube_client_enabled 1"),
        "client on:\n{metrics}"
    );

    resize_cpu(k, "gx", "1", "1")?;
    wait_resized(&node, "gx", "main", "1")?;
    k.delete_pod("gx")?;
    Ok(())
}

#[test]
fn init_containers_hand_their_cpus_to_the_app_and_sidecars_keep_theirs() -> anyhow::Result<()> {
    let node = start_node()?;
    let k = &node.cluster;

    // A classic init container: exclusive while it runs, then the app gets the same CPU.
    k.create_pod(pod(
        "init",
        vec![ctr("app", guaranteed("1", "64Mi"))],
        vec![init_ctr("setup", guaranteed("1", "64Mi"))],
    ))?;
    let p = k.wait_running("init")?;
    let msg = termination_message(&p, "setup", true).context("init container message")?;
    assert_eq!(
        msg.split_whitespace().last(),
        Some(EXCLUSIVE_CPU),
        "the init container ran on the exclusive CPU: {msg:?}"
    );
    wait_cpuset(&node, &p, "app", EXCLUSIVE_CPU)?;
    k.delete_pod("init")?;

    // A sidecar (restartable init container) keeps its exclusive CPU beside a fractional app.
    let mut sidecar = ctr("proxy", guaranteed("1", "64Mi"));
    sidecar["restartPolicy"] = json!("Always");
    k.create_pod(pod(
        "sidecar",
        vec![ctr("app", guaranteed("500m", "64Mi"))],
        vec![sidecar],
    ))?;
    let p = k.wait_running("sidecar")?;
    wait_cpuset(&node, &p, "proxy", EXCLUSIVE_CPU)?;
    wait_cpuset(&node, &p, "app", SHARED_WITHOUT_EXCLUSIVE)?;
    k.delete_pod("sidecar")?;
    let (ex, _) = books::status_exclusive(&node.t.config.admin_socket)?;
    assert!(ex.is_empty(), "no exclusive grant left: {ex:?}");
    Ok(())
}

/// Asks an in-place resize of container `main`'s CPU request and limit.
fn resize_cpu(k: &cluster::Cluster, name: &str, req: &str, lim: &str) -> anyhow::Result<Pod> {
    k.resize(
        name,
        json!({"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": req}, "limits": {"cpu": lim}}}]}}),
    )
}

/// Waits until the pod's resize is done: the kubelet reports the new resources as allocated and
/// no PodResizePending/PodResizeInProgress condition remains.
fn wait_resized(node: &KubeNode, name: &str, cname: &str, cpu_limit: &str) -> anyhow::Result<Pod> {
    node.cluster
        .wait_pod(name, &format!("resized to cpu limit {cpu_limit}"), |p| {
            let st = p.status.as_ref();
            let actual = st
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.name == cname))
                .and_then(|c| c.resources.as_ref())
                .and_then(|r| r.limits.as_ref())
                .and_then(|l| l.get("cpu"))
                .map(|q| q.0.clone());
            actual.as_deref() == Some(cpu_limit)
                && cluster::condition(p, "PodResizeInProgress").is_none()
                && cluster::condition(p, "PodResizePending").is_none()
        })
}

#[test]
fn in_place_resize_of_burstable_and_guaranteed_pods_and_a_refused_one() -> anyhow::Result<()> {
    let node = start_node()?;
    let k = &node.cluster;

    let mut c = ctr("main", res("100m", "500m", "32Mi", "64Mi"));
    c["resizePolicy"] = json!([{"resourceName": "cpu", "restartPolicy": "NotRequired"}]);
    k.create_pod(pod("bu", vec![c], vec![]))?;
    let mut c = ctr("main", guaranteed("500m", "64Mi"));
    c["resizePolicy"] = json!([{"resourceName": "cpu", "restartPolicy": "NotRequired"}]);
    k.create_pod(pod("gf", vec![c], vec![]))?;
    let bu = k.wait_running("bu")?;
    let gf = k.wait_running("gf")?;

    for (p, name, req, lim, want, what) in [
        (
            &bu,
            "bu",
            "200m",
            "800m",
            (204, 80_000),
            "Burstable resized in place",
        ),
        (
            &gf,
            "gf",
            "700m",
            "700m",
            (716, 70_000),
            "fractional Guaranteed resized, still shared",
        ),
    ] {
        resize_cpu(k, name, req, lim)?;
        wait_resized(&node, name, "main", lim)?;
        let (cg, _) = node.observe(p, "main")?;
        assert_eq!(
            (cg.cpu_shares, cg.cfs_quota_us, cg.cpuset_cpus.as_str()),
            (want.0, want.1, SHARED_ALL),
            "{what}"
        );
    }
    k.delete_pod("gf")?;
    k.delete_pod("bu")?;

    // An exclusive pod asked to grow to 2 CPUs on a node with one exclusive CPU: refused. The
    // user sees why on the pod, and reverting the resize leaves the pod as it was.
    let mut c = ctr("main", guaranteed("1", "64Mi"));
    c["resizePolicy"] = json!([{"resourceName": "cpu", "restartPolicy": "NotRequired"}]);
    k.create_pod(pod("gx", vec![c], vec![]))?;
    let gx = k.wait_running("gx")?;
    wait_cpuset(&node, &gx, "main", EXCLUSIVE_CPU)?;
    let gx_ctr = k.container(&gx, "main")?;
    let before = pod_cgroup_cpu(&gx_ctr.cgroup_parent)?;
    resize_cpu(k, "gx", "2", "2")?;
    let refused = k.wait_pod("gx", "resize refused (PodResizeInProgress, Error)", |p| {
        cluster::condition(p, "PodResizeInProgress").is_some_and(|(_, r, _)| r == "Error")
    })?;
    let (_, _, msg) = cluster::condition(&refused, "PodResizeInProgress").context("condition")?;
    ensure!(
        msg.contains("topolet"),
        "the refused resize names topolet's reason: {msg:?}"
    );
    let (cg, _) = node.observe(&gx, "main")?;
    assert_eq!(
        (cg.cpuset_cpus.as_str(), cg.cfs_quota_us, cg.cpu_shares),
        (EXCLUSIVE_CPU, -1, 1024),
        "the container keeps what it had"
    );
    resize_cpu(k, "gx", "1", "1")?;
    wait_resized(&node, "gx", "main", "1")?;
    let gx_ctr_after = k.container(&k.get_pod("gx")?, "main")?;
    assert_eq!(
        gx_ctr_after.id, gx_ctr.id,
        "resized in place, not restarted"
    );
    wait::until_true(
        "the pod cgroup back to its pre-resize values",
        cluster::POD_TIMEOUT,
        || Ok(pod_cgroup_cpu(&gx_ctr.cgroup_parent)? == before),
    )?;
    wait_cpuset(&node, &gx, "main", EXCLUSIVE_CPU)?;
    Ok(())
}

/// Container ids of the pods, each with its cpuset.
fn cpusets(node: &KubeNode, pods: &[(&str, &str)]) -> anyhow::Result<Vec<(String, String)>> {
    pods.iter()
        .map(|(name, cname)| {
            let p = node.cluster.get_pod(name)?;
            let c = node.cluster.container(&p, cname)?;
            Ok((c.id.clone(), observe::cgroup_cpuset(&c.created())?))
        })
        .collect()
}

#[test]
fn restarts_of_topolet_containerd_and_kubelet_and_a_pod_created_while_topolet_is_down(
) -> anyhow::Result<()> {
    let mut node = start_node()?;
    let runtime = node.t.stack.describe();

    // topolet down: the kubelet's pod starts without it (NRI lets the container through) and is
    // taken over at the next Synchronize: exclusive CPU, no quota, others moved off CPU 1.
    // Where the runtime cannot start a Guaranteed container topolet did not adjust, that part is
    // skipped by name and gx is created with topolet running; the restarts are tested as written.
    node.cluster.create_pod(pod(
        "bu",
        vec![ctr("main", res("100m", "", "", ""))],
        vec![],
    ))?;
    node.cluster.wait_running("bu")?;
    let while_down = !topolet_integration::stack::skipped_on_crio_without_oom_headroom(
        &node.t.stack,
        "restarts_of_topolet_containerd_and_kubelet_and_a_pod_created_while_topolet_is_down \
         (only its pod created while topolet is down)",
    )?;
    if while_down {
        node.t
            .topolet
            .terminate(topolet_integration::topolet::TERMINATE_TIMEOUT)?;
    }
    node.cluster.create_pod(pod(
        "gx",
        vec![ctr("main", guaranteed("1", "64Mi"))],
        vec![],
    ))?;
    let gx = node.cluster.wait_running("gx")?;
    if while_down {
        node.t.topolet.restart()?;
        node.t.topolet.wait_nri_synchronized(1)?;
    }
    wait_cpuset(&node, &gx, "main", EXCLUSIVE_CPU)?;
    let (cg, _) = node.observe(&gx, "main")?;
    assert_eq!(
        cg.cfs_quota_us, -1,
        "taken over at Synchronize (or granted at creation): quota removed"
    );
    let bu = node.cluster.get_pod("bu")?;
    wait_cpuset(&node, &bu, "main", SHARED_WITHOUT_EXCLUSIVE)?;

    let pods = [("bu", "main"), ("gx", "main")];
    let want = cpusets(&node, &pods)?;
    let restarts = |node: &KubeNode| -> anyhow::Result<BTreeSet<i32>> {
        pods.iter()
            .map(|(n, c)| {
                let p = node.cluster.get_pod(n)?;
                let cs = p
                    .status
                    .and_then(|s| s.container_statuses)
                    .unwrap_or_default();
                Ok(cs
                    .iter()
                    .find(|s| s.name == *c)
                    .map(|s| s.restart_count)
                    .unwrap_or(-1))
            })
            .collect::<anyhow::Result<_>>()
    };
    assert_eq!(restarts(&node)?, BTreeSet::from([0]));

    // topolet restart: same containers, same cpusets.
    node.t.topolet.kill9()?;
    node.t.topolet.restart()?;
    node.t.topolet.wait_nri_synchronized(1)?;
    assert_eq!(cpusets(&node, &pods)?, want, "after a topolet restart");

    // Runtime restart (containerd or crio): topolet re-registers and re-synchronizes; nothing
    // moves.
    let connects = node.t.topolet.nri_connects()?;
    node.t.stack.restart_runtime()?;
    node.t.topolet.wait_nri_synchronized(connects + 1)?;
    node.cluster.wait_running("gx")?;
    assert_eq!(cpusets(&node, &pods)?, want, "after a restart of {runtime}");

    // kubelet restart: it adopts the running containers; nothing is recreated or moved.
    node.cluster.restart_kubelet()?;
    node.cluster.wait_running("gx")?;
    node.cluster.wait_running("bu")?;
    assert_eq!(cpusets(&node, &pods)?, want, "after a kubelet restart");
    assert_eq!(
        restarts(&node)?,
        BTreeSet::from([0]),
        "no container restarted"
    );

    node.cluster.delete_pod("gx")?;
    wait_cpuset(&node, &bu, "main", SHARED_ALL)?;
    node.cluster.stop()?;
    Ok(())
}

#[test]
fn a_kubelet_with_the_static_cpu_manager_keeps_its_pins_and_topolet_leaves_them_alone(
) -> anyhow::Result<()> {
    let node = KubeNode::start(
        "",
        &ClusterOptions {
            cpu_manager_policy: "static".into(),
            reserved_cpus: Some("0".into()),
            ..ClusterOptions::default()
        },
    )?;
    if topolet_integration::stack::skipped_on_crio_without_oom_headroom(
        &node.t.stack,
        "a_kubelet_with_the_static_cpu_manager_keeps_its_pins_and_topolet_leaves_them_alone",
    )? {
        return Ok(());
    }
    let k = &node.cluster;
    // reservedSystemCPUs 0 leaves 1 allocatable CPU: the exclusive pod and a BestEffort one.
    k.create_pod(pod("bu", vec![ctr("main", json!({}))], vec![]))?;
    k.create_pod(pod(
        "gx",
        vec![ctr("main", guaranteed("1", "64Mi"))],
        vec![],
    ))?;
    let gx = k.wait_running("gx")?;
    let bu = k.wait_running("bu")?;
    // The kubelet's static policy pinned gx to CPU 1 and the shared pod to the rest.
    wait_cpuset(&node, &gx, "main", EXCLUSIVE_CPU)?;
    wait_cpuset(&node, &bu, "main", SHARED_WITHOUT_EXCLUSIVE)?;
    let state = std::fs::read_to_string(k.dir().join("kubelet/cpu_manager_state"))
        .context("reading the kubelet's cpu_manager_state")?;
    let gx_uid = gx.metadata.uid.clone().unwrap_or_default();
    ensure!(
        state.contains(&gx_uid),
        "the kubelet's own CPU manager holds gx: {state}"
    );
    // topolet granted nothing: the kubelet owns the cpusets here.
    let (ex, _) = books::status_exclusive(&node.t.config.admin_socket)?;
    assert!(ex.is_empty(), "topolet granted nothing: {ex:?}");
    // ... leaves both containers alone, counts them and says so, naming the cpuset it found.
    let status = node.t.topolet.status()?;
    assert_eq!(
        status["left_alone_containers"].as_u64(),
        Some(2),
        "topolet status counts both kubelet-pinned containers: {status}"
    );
    // The line names the cpuset the kubelet gave at creation, what runc was given (the bundle's
    // config.json): gx's CPU 1; for bu the shared pool as it was then, `0` or `0-1` depending on
    // whether the kubelet had admitted gx yet (its reconcile moves bu to `0` later).
    let log = node.t.topolet.log();
    for (p, allowed) in [
        (&gx, &[EXCLUSIVE_CPU][..]),
        (&bu, &[SHARED_WITHOUT_EXCLUSIVE, SHARED_ALL][..]),
    ] {
        let name = p.metadata.name.clone().unwrap_or_default();
        let c = k.container(p, "main")?;
        let cpus = observe::bundle_resources(&observe::bundle_spec(&node.t.stack, &c.id)?)?
            .cpus
            .unwrap_or_default();
        ensure!(
            allowed.contains(&cpus.as_str()),
            "the kubelet created {name} on {cpus:?}, want one of {allowed:?}"
        );
        ensure!(
            log.lines()
                .any(|l| l.contains("leaves this container alone")
                    && l.contains(&format!("pod=default/{name} "))
                    && topolet_integration::field(l, "cpus").as_deref() == Some(cpus.as_str())),
            "topolet says it leaves pod {name} (created on cpus {cpus}) to the kubelet's CPU manager"
        );
    }
    Ok(())
}

/// The kubelet must not change the host: sysctls it would write, mounts, iptables, listeners.
#[test]
fn the_cluster_leaves_the_host_as_it_found_it() -> anyhow::Result<()> {
    let before = host_snapshot()?;
    let (ports, base, ours) = {
        let node = start_node()?;
        let ours = [
            node.t.stack.dir().to_path_buf(),
            node.cluster.dir().to_path_buf(),
        ];
        let base = node
            .cluster
            .cgroup_root()
            .trim_start_matches('/')
            .to_string();
        node.cluster
            .create_pod(pod("be", vec![ctr("main", json!({}))], vec![]))?;
        node.cluster.wait_running("be")?;
        // While it runs, the kubelet's view is the one it wanted, the host's is unchanged.
        let during = host_snapshot()?;
        assert_eq!(
            during.sysctls, before.sysctls,
            "sysctls while the kubelet runs"
        );
        assert_eq!(
            during.iptables, before.iptables,
            "iptables tables while the kubelet runs"
        );
        let ports = node.cluster.ports()?;
        assert!(
            ports.iter().all(|p| during.listeners.contains(p)),
            "the cluster listens on {ports:?}"
        );
        (ports, base, ours)
    };
    let after = host_snapshot()?;
    assert_eq!(after.sysctls, before.sysctls, "sysctls");
    assert_eq!(
        without_other_stacks(&after.mounts, &ours),
        without_other_stacks(&before.mounts, &ours),
        "mount table"
    );
    assert_eq!(after.iptables, before.iptables, "iptables tables");
    // Other stacks may come and go on this machine: the cluster's own ports must be free again.
    let left: Vec<_> = ports
        .iter()
        .filter(|p| after.listeners.contains(*p))
        .collect();
    assert!(
        left.is_empty(),
        "ports still listened on after stop: {left:?}"
    );
    // Every top-level cgroup is as it was, apart from other test stacks' (`topolet-test-*`, which
    // may come and go on this machine); this stack's and its kubelet's are gone.
    let foreign = |set: &BTreeSet<String>| -> BTreeSet<String> {
        set.iter()
            .filter(|c| {
                !c.rsplit('/')
                    .next()
                    .is_some_and(|n| n.starts_with("topolet-test-"))
            })
            .cloned()
            .collect()
    };
    assert_eq!(
        foreign(&after.cgroups),
        foreign(&before.cgroups),
        "top-level cgroups"
    );
    let ours: Vec<_> = after
        .cgroups
        .iter()
        .filter(|c| c.ends_with(&base))
        .collect();
    assert!(
        ours.is_empty(),
        "the node's cgroup root is removed: {ours:?}"
    );
    for p in HOST_PATHS {
        assert_eq!(
            std::path::Path::new(p).exists(),
            before.paths.contains(p),
            "{p} untouched"
        );
    }
    Ok(())
}

/// `mounts` without those of other test stacks on this machine (hack/test.sh runs another lane
/// beside this suite): mounts under another scratch directory of `<target>/it` than this test's
/// own (`ours`: its stack's and its cluster's) come and go with that stack, e.g. containerd's
/// temporary mounts under its `root/tmpmounts` while it unpacks an image. This test's own are
/// kept: one it left behind is still seen.
fn without_other_stacks(mounts: &BTreeSet<String>, ours: &[PathBuf]) -> BTreeSet<String> {
    let scratch = paths::target_dir().join("it");
    let scratch = std::fs::canonicalize(&scratch).unwrap_or(scratch);
    let ours: Vec<PathBuf> = ours
        .iter()
        .map(|d| {
            scratch.join(
                d.file_name()
                    .map(Path::new)
                    .unwrap_or_else(|| Path::new("")),
            )
        })
        .collect();
    mounts
        .iter()
        .filter(|m| {
            let m = Path::new(m.as_str());
            !m.starts_with(&scratch) || ours.iter().any(|o| m.starts_with(o))
        })
        .cloned()
        .collect()
}

/// Host paths the kubelet or the runtime would create by default, which must not appear: the
/// kubelet's (container log links, root dir, volume plugin dir, kubectl's cache) and CRI-O's
/// default storage, configuration and run directories (containers/storage's
/// `/var/lib/containers`, `/etc/crio`, `/run/crio`; every path of hack/crio.sh's is under its DIR).
const HOST_PATHS: [&str; 7] = [
    "/var/log/containers",
    "/var/lib/kubelet",
    "/usr/libexec/kubernetes",
    "/root/.kube",
    "/var/lib/containers",
    "/etc/crio",
    "/run/crio",
];

#[derive(Debug)]
struct HostSnapshot {
    sysctls: Vec<(String, String)>,
    mounts: BTreeSet<String>,
    iptables: String,
    listeners: BTreeSet<u16>,
    cgroups: BTreeSet<String>,
    paths: BTreeSet<&'static str>,
}

fn host_snapshot() -> anyhow::Result<HostSnapshot> {
    let sysctls = [
        "vm/overcommit_memory",
        "vm/panic_on_oom",
        "kernel/panic",
        "kernel/panic_on_oops",
        "kernel/keys/root_maxkeys",
        "kernel/keys/root_maxbytes",
    ]
    .iter()
    .map(|k| {
        let v = std::fs::read_to_string(format!("/proc/sys/{k}"))
            .with_context(|| format!("reading /proc/sys/{k}"))?;
        Ok((k.to_string(), v.trim().to_string()))
    })
    .collect::<anyhow::Result<_>>()?;
    // Mount points (field 5 of mountinfo), without the rootfs and shm mounts of containerd
    // stacks' own state dirs, which come and go with every container (any stack's, not only
    // this test's: others may run on the machine).
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| !m.contains("/state/io.containerd.") && !m.starts_with("/run/containerd"))
        .collect();
    let iptables = std::fs::read_to_string("/proc/net/ip_tables_names").unwrap_or_default()
        + &std::fs::read_to_string("/proc/net/ip6_tables_names").unwrap_or_default();
    // Listening TCP ports (state 0A), from the local address column `IP:PORT` in hex.
    let listeners = std::fs::read_to_string("/proc/net/tcp")?
        .lines()
        .skip(1)
        .filter(|l| l.split_whitespace().nth(3) == Some("0A"))
        .filter_map(|l| {
            let local = l.split_whitespace().nth(1)?;
            u16::from_str_radix(local.rsplit(':').next()?, 16).ok()
        })
        .collect();
    let mut cgroups = BTreeSet::new();
    for h in std::fs::read_dir(observe::CGROUP_ROOT)? {
        let h = h?.path();
        if let Ok(entries) = std::fs::read_dir(&h) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    cgroups.insert(e.path().to_string_lossy().into_owned());
                }
            }
        }
    }
    let paths = HOST_PATHS
        .into_iter()
        .filter(|p| std::path::Path::new(p).exists())
        .collect();
    Ok(HostSnapshot {
        sysctls,
        mounts,
        iptables,
        listeners,
        cgroups,
        paths,
    })
}
