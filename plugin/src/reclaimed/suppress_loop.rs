//! The suppress loop of reclaimed CPU ([`ReclaimedLoop`]). Every `[reclaimed] suppress_interval` it
//! reads the pool's CPU time and the batch pods' cgroups (`sampler`), asks the core
//! (`topolet_core::reclaimed`) how much the batch pods may use now and hands their new quotas to
//! the NRI handlers (`crate::nri::handlers`, `set_batch_budget`); every `interval` it adds a
//! sample to the smoothing windows and hands the amount to advertise to the Node's publisher
//! (`crate::cluster::extended_resource`); it evicts the batch pods that stayed starved, and
//! reports all of it to `topolet status`, the metrics and the NodeResourceTopology.
//!
//! It never fails the plugin: a reading that fails is logged and counted, and after
//! [`LOST_AFTER`] failures in a row the amount is withdrawn (0) and the batch pods are held at
//! the minimum until readings work again. Turning the feature off (reload) withdraws the amount
//! and gives the batch containers the plain BestEffort values back. Without the Kubernetes API
//! client (pods are batch by their spec) nothing is advertised and no pod is batch: the loop
//! says so, and still measures the pool and shows the formula in `topolet status`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::cluster::at_start::AtStart;
use crate::cluster::extended_resource::Advert;
use crate::cluster::recorder::EventSink;
use crate::host::cpu_usage::CpuTimeSource;
use crate::host::pod_cgroup::CpuController;
use crate::nri::handlers::ReclaimedInputs;
use crate::pressure::actions::{EvictPod, Evicted, Evictor};
use crate::reclaimed::batch_control::BatchControl;
use crate::reclaimed::sampler::{self, Reading};
use topolet_core::eviction::duration::format_duration;
use topolet_core::kube::events::{EventType, ObjectRef, Occurrence};
use topolet_core::reclaimed::starvation::Fed;
use topolet_core::reclaimed::{
    overrun, written_at, Advertiser, Aging, BatchStatus, Publish, ReclaimedSettings,
    ReclaimedStatus, Spill, Starvation, SuppressStep, Suppressor, Terms, UsageWindow,
    ZoneAdvertisers, ZoneTerms,
};

/// The state without the Kubernetes API client: measured, shown, never advertised or enforced.
pub const NO_API: &str =
    "off: needs the Kubernetes API client (batch pods are known by their spec); measuring only";

/// The Event reason on a pod that asks for the resource but is not treated as batch.
pub const NOT_BATCH_REASON: &str = "ReclaimedCPUNotBatch";

/// The state before the runtime's Synchronize.
pub const WAITING_SYNC: &str = "waiting for the NRI Synchronize";

/// Readings that fail in a row before the amount is withdrawn.
pub const LOST_AFTER: u32 = 3;
/// The Event reason of a starved batch pod's eviction.
pub const STARVED_REASON: &str = "ReclaimedCPUStarved";
/// The Event reason when the batch pods are cut to a tenth of their limits or less.
pub const SUPPRESSED_REASON: &str = "ReclaimedCPUSuppressed";

/// The loop and what it keeps between intervals.
pub struct ReclaimedLoop {
    plugin: Box<dyn BatchControl>,
    advert: Option<watch::Sender<Advert>>,
    evictor: Option<Arc<dyn Evictor>>,
    events: Option<EventSink>,
    /// Where the readings come from, found at the first reading.
    meters: Option<Meters>,
    /// What the Node and its NodeResourceTopology held when this topolet started: the first
    /// advertisers are seeded from it ([`ReclaimedLoop::seed`]), once.
    at_start: Option<AtStart>,
    /// This process's seed of the advertisers' rewrite ages ([`Aging`]).
    aging_seed: u64,
    state: State,
}

/// The cpuacct hierarchy (the pods' CPU time) and where each CPU's busy time is read.
#[derive(Debug, Clone)]
struct Meters {
    controller: CpuController,
    cpu_time: CpuTimeSource,
    /// Why the exact source could not be used, when it could not.
    why: Option<String>,
}

impl Meters {
    fn describe(&self) -> String {
        match &self.why {
            Some(why) => format!("{} ({why})", self.cpu_time.describe()),
            None => self.cpu_time.describe(),
        }
    }
}

