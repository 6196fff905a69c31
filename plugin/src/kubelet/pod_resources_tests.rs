//! The PodResources client against a fake kubelet: a tonic server of the generated
//! `PodResourcesLister` on a temporary unix socket.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::kubelet::api::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};

/// How the fake kubelet answers.
#[derive(Clone, Copy)]
enum Mode {
    /// Answers with one pod whose container `c` holds `topolet.test/gpu=dev-0` on node 0.
    Answer,
    /// Never answers (a hung kubelet).
    Hang,
    /// `Get` off, as the kubelet says without its feature gate; `List` answers.
    GetOff,
    /// A busy kubelet: `List` answers after [`SLOW`], `Get` never.
    Slow,
}

/// How long [`Mode::Slow`]'s `List` takes: above the CreateContainer wait of the test using it,
/// far below [`super::pod_resources::LIST_WAIT`].
const SLOW: Duration = Duration::from_millis(300);

struct Fake {
    mode: Mode,
    calls: Arc<AtomicUsize>,
}

fn one_pod() -> api::PodResources {
    api::PodResources {
        name: "p".into(),
        namespace: "ns".into(),
        containers: vec![api::ContainerResources {
            name: "c".into(),
            devices: vec![api::ContainerDevices {
                resource_name: "topolet.test/gpu".into(),
                device_ids: vec!["dev-0".into()],
                topology: Some(api::TopologyInfo {
                    nodes: vec![api::NumaNode { id: 0 }],
                }),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[async_trait::async_trait]
impl PodResourcesLister for Fake {
    async fn list(
        &self,
        _: tonic::Request<api::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<api::ListPodResourcesResponse>, tonic::Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.mode {
            Mode::Hang => std::future::pending::<()>().await,
            Mode::Slow => tokio::time::sleep(SLOW).await,
            Mode::Answer | Mode::GetOff => {}
        }
        Ok(tonic::Response::new(api::ListPodResourcesResponse {
            pod_resources: vec![one_pod()],
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: tonic::Request<api::AllocatableResourcesRequest>,
    ) -> Result<tonic::Response<api::AllocatableResourcesResponse>, tonic::Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        // Two devices on node 0, dev-0 held by [`one_pod`].
        Ok(tonic::Response::new(api::AllocatableResourcesResponse {
            devices: vec![api::ContainerDevices {
                resource_name: "topolet.test/gpu".into(),
                device_ids: vec!["dev-0".into(), "dev-1".into()],
                topology: Some(api::TopologyInfo {
                    nodes: vec![api::NumaNode { id: 0 }],
                }),
            }],
            ..Default::default()
        }))
    }

    async fn get(
        &self,
        req: tonic::Request<api::GetPodResourcesRequest>,
    ) -> Result<tonic::Response<api::GetPodResourcesResponse>, tonic::Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.mode {
            Mode::Hang | Mode::Slow => std::future::pending().await,
            Mode::GetOff => Err(tonic::Status::unknown(
                "PodResources API Get method disabled",
            )),
            Mode::Answer if req.get_ref().pod_name == "p" => {
                Ok(tonic::Response::new(api::GetPodResourcesResponse {
                    pod_resources: Some(one_pod()),
                }))
            }
            // As the kubelet says it (pkg/kubelet/apis/podresources/server_v1.go `Get`).
            Mode::Answer => Err(tonic::Status::unknown(format!(
                "pod {} in namespace {} not found",
                req.get_ref().pod_name,
                req.get_ref().pod_namespace
            ))),
        }
    }
}

/// Serves `service` on `listener` in a task of its own (it ends with the runtime): a fake
/// kubelet for these tests and the re-export's (`super::reexport`).
pub(crate) fn serve_lister(listener: tokio::net::UnixListener, service: impl PodResourcesLister) {
    let incoming = futures::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.map(|(s, _)| s);
        Some((conn, l))
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .serve_with_incoming(PodResourcesListerServer::new(service), incoming),
    );
}

/// A fake kubelet serving on `dir/kubelet.sock`; its task ends with the runtime.
fn serve(dir: &Path, mode: Mode) -> (PathBuf, Arc<AtomicUsize>) {
    let socket = dir.join("kubelet.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let fake = Fake {
        mode,
        calls: calls.clone(),
    };
    serve_lister(listener, fake);
    (socket, calls)
}

fn source(socket: &Path, wait_ms: u64) -> (PodResourcesSource, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    (
        PodResourcesSource::new(socket, Duration::from_millis(wait_ms), metrics.clone()),
        metrics,
    )
}

#[tokio::test]
async fn get_and_list_answer_the_pods_devices() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, _) = serve(dir.path(), Mode::Answer);
    let (src, metrics) = source(&socket, 5_000);
    assert_eq!(src.status().state, "not-asked");
    let p = src.pod("ns", "p").await.expect("the kubelet knows the pod");
    let got = crate::kubelet::devices::container_devices(&p, "c", &[0, 1]);
    assert_eq!(got.devices.len(), 1);
    assert_eq!(got.devices[0].id, "topolet.test/gpu=dev-0");
    assert_eq!(got.devices[0].numa, Some(0));
    assert!(src.pod("ns", "unknown").await.is_none());
    src.list().await.unwrap();
    let s = src.status();
    assert_eq!((s.state.as_str(), s.last_error), ("answering", None));
    let text = metrics.render(&Default::default());
    assert!(
        text.contains("topolet_pod_resources_calls_total{call=\"get\",result=\"ok\"} 2"),
        "{text}"
    );
}

/// A kubelet that accepts the connection and never answers: the lookup returns within the wait
/// (well under the test's own limit), the source is marked down, and the next events do not ask
/// again until [`RETRY_AFTER`] has passed.
#[tokio::test]
async fn a_hung_kubelet_costs_one_bounded_wait_then_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, calls) = serve(dir.path(), Mode::Hang);
    let (src, metrics) = source(&socket, 200);
    // The test's own bound: far above the wait, far below a hang.
    let first = tokio::time::timeout(Duration::from_secs(20), src.pod("ns", "p"))
        .await
        .expect("the lookup is bounded by the source's wait");
    assert!(first.is_none());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the kubelet was asked once"
    );
    let s = src.status();
    assert_eq!(s.state, "unreachable");
    let err = s.last_error.unwrap();
    assert!(
        err.contains("kubelet.sock") && err.contains("Get: no answer within 200 ms"),
        "{err}"
    );
    assert!(s.note.contains("device nodes"), "{}", s.note);
    // Later events within the pause: answered at once, the kubelet not asked.
    for _ in 0..5 {
        let again = tokio::time::timeout(Duration::from_millis(50), src.pod("ns", "p"))
            .await
            .expect("a paused source answers at once");
        assert!(again.is_none());
    }
    assert!(src.list().await.is_ok());
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no call while paused");
    let text = metrics.render(&Default::default());
    assert!(
        text.contains("topolet_pod_resources_calls_total{call=\"get\",result=\"timeout\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("topolet_pod_resources_calls_total{call=\"get\",result=\"skipped\"} 5"),
        "{text}"
    );
}

/// A busy kubelet that answers `List` later than the CreateContainer wait: the Synchronize's
/// `List` (bounded by `LIST_WAIT`, not by that wait) still gets its answer and the source is
/// `answering`; the same `List` within the CreateContainer wait is a timeout (the server cannot
/// answer before [`SLOW`]).
#[tokio::test]
async fn a_busy_kubelet_still_answers_the_synchronize_list() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, calls) = serve(dir.path(), Mode::Slow);
    let (src, _) = source(&socket, 100);
    tokio::time::timeout(Duration::from_secs(20), src.list_until_answered())
        .await
        .expect("the List answers within LIST_WAIT");
    let s = src.status();
    assert_eq!((s.state.as_str(), s.last_error), ("answering", None));
    assert_eq!(calls.load(Ordering::SeqCst), 1, "asked once");
    let p = src.pod("ns", "p").await;
    assert!(
        p.is_some(),
        "the pod from what List kept, Get being past the wait"
    );
    // Another source on the same kubelet, asking within the CreateContainer wait.
    let (within_wait, _) = source(&socket, 100);
    let err = within_wait.list().await.unwrap_err();
    assert!(
        err.to_string().contains("List: no answer within 100 ms"),
        "{err}"
    );
}

