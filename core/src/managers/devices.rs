//! Device hint provider: extended resources (`example.com/nic`) mapped by the `[devices]`
//! configuration to PCI device addresses, with the NUMA locality the topology read from sysfs.
//! Mirrors the kubelet device manager's topology side
//! (`pkg/kubelet/cm/devicemanager/topology_hints.go` `generateDeviceTopologyHints`,
//! `manager.go` `filterByAffinity`): hints are the node groups holding enough free devices,
//! preferred at the minimal group size that could hold the request on an idle machine; devices
//! without NUMA locality fit every group; a resource none of whose devices has locality gives no
//! preference. Assignments are stored per container; free devices are derived.

use std::collections::{BTreeMap, BTreeSet};

use crate::kube::container_key::ContainerKey;
use crate::machine::topology::Topology;
use crate::managers::topology::hints::{node_subsets, NumaMask, ProviderHints, TopologyHint};

/// `[devices]`: resource name → PCI addresses (`0000:3b:00.0`).
pub type DeviceConfig = BTreeMap<String, Vec<String>>;

/// A `[devices]` entry that does not fit the machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceConfigError {
    #[error("devices.\"{resource}\": pci device {address} does not exist on this machine")]
    UnknownDevice { resource: String, address: String },
    #[error("devices.\"{resource}\": pci device {address} is already given to {other}")]
    DuplicateDevice {
        resource: String,
        address: String,
        other: String,
    },
    #[error("devices.\"{0}\": resource name must be a domain-prefixed extended resource (vendor.com/name)")]
    BadResourceName(String),
}

/// Why devices could not be handed out or restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("container {container}: {requested} {resource} requested, {free} free")]
    Insufficient {
        container: ContainerKey,
        resource: String,
        requested: u64,
        free: usize,
    },
    #[error("container {container}: device {address} of {resource} is unknown or already in use")]
    Unavailable {
        container: ContainerKey,
        resource: String,
        address: String,
    },
}

/// One configured device.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dev {
    address: String,
    numa: Option<usize>,
}

/// The device provider: configured devices per resource and who holds which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceHints {
    nodes: Vec<usize>,
    devices: BTreeMap<String, Vec<Dev>>,
    /// Container → resource → addresses held.
    assignments: BTreeMap<ContainerKey, BTreeMap<String, Vec<String>>>,
}

impl DeviceHints {
    /// Validate `config` against the topology's PCI devices.
    pub fn new(config: &DeviceConfig, topology: &Topology) -> Result<Self, DeviceConfigError> {
        let known: BTreeMap<&str, Option<usize>> = topology
            .devices()
            .iter()
            .map(|d| (d.address.as_str(), d.numa))
            .collect();
        let mut owner: BTreeMap<String, String> = BTreeMap::new();
        let mut devices = BTreeMap::new();
        for (resource, addresses) in config {
            if !resource.contains('/') || resource.starts_with('/') || resource.ends_with('/') {
                return Err(DeviceConfigError::BadResourceName(resource.clone()));
            }
            let mut list = Vec::new();
            for address in addresses {
                let numa = *known.get(address.as_str()).ok_or_else(|| {
                    DeviceConfigError::UnknownDevice {
                        resource: resource.clone(),
                        address: address.clone(),
                    }
                })?;
                if let Some(other) = owner.insert(address.clone(), resource.clone()) {
                    return Err(DeviceConfigError::DuplicateDevice {
                        resource: resource.clone(),
                        address: address.clone(),
                        other,
                    });
                }
                list.push(Dev {
                    address: address.clone(),
                    numa,
                });
            }
            list.sort_by(|a, b| a.numa.cmp(&b.numa).then_with(|| a.address.cmp(&b.address)));
            devices.insert(resource.clone(), list);
        }
        Ok(DeviceHints {
            nodes: topology.numa_ids().collect(),
            devices,
            assignments: BTreeMap::new(),
        })
    }

    /// Whether this provider manages `resource`.
    pub fn manages(&self, resource: &str) -> bool {
        self.devices.contains_key(resource)
    }

    pub fn assignment(&self, key: &ContainerKey) -> Option<&BTreeMap<String, Vec<String>>> {
        self.assignments.get(key)
    }

    /// Every container's devices, by resource.
    pub fn assignments(&self) -> &BTreeMap<ContainerKey, BTreeMap<String, Vec<String>>> {
        &self.assignments
    }

    fn used(&self) -> BTreeSet<&str> {
        self.assignments
            .values()
            .flat_map(|per| per.values().flatten().map(String::as_str))
            .collect()
    }

