//! Topology-manager vocabulary and hint merging. Owns [`NumaMask`] (a set of NUMA node ids),
//! [`TopologyHint`] (a mask plus whether it is preferred), the policies ([`TopologyPolicy`],
//! [`TopologyOptions`]) and [`merge`], the pure core of the topology manager. Mirrors
//! `pkg/kubelet/cm/topologymanager/{bitmask,policy,policy_best_effort,policy_restricted,
//! policy_single_numa_node,policy_options,numa_info}.go`.
//!
//! Provider convention (as the kubelet's `HintProvider`): for each resource a provider returns
//! `None` ("no preference": any placement works) or `Some(hints)`; `Some(vec![])` means the request
//! cannot be satisfied anywhere.
//!
//! ## How [`merge`] differs from the kubelet's `HintMerger` (same answers, different cost)
//! The kubelet walks the full cross product of every resource's hints (`Π |hints|`, which is what
//! caps it at 8 NUMA nodes) and keeps a running best with a pairwise comparison. Here the set of
//! distinct merged hints is built one resource at a time (a merged hint only depends on the AND of
//! the masks, whether every hint was preferred, and the first mask seen while all were equal), so
//! the work is `Σ |states| × |hints|` with `|states| ≤ 2·2^nodes + 1`; the best of that set is then
//! picked with a total order equal to the kubelet's comparison (see `candidate_key`). Because the
//! order is total, the answer does not depend on provider or hint order, which the kubelet only
//! gets by accident of map iteration.
use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// NUMA node ids usable in a mask: `0..MAX_NUMA_ID`.
pub const MAX_NUMA_ID: usize = 64;

/// A set of NUMA node ids (kernel ids, < [`MAX_NUMA_ID`]).
#[derive(
    Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct NumaMask(u64);

impl NumaMask {
    pub const EMPTY: NumaMask = NumaMask(0);

    /// The mask of `ids`; `None` if an id is ≥ [`MAX_NUMA_ID`].
    pub fn from_ids<I: IntoIterator<Item = usize>>(ids: I) -> Option<NumaMask> {
        let mut bits = 0u64;
        for id in ids {
            if id >= MAX_NUMA_ID {
                return None;
            }
            bits |= 1 << id;
        }
        Some(NumaMask(bits))
    }

    pub fn single(id: usize) -> Option<NumaMask> {
        Self::from_ids([id])
    }

    pub fn bits(self) -> u64 {
        self.0
    }

    pub fn from_bits(bits: u64) -> NumaMask {
        NumaMask(bits)
    }

    pub fn contains(self, id: usize) -> bool {
        id < MAX_NUMA_ID && self.0 & (1 << id) != 0
    }

    /// Number of nodes in the mask.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn and(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 & other.0)
    }

    pub fn or(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 | other.0)
    }

    pub fn is_subset_of(self, other: NumaMask) -> bool {
        self.0 & !other.0 == 0
    }

    /// Ascending node ids.
    pub fn ids(self) -> impl Iterator<Item = usize> {
        (0..MAX_NUMA_ID).filter(move |i| self.0 & (1 << i) != 0)
    }

    /// The kubelet's `IsNarrowerThan`: fewer nodes, or as many nodes with lower ids.
    pub fn is_narrower_than(self, other: NumaMask) -> bool {
        if self.count() == other.count() {
            return self.0 < other.0;
        }
        self.count() < other.count()
    }
}

impl fmt::Display for NumaMask {
    /// Linux list syntax, as used for `cpuset.mems` (`0-1,3`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set: crate::machine::cpuset::CpuSet = self.ids().collect();
        write!(f, "{set}")
    }
}

impl fmt::Debug for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NumaMask({self})")
    }
}

/// One placement a provider can live with: `affinity` `None` means "any node".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopologyHint {
    pub affinity: Option<NumaMask>,
    pub preferred: bool,
}

impl TopologyHint {
    pub fn new(affinity: NumaMask, preferred: bool) -> TopologyHint {
        TopologyHint {
            affinity: Some(affinity),
            preferred,
        }
    }

