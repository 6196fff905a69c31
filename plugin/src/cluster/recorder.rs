//! The Event recorder of topolet's Kubernetes API client: Events on pods and on the Node, the
//! task [`crate::cluster::client::start`] spawns.
//!
//! Off the NRI event path by construction: a handler hands an [`Occurrence`] to the
//! [`EventSink`] with `try_send` on a bounded channel and returns; when the channel is full the
//! occurrence is dropped and counted (`topolet_kube_events_total{result="dropped_queue_full"}`).
//! One task owns the client: it correlates occurrences into series and rate-limits them per pod
//! (`topolet_core::kube::events`, client-go's recorder rules), then creates or patches core/v1 Events, as the
//! kubelet's own recorder does. API errors that may pass (no connection, timeouts, 429, 5xx)
//! are retried with kube's default watcher back-off (800 ms doubling to 30 s, jittered) a few
//! times, then the occurrence is given up (`result="failed"`); every failed request is counted
//! in `topolet_kube_api_errors_total` and logged (the same error at most once a minute).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use kube::Client;
use tokio::sync::mpsc;

use crate::telemetry::metrics::Metrics;
use topolet_core::kube::events::{Action, Correlator, EventType, ObjectRef, Occurrence};

/// Occurrences waiting for the recorder task. Far more than a burst of refusals needs; when the
/// API is down long enough to fill it, newer occurrences are dropped (and counted).
pub const QUEUE: usize = 1024;
/// Attempts per request before an occurrence is given up.
pub const ATTEMPTS: usize = 5;
/// The Events' `source.component` and `reportingComponent`.
pub const COMPONENT: &str = "topolet";

/// What the recorder task receives.
#[derive(Debug)]
pub enum Message {
    Event(Occurrence),
    /// The pod is gone: forget its series and rate limit.
    Forget(String),
    /// An Event on this node's Node object (the recorder knows the node's name).
    NodeEvent {
        type_: EventType,
        reason: String,
        message: String,
    },
}

/// The NRI handlers' end of the channel: never blocks, never awaits.
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: mpsc::Sender<Message>,
    metrics: Arc<Metrics>,
}

impl EventSink {
    /// A sink and the receiver the recorder reads, holding `capacity` messages.
    pub fn channel(capacity: usize, metrics: Arc<Metrics>) -> (EventSink, mpsc::Receiver<Message>) {
        let (tx, rx) = mpsc::channel(capacity);
        (EventSink { tx, metrics }, rx)
    }

    /// Hands `occ` to the recorder, or drops and counts it when the queue is full.
    pub fn record(&self, occ: Occurrence) {
        if self.tx.try_send(Message::Event(occ)).is_err() {
            self.metrics.kube_event("dropped_queue_full");
        }
    }

    /// Hands an Event on the Node to the recorder, or drops and counts it when the queue is
    /// full.
    pub fn node_event(&self, type_: EventType, reason: &str, message: &str) {
        let msg = Message::NodeEvent {
            type_,
            reason: reason.to_string(),
            message: message.to_string(),
        };
        if self.tx.try_send(msg).is_err() {
            self.metrics.kube_event("dropped_queue_full");
        }
    }

    /// Tells the recorder pod `uid` is gone (best effort).
    pub fn forget(&self, uid: &str) {
        let _ = self.tx.try_send(Message::Forget(uid.to_string()));
    }
}

/// The core/v1 Event object for `occ` (`count`, `first` and `last` from its series).
pub fn event_object(
    occ: &Occurrence,
    name: &str,
    count: u32,
    first: SystemTime,
    last: SystemTime,
    node: &str,
) -> Event {
    let o = &occ.object;
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(o.event_namespace().to_string()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some(if o.is_node() { "Node" } else { "Pod" }.into()),
            namespace: (!o.is_node()).then(|| o.namespace.clone()),
            name: Some(o.name.clone()),
            uid: Some(o.uid.clone()),
            ..Default::default()
        },
        type_: Some(occ.type_.as_str().into()),
        reason: Some(occ.reason.clone()),
        message: Some(occ.message.clone()),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: Some(node.to_string()),
        }),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(node.to_string()),
        count: Some(i32::try_from(count).unwrap_or(i32::MAX)),
        first_timestamp: time(first),
        last_timestamp: time(last),
        ..Default::default()
    }
}

fn time(t: SystemTime) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::try_from(t).ok().map(Time)
}

