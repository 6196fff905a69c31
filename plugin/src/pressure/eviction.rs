//! The node-pressure eviction loop of `topolet run`: a task separate from the NRI handlers that,
//! every `[eviction] interval`, observes the node's signals, asks the pure core what to do
//! (pressure tracking, thresholds, ranking of the pods NRI told us about) and evicts at most one
//! pod through the configured [`Evictor`].
//!
//! With the Kubernetes API client on, when a threshold is met the loop also asks the API for
//! the facts NRI cannot give ([`PodFacts`]: priority, grace period, static/mirror, requests,
//! terminating) and ranks with them; it walks the candidates in order, skipping one whose
//! PodDisruptionBudget refuses (the API server's 429) and evicting the first accepted one —
//! at most [`MAX_ATTEMPTS_PER_INTERVAL`] requests, then the next interval decides again. After
//! an eviction it waits, as the kubelet's `waitForPodsCleanup` does, until the evicted pod has
//! no process left (or [`POD_CLEANUP_TIMEOUT`]) before evicting another: a pod that is still
//! terminating still holds what it used. Each eviction is a Warning Event `Evicted` on the pod
//! with the kubelet's message; every interval's node conditions go to `crate::cluster::node_status`.
//!
//! Safety rules:
//! - Only Kubernetes pods topolet manages (known from NRI, with a kubelet pod cgroup) are
//!   candidates; sandboxes of other containerd clients are never touched.
//! - The loop never takes the plugin down: an unreadable signal is logged and the others are
//!   evaluated; a failed eviction is logged and counted and the next interval decides again; a
//!   panic inside an iteration is caught and logged.
//! - The loop never holds up an NRI request: every cgroup, `/proc` and filesystem read and every
//!   directory walk of an interval runs on the runtime's blocking pool ([`off_runtime`]); the
//!   runtime's worker, which carries the NRI socket and the handlers, only awaits it.
//! - Eviction is opt-in on a node without the API: the default action is then `dry-run`; with
//!   the Kubernetes API client on it is `api` (the kubelet's own eviction, done the way an agent
//!   beside it must).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::client::EventSink;
use crate::cluster::node_status::{NodeReport, ReportSender};
use crate::nri::handlers::{ManagedPod, TopoletPlugin};
use crate::pressure::actions::{EvictPod, Evicted, Evictor};
use crate::pressure::cri::CriClient;
use crate::pressure::pod_facts::{overlay, FactsByUid, PodFacts};
use crate::pressure::psi::{self, PressureByResource};
use crate::pressure::reclaim::{NodeReclaim, Reclaimed};
use crate::pressure::signals::{dir_usage, DirUsage, NodeStats, SignalSources};
use crate::pressure::PressureReport;
use crate::telemetry::metrics::Metrics;
use topolet_core::eviction::message::{eviction_message, ContainerUsage};
use topolet_core::eviction::node_status;
use topolet_core::eviction::reclaim::{
    free_disk_space_failed_message, reclaim_steps, still_under_pressure, Need,
};
use topolet_core::eviction::{
    batch_first, candidates, decide, Candidate, EvictionAction, EvictionConfig, NodeCondition,
    Observations, PodUsage, PressureTracker, Signal, SignalObservation, SignalResource, Threshold,
    Timestamp, UsageByPod,
};
use topolet_core::kube::events::{EventType, ObjectRef, Occurrence};
use topolet_core::kube::pod::Pod;
use topolet_core::report::status::{
    NodeReclaim as StatusReclaim, Pressure as StatusPressure, Signal as StatusSignal, Stall,
};

/// Most directory entries walked per container when measuring disk usage.
pub const DISK_WALK_LIMIT: u64 = 200_000;
/// Most eviction requests per interval (candidates whose PodDisruptionBudget refuses are
/// skipped; the next interval starts again from the best one).
pub const MAX_ATTEMPTS_PER_INTERVAL: usize = 5;
/// How long an evicted pod may keep processes before the loop evicts another (the kubelet's
/// `podCleanupTimeout`).
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The reason of the pod's Event (the kubelet's `eviction.Reason`).
pub const EVICTED_REASON: &str = "Evicted";

/// Where the loop learns which pods exist: the NRI plugin on a node, a fixed list in tests.
pub trait PodSource: Send + Sync {
    fn managed_pods(&self) -> Vec<ManagedPod>;
}

impl PodSource for TopoletPlugin {
    fn managed_pods(&self) -> Vec<ManagedPod> {
        TopoletPlugin::managed_pods(self)
    }
}

fn pod_ref(p: &ManagedPod) -> String {
    format!("{}/{}", p.pod.namespace, p.pod.name)
}

/// Measured usage of one pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeasuredUsage {
    pub memory_working_set: u64,
    pub processes: u64,
    /// Writable layers + logs (only measured when a disk signal needs ranking).
    pub disk: DirUsage,
}

/// Counters of the loop, for logs now and metrics later.
#[derive(Debug, Default)]
pub struct EvictionStats {
    inner: Mutex<StatsInner>,
}

/// A copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsInner {
    pub iterations: u64,
    /// Evictions carried out (or, in dry run, decided), by signal.
    pub evictions: BTreeMap<String, u64>,
    /// Evictions that failed, by signal.
    pub failures: BTreeMap<String, u64>,
    /// Signals that could not be read, by signal.
    pub observe_errors: BTreeMap<String, u64>,
    /// Iterations that panicked (caught).
    pub panics: u64,
    /// CPU time (user + system) the loop's iterations used, summed.
    pub cpu: Duration,
    /// Wall time of the iterations, summed.
    pub wall: Duration,
}

impl EvictionStats {
    fn with<R>(&self, f: impl FnOnce(&mut StatsInner) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsInner {
        self.with(|s| s.clone())
    }
}

/// Runs `f` (file reads, directory walks) on the runtime's blocking pool and waits for it: the
/// eviction loop's observation never runs on a runtime worker, which also carries the NRI socket
/// and every handler (a 200,000-entry walk or a stalled cgroup read would otherwise hold each
/// NRI request behind it, past containerd's 2 s deadline). A panic in `f` is resumed here, so the
/// iteration's own catch (in [`EvictionLoop::run`]) still sees it.
pub async fn off_runtime<T, F>(f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("eviction: observation task cancelled: {e}"),
    }
}

/// Each container's log directory by container id, as the CRI reported it: fixed for the
/// container's life (the kubelet sets `ContainerConfig.log_path` at creation), so it is asked once.
pub type LogDirs = HashMap<String, std::path::PathBuf>;

