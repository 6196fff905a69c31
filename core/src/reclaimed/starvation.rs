//! Batch pods starved long enough to be evicted: a pod granted less than `starved_percent` of
//! its request, continuously for `starved_for`, is better rescheduled elsewhere than left to
//! crawl on a node whose regular pods took the CPU back (koordinator's `cpuevict` plugin does the
//! same from the pods' "satisfaction", `pkg/koordlet/qosmanager/plugins/cpuevict`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Since when each starved pod has been starved.
#[derive(Debug, Clone, Default)]
pub struct Starvation {
    since: HashMap<String, Instant>,
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

    /// Records this interval's `pods` at `now`; returns the uids starved for at least
    /// `starved_for`, with how long. Pods not listed are forgotten.
    pub fn observe(
        &mut self,
        now: Instant,
        pods: &[Fed<'_>],
        starved_percent: u8,
        starved_for: Duration,
    ) -> Vec<(String, Duration)> {
        let mut due = Vec::new();
        let mut still = HashMap::with_capacity(pods.len());
        for p in pods {
            let floor = p.request_millis * u64::from(starved_percent) / 100;
            if p.request_millis == 0 || p.granted_millis >= floor {
                continue;
            }
            let since = self.since.get(p.uid).copied().unwrap_or(now);
            still.insert(p.uid.to_string(), since);
            let starved = now.saturating_duration_since(since);
            if starved >= starved_for {
                due.push((p.uid.to_string(), starved));
            }
        }
        self.since = still;
        due.sort();
        due
    }

    /// How long `uid` has been starved, if it is.
    pub fn starved_since(&self, uid: &str) -> Option<Instant> {
        self.since.get(uid).copied()
    }

    /// Pods starved now.
    pub fn count(&self) -> usize {
        self.since.len()
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

    #[test]
    fn a_pod_starved_for_the_whole_period_is_due_once_fed_it_starts_over() {
        let t0 = Instant::now();
        let mut s = Starvation::new();
        let every = Duration::from_secs(10);
        assert!(s.observe(t0, &[fed("a", 100, 1000)], 50, every).is_empty());
        assert_eq!(s.count(), 1);
        let t9 = t0 + Duration::from_secs(9);
        assert!(s.observe(t9, &[fed("a", 100, 1000)], 50, every).is_empty());
        let t10 = t0 + Duration::from_secs(10);
        assert_eq!(
            s.observe(t10, &[fed("a", 100, 1000)], 50, every),
            vec![("a".to_string(), every)]
        );
        // Fed once: the clock starts over.
        let t11 = t0 + Duration::from_secs(11);
        assert!(s.observe(t11, &[fed("a", 500, 1000)], 50, every).is_empty());
        let t12 = t0 + Duration::from_secs(12);
        assert!(s.observe(t12, &[fed("a", 100, 1000)], 50, every).is_empty());
        assert_eq!(s.starved_since("a"), Some(t12));
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
    }
}
