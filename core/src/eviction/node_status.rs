//! topolet's own node conditions on the Node object, and its optional pressure taints.
//!
//! The kubelet owns `MemoryPressure`, `DiskPressure` and `PIDPressure` and rewrites them on
//! every status update, so topolet reports its view under its own types:
//! `TopoletMemoryPressure`, `TopoletDiskPressure`, `TopoletPIDPressure` ([`condition_type`]).
//! Their status follows the eviction loop's conditions (with the pressure transition period):
//! `True` while under pressure, `Unknown` when a configured signal of the condition could not be
//! observed, else `False`. Reasons and messages are fixed texts and threshold values, never live
//! measurements, so an unchanged state does not need a new patch.
//!
//! Heartbeat and transition follow node-problem-detector's Kubernetes exporter
//! (`pkg/exporters/k8sexporter/condition`): the conditions are sent whenever one of them changes
//! (status, reason or message) and otherwise once every heartbeat period; each send sets
//! `lastHeartbeatTime` to now, `lastTransitionTime` changes only when the status does. A send
//! that failed is not committed ([`ConditionBook::commit`]), so the next one tries again.
//!
//! Taints ([`pressure_taints`]): with `[eviction] pressure_taint = true`, `NoSchedule` taints
//! `topolet.io/memory-pressure`, `topolet.io/disk-pressure`, `topolet.io/pid-pressure` while
//! the matching condition is `True` — topolet's counterpart of the node lifecycle controller's
//! `node.kubernetes.io/*-pressure` taints.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use crate::eviction::duration::format_duration;
use crate::eviction::message::quantity;
use crate::eviction::observe::Observations;
use crate::eviction::settings::EvictionConfig;
use crate::eviction::signal::NodeCondition;
use crate::eviction::threshold::Threshold;

/// The effect of topolet's pressure taints.
pub const TAINT_EFFECT: &str = "NoSchedule";

/// topolet's condition type for `c`.
pub fn condition_type(c: NodeCondition) -> &'static str {
    match c {
        NodeCondition::MemoryPressure => "TopoletMemoryPressure",
        NodeCondition::DiskPressure => "TopoletDiskPressure",
        NodeCondition::PidPressure => "TopoletPIDPressure",
    }
}

/// The taint key topolet sets for `c` with `pressure_taint`.
pub fn taint_key(c: NodeCondition) -> &'static str {
    match c {
        NodeCondition::MemoryPressure => "topolet.io/memory-pressure",
        NodeCondition::DiskPressure => "topolet.io/disk-pressure",
        NodeCondition::PidPressure => "topolet.io/pid-pressure",
    }
}

/// A condition's status, as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }

    /// Parses the API's spelling.
    pub fn parse(text: &str) -> Option<Status> {
        match text {
            "True" => Some(Status::True),
            "False" => Some(Status::False),
            "Unknown" => Some(Status::Unknown),
            _ => None,
        }
    }
}

/// One condition as topolet sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionReport {
    pub type_: &'static str,
    pub status: Status,
    pub reason: &'static str,
    pub message: String,
}

/// (reason when True, reason when False, what "sufficient" means), in the kubelet's style
/// (`KubeletHasSufficientMemory`, …).
fn reasons(c: NodeCondition) -> (&'static str, &'static str, &'static str) {
    match c {
        NodeCondition::MemoryPressure => (
            "TopoletHasInsufficientMemory",
            "TopoletHasSufficientMemory",
            "topolet sees sufficient memory available",
        ),
        NodeCondition::DiskPressure => (
            "TopoletHasDiskPressure",
            "TopoletHasNoDiskPressure",
            "topolet sees no disk pressure",
        ),
        NodeCondition::PidPressure => (
            "TopoletHasInsufficientPID",
            "TopoletHasSufficientPID",
            "topolet sees sufficient PID available",
        ),
    }
}

fn describe(t: &Threshold, observations: &Observations) -> String {
    let kind = if t.is_hard() { "hard" } else { "soft" };
    match observations.get(&t.signal) {
        Some(o) => {
            let amount = i64::try_from(t.value.amount(o.capacity)).unwrap_or(i64::MAX);
            format!(
                "{} is below the {kind} threshold {}",
                t.signal,
                quantity(t.signal.resource(), amount)
            )
        }
        None => format!("{} is below its {kind} threshold", t.signal),
    }
}

