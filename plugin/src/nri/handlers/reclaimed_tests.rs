//! Unit tests of batch containers in the handlers (`super::reclaimed`): the handlers called
//! directly on a `TopoletPlugin` of the synthetic machine of `super::tests` (8 CPUs, CPU 0
//! reserved: the pool is CPUs 1-7), pods known from a pod directory fed by hand, and a cgroup
//! freezer hierarchy in a temporary tree.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::runtime::watcher;
use serde_json::json;

use super::*;
use crate::cluster::pod_directory::PodDirectory;
use crate::nri::view::tests::{container, sandbox};
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::SyntheticSpec;

const RES: &str = "topolet.io/reclaimed-cpu";
const GIB: i64 = 1 << 30;

struct Node {
    plugin: Arc<TopoletPlugin>,
    dir: tempfile::TempDir,
    pods: PodDirectory,
}

fn node() -> Node {
    node_with(|_| {})
}

/// [`node`] with `change` applied to its configuration.
fn node_with(change: impl FnOnce(&mut Config)) -> Node {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = Config::default();
    c.cpu.reserved_cpus = Some("0".into());
    c.qos.oom_score_adj_floor = Some(0);
    c.state.dir = dir.path().to_path_buf();
    c.reclaimed.enabled = true;
    change(&mut c);
    let mut plugin = TopoletPlugin::new(c, SyntheticSpec::TWO_SOCKETS_SMT.build()).expect("plugin");
    plugin.set_proc_root(dir.path().join("proc"));
    plugin.set_sysfs_root(dir.path().join("sys"));
    // The freezer hierarchy, as mountinfo names it, under the sysfs root.
    fs::create_dir_all(dir.path().join("proc/self")).expect("mkdir");
    fs::write(
        dir.path().join("proc/self/mountinfo"),
        "36 25 0:31 / /sys/fs/cgroup/freezer rw,relatime shared:15 - cgroup cgroup rw,freezer\n\
         37 25 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:16 - cgroup cgroup rw,cpu,cpuacct\n",
    )
    .expect("mountinfo");
    let pods = PodDirectory::new(plugin.metrics().clone());
    pods.handle(watcher::Event::Init);
    pods.handle(watcher::Event::InitDone);
    plugin.set_pod_directory(pods.clone(), Duration::ZERO);
    Node {
        plugin: Arc::new(plugin),
        dir,
        pods,
    }
}

impl Node {
    fn freezer_state(&self, id: &str, uid: &str) -> PathBuf {
        self.dir.path().join(format!(
            "sys/fs/cgroup/freezer/kubepods/besteffort/pod{uid}/{id}/freezer.state"
        ))
    }

    /// A batch pod `uid` asking for `millis`, known to the pod directory, its container's
    /// freezer file in place.
    fn batch(&self, uid: &str, millis: u64) -> (api::PodSandbox, api::Container) {
        let r = json!({RES: millis.to_string()});
        let pod: ApiPod = serde_json::from_value(json!({
            "metadata": {"name": format!("pod-{uid}"), "namespace": "default", "uid": uid},
            "spec": {"nodeName": "n", "containers": [{"name": "app",
                "resources": {"requests": r, "limits": r}}]}
        }))
        .expect("pod");
        self.pods.handle(watcher::Event::Apply(pod));
        let sb = sandbox(uid, &format!("/kubepods/besteffort/pod{uid}"));
        let mut c = container("app", 2, 0, 0, 1000);
        c.id = format!("{uid}-app");
        c.pod_sandbox_id = sb.id.clone();
        let mut linux = c.linux.clone().unwrap_or_default();
        linux.cgroups_path = format!("/kubepods/besteffort/pod{uid}/{}", c.id);
        c.linux = protobuf::MessageField::some(linux);
        let state = self.freezer_state(&c.id, uid);
        fs::create_dir_all(state.parent().unwrap_or(Path::new("/"))).expect("mkdir");
        fs::write(&state, "THAWED").expect("freezer.state");
        (sb, c)
    }

