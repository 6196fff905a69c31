//! Unit tests of the handlers' pieces, without a socket: the handlers called directly on a
//! `TopoletPlugin` of a small synthetic machine (2 sockets × 2 cores × 2 threads: node 0 = CPUs
//! 0,1,4,5, node 1 = 2,3,6,7; CPU 0 reserved), NRI messages shaped as the kubelet's through
//! containerd. The protocol-level tests (real stub, fake runtime) are plugin/tests/nri_handlers.rs.

use crate::state::NodeState;
use std::path::Path;
use std::time::Instant;

use topolet_nri::plugin::PluginResult;

use super::*;
use crate::config::CpuPolicyName;
use crate::nri::handlers::drift::read_probes;
use crate::nri::handlers::synchronize::{mems_match, sync_updates, sync_views};
use crate::nri::outbox::QUIET;
use crate::nri::records::{Decided, DriftProbe, Lifecycle, Record};
use crate::nri::view::tests::{container, sandbox, with_cpuset};
use crate::nri::{adjust, view};
use topolet_core::kube::container_key::ContainerKey;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::SyntheticSpec;
use topolet_core::managers::topology::hints::NumaMask;
use topolet_core::placement::Candidate;

const GIB: i64 = 1 << 30;

fn machine() -> Topology {
    SyntheticSpec::TWO_SOCKETS_SMT.build()
}

fn config(dir: &Path) -> Config {
    let mut c = Config::default();
    c.cpu.reserved_cpus = Some("0".into());
    c.qos.oom_score_adj_floor = Some(0);
    c.state.dir = dir.to_path_buf();
    c
}

struct Fixture {
    plugin: TopoletPlugin,
    dir: tempfile::TempDir,
}

fn fixture(edit: impl FnOnce(&mut Config)) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = config(dir.path());
    edit(&mut c);
    let mut plugin = TopoletPlugin::new(c, machine()).expect("plugin");
    // No cgroup hierarchy to be found there: pod cgroup writes never reach the host.
    plugin.set_proc_root(dir.path().join("proc"));
    plugin.set_sysfs_root(dir.path().join("sys"));
    Fixture { plugin, dir }
}

fn besteffort(uid: &str, name: &str) -> (api::PodSandbox, api::Container) {
    let sb = sandbox(uid, &format!("/kubepods/besteffort/pod{uid}"));
    let mut c = container(name, 2, 0, 0, 1000);
    c.id = format!("{uid}-{name}");
    c.pod_sandbox_id = sb.id.clone();
    (sb, c)
}

fn guaranteed(uid: &str, name: &str, cpus: i64) -> (api::PodSandbox, api::Container) {
    let sb = sandbox(uid, &format!("/kubepods/pod{uid}"));
    let mut c = container(name, 1024 * cpus as u64, 100_000 * cpus, GIB, -997);
    c.id = format!("{uid}-{name}");
    c.pod_sandbox_id = sb.id.clone();
    (sb, c)
}

/// Running on `cpus`, with a process (pid 1) for the drift check to read.
fn running(c: api::Container, cpus: &str) -> api::Container {
    let mut c = topolet_testkit::kubelet::nri::running(c, cpus);
    c.pid = 1;
    c
}

async fn create(
    p: &TopoletPlugin,
    (sb, c): &(api::PodSandbox, api::Container),
) -> PluginResult<api::CreateContainerResponse> {
    p.run_pod_sandbox(sb.clone())
        .await
        .expect("run pod sandbox");
    p.create_container(api::CreateContainerRequest {
        pod: protobuf::MessageField::some(sb.clone()),
        container: protobuf::MessageField::some(c.clone()),
        ..Default::default()
    })
    .await
}

async fn configure(p: &TopoletPlugin) {
    let runtime = RuntimeInfo {
        name: "containerd".into(),
        version: "v2.4.2".into(),
        nri_version: Some(topolet_nri::version::NriVersion::new(0, 12, 3)),
        registration_timeout_ms: 0,
        request_timeout_ms: 0,
    };
    p.configure(&api::ConfigureRequest::default(), &runtime)
        .await
        .expect("configure");
}

fn ids(updates: &[api::ContainerUpdate]) -> Vec<&str> {
    updates.iter().map(|u| u.container_id.as_str()).collect()
}

fn cpus_of(updates: &[api::ContainerUpdate], id: &str) -> Option<String> {
    let u = updates.iter().find(|u| u.container_id == id)?;
    Some(
        u.linux
            .as_ref()?
            .resources
            .as_ref()?
            .cpu
            .as_ref()?
            .cpus
            .clone(),
    )
}

