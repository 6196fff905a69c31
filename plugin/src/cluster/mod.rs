//! The Kubernetes API: the [`client`] (credentials, connection), the Event [`recorder`], the
//! [`pod_directory`] (this node's pods from a watch), what the API knows of them that NRI cannot
//! tell ([`pod_facts`]: priority, grace period, requests, controller), the Node's conditions and
//! taints ([`node_status`]), this node's DRA ResourceSlices and the NUMA nodes of their devices
//! ([`resource_slices`]), the NodeResourceTopology publisher ([`nrt`]), the reclaimed-CPU
//! extended resource ([`extended_resource`]), the one list of API [`permissions`], the writers'
//! [`start_jitter`], what the objects held when this topolet started ([`at_start`]), and taking
//! all of it back at uninstall ([`withdraw`]).
pub mod at_start;
pub mod client;
pub mod extended_resource;
pub mod node_status;
pub mod nrt;
pub mod permissions;
pub mod pod_directory;
pub mod pod_facts;
pub mod recorder;
pub mod resource_slices;
pub mod start_jitter;
pub mod withdraw;
