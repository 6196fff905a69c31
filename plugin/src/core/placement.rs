//! `Placement`: the admission pipeline that ties the CPU manager, the memory manager, device
//! hints and the topology manager together, and turns one container's admission into its
//! cgroup values ([`ContainerResources`]).
//!
//! For each container: QoS class → exclusive-CPU eligibility → hints from every provider →
//! merge under the topology policy (container or pod scope) → admit or refuse → allocate each
//! provider with the merged affinity → cpuset, mems, shares, quota, memory limit, oom_score_adj,
//! pids limit. The kubelet does the same across `cpumanager`, `memorymanager`,
//! `topologymanager` and `kuberuntime_container_linux.go`; here it is one pure value.
//!
//! Persisted state is [`Assignments`] only (what each container holds); free capacity is always
//! derived. On restart [`Placement::reconcile`] rebuilds the assignments from what the running
//! containers actually have, using the saved assignments only to break ties.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::container_key::ContainerKey;
use super::cpu_policy::{ContainerRole, CpuPolicy, CpuPolicyConfig, CpuPolicyError, CpuPolicyName};
use super::cpuset::CpuSet;
use super::hints::{self, NumaMask, ProviderHints, TopologyHint, TopologyOptions, TopologyPolicy};
use super::pod::{Container, ContainerRef, Pod};
use super::qos::{self, ExclusiveCpuQuota, QosClass};
use super::topology::Topology;
use crate::config::{self, Config};

/// Topology-manager scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Container,
    Pod,
}

/// Why a configuration or a container was refused.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error("{0}")]
    Cpu(#[from] CpuPolicyError),
    #[error("{key}: {message}")]
    Config { key: String, message: String },
    #[error("topology affinity error: policy {policy} cannot place container {container} ({request}); free per numa node: {free}")]
    Topology {
        policy: TopologyPolicy,
        container: String,
        request: String,
        free: String,
    },
    #[error("pod {pod} has no container {which:?}")]
    NoSuchContainer { pod: String, which: ContainerRef },
}

impl PlacementError {
    /// True for configuration problems (the operator's to fix) rather than refused containers.
    pub fn is_config(&self) -> bool {
        match self {
            PlacementError::Config { .. } => true,
            PlacementError::Cpu(e) => matches!(e, CpuPolicyError::Config { .. }),
            _ => false,
        }
    }
}

/// The cgroup values of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerResources {
    /// True when `cpuset` is the container's own (exclusive) set.
    pub exclusive: bool,
    pub cpuset: CpuSet,
    #[serde(serialize_with = "ser_mask")]
    pub mems: NumaMask,
    /// The merged topology hint's NUMA nodes, when the topology manager chose any.
    #[serde(serialize_with = "ser_opt_mask")]
    pub numa_affinity: Option<NumaMask>,
    pub cpu_shares: u64,
    /// CRI encoding: 0 unset, -1 unlimited, else µs per period.
    pub cpu_quota: i64,
    pub cpu_period: u64,
    pub memory_limit: Option<u64>,
    pub oom_score_adj: i32,
    pub pids_limit: Option<i64>,
    /// Devices allocated to the container (PCI addresses).
    pub devices: Vec<String>,
    /// Why the container got what it got, for logs.
    pub reason: String,
}

fn ser_mask<S: serde::Serializer>(m: &NumaMask, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(m)
}

fn ser_opt_mask<S: serde::Serializer>(m: &Option<NumaMask>, s: S) -> Result<S::Ok, S::Error> {
    match m {
        Some(m) => s.collect_str(m),
        None => s.serialize_none(),
    }
}

/// Everything topolet persists: what each container holds. Free capacity is derived.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assignments {
    /// One entry per container holding something, ordered by key.
    pub containers: Vec<Assignment>,
}