#[tokio::test]
async fn reload_is_what_status_the_nrt_attributes_and_the_oom_floor_read() {
    let f = fixture(|_| {});
    let (_, before) = f.plugin.snapshot();
    assert_eq!(before.cpu, "static");
    assert_eq!(f.plugin.max_allowable_numa_nodes(), 8);
    let nrt_before = crate::cluster::nrt::NrtSource::nrt_content(&f.plugin, None);
    let mut next = config(f.dir.path());
    next.cpu.policy = CpuPolicyName::None;
    next.topology.policy = crate::config::TopologyPolicyName::SingleNumaNode;
    next.topology.max_allowable_numa_nodes = 16;
    next.qos.oom_score_adj_floor = Some(-10);
    f.plugin.reload(&next).expect("reload");
    let (_, after) = f.plugin.snapshot();
    assert_eq!(after.cpu, "none", "status shows the reloaded policy");
    assert_eq!(after.topology, "single-numa-node");
    let nrt_after = crate::cluster::nrt::NrtSource::nrt_content(&f.plugin, None);
    assert_ne!(nrt_before.topology_policies, nrt_after.topology_policies);
    assert!(
        nrt_after
            .attributes
            .iter()
            .any(|a| a.value == "single-numa-node"),
        "{:?}",
        nrt_after.attributes
    );
    assert_eq!(f.plugin.max_allowable_numa_nodes(), 16);
    assert_eq!(f.plugin.config().qos.oom_score_adj_floor, Some(-10));
    assert_eq!(f.plugin.lock().oom_floor, Some(-10));
    // A refused reload changes nothing.
    let mut bad = config(f.dir.path());
    bad.cpu.reserved_cpus = Some("0-63".into());
    assert!(f.plugin.reload(&bad).is_err());
    assert_eq!(f.plugin.snapshot().1.cpu, "none");
    assert_eq!(f.plugin.config().cpu.reserved_cpus.as_deref(), Some("0"));
}

#[tokio::test]
async fn stopped_containers_are_not_sent_shared_pool_updates() {
    let f = fixture(|_| {});
    let p = &f.plugin;
    let (b, c) = (besteffort("b", "app"), besteffort("c", "app"));
    create(p, &b).await.expect("create b");
    create(p, &c).await.expect("create c");
    // An exclusive grant moves both shared containers off its CPUs.
    let a = guaranteed("a", "app", 2);
    let reply = create(p, &a).await.expect("create a");
    assert_eq!(ids(&reply.update), ["b-app", "c-app"]);
    // c stops, then a stops: its CPUs go back to the pool, and only b is moved.
    let stop = p
        .stop_container(c.0.clone(), c.1.clone())
        .await
        .expect("stop c");
    assert!(stop.is_empty());
    let stop = p
        .stop_container(a.0.clone(), a.1.clone())
        .await
        .expect("stop a");
    assert_eq!(ids(&stop), ["b-app"]);
    // The kubelet's shared pool: every CPU no container holds, the reserved ones included.
    assert_eq!(cpus_of(&stop, "b-app").as_deref(), Some("0-7"));
    let node = p.lock();
    assert_eq!(
        node.records.get("c-app").map(Record::lifecycle),
        Some(Lifecycle::Stopped)
    );
    assert!(
        !node.records.has_pending(),
        "nothing waits for the stopped container"
    );
}

#[tokio::test]
async fn nothing_goes_unsolicited_before_a_new_connection_s_synchronize() {
    let f = fixture(|_| {});
    let p = &f.plugin;
    let (sb, c) = besteffort("b", "app");
    let (sa, a) = guaranteed("a", "app", 2);
    configure(p).await;
    let updates = p
        .synchronize(
            vec![sa.clone(), sb.clone()],
            vec![running(a.clone(), "2,6"), running(c.clone(), "0-1,3-5,7")],
        )
        .await
        .expect("synchronize");
    // a is taken over (its quota removed, its memory node set); b already runs on the pool.
    assert_eq!(ids(&updates), ["a-app"]);
    // The connection is replaced; meanwhile a's removal gives its CPUs back to the pool,
    // and RemoveContainer's reply cannot carry b's move.
    configure(p).await;
    p.remove_container(sa, a).await.expect("remove a");
    {
        let mut node = p.lock();
        assert!(node.records.has_pending());
        let later = Instant::now() + QUIET * 100;
        assert!(
            node.records.take_due(later).is_none(),
            "not before synchronize"
        );
    }
    // Synchronize's reply carries the update itself; nothing stays queued.
    let updates = p
        .synchronize(vec![sb], vec![running(c, "0-1,3-5,7")])
        .await
        .expect("synchronize");
    assert_eq!(ids(&updates), ["b-app"]);
    assert_eq!(cpus_of(&updates, "b-app").as_deref(), Some("0-7"));
    let mut node = p.lock();
    assert!(!node.records.has_pending());
    let r = node.records.get("b-app").expect("b");
    assert_eq!(r.acked(), Some(r.generation()));
    // Synchronized: a later change may go unsolicited after a lull.
    let g = r.generation();
    assert!(node
        .records
        .get_mut("b-app")
        .expect("b")
        .retarget(|t| t.cpuset = CpuSet::parse("1-7").expect("cpus")));
    node.records.queue("b-app");
    let batch = node
        .records
        .take_due(Instant::now() + QUIET * 100)
        .expect("due");
    assert_eq!(batch.entries, vec![("b-app".to_string(), g + 1)]);
}

