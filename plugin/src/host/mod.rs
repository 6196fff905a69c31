//! What topolet reads and writes on the host itself, outside any API: topology discovery from
//! [`sysfs`], the NUMA nodes of a container's device nodes ([`device_numa`]), the CPUs and memory nodes a process may use ([`proc_affinity`], from `/proc`),
//! the cgroupfs path rules ([`cgroupfs`]), a batch container's freezer ([`freezer`]) and CFS
//! quota ([`container_quota`]), the pod
//! cgroup's CPU values topolet writes
//! ([`pod_cgroup`]), CPU time per CPU and per cgroup ([`cpu_usage`]), and the process's own heap
//! ([`heap`]).
pub mod cgroupfs;
pub mod container_quota;
pub mod cpu_usage;
pub mod device_numa;
pub mod freezer;
pub mod heap;
pub mod pod_cgroup;
pub mod proc_affinity;
pub mod sysfs;
