//! `ContainerRecords`: everything topolet knows about each container it manages, in one record
//! per container, and the rules of when a container's target may be sent to the runtime.
//!
//! The model is nri-plugins' `pkg/resmgr/cache`: the handlers turn an NRI event into a core
//! decision and hand the result to the cache (`insert`, `Record::retarget`, `start`, `stop`,
//! `remove`); the cache says what the reply carries (`reply_ids`) and what an unsolicited
//! update may carry (`take_due`). A record holds:
//! - the container as NRI described it (`view`) and which admission source decided it;
//! - its lifecycle ([`Lifecycle`]: created, running, stopped);
//! - its target (what topolet wants the runtime to apply: cpuset, mems, the other cgroup values)
//!   and a generation bumped on every change of the target;
//! - the generation last sent and the one the runtime acknowledged, and the cpuset the runtime
//!   last applied (what an exclusive-CPU breach is measured from: `topolet_core::placement::breach`);
//! - whether it must be sent its target again once it runs (an update that reached only the
//!   stored spec while its task was starting).
//!
//! Beside the records: the queue of containers waiting for their target (`crate::nri::outbox`
//! decides when an unsolicited request may go), the unsolicited request in flight, the running
//! containers to check against their cpusets after a Synchronize (`verify`), and the containers
//! topolet left alone because someone else set their cpuset.
//!
//! Ordering rules, all enforced here:
//! - **Nothing before Synchronize.** Every NRI connection starts unsynchronized
//!   ([`ContainerRecords::connection_configured`]); no unsolicited request is taken until that
//!   connection's Synchronize ([`ContainerRecords::synchronized`]), and the results of a request
//!   sent on an earlier connection are ignored.
//! - **A stale target never overtakes a newer one.** One unsolicited request is in flight at a
//!   time; its containers are held out of replies until it completes, and a container whose
//!   target changed meanwhile is queued again, so its newest target is what arrives last.
//! - **Only created or running containers are sent updates.** A stopped container leaves the
//!   update set at StopContainer.
//!
//! A pod index keeps the per-event queries (a pod's containers, a restarted container's
//! successor among them) independent of the number of live containers.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::nri::outbox::{Backoff, Outbox, Rescheduled};
use crate::nri::view::ContainerView;
use topolet_core::kube::container_key::{self, ContainerKey};
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::placement::admission_input::{Comparison, Fallback, Source};
use topolet_core::placement::breach::Holding;
use topolet_core::placement::ContainerResources;

/// Which source decided a container's admission (`topolet_core::placement::admission_input`).
#[derive(Debug, Clone)]
pub struct Decided {
    pub source: Source,
    pub fallback: Option<Fallback>,
    /// API decisions: the inversion of the same container next to the API's facts.
    pub comparison: Option<Comparison>,
}

impl Decided {
    /// A container found at Synchronize: its cgroup values decided.
    pub fn synchronize() -> Decided {
        Decided {
            source: Source::Inversion,
            fallback: Some(Fallback::Synchronize),
            comparison: None,
        }
    }
}

/// Where a container is in its life, as NRI told us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// Created (CreateContainer, or listed created at Synchronize), not seen running yet: an
    /// update may reach only its stored spec while its task starts from the old one.
    Created,
    /// Seen running (PostStartContainer, or listed running at Synchronize).
    Running,
    /// Seen stopped (StopContainer, or listed exited at Synchronize): no longer sent updates,
    /// no longer counted in its pod's cgroup values.
    Stopped,
}

impl Lifecycle {
    /// Created or running: the runtime can apply an update to it.
    pub fn is_live(self) -> bool {
        self != Lifecycle::Stopped
    }
}

/// One managed container.
#[derive(Debug, Clone)]
pub struct Record {
    view: ContainerView,
    decided: Decided,
    target: ContainerResources,
    lifecycle: Lifecycle,
    generation: u64,
    sent: Option<u64>,
    acked: Option<u64>,
    /// The cpuset the runtime last applied (`None`: none set, any CPU).
    applied: Option<CpuSet>,
    resend_on_start: bool,
    /// The container's init process, once known (PostStartContainer, or running at
    /// Synchronize): what the drift check reads.
    pid: Option<u32>,
}

impl Record {
    pub fn new(
        view: ContainerView,
        decided: Decided,
        target: ContainerResources,
        lifecycle: Lifecycle,
    ) -> Record {
        Record {
            applied: view.current.cpuset_cpus.clone(),
            view,
            decided,
            target,
            lifecycle,
            generation: 1,
            sent: None,
            acked: None,
            resend_on_start: false,
            pid: None,
        }
    }

    /// The record of a container being created, whose adjustment sets its target's cpuset:
    /// the runtime applies it before the container exists.
    pub fn created(view: ContainerView, decided: Decided, target: ContainerResources) -> Record {
        let mut r = Record::new(view, decided, target, Lifecycle::Created);
        r.applied = Some(r.target.cpuset.clone());
        r
    }

    /// The cpuset the runtime last applied: the last acknowledged update (a reply, an answered
    /// request, the creation's adjustment), what Synchronize reported, or what the kernel was
    /// seen to enforce. `None`: no cpuset, the container may run on any CPU.
    pub fn applied(&self) -> Option<&CpuSet> {
        self.applied.as_ref()
    }

    /// The container's init process, once known.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Records the container's init process (0: unknown).
    pub fn set_pid(&mut self, pid: u32) {
        self.pid = (pid > 0).then_some(pid);
    }

