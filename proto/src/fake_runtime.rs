//! Runtime-side test harness (feature `test-support`): a fake NRI runtime that
//! listens on a unix socket, accepts plugins, serves the Runtime service
//! (recording RegisterPlugin and UpdateContainers), drives Configure/Synchronize
//! (optionally paged) and any Plugin RPC, and times requests for benchmarks.
//!
//! How it answers UpdateContainers is the test's to choose ([`UpdateAnswer`], set with
//! [`PluginConn::set_update_answer`]): apply (the default), reject with an error, or stall
//! past the plugin's request deadline, as a runtime in a slow guest does. Every request is
//! recorded whatever the answer.
//!
//! Like containerd it holds one "NRI lock" while calling the plugin through the
//! `locked`/convenience helpers, and UpdateContainers takes the same lock, so a
//! plugin that awaits an unsolicited update inside a handler deadlocks here too.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch, Mutex};
use ttrpc::r#async::transport::{Listener, Socket};
use ttrpc::r#async::{Client, Server, TtrpcContext};

use crate::api;
use crate::api_ttrpc::{create_runtime, PluginClient, Runtime};
use crate::mux::{Mux, TrunkState, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};

/// Errors of the harness.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// Socket error.
    #[error("fake runtime socket {path}: {source}")]
    Io {
        /// Socket path.
        path: String,
        /// Cause.
        source: io::Error,
    },
    /// Setup failed.
    #[error("fake runtime setup failed: {0}")]
    Setup(String),
    /// A plugin RPC failed.
    #[error("plugin rpc {method} failed: {source}")]
    Rpc {
        /// Method.
        method: &'static str,
        /// Cause.
        source: ttrpc::Error,
    },
    /// The plugin broke the paged-sync contract.
    #[error("plugin does not handle split sync requests: {0}")]
    SplitSync(String),
}

/// A listening fake runtime.
#[derive(Debug)]
pub struct FakeRuntime {
    listener: UnixListener,
    path: PathBuf,
    nri_lock: Arc<Mutex<()>>,
}

impl FakeRuntime {
    /// Binds `path` (an existing file there is removed first).
    pub fn bind(path: impl AsRef<Path>) -> Result<FakeRuntime, HarnessError> {
        let path = path.as_ref().to_path_buf();
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).map_err(|source| HarnessError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(FakeRuntime {
            listener,
            path,
            nri_lock: Arc::new(Mutex::new(())),
        })
    }

    /// Socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts the next plugin connection.
    pub async fn accept(&self) -> Result<PluginConn, HarnessError> {
        let (stream, _) = self
            .listener
            .accept()
            .await
            .map_err(|source| HarnessError::Io {
                path: self.path.display().to_string(),
                source,
            })?;
        PluginConn::start(stream, self.nri_lock.clone()).await
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How the fake runtime answers the plugin's UpdateContainers requests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum UpdateAnswer {
    /// Applies them: an empty response (the default).
    #[default]
    Apply,
    /// Answers with an error status carrying this message.
    Reject(String),
    /// Answers nothing until the test sets another answer, then answers as that one says (a
    /// runtime too slow for the plugin's request deadline; what it applies late is applied).
    Stall,
}

struct RuntimeService {
    registered: watch::Sender<Option<api::RegisterPluginRequest>>,
    updates: mpsc::UnboundedSender<api::UpdateContainersRequest>,
    nri_lock: Arc<Mutex<()>>,
    answer: watch::Receiver<UpdateAnswer>,
}

#[async_trait]
impl Runtime for RuntimeService {
    async fn register_plugin(
        &self,
        _ctx: &TtrpcContext,
        req: api::RegisterPluginRequest,
    ) -> ttrpc::Result<api::Empty> {
        self.registered.send_replace(Some(req));
        Ok(api::Empty::default())
    }

    async fn update_containers(
        &self,
        _ctx: &TtrpcContext,
        req: api::UpdateContainersRequest,
    ) -> ttrpc::Result<api::UpdateContainersResponse> {
        {
            // Recorded under the NRI lock, as containerd takes it to apply the request.
            let _guard = self.nri_lock.lock().await;
            let _ = self.updates.send(req);
        }
        let mut answer = self.answer.clone();
        loop {
            let now = answer.borrow_and_update().clone();
            match now {
                UpdateAnswer::Apply => return Ok(api::UpdateContainersResponse::default()),
                UpdateAnswer::Reject(msg) => {
                    return Err(ttrpc::Error::RpcStatus(ttrpc::get_status(
                        ttrpc::Code::UNAVAILABLE,
                        msg,
                    )))
                }
                UpdateAnswer::Stall => {
                    if answer.changed().await.is_err() {
                        return Err(ttrpc::Error::RpcStatus(ttrpc::get_status(
                            ttrpc::Code::UNAVAILABLE,
                            "fake runtime gone".to_string(),
                        )));
                    }
                }
            }
        }
    }
}

/// The harness's deadline on each request ([`PluginConn::request_timeout`]): only against a hang.
/// containerd's own is 2 s (`request_timeout` in its NRI config, which Configure still
/// announces), but a test on a loaded machine must not fail because a correct answer took
/// longer than that.
pub const HARNESS_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// One accepted plugin connection, seen from the runtime.
pub struct PluginConn {
    mux: Mux,
    client: PluginClient,
    _server: Server,
    registered: watch::Receiver<Option<api::RegisterPluginRequest>>,
    updates: Mutex<mpsc::UnboundedReceiver<api::UpdateContainersRequest>>,
    nri_lock: Arc<Mutex<()>>,
    answer: watch::Sender<UpdateAnswer>,
    /// Per-request timeout sent to the plugin, and how long this side waits for an answer
    /// (default [`HARNESS_REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
}

impl std::fmt::Debug for PluginConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginConn")
            .field("mux", &self.mux)
            .finish()
    }
}

