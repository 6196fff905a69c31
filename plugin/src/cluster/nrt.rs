//! This node's NodeResourceTopology object (topology.node.k8s.io/v1alpha2, cluster-scoped, named
//! after the node): one task owns its writes, off the NRI event path.
//!
//! The handlers only signal that the books changed ([`NrtSource::books_changed`], a
//! `Notify`: never blocks, coalesces). The task waits [`DEBOUNCE`] after a signal (later
//! signals within it fold in: the latest state wins), asks for the content
//! ([`NrtSource::nrt_content`], `topolet_core::report::nrt` from the status report and the
//! books), and writes it when it differs from what it last wrote (or, before its first write,
//! from what the object held when it started: a restarted topolet whose books and amounts are
//! its predecessor's writes nothing, and keeps the predecessor's reclaimed zones while its
//! usage window fills, `topolet_core::report::nrt::carry_reclaimed`):
//! `replace` with the resourceVersion it holds, after a `get` when it holds none (at start, or
//! after a conflict), `create` when there is no object. Failures are retried with kube's
//! default back-off (800 ms doubling to 30 s), recomputing the content each time, until a
//! write succeeds; each is counted (`topolet_kube_api_errors_total{operation="nrt_…"}`) and
//! logged at most once a minute per operation and code. Nothing is written while NRI is not
//! synchronized (the books are incomplete then); the synchronize signals again.
//!
//! The object is a hand-written typed struct implementing `kube::Resource` rather than kube's
//! `CustomResource` derive: the CRD has no `spec`/`status` (its fields sit at the top level,
//! which the derive cannot express), and the derive would add schemars for a schema that is
//! shipped as a manifest anyway (`deploy/kubernetes/noderesourcetopology-crd.yaml`). A
//! `DynamicObject` would lose the typed fields the tests and `topolet_core::report::nrt` share.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use kube::Client;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::cluster::at_start::AtStart;
use crate::cluster::start_jitter::StartGate;
use crate::telemetry::metrics::Metrics;
use topolet_core::report::nrt::NrtContent;

/// How long after a change the object is written (later changes within it fold in).
pub const DEBOUNCE: Duration = Duration::from_secs(1);
pub const GROUP: &str = "topology.node.k8s.io";
pub const VERSION: &str = "v1alpha2";
pub const KIND: &str = "NodeResourceTopology";
pub const PLURAL: &str = "noderesourcetopologies";
/// Conflicting writes (someone else updated the object) re-read and retried at once, this many
/// times, before the back-off applies.
const CONFLICT_RETRIES: usize = 3;
/// The same API error is logged at most this often (every one is counted).
const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The object: metadata plus [`NrtContent`]'s top-level fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeResourceTopology {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub content: NrtContent,
}

impl NodeResourceTopology {
    /// The object of node `node` with `content` (no resourceVersion).
    pub fn new(node: &str, content: NrtContent) -> NodeResourceTopology {
        NodeResourceTopology {
            api_version: format!("{GROUP}/{VERSION}"),
            kind: KIND.into(),
            metadata: ObjectMeta {
                name: Some(node.to_string()),
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_string(),
                        "topolet".to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            content,
        }
    }
}

impl kube::Resource for NodeResourceTopology {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What the publisher needs of the plugin: owned here, implemented by the NRI handlers
/// (`crate::nri::handlers::TopoletPlugin`), so that the cluster folder does not depend on them.
pub trait NrtSource: Send + Sync {
    /// The content the plugin would publish now; `previous`: the object as it was when this
    /// topolet started, whose reclaimed zones are kept while its own usage window fills
    /// (`topolet_core::report::nrt::carry_reclaimed`).
    fn nrt_content(&self, previous: Option<&NrtContent>) -> NrtContent;
    /// Signalled when the placement's books may have changed.
    fn books_changed(&self) -> Arc<Notify>;
    /// NRI is synchronized: the books are complete (nothing is written before).
    fn synchronized(&self) -> bool;
    /// Where the writes and the API errors are counted.
    fn metrics(&self) -> &Arc<Metrics>;
}

/// Starts the publisher on the plugin's API client (`crate::cluster::client::start`) for `node`;
/// it sends nothing before `gate` opens (`crate::cluster::start_jitter`). What its first `get`
/// finds goes to `at_start` too (the zones' reclaimed amounts a restarted topolet finds there,
/// `crate::cluster::at_start`).
pub fn start(
    client: kube::Client,
    node: String,
    plugin: Arc<dyn NrtSource>,
    gate: StartGate,
    at_start: AtStart,
) -> tokio::task::JoinHandle<()> {
    tracing::info!(node = %node, "NodeResourceTopology publisher on");
    tokio::spawn(Publisher::new(client, node, plugin, at_start).run(gate))
}

/// A write that failed: the operation (metric label) and the error.
struct Failed {
    op: &'static str,
    error: kube::Error,
}

fn failed(op: &'static str) -> impl FnOnce(kube::Error) -> Failed {
    move |error| Failed { op, error }
}

fn code(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.code.to_string(),
        _ => "connection".into(),
    }
}

struct Publisher {
    api: Api<NodeResourceTopology>,
    node: String,
    plugin: Arc<dyn NrtSource>,
    /// What the object holds as far as this topolet knows: what it last wrote, or what it
    /// read at start (`None`: nothing yet, or unknown).
    written: Option<NrtContent>,
    /// The object's resourceVersion after our last write or read.
    resource_version: Option<String>,
    /// The object as this topolet found it (`None`: not read yet; `Some(None)`: there was
    /// none): its content is not written again, and its reclaimed zones are kept while the
    /// usage window fills ([`content`]).
    at_start: Option<Option<NrtContent>>,
    logged: HashMap<(&'static str, String), Instant>,
    /// Where the first read goes for the suppress loop's damping.
    found: AtStart,
}

impl Publisher {
    fn new(
        client: Client,
        node: String,
        plugin: Arc<dyn NrtSource>,
        at_start: AtStart,
    ) -> Publisher {
        Publisher {
            api: Api::all(client),
            node,
            plugin,
            written: None,
            resource_version: None,
            at_start: None,
            logged: HashMap::new(),
            found: at_start,
        }
    }