#[derive(Default)]
struct State {
    on: bool,
    started: bool,
    said_no_api: bool,
    failures: u32,
    last_tick: Option<Reading>,
    last_interval: Option<Reading>,
    /// The pool's CPUs the windows measured (a new pool starts them over).
    pool: Option<topolet_core::machine::cpuset::CpuSet>,
    node_window: Option<UsageWindow>,
    zone_windows: BTreeMap<usize, UsageWindow>,
    advertiser: Option<Advertiser>,
    /// The NodeResourceTopology zones' amounts, damped by the same rule.
    zone_advertisers: Option<ZoneAdvertisers>,
    suppressor: Suppressor,
    starvation: Starvation,
    /// Batch pods whose eviction was asked (never asked twice).
    evicted: HashSet<String>,
    /// Batch pods told they are suppressed hard (one Event per episode).
    told_suppressed: HashSet<String>,
    node_terms: Terms,
    zone_terms: Vec<ZoneTerms>,
    regular_now: u64,
    batch_used: u64,
    /// The reserved CPUs' terms of the last interval.
    reserved: Spill,
    withdrawn: Option<String>,
    /// The Kubernetes API client is on (else: measured and shown only).
    api: bool,
    /// The suppress steps' readings over the last interval.
    recent: Option<UsageWindow>,
    /// The regular use that lowered the Node's amount between two samples (`overrun`): the
    /// next interval's sample counts at least this much, so the amount does not rise back
    /// because that sample's average began before the rise.
    overrun_regular: Option<u64>,
    /// Batch pods whose cgroup the last reading could not read: (`namespace/name`, error).
    batch_failed: Vec<(String, String)>,
    /// Batch pods whose unreadable cgroup was logged (once each until it reads again).
    told_unreadable: HashSet<String>,
    /// Pods told by an Event that they are not batch (once each).
    told_not_batch: HashSet<String>,
    /// Status lines: pods asking for the resource that are not batch.
    not_batch_lines: Vec<String>,
    /// The settings the windows and the advertiser were built with (a reload that changes
    /// `window`, `interval`, `min_change_percent` or `max_age` rebuilds them).
    built_with: Option<ReclaimedSettings>,
    /// The first tick after the Synchronize (the windows fill from then).
    first_reading: Option<Instant>,
    /// The time left until the usage window has filled since the first reading (zero once it
    /// has): nothing is advertised before, so that a (re)started topolet does not write, and
    /// take back, one amount per load step of its first `window` (the fleet simulation's
    /// restart storm, docs/src/fleet.md).
    filling: Duration,
    /// Each batch pod's use over the last interval (milli-CPU), by uid.
    batch_rates: BTreeMap<String, u64>,
    /// The pool's CPUs were saturated over the last interval (batch pods' use then says
    /// nothing of their demand).
    pool_saturated: bool,
}

/// The pool counts as saturated when it is this busy (percent of its CPUs' time, batch
/// included).
const SATURATED_PERCENT: u64 = 90;

impl ReclaimedLoop {
    pub fn new(plugin: impl BatchControl + 'static) -> ReclaimedLoop {
        ReclaimedLoop {
            plugin: Box::new(plugin),
            advert: None,
            evictor: None,
            events: None,
            meters: None,
            at_start: None,
            aging_seed: crate::cluster::start_jitter::seed(),
            state: State::default(),
        }
    }

    /// The Node's advertiser and the zones' for `settings`, their ages drawn from this
    /// process's seed (a fleet started together does not rewrite together).
    fn advertisers(&self, settings: &ReclaimedSettings) -> (Advertiser, ZoneAdvertisers) {
        let aging = Aging::spread(settings.max_age, self.aging_seed);
        (
            Advertiser::new(settings.min_change_percent, aging.derive(u64::MAX)),
            ZoneAdvertisers::new(settings.min_change_percent, aging),
        )
    }

    /// Writes the amount on the Node through `tx`, evicts starved batch pods with `evictor` and
    /// raises Events through `events`.
    pub fn with_cluster(
        mut self,
        tx: watch::Sender<Advert>,
        evictor: Arc<dyn Evictor>,
        events: EventSink,
    ) -> ReclaimedLoop {
        self.advert = Some(tx);
        self.evictor = Some(evictor);
        self.events = Some(events);
        self
    }

