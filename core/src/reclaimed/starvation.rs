//! Batch pods starved long enough to be evicted: a pod whose grant, *averaged* over the last
//! `starved_for`, stays under `starved_percent` of its request is better rescheduled elsewhere
//! than left to crawl on a node whose regular pods took the CPU back. The average, not each
//! sample: a regular load that hovers around the threshold would otherwise restart the clock at
//! every lucky sample and never evict. Koordinator's `cpuevict` plugin judges the same way, on
//! the pods' "satisfaction" averaged over a window (`pkg/koordlet/qosmanager/plugins/cpuevict`).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Each batch pod's grants over the window.
#[derive(Debug, Clone, Default)]
pub struct Starvation {
    pods: HashMap<String, Grants>,
}

#[derive(Debug, Clone)]
struct Grants {
    /// When the pod was first seen (the window is full once this is `starved_for` old).
    since: Instant,
    samples: VecDeque<(Instant, u64)>,
    /// The window's average is under the floor.
    starved: bool,
}

impl Grants {
    /// The grants' average over the window.
    fn mean(&self) -> u64 {
        let sum: u64 = self.samples.iter().map(|(_, v)| v).sum();
        sum / self.samples.len().max(1) as u64
    }
}

/// One batch pod's state this interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fed<'a> {
    pub uid: &'a str,
    pub granted_millis: u64,
    pub request_millis: u64,
}

impl Starvation {
    pub fn new() -> Starvation {
        Starvation::default()
    }

    /// Records this interval's `pods` at `now`; returns the uids whose grant averaged under
    /// `starved_percent` of their request over a full `starved_for`, with the average. Pods not
    /// listed are forgotten; a pod without a request never starves.
    pub fn observe(
        &mut self,
        now: Instant,
        pods: &[Fed<'_>],
        starved_percent: u8,
        starved_for: Duration,
    ) -> Vec<(String, u64)> {
        let mut due = Vec::new();
        let mut kept = HashMap::with_capacity(pods.len());
        for p in pods {
            let mut g = self.pods.remove(p.uid).unwrap_or(Grants {
                since: now,
                samples: VecDeque::new(),
                starved: false,
            });
            g.samples.push_back((now, p.granted_millis));
            while g
                .samples
                .front()
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) > starved_for)
            {
                g.samples.pop_front();
            }
            let mean = g.mean();
            let floor = p.request_millis * u64::from(starved_percent) / 100;
            g.starved = p.request_millis > 0 && mean < floor;
            if g.starved && now.saturating_duration_since(g.since) >= starved_for {
                due.push((p.uid.to_string(), mean));
            }
            kept.insert(p.uid.to_string(), g);
        }
        self.pods = kept;
        due.sort();
        due
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(uid: &str, granted: u64, request: u64) -> Fed<'_> {
        Fed {
            uid,
            granted_millis: granted,
            request_millis: request,
        }
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
            assert!(s
                .observe(at(t0, sec), &[fed("a", 100, 1000)], 50, window)
                .is_empty());
            assert!(s.is_starved("a"));
        }
        assert_eq!(
            s.observe(at(t0, 10), &[fed("a", 100, 1000)], 50, window),
            vec![("a".to_string(), 100)]
        );
    }

    #[test]
    fn lucky_samples_around_the_floor_do_not_restart_the_clock() {
        // Grants alternate 600 and 100 around a floor of 500: the average (350) is starved.
        let t0 = Instant::now();
        let mut s = Starvation::new();
        let window = Duration::from_secs(10);
        let mut due = Vec::new();
        for sec in 0..=10 {
            let g = if sec % 2 == 0 { 600 } else { 100 };
            due = s.observe(at(t0, sec), &[fed("a", g, 1000)], 50, window);
        }
        assert_eq!(due.len(), 1, "{due:?}");
    }

    #[test]
    fn a_pod_fed_on_average_is_never_due() {
        let t0 = Instant::now();
        let mut s = Starvation::new();
        let window = Duration::from_secs(5);
        for sec in 0..20 {
            let g = if sec % 4 == 0 { 100 } else { 900 };
            assert!(s
                .observe(at(t0, sec), &[fed("a", g, 1000)], 50, window)
                .is_empty());
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
                .len(),
            1
        );
        s.observe(t0, &[], 50, zero);
        assert_eq!(s.count(), 0);
        assert_eq!(s.average("a"), None);
    }
}
