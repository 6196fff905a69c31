//! The PodResources re-export (`[kubelet] pod_resources_export_socket`): a `PodResourcesLister`
//! (k8s.io/kubelet `pkg/apis/podresources/v1`) on a unix socket of topolet's own that answers
//! what the kubelet answers plus what topolet gave each container: its exclusive CPUs
//! (`cpu_ids`) and its NUMA-pinned memory (`memory`), and, in `GetAllocatableResources`, the
//! CPUs and per-node memory topolet hands out.
//!
//! Why: under `cpuManagerPolicy: none` (what topolet needs) the kubelet's own answer has no
//! `cpu_ids` and no `memory`, so PodResources consumers (node-feature-discovery's topology
//! updater, GPU exporters) see no exclusive CPUs on a topolet node. They read this socket
//! instead of the kubelet's and see the same pods and devices with the CPUs filled in.
//!
//! Each call asks the kubelet first (the pods and devices are the kubelet's truth; a pod only
//! topolet knows, e.g. one created through `crictl`, is not invented) within [`UPSTREAM_WAIT`];
//! the kubelet's error is passed on with its code (an unknown pod: `Unknown`, "pod … not found",
//! as the kubelet says it), a kubelet that does not answer is `Unavailable` naming its socket. Then topolet's books are read (one short
//! lock, as `topolet status` takes it) and laid over the answer ([`merge_pod`],
//! [`merge_allocatable`]): a container topolet holds CPUs or memory for gets them; every other
//! field is the kubelet's, unchanged.
//!
//! Every client is untrusted: the socket is created mode 0600 (its directory 0750 when topolet
//! creates it), at most [`MAX_CONNECTIONS`] connections are served at once (more are closed as
//! they are accepted), at most [`MAX_IN_FLIGHT`] calls run at once across all of them (more are
//! refused at once with `ResourceExhausted`, never queued), requests larger than
//! [`MAX_REQUEST_BYTES`] are refused, and each call is bounded by [`CALL_TIMEOUT`]. The server
//! runs on tasks of its own: no call waits on or holds up an NRI event longer than the books'
//! lock. `topolet_pod_resources_served_total{call,result}` counts every call.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

use super::api;
use super::api::pod_resources_lister_client::PodResourcesListerClient;
use super::api::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use crate::telemetry::metrics::Metrics;

/// How long a call waits for the kubelet's answer: its PodResources server answers from memory.
pub const UPSTREAM_WAIT: Duration = Duration::from_secs(5);
/// The bound on one call, the kubelet's part included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed as they are accepted.
pub const MAX_CONNECTIONS: usize = 16;
/// Calls running at once across every connection; more are refused with `ResourceExhausted`.
pub const MAX_IN_FLIGHT: usize = 8;
/// The largest request accepted (the largest real one, a `Get` naming a pod, is a few hundred
/// bytes: a namespace and a name of at most 253 characters each).
pub const MAX_REQUEST_BYTES: usize = 4096;

/// What topolet gave one container, in the PodResources units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerAllocation {
    /// Exclusive CPU ids, ascending.
    pub cpus: Vec<i64>,
    /// NUMA-pinned memory, one block per resource (`memory`, `hugepages-2Mi`).
    pub memory: Vec<MemoryBlock>,
}

/// One resource's pinned memory: its size in bytes and the NUMA nodes it may come from (the
/// kubelet's memory manager reports one block per resource the same way,
/// `pkg/kubelet/cm/memorymanager` `GetMemory`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryBlock {
    pub memory_type: String,
    pub size: u64,
    pub nodes: Vec<i64>,
}

/// What topolet hands out on this node: the CPUs exclusive grants come from (every CPU but the
/// reserved ones, as the kubelet's static policy reports them) and, with the memory manager
/// `static`, each node's allocatable memory per resource (one block per node and resource).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocatable {
    pub cpus: Vec<i64>,
    pub memory: Vec<MemoryBlock>,
}

/// topolet's books as the re-export reads them, copied at each call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exported {
    /// (pod namespace, pod name, container name) → what the container holds.
    pub containers: HashMap<(String, String, String), ContainerAllocation>,
    pub allocatable: Allocatable,
}

/// The books the re-export reads; implemented by the NRI handlers (`crate::nri`), which this
/// folder may not name.
pub trait ExportSource: Send + Sync + 'static {
    /// A copy of what every container holds and what the node hands out.
    fn exported(&self) -> Exported;
}

fn topology(nodes: &[i64]) -> Option<api::TopologyInfo> {
    Some(api::TopologyInfo {
        nodes: nodes.iter().map(|&id| api::NumaNode { id }).collect(),
    })
}

fn memory(blocks: &[MemoryBlock]) -> Vec<api::ContainerMemory> {
    blocks
        .iter()
        .map(|b| api::ContainerMemory {
            memory_type: b.memory_type.clone(),
            size: b.size,
            topology: topology(&b.nodes),
        })
        .collect()
}

