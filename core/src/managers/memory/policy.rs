//! The memory manager's `static` policy: per-NUMA-node accounting of memory and hugepages (per
//! page size), with per-node reservations, topology hints for Guaranteed containers and NUMA
//! pinning of their memory. Mirrors `pkg/kubelet/cm/memorymanager/policy_static.go`
//! (`calculateHints`, `Allocate`, `extendTopologyManagerHint`, `getDefaultHint`) and
//! `policy_none.go`.
//!
//! Unlike the kubelet (which checkpoints per-node `Free`/`Reserved` next to the assignments and
//! must reconcile the two), [`MemoryPolicy`] stores only the assignments; free memory per node is
//! derived: allocatable (capacity − hugepages − reservation) − assigned.
//!
//! Rules kept from the kubelet: only Guaranteed containers are pinned; hints are the node groups
//! whose allocatable and free memory cover every requested resource, preferred when the group has
//! the fewest nodes that could hold the request on an empty machine; a node already used by an
//! assignment can only be used again with exactly the same group of nodes. One deliberate
//! difference: the kubelet skips that group rule for single-node hints (and then has to extend the
//! affinity in `Allocate`); here it applies to every hint, so a hint is never offered that
//! allocation would have to widen.

use std::collections::BTreeMap;
use std::fmt;

use crate::kube::container_key::ContainerKey;
use crate::machine::topology::Topology;
use crate::managers::topology::hints::{node_subsets, NumaMask, ProviderHints, TopologyHint};

/// `--memory-manager-policy` (`[memory] policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryPolicyKind {
    #[default]
    None,
    Static,
}

impl MemoryPolicyKind {
    pub fn parse(text: &str) -> Option<MemoryPolicyKind> {
        match text {
            "none" => Some(MemoryPolicyKind::None),
            "static" => Some(MemoryPolicyKind::Static),
            _ => None,
        }
    }

    /// The configuration's spelling (`none`, `static`), as `topolet status` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryPolicyKind::None => "none",
            MemoryPolicyKind::Static => "static",
        }
    }
}

