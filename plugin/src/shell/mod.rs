//! The imperative shell: sysfs and cgroup readers, NRI handlers, state files, CLI glue.
pub mod cri;
pub mod evict;
pub mod eviction;
pub mod logging;
pub mod nri_adjust;
pub mod nri_plugin;
pub mod nri_view;
pub mod oom_floor;
pub mod reload;
pub mod run;
pub mod signals;
pub mod state_file;
pub mod sysfs;
