//! How the eviction loop is built: [`EvictionLoop::for_node`] (the evictor and CRI client the
//! configuration asks for, [`build_evictor`] over [`cri_socket_path`]; pod facts from the API,
//! node-level reclaim, Events) and the `with_*` options (metrics, node status, the status report,
//! other pod facts).

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::node_status::ReportSender;
use crate::cluster::pod_facts::PodFacts;
use crate::pressure::actions::Evictor;
use crate::pressure::cri::CriClient;
use crate::pressure::eviction::{EvictionLoop, EvictionStats, PodSource};
use crate::pressure::reclaim::NodeReclaim;
use crate::pressure::signals::SignalSources;
use crate::pressure::PressureReport;
use crate::telemetry::metrics::Metrics;
use topolet_core::eviction::{EvictionAction, EvictionConfig, Runtime};

/// What the eviction loop uses of the Kubernetes API client ([`crate::cluster::client::Started`]):
/// the client of this node's pods, the node's name, the Event sink.
#[derive(Clone)]
pub struct NodeApi {
    pub node_client: kube::Client,
    pub node: String,
    pub sink: crate::cluster::recorder::EventSink,
}

impl NodeApi {
    pub fn of(k: &crate::cluster::client::Started) -> NodeApi {
        NodeApi {
            node_client: k.node_client.clone(),
            node: k.node.clone(),
            sink: k.sink.clone(),
        }
    }
}

/// The CRI socket path of an endpoint (`unix:///run/x.sock`, `unix:/run/x.sock` or a path).
pub fn cri_socket_path(endpoint: &str) -> std::path::PathBuf {
    let p = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    std::path::PathBuf::from(p)
}

/// `action = "api"` needs the Kubernetes API client: without it (`kube_on` false) an error
/// naming the key. Checked at start, before the runtime is known.
pub fn check_action(config: &EvictionConfig, kube_on: bool) -> anyhow::Result<()> {
    if config.action == Some(EvictionAction::Api) && !kube_on {
        anyhow::bail!(
            "eviction.action = \"api\" needs the Kubernetes API client, which is off: set \
             [kubernetes] kubeconfig (or run in a pod with a service account), or choose \
             action \"cri\" or \"dry-run\""
        );
    }
    Ok(())
}

/// Without an NRI connection (`topolet conditions`): CRI-O when its default CRI socket exists
/// under `root` and containerd's does not, else containerd.
pub fn runtime_by_socket(root: &std::path::Path) -> Runtime {
    let exists = |endpoint: &str| {
        let path = cri_socket_path(endpoint);
        root.join(path.strip_prefix("/").unwrap_or(&path)).exists()
    };
    if exists(Runtime::CriO.cri_endpoint()) && !exists(Runtime::Containerd.cri_endpoint()) {
        Runtime::CriO
    } else {
        Runtime::Containerd
    }
}

/// The runtime NRI's Configure named, once the stub has one (`status`: the stub's connection
/// status); `None` when the stub ends first.
pub async fn runtime_of(
    mut status: tokio::sync::watch::Receiver<topolet_nri::stub::ConnectionStatus>,
) -> Option<Runtime> {
    let seen = status
        .wait_for(|s| s.runtime.is_some())
        .await
        .ok()?
        .runtime
        .as_ref()
        .map(|r| Runtime::from_nri_name(&r.name));
    seen
}

