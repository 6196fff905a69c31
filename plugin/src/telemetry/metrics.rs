//! Prometheus metrics: topolet's families (counters, gauges and histograms with labels) in a
//! small registry written for topolet, and their rendering (through
//! [`crate::telemetry::exposition`], the text format 0.0.4).
//!
//! The hot path — an NRI handler recording its latency or an outcome — touches one mutex held for
//! a map lookup and an add; nothing allocates once a label set has been seen. Values that are
//! state rather than events (shared-pool size, exclusive CPUs per NUMA node, NRI connects) are
//! not kept here: the scrape reads them from a snapshot and passes them to [`Metrics::render`].
//!
//! [`Metrics`] is also the handle other loops report through: the eviction loop calls
//! [`Metrics::eviction`], [`Metrics::set_signal`], [`Metrics::set_threshold`],
//! [`Metrics::set_condition`] and [`Metrics::set_pressure`] (PSI); until something does, those families are exposed with no samples
//! (and `topolet status` shows no pressure), never with made-up values.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::telemetry::exposition::{format_float, Family, Writer};
use crate::telemetry::family;

/// Upper bounds (seconds) of the NRI event latency buckets: 2.5µs to 2.5s. Most events take
/// tens of µs, so the low end is fine-grained (roughly 1-1.5-2-3-4-5 steps up to 100µs) for a
/// meaningful `histogram_quantile` median and p99 there (hack/bench.sh reads them); containerd's
/// default NRI request timeout is 2s, so the last finite bucket shows events close to being dropped.
pub const EVENT_BUCKETS: [f64; 25] = [
    0.000_002_5,
    0.000_005,
    0.000_007_5,
    0.000_01,
    0.000_015,
    0.000_02,
    0.000_03,
    0.000_04,
    0.000_05,
    0.000_075,
    0.000_1,
    0.000_15,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
];

/// The NRI events topolet times (`event` label values).
pub mod event {
    pub const CONFIGURE: &str = "configure";
    pub const SYNCHRONIZE: &str = "synchronize";
    pub const RUN_POD_SANDBOX: &str = "run_pod_sandbox";
    pub const REMOVE_POD_SANDBOX: &str = "remove_pod_sandbox";
    pub const CREATE_CONTAINER: &str = "create_container";
    pub const UPDATE_CONTAINER: &str = "update_container";
    pub const STOP_CONTAINER: &str = "stop_container";
    pub const REMOVE_CONTAINER: &str = "remove_container";
    pub const POST_START_CONTAINER: &str = "post_start_container";
}

#[derive(Debug, Clone, Default)]
struct Histogram {
    /// Cumulative counts are computed at render time; these are per-bucket.
    buckets: [u64; EVENT_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(i) = EVENT_BUCKETS.iter().position(|&le| seconds <= le) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += seconds;
    }
}

/// What node-level reclaim removed for one signal (and, in [`Metrics::node_reclaim`], what one
/// reclaim removed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeReclaimCounts {
    /// Reclaims by result (`relieved`, `not_enough`, `dry_run`).
    pub runs: BTreeMap<&'static str, u64>,
    pub images: u64,
    /// The sizes the runtime reported for the images removed.
    pub image_bytes: u64,
    pub containers: u64,
    pub sandboxes: u64,
    /// The signal's available bytes after reclaim minus before (0 when it did not grow).
    pub observed_bytes: u64,
}

#[derive(Debug, Default)]
struct Families {
    event_duration: BTreeMap<String, Histogram>,
    admissions: BTreeMap<(String, &'static str), u64>,
    refusals: BTreeMap<(&'static str, String), u64>,
    state_writes: BTreeMap<&'static str, u64>,
    /// A submitted state snapshot is not on disk yet (`crate::state::persister`).
    state_pending: bool,
    pod_cgroup_writes: BTreeMap<&'static str, u64>,
    refusal_logs_suppressed: BTreeMap<&'static str, u64>,
    evictions: BTreeMap<String, u64>,
    signals: BTreeMap<String, f64>,
    thresholds: BTreeMap<(String, String), f64>,
    conditions: BTreeMap<String, bool>,
    /// The node's PSI and each managed pod's (pod uid →), as of the eviction loop's last interval.
    node_pressure: Vec<StallLine>,
    pod_pressure: BTreeMap<String, Vec<StallLine>>,
    kube_events: BTreeMap<&'static str, u64>,
    kube_api_errors: BTreeMap<(&'static str, String), u64>,
    kube_client: bool,
    eviction_results: BTreeMap<(&'static str, &'static str), u64>,
    /// Node-level reclaim by signal: what it freed (`crate::pressure::reclaim`).
    node_reclaim: BTreeMap<String, NodeReclaimCounts>,
    node_status_patches: BTreeMap<(&'static str, &'static str), u64>,
    nrt_writes: BTreeMap<&'static str, u64>,
    /// (call, result) → calls to the kubelet's PodResources API (`crate::kubelet`).
    pod_resources_calls: BTreeMap<(&'static str, &'static str), u64>,
    /// (call, result) → calls served by the PodResources re-export (`crate::kubelet::reexport`).
    pod_resources_served: BTreeMap<(&'static str, &'static str), u64>,
    /// Connections to the HTTP endpoint by outcome (`crate::introspection::http`).
    http_connections: BTreeMap<&'static str, u64>,
    pod_truth: PodTruth,
    /// Containers the drift check compared, and those it found drifted by field.
    drift_checks: u64,
    drift_repairs: BTreeMap<&'static str, u64>,
    /// Container-seconds spent on CPUs another container holds exclusively, and the containers
    /// in that state at the last observation (`topolet_core::placement::breach`).
    breach_seconds: f64,
    breaching: u64,
    /// (trigger, result) → configuration reloads (`crate::config::reload`).
    config_reloads: BTreeMap<(&'static str, &'static str), u64>,
    /// Reclaimed CPU (`crate::reclaimed`).
    reclaimed: ReclaimedFamilies,
}

/// Reclaimed CPU's families, as the suppress loop last reported them.
#[derive(Debug, Clone, Default)]
struct ReclaimedFamilies {
    /// Set once the loop has run with the feature on.
    on: bool,
    /// zone (`node`, or the NUMA node's id) → the amount last handed to the publisher (milli-CPU).
    advertised: BTreeMap<String, u64>,
    /// Milli-CPU the batch pods used over the last suppress interval.
    batch_used: u64,
    /// Milli-CPU the batch pods may use now (the budget).
    budget: u64,
    /// Milli-CPU the batch pods' limits exceed their grants by.
    suppressed: u64,
    /// `cut` / `grow` → budget changes.
    reactions: BTreeMap<&'static str, u64>,
    /// From the end of the interval that showed the rise to the cut handed to the runtime.
    cut_latency: Histogram,
    /// result → batch pods evicted for starvation.
    evictions: BTreeMap<&'static str, u64>,
    /// result → writes of the extended resource on the Node.
    publishes: BTreeMap<&'static str, u64>,
    /// op (`read`, `freeze`) → failed accesses of batch containers' cgroups.
    cgroup_errors: BTreeMap<&'static str, u64>,
}

/// The pod watch (`crate::cluster::pod_directory`) and which source decided each admission.
#[derive(Debug, Clone, Default)]
struct PodTruth {
    /// (operation, source) → decisions.
    decisions: BTreeMap<(&'static str, &'static str), u64>,
    /// fallback reason → inversion decisions made while the client is on (or off: `api_off`).
    fallbacks: BTreeMap<&'static str, u64>,
    /// API-decided containers whose inversion disagreed on a fact both know.
    disagreements: u64,
    /// Bounded waits for a pod the watch had not delivered: `found` / `timeout`.
    waits: BTreeMap<&'static str, u64>,
    watch_errors: u64,
    watch_restarts: u64,
    /// Lists started again because the server no longer had the watch's resourceVersion.
    watch_relists: u64,
    /// verb (`list`, `watch`) → requests of the pod watch.
    watch_requests: BTreeMap<&'static str, u64>,
    synced: bool,
    pods: u64,
}

/// Values read from the plugin's state at scrape time.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub shared_pool_cpus: u64,
    pub reserved_cpus: u64,
    /// NUMA node → exclusive CPUs.
    pub exclusive_cpus: BTreeMap<usize, u64>,
    /// NUMA node → CPUs still free for exclusive use.
    pub free_cpus: BTreeMap<usize, u64>,
    pub managed_containers: u64,
    /// Containers another cpuset owner set up ([`family::LEFT_ALONE_CONTAINERS`]).
    pub left_alone_containers: u64,
    pub nri_connects: u64,
    pub nri_reconnects: u64,
    pub nri_synchronized: bool,
}

/// One pressure stall (PSI) line as exported: the resource (`cpu`, `memory`, `io`), the kind
/// (`some`: a task stalled, `full`: all stalled at once), the shares of the last 10, 60 and
/// 300 s stalled (percent) and the total stall time in µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StallLine {
    pub resource: &'static str,
    pub kind: &'static str,
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_us: u64,
}

/// The registry. Share it as `Arc<Metrics>`.
#[derive(Debug, Default)]
pub struct Metrics {
    families: Mutex<Families>,
    /// The last exposition's size: the next one's buffer starts that large.
    last_size: AtomicUsize,
}

/// Times one NRI event: records its duration when dropped (also on early returns).
pub struct EventTimer<'a> {
    metrics: &'a Metrics,
    event: &'static str,
    start: Instant,
}