    /// The "don't care" hint.
    pub fn any() -> TopologyHint {
        TopologyHint {
            affinity: None,
            preferred: true,
        }
    }
}

/// Hints of one provider: resource name → `None` (no preference) or the hints
/// (`Some(vec![])`: the resource cannot be satisfied anywhere).
pub type ProviderHints = BTreeMap<String, Option<Vec<TopologyHint>>>;

/// The kubelet's `defaultMaxAllowableNUMANodes`: the largest machine a policy other than `none`
/// runs on unless `max_allowable_numa_nodes` raises it.
pub const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: usize = 8;

/// `--topology-manager-policy` (`[topology] policy`). The default is topolet's
/// (`best-effort`), not the kubelet's (`none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyPolicy {
    None,
    #[default]
    BestEffort,
    Restricted,
    SingleNumaNode,
}

impl TopologyPolicy {
    /// The kubelet's spelling (`best-effort`, …), as used in configuration and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            TopologyPolicy::None => "none",
            TopologyPolicy::BestEffort => "best-effort",
            TopologyPolicy::Restricted => "restricted",
            TopologyPolicy::SingleNumaNode => "single-numa-node",
        }
    }

    /// Parse the kubelet's spelling; `None` for an unknown name.
    pub fn parse(text: &str) -> Option<TopologyPolicy> {
        [
            TopologyPolicy::None,
            TopologyPolicy::BestEffort,
            TopologyPolicy::Restricted,
            TopologyPolicy::SingleNumaNode,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
    }
}

impl fmt::Display for TopologyPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--topology-manager-policy-options` (`policy_options.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopologyOptions {
    /// `prefer-closest-numa-nodes`: among equally wide masks prefer the lowest average distance.
    pub prefer_closest_numa_nodes: bool,
    /// `max-allowable-numa-nodes` (≥ 8, as the kubelet requires).
    pub max_allowable_numa_nodes: usize,
}

impl Default for TopologyOptions {
    fn default() -> Self {
        TopologyOptions {
            prefer_closest_numa_nodes: false,
            max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
        }
    }
}

/// Why a topology-manager configuration cannot run on this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyConfigError {
    #[error(
        "max_allowable_numa_nodes = {0} is below the minimum of {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}"
    )]
    MaxAllowableTooSmall(usize),
    #[error(
        "topology manager policy {policy} is unsupported on machines with more than \
         {max_allowable} numa nodes: this machine has {nodes} (raise max_allowable_numa_nodes \
         or use policy none)"
    )]
    TooManyNumaNodes {
        policy: TopologyPolicy,
        max_allowable: usize,
        nodes: usize,
    },
    #[error("numa node id {0} is too large for a numa mask (ids must be below {MAX_NUMA_ID})")]
    NodeIdTooLarge(usize),
}

impl TopologyOptions {
    /// The kubelet's checks at start-up (`NewManager`, `NewPolicyOptions`): the option's minimum,
    /// and a policy other than `none` only on machines with at most `max_allowable_numa_nodes`.
    pub fn validate(
        &self,
        policy: TopologyPolicy,
        numa_nodes: &[usize],
    ) -> Result<(), TopologyConfigError> {
        if self.max_allowable_numa_nodes < DEFAULT_MAX_ALLOWABLE_NUMA_NODES {
            return Err(TopologyConfigError::MaxAllowableTooSmall(
                self.max_allowable_numa_nodes,
            ));
        }
        if policy == TopologyPolicy::None {
            return Ok(());
        }
        if numa_nodes.len() > self.max_allowable_numa_nodes {
            return Err(TopologyConfigError::TooManyNumaNodes {
                policy,
                max_allowable: self.max_allowable_numa_nodes,
                nodes: numa_nodes.len(),
            });
        }
        if let Some(&id) = numa_nodes.iter().find(|&&id| id >= MAX_NUMA_ID) {
            return Err(TopologyConfigError::NodeIdTooLarge(id));
        }
        Ok(())
    }
}

/// The merged hint and whether the policy admits it (`Policy.Merge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeResult {
    pub hint: TopologyHint,
    pub admit: bool,
}

