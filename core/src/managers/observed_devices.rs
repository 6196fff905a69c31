//! Observed devices: the devices a container was really given, as the node says (its device
//! nodes, resolved through sysfs by the shell; the kubelet's PodResources answer: device-plugin
//! devices with their NUMA topology, DRA devices with the NUMA node the node's ResourceSlices
//! give them (`crate::kube::resource_slice`); later CDI devices), with the NUMA node each one
//! is attached to, or why it is not known. Owns the one place that
//! decides a container's device set ([`device_set`]) and the topology hints that set gives
//! ([`hints`]).
//!
//! The hint rule is the kubelet device manager's for devices already allocated to a container
//! (`pkg/kubelet/cm/devicemanager/topology_hints.go`, `GetTopologyHints`: "regenerating hints
//! for resource already allocated", through `generateDeviceTopologyHints` with the allocated
//! devices as the only available ones and the request equal to their number): every NUMA mask
//! that holds every one of the devices is a hint, and a hint is preferred when its mask is of the
//! minimal size that holds them. The kubelet measures that minimal size over every device of the
//! resource on the node; the observed set has no resource pool around it (the devices are
//! already the container's), so the set is its own pool and the minimal size is the number of
//! distinct nodes its devices sit on.
//!
//! Devices without NUMA locality (`numa_node` -1) fit every mask; a set none of whose devices
//! has locality gives no preference (the kubelet's `deviceHasTopologyAlignment` false → `nil`
//! hints). The kubelet, for a resource mixing devices with and without locality, counts the
//! latter in no mask and so ends with no hint at all (the container cannot be aligned); here
//! they are left out of the rule instead, so a device without locality never refuses a
//! container. A node id that is not one of the machine's nodes is treated as no locality too (the
//! shell validates ids against the topology and reports a bad one before it gets here).
//!
//! The pipeline (`crate::placement::pipeline`) asks for these hints only for a container with
//! something to align (exclusive CPUs or memory the memory manager pins): a shared container is
//! never refused for devices it already holds.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::managers::topology::hints::{node_subsets, NumaMask, ProviderHints, TopologyHint};

/// The resource name the observed devices' hints go by in the topology manager's merge and in
/// refusals. Not domain-prefixed, so no extended resource (`[devices]`) can take it.
pub const DEVICES_RESOURCE: &str = "devices";

/// Where a device was learnt from. Ordered by precedence: when two sources report the same
/// device, the first in this order is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceSource {
    /// A device node of the container (NRI `linux.devices`), resolved through
    /// `/sys/dev/{char,block}/MAJ:MIN` or a VFIO group.
    DeviceNode,
    /// A device-plugin device of the container in the kubelet's PodResources answer
    /// (`ContainerDevices`: resource name, device id, the NUMA nodes the plugin reported).
    PodResources,
    /// A DRA device of the container in the kubelet's PodResources answer
    /// (`DynamicResource`'s claim resources): driver, pool and device name, its NUMA node from
    /// the node's ResourceSlices (`crate::kube::resource_slice`), else unknown, saying why.
    Dra,
}

impl DeviceSource {
    /// The spelling in status and the state file (`device-node`, `pod-resources`, `dra`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceSource::DeviceNode => "device-node",
            DeviceSource::PodResources => "pod-resources",
            DeviceSource::Dra => "dra",
        }
    }
}

impl fmt::Display for DeviceSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One device a container was given.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedDevice {
    pub source: DeviceSource,
    /// What identifies it within its source: a device node's path (`/dev/nvidia0`), a PCI
    /// address for a VFIO group's device (`0000:3b:00.0`), `<resource>=<device id>` for a
    /// device-plugin device (`nvidia.com/gpu=GPU-4f1c…`, after CDI's `vendor/class=name`),
    /// `<driver>/<pool>/<device>` for a DRA device.
    pub id: String,
    /// The NUMA node it is attached to; `None`: no locality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa: Option<usize>,
    /// Why its NUMA node is not known (a DRA device its ResourceSlices do not place): such a
    /// device gives no hint, like one without locality, but it is not said to have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_unknown: Option<String>,
}