    /// Decides the first amounts against what the Node and its NodeResourceTopology held when
    /// this topolet started (`crate::cluster::at_start`): a restart then writes only what the
    /// damping would have written had the instance before it kept running.
    pub fn with_at_start(mut self, at_start: AtStart) -> ReclaimedLoop {
        self.at_start = Some(at_start);
        self
    }

    /// The first advertisers, seeded from what the objects held at start (`at_start`, taken:
    /// a withdrawal or a reload of the advertiser's keys later starts them fresh, as before).
    /// An object not read by now is not waited for: its first amount is written as before.
    fn seed(
        &mut self,
        settings: &ReclaimedSettings,
        zones: &[ZoneTerms],
        now: Instant,
    ) -> (Advertiser, ZoneAdvertisers) {
        let (mut node, mut zone) = self.advertisers(settings);
        let Some(found) = self.at_start.take() else {
            return (node, zone);
        };
        let wall = std::time::SystemTime::now();
        let at = |written| written_at(written, wall, now, settings.max_age);
        if let Some(Some((millis, written))) = found.node_amount(&settings.resource_name) {
            tracing::info!(
                millis,
                age_s = now.saturating_duration_since(at(written)).as_secs(),
                "reclaimed CPU: the Node's amount before this start is the last published (a change is written as the damping rules, or at max_age)"
            );
            node.seed(millis, at(written), now);
        }
        let numa: Vec<usize> = zones.iter().map(|z| z.numa_node).collect();
        for (n, (millis, written)) in found
            .zone_amounts(&settings.resource_name, &numa)
            .unwrap_or_default()
        {
            zone.seed(n, millis, at(written), now);
        }
        (node, zone)
    }

    /// Runs until the task is dropped.
    pub async fn run(mut self) {
        let reloaded = self.plugin.config_changed();
        loop {
            let settings = self.settings();
            self.tick(&settings, Instant::now()).await;
            if settings.enabled {
                tokio::time::sleep(settings.suppress_interval).await;
            } else {
                // Off: only a reload can turn it on; sleep until one.
                reloaded.notified().await;
            }
        }
    }

    fn settings(&self) -> ReclaimedSettings {
        self.plugin.settings()
    }

    fn advertise(&self, advert: Advert) {
        if let Some(tx) = &self.advert {
            tx.send_replace(advert);
        }
    }

