//! The CPU manager policy (`none` / `static`): configuration and its validation, the reserved
//! set, exclusive assignments, topology hints, allocation with the init-container handoff,
//! release, in-place resize and restart restore.
//!
//! Mirrors `pkg/kubelet/cm/cpumanager/{policy_none.go,policy_static.go,policy_options.go}`.
//! Pure: no I/O, no clock, no globals. The only state is the exclusive assignments (plus which of
//! them belong to non-restartable init containers, for the handoff); every pool is derived:
//!
//! | pool | definition |
//! |---|---|
//! | reserved | `reserved_cpus`, or `reserved_cpu_count` CPUs taken topology-aware from the lowest ids |
//! | exclusive | union of the assignments |
//! | shared | all − exclusive (reserved CPUs stay in it, like the kubelet's default cpuset); with `strict_cpu_reservation` also − reserved |
//! | assignable | all − reserved − exclusive |
//!
//! Choices (differences from the kubelet, each documented where implemented):
//! - an empty reservation is allowed (the kubelet refuses to start); `new` returns a warning;
//! - the shared pool is never emptied by an exclusive allocation or resize: the kubelet keeps it
//!   non-empty only implicitly (it requires reserved CPUs, which sit in the default set); with an
//!   empty reservation or `strict_cpu_reservation` that no longer holds, so [`CpuPolicy::allocate`]
//!   refuses with [`CpuPolicyError::SharedPoolExhausted`] (as nri-plugins learned, PRs #598/#602);
//! - init-container CPUs are *transferred* to the pod's next containers (kubernetes#94220): the
//!   kubelet's `cpusToReuse` lets the app container reuse them but the init container's entry
//!   keeps them too, so both hold the same CPUs until the init is removed;
//! - reusable (init) CPUs are taken first, then CPUs in the affinity, then the rest.

use std::collections::{BTreeMap, BTreeSet};

use crate::kube::container_key::{self, ContainerKey};
use crate::machine::cpuset::CpuSet;
use crate::machine::topology::Topology;
use crate::managers::cpu::alloc::{
    take_by_topology_indexed, AllocOptions, CpuAllocError, CpuIndex,
};
use crate::managers::topology::hints::{NumaMask, TopologyHint};

/// `[cpu] policy` (kubelet `cpuManagerPolicy`). The default is topolet's (`static`), not the
/// kubelet's (`none`): exclusive CPUs are what topolet is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuPolicyName {
    None,
    #[default]
    Static,
}

impl CpuPolicyName {
    /// The configuration's spelling (`none`, `static`), as `topolet status` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            CpuPolicyName::None => "none",
            CpuPolicyName::Static => "static",
        }
    }
}

impl std::fmt::Display for CpuPolicyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `[cpu]` configuration keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuPolicyConfig {
    pub policy: CpuPolicyName,
    /// `reserved_cpus`: an explicit set.
    pub reserved_cpus: Option<CpuSet>,
    /// `reserved_cpu_count`: a count, taken topology-aware from the lowest ids.
    pub reserved_cpu_count: Option<usize>,
    pub full_pcpus_only: bool,
    pub distribute_cpus_across_numa: bool,
    pub distribute_cpus_across_cores: bool,
    pub align_by_socket: bool,
    pub prefer_align_cpus_by_uncorecache: bool,
    pub strict_cpu_reservation: bool,
}

impl CpuPolicyConfig {
    /// The allocator options these keys select.
    pub fn alloc_options(&self) -> AllocOptions {
        AllocOptions {
            full_pcpus_only: self.full_pcpus_only,
            distribute_cpus_across_numa: self.distribute_cpus_across_numa,
            distribute_cpus_across_cores: self.distribute_cpus_across_cores,
            align_by_socket: self.align_by_socket,
            prefer_align_cpus_by_uncorecache: self.prefer_align_cpus_by_uncorecache,
        }
    }

    fn options(&self) -> [(&'static str, bool); 6] {
        [
            ("full_pcpus_only", self.full_pcpus_only),
            (
                "distribute_cpus_across_numa",
                self.distribute_cpus_across_numa,
            ),
            (
                "distribute_cpus_across_cores",
                self.distribute_cpus_across_cores,
            ),
            ("align_by_socket", self.align_by_socket),
            (
                "prefer_align_cpus_by_uncorecache",
                self.prefer_align_cpus_by_uncorecache,
            ),
            ("strict_cpu_reservation", self.strict_cpu_reservation),
        ]
    }
}

/// What kind of container asks for CPUs (decides the init-container handoff).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContainerRole {
    /// A non-restartable init container: its CPUs are handed on to the pod's later containers.
    Init,
    /// A restartable init container (sidecar): keeps its own CPUs for the pod's life.
    Sidecar,
    App,
}

/// Why a configuration or a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuPolicyError {
    #[error("cpu.{key}: {reason}")]
    Config { key: &'static str, reason: String },
    #[error("{key}: cpu policy is none, no exclusive cpus")]
    PolicyNone { key: ContainerKey },
    #[error("{key}: requested 0 cpus")]
    ZeroRequest { key: ContainerKey },
    #[error("{key}: {source}")]
    Alloc {
        key: ContainerKey,
        #[source]
        source: CpuAllocError,
    },
    #[error("{key}: already holds cpus {held} ({} cpus), not {requested}; use resize", held.len())]
    SizeMismatch {
        key: ContainerKey,
        held: CpuSet,
        requested: usize,
    },
    #[error("{key}: taking {requested} exclusive cpus would leave the shared pool empty (shared: {shared:?}); containers without exclusive cpus need at least one cpu")]
    SharedPoolExhausted {
        key: ContainerKey,
        requested: usize,
        shared: String,
    },
    #[error("{key}: no exclusive cpu assignment")]
    NotAssigned { key: ContainerKey },
    #[error("{key}: cannot restore cpus {cpus}: {reason}")]
    Restore {
        key: ContainerKey,
        cpus: CpuSet,
        reason: String,
    },
    #[error("cpu policy invariant violated: {0}")]
    Invariant(String),
}

