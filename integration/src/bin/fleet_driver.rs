//! The runtime side of `hack/fleet.sh`: N fake NRI runtimes in one process, one per simulated
//! node, each replaying a container churn for pods that really exist in the API.
//!
//! `fleet_driver --dir DIR --nodes N --kubeconfig ADMIN [--pods P] [--lifetime-s L] [--seed S]
//! [--load-cgroup PATH]`
//!
//! For node i (0 ≤ i < N) it binds `DIR/<i>/nri.sock` with `topolet_nri::fake_runtime` (the NRI
//! v0.11 wire, as `proto/examples/bench_driver.rs` plays containerd v2.2.7: lifecycle events as
//! StateChange). Whenever a plugin connects (the node's topolet, at start and after every
//! restart) it is registered, configured and synchronized with the node's live pods and
//! containers, then receives the churn's events until it goes; the accept loop then waits for the
//! next connection. `DIR/driver.ready` is written once every socket is bound.
//!
//! The churn, per node: P pods (default 8) are created at once (running when topolet first
//! connects: its first Synchronize carries them), then pods arrive as a Poisson process of mean
//! rate P/L per second (L: mean lifetime, default 300 s) and each lives uniformly 0.5 L to 1.5 L,
//! so the node holds about P pods. Each pod is created through the API first (namespace `fleet`,
//! `spec.nodeName` `fleet-<i>`, as the scheduler's binding leaves it), then its sandbox and
//! containers go through the NRI lifecycle as containerd sends it (RunPodSandbox, CreateContainer,
//! PostCreate, Start, PostStart); at the end of its life its containers are stopped and removed,
//! its sandbox stopped and removed, and the pod deleted (grace 0: no kubelet confirms a graceful
//! deletion). QoS mix per pod: 1/4 Guaranteed (250m, 128Mi: fractional, no exclusive CPUs),
//! 1/2 Burstable (100m request, 256Mi limit), 1/4 BestEffort; one or two containers. Container
//! cgroup values are the ones the kubelet derives from the spec (shares from the request, quota
//! from the limit, oom_score_adj by class).
//!
//! With `--load-cgroup PATH` every node also runs one Burstable pod `fleet-<i>-load` for the whole
//! run (created first, never deleted) whose sandbox's cgroup parent is PATH, a real cgroup (in the
//! cpuacct hierarchy) the caller keeps a changing load in: topolet's reclaimed CPU with usage
//! "pods" reads the regular pods' cgroups, and this is the only one of a node's pods that exists,
//! so every node sees that load (the same on all nodes).
//!
//! Counters (pods created and deleted, NRI connections and synchronizations, send failures) are
//! written to `DIR/driver.json` every 5 s; each synchronization appends `<node> <unix ms>` to
//! `DIR/syncs.log`. Runs until SIGTERM or SIGINT; pods still live then are left to the caller
//! (the API server is thrown away).

use std::collections::BTreeMap;
use std::io::Write;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::Mutex;
use topolet_nri::api::{self, Event};
use topolet_nri::fake_runtime::{FakeRuntime, PluginConn};
use topolet_nri::protobuf::MessageField;
use topolet_nri::EventMask;

const RUNTIME_VERSION: &str = "v2.2.7";
const NRI_VERSION: &str = "v0.11.0";
const NAMESPACE: &str = "fleet";

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Default)]
struct Counters {
    pods_created: AtomicU64,
    pods_deleted: AtomicU64,
    api_errors: AtomicU64,
    connections: AtomicU64,
    synchronizations: AtomicU64,
    send_failures: AtomicU64,
}

#[derive(Clone, Copy)]
enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

struct LivePod {
    name: String,
    sandbox: api::PodSandbox,
    containers: Vec<api::Container>,
}

/// One node's runtime state: its live pods and the plugin connected now, if any.
struct NodeState {
    pods: Vec<LivePod>,
    conn: Option<(Rc<PluginConn>, EventMask)>,
}