#[tokio::test]
async fn an_unreadable_cpuset_from_the_runtime_is_refused_naming_container_and_field() {
    let f = fixture(|_| {});
    let (sb, c) = besteffort("b", "app");
    let c = with_cpuset(c, "1-x", "");
    let err = create(&f.plugin, &(sb, c)).await.expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("\"app\"") && text.contains(view::CPUSET_CPUS_FIELD),
        "{text}"
    );
    assert!(f.plugin.lock().records.is_empty(), "never claimed");
}

#[test]
fn mems_written_differently_are_the_same_mems() {
    let sb = sandbox("a", "/kubepods/poda");
    let c = with_cpuset(container("app", 2048, 200_000, GIB, -997), "", "0-1");
    let view = view::view(&sb, &c, 16 * GIB as u64).expect("view");
    let f = fixture(|_| {});
    let mut target = f
        .plugin
        .lock()
        .placement
        .admit(Candidate::Nri(&view.estimate), 0)
        .expect("admitted");
    target.mems = NumaMask::from_ids([0, 1]).expect("mask");
    let (_, conflicts) = adjust::adjustment(&view, &target);
    assert!(conflicts.is_empty(), "0-1 is 0,1: {conflicts:?}");
    target.mems = NumaMask::from_ids([1]).expect("mask");
    let (_, conflicts) = adjust::adjustment(&view, &target);
    assert_eq!(conflicts.len(), 1, "a real difference is still one");
    assert!(mems_match(
        view.current.cpuset_mems.as_ref(),
        &NumaMask::from_ids([0, 1]).expect("mask")
    ));
}

#[test]
fn numa_ids_a_mask_cannot_hold_are_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = SyntheticSpec {
        sockets: 65,
        numa_per_socket: 1,
        l3_per_numa: 1,
        cores_per_l3: 1,
        threads_per_core: 1,
        memory_per_node: 1 << 30,
    }
    .build();
    let err = TopoletPlugin::new(config(dir.path()), big)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("NUMA node 64"), "{err}");
}

#[tokio::test]
async fn the_pod_uid_of_a_removed_sandbox_is_the_sandbox_s() {
    let f = fixture(|_| {});
    // The sandbox's uid and the one in its cgroup path differ: the sandbox's is the pod's.
    let mut sb = sandbox("uid-a", "/kubepods/besteffort/podother");
    sb.id = "sb".into();
    let mut c = container("app", 2, 0, 0, 1000);
    c.id = "ctr".into();
    create(&f.plugin, &(sb.clone(), c)).await.expect("create");
    assert_eq!(
        f.plugin
            .lock()
            .records
            .get("ctr")
            .map(|r| r.view().key.pod_uid.clone()),
        Some("uid-a".to_string())
    );
    assert_eq!(f.plugin.managed_pods()[0].pod.uid, "uid-a");
    assert_eq!(f.plugin.managed_pods()[0].container_ids, ["ctr"]);
    f.plugin.remove_pod_sandbox(sb).await.expect("remove");
    assert!(f.plugin.lock().records.is_empty());
}

