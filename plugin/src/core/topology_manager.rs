//! The topology manager's admission step for one container (container scope) or one pod (pod
//! scope): the orchestrator gathers hints from every [`HintProvider`] (CPU, memory, hugepages,
//! devices), [`TopologyManager::admit`] merges them under the policy and admits or refuses with an
//! error naming the policy, the request and what was free per NUMA node, and the orchestrator
//! then allocates every provider with the merged affinity. Mirrors
//! `pkg/kubelet/cm/topologymanager/{topology_manager,scope,scope_container,scope_pod}.go`; the
//! merge itself lives in [`super::hints`].
//!
//! Plain data in, decision out: the manager keeps no hint store (the kubelet's `Store.GetAffinity`
//! side channel); the affinity is returned and handed to each provider's `allocate`.
//!
//! Resource amounts ([`ResourceAmounts`]) use the Kubernetes resource names with integer units:
//! `cpu` in millicores, `memory` and `hugepages-<size>` in bytes, extended resources as counts.

use std::collections::BTreeMap;
use std::fmt;

use super::container_key::ContainerKey;
use super::device_hints::{DeviceError, DeviceHints};
use super::hints::{
    merge, MergeResult, NumaMask, ProviderHints, TopologyConfigError, TopologyOptions,
    TopologyPolicy,
};
use super::memory_policy::{binary_quantity, MemoryError, MemoryPolicy, MemoryRequest};
use super::topology::Topology;

/// Resource name → amount (`cpu` millicores, `memory`/`hugepages-*` bytes, extended: count).
pub type ResourceAmounts = BTreeMap<String, u64>;

/// Node id → resource name → free amount, in the units of [`ResourceAmounts`].
pub type FreePerNode = BTreeMap<usize, BTreeMap<String, u64>>;

/// `--topology-manager-scope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    #[default]
    Container,
    Pod,
}

impl Scope {
    pub fn parse(text: &str) -> Option<Scope> {
        match text {
            "container" => Some(Scope::Container),
            "pod" => Some(Scope::Pod),
            _ => None,
        }
    }
}

/// `[topology]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopologyManagerConfig {
    pub policy: TopologyPolicy,
    pub scope: Scope,
    pub options: TopologyOptions,
}

/// What hints are asked for: one container, or a whole pod (pod scope) with its aggregate
/// request ([`pod_request`]).
#[derive(Debug, Clone, Copy)]
pub enum HintTarget<'a> {
    Container {
        key: &'a ContainerKey,
        guaranteed: bool,
        resources: &'a ResourceAmounts,
    },
    Pod {
        uid: &'a str,
        guaranteed: bool,
        resources: &'a ResourceAmounts,
    },
}

impl HintTarget<'_> {
    pub fn guaranteed(&self) -> bool {
        match self {
            HintTarget::Container { guaranteed, .. } | HintTarget::Pod { guaranteed, .. } => {
                *guaranteed
            }
        }
    }

    pub fn resources(&self) -> &ResourceAmounts {
        match self {
            HintTarget::Container { resources, .. } | HintTarget::Pod { resources, .. } => {
                resources
            }
        }
    }
}

/// Why a provider could not allocate with the merged affinity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    #[error(transparent)]
    Memory(#[from] MemoryError),
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// Another provider's error (the CPU manager's), already formatted.
    #[error("{0}")]
    Other(String),
}

