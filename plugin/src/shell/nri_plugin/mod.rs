//! The NRI event handlers: the only module that turns runtime events into placement decisions
//! and decisions into NRI adjustments and updates.
//!
//! Every handler is short: it builds the NRI view (`shell::nri_view`), asks `core::placement`
//! for a decision, records it in the container cache (`shell::container_cache`: one record per
//! container with its lifecycle, target and generation; it decides what a reply or an
//! unsolicited update may carry), hands the assignments to the state-file writer
//! (`shell::persister`: written and fsynced on its own thread, never waited for) and renders
//! the reply (`shell::nri_adjust`). The configuration in effect is `shell::effective_config`.
//! Shared-pool changes reach the other containers in the reply to the event that caused them
//! (CreateContainer, UpdateContainer and StopContainer replies carry updates), or, when the
//! event's reply cannot (RemoveContainer, RemovePodSandbox, PostStartContainer, a reload), in
//! the next reply that can or in one unsolicited UpdateContainers once the runtime is quiet —
//! never during activity: see `shell::update_outbox` for the containerd deadlock that rule
//! avoids. Nothing is ever awaited inside a handler (containerd holds its NRI lock while it
//! calls us).
//!
//! Restart and reconnect: on every Synchronize the runtime's view is the truth. Exclusive sets
//! are restored from the containers' actual cpusets (assignments from the state file only break
//! ties), stale assignments are dropped, and every container whose cpuset differs from its
//! target gets an update in the Synchronize reply.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::watch;
use topolet_nri::api;
use topolet_nri::api::Event;
use topolet_nri::events::EventMask;
use topolet_nri::plugin::{Plugin, PluginError, PluginResult, RuntimeInfo};
use topolet_nri::stub::ConnectionStatus;
use topolet_nri::updater::ContainerUpdater;

use crate::config::Config;
use crate::core::admission_input::{self, AdmissionInput, AdmissionRecord, Fallback, Source};
use crate::core::assignments::Assignments;
use crate::core::container_key::ContainerKey;
use crate::core::cpuset::CpuSet;
use crate::core::events::{EventType, ObjectRef, Occurrence};
use crate::core::hints::NumaMask;
use crate::core::migrate::MigrateError;
use crate::core::placement::{ContainerResources, Placement, PlacementError};
use crate::core::reconcile::RunningContainer;
use crate::core::status::{ExclusiveInput, Policies, Snapshot};
use crate::core::topology::Topology;
use crate::shell::container_cache::{
    BatchResult, ContainerCache, Decided, DriftProbe, Lifecycle, Record,
};
use crate::shell::effective_config::EffectiveConfig;
use crate::shell::kubernetes::EventSink;
use crate::shell::metrics::{self, event, Metrics};
use crate::shell::nri_adjust;
use crate::shell::nri_view::{self, ContainerView, NoView};
use crate::shell::oom_floor;
use crate::shell::persister::{FileWriter, PersistStatus, Persister};
use crate::shell::pod_cgroup::{self, Work};
use crate::shell::pod_directory::{Lookup, PodDirectory};
use crate::shell::proc_affinity::{self, Allowed};
use crate::shell::refusal_log::{RefusalLog, Verdict};
use crate::shell::reload::ReloadOutcome;
use crate::shell::state_file;

/// The reason of the Normal Event of an exclusive CPU grant.
pub const GRANT_REASON: &str = "ExclusiveCPUsAssigned";

/// File name of the assignments under `[state] dir`.
pub const STATE_FILE: &str = "assignments.json";
/// How long the exit waits for the last state write.
pub const SHUTDOWN_FLUSH: Duration = Duration::from_secs(5);

/// The lull the drift check needs: no runtime event for this long, nothing queued or in flight.
pub const DRIFT_LULL: Duration = Duration::from_secs(5);

/// The state file's content: the placement's assignments, plus the containers topolet left
/// alone because their cpuset was already set by someone else (so that a restart does not take
/// them over).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeState {
    pub assignments: Assignments,
    #[serde(default)]
    pub left_alone: BTreeSet<ContainerKey>,
}

struct Node {
    placement: Placement,
    /// Every managed container, the updates waiting for them, the containers left alone
    /// (`shell::container_cache`).
    cache: ContainerCache,
    /// Kubernetes pod sandboxes by id: their uids for RemovePodSandbox, and the eviction loop's
    /// pods ([`TopoletPlugin::managed_pods`]).
    sandboxes: HashMap<String, api::PodSandbox>,
    oom_floor: Option<i32>,
    /// The last refusal of each container, so that the kubelet's retries are not all logged.
    refusals: RefusalLog,
}

/// The topolet NRI plugin.
pub struct TopoletPlugin {
    /// The configuration in effect (`shell::effective_config`): reload swaps it.
    config: EffectiveConfig,
    topology: Topology,
    node: Mutex<Node>,
    updater: OnceLock<ContainerUpdater>,
    status: OnceLock<watch::Receiver<ConnectionStatus>>,
    state_path: PathBuf,
    flusher_started: AtomicBool,
    /// The state file's writer (`shell::persister`), started at the first write: handlers hand
    /// it a snapshot and return; it writes outside every lock and retries failures.
    persister: OnceLock<Persister>,
    /// Where process information lives (`/proc`; a fake tree in tests).
    proc_root: PathBuf,
    /// Where `/sys` is seen (`--sysfs-root`): cgroup mount points under `/sys` are read there.
    sysfs_root: PathBuf,
    /// The pod cgroup writer, started at its first use.
    pod_cgroups: OnceLock<pod_cgroup::Writer>,
    metrics: Arc<Metrics>,
    /// Events on pods (`shell::kubernetes`), when the API client is on: a non-blocking hand-off.
    events: OnceLock<EventSink>,
    /// Signalled whenever the placement's books may have changed (`shell::nrt` publishes them):
    /// never blocks, coalesces.
    books_changed: Arc<tokio::sync::Notify>,
    /// This node's pods from the API (`shell::pod_directory`) and `[kubernetes] pod_wait_ms`,
    /// when the API client is on.
    pods: OnceLock<(PodDirectory, Duration)>,
}