impl Drop for EventTimer<'_> {
    fn drop(&mut self) {
        self.metrics.observe_event(self.event, self.start.elapsed());
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    fn lock(&self) -> MutexGuard<'_, Families> {
        // Plain counters: a panic elsewhere leaves them consistent.
        self.families.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts timing `event` (one of [`event`]); the duration is recorded when the timer drops.
    pub fn time(&self, event: &'static str) -> EventTimer<'_> {
        EventTimer {
            metrics: self,
            event,
            start: Instant::now(),
        }
    }

    /// Records one handling of `event` that took `elapsed`.
    pub fn observe_event(&self, event: &str, elapsed: Duration) {
        let mut f = self.lock();
        match f.event_duration.get_mut(event) {
            Some(h) => h.observe(elapsed.as_secs_f64()),
            None => {
                let mut h = Histogram::default();
                h.observe(elapsed.as_secs_f64());
                f.event_duration.insert(event.to_string(), h);
            }
        }
    }

    /// A container admitted: its QoS class and whether it got exclusive CPUs.
    pub fn admitted(&self, qos: &str, exclusive: bool) {
        let cpus = if exclusive { "exclusive" } else { "shared" };
        *self
            .lock()
            .admissions
            .entry((qos.to_string(), cpus))
            .or_default() += 1;
    }

    /// A container refused at `operation` (`create` or `resize`) for `reason` (a short, bounded
    /// label, see [`PlacementError::metric_label`](topolet_core::placement::refusal::PlacementError::metric_label)).
    pub fn refused(&self, operation: &'static str, reason: &str) {
        *self
            .lock()
            .refusals
            .entry((operation, reason.to_string()))
            .or_default() += 1;
    }

    /// A state-file write, successful or not.
    pub fn state_write(&self, ok: bool) {
        *self
            .lock()
            .state_writes
            .entry(if ok { "ok" } else { "error" })
            .or_default() += 1;
    }

    /// Whether a submitted state snapshot is still to be written (`crate::state::persister`).
    pub fn state_pending(&self, pending: bool) {
        self.lock().state_pending = pending;
    }

    /// A write of a pod cgroup's CPU values (`crate::host::pod_cgroup`), successful or not.
    pub fn pod_cgroup_write(&self, ok: bool) {
        *self
            .lock()
            .pod_cgroup_writes
            .entry(if ok { "ok" } else { "error" })
            .or_default() += 1;
    }

    /// A refusal at `operation` not logged: identical to the container's last logged one
    /// (`crate::telemetry::refusal_log`).
    pub fn refusal_log_suppressed(&self, operation: &'static str) {
        *self
            .lock()
            .refusal_logs_suppressed
            .entry(operation)
            .or_default() += 1;
    }

    /// The eviction loop evicted a pod because of `signal` (e.g. `memory.available`).
    pub fn eviction(&self, signal: &str) {
        *self.lock().evictions.entry(signal.to_string()).or_default() += 1;
    }

    /// The eviction loop observed `signal` at `value` (bytes for memory and filesystem space, a
    /// count for inodes and PIDs).
    pub fn set_signal(&self, signal: &str, value: f64) {
        self.lock().signals.insert(signal.to_string(), value);
    }

    /// The eviction loop's threshold of `kind` (`hard`, `soft`) for `signal`, in the signal's unit;
    /// `None` removes it (e.g. after a config reload).
    pub fn set_threshold(&self, signal: &str, kind: &str, value: Option<f64>) {
        let key = (signal.to_string(), kind.to_string());
        let mut f = self.lock();
        match value {
            Some(v) => {
                f.thresholds.insert(key, v);
            }
            None => {
                f.thresholds.remove(&key);
            }
        }
    }

    /// The eviction loop's reading of pressure stall information: the node's and each managed
    /// pod's (pod uid →; pods not listed lose their samples).
    pub fn set_pressure(&self, node: Vec<StallLine>, pods: BTreeMap<String, Vec<StallLine>>) {
        let mut f = self.lock();
        f.node_pressure = node;
        f.pod_pressure = pods;
    }

    /// The eviction loop's node condition (`MemoryPressure`, `DiskPressure`, `PIDPressure`).
    pub fn set_condition(&self, condition: &str, active: bool) {
        self.lock().conditions.insert(condition.to_string(), active);
    }

    /// An Event occurrence's outcome (`crate::cluster::recorder`): `created`, `patched`,
    /// `rate_limited`, `dropped_queue_full`, `failed`.
    pub fn kube_event(&self, result: &'static str) {
        *self.lock().kube_events.entry(result).or_default() += 1;
    }

    /// Occurrences with `result` so far (tests).
    pub fn kube_events(&self, result: &str) -> u64 {
        self.lock().kube_events.get(result).copied().unwrap_or(0)
    }

    /// A failed Kubernetes API request: `operation` (`create`, `patch`) and `code` (the HTTP
    /// status, or `connection` when there was no answer).
    pub fn kube_api_error(&self, operation: &'static str, code: &str) {
        *self
            .lock()
            .kube_api_errors
            .entry((operation, code.to_string()))
            .or_default() += 1;
    }

    /// A NodeResourceTopology write (`crate::cluster::nrt`): `created` or `updated`.
    pub fn nrt_write(&self, result: &'static str) {
        *self.lock().nrt_writes.entry(result).or_default() += 1;
    }

    /// One eviction attempt of `action` (`dry-run`, `cri`, `api`) ended with `result`:
    /// `evicted`, `already_gone`, `pdb_refused` (the API server's 429: a PodDisruptionBudget
    /// allows no disruption now), `error`.
    pub fn eviction_result(&self, action: &'static str, result: &'static str) {
        *self
            .lock()
            .eviction_results
            .entry((action, result))
            .or_default() += 1;
    }

    /// One node-level reclaim for `signal` ended with `result` (`relieved`: no pod needs
    /// evicting; `deferred`: dead containers removed, no pod evicted this interval;
    /// `not_enough`: a pod is evicted after it; `dry_run`: nothing removed), having
    /// removed what `freed` says.
    pub fn node_reclaim(&self, signal: &str, result: &'static str, freed: NodeReclaimCounts) {
        let mut f = self.lock();
        let c = f.node_reclaim.entry(signal.to_string()).or_default();
        *c.runs.entry(result).or_default() += 1;
        c.images += freed.images;
        c.image_bytes += freed.image_bytes;
        c.containers += freed.containers;
        c.sandboxes += freed.sandboxes;
        c.observed_bytes += freed.observed_bytes;
    }

    /// The node-level reclaim counts of `signal` so far (tests).
    pub fn node_reclaims(&self, signal: &str) -> NodeReclaimCounts {
        self.lock()
            .node_reclaim
            .get(signal)
            .cloned()
            .unwrap_or_default()
    }

    /// Attempts of `action` with `result` so far (tests).
    pub fn eviction_results(&self, action: &str, result: &str) -> u64 {
        let f = self.lock();
        f.eviction_results
            .iter()
            .filter(|((a, r), _)| *a == action && *r == result)
            .map(|(_, n)| *n)
            .sum()
    }

    /// A patch of the Node: `target` `conditions` (nodes/status) or `taints` (nodes), `result`
    /// `ok` or `error`.
    pub fn node_status_patch(&self, target: &'static str, result: &'static str) {
        *self
            .lock()
            .node_status_patches
            .entry((target, result))
            .or_default() += 1;
    }

    /// The Kubernetes API client is on.
    pub fn set_kube_client(&self, on: bool) {
        self.lock().kube_client = on;
    }

    /// An admission (`operation` `create`) decided from `source` (`api`, `inversion`).
    pub fn admission_source(&self, operation: &'static str, source: &'static str) {
        *self
            .lock()
            .pod_truth
            .decisions
            .entry((operation, source))
            .or_default() += 1;
    }

    /// A call to the kubelet's PodResources API (`crate::kubelet::pod_resources`).
    pub fn pod_resources_call(&self, call: &'static str, result: &'static str) {
        *self
            .lock()
            .pod_resources_calls
            .entry((call, result))
            .or_default() += 1;
    }

    /// A call served by the PodResources re-export (`crate::kubelet::reexport`).
    pub fn pod_resources_served(&self, call: &'static str, result: &'static str) {
        *self
            .lock()
            .pod_resources_served
            .entry((call, result))
            .or_default() += 1;
    }

    /// The inversion decided instead of the API, for `reason` (`topolet_core::placement::admission_input::Fallback`).
    pub fn admission_fallback(&self, reason: &'static str) {
        *self.lock().pod_truth.fallbacks.entry(reason).or_default() += 1;
    }

    /// The drift check compared one running container with what its process may use.
    pub fn drift_check(&self) {
        self.lock().drift_checks += 1;
    }

    /// The drift check found a container off its target in `field` (`cpus`, `mems`) and
    /// queued it to be sent its target again.
    pub fn drift_repair(&self, field: &'static str) {
        *self.lock().drift_repairs.entry(field).or_default() += 1;
    }

    /// The background task's breach observation (`topolet_core::placement::breach::Ledger`): `added` more container-seconds
    /// on others' exclusive CPUs, `open` containers in breach now.
    pub fn exclusive_breach(&self, added: Duration, open: usize) {
        let mut f = self.lock();
        f.breach_seconds += added.as_secs_f64();
        f.breaching = open as u64;
    }

    /// A configuration reload (`crate::config::reload`) on `trigger` (`sighup`, `file_change`) ended
    /// with `result`: `applied`, `unchanged` (valid, nothing to change), `rejected` (unreadable,
    /// does not parse or does not fit the machine), `refused` (would break a running container).
    pub fn config_reload(&self, trigger: &'static str, result: &'static str) {
        *self
            .lock()
            .config_reloads
            .entry((trigger, result))
            .or_default() += 1;
    }

    /// Reloads on `trigger` with `result` so far (tests).
    pub fn config_reloads(&self, trigger: &str, result: &str) -> u64 {
        let f = self.lock();
        f.config_reloads
            .iter()
            .filter(|((t, r), _)| *t == trigger && *r == result)
            .map(|(_, n)| *n)
            .sum()
    }

    /// An API decision whose inversion disagreed on a fact both sources know.
    pub fn admission_disagreement(&self) {
        self.lock().pod_truth.disagreements += 1;
    }

    /// A bounded wait for a pod the watch had not delivered: `found` or `timeout`.
    pub fn pod_wait(&self, result: &'static str) {
        *self.lock().pod_truth.waits.entry(result).or_default() += 1;
    }

    /// A request of the pod watch: `list` or `watch`.
    pub fn pod_watch_request(&self, verb: &'static str) {
        *self
            .lock()
            .pod_truth
            .watch_requests
            .entry(verb)
            .or_default() += 1;
    }

    /// The pod watch lists again: the server no longer had its resourceVersion (410 Gone).
    pub fn pod_watch_relist(&self) {
        self.lock().pod_truth.watch_relists += 1;
    }

    /// The pod watch failed (it watches again from its last version after a back-off).
    pub fn pod_watch_error(&self) {
        self.lock().pod_truth.watch_errors += 1;
    }

    /// The pod watch started again after an error.
    pub fn pod_watch_restart(&self) {
        self.lock().pod_truth.watch_restarts += 1;
    }

    /// The pod watch's store: synced or not, and how many pods it holds.
    pub fn set_pod_store(&self, synced: bool, pods: usize) {
        let mut f = self.lock();
        f.pod_truth.synced = synced;
        f.pod_truth.pods = pods as u64;
    }

    /// A write of the reclaimed-CPU extended resource on the Node: `ok` or `error`.
    pub fn reclaimed_publish(&self, result: &'static str) {
        *self.lock().reclaimed.publishes.entry(result).or_default() += 1;
    }

    /// The suppress loop's state after an interval: the amounts handed to the publisher by zone
    /// (`node`, or a NUMA node id), what batch pods used, may use, and are denied of their limits.
    pub fn set_reclaimed(
        &self,
        advertised: &[(String, u64)],
        batch_used: u64,
        budget: u64,
        suppressed: u64,
    ) {
        let mut f = self.lock();
        let r = &mut f.reclaimed;
        r.on = true;
        for (zone, v) in advertised {
            r.advertised.insert(zone.clone(), *v);
        }
        r.batch_used = batch_used;
        r.budget = budget;
        r.suppressed = suppressed;
    }

    /// The batch budget moved (`cut` or `grow`); a cut's `latency` from the usage reading that
    /// showed the rise to the new quotas handed to the runtime.
    pub fn reclaimed_reaction(&self, kind: &'static str, latency: Option<Duration>) {
        let mut f = self.lock();
        *f.reclaimed.reactions.entry(kind).or_default() += 1;
        if let Some(l) = latency {
            f.reclaimed.cut_latency.observe(l.as_secs_f64());
        }
    }

    /// A connection to the HTTP endpoint ended with `result` (one of
    /// `crate::introspection::http::RESULTS`).
    pub fn http_connection(&self, result: &'static str) {
        *self.lock().http_connections.entry(result).or_default() += 1;
    }

    /// Connections to the HTTP endpoint that ended with `result`.
    pub fn http_connections(&self, result: &str) -> u64 {
        self.lock()
            .http_connections
            .get(result)
            .copied()
            .unwrap_or(0)
    }

    /// A starved batch pod's eviction ended with `result` (`evicted`, `refused`, `error`, `dry_run`).
    pub fn reclaimed_eviction(&self, result: &'static str) {
        *self.lock().reclaimed.evictions.entry(result).or_default() += 1;
    }

    /// A batch pod's cgroup could not be read (`read`), a batch container's freezer written
    /// (`freeze`) or its quota written directly (`quota`).
    pub fn reclaimed_cgroup_error(&self, op: &'static str) {
        *self.lock().reclaimed.cgroup_errors.entry(op).or_default() += 1;
    }

    /// The exposition text (format 0.0.4) of every family, with `gauges` read from the plugin.
    pub fn render(&self, gauges: &Gauges) -> String {
        // Copy under the lock, format outside it.
        let f = {
            let g = self.lock();
            Families {
                event_duration: g.event_duration.clone(),
                admissions: g.admissions.clone(),
                refusals: g.refusals.clone(),
                state_writes: g.state_writes.clone(),
                state_pending: g.state_pending,
                pod_cgroup_writes: g.pod_cgroup_writes.clone(),
                refusal_logs_suppressed: g.refusal_logs_suppressed.clone(),
                evictions: g.evictions.clone(),
                signals: g.signals.clone(),
                thresholds: g.thresholds.clone(),
                conditions: g.conditions.clone(),
                node_pressure: g.node_pressure.clone(),
                pod_pressure: g.pod_pressure.clone(),
                kube_events: g.kube_events.clone(),
                kube_api_errors: g.kube_api_errors.clone(),
                kube_client: g.kube_client,
                nrt_writes: g.nrt_writes.clone(),
                pod_resources_calls: g.pod_resources_calls.clone(),
                pod_resources_served: g.pod_resources_served.clone(),
                http_connections: g.http_connections.clone(),
                pod_truth: g.pod_truth.clone(),
                drift_checks: g.drift_checks,
                drift_repairs: g.drift_repairs.clone(),
                breach_seconds: g.breach_seconds,
                breaching: g.breaching,
                config_reloads: g.config_reloads.clone(),
                reclaimed: g.reclaimed.clone(),
                eviction_results: g.eviction_results.clone(),
                node_reclaim: g.node_reclaim.clone(),
                node_status_patches: g.node_status_patches.clone(),
            }
        };
        let mut w = Writer::with_capacity(self.last_size.load(Ordering::Relaxed));

        w.header(&family::BUILD_INFO);
        w.sample(
            family::BUILD_INFO.name,
            &[("version", crate::version())],
            1.0,
        );

        w.header(&family::NRI_EVENT_DURATION_SECONDS);
        for (event, h) in &f.event_duration {
            write_histogram(
                &mut w,
                family::NRI_EVENT_DURATION_SECONDS.name,
                Some(("event", event.as_str())),
                h,
                bucket_les(),
            );
        }

        w.header(&family::ADMISSIONS_TOTAL);
        for ((qos, cpus), n) in &f.admissions {
            w.sample(
                family::ADMISSIONS_TOTAL.name,
                &[("qos", qos.as_str()), ("cpus", cpus)],
                *n as f64,
            );
        }
        w.header(&family::REFUSALS_TOTAL);
        for ((op, reason), n) in &f.refusals {
            w.sample(
                family::REFUSALS_TOTAL.name,
                &[("operation", op), ("reason", reason.as_str())],
                *n as f64,
            );
        }

        w.header(&family::REFUSAL_LOGS_SUPPRESSED_TOTAL);
        for (op, n) in &f.refusal_logs_suppressed {
            w.sample(
                family::REFUSAL_LOGS_SUPPRESSED_TOTAL.name,
                &[("operation", op)],
                *n as f64,
            );
        }

        w.single(&family::SHARED_POOL_CPUS, gauges.shared_pool_cpus as f64);
        w.single(&family::RESERVED_CPUS, gauges.reserved_cpus as f64);
        w.header(&family::EXCLUSIVE_CPUS);
        for (node, n) in &gauges.exclusive_cpus {
            w.sample(
                family::EXCLUSIVE_CPUS.name,
                &[("numa_node", node.to_string().as_str())],
                *n as f64,
            );
        }
        w.header(&family::FREE_EXCLUSIVE_CPUS);
        for (node, n) in &gauges.free_cpus {
            w.sample(
                family::FREE_EXCLUSIVE_CPUS.name,
                &[("numa_node", node.to_string().as_str())],
                *n as f64,
            );
        }
        w.single(
            &family::LEFT_ALONE_CONTAINERS,
            gauges.left_alone_containers as f64,
        );
        w.single(
            &family::MANAGED_CONTAINERS,
            gauges.managed_containers as f64,
        );

        w.single(&family::NRI_CONNECTS_TOTAL, gauges.nri_connects as f64);
        w.single(&family::NRI_RECONNECTS_TOTAL, gauges.nri_reconnects as f64);
        w.single(
            &family::NRI_SYNCHRONIZED,
            if gauges.nri_synchronized { 1.0 } else { 0.0 },
        );

        w.header(&family::STATE_FILE_WRITES_TOTAL);
        for (result, n) in &f.state_writes {
            w.sample(
                family::STATE_FILE_WRITES_TOTAL.name,
                &[("result", result)],
                *n as f64,
            );
        }

        w.header(&family::STATE_FILE_PENDING);
        w.sample(
            family::STATE_FILE_PENDING.name,
            &[],
            if f.state_pending { 1.0 } else { 0.0 },
        );

        w.header(&family::POD_CGROUP_WRITES_TOTAL);
        for (result, n) in &f.pod_cgroup_writes {
            w.sample(
                family::POD_CGROUP_WRITES_TOTAL.name,
                &[("result", result)],
                *n as f64,
            );
        }

        w.header(&family::EVICTIONS_TOTAL);
        for (signal, n) in &f.evictions {
            w.sample(
                family::EVICTIONS_TOTAL.name,
                &[("signal", signal.as_str())],
                *n as f64,
            );
        }
        w.header(&family::NODE_RECLAIM_TOTAL);
        for (signal, c) in &f.node_reclaim {
            for (result, n) in &c.runs {
                w.sample(
                    family::NODE_RECLAIM_TOTAL.name,
                    &[("signal", signal.as_str()), ("result", result)],
                    *n as f64,
                );
            }
        }
        for (family, get) in [
            (
                &family::NODE_RECLAIM_IMAGES_TOTAL,
                (|c: &NodeReclaimCounts| c.images) as fn(&NodeReclaimCounts) -> u64,
            ),
            (&family::NODE_RECLAIM_IMAGE_BYTES_TOTAL, |c| c.image_bytes),
            (&family::NODE_RECLAIM_CONTAINERS_TOTAL, |c| c.containers),
            (&family::NODE_RECLAIM_SANDBOXES_TOTAL, |c| c.sandboxes),
            (&family::NODE_RECLAIM_OBSERVED_BYTES_TOTAL, |c| {
                c.observed_bytes
            }),
        ] {
            w.header(family);
            for (signal, c) in &f.node_reclaim {
                w.sample(family.name, &[("signal", signal.as_str())], get(c) as f64);
            }
        }
        w.header(&family::EVICTION_ATTEMPTS_TOTAL);
        for ((action, result), n) in &f.eviction_results {
            w.sample(
                family::EVICTION_ATTEMPTS_TOTAL.name,
                &[("action", action), ("result", result)],
                *n as f64,
            );
        }
        w.header(&family::NODE_STATUS_PATCHES_TOTAL);
        for ((target, result), n) in &f.node_status_patches {
            w.sample(
                family::NODE_STATUS_PATCHES_TOTAL.name,
                &[("target", target), ("result", result)],
                *n as f64,
            );
        }
        w.header(&family::EVICTION_SIGNAL_VALUE);
        for (signal, v) in &f.signals {
            w.sample(
                family::EVICTION_SIGNAL_VALUE.name,
                &[("signal", signal.as_str())],
                *v,
            );
        }
        w.header(&family::EVICTION_THRESHOLD);
        for ((signal, kind), v) in &f.thresholds {
            w.sample(
                family::EVICTION_THRESHOLD.name,
                &[("signal", signal.as_str()), ("kind", kind.as_str())],
                *v,
            );
        }
        w.header(&family::NODE_CONDITION);
        for (cond, on) in &f.conditions {
            w.sample(
                family::NODE_CONDITION.name,
                &[("condition", cond.as_str())],
                if *on { 1.0 } else { 0.0 },
            );
        }
        render_pressure(&mut w, &f.node_pressure, &f.pod_pressure);

        w.single(
            &family::KUBE_CLIENT_ENABLED,
            if f.kube_client { 1.0 } else { 0.0 },
        );
        w.header(&family::KUBE_EVENTS_TOTAL);
        for (result, n) in &f.kube_events {
            w.sample(
                family::KUBE_EVENTS_TOTAL.name,
                &[("result", result)],
                *n as f64,
            );
        }
        w.header(&family::KUBE_API_ERRORS_TOTAL);
        for ((op, code), n) in &f.kube_api_errors {
            w.sample(
                family::KUBE_API_ERRORS_TOTAL.name,
                &[("operation", op), ("code", code.as_str())],
                *n as f64,
            );
        }
        w.header(&family::NRT_WRITES_TOTAL);
        for (result, n) in &f.nrt_writes {
            w.sample(
                family::NRT_WRITES_TOTAL.name,
                &[("result", result)],
                *n as f64,
            );
        }
        w.header(&family::POD_RESOURCES_CALLS_TOTAL);
        for ((call, result), n) in &f.pod_resources_calls {
            w.sample(
                family::POD_RESOURCES_CALLS_TOTAL.name,
                &[("call", call), ("result", result)],
                *n as f64,
            );
        }
        w.header(&family::POD_RESOURCES_SERVED_TOTAL);
        for ((call, result), n) in &f.pod_resources_served {
            w.sample(
                family::POD_RESOURCES_SERVED_TOTAL.name,
                &[("call", call), ("result", result)],
                *n as f64,
            );
        }
        w.header(&family::HTTP_CONNECTIONS_TOTAL);
        for (result, n) in &f.http_connections {
            w.sample(
                family::HTTP_CONNECTIONS_TOTAL.name,
                &[("result", result)],
                *n as f64,
            );
        }
        render_pod_truth(&mut w, &f.pod_truth);
        render_reclaimed(&mut w, &f.reclaimed);
        w.header(&family::DRIFT_CHECKS_TOTAL);
        w.sample(family::DRIFT_CHECKS_TOTAL.name, &[], f.drift_checks as f64);
        w.header(&family::DRIFT_REPAIRS_TOTAL);
        for (field, n) in &f.drift_repairs {
            w.sample(
                family::DRIFT_REPAIRS_TOTAL.name,
                &[("field", field)],
                *n as f64,
            );
        }
        w.header(&family::EXCLUSIVE_BREACH_SECONDS_TOTAL);
        w.sample(
            family::EXCLUSIVE_BREACH_SECONDS_TOTAL.name,
            &[],
            f.breach_seconds,
        );
        w.header(&family::EXCLUSIVE_BREACH_CONTAINERS);
        w.sample(
            family::EXCLUSIVE_BREACH_CONTAINERS.name,
            &[],
            f.breaching as f64,
        );
        w.header(&family::CONFIG_RELOADS_TOTAL);
        for ((trigger, result), n) in &f.config_reloads {
            w.sample(
                family::CONFIG_RELOADS_TOTAL.name,
                &[("trigger", trigger), ("result", result)],
                *n as f64,
            );
        }
        let text = w.finish();
        self.last_size.store(text.len(), Ordering::Relaxed);
        text
    }
}

/// [`EVENT_BUCKETS`] spelled as the `le` labels write them, once per process.
fn bucket_les() -> &'static [String] {
    static LES: LazyLock<Vec<String>> =
        LazyLock::new(|| EVENT_BUCKETS.iter().map(|le| format_float(*le)).collect());
    &LES
}

