//! The NRI plugin: `TopoletPlugin`, the state it guards (`PluginState`: the placement, the
//! container records, the sandboxes) and the `Plugin` implementation the stub calls, which only delegates to
//! the pieces below. One concept per file:
//!
//! - `configure`: a new connection (Configure): the oom_score_adj floor, the outbox's quiet time;
//! - `synchronize`: Synchronize, the runtime's view taken as the truth (restart, reconnect);
//! - `admission`: CreateContainer, and what admission works from (the pod's spec or the NRI
//!   inversion);
//! - `resize`: UpdateContainer (in-place resize);
//! - `adopt`: a container first seen after Synchronize, at PostStartContainer or UpdateContainer
//!   (a runtime that does not block plugin synchronization while it creates one: CRI-O);
//! - `lifecycle`: RunPodSandbox, PostStartContainer, StopContainer, RemoveContainer,
//!   RemovePodSandbox, and the release of what a container held;
//! - `updates`: what reaches the other containers: shared-pool changes, the updates carried in
//!   replies and the unsolicited UpdateContainers, retried with back-off for ever;
//! - `background`: the task that sends the unsolicited updates and runs the checks below when
//!   they are due (`crate::nri::schedule`), woken by a change of the records, never on a tick;
//! - `breach`: the exclusive-CPU breaches the background task measures (`topolet_core::placement::breach`): the
//!   containers the runtime may still run on CPUs another container holds exclusively;
//! - `drift`: what the running containers' processes actually use against their targets (the
//!   post-restart verification, the drift check);
//! - `pod_quota`: the pod cgroup's CPU values (the kubelet's quota rules for exclusive CPUs);
//! - `reclaimed`: batch containers (reclaimed CPU): their cpuset and their share of the suppress
//!   loop's budget as a CFS quota;
//! - `persistence`: the state file (loading, the writer, the exit's last write);
//! - `reload`: a new configuration for the running placement;
//! - `k8s_events`: the Events on pods and on the Node, and the refusal log;
//! - `views`: read-only views for eviction, status and the NodeResourceTopology.
//!
//! Every handler is short: it builds the NRI view (`crate::nri::view`), asks `topolet_core::placement`
//! for a decision, records it in the container records (`crate::nri::records`: one record per
//! container with its lifecycle, target and generation; it decides what a reply or an
//! unsolicited update may carry), hands the assignments to the state-file writer
//! (`crate::state::persister`: written and fsynced on its own thread, never waited for) and renders
//! the reply (`crate::nri::adjust`). The configuration in effect is `crate::config::effective`.
//! Shared-pool changes reach the other containers in the reply to the event that caused them
//! (CreateContainer, UpdateContainer and StopContainer replies carry updates), or, when the
//! event's reply cannot (RemoveContainer, RemovePodSandbox, PostStartContainer, a reload), in
//! the next reply that can or in one unsolicited UpdateContainers once the runtime is quiet —
//! never during activity: see `crate::nri::outbox` for the containerd deadlock that rule
//! avoids. Nothing is ever awaited inside a handler (containerd holds its NRI lock while it
//! calls us).
//!
//! Restart and reconnect: on every Synchronize the runtime's view is the truth. Exclusive sets
//! are restored from the containers' actual cpusets (assignments from the state file only break
//! ties), stale assignments are dropped, and every container whose cpuset differs from its
//! target gets an update in the Synchronize reply.

mod admission;
mod adopt;
mod background;
mod breach;
mod configure;
mod drift;
mod k8s_events;
mod lifecycle;
mod persistence;
mod pod_quota;
mod reclaimed;
mod reload;
mod resize;
mod synchronize;
mod updates;
mod views;

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::watch;
use topolet_nri::api;
use topolet_nri::api::Event;
use topolet_nri::events::EventMask;
use topolet_nri::plugin::{Plugin, PluginResult, RuntimeInfo};
use topolet_nri::stub::ConnectionStatus;
use topolet_nri::updater::ContainerUpdater;
use topolet_nri::ContainerFields;