/// The evictor and CRI client `config` asks for, the CRI endpoint not set taken from
/// `runtime`'s; `kube` is the Kubernetes API client when it is on (then `api` is the default
/// action). `action = "api"` without it is an error naming the key ([`check_action`]).
/// `kube`: the client of this node's pods (`crate::cluster::client::node_client`: the node's
/// identity with `[kubernetes] evict_as`, else topolet's) and this node's name.
pub fn build_evictor(
    config: &EvictionConfig,
    runtime: Runtime,
    kube: Option<(&kube::Client, &str)>,
) -> anyhow::Result<(Arc<dyn Evictor>, Option<CriClient>)> {
    check_action(config, kube.is_some())?;
    let cri = match CriClient::new(
        &cri_socket_path(&config.cri_endpoint_for(runtime)),
        Duration::from_secs(10),
    ) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::error!(error = %e, "eviction: CRI client not available");
            None
        }
    };
    let evictor: Arc<dyn Evictor> = match (config.action_for(kube.is_some()), &cri, kube) {
        (EvictionAction::Cri, Some(c), _) => {
            Arc::new(crate::pressure::actions::CriEvictor::new(c.clone()))
        }
        (EvictionAction::Cri, None, _) => {
            tracing::error!(
                "eviction: action \"cri\" without a CRI client; falling back to dry-run"
            );
            Arc::new(crate::pressure::actions::DryRun)
        }
        (EvictionAction::Api, _, Some((client, node))) => Arc::new(
            crate::pressure::actions::ApiEvictor::new(client.clone(), node.to_string()),
        ),
        (EvictionAction::Api, _, None) => {
            anyhow::bail!("eviction.action = \"api\" without the Kubernetes API client")
        }
        (EvictionAction::DryRun, _, _) => Arc::new(crate::pressure::actions::DryRun),
    };
    Ok((evictor, cri))
}

impl EvictionLoop {
    /// The loop of a node beside `runtime`: signals from `/`, nodefs/imagefs at their
    /// configured paths (imagefs, when not set, `runtime`'s image store), pods from `pods` (the
    /// NRI plugin), the action of `config` (its CRI endpoint, when not set, `runtime`'s); with
    /// the Kubernetes client `kube` on, pod facts from the API and `Evicted` Events. Fails only
    /// for `action = "api"` without the client.
    pub fn for_node(
        config: EvictionConfig,
        runtime: Runtime,
        pods: Arc<dyn PodSource>,
        kube: Option<&NodeApi>,
    ) -> anyhow::Result<EvictionLoop> {
        let config = config.for_runtime(runtime);
        let (evictor, cri) = build_evictor(
            &config,
            runtime,
            kube.map(|k| (&k.node_client, k.node.as_str())),
        )?;
        let facts = kube.map(|k| {
            Arc::new(crate::cluster::pod_facts::ListPodFacts::new(
                k.node_client.clone(),
                k.node.clone(),
            )) as Arc<dyn PodFacts>
        });
        let dry_run = evictor.name() == crate::pressure::actions::DryRun.name();
        let reclaim = match (&cri, config.reclaim.enabled) {
            (Some(c), true) => Some(Arc::new(NodeReclaim::new(
                c.clone(),
                config.reclaim.clone(),
                dry_run,
            ))),
            _ => None,
        };
        Ok(EvictionLoop {
            reclaim,
            node_name: kube.map(|k| k.node.clone()),
            sources: SignalSources {
                root: std::path::PathBuf::from("/"),
                nodefs: config.nodefs_path.clone(),
                imagefs: config.imagefs_path_for(runtime),
            },
            config,
            pods,
            evictor,
            cri,
            stats: Arc::new(EvictionStats::default()),
            metrics: None,
            facts,
            events: kube.map(|k| k.sink.clone()),
            node_status: None,
            report: None,
        })
    }

    /// Publishes each interval's signals, thresholds, conditions and PSI to `report`.
    pub fn with_report(mut self, report: Arc<PressureReport>) -> EvictionLoop {
        self.report = Some(report);
        self
    }

    /// Reports each interval's node conditions to `tx` (`crate::cluster::node_status`).
    pub fn with_node_status(mut self, tx: ReportSender) -> EvictionLoop {
        self.node_status = Some(tx);
        self
    }

    /// Pod facts from `facts` instead (with the API client on: the pod watch's store,
    /// `crate::cluster::pod_directory::WatchedPodFacts`); wraps the list it would make.
    pub fn wrap_pod_facts(&mut self, facts: impl FnOnce(Arc<dyn PodFacts>) -> Arc<dyn PodFacts>) {
        self.facts = self.facts.take().map(facts);
    }

    /// Exports the loop's observations and actions through `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> EvictionLoop {
        self.metrics = Some(metrics);
        self
    }
}