/// Lays topolet's allocations over one pod of the kubelet's answer: each container topolet holds
/// CPUs (memory) for gets them as `cpu_ids` (`memory`) where the kubelet gave none; the pod's
/// own `cpu_ids` and `memory` (pod-level exclusive allocations, which topolet does not make)
/// and every other field stay the kubelet's.
pub fn merge_pod(pod: &mut api::PodResources, books: &Exported) {
    for c in &mut pod.containers {
        let key = (pod.namespace.clone(), pod.name.clone(), c.name.clone());
        let Some(a) = books.containers.get(&key) else {
            continue;
        };
        if c.cpu_ids.is_empty() {
            c.cpu_ids = a.cpus.clone();
        }
        if c.memory.is_empty() {
            c.memory = memory(&a.memory);
        }
    }
}

/// Lays topolet's allocatable CPUs and memory over the kubelet's `GetAllocatableResources`
/// answer where the kubelet gave none (its devices stay as they are).
pub fn merge_allocatable(answer: &mut api::AllocatableResourcesResponse, books: &Exported) {
    if answer.cpu_ids.is_empty() {
        answer.cpu_ids = books.allocatable.cpus.clone();
    }
    if answer.memory.is_empty() {
        answer.memory = memory(&books.allocatable.memory);
    }
}

/// The service: the kubelet's client and topolet's books.
struct Reexport {
    upstream_socket: PathBuf,
    upstream: Option<PodResourcesListerClient<Channel>>,
    books: Arc<dyn ExportSource>,
    in_flight: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl Reexport {
    /// A permit for one call, or `ResourceExhausted` at once.
    fn permit(&self, call: &'static str) -> Result<OwnedSemaphorePermit, Status> {
        self.in_flight.clone().try_acquire_owned().map_err(|_| {
            self.metrics.pod_resources_served(call, "busy");
            Status::resource_exhausted(format!(
                "topolet's PodResources re-export: {MAX_IN_FLIGHT} calls already running; retry"
            ))
        })
    }

    /// `f` on the kubelet's client within [`UPSTREAM_WAIT`]; its error passed on with its code.
    async fn upstream<T, F, Fut>(&self, call: &'static str, f: F) -> Result<T, Status>
    where
        F: FnOnce(PodResourcesListerClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<Response<T>, Status>>,
    {
        let unavailable = |why: String| {
            self.metrics
                .pod_resources_served(call, "kubelet_unavailable");
            Status::unavailable(format!(
                "the kubelet's PodResources socket {}: {why}",
                self.upstream_socket.display()
            ))
        };
        let Some(client) = self.upstream.clone() else {
            return Err(unavailable("not a path tonic can dial".into()));
        };
        if !self.upstream_socket.exists() {
            return Err(unavailable("absent".into()));
        }
        match tokio::time::timeout(UPSTREAM_WAIT, f(client)).await {
            Err(_) => Err(unavailable(format!(
                "no answer within {} s",
                UPSTREAM_WAIT.as_secs()
            ))),
            Ok(Err(status)) => {
                self.metrics.pod_resources_served(call, "kubelet_error");
                Err(status)
            }
            Ok(Ok(r)) => Ok(r.into_inner()),
        }
    }
}

#[async_trait::async_trait]
impl PodResourcesLister for Reexport {
    async fn list(
        &self,
        _: Request<api::ListPodResourcesRequest>,
    ) -> Result<Response<api::ListPodResourcesResponse>, Status> {
        let _permit = self.permit("list")?;
        let req = api::ListPodResourcesRequest {};
        let mut answer = self
            .upstream("list", |mut c| async move { c.list(req).await })
            .await?;
        let books = self.books.exported();
        for pod in &mut answer.pod_resources {
            merge_pod(pod, &books);
        }
        self.metrics.pod_resources_served("list", "ok");
        Ok(Response::new(answer))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<api::AllocatableResourcesRequest>,
    ) -> Result<Response<api::AllocatableResourcesResponse>, Status> {
        let _permit = self.permit("allocatable")?;
        let req = api::AllocatableResourcesRequest {};
        let mut answer = self
            .upstream("allocatable", |mut c| async move {
                c.get_allocatable_resources(req).await
            })
            .await?;
        merge_allocatable(&mut answer, &self.books.exported());
        self.metrics.pod_resources_served("allocatable", "ok");
        Ok(Response::new(answer))
    }

    async fn get(
        &self,
        request: Request<api::GetPodResourcesRequest>,
    ) -> Result<Response<api::GetPodResourcesResponse>, Status> {
        let _permit = self.permit("get")?;
        let req = request.into_inner();
        let mut answer = self
            .upstream("get", |mut c| async move { c.get(req).await })
            .await?;
        if let Some(pod) = answer.pod_resources.as_mut() {
            merge_pod(pod, &self.books.exported());
        }
        self.metrics.pod_resources_served("get", "ok");
        Ok(Response::new(answer))
    }
}

/// Why the re-export's socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("kubelet.pod_resources_export_socket {}: {what}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        source: io::Error,
    },
    #[error("kubelet.pod_resources_export_socket {}: {why}", path.display())]
    Refused { path: PathBuf, why: String },
}

/// Makes `socket`'s place ready: its directory (created mode 0750 when absent), a stale socket
/// (one nothing answers on, left by a topolet that was killed) removed. A path that is not a
/// socket, or a socket something answers on, is refused: never removed.
async fn prepare(socket: &Path) -> Result<(), ExportError> {
    let io_err = |what: &'static str| {
        let path = socket.to_path_buf();
        move |source| ExportError::Io { path, what, source }
    };
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(io_err("creating its directory"))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
                .map_err(io_err("setting its directory's mode"))?;
        }
    }
    match std::fs::symlink_metadata(socket) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("reading it")(e)),
        Ok(m) if !m.file_type().is_socket() => Err(ExportError::Refused {
            path: socket.to_path_buf(),
            why: "exists and is not a socket; not removed".into(),
        }),
        Ok(_) => match UnixStream::connect(socket).await {
            Ok(_) => Err(ExportError::Refused {
                path: socket.to_path_buf(),
                why: "another server answers on it; not removed".into(),
            }),
            Err(_) => std::fs::remove_file(socket).map_err(io_err("removing a stale socket")),
        },
    }
}

