//! Configuration reload: new [`PlacementSettings`] take over from the running one only when every
//! current assignment survives it unchanged.
//!
//! The kubelet refuses to start when its CPU or memory manager policy differs from its state
//! file, and makes the operator drain the node and delete the state. topolet instead rebuilds
//! the pipeline from the new configuration, restores every assignment into it, and refuses the
//! new configuration — naming the key and the containers in the way — when one would break:
//! exclusive CPUs under `cpu.policy = "none"` or on newly reserved CPUs, pinned memory under
//! `memory.policy = "none"` or beyond a larger reservation, devices no longer listed. Everything
//! else (pids limit, quota handling, topology policy, allocation options, reserving CPUs nobody
//! holds) applies to containers created from then on; running containers keep their values.

use std::collections::BTreeMap;
use std::fmt;

use crate::managers::cpu::policy::CpuPolicyName;
use crate::managers::memory::policy::MemoryPolicyKind;
use crate::placement::settings::PlacementSettings;
use crate::placement::{Placement, PlacementError};

/// A new configuration that running containers stand in the way of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The configuration key at fault, e.g. `cpu.reserved_cpus`.
    pub key: String,
    /// What the new value would take away, naming the containers.
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Why a new configuration was not taken.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The new configuration does not fit the machine (the same errors as at start-up).
    #[error("{0}")]
    Invalid(#[from] PlacementError),
    /// It fits the machine but would break running containers' assignments.
    #[error(
        "{}; the running configuration stays (delete the pods named, or restart topolet to \
         force the change: their assignments are then rebuilt from scratch at synchronize)",
        .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    BreaksRunning(Vec<Refusal>),
}

impl MigrateError {
    /// The first key at fault, when known.
    pub fn key(&self) -> Option<&str> {
        match self {
            MigrateError::Invalid(PlacementError::Config { key, .. }) => Some(key),
            MigrateError::Invalid(_) => None,
            MigrateError::BreaksRunning(r) => r.first().map(|r| r.key.as_str()),
        }
    }
}

/// The pipeline under the new configuration, with every assignment carried over.
#[derive(Debug)]
pub struct Migrated {
    pub placement: Placement,
    /// Warnings about the new configuration itself (as at start-up).
    pub warnings: Vec<String>,
    /// How many containers' assignments were carried over.
    pub carried: usize,
}

impl Placement {
    /// Rebuilds the pipeline from `config` (the new configuration's settings) on the same machine and restores every current
    /// assignment into it. `self` is never changed: on error the caller keeps using it.
    pub fn migrate(&self, config: &PlacementSettings) -> Result<Migrated, MigrateError> {
        let (mut next, warnings) = Placement::new(&self.topology, config)?;
        let reserved_key = if config.cpu.reserved_cpu_count.is_some() {
            "cpu.reserved_cpu_count"
        } else {
            "cpu.reserved_cpus"
        };
        // key → containers in the way, in key order then container order.
        let mut broken: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut refuse = |key: String, why: String| broken.entry(key).or_default().push(why);
        let current = self.assignments();
        for a in &current.containers {
            let key = a.key();
            if let Some(set) = &a.cpus {
                let reserved = set.intersection(next.reserved());
                if next.cpu.config().policy == CpuPolicyName::None {
                    refuse(
                        "cpu.policy".into(),
                        format!("{key} holds exclusive cpus {set}"),
                    );
                } else if !reserved.is_empty() {
                    refuse(
                        reserved_key.into(),
                        format!("{key} holds cpus {reserved} exclusively"),
                    );
                } else if let Err(e) = next.cpu.restore(&key, set, self.cpu.role(&key)) {
                    refuse("cpu".into(), e.to_string());
                }
            }
            if let Some(m) = &a.memory {
                if next.memory.kind() == MemoryPolicyKind::None {
                    refuse(
                        "memory.policy".into(),
                        format!("{key} has memory pinned to numa nodes {}", m.nodes),
                    );
                } else if let Err(e) = next.memory.restore(&key, m.clone()) {
                    refuse("memory.reserved".into(), e.to_string());
                }
            }
            if let Some(held) = &a.devices {
                if next.devices.restore(&key, held.clone()).is_err() {
                    for (resource, addresses) in held {
                        let listed = config
                            .devices
                            .get(resource)
                            .map(|l| addresses.iter().filter(|a| !l.contains(a)).count() == 0)
                            .unwrap_or(false);
                        if !listed {
                            refuse(
                                format!("devices.\"{resource}\""),
                                format!("{key} holds {}", addresses.join(",")),
                            );
                        }
                    }
                }
            }
            if let Some(affinity) = a.affinity {
                next.affinity.insert(key.clone(), affinity);
            }
            if let Some(observed) = &a.observed_devices {
                next.observed.insert(key.clone(), observed.clone());
            }
        }
        if !broken.is_empty() {
            let refusals = broken
                .into_iter()
                .map(|(key, who)| {
                    let lead = lead(&key, config);
                    Refusal {
                        message: format!("{lead}: {}", who.join(", ")),
                        key,
                    }
                })
                .collect();
            return Err(MigrateError::BreaksRunning(refusals));
        }
        next.pod_affinity = self.pod_affinity.clone();
        next.saved = self.saved.clone();
        next.check_invariants()?;
        Ok(Migrated {
            placement: next,
            warnings,
            carried: current.containers.len(),
        })
    }
}