/// One histogram series: its cumulative buckets (`les`: [`bucket_les`]), `+Inf`,
/// `_sum` and `_count`, each with `label` when given.
fn write_histogram(
    w: &mut Writer,
    name: &str,
    label: Option<(&str, &str)>,
    h: &Histogram,
    les: &[String],
) {
    let bucket = |w: &mut Writer, le: &str, n: u64| match label {
        Some(l) => w.sample_of(name, "_bucket", &[l, ("le", le)], n as f64),
        None => w.sample_of(name, "_bucket", &[("le", le)], n as f64),
    };
    let mut cumulative = 0;
    for (le, n) in les.iter().zip(h.buckets) {
        cumulative += n;
        bucket(w, le, cumulative);
    }
    bucket(w, "+Inf", h.count);
    let label: &[(&str, &str)] = match &label {
        Some(l) => std::slice::from_ref(l),
        None => &[],
    };
    w.sample_of(name, "_sum", label, h.sum);
    w.sample_of(name, "_count", label, h.count as f64);
}

fn render_pressure(w: &mut Writer, node: &[StallLine], pods: &BTreeMap<String, Vec<StallLine>>) {
    w.header(&family::PRESSURE_STALL_SECONDS_TOTAL);
    for s in node {
        w.sample(
            family::PRESSURE_STALL_SECONDS_TOTAL.name,
            &[("resource", s.resource), ("kind", s.kind)],
            s.total_us as f64 / 1e6,
        );
    }
    w.header(&family::PRESSURE_STALL_AVG10_RATIO);
    for s in node {
        w.sample(
            family::PRESSURE_STALL_AVG10_RATIO.name,
            &[("resource", s.resource), ("kind", s.kind)],
            s.avg10 / 100.0,
        );
    }
    w.header(&family::POD_PRESSURE_STALL_SECONDS_TOTAL);
    for (uid, lines) in pods {
        for s in lines {
            w.sample(
                family::POD_PRESSURE_STALL_SECONDS_TOTAL.name,
                &[
                    ("pod_uid", uid.as_str()),
                    ("resource", s.resource),
                    ("kind", s.kind),
                ],
                s.total_us as f64 / 1e6,
            );
        }
    }
}

