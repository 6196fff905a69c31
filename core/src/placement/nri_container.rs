//! [`NriContainer`]: what admission is told about a container when only NRI speaks — the facts
//! NRI gives exactly (the pod's identity, the QoS class its cgroup path names), the container's
//! requests and limits estimated from the kubelet's cgroup values (`topolet::nri::view` inverts
//! them), and what NRI cannot tell said explicitly: the container's role (`None`) and
//! the rest of the pod (its other containers, priority and pod-level resources: absent, not
//! guessed).
//!
//! The core's rules read the class from here, never recompute it from the estimate: a Burstable
//! pod's container whose own requests equal its limits stays Burstable, as its cgroup path says.
//! Which class that is, when the path and the values disagree, is the inversion's rule
//! (`topolet::nri::view`).

use crate::kube::container_key::ContainerKey;
use crate::kube::pod::Container;
use crate::kube::qos::QosClass;
use crate::managers::cpu::policy::ContainerRole;

/// One container as NRI describes it (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NriContainer {
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's uid (the sandbox's, else the one in its cgroup path).
    pub uid: String,
    /// The pod's QoS class, from its cgroup path (exact), as `topolet::nri::view` decides it
    /// (a Guaranteed path whose values cannot be Guaranteed is taken for what they are).
    pub class: QosClass,
    /// The container's role in its pod, when known. NRI does not say (`None`): the container is
    /// then admitted as an app container, which is what the kubelet's order calls for (init
    /// containers run to completion first, so their CPUs are back before the app containers).
    pub role: Option<ContainerRole>,
    /// The container: its name, and its requests and limits as estimated from the cgroup values.
    pub container: Container,
}

impl NriContainer {
    /// `namespace/name` of the pod.
    pub fn pod_key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The role admission uses: an unknown role is an app container's.
    pub fn role_or_app(&self) -> ContainerRole {
        self.role.unwrap_or(ContainerRole::App)
    }

    pub fn key(&self) -> ContainerKey {
        ContainerKey::new(self.uid.clone(), self.container.name.clone())
    }
}
