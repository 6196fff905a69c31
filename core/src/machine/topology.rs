//! `Topology`: the machine as the placement engine sees it — online logical CPUs grouped into
//! threads → cores → L3 (uncore cache) groups → NUMA nodes → sockets, plus per-node memory,
//! hugepages, distances and PCI device locality.
//!
//! Built from plain records ([`RawMachine`], filled by `topolet::host::sysfs` or by [`SyntheticSpec`] in
//! tests) by [`Topology::build`], which validates them and applies the documented fallbacks:
//! - no `thread_siblings_list`: threads are grouped by (package, die, core_id); core ids may repeat
//!   across packages;
//! - no L3 cache information: each (socket, NUMA node) pair is one L3 group;
//! - no NUMA node at all: one node 0 holding every CPU, with the memory given in
//!   [`RawMachine::fallback_memory_bytes`];
//! - an online CPU listed by no node: it joins the node holding most CPUs of its package (a
//!   warning records it); if its package has no node either, building fails;
//! - node cpulists naming offline CPUs: those ids are ignored.
//!
//! NUMA nodes and sockets keep their kernel ids (they appear in `cpuset.mems` and in hints); cores
//! and L3 groups get dense indices in order of their lowest CPU id.

use std::collections::{BTreeMap, BTreeSet};

use crate::machine::cpuset::CpuSet;

/// One online CPU as read from `cpuN/topology` and `cpuN/cache`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawCpu {
    pub id: usize,
    /// `physical_package_id`.
    pub package: usize,
    /// `die_id`, when the kernel exposes it.
    pub die: Option<usize>,
    /// `core_id` (unique only within a package, sometimes only within a die).
    pub core_id: usize,
    /// `thread_siblings_list`, when present.
    pub siblings: Option<CpuSet>,
    /// The L3 cache shared by this CPU: (`id`, `shared_cpu_list`), when present.
    pub l3: Option<(Option<usize>, CpuSet)>,
}

/// One NUMA node as read from `nodeN/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawNode {
    pub id: usize,
    pub cpus: CpuSet,
    /// `MemTotal` in bytes.
    pub memory_bytes: u64,
    /// Page size in bytes → number of pages (`nr_hugepages`).
    pub hugepages: BTreeMap<u64, u64>,
    /// `distance`: one entry per online node, in node-id order; empty when unknown.
    pub distances: Vec<u32>,
}

/// A PCI device and the NUMA node it is attached to (`None` for `-1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub address: String,
    pub numa: Option<usize>,
}

/// Everything discovery reads, before validation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawMachine {
    pub cpus: Vec<RawCpu>,
    pub nodes: Vec<RawNode>,
    /// Memory of the implicit node when `nodes` is empty.
    pub fallback_memory_bytes: u64,
    /// The machine's memory capacity as the kubelet computes it (cadvisor's
    /// `MachineInfo.MemoryCapacity`: `/proc/meminfo` `MemTotal`), when known. `None`: the sum of
    /// the nodes' `MemTotal`. The two differ on some machines (memory outside every node's
    /// accounting, ballooned or hot-added memory), and the kubelet uses the former.
    pub memory_capacity_bytes: Option<u64>,
    pub devices: Vec<Device>,
}

/// Why a machine description cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("no online cpus")]
    NoCpus,
    #[error("cpu {0} is listed twice")]
    DuplicateCpu(usize),
    #[error("numa node {0} is listed twice")]
    DuplicateNode(usize),
    #[error("cpu {cpu} is in numa nodes {first} and {second}")]
    CpuInTwoNodes {
        cpu: usize,
        first: usize,
        second: usize,
    },
    #[error("cpu {cpu} (package {package}) is in no numa node, and no other cpu of its package is either")]
    CpuWithoutNode { cpu: usize, package: usize },
    #[error("cpu {cpu}: thread_siblings_list {siblings} does not contain the cpu itself")]
    BadSiblings { cpu: usize, siblings: String },
    #[error(
        "numa node {node}: distance list has {got} entries, expected {expected} (one per node)"
    )]
    BadDistances {
        node: usize,
        got: usize,
        expected: usize,
    },
}

/// One online CPU, placed in every level of the hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuInfo {
    pub id: usize,
    /// Kernel `physical_package_id`.
    pub socket: usize,
    /// Kernel NUMA node id.
    pub numa: usize,
    /// Dense index into [`Topology::core_cpus`].
    pub core: usize,
    /// Dense index into [`Topology::l3_cpus`].
    pub l3: usize,
}