use crate::cluster::pod_directory::PodDirectory;
use crate::cluster::recorder::EventSink;
use crate::config::effective::EffectiveConfig;
use crate::config::Config;
use crate::host::pod_cgroup;
use crate::nri::records::ContainerRecords;
use crate::nri::schedule::Wakeup;
use crate::state::persister::Persister;
use crate::telemetry::metrics::{event, Metrics};
use crate::telemetry::refusal_log::RefusalLog;
use topolet_core::machine::topology::Topology;
use topolet_core::placement::Placement;

pub use drift::DRIFT_LULL;
pub use k8s_events::GRANT_REASON;
pub use persistence::{SHUTDOWN_FLUSH, STATE_FILE};
pub use reclaimed::{BatchEntry, BatchPodView, ReclaimedInputs};
pub use views::{CpuSets, ManagedPod};

use persistence::load_state;

/// What the plugin's lock guards: the placement and everything it decided per container.
struct PluginState {
    placement: Placement,
    /// Every managed container, the updates waiting for them, the containers left alone
    /// (`crate::nri::records`).
    records: ContainerRecords,
    /// Kubernetes pod sandboxes by id: their uids for RemovePodSandbox, and the eviction loop's
    /// pods ([`TopoletPlugin::managed_pods`]).
    sandboxes: HashMap<String, api::PodSandbox>,
    oom_floor: Option<i32>,
    /// The last refusal of each container, so that the kubelet's retries are not all logged.
    refusals: RefusalLog,
    /// The exclusive-CPU breaches over time (`breach`).
    breaches: topolet_core::placement::breach::Ledger,
    /// The batch containers and their grants (`reclaimed`).
    batch: reclaimed::BatchBook,
    /// The connected runtime's NRI version (`None`: unknown, or not configured yet): what its
    /// container adjustments can carry.
    runtime_nri: Option<topolet_nri::version::NriVersion>,
}

/// The topolet NRI plugin.
pub struct TopoletPlugin {
    /// The configuration in effect (`crate::config::effective`): reload swaps it.
    config: EffectiveConfig,
    topology: Topology,
    node: Mutex<PluginState>,
    updater: OnceLock<ContainerUpdater>,
    status: OnceLock<watch::Receiver<ConnectionStatus>>,
    state_path: PathBuf,
    background_started: AtomicBool,
    /// Pokes the background task (`background`) when the records may have changed.
    wake: Arc<Wakeup>,
    /// The state file's writer (`crate::state::persister`), started at the first write: handlers hand
    /// it a snapshot and return; it writes outside every lock and retries failures.
    persister: OnceLock<Persister>,
    /// Where process information lives (`/proc`; a fake tree in tests).
    proc_root: PathBuf,
    /// Where `/sys` is seen (`--sysfs-root`): cgroup mount points under `/sys` are read there.
    sysfs_root: PathBuf,
    /// The pod cgroup writer, started at its first use.
    pod_cgroups: OnceLock<pod_cgroup::Writer>,
    /// Where batch containers' quotas are written directly, found (in `mountinfo`) at the first
    /// cut that finds it, not at every cut.
    container_quota: OnceLock<crate::host::container_quota::ContainerQuota>,
    metrics: Arc<Metrics>,
    /// Events on pods (`crate::cluster::recorder`), when the API client is on: a non-blocking hand-off.
    events: OnceLock<EventSink>,
    /// Signalled whenever the placement's books may have changed (`crate::cluster::nrt` publishes them):
    /// never blocks, coalesces.
    books_changed: Arc<tokio::sync::Notify>,
    /// Signalled when a reload put a new configuration in effect (the reclaimed-CPU loop, off,
    /// sleeps until then).
    config_changed: Arc<tokio::sync::Notify>,
    /// This node's pods from the API (`crate::cluster::pod_directory`) and `[kubernetes] pod_wait_ms`,
    /// when the API client is on.
    pods: OnceLock<(PodDirectory, Duration)>,
    /// The kubelet's PodResources API (`crate::kubelet::pod_resources`), when `[kubelet]
    /// pod_resources` is on: a source of each container's devices.
    pod_resources: OnceLock<crate::kubelet::pod_resources::PodResourcesSource>,
    /// This node's DRA ResourceSlices (`crate::cluster::resource_slices`), when the API client
    /// is on: the NUMA nodes of the DRA devices the PodResources answer names.
    resource_slices: OnceLock<crate::cluster::resource_slices::ResourceSlices>,
    /// The kubelet's device-plugin devices per NUMA node (`crate::kubelet::inventory`), as last
    /// read, for the NodeResourceTopology.
    device_inventory: Mutex<Option<topolet_core::report::device_inventory::DeviceInventory>>,
    /// The PodResources re-export's state (`crate::kubelet::reexport`), when it is configured.
    pod_resources_export: Mutex<Option<topolet_core::report::status::PodResourcesExportStatus>>,
    /// How many containers were in exclusive-CPU breach at the background task's last observation
    /// (`breach`).
    breaching: watch::Sender<usize>,
    /// The reclaimed-CPU loop's last report (`crate::reclaimed`), for `topolet status` and the
    /// NodeResourceTopology.
    reclaimed_report: Mutex<Option<topolet_core::reclaimed::ReclaimedStatus>>,
}

