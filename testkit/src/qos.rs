//! The pod QoS classes (kubelet `GetPodQOS`), which both the kubelet simulator
//! ([`crate::kubelet`]) and the cgroup naming ([`crate::cgroup_names`]) speak.

/// A pod's QoS class (kubelet `GetPodQOS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}