/// A NUMA node with its capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    pub id: usize,
    pub cpus: CpuSet,
    pub memory_bytes: u64,
    pub hugepages: BTreeMap<u64, u64>,
}

/// The validated machine model. Immutable once built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    cpus: BTreeMap<usize, CpuInfo>,
    all: CpuSet,
    sockets: BTreeMap<usize, CpuSet>,
    nodes: BTreeMap<usize, NumaNode>,
    cores: Vec<CpuSet>,
    l3: Vec<CpuSet>,
    distances: BTreeMap<(usize, usize), u32>,
    devices: Vec<Device>,
    memory_capacity: u64,
    warnings: Vec<String>,
}

impl Topology {
    /// Validates `raw` and builds the model (see the module docs for the fallbacks).
    pub fn build(raw: &RawMachine) -> Result<Topology, TopologyError> {
        let mut warnings = Vec::new();
        let mut by_id: BTreeMap<usize, &RawCpu> = BTreeMap::new();
        for c in &raw.cpus {
            if by_id.insert(c.id, c).is_some() {
                return Err(TopologyError::DuplicateCpu(c.id));
            }
        }
        if by_id.is_empty() {
            return Err(TopologyError::NoCpus);
        }
        let all: CpuSet = by_id.keys().copied().collect();

        // NUMA membership.
        let mut raw_nodes: BTreeMap<usize, RawNode> = BTreeMap::new();
        if raw.nodes.is_empty() {
            raw_nodes.insert(
                0,
                RawNode {
                    id: 0,
                    cpus: all.clone(),
                    memory_bytes: raw.fallback_memory_bytes,
                    hugepages: BTreeMap::new(),
                    distances: vec![10],
                },
            );
        } else {
            for n in &raw.nodes {
                let mut n = n.clone();
                let offline = n.cpus.difference(&all);
                if !offline.is_empty() {
                    warnings.push(format!(
                        "numa node {} lists cpus {} that are not online; ignored",
                        n.id, offline
                    ));
                    n.cpus = n.cpus.intersection(&all);
                }
                let id = n.id;
                if raw_nodes.insert(id, n).is_some() {
                    return Err(TopologyError::DuplicateNode(id));
                }
            }
        }
        let mut node_of: BTreeMap<usize, usize> = BTreeMap::new();
        for n in raw_nodes.values() {
            for cpu in n.cpus.iter() {
                if let Some(first) = node_of.insert(cpu, n.id) {
                    return Err(TopologyError::CpuInTwoNodes {
                        cpu,
                        first,
                        second: n.id,
                    });
                }
            }
        }
        for (&id, c) in &by_id {
            if node_of.contains_key(&id) {
                continue;
            }
            // Fallback: the node holding most CPUs of the same package.
            let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
            for (&other, o) in &by_id {
                if o.package == c.package {
                    if let Some(&n) = node_of.get(&other) {
                        *counts.entry(n).or_default() += 1;
                    }
                }
            }
            let Some((&node, _)) = counts
                .iter()
                .max_by_key(|(n, count)| (**count, usize::MAX - **n))
            else {
                return Err(TopologyError::CpuWithoutNode {
                    cpu: id,
                    package: c.package,
                });
            };
            warnings.push(format!(
                "cpu {id} is in no numa node's cpulist; placed in node {node} with the rest of package {}",
                c.package
            ));
            node_of.insert(id, node);
            if let Some(n) = raw_nodes.get_mut(&node) {
                n.cpus.insert(id);
            }
        }

        // Cores: thread siblings when known, else (package, die, core_id).
        let mut core_groups: BTreeMap<usize, CpuSet> = BTreeMap::new(); // keyed by lowest cpu id
        let mut key_groups: BTreeMap<(usize, Option<usize>, usize), CpuSet> = BTreeMap::new();
        for (&id, c) in &by_id {
            match &c.siblings {
                Some(sib) => {
                    if !sib.contains(id) {
                        return Err(TopologyError::BadSiblings {
                            cpu: id,
                            siblings: sib.to_string(),
                        });
                    }
                    let online = sib.intersection(&all);
                    let key = online.first().unwrap_or(id);
                    core_groups.entry(key).or_default().insert(id);
                }
                None => {
                    key_groups
                        .entry((c.package, c.die, c.core_id))
                        .or_default()
                        .insert(id);
                }
            }
        }
        for set in key_groups.into_values() {
            if let Some(first) = set.first() {
                core_groups.entry(first).or_default().extend_from(&set);
            }
        }
        let cores: Vec<CpuSet> = core_groups.into_values().collect();

        // L3 groups: shared_cpu_list when known, else (socket, node).
        let mut l3_groups: BTreeMap<usize, CpuSet> = BTreeMap::new();
        let mut fallback_l3: BTreeMap<(usize, usize), CpuSet> = BTreeMap::new();
        for (&id, c) in &by_id {
            match &c.l3 {
                Some((_, shared)) if shared.contains(id) => {
                    let online = shared.intersection(&all);
                    let key = online.first().unwrap_or(id);
                    l3_groups.entry(key).or_default().insert(id);
                }
                _ => {
                    fallback_l3
                        .entry((c.package, node_of[&id]))
                        .or_default()
                        .insert(id);
                }
            }
        }
        for set in fallback_l3.into_values() {
            if let Some(first) = set.first() {
                l3_groups.entry(first).or_default().extend_from(&set);
            }
        }
        let l3: Vec<CpuSet> = l3_groups.into_values().collect();

        let mut cpus = BTreeMap::new();
        let mut sockets: BTreeMap<usize, CpuSet> = BTreeMap::new();
        for (&id, c) in &by_id {
            let core = cores.iter().position(|s| s.contains(id)).unwrap_or(0);
            let l3i = l3.iter().position(|s| s.contains(id)).unwrap_or(0);
            cpus.insert(
                id,
                CpuInfo {
                    id,
                    socket: c.package,
                    numa: node_of[&id],
                    core,
                    l3: l3i,
                },
            );
            sockets.entry(c.package).or_default().insert(id);
        }

        // Distances.
        let ids: Vec<usize> = raw_nodes.keys().copied().collect();
        let mut distances = BTreeMap::new();
        for n in raw_nodes.values() {
            if n.distances.is_empty() {
                continue;
            }
            if n.distances.len() != ids.len() {
                return Err(TopologyError::BadDistances {
                    node: n.id,
                    got: n.distances.len(),
                    expected: ids.len(),
                });
            }
            for (j, &d) in n.distances.iter().enumerate() {
                distances.insert((n.id, ids[j]), d);
            }
        }

        let node_sum: u64 = raw_nodes.values().map(|n| n.memory_bytes).sum();
        let memory_capacity = raw.memory_capacity_bytes.unwrap_or(node_sum);
        let nodes = raw_nodes
            .into_values()
            .map(|n| {
                (
                    n.id,
                    NumaNode {
                        id: n.id,
                        cpus: n.cpus,
                        memory_bytes: n.memory_bytes,
                        hugepages: n.hugepages,
                    },
                )
            })
            .collect();

        Ok(Topology {
            cpus,
            all,
            sockets,
            nodes,
            cores,
            l3,
            distances,
            devices: raw.devices.clone(),
            memory_capacity,
            warnings,
        })
    }

