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
//!
//! The loop's parts are the modules beside it, listed in [`crate::pressure`].
//!
//! [`MAX_ATTEMPTS_PER_INTERVAL`]: crate::pressure::evict_one::MAX_ATTEMPTS_PER_INTERVAL
//! [`POD_CLEANUP_TIMEOUT`]: crate::pressure::evict_one::POD_CLEANUP_TIMEOUT

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::node_status::{NodeReport, ReportSender};
use crate::cluster::pod_facts::PodFacts;
use crate::cluster::recorder::EventSink;
use crate::nri::handlers::{ManagedPod, TopoletPlugin};
use crate::pressure::actions::Evictor;
use crate::pressure::blocking::off_runtime;
use crate::pressure::cpu_time::process_cpu_time;
use crate::pressure::cri::CriClient;
use crate::pressure::measure::{measure_pods, pods_pressure, usage_by_pod, LogDirs, MeasuredUsage};
use crate::pressure::observation::{core_observations, observations, Observed};
use crate::pressure::psi;
use crate::pressure::reclaim::NodeReclaim;
use crate::pressure::signals::{NodeStats, SignalSources};
use crate::pressure::status_report::pressure_report;
use crate::pressure::PressureReport;
use crate::telemetry::metrics::Metrics;
use topolet_core::eviction::node_status;
use topolet_core::eviction::{
    decide, EvictionConfig, NodeCondition, PressureTracker, Signal, SignalResource, Timestamp,
    UsageByPod,
};
use topolet_core::kube::pod::Pod;

/// Where the loop learns which pods exist: the NRI plugin on a node, a fixed list in tests.
pub trait PodSource: Send + Sync {
    fn managed_pods(&self) -> Vec<ManagedPod>;
}

impl PodSource for TopoletPlugin {
    fn managed_pods(&self) -> Vec<ManagedPod> {
        TopoletPlugin::managed_pods(self)
    }
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
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut StatsInner) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsInner {
        self.with(|s| s.clone())
    }
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

/// What the loop remembers between intervals: the core's pressure tracker and the loop's epoch
/// (the core's timestamps are durations since it).
pub struct LoopState {
    tracker: PressureTracker,
    epoch: Instant,
    /// The node conditions last logged, to log changes only.
    conditions: BTreeSet<NodeCondition>,
    /// The pod evicted last (uid, `namespace/name`, when) while it may still hold resources.
    pub(super) pending: Option<(String, String, Instant)>,
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

/// What one interval measured, for [`EvictionLoop::evict_one`].
pub(super) struct Seen<'a> {
    pub(super) observed: &'a BTreeMap<Signal, Observed>,
    pub(super) pods: &'a [ManagedPod],
    pub(super) usage: &'a HashMap<String, MeasuredUsage>,
    pub(super) by_pod: &'a UsageByPod,
}

impl EvictionLoop {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EvictionSection;

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