impl fmt::Display for ObservedDevice {
    /// `/dev/nvidia0 (device-node, numa 1)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.numa, &self.numa_unknown) {
            (Some(n), _) => write!(f, "{} ({}, numa {n})", self.id, self.source),
            (None, Some(why)) => write!(f, "{} ({}, numa unknown: {why})", self.id, self.source),
            (None, None) => write!(f, "{} ({}, no numa locality)", self.id, self.source),
        }
    }
}

/// A container's device set from everything its sources reported: one entry per id (the
/// source first in [`DeviceSource`]'s order wins), ordered by id.
pub fn device_set(reported: impl IntoIterator<Item = ObservedDevice>) -> Vec<ObservedDevice> {
    let mut all: Vec<ObservedDevice> = reported.into_iter().collect();
    all.sort_by(|a, b| a.id.cmp(&b.id).then_with(|| a.source.cmp(&b.source)));
    all.dedup_by(|later, first| later.id == first.id);
    all
}

/// The NUMA nodes `devices` sit on, among the machine's `nodes` (ids elsewhere: no locality).
pub fn nodes_of(devices: &[ObservedDevice], nodes: &[usize]) -> BTreeSet<usize> {
    devices
        .iter()
        .filter_map(|d| d.numa)
        .filter(|n| nodes.contains(n))
        .collect()
}