#[tokio::test]
async fn a_shared_container_s_pinned_memory_is_persisted_at_create() {
    let f = fixture(|c| {
        c.memory.policy = crate::config::MemoryPolicyName::Static;
        for node in ["0", "1"] {
            c.memory.reserved.insert(node.into(), "512Mi".into());
        }
    });
    // Guaranteed with 1.5 CPUs: shared CPUs, memory pinned by the memory manager.
    let sb = sandbox("frac", "/kubepods/podfrac");
    let mut c = container("app", 1536, 150_000, GIB, -997);
    c.id = "frac-app".into();
    c.pod_sandbox_id = sb.id.clone();
    create(&f.plugin, &(sb, c)).await.expect("admitted");
    let record = f
        .plugin
        .lock()
        .records
        .get("frac-app")
        .cloned()
        .expect("managed");
    assert!(!record.target().exclusive, "shared CPUs");
    assert!(record.target().memory_pinned, "memory pinned");
    // A bound, not a timing: the persister's thread writes as soon as it is scheduled.
    let st = f.plugin.flush_state(Duration::from_secs(600));
    assert!(st.submitted > 0 && !st.pending() && !st.failing, "{st:?}");
    let state: NodeState = crate::state::file::load(&f.dir.path().join(STATE_FILE))
        .expect("state file readable")
        .expect("state file written");
    let a = state
        .assignments
        .containers
        .iter()
        .find(|a| a.pod_uid == "frac" && a.container == "app")
        .expect("the container's assignment is in the state file");
    assert!(a.cpus.is_none(), "no exclusive CPUs: {a:?}");
    assert!(a.memory.is_some(), "its pinned memory: {a:?}");
}

/// The PodResources re-export reads each container's exclusive CPUs and pinned memory by pod
/// name, and the CPUs and per-node memory the node hands out (`crate::kubelet::reexport`).
#[tokio::test]
async fn the_reexport_reads_each_containers_cpus_and_memory_by_pod_name() {
    use crate::kubelet::reexport::ExportSource;
    let f = fixture(|c| {
        c.memory.policy = crate::config::MemoryPolicyName::Static;
        for node in ["0", "1"] {
            c.memory.reserved.insert(node.into(), "512Mi".into());
        }
    });
    configure(&f.plugin).await;
    create(&f.plugin, &guaranteed("g", "app", 2))
        .await
        .expect("exclusive grant");
    create(&f.plugin, &besteffort("b", "app"))
        .await
        .expect("shared container");
    let cpus = f
        .plugin
        .lock()
        .placement
        .exclusive()
        .get(&ContainerKey::new("g", "app"))
        .cloned()
        .expect("the grant");
    let x = f.plugin.exported();
    assert_eq!(
        x.containers.len(),
        1,
        "only the container holding anything: {x:?}"
    );
    let a = &x.containers[&("default".into(), "pod-g".into(), "app".into())];
    let want: Vec<i64> = cpus.iter().map(|c| c as i64).collect();
    assert_eq!(a.cpus, want);
    assert_eq!(a.memory.len(), 1, "{a:?}");
    assert_eq!(a.memory[0].memory_type, "memory");
    assert_eq!(a.memory[0].size, GIB as u64);
    // Every CPU but the reserved one (0), and each node's memory less its reservation.
    let all: Vec<i64> = (1..8).collect();
    assert_eq!(x.allocatable.cpus, all);
    let per_node: Vec<(Vec<i64>, u64)> = x
        .allocatable
        .memory
        .iter()
        .filter(|m| m.memory_type == "memory")
        .map(|m| (m.nodes.clone(), m.size))
        .collect();
    assert_eq!(
        per_node,
        vec![
            (vec![0], (8 << 30) - (512 << 20)),
            (vec![1], (8 << 30) - (512 << 20))
        ]
    );
}

/// A `/proc/<pid>/status` under the fixture's proc root.
fn fake_status(f: &Fixture, pid: u32, cpus: &str, mems: &str) {
    let d = f.dir.path().join("proc").join(pid.to_string());
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::write(
        d.join("status"),
        format!("Name:\tapp\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t{mems}\n"),
    )
    .expect("status");
}

