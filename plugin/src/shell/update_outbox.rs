//! `Outbox`: the containers that must be sent their current target, and when an unsolicited
//! update (UpdateContainers) may carry them.
//!
//! Containers whose cpuset must change (the shared pool moved, a container started from a
//! stale spec, an earlier update failed) are queued by id. The queue leaves in one of two ways:
//! - in the reply to the next event that can carry updates (CreateContainer, UpdateContainer,
//!   StopContainer): [`Outbox::take_except`]. This is the normal path, and the only one during
//!   churn;
//! - as one batched unsolicited request, but only once the runtime has been quiet for
//!   [`QUIET`] ([`Outbox::due`]), never in the middle of activity however long it lasts.
//!
//! Why never during activity: in containerd up to v2.3.7 (NRI v0.12.0), a plugin's
//! UpdateContainers takes NRI's adaptation lock and then containerd's NRI lock, while CRI
//! lifecycle events take them in the opposite order; when the two meet, containerd deadlocks
//! for good (containerd/containerd#13733, fixed in containerd/nri#301: NRI v0.12.3, containerd
//! v2.4.2; the v2.3 LTS line keeps the bug, so the rule stays). Our real-containerd
//! soak reproduced it whenever an update was forced out during churn. Replies are applied by
//! containerd under the locks the event already holds, so they cannot deadlock; an unsolicited
//! request after a lull can only meet an event that starts within the few milliseconds it
//! takes, and the lull makes that rare.
//!
//! How long the lull must be depends on the runtime ([`quiet_for`]): [`QUIET`] where NRI has the
//! fix (v0.12.3 and later: the rule only batches), [`QUIET_LOCK_INVERSION`] where it does not
//! (v0.12.2 and older, and a runtime whose NRI version is unknown). A CRI call that kills
//! containers (StopPodSandbox, a forced remove) produces its NRI events only as the containers
//! exit, and on a loaded machine those gaps passed 300 ms: the faults suite's SIGKILL trials
//! deadlocked containerd v2.3.7 that way at a load average of 18.
//!
//! What is sent is always each container's *current* target, computed at send time, never a
//! stale request. Failed unsolicited sends are queued again, up to [`MAX_ATTEMPTS`]; after that
//! the next Synchronize corrects the containers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long the runtime must have sent no event before queued updates go out unsolicited, on a
/// runtime without the UpdateContainers lock inversion.
pub const QUIET: Duration = Duration::from_millis(300);
/// The same on a runtime with it (NRI older than v0.12.3, or unknown).
pub const QUIET_LOCK_INVERSION: Duration = Duration::from_secs(3);
/// The first NRI version whose UpdateContainers cannot deadlock with CRI lifecycle events
/// (containerd/nri#301).
pub const NRI_LOCK_FIX: topolet_nri::version::NriVersion =
    topolet_nri::version::NriVersion::new(0, 12, 3);

/// The lull a runtime with NRI `version` needs before an unsolicited update (module doc).
pub fn quiet_for(version: Option<topolet_nri::version::NriVersion>) -> Duration {
    match version {
        Some(v) if v >= NRI_LOCK_FIX => QUIET,
        _ => QUIET_LOCK_INVERSION,
    }
}
/// Sends per container before giving up until the next Synchronize.
pub const MAX_ATTEMPTS: u32 = 5;

/// The queue of containers to update.
#[derive(Debug, Clone)]
pub struct Outbox {
    ids: BTreeSet<String>,
    quiet: Duration,
    last_event: Instant,
    attempts: BTreeMap<String, u32>,
}

impl Outbox {
    pub fn new(now: Instant) -> Outbox {
        Outbox {
            ids: BTreeSet::new(),
            quiet: QUIET_LOCK_INVERSION,
            last_event: now,
            attempts: BTreeMap::new(),
        }
    }

    /// The lull the connected runtime needs ([`quiet_for`]; until Configure says, the longer one).
    pub fn set_quiet(&mut self, quiet: Duration) {
        self.quiet = quiet;
    }

    /// The runtime sent an event at `now`.
    pub fn event(&mut self, now: Instant) {
        self.last_event = now;
    }

    /// `id` must be sent its current target.
    pub fn queue(&mut self, id: &str) {
        self.ids.insert(id.to_string());
    }

    /// Forgets `id` (removed container).
    pub fn remove(&mut self, id: &str) {
        self.ids.remove(id);
        self.attempts.remove(id);
    }