/// Usage of every pod in `pods`, from its cgroup (memory, processes) and, when `disk`, from its
/// containers' writable layers and log directories. A pod whose cgroup cannot be read gets zero
/// usage and a debug log (it may be exiting right now). The log directories of containers
/// `log_dirs` does not hold yet are asked from the CRI first (async), and `log_dirs` keeps those of
/// `pods`' containers only; every file read and walk then runs in one [`off_runtime`] call.
pub async fn measure_pods(
    sources: &SignalSources,
    pods: &[ManagedPod],
    disk: bool,
    cri: Option<&CriClient>,
    log_dirs: &mut LogDirs,
) -> HashMap<String, MeasuredUsage> {
    let live: std::collections::HashSet<&String> =
        pods.iter().flat_map(|p| &p.container_ids).collect();
    log_dirs.retain(|id, _| live.contains(id));
    if let (true, Some(cri)) = (disk, cri) {
        for pod in pods {
            for (id, c) in pod.container_ids.iter().zip(&pod.pod.containers) {
                if log_dirs.contains_key(id) {
                    continue;
                }
                match cri.container_status(id).await {
                    Ok(Some(st)) if !st.log_path.is_empty() => {
                        if let Some(dir) = std::path::Path::new(&st.log_path).parent() {
                            log_dirs.insert(id.clone(), dir.to_path_buf());
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(pod = %pod_ref(pod), container = %c.name, error = %e, "log path unknown")
                    }
                }
            }
        }
    }
    let (sources, pods) = (sources.clone(), pods.to_vec());
    let dirs = if disk {
        log_dirs.clone()
    } else {
        LogDirs::new()
    };
    off_runtime(move || measure_pods_blocking(&sources, &pods, disk, &dirs)).await
}

/// The file-reading part of [`measure_pods`]: cgroup files, writable layers and the log
/// directories found (by container id). Blocks; runs off the runtime.
fn measure_pods_blocking(
    sources: &SignalSources,
    pods: &[ManagedPod],
    disk: bool,
    log_dirs: &HashMap<String, std::path::PathBuf>,
) -> HashMap<String, MeasuredUsage> {
    let mut out = HashMap::new();
    for pod in pods {
        let mut usage = MeasuredUsage::default();
        match sources.pod_usage(&pod.cgroup_parent) {
            Ok(u) => {
                usage.memory_working_set = u.memory_working_set;
                usage.processes = u.processes;
            }
            Err(e) => tracing::debug!(pod = %pod_ref(pod), error = %e, "pod usage not readable"),
        }
        if disk {
            for (id, c) in pod.container_ids.iter().zip(&pod.pod.containers) {
                match sources.container_upperdir(&pod.cgroup_parent, id) {
                    Ok(Some(upper)) => usage.disk += dir_usage(&upper, DISK_WALK_LIMIT),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(pod = %pod_ref(pod), container = %c.name, error = %e, "writable layer not found")
                    }
                }
                if let Some(dir) = log_dirs.get(id) {
                    usage.disk += dir_usage(dir, DISK_WALK_LIMIT);
                }
            }
        }
        out.insert(pod.pod.uid.clone(), usage);
    }
    out
}

/// Each pod cgroup's PSI (cgroup v2), by pod uid; a pod whose files cannot be read is left out
/// (it may be exiting right now).
fn pods_pressure(
    sources: &SignalSources,
    pods: &[ManagedPod],
) -> BTreeMap<String, PressureByResource> {
    let mut out = BTreeMap::new();
    for pod in pods {
        match sources.pod_pressure(&pod.cgroup_parent) {
            Ok(p) if !p.is_empty() => {
                out.insert(pod.pod.uid.clone(), p);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(pod = %pod_ref(pod), error = %e, "pod pressure not readable"),
        }
    }
    out
}

/// Process CPU time (user + system) so far.
pub fn process_cpu_time() -> Duration {
    // SAFETY: `libc::rusage` is plain old data (integers only): all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Log lines for signals that could not be read; counts them.
fn log_observe_errors(node: &NodeStats, stats: &EvictionStats) {
    let mut errs: Vec<(&str, String)> = Vec::new();
    if let Err(e) = &node.memory {
        errs.push(("memory.available", e.to_string()));
    }
    if let Err(e) = &node.nodefs {
        errs.push(("nodefs", e.to_string()));
    }
    if let Err(e) = &node.imagefs {
        errs.push(("imagefs", e.to_string()));
    }
    if let Err(e) = &node.pid {
        errs.push(("pid.available", e.to_string()));
    }
    if let Err(e) = &node.pressure {
        errs.push(("pressure", e.to_string()));
    }
    for (signal, e) in errs {
        tracing::warn!(signal, error = %e, "eviction: signal not observed this interval");
        stats.with(|s| *s.observe_errors.entry(signal.to_string()).or_default() += 1);
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    /// The pod is evicted (or was gone, or dry run).
    Done(Evicted),
    /// A PodDisruptionBudget refused: try the next candidate.
    Refused,
    /// The request failed: the next interval decides again.
    Failed,
}

/// Evicts `pod` with `evictor`; logs and counts the attempt.
async fn act(
    evictor: &dyn Evictor,
    stats: &EvictionStats,
    metrics: Option<&Metrics>,
    pod: &EvictPod,
    grace: Duration,
) -> Attempt {
    let t = Instant::now();
    let count = |result: &'static str| {
        if let Some(m) = metrics {
            m.eviction_result(evictor.name(), result);
        }
    };
    match evictor.evict(pod, grace).await {
        Ok(Evicted::Refused { message }) => {
            count("pdb_refused");
            tracing::warn!(
                pod = %pod.pod_ref(),
                signal = %pod.signal,
                action = evictor.name(),
                refusal = %message,
                "eviction refused by a PodDisruptionBudget; trying the next candidate"
            );
            Attempt::Refused
        }
        Ok(outcome) => {
            stats.with(|s| *s.evictions.entry(pod.signal.clone()).or_default() += 1);
            let what = match &outcome {
                Evicted::DryRun => "dry-run".to_string(),
                Evicted::Stopped { containers } => {
                    format!("stopped {containers} containers and the sandbox")
                }
                Evicted::AlreadyGone => "already gone".to_string(),
                Evicted::Evicting {
                    disruption_target,
                    gone,
                } => {
                    if *gone {
                        "deleted by the API server".to_string()
                    } else {
                        format!("terminating (DisruptionTarget condition: {disruption_target})")
                    }
                }
                Evicted::Refused { .. } => String::new(),
            };
            count(if outcome == Evicted::AlreadyGone {
                "already_gone"
            } else {
                "evicted"
            });
            tracing::warn!(
                pod = %pod.pod_ref(),
                uid = %pod.uid,
                signal = %pod.signal,
                action = evictor.name(),
                outcome = %what,
                took_ms = t.elapsed().as_millis() as u64,
                reason = %pod.reason,
                "pod evicted"
            );
            Attempt::Done(outcome)
        }
        Err(e) => {
            count("error");
            stats.with(|s| *s.failures.entry(pod.signal.clone()).or_default() += 1);
            tracing::error!(pod = %pod.pod_ref(), signal = %pod.signal, action = evictor.name(), error = %e, "eviction failed; the next interval decides again");
            Attempt::Failed
        }
    }
}

/// One signal's observation: available amount and the capacity percentages refer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub available: i64,
    pub capacity: u64,
}

/// The node's signals as the core compares them. Unreadable signals are absent.
pub fn observations(node: &NodeStats) -> BTreeMap<Signal, Observed> {
    let mut out = BTreeMap::new();
    let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    if let Ok(m) = &node.memory {
        out.insert(
            Signal::MemoryAvailable,
            Observed {
                available: i(m.available),
                capacity: m.capacity,
            },
        );
    }
    for (fs, bytes, inodes) in [
        (
            &node.nodefs,
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
        ),
        (
            &node.imagefs,
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        ),
    ] {
        if let Ok(f) = fs {
            out.insert(
                bytes,
                Observed {
                    available: i(f.available_bytes),
                    capacity: f.capacity_bytes,
                },
            );
            out.insert(
                inodes,
                Observed {
                    available: i(f.inodes_free),
                    capacity: f.inodes,
                },
            );
        }
    }
    if let Ok(p) = &node.pid {
        out.insert(
            Signal::PidAvailable,
            Observed {
                available: i(p.available),
                capacity: p.max,
            },
        );
    }
    out
}

/// What the loop remembers between intervals: the core's pressure tracker and the loop's epoch
/// (the core's timestamps are durations since it).
pub struct LoopState {
    tracker: PressureTracker,
    epoch: Instant,
    /// The node conditions last logged, to log changes only.
    conditions: BTreeSet<NodeCondition>,
    /// The pod evicted last (uid, `namespace/name`, when) while it may still hold resources.
    pending: Option<(String, String, Instant)>,
    /// The managed containers' log directories learnt from the CRI.
    log_dirs: LogDirs,
}

impl Default for LoopState {
    fn default() -> Self {
        LoopState {
            tracker: PressureTracker::new(),
            epoch: Instant::now(),
            conditions: BTreeSet::new(),
            pending: None,
            log_dirs: LogDirs::new(),
        }
    }
}

/// The core's view of the measured usage, keyed `namespace/name`.
fn usage_by_pod(pods: &[ManagedPod], usage: &HashMap<String, MeasuredUsage>) -> UsageByPod {
    pods.iter()
        .map(|p| {
            let u = usage.get(&p.pod.uid).copied().unwrap_or_default();
            (
                p.pod.key(),
                PodUsage {
                    memory_working_set: u.memory_working_set,
                    processes: u.processes,
                    disk: u.disk.bytes,
                    inodes: u.disk.inodes,
                },
            )
        })
        .collect()
}

/// Everything the loop needs, built once at start.
pub struct EvictionLoop {
    pub config: EvictionConfig,
    pub sources: SignalSources,
    pub pods: Arc<dyn PodSource>,
    pub evictor: Arc<dyn Evictor>,
    /// For log paths (disk usage); present when the CRI endpoint could be set up.
    pub cri: Option<CriClient>,
    pub stats: Arc<EvictionStats>,
    /// Where signal values, thresholds, conditions and evictions are exported (Prometheus).
    pub metrics: Option<Arc<Metrics>>,
    /// The API's view of this node's pods (the Kubernetes client is on).
    pub facts: Option<Arc<dyn PodFacts>>,
    /// Where the `Evicted` Events go (the Kubernetes client is on).
    pub events: Option<EventSink>,
    /// Where each interval's node conditions go (`crate::cluster::node_status`).
    pub node_status: Option<ReportSender>,
    /// Where each interval's view of pressure goes, for `topolet status`.
    pub report: Option<Arc<PressureReport>>,
    /// Node-level reclaim before a disk eviction (`[eviction] node_reclaim` and a CRI client).
    pub reclaim: Option<Arc<NodeReclaim>>,
    /// This node's name, for the Events of node-level reclaim (the Kubernetes client is on).
    pub node_name: Option<String>,
}

/// The CRI socket path of an endpoint (`unix:///run/x.sock`, `unix:/run/x.sock` or a path).
pub fn cri_socket_path(endpoint: &str) -> std::path::PathBuf {
    let p = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    std::path::PathBuf::from(p)
}

/// The evictor and CRI client `config` asks for; `kube` is the Kubernetes API client when it
/// is on (then `api` is the default action). `action = "api"` without it is an error naming the
/// key.
/// `kube`: the API client and the client evictions are posted through (the node's identity
/// with `[kubernetes] evict_as`, else the same client).
pub fn build_evictor(
    config: &EvictionConfig,
    kube: Option<(&kube::Client, &kube::Client)>,
) -> anyhow::Result<(Arc<dyn Evictor>, Option<CriClient>)> {
    let cri = match CriClient::new(
        &cri_socket_path(&config.cri_endpoint),
        Duration::from_secs(10),
    ) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::error!(error = %e, "eviction: CRI client not available");
            None
        }
    };
    let evictor: Arc<dyn Evictor> = match (config.action_for(kube.is_some()), &cri, kube) {
        (EvictionAction::Cri, Some(c), _) => {
            Arc::new(crate::pressure::actions::CriEvictor::new(c.clone()))
        }
        (EvictionAction::Cri, None, _) => {
            tracing::error!(
                "eviction: action \"cri\" without a CRI client; falling back to dry-run"
            );
            Arc::new(crate::pressure::actions::DryRun)
        }
        (EvictionAction::Api, _, Some((k, evictions))) => {
            Arc::new(crate::pressure::actions::ApiEvictor::with_eviction_client(
                k.clone(),
                evictions.clone(),
            ))
        }
        (EvictionAction::Api, _, None) => anyhow::bail!(
            "eviction.action = \"api\" needs the Kubernetes API client, which is off: set \
             [kubernetes] kubeconfig (or run in a pod with a service account), or choose \
             action \"cri\" or \"dry-run\""
        ),
        (EvictionAction::DryRun, _, _) => Arc::new(crate::pressure::actions::DryRun),
    };
    Ok((evictor, cri))
}

