//! Protocol-level tests of topolet's NRI handlers: the real `TopoletPlugin` behind the real stub,
//! driven over the socket by the fake runtime (`topolet_nri::fake_runtime`), on the CI host's
//! shape (2 CPUs, CPU 0 reserved: fixture `ci-host-1s2c`) and on a small 2-socket machine
//! (`SyntheticSpec`: 2 sockets × 2 cores × 2 threads, node 0 = CPUs 0,1,4,5, node 1 = 2,3,6,7).
//!
//! Messages are shaped like the kubelet's through containerd: the pod's cgroup parent carries the
//! QoS class, the container carries shares / quota / period / memory limit / oom_score_adj. No
//! timing assertions: timeouts only turn a hang into a failure. "Nothing was sent" is checked by
//! ordering: the updater sends requests one at a time in order, so when the next update the
//! runtime receives is the one a later event caused, nothing was sent in between.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use topolet::config::{Config, TopologyPolicyName};
use topolet::nri::handlers::{TopoletPlugin, STATE_FILE};
use topolet::state::file as state_file;
use topolet::state::NodeState;
use topolet_core::kube::container_key::ContainerKey;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::{SyntheticSpec, Topology};
use topolet_core::placement::assignments::Assignments;
use topolet_nri::api::{self, Event};
use topolet_nri::fake_runtime::{FakeRuntime, PluginConn, UpdateAnswer};
use topolet_nri::Stub;
use topolet_testkit::nri_harness::{self, Connected};

use topolet_testkit::cgroup_names::{pod_cgroup_parent, Driver};
use topolet_testkit::kubelet::nri::{
    self as shapes, besteffort, burstable, ctr, guaranteed, kubelet_ctr, pod, pod_with_parent,
};
use topolet_testkit::kubelet::{ContainerSpec, PodSpec, Qos, Requirements};

/// Guard against hangs only (a deadlock or a missing update fails the test), never a timing
/// assertion.
const GUARD: Duration = Duration::from_secs(20);
const GIB: i64 = 1 << 30;
const PIDS: i64 = 4096;

// ------------------------------------------------------------------------------------------------
// Machines and configuration

fn two_cpu() -> Topology {
    let root = topolet_testkit::sysfs::fixture("ci-host-1s2c");
    topolet::host::sysfs::discover(&root).expect("fixture ci-host-1s2c")
}

fn two_socket() -> Topology {
    SyntheticSpec::TWO_SOCKETS_SMT.build()
}

fn config(state_dir: &Path) -> Config {
    let mut c = Config::default();
    c.cpu.reserved_cpus = Some("0".into());
    c.qos.oom_score_adj_floor = Some(0);
    c.qos.pids_limit = PIDS;
    c.state.dir = state_dir.to_path_buf();
    // The drift check runs on the wall clock (every 30 s by default, in a 5 s lull) and would
    // queue updates whenever a slow run lets it fire; no test here is about it (its tests
    // drive its clock: `topolet::nri::handlers`'s unit tests, and the real-stack suite).
    c.nri.drift_check_s = Some(0);
    c
}

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).expect("cpu list")
}

// ------------------------------------------------------------------------------------------------
// Kubelet-shaped NRI messages

// The pod and container builders are the test kit's kubelet simulator
// (`topolet_testkit::kubelet::nri`), shared with the fuzz properties and the security tests.

/// The memory nodes of `cpus` on both machines (node 0 = CPUs 0,1,4,5; node 1 = 2,3,6,7).
fn mems_of(cpus: &CpuSet) -> String {
    let nodes: CpuSet = cpus.iter().map(|c| usize::from(c % 4 >= 2)).collect();
    nodes.to_string()
}

/// An exclusive container as topolet created it: on `cpus` and their mems, CFS quota removed.
fn exclusive_on(mut c: api::Container, cpus: &CpuSet) -> api::Container {
    c = running_on(c, cpus);
    c.linux
        .mut_or_insert_default()
        .resources
        .mut_or_insert_default()
        .cpu
        .mut_or_insert_default()
        .quota = Some(api::OptionalInt64 {
        value: -1,
        ..Default::default()
    })
    .into();
    c
}

/// The CFS quota an update sets, if any.
fn update_quota(u: &api::ContainerUpdate) -> Option<i64> {
    update_cpu(u).quota.as_ref().map(|q| q.value)
}

/// A shared container as it runs now under topolet's default: its cpuset, no mems (never set).
fn shared_on(c: api::Container, cpus: &CpuSet) -> api::Container {
    with_mems(running_on(c, cpus), "")
}

/// `c` as it runs now: its cpuset and mems (those of the cpuset) as the runtime reports them.
fn running_on(c: api::Container, cpus: &CpuSet) -> api::Container {
    shapes::with_cpuset(c, &cpus.to_string(), &mems_of(cpus))
}

/// The resources of an in-place resize to `millis` CPU (Guaranteed: limit = request), as the
/// kubelet sends them in UpdateContainerResources (CPU only).
fn resize_to(millis: u64) -> api::LinuxResources {
    let cpu_only = Requirements {
        cpu_request_m: Some(millis),
        cpu_limit_m: Some(millis),
        ..Requirements::default()
    };
    cpu_only.kubelet_resources(shapes::NODE_MEMORY).to_nri(None)
}

// ------------------------------------------------------------------------------------------------
// The plugin behind its stub, and the runtime's side of the conversation

struct Env {
    dir: tempfile::TempDir,
    rt: FakeRuntime,
    /// Every plugin started here: the state file is read once their writers have caught up
    /// (writes happen on the persister's thread, after the handler replied).
    plugins: std::sync::Mutex<Vec<std::sync::Weak<TopoletPlugin>>>,
}

/// The scratch directory goes last: a plugin's persister thread writes after its handler
/// replied, and a write that lands after the directory is removed creates it again (the state
/// directory is created when missing), leaving it behind in the system's temp directory.
impl Drop for Env {
    fn drop(&mut self) {
        self.flush_state();
    }
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = FakeRuntime::bind(dir.path().join("nri.sock")).expect("bind");
        Env {
            dir,
            rt,
            plugins: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn state_path(&self) -> PathBuf {
        self.state_dir().join(STATE_FILE)
    }

    fn config(&self) -> Config {
        config(&self.state_dir())
    }

    /// Starts a plugin with `config` on `topology`, accepts, registers and configures it.
    async fn start(&self, config: Config, topology: Topology) -> Running {
        self.start_with_proc(config, topology, None).await
    }

    /// `start`, reading process information from `proc_root` instead of `/proc`.
    async fn start_with_proc(
        &self,
        config: Config,
        topology: Topology,
        proc_root: Option<&Path>,
    ) -> Running {
        let mut plugin = TopoletPlugin::new(config, topology).expect("plugin");
        if let Some(root) = proc_root {
            plugin.set_proc_root(root.to_path_buf());
        }
        self.start_plugin(Arc::new(plugin)).await
    }

    /// Waits until every live plugin's state writes are on disk (as a restart finds them).
    fn flush_state(&self) {
        let plugins = self.plugins.lock().expect("plugins").clone();
        for p in plugins.iter().filter_map(std::sync::Weak::upgrade) {
            p.flush_state(GUARD);
        }
    }

    /// Accepts, registers and configures `plugin` (as containerd v2.3.0 with NRI v0.12.0: the
    /// long lull before unsolicited updates).
    async fn start_plugin(&self, plugin: Arc<TopoletPlugin>) -> Running {
        self.start_plugin_as(plugin, "v0.12.0").await
    }

    /// `start_plugin`, the runtime announcing NRI `nri_version`.
    async fn start_plugin_as(&self, plugin: Arc<TopoletPlugin>, nri_version: &str) -> Running {
        // A restart reads the state file: what the previous plugins wrote is on disk first.
        self.flush_state();
        self.plugins
            .lock()
            .expect("plugins")
            .push(Arc::downgrade(&plugin));
        let attach = |stub: &Stub<TopoletPlugin>| plugin.attach(stub.updater(), stub.status());
        let Connected { conn, task } = nri_harness::connect(
            &self.rt,
            &self.dir.path().join("nri.sock"),
            plugin.clone(),
            attach,
            "v2.3.0",
            nri_version,
        )
        .await;
        Running { conn, task }
    }

    /// `start` followed by an empty Synchronize (a fresh node).
    async fn start_synced(&self, config: Config, topology: Topology) -> Running {
        let r = self.start(config, topology).await;
        let (resp, _) = r
            .conn
            .synchronize(vec![], vec![], None)
            .await
            .expect("sync");
        assert!(resp.update.is_empty());
        r
    }

    fn saved(&self) -> Assignments {
        self.saved_state().assignments
    }

    fn saved_state(&self) -> NodeState {
        self.flush_state();
        state_file::load::<NodeState>(&self.state_path())
            .expect("state file readable")
            .expect("state file exists")
    }
}

struct Running {
    conn: PluginConn,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// SIGKILL stand-in: the stub task is aborted, no shutdown hook runs, the connection drops.
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
        self.conn.close();
    }

    async fn create(
        &self,
        pod: &api::PodSandbox,
        c: &api::Container,
    ) -> Result<api::CreateContainerResponse, String> {
        let req = api::CreateContainerRequest {
            pod: Some(pod.clone()).into(),
            container: Some(c.clone()).into(),
            ..Default::default()
        };
        tokio::time::timeout(GUARD, self.conn.create_container(&req))
            .await
            .expect("create answered in time")
            .map_err(|e| rpc_message(&e))
    }

    /// Creates `c` and returns the cpuset of its adjustment (must be set, with the mems of
    /// those CPUs, or none for a shared container: the kubelet's default leaves its mems alone).
    async fn create_on(&self, pod: &api::PodSandbox, c: &api::Container) -> CpuSet {
        self.create_moving(pod, c).await.0
    }

    /// Creates `c`: the cpuset of its adjustment, and the other containers its reply moves
    /// (`id → cpus`, every update with failures ignored and never for `c` itself).
    async fn create_moving(
        &self,
        pod: &api::PodSandbox,
        c: &api::Container,
    ) -> (CpuSet, BTreeMap<String, String>) {
        let r = self.create(pod, c).await.expect("create");
        let cpu = adj_cpu(&r).expect("cpu adjusted");
        let cpus = set(&cpu.cpus);
        assert!(
            cpu.mems.is_empty() || cpu.mems == mems_of(&cpus),
            "{}: mems {} of {cpus}",
            c.id,
            cpu.mems
        );
        assert!(r
            .update
            .iter()
            .all(|u| u.ignore_failure && u.container_id != c.id));
        (cpus, moved(&r.update))
    }