impl PluginConn {
    /// Runtime side of an already-connected stream (e.g. one end of a socketpair
    /// for pre-installed plugins).
    pub async fn start(
        stream: UnixStream,
        nri_lock: Arc<Mutex<()>>,
    ) -> Result<PluginConn, HarnessError> {
        let (mux, mut conns) = Mux::new(stream, &[PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN])
            .map_err(|e| HarnessError::Setup(e.to_string()))?;
        let runtime_conn = conns
            .pop()
            .ok_or_else(|| HarnessError::Setup("no conn 2".into()))?;
        let plugin_conn = conns
            .pop()
            .ok_or_else(|| HarnessError::Setup("no conn 1".into()))?;
        let (reg_tx, registered) = watch::channel(None);
        let (upd_tx, upd_rx) = mpsc::unbounded_channel();
        let (answer, answer_rx) = watch::channel(UpdateAnswer::Apply);
        let svc = RuntimeService {
            registered: reg_tx,
            updates: upd_tx,
            nri_lock: nri_lock.clone(),
            answer: answer_rx,
        };
        let incoming = futures::stream::once(async move { Ok::<_, io::Error>(runtime_conn) })
            .chain(futures::stream::pending());
        let mut server = Server::new()
            .register_service(create_runtime(Arc::new(svc)))
            .add_listener(Listener::new(incoming));
        server
            .start()
            .await
            .map_err(|e| HarnessError::Setup(e.to_string()))?;
        let client = PluginClient::new(Client::new(Socket::new(plugin_conn)));
        Ok(PluginConn {
            mux,
            client,
            _server: server,
            registered,
            updates: Mutex::new(upd_rx),
            nri_lock,
            answer,
            request_timeout: HARNESS_REQUEST_TIMEOUT,
        })
    }

    /// Waits for RegisterPlugin; `None` if the connection closed first.
    pub async fn wait_registered(&self) -> Option<api::RegisterPluginRequest> {
        let mut rx = self.registered.clone();
        let r = rx.wait_for(|r| r.is_some()).await.ok()?;
        r.clone()
    }

    /// The raw Plugin-service client (no NRI lock held).
    pub fn client(&self) -> &PluginClient {
        &self.client
    }

    /// A ttrpc context with the request timeout.
    pub fn ctx(&self) -> ttrpc::context::Context {
        ttrpc::context::with_duration(self.request_timeout)
    }

    /// Runs `fut` while holding the NRI lock, as containerd does around plugin calls.
    pub async fn locked<F: Future>(&self, fut: F) -> F::Output {
        let _guard = self.nri_lock.lock().await;
        fut.await
    }

    /// Configure with explicit request.
    pub async fn configure(
        &self,
        req: api::ConfigureRequest,
    ) -> Result<api::ConfigureResponse, HarnessError> {
        self.locked(self.client.configure(self.ctx(), &req))
            .await
            .map_err(|source| HarnessError::Rpc {
                method: "Configure",
                source,
            })
    }

    /// Configure as `containerd` `runtime_version`, with `NRI_version` (empty = not sent).
    pub async fn configure_as(
        &self,
        runtime_version: &str,
        nri_version: &str,
    ) -> Result<api::ConfigureResponse, HarnessError> {
        self.configure(api::ConfigureRequest {
            runtime_name: "containerd".into(),
            runtime_version: runtime_version.into(),
            NRI_version: nri_version.into(),
            registration_timeout: 5000,
            request_timeout: 2000,
            ..Default::default()
        })
        .await
    }

