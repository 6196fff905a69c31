//! The imperative shell: sysfs and cgroup readers, NRI handlers, state files, CLI glue.
pub mod state_file;
pub mod oom_floor;
pub mod nri_view;
