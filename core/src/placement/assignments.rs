//! `Assignments`: everything topolet persists — what each container holds (exclusive CPUs,
//! pinned memory, `[devices]`' devices, its NUMA affinity, the devices it was really given and
//! that pulled it to their NUMA nodes). Free capacity is never stored: it is derived from
//! the topology and these assignments.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::kube::container_key::ContainerKey;
use crate::machine::cpuset::CpuSet;
use crate::managers::memory::policy::MemoryAssignment;
use crate::managers::observed_devices::ObservedDevice;
use crate::managers::topology::hints::NumaMask;

/// The persisted assignments, one entry per container holding anything, ordered by key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assignments {
    pub containers: Vec<Assignment>,
}

/// What one container holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    pub pod_uid: String,
    pub container: String,
    /// Exclusive CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<CpuSet>,
    /// The topology manager's merged NUMA affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<NumaMask>,
    /// NUMA-pinned memory and hugepages (memory manager `static`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryAssignment>,
    /// Devices by extended resource name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<BTreeMap<String, Vec<String>>>,
    /// The devices the container was really given (its device set, with each one's source and
    /// NUMA node: `crate::managers::observed_devices`). New in state format 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_devices: Option<Vec<ObservedDevice>>,
}

impl Assignment {
    pub fn key(&self) -> ContainerKey {
        ContainerKey::new(self.pod_uid.clone(), self.container.clone())
    }

    fn empty(key: &ContainerKey) -> Assignment {
        Assignment {
            pod_uid: key.pod_uid.clone(),
            container: key.container.clone(),
            cpus: None,
            affinity: None,
            memory: None,
            devices: None,
            observed_devices: None,
        }
    }
}

impl Assignments {
    /// The entry of `key`.
    pub fn get(&self, key: &ContainerKey) -> Option<&Assignment> {
        self.containers
            .iter()
            .find(|a| a.pod_uid == key.pod_uid && a.container == key.container)
    }

    /// Builds the list from per-provider maps.
    pub fn collect(
        cpus: &BTreeMap<ContainerKey, CpuSet>,
        affinity: &BTreeMap<ContainerKey, NumaMask>,
        memory: &BTreeMap<ContainerKey, MemoryAssignment>,
        devices: &BTreeMap<ContainerKey, BTreeMap<String, Vec<String>>>,
        observed: &BTreeMap<ContainerKey, Vec<ObservedDevice>>,
    ) -> Assignments {
        let mut by_key: BTreeMap<&ContainerKey, Assignment> = BTreeMap::new();
        for (k, v) in cpus {
            by_key.entry(k).or_insert_with(|| Assignment::empty(k)).cpus = Some(v.clone());
        }
        for (k, v) in affinity {
            by_key
                .entry(k)
                .or_insert_with(|| Assignment::empty(k))
                .affinity = Some(*v);
        }
        for (k, v) in memory {
            by_key
                .entry(k)
                .or_insert_with(|| Assignment::empty(k))
                .memory = Some(v.clone());
        }
        for (k, v) in devices {
            by_key
                .entry(k)
                .or_insert_with(|| Assignment::empty(k))
                .devices = Some(v.clone());
        }
        for (k, v) in observed {
            by_key
                .entry(k)
                .or_insert_with(|| Assignment::empty(k))
                .observed_devices = Some(v.clone());
        }
        Assignments {
            containers: by_key.into_values().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json_and_rejects_unknown_fields() {
        let k = ContainerKey::new("u1", "app");
        let a = Assignments::collect(
            &BTreeMap::from([(k.clone(), CpuSet::parse("2-3").unwrap())]),
            &BTreeMap::from([(k.clone(), NumaMask::single(0).unwrap())]),
            &BTreeMap::new(),
            &BTreeMap::from([(
                k.clone(),
                BTreeMap::from([("example.com/nic".to_string(), vec!["0000:3b:00.0".into()])]),
            )]),
            &BTreeMap::from([(
                k.clone(),
                vec![ObservedDevice {
                    source: crate::managers::observed_devices::DeviceSource::DeviceNode,
                    id: "/dev/nvidia0".into(),
                    numa: Some(1),
                    numa_unknown: None,
                }],
            )]),
        );
        let text = serde_json::to_string(&a).unwrap();
        let back: Assignments = serde_json::from_str(&text).unwrap();
        assert_eq!(back, a);
        assert_eq!(
            back.get(&k).unwrap().cpus.as_ref().unwrap().to_string(),
            "2-3"
        );
        assert!(
            text.contains(
                r#""observed_devices":[{"source":"device-node","id":"/dev/nvidia0","numa":1}]"#
            ),
            "{text}"
        );
        assert!(serde_json::from_str::<Assignments>(r#"{"containers":[],"x":1}"#).is_err());
    }
}