/// `filterProvidersHints`: one hint list per resource, with "no preference" and "cannot satisfy"
/// made explicit. An empty provider map counts as one "no preference" resource.
fn provider_hint_lists(providers: &[ProviderHints]) -> Vec<Vec<TopologyHint>> {
    let mut lists = Vec::new();
    for provider in providers {
        if provider.is_empty() {
            lists.push(vec![TopologyHint::any()]);
            continue;
        }
        for hints in provider.values() {
            lists.push(match hints {
                None => vec![TopologyHint::any()],
                Some(h) if h.is_empty() => vec![TopologyHint {
                    affinity: None,
                    preferred: false,
                }],
                Some(h) => h.clone(),
            });
        }
    }
    lists
}

/// `filterSingleNumaHints`: only preferred hints that are "any node" or exactly one node.
fn single_numa_lists(lists: Vec<Vec<TopologyHint>>) -> Vec<Vec<TopologyHint>> {
    lists
        .into_iter()
        .map(|list| {
            list.into_iter()
                .filter(|h| h.preferred && h.affinity.is_none_or(|m| m.count() == 1))
                .collect()
        })
        .collect()
}

/// `maxOfMinAffinityCounts`: the widest of every resource's narrowest mask.
fn best_non_preferred_count(lists: &[Vec<TopologyHint>]) -> u32 {
    lists
        .iter()
        .filter_map(|list| {
            list.iter()
                .filter_map(|h| h.affinity)
                .map(NumaMask::count)
                .min()
        })
        .max()
        .unwrap_or(0)
}

/// One distinct outcome of merging a prefix of the permutation: the AND of the masks so far,
/// and — while every hint so far was preferred and every mask equal — the first mask seen.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct MergeState {
    and: u64,
    preferred: bool,
    first: Option<u64>,
}

/// Every distinct merged hint of the cross product of `lists` (`mergePermutation` over
/// `iterateAllProviderTopologyHints`), computed resource by resource with de-duplication.
fn merged_candidates(default: NumaMask, lists: &[Vec<TopologyHint>]) -> Vec<(u64, bool)> {
    let inside = lists
        .iter()
        .flatten()
        .all(|h| h.affinity.is_none_or(|m| m.is_subset_of(default)));
    if inside && (default.count() as usize) <= MAX_ENUMERATED_NODES {
        dense_candidates(default, lists)
    } else {
        sparse_candidates(default, lists).into_iter().collect()
    }
}

/// [`merged_candidates`] for masks inside `default` on at most [`MAX_ENUMERATED_NODES`] nodes:
/// the states live in flat tables indexed by the mask compressed to `default`'s nodes.
fn dense_candidates(default: NumaMask, lists: &[Vec<TopologyHint>]) -> Vec<(u64, bool)> {
    let ids: Vec<usize> = default.ids().collect();
    let compress = |bits: u64| -> usize {
        ids.iter()
            .enumerate()
            .filter(|(_, &id)| bits & (1 << id) != 0)
            .fold(0usize, |acc, (i, _)| acc | (1 << i))
    };
    let full = (1usize << ids.len()) - 1;
    let size = full + 1;
    // all_preferred_any: every hint so far preferred and "any node" (AND = full).
    let mut all_preferred_any = true;
    // preferred[f]: every hint so far preferred, every mask equal to f.
    let mut preferred = vec![false; size];
    // non_preferred[x]: some hint not preferred or masks unequal, AND = x.
    let mut non_preferred = vec![false; size];
    for list in lists {
        let mut hints: Vec<(Option<usize>, bool)> = list
            .iter()
            .map(|h| (h.affinity.map(|m| compress(m.bits())), h.preferred))
            .collect();
        hints.sort_unstable();
        hints.dedup();
        let pref_set: Vec<usize> = (0..size).filter(|&i| preferred[i]).collect();
        let non_pref_set: Vec<usize> = (0..size).filter(|&i| non_preferred[i]).collect();
        let mut next_any = false;
        let mut next_pref = vec![false; size];
        let mut next_non = vec![false; size];
        for &(mask, p) in &hints {
            let m = mask.unwrap_or(full);
            if all_preferred_any {
                match (p, mask) {
                    (true, None) => next_any = true,
                    (true, Some(a)) => next_pref[a] = true,
                    (false, _) => next_non[m] = true,
                }
            }
            for &f in &pref_set {
                if p && mask.is_none_or(|a| a == f) {
                    next_pref[f] = true;
                } else {
                    next_non[f & m] = true;
                }
            }
            for &x in &non_pref_set {
                next_non[x & m] = true;
            }
        }
        all_preferred_any = next_any;
        preferred = next_pref;
        non_preferred = next_non;
    }
    let expand = |dense: usize| -> u64 {
        ids.iter()
            .enumerate()
            .filter(|(i, _)| dense & (1 << i) != 0)
            .fold(0u64, |acc, (_, &id)| acc | (1 << id))
    };
    let mut out = Vec::new();
    if all_preferred_any {
        out.push((default.bits(), true));
    }
    out.extend(
        (0..size)
            .filter(|&i| preferred[i])
            .map(|i| (expand(i), true)),
    );
    out.extend(
        (0..size)
            .filter(|&i| non_preferred[i])
            .map(|i| (expand(i), false)),
    );
    out
}

