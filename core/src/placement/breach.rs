//! Exclusive-CPU breaches: which live containers may still run on CPUs another container holds
//! exclusively, and for how long they have.
//!
//! The kubelet's CPU manager promises a Guaranteed container with integer CPUs that no other
//! container runs on them (pkg/kubelet/cm/cpumanager/policy_static.go: the shared pool is every
//! CPU minus the reserved and the exclusive ones). topolet keeps that promise only once the
//! runtime has applied every other container's new cpuset; until then — an update in flight, a
//! runtime too slow to answer within its deadline, a task started from an older spec — a
//! container may run on CPUs that are already someone else's. That window is a *breach*:
//!
//! > a live container whose cpuset as the runtime last applied it (the last acknowledged
//! > update, or what the kernel was seen to enforce) overlaps CPUs another live container holds
//! > exclusively in its current target.
//!
//! [`breaches`] computes the set from plain values (the shell's container records hand them
//! over); [`Ledger`] follows it over time with the caller's clock (`now` is always a parameter)
//! and adds up the container-seconds spent in breach, which `topolet_exclusive_breach_seconds_total`
//! exports.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::machine::cpuset::CpuSet;

/// One live container, as far as breaches go.
#[derive(Debug, Clone, Copy)]
pub struct Holding<'a> {
    pub id: &'a str,
    /// The cpuset the runtime last applied; `None`: it set none, the container may run on any CPU.
    pub applied: Option<&'a CpuSet>,
    /// The CPUs its current target holds exclusively, if any.
    pub exclusive: Option<&'a CpuSet>,
}

/// A container that may run on CPUs held exclusively by others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    pub id: String,
    /// The other containers' exclusive CPUs it may run on.
    pub cpus: CpuSet,
    /// The containers holding them, sorted.
    pub holders: Vec<String>,
}