    /// The container's `cpu.cfs_quota_us` in the cpu hierarchy, created holding `-1`.
    fn quota_file(&self, id: &str, uid: &str) -> PathBuf {
        let f = self.dir.path().join(format!(
            "sys/fs/cgroup/cpu,cpuacct/kubepods/besteffort/pod{uid}/{id}/cpu.cfs_quota_us"
        ));
        if !f.exists() {
            fs::create_dir_all(f.parent().unwrap_or(Path::new("/"))).expect("mkdir");
            fs::write(&f, "-1").expect("cpu.cfs_quota_us");
        }
        f
    }

    fn state(&self, id: &str, uid: &str) -> String {
        fs::read_to_string(self.freezer_state(id, uid)).unwrap_or_default()
    }
}

fn guaranteed(uid: &str, cpus: i64) -> (api::PodSandbox, api::Container) {
    let sb = sandbox(uid, &format!("/kubepods/pod{uid}"));
    let mut c = container("app", 1024 * cpus as u64, 100_000 * cpus, GIB, -997);
    c.id = format!("{uid}-app");
    c.pod_sandbox_id = sb.id.clone();
    (sb, c)
}

async fn create(
    p: &TopoletPlugin,
    (sb, c): &(api::PodSandbox, api::Container),
) -> topolet_nri::plugin::PluginResult<api::CreateContainerResponse> {
    p.run_pod_sandbox(sb.clone()).await.expect("sandbox");
    p.create_container(api::CreateContainerRequest {
        pod: protobuf::MessageField::some(sb.clone()),
        container: protobuf::MessageField::some(c.clone()),
        ..Default::default()
    })
    .await
}

fn cpus(s: &str) -> CpuSet {
    CpuSet::parse(s).expect("cpus")
}

/// The batch container runs on the pool; exclusive grants taking every pool CPU hold it
/// (frozen, its cpuset never widened to the reserved CPU), a batch container created meanwhile
/// is refused, and when the pool has CPUs again the held one is sent the pool and thawed only
/// once that cpuset is acknowledged.
#[tokio::test]
async fn a_batch_container_never_runs_on_a_reserved_or_exclusive_cpu() {
    let n = node();
    let p = &n.plugin;
    let b = n.batch("b", 500);
    let reply = create(p, &b).await.expect("batch container");
    let adjust = reply.adjust.as_ref().expect("adjust");
    let given = adjust
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref())
        .map(|c| c.cpus.clone())
        .unwrap_or_default();
    assert_eq!(given, "1-7", "the pool, never the reserved CPU 0");
    assert!(p.batch_containers().contains_key("b-app"));
    p.on_post_start_container(&b.0, &b.1).expect("started");

    // Exclusive grants take 6, then the last pool CPU.
    create(p, &guaranteed("g1", 6)).await.expect("exclusive");
    assert_eq!(n.state("b-app", "b"), "THAWED");
    let last = create(p, &guaranteed("g2", 1)).await.expect("exclusive");
    // Frozen before the reply that lets the exclusive container start.
    assert_eq!(n.state("b-app", "b"), "FROZEN");
    assert!(p.held_batch().contains("b-app"));
    let target = p
        .lock()
        .records
        .get("b-app")
        .map(|r| r.target().cpuset.clone());
    let target = target.expect("record");
    assert!(
        !target.contains(0),
        "the held container's cpuset was widened to the reserved CPU: {target}"
    );
    // Nothing in the reply moves the batch container onto the reserved CPU.
    for u in &last.update {
        if u.container_id == "b-app" {
            let c = u
                .linux
                .as_ref()
                .and_then(|l| l.resources.as_ref())
                .and_then(|r| r.cpu.as_ref())
                .map(|c| c.cpus.clone())
                .unwrap_or_default();
            assert!(c.is_empty() || !cpus(&c).contains(0), "update to {c}");
        }
    }

    // A batch container created now is refused, naming it and why.
    let late = n.batch("late", 200);
    let e = create(p, &late)
        .await
        .expect_err("refused while the pool is empty");
    let msg = format!("{e:?}");
    assert!(
        msg.contains("container app of batch pod default/pod-late") && msg.contains("held"),
        "{msg}"
    );

    // The loop's thaw finds no pool yet.
    assert_eq!(p.release_batch(), 0);
    assert_eq!(n.state("b-app", "b"), "FROZEN");

    // The six-CPU grant goes: those CPUs are the pool again (the one the held container was
    // left on is still exclusive); it is sent the pool, and thawed only once the runtime
    // acknowledged it.
    let reply = p.on_stop_container(&guaranteed("g1", 6).1).expect("stop");
    assert!(
        reply.iter().any(|u| u.container_id == "b-app"),
        "the held container is sent the pool in the stop's reply"
    );
    let pool = p.lock().placement.batch_pool();
    assert_eq!(pool.len(), 6, "six CPUs back in the pool: {pool}");
    let (acked, target) = {
        let node = p.lock();
        let r = node.records.get("b-app").expect("record");
        (r.acked() == Some(r.generation()), r.target().cpuset.clone())
    };
    assert_eq!(
        target, pool,
        "the held container's target is the pool again"
    );
    // A reply's updates are applied before the runtime answers: acknowledged.
    assert!(acked);
    assert_eq!(
        n.state("b-app", "b"),
        "FROZEN",
        "thawed before the loop's turn"
    );
    assert_eq!(p.release_batch(), 1);
    assert_eq!(n.state("b-app", "b"), "THAWED");
    assert!(p.held_batch().is_empty());
}