    /// Forgets everything queued (a Synchronize computes every container's update afresh).
    pub fn clear(&mut self) {
        self.ids.clear();
        self.attempts.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether the runtime sent no event for `lull` before `now`.
    pub fn quiet_for(&self, now: Instant, lull: Duration) -> bool {
        now.saturating_duration_since(self.last_event) >= lull
    }

    /// Whether the queue should be sent unsolicited now: something is queued and the runtime
    /// has been quiet for the runtime's lull ([`Outbox::set_quiet`]).
    pub fn due(&self, now: Instant) -> bool {
        !self.ids.is_empty() && now.saturating_duration_since(self.last_event) >= self.quiet
    }

    /// Empties the queue for an unsolicited request.
    pub fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.ids).into_iter().collect()
    }

    /// Takes every queued id but `skip` (the container the event is about: a container cannot
    /// be updated while it is being created, and a stopping one needs no new cpuset) for the
    /// reply to an event. The runtime applies a reply's updates before it answers the event, so
    /// they count as delivered.
    pub fn take_except(&mut self, skip: &str) -> Vec<String> {
        self.take_except_all(&[skip])
    }

    /// Takes every queued id but those in `skip` (the event's own container, and containers
    /// an unsolicited request in flight carries: `shell::container_cache`) for the reply to an
    /// event; they count as delivered.
    pub fn take_except_all(&mut self, skip: &[&str]) -> Vec<String> {
        let kept: Vec<String> = skip.iter().filter_map(|s| self.ids.take(*s)).collect();
        let ids: Vec<String> = std::mem::take(&mut self.ids).into_iter().collect();
        self.ids.extend(kept);
        self.sent(&ids);
        ids
    }

    /// The runtime took the update of `ids`.
    pub fn sent(&mut self, ids: &[String]) {
        for id in ids {
            self.attempts.remove(id);
        }
    }

    /// The update of `ids` did not reach the runtime: they are queued again unless they have
    /// had [`MAX_ATTEMPTS`]; returns those given up on.
    pub fn failed(&mut self, ids: &[String]) -> Vec<String> {
        let mut given_up = Vec::new();
        for id in ids {
            let n = self.attempts.entry(id.clone()).or_insert(0);
            *n += 1;
            if *n >= MAX_ATTEMPTS {
                self.attempts.remove(id);
                given_up.push(id.clone());
            } else {
                self.queue(id);
            }
        }
        given_up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An outbox for a runtime with the fix (the short lull), as the tests below assume.
    fn outbox(t0: Instant) -> Outbox {
        let mut o = Outbox::new(t0);
        o.set_quiet(QUIET);
        o
    }

    #[test]
    fn the_lull_is_longer_where_nri_has_the_lock_inversion() {
        use topolet_nri::version::NriVersion;
        assert_eq!(quiet_for(Some(NriVersion::new(0, 12, 3))), QUIET);
        assert_eq!(quiet_for(Some(NriVersion::new(0, 13, 0))), QUIET);
        assert_eq!(
            quiet_for(Some(NriVersion::new(0, 12, 0))),
            QUIET_LOCK_INVERSION
        );
        assert_eq!(
            quiet_for(Some(NriVersion::new(0, 8, 0))),
            QUIET_LOCK_INVERSION
        );
        assert_eq!(quiet_for(None), QUIET_LOCK_INVERSION);
        let t0 = Instant::now();
        let mut o = Outbox::new(t0);
        o.queue("a");
        assert!(
            !o.due(t0 + QUIET),
            "the longer lull until Configure says otherwise"
        );
        assert!(o.due(t0 + QUIET_LOCK_INVERSION));
        o.set_quiet(QUIET);
        assert!(o.due(t0 + QUIET));
    }

    #[test]
    fn waits_for_a_lull_however_long_the_activity() {
        let t0 = Instant::now();
        let mut o = outbox(t0);
        assert!(!o.due(t0 + QUIET * 100), "nothing queued");
        o.queue("a");
        assert!(!o.due(t0), "events just happened");
        assert!(o.due(t0 + QUIET));
        // Continuous activity keeps it waiting, for ever: a forced send is what deadlocks
        // containerd.
        let mut now = t0;
        for _ in 0..1000 {
            now += QUIET / 2;
            o.event(now);
            assert!(!o.due(now));
        }
        assert!(o.due(now + QUIET));
        assert_eq!(o.take(), vec!["a".to_string()]);
        assert!(o.is_empty() && !o.due(now + QUIET * 3));
    }

    #[test]
    fn a_reply_takes_everything_but_the_event_s_own_container() {
        let t0 = Instant::now();
        let mut o = outbox(t0);
        o.queue("a");
        o.queue("self");
        o.queue("b");
        assert_eq!(
            o.take_except("self"),
            vec!["a".to_string(), "b".to_string()]
        );
        assert_eq!(o.take(), vec!["self".to_string()]);
        assert!(o.take_except("x").is_empty());
    }

    #[test]
    fn a_reply_resets_the_attempts_of_what_it_carried() {
        let t0 = Instant::now();
        let mut o = outbox(t0);
        o.queue("a");
        let ids = o.take();
        for _ in 1..MAX_ATTEMPTS {
            assert!(o.failed(&ids).is_empty());
            let _ = o.take();
        }
        o.queue("a");
        assert_eq!(o.take_except("x"), ids);
        // Delivered by the reply: a later failure starts counting afresh.
        assert!(o.failed(&ids).is_empty());
    }

    #[test]
    fn coalesces_and_retries_a_bounded_number_of_times() {
        let t0 = Instant::now();
        let mut o = outbox(t0);
        o.queue("a");
        o.queue("b");
        o.queue("a");
        let ids = o.take();
        assert_eq!(ids, vec!["a".to_string(), "b".to_string()]);
        o.sent(&ids[1..]);
        for attempt in 1..MAX_ATTEMPTS {
            assert!(o.failed(&ids[..1]).is_empty(), "attempt {attempt}");
            assert_eq!(o.take(), vec!["a".to_string()]);
        }
        assert_eq!(o.failed(&ids[..1]), vec!["a".to_string()]);
        assert!(o.is_empty());
    }

    #[test]
    fn removed_and_cleared_containers_are_forgotten() {
        let t0 = Instant::now();
        let mut o = outbox(t0);
        o.queue("a");
        o.remove("a");
        assert!(o.is_empty() && !o.due(t0 + QUIET));
        o.queue("b");
        o.clear();
        assert!(o.is_empty() && !o.due(t0 + QUIET));
    }
}