impl EvictionLoop {
    /// Runs forever, one iteration per interval. Never returns an error: the plugin's other
    /// tasks are never taken down by eviction.
    pub async fn run(self) {
        let this = Arc::new(self);
        let state = Arc::new(Mutex::new(LoopState::default()));
        tracing::info!(
            action = this.evictor.name(),
            interval_ms = this.config.interval.as_millis() as u64,
            thresholds = %this.config.thresholds.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            nodefs = %this.sources.nodefs.display(),
            imagefs = %this.sources.imagefs.display(),
            "eviction loop started"
        );
        let mut tick = tokio::time::interval(this.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (l, s) = (this.clone(), state.clone());
            // A panic inside the iteration ends only that spawned task.
            if let Err(e) = tokio::spawn(async move { l.iterate(&s).await }).await {
                this.stats.with(|st| st.panics += 1);
                tracing::error!(error = %e, "eviction: iteration panicked; continuing at the next interval");
            }
        }
    }

    /// One interval: observe, decide, act on at most one pod.
    pub async fn iterate(&self, state: &Mutex<LoopState>) {
        let wall = Instant::now();
        let cpu0 = process_cpu_time();
        let sources = self.sources.clone();
        let node = off_runtime(move || sources.observe()).await;
        log_observe_errors(&node, &self.stats);
        let observed = observations(&node);
        let pods = self.pods.managed_pods();
        let disk = self.config.thresholds.iter().any(|t| {
            matches!(
                t.signal.resource(),
                SignalResource::Disk | SignalResource::Inodes
            ) && observed
                .get(&t.signal)
                .is_some_and(|o| t.is_met(o.available, o.capacity, true))
        });
        if let Some(r) = &self.reclaim {
            if self.has_reclaim_steps() && r.detection_due() {
                r.detect().await;
            }
        }
        // Taken out of the state for the CRI calls (a std mutex is never held across an await).
        let mut log_dirs =
            std::mem::take(&mut state.lock().unwrap_or_else(|p| p.into_inner()).log_dirs);
        let usage =
            measure_pods(&self.sources, &pods, disk, self.cri.as_ref(), &mut log_dirs).await;
        state.lock().unwrap_or_else(|p| p.into_inner()).log_dirs = log_dirs;
        if let Some(m) = &self.metrics {
            let node_psi = node.pressure.as_ref().cloned().unwrap_or_default();
            let pods = pods_pressure(&self.sources, &pods)
                .iter()
                .map(|(uid, p)| (uid.clone(), psi::stall_lines(p)))
                .collect();
            m.set_pressure(psi::stall_lines(&node_psi), pods);
        }
        let core_obs = core_observations(&observed);
        let core_pods: Vec<Pod> = pods.iter().map(|p| p.pod.clone()).collect();
        let by_pod = usage_by_pod(&pods, &usage);
        let decision = {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            let now = Timestamp(st.epoch.elapsed());
            let d = decide(
                &self.config,
                &mut st.tracker,
                &core_obs,
                now,
                &core_pods,
                &by_pod,
            );
            if d.conditions != st.conditions {
                let names: Vec<&str> = d.conditions.iter().map(|c| c.as_str()).collect();
                tracing::warn!(conditions = ?names, "eviction: node conditions changed");
                st.conditions = d.conditions.clone();
            }
            d
        };
        self.export(&observed, &decision.conditions);
        if let Some(report) = &self.report {
            let node_psi = node.pressure.as_ref().cloned().unwrap_or_default();
            report.publish(pressure_report(
                &self.config,
                &observed,
                &decision.conditions,
                &node_psi,
            ));
        }
        if let Some(tx) = &self.node_status {
            let conditions =
                node_status::reports(&self.config, &core_obs, &decision.conditions, &decision.met);
            tx.send_replace(Some(NodeReport {
                conditions,
                pressure: decision.conditions.clone(),
            }));
        }
        let relieved = match &decision.threshold {
            Some(threshold) => {
                let has_imagefs = !node.imagefs_is_nodefs;
                self.reclaim_node(threshold, &observed, has_imagefs).await
            }
            None => false,
        };
        if let (Some(threshold), false) = (&decision.threshold, relieved) {
            let seen = Seen {
                observed: &observed,
                pods: &pods,
                usage: &usage,
                by_pod: &by_pod,
            };
            self.evict_one(state, threshold, &decision.candidates, &seen)
                .await;
        }
        let cpu = process_cpu_time().saturating_sub(cpu0);
        let snapshot = self.stats.with(|s| {
            s.iterations += 1;
            s.cpu += cpu;
            s.wall += wall.elapsed();
            s.clone()
        });
        if snapshot.iterations % 10 == 1 {
            tracing::info!(
                iterations = snapshot.iterations,
                pods = pods.len(),
                cpu_us_per_iteration = (snapshot.cpu.as_micros() / u128::from(snapshot.iterations)) as u64,
                wall_us_per_iteration = (snapshot.wall.as_micros() / u128::from(snapshot.iterations)) as u64,
                evictions = ?snapshot.evictions,
                failures = ?snapshot.failures,
                "eviction loop"
            );
        }
    }
}

