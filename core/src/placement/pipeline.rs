//! `Placement`: the admission pipeline that ties the CPU manager, the memory manager, the
//! device provider and the topology manager together, and turns one container's admission into
//! its cgroup values ([`ContainerResources`]).
//!
//! For each container: QoS class → exclusive-CPU eligibility → hints from every provider (the
//! CPUs, the memory, `[devices]`, and the devices the container was really given:
//! `crate::managers::observed_devices`) →
//! merge under the topology policy (container or pod scope) → admit or refuse → allocate each
//! provider with the merged affinity (all or nothing) → cpuset, mems, shares, quota, memory
//! limit, oom_score_adj, pids limit. The kubelet does the same across `cpumanager`,
//! `memorymanager`, `topologymanager` and `kuberuntime_container_linux.go`.
//!
//! State is the providers' assignments only (see [`Assignments`]); free capacity is derived.
//! Restart reconciliation lives in `crate::placement::reconcile`, the wording of a refusal in
//! `crate::placement::refusal`, the books in `crate::placement::books`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::kube::container_key::{self, ContainerKey};
use crate::kube::pod::{Container, ContainerRef, Pod, ResourceList};
use crate::kube::qos::{self, ExclusiveCpuQuota, QosClass};
use crate::machine::cpuset::CpuSet;
use crate::machine::topology::Topology;
use crate::managers::cpu::policy::{ContainerRole, CpuPolicy, CpuPolicyName};
use crate::managers::devices::DeviceHints;
use crate::managers::memory::policy::{binary_quantity, MemoryPolicy, MemoryRequest};
use crate::managers::observed_devices::{self, ObservedDevice, DEVICES_RESOURCE};
use crate::managers::topology::hints::{NumaMask, ProviderHints};
use crate::managers::topology::manager::{ResourceAmounts, Scope, TopologyManager};
use crate::placement::assignments::Assignments;
use crate::placement::nri_container::NriContainer;
use crate::placement::settings::PlacementSettings;
use crate::placement::{PlacementError, Refusal};

/// Who [`Placement::admit`] and [`Placement::resize`] are asked about: a container of a pod's
/// spec (the API's, `topolet plan`'s) or a container NRI described.
#[derive(Debug, Clone, Copy)]
pub enum Candidate<'a> {
    Pod { pod: &'a Pod, which: ContainerRef },
    Nri(&'a NriContainer),
}

impl<'a> Candidate<'a> {
    /// The first app container of `pod`.
    pub fn app(pod: &'a Pod) -> Self {
        Candidate::Pod {
            pod,
            which: ContainerRef::App(0),
        }
    }
}

/// The cgroup values of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerResources {
    /// True when `cpuset` is the container's own (exclusive) set.
    pub exclusive: bool,
    pub cpuset: CpuSet,
    pub mems: NumaMask,
    /// True when `mems` are the memory manager's pinned nodes (they then stay put when the
    /// shared pool changes).
    pub memory_pinned: bool,
    /// The merged topology hint's NUMA nodes, when the topology manager chose any.
    pub numa_affinity: Option<NumaMask>,
    pub cpu_shares: u64,
    /// CRI encoding: 0 unset, -1 unlimited, else µs per period.
    pub cpu_quota: i64,
    pub cpu_period: u64,
    pub memory_limit: Option<u64>,
    pub oom_score_adj: i32,
    pub pids_limit: Option<i64>,
    /// PCI addresses of the devices allocated to the container (`[devices]`).
    pub devices: Vec<String>,
    /// The devices the container was really given (its device set,
    /// `crate::managers::observed_devices`), whose NUMA nodes were its hints.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub observed_devices: Vec<ObservedDevice>,
    /// The container is created under the `SCHED_IDLE` scheduling policy (a batch container,
    /// `crate::reclaimed`): sent at creation only, as an update cannot carry a policy.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sched_idle: bool,
    /// Why the container got what it got, for logs.
    pub reason: String,
}

/// Where a container's CPUs and memory are (the placement part of [`ContainerResources`]).
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub exclusive: Option<CpuSet>,
    pub mems: Option<NumaMask>,
    pub affinity: Option<NumaMask>,
    pub devices: Vec<String>,
    pub observed: Vec<ObservedDevice>,
    pub reason: String,
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
    pub(crate) topology: Topology,
    pub(crate) cpu: CpuPolicy,
    pub(crate) memory: MemoryPolicy,
    pub(crate) devices: DeviceHints,
    tm: TopologyManager,
    qos: QosSettings,
    /// `[memory] shared_pool_mems_follow_cpus`.
    shared_mems_follow_cpus: bool,
    /// Merged affinity per container (an assignment: persisted).
    pub(crate) affinity: BTreeMap<ContainerKey, NumaMask>,
    /// The device set each admitted container was given (an assignment: persisted).
    pub(crate) observed: BTreeMap<ContainerKey, Vec<ObservedDevice>>,
    /// Pod-scope affinity per pod uid, decided at the pod's first admission.
    pub(crate) pod_affinity: BTreeMap<String, Option<NumaMask>>,
    /// Assignments loaded from the state file, used by `reconcile` to break ties.
    pub(crate) saved: Assignments,
}