impl fmt::Display for MemoryPolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[memory]`: the policy and per-node reservations (`--reserved-memory`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryPolicyConfig {
    pub policy: MemoryPolicyKind,
    /// Node id → bytes of regular memory reserved for the system.
    pub reserved: BTreeMap<usize, u64>,
    /// Node id → page size in bytes → bytes of hugepages reserved.
    pub reserved_hugepages: BTreeMap<usize, BTreeMap<u64, u64>>,
}

/// A kind of memory the policy accounts: regular memory or hugepages of one page size.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum MemoryResource {
    Memory,
    /// Page size in bytes.
    Hugepages(u64),
}

impl fmt::Display for MemoryResource {
    /// The Kubernetes resource name: `memory`, `hugepages-2Mi`, `hugepages-1Gi`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryResource::Memory => f.write_str("memory"),
            MemoryResource::Hugepages(size) => write!(f, "hugepages-{}", binary_quantity(*size)),
        }
    }
}

/// Bytes in the Kubernetes binary-suffix spelling when exact (`2Mi`, `1Gi`, `8Gi`), else plain.
pub fn binary_quantity(bytes: u64) -> String {
    const UNITS: [(&str, u64); 6] = [
        ("Ei", 1 << 60),
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (suffix, unit) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// What one container asks of the memory manager (requests = limits for Guaranteed pods).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryRequest {
    /// Whether the pod's QoS class is Guaranteed: only those are pinned.
    pub guaranteed: bool,
    /// Regular memory in bytes.
    pub memory: u64,
    /// Page size in bytes → bytes of hugepages.
    pub hugepages: BTreeMap<u64, u64>,
}

impl MemoryRequest {
    /// The non-zero requested amounts, per resource.
    pub fn amounts(&self) -> BTreeMap<MemoryResource, u64> {
        let mut out = BTreeMap::new();
        if self.memory > 0 {
            out.insert(MemoryResource::Memory, self.memory);
        }
        for (&size, &bytes) in &self.hugepages {
            if bytes > 0 {
                out.insert(MemoryResource::Hugepages(size), bytes);
            }
        }
        out
    }
}

/// Where one container's memory lives: its NUMA node group and the bytes taken per resource
/// and node (only non-zero takes are listed; every taken node is in `nodes`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryAssignment {
    pub nodes: NumaMask,
    pub taken: BTreeMap<MemoryResource, BTreeMap<usize, u64>>,
}

/// A `[memory]` configuration that does not fit the machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryConfigError {
    #[error("memory.reserved.{node}: numa node {node} does not exist")]
    UnknownNode { node: usize },
    #[error(
        "memory.reserved.{node}: {reserved} bytes reserved but node {node} has only {capacity} \
         bytes of {resource}"
    )]
    ReservationAboveCapacity {
        node: usize,
        resource: MemoryResource,
        reserved: u64,
        capacity: u64,
    },
    #[error(
        "memory.reserved: policy static needs memory reserved for the system on at least one \
         node (the kubelet refuses a zero reservation too)"
    )]
    NoReservation,
}

/// Why an allocation, restore or invariant check failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    #[error(
        "container {container}: no numa node group containing {affinity} has {requested} bytes \
         of {resource} free"
    )]
    Insufficient {
        container: ContainerKey,
        resource: MemoryResource,
        requested: u64,
        affinity: NumaMask,
    },
    #[error("container {container}: numa node {node} does not exist")]
    UnknownNode {
        container: ContainerKey,
        node: usize,
    },
    #[error("container {container}: takes memory on node {node} outside its nodes {nodes}")]
    OutsideGroup {
        container: ContainerKey,
        node: usize,
        nodes: NumaMask,
    },
    #[error(
        "container {container}: node {node} is already used with node group {existing}, not {nodes}"
    )]
    GroupConflict {
        container: ContainerKey,
        node: usize,
        existing: NumaMask,
        nodes: NumaMask,
    },
    #[error("numa node {node}: {resource} over-committed ({assigned} bytes assigned, {allocatable} allocatable)")]
    OverCommitted {
        node: usize,
        resource: MemoryResource,
        assigned: u64,
        allocatable: u64,
    },
    #[error("container {0}: already holds a different memory assignment")]
    AlreadyAssigned(ContainerKey),
}

/// The memory manager: `none` (no pinning, no hints) or `static`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPolicy {
    kind: MemoryPolicyKind,
    nodes: Vec<usize>,
    /// Node → resource → allocatable bytes (capacity − hugepages − reservation).
    allocatable: BTreeMap<usize, BTreeMap<MemoryResource, u64>>,
    assignments: BTreeMap<ContainerKey, MemoryAssignment>,
}

impl MemoryPolicy {
    /// Validate `config` against `topology` and start with no assignments.
    pub fn new(
        config: &MemoryPolicyConfig,
        topology: &Topology,
    ) -> Result<Self, MemoryConfigError> {
        let mut allocatable = BTreeMap::new();
        for node in topology.numa_nodes() {
            let huge_total: u64 = node
                .hugepages
                .iter()
                .map(|(&size, &count)| size.saturating_mul(count))
                .sum();
            let mut per = BTreeMap::new();
            per.insert(
                MemoryResource::Memory,
                node.memory_bytes.saturating_sub(huge_total),
            );
            for (&size, &count) in &node.hugepages {
                per.insert(MemoryResource::Hugepages(size), size.saturating_mul(count));
            }
            allocatable.insert(node.id, per);
        }
        let mut reserve = |node: usize, resource: MemoryResource, bytes: u64| {
            let per: &mut BTreeMap<MemoryResource, u64> = allocatable
                .get_mut(&node)
                .ok_or(MemoryConfigError::UnknownNode { node })?;
            let capacity = per.get(&resource).copied().unwrap_or(0);
            if bytes > capacity {
                return Err(MemoryConfigError::ReservationAboveCapacity {
                    node,
                    resource,
                    reserved: bytes,
                    capacity,
                });
            }
            per.insert(resource, capacity - bytes);
            Ok(())
        };
        for (&node, &bytes) in &config.reserved {
            reserve(node, MemoryResource::Memory, bytes)?;
        }
        for (&node, sizes) in &config.reserved_hugepages {
            for (&size, &bytes) in sizes {
                reserve(node, MemoryResource::Hugepages(size), bytes)?;
            }
        }
        if config.policy == MemoryPolicyKind::Static && config.reserved.values().all(|&b| b == 0) {
            return Err(MemoryConfigError::NoReservation);
        }
        Ok(MemoryPolicy {
            kind: config.policy,
            nodes: topology.numa_ids().collect(),
            allocatable,
            assignments: BTreeMap::new(),
        })
    }

    pub fn kind(&self) -> MemoryPolicyKind {
        self.kind
    }

    pub fn assignment(&self, key: &ContainerKey) -> Option<&MemoryAssignment> {
        self.assignments.get(key)
    }

    pub fn assignments(&self) -> &BTreeMap<ContainerKey, MemoryAssignment> {
        &self.assignments
    }

    /// Allocatable bytes of `resource` on `node` (capacity − hugepages − reservation).
    pub fn allocatable(&self, node: usize, resource: MemoryResource) -> u64 {
        self.allocatable
            .get(&node)
            .and_then(|per| per.get(&resource))
            .copied()
            .unwrap_or(0)
    }

    /// Bytes assigned per node and resource (derived from the assignments).
    fn assigned(&self) -> BTreeMap<(usize, MemoryResource), u64> {
        let mut out = BTreeMap::new();
        for a in self.assignments.values() {
            for (&resource, per_node) in &a.taken {
                for (&node, &bytes) in per_node {
                    *out.entry((node, resource)).or_insert(0u64) += bytes;
                }
            }
        }
        out
    }

    /// Free bytes per (node, resource): allocatable − assigned.
    fn free_table(&self) -> BTreeMap<(usize, MemoryResource), u64> {
        let assigned = self.assigned();
        let mut out = BTreeMap::new();
        for (&node, per) in &self.allocatable {
            for (&resource, &alloc) in per {
                let used = assigned.get(&(node, resource)).copied().unwrap_or(0);
                out.insert((node, resource), alloc.saturating_sub(used));
            }
        }
        out
    }

    /// Free bytes of `resource` on `node`.
    pub fn free(&self, node: usize, resource: MemoryResource) -> u64 {
        self.free_table()
            .get(&(node, resource))
            .copied()
            .unwrap_or(0)
    }

    /// Free bytes per node, keyed by resource name (`memory`, `hugepages-2Mi`), for messages.
    pub fn free_per_node(&self) -> BTreeMap<usize, BTreeMap<String, u64>> {
        let mut out: BTreeMap<usize, BTreeMap<String, u64>> = BTreeMap::new();
        for ((node, resource), bytes) in self.free_table() {
            out.entry(node)
                .or_default()
                .insert(resource.to_string(), bytes);
        }
        out
    }

    /// The node group each used node belongs to (the `nodes` of the assignments on it).
    fn groups(&self) -> BTreeMap<usize, NumaMask> {
        let mut out = BTreeMap::new();
        for a in self.assignments.values() {
            for node in a.nodes.ids() {
                out.entry(node).or_insert(a.nodes);
            }
        }
        out
    }

    fn group_allows(groups: &BTreeMap<usize, NumaMask>, mask: NumaMask) -> bool {
        mask.ids()
            .all(|n| groups.get(&n).is_none_or(|&g| g == mask))
    }

    /// `calculateHints`: every node group that can hold `amounts` now, preferred when it has the
    /// fewest nodes among groups whose allocatable memory could hold it at all.
    fn calculate_hints(&self, amounts: &BTreeMap<MemoryResource, u64>) -> Vec<TopologyHint> {
        let free = self.free_table();
        let groups = self.groups();
        let mut fitting = Vec::new();
        let mut min_count = u32::MAX;
        for mask in node_subsets(&self.nodes) {
            if !Self::group_allows(&groups, mask) {
                continue;
            }
            let sum = |table: &dyn Fn(usize, MemoryResource) -> u64, r: MemoryResource| -> u64 {
                mask.ids().map(|n| table(n, r)).sum()
            };
            let alloc_ok = amounts
                .iter()
                .all(|(&r, &req)| sum(&|n, r| self.allocatable(n, r), r) >= req);
            if !alloc_ok {
                continue;
            }
            min_count = min_count.min(mask.count());
            let free_ok = amounts
                .iter()
                .all(|(&r, &req)| sum(&|n, r| free.get(&(n, r)).copied().unwrap_or(0), r) >= req);
            if free_ok {
                fitting.push(mask);
            }
        }
        fitting
            .into_iter()
            .map(|mask| TopologyHint::new(mask, mask.count() == min_count))
            .collect()
    }

    /// Topology hints for one container (or a pod's aggregate request): no preference for the
    /// `none` policy, non-Guaranteed requests and requests without memory; the existing group for
    /// a container that already has an assignment (`key`); otherwise `Self::calculate_hints`
    /// for every requested resource (`Some(vec![])` when no group fits).
    pub fn hints(&self, key: Option<&ContainerKey>, request: &MemoryRequest) -> ProviderHints {
        let amounts = request.amounts();
        if self.kind == MemoryPolicyKind::None || !request.guaranteed || amounts.is_empty() {
            return ProviderHints::new();
        }
        let hints = match key.and_then(|k| self.assignments.get(k)) {
            Some(a) => vec![TopologyHint::new(a.nodes, true)],
            None => self.calculate_hints(&amounts),
        };
        amounts
            .keys()
            .map(|r| (r.to_string(), Some(hints.clone())))
            .collect()
    }

    /// Hints for a whole pod (pod scope): the group already used by any container of the pod,
    /// else the hints of the pod's aggregate request.
    pub fn pod_hints(&self, pod_uid: &str, aggregate: &MemoryRequest) -> ProviderHints {
        let existing = self
            .assignments
            .iter()
            .find(|(k, _)| k.pod_uid == pod_uid)
            .map(|(k, _)| k.clone());
        self.hints(existing.as_ref(), aggregate)
    }

    /// `findBestHint`: preferred first, then narrowest.
    fn best(hints: &[TopologyHint]) -> Option<NumaMask> {
        hints
            .iter()
            .filter_map(|h| h.affinity.map(|m| (m, h.preferred)))
            .min_by(|a, b| {
                b.1.cmp(&a.1)
                    .then_with(|| a.0.count().cmp(&b.0.count()))
                    .then_with(|| a.0.bits().cmp(&b.0.bits()))
            })
            .map(|(m, _)| m)
    }

    /// Pin the memory of `key` to NUMA nodes. Returns the nodes (`cpuset.mems`), or `None` when the
    /// container is not pinned (`none` policy, not Guaranteed, no memory requested).
    ///
    /// `affinity` is the topology manager's merged affinity (`None` = any). As the kubelet does,
    /// an affinity that cannot hold the request (or would break a node group) is extended to the
    /// best fitting group containing it; with no affinity the best own hint is used. Idempotent:
    /// a key that already has an assignment gets its nodes back unchanged.
    pub fn allocate(
        &mut self,
        key: &ContainerKey,
        request: &MemoryRequest,
        affinity: Option<NumaMask>,
    ) -> Result<Option<NumaMask>, MemoryError> {
        if let Some(a) = self.assignments.get(key) {
            return Ok(Some(a.nodes));
        }
        let amounts = request.amounts();
        if self.kind == MemoryPolicyKind::None || !request.guaranteed || amounts.is_empty() {
            return Ok(None);
        }
        let free = self.free_table();
        let groups = self.groups();
        let fits = |mask: NumaMask| {
            Self::group_allows(&groups, mask)
                && amounts.iter().all(|(&r, &req)| {
                    mask.ids()
                        .map(|n| free.get(&(n, r)).copied().unwrap_or(0))
                        .sum::<u64>()
                        >= req
                })
        };
        let insufficient = |affinity: NumaMask| {
            let (&resource, &requested) = amounts
                .iter()
                .find(|(&r, &req)| {
                    affinity
                        .ids()
                        .map(|n| free.get(&(n, r)).copied().unwrap_or(0))
                        .sum::<u64>()
                        < req
                })
                .or_else(|| amounts.iter().next())
                .unwrap_or((&MemoryResource::Memory, &0));
            MemoryError::Insufficient {
                container: key.clone(),
                resource,
                requested,
                affinity,
            }
        };
        let all = NumaMask::from_ids(self.nodes.iter().copied()).unwrap_or_default();
        let mask = match affinity {
            Some(m) if !m.is_empty() && fits(m) => m,
            requested => {
                let hints = self.calculate_hints(&amounts);
                let within: Vec<TopologyHint> = match requested {
                    Some(m) if !m.is_empty() => hints
                        .into_iter()
                        .filter(|h| h.affinity.is_some_and(|a| m.is_subset_of(a)))
                        .collect(),
                    _ => hints,
                };
                Self::best(&within).ok_or_else(|| insufficient(requested.unwrap_or(all)))?
            }
        };
        let mut taken: BTreeMap<MemoryResource, BTreeMap<usize, u64>> = BTreeMap::new();
        for (&resource, &requested) in &amounts {
            let mut left = requested;
            for node in mask.ids() {
                if left == 0 {
                    break;
                }
                let take = free.get(&(node, resource)).copied().unwrap_or(0).min(left);
                if take > 0 {
                    taken.entry(resource).or_default().insert(node, take);
                    left -= take;
                }
            }
            if left > 0 {
                return Err(insufficient(mask));
            }
        }
        self.assignments
            .insert(key.clone(), MemoryAssignment { nodes: mask, taken });
        Ok(Some(mask))
    }

    /// Forget `key`'s assignment and return it (its memory becomes free again).
    pub fn release(&mut self, key: &ContainerKey) -> Option<MemoryAssignment> {
        self.assignments.remove(key)
    }

    /// Put back an assignment read from the state journal or rebuilt from the runtime. Refused
    /// when it names an unknown node, takes outside its group, breaks another group, or would
    /// over-commit a node; the same assignment twice is accepted.
    pub fn restore(
        &mut self,
        key: &ContainerKey,
        assignment: MemoryAssignment,
    ) -> Result<(), MemoryError> {
        if let Some(existing) = self.assignments.get(key) {
            if *existing == assignment {
                return Ok(());
            }
            return Err(MemoryError::AlreadyAssigned(key.clone()));
        }
        self.assignments.insert(key.clone(), assignment);
        if let Err(e) = self.check_invariants() {
            self.assignments.remove(key);
            return Err(e);
        }
        Ok(())
    }

    /// Every assignment names known nodes, takes only inside its group, groups never overlap
    /// partially, and no node's resource is over-committed.
    pub fn check_invariants(&self) -> Result<(), MemoryError> {
        let mut groups: BTreeMap<usize, NumaMask> = BTreeMap::new();
        for (key, a) in &self.assignments {
            for node in a.nodes.ids() {
                if !self.allocatable.contains_key(&node) {
                    return Err(MemoryError::UnknownNode {
                        container: key.clone(),
                        node,
                    });
                }
                let existing = *groups.entry(node).or_insert(a.nodes);
                if existing != a.nodes {
                    return Err(MemoryError::GroupConflict {
                        container: key.clone(),
                        node,
                        existing,
                        nodes: a.nodes,
                    });
                }
            }
            for per_node in a.taken.values() {
                for &node in per_node.keys() {
                    if !a.nodes.contains(node) {
                        return Err(MemoryError::OutsideGroup {
                            container: key.clone(),
                            node,
                            nodes: a.nodes,
                        });
                    }
                }
            }
        }
        for ((node, resource), assigned) in self.assigned() {
            let allocatable = self.allocatable(node, resource);
            if assigned > allocatable {
                return Err(MemoryError::OverCommitted {
                    node,
                    resource,
                    assigned,
                    allocatable,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