/// The CPU manager state: topology, configuration, reserved set and exclusive assignments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuPolicy {
    topo: Topology,
    cfg: CpuPolicyConfig,
    reserved: CpuSet,
    assignments: BTreeMap<ContainerKey, CpuSet>,
    /// Keys of `assignments` that belong to non-restartable init containers.
    init_containers: BTreeSet<ContainerKey>,
    /// Derived from `topo` (a pure function of it), kept for speed.
    index: CpuIndex,
    /// Derived: the union of `assignments`, kept for speed (1,000 unions cost more than an
    /// allocation). Exact under incremental updates because assignments are disjoint;
    /// `check_invariants` recomputes it.
    exclusive_cache: CpuSet,
}

impl CpuPolicy {
    /// Validates `cfg` against `topo` and builds an empty policy. Returns warnings for the caller
    /// to log.
    pub fn new(
        topo: Topology,
        cfg: CpuPolicyConfig,
    ) -> Result<(CpuPolicy, Vec<String>), CpuPolicyError> {
        let err = |key: &'static str, reason: String| CpuPolicyError::Config { key, reason };
        let mut warnings = Vec::new();
        let index = CpuIndex::new(&topo);
        let online = topo.cpus().clone();

        if cfg.policy == CpuPolicyName::None {
            // policy_none.go: "None policy: received unsupported options".
            if let Some((key, _)) = cfg.options().into_iter().find(|(_, on)| *on) {
                return Err(err(key, "requires policy static".into()));
            }
        }
        // policy_options.go: option pairs the kubelet rejects.
        let incompatible = [
            (
                cfg.full_pcpus_only && cfg.distribute_cpus_across_cores,
                "full_pcpus_only",
                "distribute_cpus_across_cores",
            ),
            (
                cfg.distribute_cpus_across_numa && cfg.distribute_cpus_across_cores,
                "distribute_cpus_across_numa",
                "distribute_cpus_across_cores",
            ),
            (
                cfg.prefer_align_cpus_by_uncorecache && cfg.distribute_cpus_across_cores,
                "prefer_align_cpus_by_uncorecache",
                "distribute_cpus_across_cores",
            ),
            (
                cfg.prefer_align_cpus_by_uncorecache && cfg.distribute_cpus_across_numa,
                "prefer_align_cpus_by_uncorecache",
                "distribute_cpus_across_numa",
            ),
        ];
        if let Some((_, a, b)) = incompatible.iter().find(|(bad, _, _)| *bad) {
            return Err(err(a, format!("cannot be used together with {b}")));
        }
        let sockets = topo.socket_ids().count();
        let nodes = topo.numa_ids().count();
        if cfg.align_by_socket && sockets > nodes {
            return Err(err(
                "align_by_socket",
                format!("not compatible with a machine with more sockets ({sockets}) than numa nodes ({nodes})"),
            ));
        }

        let reserved = match (&cfg.reserved_cpus, cfg.reserved_cpu_count) {
            (Some(set), count) => {
                let missing = set.difference(&online);
                if !missing.is_empty() {
                    return Err(err(
                        "reserved_cpus",
                        format!("cpus {missing} do not exist on this machine (online: {online})"),
                    ));
                }
                if let Some(c) = count {
                    if c != set.len() {
                        return Err(err(
                            "reserved_cpu_count",
                            format!(
                                "{c} disagrees with reserved_cpus {set} ({} cpus)",
                                set.len()
                            ),
                        ));
                    }
                }
                set.clone()
            }
            (None, Some(c)) => {
                if c > online.len() {
                    return Err(err(
                        "reserved_cpu_count",
                        format!("{c} exceeds the {} online cpus", online.len()),
                    ));
                }
                take_by_topology_indexed(&index, &online, c, &AllocOptions::default()).map_err(
                    |e| {
                        err(
                            "reserved_cpu_count",
                            format!("cannot reserve {c} cpus: {e}"),
                        )
                    },
                )?
            }
            (None, None) => CpuSet::new(),
        };
        if cfg.policy == CpuPolicyName::Static {
            if reserved == online {
                return Err(err(
                    "reserved_cpus",
                    format!("reserving every cpu ({reserved}) leaves none for containers"),
                ));
            }
            if reserved.is_empty() {
                warnings.push(
                    "cpu: no cpus reserved for system daemons; they share the shared pool with containers (set cpu.reserved_cpus or cpu.reserved_cpu_count)".to_string(),
                );
                if cfg.strict_cpu_reservation {
                    warnings.push(
                        "cpu.strict_cpu_reservation: has no effect with an empty reservation"
                            .to_string(),
                    );
                }
            }
            if cfg.full_pcpus_only {
                let split = index.core_closure(&reserved).difference(&reserved);
                if !split.is_empty() {
                    warnings.push(format!(
                        "cpu.reserved_cpus: {reserved} splits cores; with full_pcpus_only their sibling threads {split} cannot be allocated exclusively"
                    ));
                }
            }
        }
        Ok((
            CpuPolicy {
                topo,
                cfg,
                reserved,
                assignments: BTreeMap::new(),
                init_containers: BTreeSet::new(),
                index,
                exclusive_cache: CpuSet::new(),
            },
            warnings,
        ))
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    pub fn config(&self) -> &CpuPolicyConfig {
        &self.cfg
    }

    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    fn exclusive_union(&self) -> CpuSet {
        self.exclusive_cache.clone()
    }

    fn recompute_exclusive(&self) -> CpuSet {
        let mut all = CpuSet::new();
        for set in self.assignments.values() {
            all.extend_from(set);
        }
        all
    }

    /// CPUs for containers without exclusive CPUs: all − exclusive (− reserved with strict
    /// reservation). With policy `none`: every CPU.
    pub fn shared_pool(&self) -> CpuSet {
        let all = self.topo.cpus();
        if self.cfg.policy == CpuPolicyName::None {
            return all.clone();
        }
        let mut shared = all.difference(&self.exclusive_union());
        if self.cfg.strict_cpu_reservation {
            shared.remove_all(&self.reserved);
        }
        shared
    }

    /// CPUs free for exclusive use: all − reserved − exclusive (empty with policy `none`).
    pub fn assignable(&self) -> CpuSet {
        if self.cfg.policy == CpuPolicyName::None {
            return CpuSet::new();
        }
        self.topo
            .cpus()
            .difference(&self.reserved)
            .difference(&self.exclusive_union())
    }

    pub fn exclusive(&self, key: &ContainerKey) -> Option<&CpuSet> {
        self.assignments.get(key)
    }

    pub fn assignments(&self) -> &BTreeMap<ContainerKey, CpuSet> {
        &self.assignments
    }

    /// The role `key`'s assignment was made for (init containers hand their CPUs on).
    pub fn role(&self, key: &ContainerKey) -> ContainerRole {
        if self.init_containers.contains(key) {
            ContainerRole::Init
        } else {
            ContainerRole::App
        }
    }

    /// Static policy, Guaranteed pod, integer CPU request (`policy_static.go`
    /// `guaranteedCPUs`).
    pub fn is_exclusive_eligible(&self, guaranteed: bool, cpu_request_millis: u64) -> bool {
        self.cfg.policy == CpuPolicyName::Static
            && guaranteed
            && cpu_request_millis > 0
            && cpu_request_millis.is_multiple_of(1000)
    }

    /// CPUs held by the pod's non-restartable init containers other than `key`.
    fn reusable_for(&self, key: &ContainerKey) -> CpuSet {
        let mut out = CpuSet::new();
        for k in &self.init_containers {
            if k.pod_uid == key.pod_uid && k != key {
                if let Some(set) = self.assignments.get(k) {
                    out.extend_from(set);
                }
            }
        }
        out
    }

    /// The kubelet's static-policy `GetTopologyHints` for a container that needs `n_cpus`
    /// exclusive CPUs: `None` (no preference) with policy `none` or no request; for a container
    /// that already holds CPUs, hints for those CPUs (none at all if the size differs);
    /// otherwise one hint per NUMA mask with enough free (plus reusable) CPUs, preferred when it
    /// has the minimum number of nodes able to hold the request (or, with `align_by_socket`,
    /// when it spans the minimum number of sockets).
    pub fn hints(&self, key: &ContainerKey, n_cpus: usize) -> Option<Vec<TopologyHint>> {
        if self.cfg.policy == CpuPolicyName::None || n_cpus == 0 {
            return None;
        }
        if let Some(held) = self.assignments.get(key) {
            if held.len() != n_cpus {
                return Some(Vec::new());
            }
            return Some(self.generate_hints(held, &CpuSet::new(), n_cpus));
        }
        let reusable = self.reusable_for(key);
        let available = self.assignable();
        Some(self.generate_hints(&available, &reusable, n_cpus))
    }

    fn generate_hints(
        &self,
        available: &CpuSet,
        reusable: &CpuSet,
        request: usize,
    ) -> Vec<TopologyHint> {
        let nodes: Vec<usize> = self.topo.numa_ids().collect();
        let capacity: Vec<usize> = nodes
            .iter()
            .map(|&n| self.topo.numa_cpus(n).len())
            .collect();
        let mut free = vec![0usize; nodes.len()];
        for cpu in available.iter() {
            if let Some(i) = self
                .index
                .numa_of(cpu)
                .and_then(|n| nodes.iter().position(|&m| m == n))
            {
                free[i] += 1;
            }
        }
        let reusable_nodes: BTreeSet<usize> = reusable
            .iter()
            .filter_map(|c| self.index.numa_of(c))
            .collect();
        let mut min_size = nodes.len();
        let mut hints: Vec<(NumaMask, usize)> = Vec::new();
        for k in 1..=nodes.len() {
            let positions: Vec<usize> = (0..nodes.len()).collect();
            let mut combos: Vec<Vec<usize>> = Vec::new();
            subsets(&positions, k, &mut Vec::new(), 0, &mut combos);
            for combo in combos {
                let cap: usize = combo.iter().map(|&i| capacity[i]).sum();
                if cap >= request && k < min_size {
                    min_size = k;
                }
                let ids: Vec<usize> = combo.iter().map(|&i| nodes[i]).collect();
                // Reusable CPUs outside the mask disqualify it (as the kubelet).
                if !reusable_nodes.iter().all(|n| ids.contains(n)) {
                    continue;
                }
                let matching = reusable.len() + combo.iter().map(|&i| free[i]).sum::<usize>();
                if matching < request {
                    continue;
                }
                if let Some(mask) = NumaMask::from_ids(ids) {
                    hints.push((mask, k));
                }
            }
        }
        let per_socket = if self.topo.socket_ids().count() == 0 {
            0
        } else {
            nodes.len() / self.topo.socket_ids().count()
        };
        hints
            .into_iter()
            .map(|(mask, k)| {
                let socket_aligned = self.cfg.align_by_socket && per_socket > 0 && {
                    let min_sockets = min_size.div_ceil(per_socket);
                    let cpus = self.index.numa_cpus(mask.ids());
                    self.topo.sockets_of(&cpus).len() == min_sockets
                };
                TopologyHint::new(mask, socket_aligned || k == min_size)
            })
            .collect()
    }

    fn check_shared(
        &self,
        key: &ContainerKey,
        requested: usize,
        taking: &CpuSet,
    ) -> Result<(), CpuPolicyError> {
        let shared = self.shared_pool();
        if shared.difference(taking).is_empty() {
            return Err(CpuPolicyError::SharedPoolExhausted {
                key: key.clone(),
                requested,
                shared: shared.to_string(),
            });
        }
        Ok(())
    }

    /// Takes `need` CPUs from `candidates`, stage by stage (each stage a subset of the
    /// candidates to exhaust before the next), topology-aware within each stage.
    fn staged_take(
        &self,
        candidates: &CpuSet,
        stages: &[CpuSet],
        need: usize,
    ) -> Result<CpuSet, CpuAllocError> {
        let opts = self.cfg.alloc_options();
        let tpc = self.index.threads_per_core().max(1);
        let mut result = CpuSet::new();
        let mut left = need;
        for stage in stages {
            if left == 0 {
                break;
            }
            let mut free = stage.intersection(candidates).difference(&result);
            if opts.full_pcpus_only {
                free = self.index.whole_cores(&free);
            }
            let mut m = left.min(free.len());
            if opts.full_pcpus_only {
                m -= m % tpc;
            }
            if m == 0 {
                continue;
            }
            let got = take_by_topology_indexed(&self.index, &free, m, &opts)?;
            left -= got.len();
            result.extend_from(&got);
        }
        if left > 0 {
            let rest = candidates.difference(&result);
            // A refusal names the whole request and every candidate, not what the last stage
            // still lacked after earlier stages took their share.
            let got =
                take_by_topology_indexed(&self.index, &rest, left, &opts).map_err(|e| match e {
                    CpuAllocError::NotEnough { .. } => CpuAllocError::NotEnough {
                        requested: need,
                        available: candidates.len(),
                        free: candidates.to_string(),
                    },
                    CpuAllocError::SmtAlignment { cpus_per_core, .. } => {
                        CpuAllocError::SmtAlignment {
                            requested: need,
                            cpus_per_core,
                            available_physical: self.index.whole_cores(candidates).len(),
                        }
                    }
                })?;
            result.extend_from(&got);
        }
        Ok(result)
    }

    /// Gives `key` `n_cpus` exclusive CPUs (see the module docs for the order). Idempotent for
    /// an existing assignment of the same size. With `affinity` (the Topology Manager's merged
    /// hint), CPUs of those NUMA nodes (their sockets with `align_by_socket`) come first.
    pub fn allocate(
        &mut self,
        key: &ContainerKey,
        n_cpus: usize,
        role: ContainerRole,
        affinity: Option<NumaMask>,
    ) -> Result<CpuSet, CpuPolicyError> {
        if self.cfg.policy == CpuPolicyName::None {
            return Err(CpuPolicyError::PolicyNone { key: key.clone() });
        }
        if n_cpus == 0 {
            return Err(CpuPolicyError::ZeroRequest { key: key.clone() });
        }
        if let Some(held) = self.assignments.get(key) {
            if held.len() == n_cpus {
                return Ok(held.clone());
            }
            return Err(CpuPolicyError::SizeMismatch {
                key: key.clone(),
                held: held.clone(),
                requested: n_cpus,
            });
        }
        let reusable = self.reusable_for(key);
        let assignable = self.assignable();
        let candidates = if reusable.is_empty() {
            assignable
        } else {
            assignable.union(&reusable)
        };
        let mut stages = Vec::new();
        if let Some(mask) = affinity {
            let mut aligned = self.index.numa_cpus(mask.ids());
            if self.cfg.align_by_socket {
                aligned = self.index.socket_closure(&aligned);
            }
            stages.push(reusable.intersection(&aligned));
            stages.push(aligned);
        }
        stages.push(reusable.clone());
        let got = self
            .staged_take(&candidates, &stages, n_cpus)
            .map_err(|source| CpuPolicyError::Alloc {
                key: key.clone(),
                source,
            })?;
        self.check_shared(key, n_cpus, &got.difference(&reusable))?;

        // Hand over: the init containers no longer hold what was taken from them.
        let from_inits: Vec<ContainerKey> = self
            .init_containers
            .iter()
            .filter(|k| k.pod_uid == key.pod_uid && *k != key)
            .cloned()
            .collect();
        for k in from_inits {
            let now_empty = match self.assignments.get_mut(&k) {
                Some(set) => {
                    set.remove_all(&got);
                    set.is_empty()
                }
                None => false,
            };
            if now_empty {
                self.assignments.remove(&k);
                self.init_containers.remove(&k);
            }
        }
        self.assignments.insert(key.clone(), got.clone());
        self.exclusive_cache.extend_from(&got);
        if role == ContainerRole::Init {
            self.init_containers.insert(key.clone());
        }
        Ok(got)
    }

    /// Returns `key`'s CPUs to the pools.
    pub fn release(&mut self, key: &ContainerKey) -> Option<CpuSet> {
        self.init_containers.remove(key);
        let set = self.assignments.remove(key)?;
        self.exclusive_cache.remove_all(&set);
        Some(set)
    }

    /// Releases every container of the pod; returns what each held.
    pub fn release_pod(&mut self, pod_uid: &str) -> Vec<(ContainerKey, CpuSet)> {
        let keys: Vec<ContainerKey> = container_key::of_pod(&self.assignments, pod_uid)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.release(&k).map(|set| (k, set)))
            .collect()
    }

