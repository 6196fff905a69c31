//! Batch containers (`topolet_core::reclaimed`): which live containers belong to batch pods,
//! their cpuset (the pool: shared CPUs that are neither reserved nor exclusive) and their CFS
//! quota (their share of the suppress loop's budget), sent through the container records like
//! every other target — in the reply to the next event that can carry it, or in one unsolicited
//! update.
//!
//! A batch container never runs on a reserved or an exclusive CPU. When exclusive grants take
//! every CPU of the pool, a cpuset cannot be emptied: the batch containers are **held** instead —
//! frozen (`crate::host::freezer`) in the handler that empties the pool, before its reply lets the
//! exclusive container start, and a batch container created meanwhile is refused (the kubelet
//! retries it with back-off). When the pool has CPUs again, each held container is sent the pool
//! and thawed once the runtime has acknowledged that cpuset. A pod held for `starved_for` is
//! starved (`crate::reclaimed`) and evicted like any other.
//!
//! A pod is batch by its spec (the pod watch): NRI shows it as a plain BestEffort (or Burstable)
//! pod. A container created while the feature is on is admitted with its quota already set, so it
//! never starts unlimited; containers found at Synchronize (a restart) keep the quota the runtime
//! holds until the suppress loop, having read their pod, sends the current one. Turning the
//! feature off sends each batch container the plain BestEffort values back: the shared pool and
//! no quota.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::{PluginState, TopoletPlugin};
use crate::cluster::pod_directory::{Lookup, PodDirectory};
use topolet_core::kube::pod::Pod;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::placement::ContainerResources;
use topolet_core::reclaimed::suppress::PERIOD_US;
use topolet_core::reclaimed::{batch_pod, distribute, quota_us, BatchPod, MIN_GRANT_MILLIS};

/// One batch container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEntry {
    pub pod_uid: String,
    /// Its limit of the reclaimed resource, in milli-CPU.
    pub limit_millis: u64,
    /// What the budget gives it now, in milli-CPU.
    pub granted_millis: u64,
}

/// What the handlers know of batch pods.
#[derive(Debug, Default)]
pub(super) struct BatchBook {
    /// Live batch containers by id.
    containers: BTreeMap<String, BatchEntry>,
    /// Pods already classified (uid → their batch spec, or `None`: a regular pod).
    pods: HashMap<String, Option<BatchPod>>,
    /// Containers whose CFS quota is topolet's to send: the batch containers, and those given
    /// the plain BestEffort values back (until they are removed).
    quota_owned: HashSet<String>,
    /// The suppress loop's budget (`None`: no step yet, or the feature is off).
    budget: Option<u64>,
    /// Batch containers frozen because the pool is empty (thawed once they run on the pool).
    held: BTreeSet<String>,
    /// Batch containers found running at Synchronize (a restart) → the grant they ran with
    /// (milli-CPU): kept as a floor until the loop's usage window has refilled
    /// ([`TopoletPlugin::end_carry`]), so that a restart cuts no grant on a half-empty window.
    carried: HashMap<String, u64>,
    /// Pods that ask for the resource but are not batch: uid → (`namespace/name`, why).
    not_batch: BTreeMap<String, (String, String)>,
}

impl BatchBook {
    pub(super) fn is_batch(&self, id: &str) -> bool {
        self.containers.contains_key(id)
    }

    pub(super) fn owns_quota(&self, id: &str) -> bool {
        self.quota_owned.contains(id)
    }

    /// Forgets container `id` (removed).
    pub(super) fn forget(&mut self, id: &str) {
        self.containers.remove(id);
        self.quota_owned.remove(id);
        self.held.remove(id);
        self.carried.remove(id);
    }

    /// Forgets pod `uid`'s class (its sandbox was removed).
    pub(super) fn forget_pod(&mut self, uid: &str) {
        self.pods.remove(uid);
        self.not_batch.remove(uid);
    }
}

/// One batch pod as the suppress loop sees it.
#[derive(Debug, Clone)]
pub struct BatchPodView {
    pub uid: String,
    pub pod_ref: String,
    pub sandbox_id: String,
    pub cgroup_parent: String,
    pub request_millis: u64,
    pub granted_millis: u64,
    pub limit_millis: u64,
    /// Some of its containers are held (frozen: the pool is empty).
    pub held: bool,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// (container name, limit, granted).
    pub containers: Vec<(String, u64, u64)>,
}