    async fn tick(&mut self, settings: &ReclaimedSettings, now: Instant) {
        if !settings.enabled {
            if self.state.on {
                let n = self.plugin.batch_off();
                tracing::info!(
                    batch_containers = n,
                    "reclaimed CPU turned off: the amount is withdrawn; batch containers are back to the plain BestEffort values"
                );
                self.advertise(Advert::Amount(0));
                self.state = State {
                    started: true,
                    ..State::default()
                };
            } else if !self.state.started {
                self.advertise(Advert::WithdrawIfPresent);
                self.state.started = true;
            }
            self.plugin
                .set_reclaimed_report(Some(off_report(settings, "off")));
            return;
        }
        let dir = self.plugin.pod_directory();
        self.state.api = dir.is_some();
        if dir.is_none() && !self.state.said_no_api {
            tracing::warn!("[reclaimed] enabled = true, but the Kubernetes API client is off: batch pods are recognised from their spec, so nothing is advertised and no pod is batch; the pool is measured and the formula shown in `topolet status` only (configure [kubernetes])");
            self.state.said_no_api = true;
        }
        if !self.state.on {
            tracing::info!(resource = %settings.resource_name, usage = settings.usage.as_str(), api = self.state.api, "reclaimed CPU on");
            self.state.on = true;
            self.state.started = true;
        }
        if !self.plugin.nri_synchronized() {
            // Before the runtime's Synchronize the books hold no running container: the pool
            // would include CPUs of running exclusive containers, and batch containers would be
            // unknown. Nothing is measured, advertised or sent until then.
            self.plugin
                .set_reclaimed_report(Some(off_report(settings, WAITING_SYNC)));
            return;
        }
        let first = *self.state.first_reading.get_or_insert(now);
        self.state.filling = settings
            .window
            .saturating_sub(now.saturating_duration_since(first));
        if self.state.filling.is_zero() {
            let changed = self.plugin.end_carry();
            if changed > 0 {
                tracing::info!(
                    containers = changed,
                    "reclaimed CPU: the usage window has refilled since the start; grants carried over from running batch containers give way to the budget"
                );
            }
        }
        if let Some(dir) = dir {
            let learnt = self.plugin.learn_batch(dir, &settings.resource_name);
            if learnt > 0 {
                tracing::debug!(
                    containers = learnt,
                    "reclaimed CPU: batch containers learnt from their pods"
                );
            }
        }
        let thawed = self.plugin.release_batch();
        if thawed > 0 {
            tracing::debug!(
                containers = thawed,
                "reclaimed CPU: held batch containers thawed"
            );
        }
        self.not_batch(settings);
        self.apply_reloaded(settings);
        let inputs = self.plugin.reclaimed_inputs();
        if self.state.pool.as_ref() != Some(&inputs.pool) {
            // Other CPUs: samples of the old pool say nothing about the new one.
            self.state.pool = Some(inputs.pool.clone());
            self.state.node_window = Some(UsageWindow::new(settings.window));
            self.state.zone_windows.clear();
            self.state.recent = None;
            self.state.overrun_regular = None;
            self.state.last_tick = None;
            self.state.last_interval = None;
        }
        let reading = match self.read(&inputs, settings).await {
            Ok(r) => r,
            Err(e) => {
                self.state.failures += 1;
                tracing::warn!(error = %e, failures = self.state.failures, "reclaimed CPU: usage reading failed");
                if self.state.failures >= LOST_AFTER {
                    let why = format!("withdrawn: usage readings fail ({e})");
                    if self.state.withdrawn.is_none() {
                        tracing::error!(error = %e, "reclaimed CPU withdrawn: the usage readings keep failing; batch pods are held at the minimum");
                    }
                    self.state.withdrawn = Some(why);
                    self.advertise(Advert::Amount(0));
                    self.state.advertiser = None;
                    self.state.zone_advertisers = None;
                    self.state.suppressor.reset();
                    self.state.suppressor.step(0, 0, settings.grow_step_percent);
                    self.plugin.set_batch_budget(0);
                    self.report(settings, &inputs);
                }
                return;
            }
        };
        self.state.failures = 0;
        self.unreadable(&reading);
        if self.state.withdrawn.take().is_some() {
            tracing::info!("reclaimed CPU: usage readings work again");
        }
        let pool_millis = inputs.pool.len() as u64 * 1000;
        if let Some(before) = self.state.last_tick.as_ref() {
            let rates = sampler::rates(before, &reading, &inputs);
            let regular_now = sampler::regular(
                &rates,
                settings.usage,
                &inputs.zones,
                settings.margin_percent,
            )
            .node;
            self.state.regular_now = regular_now;
            self.state.batch_used = rates.batch;
            // The peak of the last interval's readings: a rise cuts at once (it is the newest
            // reading), the budget grows back only once the rise is an interval old — the
            // readings of a busy node swing by hundreds of millicores every 100 ms, and the
            // budget must not follow each swing (the bench saw 3 cuts a second before this).
            let recent = self
                .state
                .recent
                .get_or_insert_with(|| UsageWindow::new(settings.interval));
            recent.push(reading.at, regular_now);
            let recent_peak = recent.percentile(100).unwrap_or(regular_now);
            let target = Terms::compute(pool_millis, recent_peak, settings.margin_percent)
                .reclaimable_millis;
            // The Node's amount follows the rolling mean, not the peak: a lone busy reading
            // is what the margin absorbs, a sustained rise is not.
            let rolling = recent.mean().unwrap_or(regular_now);
            self.lower_at_once(
                Terms::compute(pool_millis, rolling, settings.margin_percent),
                now,
            );
            let step = self
                .state
                .suppressor
                .step(target, pool_millis, settings.grow_step_percent);
            match step {
                SuppressStep::Start(b) => {
                    self.plugin.set_batch_budget(b);
                }
                SuppressStep::Cut { from, to } => {
                    let changed = self.plugin.set_batch_budget(to);
                    let latency = reading.at.elapsed();
                    self.plugin
                        .metrics()
                        .reclaimed_reaction("cut", (changed > 0).then_some(latency));
                    tracing::debug!(
                        from,
                        to,
                        regular = regular_now,
                        containers = changed,
                        latency_us = latency.as_micros() as u64,
                        "reclaimed CPU: batch budget cut"
                    );
                }
                SuppressStep::Grow { to, .. } => {
                    self.plugin.set_batch_budget(to);
                    self.plugin.metrics().reclaimed_reaction("grow", None);
                }
                SuppressStep::Hold(_) => {}
            }
        }
        let interval_due = self
            .state
            .last_interval
            .as_ref()
            .is_none_or(|r| reading.at.saturating_duration_since(r.at) >= settings.interval);
        if interval_due {
            if let Some(before) = self.state.last_interval.replace(reading.clone()) {
                self.state.batch_rates = sampler::batch_rates(&before, &reading);
                let pool_millis = inputs.pool.len() as u64 * 1000;
                let busy = sampler::rates(&before, &reading, &inputs).pool_busy();
                self.state.pool_saturated =
                    pool_millis > 0 && busy * 100 >= pool_millis * SATURATED_PERCENT;
                self.sample_interval(settings, &before, &reading, &inputs, now);
            }
        }
        self.state.last_tick = Some(reading);
        if interval_due {
            // Starvation is judged on one sample per interval, not per suppress step.
            self.starved(settings, &inputs, now).await;
        }
        self.report(settings, &self.plugin.reclaimed_inputs());
    }