    /// In-place resize (KEP-5554): growing keeps the current CPUs and adds the nearest free ones
    /// (same cores, then L3 groups, NUMA nodes, sockets, anywhere); shrinking keeps the most
    /// compact subset. An infeasible resize changes nothing.
    pub fn resize(&mut self, key: &ContainerKey, new_n: usize) -> Result<CpuSet, CpuPolicyError> {
        if self.cfg.policy == CpuPolicyName::None {
            return Err(CpuPolicyError::PolicyNone { key: key.clone() });
        }
        if new_n == 0 {
            return Err(CpuPolicyError::ZeroRequest { key: key.clone() });
        }
        let Some(cur) = self.assignments.get(key).cloned() else {
            return Err(CpuPolicyError::NotAssigned { key: key.clone() });
        };
        let opts = self.cfg.alloc_options();
        let tpc = self.index.threads_per_core().max(1);
        let alloc_err = |source| CpuPolicyError::Alloc {
            key: key.clone(),
            source,
        };
        if opts.full_pcpus_only && !new_n.is_multiple_of(tpc) {
            return Err(alloc_err(CpuAllocError::SmtAlignment {
                requested: new_n,
                cpus_per_core: tpc,
                available_physical: self.index.whole_cores(&self.assignable()).len(),
            }));
        }
        let next = match new_n.cmp(&cur.len()) {
            std::cmp::Ordering::Equal => return Ok(cur),
            std::cmp::Ordering::Greater => {
                let stages = [
                    self.index.core_closure(&cur),
                    self.index.l3_closure(&cur),
                    self.index.numa_closure(&cur),
                    self.index.socket_closure(&cur),
                ];
                let extra = self
                    .staged_take(&self.assignable(), &stages, new_n - cur.len())
                    .map_err(alloc_err)?;
                self.check_shared(key, new_n, &extra)?;
                cur.union(&extra)
            }
            std::cmp::Ordering::Less => {
                let shrink = AllocOptions {
                    distribute_cpus_across_numa: false,
                    ..opts
                };
                take_by_topology_indexed(&self.index, &cur, new_n, &shrink).map_err(alloc_err)?
            }
        };
        self.exclusive_cache.remove_all(&cur);
        self.exclusive_cache.extend_from(&next);
        self.assignments.insert(key.clone(), next.clone());
        Ok(next)
    }

