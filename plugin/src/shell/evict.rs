//! Eviction actions: how a pod the core chose is taken off the node.
//!
//! One interface, [`Evictor`], with one method. The pod is described by everything any action
//! needs ([`EvictPod`]: sandbox id for the runtime, namespace/name/uid for the API server), and
//! the decision's context (signal, reason) travels with it, so a future `kubernetes` action
//! (POST `pods/eviction` with `gracePeriodSeconds`, then let the kubelet's own flow stop the pod)
//! is one more implementation; node conditions would be published beside it by whatever
//! publishes `topolet conditions` today, not through this trait.
//!
//! - [`DryRun`]: logs the decision and counts it; touches nothing.
//! - [`CriEvictor`]: ListContainers of the sandbox, StopContainer (timeout = grace period) for
//!   each one not yet exited, then StopPodSandbox. The sandbox is stopped, not removed: like the
//!   kubelet's eviction, the pod is left `NotReady` with exited containers for inspection (and
//!   for the kubelet, if one runs, to see and report).

use std::time::Duration;

use async_trait::async_trait;

use crate::shell::cri::{ContainerState, CriClient, CriError};

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
    /// The pod was already gone from the runtime.
    AlreadyGone,
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
}

/// How a chosen pod is evicted.
#[async_trait]
pub trait Evictor: Send + Sync {
    /// The action's name as configured (`dry-run`, `cri`).
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
            .filter(|c| c.state() != ContainerState::Exited)
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