/// The core's observations of the signals `observed`, without a time.
fn core_observations(observed: &BTreeMap<Signal, Observed>) -> Observations {
    observed
        .iter()
        .map(|(signal, o)| {
            let obs = SignalObservation {
                available: o.available,
                capacity: o.capacity,
                time: None,
            };
            (*signal, obs)
        })
        .collect()
}

/// What one interval measured, for [`EvictionLoop::evict_one`].
struct Seen<'a> {
    observed: &'a BTreeMap<Signal, Observed>,
    pods: &'a [ManagedPod],
    usage: &'a HashMap<String, MeasuredUsage>,
    by_pod: &'a UsageByPod,
}

/// How long the loop waits for the pod facts before ranking with NRI's view alone.
pub const FACTS_TIMEOUT: Duration = Duration::from_secs(5);

impl EvictionLoop {
    /// This node's pods from the API, when the client is on and answers in time.
    async fn pod_facts(&self) -> Option<FactsByUid> {
        let f = self.facts.as_ref()?;
        match tokio::time::timeout(FACTS_TIMEOUT, f.node_pods()).await {
            Ok(Ok(m)) => Some(m),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "eviction: pod facts from the API unavailable; ranking with NRI's view");
                None
            }
            Err(_) => {
                tracing::warn!(
                    timeout_s = FACTS_TIMEOUT.as_secs(),
                    "eviction: pod facts from the API timed out; ranking with NRI's view"
                );
                None
            }
        }
    }

    /// The kubelet's message for evicting `p` for `threshold`, with each container's working
    /// set (memory only, as measured from its cgroup, off the runtime) against its request.
    async fn message(&self, threshold: &Threshold, o: Option<Observed>, p: &ManagedPod) -> String {
        let resource = threshold.signal.resource();
        let containers: Vec<ContainerUsage> = if resource == SignalResource::Memory {
            let sources = self.sources.clone();
            let wanted: Vec<(String, String, u64)> = p
                .container_ids
                .iter()
                .zip(&p.pod.containers)
                .map(|(id, c)| {
                    let cgroup = format!("{}/{id}", p.cgroup_parent);
                    (cgroup, c.name.clone(), c.requests.memory_bytes.unwrap_or(0))
                })
                .collect();
            off_runtime(move || {
                wanted
                    .into_iter()
                    .filter_map(|(cgroup, name, request)| {
                        let u = sources.pod_usage(&cgroup).ok()?;
                        Some(ContainerUsage {
                            name,
                            usage: u.memory_working_set,
                            request,
                        })
                    })
                    .collect()
            })
            .await
        } else {
            Vec::new()
        };
        eviction_message(
            resource,
            o.map(|o| threshold.amount(o.capacity, false)),
            o.map(|o| o.available),
            &containers,
        )
    }

    /// True while the pod evicted last still has processes (and not for longer than
    /// [`POD_CLEANUP_TIMEOUT`]): nothing else is evicted meanwhile.
    fn waiting_for_cleanup(&self, state: &Mutex<LoopState>, seen: &Seen<'_>) -> bool {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((uid, pod, since)) = st.pending.clone() else {
            return false;
        };
        let alive = seen.pods.iter().any(|p| p.pod.uid == uid)
            && seen.usage.get(&uid).is_some_and(|u| u.processes > 0);
        if alive && since.elapsed() < POD_CLEANUP_TIMEOUT {
            tracing::info!(pod = %pod, waited_ms = since.elapsed().as_millis() as u64, "eviction: threshold met; waiting for the evicted pod to terminate");
            return true;
        }
        if alive {
            tracing::warn!(pod = %pod, timeout_s = POD_CLEANUP_TIMEOUT.as_secs(), "eviction: the evicted pod still runs after the cleanup timeout; evicting again");
        }
        st.pending = None;
        false
    }

    /// Evicts at most one pod for `threshold`: the candidates ranked with the API's facts when
    /// known (else `nri_candidates`), PodDisruptionBudget refusals skipped.
    async fn evict_one(
        &self,
        state: &Mutex<LoopState>,
        threshold: &Threshold,
        nri_candidates: &[Candidate],
        seen: &Seen<'_>,
    ) {
        if self.waiting_for_cleanup(state, seen) {
            return;
        }
        let facts = self.pod_facts().await;
        let mut pods: Vec<ManagedPod> = seen.pods.to_vec();
        let source = if facts.is_some() { "api" } else { "nri" };
        let mut cands = nri_candidates.to_vec();
        if let Some(f) = &facts {
            for p in &mut pods {
                if let Some(fact) = f.get(&p.pod.uid) {
                    overlay(&mut p.pod, fact);
                }
            }
            let core_pods: Vec<Pod> = pods.iter().map(|p| p.pod.clone()).collect();
            cands = candidates(&self.config, threshold, &core_pods, seen.by_pod);
            // Already terminating (deleted by someone else): evicting it again frees nothing.
            cands.retain(|c| !f.get(&c.uid).is_some_and(|x| x.deleting));
        }
        let batch: std::collections::HashSet<&str> = pods
            .iter()
            .filter(|p| p.batch)
            .map(|p| p.pod.uid.as_str())
            .collect();
        batch_first(&mut cands, |uid| batch.contains(uid));
        if cands.is_empty() {
            tracing::warn!(signal = %threshold.signal, pod_facts = source, "eviction: threshold met but no pod can be evicted (none managed, or only critical or terminating ones)");
            return;
        }
        let o = seen.observed.get(&threshold.signal).copied();
        for cand in cands.iter().take(MAX_ATTEMPTS_PER_INTERVAL) {
            let Some(p) = pods.iter().find(|p| p.pod.uid == cand.uid) else {
                continue;
            };
            let message = self.message(threshold, o, p).await;
            let u = seen.by_pod.get(&p.pod.key()).copied().unwrap_or_default();
            let controller = facts
                .as_ref()
                .and_then(|f| f.get(&cand.uid))
                .and_then(|f| f.controller.clone())
                .unwrap_or_default();
            tracing::warn!(
                pod = %cand.pod,
                signal = %threshold.signal,
                observed = o.map(|o| o.available),
                threshold = o.map(|o| threshold.amount(o.capacity, false)),
                threshold_spec = %threshold,
                grace_period_s = cand.grace_period.as_secs(),
                candidates = cands.len(),
                pod_facts = source,
                controller = %controller,
                memory_working_set = u.memory_working_set,
                processes = u.processes,
                disk = u.disk,
                reason = %message,
                "eviction: threshold met; evicting one pod"
            );
            let evict = EvictPod {
                sandbox_id: p.sandbox_id.clone(),
                namespace: p.pod.namespace.clone(),
                name: p.pod.name.clone(),
                uid: p.pod.uid.clone(),
                signal: threshold.signal.to_string(),
                reason: message.clone(),
            };
            let metrics = self.metrics.as_deref();
            match act(
                self.evictor.as_ref(),
                &self.stats,
                metrics,
                &evict,
                cand.grace_period,
            )
            .await
            {
                Attempt::Done(outcome) => {
                    if let Some(m) = metrics {
                        m.eviction(&evict.signal);
                    }
                    if matches!(outcome, Evicted::Stopped { .. } | Evicted::Evicting { .. }) {
                        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                        st.pending = Some((evict.uid.clone(), evict.pod_ref(), Instant::now()));
                        if let Some(sink) = &self.events {
                            let object = ObjectRef {
                                namespace: evict.namespace.clone(),
                                name: evict.name.clone(),
                                uid: evict.uid.clone(),
                            };
                            sink.record(Occurrence::new(
                                object,
                                EventType::Warning,
                                EVICTED_REASON,
                                &message,
                            ));
                        }
                    }
                    return;
                }
                Attempt::Refused => continue,
                Attempt::Failed => return,
            }
        }
        tracing::warn!(signal = %threshold.signal, tried = cands.len().min(MAX_ATTEMPTS_PER_INTERVAL), "eviction: every candidate tried was refused by a PodDisruptionBudget; the next interval tries again");
    }
}