/// One accepted connection, holding its place among [`MAX_CONNECTIONS`] until it closes.
struct Conn {
    stream: UnixStream,
    _slot: OwnedSemaphorePermit,
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The re-export, bound and ready to serve ([`Bound::serve`]).
pub struct Bound {
    socket: PathBuf,
    listener: UnixListener,
    service: Reexport,
}

/// Binds the re-export on `socket` (mode 0600), answering from the kubelet's `upstream` socket
/// and `books`. Errors name the path and what failed.
pub async fn bind(
    socket: &Path,
    upstream: &Path,
    books: Arc<dyn ExportSource>,
    metrics: Arc<Metrics>,
) -> Result<Bound, ExportError> {
    if socket == upstream {
        return Err(ExportError::Refused {
            path: socket.to_path_buf(),
            why: "is the kubelet's own PodResources socket (kubelet.pod_resources_socket)".into(),
        });
    }
    prepare(socket).await?;
    let listener = UnixListener::bind(socket).map_err(|source| ExportError::Io {
        path: socket.to_path_buf(),
        what: "binding it",
        source,
    })?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600)).map_err(|source| {
        ExportError::Io {
            path: socket.to_path_buf(),
            what: "setting its mode",
            source,
        }
    })?;
    let client = Endpoint::from_shared(format!("unix:{}", upstream.display()))
        .ok()
        .map(|e| PodResourcesListerClient::new(e.connect_lazy()));
    Ok(Bound {
        socket: socket.to_path_buf(),
        listener,
        service: Reexport {
            upstream_socket: upstream.to_path_buf(),
            upstream: client,
            books,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            metrics,
        },
    })
}

impl Bound {
    /// The socket served.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Serves until the task is dropped; the socket file is removed then.
    pub async fn serve(self) {
        let Bound {
            socket,
            listener,
            service,
        } = self;
        let _remove = RemoveOnDrop(socket.clone());
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let incoming = futures::stream::unfold((listener, slots), |(l, slots)| async move {
            loop {
                match l.accept().await {
                    Ok((stream, _)) => match slots.clone().try_acquire_owned() {
                        Ok(slot) => {
                            return Some((
                                Ok::<_, io::Error>(Conn {
                                    stream,
                                    _slot: slot,
                                }),
                                (l, slots),
                            ))
                        }
                        // Full: this connection is closed as it is dropped.
                        Err(_) => {
                            tracing::debug!("PodResources re-export: {MAX_CONNECTIONS} connections open; one more closed");
                            continue;
                        }
                    },
                    Err(e) => {
                        // EMFILE and the like: keep serving the connections already open.
                        tracing::warn!(error = %e, "PodResources re-export: accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        });
        let server =
            PodResourcesListerServer::new(service).max_decoding_message_size(MAX_REQUEST_BYTES);
        let result = tonic::transport::Server::builder()
            .timeout(CALL_TIMEOUT)
            .concurrency_limit_per_connection(MAX_IN_FLIGHT)
            .serve_with_incoming(server, incoming)
            .await;
        if let Err(e) = result {
            tracing::error!(socket = %socket.display(), error = %e, "PodResources re-export stopped");
        }
    }
}

/// Removes the served socket when the serving task ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
#[path = "reexport_tests.rs"]
mod tests;