/// What one container holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    pub pod_uid: String,
    pub container: String,
    /// Exclusive CPUs, when it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<CpuSet>,
    /// The merged NUMA affinity (Linux list syntax), when the topology manager chose one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<String>,
}

impl Assignments {
    fn cpus_of(&self, key: &ContainerKey) -> Option<&CpuSet> {
        self.find(key).and_then(|a| a.cpus.as_ref())
    }

    fn affinity_of(&self, key: &ContainerKey) -> Option<NumaMask> {
        let text = self.find(key)?.affinity.as_ref()?;
        NumaMask::from_ids(CpuSet::parse(text).ok()?.iter())
    }

    fn find(&self, key: &ContainerKey) -> Option<&Assignment> {
        self.containers
            .iter()
            .find(|a| a.pod_uid == key.pod_uid && a.container == key.container)
    }
}

/// A running container as the runtime reports it, for [`Placement::reconcile`].
#[derive(Debug, Clone)]
pub struct RunningContainer {
    /// Runtime id.
    pub id: String,
    /// Its pod, with this container as the only one (`containers[0]`).
    pub pod: Pod,
    /// The cpuset it actually has.
    pub cpuset: Option<CpuSet>,
}

/// The result of reconciling with the runtime's view.
#[derive(Debug, Clone, Default)]
pub struct Reconciled {
    /// Every managed container's target values, by runtime id.
    pub containers: Vec<(String, ContainerResources)>,
    /// What had to be corrected, one line each.
    pub notes: Vec<String>,
}

/// Settings that shape each container's cgroup values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QosSettings {
    pids_limit: Option<i64>,
    exclusive_quota: ExclusiveCpuQuota,
}

/// The admission pipeline and its state.
#[derive(Debug, Clone)]
pub struct Placement {
    topology: Topology,
    cpu: CpuPolicy,
    policy: TopologyPolicy,
    scope: Scope,
    options: TopologyOptions,
    qos: QosSettings,
    /// Merged affinity per container (an assignment: persisted).
    affinity: BTreeMap<ContainerKey, NumaMask>,
    /// Pod-scope affinity per pod uid (derived from the first admission of the pod).
    pod_affinity: BTreeMap<String, Option<NumaMask>>,
    /// Assignments loaded from the state file, used by `reconcile` to break ties.
    saved: Assignments,
}

fn config_err(key: &str, message: impl fmt::Display) -> PlacementError {
    PlacementError::Config {
        key: key.to_string(),
        message: message.to_string(),
    }
}