impl TopoletPlugin {
    /// Builds the placement from `config` and `topology` and loads the persisted assignments (a
    /// bad state file is reported, moved aside and rebuilt at the next Synchronize).
    pub fn new(config: Config, topology: Topology) -> anyhow::Result<TopoletPlugin> {
        // NUMA masks hold ids below 64: a larger id would silently give empty mems.
        if let Some(id) = topology
            .numa_ids()
            .find(|&id| id >= crate::core::hints::MAX_NUMA_ID)
        {
            anyhow::bail!(
                "machine: NUMA node {id} (sysfs node{id}): topolet handles NUMA node ids below {}",
                crate::core::hints::MAX_NUMA_ID
            );
        }
        let (placement, warnings) = Placement::new(&topology, &config.placement()?)?;
        for w in warnings {
            tracing::warn!(warning = %w, "configuration");
        }
        let state_path = config.state.dir.join(STATE_FILE);
        let mut node = Node {
            placement,
            cache: ContainerCache::new(Instant::now()),
            sandboxes: HashMap::new(),
            oom_floor: config.qos.oom_score_adj_floor,
            refusals: RefusalLog::default(),
        };
        match state_file::load::<NodeState>(&state_path) {
            Ok(Some(saved)) => {
                *node.cache.left_alone_mut() = saved.left_alone;
                let report = node.placement.load_hints(saved.assignments);
                tracing::info!(path = %state_path.display(), %report, "state file loaded; the runtime's view will confirm it at synchronize");
            }
            Ok(None) => tracing::info!(path = %state_path.display(), "no state file yet"),
            Err(e) => {
                tracing::error!(error = %e, "state file unusable; rebuilding from the runtime's view");
                match state_file::quarantine(&state_path) {
                    Ok(aside) => {
                        tracing::warn!(moved_to = %aside.display(), "kept the unusable state file for inspection")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not move the unusable state file aside")
                    }
                }
            }
        }
        Ok(TopoletPlugin {
            config: EffectiveConfig::new(config),
            topology,
            node: Mutex::new(node),
            updater: OnceLock::new(),
            status: OnceLock::new(),
            state_path,
            flusher_started: AtomicBool::new(false),
            persister: OnceLock::new(),
            proc_root: PathBuf::from("/proc"),
            sysfs_root: PathBuf::from("/sys"),
            pod_cgroups: OnceLock::new(),
            metrics: Arc::new(Metrics::new()),
            events: OnceLock::new(),
            books_changed: Arc::new(tokio::sync::Notify::new()),
            pods: OnceLock::new(),
        })
    }

    /// Reads process information from `root` instead of `/proc` (tests; `self/mountinfo` there
    /// locates the cgroup hierarchies).
    pub fn set_proc_root(&mut self, root: PathBuf) {
        self.proc_root = root;
    }

    /// Sees `/sys` at `root` (`--sysfs-root`): the pod cgroups of a cgroup hierarchy mounted
    /// under `/sys` are written under `root` instead (the DaemonSet's `/host/sys`; tests).
    pub fn set_sysfs_root(&mut self, root: PathBuf) {
        self.sysfs_root = root;
    }

    fn pod_cgroups(&self) -> &pod_cgroup::Writer {
        self.pod_cgroups.get_or_init(|| {
            pod_cgroup::Writer::new(
                pod_cgroup::Roots {
                    proc_root: self.proc_root.clone(),
                    sysfs_root: self.sysfs_root.clone(),
                },
                self.metrics.clone(),
            )
        })
    }

    /// Waits until every pod cgroup write queued so far is done (tests; blocking).
    pub fn flush_pod_cgroups(&self) {
        self.pod_cgroups().flush();
    }

    /// Queues the unlimited pod quota of pod `uid` if it holds exclusive CPUs and the kubelet's
    /// static policy would have disabled it.
    fn unlimit_pod(&self, node: &Node, uid: &str) {
        if !node.placement.disables_exclusive_quota() {
            return;
        }
        let Some((_, m)) = node.cache.pod(uid).find(|(_, m)| m.target().exclusive) else {
            return;
        };
        self.pod_cgroups().submit(Work::Unlimit {
            pod: m.view().pod_ref.clone(),
            cgroup_parent: m.view().cgroup_parent.clone(),
        });
    }

    /// Sends Events on pods through `sink` from now on (the Kubernetes API client is on).
    pub fn set_event_sink(&self, sink: EventSink) {
        let _ = self.events.set(sink);
    }

    /// Hands an Event on this node's Node object to the API client, if it is on (never waits).
    pub fn node_event(&self, type_: EventType, reason: &str, message: &str) {
        if let Some(sink) = self.events.get() {
            sink.node_event(type_, reason, message);
        }
    }

    /// Admits containers from their pods' specs in `pods` from now on, waiting at most `wait`
    /// for a pod it does not hold yet (`shell::pod_directory`).
    pub fn set_pod_directory(&self, pods: PodDirectory, wait: Duration) {
        let _ = self.pods.set((pods, wait));
    }

    /// What admission of `view` (in `sandbox`) works from: its pod's spec when the pod watch
    /// holds it (waiting, bounded, for an API pod a synced watch has not delivered yet), else
    /// the inversion, its reason counted. Takes no lock of the plugin.
    async fn admission_input(
        &self,
        sandbox: &api::PodSandbox,
        view: &ContainerView,
    ) -> AdmissionInput {
        let inversion = |why: Fallback| {
            self.metrics.admission_fallback(why.as_str());
            AdmissionInput::Inversion {
                estimate: view.estimate.clone(),
                why,
            }
        };
        let Some((dir, wait)) = self.pods.get() else {
            return inversion(Fallback::ApiOff);
        };
        let uid = &view.key.pod_uid;
        // A static pod is in the API only as its mirror, once the kubelet made one: not waited for.
        let from_api = sandbox
            .annotations
            .get(crate::core::pod::CONFIG_SOURCE_ANNOTATION)
            .map_or(true, |s| s == "api");
        let lookup = if from_api {
            dir.get_or_wait(uid, *wait).await
        } else {
            dir.get(uid)
        };
        match lookup {
            Lookup::Found(pod) => {
                match admission_input::find_container(&pod, &view.key.container) {
                    Some(which) => AdmissionInput::Api {
                        pod: (*pod).clone(),
                        which,
                    },
                    None => inversion(Fallback::NoSuchContainer),
                }
            }
            Lookup::Invalid(e) => {
                tracing::warn!(pod = %view.pod_ref, error = %e, "the pod's spec from the API cannot be read; the inversion decides");
                inversion(Fallback::InvalidSpec)
            }
            Lookup::NotSynced => inversion(Fallback::NotSynced),
            Lookup::NotFound if !from_api => inversion(Fallback::StaticPod),
            Lookup::NotFound => inversion(Fallback::NotFound),
        }
    }

    /// Hands an Event on `view`'s pod to the API client, if it is on (never waits).
    fn pod_event(&self, view: &ContainerView, type_: EventType, reason: &str, message: &str) {
        let Some(sink) = self.events.get() else {
            return;
        };
        let object = ObjectRef {
            namespace: view.estimate.namespace.clone(),
            name: view.estimate.name.clone(),
            uid: view.key.pod_uid.clone(),
        };
        sink.record(Occurrence::new(object, type_, reason, message));
    }

    /// The Warning Event of a refusal: `msg` is the refusal text (`topolet: <reason>: …`; the
    /// Event's source already says topolet).
    fn refusal_event(&self, view: &ContainerView, err: &PlacementError, msg: &str) {
        let text = msg.strip_prefix("topolet: ").unwrap_or(msg);
        self.pod_event(view, EventType::Warning, err.event_reason(), text);
    }

    /// The Normal Event of an exclusive grant.
    fn grant_event(&self, view: &ContainerView, decision: &ContainerResources, resize: bool) {
        if self.events.get().is_none() {
            return;
        }
        let n = decision.cpuset.len();
        let message = format!(
            "container {} got {n} exclusive CPU{} {}, memory nodes {}{}",
            view.key.container,
            if n == 1 { "" } else { "s" },
            decision.cpuset,
            if decision.mems.is_empty() {
                "all".to_string()
            } else {
                decision.mems.to_string()
            },
            if resize { " (in-place resize)" } else { "" },
        );
        self.pod_event(view, EventType::Normal, GRANT_REASON, &message);
    }