    async fn run(mut self, gate: StartGate) {
        let changed = self.plugin.books_changed();
        // A change signalled meanwhile is kept (`Notify::notify_one` stores a permit).
        gate.wait().await;
        let mut backoff = DefaultBackoff::default();
        loop {
            changed.notified().await;
            tokio::time::sleep(DEBOUNCE).await;
            backoff.reset();
            loop {
                if !self.plugin.synchronized() {
                    break;
                }
                if self.at_start.is_none() {
                    // The first read (a `get` the first write needed anyway): what the
                    // instance before this one left.
                    match self.api.get_opt(&self.node).await {
                        Ok(current) => {
                            self.found.nrt_read(
                                current.as_ref().map(|o| &o.content),
                                current.as_ref().map(|o| &o.metadata),
                                std::time::SystemTime::now(),
                            );
                            let current = current.map(|o| {
                                self.resource_version = o.metadata.resource_version;
                                o.content
                            });
                            self.written.clone_from(&current);
                            self.at_start = Some(current);
                        }
                        Err(e) => {
                            let delay = backoff.next().unwrap_or(Duration::from_secs(30));
                            self.failure(&failed("nrt_get")(e), delay);
                            tokio::time::sleep(delay).await;
                            continue;
                        }
                    }
                }
                let previous = self.at_start.as_ref().and_then(Option::as_ref);
                let content = self.plugin.nrt_content(previous);
                if self.written.as_ref() == Some(&content) {
                    break;
                }
                match self.write(&content).await {
                    Ok(result) => {
                        self.plugin.metrics().nrt_write(result);
                        tracing::debug!(node = %self.node, result, "NodeResourceTopology written");
                        self.written = Some(content);
                        break;
                    }
                    Err(f) => {
                        let delay = backoff.next().unwrap_or(Duration::from_secs(30));
                        self.failure(&f, delay);
                        tokio::time::sleep(delay).await;
                    }
                }
            }
        }
    }

    /// One write of `content`: `created` or `updated`.
    async fn write(&mut self, content: &NrtContent) -> Result<&'static str, Failed> {
        let mut obj = NodeResourceTopology::new(&self.node, content.clone());
        let mut attempt = 0;
        loop {
            attempt += 1;
            if self.resource_version.is_none() {
                match self
                    .api
                    .get_opt(&self.node)
                    .await
                    .map_err(failed("nrt_get"))?
                {
                    Some(current) => self.resource_version = current.metadata.resource_version,
                    None => match self.api.create(&PostParams::default(), &obj).await {
                        Ok(created) => {
                            self.resource_version = created.metadata.resource_version;
                            return Ok("created");
                        }
                        // Created meanwhile: read it and update.
                        Err(kube::Error::Api(s)) if s.code == 409 && attempt < CONFLICT_RETRIES => {
                            self.plugin.metrics().kube_api_error("nrt_create", "409");
                            continue;
                        }
                        Err(e) => return Err(failed("nrt_create")(e)),
                    },
                }
            }
            obj.metadata.resource_version = self.resource_version.clone();
            match self
                .api
                .replace(&self.node, &PostParams::default(), &obj)
                .await
            {
                Ok(o) => {
                    self.resource_version = o.metadata.resource_version;
                    return Ok("updated");
                }
                // Changed (409) or deleted (404) by someone else: read again.
                Err(kube::Error::Api(s))
                    if (s.code == 409 || s.code == 404) && attempt < CONFLICT_RETRIES =>
                {
                    self.plugin
                        .metrics()
                        .kube_api_error("nrt_update", &s.code.to_string());
                    self.resource_version = None;
                }
                Err(e) => {
                    self.resource_version = None;
                    return Err(failed("nrt_update")(e));
                }
            }
        }
    }

    fn failure(&mut self, f: &Failed, retry_in: Duration) {
        let code = code(&f.error);
        self.plugin.metrics().kube_api_error(f.op, &code);
        let now = Instant::now();
        let key = (f.op, code.clone());
        if self
            .logged
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < ERROR_LOG_INTERVAL)
        {
            return;
        }
        self.logged.insert(key, now);
        let hint = match code.as_str() {
            "404" => " (is the CRD installed? deploy/kubernetes/noderesourcetopology-crd.yaml)",
            "403" => " (check topolet's RBAC: noderesourcetopologies get, create, update)",
            _ => "",
        };
        tracing::warn!(operation = f.op, code = %code, error = %f.error, retry_in = ?retry_in, "kubernetes API: NodeResourceTopology not written{hint}; retrying");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn the_object_is_the_crds_shape() {
        let content = NrtContent {
            topology_policies: vec!["None".into()],
            zones: vec![],
            attributes: vec![],
        };
        let o = NodeResourceTopology::new("n1", content);
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["apiVersion"], "topology.node.k8s.io/v1alpha2");
        assert_eq!(v["kind"], "NodeResourceTopology");
        assert_eq!(v["metadata"]["name"], "n1");
        assert_eq!(v["topologyPolicies"], serde_json::json!(["None"]));
        assert_eq!(
            NodeResourceTopology::url_path(&(), None),
            "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
        );
        let back: NodeResourceTopology = serde_json::from_value(v).unwrap();
        assert_eq!(back, o);
    }
}
