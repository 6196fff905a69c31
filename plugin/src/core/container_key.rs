//! `ContainerKey`: how every allocator and the state file name a container — the pod's uid plus
//! the container's name, as the kubelet's cpu/memory manager state does. Stable across container
//! restarts in the same pod, which is what lets a restarted container keep its CPUs.

use std::fmt;

#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct ContainerKey {
    pub pod_uid: String,
    pub container: String,
}

impl ContainerKey {
    pub fn new(pod_uid: impl Into<String>, container: impl Into<String>) -> ContainerKey {
        ContainerKey {
            pod_uid: pod_uid.into(),
            container: container.into(),
        }
    }
}

impl fmt::Display for ContainerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.pod_uid, self.container)
    }
}