/// The merge patch of a repeated Event (client-go's: count and lastTimestamp).
pub fn series_patch(count: u32, last: SystemTime) -> serde_json::Value {
    serde_json::json!({
        "count": i32::try_from(count).unwrap_or(i32::MAX),
        "lastTimestamp": time(last),
    })
}

/// How one request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// Worth another attempt: no answer, 429, 5xx. `code` is the metric label.
    Transient {
        code: String,
        error: String,
    },
    /// The answer will not change (403, 422, …).
    Permanent {
        code: String,
        error: String,
    },
    NotFound,
    AlreadyExists,
}

fn classify(e: &kube::Error) -> Failure {
    match e {
        kube::Error::Api(status) => match status.code {
            404 => Failure::NotFound,
            409 => Failure::AlreadyExists,
            c if c == 429 || c >= 500 => Failure::Transient {
                code: c.to_string(),
                error: e.to_string(),
            },
            c => Failure::Permanent {
                code: c.to_string(),
                error: e.to_string(),
            },
        },
        _ => Failure::Transient {
            code: "connection".into(),
            error: e.to_string(),
        },
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Create,
    Patch,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Patch => "patch",
        }
    }
}

pub(super) struct Recorder {
    client: Client,
    node: String,
    metrics: Arc<Metrics>,
    correlator: Correlator,
    /// When each (operation, code) error was last logged.
    logged: HashMap<(Op, String), Instant>,
}

/// The same API error is logged at most this often (every one is counted).
const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(60);