    /// The container as NRI described it; `view.estimate` is the inversion's estimate whichever
    /// source decided.
    pub fn view(&self) -> &ContainerView {
        &self.view
    }

    pub fn decided(&self) -> &Decided {
        &self.decided
    }

    /// What topolet wants the runtime to apply.
    pub fn target(&self) -> &ContainerResources {
        &self.target
    }

    pub fn lifecycle(&self) -> Lifecycle {
        self.lifecycle
    }

    /// Bumped on every change of the target.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The generation last handed to the runtime (a reply or an unsolicited request).
    pub fn sent(&self) -> Option<u64> {
        self.sent
    }

    /// The generation the runtime confirmed (a reply it applied, a request it answered).
    pub fn acked(&self) -> Option<u64> {
        self.acked
    }

    /// Changes the target with `f`; the generation moves when the target did. Returns whether
    /// it changed.
    pub fn retarget(&mut self, f: impl FnOnce(&mut ContainerResources)) -> bool {
        let before = self.target.clone();
        f(&mut self.target);
        let changed = self.target != before;
        if changed {
            self.generation += 1;
        }
        changed
    }

    /// The view after an in-place resize (the same container: same key).
    pub fn set_view(&mut self, view: ContainerView) {
        debug_assert_eq!(view.key, self.view.key);
        self.view = view;
    }
}

/// One running container the drift check compares with what the kernel enforces
/// (`crate::host::proc_affinity`): its init process may use no CPU outside `cpus`, and exactly the
/// memory nodes `mems` when its target names some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftProbe {
    pub id: String,
    pub pid: u32,
    /// The record's generation when the probe was taken.
    pub generation: u64,
    pub cpus: topolet_core::machine::cpuset::CpuSet,
    pub mems: Option<topolet_core::machine::cpuset::CpuSet>,
}

/// An unsolicited request taken by [`ContainerRecords::take_due`]: the containers it carries
/// and the generation of each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The NRI connection it was taken on.
    pub connection: u64,
    pub entries: Vec<(String, u64)>,
    /// The cpuset each entry carries, in the order of `entries` (what the runtime runs the
    /// container on once it answers, even if a newer target came meanwhile).
    pub cpus: Vec<CpuSet>,
}

impl Batch {
    pub fn ids(&self) -> Vec<String> {
        self.entries.iter().map(|(id, _)| id.clone()).collect()
    }
}

/// How an unsolicited request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchResult {
    /// The runtime answered; `failed`: the containers whose update it reported failed (they
    /// may have exited; if they still live, they are sent again after their back-off).
    Answered { failed: Vec<String> },
    /// It did not reach the runtime (an error, a deadline elapsed).
    Failed,
}

impl BatchResult {
    /// The runtime answered and applied every update.
    pub fn applied() -> BatchResult {
        BatchResult::Answered { failed: Vec::new() }
    }
}

/// What [`ContainerRecords::batch_done`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Containers whose target changed while the request was in flight: queued again.
    pub superseded: Vec<String>,
    /// Live containers whose update did not reach the runtime: queued again, each with its
    /// attempt count and back-off (`crate::nri::outbox`; never given up).
    pub retried: Vec<Rescheduled>,
    /// The request belonged to an earlier connection: its result was ignored.
    pub stale_connection: bool,
}

/// The container ids of one pod, sorted: a handful each, so a sorted `Vec` (one
/// allocation) rather than a tree (a node of eleven slots per set, ten thousand sets on a
/// 10,000-container node).
#[derive(Debug, Default, Clone)]
struct IdSet(Vec<String>);

impl IdSet {
    fn of(id: &str) -> IdSet {
        IdSet(vec![id.to_string()])
    }

    fn insert(&mut self, id: &str) {
        if let Err(at) = self.0.binary_search_by(|o| o.as_str().cmp(id)) {
            self.0.insert(at, id.to_string());
        }
    }

    fn remove(&mut self, id: &str) {
        if let Ok(at) = self.0.binary_search_by(|o| o.as_str().cmp(id)) {
            self.0.remove(at);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn iter(&self) -> std::slice::Iter<'_, String> {
        self.0.iter()
    }

    fn into_vec(self) -> Vec<String> {
        self.0
    }
}

/// The records and the send rules (module doc).
#[derive(Debug)]
pub struct ContainerRecords {
    records: HashMap<String, Record>,
    by_pod: HashMap<String, IdSet>,
    outbox: Outbox,
    in_flight: Option<Batch>,
    connection: u64,
    synced: bool,
    verify: Vec<(String, u32)>,
    left_alone: BTreeSet<ContainerKey>,
}

impl ContainerRecords {
    pub fn new(now: Instant) -> ContainerRecords {
        ContainerRecords {
            records: HashMap::new(),
            by_pod: HashMap::new(),
            outbox: Outbox::new(now),
            in_flight: None,
            connection: 0,
            synced: false,
            verify: Vec::new(),
            left_alone: BTreeSet::new(),
        }
    }

    // --- records ---------------------------------------------------------------------------