/// The topology hints of a container holding `devices` on a machine with NUMA `nodes` (see the
/// module docs): empty for no devices; [`DEVICES_RESOURCE`] → `None` (no preference) when none
/// has locality; else every mask holding all their nodes, preferred at the minimal size.
pub fn hints(devices: &[ObservedDevice], nodes: &[usize]) -> ProviderHints {
    let mut out = ProviderHints::new();
    if devices.is_empty() {
        return out;
    }
    let need = nodes_of(devices, nodes);
    let Some(need) = NumaMask::from_ids(need).filter(|m| !m.is_empty()) else {
        out.insert(DEVICES_RESOURCE.to_string(), None);
        return out;
    };
    let list = node_subsets(nodes)
        .into_iter()
        .filter(|m| need.is_subset_of(*m))
        .map(|m| TopologyHint::new(m, m.count() == need.count()))
        .collect();
    out.insert(DEVICES_RESOURCE.to_string(), Some(list));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managers::topology::hints::{merge, TopologyOptions, TopologyPolicy};

    fn dev(id: &str, numa: Option<usize>) -> ObservedDevice {
        ObservedDevice {
            source: DeviceSource::DeviceNode,
            id: id.into(),
            numa,
            numa_unknown: None,
        }
    }

    fn m(ids: &[usize]) -> NumaMask {
        NumaMask::from_ids(ids.iter().copied()).expect("small")
    }

    fn h(ids: &[usize], preferred: bool) -> TopologyHint {
        TopologyHint::new(m(ids), preferred)
    }

    fn only(hints: ProviderHints) -> Option<Vec<TopologyHint>> {
        assert_eq!(hints.len(), 1, "{hints:?}");
        hints
            .get(DEVICES_RESOURCE)
            .cloned()
            .expect("the devices' entry")
    }

    #[test]
    fn no_devices_no_hints_and_no_locality_no_preference() {
        assert!(hints(&[], &[0, 1]).is_empty());
        assert_eq!(only(hints(&[dev("/dev/fuse0", None)], &[0, 1])), None);
        // A node the machine does not have counts as no locality.
        assert_eq!(only(hints(&[dev("/dev/x", Some(7))], &[0, 1])), None);
    }

    /// Device nodes and the kubelet's PodResources merged: every device kept with its source,
    /// the sources' serde spellings the status shows, a DRA device (no NUMA) left out of the rule.
    #[test]
    fn sources_merge_and_their_hints() {
        let from = |source, id: &str, numa| ObservedDevice {
            source,
            id: id.into(),
            numa,
            numa_unknown: None,
        };
        let set = device_set([
            from(DeviceSource::Dra, "gpu.example/node-a/gpu-1", None),
            from(
                DeviceSource::PodResources,
                "topolet.test/gpu=dev-0",
                Some(1),
            ),
            from(DeviceSource::DeviceNode, "/dev/nvidia0", Some(1)),
            // The same device reported twice by one source: kept once.
            from(
                DeviceSource::PodResources,
                "topolet.test/gpu=dev-0",
                Some(1),
            ),
        ]);
        let sources: Vec<&str> = set.iter().map(|d| d.source.as_str()).collect();
        assert_eq!(sources, ["device-node", "dra", "pod-resources"]);
        for d in &set {
            let json = serde_json::to_string(&d.source).unwrap();
            assert_eq!(json, format!("\"{}\"", d.source));
        }
        let got = only(hints(&set, &[0, 1]));
        assert_eq!(got, Some(vec![h(&[1], true), h(&[0, 1], false)]));
    }

    #[test]
    fn two_nodes_one_device() {
        let got = only(hints(&[dev("/dev/nvidia0", Some(1))], &[0, 1]));
        assert_eq!(got, Some(vec![h(&[1], true), h(&[0, 1], false)]));
    }

    #[test]
    fn four_nodes_devices_on_two_nodes() {
        let devices = [dev("/dev/nvidia0", Some(1)), dev("/dev/nvidia1", Some(3))];
        let got = only(hints(&devices, &[0, 1, 2, 3]));
        assert_eq!(
            got,
            Some(vec![
                h(&[1, 3], true),
                h(&[0, 1, 3], false),
                h(&[1, 2, 3], false),
                h(&[0, 1, 2, 3], false),
            ])
        );
    }

    #[test]
    fn a_device_without_locality_is_left_out_of_the_rule() {
        let devices = [dev("/dev/nvidia0", Some(2)), dev("/dev/null-ish", None)];
        let got = only(hints(&devices, &[0, 1, 2, 3]));
        let want: Vec<TopologyHint> = node_subsets(&[0, 1, 2, 3])
            .into_iter()
            .filter(|mask| mask.contains(2))
            .map(|mask| TopologyHint::new(mask, mask.count() == 1))
            .collect();
        assert_eq!(got, Some(want));
    }

    #[test]
    fn the_set_keeps_one_entry_per_id() {
        let set = device_set([
            dev("/dev/b", Some(1)),
            dev("/dev/a", None),
            dev("/dev/b", Some(1)),
        ]);
        assert_eq!(set, vec![dev("/dev/a", None), dev("/dev/b", Some(1))]);
    }

    /// The devices' hints merged with a CPU provider's under each policy: best-effort takes the
    /// devices' node, single-numa-node refuses devices on two nodes.
    #[test]
    fn merged_with_cpu_hints() {
        let nodes = [0, 1];
        let d = |a: usize, b: usize| if a == b { 10 } else { 20 };
        // 2 exclusive CPUs that fit on either node (the CPU manager's hints).
        let cpu = ProviderHints::from([(
            "cpu".to_string(),
            Some(vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]),
        )]);
        let run = |policy, devices: &[ObservedDevice]| {
            merge(
                policy,
                &nodes,
                d,
                &TopologyOptions::default(),
                &[cpu.clone(), hints(devices, &nodes)],
            )
        };
        let on_1 = [dev("/dev/nvidia1", Some(1))];
        for policy in [
            TopologyPolicy::BestEffort,
            TopologyPolicy::Restricted,
            TopologyPolicy::SingleNumaNode,
        ] {
            let r = run(policy, &on_1);
            assert!(r.admit, "{policy}");
            assert_eq!(r.hint, h(&[1], true), "{policy}");
        }
        let on_both = [dev("/dev/nvidia0", Some(0)), dev("/dev/nvidia1", Some(1))];
        let r = run(TopologyPolicy::SingleNumaNode, &on_both);
        assert!(!r.admit, "{r:?}");
        let r = run(TopologyPolicy::BestEffort, &on_both);
        assert!(r.admit && r.hint.affinity == Some(m(&[0, 1])), "{r:?}");
        // No locality: the CPUs decide alone.
        let r = run(TopologyPolicy::SingleNumaNode, &[dev("/dev/x", None)]);
        assert!(r.admit && r.hint == h(&[0], true), "{r:?}");
    }
}