    /// Logs a refusal decided from `source` unless it repeats `key`'s last logged one (then
    /// counts it).
    fn log_refusal(
        &self,
        node: &mut Node,
        op: &'static str,
        source: Source,
        view: &ContainerView,
        msg: &str,
    ) {
        match node.refusals.note(op, &view.key, msg, Instant::now()) {
            Verdict::Log { repeats } => tracing::warn!(
                pod = %view.pod_ref,
                container = %view.key.container,
                operation = op,
                source = source.as_str(),
                repeats_not_logged = repeats,
                error = %msg,
                "refused; nothing changed"
            ),
            Verdict::Suppress => self.metrics.refusal_log_suppressed(op),
        }
    }

    /// Connects the plugin to its stub's update queue and status.
    pub fn attach(
        self: &Arc<Self>,
        updater: ContainerUpdater,
        status: watch::Receiver<ConnectionStatus>,
    ) {
        let _ = self.updater.set(updater);
        let _ = self.status.set(status);
        if !self
            .flusher_started
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let plugin = Arc::downgrade(self);
            // `[nri]` is read at start only; the kubelet's `reconcileState` runs every 10 s.
            let drift_every = self.config.get().nri.drift_check();
            tokio::spawn(async move {
                let mut last_drift_check = Instant::now();
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let Some(p) = plugin.upgrade() else { break };
                    p.verify_running();
                    p.flush_updates();
                    if drift_every.is_some_and(|every| last_drift_check.elapsed() >= every) {
                        last_drift_check = Instant::now();
                        p.check_drift();
                    }
                }
            });
        }
    }

    /// Checks the running containers Synchronize listed against their cpusets, off the event
    /// path: a container whose task may run outside its target (an update that reached only
    /// its stored spec while it started, before a topolet restart) is queued to be sent it again.
    fn verify_running(self: &Arc<Self>) {
        let checks = self.lock().cache.take_verify();
        if checks.is_empty() {
            return;
        }
        let plugin = Arc::downgrade(self);
        let proc_root = self.proc_root.clone();
        tokio::task::spawn_blocking(move || {
            let seen: Vec<(String, Result<CpuSet, _>)> = checks
                .into_iter()
                .map(|(id, pid)| (id, proc_affinity::cpus_allowed(&proc_root, pid)))
                .collect();
            let Some(p) = plugin.upgrade() else { return };
            let mut node = p.lock();
            for (id, allowed) in seen {
                let Some(m) = node.cache.get(&id) else {
                    continue;
                };
                match allowed {
                    Ok(allowed) if !allowed.is_subset(&m.target().cpuset) => {
                        tracing::warn!(pod = %m.view().pod_ref, container = %m.view().key.container, runs_on = %allowed, cpus = %m.target().cpuset, "container runs outside its cpuset (an update reached only its spec); sending it again");
                        node.cache.queue(&id);
                    }
                    Ok(_) => {}
                    // Exited since, or not ours to see: the next Synchronize looks again.
                    Err(e) => {
                        tracing::debug!(container = %id, error = %e, "cannot check where the container runs")
                    }
                }
            }
        });
    }

    /// The drift check (the kubelet's `reconcileState`, against what the kernel enforces rather
    /// than what was last sent): in a lull, every running container's init process is read
    /// (`/proc/<pid>/status`, on the blocking pool) and a container that may use a CPU outside
    /// its target, or other memory nodes than a target that names some, is queued to be sent its
    /// target again (counted in `topolet_drift_repairs_total`). Someone else's write to a
    /// container's cgroup, or an update lost in the runtime, is so repaired within
    /// `[nri] drift_check_s` plus the lull.
    fn check_drift(self: &Arc<Self>) {
        let probes = self.lock().cache.drift_probes(Instant::now(), DRIFT_LULL);
        if probes.is_empty() {
            return;
        }
        let plugin = Arc::downgrade(self);
        let proc_root = self.proc_root.clone();
        tokio::task::spawn_blocking(move || {
            let seen = read_probes(&proc_root, probes);
            if let Some(p) = plugin.upgrade() {
                p.repair_drift(seen);
            }
        });
    }

    /// Queues the drifted containers among `seen` (probes and what their processes may use);
    /// returns how many were queued.
    fn repair_drift(&self, seen: Vec<(DriftProbe, Allowed)>) -> usize {
        let mut node = self.lock();
        let mut repaired = 0;
        for (probe, allowed) in seen {
            self.metrics.drift_check();
            let cpus_off = !allowed.cpus.is_subset(&probe.cpus);
            let mems_off = probe.mems.as_ref().is_some_and(|m| *m != allowed.mems);
            if !(cpus_off || mems_off) || !node.cache.drifted(&probe) {
                continue;
            }
            let field = if cpus_off { "cpus" } else { "mems" };
            self.metrics.drift_repair(field);
            repaired += 1;
            if let Some(m) = node.cache.get(&probe.id) {
                tracing::warn!(pod = %m.view().pod_ref, container = %m.view().key.container, runs_on = %allowed.cpus, mems_allowed = %allowed.mems, cpus = %probe.cpus, field, "container drifted from its target (its cgroup was changed behind topolet's back, or an update was lost); sending it again");
            }
        }
        repaired
    }

    /// Sends the queued containers their current targets in one UpdateContainers request, if
    /// the cache says it is time (`shell::container_cache`: after this connection's
    /// Synchronize, after a lull, one request at a time). The request is queued to the stub
    /// under the lock that computed it, so no newer target can be taken in between.
    fn flush_updates(self: &Arc<Self>) {
        let Some(updater) = self.updater.get() else {
            return;
        };
        let mut node = self.lock();
        let Some(batch) = node.cache.take_due(Instant::now()) else {
            return;
        };
        let updates = updates_for(&node, &batch.ids());
        let n = updates.len();
        match updater.update(updates, Vec::new()) {
            Ok(pending) => {
                drop(node);
                let plugin = Arc::downgrade(self);
                tokio::spawn(async move {
                    let result = pending.await;
                    let Some(p) = plugin.upgrade() else { return };
                    let mut node = p.lock();
                    let outcome = match &result {
                        Ok(_) => node.cache.batch_done(&batch, BatchResult::Answered),
                        Err(_) => node.cache.batch_done(&batch, BatchResult::Failed),
                    };
                    if outcome.stale_connection {
                        tracing::debug!(
                            "an update request of an earlier connection ended; ignored"
                        );
                        return;
                    }
                    if !outcome.superseded.is_empty() {
                        tracing::debug!(containers = ?outcome.superseded, "targets changed while their update was in flight: sent again");
                    }
                    match result {
                        Ok(failed) if failed.is_empty() => {
                            tracing::debug!(containers = n, "container updates applied")
                        }
                        Ok(failed) => tracing::warn!(
                            failed = failed.len(),
                            "container updates partly failed (containers may have exited)"
                        ),
                        Err(e) if outcome.given_up.is_empty() => {
                            tracing::warn!(error = %e, containers = n, "container updates not applied; will retry")
                        }
                        Err(e) => {
                            tracing::error!(error = %e, containers = ?outcome.given_up, "container updates not applied after repeated attempts; the next synchronize will correct them")
                        }
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "container updates not queued");
                node.cache.batch_not_queued(&batch);
            }
        }
    }

    /// Switches to `config` (its `[nri]` and `[state]` are ignored: read only at start) for
    /// containers created from now on, keeping every current assignment; refused, changing
    /// nothing, when the configuration is invalid or would break a running container
    /// (`core::migrate`). Shared containers are moved if the shared pool changed. On success
    /// `config` is the configuration in effect for every reader ([`TopoletPlugin::config`]).
    pub fn reload(&self, config: &Config) -> Result<ReloadOutcome, MigrateError> {
        let mut node = self.lock();
        let migrated = node.placement.migrate(&config.placement()?)?;
        node.placement = migrated.placement;
        let previous = self.config.swap(config.clone());
        match config.qos.oom_score_adj_floor {
            Some(floor) => node.oom_floor = Some(floor),
            None if previous.qos.oom_score_adj_floor.is_some() => tracing::warn!(
                "qos.oom_score_adj_floor removed: detection from the runtime takes effect at restart"
            ),
            None => {}
        }
        self.persist(&node);
        self.push_shared_pool(&mut node, None);
        Ok(ReloadOutcome {
            warnings: migrated.warnings,
            carried: migrated.carried,
            shared: node.placement.shared_pool(),
            reserved: node.placement.reserved().clone(),
        })
    }

    /// The configuration in effect (the start-up one until a reload succeeds).
    pub fn config(&self) -> Arc<Config> {
        self.config.get()
    }

    /// Final state write on exit: the newest assignments, waited for (at most
    /// [`SHUTDOWN_FLUSH`]: a hung disk must not hang the exit).
    pub fn shutdown(&self) {
        {
            let node = self.lock();
            self.persist(&node);
        }
        let st = self.flush_state(SHUTDOWN_FLUSH);
        if st.pending() {
            tracing::error!(
                path = %self.state_path.display(),
                submitted = st.submitted,
                written = st.written,
                "state file not written at exit; the next start rebuilds from the runtime's view"
            );
        }
    }

    /// Waits until the assignments handed to the writer so far are on disk (or their write
    /// failed), at most `limit`.
    pub fn flush_state(&self, limit: Duration) -> PersistStatus {
        match self.persister.get() {
            Some(p) => p.flush(limit),
            None => PersistStatus::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Node> {
        // A panic inside a handler must not wedge every later event: the data is plain values
        // that are consistent between statements, so a poisoned lock is still usable.
        self.node.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands the assignments to the state-file writer; never waits on the disk.
    fn persist(&self, node: &Node) {
        // Every change of the assignments is persisted: the NodeResourceTopology follows.
        self.books_changed.notify_one();
        let state = NodeState {
            assignments: node.placement.assignments(),
            left_alone: node.cache.left_alone().clone(),
        };
        match self.persister() {
            Some(p) => p.submit(state),
            None => self.metrics.state_write(false),
        }
    }

    fn persister(&self) -> Option<&Persister> {
        if let Some(p) = self.persister.get() {
            return Some(p);
        }
        let writer = Box::new(FileWriter(self.state_path.clone()));
        match Persister::start(writer, self.metrics.clone()) {
            Ok(p) => Some(self.persister.get_or_init(|| p)),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the state-file writer thread; assignments are kept in memory only");
                None
            }
        }
    }

    /// True while the newest assignments are not on disk (being written, or failing and
    /// retried every second).
    pub fn persist_pending(&self) -> bool {
        self.persister.get().is_some_and(|p| p.status().pending())
    }

    /// Queues every managed shared container whose cpuset differs from the current shared
    /// pool for an update (carried by the next reply that can, or sent after a lull).
    fn push_shared_pool(&self, node: &mut Node, skip: Option<&str>) {
        for id in shared_changes(node, skip) {
            node.cache.queue(&id);
        }
    }

    /// The queued updates of every container but `skip`, for the reply to an event about
    /// `skip`.
    fn reply_updates(&self, node: &mut Node, skip: &str) -> Vec<api::ContainerUpdate> {
        let ids = node.cache.reply_ids(skip);
        let updates = updates_for(node, &ids);
        if !updates.is_empty() {
            tracing::debug!(
                containers = updates.len(),
                "container updates carried in the reply"
            );
        }
        updates
    }

    /// Locks the node for an event handler: the runtime is busy now.
    fn event_lock(&self) -> MutexGuard<'_, Node> {
        let mut node = self.lock();
        node.cache.event(Instant::now());
        node
    }

    fn memory_capacity(&self) -> u64 {
        self.topology.memory_capacity()
    }

    fn detect_oom_floor(&self, node: &mut Node) {
        if self.config.get().qos.oom_score_adj_floor.is_some() {
            return;
        }
        let pid = self
            .status
            .get()
            .and_then(|s| s.borrow().runtime_pid)
            .filter(|&p| p > 0);
        let Some(pid) = pid else {
            tracing::warn!("runtime pid unknown; assuming it cannot lower oom_score_adj below 0 (set [qos] oom_score_adj_floor to override)");
            node.oom_floor = Some(0);
            return;
        };
        match oom_floor::detect(std::path::Path::new("/proc"), pid) {
            Ok(f) => {
                tracing::info!(floor = f.floor, reason = %f.reason, "oom_score_adj floor");
                node.oom_floor = Some(f.floor);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot detect the oom_score_adj floor; assuming 0");
                node.oom_floor = Some(0);
            }
        }
    }
}

/// Which source decided each managed container, ordered by pod, container and id.
fn admission_records(node: &Node) -> Vec<AdmissionRecord> {
    let mut out: Vec<AdmissionRecord> = node
        .cache
        .iter()
        .map(|(id, m)| AdmissionRecord {
            pod: m.view().pod_ref.clone(),
            container: m.view().key.container.clone(),
            id: id.clone(),
            source: m.decided().source,
            fallback: m.decided().fallback,
            comparison: m.decided().comparison.clone(),
        })
        .collect();
    out.sort_by(|a, b| (&a.pod, &a.container, &a.id).cmp(&(&b.pod, &b.container, &b.id)));
    out
}

/// Each of `ids`' current target as an update (failures ignored: a container may have exited
/// meanwhile), in the order of `ids` (the cache hands them sorted).
fn updates_for(node: &Node, ids: &[String]) -> Vec<api::ContainerUpdate> {
    let mut updates = Vec::with_capacity(ids.len());
    for id in ids {
        let Some(m) = node.cache.get(id) else {
            continue;
        };
        let t = m.target();
        let mut update = if t.exclusive {
            nri_adjust::resize_update(m.view(), t)
        } else {
            nri_adjust::cpuset_update(id, &t.cpuset, &t.mems, true)
        };
        update.ignore_failure = true;
        updates.push(update);
    }
    updates
}

/// The pod cgroup's CPU values the kubelet computes for pod `uid` from its known, not stopped
/// containers, `replace` standing in for the container with its id (a resize's request).
fn pod_cpu_of(
    node: &Node,
    uid: &str,
    replace: Option<&ContainerView>,
    enforce_cpu_limits: bool,
) -> Option<crate::core::qos::PodCpu> {
    let mut class = None;
    let mut period = crate::core::qos::DEFAULT_CPU_PERIOD_US;
    let mut containers = Vec::new();
    for (id, m) in node.cache.pod(uid) {
        if !m.lifecycle().is_live() {
            continue;
        }
        let view = match replace {
            Some(v) if v.id == *id => v,
            _ => m.view(),
        };
        class = Some(view.qos);
        period = view.current.cpu_period.filter(|&p| p > 0).unwrap_or(period);
        containers.push(view.container().clone());
    }
    Some(crate::core::qos::pod_cpu(
        class?,
        &containers,
        period,
        enforce_cpu_limits,
    ))
}

/// True when the runtime's `cpuset.mems` is `want` (as sets: `0-1` is `0,1`); an empty `want`
/// (no NUMA information) matches anything.
/// Reads what each probed container's init process may use; a process that exited since (or
/// is not visible) is skipped: the next check looks again.
fn read_probes(proc_root: &std::path::Path, probes: Vec<DriftProbe>) -> Vec<(DriftProbe, Allowed)> {
    probes
        .into_iter()
        .filter_map(|p| match proc_affinity::allowed(proc_root, p.pid) {
            Ok(a) => Some((p, a)),
            Err(e) => {
                tracing::debug!(container = %p.id, error = %e, "drift check: cannot read the container's process");
                None
            }
        })
        .collect()
}

fn mems_match(actual: Option<&CpuSet>, want: &NumaMask) -> bool {
    let want: CpuSet = want.ids().collect();
    want.is_empty() || actual == Some(&want)
}

/// A container's lifecycle from its state in Synchronize.
fn sync_lifecycle(c: &api::Container) -> Lifecycle {
    match c.state.enum_value() {
        Ok(api::ContainerState::CONTAINER_CREATED) => Lifecycle::Created,
        Ok(api::ContainerState::CONTAINER_STOPPED) => Lifecycle::Stopped,
        _ => Lifecycle::Running,
    }
}

/// The mems to send a container whose mems were `before` and are now to be `after`: an empty
/// `after` leaves the field alone (the kubelet's way for shared containers), unless topolet (or
/// someone) had narrowed it before: then every node, which is what the container would have had.
fn widened(before: NumaMask, after: NumaMask, all: NumaMask) -> NumaMask {
    if after.is_empty() && !before.is_empty() {
        all
    } else {
        after
    }
}

/// Moves every shared container (except `skip`) to the current shared pool and mems in the
/// books; returns the ids whose cpuset or mems changed (to be sent the update).
fn shared_changes(node: &mut Node, skip: Option<&str>) -> Vec<String> {
    let shared = node.placement.shared_pool();
    let mems = node.placement.shared_mems();
    let all = node.placement.all_mems();
    let mut changed = Vec::new();
    for (id, m) in node.cache.iter_mut() {
        // Stopped containers left the update set at StopContainer.
        if Some(id.as_str()) == skip || m.target().exclusive || !m.lifecycle().is_live() {
            continue;
        }
        let t = m.target();
        let target_mems = if t.memory_pinned {
            t.mems
        } else {
            widened(t.mems, mems, all)
        };
        if m.retarget(|t| {
            t.cpuset.clone_from(&shared);
            t.mems = target_mems;
        }) {
            changed.push(id.clone());
        }
    }
    changed.sort();
    changed
}

#[async_trait]
impl Plugin for TopoletPlugin {
    fn events(&self) -> EventMask {
        EventMask::of(&[
            Event::RUN_POD_SANDBOX,
            Event::REMOVE_POD_SANDBOX,
            Event::CREATE_CONTAINER,
            Event::UPDATE_CONTAINER,
            Event::STOP_CONTAINER,
            Event::REMOVE_CONTAINER,
            Event::POST_START_CONTAINER,
        ])
    }

    async fn configure(
        &self,
        req: &api::ConfigureRequest,
        runtime: &RuntimeInfo,
    ) -> PluginResult<()> {
        let _timer = self.metrics.time(event::CONFIGURE);
        tracing::info!(
            runtime = %runtime.name,
            version = %runtime.version,
            nri = ?runtime.nri_version,
            config_bytes = req.config.len(),
            "configured by runtime"
        );
        let mut node = self.event_lock();
        self.detect_oom_floor(&mut node);
        let quiet = crate::shell::update_outbox::quiet_for(runtime.nri_version);
        tracing::info!(
            quiet_ms = quiet.as_millis() as u64,
            "unsolicited updates wait for this long a lull (NRI before v0.12.3 can deadlock on them)"
        );
        // A new connection: nothing goes unsolicited before its Synchronize.
        node.cache.connection_configured(quiet);
        Ok(())
    }

    async fn synchronize(
        &self,
        pods: Vec<api::PodSandbox>,
        containers: Vec<api::Container>,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        let _timer = self.metrics.time(event::SYNCHRONIZE);
        let capacity = self.memory_capacity();
        let by_id: HashMap<&str, &api::PodSandbox> =
            pods.iter().map(|p| (p.id.as_str(), p)).collect();
        for p in &pods {
            tracing::info!(pod = %format!("{}/{}", p.namespace, p.name), uid = %p.uid, id = %p.id, "synchronize: pod");
        }
        let mut views = Vec::new();
        for c in &containers {
            let Some(pod) = by_id.get(c.pod_sandbox_id.as_str()) else {
                tracing::warn!(container = %c.id, pod = %c.pod_sandbox_id, "synchronize: container of an unknown pod; ignored");
                continue;
            };
            match nri_view::view(pod, c, capacity) {
                Ok(v) => {
                    tracing::debug!(pod = %v.pod_ref, container = %c.name, qos = %v.qos, cpus = ?v.current.cpuset_cpus.as_ref().map(ToString::to_string), "synchronize: container");
                    views.push(v);
                }
                Err(NoView::Ignored(why)) => {
                    tracing::debug!(container = %c.name, reason = %why, "synchronize: not managed")
                }
                Err(NoView::Bad(e)) => {
                    tracing::error!(pod = %format!("{}/{}", pod.namespace, pod.name), id = %c.id, error = %e, "synchronize: container not managed")
                }
            }
        }
        let mut node = self.event_lock();
        // Containers someone else placed at creation stay theirs; forget those that are gone.
        let running: BTreeSet<ContainerKey> = views.iter().map(|v| v.key.clone()).collect();
        node.cache.left_alone_mut().retain(|k| running.contains(k));
        views.retain(|v| !node.cache.left_alone().contains(&v.key));
        let (n_pods, n_containers) = (pods.len(), containers.len());
        // The runtime's pods move into the book (no copy of their labels and annotations).
        let sandboxes = pods
            .into_iter()
            .filter(|p| nri_view::pod_qos(p).is_ok())
            .map(|p| (p.id.clone(), p))
            .collect();
        let old_sandboxes = std::mem::replace(&mut node.sandboxes, sandboxes);
        let floor = node.oom_floor.unwrap_or(0);
        let running: Vec<RunningContainer> = views
            .iter()
            .map(|v| RunningContainer {
                id: v.id.clone(),
                container: v.estimate.clone(),
                cpuset: v.current.cpuset_cpus.clone(),
            })
            .collect();
        let outcome = node.placement.reconcile(&running, floor);
        for note in &outcome.notes {
            tracing::warn!(note = %note, "synchronize: reconciled");
        }
        let mut by_id: HashMap<String, ContainerView> =
            views.into_iter().map(|v| (v.id.clone(), v)).collect();
        let states: HashMap<&str, (Lifecycle, u32)> = containers
            .iter()
            .map(|c| (c.id.as_str(), (sync_lifecycle(c), c.pid)))
            .collect();
        let all_mems = node.placement.all_mems();
        let mut records: Vec<(String, Record)> = outcome
            .containers
            .into_iter()
            .filter_map(|(id, mut target)| {
                let view = by_id.remove(&id)?;
                // Mems someone narrowed (an earlier topolet with shared_pool_mems_follow_cpus, or
                // a container that held exclusive cpus) go back to every node.
                let reported = match view.current.cpuset_mems.as_ref().map(nri_view::mems_mask) {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        tracing::error!(pod = %view.pod_ref, container = %view.key.container, error = %e, "synchronize: cpuset.mems reported by the runtime cannot be used; treated as every node");
                        all_mems
                    }
                    None => NumaMask::default(),
                };
                target.mems = widened(reported, target.mems, all_mems);
                let (lifecycle, pid) = states
                    .get(id.as_str())
                    .copied()
                    .unwrap_or((Lifecycle::Running, 0));
                let mut record = Record::new(view, Decided::synchronize(), target, lifecycle);
                record.set_pid(pid);
                Some((id, record))
            })
            .collect();
        records.sort_by(|a, b| a.0.cmp(&b.0));
        let mut updates: Vec<api::ContainerUpdate> = Vec::new();
        for (_, m) in &records {
            // Stopped containers are sent nothing.
            if !m.lifecycle().is_live() {
                continue;
            }
            let mems_ok = mems_match(m.view().current.cpuset_mems.as_ref(), &m.target().mems);
            if let Some(update) = nri_adjust::sync_update(m.view(), m.target(), mems_ok) {
                updates.push(update);
            }
        }
        let created: Vec<String> = records
            .iter()
            .filter(|(_, m)| m.lifecycle() == Lifecycle::Created)
            .map(|(id, _)| id.clone())
            .collect();
        // This reply carries every container's update: nothing queued before still applies.
        let old_containers = node.cache.synchronized(records);
        // A container still being created may be starting its task right now, from a spec
        // older than the one reported (an update that reached only the stored spec before a
        // restart): it gets its cpuset again once it runs, whether or not it needs one now.
        for id in &created {
            node.cache.resend_on_start(id);
        }
        let updated: Vec<String> = updates.iter().map(|u| u.container_id.clone()).collect();
        node.cache.sent_in_sync(&updated);
        let updated: BTreeSet<&str> = updated.iter().map(String::as_str).collect();
        let mut verify: Vec<(String, u32)> = containers
            .iter()
            .filter(|c| c.state.enum_value() == Ok(api::ContainerState::CONTAINER_RUNNING))
            .filter(|c| c.pid > 0)
            .filter(|c| !updated.contains(c.id.as_str()) && node.cache.get(&c.id).is_some())
            .map(|c| (c.id.clone(), c.pid))
            .collect();
        verify.sort();
        node.cache.set_verify(verify);
        // Pods holding exclusive CPUs: their cgroup's quota too (as at creation).
        let exclusive_pods: BTreeSet<String> = node
            .cache
            .iter()
            .filter(|(_, m)| m.target().exclusive)
            .map(|(_, m)| m.view().key.pod_uid.clone())
            .collect();
        for uid in &exclusive_pods {
            self.unlimit_pod(&node, uid);
        }
        self.persist(&node);
        tracing::info!(
            pods = n_pods,
            containers = n_containers,
            managed = node.cache.len(),
            updates = updates.len(),
            shared = %node.placement.shared_pool(),
            "synchronized"
        );
        drop(node);
        // Freeing the runtime's request and the previous books (tens of MB on a 10,000-container
        // node) is left to a blocking-pool thread, so the reply does not wait for it.
        drop((by_id, states));
        let garbage = (containers, old_sandboxes, old_containers);
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::spawn_blocking(move || drop(garbage));
        }
        Ok(updates)
    }

    /// A container that was still being created at Synchronize now runs: send it the cpuset it
    /// should have again, in case its task started from the spec before our update.
    async fn post_start_container(
        &self,
        _pod: api::PodSandbox,
        ctr: api::Container,
    ) -> PluginResult<()> {
        let _timer = self.metrics.time(event::POST_START_CONTAINER);
        let mut node = self.event_lock();
        if let Some(r) = node.cache.get_mut(&ctr.id) {
            r.set_pid(ctr.pid);
        }
        if !node.cache.start(&ctr.id) {
            return Ok(());
        }
        if let Some(m) = node.cache.get(&ctr.id) {
            tracing::info!(pod = %m.view().pod_ref, container = %ctr.name, cpus = %m.target().cpuset, "started after its cpuset changed: it will be sent again");
        }
        Ok(())
    }

    async fn run_pod_sandbox(&self, pod: api::PodSandbox) -> PluginResult<()> {
        let _timer = self.metrics.time(event::RUN_POD_SANDBOX);
        if nri_view::pod_qos(&pod).is_ok() {
            let mut node = self.event_lock();
            node.sandboxes.insert(pod.id.clone(), pod);
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: api::PodSandbox) -> PluginResult<()> {
        let _timer = self.metrics.time(event::REMOVE_POD_SANDBOX);
        let mut node = self.event_lock();
        let stored = node.sandboxes.remove(&pod.id);
        let sandbox = stored.as_ref().unwrap_or(&pod);
        if nri_view::pod_qos(sandbox).is_err() {
            return Ok(());
        }
        let Some(uid) = nri_view::pod_uid(sandbox) else {
            return Ok(());
        };
        node.refusals.clear_pod(&uid);
        if let Some(sink) = self.events.get() {
            sink.forget(&uid);
        }
        let before = node.cache.left_alone().len();
        node.cache.remove_pod(&uid);
        let forgot = node.cache.left_alone().len() != before;
        if node.placement.release_pod(&uid) {
            tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), shared = %node.placement.shared_pool(), "pod removed: its cpus are back in the shared pool");
            self.persist(&node);
            self.push_shared_pool(&mut node, None);
        } else if forgot {
            self.persist(&node);
        }
        Ok(())
    }

    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> PluginResult<api::CreateContainerResponse> {
        let _timer = self.metrics.time(event::CREATE_CONTAINER);
        let (Some(pod), Some(ctr)) = (req.pod.as_ref(), req.container.as_ref()) else {
            return Err(PluginError::Failed(
                "CreateContainer without pod or container".into(),
            ));
        };
        let view = match nri_view::view(pod, ctr, self.memory_capacity()) {
            Ok(v) => v,
            Err(NoView::Ignored(why)) => {
                tracing::debug!(container = %ctr.name, reason = %why, "not managed");
                return Ok(api::CreateContainerResponse::default());
            }
            Err(NoView::Bad(e)) => {
                let msg = format!("topolet: pod {}/{}: {e}", pod.namespace, pod.name);
                tracing::error!(error = %msg, "container refused");
                return Err(PluginError::Failed(msg));
            }
        };
        if let Some(cpus) = &view.current.cpuset_cpus {
            tracing::warn!(pod = %view.pod_ref, container = %ctr.name, cpus = %cpus, "cpuset already set by the kubelet's cpu manager or an earlier NRI plugin; topolet leaves this container alone");
            let mut node = self.event_lock();
            if node.cache.left_alone_mut().insert(view.key.clone()) {
                self.persist(&node);
            }
            return Ok(api::CreateContainerResponse::default());
        }
        // Before the lock: this may wait (bounded) for the pod watch.
        let input = self.admission_input(pod, &view).await;
        let source = input.source();
        self.metrics.admission_source("create", source.as_str());
        let comparison = match &input {
            AdmissionInput::Api { pod, which } => {
                let c =
                    admission_input::compare(pod, *which, &view.estimate, self.memory_capacity());
                if !c.agrees() {
                    self.metrics.admission_disagreement();
                    tracing::warn!(pod = %view.pod_ref, container = %ctr.name, differences = ?c.differences, "the inversion of this container disagrees with its pod's spec; the spec decides");
                }
                Some(c)
            }
            AdmissionInput::Inversion { .. } => None,
        };
        let decided = Decided {
            source,
            fallback: input.fallback(),
            comparison,
        };
        let mut node = self.event_lock();
        let floor = node.oom_floor.unwrap_or(0);
        let decision = match node.placement.admit_input(&input, floor) {
            Ok(d) => d,
            Err(e) => {
                let msg = node.placement.refusal_message_input(&input, &e);
                self.metrics.refused("create", metrics::refusal_reason(&e));
                self.log_refusal(&mut node, "create", source, &view, &msg);
                self.refusal_event(&view, &e, &msg);
                return Err(PluginError::Failed(msg));
            }
        };
        node.refusals.clear("create", &view.key);
        let (adjust, conflicts) = nri_adjust::adjustment(&view, &decision);
        for conflict in conflicts {
            tracing::warn!(pod = %view.pod_ref, container = %ctr.name, conflict = %conflict, "field already set by the kubelet or an earlier NRI plugin; left as is");
        }
        tracing::info!(
            pod = %view.pod_ref,
            container = %ctr.name,
            qos = %view.qos,
            exclusive = decision.exclusive,
            cpus = %decision.cpuset,
            mems = %decision.mems,
            reason = %decision.reason,
            source = source.as_str(),
            fallback = decided.fallback.map(Fallback::as_str).unwrap_or("none"),
            oom_score_adj = decision.oom_score_adj,
            "container placed"
        );
        let exclusive = decision.exclusive;
        self.metrics.admitted(view.qos.as_str(), exclusive);
        if exclusive {
            self.grant_event(&view, &decision, false);
        }
        // Every assignment is persisted, not only exclusive CPUs: a shared container's pinned
        // memory, devices and NUMA affinity are books the memory manager and the device
        // hints must find again after a restart.
        let holds = exclusive
            || decision.memory_pinned
            || decision.numa_affinity.is_some()
            || !decision.devices.is_empty();
        let uid = view.key.pod_uid.clone();
        node.cache.insert(
            &ctr.id,
            Record::new(view, decided, decision, Lifecycle::Created),
        );
        if holds {
            self.persist(&node);
        }
        if exclusive {
            self.unlimit_pod(&node, &uid);
            self.push_shared_pool(&mut node, Some(&ctr.id));
        }
        let update = self.reply_updates(&mut node, &ctr.id);
        Ok(api::CreateContainerResponse {
            adjust: protobuf::MessageField::some(adjust),
            update,
            ..Default::default()
        })
    }

    async fn update_container(
        &self,
        req: api::UpdateContainerRequest,
    ) -> PluginResult<api::UpdateContainerResponse> {
        let _timer = self.metrics.time(event::UPDATE_CONTAINER);
        let Some(ctr) = req.container.as_ref() else {
            return Ok(api::UpdateContainerResponse::default());
        };
        let mut node = self.event_lock();
        let Some(m) = node.cache.get(&ctr.id).cloned() else {
            return Ok(api::UpdateContainerResponse::default());
        };
        let view = nri_view::with_resources(
            m.view(),
            req.linux_resources.as_ref(),
            self.memory_capacity(),
        );
        let floor = node.oom_floor.unwrap_or(0);
        let uid = m.view().key.pod_uid.clone();
        // A resize decides from the runtime's new values (exact; the watch may not have the
        // resized spec yet when the kubelet acts on it).
        self.metrics
            .admission_source("resize", Source::Inversion.as_str());
        let decision = match node.placement.resize_nri(&view.estimate, floor) {
            Ok(d) => d,
            Err(e) => {
                let msg = node.placement.refusal_message_nri(&view.estimate, &e, true);
                self.metrics.refused("resize", metrics::refusal_reason(&e));
                self.log_refusal(&mut node, "resize", Source::Inversion, &view, &msg);
                self.refusal_event(&view, &e, &msg);
                // The kubelet resized the pod cgroup before asking: put it back to what the
                // containers run with (where it holds exactly the refused request's values).
                let exclusive = node.cache.pod(&uid).any(|(_, o)| o.target().exclusive);
                let enforce = !(exclusive && node.placement.disables_exclusive_quota());
                let refused = pod_cpu_of(&node, &uid, Some(&view), true);
                let restore = pod_cpu_of(&node, &uid, None, enforce);
                if let (Some(refused), Some(restore)) = (refused, restore) {
                    if refused != restore {
                        self.pod_cgroups().submit(Work::Revert {
                            pod: m.view().pod_ref.clone(),
                            cgroup_parent: m.view().cgroup_parent.clone(),
                            refused,
                            restore,
                        });
                    }
                }
                return Err(PluginError::Failed(msg));
            }
        };
        node.refusals.clear("resize", &view.key);
        let mut decision = decision;
        let before = m.target();
        decision.mems = widened(before.mems, decision.mems, node.placement.all_mems());
        let changed_pool =
            decision.exclusive != before.exclusive || decision.cpuset != before.cpuset;
        tracing::info!(pod = %m.view().pod_ref, container = %ctr.name, cpus = %decision.cpuset, exclusive = decision.exclusive, source = Source::Inversion.as_str(), "container resized");
        if decision.exclusive && changed_pool {
            self.grant_event(&view, &decision, true);
        }
        let own = nri_adjust::resize_update(&view, &decision);
        let (pod_ref, cgroup_parent) = (view.pod_ref.clone(), view.cgroup_parent.clone());
        let left_exclusive = before.exclusive && !decision.exclusive;
        if let Some(r) = node.cache.get_mut(&ctr.id) {
            r.set_view(view);
            r.retarget(|t| *t = decision);
        }
        // The kubelet rewrote the pod cgroup's quota for the new size: unlimited again while
        // the pod holds exclusive CPUs; the kubelet's once its last exclusive container left.
        let pod_exclusive = node.cache.pod(&uid).any(|(_, o)| o.target().exclusive);
        if pod_exclusive {
            self.unlimit_pod(&node, &uid);
        } else if left_exclusive && node.placement.disables_exclusive_quota() {
            if let Some(quota) = pod_cpu_of(&node, &uid, None, true).and_then(|p| p.quota) {
                self.pod_cgroups().submit(Work::Relimit {
                    pod: pod_ref,
                    cgroup_parent,
                    quota,
                });
            }
        }
        if changed_pool {
            self.persist(&node);
            self.push_shared_pool(&mut node, Some(&ctr.id));
        }
        // The others first: containerd takes the last update as the resized container's own.
        let mut update = self.reply_updates(&mut node, &ctr.id);
        update.push(own);
        Ok(api::UpdateContainerResponse {
            update,
            ..Default::default()
        })
    }

    async fn stop_container(
        &self,
        _pod: api::PodSandbox,
        ctr: api::Container,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        let _timer = self.metrics.time(event::STOP_CONTAINER);
        let mut node = self.event_lock();
        // It leaves the update set now (`shell::container_cache`).
        node.cache.stop(&ctr.id);
        self.release(&mut node, &ctr.id, "stopped");
        Ok(self.reply_updates(&mut node, &ctr.id))
    }

    async fn remove_container(
        &self,
        _pod: api::PodSandbox,
        ctr: api::Container,
    ) -> PluginResult<()> {
        let _timer = self.metrics.time(event::REMOVE_CONTAINER);
        let mut node = self.event_lock();
        self.release(&mut node, &ctr.id, "removed");
        node.cache.remove(&ctr.id);
        Ok(())
    }
}