#[tokio::test]
async fn the_drift_check_sends_a_container_running_off_its_target_its_target_again() {
    let f = fixture(|_| {});
    let p = &f.plugin;
    let (sa, a) = guaranteed("a", "app", 2);
    let (sb, b) = besteffort("b", "app");
    configure(p).await;
    let mut a = running(a, "2,6");
    a.pid = 10;
    let mut b = running(b, "0-1,3-5,7");
    b.pid = 20;
    p.synchronize(vec![sa, sb], vec![a, b])
        .await
        .expect("synchronize");
    let probes = p
        .lock()
        .records
        .drift_probes(Instant::now() + DRIFT_LULL, DRIFT_LULL);
    let ids: Vec<&str> = probes.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["a-app", "b-app"]);
    assert_eq!(probes[0].pid, 10);
    assert_eq!(probes[0].cpus, CpuSet::parse("2,6").expect("cpus"));
    // a's cgroup was rewritten behind topolet's back: its process may run on every CPU. b runs
    // inside the pool (a process may narrow its own affinity: not drift).
    fake_status(&f, 10, "0-7", "1");
    fake_status(&f, 20, "1,3", "0-1");
    let seen = read_probes(&f.dir.path().join("proc"), probes.clone());
    assert_eq!(seen.len(), 2);
    assert_eq!(p.repair_drift(seen), 1);
    assert!(p.lock().records.has_pending(), "a is queued");
    let text = p.metrics().render(&Default::default());
    assert!(
        text.contains("topolet_drift_repairs_total{field=\"cpus\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("topolet_drift_checks_total 2\n"), "{text}");
    // Queued: no check until it is sent (a difference now may be the update on its way).
    assert!(p
        .lock()
        .records
        .drift_probes(Instant::now() + DRIFT_LULL, DRIFT_LULL)
        .is_empty());
    // A probe taken before a target changed repairs nothing: the change is on its way.
    let mut node = p.lock();
    assert!(node
        .records
        .get_mut("b-app")
        .expect("b")
        .retarget(|t| t.cpuset = CpuSet::parse("1-7").expect("cpus")));
    assert!(!node.records.drifted(&probes[1]), "stale probe");
}

#[tokio::test]
async fn the_drift_check_compares_memory_nodes_a_target_names() {
    let f = fixture(|_| {});
    let p = &f.plugin;
    let (sa, a) = guaranteed("a", "app", 2);
    configure(p).await;
    let mut a = running(a, "2,6");
    a.pid = 10;
    p.synchronize(vec![sa], vec![a]).await.expect("synchronize");
    let probes = p
        .lock()
        .records
        .drift_probes(Instant::now() + DRIFT_LULL, DRIFT_LULL);
    assert_eq!(probes.len(), 1);
    assert_eq!(probes[0].mems, Some(CpuSet::parse("1").expect("mems")));
    // The CPUs are right, the memory nodes are not.
    fake_status(&f, 10, "2,6", "0-1");
    let seen = read_probes(&f.dir.path().join("proc"), probes);
    assert_eq!(p.repair_drift(seen), 1);
    let text = p.metrics().render(&Default::default());
    assert!(
        text.contains("topolet_drift_repairs_total{field=\"mems\"} 1\n"),
        "{text}"
    );
    // A process that exited since is skipped, not an error.
    let probes = vec![DriftProbe {
        id: "a-app".into(),
        pid: 99,
        generation: 1,
        cpus: CpuSet::parse("2,6").expect("cpus"),
        mems: None,
    }];
    assert!(read_probes(&f.dir.path().join("proc"), probes).is_empty());
}

#[test]
fn synchronize_manages_only_the_kubernetes_containers_of_the_pods_it_is_told() {
    let (sa, a) = guaranteed("a", "app", 2);
    // Its sandbox is not in the request.
    let (_, orphan) = besteffort("gone", "app");
    let plain = sandbox("n", "/system.slice/foo");
    let mut x = container("x", 2, 0, 0, 0);
    x.id = "plain-x".into();
    x.pod_sandbox_id = plain.id.clone();
    let views = sync_views(&[sa, plain], &[a, orphan, x], 16 * GIB as u64);
    let ids: Vec<&str> = views.iter().map(|v| v.view.id.as_str()).collect();
    assert_eq!(ids, ["a-app"]);
}

#[test]
fn the_synchronize_reply_updates_the_live_containers_off_their_targets() {
    let f = fixture(|_| {});
    let view_of = |uid: &str, cpus: &str| {
        let (sb, c) = besteffort(uid, "app");
        view::view(&sb, &running(c, cpus), 16 * GIB as u64).expect("view")
    };
    let mut target = f
        .plugin
        .lock()
        .placement
        .admit(Candidate::Nri(&view_of("on", "1-7").estimate), 0)
        .expect("admitted");
    target.cpuset = CpuSet::parse("1-7").expect("cpus");
    target.mems = NumaMask::default();
    let record = |uid: &str, cpus: &str, lifecycle| {
        let r = Record::new(
            view_of(uid, cpus),
            Decided::synchronize(),
            target.clone(),
            lifecycle,
        );
        (format!("{uid}-app"), r)
    };
    let records = [
        record("created", "2", Lifecycle::Created),
        record("off", "1-3", Lifecycle::Running),
        record("on", "1-7", Lifecycle::Running),
        record("stopped", "1-3", Lifecycle::Stopped),
    ];
    let updates = sync_updates(records.iter().map(|(_, r)| r));
    assert_eq!(ids(&updates), ["created-app", "off-app"]);
    assert_eq!(cpus_of(&updates, "off-app").as_deref(), Some("1-7"));
}

/// The background task's runs, on a clock the test drives (`run_due` is what the task runs
/// when it wakes; what it returns is when it sleeps until): an idle node is due nothing but the
/// drift check's period; a queued update is due at the end of the runtime's lull; an open
/// breach is observed every tick until it closes.
#[tokio::test]
async fn the_background_task_is_due_only_what_the_records_say() {
    use crate::nri::schedule::{Schedule, BREACH_TICK};
    let Fixture { plugin, dir: _dir } = fixture(|_| {});
    let p = Arc::new(plugin);
    configure(&p).await;
    let t0 = Instant::now();
    let every = Duration::from_secs(30);
    let mut s = Schedule::new(t0, Some(every));
    // Synchronized, no container at all: nothing is ever due.
    p.synchronize(vec![], vec![]).await.expect("synchronize");
    assert_eq!(p.run_due(&mut s, t0), None);

    let (sa, a) = guaranteed("a", "app", 2);
    let (sb, b) = besteffort("b", "app");
    let mut a = running(a, "2,6");
    a.pid = 10;
    let mut b = running(b, "1,3-5,7");
    b.pid = 20;
    p.synchronize(vec![sa, sb], vec![a, b])
        .await
        .expect("synchronize");
    // The containers Synchronize listed are checked at once...
    assert_eq!(p.run_due(&mut s, t0), Some(t0 + every));
    // ...and then only the drift check's schedule remains, however often the task looks.
    assert_eq!(p.run_due(&mut s, t0 + every / 2), Some(t0 + every));
    assert_eq!(p.run_due(&mut s, t0 + every), Some(t0 + 2 * every));
    assert_eq!(p.run_due(&mut s, t0 + every), Some(t0 + 2 * every));

    // b's cgroup was widened behind topolet's back (as the drift check finds it) onto a's
    // exclusive CPUs: it is queued to be sent its target, and until the runtime has it, b may
    // run on a's CPUs: a breach, observed every tick.
    let before = Instant::now();
    {
        let mut node = p.lock();
        node.records
            .seen_running_on("b-app", &CpuSet::parse("0-7").expect("cpus"));
        node.records.queue("b-app");
    }
    let now = Instant::now();
    assert_eq!(p.run_due(&mut s, now), Some(now + BREACH_TICK));
    assert_eq!(p.quiet_lock().breaches.len(), 1, "b breaches");
    assert_eq!(
        p.run_due(&mut s, now + BREACH_TICK),
        Some(now + 2 * BREACH_TICK)
    );
    // The reply to the next event carries b's update: the breach closes, nothing is queued,
    // and the next wake is the drift check again.
    let d = besteffort("d", "app");
    let reply = create(&p, &d).await.expect("create d");
    assert!(
        ids(&reply.update).contains(&"b-app"),
        "{:?}",
        ids(&reply.update)
    );
    let later = now + 2 * BREACH_TICK;
    assert_eq!(p.run_due(&mut s, later), Some(t0 + 2 * every));
    assert_eq!(p.quiet_lock().breaches.len(), 0);
    // Queued with no event to carry it: due at the end of the runtime's lull after the last
    // event (QUIET, the runtime has NRI's fix).
    p.quiet_lock().records.queue("b-app");
    let next = p.run_due(&mut s, later).expect("a send is due");
    assert!(next >= before + QUIET && next <= Instant::now() + QUIET);
}

#[tokio::test]
async fn the_scrape_s_cpu_sets_are_the_status_snapshot_s() {
    let f = fixture(|_| {});
    configure(&f.plugin).await;
    for (i, cpus) in [2, 1].into_iter().enumerate() {
        create(&f.plugin, &guaranteed(&format!("g{i}"), "app", cpus))
            .await
            .expect("exclusive grant");
    }
    create(&f.plugin, &besteffort("b0", "app"))
        .await
        .expect("shared container");
    let sets = f.plugin.cpu_sets();
    let (snap, _) = f.plugin.snapshot();
    let mut exclusive = CpuSet::new();
    for e in &snap.exclusive {
        exclusive.extend_from(&e.cpus);
    }
    assert_eq!(exclusive.len(), 3, "two grants, 3 CPUs: {exclusive}");
    assert_eq!(sets.exclusive, exclusive);
    assert_eq!(sets.shared, snap.shared);
    assert_eq!(sets.reserved, snap.reserved);
    assert_eq!(sets.assignable, snap.assignable);
    assert_eq!(sets.managed, 3);
    assert_eq!(sets.managed, snap.managed);
    // The status lists admissions ordered by pod, container and id (ordered outside the lock).
    let order: Vec<_> = snap.admissions.iter().map(|a| a.pod.clone()).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
}

#[tokio::test]
async fn a_panic_holding_the_node_lock_is_checked_and_the_plugin_serves_on() {
    let f = fixture(|_| {});
    configure(&f.plugin).await;
    create(&f.plugin, &guaranteed("u1", "a", 2))
        .await
        .expect("first grant");
    // A handler panics while it holds the node's lock: the lock is poisoned.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _node = f.plugin.quiet_lock();
        panic!("a handler's bug");
    }));
    assert!(panicked.is_err());
    assert!(f.plugin.node.is_poisoned());
    // The next event takes the lock back, finds the books consistent and is served.
    let r = create(&f.plugin, &guaranteed("u2", "b", 2))
        .await
        .expect("served after the panic");
    assert!(r.adjust.is_some());
    assert!(!f.plugin.node.is_poisoned());
    assert_eq!(f.plugin.quiet_lock().placement.exclusive().len(), 2);
    after_panic(&f.plugin.quiet_lock()).expect("invariants hold");
}

