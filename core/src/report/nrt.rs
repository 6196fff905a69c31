//! The NodeResourceTopology content (topology.node.k8s.io/v1alpha2, the CRD the scheduler
//! plugin `NodeResourceTopologyMatch` reads) of this node, derived from the machine, the status
//! report and the memory manager's and device provider's books. Pure and deterministic: the
//! shell (`topolet::cluster::nrt`) owns the object and its writes.
//!
//! What is published, and the rule each value follows:
//!
//! - one zone per NUMA node, named `node-<id>`, of type `Node` (the only zone type the scheduler
//!   plugin reads), with `costs` to every zone (itself included) from the kernel's NUMA
//!   distances;
//! - resources per zone, each with `capacity`, `allocatable` and `available`:
//!   - `cpu`: the zone's CPUs; minus the reserved ones; minus those held exclusively as well
//!     (what an exclusive, Guaranteed container can still get; the shared pool counts as
//!     available, as the kubelet's CPU manager sees it);
//!   - `memory` and `hugepages-<size>`: the node's memory (bytes) and pages; minus hugepages
//!     and `[memory] reserved`; minus what the memory manager pinned;
//!   - every `[devices]` resource with a device on the node: its devices, all allocatable,
//!     minus those handed out;
//!   - every device-plugin resource the kubelet reports on the node (its PodResources API:
//!     [`crate::report::device_inventory`], [`add_devices`]): its devices, all allocatable,
//!     minus those the node's pods hold;
//! - top-level attributes with the kubelet's spellings, the only thing the plugin filters on
//!   besides the zones ([`policy_attributes`]);
//! - topolet's own zone attribute [`LARGEST_BLOCK_ATTRIBUTE`]: how many CPUs the largest free
//!   aligned block of the zone has (whole free cores within one L3 group, as `topolet status`
//!   shows it): an exclusive request above it cannot be core- and cache-aligned there.

use serde::{Deserialize, Serialize};

use crate::machine::topology::Topology;
use crate::placement::books::Books;
use crate::report::status::Status;

/// The zone type the scheduler plugin reads.
pub const ZONE_TYPE: &str = "Node";
/// topolet's zone attribute: CPUs in the largest free whole-core block within one L3 group.
pub const LARGEST_BLOCK_ATTRIBUTE: &str = "topoletLargestFreeAlignedCPUs";
/// Top-level attribute names (scheduler-plugins' `noderesourcetopology` README).
pub const POLICY_ATTRIBUTE: &str = "topologyManagerPolicy";
pub const SCOPE_ATTRIBUTE: &str = "topologyManagerScope";
pub const MAX_NUMA_NODES_ATTRIBUTE: &str = "topologyManagerMaxNUMANodes";

/// The object's content besides its metadata: serialized as the CRD's fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NrtContent {
    /// Deprecated in v1alpha2 but still required by its schema; older plugins read it.
    pub topology_policies: Vec<String>,
    pub zones: Vec<Zone>,
    pub attributes: Vec<Attribute>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zone {
    pub name: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub costs: Vec<Cost>,
    pub attributes: Vec<Attribute>,
    pub resources: Vec<ResourceInfo>,
}

