//! The kubelet's device-plugin devices per NUMA node, for the NodeResourceTopology
//! (`topolet_core::report::device_inventory`): its `GetAllocatableResources` (every device it can
//! allocate, with the NUMA nodes its plugin reported) and its `List` (the devices its pods hold),
//! read together off every container's path.

use topolet_core::report::device_inventory::{DeviceInventory, ReportedDevice};

use super::api;

/// Every device of `entries`, one per id; a NUMA id below zero (no locality) or above what a
/// node id can be is left out of its nodes. Entries without a resource name or with an empty id
/// are skipped (the container path's parsing, `super::devices`, names them in its log).
pub fn reported(entries: &[api::ContainerDevices]) -> Vec<ReportedDevice> {
    let mut out = Vec::new();
    for e in entries {
        if e.resource_name.is_empty() {
            continue;
        }
        let nodes: Vec<usize> = e
            .topology
            .iter()
            .flat_map(|t| t.nodes.iter())
            .filter_map(|n| usize::try_from(n.id).ok())
            .collect();
        for id in e.device_ids.iter().filter(|id| !id.is_empty()) {
            out.push(ReportedDevice {
                resource: e.resource_name.clone(),
                id: id.clone(),
                nodes: nodes.clone(),
            });
        }
    }
    out
}

/// The inventory of the kubelet's two answers.
pub fn inventory(
    allocatable: &api::AllocatableResourcesResponse,
    list: &api::ListPodResourcesResponse,
) -> DeviceInventory {
    let held: Vec<api::ContainerDevices> = list
        .pod_resources
        .iter()
        .flat_map(|p| p.containers.iter())
        .flat_map(|c| c.devices.iter().cloned())
        .collect();
    DeviceInventory::new(&reported(&allocatable.devices), &reported(&held))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(resource: &str, ids: &[&str], nodes: &[i64]) -> api::ContainerDevices {
        api::ContainerDevices {
            resource_name: resource.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            topology: Some(api::TopologyInfo {
                nodes: nodes.iter().map(|&id| api::NumaNode { id }).collect(),
            }),
        }
    }

    #[test]
    fn the_kubelets_answers_become_counts_per_node() {
        let allocatable = api::AllocatableResourcesResponse {
            devices: vec![
                entry("gpu", &["a", "b"], &[1]),
                entry("gpu", &["c"], &[0]),
                entry("", &["x"], &[0]),
                entry("nic", &["", "n"], &[-1]),
            ],
            ..Default::default()
        };
        let list = api::ListPodResourcesResponse {
            pod_resources: vec![api::PodResources {
                name: "p".into(),
                namespace: "ns".into(),
                containers: vec![api::ContainerResources {
                    name: "c".into(),
                    devices: vec![entry("gpu", &["b"], &[1])],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let inv = inventory(&allocatable, &list);
        assert_eq!(inv.per_node[&1]["gpu"].allocatable, 2);
        assert_eq!(inv.per_node[&1]["gpu"].used, 1);
        assert_eq!(inv.per_node[&0]["gpu"].allocatable, 1);
        assert_eq!(inv.per_node[&0].len(), 1, "no resource name: skipped");
        assert!(
            inv.per_node.values().all(|m| !m.contains_key("nic")),
            "no locality: no zone"
        );
    }
}