    /// Accepts an assignment read back from a running container (restart reconciliation),
    /// replacing any earlier one of `key`. Refuses CPUs that are offline, reserved or held by
    /// another container.
    pub fn restore(
        &mut self,
        key: &ContainerKey,
        cpus: &CpuSet,
        role: ContainerRole,
    ) -> Result<(), CpuPolicyError> {
        let refuse = |reason: String| CpuPolicyError::Restore {
            key: key.clone(),
            cpus: cpus.clone(),
            reason,
        };
        if self.cfg.policy == CpuPolicyName::None {
            return Err(refuse("cpu policy is none".into()));
        }
        if cpus.is_empty() {
            return Err(refuse("empty cpu set".into()));
        }
        let offline = cpus.difference(self.topo.cpus());
        if !offline.is_empty() {
            return Err(refuse(format!("cpus {offline} are not online")));
        }
        let reserved = cpus.intersection(&self.reserved);
        if !reserved.is_empty() {
            return Err(refuse(format!("cpus {reserved} are reserved")));
        }
        for (other, set) in &self.assignments {
            if other != key {
                let overlap = cpus.intersection(set);
                if !overlap.is_empty() {
                    return Err(refuse(format!("cpus {overlap} are held by {other}")));
                }
            }
        }
        if let Some(old) = self.assignments.insert(key.clone(), cpus.clone()) {
            self.exclusive_cache.remove_all(&old);
        }
        self.exclusive_cache.extend_from(cpus);
        if role == ContainerRole::Init {
            self.init_containers.insert(key.clone());
        } else {
            self.init_containers.remove(key);
        }
        Ok(())
    }

