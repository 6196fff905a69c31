//! The device-plugin devices of this node per NUMA node, as the kubelet's PodResources API tells
//! them: how many each resource has on each node (`GetAllocatableResources`) and how many of those
//! the node's pods hold (`List`). The NodeResourceTopology zones publish them
//! ([`crate::report::nrt::add_devices`]) the way node-feature-discovery's topology updater does
//! from the same two calls, so the scheduler's `NodeResourceTopologyMatch` sees on which node a
//! GPU is still free.
//!
//! A device counts in a zone when its plugin reported exactly one NUMA node for it (the
//! kubelet's `TopologyInfo`); one reported on several nodes or none belongs to no zone and is not
//! published (it fits every zone, as the topology manager treats it). A device the pods hold
//! that the kubelet does not list as allocatable (unhealthy since) is not counted: `available`
//! never goes below zero. DRA devices are not here: the scheduler allocates them from
//! ResourceSlices, not from the NodeResourceTopology.

use std::collections::{BTreeMap, BTreeSet};

/// One device as the kubelet reports it: its resource, its id and the NUMA nodes its plugin
/// gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedDevice {
    pub resource: String,
    pub id: String,
    pub nodes: Vec<usize>,
}

/// One resource's devices on one NUMA node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCount {
    /// Devices the kubelet can allocate there.
    pub allocatable: u64,
    /// Of those, devices a pod holds.
    pub used: u64,
}

/// NUMA node → resource → counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceInventory {
    pub per_node: BTreeMap<usize, BTreeMap<String, DeviceCount>>,
}

impl DeviceInventory {
    /// The inventory of `allocatable` (the kubelet's allocatable devices) with `held` (every
    /// device a pod's container holds, each once however many containers name it).
    pub fn new(allocatable: &[ReportedDevice], held: &[ReportedDevice]) -> DeviceInventory {
        let held: BTreeSet<(&str, &str)> = held
            .iter()
            .map(|d| (d.resource.as_str(), d.id.as_str()))
            .collect();
        let mut seen = BTreeSet::new();
        let mut per_node: BTreeMap<usize, BTreeMap<String, DeviceCount>> = BTreeMap::new();
        for d in allocatable {
            let [node] = d.nodes[..] else {
                continue;
            };
            if !seen.insert((d.resource.as_str(), d.id.as_str())) {
                continue;
            }
            let c = per_node
                .entry(node)
                .or_default()
                .entry(d.resource.clone())
                .or_default();
            c.allocatable += 1;
            if held.contains(&(d.resource.as_str(), d.id.as_str())) {
                c.used += 1;
            }
        }
        DeviceInventory { per_node }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(resource: &str, id: &str, nodes: &[usize]) -> ReportedDevice {
        ReportedDevice {
            resource: resource.into(),
            id: id.into(),
            nodes: nodes.to_vec(),
        }
    }

    #[test]
    fn devices_count_on_their_one_node_and_held_ones_are_used() {
        let allocatable = [
            dev("gpu", "a", &[0]),
            dev("gpu", "b", &[1]),
            dev("gpu", "c", &[1]),
            dev("nic", "x", &[1]),
            // Several nodes or none: no zone.
            dev("gpu", "d", &[0, 1]),
            dev("gpu", "e", &[]),
            // Listed twice: once.
            dev("gpu", "a", &[0]),
        ];
        let held = [
            dev("gpu", "b", &[1]),
            dev("gpu", "b", &[1]),
            // Held but no longer allocatable (unhealthy): not counted.
            dev("gpu", "z", &[1]),
        ];
        let inv = DeviceInventory::new(&allocatable, &held);
        let c = |node: usize, r: &str| inv.per_node[&node][r];
        assert_eq!(
            c(0, "gpu"),
            DeviceCount {
                allocatable: 1,
                used: 0
            }
        );
        assert_eq!(
            c(1, "gpu"),
            DeviceCount {
                allocatable: 2,
                used: 1
            }
        );
        assert_eq!(
            c(1, "nic"),
            DeviceCount {
                allocatable: 1,
                used: 0
            }
        );
        assert_eq!(inv.per_node.len(), 2);
    }
}