    /// Every online CPU.
    pub fn cpus(&self) -> &CpuSet {
        &self.all
    }

    pub fn num_cpus(&self) -> usize {
        self.cpus.len()
    }

    pub fn cpu(&self, id: usize) -> Option<&CpuInfo> {
        self.cpus.get(&id)
    }

    /// Socket ids (kernel `physical_package_id`), ascending.
    pub fn socket_ids(&self) -> impl Iterator<Item = usize> + '_ {
        self.sockets.keys().copied()
    }

    pub fn socket_cpus(&self, socket: usize) -> CpuSet {
        self.sockets.get(&socket).cloned().unwrap_or_default()
    }

    /// NUMA node ids, ascending.
    pub fn numa_ids(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodes.keys().copied()
    }

    pub fn numa_nodes(&self) -> impl Iterator<Item = &NumaNode> {
        self.nodes.values()
    }

    pub fn numa_node(&self, id: usize) -> Option<&NumaNode> {
        self.nodes.get(&id)
    }

    pub fn numa_cpus(&self, node: usize) -> CpuSet {
        self.nodes
            .get(&node)
            .map(|n| n.cpus.clone())
            .unwrap_or_default()
    }

    /// Number of physical cores.
    pub fn num_cores(&self) -> usize {
        self.cores.len()
    }

    /// The threads of core `core` (a dense index, see [`CpuInfo::core`]).
    pub fn core_cpus(&self, core: usize) -> &CpuSet {
        &self.cores[core]
    }

    /// All cores as CPU sets, in order of their lowest CPU id.
    pub fn cores(&self) -> &[CpuSet] {
        &self.cores
    }

    /// The other threads of `cpu`'s core, plus `cpu` itself.
    pub fn siblings(&self, cpu: usize) -> CpuSet {
        self.cpus
            .get(&cpu)
            .map(|c| self.cores[c.core].clone())
            .unwrap_or_default()
    }

    /// Number of L3 (uncore cache) groups.
    pub fn num_l3(&self) -> usize {
        self.l3.len()
    }

    pub fn l3_cpus(&self, group: usize) -> &CpuSet {
        &self.l3[group]
    }

    pub fn l3_groups(&self) -> &[CpuSet] {
        &self.l3
    }

    /// The most threads any core has (1 without SMT). Cores may differ (hybrid CPUs, offline threads).
    pub fn max_threads_per_core(&self) -> usize {
        self.cores.iter().map(CpuSet::len).max().unwrap_or(1)
    }

    /// NUMA nodes holding at least one CPU of `cpus`.
    pub fn numa_nodes_of(&self, cpus: &CpuSet) -> BTreeSet<usize> {
        cpus.iter()
            .filter_map(|c| self.cpus.get(&c).map(|i| i.numa))
            .collect()
    }

    /// Sockets holding at least one CPU of `cpus`.
    pub fn sockets_of(&self, cpus: &CpuSet) -> BTreeSet<usize> {
        cpus.iter()
            .filter_map(|c| self.cpus.get(&c).map(|i| i.socket))
            .collect()
    }

    /// The node's memory capacity as the kubelet sees it (`/proc/meminfo` `MemTotal`, the
    /// Node's `status.capacity.memory`): the denominator of the Burstable oom_score_adj formula.
    /// The sum of the nodes' `MemTotal` when the machine was described without it. Per-node
    /// sizes (the memory manager's) are [`NumaNode::memory_bytes`].
    pub fn memory_capacity(&self) -> u64 {
        self.memory_capacity
    }

    /// The sum of the NUMA nodes' `MemTotal`.
    pub fn numa_memory_total(&self) -> u64 {
        self.nodes.values().map(|n| n.memory_bytes).sum()
    }

    /// `distance` from node `a` to node `b`: the kernel's value when known, else 10 for the same
    /// node and 20 otherwise (the kernel's own defaults for `LOCAL_DISTANCE`/`REMOTE_DISTANCE`).
    pub fn distance(&self, a: usize, b: usize) -> u32 {
        match self.distances.get(&(a, b)) {
            Some(&d) => d,
            None if a == b => 10,
            None => 20,
        }
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// What the fallbacks did while building (for the shell to log).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// NUMA node ids as errors name them, `0,1` (no ranges: a device's node is read against the
/// machine's list, which an operator compares with `/sys/devices/system/node`).
pub fn node_list(nodes: &[usize]) -> String {
    nodes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A regular machine shape, for tests, fixtures and benchmarks. CPU ids follow the Linux x86
/// convention: every core's first thread first (core order), then every core's second thread, …
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntheticSpec {
    pub sockets: usize,
    pub numa_per_socket: usize,
    pub l3_per_numa: usize,
    pub cores_per_l3: usize,
    pub threads_per_core: usize,
    pub memory_per_node: u64,
}

impl SyntheticSpec {
    /// Two sockets of one NUMA node each, two cores of two threads per socket: 8 CPUs (0-3 are
    /// the cores' first threads, 4-7 their siblings), 8 GiB per node. The smallest machine with
    /// sockets, NUMA nodes and SMT to tell apart: the handler, security and fuzz tests' node.
    pub const TWO_SOCKETS_SMT: SyntheticSpec = SyntheticSpec {
        sockets: 2,
        numa_per_socket: 1,
        l3_per_numa: 1,
        cores_per_l3: 2,
        threads_per_core: 2,
        memory_per_node: 8 << 30,
    };

    /// One socket, one NUMA node, two cores without SMT: 2 CPUs and 8 GiB, the CI host's shape.
    pub const TWO_CORES: SyntheticSpec = SyntheticSpec {
        sockets: 1,
        numa_per_socket: 1,
        l3_per_numa: 1,
        cores_per_l3: 2,
        threads_per_core: 1,
        memory_per_node: 8 << 30,
    };

    pub fn total_cores(&self) -> usize {
        self.sockets * self.numa_per_socket * self.l3_per_numa * self.cores_per_l3
    }

    pub fn total_cpus(&self) -> usize {
        self.total_cores() * self.threads_per_core
    }

    /// The raw records of this shape (what sysfs would say about it).
    pub fn raw(&self) -> RawMachine {
        let cores = self.total_cores();
        let cores_per_numa = self.l3_per_numa * self.cores_per_l3;
        let cores_per_socket = self.numa_per_socket * cores_per_numa;
        let nodes_total = self.sockets * self.numa_per_socket;
        let cpu_id = |core: usize, thread: usize| thread * cores + core;
        let mut cpus = Vec::new();
        let mut nodes: Vec<RawNode> = (0..nodes_total)
            .map(|id| RawNode {
                id,
                cpus: CpuSet::new(),
                memory_bytes: self.memory_per_node,
                hugepages: BTreeMap::new(),
                distances: (0..nodes_total)
                    .map(|j| {
                        if j == id {
                            10
                        } else if j / self.numa_per_socket == id / self.numa_per_socket {
                            12
                        } else {
                            21
                        }
                    })
                    .collect(),
            })
            .collect();
        for core in 0..cores {
            let socket = core / cores_per_socket;
            let node = core / cores_per_numa;
            let l3_index = core / self.cores_per_l3;
            let l3_first = l3_index * self.cores_per_l3;
            let l3_shared: CpuSet = (l3_first..l3_first + self.cores_per_l3)
                .flat_map(|c| (0..self.threads_per_core).map(move |t| cpu_id(c, t)))
                .collect();
            let siblings: CpuSet = (0..self.threads_per_core)
                .map(|t| cpu_id(core, t))
                .collect();
            for t in 0..self.threads_per_core {
                let id = cpu_id(core, t);
                nodes[node].cpus.insert(id);
                cpus.push(RawCpu {
                    id,
                    package: socket,
                    die: Some(0),
                    core_id: core % cores_per_socket,
                    siblings: Some(siblings.clone()),
                    l3: Some((Some(l3_index), l3_shared.clone())),
                });
            }
        }
        cpus.sort_by_key(|c| c.id);
        RawMachine {
            cpus,
            nodes,
            fallback_memory_bytes: 0,
            memory_capacity_bytes: None,
            devices: Vec::new(),
        }
    }

    /// The validated topology of this shape.
    ///
    /// # Panics
    /// Never for a spec with every count ≥ 1 (the records it generates are consistent by
    /// construction); a zero count is a test-authoring error.
    pub fn build(&self) -> Topology {
        Topology::build(&self.raw()).expect("synthetic topology is consistent")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn spec(s: usize, n: usize, l: usize, c: usize, t: usize) -> SyntheticSpec {
        SyntheticSpec {
            sockets: s,
            numa_per_socket: n,
            l3_per_numa: l,
            cores_per_l3: c,
            threads_per_core: t,
            memory_per_node: 64 * GIB,
        }
    }

    #[test]
    fn dual_socket_ht_shape() {
        let t = spec(2, 1, 1, 24, 2).build();
        assert_eq!(t.num_cpus(), 96);
        assert_eq!(t.num_cores(), 48);
        assert_eq!(t.socket_ids().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(t.numa_ids().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(t.siblings(0).to_string(), "0,48");
        assert_eq!(t.socket_cpus(1).to_string(), "24-47,72-95");
        assert_eq!(t.numa_cpus(0), t.socket_cpus(0));
        assert_eq!(t.max_threads_per_core(), 2);
        assert_eq!(t.memory_capacity(), 128 * GIB);
        assert_eq!(t.distance(0, 1), 21);
        assert_eq!(t.num_l3(), 2);
        assert!(t.warnings().is_empty());
    }

    #[test]
    fn sub_numa_clustering_and_chiplets() {
        let t = spec(2, 2, 1, 6, 2).build();
        assert_eq!(t.numa_ids().count(), 4);
        assert_eq!(t.distance(0, 1), 12);
        assert_eq!(t.distance(0, 2), 21);
        let c = spec(1, 1, 8, 8, 2).build();
        assert_eq!(c.num_l3(), 8);
        assert_eq!(c.l3_cpus(1).to_string(), "8-15,72-79");
    }

    fn cpu(id: usize, package: usize, core_id: usize) -> RawCpu {
        RawCpu {
            id,
            package,
            die: None,
            core_id,
            siblings: None,
            l3: None,
        }
    }

    #[test]
    fn groups_threads_by_package_and_core_id_without_siblings() {
        // core_id 0 repeats across packages.
        let raw = RawMachine {
            cpus: vec![cpu(0, 0, 0), cpu(1, 1, 0), cpu(2, 0, 0), cpu(3, 1, 0)],
            nodes: vec![],
            fallback_memory_bytes: 8 * GIB,
            memory_capacity_bytes: None,
            devices: vec![],
        };
        let t = Topology::build(&raw).unwrap();
        assert_eq!(t.num_cores(), 2);
        assert_eq!(t.siblings(0).to_string(), "0,2");
        assert_eq!(t.siblings(1).to_string(), "1,3");
        assert_eq!(t.numa_ids().collect::<Vec<_>>(), vec![0]);
        assert_eq!(t.memory_capacity(), 8 * GIB);
        // One L3 group per (socket, node) without cache info.
        assert_eq!(t.num_l3(), 2);
    }

    /// The kubelet's capacity (`/proc/meminfo` `MemTotal`) is what `memory_capacity` reports when
    /// it is known, even where the nodes' `MemTotal`s add up to less (a 4-NUMA QEMU guest:
    /// 16,066,490,368 B across the nodes, 24684084 KiB in /proc/meminfo); node sizes stay per node.
    #[test]
    fn memory_capacity_is_proc_meminfo_when_known() {
        let mut raw = spec(2, 1, 1, 2, 1).raw();
        for n in &mut raw.nodes {
            n.memory_bytes = 8_033_245_184;
        }
        assert_eq!(
            Topology::build(&raw).unwrap().memory_capacity(),
            16_066_490_368
        );
        raw.memory_capacity_bytes = Some(24_684_084 * 1024);
        let t = Topology::build(&raw).unwrap();
        assert_eq!(t.memory_capacity(), 24_684_084 * 1024);
        assert_eq!(t.numa_memory_total(), 16_066_490_368);
        assert!(t.numa_nodes().all(|n| n.memory_bytes == 8_033_245_184));
    }

    #[test]
    fn cpu_missing_from_every_node_joins_its_package_node() {
        let mut raw = spec(2, 1, 1, 2, 1).raw();
        raw.nodes[1].cpus.remove(3);
        let t = Topology::build(&raw).unwrap();
        assert_eq!(t.cpu(3).unwrap().numa, 1);
        assert_eq!(t.warnings().len(), 1);
        assert!(t.warnings()[0].contains("cpu 3"));
    }

    #[test]
    fn rejects_inconsistent_records_naming_the_culprit() {
        let mut raw = spec(1, 2, 1, 2, 1).raw();
        raw.nodes[1].cpus.insert(0);
        assert_eq!(
            Topology::build(&raw).unwrap_err().to_string(),
            "cpu 0 is in numa nodes 0 and 1"
        );

        let mut raw = spec(1, 1, 1, 2, 1).raw();
        raw.cpus.push(raw.cpus[0].clone());
        assert_eq!(
            Topology::build(&raw).unwrap_err(),
            TopologyError::DuplicateCpu(0)
        );

        let mut raw = spec(2, 1, 1, 1, 1).raw();
        raw.nodes.truncate(1);
        raw.nodes[0].distances = vec![10];
        assert_eq!(
            Topology::build(&raw).unwrap_err(),
            TopologyError::CpuWithoutNode { cpu: 1, package: 1 }
        );

        let mut raw = spec(1, 2, 1, 1, 1).raw();
        raw.nodes[0].distances = vec![10];
        assert!(matches!(
            Topology::build(&raw).unwrap_err(),
            TopologyError::BadDistances { node: 0, .. }
        ));

        let mut raw = spec(1, 1, 1, 2, 1).raw();
        raw.cpus[0].siblings = Some(CpuSet::parse("1").unwrap());
        assert!(matches!(
            Topology::build(&raw).unwrap_err(),
            TopologyError::BadSiblings { cpu: 0, .. }
        ));

        assert_eq!(
            Topology::build(&RawMachine::default()).unwrap_err(),
            TopologyError::NoCpus
        );
    }

    #[test]
    fn offline_cpus_in_node_lists_are_ignored() {
        let mut raw = spec(1, 1, 1, 4, 1).raw();
        raw.cpus.retain(|c| c.id != 2);
        let t = Topology::build(&raw).unwrap();
        assert_eq!(t.numa_cpus(0).to_string(), "0-1,3");
        assert_eq!(t.num_cores(), 3);
        assert!(t.warnings()[0].contains("not online"));
    }

    #[test]
    fn large_machine_builds() {
        let t = spec(8, 1, 8, 32, 2).build();
        assert_eq!(t.num_cpus(), 4096);
        assert_eq!(t.num_l3(), 64);
        assert_eq!(t.num_cores(), 2048);
    }
}
