//! The per-interval decision: update the pressure state, pick the threshold that drives
//! eviction, rank the pods for it and say which one to evict and with what grace period.
//!
//! Mirrors the second half of `managerImpl.synchronize` in
//! `pkg/kubelet/eviction/eviction_manager.go`: `getReclaimableThreshold` on the thresholds sorted
//! `byEvictionPriority`, the signal's rank function, "we kill at most a single pod during each
//! eviction interval", the grace period override (`immediateEvictionGracePeriodSeconds` = 1 for
//! hard thresholds; `min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds)` for soft
//! ones) and `evictPod` refusing critical pods. Node-level reclaim before evicting for disk
//! pressure (`reclaimNodeLevelResources`) is decided by [`crate::eviction::reclaim`] and carried
//! out by the shell between this decision and the eviction.
//!
//! Difference: `max_pod_grace_period = 0` means "the pod's own grace period" here; in the
//! kubelet a zero `evictionMaxPodGracePeriod` gives soft evictions a zero override.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::eviction::message::eviction_message;
use crate::eviction::observe::{Observations, PressureTracker, Timestamp};
use crate::eviction::rank::{rank, tier, Tier, UsageByPod};
use crate::eviction::settings::EvictionConfig;
use crate::eviction::signal::NodeCondition;
use crate::eviction::threshold::Threshold;
use crate::kube::pod::Pod;

/// `immediateEvictionGracePeriodSeconds`: the grace period of hard evictions.
pub const HARD_EVICTION_GRACE_PERIOD: Duration = Duration::from_secs(1);
/// The API's default `terminationGracePeriodSeconds`, for pods that do not say.
pub const DEFAULT_TERMINATION_GRACE_PERIOD: Duration = Duration::from_secs(30);

/// One pod that may be evicted, in order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Candidate {
    /// `namespace/name`.
    pub pod: String,
    pub uid: String,
    /// Grace period to stop the pod with.
    #[serde(with = "secs")]
    pub grace_period: Duration,
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

/// What to do this interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Node conditions to report.
    pub conditions: BTreeSet<NodeCondition>,
    /// Thresholds met (grace periods not considered).
    pub met: Vec<Threshold>,
    /// The threshold eviction acts on this interval, if any.
    pub threshold: Option<Threshold>,
    /// Pods to evict, best first; the shell evicts the first one it can (one pod per interval)
    /// and tries the next only when stopping the first fails. Critical pods are never here.
    pub candidates: Vec<Candidate>,
    /// Why, in the kubelet's words (`The node was low on resource: memory. Threshold quantity:
    /// 100Mi, available: 80Mi. `) without the per-container part ([`crate::eviction::message`]); empty
    /// when nothing is evicted.
    pub message: String,
}

impl Decision {
    /// The pod to evict this interval.
    pub fn victim(&self) -> Option<&Candidate> {
        self.candidates.first()
    }
}

/// The grace period to stop `pod` with when evicting for `threshold`.
pub fn grace_period(config: &EvictionConfig, threshold: &Threshold, pod: &Pod) -> Duration {
    if threshold.is_hard() {
        return HARD_EVICTION_GRACE_PERIOD;
    }
    let own = pod
        .termination_grace_period_seconds
        .map_or(DEFAULT_TERMINATION_GRACE_PERIOD, |s| {
            Duration::from_secs(s.max(0).unsigned_abs())
        });
    if config.max_pod_grace_period.is_zero() {
        own
    } else {
        own.min(config.max_pod_grace_period)
    }
}

/// The pods that may be evicted for `threshold`, best first: `pods` ranked for its signal,
/// critical pods left out, each with its grace period.
pub fn candidates(
    config: &EvictionConfig,
    threshold: &Threshold,
    pods: &[Pod],
    usage: &UsageByPod,
) -> Vec<Candidate> {
    rank(threshold.signal, pods, usage)
        .into_iter()
        .filter(|p| tier(p) != Tier::Critical)
        .map(|p| Candidate {
            pod: p.key(),
            uid: p.uid.clone(),
            grace_period: grace_period(config, threshold, p),
        })
        .collect()
}

/// Batch pods of reclaimed CPU (`crate::reclaimed`) before every other candidate, the ranking
/// kept inside each group: they run on CPU the node resold and their owners accepted to be
/// squeezed, so node pressure takes them first — not a kubelet rule, topolet's.
pub fn batch_first(candidates: &mut [Candidate], is_batch: impl Fn(&str) -> bool) {
    candidates.sort_by_key(|c| !is_batch(&c.uid));
}

/// One interval: update `tracker` with `observations` taken at `now` and decide.
pub fn decide(
    config: &EvictionConfig,
    tracker: &mut PressureTracker,
    observations: &Observations,
    now: Timestamp,
    pods: &[Pod],
    usage: &UsageByPod,
) -> Decision {
    let update = tracker.update(config, observations, now);
    let Some(threshold) = update.actionable.first().cloned() else {
        return Decision {
            conditions: update.conditions,
            met: update.met,
            threshold: None,
            candidates: Vec::new(),
            message: String::new(),
        };
    };
    let candidates = candidates(config, &threshold, pods, usage);
    let o = observations.get(&threshold.signal);
    let message = eviction_message(
        threshold.signal.resource(),
        o.map(|o| threshold.value.amount(o.capacity)),
        o.map(|o| o.available),
        &[],
    );
    Decision {
        conditions: update.conditions,
        met: update.met,
        threshold: Some(threshold),
        candidates,
        message,
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    #[test]
    fn batch_pods_go_first_and_each_group_keeps_its_ranking() {
        let c = |uid: &str| Candidate {
            pod: format!("ns/{uid}"),
            uid: uid.into(),
            grace_period: Duration::ZERO,
        };
        let mut cands = vec![c("a"), c("b1"), c("c"), c("b2")];
        batch_first(&mut cands, |uid| uid.starts_with('b'));
        let order: Vec<&str> = cands.iter().map(|c| c.uid.as_str()).collect();
        assert_eq!(order, ["b1", "b2", "a", "c"]);
    }
}