    pub fn get(&self, id: &str) -> Option<&Record> {
        self.records.get(id)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Record> {
        self.records.get_mut(id)
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Record)> {
        self.records.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut Record)> {
        self.records.iter_mut()
    }

    /// Adds (or replaces) the record of container `id`. A replaced record keeps counting its
    /// generation, so that a request in flight with the old one is recognised as stale.
    pub fn insert(&mut self, id: &str, mut record: Record) {
        if let Some(old) = self.records.get(id) {
            record.generation = old.generation + u64::from(old.target != record.target);
            record.sent = old.sent;
            record.acked = old.acked;
            record.resend_on_start = old.resend_on_start;
            if old.view.key != record.view.key {
                let old_key = old.view.key.clone();
                self.unindex(id, &old_key);
            }
        }
        self.index(id, &record.view.key);
        self.records.insert(id.to_string(), record);
    }

    /// Forgets container `id` (RemoveContainer).
    pub fn remove(&mut self, id: &str) -> Option<Record> {
        let record = self.records.remove(id)?;
        self.unindex(id, &record.view.key);
        self.outbox.remove(id);
        Some(record)
    }

    /// Forgets every container of pod `uid` (RemovePodSandbox).
    pub fn remove_pod(&mut self, uid: &str) {
        for id in self
            .by_pod
            .remove(uid)
            .map(IdSet::into_vec)
            .unwrap_or_default()
        {
            self.records.remove(&id);
            self.outbox.remove(&id);
        }
        let gone: Vec<ContainerKey> = container_key::keys_of_pod(&self.left_alone, uid)
            .cloned()
            .collect();
        for k in &gone {
            self.left_alone.remove(k);
        }
    }

    /// The ids of pod `uid`'s containers, sorted.
    pub fn pod_ids(&self, uid: &str) -> impl Iterator<Item = &String> {
        self.by_pod.get(uid).into_iter().flat_map(IdSet::iter)
    }

    /// The records of pod `uid`'s containers, by id.
    pub fn pod(&self, uid: &str) -> impl Iterator<Item = (&String, &Record)> {
        self.pod_ids(uid)
            .filter_map(|id| self.records.get(id).map(|r| (id, r)))
    }

    /// True when another container than `id` has `id`'s key (a restarted container: same pod
    /// and name, new id). Asked of the pod's own few ids: a key index would cost an entry per
    /// container for a question asked once per StopContainer.
    pub fn has_successor(&self, id: &str) -> bool {
        let Some(r) = self.records.get(id) else {
            return false;
        };
        self.pod(&r.view.key.pod_uid)
            .any(|(o, other)| o != id && other.view.key == r.view.key)
    }

    fn index(&mut self, id: &str, key: &ContainerKey) {
        match self.by_pod.get_mut(&key.pod_uid) {
            Some(ids) => ids.insert(id),
            None => {
                self.by_pod.insert(key.pod_uid.clone(), IdSet::of(id));
            }
        }
    }

    fn unindex(&mut self, id: &str, key: &ContainerKey) {
        if let Some(ids) = self.by_pod.get_mut(&key.pod_uid) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_pod.remove(&key.pod_uid);
            }
        }
    }

    // --- lifecycle -------------------------------------------------------------------------

    /// Container `id` runs (PostStartContainer). Returns true when it must be sent its target
    /// again (it was sent one while it was only created): it is then queued.
    pub fn start(&mut self, id: &str) -> bool {
        let Some(r) = self.records.get_mut(id) else {
            return false;
        };
        if r.lifecycle == Lifecycle::Created {
            r.lifecycle = Lifecycle::Running;
        }
        if std::mem::take(&mut r.resend_on_start) && r.lifecycle.is_live() {
            self.outbox.queue(id);
            return true;
        }
        false
    }

    /// Container `id` stopped (StopContainer): it leaves the update set now.
    pub fn stop(&mut self, id: &str) {
        if let Some(r) = self.records.get_mut(id) {
            r.lifecycle = Lifecycle::Stopped;
            r.resend_on_start = false;
        }
        self.outbox.remove(id);
    }

    /// Marks `id` to be sent its target again once it runs (it was listed created at
    /// Synchronize: its task may start from a spec older than the one reported).
    pub fn resend_on_start(&mut self, id: &str) {
        if let Some(r) = self.records.get_mut(id) {
            r.resend_on_start = r.lifecycle == Lifecycle::Created;
        }
    }

    /// Whether `id` is to be sent its target again once it runs.
    pub fn will_resend_on_start(&self, id: &str) -> bool {
        self.records.get(id).is_some_and(|r| r.resend_on_start)
    }

    // --- connection ------------------------------------------------------------------------

    /// A new NRI connection was configured: nothing is sent unsolicited until its Synchronize,
    /// and the request in flight (if any) belongs to the old connection.
    pub fn connection_configured(&mut self, quiet: Duration) {
        self.connection += 1;
        self.synced = false;
        self.in_flight = None;
        self.outbox.set_quiet(quiet);
    }

    /// The back-off of failed unsolicited sends (tests shorten it).
    pub fn set_backoff(&mut self, backoff: Backoff) {
        self.outbox.set_backoff(backoff);
    }

    /// The connection's Synchronize: `records` (the runtime's view, decided again) replace
    /// every record; the Synchronize reply carries every update, so nothing queued before
    /// still applies. Returns the previous records (to be freed off the event path).
    pub fn synchronized(
        &mut self,
        records: impl ExactSizeIterator<Item = (String, Record)>,
    ) -> HashMap<String, Record> {
        self.outbox.clear();
        self.in_flight = None;
        self.synced = true;
        self.by_pod.clear();
        let old = std::mem::replace(&mut self.records, HashMap::with_capacity(records.len()));
        for (id, mut r) in records {
            if let Some(o) = old.get(&id) {
                r.generation = o.generation + 1;
            }
            self.index(&id, &r.view.key);
            self.records.insert(id, r);
        }
        old
    }

