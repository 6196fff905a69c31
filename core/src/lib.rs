//! topolet's pure core: values in, decisions out. No I/O, no clock, no globals, no async; this
//! crate depends on no I/O crate, so the compiler keeps the boundary. The shell (crate `topolet`)
//! reads the machine, speaks NRI and the Kubernetes API, persists, and calls in here.
//!
//! - [`machine`]: the machine as placement sees it (CPU sets, the topology tree).
//! - [`kube`]: the Kubernetes vocabulary and the kubelet's rules on it (quantities, pods, QoS
//!   classes and their cgroup values, and the inverse of those rules), Event correlation.
//! - [`managers`]: the kubelet's resource managers — CPU (policy and allocator), memory,
//!   devices — and the topology manager that merges their hints.
//! - [`placement`]: the admission pipeline over the managers, what it persists, restart
//!   reconciliation, configuration migration, `topolet plan`, exclusive-CPU breaches.
//! - [`eviction`]: node-pressure eviction's signals, thresholds, ranking and decisions.
//! - [`report`]: what the node reports about itself (the status report, NodeResourceTopology).
//! - [`reclaimed`]: reclaimed CPU — how much of the idle shared pool batch pods may be sold, and
//!   how fast it is taken back.
//! - [`jitter`]: spreading a fleet's periodic writes from a seed the shell draws.

// Pure code has no use for `unsafe`; forbid (not deny) so that no module can allow it back.
#![forbid(unsafe_code)]

pub mod eviction;
pub mod jitter;
pub mod kube;
pub mod machine;
pub mod managers;
pub mod placement;
pub mod reclaimed;
pub mod report;