/// A batch container created before the pod watch knew its pod is given a quota as soon as it
/// is learnt (not at the next budget change); one running with a batch quota kept at a
/// restart's Synchronize keeps that grant as a floor until the usage window has refilled.
#[tokio::test]
async fn containers_learnt_late_get_a_quota_at_once_and_a_restart_keeps_grants() {
    let n = node();
    let p = &n.plugin;
    let late = n.batch("late", 500);
    let kept = n.batch("kept", 400);
    // The pod watch does not know them yet: admitted as plain BestEffort containers.
    n.pods.handle(watcher::Event::Init);
    n.pods.handle(watcher::Event::InitDone);
    for c in [&late, &kept] {
        create(p, c).await.expect("created");
        p.on_post_start_container(&c.0, &c.1).expect("started");
    }
    assert!(p.batch_containers().is_empty());
    let quota = |id: &str| p.lock().records.get(id).map(|r| r.target().cpu_quota);
    assert!(
        quota("late-app").is_some_and(|q| q <= 0),
        "BestEffort: no quota, not {:?}",
        quota("late-app")
    );
    // "kept" runs with the quota an earlier topolet gave it (what Synchronize keeps).
    if let Some(r) = p.lock().records.get_mut("kept-app") {
        r.retarget(|t| {
            t.cpu_quota = 36_200;
            t.cpu_period = 100_000;
        });
    }
    // The watch now holds both pods.
    let _ = n.batch("late", 500);
    let _ = n.batch("kept", 400);
    let dir = p.pod_directory().expect("directory").clone();
    assert_eq!(p.learn_batch(&dir, RES), 2);
    // No budget yet: "late" gets the minimum at once, "kept" keeps its 362m.
    assert_eq!(quota("late-app"), Some(1_000));
    assert_eq!(quota("kept-app"), Some(36_200));
    // A budget smaller than the carried grant does not cut it...
    p.set_batch_budget(300);
    assert_eq!(quota("kept-app"), Some(36_200));
    // ...until the window has refilled.
    assert!(p.end_carry() > 0);
    assert!(
        quota("kept-app").is_some_and(|q| q < 36_200),
        "{:?}",
        quota("kept-app")
    );
}

/// A cut of the batch budget reaches the batch containers' cgroups at once, written directly,
/// without the runtime (none is connected here: its update waits, queued); a rise does not (the
/// runtime's update carries it); a container without a cgroup is skipped and the rest written.
#[tokio::test]
async fn a_cut_is_written_into_the_batch_cgroups_at_once_a_rise_is_left_to_the_runtime() {
    let n = node();
    let p = &n.plugin;
    let (a, b) = (n.batch("a", 500), n.batch("b", 500));
    for c in [&a, &b] {
        create(p, c).await.expect("created");
        p.on_post_start_container(&c.0, &c.1).expect("started");
    }
    let (fa, fb) = (n.quota_file("a-app", "a"), n.quota_file("b-app", "b"));
    let read = |f: &Path| fs::read_to_string(f).unwrap_or_default();
    let target = |id: &str| p.lock().records.get(id).map(|r| r.target().cpu_quota);
    p.set_batch_budget(800);
    assert_eq!(target("a-app"), Some(40_000));
    // Cut to 200m: written at once, each container its share.
    p.set_batch_budget(200);
    assert_eq!((read(&fa), read(&fb)), ("10000".into(), "10000".into()));
    // Grown back to 600m: the targets move, the files wait for the runtime.
    p.set_batch_budget(600);
    assert_eq!(target("a-app"), Some(30_000));
    assert_eq!((read(&fa), read(&fb)), ("10000".into(), "10000".into()));
    // One cgroup gone: the other is still written.
    fs::remove_file(&fa).expect("rm");
    assert_eq!(p.write_batch_quotas(&["a-app".into(), "b-app".into()]), 1);
    assert_eq!(read(&fb), "30000");
}