/// A hint provider, as the kubelet's `HintProvider` (`GetTopologyHints` /
/// `GetPodTopologyHints` / `Allocate`), plus what it has free for refusal messages.
pub trait HintProvider {
    /// Hints for a container or a pod; resources the provider does not manage are left out.
    fn hints(&self, target: &HintTarget<'_>) -> ProviderHints;
    /// Allocate `key`'s resources inside `affinity` (`None`: anywhere). Idempotent per key.
    fn allocate(
        &mut self,
        key: &ContainerKey,
        guaranteed: bool,
        resources: &ResourceAmounts,
        affinity: Option<NumaMask>,
    ) -> Result<(), AllocateError>;
    /// Free amounts per node of the resources this provider manages.
    fn free_per_node(&self) -> FreePerNode;
}

/// `hugepages-2Mi` → 2097152; `None` for any other name or a malformed size. The size is a
/// Kubernetes quantity, read by the same parser as pod specs (`core::pod_input`).
pub fn hugepage_size(resource: &str) -> Option<u64> {
    let size = resource.strip_prefix("hugepages-")?;
    super::quantity::parse_value(size).ok().filter(|&s| s > 0)
}

/// The memory manager's view of an amounts map.
pub fn memory_request(guaranteed: bool, resources: &ResourceAmounts) -> MemoryRequest {
    MemoryRequest {
        guaranteed,
        memory: resources.get("memory").copied().unwrap_or(0),
        hugepages: resources
            .iter()
            .filter_map(|(name, &bytes)| hugepage_size(name).map(|size| (size, bytes)))
            .collect(),
    }
}

impl HintProvider for MemoryPolicy {
    fn hints(&self, target: &HintTarget<'_>) -> ProviderHints {
        let request = memory_request(target.guaranteed(), target.resources());
        match target {
            HintTarget::Container { key, .. } => MemoryPolicy::hints(self, Some(key), &request),
            HintTarget::Pod { uid, .. } => self.pod_hints(uid, &request),
        }
    }

    fn allocate(
        &mut self,
        key: &ContainerKey,
        guaranteed: bool,
        resources: &ResourceAmounts,
        affinity: Option<NumaMask>,
    ) -> Result<(), AllocateError> {
        MemoryPolicy::allocate(self, key, &memory_request(guaranteed, resources), affinity)?;
        Ok(())
    }

    fn free_per_node(&self) -> FreePerNode {
        MemoryPolicy::free_per_node(self)
    }
}

impl HintProvider for DeviceHints {
    fn hints(&self, target: &HintTarget<'_>) -> ProviderHints {
        match target {
            HintTarget::Container { key, resources, .. } => {
                DeviceHints::hints(self, Some(key), resources)
            }
            HintTarget::Pod { resources, .. } => DeviceHints::hints(self, None, resources),
        }
    }

    fn allocate(
        &mut self,
        key: &ContainerKey,
        _guaranteed: bool,
        resources: &ResourceAmounts,
        affinity: Option<NumaMask>,
    ) -> Result<(), AllocateError> {
        DeviceHints::allocate(self, key, resources, affinity)?;
        Ok(())
    }

    fn free_per_node(&self) -> FreePerNode {
        DeviceHints::free_per_node(self)
    }
}

/// How a container takes part in the pod's aggregate request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    /// A regular init container: runs alone (beside the sidecars started before it).
    Init,
    /// A restartable init container (sidecar): keeps running beside everything after it.
    Sidecar,
    App,
}

/// The pod's effective request, as the kubelet computes it for pod scope
/// (`k8s.io/component-helpers/resource` `PodRequests`, KEP-753): the sum of the app containers
/// plus the sidecars, or the largest init-time peak (an init container plus the sidecars started
/// before it, or the sidecars so far), whichever is larger, per resource. `containers` in spec
/// order (init containers first).
pub fn pod_request(containers: &[(ContainerKind, &ResourceAmounts)]) -> ResourceAmounts {
    let mut sidecars = ResourceAmounts::new();
    let mut init_peak = ResourceAmounts::new();
    let mut apps = ResourceAmounts::new();
    let add = |into: &mut ResourceAmounts, from: &ResourceAmounts| {
        for (r, &v) in from {
            let e = into.entry(r.clone()).or_insert(0);
            *e = e.saturating_add(v);
        }
    };
    let max_into = |into: &mut ResourceAmounts, from: &ResourceAmounts| {
        for (r, &v) in from {
            let e = into.entry(r.clone()).or_insert(0);
            *e = (*e).max(v);
        }
    };
    for &(kind, res) in containers {
        match kind {
            ContainerKind::Init => {
                let mut peak = sidecars.clone();
                add(&mut peak, res);
                max_into(&mut init_peak, &peak);
            }
            ContainerKind::Sidecar => {
                add(&mut sidecars, res);
                max_into(&mut init_peak, &sidecars);
            }
            ContainerKind::App => add(&mut apps, res),
        }
    }
    add(&mut apps, &sidecars);
    max_into(&mut apps, &init_peak);
    apps
}