/// [`merged_candidates`] for any masks, with hashed states.
fn sparse_candidates(default: NumaMask, lists: &[Vec<TopologyHint>]) -> HashSet<(u64, bool)> {
    let mut states: HashSet<MergeState> = HashSet::from([MergeState {
        and: default.bits(),
        preferred: true,
        first: None,
    }]);
    for list in lists {
        let mut next = HashSet::with_capacity(states.len().max(list.len()));
        for s in &states {
            for h in list {
                let mask = h.affinity.map(NumaMask::bits);
                let equal = match (s.first, mask) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                let preferred = s.preferred && h.preferred && equal;
                next.insert(MergeState {
                    and: s.and & mask.unwrap_or(default.bits()),
                    preferred,
                    first: if preferred { s.first.or(mask) } else { None },
                });
            }
        }
        states = next;
        if states.is_empty() {
            break;
        }
    }
    states.into_iter().map(|s| (s.and, s.preferred)).collect()
}

/// The kubelet's `HintMerger.compare` as a sort key (smaller is better), so that the best merged
/// hint is a plain minimum:
/// - preferred before non-preferred;
/// - among preferred: the mask order (narrowest: fewer nodes, then lower ids; with
///   prefer-closest: fewer nodes, then lower average distance, then lower ids);
/// - among non-preferred (cases 1–3cc of `compare`): a mask as wide as the widest provider's
///   narrowest mask (`bestNonPreferredAffinityCount`, B) first, then narrower masks from the
///   widest down, then wider masks from the narrowest up; ties by the mask order.
fn candidate_key(
    mask: NumaMask,
    preferred: bool,
    b: u32,
    closest: bool,
    distances: &impl Fn(usize, usize) -> u32,
) -> (u8, u8, u32, u32, u64, u64) {
    let count = mask.count();
    let distance_sum: u64 = if closest {
        mask.ids()
            .flat_map(|a| mask.ids().map(move |c| (a, c)))
            .map(|(a, c)| u64::from(distances(a, c)))
            .sum()
    } else {
        0
    };
    let (tier, rank) = if preferred {
        (0, 0)
    } else if count == b {
        (1, 0)
    } else if count < b {
        (1, 1)
    } else {
        (1, 2)
    };
    let closeness = if preferred || count >= b {
        0
    } else {
        b - count
    };
    // Equal counts compare average distance; the sums share the divisor count².
    (tier, rank, closeness, count, distance_sum, mask.bits())
}