/// The breaching containers among `live` (every live container), sorted by id.
///
/// Linear in the number of containers: each is first tested against the union of every
/// exclusive set (one word-wise intersection); only those that meet it are matched against the
/// holders one by one. A container's own exclusive CPUs are never a breach.
pub fn breaches(live: &[Holding<'_>]) -> Vec<Breach> {
    let holders: Vec<(&str, &CpuSet)> = live
        .iter()
        .filter_map(|h| Some((h.id, h.exclusive.filter(|c| !c.is_empty())?)))
        .collect();
    if holders.is_empty() {
        return Vec::new();
    }
    let mut held = CpuSet::new();
    for (_, cpus) in &holders {
        held.extend_from(cpus);
    }
    let mut out: Vec<Breach> = Vec::new();
    for h in live {
        if h.applied.is_some_and(|a| a.is_disjoint(&held)) {
            continue;
        }
        let mut cpus = CpuSet::new();
        let mut by: Vec<String> = Vec::new();
        for (holder, excl) in &holders {
            if *holder == h.id {
                continue;
            }
            let overlap = match h.applied {
                Some(a) => a.intersection(excl),
                None => (*excl).clone(),
            };
            if !overlap.is_empty() {
                cpus.extend_from(&overlap);
                by.push(holder.to_string());
            }
        }
        if !cpus.is_empty() {
            by.sort();
            out.push(Breach {
                id: h.id.to_string(),
                cpus,
                holders: by,
            });
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// A breach that lasts, with when it was first seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    pub breach: Breach,
    pub since: Instant,
}

/// The breaches over time: each is observed from the first [`Ledger::observe`] that finds it
/// to the first that no longer does, and the time between observations is added up per
/// container (so the total is the integral of the number of breaching containers, in
/// container-seconds: two containers on someone's CPUs for 3 s count 6 s). Observed every
/// flusher tick (100 ms), so the error at each end is under a tick; the count errs on the side
/// of the breach (the interval in which one ended counts whole).
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    open: BTreeMap<String, Open>,
    last: Option<Instant>,
    total: Duration,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Records that `current` (from [`breaches`]) is the breaching set at `now`; returns the
    /// breach time added since the previous observation.
    pub fn observe(&mut self, now: Instant, current: Vec<Breach>) -> Duration {
        let elapsed = self
            .last
            .map_or(Duration::ZERO, |l| now.saturating_duration_since(l));
        let added = elapsed.saturating_mul(u32::try_from(self.open.len()).unwrap_or(u32::MAX));
        self.total = self.total.saturating_add(added);
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
        let mut open = BTreeMap::new();
        for b in current {
            let since = self.open.get(&b.id).map_or(now, |o| o.since);
            open.insert(b.id.clone(), Open { breach: b, since });
        }
        self.open = open;
        added
    }

    /// The breaches open at the last observation, by container id.
    pub fn open(&self) -> impl Iterator<Item = &Open> {
        self.open.values()
    }

    /// How many containers were in breach at the last observation.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Container-seconds in breach so far.
    pub fn total(&self) -> Duration {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).expect("cpus")
    }

    fn holding<'a>(
        id: &'a str,
        applied: Option<&'a CpuSet>,
        excl: Option<&'a CpuSet>,
    ) -> Holding<'a> {
        Holding {
            id,
            applied,
            exclusive: excl,
        }
    }

    #[test]
    fn a_container_still_on_another_s_exclusive_cpus_is_in_breach() {
        let (g_cpus, old_pool, new_pool) = (set("2-3"), set("1-7"), set("1,4-7"));
        // g holds 2-3; b's update to the pool without them is not applied yet, c's is.
        let live = [
            holding("g", Some(&g_cpus), Some(&g_cpus)),
            holding("b", Some(&old_pool), None),
            holding("c", Some(&new_pool), None),
        ];
        assert_eq!(
            breaches(&live),
            vec![Breach {
                id: "b".into(),
                cpus: set("2-3"),
                holders: vec!["g".into()],
            }]
        );
        // Once applied: none.
        let live = [
            holding("g", Some(&g_cpus), Some(&g_cpus)),
            holding("b", Some(&new_pool), None),
        ];
        assert!(breaches(&live).is_empty());
    }

    #[test]
    fn own_cpus_no_holder_and_several_holders() {
        let (a, b, all) = (set("2"), set("5-6"), set("0-7"));
        // Nobody holds anything: nothing, whatever the cpusets.
        assert!(breaches(&[holding("x", None, None), holding("y", Some(&all), None)]).is_empty());
        // A holder on its own CPUs is not in breach of itself, but an exclusive container whose
        // applied cpuset is still the old pool is in breach of the other holder.
        let live = [
            holding("a", Some(&all), Some(&a)),
            holding("b", Some(&b), Some(&b)),
            holding("s", None, None),
        ];
        assert_eq!(
            breaches(&live),
            vec![
                Breach {
                    id: "a".into(),
                    cpus: set("5-6"),
                    holders: vec!["b".into()],
                },
                // No cpuset applied: every held CPU.
                Breach {
                    id: "s".into(),
                    cpus: set("2,5-6"),
                    holders: vec!["a".into(), "b".into()],
                },
            ]
        );
    }

    #[test]
    fn the_ledger_adds_container_seconds_between_observations() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let b = |id: &str| Breach {
            id: id.into(),
            cpus: set("1"),
            holders: vec!["g".into()],
        };
        let mut l = Ledger::new();
        assert_eq!(l.observe(t0, vec![]), Duration::ZERO);
        // First seen at t0+1: nothing counted yet, since = t0+1.
        assert_eq!(l.observe(t0 + s, vec![b("x")]), Duration::ZERO);
        assert_eq!(l.len(), 1);
        // Still there, and y joins: x's second counts.
        assert_eq!(l.observe(t0 + 2 * s, vec![b("x"), b("y")]), s);
        assert_eq!(
            l.open()
                .map(|o| (o.breach.id.as_str(), o.since))
                .collect::<Vec<_>>(),
            [("x", t0 + s), ("y", t0 + 2 * s)]
        );
        // Both for 2 s: 4 container-seconds; then x ends (its last interval counts).
        assert_eq!(l.observe(t0 + 4 * s, vec![b("y")]), 4 * s);
        assert_eq!(l.observe(t0 + 5 * s, vec![]), s);
        assert!(l.is_empty());
        assert_eq!(l.total(), 6 * s);
        // Nothing open: time passes uncounted.
        assert_eq!(l.observe(t0 + 100 * s, vec![]), Duration::ZERO);
        assert_eq!(l.total(), 6 * s);
        // A clock read out of order never subtracts.
        assert_eq!(l.observe(t0 + 101 * s, vec![b("z")]), Duration::ZERO);
        assert_eq!(l.observe(t0 + 50 * s, vec![b("z")]), Duration::ZERO);
        assert_eq!(l.total(), 6 * s);
        assert_eq!(l.observe(t0 + 102 * s, vec![]), s);
    }
}
