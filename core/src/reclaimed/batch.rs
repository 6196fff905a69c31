//! Batch pods: pods whose containers request the reclaimed resource and no regular CPU. To the
//! kubelet such a pod is BestEffort (or Burstable when it asks for memory): the QoS class is
//! decided by `cpu` and `memory` alone (`pkg/apis/core/v1/helper/qos` `GetPodQOS`), so its
//! cgroups carry the lowest CPU weight and no quota, and NRI's view of it cannot tell it from any
//! other BestEffort pod. Only the pod spec (the API) says it is batch.

use crate::kube::pod::{ContainerRef, Pod};

/// One container of a batch pod and the reclaimed CPU it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchContainer {
    pub which: ContainerRef,
    pub name: String,
    /// Its limit of the reclaimed resource, in milli-CPU (0: it asked for none; it then shares
    /// what its pod's other containers were given, at the minimum quota).
    pub limit_millis: u64,
}

/// A batch pod: its containers and the pod's total request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPod {
    pub containers: Vec<BatchContainer>,
    /// The pod's effective request of the reclaimed resource (sidecars and init containers
    /// aggregated as the scheduler does), in milli-CPU.
    pub request_millis: u64,
    /// `spec.priority` (0 when unset): the starvation ranking's key.
    pub priority: i32,
}

impl BatchPod {
    /// The container `which`, if the pod has it.
    pub fn container(&self, which: ContainerRef) -> Option<&BatchContainer> {
        self.containers.iter().find(|c| c.which == which)
    }
}

/// Why a pod that requests the reclaimed resource is not treated as batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotBatch {
    #[error("container {container:?} asks for both {resource} and regular cpu (its own, a LimitRange's default or a sidecar's); the pod is treated as a regular pod and given no reclaimed CPU")]
    Mixed { container: String, resource: String },
}

/// `pod` as a batch pod of `resource` (`Ok(None)`: it does not request `resource`).
pub fn batch_pod(pod: &Pod, resource: &str) -> Result<Option<BatchPod>, NotBatch> {
    let asks = |c: &crate::kube::pod::Container| {
        c.limits
            .extended
            .get(resource)
            .or_else(|| c.requests.extended.get(resource))
            .copied()
    };
    if !pod.all_containers().any(|(_, c)| asks(c).is_some()) {
        return Ok(None);
    }
    if let Some((_, c)) = pod
        .all_containers()
        .find(|(_, c)| c.requests.cpu_millis.is_some() || c.limits.cpu_millis.is_some())
    {
        return Err(NotBatch::Mixed {
            container: c.name.clone(),
            resource: resource.to_string(),
        });
    }
    let containers = pod
        .all_containers()
        .map(|(which, c)| BatchContainer {
            which,
            name: c.name.clone(),
            limit_millis: asks(c).unwrap_or(0),
        })
        .collect();
    let request_millis = pod
        .aggregate(|c| &c.requests)
        .extended
        .get(resource)
        .copied()
        .unwrap_or(0);
    Ok(Some(BatchPod {
        containers,
        request_millis,
        priority: pod.priority.unwrap_or(0),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::pod::{Container, ResourceList};

    const R: &str = "topolet.io/reclaimed-cpu";

    fn list(cpu: Option<u64>, reclaimed: Option<u64>) -> ResourceList {
        let mut l = ResourceList {
            cpu_millis: cpu,
            ..Default::default()
        };
        if let Some(r) = reclaimed {
            l.extended.insert(R.to_string(), r);
        }
        l
    }

    fn ctr(name: &str, cpu: Option<u64>, reclaimed: Option<u64>) -> Container {
        Container {
            name: name.into(),
            requests: list(cpu, reclaimed),
            limits: list(cpu, reclaimed),
            restart_policy: None,
        }
    }

    fn pod(containers: Vec<Container>) -> Pod {
        Pod {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_asking_for_the_resource_and_no_cpu_is_batch() {
        let p = pod(vec![ctr("a", None, Some(500)), ctr("b", None, None)]);
        let b = batch_pod(&p, R).unwrap().unwrap();
        assert_eq!(b.request_millis, 500);
        assert_eq!(b.containers.len(), 2);
        assert_eq!(b.container(ContainerRef::App(0)).unwrap().limit_millis, 500);
        assert_eq!(b.container(ContainerRef::App(1)).unwrap().limit_millis, 0);
    }

    #[test]
    fn a_regular_pod_is_not_batch() {
        assert_eq!(
            batch_pod(&pod(vec![ctr("a", Some(100), None)]), R),
            Ok(None)
        );
        assert_eq!(batch_pod(&pod(vec![ctr("a", None, None)]), R), Ok(None));
    }

    #[test]
    fn asking_for_both_is_refused_as_batch_naming_the_container() {
        let p = pod(vec![ctr("a", None, Some(500)), ctr("b", Some(100), None)]);
        let e = batch_pod(&p, R).unwrap_err();
        assert!(e.to_string().contains("\"b\""), "{e}");
    }

    #[test]
    fn another_resource_name_is_another_feature() {
        let p = pod(vec![ctr("a", None, Some(500))]);
        assert_eq!(batch_pod(&p, "example.com/other"), Ok(None));
    }
}