    /// Checks the pool invariants; the error names the first violation.
    pub fn check_invariants(&self) -> Result<(), CpuPolicyError> {
        let bad = |s: String| Err(CpuPolicyError::Invariant(s));
        let online = self.topo.cpus();
        if !self.reserved.is_subset(online) {
            return bad(format!("reserved {} not all online", self.reserved));
        }
        let mut seen = CpuSet::new();
        for (k, set) in &self.assignments {
            if set.is_empty() {
                return bad(format!("{k} holds an empty set"));
            }
            if !set.is_subset(online) {
                return bad(format!("{k} holds offline cpus {}", set.difference(online)));
            }
            let r = set.intersection(&self.reserved);
            if !r.is_empty() {
                return bad(format!("{k} holds reserved cpus {r}"));
            }
            let dup = set.intersection(&seen);
            if !dup.is_empty() {
                return bad(format!("cpus {dup} of {k} are in two assignments"));
            }
            seen.extend_from(set);
        }
        if self.exclusive_cache != seen || self.recompute_exclusive() != seen {
            return bad(format!(
                "cached exclusive set {} != union of assignments {seen}",
                self.exclusive_cache
            ));
        }
        if let Some(k) = self
            .init_containers
            .iter()
            .find(|k| !self.assignments.contains_key(*k))
        {
            return bad(format!("init container {k} marked without an assignment"));
        }
        if self.cfg.policy == CpuPolicyName::Static {
            let mut expect = online.difference(&seen);
            if self.cfg.strict_cpu_reservation {
                expect.remove_all(&self.reserved);
            }
            if self.shared_pool() != expect {
                return bad(format!(
                    "shared pool {} != all - exclusive{} = {expect}",
                    self.shared_pool(),
                    if self.cfg.strict_cpu_reservation {
                        " - reserved"
                    } else {
                        ""
                    }
                ));
            }
            let parts = self.assignable().union(&self.reserved).union(&seen);
            if &parts != online {
                return bad(format!(
                    "assignable + reserved + exclusive = {parts} != {online}"
                ));
            }
        }
        Ok(())
    }
}

/// Every `k`-subset of `items` in lexicographic order (the kubelet's `IterateBitMasks` order).
fn subsets(
    items: &[usize],
    k: usize,
    acc: &mut Vec<usize>,
    start: usize,
    out: &mut Vec<Vec<usize>>,
) {
    if acc.len() == k {
        out.push(acc.clone());
        return;
    }
    for i in start..items.len() {
        acc.push(items[i]);
        subsets(items, k, acc, i + 1, out);
        acc.pop();
    }
}

#[cfg(test)]
mod tests {
    //! Cases transcribed from kubernetes `policy_static_test.go` (`TestStaticPolicyAdd`,
    //! `TestStaticPolicyRemove`, `TestStaticPolicyStart` option errors) and
    //! `topology_hints_test.go`, on the kubelet's fixture numbering.
    //!
    //! | kubelet case | result |
    //! |---|---|
    //! | GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU (→ 4, sibling of reserved 0) | match |
    //! | GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore (→ 1,5) | match |
    //! | GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocket (→ 1,3,5,7,9,11) | match |
    //! | GuPodMultipleCores, DualSocketHT, ExpectAllocThreeCores (→ 2-4,8-10) | match |
    //! | GuPodMultipleCores, SingleSocketHT, NoAllocExpectError | match (error names requested/available) |
    //! | GuPodSingleCore, SingleSocketHT, ExpectSameAllocation | match |
    //! | NonGuPod / GuPodNonIntegerCore → shared pool | match (`is_exclusive_eligible`) |
    //! | FullPCPUsOnly, odd request → SMTAlignmentError | match |
    //! | Remove: cpus return to the default set | match |
    //! | StaticPolicyStart: full-pcpus-only + distribute-cpus-across-cores rejected | match |
    //! | hints: free on both nodes → {0},{1} preferred, {0,1} not | match |
    //! | hints: request larger than a node → only {0,1}, preferred | match |
    //! | hints: already allocated, same size → hints for those cpus; other size → none | match |
    //! | init container cpus reused by app (kubelet keeps them in the init's entry too) | differ: transferred (#94220) |
    //! | empty reservation (kubelet refuses to start) | differ: allowed with a warning |