/// The first half of a refusal: what the new value would do.
fn lead(key: &str, config: &PlacementSettings) -> String {
    match key {
        "cpu.policy" => "\"none\" would take exclusive cpus from running containers".into(),
        "cpu.reserved_cpus" => format!(
            "reserving {} would take cpus running containers hold exclusively",
            config
                .cpu
                .reserved_cpus
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
        ),
        "cpu.reserved_cpu_count" => format!(
            "reserving {} cpus would take cpus running containers hold exclusively",
            config.cpu.reserved_cpu_count.unwrap_or(0)
        ),
        "memory.policy" => "\"none\" would unpin the memory of running containers".into(),
        "memory.reserved" => {
            "the new reservation leaves too little for running containers' pinned memory".into()
        }
        k if k.starts_with("devices.") => "no longer lists devices running containers hold".into(),
        _ => "running containers' assignments do not fit".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::container_key::ContainerKey;
    use crate::kube::pod::{Container, Pod, ResourceList};
    use crate::machine::cpuset::CpuSet;
    use crate::machine::topology::{Device, SyntheticSpec, Topology};
    use crate::managers::topology::hints::TopologyPolicy;
    use crate::placement::Candidate;

    /// 2 NUMA nodes × 4 cores, no SMT, 4 GiB per node, one NIC on node 1.
    fn machine() -> Topology {
        let mut raw = SyntheticSpec {
            sockets: 2,
            numa_per_socket: 1,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 1,
            memory_per_node: 4 << 30,
        }
        .raw();
        raw.devices = vec![Device {
            address: "0000:81:00.0".into(),
            numa: Some(1),
        }];
        Topology::build(&raw).unwrap()
    }

    fn cpus(list: &str) -> Option<CpuSet> {
        Some(CpuSet::parse(list).unwrap())
    }

    fn base() -> PlacementSettings {
        let mut c = PlacementSettings::default();
        c.cpu.policy = CpuPolicyName::Static;
        c.cpu.reserved_cpus = cpus("0");
        c
    }

    fn guaranteed(uid: &str, cpus: u64, nics: u64) -> Pod {
        let mut r = ResourceList {
            cpu_millis: Some(cpus * 1000),
            memory_bytes: Some(1 << 30),
            ..Default::default()
        };
        if nics > 0 {
            r.extended.insert("example.com/nic".into(), nics);
        }
        Pod {
            namespace: "ns".into(),
            name: uid.into(),
            uid: uid.into(),
            containers: vec![Container {
                name: "app".into(),
                requests: r.clone(),
                limits: r,
                restart_policy: None,
            }],
            ..Default::default()
        }
    }

    fn placed(config: &PlacementSettings, pods: &[Pod]) -> Placement {
        let (mut p, _) = Placement::new(&machine(), config).unwrap();
        for pod in pods {
            p.admit(Candidate::app(pod), -1000).unwrap();
        }
        p
    }

    fn refusal(p: &Placement, c: &PlacementSettings) -> (Option<String>, String) {
        let e = p.migrate(c).unwrap_err();
        (e.key().map(str::to_string), e.to_string())
    }

    #[test]
    fn compatible_change_carries_every_assignment_and_applies_to_new_containers() {
        let p = placed(&base(), &[guaranteed("a", 2, 0), guaranteed("b", 1, 0)]);
        let mut c = base();
        c.pids_limit = Some(2048);
        c.cpu.reserved_cpus = cpus("0,7");
        c.topology.policy = TopologyPolicy::SingleNumaNode;
        let m = p.migrate(&c).unwrap();
        assert_eq!(m.carried, 2);
        assert_eq!(m.placement.assignments(), p.assignments());
        assert_eq!(m.placement.reserved().to_string(), "0,7");
        m.placement.check_invariants().unwrap();
        let mut next = m.placement;
        let r = next
            .admit(Candidate::app(&guaranteed("c", 1, 0)), -1000)
            .unwrap();
        assert_eq!(r.pids_limit, Some(2048));
        assert!(r.exclusive && !r.cpuset.contains(7), "{}", r.cpuset);
        // The old pipeline is untouched.
        assert_eq!(p.reserved().to_string(), "0");
    }

    #[test]
    fn policy_none_is_refused_while_containers_hold_exclusive_cpus() {
        let p = placed(&base(), &[guaranteed("a", 2, 0)]);
        let mut c = base();
        c.cpu.policy = CpuPolicyName::None;
        c.cpu.reserved_cpus = None;
        let (key, text) = refusal(&p, &c);
        assert_eq!(key.as_deref(), Some("cpu.policy"));
        assert!(text.contains("a/app holds exclusive cpus"), "{text}");
        assert!(text.contains("running configuration stays"), "{text}");
        // With nothing exclusive the same change is fine.
        let idle = placed(&base(), &[]);
        assert_eq!(idle.migrate(&c).unwrap().carried, 0);
    }

    #[test]
    fn reserving_cpus_a_container_holds_is_refused_naming_both() {
        let p = placed(&base(), &[guaranteed("a", 2, 0)]);
        let held = p.exclusive()[&ContainerKey::new("a", "app")].clone();
        let first = held.iter().next().unwrap();
        let mut c = base();
        c.cpu.reserved_cpus = cpus(&format!("0,{first}"));
        let (key, text) = refusal(&p, &c);
        assert_eq!(key.as_deref(), Some("cpu.reserved_cpus"));
        assert!(
            text.contains(&format!("a/app holds cpus {first} exclusively")),
            "{text}"
        );
        let mut c = base();
        c.cpu.reserved_cpus = None;
        c.cpu.reserved_cpu_count = Some(4);
        let (key, _) = refusal(&p, &c);
        assert_eq!(key.as_deref(), Some("cpu.reserved_cpu_count"));
    }

    #[test]
    fn memory_policy_change_is_refused_with_pinned_containers() {
        let mut c = base();
        c.memory.policy = MemoryPolicyKind::Static;
        c.memory.reserved = BTreeMap::from([(0, 512 << 20)]);
        let p = placed(&c, &[guaranteed("a", 1, 0)]);
        assert!(p.assignments().containers[0].memory.is_some());
        let (key, text) = refusal(&p, &base());
        assert_eq!(key.as_deref(), Some("memory.policy"));
        assert!(text.contains("a/app has memory pinned"), "{text}");
        // A reservation that leaves too little for what is pinned.
        let mut bigger = c.clone();
        bigger.memory.reserved = BTreeMap::from([(0, 3584 << 20), (1, 3584 << 20)]);
        let (key, _) = refusal(&p, &bigger);
        assert_eq!(key.as_deref(), Some("memory.reserved"));
        // none → static with nothing pinned is fine.
        assert!(placed(&base(), &[guaranteed("b", 1, 0)])
            .migrate(&c)
            .is_ok());
    }

    #[test]
    fn dropping_a_held_device_is_refused() {
        let mut c = base();
        c.devices
            .insert("example.com/nic".into(), vec!["0000:81:00.0".into()]);
        let p = placed(&c, &[guaranteed("a", 1, 1)]);
        let (key, text) = refusal(&p, &base());
        assert_eq!(key.as_deref(), Some("devices.\"example.com/nic\""));
        assert!(text.contains("a/app holds 0000:81:00.0"), "{text}");
    }

    #[test]
    fn every_conflict_is_listed_and_an_invalid_config_is_invalid() {
        let mut c = base();
        c.memory.policy = MemoryPolicyKind::Static;
        c.memory.reserved = BTreeMap::from([(0, 512 << 20)]);
        let p = placed(&c, &[guaranteed("a", 1, 0), guaranteed("b", 1, 0)]);
        let mut none = PlacementSettings::default();
        none.cpu.policy = CpuPolicyName::None;
        let e = p.migrate(&none).unwrap_err();
        let MigrateError::BreaksRunning(r) = &e else {
            panic!("{e}")
        };
        let keys: Vec<&str> = r.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["cpu.policy", "memory.policy"]);
        assert!(r[0].message.contains("a/app") && r[0].message.contains("b/app"));

        let mut bad = base();
        bad.cpu.reserved_cpus = cpus("0,64");
        let e = p.migrate(&bad).unwrap_err();
        assert!(matches!(e, MigrateError::Invalid(_)), "{e}");
        assert!(e.to_string().contains("reserved_cpus"), "{e}");
    }
}