/// xorshift64*: the churn is reproducible from the seed, without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = BTreeMap::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let k = a
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected {a}"))?;
        let v = it.next().ok_or_else(|| format!("--{k} needs a value"))?;
        opts.insert(k.to_string(), v.clone());
    }
    let get = |k: &str| -> Res<String> {
        opts.get(k)
            .cloned()
            .ok_or_else(|| format!("--{k} is required (usage: fleet_driver --dir DIR --nodes N --kubeconfig F [--pods P --lifetime-s L --seed S])").into())
    };
    let num = |k: &str, d: u64| -> Res<u64> {
        opts.get(k).map_or(Ok(d), |v| {
            v.parse().map_err(|e| format!("--{k} {v}: {e}").into())
        })
    };
    let dir = std::path::PathBuf::from(get("dir")?);
    let nodes = num("nodes", 0)? as usize;
    if nodes == 0 {
        return Err("--nodes N is required (N ≥ 1)".into());
    }
    let kubeconfig = get("kubeconfig")?;
    let pods = num("pods", 8)? as usize;
    let lifetime = num("lifetime-s", 300)? as f64;
    let seed = num("seed", 38)?;
    let load_cgroup = opts.get("load-cgroup").cloned();
    // One thread: the harness's connection is not Sync, and the load is light.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig)?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        let client = Client::try_from(config)?;
        let counters = Arc::new(Counters::default());
        let syncs = Arc::new(std::sync::Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("syncs.log"))?,
        ));
        let mut states = Vec::new();
        for i in 0..nodes {
            let fake = FakeRuntime::bind(dir.join(i.to_string()).join("nri.sock"))?;
            let state = Rc::new(Mutex::new(NodeState {
                pods: Vec::new(),
                conn: None,
            }));
            states.push(state.clone());
            tokio::task::spawn_local(serve(i, fake, state, counters.clone(), syncs.clone()));
        }
        std::fs::write(dir.join("driver.ready"), format!("{nodes}\n"))?;
        for (i, state) in states.into_iter().enumerate() {
            let rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64 + 1) << 17 | 1);
            let pods_api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
            tokio::task::spawn_local(churn(
                i,
                pods_api,
                state,
                counters.clone(),
                rng,
                (pods, lifetime),
                load_cgroup.clone(),
            ));
        }
        let report = {
            let (dir, counters) = (dir.clone(), counters.clone());
            tokio::task::spawn_local(async move {
                loop {
                    let _ = write_counters(&dir, &counters);
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
            })
        };
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        report.abort();
        write_counters(&dir, &counters)?;
        Ok(())
    })
}