    use super::*;
    use crate::machine::topology::SyntheticSpec;
    use crate::managers::cpu::alloc::kube_topos::*;
    use proptest::prelude::*;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    fn key(pod: &str, c: &str) -> ContainerKey {
        ContainerKey::new(pod, c)
    }

    fn static_cfg(count: usize) -> CpuPolicyConfig {
        CpuPolicyConfig {
            policy: CpuPolicyName::Static,
            reserved_cpu_count: Some(count),
            ..Default::default()
        }
    }

    fn policy(topo: Topology, cfg: CpuPolicyConfig) -> CpuPolicy {
        CpuPolicy::new(topo, cfg).unwrap().0
    }

    /// With an affinity, the aligned stage takes its share first; a refusal must still name
    /// the whole request and every free CPU (it said "requested 3, available 0").
    #[test]
    fn refusal_with_affinity_names_the_whole_request() {
        let topo = SyntheticSpec {
            sockets: 1,
            numa_per_socket: 1,
            l3_per_numa: 1,
            cores_per_l3: 2,
            threads_per_core: 1,
            memory_per_node: 1 << 30,
        }
        .build();
        let mut p = policy(topo, static_cfg(1));
        let node0 = NumaMask::from_ids([0]);
        let err = p
            .allocate(&key("p", "c"), 4, ContainerRole::App, node0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("requested 4, available 1"), "{err}");
        assert!(err.contains("free: \"1\""), "{err}");
        assert!(p.assignments().is_empty());
    }

    #[test]
    fn static_policy_add_cases() {
        let mut p = policy(single_socket_ht(), static_cfg(1));
        assert_eq!(p.reserved(), &set("0"));
        let got = p.allocate(&key("p", "c"), 1, ContainerRole::App, None);
        assert_eq!(got.unwrap(), set("4"));

        let mut p = policy(single_socket_ht(), static_cfg(1));
        p.restore(&key("p0", "fake"), &set("2-3,6-7"), ContainerRole::App)
            .unwrap();
        let got = p.allocate(&key("p", "c"), 2, ContainerRole::App, None);
        assert_eq!(got.unwrap(), set("1,5"));

        let mut p = policy(dual_socket_ht(), static_cfg(1));
        p.restore(&key("p0", "fake"), &set("2"), ContainerRole::App)
            .unwrap();
        let got = p.allocate(&key("p", "c"), 6, ContainerRole::App, None);
        assert_eq!(got.unwrap(), set("1,3,5,7,9,11"));

        let mut p = policy(dual_socket_ht(), static_cfg(1));
        p.restore(&key("p0", "fake"), &set("1,5"), ContainerRole::App)
            .unwrap();
        let got = p.allocate(&key("p", "c"), 6, ContainerRole::App, None);
        assert_eq!(got.unwrap(), set("2-4,8-10"));

        let mut p = policy(single_socket_ht(), static_cfg(1));
        p.restore(&key("p0", "fake"), &set("1-6"), ContainerRole::App)
            .unwrap();
        let err = p
            .allocate(&key("p", "c"), 2, ContainerRole::App, None)
            .unwrap_err();
        assert!(
            err.to_string().contains("requested 2, available 1"),
            "{err}"
        );

        let mut p = policy(single_socket_ht(), static_cfg(1));
        let first = p
            .allocate(&key("p", "c"), 1, ContainerRole::App, None)
            .unwrap();
        let again = p
            .allocate(&key("p", "c"), 1, ContainerRole::App, None)
            .unwrap();
        assert_eq!(first, again);
        assert!(matches!(
            p.allocate(&key("p", "c"), 2, ContainerRole::App, None),
            Err(CpuPolicyError::SizeMismatch { .. })
        ));

        assert!(!p.is_exclusive_eligible(false, 1000));
        assert!(!p.is_exclusive_eligible(true, 4500));
        assert!(!p.is_exclusive_eligible(true, 0));
        assert!(p.is_exclusive_eligible(true, 3000));

        let cfg = CpuPolicyConfig {
            full_pcpus_only: true,
            ..static_cfg(2)
        };
        let mut p = policy(single_socket_ht(), cfg);
        let err = p
            .allocate(&key("p", "c"), 1, ContainerRole::App, None)
            .unwrap_err();
        assert!(err.to_string().contains("smt alignment error"), "{err}");
        assert!(err.to_string().contains("requested 1"), "{err}");
    }

    #[test]
    fn remove_returns_cpus_to_the_shared_pool() {
        let mut p = policy(single_socket_ht(), static_cfg(1));
        let before = p.clone();
        let got = p
            .allocate(&key("p", "c"), 4, ContainerRole::App, None)
            .unwrap();
        assert!(p.shared_pool().is_disjoint(&got));
        assert!(p.shared_pool().contains(0), "reserved stays shared");
        assert_eq!(p.release(&key("p", "c")), Some(got));
        assert_eq!(p, before);
    }

    #[test]
    fn config_validation_names_the_key() {
        let t = single_socket_ht();
        let e = |cfg: CpuPolicyConfig| CpuPolicy::new(t.clone(), cfg).unwrap_err().to_string();
        let mut cfg = static_cfg(0);
        cfg.reserved_cpu_count = None;
        cfg.reserved_cpus = Some(set("6-9"));
        assert_eq!(
            e(cfg),
            "cpu.reserved_cpus: cpus 8-9 do not exist on this machine (online: 0-7)"
        );
        let cfg = CpuPolicyConfig {
            full_pcpus_only: true,
            distribute_cpus_across_cores: true,
            ..static_cfg(1)
        };
        assert!(e(cfg).starts_with(
            "cpu.full_pcpus_only: cannot be used together with distribute_cpus_across_cores"
        ));
        let cfg = CpuPolicyConfig {
            policy: CpuPolicyName::None,
            full_pcpus_only: true,
            ..Default::default()
        };
        assert_eq!(e(cfg), "cpu.full_pcpus_only: requires policy static");
        assert!(e(static_cfg(9)).starts_with("cpu.reserved_cpu_count: 9 exceeds"));
        let cfg = CpuPolicyConfig {
            reserved_cpus: Some(set("0-1")),
            ..static_cfg(3)
        };
        assert!(e(cfg).starts_with("cpu.reserved_cpu_count: 3 disagrees"));

        let (_, w) = CpuPolicy::new(t.clone(), static_cfg(0)).unwrap();
        assert!(w[0].contains("no cpus reserved"), "{w:?}");
        let cfg = CpuPolicyConfig {
            reserved_cpus: Some(set("0")),
            reserved_cpu_count: None,
            full_pcpus_only: true,
            ..static_cfg(0)
        };
        let (_, w) = CpuPolicy::new(t.clone(), cfg).unwrap();
        assert!(w[0].contains("splits cores") && w[0].contains('4'), "{w:?}");
        // A count is taken topology-aware: whole cores from the lowest ids.
        let (p, _) = CpuPolicy::new(t, static_cfg(2)).unwrap();
        assert_eq!(p.reserved(), &set("0,4"));
    }