impl TopoletPlugin {
    /// Returns a stopped or removed container's exclusive resources (idempotent: a second call,
    /// or a call for a container we never saw, changes nothing).
    fn release(&self, node: &mut Node, id: &str, what: &str) {
        let Some(key) = node.cache.get(id).map(|m| m.view().key.clone()) else {
            return;
        };
        // A restarted container (same pod and name, new id) inherits the key's resources: the
        // old instance's late stop or removal must not take them from the new one.
        if node.cache.has_successor(id) {
            if let Some(m) = node.cache.get_mut(id) {
                m.retarget(|t| t.exclusive = false);
            }
            return;
        }
        if node.placement.release(&key) {
            if let Some(m) = node.cache.get_mut(id) {
                m.retarget(|t| t.exclusive = false);
            }
            tracing::info!(container = %key, shared = %node.placement.shared_pool(), "container {what}: exclusive cpus released");
            self.persist(node);
            self.push_shared_pool(node, Some(id));
        }
    }
}

/// A Kubernetes pod topolet manages, as NRI described it (for the eviction loop).
#[derive(Debug, Clone)]
pub struct ManagedPod {
    /// The runtime's sandbox id.
    pub sandbox_id: String,
    /// The sandbox's cgroup parent: the pod cgroup.
    pub cgroup_parent: String,
    pub qos: crate::core::qos::QosClass,
    /// Namespace, name, uid, static/mirror from the sandbox's annotations, and each managed
    /// container with its requests and limits as estimated from its cgroup values (priority is
    /// not knowable from NRI: `None`).
    pub pod: crate::core::pod::Pod,
    /// containerd ids of the pod's managed containers, in the order of `pod.containers`.
    pub container_ids: Vec<String>,
}