    /// The moves `reply` carried, completed by the unsolicited requests that follow until every
    /// container of `ids` was moved, each exactly once (`id → cpus`). Which message carries a
    /// move is timing, what each container is moved to is not:
    /// - a container that an unsolicited request still carries when a reply is built waits for
    ///   that request and is sent its newer target after it (`topolet::nri::records::reply_ids`);
    /// - moves queued by several events without a reply go out in one request after the lull,
    ///   or in several when the lull passed between those events;
    /// - whether the runtime's lull ended between two steps of a test depends on how busy the
    ///   machine is.
    async fn moves_delivered(
        &self,
        reply: &[api::ContainerUpdate],
        ids: &[&str],
    ) -> BTreeMap<String, String> {
        let mut delivered = moved(reply);
        while !ids.iter().all(|id| delivered.contains_key(*id)) {
            for (id, cpus) in moved(&self.next_update().await.update) {
                if let Some(earlier) = delivered.insert(id.clone(), cpus.clone()) {
                    panic!("{id} moved twice: to {earlier}, then to {cpus}");
                }
            }
        }
        delivered
    }

    async fn update(
        &self,
        pod: &api::PodSandbox,
        c: &api::Container,
        res: api::LinuxResources,
    ) -> Result<api::UpdateContainerResponse, String> {
        let req = api::UpdateContainerRequest {
            pod: Some(pod.clone()).into(),
            container: Some(c.clone()).into(),
            linux_resources: Some(res).into(),
            ..Default::default()
        };
        let client = self.conn.client();
        tokio::time::timeout(
            GUARD,
            self.conn
                .locked(client.update_container(self.conn.ctx(), &req)),
        )
        .await
        .expect("update answered in time")
        .map_err(|e| rpc_message(&e))
    }

    /// StopContainer; returns the other containers its reply moves (`id → cpus`).
    async fn stop(&self, pod: &api::PodSandbox, c: &api::Container) -> BTreeMap<String, String> {
        let req = api::StopContainerRequest {
            pod: Some(pod.clone()).into(),
            container: Some(c.clone()).into(),
            ..Default::default()
        };
        let client = self.conn.client();
        let r = tokio::time::timeout(
            GUARD,
            self.conn
                .locked(client.stop_container(self.conn.ctx(), &req)),
        )
        .await
        .expect("stop answered in time")
        .expect("stop");
        assert!(r
            .update
            .iter()
            .all(|u| u.ignore_failure && u.container_id != c.id));
        moved(&r.update)
    }

    /// RemoveContainer the way containerd sends it (StateChange).
    async fn remove(&self, pod: &api::PodSandbox, c: &api::Container) {
        let ev = api::StateChangeEvent {
            event: Event::REMOVE_CONTAINER.into(),
            pod: Some(pod.clone()).into(),
            container: Some(c.clone()).into(),
            ..Default::default()
        };
        tokio::time::timeout(GUARD, self.conn.state_change(&ev))
            .await
            .expect("remove answered in time")
            .expect("remove");
    }

    /// RemovePodSandbox the way containerd sends it (StateChange).
    async fn remove_pod(&self, pod: &api::PodSandbox) {
        let ev = api::StateChangeEvent {
            event: Event::REMOVE_POD_SANDBOX.into(),
            pod: Some(pod.clone()).into(),
            ..Default::default()
        };
        tokio::time::timeout(GUARD, self.conn.state_change(&ev))
            .await
            .expect("remove pod answered in time")
            .expect("remove pod");
    }

    async fn next_update(&self) -> api::UpdateContainersRequest {
        tokio::time::timeout(GUARD, self.conn.next_update())
            .await
            .expect("an UpdateContainers request in time")
            .expect("connection open")
    }
}

fn rpc_message(e: &topolet_nri::ttrpc::Error) -> String {
    match e {
        topolet_nri::ttrpc::Error::RpcStatus(s) => s.message().to_string(),
        other => format!("{other:?}"),
    }
}

fn adj_linux(r: &api::CreateContainerResponse) -> Option<&api::LinuxContainerAdjustment> {
    r.adjust.as_ref().and_then(|a| a.linux.as_ref())
}

fn adj_resources(r: &api::CreateContainerResponse) -> Option<&api::LinuxResources> {
    adj_linux(r).and_then(|l| l.resources.as_ref())
}

fn adj_cpu(r: &api::CreateContainerResponse) -> Option<&api::LinuxCPU> {
    adj_resources(r).and_then(|res| res.cpu.as_ref())
}

fn adj_oom(r: &api::CreateContainerResponse) -> Option<i64> {
    adj_linux(r)
        .and_then(|l| l.oom_score_adj.as_ref())
        .map(|o| o.value)
}

fn is_empty_adjustment(r: &api::CreateContainerResponse) -> bool {
    r.adjust
        .as_ref()
        .is_none_or(|a| *a == api::ContainerAdjustment::default())
        && r.update.is_empty()
}

fn update_cpu(u: &api::ContainerUpdate) -> &api::LinuxCPU {
    u.linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref())
        .expect("update carries cpu")
}

