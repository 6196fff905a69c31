//! The imperative shell: sysfs and cgroup readers, NRI handlers, state files, CLI glue.
pub mod nri_view;
pub mod oom_floor;
pub mod state_file;
pub mod sysfs;