/// What the suppress loop measures and decides from, under one lock.
#[derive(Debug, Clone, Default)]
pub struct ReclaimedInputs {
    /// The pool: shared CPUs neither reserved nor exclusive.
    pub pool: CpuSet,
    /// Exclusive CPUs held now.
    pub exclusive: CpuSet,
    /// The reserved CPUs of the shared pool: regular pods run there too, batch pods never.
    pub reserved: CpuSet,
    /// The pool's CPUs per NUMA node.
    pub zones: Vec<(usize, CpuSet)>,
    pub batch: Vec<BatchPodView>,
    /// The cgroup parents of the other Kubernetes pods.
    pub regular_pods: Vec<String>,
}

impl TopoletPlugin {
    /// Classifies every live container's pod not classified yet from `dir` (a batch pod of
    /// `resource`, or regular); returns how many containers became batch. Pods the directory
    /// does not hold yet are tried again at the next call. Containers learnt here are given
    /// their quota at once (they were created before the pod watch knew their pod, and a steady
    /// budget would never send it); one that runs with a batch quota already (kept at a
    /// restart's Synchronize) keeps that grant as a floor until [`TopoletPlugin::end_carry`].
    pub fn learn_batch(self: &Arc<Self>, dir: &PodDirectory, resource: &str) -> usize {
        let learnt = {
            let mut node = self.lock();
            let learnt = learn(&mut node, dir, resource);
            if learnt > 0 {
                rebalance(&mut node, None);
                self.hold_batch(&mut node);
            }
            learnt
        };
        if learnt > 0 {
            self.flush_updates();
        }
        learnt
    }

    /// The usage window has refilled since the restart: grants carried over from the running
    /// containers give way to the budget's split. Returns how many containers changed.
    pub fn end_carry(self: &Arc<Self>) -> usize {
        let changed = {
            let mut node = self.lock();
            if node.batch.carried.is_empty() {
                return 0;
            }
            node.batch.carried.clear();
            rebalance(&mut node, None)
        };
        if changed > 0 {
            self.flush_updates();
        }
        changed
    }

    /// Whether the runtime's Synchronize has been handled on this connection.
    pub fn nri_synchronized(&self) -> bool {
        self.lock().records.is_synced()
    }

    /// Why batch containers created now would not get `SCHED_IDLE` although `[reclaimed]
    /// sched_idle` asks for it (the runtime's NRI predates the field), for status; `None` when
    /// they get it, or before the runtime has said its version.
    pub fn sched_idle_missing(&self) -> Option<String> {
        let node = self.lock();
        if !node.records.is_synced() || sched_idle_applies(node.runtime_nri) {
            return None;
        }
        Some(format!(
            "batch containers are created under the normal scheduling policy, not SCHED_IDLE: the runtime's NRI ({}) carries no scheduling policy before v0.11 (containerd 2.2.1)",
            node.runtime_nri
                .map_or_else(|| "version unknown".to_string(), |v| v.to_string())
        ))
    }
}

/// [`TopoletPlugin::learn_batch`]'s classification, under the lock.
fn learn(node: &mut PluginState, dir: &PodDirectory, resource: &str) -> usize {
    let mut learnt = 0;
    let mut unknown: Vec<(String, String, String)> = Vec::new();
    for (id, r) in node.records.iter() {
        if !r.lifecycle().is_live() || node.batch.containers.contains_key(id) {
            continue;
        }
        let uid = &r.view().key.pod_uid;
        match node.batch.pods.get(uid) {
            Some(None) => continue,
            Some(Some(_)) | None => {
                unknown.push((id.clone(), uid.clone(), r.view().key.container.clone()))
            }
        }
    }
    for (id, uid, container) in unknown {
        if !node.batch.pods.contains_key(&uid) {
            let class = match dir.get(&uid) {
                Lookup::Found(pod) => classify(&mut node.batch, &pod, resource),
                Lookup::Invalid(_) => None,
                Lookup::NotFound | Lookup::NotSynced => continue,
            };
            node.batch.pods.insert(uid.clone(), class);
        }
        let Some(Some(spec)) = node.batch.pods.get(&uid) else {
            continue;
        };
        let limit = spec
            .containers
            .iter()
            .find(|c| c.name == container)
            .map_or(0, |c| c.limit_millis);
        if let Some(t) = node.records.get(&id).map(|r| r.target()) {
            if t.cpu_quota > 0 {
                let period = if t.cpu_period > 0 {
                    t.cpu_period
                } else {
                    PERIOD_US
                };
                let millis = u64::try_from(t.cpu_quota).unwrap_or(0) * 1000 / period;
                node.batch.carried.insert(id.clone(), millis);
            }
        }
        node.batch.containers.insert(
            id.clone(),
            BatchEntry {
                pod_uid: uid,
                limit_millis: limit,
                granted_millis: 0,
            },
        );
        node.batch.quota_owned.insert(id);
        learnt += 1;
    }
    learnt
}