    fn free_devices<'a>(&'a self, resource: &str, used: &BTreeSet<&str>) -> Vec<&'a Dev> {
        self.devices
            .get(resource)
            .map(|list| {
                list.iter()
                    .filter(|d| !used.contains(d.address.as_str()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Free devices per node and resource (devices without locality are not counted), for
    /// refusal messages.
    pub fn free_per_node(&self) -> BTreeMap<usize, BTreeMap<String, u64>> {
        let used = self.used();
        let mut out: BTreeMap<usize, BTreeMap<String, u64>> = BTreeMap::new();
        for resource in self.devices.keys() {
            for &n in &self.nodes {
                out.entry(n).or_default().insert(resource.clone(), 0);
            }
            for d in self.free_devices(resource, &used) {
                if let Some(n) = d.numa {
                    *out.entry(n)
                        .or_default()
                        .entry(resource.clone())
                        .or_insert(0) += 1;
                }
            }
        }
        out
    }

    /// Configured devices per node and resource (devices without locality are not counted).
    pub fn capacity_per_node(&self) -> BTreeMap<usize, BTreeMap<String, u64>> {
        let mut out: BTreeMap<usize, BTreeMap<String, u64>> = BTreeMap::new();
        for (resource, list) in &self.devices {
            for n in list.iter().filter_map(|d| d.numa) {
                *out.entry(n)
                    .or_default()
                    .entry(resource.clone())
                    .or_insert(0) += 1;
            }
        }
        out
    }

    /// Hints for the managed resources in `requests` (resource → count). A container that already
    /// holds devices gets the nodes of those devices, preferred.
    pub fn hints(
        &self,
        key: Option<&ContainerKey>,
        requests: &BTreeMap<String, u64>,
    ) -> ProviderHints {
        let used = self.used();
        let held = key.and_then(|k| self.assignments.get(k));
        let mut out = ProviderHints::new();
        for (resource, &count) in requests {
            let Some(all) = self.devices.get(resource) else {
                continue;
            };
            if count == 0 {
                continue;
            }
            if let Some(addresses) = held.and_then(|h| h.get(resource)) {
                let mask = NumaMask::from_ids(
                    all.iter()
                        .filter(|d| addresses.contains(&d.address))
                        .filter_map(|d| d.numa),
                );
                out.insert(
                    resource.clone(),
                    mask.filter(|m| !m.is_empty())
                        .map(|m| vec![TopologyHint::new(m, true)]),
                );
                continue;
            }
            if all.iter().all(|d| d.numa.is_none()) {
                out.insert(resource.clone(), None);
                continue;
            }
            let free = self.free_devices(resource, &used);
            let in_mask = |list: &mut dyn Iterator<Item = &Dev>, mask: NumaMask| {
                list.filter(|d| d.numa.is_none_or(|n| mask.contains(n)))
                    .count() as u64
            };
            let mut min_count = u32::MAX;
            let mut fitting = Vec::new();
            for mask in node_subsets(&self.nodes) {
                if in_mask(&mut all.iter(), mask) < count {
                    continue;
                }
                min_count = min_count.min(mask.count());
                if in_mask(&mut free.iter().copied(), mask) >= count {
                    fitting.push(mask);
                }
            }
            out.insert(
                resource.clone(),
                Some(
                    fitting
                        .into_iter()
                        .map(|m| TopologyHint::new(m, m.count() == min_count))
                        .collect(),
                ),
            );
        }
        out
    }

    /// Hand devices of every managed resource in `requests` to `key`: first free devices on the
    /// affinity's nodes, then devices without locality, then the rest (as the kubelet's
    /// `filterByAffinity`), lowest node and address first. Idempotent for a key that holds
    /// devices already.
    pub fn allocate(
        &mut self,
        key: &ContainerKey,
        requests: &BTreeMap<String, u64>,
        affinity: Option<NumaMask>,
    ) -> Result<BTreeMap<String, Vec<String>>, DeviceError> {
        if let Some(held) = self.assignments.get(key) {
            return Ok(held.clone());
        }
        let used = self.used();
        let mut picked: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (resource, &count) in requests {
            if !self.manages(resource) || count == 0 {
                continue;
            }
            let mut free = self.free_devices(resource, &used);
            if (free.len() as u64) < count {
                return Err(DeviceError::Insufficient {
                    container: key.clone(),
                    resource: resource.clone(),
                    requested: count,
                    free: free.len(),
                });
            }
            let rank = |d: &Dev| match (d.numa, affinity) {
                (Some(n), Some(a)) if a.contains(n) => 0,
                (None, _) => 1,
                (Some(_), None) => 0,
                _ => 2,
            };
            free.sort_by(|a, b| {
                rank(a)
                    .cmp(&rank(b))
                    .then_with(|| a.numa.cmp(&b.numa))
                    .then_with(|| a.address.cmp(&b.address))
            });
            let take = usize::try_from(count).unwrap_or(usize::MAX);
            picked.insert(
                resource.clone(),
                free.iter().take(take).map(|d| d.address.clone()).collect(),
            );
        }
        if !picked.is_empty() {
            self.assignments.insert(key.clone(), picked.clone());
        }
        Ok(picked)
    }

    /// Return `key`'s devices.
    pub fn release(&mut self, key: &ContainerKey) -> Option<BTreeMap<String, Vec<String>>> {
        self.assignments.remove(key)
    }

    /// Put back a journaled assignment; every device must be configured for its resource and free.
    pub fn restore(
        &mut self,
        key: &ContainerKey,
        held: BTreeMap<String, Vec<String>>,
    ) -> Result<(), DeviceError> {
        if self.assignments.get(key) == Some(&held) {
            return Ok(());
        }
        let mut others = self.clone();
        others.assignments.remove(key);
        let used = others.used();
        let mut seen = BTreeSet::new();
        for (resource, addresses) in &held {
            for address in addresses {
                let known = self
                    .devices
                    .get(resource)
                    .is_some_and(|l| l.iter().any(|d| &d.address == address));
                if !known || used.contains(address.as_str()) || !seen.insert(address.clone()) {
                    return Err(DeviceError::Unavailable {
                        container: key.clone(),
                        resource: resource.clone(),
                        address: address.clone(),
                    });
                }
            }
        }
        self.assignments.insert(key.clone(), held);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::topology::{Device, SyntheticSpec};

    fn machine() -> Topology {
        let spec = SyntheticSpec {
            sockets: 2,
            numa_per_socket: 1,
            l3_per_numa: 1,
            cores_per_l3: 2,
            threads_per_core: 1,
            memory_per_node: 1 << 30,
        };
        let mut raw = spec.raw();
        raw.devices = vec![
            Device {
                address: "0000:01:00.0".into(),
                numa: Some(0),
            },
            Device {
                address: "0000:01:00.1".into(),
                numa: Some(0),
            },
            Device {
                address: "0000:81:00.0".into(),
                numa: Some(1),
            },
            Device {
                address: "0000:82:00.0".into(),
                numa: None,
            },
        ];
        Topology::build(&raw).expect("machine")
    }

    fn m(ids: &[usize]) -> NumaMask {
        NumaMask::from_ids(ids.iter().copied()).expect("small")
    }

    fn nic(n: u64) -> BTreeMap<String, u64> {
        BTreeMap::from([("example.com/nic".to_string(), n)])
    }

    fn provider() -> DeviceHints {
        let config = DeviceConfig::from([(
            "example.com/nic".to_string(),
            vec![
                "0000:01:00.0".into(),
                "0000:01:00.1".into(),
                "0000:81:00.0".into(),
            ],
        )]);
        DeviceHints::new(&config, &machine()).expect("valid")
    }

    #[test]
    fn config_is_validated() {
        let topo = machine();
        let bad =
            DeviceConfig::from([("example.com/nic".to_string(), vec!["0000:ff:00.0".into()])]);
        let e = DeviceHints::new(&bad, &topo).expect_err("unknown");
        assert!(e.to_string().contains("0000:ff:00.0"), "{e}");
        let twice = DeviceConfig::from([
            ("a.com/x".to_string(), vec!["0000:01:00.0".into()]),
            ("b.com/y".to_string(), vec!["0000:01:00.0".into()]),
        ]);
        assert!(matches!(
            DeviceHints::new(&twice, &topo),
            Err(DeviceConfigError::DuplicateDevice { .. })
        ));
        let name = DeviceConfig::from([("nic".to_string(), vec![])]);
        assert!(DeviceHints::new(&name, &topo).is_err());
    }

    #[test]
    fn hints_follow_free_devices() {
        let mut p = provider();
        let h = p.hints(None, &nic(2));
        assert_eq!(
            h["example.com/nic"],
            Some(vec![
                TopologyHint::new(m(&[0]), true),
                TopologyHint::new(m(&[0, 1]), false),
            ])
        );
        let got = p
            .allocate(&ContainerKey::new("u", "a"), &nic(1), Some(m(&[1])))
            .expect("one");
        assert_eq!(got["example.com/nic"], vec!["0000:81:00.0".to_string()]);
        // Two left, both on node 0.
        assert_eq!(
            p.hints(None, &nic(2))["example.com/nic"],
            Some(vec![
                TopologyHint::new(m(&[0]), true),
                TopologyHint::new(m(&[0, 1]), false),
            ])
        );
        assert_eq!(p.hints(None, &nic(3))["example.com/nic"], Some(vec![]));
        assert_eq!(p.free_per_node()[&0]["example.com/nic"], 2);
        assert_eq!(p.free_per_node()[&1]["example.com/nic"], 0);
        // Unmanaged resources are not ours.
        assert!(p
            .hints(None, &BTreeMap::from([("other.com/x".to_string(), 1)]))
            .is_empty());
    }

    #[test]
    fn allocate_release_restore() {
        let mut p = provider();
        let before = p.clone();
        let k = ContainerKey::new("u", "a");
        let got = p.allocate(&k, &nic(2), Some(m(&[0]))).expect("two");
        assert_eq!(
            got["example.com/nic"],
            vec!["0000:01:00.0".to_string(), "0000:01:00.1".to_string()]
        );
        assert_eq!(p.allocate(&k, &nic(2), None).expect("idempotent"), got);
        assert!(matches!(
            p.allocate(&ContainerKey::new("u", "b"), &nic(2), None),
            Err(DeviceError::Insufficient { free: 1, .. })
        ));
        let held = p.release(&k).expect("held");
        assert_eq!(p, before);
        p.restore(&k, held.clone()).expect("restore");
        assert!(p.restore(&ContainerKey::new("u", "b"), held).is_err());
    }
}
