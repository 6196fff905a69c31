//! Batch pods starved long enough to be evicted: a pod whose grant, *averaged* over the last
//! `starved_for`, stays under `starved_percent` of its request is better rescheduled elsewhere
//! than left to crawl on a node whose regular pods took the CPU back. The average, not each
//! sample: a regular load that hovers around the threshold would otherwise restart the clock at
//! every lucky sample and never evict. Koordinator's `cpuevict` plugin judges the same way, on
//! the pods' "satisfaction" averaged over a window (`pkg/koordlet/qosmanager/plugins/cpuevict`),
//! and, like it, only pods that really use what they are given (its `cpuEvictBESatisfaction`
//! check pairs the satisfaction with the BE pods' usage at their limit).
//!
//! Three rules keep it from evicting more than it must:
//! - **wanted**: a pod is due only if its use, averaged over the same window, stays at its grant
//!   ([`WANTED_PERCENT`] of it or more): a pod that does not use what it is given is not hurt by
//!   a smaller grant. A held pod (frozen: no CPU it may run on) wants by definition, and so does
//!   one whose CPUs were saturated over the interval (`contended`: at `cpu.shares` 2 beside busy
//!   regular pods its use shows the weight it lost to, not what it asked for);
//! - **one at a time**: at most one pod is due per call, the first by the kubelet's ranking
//!   (`pkg/kubelet/eviction/helpers.go` `rankMemoryPressure`'s shape, on the reclaimed
//!   resource: `orderedBy(exceedRequests, priority, usage)` — a pod without usage first, a pod
//!   using more than its request first, lower priority first, then the larger use above its
//!   request; ties by namespace/name);
//! - **cool-down**: after an eviction ([`Starvation::evicted`]) every other pod's window starts
//!   over, so the next one is due only after a full `starved_for` of grants that include the
//!   share the evicted pod freed.

use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// A pod "wants" its grant when its use averages at least this share of it.
pub const WANTED_PERCENT: u64 = 90;

/// Each batch pod's grants over the window.
#[derive(Debug, Clone, Default)]
pub struct Starvation {
    pods: HashMap<String, Grants>,
}

#[derive(Debug, Clone)]
struct Grants {
    /// When the window started (the pod was first seen, or the last eviction's cool-down).
    since: Instant,
    /// (when, granted, used: `None` when it could not be measured).
    samples: VecDeque<(Instant, u64, Option<u64>)>,
    /// The window's average is under the floor.
    starved: bool,
}

impl Grants {
    /// The grants' average over the window.
    fn mean(&self) -> u64 {
        let sum: u64 = self.samples.iter().map(|(_, v, _)| v).sum();
        sum / self.samples.len().max(1) as u64
    }

    /// The use's average over the window (`None`: a sample could not be measured).
    fn used_mean(&self) -> Option<u64> {
        let mut sum = 0;
        for (_, _, u) in &self.samples {
            sum += (*u)?;
        }
        Some(sum / self.samples.len().max(1) as u64)
    }
}

/// One batch pod's state this interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fed<'a> {
    pub uid: &'a str,
    /// `namespace/name` (the ranking's last tie-break).
    pub pod_ref: &'a str,
    pub granted_millis: u64,
    pub request_millis: u64,
    /// What it used over the interval (`None`: its cgroup could not be read).
    pub used_millis: Option<u64>,
    /// Held: frozen, no CPU it may run on.
    pub held: bool,
    /// The CPUs it may run on were saturated over the interval: its use cannot show its demand.
    pub contended: bool,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
}

/// The pod due for eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub uid: String,
    /// Its average grant over the window.
    pub average_millis: u64,
    /// Its average use over the window (`None`: not measured throughout).
    pub used_millis: Option<u64>,
}

impl Starvation {
    pub fn new() -> Starvation {
        Starvation::default()
    }

