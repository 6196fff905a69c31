//! The kubelet's PodResources API (`PodResourcesLister` of k8s.io/kubelet
//! `pkg/apis/podresources/v1`) over its unix socket (default
//! `/var/lib/kubelet/pod-resources/kubelet.sock`; `[kubelet] pod_resources_socket`), as a source
//! of the devices each container was given.
//!
//! - `List` at Synchronize (in a task of its own: Synchronize never waits for it), bounded by
//!   [`LIST_WAIT`] and asked again every [`RETRY_AFTER`] until it answers, so the source
//!   recovers on a node where no container event comes: every pod's answer is kept, so a
//!   container of a pod known then is answered from memory if `Get` fails.
//! - `Get` for a pod at CreateContainer, bounded by `[kubelet] pod_resources_wait_ms` (connect
//!   and call together): past it the container is admitted with its device nodes only. A kubelet
//!   whose `Get` is off (`Unimplemented`, or its "disabled" answer: the `KubeletPodResourcesGet`
//!   feature gate) is asked with `List` from then on.
//! - A failure (absent socket, an error, no answer within the wait) marks the source down for
//!   [`RETRY_AFTER`]: events in that time do not call it (no retry per event while the kubelet is
//!   away), they count as `skipped` and use what `List` kept. The status line says which state
//!   the source is in and the last error; `topolet_pod_resources_calls_total` counts every call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tonic::transport::{Channel, Endpoint};

use super::api;
use super::api::pod_resources_lister_client::PodResourcesListerClient;
use crate::telemetry::metrics::Metrics;
use topolet_core::report::status::PodResourcesStatus;

/// How long a failed source is left alone before the next event asks it again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// The bound on the Synchronize's `List` ([`PodResourcesSource::list_until_answered`]): it runs
/// in a task of its own, on no container's path, so a busy kubelet that answers in more than
/// `pod_resources_wait_ms` (the first call also connects) still answers it.
pub const LIST_WAIT: Duration = Duration::from_secs(5);

/// A PodResources call that gave no answer, naming the socket and the call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PodResourcesCallError {
    #[error("PodResources socket {}: absent (no kubelet here, or its PodResources API is off)", socket.display())]
    Absent { socket: PathBuf },
    #[error("PodResources socket {}: {call}: no answer within {} ms", socket.display(), waited.as_millis())]
    Timeout {
        socket: PathBuf,
        call: &'static str,
        waited: Duration,
    },
    #[error("PodResources socket {}: {call}: {code:?}: {message}", socket.display())]
    Call {
        socket: PathBuf,
        call: &'static str,
        code: tonic::Code,
        message: String,
    },
    #[error("PodResources socket {}: not a usable endpoint: {reason}", socket.display())]
    Endpoint { socket: PathBuf, reason: String },
}

impl PodResourcesCallError {
    /// The `result` label of `topolet_pod_resources_calls_total`.
    fn result(&self) -> &'static str {
        match self {
            PodResourcesCallError::Absent { .. } => "absent",
            PodResourcesCallError::Timeout { .. } => "timeout",
            PodResourcesCallError::Call { .. } | PodResourcesCallError::Endpoint { .. } => "error",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    NotAsked,
    Answering,
    Absent,
    Unreachable,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::NotAsked => "not-asked",
            State::Answering => "answering",
            State::Absent => "absent",
            State::Unreachable => "unreachable",
        }
    }
}

#[derive(Debug)]
struct Inner {
    state: State,
    last_error: Option<String>,
    /// Until when the source is left alone after a failure.
    paused_until: Option<Instant>,
    /// The kubelet's `Get` is off: `List` answers instead.
    get_off: bool,
    /// The last answer per pod (`namespace`, `name`), from `List` and `Get`.
    known: HashMap<(String, String), api::PodResources>,
}

/// The kubelet's PodResources API as a device source (see the module docs). Cheap to share
/// (`Arc`); calls never hold its lock across an await.
#[derive(Debug, Clone)]
pub struct PodResourcesSource {
    socket: PathBuf,
    wait: Duration,
    client: Option<PodResourcesListerClient<Channel>>,
    inner: Arc<Mutex<Inner>>,
    metrics: Arc<Metrics>,
}

