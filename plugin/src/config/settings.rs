//! The mapping of the file into the core's settings. This is the edge between the file and the
//! core: [`Config::placement`] and [`Config::eviction`] map the file into settings the core owns
//! ([`PlacementSettings`], [`EvictionConfig`]); the enum of each concept (`CpuPolicyName`, …) is
//! the core's, with its one default, and the core never reads this module. [`Config::reclaimed`]
//! and [`Config::memory_reserved`] give the checked `[reclaimed]` section and `[memory] reserved`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use topolet_core::eviction::EvictionConfig;
use topolet_core::kube::qos::{self, ExclusiveCpuQuota};
use topolet_core::kube::quantity;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::managers::cpu::policy::CpuPolicyConfig;
use topolet_core::managers::memory::policy::MemoryPolicyConfig;
use topolet_core::managers::topology::hints::TopologyOptions;
use topolet_core::managers::topology::manager::TopologyManagerConfig;
use topolet_core::placement::settings::PlacementSettings;
use topolet_core::placement::PlacementError;

use crate::config::{Config, ConfigError, EvictionConfigError};

impl Config {
    /// The validated `[reclaimed]` section (`parse`/`load` already checked it).
    pub fn reclaimed(&self) -> Result<topolet_core::reclaimed::ReclaimedSettings, ConfigError> {
        self.reclaimed.settings().map_err(|e| ConfigError::Value {
            path: PathBuf::new(),
            key: format!("reclaimed.{}", e.key),
            message: e.message,
        })
    }

    /// The validated `[eviction]` section. `parse`/`load` already checked it, so this fails only
    /// for a `Config` built or changed in code.
    pub fn eviction(&self) -> Result<EvictionConfig, EvictionConfigError> {
        self.eviction.settings()
    }

    /// The admission pipeline's settings. `parse`/`load` already checked the values, so this
    /// fails only for a `Config` built or changed in code; the error names the key, as
    /// `Placement::new`'s do.
    pub fn placement(&self) -> Result<PlacementSettings, PlacementError> {
        let c = &self.cpu;
        let reserved_cpus = match &c.reserved_cpus {
            Some(text) => Some(CpuSet::parse(text).map_err(|e| PlacementError::Config {
                key: "cpu.reserved_cpus".into(),
                message: e.to_string(),
            })?),
            None => None,
        };
        let t = &self.topology;
        Ok(PlacementSettings {
            cpu: CpuPolicyConfig {
                policy: c.policy,
                reserved_cpus,
                reserved_cpu_count: c.reserved_cpu_count,
                full_pcpus_only: c.full_pcpus_only,
                distribute_cpus_across_numa: c.distribute_cpus_across_numa,
                distribute_cpus_across_cores: c.distribute_cpus_across_cores,
                align_by_socket: c.align_by_socket,
                prefer_align_cpus_by_uncorecache: c.prefer_align_cpus_by_uncorecache,
                strict_cpu_reservation: c.strict_cpu_reservation,
            },
            topology: TopologyManagerConfig {
                policy: t.policy,
                scope: t.scope,
                options: TopologyOptions {
                    prefer_closest_numa_nodes: t.prefer_closest_numa_nodes,
                    max_allowable_numa_nodes: t.max_allowable_numa_nodes,
                },
            },
            memory: MemoryPolicyConfig {
                policy: self.memory.policy,
                reserved: self.memory_reserved(),
                reserved_hugepages: BTreeMap::new(),
            },
            devices: self.devices.clone(),
            pids_limit: qos::pids_limit(self.qos.pids_limit),
            exclusive_quota: if self.qos.keep_cfs_quota_for_exclusive {
                ExclusiveCpuQuota::Keep
            } else {
                ExclusiveCpuQuota::Disable
            },
            shared_pool_mems_follow_cpus: self.memory.shared_pool_mems_follow_cpus,
            oom_score_adj_floor: self.qos.oom_score_adj_floor,
        })
    }

    /// The parsed `[memory] reserved` table.
    pub fn memory_reserved(&self) -> BTreeMap<usize, u64> {
        // Values were validated by `check`; an entry that somehow fails is skipped, not invented.
        self.memory
            .reserved
            .iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, quantity::parse_value(v).ok()?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::tests::parse;
    use crate::config::{CpuPolicyName, MemoryPolicyName, TopologyPolicyName, TopologyScopeName};

    /// One default per concept: the file's defaults are the core's.
    #[test]
    fn defaults_are_the_cores() {
        assert_eq!(
            Config::default().placement().unwrap(),
            PlacementSettings::default()
        );
        assert_eq!(
            Config::default().eviction().unwrap(),
            EvictionConfig::default()
        );
    }

    #[test]
    fn placement_maps_every_key() {
        let c = parse(
            "[cpu]\npolicy = \"none\"\nreserved_cpus = \"0,1\"\nfull_pcpus_only = true\n\
             [topology]\npolicy = \"restricted\"\nscope = \"pod\"\n\
             [memory]\npolicy = \"static\"\nreserved = { 1 = \"1Gi\" }\n\
             [qos]\npids_limit = 100\nkeep_cfs_quota_for_exclusive = true\noom_score_adj_floor = 0\n",
        )
        .unwrap();
        let s = c.placement().unwrap();
        assert_eq!(s.cpu.policy, CpuPolicyName::None);
        assert_eq!(s.cpu.reserved_cpus, Some(CpuSet::from_iter([0, 1])));
        assert!(s.cpu.full_pcpus_only);
        assert_eq!(s.topology.policy, TopologyPolicyName::Restricted);
        assert_eq!(s.topology.scope, TopologyScopeName::Pod);
        assert_eq!(s.memory.policy, MemoryPolicyName::Static);
        assert_eq!(s.memory.reserved, BTreeMap::from([(1, 1 << 30)]));
        assert_eq!(s.pids_limit, Some(100));
        assert_eq!(s.exclusive_quota, ExclusiveCpuQuota::Keep);
        assert_eq!(s.oom_score_adj_floor, Some(0));
        let mut bad = Config::default();
        bad.cpu.reserved_cpus = Some("3-1".into());
        let e = bad.placement().unwrap_err().to_string();
        assert!(e.starts_with("cpu.reserved_cpus: "), "{e}");
    }
}