    #[test]
    fn hints_like_the_kubelet() {
        let mut p = policy(dual_socket_ht(), static_cfg(0));
        let m = |ids: &[usize]| NumaMask::from_ids(ids.iter().copied()).unwrap();
        let h = p.hints(&key("p", "c"), 1).unwrap();
        assert_eq!(
            h,
            vec![
                TopologyHint::new(m(&[0]), true),
                TopologyHint::new(m(&[1]), true),
                TopologyHint::new(m(&[0, 1]), false),
            ]
        );
        let h = p.hints(&key("p", "c"), 8).unwrap();
        assert_eq!(h, vec![TopologyHint::new(m(&[0, 1]), true)]);
        p.allocate(&key("p", "c"), 2, ContainerRole::App, None)
            .unwrap();
        let h = p.hints(&key("p", "c"), 2).unwrap();
        assert_eq!(
            h,
            vec![
                TopologyHint::new(m(&[0]), true),
                TopologyHint::new(m(&[0, 1]), false)
            ]
        );
        assert_eq!(p.hints(&key("p", "c"), 3), Some(vec![]));
        let none = policy(
            dual_socket_ht(),
            CpuPolicyConfig {
                policy: CpuPolicyName::None,
                ..CpuPolicyConfig::default()
            },
        );
        assert_eq!(none.hints(&key("p", "c"), 2), None);
    }

    #[test]
    fn affinity_is_honoured_first() {
        let mut p = policy(dual_socket_ht(), static_cfg(0));
        let got = p
            .allocate(&key("p", "c"), 2, ContainerRole::App, NumaMask::single(1))
            .unwrap();
        assert_eq!(got, set("1,7"));
    }

    #[test]
    fn init_cpus_are_transferred_and_sidecars_keep_theirs() {
        let mut p = policy(single_socket_ht(), static_cfg(0));
        let init = p
            .allocate(&key("p", "init"), 4, ContainerRole::Init, None)
            .unwrap();
        // The sidecar starts after the init finished: it may take over init cpus too.
        let side = p
            .allocate(&key("p", "side"), 2, ContainerRole::Sidecar, None)
            .unwrap();
        assert!(side.is_subset(&init));
        let a = p
            .allocate(&key("p", "a"), 2, ContainerRole::App, None)
            .unwrap();
        assert_eq!(a.union(&side), init);
        assert_eq!(
            p.exclusive(&key("p", "init")),
            None,
            "handed over, not shared"
        );
        // The sidecar's own cpus are never reused by the app containers.
        let b = p
            .allocate(&key("p", "b"), 2, ContainerRole::App, None)
            .unwrap();
        assert!(b.is_disjoint(&init));
        assert_eq!(p.exclusive(&key("p", "side")), Some(&side));
        p.check_invariants().unwrap();
        // Another pod never reuses them: 2 cpus left, and the shared pool keeps one.
        assert!(p
            .allocate(&key("q", "x"), 2, ContainerRole::App, None)
            .is_err());
        assert_eq!(p.release_pod("p").len(), 3);
        assert!(p.assignments().is_empty());
    }

    #[test]
    fn shared_pool_is_never_emptied() {
        let mut p = policy(single_socket_ht(), static_cfg(0));
        let err = p
            .allocate(&key("p", "c"), 8, ContainerRole::App, None)
            .unwrap_err();
        assert!(matches!(err, CpuPolicyError::SharedPoolExhausted { .. }));
        assert!(p.assignments().is_empty());
        p.allocate(&key("p", "c"), 7, ContainerRole::App, None)
            .unwrap();
        assert_eq!(p.shared_pool().len(), 1);
        // With strict reservation, reserved cpus leave the shared pool.
        let cfg = CpuPolicyConfig {
            strict_cpu_reservation: true,
            ..static_cfg(2)
        };
        let mut p = policy(single_socket_ht(), cfg);
        assert_eq!(p.shared_pool(), set("1-3,5-7"));
        p.allocate(&key("p", "c"), 5, ContainerRole::App, None)
            .unwrap();
        assert!(p
            .allocate(&key("p", "d"), 1, ContainerRole::App, None)
            .is_err());
    }

    #[test]
    fn resize_grows_near_and_shrinks_compactly() {
        let t = dual_socket_multi_numa_ht();
        let mut p = policy(t.clone(), static_cfg(0));
        let k = key("p", "c");
        let cur = p.allocate(&k, 4, ContainerRole::App, None).unwrap();
        p.allocate(&key("q", "x"), 4, ContainerRole::App, None)
            .unwrap();
        let grown = p.resize(&k, 8).unwrap();
        assert!(cur.is_subset(&grown));
        assert_eq!(t.numa_nodes_of(&grown).len(), 1);
        let shrunk = p.resize(&k, 2).unwrap();
        assert!(shrunk.is_subset(&grown));
        assert_eq!(shrunk.len(), 2);
        let before = p.clone();
        assert!(p.resize(&k, 100).is_err());
        assert_eq!(p, before, "an infeasible resize changes nothing");
        p.check_invariants().unwrap();
    }

