//! `Outbox`: when to send unsolicited updates (UpdateContainers) to the runtime.
//!
//! Containers whose cpuset must change (the shared pool moved, a container started from a
//! stale spec, an earlier update failed) are queued by id, and the queue is sent as one batched
//! request once the runtime has been quiet for [`QUIET`] — or at the latest [`MAX_DEFER`] after
//! the first id was queued. Sending in the middle of a burst of container creations is what
//! wedged containerd's NRI in our tests (its plugin-initiated update path competes with the
//! creations for its locks until our request times out), so updates wait for a lull. What is
//! sent is always each container's *current* target, computed at send time, never a stale
//! request. Failed sends are queued again, up to [`MAX_ATTEMPTS`]; after that the next
//! Synchronize corrects the containers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long the runtime must have sent no event before queued updates go out.
pub const QUIET: Duration = Duration::from_millis(300);
/// The longest an update waits for a lull.
pub const MAX_DEFER: Duration = Duration::from_secs(5);
/// Sends per container before giving up until the next Synchronize.
pub const MAX_ATTEMPTS: u32 = 5;

/// The queue of containers to update.
#[derive(Debug, Clone)]
pub struct Outbox {
    ids: BTreeSet<String>,
    since: Option<Instant>,
    last_event: Instant,
    attempts: BTreeMap<String, u32>,
}

impl Outbox {
    pub fn new(now: Instant) -> Outbox {
        Outbox {
            ids: BTreeSet::new(),
            since: None,
            last_event: now,
            attempts: BTreeMap::new(),
        }
    }

    /// The runtime sent an event at `now`.
    pub fn event(&mut self, now: Instant) {
        self.last_event = now;
    }

    /// `id` must be sent its current target.
    pub fn queue(&mut self, id: &str, now: Instant) {
        self.ids.insert(id.to_string());
        self.since.get_or_insert(now);
    }

    /// Forgets `id` (removed container).
    pub fn remove(&mut self, id: &str) {
        self.ids.remove(id);
        self.attempts.remove(id);
        if self.ids.is_empty() {
            self.since = None;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether the queue should be sent now.
    pub fn due(&self, now: Instant) -> bool {
        let Some(since) = self.since else {
            return false;
        };
        now.saturating_duration_since(self.last_event) >= QUIET
            || now.saturating_duration_since(since) >= MAX_DEFER
    }

    /// Empties the queue for sending.
    pub fn take(&mut self) -> Vec<String> {
        self.since = None;
        std::mem::take(&mut self.ids).into_iter().collect()
    }

    /// The runtime took the update of `ids`.
    pub fn sent(&mut self, ids: &[String]) {
        for id in ids {
            self.attempts.remove(id);
        }
    }

    /// The update of `ids` did not reach the runtime: they are queued again unless they have
    /// had [`MAX_ATTEMPTS`]; returns those given up on.
    pub fn failed(&mut self, ids: &[String], now: Instant) -> Vec<String> {
        let mut given_up = Vec::new();
        for id in ids {
            let n = self.attempts.entry(id.clone()).or_insert(0);
            *n += 1;
            if *n >= MAX_ATTEMPTS {
                self.attempts.remove(id);
                given_up.push(id.clone());
            } else {
                self.queue(id, now);
            }
        }
        given_up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_a_lull_but_not_forever() {
        let t0 = Instant::now();
        let mut o = Outbox::new(t0);
        assert!(!o.due(t0 + MAX_DEFER * 2), "nothing queued");
        o.queue("a", t0);
        assert!(!o.due(t0), "events just happened");
        assert!(o.due(t0 + QUIET));
        // A burst keeps it waiting...
        let mut now = t0;
        while now < t0 + MAX_DEFER - QUIET {
            now += QUIET / 2;
            o.event(now);
            assert!(!o.due(now));
        }
        // ...but not beyond MAX_DEFER.
        o.event(t0 + MAX_DEFER);
        assert!(o.due(t0 + MAX_DEFER));
        assert_eq!(o.take(), vec!["a".to_string()]);
        assert!(o.is_empty() && !o.due(t0 + MAX_DEFER * 3));
    }

    #[test]
    fn coalesces_and_retries_a_bounded_number_of_times() {
        let t0 = Instant::now();
        let mut o = Outbox::new(t0);
        o.queue("a", t0);
        o.queue("b", t0);
        o.queue("a", t0);
        let ids = o.take();
        assert_eq!(ids, vec!["a".to_string(), "b".to_string()]);
        o.sent(&ids[1..]);
        for attempt in 1..MAX_ATTEMPTS {
            assert!(o.failed(&ids[..1], t0).is_empty(), "attempt {attempt}");
            assert_eq!(o.take(), vec!["a".to_string()]);
        }
        assert_eq!(o.failed(&ids[..1], t0), vec!["a".to_string()]);
        assert!(o.is_empty());
    }

    #[test]
    fn removed_containers_are_forgotten() {
        let t0 = Instant::now();
        let mut o = Outbox::new(t0);
        o.queue("a", t0);
        o.remove("a");
        assert!(o.is_empty() && !o.due(t0 + MAX_DEFER));
    }
}