    /// A reload's `[reclaimed]` keys the loop built state from: new windows for a new `window`
    /// or `interval`, a new advertiser for a new `min_change_percent` or `max_age` (the next
    /// interval then publishes at once). Every other key is read at each step.
    fn apply_reloaded(&mut self, settings: &ReclaimedSettings) {
        let Some(before) = self.state.built_with.replace(settings.clone()) else {
            return;
        };
        if before.window != settings.window || before.interval != settings.interval {
            tracing::info!(window = ?settings.window, interval = ?settings.interval, "reclaimed CPU: new window or interval; the usage windows start over");
            self.state.node_window = None;
            self.state.zone_windows.clear();
            self.state.recent = None;
        }
        if before.min_change_percent != settings.min_change_percent
            || before.max_age != settings.max_age
        {
            self.state.advertiser = None;
            self.state.zone_advertisers = None;
        }
    }

    /// Batch pods whose cgroup could not be read: counted every time, logged once per pod until
    /// it reads again, and a status line each.
    fn unreadable(&mut self, reading: &Reading) {
        let failed: HashSet<String> = reading
            .batch_failed
            .iter()
            .map(|(p, _)| p.clone())
            .collect();
        for (pod, error) in &reading.batch_failed {
            self.plugin.metrics().reclaimed_cgroup_error("read");
            if self.state.told_unreadable.insert(pod.clone()) {
                tracing::warn!(pod = %pod, error = %error, "reclaimed CPU: a batch pod's cgroup cannot be read; its use is unknown (not counted in the batch use, never judged starved)");
            }
        }
        self.state.told_unreadable.retain(|p| failed.contains(p));
        self.state.batch_failed.clone_from(&reading.batch_failed);
    }

    /// Pods that ask for the resource but are not batch: an Event on each (once) and a status
    /// line each, naming why.
    fn not_batch(&mut self, settings: &ReclaimedSettings) {
        let pods = self.plugin.not_batch();
        self.state.not_batch_lines = pods
            .values()
            .map(|(pod, why)| {
                format!(
                    "pod {pod} asks for {} but is not batch: {why}",
                    settings.resource_name
                )
            })
            .collect();
        self.state
            .told_not_batch
            .retain(|uid| pods.contains_key(uid));
        for (uid, (pod, why)) in pods {
            if !self.state.told_not_batch.insert(uid.clone()) {
                continue;
            }
            let Some(sink) = &self.events else { continue };
            let (namespace, name) = pod.split_once('/').unwrap_or(("", &pod));
            sink.record(Occurrence::new(
                ObjectRef {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    uid,
                },
                EventType::Warning,
                NOT_BATCH_REASON,
                &format!("Not treated as a batch pod: {why}"),
            ));
        }
    }