/// One amount in Kubernetes spelling: `cpu` as cores (`6`, `1500m`), memory and hugepages with a
/// binary suffix (`8Gi`), anything else as a count.
pub fn format_amount(resource: &str, amount: u64) -> String {
    if resource == "cpu" {
        if amount % 1000 == 0 {
            (amount / 1000).to_string()
        } else {
            format!("{amount}m")
        }
    } else if resource == "memory" || resource.starts_with("hugepages-") {
        binary_quantity(amount)
    } else {
        amount.to_string()
    }
}

/// Resource names in message order: `cpu`, `memory`, then the rest by name.
pub(crate) fn message_order<'a>(names: impl Iterator<Item = &'a String>) -> Vec<&'a String> {
    let mut v: Vec<&String> = names.collect();
    let rank = |r: &str| match r {
        "cpu" => 0,
        "memory" => 1,
        _ => 2,
    };
    v.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
    v
}

/// A refused admission (`TopologyAffinityError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TopologyAffinityError {
    pub policy: TopologyPolicy,
    /// `container default/web/app` or `pod default/web`.
    pub subject: String,
    pub request: ResourceAmounts,
    pub free: FreePerNode,
}

impl fmt::Display for TopologyAffinityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = match self.policy {
            TopologyPolicy::SingleNumaNode => "on one numa node",
            _ => "with a preferred numa affinity",
        };
        let request: Vec<String> = message_order(self.request.keys())
            .into_iter()
            .filter(|r| self.request[*r] > 0)
            .map(|r| format!("{r}: {}", format_amount(r, self.request[r])))
            .collect();
        write!(
            f,
            "topology affinity error: policy {} cannot place {} ({}) {how}; free per node:",
            self.policy,
            self.subject,
            request.join(", ")
        )?;
        let mut first = true;
        for (node, per) in &self.free {
            let parts: Vec<String> = message_order(per.keys())
                .into_iter()
                .filter(|r| self.request.contains_key(*r))
                .map(|r| format!("{r} {}", format_amount(r, per[r])))
                .collect();
            let sep = if first { " " } else { ", " };
            first = false;
            write!(f, "{sep}{node}: {}", parts.join(" "))?;
        }
        Ok(())
    }
}

/// The topology manager: policy, scope and the machine's NUMA nodes and distances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyManager {
    config: TopologyManagerConfig,
    nodes: Vec<usize>,
    distances: BTreeMap<(usize, usize), u32>,
}

impl TopologyManager {
    /// Validate `config` against the machine (`max_allowable_numa_nodes`, node ids).
    pub fn new(
        config: TopologyManagerConfig,
        topology: &Topology,
    ) -> Result<Self, TopologyConfigError> {
        let nodes: Vec<usize> = topology.numa_ids().collect();
        config.options.validate(config.policy, &nodes)?;
        let distances = nodes
            .iter()
            .flat_map(|&a| nodes.iter().map(move |&b| (a, b)))
            .map(|(a, b)| ((a, b), topology.distance(a, b)))
            .collect();
        Ok(TopologyManager {
            config,
            nodes,
            distances,
        })
    }

    pub fn policy(&self) -> TopologyPolicy {
        self.config.policy
    }

    pub fn scope(&self) -> Scope {
        self.config.scope
    }

    /// Whether hints need gathering at all (`none` ignores them, as the kubelet skips them).
    pub fn wants_hints(&self) -> bool {
        self.config.policy != TopologyPolicy::None
    }

