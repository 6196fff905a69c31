//! Eviction actions: how a pod the core chose is taken off the node.
//!
//! One interface, [`Evictor`], with one method. The pod is described by everything any action
//! needs ([`EvictPod`]: sandbox id for the runtime, namespace/name/uid for the API server), and
//! the decision's context (signal, reason) travels with it. Node conditions are published beside
//! it (`crate::cluster::node_status`), not through this trait.
//!
//! - [`DryRun`]: logs the decision and counts it; touches nothing.
//! - [`CriEvictor`]: ListContainers of the sandbox, StopContainer (timeout = grace period) for
//!   each one not yet exited, then StopPodSandbox. The sandbox is stopped, not removed: like the
//!   kubelet's eviction, the pod is left `NotReady` with exited containers for inspection. On a
//!   node with a kubelet this is not an eviction: the kubelet sees a dead sandbox and starts the
//!   pod again on the same node. It is for nodes without an API server.
//! - [`ApiEvictor`]: a policy/v1 Eviction (`pods/eviction` create) with `gracePeriodSeconds`
//!   and the pod's uid as precondition. The API server checks the pod's PodDisruptionBudgets,
//!   sets the `DisruptionTarget` condition and deletes the pod; the kubelet stops it and its
//!   controller replaces it, on whichever node the scheduler picks. A budget that allows no
//!   disruption now answers 429: [`Evicted::Refused`], and the loop moves on to its next
//!   candidate. After a success the pod is read back (a `list` by name among this node's pods,
//!   the one list the Node authorizer serves the node) to confirm it is terminating or gone.

use std::time::Duration;

use async_trait::async_trait;

use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Preconditions};

use crate::pressure::cri::{ContainerState, CriClient, CriError};

/// A pod to evict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictPod {
    /// The runtime's pod sandbox id.
    pub sandbox_id: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The signal the eviction reclaims, e.g. `memory.available`.
    pub signal: String,
    /// Why this pod (the kubelet's eviction message), for logs and events.
    pub reason: String,
}

impl EvictPod {
    /// `namespace/name`.
    pub fn pod_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What an action did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evicted {
    /// Nothing was touched (dry run).
    DryRun,
    /// The pod's containers and sandbox were stopped.
    Stopped { containers: usize },
    /// The pod was already gone (from the runtime, or from the API server).
    AlreadyGone,
    /// The API server accepted the eviction: the pod is terminating (`disruption_target`: its
    /// `DisruptionTarget` condition was seen) or already deleted (`gone`).
    Evicting { disruption_target: bool, gone: bool },
    /// The API server refused the eviction now (429): a PodDisruptionBudget allows no
    /// disruption. Try another pod, or this one at a later interval.
    Refused { message: String },
}

/// An eviction that failed.
#[derive(Debug, thiserror::Error)]
pub enum EvictError {
    #[error("evicting pod {pod}: {source}")]
    Cri {
        pod: String,
        #[source]
        source: CriError,
    },
    #[error("evicting pod {pod} through the API: no answer within {after:?}")]
    Timeout { pod: String, after: Duration },
    #[error("evicting pod {pod} through the API: {source}")]
    Api {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

/// How a chosen pod is evicted.
#[async_trait]
pub trait Evictor: Send + Sync {
    /// The action's name as configured (`dry-run`, `cri`, `api`).
    fn name(&self) -> &'static str;

    /// Evicts `pod`, giving its containers `grace` before they are killed.
    async fn evict(&self, pod: &EvictPod, grace: Duration) -> Result<Evicted, EvictError>;
}

/// `action = "dry-run"`.
#[derive(Debug, Default)]
pub struct DryRun;

#[async_trait]
impl Evictor for DryRun {
    fn name(&self) -> &'static str {
        "dry-run"
    }

    async fn evict(&self, pod: &EvictPod, grace: Duration) -> Result<Evicted, EvictError> {
        tracing::warn!(
            pod = %pod.pod_ref(),
            uid = %pod.uid,
            signal = %pod.signal,
            grace_period_s = grace.as_secs(),
            reason = %pod.reason,
            "dry-run: would evict pod"
        );
        Ok(Evicted::DryRun)
    }
}

/// `action = "cri"`.
pub struct CriEvictor {
    client: CriClient,
}

impl CriEvictor {
    pub fn new(client: CriClient) -> CriEvictor {
        CriEvictor { client }
    }
}

#[async_trait]
impl Evictor for CriEvictor {
    fn name(&self) -> &'static str {
        "cri"
    }

