//! topolet's Kubernetes API client (`[kubernetes]`): Events on pods and on the Node, and the
//! connection the other API tasks share the set-up of ([`connect`]: `crate::cluster::nrt`,
//! `crate::cluster::pod_directory`); the client [`start`] builds is shared with the eviction loop
//! (`crate::pressure::actions`, `crate::pressure::pod_facts`) and the node conditions publisher (`crate::cluster::node_status`).
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
//!
//! Credentials (`enabled = "auto"`), in the order every Kubernetes client uses (client-go's
//! `clientcmd` loading rules, kube-rs's `Config::infer`): the configured `kubeconfig`, else the
//! `KUBECONFIG` environment variable (a `:`-separated list of files, merged as kubectl merges
//! them), else the in-cluster service account (`KUBERNETES_SERVICE_HOST` and the mounted token);
//! none found, the client is off and topolet is the node-local plugin it always was. The log line
//! that turns the client on names the source.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use kube::Client;
use tokio::sync::mpsc;

use crate::config::{is_node_name, EvictAs, KubernetesConfig, KubernetesEnabled};
use crate::telemetry::metrics::Metrics;
use topolet_core::kube::events::{Action, Correlator, EventType, ObjectRef, Occurrence};

/// Occurrences waiting for the recorder task. Far more than a burst of refusals needs; when the
/// API is down long enough to fill it, newer occurrences are dropped (and counted).
pub const QUEUE: usize = 1024;
/// Attempts per request before an occurrence is given up.
pub const ATTEMPTS: usize = 5;
/// The Events' `source.component` and `reportingComponent`.
pub const COMPONENT: &str = "topolet";
/// The in-cluster service account token kube reads.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// Where the client's credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `[kubernetes] kubeconfig`.
    Kubeconfig(PathBuf),
    /// The `KUBECONFIG` environment variable's files, in order (the first one naming a value
    /// wins, as kubectl merges them).
    KubeconfigEnv(Vec<PathBuf>),
    InCluster,
}