    /// Records this interval's `pods` at `now`; returns the one pod to evict, if any: among those
    /// whose grant averaged under `starved_percent` of their request over a full `starved_for`
    /// and that wanted it (see the module), the first by the kubelet's ranking. Pods not listed
    /// are forgotten; a pod without a request never starves.
    pub fn observe(
        &mut self,
        now: Instant,
        pods: &[Fed<'_>],
        starved_percent: u8,
        starved_for: Duration,
    ) -> Option<Due> {
        let mut due: Vec<(Fed<'_>, Due)> = Vec::new();
        let mut kept = HashMap::with_capacity(pods.len());
        for p in pods {
            let mut g = self.pods.remove(p.uid).unwrap_or(Grants {
                since: now,
                samples: VecDeque::new(),
                starved: false,
            });
            let used = if p.held || p.contended {
                Some(p.used_millis.unwrap_or(0).max(p.granted_millis))
            } else {
                p.used_millis
            };
            g.samples.push_back((now, p.granted_millis, used));
            while g
                .samples
                .front()
                .is_some_and(|(at, _, _)| now.saturating_duration_since(*at) > starved_for)
            {
                g.samples.pop_front();
            }
            let mean = g.mean();
            let floor = p.request_millis * u64::from(starved_percent) / 100;
            g.starved = p.request_millis > 0 && mean < floor;
            let used_mean = g.used_mean();
            let wanted = used_mean.is_some_and(|u| u * 100 >= mean * WANTED_PERCENT);
            if g.starved && wanted && now.saturating_duration_since(g.since) >= starved_for {
                due.push((
                    *p,
                    Due {
                        uid: p.uid.to_string(),
                        average_millis: mean,
                        used_millis: used_mean,
                    },
                ));
            }
            kept.insert(p.uid.to_string(), g);
        }
        self.pods = kept;
        due.sort_by(|(a, da), (b, db)| rank(a, da, b, db));
        due.into_iter().next().map(|(_, d)| d)
    }

    /// The eviction of `uid` was asked at `now`: it is forgotten, and every other pod's window
    /// starts over (the cool-down: see the module).
    pub fn evicted(&mut self, uid: &str, now: Instant) {
        self.pods.remove(uid);
        for g in self.pods.values_mut() {
            g.since = now;
            g.samples.clear();
        }
    }

    /// Whether `uid`'s average grant is under its floor now.
    pub fn is_starved(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|g| g.starved)
    }

    /// `uid`'s average grant over the window so far.
    pub fn average(&self, uid: &str) -> Option<u64> {
        self.pods.get(uid).map(Grants::mean)
    }

    /// Pods whose average is under their floor now.
    pub fn count(&self) -> usize {
        self.pods.values().filter(|g| g.starved).count()
    }
}

/// The kubelet's order among due pods (see the module): no usage first (unreachable today: a
/// pod not measured is never due, but the kubelet's order is kept whole), over its request
/// first, lower priority first, larger use above its request first, then namespace/name.
fn rank(a: &Fed<'_>, da: &Due, b: &Fed<'_>, db: &Due) -> Ordering {
    let (ua, ub) = match (da.used_millis, db.used_millis) {
        (None, None) => (0, 0),
        (None, Some(_)) => return Ordering::Less,
        (Some(_), None) => return Ordering::Greater,
        (Some(x), Some(y)) => (x, y),
    };
    let exceeds = |u: u64, r: u64| u > r;
    exceeds(ub, b.request_millis)
        .cmp(&exceeds(ua, a.request_millis))
        .then(a.priority.cmp(&b.priority))
        .then_with(|| {
            let above = |u: u64, r: u64| i128::from(u) - i128::from(r);
            above(ub, b.request_millis).cmp(&above(ua, a.request_millis))
        })
        .then_with(|| a.pod_ref.cmp(b.pod_ref))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(uid: &str, granted: u64, request: u64) -> Fed<'_> {
        Fed {
            uid,
            pod_ref: uid,
            granted_millis: granted,
            request_millis: request,
            used_millis: Some(granted),
            held: false,
            contended: false,
            priority: 0,
        }
    }

    fn due(uid: &str, average: u64) -> Option<Due> {
        Some(Due {
            uid: uid.to_string(),
            average_millis: average,
            used_millis: Some(average),
        })
    }