impl EvictionLoop {
    /// True when a configured threshold's signal has a node-level reclaim step on some
    /// filesystem layout (the image tracker then keeps its detection period).
    fn has_reclaim_steps(&self) -> bool {
        self.config
            .thresholds
            .iter()
            .any(|t| !reclaim_steps(t.signal, false).is_empty())
    }

    /// The kubelet's `reclaimNodeLevelResources` for `threshold`: dead containers and unused
    /// images first, then the signals observed again. True when the threshold is no longer
    /// met with its minimum reclaim, or when dead containers were removed (their space comes
    /// back asynchronously): no pod is evicted this interval. In dry run, true when
    /// the plan alone would have freed enough (nothing was removed, so nothing is observed).
    async fn reclaim_node(
        &self,
        threshold: &Threshold,
        observed: &BTreeMap<Signal, Observed>,
        has_imagefs: bool,
    ) -> bool {
        let (Some(r), Some(before)) = (&self.reclaim, observed.get(&threshold.signal).copied())
        else {
            return false;
        };
        let api_pods: Option<std::collections::HashSet<String>> =
            self.pod_facts().await.map(|f| f.keys().cloned().collect());
        let t = Instant::now();
        let done = match r
            .run(
                threshold,
                before.available,
                before.capacity,
                has_imagefs,
                api_pods.as_ref(),
            )
            .await
        {
            Ok(Some(d)) => d,
            Ok(None) => return false,
            Err(e) => {
                tracing::error!(signal = %threshold.signal, error = %e, "node reclaim failed; evicting as without it");
                return false;
            }
        };
        let signal = threshold.signal;
        let (relieved, after) = if done.dry_run {
            (done.need.is_some() && done.images_enough, before.available)
        } else {
            let sources = self.sources.clone();
            let node = off_runtime(move || sources.observe()).await;
            let again = observations(&node);
            let core_obs = core_observations(&again);
            let after = again.get(&signal).map_or(before.available, |o| o.available);
            (
                !still_under_pressure(&self.config, signal, &core_obs),
                after,
            )
        };
        // containerd frees a removed container's writable layer when its garbage collector
        // next runs (RemoveImage collects synchronously, RemoveContainer does not): seen on the
        // eviction suite's tmpfs image filesystem, the space came back after the observation.
        // A reclaim that removed containers or sandboxes therefore holds eviction for this
        // interval; the next one observes again (and, with nothing new to remove, evicts).
        let deferred = !done.dry_run
            && !relieved
            && (!done.containers.is_empty() || !done.sandboxes.is_empty());
        let result = match (done.dry_run, relieved, deferred) {
            (true, _, _) => "dry_run",
            (false, true, _) => "relieved",
            (false, false, true) => "deferred",
            (false, false, false) => "not_enough",
        };
        let observed_bytes = u64::try_from(after.saturating_sub(before.available)).unwrap_or(0);
        let needed = match done.need {
            Some(Need::Bytes(n)) => Some(n),
            _ => None,
        };
        tracing::warn!(
            signal = %signal,
            result,
            steps = ?done.steps,
            images = done.images.len(),
            image_bytes = done.image_bytes,
            containers = done.containers.len(),
            sandboxes = done.sandboxes.len(),
            errors = done.errors,
            needed_bytes = needed,
            available_before = before.available,
            available_after = after,
            images_used_before = done.images_used_before,
            images_used_after = done.images_used_after,
            took_ms = t.elapsed().as_millis() as u64,
            "node reclaim done"
        );
        let total = if let Some(m) = &self.metrics {
            m.node_reclaim(
                signal.as_str(),
                result,
                crate::telemetry::metrics::NodeReclaimCounts {
                    images: if done.dry_run {
                        0
                    } else {
                        done.images.len() as u64
                    },
                    image_bytes: if done.dry_run { 0 } else { done.image_bytes },
                    containers: if done.dry_run {
                        0
                    } else {
                        done.containers.len() as u64
                    },
                    sandboxes: if done.dry_run {
                        0
                    } else {
                        done.sandboxes.len() as u64
                    },
                    observed_bytes,
                    ..Default::default()
                },
            );
            m.node_reclaims(signal.as_str()).runs.values().sum()
        } else {
            0
        };
        if let Some(report) = &self.report {
            report.node_reclaim(StatusReclaim {
                signal: signal.to_string(),
                result: result.to_string(),
                images: done.images.len() as u64,
                image_bytes: done.image_bytes,
                containers: done.containers.len() as u64,
                sandboxes: done.sandboxes.len() as u64,
                total,
            });
        }
        self.reclaim_event(signal, relieved, &done, needed);
        if relieved {
            tracing::warn!(signal = %signal, dry_run = done.dry_run, "eviction: node reclaim relieved the pressure; no pod evicted this interval");
        } else if deferred {
            tracing::warn!(signal = %signal, "eviction: node reclaim removed dead containers whose space the runtime frees asynchronously; no pod evicted this interval, the next one observes again");
        }
        relieved || deferred
    }