    /// Synchronize; with `page = Some(n)` splits into messages of at most `n` pods
    /// and `n` containers with `more=true` on all but the last, checking the
    /// plugin's contract on intermediate replies. Returns the final reply and the
    /// number of messages sent.
    pub async fn synchronize(
        &self,
        pods: Vec<api::PodSandbox>,
        containers: Vec<api::Container>,
        page: Option<usize>,
    ) -> Result<(api::SynchronizeResponse, usize), HarnessError> {
        let _guard = self.nri_lock.lock().await;
        let rpc = |source| HarnessError::Rpc {
            method: "Synchronize",
            source,
        };
        let Some(n) = page.filter(|&n| n > 0) else {
            let req = api::SynchronizeRequest {
                pods,
                containers,
                ..Default::default()
            };
            let r = self
                .client
                .synchronize(self.ctx(), &req)
                .await
                .map_err(rpc)?;
            return Ok((r, 1));
        };
        let mut pods = pods.into_iter().peekable();
        let mut ctrs = containers.into_iter().peekable();
        let mut sent = 0;
        loop {
            let req_pods: Vec<_> = pods.by_ref().take(n).collect();
            let req_ctrs: Vec<_> = ctrs.by_ref().take(n).collect();
            let more = pods.peek().is_some() || ctrs.peek().is_some();
            let req = api::SynchronizeRequest {
                pods: req_pods,
                containers: req_ctrs,
                more,
                ..Default::default()
            };
            let r = self
                .client
                .synchronize(self.ctx(), &req)
                .await
                .map_err(rpc)?;
            sent += 1;
            if !more {
                return Ok((r, sent));
            }
            if !r.more || !r.update.is_empty() {
                return Err(HarnessError::SplitSync(format!(
                    "page {sent}: more={} updates={}",
                    r.more,
                    r.update.len()
                )));
            }
        }
    }

    /// CreateContainer under the NRI lock.
    pub async fn create_container(
        &self,
        req: &api::CreateContainerRequest,
    ) -> ttrpc::Result<api::CreateContainerResponse> {
        self.locked(self.client.create_container(self.ctx(), req))
            .await
    }

    /// StateChange under the NRI lock.
    pub async fn state_change(&self, ev: &api::StateChangeEvent) -> ttrpc::Result<api::Empty> {
        self.locked(self.client.state_change(self.ctx(), ev)).await
    }

    /// One event of a pod's or container's life, sent as containerd sends it before the
    /// dedicated per-event RPCs of NRI v0.12: a request for CreateContainer and StopContainer
    /// (their replies carry adjustments and updates), a StateChange for the rest.
    pub async fn send_event(
        &self,
        event: api::Event,
        pod: &api::PodSandbox,
        ctr: Option<&api::Container>,
    ) -> ttrpc::Result<()> {
        let pod = protobuf::MessageField::some(pod.clone());
        let container = protobuf::MessageField::from_option(ctr.cloned());
        match event {
            api::Event::CREATE_CONTAINER => {
                let req = api::CreateContainerRequest {
                    pod,
                    container,
                    ..Default::default()
                };
                self.create_container(&req).await?;
            }
            api::Event::STOP_CONTAINER => {
                let req = api::StopContainerRequest {
                    pod,
                    container,
                    ..Default::default()
                };
                self.locked(self.client.stop_container(self.ctx(), &req))
                    .await?;
            }
            _ => {
                let ev = api::StateChangeEvent {
                    event: event.into(),
                    pod,
                    container,
                    ..Default::default()
                };
                self.state_change(&ev).await?;
            }
        }
        Ok(())
    }

    /// How UpdateContainers requests are answered from now on (a stalled one is answered as
    /// this says).
    pub fn set_update_answer(&self, answer: UpdateAnswer) {
        self.answer.send_replace(answer);
    }

    /// Next UpdateContainers request the plugin sent; `None` once closed.
    pub async fn next_update(&self) -> Option<api::UpdateContainersRequest> {
        self.updates.lock().await.recv().await
    }

    /// The next UpdateContainers request already received, without waiting; `None` if there is
    /// none yet (or another task is waiting in [`PluginConn::next_update`]).
    pub fn try_next_update(&self) -> Option<api::UpdateContainersRequest> {
        self.updates.try_lock().ok()?.try_recv().ok()
    }

    /// Resolves when the plugin side closed the connection.
    pub fn closed(&self) -> impl Future<Output = TrunkState> + Send + 'static {
        self.mux.closed()
    }

    /// Closes the connection (the plugin sees EOF).
    pub fn close(self) {
        self.mux.close();
    }
}

/// Runs `fut` and measures its wall time.
pub async fn timed<F: Future>(fut: F) -> (F::Output, Duration) {
    let start = Instant::now();
    let out = fut.await;
    (out, start.elapsed())
}

/// Latency summary of a request series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyStats {
    /// Samples.
    pub count: usize,
    /// Minimum.
    pub min: Duration,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Maximum.
    pub max: Duration,
    /// Sum of all samples.
    pub total: Duration,
}

impl LatencyStats {
    /// Summarizes samples; `None` if empty.
    pub fn from_samples(samples: &[Duration]) -> Option<LatencyStats> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        let pick = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        Some(LatencyStats {
            count: s.len(),
            min: s[0],
            p50: pick(0.5),
            p99: pick(0.99),
            max: s[s.len() - 1],
            total: s.iter().sum(),
        })
    }
}

/// Sends `n` requests made by `make(i)` one after another (as the runtime does)
/// and returns per-request latencies; stops at the first error.
pub async fn bench_sequential<F, Fut, T>(n: usize, mut make: F) -> ttrpc::Result<Vec<Duration>>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ttrpc::Result<T>>,
{
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (r, d) = timed(make(i)).await;
        r?;
        out.push(d);
    }
    Ok(out)
}