    fn at(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn a_pod_starved_on_average_over_a_full_window_is_due() {
        let t0 = Instant::now();
        let mut s = Starvation::new();
        let window = Duration::from_secs(10);
        for sec in 0..10 {
            assert_eq!(
                s.observe(at(t0, sec), &[fed("a", 100, 1000)], 50, window),
                None
            );
            assert!(s.is_starved("a"));
        }
        assert_eq!(
            s.observe(at(t0, 10), &[fed("a", 100, 1000)], 50, window),
            due("a", 100)
        );
    }

    #[test]
    fn lucky_samples_around_the_floor_do_not_restart_the_clock() {
        // Grants alternate 600 and 100 around a floor of 500: the average (350) is starved.
        let t0 = Instant::now();
        let mut s = Starvation::new();
        let window = Duration::from_secs(10);
        let mut due = None;
        for sec in 0..=10 {
            let g = if sec % 2 == 0 { 600 } else { 100 };
            due = s.observe(at(t0, sec), &[fed("a", g, 1000)], 50, window);
        }
        assert!(due.is_some_and(|d| d.uid == "a"));
    }

    #[test]
    fn a_pod_fed_on_average_is_never_due() {
        let t0 = Instant::now();
        let mut s = Starvation::new();
        let window = Duration::from_secs(5);
        for sec in 0..20 {
            let g = if sec % 4 == 0 { 100 } else { 900 };
            assert_eq!(
                s.observe(at(t0, sec), &[fed("a", g, 1000)], 50, window),
                None
            );
        }
        // The last 5 s hold six samples (the window includes both ends): one 100, five 900.
        assert_eq!(s.average("a"), Some(766));
    }

    #[test]
    fn pods_that_leave_are_forgotten_and_requestless_pods_never_starve() {
        let t0 = Instant::now();
        let mut s = Starvation::new();
        let zero = Duration::ZERO;
        assert_eq!(
            s.observe(t0, &[fed("a", 0, 1000), fed("b", 0, 0)], 50, zero)
                .map(|d| d.uid),
            Some("a".to_string())
        );
        s.observe(t0, &[], 50, zero);
        assert_eq!(s.count(), 0);
        assert_eq!(s.average("a"), None);
    }

    /// Three starved batch pods: one at a time, the kubelet's ranking decides which, only a pod
    /// that used its grant, and the next one only after a full window following the eviction.
    #[test]
    fn three_starved_pods_are_evicted_one_at_a_time_by_rank_with_a_cool_down() {
        let t0 = Instant::now();
        let mut s = Starvation::new();
        let window = Duration::from_secs(3);
        // "idle" is starved but uses a third of its grant: it never wanted the CPU.
        let idle = Fed {
            used_millis: Some(30),
            ..fed("idle", 100, 1000)
        };
        // "low" has priority -10 and so goes before "hi" (priority 0), whose use above its
        // request is larger.
        let low = Fed {
            priority: -10,
            ..fed("low", 100, 1000)
        };
        let hi = fed("hi", 200, 500);
        let pods = [idle, low, hi];
        let mut first = None;
        for sec in 0..=3 {
            first = s.observe(at(t0, sec), &pods, 50, window);
        }
        assert_eq!(first, due("low", 100));
        s.evicted("low", at(t0, 3));
        // The cool-down: the others' windows start over.
        let rest = [idle, hi];
        for sec in 4..=5 {
            assert_eq!(s.observe(at(t0, sec), &rest, 50, window), None, "at {sec}s");
        }
        assert_eq!(s.observe(at(t0, 6), &rest, 50, window), due("hi", 200));
        s.evicted("hi", at(t0, 6));
        // "idle" never wanted its grant: never due.
        for sec in 7..=20 {
            assert_eq!(s.observe(at(t0, sec), &[idle], 50, window), None);
        }
        assert!(s.is_starved("idle"));
    }

    #[test]
    fn the_ranking_is_the_kubelet_s() {
        let t0 = Instant::now();
        let window = Duration::ZERO;
        let pick = |pods: &[Fed<'_>]| {
            let mut s = Starvation::new();
            s.observe(t0, pods, 50, window).map(|d| d.uid)
        };
        // A pod whose use could not be measured cannot show that it wanted its grant.
        let unmeasured = Fed {
            used_millis: None,
            ..fed("unmeasured", 0, 1000)
        };
        assert_eq!(
            pick(&[fed("a", 100, 1000), unmeasured]).as_deref(),
            Some("a")
        );
        // A pod on saturated CPUs wants what it is given, whatever it got.
        assert_eq!(
            pick(&[Fed {
                used_millis: Some(1),
                contended: true,
                ..fed("weight", 10, 1000)
            }])
            .as_deref(),
            Some("weight")
        );
        assert_eq!(
            pick(&[Fed {
                used_millis: Some(1),
                ..fed("idle", 10, 1000)
            }]),
            None
        );
        // A held pod wants what it is given (it cannot run at all).
        assert_eq!(
            pick(&[Fed {
                used_millis: Some(0),
                held: true,
                ..fed("held", 10, 1000)
            }])
            .as_deref(),
            Some("held")
        );
        // Same priority: the larger use above its request goes first (both under: the nearer).
        assert_eq!(
            pick(&[fed("far", 100, 1000), fed("near", 100, 300)]).as_deref(),
            Some("near")
        );
        // Ties: by namespace/name.
        assert_eq!(
            pick(&[fed("b", 100, 1000), fed("a", 100, 1000)]).as_deref(),
            Some("a")
        );
    }
}