    /// The Node's Event for one reclaim: Normal `FreedDiskSpace` with what went; when the images
    /// could not cover what was needed, also the kubelet's Warning `FreeDiskSpaceFailed` with
    /// its message (`image_gc_manager.go`). None in dry run.
    fn reclaim_event(&self, signal: Signal, relieved: bool, done: &Reclaimed, needed: Option<u64>) {
        let (Some(sink), Some(node)) = (&self.events, &self.node_name) else {
            return;
        };
        if done.dry_run {
            return;
        }
        let object = ObjectRef::node(node);
        let outcome = if relieved {
            "no pod evicted"
        } else {
            "still under pressure: evicting a pod"
        };
        let message = format!(
            "{signal}: removed {} unused images ({} bytes), {} dead containers, {} dead sandboxes; {outcome}",
            done.images.len(),
            done.image_bytes,
            done.containers.len(),
            done.sandboxes.len()
        );
        sink.record(Occurrence::new(
            object.clone(),
            EventType::Normal,
            FREED_DISK_SPACE_REASON,
            &message,
        ));
        if let (false, Some(n)) = (done.images_enough, needed) {
            sink.record(Occurrence::new(
                object,
                EventType::Warning,
                FREE_DISK_SPACE_FAILED_REASON,
                &free_disk_space_failed_message(n, done.image_bytes),
            ));
        }
    }
}

/// The Node's Event reason after a node-level reclaim.
pub const FREED_DISK_SPACE_REASON: &str = "FreedDiskSpace";
/// The kubelet's reason when its image GC could not free what was needed (`events.FreeDiskSpaceFailed`).
pub const FREE_DISK_SPACE_FAILED_REASON: &str = "FreeDiskSpaceFailed";

impl EvictionLoop {
    /// The loop of a node: signals from `/`, nodefs/imagefs at their default paths, pods from
    /// `pods` (the NRI plugin), the action of `config`; with the Kubernetes client `kube` on,
    /// pod facts from the API and `Evicted` Events. Fails only for `action = "api"` without the
    /// client.
    pub fn for_node(
        config: EvictionConfig,
        pods: Arc<dyn PodSource>,
        kube: Option<&crate::cluster::client::Started>,
    ) -> anyhow::Result<EvictionLoop> {
        let (evictor, cri) = build_evictor(&config, kube.map(|k| (&k.client, &k.eviction_client)))?;
        let facts = kube.map(|k| {
            Arc::new(crate::pressure::pod_facts::ListPodFacts::new(
                k.client.clone(),
                k.node.clone(),
            )) as Arc<dyn PodFacts>
        });
        let dry_run = evictor.name() == crate::pressure::actions::DryRun.name();
        let reclaim = match (&cri, config.reclaim.enabled) {
            (Some(c), true) => Some(Arc::new(NodeReclaim::new(
                c.clone(),
                config.reclaim.clone(),
                dry_run,
            ))),
            _ => None,
        };
        Ok(EvictionLoop {
            reclaim,
            node_name: kube.map(|k| k.node.clone()),
            sources: SignalSources {
                root: std::path::PathBuf::from("/"),
                nodefs: config.nodefs_path.clone(),
                imagefs: config.imagefs_path.clone(),
            },
            config,
            pods,
            evictor,
            cri,
            stats: Arc::new(EvictionStats::default()),
            metrics: None,
            facts,
            events: kube.map(|k| k.sink.clone()),
            node_status: None,
            report: None,
        })
    }

    /// Publishes each interval's signals, thresholds, conditions and PSI to `report`.
    pub fn with_report(mut self, report: Arc<PressureReport>) -> EvictionLoop {
        self.report = Some(report);
        self
    }

    /// Reports each interval's node conditions to `tx` (`crate::cluster::node_status`).
    pub fn with_node_status(mut self, tx: ReportSender) -> EvictionLoop {
        self.node_status = Some(tx);
        self
    }

    /// Pod facts from `facts` instead (with the API client on: the pod watch's store,
    /// `crate::cluster::pod_directory::WatchedPodFacts`); wraps the list it would make.
    pub fn wrap_pod_facts(&mut self, facts: impl FnOnce(Arc<dyn PodFacts>) -> Arc<dyn PodFacts>) {
        self.facts = self.facts.take().map(facts);
    }

    /// Exports the loop's observations and actions through `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> EvictionLoop {
        self.metrics = Some(metrics);
        self
    }

    /// Signal values, thresholds (in the signal's unit) and node conditions of one interval.
    fn export(&self, observed: &BTreeMap<Signal, Observed>, conditions: &BTreeSet<NodeCondition>) {
        let Some(m) = &self.metrics else { return };
        for (signal, o) in observed {
            m.set_signal(&signal.to_string(), o.available as f64);
        }
        for t in &self.config.thresholds {
            let kind = if t.is_hard() { "hard" } else { "soft" };
            let amount = observed
                .get(&t.signal)
                .map(|o| t.amount(o.capacity, false) as f64);
            m.set_threshold(&t.signal.to_string(), kind, amount);
        }
        for c in NodeCondition::ALL {
            m.set_condition(c.as_str(), conditions.contains(&c));
        }
    }
}