async fn configure_runtime(p: &TopoletPlugin, version: &str, nri: (u32, u32, u32)) {
    let runtime = RuntimeInfo {
        name: "containerd".into(),
        version: version.into(),
        nri_version: Some(topolet_nri::version::NriVersion::new(nri.0, nri.1, nri.2)),
        registration_timeout_ms: 0,
        request_timeout_ms: 0,
    };
    p.configure(&api::ConfigureRequest::default(), &runtime)
        .await
        .expect("configure");
}

fn policy(reply: &api::CreateContainerResponse) -> Option<api::LinuxSchedulerPolicy> {
    reply
        .adjust
        .as_ref()?
        .linux
        .as_ref()?
        .scheduler
        .as_ref()
        .and_then(|s| s.policy.enum_value().ok())
}

/// A batch container is created under SCHED_IDLE on a runtime whose NRI carries the field
/// (v0.11 and later); a regular BestEffort container is not; on an older runtime nothing is
/// sent, and status says why; `sched_idle = false` sends nothing.
#[tokio::test]
async fn batch_containers_are_created_under_sched_idle_where_the_runtime_applies_it() {
    let n = node();
    let p = &n.plugin;
    configure_runtime(p, "v2.4.2", (0, 12, 3)).await;
    let reply = create(p, &n.batch("b", 500))
        .await
        .expect("batch container");
    assert_eq!(
        policy(&reply),
        Some(api::LinuxSchedulerPolicy::SCHED_IDLE),
        "{reply:?}"
    );
    let sb = sandbox("r", "/kubepods/besteffort/podr");
    let mut c = container("app", 2, 0, 0, 1000);
    c.id = "r-app".into();
    c.pod_sandbox_id = sb.id.clone();
    let reply = create(p, &(sb, c)).await.expect("regular container");
    assert_eq!(
        policy(&reply),
        None,
        "a regular container keeps the normal policy"
    );
    // A policy an earlier plugin set is left alone (containerd gives a field to one plugin).
    let (sb, mut c) = n.batch("pre", 500);
    let mut linux = c.linux.clone().unwrap_or_default();
    linux.scheduler = protobuf::MessageField::some(api::LinuxScheduler {
        policy: api::LinuxSchedulerPolicy::SCHED_BATCH.into(),
        ..Default::default()
    });
    c.linux = protobuf::MessageField::some(linux);
    let reply = create(p, &(sb, c)).await.expect("batch container");
    assert_eq!(policy(&reply), None, "{reply:?}");

    // containerd 2.0 (NRI v0.8): its decoder would drop the field; nothing is claimed.
    let n = node();
    let p = &n.plugin;
    configure_runtime(p, "v2.0.14", (0, 8, 0)).await;
    p.synchronize(Vec::new(), Vec::new()).await.expect("sync");
    let reply = create(p, &n.batch("b", 500))
        .await
        .expect("batch container");
    assert_eq!(policy(&reply), None);
    let why = p.sched_idle_missing().expect("status says why");
    assert!(why.contains("v0.8.0") && why.contains("v0.11"), "{why}");

    // Turned off.
    let n = node_with(|c| c.reclaimed.sched_idle = false);
    let p = &n.plugin;
    configure_runtime(p, "v2.4.2", (0, 12, 3)).await;
    let reply = create(p, &n.batch("b", 500))
        .await
        .expect("batch container");
    assert_eq!(policy(&reply), None);
}