fn write_counters(dir: &std::path::Path, c: &Counters) -> Res<()> {
    let tmp = dir.join("driver.json.tmp");
    std::fs::write(
        &tmp,
        format!(
            "{{\"pods_created\":{},\"pods_deleted\":{},\"api_errors\":{},\"connections\":{},\"synchronizations\":{},\"send_failures\":{}}}\n",
            c.pods_created.load(Ordering::Relaxed),
            c.pods_deleted.load(Ordering::Relaxed),
            c.api_errors.load(Ordering::Relaxed),
            c.connections.load(Ordering::Relaxed),
            c.synchronizations.load(Ordering::Relaxed),
            c.send_failures.load(Ordering::Relaxed),
        ),
    )?;
    std::fs::rename(tmp, dir.join("driver.json"))?;
    Ok(())
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Node `i`'s runtime: every plugin connection registered, configured and synchronized with the
/// node's live containers, kept as the node's current one until it closes.
async fn serve(
    i: usize,
    fake: FakeRuntime,
    state: Rc<Mutex<NodeState>>,
    counters: Arc<Counters>,
    syncs: Arc<std::sync::Mutex<std::fs::File>>,
) {
    loop {
        let conn = match fake.accept().await {
            Ok(c) => Rc::new(c),
            Err(e) => {
                eprintln!("fleet_driver: node {i}: accept: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        counters.connections.fetch_add(1, Ordering::Relaxed);
        let setup = async {
            tokio::time::timeout(Duration::from_secs(30), conn.wait_registered())
                .await
                .map_err(|_| "no RegisterPlugin in 30 s")?
                .ok_or("closed before registering")?;
            let resp = conn.configure_as(RUNTIME_VERSION, NRI_VERSION).await?;
            let mask = EventMask::from_bits(resp.events as u32);
            // The lock held across Synchronize: no churn event is sent before it, none lost.
            let mut st = state.lock().await;
            let pods = st.pods.iter().map(|p| p.sandbox.clone()).collect();
            let ctrs = st
                .pods
                .iter()
                .flat_map(|p| p.containers.iter().cloned())
                .collect();
            conn.synchronize(pods, ctrs, None).await?;
            st.conn = Some((conn.clone(), mask));
            Res::Ok(())
        };
        if let Err(e) = setup.await {
            eprintln!("fleet_driver: node {i}: plugin setup failed: {e}");
            continue;
        }
        counters.synchronizations.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = syncs.lock() {
            let _ = writeln!(f, "{i} {}", unix_ms());
        }
        conn.closed().await;
        let mut st = state.lock().await;
        if st.conn.as_ref().is_some_and(|(c, _)| Rc::ptr_eq(c, &conn)) {
            st.conn = None;
        }
    }
}

/// Node `i`'s pods: `target` at once, then arrivals at rate target/lifetime, each living
/// 0.5-1.5 lifetimes.
async fn churn(
    i: usize,
    pods_api: Api<Pod>,
    state: Rc<Mutex<NodeState>>,
    counters: Arc<Counters>,
    mut rng: Rng,
    (target, lifetime): (usize, f64),
    load_cgroup: Option<String>,
) {
    let node = format!("fleet-{i}");
    if let Some(parent) = load_cgroup {
        let name = format!("{node}-load");
        match create_pod(&pods_api, &name, &node, Qos::Burstable, 1).await {
            Ok(uid) => {
                counters.pods_created.fetch_add(1, Ordering::Relaxed);
                let mut sb = sandbox(i, &name, &uid, u64::MAX, Qos::Burstable);
                if let Some(l) = sb.linux.as_mut() {
                    l.cgroup_parent = parent.clone();
                    l.cgroups_path = format!("{parent}/{}", sb.id);
                }
                start_pod(&state, &counters, &name, sb, Qos::Burstable, 1).await;
            }
            Err(e) => {
                counters.api_errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("fleet_driver: node {i}: creating pod {name}: {e}");
            }
        }
    }
    let start = tokio::time::Instant::now();
    // (deadline, pod name): when each live pod goes.
    let mut ends: Vec<(tokio::time::Instant, String)> = Vec::new();
    let mut seq = 0u64;
    let mut next_arrival = start;
    let mut initial = target;
    loop {
        let now = tokio::time::Instant::now();
        if initial > 0 || now >= next_arrival {
            if initial > 0 {
                initial -= 1;
            } else {
                let rate = target.max(1) as f64 / lifetime;
                next_arrival = now + Duration::from_secs_f64(-(1.0 - rng.unit()).ln() / rate);
            }
            let qos = match rng.next() % 4 {
                0 => Qos::Guaranteed,
                3 => Qos::BestEffort,
                _ => Qos::Burstable,
            };
            let ncont = 1 + (rng.next() % 2) as usize;
            let name = format!("{node}-{seq}");
            seq += 1;
            match create_pod(&pods_api, &name, &node, qos, ncont).await {
                Ok(uid) => {
                    counters.pods_created.fetch_add(1, Ordering::Relaxed);
                    run_pod(i, &state, &counters, &name, &uid, seq, qos, ncont).await;
                    let life = lifetime * (0.5 + rng.unit());
                    ends.push((now + Duration::from_secs_f64(life), name));
                }
                Err(e) => {
                    counters.api_errors.fetch_add(1, Ordering::Relaxed);
                    eprintln!("fleet_driver: node {i}: creating pod {name}: {e}");
                }
            }
            if initial > 0 {
                continue;
            }
        }
        let now = tokio::time::Instant::now();
        let (due, keep): (Vec<_>, Vec<_>) = ends.drain(..).partition(|(t, _)| *t <= now);
        ends = keep;
        for (_, name) in due {
            end_pod(&state, &counters, &name).await;
            match pods_api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await
            {
                Ok(_) => {
                    counters.pods_deleted.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    counters.api_errors.fetch_add(1, Ordering::Relaxed);
                    eprintln!("fleet_driver: node {i}: deleting pod {name}: {e}");
                }
            }
        }
        let next_end = ends.iter().map(|(t, _)| *t).min();
        let wake = next_end.map_or(next_arrival, |t| t.min(next_arrival));
        tokio::time::sleep_until(wake.max(tokio::time::Instant::now() + Duration::from_millis(10)))
            .await;
    }
}

/// (cpu request milli, cpu limit milli, memory request bytes, memory limit bytes) per QoS class.
fn resources(qos: Qos) -> (u64, u64, u64, u64) {
    match qos {
        Qos::Guaranteed => (250, 250, 128 << 20, 128 << 20),
        Qos::Burstable => (100, 0, 64 << 20, 256 << 20),
        Qos::BestEffort => (0, 0, 0, 0),
    }
}

async fn create_pod(
    pods_api: &Api<Pod>,
    name: &str,
    node: &str,
    qos: Qos,
    ncont: usize,
) -> Res<String> {
    let (cpu_req, cpu_lim, mem_req, mem_lim) = resources(qos);
    let mut req = BTreeMap::new();
    let mut lim = BTreeMap::new();
    if cpu_req > 0 {
        req.insert("cpu".to_string(), Quantity(format!("{cpu_req}m")));
        req.insert("memory".to_string(), Quantity(mem_req.to_string()));
    }
    if cpu_lim > 0 {
        lim.insert("cpu".to_string(), Quantity(format!("{cpu_lim}m")));
    }
    if mem_lim > 0 {
        lim.insert("memory".to_string(), Quantity(mem_lim.to_string()));
    }
    let containers = (0..ncont)
        .map(|k| Container {
            name: container_name(k).to_string(),
            image: Some("registry.k8s.io/e2e-test-images/agnhost:2.53".into()),
            resources: Some(ResourceRequirements {
                requests: (!req.is_empty()).then(|| req.clone()),
                limits: (!lim.is_empty()).then(|| lim.clone()),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            labels: Some(BTreeMap::from([("app".to_string(), "fleet".to_string())])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.to_string()),
            containers,
            automount_service_account_token: Some(false),
            termination_grace_period_seconds: Some(0),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = pods_api.create(&PostParams::default(), &pod).await?;
    Ok(created.metadata.uid.ok_or("the created pod has no uid")?)
}

fn container_name(k: usize) -> &'static str {
    if k == 0 {
        "app"
    } else {
        "sidecar"
    }
}

/// Sends `event` on the node's current connection, if it has one and subscribed to it; a failure
/// drops the connection (the accept loop takes the next one).
async fn send(
    st: &mut NodeState,
    counters: &Counters,
    event: Event,
    pod: &api::PodSandbox,
    ctr: Option<&api::Container>,
) {
    let Some((conn, mask)) = st.conn.clone() else {
        return;
    };
    if !mask.contains(event) {
        return;
    }
    let r = conn.send_event(event, pod, ctr).await;
    if r.is_err() {
        counters.send_failures.fetch_add(1, Ordering::Relaxed);
        st.conn = None;
    }
}

/// The pod's sandbox and containers through the NRI lifecycle; recorded as live.
#[allow(clippy::too_many_arguments)]
async fn run_pod(
    i: usize,
    state: &Mutex<NodeState>,
    counters: &Counters,
    name: &str,
    uid: &str,
    seq: u64,
    qos: Qos,
    ncont: usize,
) {
    start_pod(
        state,
        counters,
        name,
        sandbox(i, name, uid, seq, qos),
        qos,
        ncont,
    )
    .await;
}

/// Sandbox `sb` and its `ncont` containers through the NRI lifecycle; recorded as live.
async fn start_pod(
    state: &Mutex<NodeState>,
    counters: &Counters,
    name: &str,
    sb: api::PodSandbox,
    qos: Qos,
    ncont: usize,
) {
    let mut st = state.lock().await;
    send(&mut st, counters, Event::RUN_POD_SANDBOX, &sb, None).await;
    let mut ctrs = Vec::new();
    for k in 0..ncont {
        let mut c = container(&sb, k, qos);
        send(&mut st, counters, Event::CREATE_CONTAINER, &sb, Some(&c)).await;
        c.state = api::ContainerState::CONTAINER_CREATED.into();
        send(
            &mut st,
            counters,
            Event::POST_CREATE_CONTAINER,
            &sb,
            Some(&c),
        )
        .await;
        send(&mut st, counters, Event::START_CONTAINER, &sb, Some(&c)).await;
        c.state = api::ContainerState::CONTAINER_RUNNING.into();
        c.pid = 100_000 + k as u32;
        send(
            &mut st,
            counters,
            Event::POST_START_CONTAINER,
            &sb,
            Some(&c),
        )
        .await;
        ctrs.push(c);
    }
    st.pods.push(LivePod {
        name: name.to_string(),
        sandbox: sb,
        containers: ctrs,
    });
}

/// The pod's containers stopped and removed, then its sandbox; no longer live.
async fn end_pod(state: &Mutex<NodeState>, counters: &Counters, name: &str) {
    let mut st = state.lock().await;
    let Some(at) = st.pods.iter().position(|p| p.name == name) else {
        return;
    };
    let pod = st.pods.remove(at);
    for mut c in pod.containers {
        send(
            &mut st,
            counters,
            Event::STOP_CONTAINER,
            &pod.sandbox,
            Some(&c),
        )
        .await;
        c.state = api::ContainerState::CONTAINER_STOPPED.into();
        c.pid = 0;
        send(
            &mut st,
            counters,
            Event::REMOVE_CONTAINER,
            &pod.sandbox,
            Some(&c),
        )
        .await;
    }
    send(
        &mut st,
        counters,
        Event::STOP_POD_SANDBOX,
        &pod.sandbox,
        None,
    )
    .await;
    send(
        &mut st,
        counters,
        Event::REMOVE_POD_SANDBOX,
        &pod.sandbox,
        None,
    )
    .await;
}

fn kv(pairs: &[(&str, String)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn sandbox(i: usize, name: &str, uid: &str, seq: u64, qos: Qos) -> api::PodSandbox {
    let class = match qos {
        Qos::Guaranteed => "",
        Qos::Burstable => "burstable/",
        Qos::BestEffort => "besteffort/",
    };
    let id = format!("{:064x}", (i as u128) << 64 | seq as u128);
    let mut linux = api::LinuxPodSandbox::new();
    linux.cgroup_parent = format!("/kubepods/{class}pod{uid}");
    linux.cgroups_path = format!("/kubepods/{class}pod{uid}/{id}");
    api::PodSandbox {
        id,
        name: name.to_string(),
        uid: uid.to_string(),
        namespace: NAMESPACE.to_string(),
        labels: kv(&[
            ("app", "fleet".into()),
            ("io.kubernetes.pod.name", name.to_string()),
            ("io.kubernetes.pod.namespace", NAMESPACE.to_string()),
            ("io.kubernetes.pod.uid", uid.to_string()),
        ]),
        annotations: kv(&[
            ("io.kubernetes.cri.container-type", "sandbox".into()),
            ("io.kubernetes.cri.sandbox-name", name.to_string()),
            ("io.kubernetes.cri.sandbox-namespace", NAMESPACE.to_string()),
            ("io.kubernetes.cri.sandbox-uid", uid.to_string()),
            ("kubernetes.io/config.source", "api".into()),
        ]),
        runtime_handler: "runc".into(),
        linux: MessageField::some(linux),
        pid: 0,
        ..Default::default()
    }
}

/// Container `k` of the pod, with the cgroup values the kubelet derives from its spec.
fn container(pod: &api::PodSandbox, k: usize, qos: Qos) -> api::Container {
    let (cpu_req, cpu_lim, _, mem_lim) = resources(qos);
    let name = container_name(k);
    let mut cpu = api::LinuxCPU::new();
    cpu.shares = MessageField::some(api::OptionalUInt64 {
        value: (cpu_req * 1024 / 1000).max(2),
        ..Default::default()
    });
    cpu.period = MessageField::some(api::OptionalUInt64 {
        value: 100_000,
        ..Default::default()
    });
    if cpu_lim > 0 {
        cpu.quota = MessageField::some(api::OptionalInt64 {
            value: (cpu_lim * 100) as i64,
            ..Default::default()
        });
    }
    let mut res = api::LinuxResources::new();
    res.cpu = MessageField::some(cpu);
    if mem_lim > 0 {
        let mut m = api::LinuxMemory::new();
        m.limit = MessageField::some(api::OptionalInt64 {
            value: mem_lim as i64,
            ..Default::default()
        });
        res.memory = MessageField::some(m);
    }
    let oom = match qos {
        Qos::Guaranteed => -997,
        Qos::Burstable => 999,
        Qos::BestEffort => 1000,
    };
    // The pod's (node, sequence) half, then the container's index.
    let id = format!("{}{:032x}", &pod.id[32..], k + 1);
    let mut linux = api::LinuxContainer::new();
    linux.resources = MessageField::some(res);
    linux.oom_score_adj = MessageField::some(api::OptionalInt {
        value: oom,
        ..Default::default()
    });
    linux.cgroups_path = format!(
        "{}/{id}",
        pod.linux.as_ref().map_or("", |l| l.cgroup_parent.as_str())
    );
    api::Container {
        id,
        pod_sandbox_id: pod.id.clone(),
        name: name.into(),
        state: api::ContainerState::CONTAINER_UNKNOWN.into(),
        labels: kv(&[
            ("io.kubernetes.container.name", name.into()),
            ("io.kubernetes.pod.name", pod.name.clone()),
            ("io.kubernetes.pod.namespace", pod.namespace.clone()),
            ("io.kubernetes.pod.uid", pod.uid.clone()),
        ]),
        annotations: kv(&[
            ("io.kubernetes.cri.container-name", name.into()),
            ("io.kubernetes.cri.container-type", "container".into()),
            ("io.kubernetes.cri.sandbox-id", pod.id.clone()),
            ("io.kubernetes.cri.sandbox-name", pod.name.clone()),
            ("io.kubernetes.cri.sandbox-namespace", pod.namespace.clone()),
            ("io.kubernetes.cri.sandbox-uid", pod.uid.clone()),
            ("io.kubernetes.container.restartCount", "0".into()),
        ]),
        args: vec!["/agnhost".into(), "netexec".into()],
        linux: MessageField::some(linux),
        ..Default::default()
    }
}