fn render_reclaimed(w: &mut Writer, r: &ReclaimedFamilies) {
    w.header(&family::RECLAIMED_CPU_ADVERTISED_MILLICPU);
    for (zone, v) in &r.advertised {
        w.sample(
            family::RECLAIMED_CPU_ADVERTISED_MILLICPU.name,
            &[("zone", zone.as_str())],
            *v as f64,
        );
    }
    let gauges: [(&Family, u64); 3] = [
        (&family::RECLAIMED_CPU_BATCH_USED_MILLICPU, r.batch_used),
        (&family::RECLAIMED_CPU_BUDGET_MILLICPU, r.budget),
        (&family::RECLAIMED_CPU_SUPPRESSED_MILLICPU, r.suppressed),
    ];
    for (family, v) in gauges {
        w.header(family);
        if r.on {
            w.sample(family.name, &[], v as f64);
        }
    }
    w.header(&family::RECLAIMED_CPU_REACTIONS_TOTAL);
    for (kind, n) in &r.reactions {
        w.sample(
            family::RECLAIMED_CPU_REACTIONS_TOTAL.name,
            &[("kind", kind)],
            *n as f64,
        );
    }
    let name = family::RECLAIMED_CPU_CUT_LATENCY_SECONDS.name;
    w.header(&family::RECLAIMED_CPU_CUT_LATENCY_SECONDS);
    if r.cut_latency.count > 0 {
        write_histogram(w, name, None, &r.cut_latency, bucket_les());
    }
    for (family, map) in [
        (&family::RECLAIMED_CPU_EVICTIONS_TOTAL, &r.evictions),
        (&family::RECLAIMED_CPU_PUBLISHES_TOTAL, &r.publishes),
    ] {
        w.header(family);
        for (result, n) in map {
            w.sample(family.name, &[("result", result)], *n as f64);
        }
    }
    let family = &family::RECLAIMED_CPU_CGROUP_ERRORS_TOTAL;
    w.header(family);
    for (op, n) in &r.cgroup_errors {
        w.sample(family.name, &[("op", op)], *n as f64);
    }
}