/// One interval's pressure as `topolet status` shows it: each observed signal's value with its
/// thresholds (in the signal's unit), every node condition, and the node's PSI stall lines.
pub fn pressure_report(
    config: &EvictionConfig,
    observed: &BTreeMap<Signal, Observed>,
    conditions: &BTreeSet<NodeCondition>,
    node_psi: &PressureByResource,
) -> StatusPressure {
    let mut signals: BTreeMap<String, StatusSignal> = observed
        .iter()
        .map(|(signal, o)| {
            let s = StatusSignal {
                signal: signal.to_string(),
                value: Some(o.available as f64),
                ..StatusSignal::default()
            };
            (signal.to_string(), s)
        })
        .collect();
    // A threshold shows with its signal's value, in the unit of the capacity observed.
    for t in &config.thresholds {
        let (Some(o), Some(s)) = (
            observed.get(&t.signal),
            signals.get_mut(&t.signal.to_string()),
        ) else {
            continue;
        };
        let kind = if t.is_hard() { "hard" } else { "soft" };
        s.thresholds
            .insert(kind.to_string(), t.amount(o.capacity, false) as f64);
    }
    let stall = psi::stall_lines(node_psi)
        .into_iter()
        .map(|s| Stall {
            resource: s.resource.to_string(),
            kind: s.kind.to_string(),
            avg10: s.avg10,
            avg60: s.avg60,
            avg300: s.avg300,
            total_seconds: s.total_us as f64 / 1e6,
        })
        .collect();
    StatusPressure {
        stall,
        node_reclaim: None,
        conditions: NodeCondition::ALL
            .iter()
            .map(|c| (c.as_str().to_string(), conditions.contains(c)))
            .collect(),
        signals: signals.into_values().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EvictionSection;
    use crate::pressure::actions::EvictError;
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use topolet_core::kube::qos::QosClass;

    /// What `topolet status` shows of one interval: each observed signal with its thresholds in
    /// the signal's unit (one that was not observed has none), every condition, PSI lines.
    #[test]
    fn the_pressure_report_of_an_interval() {
        use crate::pressure::psi::{Pressure as Psi, Stall as Line};
        use topolet_core::eviction::threshold::{Threshold, ThresholdValue};
        let config = EvictionConfig {
            thresholds: vec![
                Threshold::hard(
                    Signal::MemoryAvailable,
                    ThresholdValue::Quantity(100_000_000),
                ),
                Threshold::hard(Signal::NodeFsAvailable, ThresholdValue::Percentage(0.1)),
            ],
            ..EvictionConfig::default()
        };
        let observed = BTreeMap::from([(
            Signal::MemoryAvailable,
            Observed {
                available: 1_500_000_000,
                capacity: 4_000_000_000,
            },
        )]);
        let line = |total_us: u64| Line {
            avg10: 1.5,
            avg60: 0.5,
            avg300: 0.25,
            total_us,
        };
        let psi = PressureByResource::from([
            (
                "cpu",
                Psi {
                    some: line(3_000_000),
                    full: None,
                },
            ),
            (
                "memory",
                Psi {
                    some: line(1_500_000),
                    full: Some(line(500_000)),
                },
            ),
        ]);
        let p = pressure_report(
            &config,
            &observed,
            &BTreeSet::from([NodeCondition::PidPressure]),
            &psi,
        );
        assert_eq!(p.signals.len(), 1);
        assert_eq!(p.signals[0].signal, "memory.available");
        assert_eq!(p.signals[0].value, Some(1.5e9));
        assert_eq!(p.signals[0].thresholds["hard"], 1e8);
        assert_eq!(p.conditions.len(), NodeCondition::ALL.len());
        assert!(p.conditions["PIDPressure"]);
        assert!(!p.conditions["MemoryPressure"]);
        assert_eq!(p.stall.len(), 3);
        assert_eq!(
            (p.stall[2].resource.as_str(), p.stall[2].kind.as_str()),
            ("memory", "full")
        );
        assert_eq!(p.stall[1].total_seconds, 1.5);
    }

    struct Pods(Vec<ManagedPod>);

    impl PodSource for Pods {
        fn managed_pods(&self) -> Vec<ManagedPod> {
            self.0.clone()
        }
    }

    /// Refuses the first `refuse` requests (a PodDisruptionBudget), then accepts.
    struct Budget {
        refuse: usize,
        calls: AtomicUsize,
        evicted: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Evictor for Budget {
        fn name(&self) -> &'static str {
            "api"
        }
        async fn evict(&self, pod: &EvictPod, _grace: Duration) -> Result<Evicted, EvictError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.refuse {
                return Ok(Evicted::Refused {
                    message: "Cannot evict pod as it would violate the pod's disruption budget."
                        .into(),
                });
            }
            self.evicted.lock().unwrap().push(pod.name.clone());
            Ok(Evicted::Evicting {
                disruption_target: true,
                gone: false,
            })
        }
    }

    fn pod(i: usize) -> ManagedPod {
        ManagedPod {
            sandbox_id: format!("sb{i}"),
            cgroup_parent: format!("/kubepods/besteffort/pod{i}"),
            qos: QosClass::BestEffort,
            pod: Pod {
                namespace: "ns".into(),
                name: format!("p{i}"),
                uid: format!("u{i}"),
                ..Default::default()
            },
            container_ids: Vec::new(),
            batch: false,
        }
    }

    #[tokio::test]
    async fn log_directories_learnt_once_are_measured_and_forgotten_with_their_container() {
        let t = tempfile::tempdir().unwrap();
        let logs = t.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::write(logs.join("0.log"), vec![b'x'; 64 * 1024]).unwrap();
        let sources = SignalSources {
            root: t.path().to_path_buf(),
            nodefs: t.path().join("none"),
            imagefs: t.path().join("none"),
        };
        let mut p = pod(1);
        p.container_ids = vec!["c1".into()];
        p.pod.containers = vec![topolet_core::kube::pod::Container {
            name: "app".into(),
            ..Default::default()
        }];
        let mut dirs = LogDirs::from([
            ("c1".to_string(), logs.clone()),
            ("gone".to_string(), logs.clone()),
        ]);
        // No CRI client: the directory known from an earlier interval is what gets measured.
        let usage = measure_pods(&sources, &[p.clone()], true, None, &mut dirs).await;
        assert!(
            usage["u1"].disk.bytes >= 64 * 1024,
            "{:?}",
            usage["u1"].disk
        );
        assert_eq!(
            dirs.keys().collect::<Vec<_>>(),
            ["c1"],
            "a container no pod has is forgotten"
        );
        // Without a disk signal to rank, nothing is walked, and the directory is kept.
        let usage = measure_pods(&sources, &[p], false, None, &mut dirs).await;
        assert_eq!(usage["u1"].disk.bytes, 0);
        assert!(dirs.contains_key("c1"));
    }

    /// A loop under PID pressure (pid_max 1000, 900 tasks, threshold 500) over 7 pods.
    fn under_pid_pressure(evictor: Arc<Budget>) -> (tempfile::TempDir, EvictionLoop) {
        let t = tempfile::tempdir().unwrap();
        let kernel = t.path().join("proc/sys/kernel");
        std::fs::create_dir_all(&kernel).unwrap();
        std::fs::write(kernel.join("pid_max"), "1000\n").unwrap();
        std::fs::write(t.path().join("proc/loadavg"), "0.1 0.1 0.1 1/900 1\n").unwrap();
        let section: EvictionSection = toml::from_str(
            "interval = \"1s\"\nhard = { \"pid.available\" = \"500\" }\naction = \"api\"",
        )
        .unwrap();
        let config = section.settings().unwrap();
        let metrics = Arc::new(Metrics::new());
        let l = EvictionLoop {
            sources: SignalSources {
                root: t.path().to_path_buf(),
                nodefs: t.path().join("none"),
                imagefs: t.path().join("none"),
            },
            config,
            pods: Arc::new(Pods((0..7).map(pod).collect())),
            evictor,
            cri: None,
            stats: Arc::new(EvictionStats::default()),
            metrics: Some(metrics),
            facts: None,
            events: None,
            node_status: None,
            report: None,
            reclaim: None,
            node_name: None,
        };
        (t, l)
    }

    #[tokio::test]
    async fn refusals_move_on_at_most_a_few_requests_per_interval() {
        let budget = Arc::new(Budget {
            refuse: usize::MAX,
            calls: AtomicUsize::new(0),
            evicted: Mutex::new(Vec::new()),
        });
        let (_t, l) = under_pid_pressure(budget.clone());
        let state = Mutex::new(LoopState::default());
        l.iterate(&state).await;
        assert_eq!(
            budget.calls.load(Ordering::SeqCst),
            MAX_ATTEMPTS_PER_INTERVAL
        );
        l.iterate(&state).await;
        assert_eq!(
            budget.calls.load(Ordering::SeqCst),
            2 * MAX_ATTEMPTS_PER_INTERVAL,
            "one pass per interval, never a hot loop"
        );
        let m = l.metrics.as_ref().unwrap();
        assert_eq!(
            m.eviction_results("api", "pdb_refused"),
            2 * MAX_ATTEMPTS_PER_INTERVAL as u64
        );
        assert!(budget.evicted.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_refused_pod_is_skipped_for_the_next_one() {
        let budget = Arc::new(Budget {
            refuse: 1,
            calls: AtomicUsize::new(0),
            evicted: Mutex::new(Vec::new()),
        });
        let (_t, l) = under_pid_pressure(budget.clone());
        let state = Mutex::new(LoopState::default());
        l.iterate(&state).await;
        assert_eq!(budget.calls.load(Ordering::SeqCst), 2);
        assert_eq!(budget.evicted.lock().unwrap().len(), 1);
        let m = l.metrics.as_ref().unwrap();
        assert_eq!(m.eviction_results("api", "pdb_refused"), 1);
        assert_eq!(m.eviction_results("api", "evicted"), 1);
    }

    // --------------------------------------------------------------------------------------------
    // Observation off the runtime: an NRI request is answered while a read of the loop blocks.

    use std::path::{Path, PathBuf};
    use topolet_core::machine::topology::SyntheticSpec;
    use topolet_nri::api;
    use topolet_nri::fake_runtime::FakeRuntime;
    use topolet_testkit::nri_harness;

    /// Guard against hangs only, never a timing assertion.
    const GUARD: Duration = Duration::from_secs(20);

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// Replaces `path` by a FIFO: opening it for reading blocks until a writer opens it, and
    /// reading it until every writer has closed it — a cgroup or `/proc` read that stalls.
    fn fifo(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(path);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
        assert_eq!(rc, 0, "mkfifo {}", path.display());
    }

    /// A BestEffort pod and its container, as the kubelet has containerd send them.
    fn be_pod(uid: &str) -> (api::PodSandbox, api::Container) {
        let mut linux = api::LinuxPodSandbox::new();
        linux.cgroup_parent = format!("/kubepods/besteffort/pod{uid}");
        let pod = api::PodSandbox {
            id: format!("sb-{uid}"),
            uid: uid.into(),
            name: format!("pod-{uid}"),
            namespace: "default".into(),
            linux: Some(linux).into(),
            ..Default::default()
        };
        let mut cpu = api::LinuxCPU::new();
        cpu.shares = Some(api::OptionalUInt64 {
            value: 2,
            ..Default::default()
        })
        .into();
        let mut res = api::LinuxResources::new();
        res.cpu = Some(cpu).into();
        let mut cl = api::LinuxContainer::new();
        cl.resources = Some(res).into();
        cl.oom_score_adj = Some(api::OptionalInt {
            value: 1000,
            ..Default::default()
        })
        .into();
        let c = api::Container {
            id: format!("{uid}-main"),
            pod_sandbox_id: pod.id.clone(),
            name: "main".into(),
            linux: Some(cl).into(),
            ..Default::default()
        };
        (pod, c)
    }

    fn create_request(pod: &api::PodSandbox, c: &api::Container) -> api::CreateContainerRequest {
        api::CreateContainerRequest {
            pod: Some(pod.clone()).into(),
            container: Some(c.clone()).into(),
            ..Default::default()
        }
    }

    /// The real plugin behind its stub on a current-thread runtime (one thread: anything the
    /// eviction loop did on it would hold every NRI request), with pod `p1` created; the loop
    /// then starts over `root`, whose file `blocked` (relative) is a FIFO held open for writing
    /// by a thread until told to write and close. A second CreateContainer must be answered
    /// while the loop is inside that read, and the loop must finish its interval afterwards.
    async fn answered_while_blocked_at(blocked: &str) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        write(&root, "proc/meminfo", "MemTotal: 1048576 kB\n");
        write(&root, "proc/sys/kernel/pid_max", "1000\n");
        write(&root, "proc/loadavg", "0.1 0.1 0.1 1/100 1\n");
        // cgroup v2 (no memory/ directory): the pod's usage from its own directory.
        let pod_cg = "sys/fs/cgroup/kubepods/besteffort/podp1";
        write(&root, &format!("{pod_cg}/memory.current"), "4096\n");
        write(&root, &format!("{pod_cg}/memory.stat"), "inactive_file 0\n");
        write(&root, &format!("{pod_cg}/pids.current"), "1\n");
        // What the blocked file holds once released (read before it becomes the FIFO).
        let fifo_path: PathBuf = root.join(blocked);
        let text = std::fs::read_to_string(&fifo_path).unwrap();
        fifo(&fifo_path);

        let topology = SyntheticSpec::TWO_CORES.build();
        let mut config = crate::config::Config::default();
        config.cpu.reserved_cpus = Some("0".into());
        config.qos.oom_score_adj_floor = Some(0);
        config.state.dir = dir.path().join("state");
        let plugin = Arc::new(TopoletPlugin::new(config, topology).unwrap());
        let rt = FakeRuntime::bind(dir.path().join("nri.sock")).unwrap();
        // NRI v0.11: lifecycle events as StateChange, which the fake runtime sends.
        let attach =
            |stub: &topolet_nri::Stub<TopoletPlugin>| plugin.attach(stub.updater(), stub.status());
        let nri_harness::Connected { conn, task: serve } = nri_harness::connect(
            &rt,
            &dir.path().join("nri.sock"),
            plugin.clone(),
            attach,
            "v2.2.7",
            "v0.11.0",
        )
        .await;
        conn.synchronize(vec![], vec![], None).await.unwrap();
        let (p1, c1) = be_pod("p1");
        // The loop's pods are the sandboxes NRI announced (RunPodSandbox) with their containers.
        let run = api::StateChangeEvent {
            event: api::Event::RUN_POD_SANDBOX.into(),
            pod: Some(p1.clone()).into(),
            ..Default::default()
        };
        conn.state_change(&run).await.unwrap();
        conn.create_container(&create_request(&p1, &c1))
            .await
            .unwrap();

        // The writer end: opening it returns once the loop's read has opened the FIFO; it writes
        // and closes when released (or after GUARD, so a loop that blocks the runtime thread
        // ends the test with a failure instead of a hang).
        let (opened_tx, opened_rx) = tokio::sync::oneshot::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo_path)
                .unwrap();
            let _ = opened_tx.send(());
            let _ = release_rx.recv_timeout(GUARD);
            f.write_all(text.as_bytes()).unwrap();
        });

        let section: EvictionSection =
            toml::from_str("interval = \"1s\"\nhard = { \"pid.available\" = \"10\" }").unwrap();
        let stats = Arc::new(EvictionStats::default());
        let l = EvictionLoop {
            sources: SignalSources {
                root: root.clone(),
                nodefs: root.clone(),
                imagefs: root.clone(),
            },
            config: section.settings().unwrap(),
            pods: plugin.clone(),
            evictor: Arc::new(crate::pressure::actions::DryRun),
            cri: None,
            stats: stats.clone(),
            metrics: None,
            facts: None,
            events: None,
            node_status: None,
            report: None,
            reclaim: None,
            node_name: None,
        };
        let eviction = tokio::spawn(l.run());

        tokio::time::timeout(GUARD, opened_rx)
            .await
            .expect("the eviction loop never read the blocked file")
            .expect("the writer thread ended");
        let (p2, c2) = be_pod("p2");
        let reply = conn.create_container(&create_request(&p2, &c2)).await;
        let done = stats.snapshot().iterations;
        assert!(reply.is_ok(), "CreateContainer failed: {reply:?}");
        assert_eq!(
            done, 0,
            "CreateContainer was answered only after the observation blocked at {blocked} ended: \
             the loop read it on the runtime's thread"
        );

        release_tx.send(()).unwrap();
        writer.join().unwrap();
        // The interval completes once the read does (waits on the loop's own counter).
        let guard = Instant::now();
        while stats.snapshot().iterations == 0 {
            assert!(
                guard.elapsed() < GUARD,
                "the eviction interval never completed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let s = stats.snapshot();
        assert_eq!(s.panics, 0);
        eviction.abort();
        serve.abort();
    }

    #[tokio::test]
    async fn a_request_is_answered_while_a_node_signal_read_blocks() {
        answered_while_blocked_at("proc/meminfo").await;
    }

    #[tokio::test]
    async fn a_request_is_answered_while_a_pod_cgroup_read_blocks() {
        answered_while_blocked_at("sys/fs/cgroup/kubepods/besteffort/podp1/memory.current").await;
    }
}