impl PodResourcesSource {
    /// A source over `socket`, each lookup (connect and call together) bounded by `wait`.
    /// Nothing is dialled until the first call.
    pub fn new(socket: &Path, wait: Duration, metrics: Arc<Metrics>) -> PodResourcesSource {
        let client = Endpoint::from_shared(format!("unix:{}", socket.display()))
            .ok()
            .map(|e| PodResourcesListerClient::new(e.connect_lazy()));
        PodResourcesSource {
            socket: socket.to_path_buf(),
            wait,
            client,
            inner: Arc::new(Mutex::new(Inner {
                state: State::NotAsked,
                last_error: None,
                paused_until: None,
                get_off: false,
                known: HashMap::new(),
            })),
            metrics,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The source is paused after a failure: the call is skipped and counted.
    fn paused(&self, call: &'static str) -> bool {
        let paused = self.lock().paused_until.is_some_and(|t| Instant::now() < t);
        if paused {
            self.metrics.pod_resources_call(call, "skipped");
        }
        paused
    }

    fn failed(&self, call: &'static str, e: &PodResourcesCallError) {
        self.metrics.pod_resources_call(call, e.result());
        let mut g = self.lock();
        let was = g.state;
        g.state = match e {
            PodResourcesCallError::Absent { .. } => State::Absent,
            _ => State::Unreachable,
        };
        g.last_error = Some(e.to_string());
        g.paused_until = Some(Instant::now() + RETRY_AFTER);
        drop(g);
        if was != State::Absent || !matches!(e, PodResourcesCallError::Absent { .. }) {
            tracing::warn!(error = %e, retry_after_s = RETRY_AFTER.as_secs(), "the kubelet's PodResources API gives no answer; containers get the devices their device nodes show until it does");
        }
    }

    fn answered(&self, call: &'static str) {
        self.metrics.pod_resources_call(call, "ok");
        let mut g = self.lock();
        if g.state != State::Answering {
            tracing::info!(socket = %self.socket.display(), "the kubelet's PodResources API answers");
        }
        g.state = State::Answering;
        g.paused_until = None;
    }

    /// `call` on a clone of the client, within `wait`; an absent socket is not dialled.
    async fn ask<T, F, Fut>(
        &self,
        call: &'static str,
        wait: Duration,
        f: F,
    ) -> Result<T, PodResourcesCallError>
    where
        F: FnOnce(PodResourcesListerClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let Some(client) = self.client.clone() else {
            return Err(PodResourcesCallError::Endpoint {
                socket: self.socket.clone(),
                reason: "not a path tonic can dial".into(),
            });
        };
        if !self.socket.exists() {
            return Err(PodResourcesCallError::Absent {
                socket: self.socket.clone(),
            });
        }
        match tokio::time::timeout(wait, f(client)).await {
            Err(_) => Err(PodResourcesCallError::Timeout {
                socket: self.socket.clone(),
                call,
                waited: wait,
            }),
            Ok(Err(status)) => Err(PodResourcesCallError::Call {
                socket: self.socket.clone(),
                call,
                code: status.code(),
                message: status.message().to_string(),
            }),
            Ok(Ok(r)) => Ok(r.into_inner()),
        }
    }

    /// The Synchronize's `List`, off every event's path: within [`LIST_WAIT`]; after a failure
    /// asked again when the pause ([`RETRY_AFTER`]) ends, until it answers (or the task is
    /// dropped with the connection).
    pub async fn list_until_answered(&self) {
        loop {
            let resume = self.lock().paused_until;
            if let Some(at) = resume.filter(|at| Instant::now() < *at) {
                tokio::time::sleep_until(at.into()).await;
                continue;
            }
            // Asked and answered; a pause an event's failure began meanwhile waits again.
            if let Ok(true) = self.list_within(LIST_WAIT).await {
                return;
            }
        }
    }

    /// `List` within the CreateContainer wait: every pod's answer, kept. Errors are the
    /// source's state; a paused source is not asked.
    pub async fn list(&self) -> Result<(), PodResourcesCallError> {
        self.list_within(self.wait).await.map(|_| ())
    }

    /// `Ok(false)`: paused, not asked.
    async fn list_within(&self, wait: Duration) -> Result<bool, PodResourcesCallError> {
        if self.paused("list") {
            return Ok(false);
        }
        let req = api::ListPodResourcesRequest {};
        match self
            .ask("List", wait, |mut c| async move { c.list(req).await })
            .await
        {
            Ok(r) => {
                self.answered("list");
                let mut g = self.lock();
                g.known = r
                    .pod_resources
                    .into_iter()
                    .map(|p| ((p.namespace.clone(), p.name.clone()), p))
                    .collect();
                Ok(true)
            }
            Err(e) => {
                self.failed("list", &e);
                Err(e)
            }
        }
    }

    /// The kubelet's answer for pod `namespace/name`, within the wait: `Get` (or `List` where
    /// `Get` is off); what `List` kept while the source is down; `None` when neither knows it.
    pub async fn pod(&self, namespace: &str, name: &str) -> Option<api::PodResources> {
        let key = (namespace.to_string(), name.to_string());
        let cached = || self.lock().known.get(&key).cloned();
        if self.paused("get") {
            return cached();
        }
        if self.lock().get_off {
            return match self.list().await {
                Ok(()) => cached(),
                Err(_) => cached(),
            };
        }
        let req = api::GetPodResourcesRequest {
            pod_name: name.into(),
            pod_namespace: namespace.into(),
        };
        match self
            .ask("Get", self.wait, |mut c| async move { c.get(req).await })
            .await
        {
            Ok(r) => {
                self.answered("get");
                let p = r.pod_resources?;
                self.lock().known.insert(key, p.clone());
                Some(p)
            }
            // The kubelet does not know the pod (yet): an answer, not a failure. The kubelet
            // says so with a plain error ("pod <name> in namespace <ns> not found": code
            // Unknown, pkg/kubelet/apis/podresources/server_v1.go `Get`); NotFound is taken too.
            Err(PodResourcesCallError::Call { code, message, .. })
                if code == tonic::Code::NotFound
                    || (code == tonic::Code::Unknown && message.ends_with("not found")) =>
            {
                self.answered("get");
                None
            }
            Err(PodResourcesCallError::Call { code, message, .. })
                if code == tonic::Code::Unimplemented || message.contains("disabled") =>
            {
                tracing::info!(socket = %self.socket.display(), %message, "the kubelet's PodResources Get is off; List answers instead");
                self.metrics.pod_resources_call("get", "error");
                self.lock().get_off = true;
                let _ = self.list().await;
                cached()
            }
            Err(e) => {
                self.failed("get", &e);
                cached()
            }
        }
    }

    /// `r`, counted in `topolet_pod_resources_calls_total` under `call`.
    fn counted<T>(
        &self,
        call: &'static str,
        r: Result<T, PodResourcesCallError>,
    ) -> Result<T, PodResourcesCallError> {
        match &r {
            Ok(_) => self.metrics.pod_resources_call(call, "ok"),
            Err(e) => self.metrics.pod_resources_call(call, e.result()),
        }
        r
    }

    /// The kubelet's device-plugin devices per NUMA node: `GetAllocatableResources` and `List`,
    /// each within [`LIST_WAIT`], off every container's path (the NodeResourceTopology's
    /// refresh). A paused source is not asked (`Ok(None)`); a failure is returned and counted,
    /// and does not pause the source (the container path's state is its own calls').
    pub async fn device_inventory(
        &self,
    ) -> Result<
        Option<topolet_core::report::device_inventory::DeviceInventory>,
        PodResourcesCallError,
    > {
        if self.paused("allocatable") {
            return Ok(None);
        }
        let req = api::AllocatableResourcesRequest {};
        let allocatable = self.counted(
            "allocatable",
            self.ask("GetAllocatableResources", LIST_WAIT, |mut c| async move {
                c.get_allocatable_resources(req).await
            })
            .await,
        )?;
        let req = api::ListPodResourcesRequest {};
        let list = self.counted(
            "list",
            self.ask("List", LIST_WAIT, |mut c| async move { c.list(req).await })
                .await,
        )?;
        Ok(Some(super::inventory::inventory(&allocatable, &list)))
    }

    /// The source's status line.
    pub fn status(&self) -> PodResourcesStatus {
        let g = self.lock();
        let degraded = match g.state {
            State::Answering | State::NotAsked => "",
            _ => "containers get the devices their device nodes show until it answers (asked again 30 s after a failure); ",
        };
        PodResourcesStatus {
            socket: self.socket.display().to_string(),
            state: g.state.as_str().into(),
            wait_ms: u64::try_from(self.wait.as_millis()).unwrap_or(u64::MAX),
            last_error: g.last_error.clone(),
            note: format!(
                "{degraded}device-plugin devices carry their numa node; dra devices get theirs \
                 from this node's ResourceSlices (with the API client on), else are recorded \
                 with why it is unknown"
            ),
        }
    }
}

#[cfg(test)]
#[path = "pod_resources_tests.rs"]
pub(crate) mod tests;