/// The three conditions for this interval: `pressure` the eviction loop's conditions (with the
/// transition period), `met` the thresholds met now.
pub fn reports(
    config: &EvictionConfig,
    observations: &Observations,
    pressure: &BTreeSet<NodeCondition>,
    met: &[Threshold],
) -> Vec<ConditionReport> {
    NodeCondition::ALL
        .into_iter()
        .map(|c| {
            let (yes, no, fine) = reasons(c);
            let type_ = condition_type(c);
            if pressure.contains(&c) {
                let parts: Vec<String> = met
                    .iter()
                    .filter(|t| t.signal.condition() == c)
                    .map(|t| describe(t, observations))
                    .collect();
                let message = if parts.is_empty() {
                    format!(
                        "no threshold met now; pressure is held for the transition period ({})",
                        format_duration(config.pressure_transition_period)
                    )
                } else {
                    parts.join("; ")
                };
                return ConditionReport {
                    type_,
                    status: Status::True,
                    reason: yes,
                    message,
                };
            }
            let unobserved: BTreeSet<&str> = config
                .thresholds
                .iter()
                .filter(|t| t.signal.condition() == c && !observations.contains_key(&t.signal))
                .map(|t| t.signal.as_str())
                .collect();
            if !unobserved.is_empty() {
                let names: Vec<&str> = unobserved.into_iter().collect();
                return ConditionReport {
                    type_,
                    status: Status::Unknown,
                    reason: "TopoletSignalNotObserved",
                    message: format!("not observed: {}", names.join(", ")),
                };
            }
            ConditionReport {
                type_,
                status: Status::False,
                reason: no,
                message: fine.to_string(),
            }
        })
        .collect()
}

/// One condition as it is (to be) written on the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConditionOut {
    pub type_: String,
    pub status: Status,
    pub reason: String,
    pub message: String,
    pub last_heartbeat: SystemTime,
    pub last_transition: SystemTime,
}

/// What was last written, per condition type.
#[derive(Debug, Clone, Default)]
pub struct ConditionBook {
    published: BTreeMap<String, NodeConditionOut>,
}

impl ConditionBook {
    /// An empty book: the first plan sends every condition, transition time now.
    pub fn new() -> ConditionBook {
        ConditionBook::default()
    }

    /// Remembers a condition found on the Node (at start), so that an unchanged status keeps its
    /// `lastTransitionTime` across a topolet restart.
    pub fn seed(&mut self, found: NodeConditionOut) {
        self.published.insert(found.type_.clone(), found);
    }

    /// The conditions to send at `now`, or `None` when nothing changed and the heartbeat is not
    /// due yet.
    pub fn plan(
        &self,
        reports: &[ConditionReport],
        now: SystemTime,
        heartbeat: Duration,
    ) -> Option<Vec<NodeConditionOut>> {
        let mut due = false;
        let out: Vec<NodeConditionOut> = reports
            .iter()
            .map(|r| {
                let prev = self.published.get(r.type_);
                let changed = !prev.is_some_and(|p| {
                    p.status == r.status && p.reason == r.reason && p.message == r.message
                });
                let stale = !prev.is_some_and(|p| {
                    now.duration_since(p.last_heartbeat)
                        .map_or(true, |d| d < heartbeat)
                });
                due |= changed || stale;
                let last_transition = match prev {
                    Some(p) if p.status == r.status => p.last_transition,
                    _ => now,
                };
                NodeConditionOut {
                    type_: r.type_.to_string(),
                    status: r.status,
                    reason: r.reason.to_string(),
                    message: r.message.clone(),
                    last_heartbeat: now,
                    last_transition,
                }
            })
            .collect();
        due.then_some(out)
    }

    /// `sent` was written.
    pub fn commit(&mut self, sent: &[NodeConditionOut]) {
        for c in sent {
            self.published.insert(c.type_.clone(), c.clone());
        }
    }
}

/// The taint keys wanted while `pressure` holds.
pub fn pressure_taints(pressure: &BTreeSet<NodeCondition>) -> BTreeSet<&'static str> {
    pressure.iter().map(|c| taint_key(*c)).collect()
}