/// A container's device node on NUMA node 1 (a sysfs tree of a GPU there) pulls its exclusive
/// CPUs to node 1, the assignment records it for status, and a device node whose sysfs entry
/// cannot be resolved gives no hint and refuses nothing.
#[tokio::test]
async fn a_device_node_pulls_exclusive_cpus_to_its_numa_node() {
    let f = fixture(|_| {});
    let sys = f.dir.path().join("sys");
    let gpu = "devices/pci0000:80/0000:80:01.0/0000:81:00.0";
    std::fs::create_dir_all(sys.join(gpu).join("drm/card1")).expect("mkdir");
    std::fs::write(sys.join(gpu).join("numa_node"), "1\n").expect("write");
    std::fs::create_dir_all(sys.join("dev/char")).expect("mkdir");
    std::os::unix::fs::symlink(format!("../../{gpu}/drm/card1"), sys.join("dev/char/226:1"))
        .expect("link");
    let with_devices = |(sb, mut c): (api::PodSandbox, api::Container), nodes: &[(&str, i64)]| {
        let linux = c.linux.mut_or_insert_default();
        for (path, minor) in nodes {
            linux.devices.push(api::LinuxDevice {
                path: path.to_string(),
                type_: "c".into(),
                major: 226,
                minor: *minor,
                ..Default::default()
            });
        }
        (sb, c)
    };
    configure(&f.plugin).await;
    let gpu_pod = with_devices(guaranteed("u1", "train", 2), &[("/dev/dri/card1", 1)]);
    create(&f.plugin, &gpu_pod).await.expect("placed");
    let key = ContainerKey::new("u1", "train");
    let (cpus, held) = {
        let node = f.plugin.quiet_lock();
        let held = node.placement.assignments().get(&key).cloned();
        (node.placement.exclusive().get(&key).cloned(), held)
    };
    let cpus = cpus.expect("exclusive");
    assert_eq!(cpus.to_string(), "2,6", "node 1's first core");
    let devices = held.and_then(|h| h.observed_devices).expect("recorded");
    assert_eq!(devices.len(), 1);
    assert_eq!(
        (devices[0].id.as_str(), devices[0].numa),
        ("/dev/dri/card1", Some(1))
    );
    let (snapshot, _) = f.plugin.snapshot();
    assert_eq!(snapshot.devices.len(), 1);
    assert_eq!(snapshot.devices[0].affinity, NumaMask::single(1));
    // No sysfs entry for 226:9: no hint, placed as without devices (node 0's free core).
    let lost = with_devices(guaranteed("u2", "train", 2), &[("/dev/dri/card9", 9)]);
    create(&f.plugin, &lost).await.expect("placed anyway");
    let node = f.plugin.quiet_lock();
    let cpus = node
        .placement
        .exclusive()
        .get(&ContainerKey::new("u2", "train"))
        .cloned()
        .expect("exclusive");
    assert_eq!(cpus.to_string(), "1,5");
}