fn render_pod_truth(w: &mut Writer, p: &PodTruth) {
    w.header(&family::ADMISSION_DECISIONS_TOTAL);
    for ((op, source), n) in &p.decisions {
        w.sample(
            family::ADMISSION_DECISIONS_TOTAL.name,
            &[("operation", op), ("source", source)],
            *n as f64,
        );
    }
    w.header(&family::ADMISSION_FALLBACKS_TOTAL);
    for (reason, n) in &p.fallbacks {
        w.sample(
            family::ADMISSION_FALLBACKS_TOTAL.name,
            &[("reason", reason)],
            *n as f64,
        );
    }
    w.header(&family::ADMISSION_SOURCE_DISAGREEMENTS_TOTAL);
    w.sample(
        family::ADMISSION_SOURCE_DISAGREEMENTS_TOTAL.name,
        &[],
        p.disagreements as f64,
    );
    w.header(&family::KUBE_POD_WAITS_TOTAL);
    for (result, n) in &p.waits {
        w.sample(
            family::KUBE_POD_WAITS_TOTAL.name,
            &[("result", result)],
            *n as f64,
        );
    }
    w.header(&family::KUBE_POD_WATCH_ERRORS_TOTAL);
    w.sample(
        family::KUBE_POD_WATCH_ERRORS_TOTAL.name,
        &[],
        p.watch_errors as f64,
    );
    w.header(&family::KUBE_POD_WATCH_RESTARTS_TOTAL);
    w.sample(
        family::KUBE_POD_WATCH_RESTARTS_TOTAL.name,
        &[],
        p.watch_restarts as f64,
    );
    w.header(&family::KUBE_POD_WATCH_RELISTS_TOTAL);
    w.sample(
        family::KUBE_POD_WATCH_RELISTS_TOTAL.name,
        &[],
        p.watch_relists as f64,
    );
    w.header(&family::KUBE_POD_WATCH_REQUESTS_TOTAL);
    for verb in ["list", "watch"] {
        w.sample(
            family::KUBE_POD_WATCH_REQUESTS_TOTAL.name,
            &[("verb", verb)],
            p.watch_requests.get(verb).copied().unwrap_or(0) as f64,
        );
    }
    w.single(
        &family::KUBE_POD_STORE_SYNCED,
        if p.synced { 1.0 } else { 0.0 },
    );
    w.single(&family::KUBE_POD_STORE_PODS, p.pods as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use topolet_testkit::metrics_text::*;

    /// The families a scrape shows are exactly the catalogue's, once each, and each family's
    /// samples carry exactly the labels the catalogue declares (with every recorder called once).
    #[test]
    fn a_scrape_is_the_catalogue() {
        use crate::telemetry::family::CATALOGUE;
        let declared: Vec<&str> = {
            let mut v: Vec<&str> = CATALOGUE.iter().map(|f| f.name).collect();
            v.sort_unstable();
            v
        };
        let text = Metrics::new().render(&Gauges::default());
        let mut typed: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        typed.sort_unstable();
        assert_eq!(
            typed, declared,
            "families in a scrape against the catalogue"
        );

        let m = Metrics::new();
        m.observe_event(event::CREATE_CONTAINER, Duration::from_micros(50));
        m.admitted("guaranteed", true);
        m.refused("create", "InsufficientExclusiveCPUs");
        m.state_write(true);
        m.state_pending(true);
        m.pod_cgroup_write(true);
        m.refusal_log_suppressed("update");
        m.eviction("memory.available");
        m.set_signal("memory.available", 1.0);
        m.set_threshold("memory.available", "hard", Some(2.0));
        let line = StallLine {
            resource: "cpu",
            kind: "some",
            avg10: 1.0,
            avg60: 1.0,
            avg300: 1.0,
            total_us: 5,
        };
        m.set_pressure(
            vec![line],
            BTreeMap::from([("uid-1".to_string(), vec![line])]),
        );
        m.set_condition("MemoryPressure", true);
        m.kube_event("created");
        m.kube_api_error("event", "500");
        m.nrt_write("created");
        m.pod_resources_call("get", "ok");
        m.pod_resources_served("list", "ok");
        m.eviction_result("api", "evicted");
        m.node_reclaim(
            "nodefs.available",
            "relieved",
            NodeReclaimCounts {
                images: 1,
                ..NodeReclaimCounts::default()
            },
        );
        m.node_status_patch("conditions", "ok");
        m.set_kube_client(true);
        m.admission_source("create", "api");
        m.admission_fallback("not_synced");
        m.drift_check();
        m.drift_repair("cpus");
        m.exclusive_breach(Duration::from_secs(1), 1);
        m.config_reload("sighup", "applied");
        m.admission_disagreement();
        m.pod_wait("found");
        m.pod_watch_request("list");
        m.pod_watch_relist();
        m.pod_watch_error();
        m.pod_watch_restart();
        m.set_pod_store(true, 1);
        m.reclaimed_publish("ok");
        m.set_reclaimed(&[("node".to_string(), 100)], 1, 2, 3);
        m.reclaimed_reaction("cut", Some(Duration::from_millis(1)));
        m.http_connection("served");
        m.reclaimed_eviction("evicted");
        m.reclaimed_cgroup_error("read");
        let gauges = Gauges {
            exclusive_cpus: BTreeMap::from([(0, 1)]),
            free_cpus: BTreeMap::from([(0, 1)]),
            ..Gauges::default()
        };
        let samples = parse_exposition(&m.render(&gauges)).unwrap();
        for family in CATALOGUE {
            let mut seen: Vec<Vec<&str>> = samples
                .iter()
                .filter(|s| {
                    s.name == family.name
                        || ["_bucket", "_sum", "_count"]
                            .iter()
                            .any(|suffix| s.name == format!("{}{suffix}", family.name))
                })
                .map(|s| {
                    let mut labels: Vec<&str> = s
                        .labels
                        .keys()
                        .map(String::as_str)
                        .filter(|l| *l != "le")
                        .collect();
                    labels.sort_unstable();
                    labels
                })
                .collect();
            seen.dedup();
            let mut want: Vec<&str> = family.labels.to_vec();
            want.sort_unstable();
            assert_eq!(
                seen,
                vec![want],
                "{}: label sets of its samples",
                family.name
            );
        }
    }

    #[test]
    fn empty_registry_is_valid_and_has_no_fake_samples() {
        let m = Metrics::new();
        let text = m.render(&Gauges::default());
        let samples = parse_exposition(&text).unwrap();
        for family in [
            "topolet_evictions_total",
            "topolet_config_reloads_total",
            "topolet_eviction_signal_value",
            "topolet_eviction_threshold",
            "topolet_node_condition",
            "topolet_nri_event_duration_seconds",
        ] {
            assert!(text.contains(&format!("# TYPE {family} ")), "{family}");
            assert!(
                !samples.iter().any(|s| s.name.starts_with(family)),
                "{family} has samples before anything reported"
            );
        }
        assert_eq!(value(&samples, "topolet_nri_synchronized", &[]), Some(0.0));
    }

    #[test]
    fn breach_seconds_add_up_and_the_gauge_follows_the_last_observation() {
        let m = Metrics::new();
        let v = |m: &Metrics, name| {
            value(
                &parse_exposition(&m.render(&Gauges::default())).unwrap(),
                name,
                &[],
            )
        };
        assert_eq!(v(&m, "topolet_exclusive_breach_seconds_total"), Some(0.0));
        assert_eq!(v(&m, "topolet_exclusive_breach_containers"), Some(0.0));
        m.exclusive_breach(Duration::ZERO, 2);
        m.exclusive_breach(Duration::from_millis(1500), 1);
        assert_eq!(v(&m, "topolet_exclusive_breach_seconds_total"), Some(1.5));
        assert_eq!(v(&m, "topolet_exclusive_breach_containers"), Some(1.0));
        m.exclusive_breach(Duration::from_millis(500), 0);
        assert_eq!(v(&m, "topolet_exclusive_breach_seconds_total"), Some(2.0));
        assert_eq!(v(&m, "topolet_exclusive_breach_containers"), Some(0.0));
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_in_inf() {
        let m = Metrics::new();
        for us in [10, 60, 60, 900, 3_000_000] {
            m.observe_event(event::CREATE_CONTAINER, Duration::from_micros(us));
        }
        m.observe_event(event::SYNCHRONIZE, Duration::from_millis(3));
        let text = m.render(&Gauges::default());
        let samples = parse_exposition(&text).unwrap();
        let b = |le: &str| {
            value(
                &samples,
                "topolet_nri_event_duration_seconds_bucket",
                &[("event", "create_container"), ("le", le)],
            )
            .unwrap()
        };
        assert_eq!(b("0.0000075"), 0.0);
        assert_eq!(b("0.00001"), 1.0);
        assert_eq!(b("0.00005"), 1.0);
        assert_eq!(b("0.0001"), 3.0);
        assert_eq!(b("0.001"), 4.0);
        assert_eq!(b("2.5"), 4.0);
        assert_eq!(b("+Inf"), 5.0);
        let count = |e: &str| {
            value(
                &samples,
                "topolet_nri_event_duration_seconds_count",
                &[("event", e)],
            )
            .unwrap()
        };
        assert_eq!(count("create_container"), 5.0);
        assert_eq!(count("synchronize"), 1.0);
        let sum = value(
            &samples,
            "topolet_nri_event_duration_seconds_sum",
            &[("event", "create_container")],
        )
        .unwrap();
        assert!((sum - 3.00103).abs() < 1e-9, "{sum}");
        // Buckets never decrease, and there is one per bound plus +Inf.
        let buckets: Vec<f64> = samples
            .iter()
            .filter(|s| {
                s.name == "topolet_nri_event_duration_seconds_bucket"
                    && s.labels["event"] == "create_container"
            })
            .map(|s| s.value)
            .collect();
        assert_eq!(buckets.len(), EVENT_BUCKETS.len() + 1);
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]));
        // Bounds strictly increase and every one is rendered as Prometheus reads it back.
        assert!(EVENT_BUCKETS.windows(2).all(|w| w[0] < w[1]));
        for le in EVENT_BUCKETS {
            assert_eq!(format_float(le).parse::<f64>().unwrap(), le);
        }
    }

    #[test]
    fn pressure_stall_series() {
        let m = Metrics::new();
        let line = |resource, kind, avg10: f64, total_us: u64| StallLine {
            resource,
            kind,
            avg10,
            avg60: 0.5,
            avg300: 0.25,
            total_us,
        };
        let node = vec![
            line("cpu", "some", 2.0, 3_000_000),
            line("memory", "some", 1.5, 1_500_000),
            line("memory", "full", 0.5, 500_000),
        ];
        let pod = vec![
            line("memory", "some", 0.0, 250_000),
            line("memory", "full", 0.0, 0),
        ];
        m.set_pressure(node, BTreeMap::from([("uid-1".to_string(), pod)]));
        let s = parse_exposition(&m.render(&Gauges::default())).unwrap();
        let v = |n: &str, l: &[(&str, &str)]| value(&s, n, l);
        let total = "topolet_pressure_stall_seconds_total";
        assert_eq!(
            v(total, &[("resource", "cpu"), ("kind", "some")]),
            Some(3.0)
        );
        assert_eq!(v(total, &[("resource", "cpu"), ("kind", "full")]), None);
        assert_eq!(
            v(total, &[("resource", "memory"), ("kind", "full")]),
            Some(0.5)
        );
        assert_eq!(
            v(
                "topolet_pressure_stall_avg10_ratio",
                &[("resource", "memory"), ("kind", "some")]
            ),
            Some(0.015)
        );
        assert_eq!(
            v(
                "topolet_pod_pressure_stall_seconds_total",
                &[
                    ("pod_uid", "uid-1"),
                    ("resource", "memory"),
                    ("kind", "some")
                ]
            ),
            Some(0.25)
        );
        // A later interval replaces the pods: a gone pod loses its samples.
        m.set_pressure(Vec::new(), BTreeMap::new());
        let s = parse_exposition(&m.render(&Gauges::default())).unwrap();
        assert!(!s.iter().any(|x| x.name.contains("pressure_stall")));
    }

    #[test]
    fn reclaimed_cpu_families_appear_once_reported() {
        let m = Metrics::new();
        let s = parse_exposition(&m.render(&Gauges::default())).unwrap();
        // Before the loop reports: the families, no made-up samples.
        assert_eq!(
            value(&s, "topolet_reclaimed_cpu_budget_millicpu", &[]),
            None
        );
        m.set_reclaimed(&[("node".into(), 590), ("0".into(), 590)], 300, 590, 10);
        m.reclaimed_reaction("cut", Some(Duration::from_micros(300)));
        m.reclaimed_reaction("grow", None);
        m.reclaimed_eviction("evicted");
        m.reclaimed_publish("ok");
        m.reclaimed_cgroup_error("read");
        let s = parse_exposition(&m.render(&Gauges::default())).unwrap();
        let v = |n: &str, l: &[(&str, &str)]| value(&s, n, l);
        assert_eq!(
            v(
                "topolet_reclaimed_cpu_cgroup_errors_total",
                &[("op", "read")]
            ),
            Some(1.0)
        );
        assert_eq!(
            v(
                "topolet_reclaimed_cpu_advertised_millicpu",
                &[("zone", "node")]
            ),
            Some(590.0)
        );
        assert_eq!(
            v("topolet_reclaimed_cpu_batch_used_millicpu", &[]),
            Some(300.0)
        );
        assert_eq!(
            v("topolet_reclaimed_cpu_suppressed_millicpu", &[]),
            Some(10.0)
        );
        assert_eq!(
            v("topolet_reclaimed_cpu_reactions_total", &[("kind", "cut")]),
            Some(1.0)
        );
        assert_eq!(
            v("topolet_reclaimed_cpu_cut_latency_seconds_count", &[]),
            Some(1.0)
        );
        assert_eq!(
            v(
                "topolet_reclaimed_cpu_evictions_total",
                &[("result", "evicted")]
            ),
            Some(1.0)
        );
        assert_eq!(
            v("topolet_reclaimed_cpu_publishes_total", &[("result", "ok")]),
            Some(1.0)
        );
    }

    #[test]
    fn counters_gauges_and_eviction_series() {
        let m = Metrics::new();
        m.admitted("Guaranteed", true);
        m.admitted("Guaranteed", true);
        m.admitted("BestEffort", false);
        m.refused("create", "smt_alignment");
        m.state_write(true);
        m.state_write(false);
        m.eviction("pid.available");
        m.set_signal("memory.available", 1.5e9);
        m.set_threshold("memory.available", "hard", Some(1e8));
        m.set_threshold("memory.available", "soft", Some(2e8));
        m.set_threshold("memory.available", "soft", None);
        m.set_condition("MemoryPressure", false);
        m.set_condition("PIDPressure", true);
        {
            // The timer records on drop.
            let _t = m.time(event::REMOVE_CONTAINER);
        }
        let gauges = Gauges {
            shared_pool_cpus: 3,
            reserved_cpus: 1,
            exclusive_cpus: BTreeMap::from([(0, 2), (1, 0)]),
            free_cpus: BTreeMap::from([(0, 1), (1, 4)]),
            managed_containers: 7,
            left_alone_containers: 1,
            nri_connects: 2,
            nri_reconnects: 1,
            nri_synchronized: true,
        };
        let s = parse_exposition(&m.render(&gauges)).unwrap();
        let v = |n: &str, l: &[(&str, &str)]| value(&s, n, l);
        assert_eq!(
            v(
                "topolet_admissions_total",
                &[("qos", "Guaranteed"), ("cpus", "exclusive")]
            ),
            Some(2.0)
        );
        assert_eq!(
            v(
                "topolet_refusals_total",
                &[("operation", "create"), ("reason", "smt_alignment")]
            ),
            Some(1.0)
        );
        assert_eq!(
            v("topolet_state_file_writes_total", &[("result", "error")]),
            Some(1.0)
        );
        assert_eq!(v("topolet_shared_pool_cpus", &[]), Some(3.0));
        assert_eq!(
            v("topolet_exclusive_cpus", &[("numa_node", "0")]),
            Some(2.0)
        );
        assert_eq!(v("topolet_nri_reconnects_total", &[]), Some(1.0));
        assert_eq!(v("topolet_nri_synchronized", &[]), Some(1.0));
        assert_eq!(
            v("topolet_evictions_total", &[("signal", "pid.available")]),
            Some(1.0)
        );
        assert_eq!(
            v(
                "topolet_eviction_signal_value",
                &[("signal", "memory.available")]
            ),
            Some(1.5e9)
        );
        assert_eq!(
            v(
                "topolet_eviction_threshold",
                &[("signal", "memory.available"), ("kind", "soft")]
            ),
            None
        );
        assert_eq!(
            v("topolet_node_condition", &[("condition", "PIDPressure")]),
            Some(1.0)
        );
        assert_eq!(
            v(
                "topolet_nri_event_duration_seconds_count",
                &[("event", "remove_container")]
            ),
            Some(1.0)
        );
    }

    #[test]
    fn config_reloads_by_trigger_and_result() {
        let m = Metrics::new();
        m.config_reload("sighup", "applied");
        m.config_reload("sighup", "applied");
        m.config_reload("file_change", "refused");
        let s = parse_exposition(&m.render(&Gauges::default())).unwrap();
        let v = |t: &str, r: &str| {
            value(
                &s,
                "topolet_config_reloads_total",
                &[("trigger", t), ("result", r)],
            )
        };
        assert_eq!(v("sighup", "applied"), Some(2.0));
        assert_eq!(v("file_change", "refused"), Some(1.0));
        // Only outcomes that happened have samples.
        assert_eq!(v("sighup", "rejected"), None);
        assert_eq!(m.config_reloads("sighup", "applied"), 2);
        assert_eq!(m.config_reloads("file_change", "applied"), 0);
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::new();
        m.refused("create", "a\"b\\c\nd");
        let s = parse_exposition(&m.render(&Gauges::default())).unwrap();
        assert_eq!(
            value(&s, "topolet_refusals_total", &[("reason", "a\"b\\c\nd")]),
            Some(1.0)
        );
    }

    #[test]
    fn the_parser_rejects_what_prometheus_rejects() {
        for bad in [
            "metric{a=\"b\"}\n",
            "1metric 1\n",
            "metric{a=b} 1\n",
            "metric{a=\"b\" 1\n",
            "metric 1 2 3\n",
            "metric one\n",
            "m 1\n# TYPE m gauge\n",
            "# TYPE m gauge\n# TYPE m gauge\n",
            "# TYPE h histogram\nh_bucket 1\n",
            "# TYPE h histogram\nh 1\n",
            "metric{a=\"\\x\"} 1\n",
            "metric 1",
        ] {
            assert!(parse_exposition(bad).is_err(), "accepted {bad:?}");
        }
        let ok =
            parse_exposition("# HELP m x\n# TYPE m counter\nm{a=\"1\",b=\"2\"} 3 1700000000\n")
                .unwrap();
        assert_eq!(ok[0].labels.len(), 2);
    }

    #[test]
    fn floats_are_formatted_as_prometheus_reads_them() {
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(0.00005), "0.00005");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NAN), "NaN");
        assert_eq!(format_float(1.5e9), "1500000000");
    }
}