    #[test]
    fn restore_refuses_overlaps_naming_key_and_cpus() {
        let mut p = policy(single_socket_ht(), static_cfg(1));
        p.restore(&key("p", "a"), &set("1-2"), ContainerRole::App)
            .unwrap();
        let e = p
            .restore(&key("p", "b"), &set("2-3"), ContainerRole::App)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "p/b: cannot restore cpus 2-3: cpus 2 are held by p/a"
        );
        let e = p
            .restore(&key("p", "b"), &set("0"), ContainerRole::App)
            .unwrap_err();
        assert!(e.to_string().contains("reserved"));
        let e = p
            .restore(&key("p", "b"), &set("9"), ContainerRole::App)
            .unwrap_err();
        assert!(e.to_string().contains("not online"));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(u8, u8, usize, u8, Option<u8>),
        Release(u8, u8),
        ReleasePod(u8),
        Resize(u8, u8, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..4, 0u8..3, 1usize..9, 0u8..3, proptest::option::of(0u8..4))
                .prop_map(|(p, c, n, r, a)| Op::Alloc(p, c, n, r, a)),
            2 => (0u8..4, 0u8..3).prop_map(|(p, c)| Op::Release(p, c)),
            1 => (0u8..4).prop_map(Op::ReleasePod),
            1 => (0u8..4, 0u8..3, 1usize..9).prop_map(|(p, c, n)| Op::Resize(p, c, n)),
        ]
    }

    fn shapes() -> Vec<(Topology, CpuPolicyConfig)> {
        let spec = |s, n, l, c, t| {
            SyntheticSpec {
                sockets: s,
                numa_per_socket: n,
                l3_per_numa: l,
                cores_per_l3: c,
                threads_per_core: t,
                memory_per_node: 1 << 30,
            }
            .build()
        };
        vec![
            (single_socket_ht(), static_cfg(1)),
            (dual_socket_multi_numa_ht(), static_cfg(2)),
            (
                spec(1, 1, 4, 4, 2),
                CpuPolicyConfig {
                    prefer_align_cpus_by_uncorecache: true,
                    full_pcpus_only: true,
                    ..static_cfg(2)
                },
            ),
            (
                spec(2, 2, 1, 3, 2),
                CpuPolicyConfig {
                    distribute_cpus_across_numa: true,
                    strict_cpu_reservation: true,
                    ..static_cfg(2)
                },
            ),
            (
                spec(2, 1, 1, 4, 2),
                CpuPolicyConfig {
                    distribute_cpus_across_cores: true,
                    ..static_cfg(0)
                },
            ),
        ]
    }

    /// Pod uids that are prefixes of one another: a pod's release must not reach the others.
    fn pod_uid(pod: u8) -> String {
        ["p", "p-1", "p1", "p10"][pod as usize % 4].to_string()
    }

    fn run(p: &mut CpuPolicy, ops: &[Op]) -> Vec<String> {
        let mut log = Vec::new();
        for op in ops {
            let before = p.clone();
            let assignable = p.assignable();
            match op {
                Op::Alloc(pod, c, n, r, a) => {
                    let k = key(&pod_uid(*pod), &format!("c{c}"));
                    let role = [
                        ContainerRole::Init,
                        ContainerRole::Sidecar,
                        ContainerRole::App,
                    ][*r as usize];
                    let reusable = p.reusable_for(&k);
                    let fresh = p.exclusive(&k).is_none();
                    let aff = a.and_then(|a| NumaMask::single(a as usize));
                    match p.allocate(&k, *n, role, aff) {
                        Ok(got) => {
                            assert_eq!(got.len(), *n);
                            if fresh {
                                assert!(got.is_subset(&assignable.union(&reusable)));
                                assert!(got.is_disjoint(p.reserved()));
                                if reusable.is_empty() {
                                    let mut undo = p.clone();
                                    undo.release(&k);
                                    assert_eq!(undo, before, "release restores the prior state");
                                }
                            }
                            log.push(format!("{k}={got}"));
                        }
                        Err(e) => {
                            assert_eq!(*p, before, "a refused allocation changes nothing");
                            log.push(format!("{k}: {e}"));
                        }
                    }
                }
                Op::Release(pod, c) => {
                    let k = key(&pod_uid(*pod), &format!("c{c}"));
                    let got = p.release(&k);
                    if let Some(g) = &got {
                        assert!(g.is_subset(&p.assignable()));
                    }
                    log.push(format!("release {k}: {got:?}"));
                }
                Op::ReleasePod(pod) => {
                    let uid = pod_uid(*pod);
                    let scan: Vec<(ContainerKey, CpuSet)> = p
                        .assignments()
                        .iter()
                        .filter(|(k, _)| k.pod_uid == uid)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    let got = p.release_pod(&uid);
                    assert_eq!(got, scan, "the pod's containers, as a scan finds them");
                    let mut others = before.assignments().clone();
                    others.retain(|k, _| k.pod_uid != uid);
                    assert_eq!(p.assignments(), &others, "the other pods' untouched");
                    log.push(format!("release {uid}: {}", got.len()));
                }
                Op::Resize(pod, c, n) => {
                    let k = key(&pod_uid(*pod), &format!("c{c}"));
                    let old = p.exclusive(&k).cloned();
                    match p.resize(&k, *n) {
                        Ok(got) => {
                            assert_eq!(got.len(), *n);
                            if let Some(old) = old {
                                if *n >= old.len() {
                                    assert!(old.is_subset(&got));
                                    assert!(got.difference(&old).is_subset(&assignable));
                                } else {
                                    assert!(got.is_subset(&old));
                                }
                            }
                            log.push(format!("resize {k}={got}"));
                        }
                        Err(e) => {
                            assert_eq!(*p, before, "a refused resize changes nothing");
                            log.push(format!("resize {k}: {e}"));
                        }
                    }
                }
            }
            p.check_invariants().unwrap();
        }
        log
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn random_sequences_keep_the_invariants(shape in 0usize..5, ops in proptest::collection::vec(op(), 1..40)) {
            let (topo, cfg) = shapes().swap_remove(shape);
            let mut a = policy(topo.clone(), cfg.clone());
            let mut b = policy(topo, cfg);
            let la = run(&mut a, &ops);
            let lb = run(&mut b, &ops);
            prop_assert_eq!(la, lb, "deterministic");
            prop_assert_eq!(a, b);
        }
    }
}