    /// One reading, taken on a blocking thread: the files it reads (`/proc/stat`, a cgroup per
    /// pod) must never hold up the async worker that serves NRI.
    async fn read(
        &mut self,
        inputs: &ReclaimedInputs,
        settings: &ReclaimedSettings,
    ) -> Result<Reading, String> {
        let roots = self.plugin.cgroup_roots();
        let meters = self.meters.clone();
        let inputs = inputs.clone();
        let usage = settings.usage;
        let (meters, reading) = tokio::task::spawn_blocking(move || {
            let meters = match meters {
                Some(m) => m,
                None => {
                    let controller = roots.cpuacct_controller().map_err(|e| e.to_string())?;
                    let (cpu_time, why) = CpuTimeSource::detect(&controller);
                    Meters {
                        controller,
                        cpu_time,
                        why,
                    }
                }
            };
            let r = sampler::read(
                &roots.proc_root,
                &meters.controller,
                &meters.cpu_time,
                &inputs,
                usage,
            )?;
            Ok::<_, String>((meters, r))
        })
        .await
        .map_err(|e| format!("the reading's thread failed: {e}"))??;
        if self.meters.is_none() {
            tracing::info!(cpu_time = %meters.describe(), "reclaimed CPU: where the CPUs' busy time is read");
        }
        self.meters = Some(meters);
        Ok(reading)
    }

    /// Publishes a lower amount between two samples when the published one is more than what
    /// is really idle by the suppress readings (`topolet_core::reclaimed::overrun`): the Node
    /// then says so within a suppress interval of a load step, not an `interval` or two later.
    /// The Node's amount only: the NodeResourceTopology zones follow at the interval's sample.
    fn lower_at_once(&mut self, fast: Terms, now: Instant) {
        if self.advert.is_none() {
            return;
        }
        let Some(advertiser) = self.state.advertiser.as_mut() else {
            return;
        };
        let Some(v) = advertiser.last().and_then(|last| overrun(last, fast)) else {
            return;
        };
        advertiser.published(v, now);
        let regular = self.state.overrun_regular.get_or_insert(0);
        *regular = (*regular).max(fast.regular_millis);
        self.state.node_terms = fast;
        tracing::debug!(terms = %fast, "reclaimed CPU advertised lower at once: the published amount was above the idle CPU");
        self.advertise(Advert::Amount(v));
    }

    /// One interval's sample: the windows, the formula, and the amount to advertise.
    fn sample_interval(
        &mut self,
        settings: &ReclaimedSettings,
        before: &Reading,
        after: &Reading,
        inputs: &ReclaimedInputs,
        now: Instant,
    ) {
        let rates = sampler::rates(before, after, inputs);
        let sampler::Regular {
            node: regular,
            zones,
            spill,
        } = sampler::regular(
            &rates,
            settings.usage,
            &inputs.zones,
            settings.margin_percent,
        );
        self.state.reserved = spill;
        // At least what lowered the amount at once since the last sample.
        let regular = regular.max(self.state.overrun_regular.take().unwrap_or(0));
        let window = self
            .state
            .node_window
            .get_or_insert_with(|| UsageWindow::new(settings.window));
        window.push(now, regular);
        let peak = window.percentile(settings.percentile).unwrap_or(regular);
        let pool_millis = inputs.pool.len() as u64 * 1000;
        self.state.node_terms = Terms::compute(pool_millis, peak, settings.margin_percent);
        self.state.zone_terms = inputs
            .zones
            .iter()
            .map(|(n, cpus)| {
                let used = zones.get(n).copied().unwrap_or(0);
                let w = self
                    .state
                    .zone_windows
                    .entry(*n)
                    .or_insert_with(|| UsageWindow::new(settings.window));
                w.push(now, used);
                let peak = w.percentile(settings.percentile).unwrap_or(used);
                ZoneTerms {
                    numa_node: *n,
                    terms: Terms::compute(cpus.len() as u64 * 1000, peak, settings.margin_percent),
                    advertised_millis: None,
                }
            })
            .collect();
        if self.advert.is_none() {
            // No API client: measured and shown, never advertised.
            return;
        }
        if !self.state.filling.is_zero() {
            // The window holds less than `window` of samples: its peak would rise, and the
            // amount fall, with each step of the load until it has filled.
            return;
        }
        // Both are dropped together (a withdrawal, a reload of their keys) and built together.
        if self.state.advertiser.is_none() || self.state.zone_advertisers.is_none() {
            let zones = self.state.zone_terms.clone();
            let (node, zone) = self.seed(settings, &zones, now);
            self.state.advertiser = Some(node);
            self.state.zone_advertisers = Some(zone);
        }
        // The zones' amounts, damped like the Node's; the NodeResourceTopology publisher writes
        // only these (`topolet_core::report::nrt::add_reclaimed`).
        let (Some(advertiser), Some(zone_advertisers)) = (
            self.state.advertiser.as_mut(),
            self.state.zone_advertisers.as_mut(),
        ) else {
            return;
        };
        let published = zone_advertisers.publish(&self.state.zone_terms, now);
        for z in &mut self.state.zone_terms {
            z.advertised_millis = published.get(&z.numa_node).copied();
        }
        let amount = self.state.node_terms.reclaimable_millis;
        if let Publish::Now(v) = advertiser.decide(amount, pool_millis, now) {
            if advertiser.last().is_none() {
                tracing::info!(terms = %self.state.node_terms, "reclaimed CPU advertised (the first amount since the start, a reload of the advertiser's keys or a withdrawal)");
            }
            advertiser.published(v, now);
            tracing::debug!(terms = %self.state.node_terms, "reclaimed CPU advertised");
            self.advertise(Advert::Amount(v));
        }
    }