impl TopoletPlugin {
    /// Builds the placement from `config` and `topology` and loads the persisted assignments (a
    /// bad state file is reported, moved aside and rebuilt at the next Synchronize).
    pub fn new(config: Config, topology: Topology) -> anyhow::Result<TopoletPlugin> {
        // NUMA masks hold ids below 64: a larger id would silently give empty mems.
        if let Some(id) = topology
            .numa_ids()
            .find(|&id| id >= topolet_core::managers::topology::hints::MAX_NUMA_ID)
        {
            anyhow::bail!(
                "machine: NUMA node {id} (sysfs node{id}): topolet handles NUMA node ids below {}",
                topolet_core::managers::topology::hints::MAX_NUMA_ID
            );
        }
        let (placement, warnings) = Placement::new(&topology, &config.placement()?)?;
        for w in warnings {
            tracing::warn!(warning = %w, "configuration");
        }
        let state_path = config.state.dir.join(STATE_FILE);
        let mut node = PluginState {
            placement,
            records: ContainerRecords::new(Instant::now()),
            sandboxes: HashMap::new(),
            oom_floor: config.qos.oom_score_adj_floor,
            refusals: RefusalLog::default(),
            breaches: topolet_core::placement::breach::Ledger::new(),
            batch: reclaimed::BatchBook::default(),
            runtime_nri: None,
        };
        load_state(&mut node, &state_path);
        Ok(TopoletPlugin {
            config: EffectiveConfig::new(config),
            topology,
            node: Mutex::new(node),
            updater: OnceLock::new(),
            status: OnceLock::new(),
            state_path,
            background_started: AtomicBool::new(false),
            wake: Arc::new(Wakeup::default()),
            persister: OnceLock::new(),
            proc_root: PathBuf::from("/proc"),
            sysfs_root: PathBuf::from("/sys"),
            pod_cgroups: OnceLock::new(),
            container_quota: OnceLock::new(),
            metrics: Arc::new(Metrics::new()),
            events: OnceLock::new(),
            books_changed: Arc::new(tokio::sync::Notify::new()),
            config_changed: Arc::new(tokio::sync::Notify::new()),
            pods: OnceLock::new(),
            pod_resources: OnceLock::new(),
            resource_slices: OnceLock::new(),
            pod_resources_export: Mutex::new(None),
            device_inventory: Mutex::new(None),
            breaching: watch::Sender::new(0),
            reclaimed_report: Mutex::new(None),
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

    /// Sends Events on pods through `sink` from now on (the Kubernetes API client is on).
    pub fn set_event_sink(&self, sink: EventSink) {
        let _ = self.events.set(sink);
    }

    /// Admits containers from their pods' specs in `pods` from now on, waiting at most `wait`
    /// for a pod it does not hold yet (`crate::cluster::pod_directory`).
    pub fn set_pod_directory(&self, pods: PodDirectory, wait: Duration) {
        let _ = self.pods.set((pods, wait));
    }

    /// Asks the kubelet's PodResources API for each container's devices from now on.
    pub fn set_pod_resources(&self, source: crate::kubelet::pod_resources::PodResourcesSource) {
        let _ = self.pod_resources.set(source);
    }

    /// Resolves DRA devices' NUMA nodes through this node's ResourceSlices from now on.
    pub fn set_resource_slices(&self, slices: crate::cluster::resource_slices::ResourceSlices) {
        let _ = self.resource_slices.set(slices);
    }

    /// Reads the kubelet's device-plugin devices per NUMA node again (its PodResources API, when
    /// that source is on) and, when they changed, keeps them and signals the NodeResourceTopology
    /// publisher. A failed read keeps the last inventory (and logs at debug: the source's own
    /// status line says when the kubelet does not answer).
    pub async fn refresh_device_inventory(&self) {
        let Some(source) = self.pod_resources.get() else {
            return;
        };
        match source.device_inventory().await {
            Ok(Some(inventory)) => {
                let mut last = self
                    .device_inventory
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if last.as_ref() != Some(&inventory) {
                    *last = Some(inventory);
                    drop(last);
                    self.books_changed.notify_one();
                }
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "the kubelet's device inventory was not read"),
        }
    }

    /// The kubelet's device-plugin devices per NUMA node, as last read.
    pub fn device_inventory(
        &self,
    ) -> Option<topolet_core::report::device_inventory::DeviceInventory> {
        self.device_inventory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records the PodResources re-export's state, for `topolet status`.
    pub fn set_pod_resources_export(
        &self,
        state: topolet_core::report::status::PodResourcesExportStatus,
    ) {
        *self
            .pod_resources_export
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(state);
    }

    /// The PodResources re-export's state, when it is configured.
    pub fn pod_resources_export_status(
        &self,
    ) -> Option<topolet_core::report::status::PodResourcesExportStatus> {
        self.pod_resources_export
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The PodResources source's status line, when it is on.
    pub fn pod_resources_status(&self) -> Option<topolet_core::report::status::PodResourcesStatus> {
        self.pod_resources.get().map(|s| s.status())
    }

    /// The configuration in effect (the start-up one until a reload succeeds).
    pub fn config(&self) -> Arc<Config> {
        self.config.get()
    }

    /// Locks the node to change it: as the lock is released, the background task is poked
    /// (what is due may have changed: `background`).
    fn lock(&self) -> NodeGuard<'_> {
        NodeGuard {
            guard: ManuallyDrop::new(self.quiet_lock()),
            wake: &self.wake,
        }
    }

    /// Locks the node without poking the background task: for reads, and for the background
    /// task's own work (it computes what is due next itself).
    fn quiet_lock(&self) -> MutexGuard<'_, PluginState> {
        // A panic inside a handler must not wedge every later event: the lock is taken back, and
        // the placement's invariants are checked before anything is served from it again.
        match self.node.lock() {
            Ok(node) => node,
            Err(poisoned) => {
                let node = poisoned.into_inner();
                self.node.clear_poison();
                if let Err(e) = after_panic(&node) {
                    // The books no longer add up: serving from them could hand one CPU to two
                    // containers. Exit; the restart rebuilds them from the state file and the
                    // runtime's Synchronize (running containers keep their cpusets meanwhile).
                    tracing::error!(error = %e, "a handler panicked holding the node's lock and left the placement inconsistent; exiting so that the restart rebuilds it");
                    std::process::exit(70);
                }
                tracing::error!("a handler panicked holding the node's lock; the placement's invariants hold: serving on");
                node
            }
        }
    }

    /// Locks the node for an event handler: the runtime is busy now.
    fn event_lock(&self) -> NodeGuard<'_> {
        let mut node = self.lock();
        node.records.event(Instant::now());
        node
    }

    fn memory_capacity(&self) -> u64 {
        self.topology.memory_capacity()
    }
}

/// The node locked to be changed ([`TopoletPlugin::lock`]): releasing it pokes the background
/// task, after the lock itself is released.
struct NodeGuard<'a> {
    guard: ManuallyDrop<MutexGuard<'a, PluginState>>,
    wake: &'a Wakeup,
}

impl Deref for NodeGuard<'_> {
    type Target = PluginState;
    fn deref(&self) -> &PluginState {
        &self.guard
    }
}