/// Adds the kubelet's device-plugin devices to each zone they sit on: capacity and allocatable
/// the devices the kubelet can allocate there, available those no pod holds. A resource the zone
/// already has (a `[devices]` resource of topolet's own) is left as it is.
pub fn add_devices(
    content: &mut NrtContent,
    inventory: &crate::report::device_inventory::DeviceInventory,
) {
    for (node, per) in &inventory.per_node {
        let name = zone_name(*node);
        let Some(zone) = content.zones.iter_mut().find(|zone| zone.name == name) else {
            continue;
        };
        for (resource, c) in per {
            if zone.resources.iter().any(|r| &r.name == resource) {
                continue;
            }
            zone.resources.push(ResourceInfo {
                name: resource.clone(),
                capacity: c.allocatable.to_string(),
                allocatable: c.allocatable.to_string(),
                available: c.allocatable.saturating_sub(c.used).to_string(),
            });
        }
        zone.resources.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

/// Adds reclaimed CPU to each zone: capacity the zone's pool, allocatable and available the
/// zone's advertised amount (milli-CPU, the extended resource's unit): the formula's, damped like
/// the Node's (`crate::reclaimed::zones`), so a usage that moves a little does not rewrite the
/// object. Nothing while the feature is not on, nor for a zone with no advertised amount yet.
pub fn add_reclaimed(content: &mut NrtContent, report: &crate::reclaimed::ReclaimedStatus) {
    if report.state != "on" {
        return;
    }
    for z in &report.zones {
        let Some(advertised) = z.advertised_millis else {
            continue;
        };
        let name = zone_name(z.numa_node);
        if let Some(zone) = content.zones.iter_mut().find(|zone| zone.name == name) {
            let amount = advertised.to_string();
            zone.resources.push(ResourceInfo {
                name: report.resource.clone(),
                capacity: z.terms.pool_millis.to_string(),
                allocatable: amount.clone(),
                available: amount,
            });
        }
    }
}

/// While reclaimed CPU is on but has advertised nothing since the start (its usage window is
/// filling: the Node's amount and every zone's are still `None`), each zone keeps the reclaimed
/// resource the object held when topolet started (`previous`: what the instance before it wrote),
/// as the Node keeps its amount over a restart under the DaemonSet
/// (`[reclaimed] withdraw_on_stop`). Without it a restarted topolet's first write took the zones'
/// amounts out and its first advertisement put them back: two full-object writes per node and
/// restart (docs/src/fleet.md). Call after [`add_reclaimed`]; nothing is carried once any amount
/// was advertised, nor while the feature is off or withdrawn.
pub fn carry_reclaimed(
    content: &mut NrtContent,
    previous: &NrtContent,
    report: &crate::reclaimed::ReclaimedStatus,
) {
    if report.state != "on"
        || report.advertised_millis.is_some()
        || report.zones.iter().any(|z| z.advertised_millis.is_some())
    {
        return;
    }
    for zone in &mut content.zones {
        if zone.resources.iter().any(|r| r.name == report.resource) {
            continue;
        }
        let kept = previous
            .zones
            .iter()
            .filter(|p| p.name == zone.name)
            .flat_map(|p| p.resources.iter())
            .find(|r| r.name == report.resource);
        if let Some(r) = kept {
            zone.resources.push(r.clone());
        }
    }
}

/// Quantities in the Kubernetes spelling: CPUs as a count, memory and hugepages in bytes,
/// devices as a count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceInfo {
    pub name: String,
    pub capacity: String,
    pub allocatable: String,
    pub available: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    pub name: String,
    pub value: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribute {
    pub name: String,
    pub value: String,
}

/// The zone name of NUMA node `id`.
pub fn zone_name(id: usize) -> String {
    format!("node-{id}")
}

/// The kubelet's topology-manager settings as the scheduler plugin reads them: attribute
/// (`topologyManagerPolicy`: `none`, `best-effort`, `restricted`, `single-numa-node`;
/// `topologyManagerScope`: `container`, `pod`; `topologyManagerMaxNUMANodes`, the kubelet's
/// `max-allowable-numa-nodes`), and the deprecated `topologyPolicies` value of the same
/// settings (`None`, `BestEffortContainerLevel`, …, `SingleNUMANodePodLevel`).
/// `policy` and `scope` are topolet's config spellings, which are the kubelet's.
pub fn policy_attributes(
    policy: &str,
    scope: &str,
    max_numa_nodes: usize,
) -> (Vec<Attribute>, String) {
    let level = if scope == "pod" {
        "PodLevel"
    } else {
        "ContainerLevel"
    };
    let deprecated = match policy {
        "single-numa-node" => format!("SingleNUMANode{level}"),
        "restricted" => format!("Restricted{level}"),
        "best-effort" => format!("BestEffort{level}"),
        _ => "None".to_string(),
    };
    let attr = |name: &str, value: String| Attribute {
        name: name.to_string(),
        value,
    };
    (
        vec![
            attr(POLICY_ATTRIBUTE, policy.to_string()),
            attr(SCOPE_ATTRIBUTE, scope.to_string()),
            attr(MAX_NUMA_NODES_ATTRIBUTE, max_numa_nodes.to_string()),
        ],
        deprecated,
    )
}

/// The content for `topology` as `status` and `books` describe it.
pub fn build(
    topology: &Topology,
    status: &Status,
    books: &Books,
    max_numa_nodes: usize,
) -> NrtContent {
    let ids: Vec<usize> = status.numa_nodes.iter().map(|n| n.id).collect();
    let zones = status
        .numa_nodes
        .iter()
        .map(|n| {
            let count = |c: usize| c.to_string();
            let mut resources = vec![ResourceInfo {
                name: "cpu".into(),
                capacity: count(n.cpus.len()),
                allocatable: count(n.cpus.len().saturating_sub(n.reserved.len())),
                available: count(n.free.len()),
            }];
            if let Some(per) = books.get(&n.id) {
                resources.extend(per.iter().map(|(name, b)| ResourceInfo {
                    name: name.clone(),
                    capacity: b.capacity.to_string(),
                    allocatable: b.allocatable.to_string(),
                    available: b.available.to_string(),
                }));
            }
            resources.sort_by(|a, b| a.name.cmp(&b.name));
            Zone {
                name: zone_name(n.id),
                type_: ZONE_TYPE.into(),
                costs: ids
                    .iter()
                    .map(|&other| Cost {
                        name: zone_name(other),
                        value: i64::from(topology.distance(n.id, other)),
                    })
                    .collect(),
                attributes: vec![Attribute {
                    name: LARGEST_BLOCK_ATTRIBUTE.into(),
                    value: n.largest_l3_block.len().to_string(),
                }],
                resources,
            }
        })
        .collect();
    let (attributes, deprecated) = policy_attributes(
        &status.policies.topology,
        &status.policies.topology_scope,
        max_numa_nodes,
    );
    NrtContent {
        topology_policies: vec![deprecated],
        zones,
        attributes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::machine::cpuset::CpuSet;
    use crate::machine::topology::SyntheticSpec;
    use crate::placement::books::Book;
    use crate::report::status::{self, Policies, Snapshot, StatusInput};

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    fn two_nodes() -> Topology {
        SyntheticSpec {
            sockets: 1,
            numa_per_socket: 2,
            l3_per_numa: 1,
            cores_per_l3: 2,
            threads_per_core: 2,
            memory_per_node: 1 << 30,
        }
        .build()
    }

    fn status_of(topology: &Topology, assignable: &str, policy: &str, scope: &str) -> Status {
        status::build(
            topology,
            StatusInput {
                policies: Policies {
                    cpu: "static".into(),
                    topology: policy.into(),
                    topology_scope: scope.into(),
                    memory: "none".into(),
                },
                snapshot: Snapshot {
                    reserved: set("0"),
                    assignable: set(assignable),
                    ..Snapshot::default()
                },
                ..StatusInput::default()
            },
        )
    }

    #[test]
    fn zones_follow_the_books_and_the_distances() {
        let t = two_nodes();
        let cpus0 = t.numa_cpus(0);
        let cpus1 = t.numa_cpus(1);
        // Node 0: CPU 0 reserved, the rest free; node 1: one whole core taken.
        let core1 = t
            .core_cpus(t.cpu(cpus1.first().unwrap()).unwrap().core)
            .clone();
        let mut free = cpus0.clone();
        free.remove(0);
        free.extend_from(&cpus1.difference(&core1));
        let st = status_of(&t, &free.to_string(), "single-numa-node", "container");
        let books: Books = BTreeMap::from([(
            1,
            BTreeMap::from([(
                "memory".to_string(),
                Book {
                    capacity: 100,
                    allocatable: 90,
                    available: 40,
                },
            )]),
        )]);
        let c = build(&t, &st, &books, 8);
        assert_eq!(c.topology_policies, ["SingleNUMANodeContainerLevel"]);
        assert_eq!(
            c.attributes,
            [
                ("topologyManagerPolicy", "single-numa-node"),
                ("topologyManagerScope", "container"),
                ("topologyManagerMaxNUMANodes", "8")
            ]
            .map(|(n, v)| Attribute {
                name: n.into(),
                value: v.into()
            })
        );
        assert_eq!(c.zones.len(), 2);
        let z0 = &c.zones[0];
        assert_eq!((z0.name.as_str(), z0.type_.as_str()), ("node-0", "Node"));
        assert_eq!(
            z0.resources,
            [ResourceInfo {
                name: "cpu".into(),
                capacity: cpus0.len().to_string(),
                allocatable: (cpus0.len() - 1).to_string(),
                available: (cpus0.len() - 1).to_string(),
            }]
        );
        // Only the core without CPU 0 is whole and free on node 0.
        assert_eq!(z0.attributes[0].name, LARGEST_BLOCK_ATTRIBUTE);
        assert_eq!(z0.attributes[0].value, "2");
        assert_eq!(
            z0.costs,
            [
                Cost {
                    name: "node-0".into(),
                    value: 10
                },
                Cost {
                    name: "node-1".into(),
                    value: i64::from(t.distance(0, 1))
                }
            ]
        );
        let z1 = &c.zones[1];
        let names: Vec<&str> = z1.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["cpu", "memory"], "sorted by name");
        assert_eq!(z1.resources[0].available, "2");
        assert_eq!(z1.resources[0].allocatable, "4");
        assert_eq!(
            (
                z1.resources[1].capacity.as_str(),
                z1.resources[1].allocatable.as_str(),
                z1.resources[1].available.as_str()
            ),
            ("100", "90", "40")
        );
        // Deterministic: the same input, the same content.
        assert_eq!(build(&t, &st, &books, 8), c);
    }

    #[test]
    fn policy_spellings_are_the_kubelets() {
        for (policy, scope, deprecated) in [
            ("none", "container", "None"),
            ("best-effort", "container", "BestEffortContainerLevel"),
            ("best-effort", "pod", "BestEffortPodLevel"),
            ("restricted", "container", "RestrictedContainerLevel"),
            ("restricted", "pod", "RestrictedPodLevel"),
            ("single-numa-node", "pod", "SingleNUMANodePodLevel"),
        ] {
            let (attrs, d) = policy_attributes(policy, scope, 16);
            assert_eq!(d, deprecated);
            assert_eq!(attrs[0].value, policy);
            assert_eq!(attrs[1].value, scope);
            assert_eq!(attrs[2].value, "16");
        }
    }

    #[test]
    fn the_kubelets_devices_are_counted_on_their_zone_beside_topolets_own() {
        use crate::report::device_inventory::{DeviceInventory, ReportedDevice};
        let t = two_nodes();
        let st = status_of(&t, "", "none", "pod");
        let books: Books = BTreeMap::from([(
            1,
            BTreeMap::from([(
                "gpu".to_string(),
                Book {
                    capacity: 4,
                    allocatable: 4,
                    available: 4,
                },
            )]),
        )]);
        let mut content = build(&t, &st, &books, 8);
        let dev = |r: &str, id: &str, n: usize| ReportedDevice {
            resource: r.into(),
            id: id.into(),
            nodes: vec![n],
        };
        let inv = DeviceInventory::new(
            &[
                dev("nic", "a", 1),
                dev("nic", "b", 1),
                dev("gpu", "g", 1),
                dev("nic", "c", 7),
            ],
            &[dev("nic", "a", 1)],
        );
        add_devices(&mut content, &inv);
        let z1 = &content.zones[1];
        let nic = z1.resources.iter().find(|r| r.name == "nic").unwrap();
        assert_eq!(
            (
                nic.capacity.as_str(),
                nic.allocatable.as_str(),
                nic.available.as_str()
            ),
            ("2", "2", "1")
        );
        let gpu = z1.resources.iter().find(|r| r.name == "gpu").unwrap();
        assert_eq!(gpu.capacity, "4", "topolet's own [devices] books stay");
        let names: Vec<&str> = z1.resources.iter().map(|r| r.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(
            content.zones[0].resources.iter().all(|r| r.name != "nic"),
            "node 0 has none; node 7 is no zone"
        );
    }

    #[test]
    fn the_content_serializes_as_the_crd_fields() {
        let t = two_nodes();
        let st = status_of(&t, "", "none", "pod");
        let v = serde_json::to_value(build(&t, &st, &Books::new(), 8)).unwrap();
        assert_eq!(v["topologyPolicies"], serde_json::json!(["None"]));
        assert_eq!(v["zones"][1]["type"], "Node");
        assert_eq!(v["zones"][1]["resources"][0]["available"], "0");
        assert_eq!(v["attributes"][1]["value"], "pod");
    }

    #[test]
    fn reclaimed_zones_carry_the_advertised_amount_not_each_new_reading() {
        use crate::reclaimed::{ReclaimedStatus, Terms, ZoneTerms};
        let t = two_nodes();
        let st = status_of(&t, "", "none", "pod");
        let mut content = build(&t, &st, &Books::new(), 8);
        let zone = |n, used, advertised| ZoneTerms {
            numa_node: n,
            terms: Terms::compute(2000, used, 20),
            advertised_millis: advertised,
        };
        let mut report = ReclaimedStatus {
            state: "on".into(),
            resource: "topolet.io/reclaimed-cpu".into(),
            usage: "cpus".into(),
            node: Terms::default(),
            // Zone 0's reading moved to 1500m; what was written stays 1400m.
            zones: vec![zone(0, 100, Some(1400)), zone(1, 100, None)],
            advertised_millis: None,
            budget_millis: 0,
            batch_used_millis: 0,
            regular_now_millis: 0,
            batch: vec![],
            reserved: Default::default(),
            reserved_rule: String::new(),
            cpu_time: String::new(),
            problems: vec![],
        };
        let before = content.clone();
        add_reclaimed(&mut content, &report);
        let reclaimed = |c: &NrtContent, z: usize| {
            c.zones[z]
                .resources
                .iter()
                .find(|r| r.name == "topolet.io/reclaimed-cpu")
                .cloned()
        };
        let r0 = reclaimed(&content, 0).expect("zone 0 has the resource");
        assert_eq!(
            (
                r0.capacity.as_str(),
                r0.allocatable.as_str(),
                r0.available.as_str()
            ),
            ("2000", "1400", "1400")
        );
        assert_eq!(reclaimed(&content, 1), None, "nothing advertised yet");
        report.state = "withdrawn: usage readings fail".into();
        let mut off = before.clone();
        add_reclaimed(&mut off, &report);
        assert_eq!(off, before);
    }

    /// A restarted topolet whose window is filling keeps the zones' amounts its predecessor
    /// wrote (the object it read at start), so its first write is not a removal; once it
    /// advertised anything, or when the feature is off, nothing is carried.
    #[test]
    fn a_restart_keeps_the_previous_zone_amounts_until_it_advertises() {
        use crate::reclaimed::{ReclaimedStatus, Terms, ZoneTerms};
        let t = two_nodes();
        let st = status_of(&t, "", "none", "pod");
        let base = build(&t, &st, &Books::new(), 8);
        let zone = |n, advertised| ZoneTerms {
            numa_node: n,
            terms: Terms::compute(2000, 100, 20),
            advertised_millis: advertised,
        };
        let mut report = ReclaimedStatus {
            state: "on".into(),
            resource: "topolet.io/reclaimed-cpu".into(),
            usage: "cpus".into(),
            node: Terms::default(),
            zones: vec![zone(0, Some(1400)), zone(1, Some(900))],
            advertised_millis: Some(2300),
            budget_millis: 0,
            batch_used_millis: 0,
            regular_now_millis: 0,
            batch: vec![],
            reserved: Default::default(),
            reserved_rule: String::new(),
            cpu_time: String::new(),
            problems: vec![],
        };
        // What the previous instance wrote.
        let mut previous = base.clone();
        add_reclaimed(&mut previous, &report);
        // The new one, filling: nothing advertised yet.
        report.zones = vec![zone(0, None), zone(1, None)];
        report.advertised_millis = None;
        let mut filling = base.clone();
        add_reclaimed(&mut filling, &report);
        assert_eq!(filling, base);
        carry_reclaimed(&mut filling, &previous, &report);
        assert_eq!(filling, previous, "the first write is no write");
        // Advertised: its own amounts only.
        report.zones = vec![zone(0, Some(1200)), zone(1, None)];
        report.advertised_millis = Some(2100);
        let mut own = base.clone();
        add_reclaimed(&mut own, &report);
        let expected = own.clone();
        carry_reclaimed(&mut own, &previous, &report);
        assert_eq!(own, expected);
        // Off or withdrawn: nothing carried.
        for state in ["off", "withdrawn: usage readings fail"] {
            report.state = state.into();
            report.zones = vec![zone(0, None), zone(1, None)];
            report.advertised_millis = None;
            let mut c = base.clone();
            carry_reclaimed(&mut c, &previous, &report);
            assert_eq!(c, base, "{state}");
        }
    }
}