impl Placement {
    /// Builds the pipeline for `topology` from `settings`; returns warnings for the caller to
    /// log. Errors name the configuration key at fault.
    pub fn new(
        topology: &Topology,
        settings: &PlacementSettings,
    ) -> Result<(Placement, Vec<String>), PlacementError> {
        let (cpu, warnings) = CpuPolicy::new(topology.clone(), settings.cpu.clone())?;
        let tm = TopologyManager::new(settings.topology, topology)?;
        let memory = MemoryPolicy::new(&settings.memory, topology)?;
        let devices = DeviceHints::new(&settings.devices, topology)?;
        Ok((
            Placement {
                topology: topology.clone(),
                cpu,
                memory,
                devices,
                tm,
                qos: QosSettings {
                    pids_limit: settings.pids_limit,
                    exclusive_quota: settings.exclusive_quota,
                },
                shared_mems_follow_cpus: settings.shared_pool_mems_follow_cpus,
                affinity: BTreeMap::new(),
                observed: BTreeMap::new(),
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

    /// The CPUs exclusive assignments may come from: online, not reserved.
    pub fn assignable(&self) -> CpuSet {
        self.cpu.assignable()
    }

    /// True when containers with exclusive CPUs lose their CFS quota (and their pods' cgroups
    /// too): `[qos] keep_cfs_quota_for_exclusive = false`, the kubelet's
    /// `DisableCPUQuotaWithExclusiveCPUs`.
    pub fn disables_exclusive_quota(&self) -> bool {
        self.qos.exclusive_quota == ExclusiveCpuQuota::Disable
    }

    /// CPUs of containers without exclusive CPUs.
    pub fn shared_pool(&self) -> CpuSet {
        self.cpu.shared_pool()
    }

    /// The shared pool's CPUs that are not reserved: what batch pods may be given
    /// (`crate::reclaimed`). Empty when exclusive grants took every unreserved CPU.
    pub fn batch_pool(&self) -> CpuSet {
        self.shared_pool().difference(self.reserved())
    }

    /// The `cpuset.mems` topolet sets on shared-pool containers (no exclusive CPUs, memory not
    /// pinned): the nodes of the shared pool with `[memory] shared_pool_mems_follow_cpus`;
    /// otherwise none (empty: the field is left alone, as the kubelet leaves it, and they keep
    /// every node).
    pub fn shared_mems(&self) -> NumaMask {
        if self.shared_mems_follow_cpus {
            self.nodes_of(&self.shared_pool())
        } else {
            NumaMask::default()
        }
    }

    /// The memory nodes shared-pool containers end up with: [`Placement::shared_mems`], or every
    /// node when topolet leaves the field alone.
    pub fn shared_mems_effective(&self) -> NumaMask {
        let mems = self.shared_mems();
        if mems.is_empty() {
            self.all_mems()
        } else {
            mems
        }
    }

    /// Every NUMA node.
    pub fn all_mems(&self) -> NumaMask {
        NumaMask::from_ids(self.topology.numa_ids()).unwrap_or_default()
    }

    pub(crate) fn nodes_of(&self, cpus: &CpuSet) -> NumaMask {
        NumaMask::from_ids(self.topology.numa_nodes_of(cpus)).unwrap_or_default()
    }

    /// The device set of every admitted container given devices.
    pub fn observed_devices(&self) -> &BTreeMap<ContainerKey, Vec<ObservedDevice>> {
        &self.observed
    }

    /// The topology manager's merged NUMA affinity of `key`, when it chose one.
    pub fn affinity_of(&self, key: &ContainerKey) -> Option<NumaMask> {
        self.affinity.get(key).copied()
    }

    /// Exclusive CPUs by container.
    pub fn exclusive(&self) -> &BTreeMap<ContainerKey, CpuSet> {
        self.cpu.assignments()
    }

    /// What to persist.
    pub fn assignments(&self) -> Assignments {
        Assignments::collect(
            self.cpu.assignments(),
            &self.affinity,
            self.memory.assignments(),
            self.devices.assignments(),
            &self.observed,
        )
    }

    /// Keeps `saved` (from the state file) to break ties at the next `reconcile`; says what it
    /// holds.
    pub fn load_saved_assignments(&mut self, saved: Assignments) -> String {
        let count = |f: fn(&crate::placement::assignments::Assignment) -> bool| {
            saved.containers.iter().filter(|a| f(a)).count()
        };
        let report = format!(
            "{} containers: {} with exclusive cpus, {} with pinned memory, {} with devices",
            saved.containers.len(),
            count(|a| a.cpus.is_some()),
            count(|a| a.memory.is_some()),
            count(|a| a.devices.is_some()),
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
    ) -> Vec<(ContainerRef, Result<ContainerResources, Refusal>)> {
        let refs: Vec<ContainerRef> = (0..pod.init_containers.len())
            .map(ContainerRef::Init)
            .chain((0..pod.containers.len()).map(ContainerRef::App))
            .collect();
        refs.into_iter()
            .map(|which| (which, self.admit(Candidate::Pod { pod, which }, floor)))
            .collect()
    }

    /// Admits one container: hints, merge, allocation, cgroup values. Nothing changes when it
    /// is refused; the [`Refusal`] says why in every form the shell reports it.
    pub fn admit(&mut self, who: Candidate<'_>, floor: i32) -> Result<ContainerResources, Refusal> {
        self.admit_with_devices(who, &[], floor)
    }

    /// [`Placement::admit`] of a container that was given `devices` (its device set,
    /// `crate::managers::observed_devices::device_set`): their NUMA nodes are hints of the
    /// topology manager, and the assignment records them.
    pub fn admit_with_devices(
        &mut self,
        who: Candidate<'_>,
        devices: &[ObservedDevice],
        floor: i32,
    ) -> Result<ContainerResources, Refusal> {
        let mut subject = Subject::of(who)?;
        subject.devices = devices;
        self.admit_subject(&subject, floor)
            .map_err(|e| self.refusal(&subject, e, false))
    }

    pub(crate) fn admit_subject(
        &mut self,
        s: &Subject<'_>,
        floor: i32,
    ) -> Result<ContainerResources, PlacementError> {
        let c = s.container;
        let class = s.class;
        let key = s.key();
        let role = s.role;
        let n_cpus = self.exclusive_cpus(class, &c.requests);
        let mem = memory_request(class, &c.requests);
        let affinity = match self.tm.scope() {
            Scope::Container => {
                let subject = format!("container {}/{}", s.pod_key, c.name);
                self.admit_hint(&subject, &key, None, n_cpus, &mem, &c.requests, s.devices)?
            }
            Scope::Pod => match self.pod_affinity.get(s.pod_uid) {
                Some(a) => *a,
                None => {
                    let total = s.pod_requests();
                    let subject = format!("pod {}", s.pod_key);
                    let pod_key = ContainerKey::new(s.pod_uid, "");
                    let a = self.admit_hint(
                        &subject,
                        &pod_key,
                        Some(s.pod_uid),
                        self.exclusive_cpus(class, &total),
                        &memory_request(class, &total),
                        &total,
                        s.devices,
                    )?;
                    self.pod_affinity.insert(s.pod_uid.to_string(), a);
                    a
                }
            },
        };
        let grant = self.allocate(&key, role, n_cpus, &mem, &c.requests.extended, affinity)?;
        if !s.devices.is_empty() {
            self.observed.insert(key.clone(), s.devices.to_vec());
        }
        let grant = Grant {
            observed: s.devices.to_vec(),
            reason: match &grant.exclusive {
                Some(set) => format!("{class} with {} integer cpus: exclusive", set.len()),
                None => self.shared_reason(class, c),
            },
            ..grant
        };
        Ok(self.resources(s, grant, floor))
    }

    /// Allocates from every provider with `affinity`, all or nothing.
    fn allocate(
        &mut self,
        key: &ContainerKey,
        role: ContainerRole,
        n_cpus: Option<usize>,
        mem: &MemoryRequest,
        extended: &BTreeMap<String, u64>,
        affinity: Option<NumaMask>,
    ) -> Result<Grant, PlacementError> {
        // What the pod's containers hold now: an exclusive allocation may take CPUs over from
        // the pod's init containers, and a refusal below must give them back.
        let pod_held: Vec<(ContainerKey, CpuSet)> = self
            .cpu
            .assignments()
            .range(ContainerKey::new(key.pod_uid.clone(), "")..)
            .take_while(|(k, _)| k.pod_uid == key.pod_uid)
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let exclusive = match n_cpus {
            Some(n) => Some(self.cpu.allocate(key, n, role, affinity)?),
            None => None,
        };
        // Without a topology-manager affinity, pinned memory follows the container's CPUs.
        let mem_affinity = affinity.or_else(|| exclusive.as_ref().map(|s| self.nodes_of(s)));
        let mems = match self.memory.allocate(key, mem, mem_affinity) {
            Ok(m) => m,
            Err(e) => {
                self.undo_cpu(key, &pod_held);
                return Err(e.into());
            }
        };
        let devices = match self.devices.allocate(key, extended, affinity) {
            Ok(d) => d.into_values().flatten().collect(),
            Err(e) => {
                self.undo_cpu(key, &pod_held);
                self.memory.release(key);
                return Err(e.into());
            }
        };
        if let Some(a) = affinity {
            self.affinity.insert(key.clone(), a);
        }
        Ok(Grant {
            exclusive,
            mems,
            affinity,
            devices,
            observed: Vec::new(),
            reason: String::new(),
        })
    }

    /// Takes back `key`'s CPUs and returns what the allocation took over from the pod's init
    /// containers (`held`: the pod's assignments before it).
    fn undo_cpu(&mut self, key: &ContainerKey, held: &[(ContainerKey, CpuSet)]) {
        self.cpu.release(key);
        for (k, set) in held {
            if self.cpu.exclusive(k) != Some(set) {
                // Only init containers hand CPUs on; theirs are free again after the release.
                let _ = self.cpu.restore(k, set, ContainerRole::Init);
            }
        }
    }

    fn shared_reason(&self, class: QosClass, c: &Container) -> String {
        if self.cpu.config().policy == CpuPolicyName::None {
            return format!("{class}: cpu policy none, shared pool");
        }
        match class {
            QosClass::Guaranteed if !c.requests.cpu().is_multiple_of(1000) => format!(
                "Guaranteed with fractional cpu {}m: shared pool",
                c.requests.cpu()
            ),
            _ => format!("{class}: shared pool"),
        }
    }

    /// The number of exclusive CPUs `requests` qualify for (static policy, Guaranteed, integer).
    pub(crate) fn exclusive_cpus(&self, class: QosClass, requests: &ResourceList) -> Option<usize> {
        if self.cpu.config().policy != CpuPolicyName::Static {
            return None;
        }
        qos::exclusive_cpu_count(class, requests.cpu()).and_then(|n| usize::try_from(n).ok())
    }

    /// Gathers hints for `key` (or for pod `pod_uid` in pod scope) and asks the topology
    /// manager; the merged affinity, or the refusal naming the policy, request and free capacity.
    /// `observed` is the container's device set: in pod scope the pod's affinity is decided at
    /// its first admitted container, from that container's devices (NRI shows no other
    /// container's devices before it is created).
    #[allow(clippy::too_many_arguments)]
    fn admit_hint(
        &self,
        subject: &str,
        key: &ContainerKey,
        pod_uid: Option<&str>,
        n_cpus: Option<usize>,
        mem: &MemoryRequest,
        requests: &ResourceList,
        observed: &[ObservedDevice],
    ) -> Result<Option<NumaMask>, PlacementError> {
        if !self.tm.wants_hints() {
            return Ok(None);
        }
        let mut cpu = ProviderHints::new();
        if let Some(n) = n_cpus {
            cpu.insert("cpu".into(), self.cpu.hints(key, n));
        }
        let memory = match pod_uid {
            Some(uid) => self.memory.pod_hints(uid, mem),
            None => self.memory.hints(Some(key), mem),
        };
        let devices = self
            .devices
            .hints(pod_uid.is_none().then_some(key), &requests.extended);
        // The devices a container was given pull what can follow them: its exclusive CPUs and
        // its pinned memory. A container with neither has nothing to align, and is never
        // refused for devices it already holds.
        let aligns = !cpu.is_empty() || !memory.is_empty();
        let observed = if aligns { observed } else { &[] };
        let nodes: Vec<usize> = self.topology.numa_ids().collect();
        let given = observed_devices::hints(observed, &nodes);
        let providers = [cpu, memory, devices, given];
        if providers.iter().all(ProviderHints::is_empty) {
            return Ok(None);
        }
        let mut amounts = amounts(n_cpus, mem, &requests.extended);
        if !observed.is_empty() {
            amounts.insert(DEVICES_RESOURCE.into(), observed.len() as u64);
        }
        Ok(self
            .tm
            .admit(subject, &amounts, &providers, || self.free_per_node())?)
    }

    /// The cgroup values of `c` (of `pod`) placed as `grant`.
    pub(crate) fn resources(
        &self,
        s: &Subject<'_>,
        grant: Grant,
        floor: i32,
    ) -> ContainerResources {
        let c = s.container;
        let exclusive = grant.exclusive.is_some();
        let cpuset = grant
            .exclusive
            .clone()
            .unwrap_or_else(|| self.shared_pool());
        let mems = match (&grant.exclusive, grant.mems) {
            (_, Some(pinned)) => pinned,
            (Some(set), None) => match grant.affinity {
                Some(a) if self.nodes_of(set).is_subset_of(a) => a,
                _ => self.nodes_of(set),
            },
            (None, None) => self.shared_mems(),
        };
        ContainerResources {
            exclusive,
            cpuset,
            mems,
            memory_pinned: grant.mems.is_some(),
            numa_affinity: grant.affinity,
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
                s.oom_score_adj(self.topology.memory_capacity()),
                floor,
            ),
            pids_limit: self.qos.pids_limit,
            devices: grant.devices,
            observed_devices: grant.observed,
            sched_idle: false,
            reason: grant.reason,
        }
    }

    /// Returns a container's exclusive resources; true if it held any.
    pub fn release(&mut self, key: &ContainerKey) -> bool {
        let cpu = self.cpu.release(key).is_some();
        let mem = self.memory.release(key).is_some();
        let dev = self.devices.release(key).is_some();
        let observed = self.observed.remove(key).is_some();
        // The affinity is an assignment too (persisted): dropping it is a change to persist.
        let affinity = self.affinity.remove(key).is_some();
        cpu || mem || dev || affinity || observed
    }

    /// Returns every container's resources of pod `uid`; true if any were held.
    pub fn release_pod(&mut self, uid: &str) -> bool {
        // Every provider's entries of the pod (a range each, not the node's assignments).
        let keys: BTreeSet<ContainerKey> = container_key::of_pod(self.cpu.assignments(), uid)
            .map(|(k, _)| k)
            .chain(container_key::of_pod(&self.affinity, uid).map(|(k, _)| k))
            .chain(container_key::of_pod(self.memory.assignments(), uid).map(|(k, _)| k))
            .chain(container_key::of_pod(self.devices.assignments(), uid).map(|(k, _)| k))
            .chain(container_key::of_pod(&self.observed, uid).map(|(k, _)| k))
            .cloned()
            .collect();
        self.release_keys(uid, keys)
    }

    /// Returns the resources of `keys`, the containers of pod `uid`, and forgets the pod's
    /// affinity; true if any were held.
    fn release_keys(&mut self, uid: &str, keys: impl IntoIterator<Item = ContainerKey>) -> bool {
        let mut any = false;
        for k in keys {
            any |= self.release(&k);
        }
        self.pod_affinity.remove(uid);
        any
    }

    /// In-place resize of one container (KEP-5554): exclusive sets grow or shrink keeping
    /// their CPUs; a container that stops or starts qualifying moves between the shared pool
    /// and an exclusive set. An infeasible resize changes nothing.
    pub fn resize(
        &mut self,
        who: Candidate<'_>,
        floor: i32,
    ) -> Result<ContainerResources, Refusal> {
        let subject = Subject::of(who)?;
        self.resize_subject(&subject, floor)
            .map_err(|e| self.refusal(&subject, e, true))
    }

    fn resize_subject(
        &mut self,
        s: &Subject<'_>,
        floor: i32,
    ) -> Result<ContainerResources, PlacementError> {
        let class = s.class;
        let key = s.key();
        let held = self.cpu.exclusive(&key).cloned();
        match (held, self.exclusive_cpus(class, &s.container.requests)) {
            (Some(_), Some(n)) => {
                let set = self.cpu.resize(&key, n)?;
                let grant = Grant {
                    exclusive: Some(set),
                    mems: self.memory.assignment(&key).map(|a| a.nodes),
                    affinity: self.affinity.get(&key).copied(),
                    devices: Vec::new(),
                    observed: self.observed.get(&key).cloned().unwrap_or_default(),
                    reason: format!("{class} resized to {n} exclusive cpus"),
                };
                Ok(self.resources(s, grant, floor))
            }
            (Some(_), None) => {
                // Back to the shared pool: everything the exclusive grant booked goes back with
                // the CPUs (its pinned memory and NUMA affinity; the reply widens the mems),
                // so the memory manager's books never hold memory the container no longer has.
                // Devices stay: extended resources cannot be resized.
                self.cpu.release(&key);
                self.memory.release(&key);
                self.affinity.remove(&key);
                let grant = Grant {
                    exclusive: None,
                    mems: None,
                    affinity: None,
                    devices: Vec::new(),
                    observed: self.observed.get(&key).cloned().unwrap_or_default(),
                    reason: format!("{class} no longer qualifies for exclusive cpus: shared pool"),
                };
                Ok(self.resources(s, grant, floor))
            }
            (None, _) => self.admit_subject(s, floor),
        }
    }

    /// Checks every provider's invariants.
    pub fn check_invariants(&self) -> Result<(), PlacementError> {
        self.cpu.check_invariants()?;
        self.memory.check_invariants()?;
        Ok(())
    }
}

/// One container to admit, from either source: a pod's spec (the API, `topolet plan`) or what
/// NRI says ([`NriContainer`]). Every rule that reads more of the pod than the container asks
/// here, and an NRI container answers with what NRI knows (the path's class; no other
/// containers, priority or pod-level resources).
pub(crate) struct Subject<'a> {
    /// `namespace/name`.
    pub(super) pod_key: String,
    pod_uid: &'a str,
    pub(super) class: QosClass,
    role: ContainerRole,
    pub(super) container: &'a Container,
    /// The whole spec, when the source has one.
    pod: Option<&'a Pod>,
    /// The devices the container was given (its device set; empty when unknown).
    pub(super) devices: &'a [ObservedDevice],
}

impl<'a> Subject<'a> {
    fn of(who: Candidate<'a>) -> Result<Self, Refusal> {
        match who {
            Candidate::Pod { pod, which } => Subject::of_pod(pod, which).map_err(|error| Refusal {
                message: format!("{}: {error}", error.kubelet_reason()),
                error: Box::new(error),
            }),
            Candidate::Nri(c) => Ok(Subject::of_nri(c)),
        }
    }

    pub(crate) fn of_pod(pod: &'a Pod, which: ContainerRef) -> Result<Self, PlacementError> {
        let container = pod
            .container(which)
            .ok_or_else(|| PlacementError::NoSuchContainer {
                pod: pod.key(),
                which,
            })?;
        let role = match which {
            ContainerRef::Init(_) if container.is_restartable() => ContainerRole::Sidecar,
            ContainerRef::Init(_) => ContainerRole::Init,
            ContainerRef::App(_) => ContainerRole::App,
        };
        Ok(Subject {
            pod_key: pod.key(),
            pod_uid: &pod.uid,
            class: qos::class(pod),
            role,
            container,
            pod: Some(pod),
            devices: &[],
        })
    }

    pub(crate) fn of_nri(c: &'a NriContainer) -> Self {
        Subject {
            pod_key: c.pod_key(),
            pod_uid: &c.uid,
            class: c.class,
            role: c.role_or_app(),
            container: &c.container,
            pod: None,
            devices: &[],
        }
    }

    fn key(&self) -> ContainerKey {
        ContainerKey::new(self.pod_uid, self.container.name.clone())
    }

    /// The pod's aggregate request (pod scope): the spec's effective requests, else (NRI) the
    /// container's own, the only ones known.
    fn pod_requests(&self) -> ResourceList {
        match self.pod {
            Some(pod) => pod.effective_requests(),
            None => self.container.requests.clone(),
        }
    }

    /// The kubelet's oom_score_adj for the container (before the runtime's floor).
    fn oom_score_adj(&self, memory_capacity: u64) -> i32 {
        let variant = qos::OomScoreVariant::Current;
        match self.pod {
            Some(pod) => qos::oom_score_adj(pod, self.container, memory_capacity, variant),
            None => {
                qos::oom_score_adj_in_class(self.class, self.container, memory_capacity, variant)
            }
        }
    }
}

/// The memory manager's request for a container or pod with `requests`.
pub(super) fn memory_request(class: QosClass, requests: &ResourceList) -> MemoryRequest {
    MemoryRequest {
        guaranteed: class == QosClass::Guaranteed,
        memory: requests.memory(),
        hugepages: requests.hugepages.clone(),
    }
}

/// The aligned request as the topology manager names it in refusals.
pub(super) fn amounts(
    n_cpus: Option<usize>,
    mem: &MemoryRequest,
    extended: &BTreeMap<String, u64>,
) -> ResourceAmounts {
    let mut out = ResourceAmounts::new();
    if let Some(n) = n_cpus {
        out.insert("cpu".into(), n as u64 * 1000);
    }
    if mem.guaranteed && mem.memory > 0 {
        out.insert("memory".into(), mem.memory);
    }
    if mem.guaranteed {
        for (&size, &bytes) in &mem.hugepages {
            out.insert(format!("hugepages-{}", binary_quantity(size)), bytes);
        }
    }
    for (name, &count) in extended {
        out.insert(name.clone(), count);
    }
    out
}

#[cfg(test)]
#[path = "pipeline_device_tests.rs"]
pub(super) mod device_tests;

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::kube::pod::ContainerRestartPolicy;
    use crate::machine::topology::{Device, SyntheticSpec};
    use crate::managers::memory::policy::MemoryPolicyKind;
    use crate::managers::topology::hints::TopologyPolicy;

    /// 1 socket × 8 cores, one node, one NIC.
    pub(crate) fn machine() -> Topology {
        let mut raw = SyntheticSpec {
            sockets: 1,
            numa_per_socket: 1,
            l3_per_numa: 1,
            cores_per_l3: 8,
            threads_per_core: 1,
            memory_per_node: 8 << 30,
        }
        .raw();
        raw.devices = vec![Device {
            address: "0000:01:00.0".into(),
            numa: Some(0),
        }];
        Topology::build(&raw).unwrap()
    }

    pub(crate) fn guaranteed(name: &str, cpus: u64, nics: u64) -> Container {
        let mut r = ResourceList {
            cpu_millis: Some(cpus * 1000),
            memory_bytes: Some(1 << 30),
            ..Default::default()
        };
        if nics > 0 {
            r.extended.insert("example.com/nic".into(), nics);
        }
        Container {
            name: name.into(),
            requests: r.clone(),
            limits: r,
            restart_policy: None,
        }
    }

    pub(crate) fn pod(uid: &str, init: Vec<Container>, app: Vec<Container>) -> Pod {
        Pod {
            namespace: "ns".into(),
            name: uid.into(),
            uid: uid.into(),
            init_containers: init,
            containers: app,
            ..Default::default()
        }
    }

    pub(crate) fn config() -> PlacementSettings {
        let mut c = PlacementSettings::default();
        c.cpu.policy = CpuPolicyName::Static;
        c.cpu.reserved_cpus = Some(CpuSet::from_iter([0]));
        c.devices
            .insert("example.com/nic".into(), vec!["0000:01:00.0".into()]);
        c
    }

    /// An app container that takes CPUs over from its pod's init container and is then refused
    /// (here: no NIC left) must leave the init container's CPUs as they were.
    #[test]
    fn refused_admission_gives_init_cpus_back() {
        let (mut p, _) = Placement::new(&machine(), &config()).unwrap();
        let hog = pod("hog", vec![], vec![guaranteed("app", 1, 1)]);
        p.admit(Candidate::app(&hog), -1000).unwrap();
        let mut init = guaranteed("init", 3, 0);
        init.restart_policy = Some(ContainerRestartPolicy::Never);
        let web = pod("web", vec![init], vec![guaranteed("app", 2, 1)]);
        p.admit(
            Candidate::Pod {
                pod: &web,
                which: ContainerRef::Init(0),
            },
            -1000,
        )
        .unwrap();
        let before = p.assignments();
        let shared = p.shared_pool();
        let err = p
            .admit(
                Candidate::Pod {
                    pod: &web,
                    which: ContainerRef::App(0),
                },
                -1000,
            )
            .unwrap_err();
        assert!(err.to_string().contains("example.com/nic"), "{err}");
        assert_eq!(p.assignments(), before);
        assert_eq!(p.shared_pool(), shared);
        p.check_invariants().unwrap();
    }

    /// A resize from exclusive CPUs down to the shared pool returns the pinned memory and the
    /// affinity with the CPUs: nothing stays booked for the container but what it still has.
    #[test]
    fn resize_down_to_the_shared_pool_releases_memory_and_affinity() {
        let mut c = config();
        c.memory.policy = MemoryPolicyKind::Static;
        c.memory.reserved = BTreeMap::from([(0, 512 << 20)]);
        c.topology.policy = TopologyPolicy::SingleNumaNode;
        let (mut p, _) = Placement::new(&machine(), &c).unwrap();
        let big = pod("web", vec![], vec![guaranteed("app", 2, 0)]);
        let got = p.admit(Candidate::app(&big), -1000).unwrap();
        assert!(got.exclusive && got.memory_pinned, "{got:?}");
        let key = ContainerKey::new("web", "app");
        let held = p.assignments().get(&key).cloned().unwrap();
        assert!(held.memory.is_some(), "{held:?}");
        // 2 CPUs → 1500m: still Guaranteed, no longer integer.
        let mut small = big.clone();
        small.containers[0].requests.cpu_millis = Some(1500);
        small.containers[0].limits.cpu_millis = Some(1500);
        let got = p.resize(Candidate::app(&small), -1000).unwrap();
        assert!(
            !got.exclusive && !got.memory_pinned && got.mems.is_empty(),
            "{got:?}"
        );
        assert!(
            p.assignments().get(&key).is_none(),
            "still booked: {:?}",
            p.assignments().get(&key)
        );
        p.check_invariants().unwrap();
        // What it held is grantable again: the same pod admitted anew gets it back.
        let again = pod("web2", vec![], vec![guaranteed("app", 7, 0)]);
        assert!(
            p.admit(Candidate::app(&again), -1000).is_ok(),
            "the CPUs and memory came back"
        );
    }

    /// A restart keeps a shared container's pinned memory: a fractional Guaranteed container
    /// is pinned by the memory manager without exclusive CPUs, and the saved pinning comes back
    /// at reconcile (else the books would free memory the container still has pinned).
    #[test]
    fn reconcile_restores_the_pinned_memory_of_a_shared_container() {
        let mut c = config();
        c.memory.policy = MemoryPolicyKind::Static;
        c.memory.reserved = BTreeMap::from([(0, 512 << 20)]);
        let mut frac = pod("web", vec![], vec![guaranteed("app", 1, 0)]);
        frac.containers[0].requests.cpu_millis = Some(1500);
        frac.containers[0].limits.cpu_millis = Some(1500);
        let (mut before, _) = Placement::new(&machine(), &c).unwrap();
        let got = before.admit(Candidate::app(&frac), -1000).unwrap();
        assert!(!got.exclusive && got.memory_pinned, "{got:?}");
        let saved = before.assignments();
        let key = ContainerKey::new("web", "app");
        let pinned = saved.get(&key).and_then(|a| a.memory.clone()).unwrap();

        let (mut after, _) = Placement::new(&machine(), &c).unwrap();
        after.load_saved_assignments(saved);
        let container = NriContainer {
            namespace: frac.namespace.clone(),
            name: frac.name.clone(),
            uid: frac.uid.clone(),
            class: qos::class(&frac),
            role: None,
            container: frac.containers[0].clone(),
        };
        let pool = after.shared_pool();
        let running = crate::placement::reconcile::RunningContainer {
            id: "ctr",
            container: &container,
            cpuset: Some(&pool),
        };
        let out = after.reconcile(&[running], -1000);
        let res = &out.targets[0];
        assert!(!res.exclusive && res.memory_pinned, "{res:?}");
        assert_eq!(
            after.assignments().get(&key).and_then(|a| a.memory.clone()),
            Some(pinned)
        );
        after.check_invariants().unwrap();
    }

    /// A restart keeps a decision nothing contradicts: a container whose saved exclusive CPUs
    /// never reached the runtime (topolet killed between its decision and the runtime's reply;
    /// the container runs with no cpuset of its own) gets them back, even when a container with
    /// no saved assignment sorts first and would otherwise take them by a fresh admission.
    #[test]
    fn reconcile_restores_saved_cpus_before_any_fresh_admission() {
        let c = config();
        let kept = pod("kept", vec![], vec![guaranteed("app", 4, 0)]);
        let (mut before, _) = Placement::new(&machine(), &c).unwrap();
        let got = before.admit(Candidate::app(&kept), -1000).unwrap();
        assert!(got.exclusive, "{got:?}");
        let saved = before.assignments();
        let kept_key = ContainerKey::new("kept", "app");
        let saved_cpus = saved.get(&kept_key).and_then(|a| a.cpus.clone()).unwrap();

        let newcomer = pod("newcomer", vec![], vec![guaranteed("app", 4, 0)]);
        let nri = |p: &Pod| NriContainer {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
            class: qos::class(p),
            role: None,
            container: p.containers[0].clone(),
        };
        let (kept_c, new_c) = (nri(&kept), nri(&newcomer));
        let (mut after, _) = Placement::new(&machine(), &c).unwrap();
        after.load_saved_assignments(saved);
        // Both run with no cpuset of their own; the newcomer's id sorts first. 7 CPUs are
        // allocatable: only one of the two 4-CPU containers can be exclusive.
        let running = [
            crate::placement::reconcile::RunningContainer {
                id: "a-newcomer",
                container: &new_c,
                cpuset: None,
            },
            crate::placement::reconcile::RunningContainer {
                id: "b-kept",
                container: &kept_c,
                cpuset: None,
            },
        ];
        let out = after.reconcile(&running, -1000);
        let (newcomer_res, kept_res) = (&out.targets[0], &out.targets[1]);
        assert!(kept_res.exclusive, "{kept_res:?}");
        assert_eq!(kept_res.cpuset, saved_cpus, "the saved decision is kept");
        assert!(!newcomer_res.exclusive, "{newcomer_res:?}");
        assert_eq!(newcomer_res.cpuset, after.shared_pool());
        assert!(
            out.notes
                .iter()
                .any(|n| n.starts_with("newcomer/app: cannot get exclusive cpus")),
            "{:?}",
            out.notes
        );
        after.check_invariants().unwrap();
    }

    /// `release` says whether it changed what is persisted: an entry holding only a topology
    /// affinity (pod scope under cpu policy none) counts.
    #[test]
    fn release_reports_an_affinity_only_entry() {
        let mut c = config();
        c.cpu.policy = CpuPolicyName::None;
        c.cpu.reserved_cpus = None;
        c.topology.policy = TopologyPolicy::BestEffort;
        c.topology.scope = Scope::Pod;
        let (mut p, _) = Placement::new(&machine(), &c).unwrap();
        // The pod's affinity comes from its NIC; "side" holds nothing but that affinity.
        let web = pod(
            "web",
            vec![],
            vec![guaranteed("app", 1, 1), guaranteed("side", 1, 0)],
        );
        for (_, r) in p.admit_pod(&web, -1000) {
            r.unwrap();
        }
        let key = ContainerKey::new("web", "side");
        let entry = p.assignments().get(&key).cloned().unwrap();
        assert!(entry.affinity.is_some() && entry.cpus.is_none() && entry.devices.is_none());
        assert!(p.release(&key), "an entry was dropped from the assignments");
        assert!(p.assignments().get(&key).is_none());
    }

    mod release_pod_by_range {
        use super::*;
        use crate::placement::reconcile::RunningContainer;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            /// A one-container pod: pod, container, CPUs, NICs.
            Admit(u8, u8, u64, u64),
            Release(u8, u8),
            ReleasePod(u8),
            /// A restart: the state file's assignments and every exclusive container running
            /// on its CPUs, reconciled.
            Restore,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u8..4, 0u8..3, 1u64..3, 0u64..2).prop_map(|(p, c, n, d)| Op::Admit(p, c, n, d)),
                2 => (0u8..4, 0u8..3).prop_map(|(p, c)| Op::Release(p, c)),
                2 => (0u8..4).prop_map(Op::ReleasePod),
                1 => Just(Op::Restore),
            ]
        }

