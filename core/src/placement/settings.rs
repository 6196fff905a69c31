//! [`PlacementSettings`]: everything the admission pipeline ([`crate::placement::Placement`])
//! is built from, in the core's own types — the CPU, memory and topology managers' settings,
//! the device lists and the per-container cgroup settings.
//!
//! `topolet::config` maps the TOML file into this (the core never reads the file's types); the
//! default value here is the default of the configuration file.

use std::collections::BTreeMap;

use crate::kube::qos::ExclusiveCpuQuota;
use crate::managers::cpu::policy::CpuPolicyConfig;
use crate::managers::memory::policy::MemoryPolicyConfig;
use crate::managers::topology::manager::TopologyManagerConfig;

/// The pipeline's settings, machine-independent (checks against the machine happen in
/// `Placement::new`, whose errors name the configuration key at fault).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementSettings {
    /// The CPU manager (`[cpu]`).
    pub cpu: CpuPolicyConfig,
    /// The topology manager (`[topology]`).
    pub topology: TopologyManagerConfig,
    /// The memory manager (`[memory] policy`, `reserved`).
    pub memory: MemoryPolicyConfig,
    /// Extended resource name → PCI addresses of the devices that provide it (`[devices]`).
    pub devices: BTreeMap<String, Vec<String>>,
    /// `pids.max` of every container (`[qos] pids_limit` > 0), `None`: unlimited.
    pub pids_limit: Option<i64>,
    /// The CFS quota of containers with exclusive CPUs (`[qos] keep_cfs_quota_for_exclusive`).
    pub exclusive_quota: ExclusiveCpuQuota,
    /// Shared-pool containers' `cpuset.mems` follow the shared pool's CPUs
    /// (`[memory] shared_pool_mems_follow_cpus`).
    pub shared_pool_mems_follow_cpus: bool,
    /// The lowest oom_score_adj the runtime applies, when configured (`[qos]
    /// oom_score_adj_floor`); `None`: detected at run time (`topolet plan`: no floor).
    pub oom_score_adj_floor: Option<i32>,
}