/// A container first seen at PostStartContainer, after this connection's Synchronize (CRI-O
/// lists a container only once it is in its store, after the NRI CreateContainer: one created
/// across a restart of topolet reaches it first here), is adopted as Synchronize adopts one
/// created while topolet was away: an exclusive container running on the runtime's cpuset gets
/// a fresh exclusive set, is recorded and queued to be sent it, and the shared containers are
/// queued to leave it.
#[tokio::test]
async fn a_container_first_seen_at_post_start_is_adopted_with_a_fresh_grant() {
    let f = fixture(|_| {});
    let p = &f.plugin;
    configure(p).await;
    let (sb, b) = besteffort("b", "app");
    p.synchronize(vec![sb], vec![running(b, "0-7")])
        .await
        .expect("synchronize");
    let (sa, a) = guaranteed("a", "app", 2);
    // The runtime created it with the shared pool's cpuset: topolet never answered its create.
    p.post_start_container(sa, running(a, "0-7"))
        .await
        .expect("post start");
    let node = p.lock();
    let record = node.records.get("a-app").expect("adopted: recorded");
    assert!(record.target().exclusive, "{:?}", record.target());
    let granted = record.target().cpuset.clone();
    assert_eq!(granted.len(), 2);
    assert!(!granted.contains(0), "reserved CPU granted: {granted}");
    assert_eq!(record.lifecycle(), Lifecycle::Running);
    let key = ContainerKey::new("a", "app");
    assert_eq!(node.placement.exclusive().get(&key), Some(&granted));
    // Both are to be sent their targets: a its set, b the shared pool without it.
    assert!(node.records.has_pending());
    let b_target = node
        .records
        .get("b-app")
        .expect("b")
        .target()
        .cpuset
        .clone();
    assert!(
        b_target.intersection(&granted).is_empty(),
        "b ({b_target}) keeps a's CPUs ({granted})"
    );
}

