//! The imperative shell: sysfs and cgroup readers, NRI handlers, state files, CLI glue.
pub mod admin;
pub mod cri;
pub mod evict;
pub mod eviction;
pub mod http;
pub mod introspection;
pub mod logging;
pub mod metrics;
pub mod nri_adjust;
pub mod nri_plugin;
pub mod nri_view;
pub mod oom_floor;
pub mod reload;
pub mod run;
pub mod signals;
pub mod state_file;
pub mod sysfs;