impl DerefMut for NodeGuard<'_> {
    fn deref_mut(&mut self) -> &mut PluginState {
        &mut self.guard
    }
}

impl Drop for NodeGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the guard is dropped once, here, and never used after.
        unsafe { ManuallyDrop::drop(&mut self.guard) };
        self.wake.poke();
    }
}

impl Drop for TopoletPlugin {
    /// Ends the background task.
    fn drop(&mut self) {
        self.wake.close();
    }
}

/// Each handler times its `on_<event>`, which borrows the request: the request is freed after the
/// timer stops, so `topolet_nri_event_duration_seconds` is the handling alone, as it was before
/// the handlers were split out (freeing a container's labels, annotations, mounts and env is a
/// few microseconds, more than most events' handling).
#[async_trait]
impl Plugin for TopoletPlugin {
    /// Topolet reads a container's identity, state, labels, annotations, Linux resources, cgroup
    /// path and pid; never its command, environment, mounts, hooks or rlimits (a third of a
    /// 10,000-container Synchronize).
    fn synchronize_skips(&self) -> ContainerFields {
        ContainerFields::ARGS
            | ContainerFields::ENV
            | ContainerFields::MOUNTS
            | ContainerFields::HOOKS
            | ContainerFields::RLIMITS
    }

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
        self.on_configure(req, runtime)
    }

    async fn synchronize(
        &self,
        pods: Vec<api::PodSandbox>,
        containers: Vec<api::Container>,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        let _timer = self.metrics.time(event::SYNCHRONIZE);
        // The kubelet's PodResources `List`, in a task of its own (Synchronize never waits for
        // it), asked again until it answers.
        if let Some(source) = self.pod_resources.get() {
            let source = source.clone();
            tokio::spawn(async move { source.list_until_answered().await });
        }
        self.on_synchronize(pods, containers)
    }

    async fn post_start_container(
        &self,
        pod: api::PodSandbox,
        ctr: api::Container,
    ) -> PluginResult<()> {
        let _timer = self.metrics.time(event::POST_START_CONTAINER);
        self.on_post_start_container(&pod, &ctr)
    }

    async fn run_pod_sandbox(&self, pod: api::PodSandbox) -> PluginResult<()> {
        let _timer = self.metrics.time(event::RUN_POD_SANDBOX);
        self.on_run_pod_sandbox(pod)
    }

    async fn remove_pod_sandbox(&self, pod: api::PodSandbox) -> PluginResult<()> {
        let _timer = self.metrics.time(event::REMOVE_POD_SANDBOX);
        self.on_remove_pod_sandbox(&pod)
    }

    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> PluginResult<api::CreateContainerResponse> {
        let _timer = self.metrics.time(event::CREATE_CONTAINER);
        self.on_create_container(&req).await
    }

    async fn update_container(
        &self,
        req: api::UpdateContainerRequest,
    ) -> PluginResult<api::UpdateContainerResponse> {
        let _timer = self.metrics.time(event::UPDATE_CONTAINER);
        self.on_update_container(&req)
    }

    async fn stop_container(
        &self,
        _pod: api::PodSandbox,
        ctr: api::Container,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        let _timer = self.metrics.time(event::STOP_CONTAINER);
        self.on_stop_container(&ctr)
    }

    async fn remove_container(
        &self,
        _pod: api::PodSandbox,
        ctr: api::Container,
    ) -> PluginResult<()> {
        let _timer = self.metrics.time(event::REMOVE_CONTAINER);
        self.on_remove_container(&ctr)
    }
}

#[cfg(test)]
mod reclaimed_tests;
#[cfg(test)]
mod tests;

/// After a handler panicked holding the node's lock: `Ok` when the placement's invariants still
/// hold (every exclusive CPU held once, the pools disjoint, memory books balanced).
fn after_panic(node: &PluginState) -> Result<(), topolet_core::placement::PlacementError> {
    node.placement.check_invariants()
}
