//! The re-export's merge rules, and its server between a real tonic client and a fake kubelet
//! (a tonic server of the generated `PodResourcesLister` on a temporary unix socket).

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::kubelet::api::pod_resources_lister_server::PodResourcesLister;

fn gpu(node: i64) -> api::ContainerDevices {
    api::ContainerDevices {
        resource_name: "topolet.test/gpu".into(),
        device_ids: vec!["dev-1".into()],
        topology: Some(api::TopologyInfo {
            nodes: vec![api::NumaNode { id: node }],
        }),
    }
}

/// The kubelet's answer under `cpuManagerPolicy: none`: pod `ns/p` with containers `app`
/// (a device on node 1) and `side`, no cpu_ids, no memory.
fn kubelet_pod() -> api::PodResources {
    api::PodResources {
        name: "p".into(),
        namespace: "ns".into(),
        containers: vec![
            api::ContainerResources {
                name: "app".into(),
                devices: vec![gpu(1)],
                ..Default::default()
            },
            api::ContainerResources {
                name: "side".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

/// topolet's books: `ns/p/app` holds CPUs 4-5 and 1 GiB pinned on node 1.
fn books() -> Exported {
    let mut containers = HashMap::new();
    containers.insert(
        ("ns".into(), "p".into(), "app".into()),
        ContainerAllocation {
            cpus: vec![4, 5],
            memory: vec![MemoryBlock {
                memory_type: "memory".into(),
                size: 1 << 30,
                nodes: vec![1],
            }],
        },
    );
    containers.insert(
        ("other".into(), "q".into(), "app".into()),
        ContainerAllocation {
            cpus: vec![2],
            memory: vec![],
        },
    );
    Exported {
        containers,
        allocatable: Allocatable {
            cpus: vec![1, 2, 3, 4, 5, 6, 7],
            memory: vec![
                MemoryBlock {
                    memory_type: "memory".into(),
                    size: 3 << 30,
                    nodes: vec![0],
                },
                MemoryBlock {
                    memory_type: "memory".into(),
                    size: 4 << 30,
                    nodes: vec![1],
                },
            ],
        },
    }
}

fn node_ids(t: &Option<api::TopologyInfo>) -> Vec<i64> {
    t.as_ref()
        .map(|t| t.nodes.iter().map(|n| n.id).collect())
        .unwrap_or_default()
}

#[test]
fn a_container_topolet_placed_gets_its_cpus_and_memory_and_nothing_else_moves() {
    let mut pod = kubelet_pod();
    merge_pod(&mut pod, &books());
    let app = &pod.containers[0];
    assert_eq!(app.cpu_ids, vec![4, 5]);
    assert_eq!(app.memory.len(), 1);
    assert_eq!(app.memory[0].memory_type, "memory");
    assert_eq!(app.memory[0].size, 1 << 30);
    assert_eq!(node_ids(&app.memory[0].topology), vec![1]);
    assert_eq!(app.devices, vec![gpu(1)], "the kubelet's devices stay");
    let side = &pod.containers[1];
    assert!(side.cpu_ids.is_empty() && side.memory.is_empty());
    assert!(
        pod.cpu_ids.is_empty(),
        "no pod-level allocation is invented"
    );
}

#[test]
fn what_the_kubelet_reported_itself_is_kept() {
    let mut pod = kubelet_pod();
    pod.containers[0].cpu_ids = vec![6];
    merge_pod(&mut pod, &books());
    assert_eq!(pod.containers[0].cpu_ids, vec![6]);
    // Another namespace's pod of the same name is not matched.
    let mut other = kubelet_pod();
    other.namespace = "ns2".into();
    merge_pod(&mut other, &books());
    assert!(other.containers[0].cpu_ids.is_empty());
}

#[test]
fn allocatable_gets_topolets_cpus_and_memory_and_keeps_the_kubelets_devices() {
    let mut answer = api::AllocatableResourcesResponse {
        devices: vec![gpu(1)],
        ..Default::default()
    };
    merge_allocatable(&mut answer, &books());
    assert_eq!(answer.cpu_ids, vec![1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(answer.devices, vec![gpu(1)]);
    let per_node: Vec<(Vec<i64>, u64)> = answer
        .memory
        .iter()
        .map(|m| (node_ids(&m.topology), m.size))
        .collect();
    assert_eq!(per_node, vec![(vec![0], 3 << 30), (vec![1], 4 << 30)]);
    let mut kubelets = api::AllocatableResourcesResponse {
        cpu_ids: vec![3],
        ..Default::default()
    };
    merge_allocatable(&mut kubelets, &books());
    assert_eq!(kubelets.cpu_ids, vec![3]);
}

/// How the fake kubelet answers.
#[derive(Clone, Copy)]
enum Mode {
    /// [`kubelet_pod`] for `ns/p`, `NotFound` for any other pod.
    Answer,
    /// Holds every call until [`Fake::release`] says `true`.
    Hold,
}

#[derive(Clone)]
struct Fake {
    mode: Mode,
    calls: Arc<AtomicUsize>,
    release: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Fake {
    async fn hold(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Mode::Hold = self.mode {
            let mut released = self.release.subscribe();
            let _ = released.wait_for(|r| *r).await;
        }
    }
}

#[async_trait::async_trait]
impl PodResourcesLister for Fake {
    async fn list(
        &self,
        _: Request<api::ListPodResourcesRequest>,
    ) -> Result<Response<api::ListPodResourcesResponse>, Status> {
        self.hold().await;
        Ok(Response::new(api::ListPodResourcesResponse {
            pod_resources: vec![kubelet_pod()],
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<api::AllocatableResourcesRequest>,
    ) -> Result<Response<api::AllocatableResourcesResponse>, Status> {
        self.hold().await;
        Ok(Response::new(api::AllocatableResourcesResponse {
            devices: vec![gpu(1)],
            ..Default::default()
        }))
    }

    async fn get(
        &self,
        r: Request<api::GetPodResourcesRequest>,
    ) -> Result<Response<api::GetPodResourcesResponse>, Status> {
        self.hold().await;
        let r = r.into_inner();
        if (r.pod_namespace.as_str(), r.pod_name.as_str()) != ("ns", "p") {
            return Err(Status::not_found(format!(
                "pod {} in namespace {} not found",
                r.pod_name, r.pod_namespace
            )));
        }
        Ok(Response::new(api::GetPodResourcesResponse {
            pod_resources: Some(kubelet_pod()),
        }))
    }
}

fn serve_kubelet(socket: &Path, fake: Fake) {
    let listener = UnixListener::bind(socket).expect("binding the fake kubelet");
    crate::kubelet::pod_resources::tests::serve_lister(listener, fake);
}

struct Books(Exported);

impl ExportSource for Books {
    fn exported(&self) -> Exported {
        self.0.clone()
    }
}

/// The re-export on `dir/export/pr.sock` in front of `dir/kubelet.sock`, served on a task.
async fn serve_export(dir: &Path, metrics: Arc<Metrics>) -> PathBuf {
    let socket = dir.join("export/pr.sock");
    let bound = bind(
        &socket,
        &dir.join("kubelet.sock"),
        Arc::new(Books(books())),
        metrics,
    )
    .await
    .expect("binding the re-export");
    tokio::spawn(bound.serve());
    socket
}

async fn client(socket: &Path) -> PodResourcesListerClient<Channel> {
    let channel = Endpoint::from_shared(format!("unix:{}", socket.display()))
        .expect("an endpoint")
        .connect()
        .await
        .expect("connecting to the re-export");
    PodResourcesListerClient::new(channel)
}

fn fake(mode: Mode) -> Fake {
    Fake {
        mode,
        calls: Arc::new(AtomicUsize::new(0)),
        release: Arc::new(tokio::sync::watch::Sender::new(false)),
    }
}

#[tokio::test]
async fn serves_the_kubelets_answers_with_topolets_cpus_and_passes_its_errors_on() {
    let dir = tempfile::tempdir().unwrap();
    serve_kubelet(&dir.path().join("kubelet.sock"), fake(Mode::Answer));
    let metrics = Arc::new(Metrics::new());
    let socket = serve_export(dir.path(), metrics.clone()).await;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is the owner's only");
    let dir_mode = std::fs::metadata(socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o750);
    let mut c = client(&socket).await;

    let list = c
        .list(api::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.pod_resources.len(), 1, "only the kubelet's pods");
    assert_eq!(list.pod_resources[0].containers[0].cpu_ids, vec![4, 5]);

    let get = c
        .get(api::GetPodResourcesRequest {
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let pod = get.pod_resources.unwrap();
    assert_eq!(pod.containers[0].cpu_ids, vec![4, 5]);
    assert_eq!(pod.containers[0].devices, vec![gpu(1)]);

    let missing = c
        .get(api::GetPodResourcesRequest {
            pod_name: "q".into(),
            pod_namespace: "ns".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(missing.message().contains("pod q"), "{}", missing.message());

    let alloc = c
        .get_allocatable_resources(api::AllocatableResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(alloc.cpu_ids, vec![1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(alloc.devices, vec![gpu(1)]);

    let text = metrics.render(&crate::telemetry::metrics::Gauges::default());
    for line in [
        "topolet_pod_resources_served_total{call=\"list\",result=\"ok\"} 1",
        "topolet_pod_resources_served_total{call=\"get\",result=\"ok\"} 1",
        "topolet_pod_resources_served_total{call=\"get\",result=\"kubelet_error\"} 1",
        "topolet_pod_resources_served_total{call=\"allocatable\",result=\"ok\"} 1",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

#[tokio::test]
async fn without_the_kubelet_a_call_is_unavailable_naming_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = serve_export(dir.path(), Arc::new(Metrics::new())).await;
    let mut c = client(&socket).await;
    let e = c.list(api::ListPodResourcesRequest {}).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    let kubelet = dir.path().join("kubelet.sock");
    assert!(
        e.message().contains(&kubelet.display().to_string()),
        "{}",
        e.message()
    );
}

#[tokio::test]
async fn calls_past_the_in_flight_bound_are_refused_at_once_not_queued() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = fake(Mode::Hold);
    serve_kubelet(&dir.path().join("kubelet.sock"), kubelet.clone());
    let socket = serve_export(dir.path(), Arc::new(Metrics::new())).await;
    let mut held = Vec::new();
    for _ in 0..MAX_IN_FLIGHT {
        // One connection each: the per-connection limit is not what is tested here.
        let mut c = client(&socket).await;
        held.push(tokio::spawn(async move {
            c.list(api::ListPodResourcesRequest {}).await.map(|_| ())
        }));
    }
    // Every held call has reached the kubelet (state, not time).
    wait_for(|| kubelet.calls.load(Ordering::SeqCst) == MAX_IN_FLIGHT).await;
    let mut extra = client(&socket).await;
    let e = extra
        .list(api::ListPodResourcesRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
    assert_eq!(
        kubelet.calls.load(Ordering::SeqCst),
        MAX_IN_FLIGHT,
        "the refused call never reached the kubelet"
    );
    kubelet.release.send_replace(true);
    for h in held {
        h.await.unwrap().unwrap();
    }
    // With the held calls answered, the next call is served.
    extra.list(api::ListPodResourcesRequest {}).await.unwrap();
}

#[tokio::test]
async fn connections_past_the_bound_are_closed_and_a_freed_slot_serves_again() {
    let dir = tempfile::tempdir().unwrap();
    serve_kubelet(&dir.path().join("kubelet.sock"), fake(Mode::Answer));
    let socket = serve_export(dir.path(), Arc::new(Metrics::new())).await;
    // Idle connections that never speak take every slot.
    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        idle.push(UnixStream::connect(&socket).await.unwrap());
    }
    let endpoint = Endpoint::from_shared(format!("unix:{}", socket.display())).unwrap();
    let refused = match endpoint.connect().await {
        Err(_) => true,
        Ok(channel) => PodResourcesListerClient::new(channel)
            .list(api::ListPodResourcesRequest {})
            .await
            .is_err(),
    };
    assert!(refused, "a connection past the bound is served");
    drop(idle.pop());
    // The freed slot serves a new connection once the server has seen the close.
    let mut served = false;
    for _ in 0..500 {
        if let Ok(channel) = endpoint.connect().await {
            let mut c = PodResourcesListerClient::new(channel);
            if c.list(api::ListPodResourcesRequest {}).await.is_ok() {
                served = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(served, "a freed slot never served again");
}

#[tokio::test]
async fn the_socket_place_is_checked_before_anything_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = dir.path().join("kubelet.sock");
    let books = || -> Arc<dyn ExportSource> { Arc::new(Books(books())) };
    let m = Arc::new(Metrics::new());
    // The kubelet's own socket.
    let e = bind(&kubelet, &kubelet, books(), m.clone())
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("kubelet's own"), "{e}");
    // A regular file is never removed.
    let file = dir.path().join("file.sock");
    std::fs::write(&file, b"x").unwrap();
    let e = bind(&file, &kubelet, books(), m.clone())
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert!(file.exists());
    // A socket something answers on is never taken over.
    let live = dir.path().join("live.sock");
    let _listener = UnixListener::bind(&live).unwrap();
    let e = bind(&live, &kubelet, books(), m.clone())
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("answers on it"), "{e}");
    // A stale one (nothing listening) is replaced.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let bound = bind(&stale, &kubelet, books(), m).await.unwrap();
    assert_eq!(bound.socket(), stale.as_path());
}

/// Waits until `done` holds, yielding to the runtime between looks (bounded: a test that
/// never gets there fails).
async fn wait_for(done: impl Fn() -> bool) {
    for _ in 0..5_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the state waited for never came");
}