/// The credentials `config` asks for, given `KUBECONFIG` (`kubeconfig_env`) and whether the
/// in-cluster service account is there; `None`: the client is off. Errors only for `enabled =
/// "on"` without credentials.
pub fn credentials(
    config: &KubernetesConfig,
    kubeconfig_env: Option<&std::ffi::OsStr>,
    in_cluster: bool,
) -> Result<Option<Credentials>, String> {
    if config.enabled == KubernetesEnabled::Off {
        return Ok(None);
    }
    if let Some(path) = &config.kubeconfig {
        return Ok(Some(Credentials::Kubeconfig(path.clone())));
    }
    // client-go's loading rules: the list's empty entries are skipped; an empty list is unset.
    let env_paths: Vec<PathBuf> = kubeconfig_env
        .map(|v| {
            std::env::split_paths(v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if !env_paths.is_empty() {
        return Ok(Some(Credentials::KubeconfigEnv(env_paths)));
    }
    if in_cluster {
        return Ok(Some(Credentials::InCluster));
    }
    match config.enabled {
        KubernetesEnabled::On => Err(format!(
            "kubernetes.enabled = \"on\" but no credentials: set kubernetes.kubeconfig or the \
             KUBECONFIG environment variable, or run in a pod with a service account token \
             (KUBERNETES_SERVICE_HOST and {SERVICE_ACCOUNT_TOKEN})"
        )),
        _ => Ok(None),
    }
}

impl Credentials {
    /// Where the credentials came from, for the log line that turns the client on.
    pub fn describe(&self) -> String {
        match self {
            Credentials::Kubeconfig(p) => format!("kubernetes.kubeconfig {}", p.display()),
            Credentials::KubeconfigEnv(ps) => {
                let list: Vec<String> = ps.iter().map(|p| p.display().to_string()).collect();
                format!("KUBECONFIG {}", list.join(":"))
            }
            Credentials::InCluster => "in-cluster service account".to_string(),
        }
    }
}

/// True when this process runs in a pod with a service account: the API server's address in the
/// environment and the token mounted.
pub fn in_cluster_available() -> bool {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    set("KUBERNETES_SERVICE_HOST")
        && set("KUBERNETES_SERVICE_PORT")
        && Path::new(SERVICE_ACCOUNT_TOKEN).is_file()
}

/// This node's name: `config`'s, else `env_node_name` (`NODE_NAME`), else `hostname`
/// (lowercased, as the kubelet does).
pub fn node_name(
    config: &KubernetesConfig,
    env_node_name: Option<String>,
    hostname: Option<String>,
) -> Result<String, String> {
    if let Some(n) = &config.node_name {
        return Ok(n.clone());
    }
    if let Some(n) = env_node_name.filter(|n| !n.is_empty()) {
        return if is_node_name(&n) {
            Ok(n)
        } else {
            Err(format!(
                "NODE_NAME={n:?} is not a node name; set kubernetes.node_name"
            ))
        };
    }
    let host = hostname
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .ok_or("no node name: set kubernetes.node_name or NODE_NAME (the hostname is unknown)")?;
    if is_node_name(&host) {
        Ok(host)
    } else {
        Err(format!(
            "the hostname {host:?} is not a node name; set kubernetes.node_name or NODE_NAME"
        ))
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok()
}

/// Builds the client (no request is made: an unreachable API server is not an error here).
pub async fn client(creds: &Credentials) -> anyhow::Result<Client> {
    client_reading(creds, READ_TIMEOUT).await
}

/// How long any request but a watch may wait for the server's next bytes.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The client of the watches (`crate::cluster::pod_directory`): the same as [`client`], but a
/// read may wait `longest_watch` (the longest `timeoutSeconds` a watch asks for) plus
/// [`crate::cluster::pod_directory::WATCH_MARGIN`], so that a watch on a quiet node is ended by
/// the server, never cut by the client ([`READ_TIMEOUT`] would end it after 30 s without an
/// event, and every node would relist its pods twice a minute).
pub async fn watch_client(creds: &Credentials, longest_watch: Duration) -> anyhow::Result<Client> {
    client_reading(
        creds,
        longest_watch + crate::cluster::pod_directory::WATCH_MARGIN,
    )
    .await
}

async fn client_reading(creds: &Credentials, read_timeout: Duration) -> anyhow::Result<Client> {
    client_as(creds, read_timeout, None).await
}

/// The client of evictions: [`client`], or with `[kubernetes] evict_as` resolved to the node,
/// one that asks the API server to act as `system:node:<node>` (the `Impersonate-User` header;
/// with constrained impersonation the API server lets a service account bound to a pod on that
/// node do so and sets the node's groups itself, `impersonate:associated-node`).
pub async fn eviction_client(creds: &Credentials, as_node: Option<&str>) -> anyhow::Result<Client> {
    client_as(
        creds,
        READ_TIMEOUT,
        as_node.map(|n| format!("system:node:{n}")),
    )
    .await
}

/// `[kubernetes] evict_as` resolved for `creds`: `Some(node)` to evict as the node, `None` as
/// topolet itself; an error for `"node"` without in-cluster credentials.
pub fn evict_as_node<'a>(
    evict_as: EvictAs,
    creds: &Credentials,
    node: &'a str,
) -> Result<Option<&'a str>, String> {
    match (evict_as, creds) {
        (EvictAs::Itself, _) => Ok(None),
        (EvictAs::Node | EvictAs::Auto, Credentials::InCluster) => Ok(Some(node)),
        (EvictAs::Auto, _) => Ok(None),
        (EvictAs::Node, other) => Err(format!(
            "kubernetes.evict_as = \"node\" needs the in-cluster service account (a token bound \
             to this node's pod names the node to act as), not {}; set evict_as = \"self\"",
            other.describe()
        )),
    }
}

async fn client_as(
    creds: &Credentials,
    read_timeout: Duration,
    impersonate: Option<String>,
) -> anyhow::Result<Client> {
    let mut config = match creds {
        Credentials::Kubeconfig(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).with_context(|| {
                format!("kubernetes.kubeconfig: cannot read {}", path.display())
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("kubernetes.kubeconfig: {}", path.display()))?
        }
        Credentials::KubeconfigEnv(paths) => {
            let mut merged: Option<kube::config::Kubeconfig> = None;
            for path in paths {
                let kc = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("KUBECONFIG: cannot read {}", path.display()))?;
                merged = Some(match merged {
                    None => kc,
                    Some(m) => m
                        .merge(kc)
                        .with_context(|| format!("KUBECONFIG: merging {}", path.display()))?,
                });
            }
            let kc = merged.context("KUBECONFIG names no file")?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .context("KUBECONFIG")?
        }
        Credentials::InCluster => {
            kube::Config::incluster().context("the in-cluster service account")?
        }
    };
    // Bounded: a hung API server holds the recorder task, never a container event.
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(read_timeout);
    config.write_timeout = Some(Duration::from_secs(30));
    // No built-in retry: kube's (up to 15 attempts on 429/503/504, back-off up to 1000 s) would
    // hold the eviction loop for minutes on a PodDisruptionBudget's 429, which means "try
    // another pod". Every user retries on its own terms (the recorder's back-off, the eviction
    // loop's next interval, the node status publisher's next tick).
    config.default_retry = false;
    config.auth_info.impersonate = impersonate;
    Client::try_from(config).context("building the Kubernetes client")
}

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

/// The client and this node's name when `config` (and the environment) enables the API
/// client; `Ok(None)`: off. Errors name the key at fault.
pub async fn connect(
    config: &KubernetesConfig,
) -> anyhow::Result<Option<(Client, String, Credentials)>> {
    let creds = credentials(
        config,
        std::env::var_os("KUBECONFIG").as_deref(),
        in_cluster_available(),
    )
    .map_err(anyhow::Error::msg)?;
    let Some(creds) = creds else {
        return Ok(None);
    };
    let node = node_name(config, std::env::var("NODE_NAME").ok(), hostname())
        .map_err(anyhow::Error::msg)?;
    let client = client(&creds).await?;
    Ok(Some((client, node, creds)))
}

/// The client as `topolet run` starts it.
pub struct Started {
    /// Where the NRI handlers (and the eviction loop) hand Events.
    pub sink: EventSink,
    /// The recorder task.
    pub recorder: tokio::task::JoinHandle<()>,
    /// The client, for the other users (eviction, node conditions).
    pub client: Client,
    /// The client of the pod watch ([`watch_client`]).
    pub watch_client: Client,
    /// The client of evictions ([`eviction_client`]): as the node, or [`Started::client`].
    pub eviction_client: Client,
    /// Evictions go out as this node (`[kubernetes] evict_as`).
    pub evicts_as_node: bool,
    /// This node's name.
    pub node: String,
}

/// The client when `config` (and the environment) enables it: the sink for the plugin, the
/// recorder task, the client and the node name. `Ok(None)`: off.
pub async fn start(
    config: &KubernetesConfig,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Option<Started>> {
    let Some((client, node, creds)) = connect(config).await? else {
        tracing::info!(
            enabled = ?config.enabled,
            "kubernetes API client off (disabled, or no credentials found: no \
             kubernetes.kubeconfig, no KUBECONFIG, no in-cluster service account): no Events"
        );
        return Ok(None);
    };
    tracing::info!(
        node = %node,
        credentials = %creds.describe(),
        "kubernetes API client on: Events on pods"
    );
    metrics.set_kube_client(true);
    let (sink, rx) = EventSink::channel(QUEUE, metrics.clone());
    let recorder = Recorder::new(client.clone(), node.clone(), metrics);
    // A watch asks for at most twice `watch_timeout_s` (`crate::cluster::pod_directory`).
    let watch_client = watch_client(&creds, 2 * config.watch_timeout()).await?;
    let as_node = evict_as_node(config.evict_as, &creds, &node).map_err(anyhow::Error::msg)?;
    let eviction_client = match as_node {
        Some(n) => eviction_client(&creds, Some(n)).await?,
        None => client.clone(),
    };
    tracing::info!(
        evict_as = %as_node.map_or_else(|| "topolet's own identity".to_string(), |n| format!("system:node:{n}")),
        "evictions through the Eviction API"
    );
    Ok(Some(Started {
        sink,
        recorder: tokio::spawn(recorder.run(rx)),
        client,
        watch_client,
        eviction_client,
        evicts_as_node: as_node.is_some(),
        node,
    }))
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

struct Recorder {
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
    fn new(client: Client, node: String, metrics: Arc<Metrics>) -> Recorder {
        Recorder {
            client,
            node,
            metrics,
            correlator: Correlator::new(),
            logged: HashMap::new(),
        }
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Message>) {
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

    fn cfg(enabled: KubernetesEnabled, kubeconfig: Option<&str>) -> KubernetesConfig {
        KubernetesConfig {
            enabled,
            kubeconfig: kubeconfig.map(PathBuf::from),
            ..KubernetesConfig::default()
        }
    }

    #[test]
    fn credentials_follow_enabled() {
        use KubernetesEnabled::*;
        let kc = Some(Credentials::Kubeconfig("/k".into()));
        assert_eq!(
            credentials(&cfg(Auto, None), None, false),
            Ok(None),
            "off as today"
        );
        assert_eq!(
            credentials(&cfg(Auto, None), None, true),
            Ok(Some(Credentials::InCluster))
        );
        assert_eq!(
            credentials(&cfg(Auto, Some("/k")), None, true),
            Ok(kc.clone())
        );
        assert_eq!(credentials(&cfg(On, Some("/k")), None, false), Ok(kc));
        assert_eq!(credentials(&cfg(Off, Some("/k")), None, true), Ok(None));
        let err = credentials(&cfg(On, None), None, false).unwrap_err();
        assert!(err.contains("kubernetes.enabled"), "{err}");
        assert!(err.contains("KUBECONFIG"), "{err}");
    }

    #[test]
    fn credentials_honour_kubeconfig_in_the_usual_order() {
        use std::ffi::OsStr;
        use KubernetesEnabled::*;
        let env = Some(OsStr::new("/a:/b"));
        let from_env = Ok(Some(Credentials::KubeconfigEnv(vec![
            "/a".into(),
            "/b".into(),
        ])));
        // The config key first, then KUBECONFIG, then the in-cluster account.
        assert_eq!(
            credentials(&cfg(Auto, Some("/k")), env, true),
            Ok(Some(Credentials::Kubeconfig("/k".into())))
        );
        assert_eq!(credentials(&cfg(Auto, None), env, true), from_env);
        assert_eq!(credentials(&cfg(Auto, None), env, false), from_env);
        assert_eq!(credentials(&cfg(On, None), env, false), from_env);
        assert_eq!(credentials(&cfg(Off, None), env, true), Ok(None));
        // Empty entries are skipped; an empty variable is unset.
        assert_eq!(
            credentials(&cfg(Auto, None), Some(OsStr::new("::/c:")), false),
            Ok(Some(Credentials::KubeconfigEnv(vec!["/c".into()])))
        );
        assert_eq!(
            credentials(&cfg(Auto, None), Some(OsStr::new("")), true),
            Ok(Some(Credentials::InCluster))
        );
        assert_eq!(
            credentials(&cfg(Auto, None), Some(OsStr::new("/a")), false)
                .map(|c| c.map(|c| c.describe())),
            Ok(Some("KUBECONFIG /a".to_string()))
        );
    }

    #[test]
    fn evict_as_resolves_to_the_node_only_with_a_pod_s_token() {
        let kc = Credentials::Kubeconfig("/etc/topolet/kubeconfig".into());
        let pod = Credentials::InCluster;
        assert_eq!(evict_as_node(EvictAs::Auto, &pod, "n1"), Ok(Some("n1")));
        assert_eq!(evict_as_node(EvictAs::Node, &pod, "n1"), Ok(Some("n1")));
        assert_eq!(evict_as_node(EvictAs::Itself, &pod, "n1"), Ok(None));
        assert_eq!(evict_as_node(EvictAs::Auto, &kc, "n1"), Ok(None));
        let e = evict_as_node(EvictAs::Node, &kc, "n1").unwrap_err();
        assert!(
            e.starts_with("kubernetes.evict_as = \"node\" needs the in-cluster service account")
                && e.contains("kubernetes.kubeconfig /etc/topolet/kubeconfig"),
            "{e}"
        );
    }

    #[test]
    fn node_name_from_config_env_or_hostname() {
        let mut c = cfg(KubernetesEnabled::Auto, None);
        let h = || Some("Node-A\n".to_string());
        assert_eq!(node_name(&c, None, h()), Ok("node-a".into()));
        assert_eq!(node_name(&c, Some("n1".into()), h()), Ok("n1".into()));
        assert_eq!(node_name(&c, Some(String::new()), h()), Ok("node-a".into()));
        assert!(node_name(&c, Some("Bad_Name".into()), h())
            .unwrap_err()
            .contains("NODE_NAME"));
        assert!(node_name(&c, None, Some("under_score".into())).is_err());
        assert!(node_name(&c, None, None).is_err());
        c.node_name = Some("n2".into());
        assert_eq!(node_name(&c, Some("n1".into()), h()), Ok("n2".into()));
    }

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
