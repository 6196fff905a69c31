//! The machine as placement sees it: [`cpuset`] (sets of logical CPUs in the Linux list format)
//! and [`topology`] (threads → cores → L3 groups → NUMA nodes → sockets, memory per node,
//! distances). Built from values the shell read from sysfs; nothing here reads a file.
pub mod cpuset;
pub mod topology;