    async fn evict(&self, pod: &EvictPod, grace: Duration) -> Result<Evicted, EvictError> {
        let fail = |source: CriError| EvictError::Cri {
            pod: pod.pod_ref(),
            source,
        };
        let containers = self
            .client
            .list_pod_containers(&pod.sandbox_id)
            .await
            .map_err(fail)?;
        let mut stopped = 0;
        for c in containers
            .iter()
            .filter(|c| c.state() != ContainerState::ContainerExited)
        {
            match self.client.stop_container(&c.id, grace).await {
                Ok(()) => stopped += 1,
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(fail(e)),
            }
        }
        match self.client.stop_pod_sandbox(&pod.sandbox_id).await {
            Ok(()) => Ok(Evicted::Stopped {
                containers: stopped,
            }),
            Err(e) if e.is_not_found() && stopped == 0 => Ok(Evicted::AlreadyGone),
            Err(e) if e.is_not_found() => Ok(Evicted::Stopped {
                containers: stopped,
            }),
            Err(e) => Err(fail(e)),
        }
    }
}

/// Longest wait for one API request of an eviction (the eviction loop waits on it).
pub const API_TIMEOUT: Duration = Duration::from_secs(15);

/// `action = "api"`.
pub struct ApiEvictor {
    /// Posts the Eviction and reads the pod back: topolet's own identity, or the node's
    /// (`[kubernetes] evict_as`; `crate::cluster::client::node_client`).
    client: kube::Client,
    /// This node's name: the read-back lists by `spec.nodeName` too, the one list the Node
    /// authorizer serves a node.
    node: String,
}

impl ApiEvictor {
    /// Evicts the pods of `node` and reads them back through `client`.
    pub fn new(client: kube::Client, node: String) -> ApiEvictor {
        ApiEvictor { client, node }
    }
}

/// The read-back's field selector: the pod by name, among this node's pods.
pub fn read_back_fields(pod: &EvictPod, node: &str) -> String {
    format!("metadata.name={},spec.nodeName={node}", pod.name)
}

/// The Eviction's options: `grace` (whole seconds, at least 1 unless zero was asked) and the
/// uid precondition, so that a new pod of the same name is never evicted by mistake.
pub fn eviction_params(pod: &EvictPod, grace: Duration) -> EvictParams {
    EvictParams {
        delete_options: Some(DeleteParams {
            grace_period_seconds: Some(u32::try_from(grace.as_secs()).unwrap_or(u32::MAX)),
            preconditions: Some(Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        }),
        post_options: Default::default(),
    }
}

/// The pod's `DisruptionTarget` condition is `True`.
pub fn has_disruption_target(pod: &ApiPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        })
}

#[async_trait]
impl Evictor for ApiEvictor {
    fn name(&self) -> &'static str {
        "api"
    }

    async fn evict(&self, pod: &EvictPod, grace: Duration) -> Result<Evicted, EvictError> {
        let api: Api<ApiPod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params = eviction_params(pod, grace);
        let request = api.evict(&pod.name, &params);
        let answer = tokio::time::timeout(API_TIMEOUT, request)
            .await
            .map_err(|_| EvictError::Timeout {
                pod: pod.pod_ref(),
                after: API_TIMEOUT,
            })?;
        match answer {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 429 => {
                return Ok(Evicted::Refused { message: s.message });
            }
            // Gone, or a different pod of that name now (the uid precondition failed).
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                return Ok(Evicted::AlreadyGone)
            }
            Err(source) => {
                return Err(EvictError::Api {
                    pod: pod.pod_ref(),
                    source,
                })
            }
        }
        // Read it back: terminating (deletionTimestamp, DisruptionTarget) or already gone.
        let lp = ListParams::default().fields(&read_back_fields(pod, &self.node));
        match tokio::time::timeout(API_TIMEOUT, api.list(&lp)).await {
            Ok(Ok(list)) => {
                let same = list
                    .items
                    .iter()
                    .find(|p| p.metadata.uid.as_deref() == Some(pod.uid.as_str()));
                Ok(match same {
                    None => Evicted::Evicting {
                        disruption_target: false,
                        gone: true,
                    },
                    Some(p) => Evicted::Evicting {
                        disruption_target: has_disruption_target(p),
                        gone: false,
                    },
                })
            }
            Ok(Err(e)) => {
                tracing::warn!(pod = %pod.pod_ref(), error = %e, "evicted pod not read back");
                Ok(Evicted::Evicting {
                    disruption_target: false,
                    gone: false,
                })
            }
            Err(_) => {
                tracing::warn!(pod = %pod.pod_ref(), "evicted pod not read back (timeout)");
                Ok(Evicted::Evicting {
                    disruption_target: false,
                    gone: false,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn pod() -> EvictPod {
        EvictPod {
            sandbox_id: "sb".into(),
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            signal: "pid.available".into(),
            reason: "test".into(),
        }
    }

    #[tokio::test]
    async fn dry_run_touches_nothing() {
        let r = DryRun.evict(&pod(), Duration::from_secs(30)).await.unwrap();
        assert_eq!(r, Evicted::DryRun);
    }

    #[test]
    fn eviction_options_carry_grace_and_uid() {
        let p = eviction_params(&pod(), Duration::from_secs(1));
        let d = p.delete_options.unwrap();
        assert_eq!(d.grace_period_seconds, Some(1));
        assert_eq!(d.preconditions.unwrap().uid.as_deref(), Some("u"));
    }

    #[test]
    fn the_read_back_names_the_pod_and_this_node() {
        assert_eq!(
            read_back_fields(&pod(), "n1"),
            "metadata.name=p,spec.nodeName=n1"
        );
    }

    #[tokio::test]
    async fn cri_errors_name_the_pod_and_endpoint() {
        let client =
            CriClient::new(Path::new("/nonexistent/cri.sock"), Duration::from_secs(1)).unwrap();
        let e = CriEvictor::new(client)
            .evict(&pod(), Duration::ZERO)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ns/p") && e.contains("/nonexistent/cri.sock"),
            "{e}"
        );
    }
}