    /// Evicts the batch pods starved for `starved_for`; tells those suppressed hard.
    async fn starved(
        &mut self,
        settings: &ReclaimedSettings,
        inputs: &ReclaimedInputs,
        now: Instant,
    ) {
        let fed: Vec<Fed<'_>> = inputs
            .batch
            .iter()
            .map(|p| Fed {
                uid: &p.uid,
                pod_ref: &p.pod_ref,
                granted_millis: p.granted_millis,
                request_millis: p.request_millis,
                used_millis: self.state.batch_rates.get(&p.uid).copied(),
                held: p.held,
                contended: self.state.pool_saturated,
                priority: p.priority,
            })
            .collect();
        let due = self.state.starvation.observe(
            now,
            &fed,
            settings.starved_percent,
            settings.starved_for,
        );
        for p in &inputs.batch {
            let hard = p.limit_millis > 0 && p.granted_millis * 10 <= p.limit_millis;
            if hard && self.state.told_suppressed.insert(p.uid.clone()) {
                self.pod_event(
                    p,
                    EventType::Warning,
                    SUPPRESSED_REASON,
                    &format!(
                        "the node's regular pods took their CPU back: this batch pod may use {}m of its {}m of {} now",
                        p.granted_millis, p.limit_millis, settings.resource_name
                    ),
                );
            } else if !hard {
                self.state.told_suppressed.remove(&p.uid);
            }
        }
        let Some(evictor) = self.evictor.clone() else {
            return;
        };
        // One pod at a time (`topolet_core::reclaimed::starvation`).
        if let Some(d) = due {
            let (uid, average, used) = (d.uid, d.average_millis, d.used_millis.unwrap_or(0));
            if !self.state.evicted.insert(uid.clone()) {
                return;
            }
            let Some(p) = inputs.batch.iter().find(|p| p.uid == uid) else {
                return;
            };
            let (namespace, name) = p.pod_ref.split_once('/').unwrap_or(("", &p.pod_ref));
            let message = format!(
                "The node's regular pods need its CPU: this batch pod was granted {}m on average over {}, under {}% of its {}m of {}, and used {}m of it (it wanted more).",
                average,
                format_duration(settings.starved_for),
                settings.starved_percent,
                p.request_millis,
                settings.resource_name,
                used
            );
            let pod = EvictPod {
                sandbox_id: p.sandbox_id.clone(),
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: p.uid.clone(),
                signal: settings.resource_name.clone(),
                reason: message.clone(),
            };
            let result = match evictor.evict(&pod, Duration::from_secs(30)).await {
                Ok(Evicted::DryRun) => "dry_run",
                Ok(Evicted::Refused { message }) => {
                    tracing::warn!(pod = %p.pod_ref, message = %message, "reclaimed CPU: eviction of a starved batch pod refused (PodDisruptionBudget); tried again later");
                    self.state.evicted.remove(&uid);
                    "refused"
                }
                Ok(_) => "evicted",
                Err(e) => {
                    tracing::warn!(pod = %p.pod_ref, error = %e, "reclaimed CPU: eviction of a starved batch pod failed; tried again later");
                    self.state.evicted.remove(&uid);
                    "error"
                }
            };
            self.plugin.metrics().reclaimed_eviction(result);
            if result == "evicted" || result == "dry_run" {
                self.state.starvation.evicted(&uid, now);
                tracing::warn!(pod = %p.pod_ref, action = evictor.name(), average_granted = average, request = p.request_millis, "reclaimed CPU: starved batch pod evicted");
                if result == "evicted" {
                    self.pod_event(p, EventType::Warning, STARVED_REASON, &message);
                }
            }
        }
    }