#[tokio::test]
async fn an_absent_socket_degrades_without_dialling() {
    let dir = tempfile::tempdir().unwrap();
    let (src, metrics) = source(&dir.path().join("none.sock"), 200);
    assert!(src.pod("ns", "p").await.is_none());
    assert!(src.pod("ns", "p").await.is_none());
    let s = src.status();
    assert_eq!(s.state, "absent");
    assert!(s.last_error.unwrap().contains("none.sock: absent"));
    let text = metrics.render(&Default::default());
    assert!(
        text.contains("topolet_pod_resources_calls_total{call=\"get\",result=\"absent\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("topolet_pod_resources_calls_total{call=\"get\",result=\"skipped\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn a_kubelet_without_get_is_asked_with_list() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, _) = serve(dir.path(), Mode::GetOff);
    let (src, _) = source(&socket, 5_000);
    let p = src.pod("ns", "p").await.expect("List answers");
    assert_eq!(p.containers[0].devices[0].device_ids, ["dev-0"]);
    assert_eq!(src.status().state, "answering");
    assert!(src.pod("ns", "p").await.is_some());
}

#[tokio::test]
async fn the_device_inventory_counts_allocatable_and_held_devices_per_node() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, _) = serve(dir.path(), Mode::Answer);
    let (src, metrics) = source(&socket, 1000);
    let inv = src
        .device_inventory()
        .await
        .expect("answered")
        .expect("not paused");
    let gpu = inv.per_node[&0]["topolet.test/gpu"];
    assert_eq!((gpu.allocatable, gpu.used), (2, 1));
    let text = metrics.render(&crate::telemetry::metrics::Gauges::default());
    assert!(
        text.contains("topolet_pod_resources_calls_total{call=\"allocatable\",result=\"ok\"} 1"),
        "{text}"
    );
    // An absent kubelet: an error, and the container path's source is not paused by it.
    let (absent, _) = source(&dir.path().join("none.sock"), 1000);
    assert!(absent.device_inventory().await.is_err());
    assert_eq!(absent.status().state, "not-asked");
}