impl TopoletPlugin {
    /// Every Kubernetes pod sandbox topolet knows from NRI, with its managed containers. A
    /// read-only snapshot: nothing in the plugin changes.
    pub fn managed_pods(&self) -> Vec<ManagedPod> {
        let node = self.lock();
        let mut out: Vec<ManagedPod> = Vec::new();
        for (id, sb) in &node.sandboxes {
            let Ok(info) = nri_view::pod_qos(sb) else {
                continue;
            };
            let uid = nri_view::pod_uid(sb).unwrap_or_else(|| info.pod_uid.clone());
            let static_or_mirror = crate::core::pod::is_static_or_mirror(|k| {
                sb.annotations.get(k).map(String::as_str)
            });
            let ids: Vec<&String> = node.cache.pod_ids(&uid).collect();
            let containers = node
                .cache
                .pod(&uid)
                .map(|(_, m)| m.view().container().clone())
                .collect();
            // The real priority when the pod watch holds the pod (never waits).
            let (priority, priority_class_name) = match self.pods.get().map(|(d, _)| d.get(&uid)) {
                Some(Lookup::Found(p)) => (p.priority, p.priority_class_name.clone()),
                _ => (None, None),
            };
            out.push(ManagedPod {
                sandbox_id: id.clone(),
                cgroup_parent: sb
                    .linux
                    .as_ref()
                    .map(|l| l.cgroup_parent.clone())
                    .unwrap_or_default(),
                qos: info.qos,
                pod: crate::core::pod::Pod {
                    namespace: sb.namespace.clone(),
                    name: sb.name.clone(),
                    uid,
                    priority,
                    priority_class_name,
                    static_or_mirror,
                    init_containers: Vec::new(),
                    containers,
                    resources: None,
                    termination_grace_period_seconds: None,
                },
                container_ids: ids.into_iter().cloned().collect(),
            });
        }
        out.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
        out
    }
}

