//! Observations and the pressure state machine: which thresholds are met, which have been met for
//! their grace period, which node conditions to report, and when pressure clears.
//!
//! Mirrors the bookkeeping of `managerImpl.synchronize` in `pkg/kubelet/eviction/eviction_manager.go`
//! and its helpers in `pkg/kubelet/eviction/helpers.go`: `thresholdsMet` (with and without
//! `enforceMinReclaim`), `mergeThresholds`, `thresholdsFirstObservedAt`, `nodeConditions`,
//! `nodeConditionsLastObservedAt`, `nodeConditionsObservedSince`, `thresholdsMetGracePeriod`,
//! `thresholdsUpdatedStats` and `byEvictionPriority`. Time is passed in ([`Timestamp`]); nothing
//! here reads a clock.
//!
//! One deliberate difference: a condition observed at `now` is reported even with a zero
//! `pressure_transition_period` (the kubelet's `now − last < period` is then never true, so a
//! zero period would hide pressure entirely). For any positive period the rule is the kubelet's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::eviction::settings::EvictionConfig;
use crate::eviction::signal::{NodeCondition, Signal};
use crate::eviction::threshold::{Threshold, ThresholdKey};

/// A point in time: the elapsed time since an origin the caller picks (the shell uses a monotonic
/// clock's start). Only differences matter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timestamp(pub Duration);

impl Timestamp {
    pub fn from_secs(secs: u64) -> Timestamp {
        Timestamp(Duration::from_secs(secs))
    }

    /// `self − earlier`, zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// `self + d`.
    pub fn after(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(d))
    }
}

/// One signal's observed value (`signalObservation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalObservation {
    /// Available bytes / inodes / pids. May be negative (a pid count above pid_max).
    pub available: i64,
    /// Capacity, the base of percentage thresholds.
    pub capacity: u64,
    /// When the underlying statistic was sampled; `None` counts as always fresh (the kubelet's
    /// zero time).
    pub time: Option<Timestamp>,
}

/// Everything observed in one interval. A signal missing here meets no threshold.
pub type Observations = BTreeMap<Signal, SignalObservation>;

/// Observations from `(signal, available, capacity)` triples, untimed (tests).
#[cfg(test)]
pub fn observations_of(pairs: &[(Signal, i64, u64)]) -> Observations {
    pairs
        .iter()
        .map(|(s, a, c)| {
            let o = SignalObservation {
                available: *a,
                capacity: *c,
                time: None,
            };
            (*s, o)
        })
        .collect()
}

/// `thresholdsMet`: the thresholds whose signal is observed below the threshold amount (plus the
/// minimum reclaim when `enforce_min_reclaim`).
pub fn thresholds_met<'a>(
    thresholds: impl IntoIterator<Item = &'a Threshold>,
    observations: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<&'a Threshold> {
    thresholds
        .into_iter()
        .filter(|t| {
            observations
                .get(&t.signal)
                .is_some_and(|o| t.is_met(o.available, o.capacity, enforce_min_reclaim))
        })
        .collect()
}

/// The order in which thresholds drive eviction (`byEvictionPriority`): memory first, then the
/// [`Signal::ALL`] order; for one signal the hard threshold before the soft one.
fn eviction_priority(t: &Threshold) -> (usize, bool) {
    let rank = Signal::ALL
        .iter()
        .position(|s| *s == t.signal)
        .unwrap_or(usize::MAX);
    (rank, !t.is_hard())
}

/// The outcome of one [`PressureTracker::update`].
#[derive(Debug, Clone, PartialEq)]
pub struct PressureUpdate {
    /// Thresholds met now, or met earlier and not yet past their minimum reclaim; grace periods
    /// not considered. These set the node conditions.
    pub met: Vec<Threshold>,
    /// The node conditions to report (with the transition period applied).
    pub conditions: BTreeSet<NodeCondition>,
    /// Thresholds that have been met for their whole grace period and whose signal has a fresh
    /// observation: these drive eviction, in eviction priority order (memory first).
    pub actionable: Vec<Threshold>,
}

