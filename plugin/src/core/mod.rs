//! The pure core: values in, decisions out. No I/O, no clock, no globals, no async.
pub mod assignments;
pub mod container_key;
pub mod cpu_alloc;
pub mod cpu_policy;
pub mod cpuset;
pub mod device_hints;
pub mod hints;
pub mod memory_policy;
pub mod placement;
pub mod plan;
pub mod pod;
pub mod pod_input;
pub mod qos;
pub mod quantity;
pub mod reconcile;
pub mod topology;
pub mod topology_manager;