    /// The merged hint of `providers` under this policy.
    pub fn merge(&self, providers: &[ProviderHints]) -> MergeResult {
        let d = |a: usize, b: usize| {
            self.distances
                .get(&(a, b))
                .copied()
                .unwrap_or(if a == b { 10 } else { 20 })
        };
        merge(
            self.config.policy,
            &self.nodes,
            d,
            &self.config.options,
            providers,
        )
    }

    /// Admit `subject` (`container ns/pod/name` or `pod ns/pod`) requesting `request`: the
    /// merged affinity to allocate every provider with (`None` = anywhere), or the refusal.
    /// `free` is only called to build a refusal message.
    pub fn admit(
        &self,
        subject: &str,
        request: &ResourceAmounts,
        providers: &[ProviderHints],
        free: impl FnOnce() -> FreePerNode,
    ) -> Result<Option<NumaMask>, TopologyAffinityError> {
        let result = self.merge(providers);
        if result.admit {
            return Ok(result.hint.affinity);
        }
        Err(TopologyAffinityError {
            policy: self.config.policy,
            subject: subject.to_string(),
            request: request.clone(),
            free: free(),
        })
    }
}

/// Merge several providers' free tables into one (for [`TopologyManager::admit`]).
pub fn merge_free(parts: impl IntoIterator<Item = FreePerNode>) -> FreePerNode {
    let mut out = FreePerNode::new();
    for part in parts {
        for (node, per) in part {
            out.entry(node).or_default().extend(per);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::hints::TopologyHint;
    use crate::core::memory_policy::{MemoryPolicyConfig, MemoryPolicyKind};
    use crate::core::topology::SyntheticSpec;

    const GI: u64 = 1 << 30;

    fn topo(nodes: usize) -> Topology {
        SyntheticSpec {
            sockets: nodes,
            numa_per_socket: 1,
            l3_per_numa: 1,
            cores_per_l3: 4,
            threads_per_core: 1,
            memory_per_node: 32 * GI,
        }
        .build()
    }

    fn amounts(pairs: &[(&str, u64)]) -> ResourceAmounts {
        pairs.iter().map(|(r, v)| (r.to_string(), *v)).collect()
    }

    #[test]
    fn refusal_message_names_policy_request_and_free() {
        let t = topo(2);
        let tm = TopologyManager::new(
            TopologyManagerConfig {
                policy: TopologyPolicy::SingleNumaNode,
                ..TopologyManagerConfig::default()
            },
            &t,
        )
        .expect("2 nodes");
        let m = |ids: &[usize]| NumaMask::from_ids(ids.iter().copied()).expect("small");
        // The CPU provider can only fit 6 CPUs on both nodes together.
        let cpu = ProviderHints::from([(
            "cpu".to_string(),
            Some(vec![TopologyHint::new(m(&[0, 1]), true)]),
        )]);
        let req = amounts(&[("cpu", 6000), ("memory", 8 * GI)]);
        let free = || {
            merge_free([
                FreePerNode::from([
                    (0, BTreeMap::from([("cpu".to_string(), 4000)])),
                    (1, BTreeMap::from([("cpu".to_string(), 2000)])),
                ]),
                FreePerNode::from([
                    (0, BTreeMap::from([("memory".to_string(), 30 * GI)])),
                    (1, BTreeMap::from([("memory".to_string(), 31 * GI)])),
                ]),
            ])
        };
        let err = tm
            .admit("container default/web/app", &req, &[cpu], free)
            .expect_err("refused");
        assert_eq!(
            err.to_string(),
            "topology affinity error: policy single-numa-node cannot place container \
             default/web/app (cpu: 6, memory: 8Gi) on one numa node; free per node: \
             0: cpu 4 memory 30Gi, 1: cpu 2 memory 31Gi"
        );
    }

    #[test]
    fn too_many_nodes_is_a_config_error() {
        let t = topo(9);
        let cfg = TopologyManagerConfig {
            policy: TopologyPolicy::Restricted,
            ..TopologyManagerConfig::default()
        };
        let e = TopologyManager::new(cfg, &t).expect_err("9 > 8");
        assert!(e.to_string().contains("more than 8") && e.to_string().contains("has 9"));
        assert!(TopologyManager::new(TopologyManagerConfig::default(), &t).is_ok());
    }

    #[test]
    fn pod_request_follows_kep_753() {
        let a = amounts(&[("cpu", 2000), ("memory", GI)]);
        let b = amounts(&[("cpu", 1000)]);
        let init_big = amounts(&[("cpu", 5000)]);
        let side = amounts(&[("cpu", 500), ("memory", GI)]);
        let got = pod_request(&[
            (ContainerKind::Sidecar, &side),
            (ContainerKind::Init, &init_big),
            (ContainerKind::App, &a),
            (ContainerKind::App, &b),
        ]);
        // cpu: max(2000+1000+500, 500+5000) = 5500; memory: max(1Gi+1Gi, 1Gi) = 2Gi.
        assert_eq!(got, amounts(&[("cpu", 5500), ("memory", 2 * GI)]));
    }

    #[test]
    fn hugepage_names() {
        assert_eq!(hugepage_size("hugepages-2Mi"), Some(2 << 20));
        assert_eq!(hugepage_size("hugepages-1Gi"), Some(1 << 30));
        assert_eq!(hugepage_size("hugepages-"), None);
        assert_eq!(hugepage_size("memory"), None);
        assert_eq!(format_amount("cpu", 1500), "1500m");
        assert_eq!(format_amount("hugepages-2Mi", 4 << 20), "4Mi");
    }

    /// The orchestrator's flow with the memory provider, pod scope: one merged hint, every
    /// container allocated with it.
    #[test]
    fn pod_scope_flow_with_memory_provider() {
        let t = topo(2);
        let tm = TopologyManager::new(
            TopologyManagerConfig {
                policy: TopologyPolicy::SingleNumaNode,
                scope: Scope::Pod,
                ..TopologyManagerConfig::default()
            },
            &t,
        )
        .expect("ok");
        let mut memory = MemoryPolicy::new(
            &MemoryPolicyConfig {
                policy: MemoryPolicyKind::Static,
                reserved: BTreeMap::from([(0, 2 * GI), (1, GI)]),
                reserved_hugepages: BTreeMap::new(),
            },
            &t,
        )
        .expect("ok");
        let c1 = amounts(&[("memory", 10 * GI)]);
        let c2 = amounts(&[("memory", 12 * GI)]);
        let pod = pod_request(&[(ContainerKind::App, &c1), (ContainerKind::App, &c2)]);
        let providers: Vec<&mut dyn HintProvider> = vec![&mut memory];
        let target = HintTarget::Pod {
            uid: "u1",
            guaranteed: true,
            resources: &pod,
        };
        let hints: Vec<ProviderHints> = providers.iter().map(|p| p.hints(&target)).collect();
        let affinity = tm
            .admit("pod default/web", &pod, &hints, || {
                merge_free(providers.iter().map(|p| p.free_per_node()))
            })
            .expect("22Gi fits on one node");
        assert_eq!(affinity, NumaMask::single(0));
        for p in providers {
            for (name, res) in [("a", &c1), ("b", &c2)] {
                p.allocate(&ContainerKey::new("u1", name), true, res, affinity)
                    .expect("allocated");
            }
        }
        assert_eq!(
            memory.free(0, crate::core::memory_policy::MemoryResource::Memory),
            8 * GI
        );
        // A second identical pod only fits on node 1; a third nowhere on one node.
        let target = HintTarget::Pod {
            uid: "u2",
            guaranteed: true,
            resources: &pod,
        };
        let hints = [HintProvider::hints(&memory, &target)];
        assert_eq!(
            tm.admit("pod default/web2", &pod, &hints, FreePerNode::new),
            Ok(NumaMask::single(1))
        );
    }
}