impl Placement {
    /// Builds the pipeline for `topology` from `config`; returns warnings for the caller to log.
    /// Errors name the configuration key at fault.
    pub fn new(
        topology: &Topology,
        config: &Config,
    ) -> Result<(Placement, Vec<String>), PlacementError> {
        let c = &config.cpu;
        let reserved_cpus = match &c.reserved_cpus {
            Some(text) => {
                Some(CpuSet::parse(text).map_err(|e| config_err("cpu.reserved_cpus", e))?)
            }
            None => None,
        };
        let cpu_cfg = CpuPolicyConfig {
            policy: match c.policy {
                config::CpuPolicyName::None => CpuPolicyName::None,
                config::CpuPolicyName::Static => CpuPolicyName::Static,
            },
            reserved_cpus,
            reserved_cpu_count: c.reserved_cpu_count,
            full_pcpus_only: c.full_pcpus_only,
            distribute_cpus_across_numa: c.distribute_cpus_across_numa,
            distribute_cpus_across_cores: c.distribute_cpus_across_cores,
            align_by_socket: c.align_by_socket,
            prefer_align_cpus_by_uncorecache: c.prefer_align_cpus_by_uncorecache,
            strict_cpu_reservation: c.strict_cpu_reservation,
        };
        let (cpu, warnings) = CpuPolicy::new(topology.clone(), cpu_cfg)?;

        let t = &config.topology;
        let policy = match t.policy {
            config::TopologyPolicyName::None => TopologyPolicy::None,
            config::TopologyPolicyName::BestEffort => TopologyPolicy::BestEffort,
            config::TopologyPolicyName::Restricted => TopologyPolicy::Restricted,
            config::TopologyPolicyName::SingleNumaNode => TopologyPolicy::SingleNumaNode,
        };
        let options = TopologyOptions {
            prefer_closest_numa_nodes: t.prefer_closest_numa_nodes,
            max_allowable_numa_nodes: t.max_allowable_numa_nodes,
        };
        let nodes: Vec<usize> = topology.numa_ids().collect();
        options
            .validate(policy, &nodes)
            .map_err(|e| config_err("topology.policy", e))?;

        Ok((
            Placement {
                topology: topology.clone(),
                cpu,
                policy,
                scope: match t.scope {
                    config::TopologyScopeName::Container => Scope::Container,
                    config::TopologyScopeName::Pod => Scope::Pod,
                },
                options,
                qos: QosSettings {
                    pids_limit: qos::pids_limit(config.qos.pids_limit),
                    exclusive_quota: if config.qos.keep_cfs_quota_for_exclusive {
                        ExclusiveCpuQuota::Keep
                    } else {
                        ExclusiveCpuQuota::Disable
                    },
                },
                affinity: BTreeMap::new(),
                pod_affinity: BTreeMap::new(),
                saved: Assignments::default(),
            },
            warnings,
        ))
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    pub fn reserved(&self) -> &CpuSet {
        self.cpu.reserved()
    }

    /// CPUs of containers without exclusive CPUs.
    pub fn shared_pool(&self) -> CpuSet {
        self.cpu.shared_pool()
    }

    /// Memory nodes of containers without exclusive CPUs: the nodes of the shared pool.
    pub fn shared_mems(&self) -> NumaMask {
        self.nodes_of(&self.shared_pool())
    }

    fn nodes_of(&self, cpus: &CpuSet) -> NumaMask {
        NumaMask::from_ids(self.topology.numa_nodes_of(cpus)).unwrap_or_default()
    }

    /// Exclusive CPUs by container.
    pub fn exclusive(&self) -> &BTreeMap<ContainerKey, CpuSet> {
        self.cpu.assignments()
    }

    /// What to persist.
    pub fn assignments(&self) -> Assignments {
        let mut by_key: BTreeMap<&ContainerKey, Assignment> = BTreeMap::new();
        let entry = |k: &ContainerKey| Assignment {
            pod_uid: k.pod_uid.clone(),
            container: k.container.clone(),
            cpus: None,
            affinity: None,
        };
        for (k, set) in self.cpu.assignments() {
            by_key.entry(k).or_insert_with(|| entry(k)).cpus = Some(set.clone());
        }
        for (k, mask) in &self.affinity {
            by_key.entry(k).or_insert_with(|| entry(k)).affinity = Some(mask.to_string());
        }
        Assignments {
            containers: by_key.into_values().collect(),
        }
    }

    /// Keeps `saved` (from the state file) to break ties at the next `reconcile`; says what it
    /// holds.
    pub fn load_hints(&mut self, saved: Assignments) -> String {
        let report = format!(
            "{} containers with exclusive cpus, {} with a numa affinity",
            saved.containers.iter().filter(|a| a.cpus.is_some()).count(),
            saved
                .containers
                .iter()
                .filter(|a| a.affinity.is_some())
                .count()
        );
        self.saved = saved;
        report
    }

    /// Admits every container of `pod` in order (init containers first) and returns each
    /// container's result. Used by `topolet plan`.
    pub fn admit_pod(
        &mut self,
        pod: &Pod,
        floor: i32,
    ) -> Vec<(ContainerRef, Result<ContainerResources, PlacementError>)> {
        let refs: Vec<ContainerRef> = (0..pod.init_containers.len())
            .map(ContainerRef::Init)
            .chain((0..pod.containers.len()).map(ContainerRef::App))
            .collect();
        refs.into_iter()
            .map(|r| (r, self.admit_container(pod, r, floor)))
            .collect()
    }

    /// Admits the only app container of `pod` (the NRI path: one container at a time).
    pub fn admit(&mut self, pod: &Pod, floor: i32) -> Result<ContainerResources, PlacementError> {
        self.admit_container(pod, ContainerRef::App(0), floor)
    }

    /// Admits one container: hints, merge, allocation, cgroup values.
    pub fn admit_container(
        &mut self,
        pod: &Pod,
        which: ContainerRef,
        floor: i32,
    ) -> Result<ContainerResources, PlacementError> {
        let c = pod
            .container(which)
            .ok_or_else(|| PlacementError::NoSuchContainer {
                pod: pod.key(),
                which,
            })?
            .clone();
        let class = qos::class(pod);
        let key = ContainerKey::new(pod.uid.clone(), c.name.clone());
        let role = match which {
            ContainerRef::Init(_) if c.is_restartable() => ContainerRole::Sidecar,
            ContainerRef::Init(_) => ContainerRole::Init,
            ContainerRef::App(_) => ContainerRole::App,
        };
        let n_cpus = self.exclusive_cpus(class, &c);
        let affinity = match self.scope {
            Scope::Container => self.merge_for(&key, &c, n_cpus)?,
            Scope::Pod => match self.pod_affinity.get(&pod.uid) {
                Some(a) => *a,
                None => {
                    let a = self.merge_for_pod(pod, class)?;
                    self.pod_affinity.insert(pod.uid.clone(), a);
                    a
                }
            },
        };

        // Allocate from every provider; undo on failure so nothing is half-applied.
        let exclusive = match n_cpus {
            Some(n) => Some(self.cpu.allocate(&key, n, role, affinity)?),
            None => None,
        };
        if let Some(a) = affinity {
            self.affinity.insert(key.clone(), a);
        }

        let (cpuset, reason) = match &exclusive {
            Some(set) => (
                set.clone(),
                format!("{class} with {} integer cpus: exclusive", set.len()),
            ),
            None => (self.shared_pool(), self.shared_reason(class, &c)),
        };
        let mems = match &exclusive {
            Some(set) => match affinity {
                Some(a) if self.nodes_of(set).is_subset_of(a) => a,
                _ => self.nodes_of(set),
            },
            None => self.shared_mems(),
        };
        Ok(self.resources(
            pod,
            &c,
            cpuset,
            mems,
            affinity,
            exclusive.is_some(),
            Vec::new(),
            reason,
            floor,
        ))
    }

    fn shared_reason(&self, class: QosClass, c: &Container) -> String {
        if self.cpu.config().policy == CpuPolicyName::None {
            return format!("{class}: cpu policy none, shared pool");
        }
        match class {
            QosClass::Guaranteed if c.requests.cpu() % 1000 != 0 => {
                format!(
                    "Guaranteed with fractional cpu {}m: shared pool",
                    c.requests.cpu()
                )
            }
            _ => format!("{class}: shared pool"),
        }
    }

    /// The number of exclusive CPUs `c` qualifies for (static policy, Guaranteed, integer).
    fn exclusive_cpus(&self, class: QosClass, c: &Container) -> Option<usize> {
        if self.cpu.config().policy != CpuPolicyName::Static {
            return None;
        }
        qos::exclusive_cpu_count(class, c.requests.cpu()).and_then(|n| usize::try_from(n).ok())
    }

    fn providers_for(
        &self,
        key: &ContainerKey,
        c: &Container,
        n_cpus: Option<usize>,
    ) -> Vec<ProviderHints> {
        let _ = c;
        let mut cpu = ProviderHints::new();
        if let Some(n) = n_cpus {
            cpu.insert("cpu".into(), self.cpu.hints(key, n));
        }
        vec![cpu]
    }

    fn merge_for(
        &self,
        key: &ContainerKey,
        c: &Container,
        n_cpus: Option<usize>,
    ) -> Result<Option<NumaMask>, PlacementError> {
        let providers = self.providers_for(key, c, n_cpus);
        self.merge(&providers, || (key.to_string(), describe_request(n_cpus)))
    }

    /// Pod scope: one merged hint for the whole pod, from its effective requests (the sum of the
    /// app containers and sidecars, at least the largest init container).
    fn merge_for_pod(
        &self,
        pod: &Pod,
        class: QosClass,
    ) -> Result<Option<NumaMask>, PlacementError> {
        let total = pod.effective_requests();
        let whole = Container {
            name: "*".into(),
            requests: total.clone(),
            limits: total,
            restart_policy: None,
        };
        let key = ContainerKey::new(pod.uid.clone(), "*");
        let n_cpus = self.exclusive_cpus(class, &whole);
        let providers = self.providers_for(&key, &whole, n_cpus);
        self.merge(&providers, || {
            (format!("pod {}", pod.key()), describe_request(n_cpus))
        })
    }

    fn merge(
        &self,
        providers: &[ProviderHints],
        describe: impl Fn() -> (String, String),
    ) -> Result<Option<NumaMask>, PlacementError> {
        if providers.iter().all(|p| p.is_empty()) {
            return Ok(None);
        }
        let nodes: Vec<usize> = self.topology.numa_ids().collect();
        let result = hints::merge(
            self.policy,
            &nodes,
            |a, b| self.topology.distance(a, b),
            &self.options,
            providers,
        );
        if !result.admit {
            let (container, request) = describe();
            return Err(PlacementError::Topology {
                policy: self.policy,
                container,
                request,
                free: self.free_per_node(),
            });
        }
        Ok(effective_affinity(result.hint))
    }

    /// "0: cpu 4 memory 30Gi, 1: …" for refusal messages.
    pub fn free_per_node(&self) -> String {
        let assignable = self.cpu.assignable();
        self.topology
            .numa_nodes()
            .map(|n| {
                let cpus = assignable.intersection(&n.cpus).len();
                format!("{}: cpu {cpus}", n.id)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    #[allow(clippy::too_many_arguments)]
    fn resources(
        &self,
        pod: &Pod,
        c: &Container,
        cpuset: CpuSet,
        mems: NumaMask,
        affinity: Option<NumaMask>,
        exclusive: bool,
        devices: Vec<String>,
        reason: String,
        floor: i32,
    ) -> ContainerResources {
        let capacity = self.topology.memory_capacity();
        ContainerResources {
            exclusive,
            cpuset,
            mems,
            numa_affinity: affinity,
            cpu_shares: qos::container_cpu_shares(c),
            cpu_quota: qos::container_cpu_quota(
                c,
                qos::DEFAULT_CPU_PERIOD_US,
                exclusive,
                self.qos.exclusive_quota,
            )
            .to_cri(),
            cpu_period: qos::DEFAULT_CPU_PERIOD_US,
            memory_limit: c.limits.memory_bytes.filter(|&m| m > 0),
            oom_score_adj: qos::clamp_to_floor(
                qos::oom_score_adj(pod, c, capacity, qos::OomScoreVariant::Current),
                floor,
            ),
            pids_limit: self.qos.pids_limit,
            devices,
            reason,
        }
    }

    /// Returns a container's exclusive resources; true if it held any.
    pub fn release(&mut self, key: &ContainerKey) -> bool {
        let cpu = self.cpu.release(key).is_some();
        self.affinity.remove(key);
        cpu
    }

    /// Returns every container's resources of pod `uid`; true if any were held.
    pub fn release_pod(&mut self, uid: &str) -> bool {
        let keys: Vec<ContainerKey> = self
            .cpu
            .assignments()
            .keys()
            .chain(self.affinity.keys())
            .filter(|k| k.pod_uid == uid)
            .cloned()
            .collect();
        let mut any = false;
        for k in keys {
            any |= self.release(&k);
        }
        self.pod_affinity.remove(uid);
        any
    }

    /// In-place resize of the only app container of `pod` (KEP-5554): exclusive sets grow or
    /// shrink keeping their CPUs; a container that stops or starts qualifying moves between the
    /// shared pool and an exclusive set. An infeasible resize changes nothing.
    pub fn resize(&mut self, pod: &Pod, floor: i32) -> Result<ContainerResources, PlacementError> {
        let c = pod
            .containers
            .first()
            .ok_or_else(|| PlacementError::NoSuchContainer {
                pod: pod.key(),
                which: ContainerRef::App(0),
            })?
            .clone();
        let class = qos::class(pod);
        let key = ContainerKey::new(pod.uid.clone(), c.name.clone());
        let held = self.cpu.exclusive(&key).cloned();
        match (held, self.exclusive_cpus(class, &c)) {
            (Some(_), Some(n)) => {
                let set = self.cpu.resize(&key, n)?;
                let affinity = self.affinity.get(&key).copied();
                let mems = self.nodes_of(&set);
                let reason = format!("{class} resized to {n} exclusive cpus");
                Ok(self.resources(
                    pod,
                    &c,
                    set,
                    mems,
                    affinity,
                    true,
                    Vec::new(),
                    reason,
                    floor,
                ))
            }
            (Some(_), None) => {
                self.release(&key);
                let reason = format!("{class} no longer qualifies for exclusive cpus: shared pool");
                let (shared, mems) = (self.shared_pool(), self.shared_mems());
                Ok(self.resources(
                    pod,
                    &c,
                    shared,
                    mems,
                    None,
                    false,
                    Vec::new(),
                    reason,
                    floor,
                ))
            }
            (None, _) => self.admit(pod, floor),
        }
    }

    /// Rebuilds the assignments from the runtime's view (restart, reconnect). A running
    /// container's own cpuset is the truth when it is a valid exclusive set of the right size;
    /// otherwise its saved assignment, if still free; otherwise a fresh allocation. Containers
    /// that cannot get exclusive CPUs are left on the shared pool (and reported). Assignments of
    /// containers that no longer run are dropped.
    pub fn reconcile(&mut self, running: &[RunningContainer], floor: i32) -> Reconciled {
        let mut notes = Vec::new();
        let before = self.cpu.assignments().clone();
        for key in before.keys() {
            self.cpu.release(key);
        }
        self.affinity.clear();
        self.pod_affinity.clear();

        let mut order: Vec<&RunningContainer> = running.iter().collect();
        order.sort_by(|a, b| a.id.cmp(&b.id));
        let mut exclusive: Vec<(&RunningContainer, Option<CpuSet>)> = Vec::new();
        let mut shared: Vec<&RunningContainer> = Vec::new();
        for r in order {
            let Some(c) = r.pod.containers.first() else {
                continue;
            };
            let class = qos::class(&r.pod);
            match self.exclusive_cpus(class, c) {
                Some(n) => exclusive.push((r, restorable(r.cpuset.as_ref(), n))),
                None => shared.push(r),
            }
        }
        // Pass 1: containers whose own cpuset is a valid exclusive set keep it.
        let mut placed: BTreeMap<String, ContainerResources> = BTreeMap::new();
        let mut pending: Vec<&RunningContainer> = Vec::new();
        for (r, own) in &exclusive {
            let c = &r.pod.containers[0];
            let key = ContainerKey::new(r.pod.uid.clone(), c.name.clone());
            match own {
                Some(set) if self.cpu.restore(&key, set, ContainerRole::App).is_ok() => {
                    let mems = self.nodes_of(set);
                    let affinity = self.saved.affinity_of(&key);
                    if let Some(a) = affinity {
                        self.affinity.insert(key.clone(), a);
                    }
                    let reason = "restored from the running container".to_string();
                    placed.insert(
                        r.id.clone(),
                        self.resources(
                            &r.pod,
                            c,
                            set.clone(),
                            mems,
                            affinity,
                            true,
                            Vec::new(),
                            reason,
                            floor,
                        ),
                    );
                }
                _ => pending.push(r),
            }
        }
        // Pass 2: the rest get their saved set if still free, else a fresh allocation.
        for r in pending {
            let c = &r.pod.containers[0];
            let key = ContainerKey::new(r.pod.uid.clone(), c.name.clone());
            if let Some(saved) = self.saved.cpus_of(&key).cloned() {
                if self.cpu.restore(&key, &saved, ContainerRole::App).is_ok() {
                    notes.push(format!(
                        "{key}: runs on {}, moved back to its saved exclusive cpus {saved}",
                        fmt_opt(r.cpuset.as_ref())
                    ));
                    let mems = self.nodes_of(&saved);
                    let reason = "restored from the state file".to_string();
                    placed.insert(
                        r.id.clone(),
                        self.resources(
                            &r.pod,
                            c,
                            saved,
                            mems,
                            None,
                            true,
                            Vec::new(),
                            reason,
                            floor,
                        ),
                    );
                    continue;
                }
            }
            match self.admit(&r.pod, floor) {
                Ok(res) => {
                    notes.push(format!(
                        "{key}: runs on {}, given exclusive cpus {}",
                        fmt_opt(r.cpuset.as_ref()),
                        res.cpuset
                    ));
                    placed.insert(r.id.clone(), res);
                }
                Err(e) => {
                    notes.push(format!(
                        "{key}: cannot get exclusive cpus ({e}); left on the shared pool"
                    ));
                    shared.push(r);
                }
            }
        }
        for (key, set) in &before {
            if !self.cpu.assignments().contains_key(key) {
                notes.push(format!("{key}: no longer running; cpus {set} released"));
            }
        }
        // Shared containers: the shared pool as it is now.
        let (pool, mems) = (self.shared_pool(), self.shared_mems());
        for r in shared {
            let Some(c) = r.pod.containers.first() else {
                continue;
            };
            let reason = format!("{}: shared pool", qos::class(&r.pod));
            placed.insert(
                r.id.clone(),
                self.resources(
                    &r.pod,
                    c,
                    pool.clone(),
                    mems,
                    None,
                    false,
                    Vec::new(),
                    reason,
                    floor,
                ),
            );
        }
        self.saved = Assignments::default();
        Reconciled {
            containers: placed.into_iter().collect(),
            notes,
        }
    }

    /// Checks every provider's invariants.
    pub fn check_invariants(&self) -> Result<(), PlacementError> {
        self.cpu.check_invariants()?;
        Ok(())
    }
}

/// A cpuset the container can keep as its exclusive set: exactly `n` CPUs.
fn restorable(cpuset: Option<&CpuSet>, n: usize) -> Option<CpuSet> {
    cpuset.filter(|s| s.len() == n).cloned()
}

fn fmt_opt(s: Option<&CpuSet>) -> String {
    s.map(ToString::to_string)
        .unwrap_or_else(|| "no cpuset".into())
}

/// A merged hint's affinity as allocators use it: `None` when every node is allowed.
fn effective_affinity(hint: TopologyHint) -> Option<NumaMask> {
    hint.affinity
}

fn describe_request(n_cpus: Option<usize>) -> String {
    match n_cpus {
        Some(n) => format!("cpu: {n}"),
        None => "no aligned resources".into(),
    }
}

/// Bytes in the largest binary unit that divides them exactly (`8Gi`, `512Mi`, `1536Ki`).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (name, size) in UNITS {
        if bytes >= size && bytes % size == 0 {
            return format!("{}{name}", bytes / size);
        }
    }
    bytes.to_string()
}