/// The eviction manager's state between intervals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PressureTracker {
    /// `thresholdsFirstObservedAt`: when each currently met threshold was first met.
    first_observed_at: BTreeMap<ThresholdKey, Timestamp>,
    /// `nodeConditionsLastObservedAt`.
    conditions_last_observed_at: BTreeMap<NodeCondition, Timestamp>,
    /// `m.thresholdsMet`: the thresholds past their grace period at the last update; they stay
    /// met until their minimum reclaim is satisfied.
    driving: BTreeSet<ThresholdKey>,
    /// `m.lastObservations`.
    last_observations: Observations,
}

impl PressureTracker {
    pub fn new() -> PressureTracker {
        PressureTracker::default()
    }

    /// One `synchronize` step's bookkeeping for `observations` taken at `now`.
    pub fn update(
        &mut self,
        config: &EvictionConfig,
        observations: &Observations,
        now: Timestamp,
    ) -> PressureUpdate {
        // Thresholds met now, merged with previously driving ones not yet past min reclaim.
        let mut met: Vec<&Threshold> = thresholds_met(&config.thresholds, observations, false);
        let driving = config
            .thresholds
            .iter()
            .filter(|t| self.driving.contains(&t.key()));
        for t in thresholds_met(driving, observations, true) {
            if !met.iter().any(|m| m.key() == t.key()) {
                met.push(t);
            }
        }
        met.sort_by_key(|t| eviction_priority(t));

        // thresholdsFirstObservedAt: keep the first time for thresholds still met.
        let first_observed_at: BTreeMap<ThresholdKey, Timestamp> = met
            .iter()
            .map(|t| {
                let at = self.first_observed_at.get(&t.key()).copied().unwrap_or(now);
                (t.key(), at)
            })
            .collect();

        // nodeConditions + nodeConditionsLastObservedAt + nodeConditionsObservedSince.
        for t in &met {
            self.conditions_last_observed_at
                .insert(t.signal.condition(), now);
        }
        let period = config.pressure_transition_period;
        let conditions = self.conditions_at(period, now);

        // thresholdsMetGracePeriod.
        let past_grace: Vec<&Threshold> = met
            .iter()
            .copied()
            .filter(|t| {
                first_observed_at
                    .get(&t.key())
                    .is_some_and(|at| now.since(*at) >= t.grace())
            })
            .collect();
        self.driving = past_grace.iter().map(|t| t.key()).collect();
        self.first_observed_at = first_observed_at;

        // thresholdsUpdatedStats: only act on signals with a fresh observation.
        let actionable = past_grace
            .into_iter()
            .filter(|t| match observations.get(&t.signal) {
                None => false,
                Some(o) => match (self.last_observations.get(&t.signal), o.time) {
                    (None, _) | (_, None) => true,
                    (Some(last), Some(at)) => newer_than(at, last.time),
                },
            })
            .cloned()
            .collect();
        self.last_observations = observations.clone();

        PressureUpdate {
            met: met.into_iter().cloned().collect(),
            conditions,
            actionable,
        }
    }

    /// The conditions to report at `now`: observed at `now`, or less than `period` before it.
    pub fn conditions_at(&self, period: Duration, now: Timestamp) -> BTreeSet<NodeCondition> {
        self.conditions_last_observed_at
            .iter()
            .filter(|(_, at)| **at == now || now.since(**at) < period)
            .map(|(c, _)| *c)
            .collect()
    }

    /// When each tracked threshold was first met (for logs and status).
    pub fn first_observed_at(&self) -> &BTreeMap<ThresholdKey, Timestamp> {
        &self.first_observed_at
    }

    /// When each condition was last observed (for `lastTransitionTime`-style reporting).
    pub fn conditions_last_observed_at(&self) -> &BTreeMap<NodeCondition, Timestamp> {
        &self.conditions_last_observed_at
    }
}

/// `observed.time.After(last.time)`, with a missing last time counting as the zero time.
fn newer_than(at: Timestamp, last: Option<Timestamp>) -> bool {
    match last {
        None => true,
        Some(last) => at > last,
    }
}
