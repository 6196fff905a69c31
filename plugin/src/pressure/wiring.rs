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
use topolet_core::eviction::{EvictionAction, EvictionConfig};

/// The CRI socket path of an endpoint (`unix:///run/x.sock`, `unix:/run/x.sock` or a path).
pub fn cri_socket_path(endpoint: &str) -> std::path::PathBuf {
    let p = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    std::path::PathBuf::from(p)
}

/// The evictor and CRI client `config` asks for; `kube` is the Kubernetes API client when it
/// is on (then `api` is the default action). `action = "api"` without it is an error naming the
/// key.
/// `kube`: the client of this node's pods (`crate::cluster::client::node_client`: the node's
/// identity with `[kubernetes] evict_as`, else topolet's) and this node's name.
pub fn build_evictor(
    config: &EvictionConfig,
    kube: Option<(&kube::Client, &str)>,
) -> anyhow::Result<(Arc<dyn Evictor>, Option<CriClient>)> {
    let cri = match CriClient::new(
        &cri_socket_path(&config.cri_endpoint),
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
        (EvictionAction::Api, _, None) => anyhow::bail!(
            "eviction.action = \"api\" needs the Kubernetes API client, which is off: set \
             [kubernetes] kubeconfig (or run in a pod with a service account), or choose \
             action \"cri\" or \"dry-run\""
        ),
        (EvictionAction::DryRun, _, _) => Arc::new(crate::pressure::actions::DryRun),
    };
    Ok((evictor, cri))
}

impl EvictionLoop {
    /// The loop of a node: signals from `/`, nodefs/imagefs at their default paths, pods from
    /// `pods` (the NRI plugin), the action of `config`; with the Kubernetes client `kube` on,
    /// pod facts from the API and `Evicted` Events. Fails only for `action = "api"` without the
    /// client.
    pub fn for_node(
        config: EvictionConfig,
        pods: Arc<dyn PodSource>,
        kube: Option<&crate::cluster::client::Started>,
    ) -> anyhow::Result<EvictionLoop> {
        let (evictor, cri) =
            build_evictor(&config, kube.map(|k| (&k.node_client, k.node.as_str())))?;
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
                imagefs: config.imagefs_path.clone(),
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
