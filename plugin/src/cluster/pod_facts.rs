//! What the API server knows about this node's pods that NRI cannot tell the eviction loop:
//! priority and priority class, `terminationGracePeriodSeconds`, the static/mirror annotations,
//! the real requests, whether the pod is already being deleted, and its controller.
//!
//! [`PodFacts`] is the eviction loop's one way to ask; [`ListPodFacts`] answers with a `list` of
//! pods with the field selector `spec.nodeName=<node>` (RBAC `pods list`), only when a
//! threshold is met (the loop runs off the NRI event path, so the request never delays a
//! container); with the pod watch on, `crate::cluster::pod_directory::WatchedPodFacts` answers
//! from the watch's store instead, and lists only while the watch is not synced. [`overlay`] writes the facts over
//! the pod NRI described, so ranking, the critical-pod exclusion and grace periods use the
//! truth when the API has the pod, and the NRI inversion otherwise.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::api::{Api, ListParams};
use kube::Client;

use topolet_core::kube::pod::Pod;
use topolet_core::kube::quantity::parse_value;

/// One container's requests from its spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerFacts {
    pub memory_request: Option<u64>,
    pub ephemeral_storage_request: Option<u64>,
}

/// One pod, from the API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodFact {
    pub namespace: String,
    pub name: String,
    pub priority: Option<i32>,
    pub priority_class_name: Option<String>,
    pub static_or_mirror: bool,
    pub termination_grace_period_seconds: Option<i64>,
    /// `metadata.deletionTimestamp` is set: the pod is already terminating.
    pub deleting: bool,
    /// `Kind/name` of the controller owner, if any.
    pub controller: Option<String>,
    /// App containers by name.
    pub containers: BTreeMap<String, ContainerFacts>,
}

/// Facts by pod uid.
pub type FactsByUid = HashMap<String, PodFact>;

/// Where the eviction loop gets pod facts.
#[async_trait]
pub trait PodFacts: Send + Sync {
    /// This node's pods by uid; an error says why they are unknown this time.
    async fn node_pods(&self) -> Result<FactsByUid, String>;
}

/// Facts from a `list` of this node's pods.
pub struct ListPodFacts {
    client: Client,
    node: String,
}

impl ListPodFacts {
    pub fn new(client: Client, node: String) -> ListPodFacts {
        ListPodFacts { client, node }
    }
}

#[async_trait]
impl PodFacts for ListPodFacts {
    async fn node_pods(&self) -> Result<FactsByUid, String> {
        let api: Api<ApiPod> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
        let list = api
            .list(&lp)
            .await
            .map_err(|e| format!("listing the pods of node {}: {e}", self.node))?;
        Ok(list
            .items
            .iter()
            .filter_map(|p| Some((p.metadata.uid.clone()?, fact(p))))
            .collect())
    }
}

fn quantity(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> Option<u64> {
    q.and_then(|q| parse_value(&q.0).ok())
}

/// The facts of one API pod.
pub fn fact(p: &ApiPod) -> PodFact {
    let annotations = p.metadata.annotations.clone().unwrap_or_default();
    let spec = p.spec.clone().unwrap_or_default();
    PodFact {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        priority: spec.priority,
        priority_class_name: spec.priority_class_name.clone(),
        static_or_mirror: topolet_core::kube::pod::is_static_or_mirror(|k| {
            annotations.get(k).map(String::as_str)
        }),
        termination_grace_period_seconds: spec.termination_grace_period_seconds,
        deleting: p.metadata.deletion_timestamp.is_some(),
        controller: p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| format!("{}/{}", o.kind, o.name)),
        containers: spec
            .containers
            .iter()
            .map(|c| {
                let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
                (
                    c.name.clone(),
                    ContainerFacts {
                        memory_request: quantity(req.and_then(|r| r.get("memory"))),
                        ephemeral_storage_request: quantity(
                            req.and_then(|r| r.get("ephemeral-storage")),
                        ),
                    },
                )
            })
            .collect(),
    }
}

/// Writes `fact` over `pod` (as NRI described it): priority, priority class, static/mirror,
/// grace period, and the memory and ephemeral-storage requests of the containers both know.
pub fn overlay(pod: &mut Pod, fact: &PodFact) {
    pod.priority = fact.priority;
    pod.priority_class_name = fact.priority_class_name.clone();
    pod.static_or_mirror = fact.static_or_mirror;
    pod.termination_grace_period_seconds = fact.termination_grace_period_seconds;
    for c in &mut pod.containers {
        if let Some(f) = fact.containers.get(&c.name) {
            c.requests.memory_bytes = f.memory_request;
            c.requests.ephemeral_storage_bytes = f.ephemeral_storage_request;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topolet_core::kube::pod::Container;

    fn api_pod() -> ApiPod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web", "namespace": "ns", "uid": "u1",
                "deletionTimestamp": "2026-12-01T00:00:00Z",
                "annotations": {"kubernetes.io/config.source": "file"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "r", "controller": true}]
            },
            "spec": {
                "priority": 2000001000,
                "priorityClassName": "system-node-critical",
                "terminationGracePeriodSeconds": 7,
                "containers": [{"name": "main", "resources": {"requests": {"memory": "64Mi", "ephemeral-storage": "1Gi"}}}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn facts_of_a_pod() {
        let f = fact(&api_pod());
        assert_eq!(f.priority, Some(2_000_001_000));
        assert_eq!(
            f.priority_class_name.as_deref(),
            Some("system-node-critical")
        );
        assert!(f.static_or_mirror && f.deleting);
        assert_eq!(f.controller.as_deref(), Some("ReplicaSet/web-1"));
        assert_eq!(f.termination_grace_period_seconds, Some(7));
        assert_eq!(
            f.containers["main"],
            ContainerFacts {
                memory_request: Some(64 << 20),
                ephemeral_storage_request: Some(1 << 30)
            }
        );
    }

    #[test]
    fn overlay_makes_the_pod_critical_with_its_real_priority() {
        let mut pod = Pod {
            namespace: "ns".into(),
            name: "web".into(),
            uid: "u1".into(),
            containers: vec![Container {
                name: "main".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(!pod.is_critical());
        let mut f = fact(&api_pod());
        f.static_or_mirror = false;
        overlay(&mut pod, &f);
        assert!(pod.is_critical() && pod.is_node_critical());
        assert_eq!(pod.termination_grace_period_seconds, Some(7));
        assert_eq!(pod.containers[0].requests.memory_bytes, Some(64 << 20));
    }
}