/// `container id → cpus` of an update list (each with the mems of its cpus, or none: a shared
/// container's mems are left alone by default).
fn moved(updates: &[api::ContainerUpdate]) -> BTreeMap<String, String> {
    updates
        .iter()
        .map(|u| {
            let cpu = update_cpu(u);
            assert!(
                cpu.mems.is_empty() || cpu.mems == mems_of(&set(&cpu.cpus)),
                "{}: mems {}",
                u.container_id,
                cpu.mems
            );
            (u.container_id.clone(), cpu.cpus.clone())
        })
        .collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// ------------------------------------------------------------------------------------------------
// CreateContainer

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_guaranteed_integer_gets_exclusive_cpu_and_kubelet_values_are_not_repeated() {
    let env = Env::new();
    let p = env.start_synced(env.config(), two_cpu()).await;
    let g = pod("g1", "");
    let c = guaranteed(&g, "app", 1000);
    let r = p.create(&g, &c).await.expect("create");
    let cpu = adj_cpu(&r).expect("cpu adjusted");
    assert_eq!(cpu.cpus, "1");
    assert_eq!(cpu.mems, "0");
    assert_eq!(
        cpu.quota.as_ref().map(|q| q.value),
        Some(-1),
        "quota removed"
    );
    // The kubelet already sent shares 1024 and period 100000: not claimed again.
    assert!(
        cpu.shares.is_none(),
        "shares equal to the kubelet's must not be set"
    );
    assert!(
        cpu.period.is_none(),
        "period equal to the kubelet's must not be set"
    );
    let res = adj_resources(&r).expect("resources");
    assert!(res.memory.is_none(), "memory limit is the kubelet's");
    assert_eq!(res.pids.as_ref().map(|p| p.limit), Some(PIDS));
    // −997 is below the runtime's floor 0: clamped.
    assert_eq!(adj_oom(&r), Some(0));

    // The state file exists, is private, and lists the assignment.
    let saved = env.saved();
    let meta = std::fs::metadata(env.state_path()).expect("state file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let a = saved
        .get(&ContainerKey::new("g1", "app"))
        .expect("assignment listed");
    assert_eq!(a.cpus, Some(set("1")));
    assert_eq!(saved.containers.len(), 1);
    p.kill().await;
}

/// Pods of the systemd cgroup driver, from the kubelet simulator (pod spec → the CRI request →
/// the NRI message): the Guaranteed one gets an exclusive CPU, the Burstable one the shared pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_driver_pods_from_the_kubelet_simulator_are_placed_by_their_class() {
    let env = Env::new();
    let p = env.start_synced(env.config(), two_cpu()).await;
    let mem = shapes::NODE_MEMORY;
    let mut gx = PodSpec::on_node(Driver::Systemd, "", "/logs", "gx", Qos::Guaranteed);
    gx.uid = "0a1b2c3d-1111-4222-8333-444455556666".into();
    gx.cgroup_parent = pod_cgroup_parent(Driver::Systemd, "", Qos::Guaranteed, &gx.uid);
    assert!(gx
        .cgroup_parent
        .ends_with("kubepods-pod0a1b2c3d_1111_4222_8333_444455556666.slice"));
    let gc = ContainerSpec::sleeper(
        "pause",
        "app",
        Requirements::guaranteed(1000, GIB as u64),
        mem,
    );
    let r = p
        .create(&gx.to_nri(), &gc.to_nri(&gx))
        .await
        .expect("create");
    assert_eq!(adj_cpu(&r).map(|c| c.cpus.as_str()), Some("1"), "exclusive");

    let bu = PodSpec::on_node(Driver::Systemd, "", "/logs", "bu", Qos::Burstable);
    let bc = ContainerSpec::sleeper(
        "pause",
        "app",
        Requirements::burstable(500, None, GIB as u64, None),
        mem,
    );
    let r = p
        .create(&bu.to_nri(), &bc.to_nri(&bu))
        .await
        .expect("create");
    assert_eq!(
        adj_cpu(&r).map(|c| c.cpus.as_str()),
        Some("0"),
        "the shared pool without the exclusive CPU"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_cfs_quota_leaves_the_kubelets_quota() {
    let env = Env::new();
    let mut cfg = env.config();
    cfg.qos.keep_cfs_quota_for_exclusive = true;
    let p = env.start_synced(cfg, two_cpu()).await;
    let g = pod("g1", "");
    let r = p
        .create(&g, &guaranteed(&g, "app", 1000))
        .await
        .expect("create");
    let cpu = adj_cpu(&r).expect("cpu adjusted");
    assert_eq!(cpu.cpus, "1");
    assert!(
        cpu.quota.is_none(),
        "quota 100000 is the kubelet's: {:?}",
        cpu.quota
    );
    p.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_shared_classes_get_the_shared_pool_and_keep_kubelet_values() {
    let env = Env::new();
    let p = env.start_synced(env.config(), two_cpu()).await;

    // Burstable: 500m request, 1.5 CPU limit, 1 GiB memory request, 2 GiB limit (shares 512,
    // quota 150000, oom 881).
    let bu = pod("bu", "burstable");
    let bu_req = Requirements::burstable(500, Some(1500), GIB as u64, Some(2 * GIB as u64));
    let r = p
        .create(&bu, &kubelet_ctr(&bu, "app", bu_req))
        .await
        .expect("create");
    let cpu = adj_cpu(&r).expect("cpu adjusted");
    assert_eq!(cpu.cpus, "0-1");
    assert_eq!(
        cpu.mems, "",
        "the kubelet never sets a shared container's mems"
    );
    assert!(
        cpu.shares.is_none() && cpu.quota.is_none() && cpu.period.is_none(),
        "{cpu:?}"
    );
    assert_eq!(
        adj_oom(&r),
        None,
        "Burstable oom_score_adj is the kubelet's"
    );
    assert_eq!(
        adj_resources(&r)
            .and_then(|x| x.pids.as_ref())
            .map(|p| p.limit),
        Some(PIDS)
    );

    // BestEffort: shares 2, oom 1000 untouched.
    let be = pod("be", "besteffort");
    let r = p
        .create(&be, &besteffort(&be, "app"))
        .await
        .expect("create");
    let cpu = adj_cpu(&r).expect("cpu adjusted");
    assert_eq!(cpu.cpus, "0-1");
    assert!(cpu.shares.is_none() && cpu.quota.is_none(), "{cpu:?}");
    assert_eq!(
        adj_oom(&r),
        None,
        "1000 is above the floor and the kubelet's"
    );

    // Fractional Guaranteed: shared pool, oom clamped, quota kept (not exclusive).
    let fg = pod("fg", "");
    let r = p
        .create(&fg, &guaranteed(&fg, "app", 500))
        .await
        .expect("create");
    let cpu = adj_cpu(&r).expect("cpu adjusted");
    assert_eq!(cpu.cpus, "0-1");
    assert!(
        cpu.quota.is_none(),
        "50000 µs is the kubelet's: {:?}",
        cpu.quota
    );
    assert_eq!(adj_oom(&r), Some(0));

    // Burstable at the current kubelet's lowest score (request ≥ capacity) stays as it is.
    let bu2 = pod("bu2", "burstable");
    let bu2_req = Requirements::burstable(100, None, shapes::NODE_MEMORY, None);
    let r = p
        .create(&bu2, &kubelet_ctr(&bu2, "app", bu2_req))
        .await
        .expect("create");
    assert_eq!(adj_oom(&r), None);
    assert_eq!(adj_cpu(&r).map(|c| c.cpus.as_str()), Some("0-1"));
    p.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_sandbox_and_preset_cpuset_containers_are_left_alone() {
    let env = Env::new();
    let p = env.start_synced(env.config(), two_cpu()).await;

    let foreign = pod_with_parent("nerd", "/system.slice/containerd.service");
    let fc = guaranteed(&foreign, "app", 1000);
    assert!(is_empty_adjustment(
        &p.create(&foreign, &fc).await.expect("create")
    ));

    let g = pod("g0", "");
    let mut pause = ctr(&g, "POD", 2, 0, 0, -998);
    pause
        .labels
        .insert("io.cri-containerd.kind".into(), "sandbox".into());
    assert!(is_empty_adjustment(
        &p.create(&g, &pause).await.expect("create")
    ));

    // Another plugin (lower index) or the kubelet's CPU manager already chose a cpuset.
    let other = pod("other", "");
    let oc = running_on(guaranteed(&other, "app", 1000), &set("1"));
    assert!(is_empty_adjustment(
        &p.create(&other, &oc).await.expect("create")
    ));

    // None of them took CPU 1: a Guaranteed container still gets it, and the shared-pool update
    // that follows names only the managed shared container, not the ignored ones.
    let be = pod("be", "besteffort");
    let bc = besteffort(&be, "app");
    assert_eq!(p.create_on(&be, &bc).await, set("0-1"));
    let g1 = pod("g1", "");
    let (cpus, moves) = p.create_moving(&g1, &guaranteed(&g1, "app", 1000)).await;
    assert_eq!(cpus, set("1"));
    assert_eq!(moves, map(&[("be-app", "0")]));

    // Their removal is a no-op too: the release of g1's CPU moves only the shared container.
    p.remove(&foreign, &fc).await;
    p.remove(&g, &pause).await;
    p.remove(&other, &oc).await;
    p.remove_pod(&foreign).await;
    let moves = p.stop(&g1, &guaranteed(&g1, "app", 1000)).await;
    assert_eq!(moves, map(&[("be-app", "0-1")]));
    p.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_someone_else_placed_stays_theirs_across_a_restart() {
    let env = Env::new();
    let p = env.start_synced(env.config(), two_cpu()).await;
    let other = pod("other", "");
    let oc = running_on(guaranteed(&other, "app", 1000), &set("1"));
    assert!(is_empty_adjustment(
        &p.create(&other, &oc).await.expect("create")
    ));
    let be = pod("be", "besteffort");
    let bc = running_on(besteffort(&be, "app"), &set("0-1"));
    assert!(env
        .saved_state()
        .left_alone
        .contains(&ContainerKey::new(other.uid.clone(), "app")));
    p.kill().await;

    // Restart: the runtime reports both as they run. Taking over `other` would make CPU 1
    // exclusive and move `be` off it; leaving it alone needs no update at all.
    let p = env.start(env.config(), two_cpu()).await;
    let (r, _) = p
        .conn
        .synchronize(
            vec![other.clone(), be.clone()],
            vec![oc.clone(), bc.clone()],
            None,
        )
        .await
        .expect("sync");
    assert!(r.update.is_empty(), "{:?}", moved(&r.update));
    assert!(env.saved().containers.is_empty());

    // Once it is gone for good, it is forgotten.
    p.remove(&other, &oc).await;
    p.remove_pod(&other).await;
    assert!(env.saved_state().left_alone.is_empty());
    p.kill().await;
}

// ------------------------------------------------------------------------------------------------
// Shared-pool updates

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_pool_follows_grants_and_releases_whatever_the_event_order() {
    let env = Env::new();
    let p = env.start_synced(env.config(), two_cpu()).await;
    let be = pod("be", "besteffort");
    let bu = pod("bu", "burstable");
    assert_eq!(p.create_on(&be, &besteffort(&be, "a")).await, set("0-1"));
    assert_eq!(p.create_on(&bu, &burstable(&bu, "b")).await, set("0-1"));

    // Grant: the reply moves both, failures ignored (they may have exited).
    let x = pod("x", "");
    let xc = guaranteed(&x, "app", 1000);
    let r = p.create(&x, &xc).await.expect("create x");
    assert_eq!(adj_cpu(&r).map(|c| c.cpus.as_str()), Some("1"));
    assert_eq!(moved(&r.update), map(&[("be-a", "0"), ("bu-b", "0")]));
    assert!(r.update.iter().all(|u| u.ignore_failure));
    for upd in &r.update {
        assert_eq!(update_cpu(upd).mems, "", "shared mems are left alone");
    }
    // A shared container created while x runs starts on the reduced pool.
    let be2 = pod("be2", "besteffort");
    assert_eq!(p.create_on(&be2, &besteffort(&be2, "c")).await, set("0"));

    // Events for unknown containers, a remove before anything, unknown pods: nothing.
    let ghost = pod("ghost", "");
    assert!(p
        .stop(&ghost, &guaranteed(&ghost, "app", 1000))
        .await
        .is_empty());
    p.remove(&ghost, &guaranteed(&ghost, "app", 1000)).await;
    p.remove_pod(&ghost).await;

    // Stop: released, the reply moves everyone back.
    assert_eq!(
        p.stop(&x, &xc).await,
        map(&[("be-a", "0-1"), ("be2-c", "0-1"), ("bu-b", "0-1")])
    );
    // Twice, then remove, then remove again, then the pod: nothing more is sent ...
    assert!(p.stop(&x, &xc).await.is_empty());
    p.remove(&x, &xc).await;
    p.remove(&x, &xc).await;
    p.remove_pod(&x).await;
    p.remove_pod(&x).await;

    // ... which the next grant proves: CPU 1 is free again and its reply moves exactly the
    // shared containers.
    let y = pod("y", "");
    let yc = guaranteed(&y, "app", 1000);
    let (cpus, moves) = p.create_moving(&y, &yc).await;
    assert_eq!(cpus, set("1"));
    assert_eq!(moves, map(&[("be-a", "0"), ("be2-c", "0"), ("bu-b", "0")]));

    // Out of order: the pod goes first (its container never saw Stop or Remove). Its event
    // has no reply to carry updates: they go out unsolicited once the runtime is quiet.
    p.remove_pod(&y).await;
    let u = p.next_update().await;
    assert_eq!(
        moved(&u.update),
        map(&[("be-a", "0-1"), ("be2-c", "0-1"), ("bu-b", "0-1")])
    );
    assert!(p.stop(&y, &yc).await.is_empty());
    p.remove(&y, &yc).await;

    // RemoveContainer without StopContainer releases too; a removed shared container is no
    // longer updated. From here on, a grant may come while the unsolicited request above is
    // still in flight: its containers then follow in a request of their own
    // (`Running::moves_delivered`).
    p.remove(&bu, &burstable(&bu, "b")).await;
    let z = pod("z", "");
    let zc = guaranteed(&z, "app", 1000);
    let r = p.create(&z, &zc).await.expect("create z");
    assert_eq!(adj_cpu(&r).map(|c| c.cpus.as_str()), Some("1"));
    let moves = p.moves_delivered(&r.update, &["be-a", "be2-c"]).await;
    assert_eq!(moves, map(&[("be-a", "0"), ("be2-c", "0")]));
    p.remove(&z, &zc).await;
    let moves = p.moves_delivered(&[], &["be-a", "be2-c"]).await;
    assert_eq!(moves, map(&[("be-a", "0-1"), ("be2-c", "0-1")]));

    // A release whose event cannot carry updates, followed by one that can: the queued moves
    // ride on that reply when it comes before the runtime's lull ended, else they went
    // unsolicited. Either way each container is moved once, to its current target.
    let r = p.create(&z, &zc).await.expect("create z again");
    assert_eq!(adj_cpu(&r).map(|c| c.cpus.as_str()), Some("1"));
    let moves = p.moves_delivered(&r.update, &["be-a", "be2-c"]).await;
    assert_eq!(moves, map(&[("be-a", "0"), ("be2-c", "0")]));
    p.remove(&z, &zc).await;
    let w = pod("w", "besteffort");
    let r = p.create(&w, &besteffort(&w, "d")).await.expect("create w");
    assert_eq!(adj_cpu(&r).map(|c| c.cpus.as_str()), Some("0-1"));
    let moves = p.moves_delivered(&r.update, &["be-a", "be2-c"]).await;
    assert_eq!(moves, map(&[("be-a", "0-1"), ("be2-c", "0-1")]));
    p.kill().await;
}

// ------------------------------------------------------------------------------------------------
// UpdateContainer (in-place resize)

/// The other containers a resize's reply moves (`id → cpus`), all with failures ignored.
fn others_moved(r: &api::UpdateContainerResponse, id: &str) -> BTreeMap<String, String> {
    let others: Vec<_> = r
        .update
        .iter()
        .filter(|u| u.container_id != id)
        .cloned()
        .collect();
    assert!(others.iter().all(|u| u.ignore_failure));
    moved(&others)
}

fn resize_update(r: &api::UpdateContainerResponse, id: &str) -> api::ContainerUpdate {
    let mine: Vec<_> = r.update.iter().filter(|u| u.container_id == id).collect();
    assert_eq!(
        mine.len(),
        1,
        "one update for the resized container: {:?}",
        r.update
    );
    mine[0].clone()
}

/// Into and out of exclusive CPUs by resize: a fractional Guaranteed container resized to an
/// integer request gets its own CPU and loses its CFS quota (as at creation); resized back to a
/// fraction it returns to the shared pool with the kubelet's quota, which topolet then leaves to
/// the kubelet. With `keep_cfs_quota_for_exclusive` the kubelet's quota stays throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_into_exclusive_cpus_drops_the_quota_and_out_of_them_restores_it() {
    for keep in [false, true] {
        let env = Env::new();
        let mut cfg = env.config();
        cfg.qos.keep_cfs_quota_for_exclusive = keep;
        let p = env.start_synced(cfg, two_socket()).await;
        let g = pod("g", "");
        let gc = guaranteed(&g, "app", 1500);
        assert_eq!(p.create_on(&g, &gc).await, set("0-7"));
        let r = p
            .update(&g, &gc, resize_to(2000))
            .await
            .expect("to exclusive");
        let up = resize_update(&r, &gc.id);
        assert_eq!(set(&update_cpu(&up).cpus).len(), 2);
        assert_eq!(
            update_quota(&up),
            if keep { None } else { Some(-1) },
            "keep {keep}"
        );
        let r = p.update(&g, &gc, resize_to(1500)).await.expect("to shared");
        let up = resize_update(&r, &gc.id);
        assert_eq!(update_cpu(&up).cpus, "0-7");
        // The kubelet's request carries quota 150000: nothing to add.
        assert_eq!(update_quota(&up), None, "keep {keep}");
        // Its mems, narrowed while exclusive, are every node again.
        assert_eq!(update_cpu(&up).mems, "0-1", "keep {keep}");
        p.kill().await;
    }
}

/// A Guaranteed integer container taken over at Synchronize (created before topolet, with the
/// kubelet's quota) is sent its exclusive cpuset and quota −1 in one update, as a container
/// created with topolet running gets at creation; not with `keep_cfs_quota_for_exclusive`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronize_takes_over_exclusive_containers_without_their_quota() {
    for keep in [false, true] {
        let env = Env::new();
        let mut cfg = env.config();
        cfg.qos.keep_cfs_quota_for_exclusive = keep;
        let p = env.start(cfg, two_socket()).await;
        let g = pod("g", "");
        let gc = guaranteed(&g, "app", 1000);
        let s = pod("s", "besteffort");
        let sc = besteffort(&s, "app");
        let (r, _) = p
            .conn
            .synchronize(vec![g, s], vec![gc.clone(), sc], None)
            .await
            .expect("sync");
        let mine: Vec<_> = r
            .update
            .iter()
            .filter(|u| u.container_id == gc.id)
            .collect();
        assert_eq!(mine.len(), 1, "{:?}", r.update);
        assert_eq!(set(&update_cpu(mine[0]).cpus).len(), 1);
        assert_eq!(
            update_quota(mine[0]),
            if keep { None } else { Some(-1) },
            "keep {keep}"
        );
        for u in r.update.iter().filter(|u| u.container_id != gc.id) {
            assert_eq!(
                update_quota(u),
                None,
                "a shared container keeps the kubelet's quota"
            );
        }
        p.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_grows_and_shrinks_keeping_the_cpus_it_has() {
    let env = Env::new();
    let p = env.start_synced(env.config(), two_socket()).await;
    let be = pod("be", "besteffort");
    assert_eq!(p.create_on(&be, &besteffort(&be, "a")).await, set("0-7"));
    let g = pod("g", "");
    let gc = guaranteed(&g, "app", 1000);
    let (one, moves) = p.create_moving(&g, &gc).await;
    assert_eq!(one.len(), 1);
    assert_eq!(
        moves,
        map(&[("be-a", &set("0-7").difference(&one).to_string())])
    );

    // Grow 1 → 2: keeps its CPU.
    let r = p.update(&g, &gc, resize_to(2000)).await.expect("grow");
    assert_eq!(
        r.update.last().map(|u| u.container_id.as_str()),
        Some(gc.id.as_str())
    );
    let up = resize_update(&r, &gc.id);
    let two = set(&update_cpu(&up).cpus);
    assert_eq!(two.len(), 2);
    assert!(one.is_subset(&two), "{one} ⊄ {two}");
    assert!(!two.contains(0), "reserved cpu granted: {two}");
    let quota = update_cpu(&up).quota.as_ref().map(|q| q.value);
    assert_eq!(
        quota,
        Some(-1),
        "an exclusive container's quota stays removed after a resize"
    );
    assert_eq!(
        others_moved(&r, &gc.id),
        map(&[("be-a", &set("0-7").difference(&two).to_string())])
    );

    // Grow 2 → 4, then shrink 4 → 1: a subset every time.
    let r = p.update(&g, &gc, resize_to(4000)).await.expect("grow");
    let four = set(&update_cpu(&resize_update(&r, &gc.id)).cpus);
    assert_eq!(four.len(), 4);
    assert!(two.is_subset(&four), "{two} ⊄ {four}");
    assert_eq!(
        others_moved(&r, &gc.id),
        map(&[("be-a", &set("0-7").difference(&four).to_string())])
    );
    let r = p.update(&g, &gc, resize_to(1000)).await.expect("shrink");
    let back = set(&update_cpu(&resize_update(&r, &gc.id)).cpus);
    assert_eq!(back.len(), 1);
    assert!(back.is_subset(&four), "{back} ⊄ {four}");
    assert_eq!(
        others_moved(&r, &gc.id),
        map(&[("be-a", &set("0-7").difference(&back).to_string())])
    );
    assert_eq!(
        env.saved()
            .get(&ContainerKey::new("g", "app"))
            .and_then(|a| a.cpus.clone()),
        Some(back)
    );
    p.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infeasible_resize_is_refused_and_changes_nothing() {
    // 2 CPUs, CPU 0 reserved: growing to 2 exclusive CPUs cannot be done.
    let env = Env::new();
    let p = env.start_synced(env.config(), two_cpu()).await;
    let be = pod("be", "besteffort");
    let bc = besteffort(&be, "a");
    assert_eq!(p.create_on(&be, &bc).await, set("0-1"));
    let g = pod("g", "");
    let gc = guaranteed(&g, "app", 1000);
    assert_eq!(p.create_on(&g, &gc).await, set("1"));
    let before = env.saved();

    let err = p
        .update(&g, &gc, resize_to(2000))
        .await
        .expect_err("refused");
    assert!(err.contains("topolet"), "error names us: {err}");
    assert_eq!(env.saved(), before, "books unchanged");
    // Still holding CPU 1: another exclusive container cannot have it ...
    let h = pod("h", "");
    let hc = guaranteed(&h, "app", 1000);
    assert!(p.create(&h, &hc).await.is_err());
    // ... and once g stops, it is the next grant; the stop's reply moves `be` back.
    assert_eq!(p.stop(&g, &gc).await, map(&[("be-a", "0-1")]));
    assert_eq!(p.create_on(&h, &hc).await, set("1"));
    p.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infeasible_resize_on_two_sockets_leaves_the_free_cpus_as_they_were() {
    let env = Env::new();
    let p = env.start_synced(env.config(), two_socket()).await;
    let g = pod("g", "");
    let gc = guaranteed(&g, "app", 3000);
    let three = p.create_on(&g, &gc).await;
    assert_eq!(three.len(), 3);
    let err = p
        .update(&g, &gc, resize_to(8000))
        .await
        .expect_err("refused");
    assert!(err.contains("topolet"), "{err}");
    // The 4 CPUs that were free are still exactly free: a 4-CPU container gets them all.
    let h = pod("h", "");
    let four = p.create_on(&h, &guaranteed(&h, "app", 4000)).await;
    assert_eq!(four, set("1-7").difference(&three));
    p.kill().await;
}

// ------------------------------------------------------------------------------------------------
// Refusal

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_numa_node_refuses_a_request_bigger_than_any_node() {
    let env = Env::new();
    let mut cfg = env.config();
    cfg.topology.policy = TopologyPolicyName::SingleNumaNode;
    let p = env.start_synced(cfg, two_socket()).await;
    let g = pod("big", "");
    let err = p
        .create(&g, &guaranteed(&g, "app", 5000))
        .await
        .expect_err("refused");
    assert!(
        err.contains("single-numa-node"),
        "error names the policy: {err}"
    );
    env.flush_state();
    assert!(!env.state_path().exists() || env.saved().containers.is_empty());
    // Nothing was taken: node 1's four CPUs and node 0's three are all still grantable.
    let a = pod("a", "");
    assert_eq!(
        p.create_on(&a, &guaranteed(&a, "app", 4000)).await,
        set("2-3,6-7")
    );
    let b = pod("b", "");
    assert_eq!(
        p.create_on(&b, &guaranteed(&b, "app", 3000)).await,
        set("1,4-5")
    );
    p.kill().await;
}

// ------------------------------------------------------------------------------------------------
// Synchronize and restart

/// A node with two exclusive and two shared containers, as the runtime now runs them.
struct Scene {
    pods: Vec<api::PodSandbox>,
    /// As adjusted (cpusets as the runtime applied them).
    containers: Vec<api::Container>,
}

async fn build_scene(env: &Env, p: &Running) -> Scene {
    let a = pod("a", "");
    let b = pod("b", "");
    let s = pod("s", "besteffort");
    let t = pod("t", "burstable");
    let ac = guaranteed(&a, "app", 2000);
    let bc = guaranteed(&b, "app", 1000);
    let sc = besteffort(&s, "app");
    let tc = burstable(&t, "app");
    assert_eq!(p.create_on(&s, &sc).await, set("0-7"));
    let a_cpus = p.create_on(&a, &ac).await;
    let b_cpus = p.create_on(&b, &bc).await;
    let shared = set("0-7").difference(&a_cpus).difference(&b_cpus);
    assert_eq!(p.create_on(&t, &tc).await, shared);
    assert_eq!(env.saved().containers.len(), 2);
    Scene {
        pods: vec![a, b, s, t],
        containers: vec![
            exclusive_on(ac, &a_cpus),
            exclusive_on(bc, &b_cpus),
            shared_on(sc, &shared),
            shared_on(tc, &shared),
        ],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_with_the_runtime_agreeing_needs_no_updates() {
    for page in [None, Some(1)] {
        let env = Env::new();
        let p = env.start_synced(env.config(), two_socket()).await;
        let scene = build_scene(&env, &p).await;
        let books = env.saved();
        p.kill().await;

        let p = env.start(env.config(), two_socket()).await;
        let (r, _) = p
            .conn
            .synchronize(scene.pods.clone(), scene.containers.clone(), page)
            .await
            .expect("sync");
        assert!(r.update.is_empty(), "page {page:?}: {:?}", moved(&r.update));
        assert_eq!(env.saved(), books, "page {page:?}");
        // The free CPUs are what they were: 7 − 3 = 4 for the next exclusive container.
        let c = pod("c", "");
        let got = p.create_on(&c, &guaranteed(&c, "app", 4000)).await;
        let held: CpuSet = books
            .containers
            .iter()
            .filter_map(|a| a.cpus.clone())
            .fold(CpuSet::new(), |acc, s| acc.union(&s));
        assert_eq!(got, set("1-7").difference(&held), "page {page:?}");
        p.kill().await;
    }
}

/// Each container's cpuset once the runtime applied the Synchronize reply.
fn after_sync(
    containers: &[api::Container],
    updates: &[api::ContainerUpdate],
) -> BTreeMap<String, CpuSet> {
    let moved = moved(updates);
    containers
        .iter()
        .map(|c| {
            let cpus = match moved.get(&c.id) {
                Some(m) => set(m),
                None => set(&c
                    .linux
                    .as_ref()
                    .and_then(|l| l.resources.as_ref())
                    .and_then(|r| r.cpu.as_ref())
                    .map(|c| c.cpus.clone())
                    .unwrap_or_default()),
            };
            (c.id.clone(), cpus)
        })
        .collect()
}

/// No CPU granted twice, none reserved, the shared containers on exactly the rest.
fn assert_books_balance(
    env: &Env,
    view: &BTreeMap<String, CpuSet>,
    exclusive_ids: &[&str],
    shared_ids: &[&str],
) {
    let mut union = CpuSet::new();
    for id in exclusive_ids {
        let s = &view[*id];
        assert!(
            union.intersection(s).is_empty(),
            "{id}: {s} granted twice ({view:?})"
        );
        assert!(!s.contains(0), "{id}: reserved cpu granted");
        union = union.union(s);
    }
    for id in shared_ids {
        assert_eq!(view[*id], set("0-7").difference(&union), "{id} ({view:?})");
    }
    let saved: CpuSet = env
        .saved()
        .containers
        .iter()
        .filter_map(|a| a.cpus.clone())
        .fold(CpuSet::new(), |acc, s| acc.union(&s));
    assert_eq!(saved, union, "state file lists exactly the exclusive cpus");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_reconciles_disagreements_vanished_and_doubly_claimed_cpus() {
    let env = Env::new();
    let p = env.start_synced(env.config(), two_socket()).await;
    let scene = build_scene(&env, &p).await;
    // A third exclusive container that will vanish while topolet is down.
    let v = pod("v", "");
    let v_cpus = p.create_on(&v, &guaranteed(&v, "app", 1000)).await;
    assert_eq!(env.saved().containers.len(), 3);
    p.kill().await;

    // While topolet was away: v is gone; b was moved (by someone) onto one of a's CPUs; a new
    // Guaranteed container n appeared, created without us, on the whole machine.
    let a_cpus = set(&scene.containers[0].linux.resources.cpu.cpus);
    let stolen = set(&a_cpus.iter().next().expect("a has cpus").to_string());
    let n = pod("n", "");
    let nc = running_on(guaranteed(&n, "app", 1000), &set("0-7"));
    let mut pods = scene.pods.clone();
    pods.push(n.clone());
    let mut ctrs = scene.containers.clone();
    ctrs[1] = running_on(ctrs[1].clone(), &stolen);
    ctrs.push(nc);

    let p = env.start(env.config(), two_socket()).await;
    let (r, _) = p
        .conn
        .synchronize(pods, ctrs.clone(), Some(2))
        .await
        .expect("sync");
    let view = after_sync(&ctrs, &r.update);
    // a's actual set wins (it runs on it); b goes back to its saved CPU.
    assert_eq!(view["a-app"], a_cpus);
    let b_saved = set(&scene.containers[1].linux.resources.cpu.cpus);
    assert_eq!(view["b-app"], b_saved);
    assert_eq!(view["n-app"].len(), 1);
    assert!(r.update.iter().all(|u| u.ignore_failure));
    assert_books_balance(
        &env,
        &view,
        &["a-app", "b-app", "n-app"],
        &["s-app", "t-app"],
    );
    // v's assignment is gone from the books.
    assert!(env.saved().get(&ContainerKey::new("v", "app")).is_none());
    let _ = v_cpus;

    // Two containers claiming the same CPU, and the state file out of date: one keeps it, the
    // other gets another CPU, the shared ones move off both.
    let x = pod("x", "");
    let y = pod("y", "");
    let xc = running_on(guaranteed(&x, "app", 1000), &set("5"));
    let yc = running_on(guaranteed(&y, "app", 1000), &set("5"));
    let s = pod("s", "besteffort");
    let sc = running_on(besteffort(&s, "app"), &set("0-7"));
    let ctrs = vec![xc, yc, sc];
    let (r, _) = p
        .conn
        .synchronize(vec![x, y, s], ctrs.clone(), None)
        .await
        .expect("sync");
    let view = after_sync(&ctrs, &r.update);
    assert_eq!(
        view["x-app"],
        set("5"),
        "first in id order keeps its own set"
    );
    assert_eq!(view["y-app"].len(), 1);
    assert_books_balance(&env, &view, &["x-app", "y-app"], &["s-app"]);
    assert_eq!(env.saved().containers.len(), 2, "a, b and n are gone");
    p.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_foreign_or_newer_state_file_is_moved_aside_and_rebuilt() {
    for (what, bytes) in [
        ("corrupt", b"{\"format\":\"topolet-state\",\"version\":1,\"length\":5,\"crc32\":\"00000000\"}\nhello".to_vec()),
        ("foreign", b"{\"containers\":[]}".to_vec()),
        // A newer topolet's format, after a rollback: refused, never guessed at (its
        // assignments come back from the running containers at Synchronize).
        ("newer", b"{\"format\":\"topolet-state\",\"version\":2,\"length\":2,\"crc32\":\"00000000\"}\n{}".to_vec()),
    ] {
        let env = Env::new();
        std::fs::create_dir_all(env.state_dir()).expect("mkdir");
        std::fs::write(env.state_path(), &bytes).expect("write");
        let p = env.start(env.config(), two_socket()).await;
        let aside = PathBuf::from(format!("{}.bad", env.state_path().display()));
        assert_eq!(std::fs::read(&aside).expect("moved aside"), bytes, "{what}");
        let g = pod("g", "");
        let gc = exclusive_on(guaranteed(&g, "app", 2000), &set("2-3"));
        let (r, _) = p
            .conn
            .synchronize(vec![g], vec![gc], None)
            .await
            .expect("sync");
        assert!(r.update.is_empty(), "{what}: {:?}", moved(&r.update));
        let saved = env.saved();
        assert_eq!(saved.containers.len(), 1, "{what}");
        assert_eq!(saved.containers[0].cpus, Some(set("2-3")), "{what}");
        p.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_container_keeps_its_cpu_when_the_old_instance_ends_late() {
    let env = Env::new();
    let p = env.start_synced(env.config(), two_cpu()).await;
    let be = pod("be", "besteffort");
    assert_eq!(p.create_on(&be, &besteffort(&be, "a")).await, set("0-1"));
    let x = pod("x", "");
    let old = guaranteed(&x, "app", 1000);
    let (cpus, moves) = p.create_moving(&x, &old).await;
    assert_eq!(cpus, set("1"));
    assert_eq!(moves, map(&[("be-a", "0")]));

    // The kubelet restarts the container: same pod and name, a new id, before the old
    // instance's Stop and Remove arrive.
    let mut new = guaranteed(&x, "app", 1000);
    new.id = "x-app-restart-1".into();
    assert_eq!(p.create_moving(&x, &new).await, (set("1"), BTreeMap::new()));
    assert!(p.stop(&x, &old).await.is_empty());
    p.remove(&x, &old).await;
    assert_eq!(
        env.saved()
            .get(&ContainerKey::new("x", "app"))
            .and_then(|a| a.cpus.clone()),
        Some(set("1")),
        "the new instance still holds CPU 1"
    );
    // No update was sent for the old instance: the new instance's release moves `be` back.
    assert_eq!(p.stop(&x, &new).await, map(&[("be-a", "0-1")]));
    p.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_still_being_created_at_synchronize_gets_its_cpuset_again_once_it_runs() {
    // Created while topolet was away and not started yet: the Synchronize reply's update may
    // be lost if containerd starts the task from the old spec, so topolet repeats it at
    // PostStartContainer (and only for such containers).
    let env = Env::new();
    let p = env.start(env.config(), two_cpu()).await;
    let g = pod("g", "");
    let mut gc = guaranteed(&g, "app", 1000);
    gc.state = api::ContainerState::CONTAINER_CREATED.into();
    let be = pod("be", "besteffort");
    let bc = running_on(besteffort(&be, "app"), &set("0-1"));
    // Also being created, and its spec already says what it should: no update now, but its
    // task may be starting from an older spec (an update that reached only the stored spec
    // before topolet's restart), so it too gets its cpuset once it runs.
    let c = pod("c", "besteffort");
    let mut cc = running_on(besteffort(&c, "app"), &set("0"));
    cc.state = api::ContainerState::CONTAINER_CREATED.into();
    let (r, _) = p
        .conn
        .synchronize(
            vec![g.clone(), be.clone(), c.clone()],
            vec![gc.clone(), bc.clone(), cc.clone()],
            None,
        )
        .await
        .expect("sync");
    assert_eq!(moved(&r.update), map(&[("be-app", "0"), ("g-app", "1")]));

    let post_start = |pod: &api::PodSandbox, c: &api::Container| api::PostStartContainerRequest {
        pod: Some(pod.clone()).into(),
        container: Some(c.clone()).into(),
        ..Default::default()
    };
    // The running one needs nothing more; the one that was being created gets its CPU again.
    p.conn
        .client()
        .post_start_container(p.conn.ctx(), &post_start(&be, &bc))
        .await
        .expect("post start be");
    p.conn
        .client()
        .post_start_container(p.conn.ctx(), &post_start(&g, &gc))
        .await
        .expect("post start g");
    p.conn
        .client()
        .post_start_container(p.conn.ctx(), &post_start(&c, &cc))
        .await
        .expect("post start c");
    assert_eq!(
        p.moves_delivered(&[], &["c-app", "g-app"]).await,
        map(&[("c-app", "0"), ("g-app", "1")])
    );
    // Once only.
    p.conn
        .client()
        .post_start_container(p.conn.ctx(), &post_start(&g, &gc))
        .await
        .expect("post start g again");
    let w = pod("w", "besteffort");
    let r = p
        .create(&w, &besteffort(&w, "app"))
        .await
        .expect("create w");
    assert!(
        r.update.is_empty(),
        "nothing queued: {:?}",
        moved(&r.update)
    );
    assert_eq!(
        p.stop(&g, &gc).await,
        map(&[("be-app", "0-1"), ("c-app", "0-1"), ("w-app", "0-1")])
    );
    p.kill().await;
}

fn post_start_request(pod: &api::PodSandbox, c: &api::Container) -> api::PostStartContainerRequest {
    api::PostStartContainerRequest {
        pod: Some(pod.clone()).into(),
        container: Some(c.clone()).into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_moved_before_it_started_gets_its_cpuset_again_once_it_runs() {
    // `early` is created and started before the grant; `late` is created before the grant but
    // starts after it: the grant's reply moves both, and only `late` (whose task may have
    // started from the old spec) is sent its cpuset again, once it runs.
    let env = Env::new();
    let p = env.start_synced(env.config(), two_cpu()).await;
    let e = pod("early", "besteffort");
    let ec = besteffort(&e, "app");
    assert_eq!(p.create_on(&e, &ec).await, set("0-1"));
    p.conn
        .client()
        .post_start_container(p.conn.ctx(), &post_start_request(&e, &ec))
        .await
        .expect("post start early");
    let l = pod("late", "burstable");
    let lc = burstable(&l, "app");
    assert_eq!(p.create_on(&l, &lc).await, set("0-1"));
    let g = pod("g", "");
    let gc = guaranteed(&g, "app", 1000);
    let (cpus, moves) = p.create_moving(&g, &gc).await;
    assert_eq!(cpus, set("1"));
    assert_eq!(moves, map(&[("early-app", "0"), ("late-app", "0")]));
    p.conn
        .client()
        .post_start_container(p.conn.ctx(), &post_start_request(&l, &lc))
        .await
        .expect("post start late");
    let u = p.next_update().await;
    assert_eq!(moved(&u.update), map(&[("late-app", "0")]));
    p.kill().await;
}

/// `c` as the runtime reports it, with `mems` in its cpuset.
fn with_mems(mut c: api::Container, mems: &str) -> api::Container {
    c.linux
        .mut_or_insert_default()
        .resources
        .mut_or_insert_default()
        .cpu
        .mut_or_insert_default()
        .mems = mems.into();
    c
}

/// Container id → mems of each update.
fn mems_sent(updates: &[api::ContainerUpdate]) -> BTreeMap<String, String> {
    updates
        .iter()
        .map(|u| (u.container_id.clone(), update_cpu(u).mems.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronize_gives_narrowed_shared_containers_every_node_again() {
    // a holds all of node 1; the shared pool is node 0's CPUs. s was narrowed to node 0 by an
    // earlier topolet (shared_pool_mems_follow_cpus, or before it existed): it gets both nodes
    // back, as the kubelet would have left it. t already has both, u was never touched: nothing.
    let env = Env::new();
    let p = env.start(env.config(), two_socket()).await;
    let a = pod("a", "");
    let ac = exclusive_on(guaranteed(&a, "app", 4000), &set("2-3,6-7"));
    let s = pod("s", "besteffort");
    let sc = running_on(besteffort(&s, "app"), &set("0-1,4-5"));
    let t = pod("t", "burstable");
    let tc = with_mems(running_on(burstable(&t, "app"), &set("0-1,4-5")), "0-1");
    let u = pod("u", "besteffort");
    let uc = with_mems(running_on(besteffort(&u, "app"), &set("0-1,4-5")), "");
    let (r, _) = p
        .conn
        .synchronize(vec![a, s, t, u], vec![ac, sc, tc, uc], None)
        .await
        .expect("sync");
    assert_eq!(mems_sent(&r.update), map(&[("s-app", "0-1")]));
    p.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronize_narrows_stale_mems_with_shared_pool_mems_follow_cpus() {
    // The opt-in keeps the former behaviour: shared mems follow the shared pool's CPUs.
    let env = Env::new();
    let mut cfg = env.config();
    cfg.memory.shared_pool_mems_follow_cpus = true;
    let p = env.start(cfg, two_socket()).await;
    let a = pod("a", "");
    let ac = exclusive_on(guaranteed(&a, "app", 4000), &set("2-3,6-7"));
    let s = pod("s", "besteffort");
    let sc = with_mems(running_on(besteffort(&s, "app"), &set("0-1,4-5")), "0-1");
    let (r, _) = p
        .conn
        .synchronize(vec![a, s], vec![ac, sc], None)
        .await
        .expect("sync");
    assert_eq!(mems_sent(&r.update), map(&[("s-app", "0")]));
    p.kill().await;
}

/// Four NUMA nodes of 2 CPUs each (CPUs 0-1 node 0, 2-3 node 1, 4-5 node 2, 6-7 node 3).
fn four_nodes() -> Topology {
    SyntheticSpec {
        sockets: 1,
        numa_per_socket: 4,
        l3_per_numa: 1,
        cores_per_l3: 2,
        threads_per_core: 1,
        memory_per_node: 4 << 30,
    }
    .build()
}

/// The scene: once nodes 1 and 2 hold only exclusive containers, BestEffort and
/// Burstable containers keep every memory node (no mems in their adjustments or moves), as
/// with the kubelet; with `shared_pool_mems_follow_cpus` they shrink to nodes 0 and 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_containers_keep_every_memory_node_unless_asked() {
    for follow in [false, true] {
        let env = Env::new();
        let mut cfg = env.config();
        cfg.memory.shared_pool_mems_follow_cpus = follow;
        cfg.topology.policy = TopologyPolicyName::SingleNumaNode;
        let p = env.start_synced(cfg, four_nodes()).await;
        let be = pod("be", "besteffort");
        let bu = pod("bu", "burstable");
        let r = p.create(&be, &besteffort(&be, "a")).await.expect("be");
        assert_eq!(
            adj_cpu(&r).expect("cpu").mems,
            if follow { "0-3" } else { "" }
        );
        let r = p.create(&bu, &burstable(&bu, "b")).await.expect("bu");
        assert_eq!(
            adj_cpu(&r).expect("cpu").mems,
            if follow { "0-3" } else { "" }
        );
        let mut last = BTreeMap::new();
        for (uid, cpus) in [("x1", "2-3"), ("x2", "4-5")] {
            let x = pod(uid, "");
            let r = p
                .create(&x, &guaranteed(&x, "app", 2000))
                .await
                .expect("exclusive");
            let cpu = adj_cpu(&r).expect("cpu");
            assert_eq!(cpu.cpus, cpus);
            // Exclusive containers' mems follow their CPUs either way.
            assert_eq!(cpu.mems, if uid == "x1" { "1" } else { "2" });
            last = mems_sent(&r.update);
        }
        let want = if follow { "0,3" } else { "" };
        assert_eq!(
            last,
            map(&[("be-a", want), ("bu-b", want)]),
            "follow {follow}"
        );
        p.kill().await;
    }
}

/// Nothing is queued for anyone: the reply to a new shared container's creation carries no
/// update.
async fn assert_nothing_queued(p: &Running) {
    let w = pod("w", "besteffort");
    let r = p
        .create(&w, &besteffort(&w, "app"))
        .await
        .expect("create w");
    assert!(r.update.is_empty(), "{:?}", moved(&r.update));
}

/// A `/proc` with one process per `(pid, Cpus_allowed_list)`.
fn fake_proc(processes: &[(u32, &str)]) -> tempfile::TempDir {
    let proc = tempfile::tempdir().expect("tempdir");
    for (pid, cpus) in processes {
        let d = proc.path().join(pid.to_string());
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(
            d.join("status"),
            format!("Name:\tsleep\nCpus_allowed_list:\t{cpus}\n"),
        )
        .expect("status");
    }
    proc
}

/// `c` as a running container whose init process is `pid`.
fn with_pid(mut c: api::Container, pid: u32) -> api::Container {
    c.state = api::ContainerState::CONTAINER_RUNNING.into();
    c.pid = pid;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_container_running_outside_its_cpuset_is_sent_it_again() {
    // Before the restart, g's grant moved `be` off CPU 1 in a reply that reached only be's
    // stored spec (its task was starting from the old one), and topolet was killed before be's
    // PostStartContainer: the runtime reports be on CPU 0, its process may run on 0-1. `bu` and
    // `g` really run where their specs say.
    let env = Env::new();
    let proc = fake_proc(&[(101, "0-1"), (102, "0"), (103, "1")]);
    let p = env
        .start_with_proc(env.config(), two_cpu(), Some(proc.path()))
        .await;
    let g = pod("g", "");
    let gc = with_pid(exclusive_on(guaranteed(&g, "app", 1000), &set("1")), 103);
    let be = pod("be", "besteffort");
    let bc = with_pid(running_on(besteffort(&be, "app"), &set("0")), 101);
    let bu = pod("bu", "burstable");
    let uc = with_pid(running_on(burstable(&bu, "app"), &set("0")), 102);
    // A running container whose process is gone by now: nothing to send.
    let gone = pod("gone", "besteffort");
    let xc = with_pid(running_on(besteffort(&gone, "app"), &set("0")), 104);
    let (r, _) = p
        .conn
        .synchronize(
            vec![g.clone(), be.clone(), bu.clone(), gone.clone()],
            vec![gc, bc, uc, xc],
            None,
        )
        .await
        .expect("sync");
    assert!(
        r.update.is_empty(),
        "the specs agree: {:?}",
        moved(&r.update)
    );
    let u = p.next_update().await;
    assert_eq!(moved(&u.update), map(&[("be-app", "0")]));
    assert_nothing_queued(&p).await;
    p.kill().await;
}

/// A slow runtime never parks a breach. `be`'s process may still run on CPU 1, which `g` holds
/// exclusively (its task started from an older spec); the runtime first never answers within
/// the request deadline, then rejects the updates, then applies them. topolet keeps sending
/// be's target with back-off (never giving up), measures the breach while it lasts (status and
/// metrics), and once the runtime applies the update the breach is over and its time counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_runtime_never_parks_a_breach() {
    let env = Env::new();
    let proc = fake_proc(&[(101, "0-1"), (103, "1")]);
    let mut plugin = TopoletPlugin::new(env.config(), two_cpu()).expect("plugin");
    plugin.set_proc_root(proc.path().to_path_buf());
    // Short back-off steps, so the test does not wait seconds between attempts.
    plugin.set_update_backoff(Duration::from_millis(20), Duration::from_millis(80));
    let plugin = Arc::new(plugin);
    let mut breaching = plugin.breaching();
    // NRI with the UpdateContainers fix: the short lull.
    let p = env.start_plugin_as(plugin.clone(), "v0.12.3").await;
    p.conn.set_update_answer(UpdateAnswer::Stall);

    let g = pod("g", "");
    let gc = with_pid(exclusive_on(guaranteed(&g, "app", 1000), &set("1")), 103);
    let be = pod("be", "besteffort");
    let bc = with_pid(running_on(besteffort(&be, "app"), &set("0")), 101);
    let (r, _) = p
        .conn
        .synchronize(vec![g.clone(), be.clone()], vec![gc, bc], None)
        .await
        .expect("sync");
    assert!(
        r.update.is_empty(),
        "the specs agree: {:?}",
        moved(&r.update)
    );

    // The post-Synchronize check finds be's process allowed on CPU 1: a breach, until the
    // runtime applies be's cpuset.
    tokio::time::timeout(GUARD, breaching.wait_for(|n| *n == 1))
        .await
        .expect("the breach observed in time")
        .expect("plugin alive");
    let status = topolet::introspection::status(&*plugin, None, None);
    assert_eq!(status.breaches.len(), 1, "{:?}", status.breaches);
    let b = &status.breaches[0];
    assert!(b.container.ends_with("pod-be/app"), "{b:?}");
    assert_eq!(b.cpus, set("1"));
    assert_eq!(b.holders.len(), 1);
    assert!(b.holders[0].ends_with("pod-g/app"), "{b:?}");
    let table = topolet::introspection::status_table::render_table(&status);
    assert!(table.contains("BREACH: "), "{table}");
    assert!(table.contains("pod-be/app"), "{table}");

    // The runtime never answers: the first request runs into its deadline. A second one proves
    // topolet sent be's target again (one request at a time: the first had ended).
    for _ in 0..2 {
        let u = p.next_update().await;
        assert_eq!(moved(&u.update), map(&[("be-app", "0")]));
    }
    // Then it rejects them (the stalled one included): topolet keeps at it.
    p.conn.set_update_answer(UpdateAnswer::Reject(
        "deadline exceeded in the guest".into(),
    ));
    for _ in 0..3 {
        let u = p.next_update().await;
        assert_eq!(moved(&u.update), map(&[("be-app", "0")]));
    }
    assert_eq!(
        *breaching.borrow(),
        1,
        "still in breach while the runtime fails"
    );
    assert_eq!(
        metric(&plugin, "topolet_exclusive_breach_containers "),
        Some(1.0)
    );

    // The runtime recovers: an attempt is applied (the one it was answering, or the next) and
    // the breach is over. Every request it received carried be's target.
    p.conn.set_update_answer(UpdateAnswer::Apply);
    tokio::time::timeout(GUARD, breaching.wait_for(|n| *n == 0))
        .await
        .expect("the breach closed in time")
        .expect("plugin alive");
    while let Some(u) = p.conn.try_next_update() {
        assert_eq!(moved(&u.update), map(&[("be-app", "0")]));
    }
    assert_eq!(
        metric(&plugin, "topolet_exclusive_breach_containers "),
        Some(0.0)
    );
    let seconds = metric(&plugin, "topolet_exclusive_breach_seconds_total ").expect("counter");
    assert!(seconds > 0.0, "breach time counted: {seconds}");
    assert!(topolet::introspection::status(&*plugin, None, None)
        .breaches
        .is_empty());
    assert_nothing_queued(&p).await;
    p.kill().await;
}

// ------------------------------------------------------------------------------------------------
// Refusals as the kubelet words them

/// The refusal topolet returns is what `kubectl describe pod` shows (CreateContainerError, in
/// containerd's wrapping): one line, the kubelet's admission reason first, then what was asked
/// and what each NUMA node has free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_say_what_the_kubelets_admission_would() {
    // single-numa-node on two sockets (node 0: CPUs 1,4,5 free, CPU 0 reserved; node 1: 2,3,6,7).
    let env = Env::new();
    let mut cfg = env.config();
    cfg.topology.policy = TopologyPolicyName::SingleNumaNode;
    let p = env.start_synced(cfg, two_socket()).await;
    let x = pod("x", "");
    let err = p
        .create(&x, &guaranteed(&x, "main", 5000))
        .await
        .expect_err("refused");
    assert_eq!(
        err,
        "topolet: TopologyAffinityError: container main of pod default/pod-x asks 5 exclusive \
         CPUs; free per NUMA node: node0 3, node1 4; topology manager policy single-numa-node \
         cannot align them"
    );
    p.kill().await;

    // Whole cores only: 1 CPU is not a multiple of 2 threads per core.
    let env = Env::new();
    let mut cfg = env.config();
    cfg.cpu.full_pcpus_only = true;
    let p = env.start_synced(cfg, two_socket()).await;
    let err = p
        .create(&x, &guaranteed(&x, "main", 1000))
        .await
        .expect_err("refused");
    assert_eq!(
        err,
        "topolet: SMTAlignmentError: container main of pod default/pod-x asks 1 exclusive CPU; \
         free per NUMA node: node0 3, node1 4; full_pcpus_only needs a multiple of 2 cpus per \
         core (6 free on whole cores)"
    );
    assert!(!err.contains('\n'), "one line: {err}");
    p.kill().await;

    // Not enough CPUs (2 CPUs, CPU 0 reserved), at creation and at resize.
    let env = Env::new();
    let p = env.start_synced(env.config(), two_cpu()).await;
    let err = p
        .create(&x, &guaranteed(&x, "main", 2000))
        .await
        .expect_err("refused");
    assert_eq!(
        err,
        "topolet: UnexpectedAdmissionError (not enough cpus): container main of pod \
         default/pod-x asks 2 exclusive CPUs; free per NUMA node: node0 1"
    );
    let g = pod("g", "");
    let gc = guaranteed(&g, "main", 1000);
    assert_eq!(p.create_on(&g, &gc).await, set("1"));
    let err = p
        .update(&g, &gc, resize_to(2000))
        .await
        .expect_err("refused");
    assert_eq!(
        err,
        "topolet: UnexpectedAdmissionError (not enough cpus): container main of pod \
         default/pod-g asks 2 exclusive CPUs (in-place resize); free per NUMA node: node0 0"
    );
    p.kill().await;
}

/// A synchronized plugin on the two-CPU machine whose Events go to a queue of `capacity`: the
/// plugin, its connection, and the queue's receiving end.
async fn with_event_queue(
    env: &Env,
    capacity: usize,
) -> (
    Arc<TopoletPlugin>,
    Running,
    tokio::sync::mpsc::Receiver<topolet::cluster::recorder::Message>,
) {
    let plugin = Arc::new(TopoletPlugin::new(env.config(), two_cpu()).expect("plugin"));
    let (sink, rx) =
        topolet::cluster::recorder::EventSink::channel(capacity, plugin.metrics().clone());
    plugin.set_event_sink(sink);
    let p = env.start_plugin(plugin.clone()).await;
    p.conn
        .synchronize(vec![], vec![], None)
        .await
        .expect("sync");
    (plugin, p, rx)
}

/// A container whose cpuset another owner set (an NRI plugin with a lower index, the kubelet's
/// CPU manager) raises one Normal Event on its pod, not one per repeated create of the same
/// container.
#[tokio::test]
async fn a_container_left_to_another_cpuset_owner_raises_one_event() {
    use topolet::cluster::recorder::Message;
    use topolet_core::kube::events::EventType;
    let env = Env::new();
    let (_plugin, p, mut rx) = with_event_queue(&env, 8).await;
    let other = pod("other", "");
    let oc = running_on(guaranteed(&other, "app", 1000), &set("0"));
    for _ in 0..2 {
        assert!(is_empty_adjustment(
            &p.create(&other, &oc).await.expect("create")
        ));
    }
    let mut got = Vec::new();
    while let Ok(Message::Event(occ)) = rx.try_recv() {
        got.push(occ);
    }
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].type_, got[0].reason.as_str()),
        (EventType::Normal, "CPUSetOwnedElsewhere")
    );
    assert!(
        got[0]
            .message
            .contains("container app: cpuset 0 was set before topolet"),
        "{}",
        got[0].message
    );
    p.kill().await;
}

/// With the Kubernetes API client on, refusals (create, resize) and exclusive grants reach its
/// queue as Events on the pod, with the Event reasons; a full queue drops (and counts) instead of
/// holding the handler.
#[tokio::test]
async fn refusals_and_grants_are_handed_to_the_event_queue_without_waiting() {
    use topolet::cluster::recorder::Message;
    use topolet_core::kube::events::{EventType, ObjectRef};
    let env = Env::new();
    let (plugin, p, mut rx) = with_event_queue(&env, 2).await;
    let g = pod("g", "");
    let gc = guaranteed(&g, "main", 1000);
    assert_eq!(p.create_on(&g, &gc).await, set("1"));
    let x = pod("x", "");
    let err = p
        .create(&x, &guaranteed(&x, "main", 1000))
        .await
        .expect_err("refused");
    let mut got = Vec::new();
    while let Ok(Message::Event(occ)) = rx.try_recv() {
        got.push(occ);
    }
    assert_eq!(got.len(), 2, "{got:?}");
    let obj = |uid: &str| ObjectRef {
        namespace: "default".into(),
        name: format!("pod-{uid}"),
        uid: uid.into(),
    };
    assert_eq!(got[0].object, obj("g"));
    assert_eq!(
        (
            got[0].type_,
            got[0].reason.as_str(),
            got[0].message.as_str()
        ),
        (
            EventType::Normal,
            "ExclusiveCPUsAssigned",
            "container main got 1 exclusive CPU 1, memory nodes 0"
        )
    );
    assert_eq!(got[1].object, obj("x"));
    assert_eq!(
        (got[1].type_, got[1].reason.as_str()),
        (EventType::Warning, "InsufficientExclusiveCPUs")
    );
    assert_eq!(
        Some(got[1].message.as_str()),
        err.strip_prefix("topolet: "),
        "the refusal, without the component prefix"
    );
    // A refused resize: its own Warning.
    let err = p
        .update(&g, &gc, resize_to(2000))
        .await
        .expect_err("refused");
    let Ok(Message::Event(occ)) = rx.try_recv() else {
        panic!("no event for the refused resize")
    };
    assert_eq!(occ.reason, "InsufficientExclusiveCPUs");
    assert!(err.contains(&occ.message) && occ.message.contains("(in-place resize)"));
    // Nobody reads: the queue (2) fills, the rest is dropped and counted, every answer comes.
    for _ in 0..5 {
        p.create(&x, &guaranteed(&x, "main", 1000))
            .await
            .expect_err("refused");
    }
    assert_eq!(
        metric(
            &plugin,
            "topolet_kube_events_total{result=\"dropped_queue_full\"}"
        ),
        Some(3.0)
    );
    p.kill().await;
}

/// The metric line of `name` with `labels` (its value), from the plugin's /metrics text.
fn metric(plugin: &TopoletPlugin, name_and_labels: &str) -> Option<f64> {
    let text = plugin
        .metrics()
        .render(&topolet::telemetry::metrics::Gauges::default());
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}

// ------------------------------------------------------------------------------------------------
// Pod cgroups (the one thing topolet writes outside NRI)

/// A host-shaped tree for the plugin: `proc/self/mountinfo` naming the cpu controller under
/// `/sys`, and `sys/fs/cgroup/...` with pod cgroups created by [`CgroupTree::pod`].
struct CgroupTree {
    _dir: tempfile::TempDir,
    proc_root: PathBuf,
    sysfs_root: PathBuf,
    v2: bool,
}

impl CgroupTree {
    fn new(v2: bool) -> CgroupTree {
        let dir = tempfile::tempdir().expect("tempdir");
        let proc_root = dir.path().join("proc");
        std::fs::create_dir_all(proc_root.join("self")).expect("proc");
        let mounts = if v2 {
            "26 25 0:24 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
        } else {
            "27 26 0:25 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
             33 26 0:31 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        };
        std::fs::write(proc_root.join("self/mountinfo"), mounts).expect("mountinfo");
        let sysfs_root = dir.path().join("sys");
        CgroupTree {
            _dir: dir,
            proc_root,
            sysfs_root,
            v2,
        }
    }

    fn dir(&self, parent: &str) -> PathBuf {
        let hierarchy = if self.v2 {
            "fs/cgroup"
        } else {
            "fs/cgroup/cpu,cpuacct"
        };
        self.sysfs_root
            .join(hierarchy)
            .join(parent.trim_start_matches('/'))
    }

    /// Creates the pod cgroup of `pod` as the kubelet leaves it: `shares`, `quota` (µs, -1 none).
    fn pod(&self, pod: &api::PodSandbox, shares: u64, quota: i64) {
        let dir = self.dir(&pod.linux.cgroup_parent);
        std::fs::create_dir_all(&dir).expect("pod cgroup");
        self.set(pod, shares, quota);
    }

    /// What the kubelet writes on a resize.
    fn set(&self, pod: &api::PodSandbox, shares: u64, quota: i64) {
        let dir = self.dir(&pod.linux.cgroup_parent);
        if self.v2 {
            let q = if quota < 0 {
                "max".into()
            } else {
                quota.to_string()
            };
            std::fs::write(dir.join("cpu.max"), format!("{q} 100000\n")).expect("cpu.max");
            let weight = topolet_core::kube::qos::cpu_shares_to_weight(shares);
            std::fs::write(dir.join("cpu.weight"), format!("{weight}\n")).expect("weight");
        } else {
            std::fs::write(dir.join("cpu.cfs_quota_us"), format!("{quota}\n")).expect("quota");
            std::fs::write(dir.join("cpu.cfs_period_us"), "100000\n").expect("period");
            std::fs::write(dir.join("cpu.shares"), format!("{shares}\n")).expect("shares");
        }
    }

    /// (shares, quota) as the pod cgroup holds them (v2: shares as the weight they convert to
    /// is compared by the caller through `weight_of`).
    fn get(&self, pod: &api::PodSandbox) -> (u64, i64) {
        let dir = self.dir(&pod.linux.cgroup_parent);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("cgroup file");
        if self.v2 {
            let max = read("cpu.max");
            let q = max.split_whitespace().next().unwrap_or("");
            let quota = if q == "max" {
                -1
            } else {
                q.parse().expect("quota")
            };
            (read("cpu.weight").trim().parse().expect("weight"), quota)
        } else {
            (
                read("cpu.shares").trim().parse().expect("shares"),
                read("cpu.cfs_quota_us").trim().parse().expect("quota"),
            )
        }
    }

    /// `shares` as this tree stores them (v2: the weight).
    fn shares(&self, shares: u64) -> u64 {
        if self.v2 {
            topolet_core::kube::qos::cpu_shares_to_weight(shares)
        } else {
            shares
        }
    }
}

/// A plugin reading the tree's mounts and writing its pod cgroups.
async fn start_with_cgroups(
    env: &Env,
    cfg: Config,
    topology: Topology,
    tree: &CgroupTree,
) -> (Running, Arc<TopoletPlugin>) {
    let mut plugin = TopoletPlugin::new(cfg, topology).expect("plugin");
    plugin.set_proc_root(tree.proc_root.clone());
    plugin.set_sysfs_root(tree.sysfs_root.clone());
    let plugin = Arc::new(plugin);
    let r = env.start_plugin(plugin.clone()).await;
    let (resp, _) = r
        .conn
        .synchronize(vec![], vec![], None)
        .await
        .expect("sync");
    assert!(resp.update.is_empty());
    (r, plugin)
}

/// Waits for the pod cgroup writer (a blocking wait, off the runtime's threads).
async fn flushed(plugin: &Arc<TopoletPlugin>) {
    let p = plugin.clone();
    tokio::time::timeout(
        GUARD,
        tokio::task::spawn_blocking(move || p.flush_pod_cgroups()),
    )
    .await
    .expect("pod cgroup writes done in time")
    .expect("flush");
}

/// The pod cgroup of an exclusive pod loses its quota as the kubelet's static policy would
/// have it (cgroup v1 and v2); resizes keep it so while the pod holds exclusive CPUs, and the
/// kubelet's value comes back when a resize takes the last exclusive container back to the
/// shared pool (written by topolet only if the kubelet has not written its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_pods_cgroup_quota_is_unlimited_and_restored_after_it() {
    for v2 in [false, true] {
        let tree = CgroupTree::new(v2);
        let env = Env::new();
        let (p, plugin) = start_with_cgroups(&env, env.config(), two_socket(), &tree).await;
        let g = pod("g", "");
        let gc = guaranteed(&g, "app", 2000);
        tree.pod(&g, 2048, 200_000);
        p.create_on(&g, &gc).await;
        flushed(&plugin).await;
        assert_eq!(tree.get(&g), (tree.shares(2048), -1), "v2 {v2}");
        assert_eq!(
            metric(&plugin, "topolet_pod_cgroup_writes_total{result=\"ok\"}"),
            Some(1.0)
        );

        // Grow 2 → 3: the kubelet writes 300000 first; topolet makes it unlimited again.
        tree.set(&g, 3072, 300_000);
        p.update(&g, &gc, resize_to(3000)).await.expect("grow");
        flushed(&plugin).await;
        assert_eq!(tree.get(&g), (tree.shares(3072), -1), "v2 {v2}");

        // Shrink to 1.5 (shared): the kubelet did not write (yet): topolet puts its quota back.
        p.update(&g, &gc, resize_to(1500)).await.expect("to shared");
        flushed(&plugin).await;
        assert_eq!(tree.get(&g), (tree.shares(3072), 150_000), "v2 {v2}");

        // Back to exclusive and out again, the kubelet writing its values first: kept as is.
        tree.set(&g, 2048, 200_000);
        p.update(&g, &gc, resize_to(2000))
            .await
            .expect("to exclusive");
        flushed(&plugin).await;
        assert_eq!(tree.get(&g).1, -1, "v2 {v2}");
        tree.set(&g, 1126, 110_000);
        p.update(&g, &gc, resize_to(1100)).await.expect("to shared");
        flushed(&plugin).await;
        assert_eq!(tree.get(&g), (tree.shares(1126), 110_000), "v2 {v2}");
        p.kill().await;
    }
}

/// With `keep_cfs_quota_for_exclusive` the pod cgroup is the kubelet's; a pod without exclusive
/// CPUs is never touched; a pod cgroup that cannot be written is logged and counted, and the
/// container is placed all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_cgroups_are_left_alone_unless_exclusive_and_failures_never_fail_a_container() {
    let tree = CgroupTree::new(false);
    let env = Env::new();
    let mut cfg = env.config();
    cfg.qos.keep_cfs_quota_for_exclusive = true;
    let (p, plugin) = start_with_cgroups(&env, cfg, two_socket(), &tree).await;
    let g = pod("g", "");
    tree.pod(&g, 2048, 200_000);
    p.create_on(&g, &guaranteed(&g, "app", 2000)).await;
    let f = pod("f", "");
    tree.pod(&f, 1536, 150_000);
    p.create_on(&f, &guaranteed(&f, "app", 1500)).await;
    flushed(&plugin).await;
    assert_eq!(tree.get(&g), (2048, 200_000));
    assert_eq!(tree.get(&f), (1536, 150_000));
    p.kill().await;

    let env = Env::new();
    let (p, plugin) = start_with_cgroups(&env, env.config(), two_socket(), &tree).await;
    let f = pod("f", "");
    p.create_on(&f, &guaranteed(&f, "app", 1500)).await;
    let gone = pod("nocgroup", "");
    // No pod cgroup on disk: the container is placed, the write fails and is counted.
    let cpus = p.create_on(&gone, &guaranteed(&gone, "app", 1000)).await;
    assert_eq!(cpus.len(), 1);
    flushed(&plugin).await;
    assert_eq!(
        tree.get(&f),
        (1536, 150_000),
        "shared pods are the kubelet's"
    );
    assert_eq!(
        metric(&plugin, "topolet_pod_cgroup_writes_total{result=\"error\"}"),
        Some(1.0)
    );
    p.kill().await;
}

/// A refused in-place resize: the kubelet resized the pod cgroup first (shares 2048, quota
/// 200000 for 2 CPUs) and leaves it so when it gives up. topolet puts back the values of what
/// the containers still run with (1.5 CPUs: 1536 / 150000; a pod holding exclusive CPUs:
/// unlimited). The kubelet's retries, refused identically, are logged once and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resize_puts_the_pod_cgroup_back_and_is_logged_once() {
    for v2 in [false, true] {
        let tree = CgroupTree::new(v2);
        let env = Env::new();
        let (p, plugin) = start_with_cgroups(&env, env.config(), two_cpu(), &tree).await;
        // CPU 1 taken: a resize of f to 2 exclusive CPUs cannot be done.
        let x = pod("x", "");
        tree.pod(&x, 1024, 100_000);
        p.create_on(&x, &guaranteed(&x, "app", 1000)).await;
        let f = pod("f", "");
        let fc = guaranteed(&f, "app", 1500);
        tree.pod(&f, 1536, 150_000);
        p.create_on(&f, &fc).await;
        for retry in 0..3 {
            tree.set(&f, 2048, 200_000);
            p.update(&f, &fc, resize_to(2000))
                .await
                .expect_err("refused");
            flushed(&plugin).await;
            assert_eq!(
                tree.get(&f),
                (tree.shares(1536), 150_000),
                "v2 {v2} retry {retry}"
            );
        }
        assert_eq!(
            metric(
                &plugin,
                "topolet_refusal_logs_suppressed_total{operation=\"resize\"}"
            ),
            Some(2.0)
        );
        // The exclusive pod grown beyond the node: back to unlimited and 1024 shares.
        tree.set(&x, 2048, 200_000);
        p.update(&x, &guaranteed(&x, "app", 1000), resize_to(2000))
            .await
            .expect_err("refused");
        flushed(&plugin).await;
        assert_eq!(tree.get(&x), (tree.shares(1024), -1), "v2 {v2}");
        // Values topolet cannot account for (pod overhead, containers it does not see): kept.
        tree.set(&f, 2100, 210_000);
        p.update(&f, &fc, resize_to(2000))
            .await
            .expect_err("refused");
        flushed(&plugin).await;
        assert_eq!(tree.get(&f), (tree.shares(2100), 210_000), "v2 {v2}");
        p.kill().await;
    }
}
