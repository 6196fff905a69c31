//! The pure core: values in, decisions out. No I/O, no clock, no globals, no async. It names
//! neither `crate::config` nor `crate::shell` (`dependency_rule` checks it).
pub mod admission_input;
pub mod assignments;
pub mod breach;
pub mod container_key;
pub mod cpu_alloc;
pub mod cpu_policy;
pub mod cpuset;
mod dependency_rule;
pub mod device_hints;
pub mod events;
pub mod eviction;
pub mod hints;
pub mod memory_policy;
pub mod migrate;
pub mod nri_container;
pub mod nrt;
pub mod placement;
pub mod placement_settings;
pub mod plan;
pub mod pod;
pub mod pod_input;
pub mod qos;
pub mod quantity;
pub mod reconcile;
pub mod status;
pub mod topology;
pub mod topology_manager;