/// The topology manager's `Policy.Merge`: the best merged hint of every provider's hints under
/// `policy`, and whether the policy admits it.
///
/// `numa_nodes` are the machine's node ids (the default "any node" mask), `distances(a, b)` the
/// node distance (used with `prefer_closest_numa_nodes`). `none` returns an "any node" hint and
/// admits; `best-effort` always admits; `restricted` and `single-numa-node` admit only a
/// preferred hint; `single-numa-node` considers only single-node (or "any") preferred hints and
/// reports "all nodes" as `affinity: None`.
pub fn merge(
    policy: TopologyPolicy,
    numa_nodes: &[usize],
    distances: impl Fn(usize, usize) -> u32,
    options: &TopologyOptions,
    providers: &[ProviderHints],
) -> MergeResult {
    if policy == TopologyPolicy::None {
        return MergeResult {
            hint: TopologyHint {
                affinity: None,
                preferred: false,
            },
            admit: true,
        };
    }
    let default = NumaMask::from_bits(
        numa_nodes
            .iter()
            .filter(|&&id| id < MAX_NUMA_ID)
            .fold(0u64, |bits, &id| bits | (1 << id)),
    );
    let mut lists = provider_hint_lists(providers);
    if policy == TopologyPolicy::SingleNumaNode {
        lists = single_numa_lists(lists);
    }
    let b = best_non_preferred_count(&lists);
    let closest = options.prefer_closest_numa_nodes && policy != TopologyPolicy::SingleNumaNode;
    let best = merged_candidates(default, &lists)
        .into_iter()
        .map(|(bits, preferred)| (NumaMask::from_bits(bits), preferred))
        .filter(|(mask, _)| !mask.is_empty())
        .min_by_key(|&(mask, preferred)| candidate_key(mask, preferred, b, closest, &distances));
    let mut hint = match best {
        Some((mask, preferred)) => TopologyHint::new(mask, preferred),
        None => TopologyHint::new(default, false),
    };
    if policy == TopologyPolicy::SingleNumaNode && hint.affinity == Some(default) {
        hint.affinity = None;
    }
    let admit = match policy {
        TopologyPolicy::None | TopologyPolicy::BestEffort => true,
        TopologyPolicy::Restricted | TopologyPolicy::SingleNumaNode => hint.preferred,
    };
    MergeResult { hint, admit }
}

/// Every non-empty subset of `nodes` as a mask, narrowest first then by lower ids (the order of
/// the kubelet's `bitmask.IterateBitMasks`, which providers use to generate hints). Subsets are
/// only enumerated up to `MAX_ENUMERATED_NODES` nodes; above that, the single nodes and the
/// whole set are returned (a policy other than `none` is refused there anyway by default).
pub fn node_subsets(nodes: &[usize]) -> Vec<NumaMask> {
    let nodes: Vec<usize> = nodes
        .iter()
        .copied()
        .filter(|&id| id < MAX_NUMA_ID)
        .collect();
    let mut out = Vec::new();
    if nodes.len() > MAX_ENUMERATED_NODES {
        out.extend(nodes.iter().filter_map(|&id| NumaMask::single(id)));
        if let Some(all) = NumaMask::from_ids(nodes.iter().copied()) {
            out.push(all);
        }
        return out;
    }
    for pick in 1u64..(1u64 << nodes.len()) {
        let bits = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| pick & (1 << i) != 0)
            .fold(0u64, |acc, (_, &id)| acc | (1 << id));
        out.push(NumaMask::from_bits(bits));
    }
    out.sort_by(|a, b| {
        a.count()
            .cmp(&b.count())
            .then_with(|| a.bits().cmp(&b.bits()))
    });
    out
}

/// Above this many NUMA nodes [`node_subsets`] stops enumerating every subset.
pub const MAX_ENUMERATED_NODES: usize = 16;

#[cfg(test)]
#[path = "hints_kubelet_tests.rs"]
mod kubelet_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_basics() {
        let m = NumaMask::from_ids([0, 1, 3]).unwrap();
        assert_eq!(m.to_string(), "0-1,3");
        assert_eq!(m.count(), 3);
        assert!(m.contains(3) && !m.contains(2) && !m.contains(99));
        assert!(NumaMask::from_ids([64]).is_none());
        assert!(NumaMask::single(1).unwrap().is_subset_of(m));
        assert!(NumaMask::single(0)
            .unwrap()
            .is_narrower_than(NumaMask::single(1).unwrap()));
        assert!(NumaMask::single(3)
            .unwrap()
            .is_narrower_than(NumaMask::from_ids([0, 1]).unwrap()));
    }
}