        /// Pod uids that are prefixes of one another: a pod's release must not reach the others.
        fn uid(pod: u8) -> String {
            ["p", "p-1", "p1", "p10"][pod as usize % 4].to_string()
        }

        /// What `release_pod` did before the range query: a scan of every assignment.
        fn release_pod_by_scan(p: &mut Placement, uid: &str) -> bool {
            let keys: Vec<ContainerKey> = p
                .assignments()
                .containers
                .iter()
                .filter(|a| a.pod_uid == uid)
                .map(|a| a.key())
                .collect();
            p.release_keys(uid, keys)
        }

        fn restore(p: &mut Placement) {
            let owned: Vec<(String, NriContainer, CpuSet)> = p
                .exclusive()
                .iter()
                .map(|(k, cpus)| {
                    let container = NriContainer {
                        namespace: "ns".into(),
                        name: k.pod_uid.clone(),
                        uid: k.pod_uid.clone(),
                        class: QosClass::Guaranteed,
                        role: None,
                        container: guaranteed(&k.container, cpus.len() as u64, 0),
                    };
                    (k.to_string(), container, cpus.clone())
                })
                .collect();
            let running: Vec<RunningContainer<'_>> = owned
                .iter()
                .map(|(id, container, cpus)| RunningContainer {
                    id,
                    container,
                    cpuset: Some(cpus),
                })
                .collect();
            let saved = p.assignments();
            p.load_saved_assignments(saved);
            p.reconcile(&running, -1000);
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn a_pod_s_release_is_what_a_scan_of_every_assignment_releases(
                ops in proptest::collection::vec(op(), 1..30),
            ) {
                let mut c = config();
                c.memory.policy = MemoryPolicyKind::Static;
                c.memory.reserved.insert(0, 1 << 30);
                let (mut ranged, _) = Placement::new(&machine(), &c).expect("placement");
                let mut scanned = ranged.clone();
                for op in &ops {
                    match op {
                        Op::Admit(pod, ctr, cpus, nics) => {
                            let pod = super::pod(&uid(*pod), vec![], vec![guaranteed(&format!("c{ctr}"), *cpus, *nics)]);
                            let a = ranged.admit(Candidate::app(&pod), -1000).map_err(|e| e.to_string());
                            let b = scanned.admit(Candidate::app(&pod), -1000).map_err(|e| e.to_string());
                            prop_assert_eq!(a, b);
                        }
                        Op::Release(pod, ctr) => {
                            let k = ContainerKey::new(uid(*pod), format!("c{ctr}"));
                            prop_assert_eq!(ranged.release(&k), scanned.release(&k));
                        }
                        Op::ReleasePod(pod) => {
                            let uid = uid(*pod);
                            let held = ranged.assignments().containers.iter().any(|a| a.pod_uid == uid);
                            let released = ranged.release_pod(&uid);
                            prop_assert_eq!(released, held);
                            prop_assert_eq!(released, release_pod_by_scan(&mut scanned, &uid));
                            prop_assert!(ranged.assignments().containers.iter().all(|a| a.pod_uid != uid));
                        }
                        Op::Restore => {
                            restore(&mut ranged);
                            restore(&mut scanned);
                        }
                    }
                    prop_assert_eq!(ranged.assignments(), scanned.assignments());
                    prop_assert_eq!(&ranged.pod_affinity, &scanned.pod_affinity);
                    prop_assert_eq!(ranged.shared_pool(), scanned.shared_pool());
                }
            }
        }
    }
}