/// Every taint key topolet may set.
pub fn all_taint_keys() -> BTreeSet<&'static str> {
    NodeCondition::ALL.into_iter().map(taint_key).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::observe::observations_of as obs;
    use crate::eviction::Signal;

    fn all_observed() -> Observations {
        obs(&[
            (Signal::MemoryAvailable, 50 << 20, 8 << 30),
            (Signal::NodeFsAvailable, 50, 100),
            (Signal::NodeFsInodesFree, 50, 100),
            (Signal::ImageFsAvailable, 50, 100),
            (Signal::ImageFsInodesFree, 50, 100),
        ])
    }

    #[test]
    fn reports_follow_pressure_and_observation() {
        let c = EvictionConfig::default();
        let o = all_observed();
        let mem = c
            .thresholds_for(Signal::MemoryAvailable)
            .cloned()
            .collect::<Vec<_>>();
        let r = reports(
            &c,
            &o,
            &BTreeSet::from([NodeCondition::MemoryPressure]),
            &mem,
        );
        assert_eq!(r[0].type_, "TopoletMemoryPressure");
        assert_eq!(r[0].status, Status::True);
        assert_eq!(r[0].reason, "TopoletHasInsufficientMemory");
        assert_eq!(
            r[0].message,
            "memory.available is below the hard threshold 100Mi"
        );
        assert_eq!(
            (r[1].type_, r[1].status),
            ("TopoletDiskPressure", Status::False)
        );
        // No pid threshold by default: nothing to observe, False.
        assert_eq!(
            (r[2].type_, r[2].status, r[2].reason),
            (
                "TopoletPIDPressure",
                Status::False,
                "TopoletHasSufficientPID"
            )
        );
        // Held by the transition period.
        let r = reports(
            &c,
            &o,
            &BTreeSet::from([NodeCondition::MemoryPressure]),
            &[],
        );
        assert!(r[0].message.contains("transition period (5m)"), "{r:?}");
        // Unobserved disk signals.
        let r = reports(&c, &obs(&[]), &BTreeSet::new(), &[]);
        assert_eq!(r[1].status, Status::Unknown);
        assert!(r[1].message.starts_with("not observed: imagefs.available"));
    }

    fn report(status: Status) -> Vec<ConditionReport> {
        vec![ConditionReport {
            type_: "TopoletMemoryPressure",
            status,
            reason: "R",
            message: "m".into(),
        }]
    }

    #[test]
    fn heartbeat_and_transition_as_node_problem_detector() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hb = Duration::from_secs(60);
        let mut book = ConditionBook::new();
        let first = book.plan(&report(Status::False), t0, hb).unwrap();
        assert_eq!(first[0].last_transition, t0);
        // Not committed (the patch failed): planned again.
        assert!(book.plan(&report(Status::False), t0, hb).is_some());
        book.commit(&first);
        // Unchanged, heartbeat not due: nothing.
        let t1 = t0 + Duration::from_secs(30);
        assert_eq!(book.plan(&report(Status::False), t1, hb), None);
        // Heartbeat due: heartbeat moves, transition stays.
        let t2 = t0 + Duration::from_secs(60);
        let beat = book.plan(&report(Status::False), t2, hb).unwrap();
        assert_eq!((beat[0].last_heartbeat, beat[0].last_transition), (t2, t0));
        book.commit(&beat);
        // Status change: sent at once, transition now.
        let t3 = t2 + Duration::from_secs(1);
        let changed = book.plan(&report(Status::True), t3, hb).unwrap();
        assert_eq!(
            (changed[0].status, changed[0].last_transition),
            (Status::True, t3)
        );
        book.commit(&changed);
        // A message change alone is sent, the transition time kept.
        let mut r = report(Status::True);
        r[0].message = "other".into();
        let t4 = t3 + Duration::from_secs(1);
        let m = book.plan(&r, t4, hb).unwrap();
        assert_eq!(m[0].last_transition, t3);
    }

    #[test]
    fn a_seeded_condition_keeps_its_transition_time() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(5);
        let now = t0 + Duration::from_secs(3600);
        let mut book = ConditionBook::new();
        book.seed(NodeConditionOut {
            type_: "TopoletMemoryPressure".into(),
            status: Status::False,
            reason: "R".into(),
            message: "m".into(),
            last_heartbeat: t0,
            last_transition: t0,
        });
        let p = book
            .plan(&report(Status::False), now, Duration::from_secs(60))
            .unwrap();
        assert_eq!(p[0].last_transition, t0);
    }

    #[test]
    fn taints_per_condition() {
        let p = BTreeSet::from([NodeCondition::PidPressure]);
        assert_eq!(
            pressure_taints(&p),
            BTreeSet::from(["topolet.io/pid-pressure"])
        );
        assert_eq!(all_taint_keys().len(), 3);
    }
}