/// A container first seen after Synchronize that already runs on a valid exclusive set nobody
/// holds keeps it (what it runs with is its assignment); a second
/// one on the same set gets a set of its own (nothing granted twice); a second PostStart of
/// the first adopts nothing again.
#[tokio::test]
async fn an_adopted_container_keeps_its_own_free_exclusive_set_and_none_is_granted_twice() {
    let f = fixture(|_| {});
    let p = &f.plugin;
    configure(p).await;
    p.synchronize(vec![], vec![]).await.expect("synchronize");
    let (sa, a) = guaranteed("a", "app", 2);
    p.post_start_container(sa.clone(), running(a.clone(), "2,6"))
        .await
        .expect("post start a");
    let a_key = ContainerKey::new("a", "app");
    {
        let node = p.lock();
        assert_eq!(
            node.placement
                .exclusive()
                .get(&a_key)
                .map(ToString::to_string),
            Some("2,6".to_string())
        );
        let target = node.records.get("a-app").expect("a").target();
        assert_eq!(target.cpuset.to_string(), "2,6", "a stays where it runs");
    }
    let (sc, c) = guaranteed("c", "app", 2);
    p.post_start_container(sc, running(c, "2,6"))
        .await
        .expect("post start c");
    p.post_start_container(sa, running(a, "2,6"))
        .await
        .expect("post start a again");
    let node = p.lock();
    let c_key = ContainerKey::new("c", "app");
    let c_set = node.placement.exclusive().get(&c_key).cloned().expect("c");
    assert_eq!(c_set.len(), 2);
    assert!(
        c_set
            .intersection(&CpuSet::parse("2,6").expect("cpus"))
            .is_empty(),
        "c got a's CPUs: {c_set}"
    );
    assert_eq!(node.placement.exclusive().len(), 2);
    node.placement.check_invariants().expect("books balance");
}

/// Before this connection's Synchronize nothing is adopted (Synchronize lists the container);
/// a container first seen at UpdateContainer is adopted, then resized as any other: the reply
/// carries its update.
#[tokio::test]
async fn adoption_waits_for_synchronize_and_happens_at_update_container_too() {
    let f = fixture(|_| {});
    let p = &f.plugin;
    configure(p).await;
    let (sa, a) = guaranteed("a", "app", 2);
    p.post_start_container(sa.clone(), running(a.clone(), "0-7"))
        .await
        .expect("post start before synchronize");
    assert!(p.lock().records.get("a-app").is_none());
    p.synchronize(vec![], vec![]).await.expect("synchronize");
    let reply = p
        .update_container(api::UpdateContainerRequest {
            pod: protobuf::MessageField::some(sa),
            container: protobuf::MessageField::some(running(a.clone(), "0-7")),
            linux_resources: a.linux.resources.clone(),
            ..Default::default()
        })
        .await
        .expect("update");
    let own = cpus_of(&reply.update, "a-app").expect("the reply carries a's update");
    let node = p.lock();
    let key = ContainerKey::new("a", "app");
    assert_eq!(
        node.placement
            .exclusive()
            .get(&key)
            .map(ToString::to_string),
        Some(own)
    );
}