impl TopoletPlugin {
    /// What the suppress loop works from. Batch containers that are no longer live leave the
    /// book here.
    pub fn reclaimed_inputs(&self) -> ReclaimedInputs {
        let mut node = self.lock();
        let node = &mut *node;
        let live: HashSet<&String> = node
            .records
            .iter()
            .filter(|(_, r)| r.lifecycle().is_live())
            .map(|(id, _)| id)
            .collect();
        node.batch.containers.retain(|id, _| live.contains(id));
        let exists: HashSet<&String> = node.records.iter().map(|(id, _)| id).collect();
        node.batch.quota_owned.retain(|id| exists.contains(id));
        let pool = node.placement.batch_pool();
        let topology = node.placement.topology();
        let zones = topology
            .numa_ids()
            .map(|n| (n, topology.numa_cpus(n).intersection(&pool)))
            .collect();
        let exclusive = node
            .placement
            .assignable()
            .difference(&node.placement.shared_pool());
        let sandboxes: HashMap<&str, (&String, String)> = node
            .sandboxes
            .iter()
            .map(|(sid, s)| {
                let parent = s.linux.as_ref().map(|l| l.cgroup_parent.clone());
                (s.uid.as_str(), (sid, parent.unwrap_or_default()))
            })
            .collect();
        let mut pods: BTreeMap<&str, BatchPodView> = BTreeMap::new();
        for (id, e) in &node.batch.containers {
            let Some(r) = node.records.get(id) else {
                continue;
            };
            let view = r.view();
            let p = pods
                .entry(e.pod_uid.as_str())
                .or_insert_with(|| BatchPodView {
                    uid: e.pod_uid.clone(),
                    pod_ref: view.pod_ref.clone(),
                    sandbox_id: sandboxes
                        .get(e.pod_uid.as_str())
                        .map(|(sid, _)| (*sid).clone())
                        .unwrap_or_default(),
                    cgroup_parent: view.cgroup_parent.clone(),
                    request_millis: node
                        .batch
                        .pods
                        .get(&e.pod_uid)
                        .and_then(|s| s.as_ref())
                        .map_or(0, |s| s.request_millis),
                    granted_millis: 0,
                    limit_millis: 0,
                    held: false,
                    priority: node
                        .batch
                        .pods
                        .get(&e.pod_uid)
                        .and_then(|s| s.as_ref())
                        .map_or(0, |s| s.priority),
                    containers: Vec::new(),
                });
            p.held |= node.batch.held.contains(id);
            p.granted_millis += e.granted_millis;
            p.limit_millis += e.limit_millis;
            p.containers
                .push((view.key.container.clone(), e.limit_millis, e.granted_millis));
        }
        let batch_uids: HashSet<&str> = pods.keys().copied().collect();
        let regular_pods = node
            .sandboxes
            .values()
            .filter(|s| !batch_uids.contains(s.uid.as_str()))
            .filter_map(|s| s.linux.as_ref().map(|l| l.cgroup_parent.clone()))
            .filter(|p| !p.is_empty())
            .collect();
        let reserved = node
            .placement
            .shared_pool()
            .intersection(node.placement.reserved());
        ReclaimedInputs {
            pool,
            exclusive,
            reserved,
            zones,
            batch: pods.into_values().collect(),
            regular_pods,
        }
    }