    /// Whether this connection's Synchronize happened.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Records that the Synchronize reply carried the current target of `ids`.
    pub fn sent_in_sync<'a>(&mut self, ids: impl Iterator<Item = &'a str>) {
        for id in ids {
            if let Some(r) = self.records.get_mut(id) {
                r.sent = Some(r.generation);
                r.acked = Some(r.generation);
                r.applied = Some(r.target.cpuset.clone());
            }
        }
    }

    /// Records that the reply to an event about `id` carried its own current target (an
    /// in-place resize): applied before the runtime answers.
    pub fn applied_in_reply(&mut self, id: &str) {
        if let Some(r) = self.records.get_mut(id) {
            r.sent = Some(r.generation);
            r.acked = Some(r.generation);
            r.applied = Some(r.target.cpuset.clone());
        }
    }

    /// `id`'s process was seen allowed to run on `cpus` (the post-Synchronize check, the drift
    /// check): what the runtime applied, whatever it acknowledged.
    pub fn seen_running_on(&mut self, id: &str, cpus: &CpuSet) {
        if let Some(r) = self.records.get_mut(id) {
            r.applied = Some(cpus.clone());
        }
    }

    // --- updates ---------------------------------------------------------------------------

    /// The runtime sent an event at `now` (the lull starts again).
    pub fn event(&mut self, now: Instant) {
        self.outbox.event(now);
    }

    /// `id` must be sent its current target.
    pub fn queue(&mut self, id: &str) {
        if self.records.get(id).is_some_and(|r| r.lifecycle.is_live()) {
            self.outbox.queue(id);
        }
    }

    /// The containers the reply to an event about `skip` carries: every queued live container
    /// but `skip` and those in the unsolicited request in flight (they wait for it), sorted.
    /// The runtime applies a reply's updates before it answers the event: they count as
    /// acknowledged. A container not yet running is marked to be sent again once it runs.
    pub fn reply_ids(&mut self, skip: &str) -> Vec<String> {
        let mut held: Vec<&str> = vec![skip];
        if let Some(b) = &self.in_flight {
            held.extend(b.entries.iter().map(|(id, _)| id.as_str()));
        }
        let ids = self.outbox.take_except_all(&held);
        self.deliverable(ids, true)
    }

    /// The unsolicited request due now, if the runtime has been quiet long enough, this
    /// connection is synchronized and no other request is in flight. Its containers count as
    /// sent; call [`ContainerRecords::batch_done`] with its result.
    pub fn take_due(&mut self, now: Instant) -> Option<Batch> {
        if !self.synced || self.in_flight.is_some() || !self.outbox.due(now) {
            return None;
        }
        let ids = self.outbox.take(now);
        let ids = self.deliverable(ids, false);
        if ids.is_empty() {
            return None;
        }
        let (entries, cpus) = ids
            .into_iter()
            .filter_map(|id| {
                let r = self.records.get(&id)?;
                let (g, cpus) = (r.generation, r.target.cpuset.clone());
                Some(((id, g), cpus))
            })
            .unzip();
        let batch = Batch {
            connection: self.connection,
            entries,
            cpus,
        };
        self.in_flight = Some(batch.clone());
        Some(batch)
    }

    /// The unsolicited request `batch` ended with `result` at `now`. Containers it did not
    /// deliver are queued again with their back-off (never given up: `crate::nri::outbox`).
    pub fn batch_done(&mut self, batch: &Batch, result: BatchResult, now: Instant) -> BatchOutcome {
        let mut out = BatchOutcome::default();
        if batch.connection != self.connection || self.in_flight.as_ref() != Some(batch) {
            out.stale_connection = true;
            return out;
        }
        self.in_flight = None;
        let (all_failed, failed): (bool, HashSet<String>) = match result {
            BatchResult::Answered { failed } => (false, failed.into_iter().collect()),
            BatchResult::Failed => (true, HashSet::new()),
        };
        let mut retry = Vec::new();
        let mut delivered = Vec::new();
        for (i, (id, g)) in batch.entries.iter().enumerate() {
            let Some(r) = self.records.get_mut(id) else {
                continue;
            };
            if all_failed || failed.contains(id) {
                // A request that reached no answer (a deadline elapsed) may still be applied
                // late: until a later update is acknowledged, the container may run on either.
                if let (true, Some(a), Some(cpus)) =
                    (all_failed, r.applied.as_mut(), batch.cpus.get(i))
                {
                    a.extend_from(cpus);
                }
                if r.lifecycle.is_live() {
                    retry.push(id.clone());
                }
                continue;
            }
            delivered.push(id.clone());
            if let Some(cpus) = batch.cpus.get(i) {
                r.applied = Some(cpus.clone());
            }
            if r.generation == *g {
                r.acked = Some(*g);
            } else if r.lifecycle.is_live() {
                self.outbox.queue(id);
                out.superseded.push(id.clone());
            }
        }
        self.outbox.sent(&delivered);
        out.retried = self.outbox.failed(&retry, now);
        out
    }

    /// A request taken by [`ContainerRecords::take_due`] could not even be queued at `now`: its
    /// containers are queued again with their back-off.
    pub fn batch_not_queued(&mut self, batch: &Batch, now: Instant) -> Vec<Rescheduled> {
        if self.in_flight.as_ref() == Some(batch) {
            self.in_flight = None;
        }
        self.outbox.failed(&batch.ids(), now)
    }

    /// When [`ContainerRecords::take_due`] will next have a request to take, as things stand:
    /// `None` while nothing is queued, this connection is not synchronized, or a request is in
    /// flight (its end, like an event, changes the answer).
    pub fn next_send(&self) -> Option<Instant> {
        if !self.synced || self.in_flight.is_some() {
            return None;
        }
        self.outbox.next_due()
    }

    /// Whether an unsolicited request is in flight.
    pub fn in_flight(&self) -> Option<&Batch> {
        self.in_flight.as_ref()
    }

    /// Whether anything is waiting to be sent.
    pub fn has_pending(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Keeps the live, known ids, marks them sent (and acknowledged if `reply`), and the created
    /// ones to be sent again once they run.
    fn deliverable(&mut self, ids: Vec<String>, reply: bool) -> Vec<String> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(r) = self.records.get_mut(&id) else {
                continue;
            };
            if !r.lifecycle.is_live() {
                continue;
            }
            r.sent = Some(r.generation);
            if reply {
                r.acked = Some(r.generation);
                r.applied = Some(r.target.cpuset.clone());
            }
            if r.lifecycle == Lifecycle::Created {
                r.resend_on_start = true;
            }
            out.push(id);
        }
        out
    }

    /// Every live container as `topolet_core::placement::breach` sees it: what the runtime last applied and what
    /// its target holds exclusively.
    pub fn holdings(&self) -> Vec<Holding<'_>> {
        self.records
            .iter()
            .filter(|(_, r)| r.lifecycle.is_live())
            .map(|(id, r)| Holding {
                id: id.as_str(),
                applied: r.applied.as_ref(),
                exclusive: r.target.exclusive.then_some(&r.target.cpuset),
            })
            .collect()
    }

    // --- drift ---------------------------------------------------------------------------

    /// What the drift check should compare now: every running container with a known init
    /// process and its current target — only in a lull (the runtime quiet for `lull`, this
    /// connection synchronized, nothing queued or in flight), when every target has reached the
    /// runtime and any difference is drift, not an update on its way.
    pub fn drift_probes(&self, now: Instant, lull: Duration) -> Vec<DriftProbe> {
        if !self.synced
            || self.in_flight.is_some()
            || !self.outbox.is_empty()
            || !self.outbox.quiet_for(now, lull)
        {
            return Vec::new();
        }
        let mut out: Vec<DriftProbe> = self
            .records
            .iter()
            .filter(|(_, r)| r.lifecycle == Lifecycle::Running && !r.resend_on_start)
            .filter_map(|(id, r)| {
                Some(DriftProbe {
                    id: id.clone(),
                    pid: r.pid?,
                    generation: r.generation,
                    cpus: r.target.cpuset.clone(),
                    mems: (!r.target.mems.is_empty()).then(|| r.target.mems.ids().collect()),
                })
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// From when [`ContainerRecords::drift_probes`] will have something to compare, as things
    /// stand: the end of the `lull` after the last event, if this connection is synchronized,
    /// nothing is queued or in flight and some running container has a known process; `None`
    /// otherwise (an event, a send or its end changes the answer).
    pub fn drift_ready_at(&self, lull: Duration) -> Option<Instant> {
        let probed = self
            .records
            .values()
            .any(|r| r.lifecycle == Lifecycle::Running && !r.resend_on_start && r.pid.is_some());
        (self.synced && self.in_flight.is_none() && self.outbox.is_empty() && probed)
            .then(|| self.outbox.last_event() + lull)
    }

    /// The drift check found `probe`'s container running outside its target: it is queued to be
    /// sent its target again, unless its target changed since the probe was taken (that change
    /// is on its way already) or it is no longer running. True when queued.
    pub fn drifted(&mut self, probe: &DriftProbe) -> bool {
        let current = self
            .records
            .get(&probe.id)
            .is_some_and(|r| r.generation == probe.generation && r.lifecycle == Lifecycle::Running);
        if current {
            self.outbox.queue(&probe.id);
        }
        current
    }

    // --- verification and left-alone -------------------------------------------------------

    /// Running containers (id, init pid) to check against their cpusets
    /// (`crate::host::proc_affinity`), taken once.
    pub fn take_verify(&mut self) -> Vec<(String, u32)> {
        std::mem::take(&mut self.verify)
    }

    /// Whether running containers wait to be checked ([`ContainerRecords::take_verify`]).
    pub fn has_verify(&self) -> bool {
        !self.verify.is_empty()
    }

    pub fn set_verify(&mut self, checks: Vec<(String, u32)>) {
        self.verify = checks;
    }

    /// Kubernetes containers whose cpuset another party set at creation.
    pub fn left_alone(&self) -> &BTreeSet<ContainerKey> {
        &self.left_alone
    }

    pub fn left_alone_mut(&mut self) -> &mut BTreeSet<ContainerKey> {
        &mut self.left_alone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nri::outbox::{Backoff, Rescheduled, QUIET};
    use topolet_core::kube::qos::QosClass;
    use topolet_core::machine::cpuset::CpuSet;

    fn view(uid: &str, name: &str, id: &str) -> ContainerView {
        ContainerView {
            key: ContainerKey::new(uid, name),
            id: id.to_string(),
            pod_ref: format!("default/{uid}"),
            qos: QosClass::BestEffort,
            cgroup_parent: String::new(),
            cgroups_path: String::new(),
            estimate: topolet_core::placement::nri_container::NriContainer {
                namespace: "default".into(),
                name: uid.into(),
                uid: uid.into(),
                class: QosClass::BestEffort,
                role: None,
                container: topolet_core::kube::pod::Container::default(),
            },
            current: Default::default(),
        }
    }

    fn target(cpus: &str) -> ContainerResources {
        ContainerResources {
            exclusive: false,
            cpuset: CpuSet::parse(cpus).expect("cpus"),
            mems: Default::default(),
            memory_pinned: false,
            numa_affinity: None,
            cpu_shares: 2,
            cpu_quota: 0,
            cpu_period: 100_000,
            memory_limit: None,
            oom_score_adj: 1000,
            pids_limit: None,
            devices: Vec::new(),
            observed_devices: Vec::new(),
            sched_idle: false,
            reason: String::new(),
        }
    }

    fn record(uid: &str, name: &str, id: &str, lifecycle: Lifecycle) -> Record {
        Record::new(
            view(uid, name, id),
            Decided::synchronize(),
            target("1-3"),
            lifecycle,
        )
    }

    /// A synchronized cache with running containers `a`, `b` (pod p) and `c` (pod q).
    fn cache(t0: Instant) -> ContainerRecords {
        let mut c = ContainerRecords::new(t0);
        c.connection_configured(QUIET);
        c.synchronized(
            vec![
                ("a".into(), record("p", "x", "a", Lifecycle::Running)),
                ("b".into(), record("p", "y", "b", Lifecycle::Running)),
                ("c".into(), record("q", "x", "c", Lifecycle::Running)),
            ]
            .into_iter(),
        );
        c
    }

    fn move_to(c: &mut ContainerRecords, id: &str, cpus: &str) {
        let set = CpuSet::parse(cpus).expect("cpus");
        assert!(c.get_mut(id).expect("record").retarget(|t| t.cpuset = set));
        c.queue(id);
    }

    #[test]
    fn the_generation_moves_only_when_the_target_does() {
        let mut c = cache(Instant::now());
        let r = c.get_mut("a").expect("a");
        let g = r.generation();
        assert!(!r.retarget(|t| t.cpuset = CpuSet::parse("1-3").expect("cpus")));
        assert_eq!(r.generation(), g);
        assert!(r.retarget(|t| t.cpuset = CpuSet::parse("2-3").expect("cpus")));
        assert_eq!(r.generation(), g + 1);
    }

    #[test]
    fn nothing_goes_unsolicited_before_the_connection_s_synchronize() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        move_to(&mut c, "a", "2-3");
        // The connection drops and a new one is configured: the queued update waits for its
        // Synchronize, however long the lull.
        c.connection_configured(QUIET);
        assert!(c.take_due(t0 + QUIET * 100).is_none());
        assert!(c.has_pending());
        // Its Synchronize decides every container afresh and carries the updates itself.
        let rec = c.get("a").cloned().expect("a");
        c.synchronized(std::iter::once(("a".to_string(), rec)));
        assert!(!c.has_pending());
        move_to(&mut c, "a", "3");
        let b = c.take_due(t0 + QUIET * 100).expect("due after synchronize");
        assert_eq!(b.ids(), vec!["a".to_string()]);
    }

    #[test]
    fn a_request_from_an_earlier_connection_is_ignored_when_it_completes() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        move_to(&mut c, "a", "2-3");
        let b = c.take_due(t0 + QUIET).expect("due");
        c.connection_configured(QUIET);
        let out = c.batch_done(&b, BatchResult::applied(), t0);
        assert!(out.stale_connection);
        assert_eq!(
            c.get("a").expect("a").acked(),
            None,
            "the old request's result is ignored"
        );
        assert!(c.in_flight().is_none());
    }

    #[test]
    fn a_stale_target_never_overtakes_a_newer_one() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        move_to(&mut c, "a", "2-3");
        move_to(&mut c, "b", "2-3");
        let batch = c.take_due(t0 + QUIET).expect("due");
        let g_a = c.get("a").expect("a").generation();
        assert_eq!(batch.entries, vec![("a".into(), g_a), ("b".into(), g_a)]);
        // While the request is in flight, "a" gets a newer target: the next reply does not
        // carry it (it could be applied before the request in flight, which would then
        // overwrite it with the older target) ...
        move_to(&mut c, "a", "3");
        assert!(c.reply_ids("c").is_empty());
        // ... nor does a second unsolicited request go.
        assert!(c.take_due(t0 + QUIET * 10).is_none());
        // When the request completes, "a" is queued again with its newest target; "b" is done.
        let out = c.batch_done(&batch, BatchResult::applied(), t0);
        assert_eq!(out.superseded, vec!["a".to_string()]);
        assert_eq!(c.get("b").expect("b").acked(), Some(g_a));
        assert_eq!(
            c.get("a").expect("a").acked(),
            None,
            "its older target is not acknowledged"
        );
        assert_eq!(c.reply_ids("c"), vec!["a".to_string()]);
        let a = c.get("a").expect("a");
        assert_eq!(a.acked(), Some(a.generation()));
    }

    #[test]
    fn a_failed_request_is_retried_with_back_off_for_ever() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        move_to(&mut c, "a", "2-3");
        let mut now = t0 + QUIET;
        for attempt in 1..=12u32 {
            let b = c.take_due(now).expect("due again");
            let out = c.batch_done(&b, BatchResult::Failed, now);
            let delay = Backoff::DEFAULT.delay(attempt);
            assert_eq!(
                out.retried,
                vec![Rescheduled {
                    id: "a".into(),
                    attempt,
                    delay
                }]
            );
            assert!(c.has_pending(), "attempt {attempt}: still queued");
            assert!(c.take_due(now + delay - Duration::from_millis(1)).is_none());
            now += delay;
        }
        // The runtime takes it at last: acknowledged, and nothing pending.
        let b = c.take_due(now).expect("due");
        let out = c.batch_done(&b, BatchResult::applied(), now);
        assert!(out.retried.is_empty());
        let a = c.get("a").expect("a");
        assert_eq!(a.acked(), Some(a.generation()));
        assert_eq!(a.applied(), Some(&CpuSet::parse("2-3").expect("cpus")));
        assert!(!c.has_pending());
    }

    #[test]
    fn a_reply_carries_a_container_in_back_off_at_once() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        move_to(&mut c, "a", "2-3");
        let b = c.take_due(t0 + QUIET).expect("due");
        c.batch_done(&b, BatchResult::Failed, t0 + QUIET);
        let b = c.take_due(t0 + QUIET * 10).expect("due");
        c.batch_done(&b, BatchResult::Failed, t0 + QUIET * 10);
        assert!(c.take_due(t0 + QUIET * 11).is_none(), "backing off");
        // A newer target meanwhile wins: the reply carries it, at once.
        move_to(&mut c, "a", "3");
        assert_eq!(c.reply_ids("c"), vec!["a".to_string()]);
        let a = c.get("a").expect("a");
        assert_eq!(a.acked(), Some(a.generation()));
        assert_eq!(a.applied(), Some(&CpuSet::parse("3").expect("cpus")));
    }

    #[test]
    fn containers_the_runtime_reports_failed_are_retried_the_others_applied() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        c.sent_in_sync(["a", "b", "c"].into_iter());
        move_to(&mut c, "a", "2-3");
        move_to(&mut c, "b", "2-3");
        move_to(&mut c, "c", "2-3");
        let batch = c.take_due(t0 + QUIET).expect("due");
        // "c" exited meanwhile (stopped): not retried even though the runtime failed it.
        c.stop("c");
        let out = c.batch_done(
            &batch,
            BatchResult::Answered {
                failed: vec!["b".into(), "c".into()],
            },
            t0 + QUIET,
        );
        assert_eq!(
            out.retried
                .iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        let (a, b) = (c.get("a").expect("a"), c.get("b").expect("b"));
        assert_eq!(a.acked(), Some(a.generation()));
        assert_ne!(
            b.acked(),
            Some(b.generation()),
            "its new target is not acknowledged"
        );
        assert_eq!(b.applied(), Some(&CpuSet::parse("1-3").expect("cpus")));
        assert!(c.has_pending());
    }

    #[test]
    fn what_the_runtime_applied_follows_replies_requests_and_observations() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        let cpus = |s: &str| CpuSet::parse(s).expect("cpus");
        // Synchronize: what the runtime reported (nothing in these views: any CPU).
        assert_eq!(c.get("a").expect("a").applied(), None);
        c.sent_in_sync(["a", "b", "c"].into_iter());
        assert_eq!(c.get("a").expect("a").applied(), Some(&cpus("1-3")));
        // Created: the adjustment's cpuset.
        let r = Record::created(view("r", "x", "d"), Decided::synchronize(), target("2"));
        c.insert("d", r);
        assert_eq!(c.get("d").expect("d").applied(), Some(&cpus("2")));
        // Sent unsolicited: unchanged until the runtime answers; then the batch's cpuset, even
        // when a newer target came meanwhile.
        move_to(&mut c, "a", "2-3");
        let batch = c.take_due(t0 + QUIET).expect("due");
        assert_eq!(batch.cpus, vec![cpus("2-3")]);
        assert_eq!(c.get("a").expect("a").applied(), Some(&cpus("1-3")));
        move_to(&mut c, "a", "3");
        c.batch_done(&batch, BatchResult::applied(), t0 + QUIET);
        assert_eq!(c.get("a").expect("a").applied(), Some(&cpus("2-3")));
        // A request that failed may still be applied late: either cpuset, until one is acked.
        move_to(&mut c, "b", "2");
        let batch = c.take_due(t0 + QUIET).expect("due");
        c.batch_done(&batch, BatchResult::Failed, t0 + QUIET);
        assert_eq!(c.get("b").expect("b").applied(), Some(&cpus("1-3")));
        move_to(&mut c, "b", "3");
        let batch = c.take_due(t0 + QUIET * 100).expect("due");
        c.batch_done(&batch, BatchResult::Failed, t0 + QUIET * 100);
        assert_eq!(
            c.get("b").expect("b").applied(),
            Some(&cpus("1-3")),
            "1-3 ∪ 3"
        );
        assert!(c.reply_ids("x").contains(&"b".to_string()));
        assert_eq!(c.get("b").expect("b").applied(), Some(&cpus("3")));
        // A resize's own update in its reply.
        c.applied_in_reply("a");
        assert_eq!(c.get("a").expect("a").applied(), Some(&cpus("3")));
        // Seen by the drift check.
        c.seen_running_on("a", &cpus("1-3"));
        assert_eq!(c.get("a").expect("a").applied(), Some(&cpus("1-3")));
    }

    #[test]
    fn holdings_are_the_live_containers_with_their_exclusive_cpus() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        c.sent_in_sync(["a", "b", "c"].into_iter());
        let g = CpuSet::parse("3").expect("cpus");
        assert!(c.get_mut("b").expect("b").retarget(|t| {
            t.exclusive = true;
            t.cpuset = g.clone();
        }));
        move_to(&mut c, "a", "1-2");
        c.stop("c");
        let mut h = c.holdings();
        h.sort_by(|x, y| x.id.cmp(y.id));
        let seen: Vec<_> = h
            .iter()
            .map(|h| {
                (
                    h.id,
                    h.applied.map(ToString::to_string),
                    h.exclusive.map(ToString::to_string),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("a", Some("1-3".to_string()), None),
                ("b", Some("1-3".to_string()), Some("3".to_string())),
            ]
        );
        // "a" is in breach of "b" until its update is applied.
        let breaches = topolet_core::placement::breach::breaches(&h);
        assert_eq!(breaches.len(), 1);
        assert_eq!(
            (breaches[0].id.as_str(), breaches[0].cpus.to_string()),
            ("a", "3".into())
        );
        drop(h);
        let b = c.take_due(t0 + QUIET).expect("due");
        c.batch_done(&b, BatchResult::applied(), t0 + QUIET);
        assert!(topolet_core::placement::breach::breaches(&c.holdings()).is_empty());
    }

    #[test]
    fn stopped_containers_leave_the_update_set_at_stop() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        move_to(&mut c, "a", "2-3");
        move_to(&mut c, "b", "2-3");
        c.stop("a");
        assert_eq!(c.reply_ids("c"), vec!["b".to_string()]);
        // Queued again later (a pool change): still not sent.
        move_to(&mut c, "a", "3");
        assert!(c.reply_ids("c").is_empty());
        assert!(c.take_due(t0 + QUIET).is_none());
        assert_eq!(c.get("a").expect("a").lifecycle(), Lifecycle::Stopped);
    }

    #[test]
    fn a_reply_skips_the_event_s_own_container_and_marks_created_ones_for_their_start() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        c.insert("d", record("r", "x", "d", Lifecycle::Created));
        move_to(&mut c, "a", "2-3");
        move_to(&mut c, "d", "2-3");
        assert_eq!(c.reply_ids("a"), vec!["d".to_string()]);
        assert!(c.will_resend_on_start("d"));
        assert!(c.start("d"), "sent while created: again once running");
        assert!(!c.start("d"), "once");
        assert_eq!(c.reply_ids("x"), vec!["a".to_string(), "d".to_string()]);
    }

    #[test]
    fn the_pod_index_and_successors_follow_inserts_and_removals() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        assert_eq!(c.pod_ids("p").cloned().collect::<Vec<_>>(), ["a", "b"]);
        assert!(!c.has_successor("a"));
        // "a" restarted: same pod and name, new id.
        c.insert("a2", record("p", "x", "a2", Lifecycle::Created));
        assert!(c.has_successor("a") && c.has_successor("a2"));
        c.remove("a");
        assert!(!c.has_successor("a2"));
        c.left_alone_mut().insert(ContainerKey::new("p", "z"));
        // Another pod whose uid the first one's is a prefix of: not that pod's.
        c.left_alone_mut().insert(ContainerKey::new("p1", "z"));
        c.remove_pod("p");
        assert_eq!(c.pod_ids("p").count(), 0);
        assert_eq!(
            c.left_alone().iter().collect::<Vec<_>>(),
            [&ContainerKey::new("p1", "z")]
        );
        c.remove_pod("p1");
        assert!(c.left_alone().is_empty());
        assert_eq!(c.len(), 1);
        assert!(c.get("c").is_some());
    }

    #[test]
    fn replacing_a_record_keeps_counting_its_generation() {
        let t0 = Instant::now();
        let mut c = cache(t0);
        let g = c.get("a").expect("a").generation();
        let mut r = record("p", "x", "a", Lifecycle::Running);
        r.target.cpuset = CpuSet::parse("2").expect("cpus");
        c.insert("a", r);
        assert_eq!(c.get("a").expect("a").generation(), g + 1);
    }

    #[test]
    fn the_drift_check_probes_only_running_containers_with_a_process_in_a_lull() {
        let t0 = Instant::now();
        let lull = Duration::from_secs(5);
        let mut c = cache(t0);
        c.event(t0);
        for (id, pid) in [("a", 10), ("b", 0)] {
            c.get_mut(id).expect("record").set_pid(pid);
        }
        c.get_mut("c").expect("c").set_pid(30);
        c.stop("c");
        // During activity: nothing.
        assert!(c.drift_probes(t0 + Duration::from_secs(1), lull).is_empty());
        // In a lull: a only (b's process is unknown, c stopped).
        let probes = c.drift_probes(t0 + lull, lull);
        assert_eq!(probes.len(), 1);
        assert_eq!((probes[0].id.as_str(), probes[0].pid), ("a", 10));
        assert_eq!(probes[0].mems, None, "a target naming no memory nodes");
        // Something queued: every target has not reached the runtime yet.
        move_to(&mut c, "b", "2-3");
        assert!(c.drift_probes(t0 + lull * 10, lull).is_empty());
        // Drifted and current: queued once.
        let mut c = cache(t0);
        c.get_mut("a").expect("a").set_pid(10);
        let probe = c.drift_probes(t0 + lull, lull).remove(0);
        assert!(c.drifted(&probe));
        assert!(c.has_pending());
        // Not synchronized (a new connection): no probes.
        c.connection_configured(QUIET);
        assert!(c.drift_probes(t0 + lull * 10, lull).is_empty());
    }
}