impl Recorder {
    pub(super) fn new(client: Client, node: String, metrics: Arc<Metrics>) -> Recorder {
        Recorder {
            client,
            node,
            metrics,
            correlator: Correlator::new(),
            logged: HashMap::new(),
        }
    }

    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Message>) {
        while let Some(msg) = rx.recv().await {
            match msg {
                Message::Forget(uid) => self.correlator.forget_object(&uid),
                Message::Event(occ) => self.handle(occ).await,
                Message::NodeEvent {
                    type_,
                    reason,
                    message,
                } => {
                    let node = ObjectRef::node(&self.node);
                    self.handle(Occurrence::new(node, type_, &reason, &message))
                        .await
                }
            }
        }
    }

    async fn handle(&mut self, occ: Occurrence) {
        let action = self.correlator.observe(&occ, SystemTime::now());
        let (mut op, name, count, first, last) = match action {
            Action::RateLimited => {
                self.metrics.kube_event("rate_limited");
                tracing::debug!(pod = %format!("{}/{}", occ.object.namespace, occ.object.name), reason = %occ.reason, "event rate-limited");
                return;
            }
            Action::Create {
                name,
                count,
                first,
                last,
            } => (Op::Create, name, count, first, last),
            Action::Patch {
                name,
                count,
                first,
                last,
            } => (Op::Patch, name, count, first, last),
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), occ.object.event_namespace());
        let mut backoff = DefaultBackoff::default();
        backoff.reset();
        let mut attempt = 0;
        // A patch of a gone object creates it, a create of an existing one patches it: each
        // switch at most once, so this ends.
        let mut switched = false;
        loop {
            attempt += 1;
            let result = match op {
                Op::Create => api
                    .create(
                        &PostParams::default(),
                        &event_object(&occ, &name, count, first, last, &self.node),
                    )
                    .await
                    .map(|_| ()),
                Op::Patch => api
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(series_patch(count, last)),
                    )
                    .await
                    .map(|_| ()),
            };
            let failure = match result {
                Ok(()) => {
                    self.metrics.kube_event(match op {
                        Op::Create => "created",
                        Op::Patch => "patched",
                    });
                    tracing::debug!(event = %name, reason = %occ.reason, count, operation = op.as_str(), "event sent");
                    return;
                }
                Err(e) => classify(&e),
            };
            let (code, error, transient) = match failure {
                Failure::NotFound if op == Op::Patch && !switched => {
                    // Expired (the API server keeps Events an hour) or deleted: a new object.
                    self.metrics.kube_api_error(op.as_str(), "404");
                    (op, switched) = (Op::Create, true);
                    continue;
                }
                Failure::AlreadyExists if op == Op::Create && !switched => {
                    self.metrics.kube_api_error(op.as_str(), "409");
                    (op, switched) = (Op::Patch, true);
                    continue;
                }
                Failure::NotFound => ("404".to_string(), "not found".to_string(), false),
                Failure::AlreadyExists => ("409".into(), "already exists".into(), false),
                Failure::Transient { code, error } => (code, error, true),
                Failure::Permanent { code, error } => (code, error, false),
            };
            self.metrics.kube_api_error(op.as_str(), &code);
            let retry = transient && attempt < ATTEMPTS;
            let delay = if retry { backoff.next() } else { None };
            self.log_error(op, &code, &error, &occ, delay);
            match delay {
                Some(d) => tokio::time::sleep(d).await,
                None => break,
            }
        }
        self.metrics.kube_event("failed");
        if op == Op::Create {
            self.correlator.create_failed(&occ);
        }
    }

    fn log_error(
        &mut self,
        op: Op,
        code: &str,
        error: &str,
        occ: &Occurrence,
        retry_in: Option<Duration>,
    ) {
        let now = Instant::now();
        let key = (op, code.to_string());
        let due = match self.logged.get(&key) {
            Some(at) => now.duration_since(*at) >= ERROR_LOG_INTERVAL,
            None => true,
        };
        if !due {
            return;
        }
        self.logged.insert(key, now);
        let pod = format!("{}/{}", occ.object.namespace, occ.object.name);
        match retry_in {
            Some(d) => {
                tracing::warn!(operation = op.as_str(), code, error, pod = %pod, reason = %occ.reason, retry_in = ?d, "kubernetes API: event request failed; retrying")
            }
            None => {
                tracing::error!(operation = op.as_str(), code, error, pod = %pod, reason = %occ.reason, "kubernetes API: event not sent (check the API server and topolet's RBAC: events create, patch)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_object_is_the_kubelets_shape() {
        let occ = Occurrence::new(
            ObjectRef {
                namespace: "ns".into(),
                name: "web".into(),
                uid: "u-1".into(),
            },
            EventType::Warning,
            "TopologyAffinityError",
            "no single NUMA node",
        );
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let e = event_object(&occ, "web.1", 3, t, t + Duration::from_secs(5), "node-1");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["metadata"]["name"], "web.1");
        assert_eq!(v["metadata"]["namespace"], "ns");
        assert_eq!(
            v["involvedObject"],
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "web", "uid": "u-1"})
        );
        assert_eq!(v["type"], "Warning");
        assert_eq!(v["reason"], "TopologyAffinityError");
        assert_eq!(v["count"], 3);
        assert_eq!(
            v["source"],
            serde_json::json!({"component": "topolet", "host": "node-1"})
        );
        assert_eq!(v["reportingComponent"], "topolet");
        assert_eq!(v["reportingInstance"], "node-1");
        assert_eq!(v["firstTimestamp"], "2027-01-15T08:00:00Z");
        assert_eq!(v["lastTimestamp"], "2027-01-15T08:00:05Z");
        assert!(v.get("eventTime").is_none(), "a legacy (core/v1) event");
        assert_eq!(
            series_patch(4, t),
            serde_json::json!({"count": 4, "lastTimestamp": "2027-01-15T08:00:00Z"})
        );
    }

    #[test]
    fn a_node_event_is_the_kubelets_node_event_shape() {
        let occ = Occurrence::new(
            ObjectRef::node("node-1"),
            EventType::Warning,
            "TopoletConfigRefused",
            "configuration refused",
        );
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let v = serde_json::to_value(event_object(&occ, "node-1.1", 1, t, t, "node-1")).unwrap();
        assert_eq!(v["metadata"]["namespace"], "default");
        assert_eq!(
            v["involvedObject"],
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "node-1"})
        );
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_without_waiting() {
        let metrics = Arc::new(Metrics::new());
        let (sink, mut rx) = EventSink::channel(2, metrics.clone());
        let occ = Occurrence::new(
            ObjectRef {
                namespace: "ns".into(),
                name: "p".into(),
                uid: "u".into(),
            },
            EventType::Normal,
            "ExclusiveCPUsAssigned",
            "m",
        );
        for _ in 0..5 {
            sink.record(occ.clone());
        }
        assert_eq!(metrics.kube_events("dropped_queue_full"), 3);
        assert!(matches!(rx.recv().await, Some(Message::Event(_))));
        drop(rx);
        sink.record(occ);
        assert_eq!(metrics.kube_events("dropped_queue_full"), 4);
    }

    #[test]
    fn api_errors_are_classified() {
        let api = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert_eq!(classify(&api(404)), Failure::NotFound);
        assert_eq!(classify(&api(409)), Failure::AlreadyExists);
        assert!(matches!(classify(&api(503)), Failure::Transient { .. }));
        assert!(matches!(classify(&api(429)), Failure::Transient { .. }));
        assert!(matches!(classify(&api(403)), Failure::Permanent { code, .. } if code == "403"));
    }
}