    /// Splits `budget` (milli-CPU) among the batch containers and queues every container whose
    /// cpuset or quota changed; returns how many. A quota that fell (a cut) is written straight
    /// into the container's cgroup at once ([`crate::host::container_quota`]); every change is
    /// also sent to the runtime, at once when it is quiet.
    pub fn set_batch_budget(self: &Arc<Self>, budget: u64) -> usize {
        let (changed, cut) = {
            let mut node = self.lock();
            let before: BTreeMap<String, i64> = node
                .batch
                .containers
                .keys()
                .filter_map(|id| Some((id.clone(), node.records.get(id)?.target().cpu_quota)))
                .collect();
            node.batch.budget = Some(budget);
            let changed = rebalance(&mut node, None);
            self.hold_batch(&mut node);
            let cut: Vec<String> = before
                .into_iter()
                .filter(|(id, was)| {
                    node.records.get(id).is_some_and(|r| {
                        let now = r.target().cpu_quota;
                        now >= 0 && (*was < 0 || now < *was)
                    })
                })
                .map(|(id, _)| id)
                .collect();
            (changed, cut)
        };
        if !cut.is_empty() {
            self.write_batch_quotas(&cut);
        }
        if changed > 0 {
            self.flush_updates();
        }
        changed
    }

    /// Writes the current quota of each live, unheld batch container among `ids` straight into
    /// its cgroup; returns how many were written. A cgroup that is gone (the container ended
    /// meanwhile) is skipped quietly; any other failure is counted and logged, and the runtime's
    /// update still carries the quota.
    pub(super) fn write_batch_quotas(&self, ids: &[String]) -> usize {
        let work: Vec<(&String, String, i64)> = {
            let node = self.lock();
            ids.iter()
                .filter(|id| {
                    node.batch.containers.contains_key(*id) && !node.batch.held.contains(*id)
                })
                .filter_map(|id| {
                    let r = node.records.get(id)?;
                    let quota = r.target().cpu_quota;
                    (r.lifecycle().is_live() && quota >= 0)
                        .then(|| (id, r.view().cgroups_path.clone(), quota))
                })
                .collect()
        };
        if work.is_empty() {
            return 0;
        }
        let found = match self.container_quota.get() {
            Some(w) => Ok(w),
            None => crate::host::container_quota::ContainerQuota::of(&self.cgroup_roots())
                .map(|w| self.container_quota.get_or_init(|| w)),
        };
        let writer = match found {
            Ok(w) => w,
            Err(e) => {
                self.metrics.reclaimed_cgroup_error("quota");
                tracing::warn!(error = %e, "reclaimed CPU: no cpu controller to write batch quotas into; the runtime's update carries them");
                return 0;
            }
        };
        let mut written = 0;
        for (id, path, quota) in work {
            match writer.write(&path, quota, PERIOD_US) {
                Ok(()) => written += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    tracing::debug!(container = %id, error = %e, "reclaimed CPU: a batch container's cgroup is gone; its quota not written");
                }
                Err(e) => {
                    self.metrics.reclaimed_cgroup_error("quota");
                    tracing::warn!(container = %id, quota, error = %e, "reclaimed CPU: a batch container's quota not written directly; the runtime's update carries it");
                }
            }
        }
        written
    }

    /// The feature turned off: every batch container is sent the plain BestEffort values back
    /// (the shared pool, no quota); the book is emptied. Returns how many were sent.
    pub fn batch_off(self: &Arc<Self>) -> usize {
        let n = {
            let mut node = self.lock();
            let node = &mut *node;
            let shared = node.placement.shared_pool();
            let ids: Vec<String> = node.batch.containers.keys().cloned().collect();
            for id in &ids {
                if let Some(r) = node.records.get_mut(id) {
                    if r.retarget(|t| {
                        t.cpuset.clone_from(&shared);
                        t.cpu_quota = -1;
                    }) {
                        node.records.queue(id);
                    }
                }
            }
            node.batch.containers.clear();
            node.batch.pods.clear();
            node.batch.budget = None;
            // No longer batch: plain BestEffort containers run wherever the shared pool is.
            let held = std::mem::take(&mut node.batch.held);
            for id in held {
                if let Some(r) = node.records.get(&id) {
                    self.freeze(&id, &r.view().cgroups_path, false);
                }
            }
            ids.len()
        };
        if n > 0 {
            self.flush_updates();
        }
        n
    }

    /// Holds (freezes) every live batch container not held yet when the pool is empty: no CPU is
    /// left that a batch container may run on. Called wherever the pool may have shrunk, under
    /// the lock, before the reply that hands its last CPU to an exclusive container.
    pub(super) fn hold_batch(&self, node: &mut PluginState) {
        if !node.placement.batch_pool().is_empty() {
            return;
        }
        let ids: Vec<String> = node
            .batch
            .containers
            .keys()
            .filter(|id| !node.batch.held.contains(*id))
            .filter(|id| {
                node.records
                    .get(id)
                    .is_some_and(|r| r.lifecycle().is_live())
            })
            .cloned()
            .collect();
        for id in ids {
            let Some(r) = node.records.get(&id) else {
                continue;
            };
            if self.freeze(&id, &r.view().cgroups_path, true) {
                tracing::warn!(pod = %r.view().pod_ref, container = %r.view().key.container, "reclaimed CPU: exclusive grants took every CPU that is neither reserved nor exclusive; batch container held (frozen) until the pool has CPUs again");
                node.batch.held.insert(id);
            }
        }
    }

    /// Thaws each held batch container that may run again: the pool has CPUs and the runtime has
    /// acknowledged the container's target, which is on the pool. Returns how many were thawed.
    pub fn release_batch(&self) -> usize {
        let mut node = self.lock();
        let node = &mut *node;
        let pool = node.placement.batch_pool();
        let mut released = 0;
        let held: Vec<String> = node.batch.held.iter().cloned().collect();
        for id in held {
            let Some(r) = node.records.get(&id) else {
                node.batch.held.remove(&id);
                continue;
            };
            let on_pool = !pool.is_empty()
                && r.acked() == Some(r.generation())
                && !r.target().cpuset.is_empty()
                && r.target().cpuset.is_subset(&pool);
            if on_pool && self.freeze(&id, &r.view().cgroups_path, false) {
                tracing::info!(pod = %r.view().pod_ref, container = %r.view().key.container, cpus = %r.target().cpuset, "reclaimed CPU: the pool has CPUs again; batch container thawed on it");
                node.batch.held.remove(&id);
                released += 1;
            }
        }
        released
    }

    /// Freezes or thaws container `id`; false (logged, counted) when the write failed.
    fn freeze(&self, id: &str, cgroups_path: &str, frozen: bool) -> bool {
        let result = crate::host::freezer::Freezer::of(&self.cgroup_roots())
            .and_then(|f| f.set(cgroups_path, frozen));
        match result {
            Ok(()) => true,
            Err(e) => {
                self.metrics.reclaimed_cgroup_error("freeze");
                tracing::error!(container = id, frozen, error = %e, "reclaimed CPU: batch container freezer not written");
                false
            }
        }
    }

    /// Pods that ask for the reclaimed resource but are not batch: uid → (`namespace/name`,
    /// why). Only pods with a live container.
    pub fn not_batch(&self) -> BTreeMap<String, (String, String)> {
        let node = self.lock();
        node.batch
            .not_batch
            .iter()
            .filter(|(uid, _)| {
                node.records
                    .iter()
                    .any(|(_, r)| r.lifecycle().is_live() && &r.view().key.pod_uid == *uid)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The batch containers held now (tests, status).
    pub fn held_batch(&self) -> BTreeSet<String> {
        self.lock().batch.held.clone()
    }

    /// Woken by every reload that puts a new configuration in effect.
    pub fn config_changed(&self) -> Arc<tokio::sync::Notify> {
        self.config_changed.clone()
    }

    /// This node's pods from the API, when the client is on.
    pub fn pod_directory(&self) -> Option<&PodDirectory> {
        self.pods.get().map(|(dir, _)| dir)
    }

    /// Where cgroups are read (`/proc` for the mounts, the sysfs root for `/sys`).
    pub fn cgroup_roots(&self) -> crate::host::pod_cgroup::Roots {
        crate::host::pod_cgroup::Roots {
            proc_root: self.proc_root.clone(),
            sysfs_root: self.sysfs_root.clone(),
        }
    }

    /// The reclaimed-CPU loop's last report.
    pub fn reclaimed_report(&self) -> Option<topolet_core::reclaimed::ReclaimedStatus> {
        self.reclaimed_report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the reclaimed-CPU report; when the zones' advertised amounts (or whether the
    /// feature is on) changed, the NodeResourceTopology publisher is woken.
    pub fn set_reclaimed_report(&self, report: Option<topolet_core::reclaimed::ReclaimedStatus>) {
        let zones = |r: &Option<topolet_core::reclaimed::ReclaimedStatus>| {
            r.as_ref().map(|r| {
                r.zones
                    .iter()
                    .map(|z| (z.numa_node, z.terms.pool_millis, z.advertised_millis))
                    .collect::<Vec<_>>()
            })
        };
        let state = |r: &Option<topolet_core::reclaimed::ReclaimedStatus>| {
            r.as_ref().map(|r| r.state == "on")
        };
        let mut slot = self
            .reclaimed_report
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // The NodeResourceTopology follows the zones' advertised (damped) amounts, not every
        // new reading: only those wake its publisher.
        let changed = zones(&slot) != zones(&report) || state(&slot) != state(&report);
        *slot = report;
        drop(slot);
        if changed {
            self.books_changed.notify_one();
        }
    }

    /// The batch containers now (tests, status): id → entry.
    pub fn batch_containers(&self) -> BTreeMap<String, BatchEntry> {
        self.lock().batch.containers.clone()
    }
}

/// `pod` classified for `resource`: its batch spec, or `None` (a regular pod; one that asks for
/// both the resource and regular CPU is regular, and said so).
fn classify(book: &mut BatchBook, pod: &Pod, resource: &str) -> Option<BatchPod> {
    match batch_pod(pod, resource) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(pod = %pod.key(), error = %e, "not a batch pod");
            book.not_batch
                .insert(pod.uid.clone(), (pod.key(), e.to_string()));
            None
        }
    }
}

/// Admission of a container of an API pod while the feature is on: when the pod is batch, the
/// container's target gets the pool and its share of the budget (the others' shares are queued),
/// and the `SCHED_IDLE` policy when `sched_idle` asks for it and the runtime can apply it
/// ([`sched_idle_applies`]).
pub(super) fn admit_batch(
    node: &mut PluginState,
    id: &str,
    pod: &Pod,
    which: topolet_core::kube::pod::ContainerRef,
    resource: &str,
    sched_idle: bool,
    decision: &mut ContainerResources,
) -> bool {
    let Some(spec) = classify(&mut node.batch, pod, resource) else {
        node.batch.pods.insert(pod.uid.clone(), None);
        return false;
    };
    let limit = spec.container(which).map_or(0, |c| c.limit_millis);
    node.batch.pods.insert(pod.uid.clone(), Some(spec));
    node.batch.containers.insert(
        id.to_string(),
        BatchEntry {
            pod_uid: pod.uid.clone(),
            limit_millis: limit,
            granted_millis: 0,
        },
    );
    node.batch.quota_owned.insert(id.to_string());
    let grants = grants(node);
    let mine = grants.get(id).copied().unwrap_or(MIN_GRANT_MILLIS);
    decision.cpuset = node.placement.batch_pool();
    decision.cpu_quota = quota_us(mine);
    decision.cpu_period = PERIOD_US;
    decision.sched_idle = sched_idle && sched_idle_applies(node.runtime_nri);
    if let Some(e) = node.batch.containers.get_mut(id) {
        e.granted_millis = mine;
    }
    rebalance(node, Some(id));
    true
}

/// Whether a runtime of NRI version `nri` applies a scheduling policy sent in a container
/// adjustment: the field came with NRI v0.11 (containerd 2.2.1); an older runtime's protobuf
/// decoder drops it unread, so topolet does not send it (and does not claim it in status).
pub(super) fn sched_idle_applies(nri: Option<topolet_nri::version::NriVersion>) -> bool {
    nri.is_some_and(|v| v >= topolet_nri::version::NriVersion::V0_11)
}

/// The refusal of a container of batch pod `pod` created while the pool is empty: it may run on
/// no CPU (a reserved or exclusive one never), so it is not created; the kubelet retries it with
/// back-off. `None` when the pod is not batch or the pool has CPUs.
pub(super) fn held_refusal(
    node: &PluginState,
    pod: &Pod,
    which: topolet_core::kube::pod::ContainerRef,
    resource: &str,
) -> Option<String> {
    if !node.placement.batch_pool().is_empty() {
        return None;
    }
    let spec = batch_pod(pod, resource).ok().flatten()?;
    let name = spec.container(which).map_or("?", |c| c.name.as_str());
    Some(format!(
        "topolet: container {name} of batch pod {}/{} ({resource}) is held: exclusive grants took every CPU that is neither reserved nor exclusive, and a batch container runs on no other; created once the pool has CPUs again (the kubelet retries)",
        pod.namespace, pod.name
    ))
}

/// Whether a container found at Synchronize runs as a batch container of an earlier topolet: a
/// pod without a CPU request (shares 2) whose container has a positive CFS quota — which the
/// kubelet never gives such a container (`pkg/kubelet/cm/helpers_linux.go`: no CPU limit, no
/// quota) — on CPUs of the batch pool. Such a container keeps its cpuset and quota at the
/// restart's Synchronize, so that it never spreads onto reserved CPUs while the pod watch
/// has not said yet whether it is batch; the suppress loop then sends the current ones.
pub(super) fn looks_batch(
    view: &crate::nri::view::ContainerView,
    target: &ContainerResources,
    batch_pool: &CpuSet,
) -> bool {
    let cur = &view.current;
    !target.exclusive
        && view.qos != topolet_core::kube::qos::QosClass::Guaranteed
        && cur.cpu_shares == Some(2)
        && cur.cpu_quota.is_some_and(|q| q > 0)
        && !batch_pool.is_empty()
        && cur
            .cpuset_cpus
            .as_ref()
            .is_some_and(|c| !c.is_empty() && c.is_subset(batch_pool))
}

/// The target of a container [`looks_batch`] found: what it runs with now.
pub(super) fn keep_batch_values(
    view: &crate::nri::view::ContainerView,
    target: &mut ContainerResources,
) {
    if let Some(cpus) = &view.current.cpuset_cpus {
        target.cpuset.clone_from(cpus);
    }
    if let Some(q) = view.current.cpu_quota {
        target.cpu_quota = q;
    }
}

/// Each batch container's grant under the current budget (none yet: the minimum).
fn grants(node: &PluginState) -> BTreeMap<String, u64> {
    let ids: Vec<&String> = node.batch.containers.keys().collect();
    let limits: Vec<u64> = node
        .batch
        .containers
        .values()
        .map(|e| e.limit_millis)
        .collect();
    let budget = node.batch.budget.unwrap_or(0);
    ids.into_iter()
        .cloned()
        .zip(distribute(budget, &limits))
        .map(|(id, g)| {
            let floor = node.batch.carried.get(&id).copied().unwrap_or(0);
            (id, g.max(floor))
        })
        .collect()
}

/// Retargets every batch container but `skip` to the pool and its grant (an empty pool: the
/// cpuset is left as it is, the container being held); queues those that changed and returns
/// how many.
fn rebalance(node: &mut PluginState, skip: Option<&str>) -> usize {
    let grants = grants(node);
    let cpus = node.placement.batch_pool();
    let mut changed = 0;
    for (id, granted) in grants {
        if let Some(e) = node.batch.containers.get_mut(&id) {
            e.granted_millis = granted;
        }
        if Some(id.as_str()) == skip {
            continue;
        }
        let Some(r) = node.records.get_mut(&id) else {
            continue;
        };
        if !r.lifecycle().is_live() {
            continue;
        }
        let quota = quota_us(granted);
        if r.retarget(|t| {
            if !cpus.is_empty() {
                t.cpuset.clone_from(&cpus);
            }
            t.cpu_quota = quota;
            t.cpu_period = PERIOD_US;
        }) {
            node.records.queue(&id);
            changed += 1;
        }
    }
    changed
}