    fn pod_event(
        &self,
        p: &crate::nri::handlers::BatchPodView,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let Some(sink) = &self.events else { return };
        let (namespace, name) = p.pod_ref.split_once('/').unwrap_or(("", &p.pod_ref));
        sink.record(Occurrence::new(
            ObjectRef {
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: p.uid.clone(),
            },
            type_,
            reason,
            message,
        ));
    }

    fn report(&self, settings: &ReclaimedSettings, inputs: &ReclaimedInputs) {
        let s = &self.state;
        let budget = s.suppressor.budget().unwrap_or(0);
        let advertised = s.advertiser.as_ref().and_then(Advertiser::last);
        let advertised = if s.withdrawn.is_some() {
            Some(0)
        } else {
            advertised
        };
        let suppressed: u64 = inputs
            .batch
            .iter()
            .map(|p| p.limit_millis.saturating_sub(p.granted_millis))
            .sum();
        let mut zones: Vec<(String, u64)> = s
            .zone_terms
            .iter()
            .map(|z| {
                let amount = z.advertised_millis.unwrap_or(z.terms.reclaimable_millis);
                (z.numa_node.to_string(), amount)
            })
            .collect();
        if let Some(a) = advertised {
            zones.push(("node".to_string(), a));
        }
        self.plugin
            .metrics()
            .set_reclaimed(&zones, s.batch_used, budget, suppressed);
        let batch = inputs
            .batch
            .iter()
            .map(|p| BatchStatus {
                pod: p.pod_ref.clone(),
                request_millis: p.request_millis,
                limit_millis: p.limit_millis,
                granted_millis: p.granted_millis,
                average_granted_millis: s.starvation.average(&p.uid).unwrap_or(p.granted_millis),
                starved: s.starvation.is_starved(&p.uid),
            })
            .collect();
        self.plugin.set_reclaimed_report(Some(ReclaimedStatus {
            state: if s.api {
                s.withdrawn.clone().unwrap_or_else(|| "on".to_string())
            } else {
                NO_API.to_string()
            },
            resource: settings.resource_name.clone(),
            usage: settings.usage.as_str().to_string(),
            node: s.node_terms,
            zones: s.zone_terms.clone(),
            advertised_millis: advertised,
            budget_millis: budget,
            batch_used_millis: s.batch_used,
            regular_now_millis: s.regular_now,
            batch,
            reserved: s.reserved,
            reserved_rule: Spill::rule(settings.usage).to_string(),
            cpu_time: self
                .meters
                .as_ref()
                .map(Meters::describe)
                .unwrap_or_default(),
            problems: s
                .batch_failed
                .iter()
                .map(|(pod, e)| {
                    format!("batch pod {pod}: its cgroup cannot be read ({e}); its use is unknown")
                })
                .chain(s.not_batch_lines.iter().cloned())
                .chain(
                    settings
                        .sched_idle
                        .then(|| self.plugin.sched_idle_missing())
                        .flatten(),
                )
                .chain((s.api && !s.filling.is_zero()).then(|| {
                    format!(
                        "not advertised yet: the usage window fills for {} more (`window` since the start)",
                        format_duration(s.filling)
                    )
                }))
                .collect(),
        }));
    }
}

fn off_report(settings: &ReclaimedSettings, state: &str) -> ReclaimedStatus {
    ReclaimedStatus {
        state: state.to_string(),
        resource: settings.resource_name.clone(),
        usage: settings.usage.as_str().to_string(),
        node: Terms::default(),
        zones: Vec::new(),
        advertised_millis: None,
        budget_millis: 0,
        batch_used_millis: 0,
        regular_now_millis: 0,
        batch: Vec::new(),
        reserved: Spill::default(),
        reserved_rule: Spill::rule(settings.usage).to_string(),
        cpu_time: String::new(),
        problems: Vec::new(),
    }
}