/// Introspection (`shell::introspection`: the admin socket and `/metrics`).
impl TopoletPlugin {
    /// The metrics registry; other loops (eviction) report through it too.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Signalled when the placement's books may have changed (`shell::nrt`).
    pub fn books_changed(&self) -> Arc<tokio::sync::Notify> {
        self.books_changed.clone()
    }

    /// The memory manager's and device provider's books per NUMA node (under the lock).
    pub fn books(&self) -> crate::core::nrt::Books {
        self.lock().placement.books()
    }

    /// `[topology] max_allowable_numa_nodes` in effect.
    pub fn max_allowable_numa_nodes(&self) -> usize {
        self.config.get().topology.max_allowable_numa_nodes
    }

    /// The stub's connection status, once attached.
    pub fn connection(&self) -> Option<ConnectionStatus> {
        self.status.get().map(|s| s.borrow().clone())
    }

    /// Copies of the placement's sets, taken under the lock (no formatting, no I/O), and the
    /// policies in effect.
    pub fn snapshot(&self) -> (Snapshot, Policies) {
        let node = self.lock();
        let p = &node.placement;
        // containerd id, pod and mems of each key, preferring the instance holding the cpus.
        let mut known: HashMap<&ContainerKey, (&str, &str, Option<NumaMask>)> = HashMap::new();
        for (id, m) in node.cache.iter() {
            let entry = (
                id.as_str(),
                m.view().pod_ref.as_str(),
                Some(m.target().mems),
            );
            if m.target().exclusive || !known.contains_key(&m.view().key) {
                known.insert(&m.view().key, entry);
            }
        }
        let exclusive = p
            .exclusive()
            .iter()
            .map(|(key, cpus)| {
                let k = known.get(key);
                ExclusiveInput {
                    key: key.clone(),
                    pod_ref: k.map(|k| k.1.to_string()),
                    id: k.map(|k| k.0.to_string()),
                    cpus: cpus.clone(),
                    mems: k.and_then(|k| k.2),
                }
            })
            .collect();
        let snapshot = Snapshot {
            reserved: p.reserved().clone(),
            shared: p.shared_pool(),
            shared_mems: p.shared_mems_effective(),
            assignable: p.cpu.assignable(),
            exclusive,
            free: p.free_per_node(),
            managed: node.cache.len(),
            left_alone: node.cache.left_alone().len(),
            admissions: admission_records(&node),
        };
        drop(node);
        let c = self.config.get();
        let policies = Policies {
            cpu: c.cpu.policy.as_str().into(),
            topology: c.topology.policy.as_str().into(),
            topology_scope: c.topology.scope.as_str().into(),
            memory: c.memory.policy.as_str().into(),
        };
        (snapshot, policies)
    }
}

#[cfg(test)]
mod tests;
