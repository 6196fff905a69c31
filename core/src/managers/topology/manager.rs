//! The topology manager's admission step for one container (container scope) or one pod (pod
//! scope): the orchestrator (`crate::placement`, `admit_hint`) gathers hints from the CPU, memory
//! (and hugepages) and device providers, [`TopologyManager::admit`] merges them under the policy
//! and admits or refuses with an error naming the policy, the request and what was free per NUMA
//! node, and the orchestrator then allocates every provider with the merged affinity. Mirrors
//! `pkg/kubelet/cm/topologymanager/{topology_manager,scope,scope_container,scope_pod}.go`; the
//! merge itself lives in [`crate::managers::topology::hints`].
//!
//! There is no provider trait (the kubelet's `HintProvider`): topolet has exactly three
//! providers, each with its own request type, and the orchestrator calls them directly. A trait
//! and a pod-request helper that only tests used were removed; the pod scope's aggregate request
//! is `Pod::effective_requests` (`crate::kube::pod`, KEP-753).
//!
//! Plain data in, decision out: the manager keeps no hint store (the kubelet's `Store.GetAffinity`
//! side channel); the affinity is returned and handed to each provider's `allocate`.
//!
//! Resource amounts ([`ResourceAmounts`]) use the Kubernetes resource names with integer units:
//! `cpu` in millicores, `memory` and `hugepages-<size>` in bytes, extended resources as counts.

use std::collections::BTreeMap;
use std::fmt;

use crate::machine::topology::Topology;
use crate::managers::memory::policy::binary_quantity;
use crate::managers::topology::hints::{
    merge, MergeResult, NumaMask, ProviderHints, TopologyConfigError, TopologyOptions,
    TopologyPolicy,
};

/// Resource name → amount (`cpu` millicores, `memory`/`hugepages-*` bytes, extended: count).
pub type ResourceAmounts = BTreeMap<String, u64>;

/// Node id → resource name → free amount, in the units of [`ResourceAmounts`].
pub type FreePerNode = BTreeMap<usize, BTreeMap<String, u64>>;

/// `--topology-manager-scope` (`[topology] scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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

    /// The configuration's spelling (`container`, `pod`), as `topolet status` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Container => "container",
            Scope::Pod => "pod",
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[topology]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopologyManagerConfig {
    pub policy: TopologyPolicy,
    pub scope: Scope,
    pub options: TopologyOptions,
}

/// One amount in Kubernetes spelling: `cpu` as cores (`6`, `1500m`), memory and hugepages with a
/// binary suffix (`8Gi`), anything else as a count.
pub fn format_amount(resource: &str, amount: u64) -> String {
    if resource == "cpu" {
        if amount.is_multiple_of(1000) {
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
    use crate::kube::container_key::ContainerKey;
    use crate::machine::topology::SyntheticSpec;
    use crate::managers::memory::policy::{
        MemoryPolicy, MemoryPolicyConfig, MemoryPolicyKind, MemoryRequest,
    };
    use crate::managers::topology::hints::TopologyHint;

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
        let none = TopologyManagerConfig {
            policy: TopologyPolicy::None,
            ..TopologyManagerConfig::default()
        };
        assert!(TopologyManager::new(none, &t).is_ok());
    }

    #[test]
    fn amounts_in_kubernetes_spelling() {
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
        let request = |bytes: u64| MemoryRequest {
            guaranteed: true,
            memory: bytes,
            hugepages: BTreeMap::new(),
        };
        let pod = amounts(&[("memory", 22 * GI)]);
        let hints = [memory.pod_hints("u1", &request(22 * GI))];
        let affinity = tm
            .admit("pod default/web", &pod, &hints, || memory.free_per_node())
            .expect("22Gi fits on one node");
        assert_eq!(affinity, NumaMask::single(0));
        for (name, bytes) in [("a", 10 * GI), ("b", 12 * GI)] {
            memory
                .allocate(&ContainerKey::new("u1", name), &request(bytes), affinity)
                .expect("allocated");
        }
        assert_eq!(
            memory.free(0, crate::managers::memory::policy::MemoryResource::Memory),
            8 * GI
        );
        // A second identical pod only fits on node 1.
        let hints = [memory.pod_hints("u2", &request(22 * GI))];
        assert_eq!(
            tm.admit("pod default/web2", &pod, &hints, FreePerNode::new),
            Ok(NumaMask::single(1))
        );
    }
}
