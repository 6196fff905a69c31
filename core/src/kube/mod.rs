//! The Kubernetes vocabulary and the kubelet's rules on it, in one place: resource
//! [`quantity`] strings, the [`pod`] model and its parsing from API objects ([`pod_input`]), how
//! the kubelet names a container in its managers' state ([`container_key`]), the [`qos`] rules
//! (class, shares, quota, oom_score_adj, pids limit) and their [`inverse`] from what NRI shows,
//! client-go's Event correlation ([`events`]), and DRA's ResourceSlices read for the NUMA node
//! of each device ([`resource_slice`]).
pub mod container_key;
pub mod events;
pub mod inverse;
pub mod pod;
pub mod pod_input;
pub mod qos;
pub mod quantity;
pub mod resource_slice;
