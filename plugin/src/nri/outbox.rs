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
//! stale request: a newer target queued while an older one waits replaces it.
//!
//! **Failed sends are retried for ever, with back-off** ([`Backoff`]). The kubelet's CPU manager
//! never gives up on a container either: its `reconcileState`
//! (pkg/kubelet/cm/cpumanager/cpu_manager.go) retries every reconcile period for as long as the
//! container lives. A container whose unsolicited update did not reach the runtime (a request
//! deadline elapsed in a slow guest, the runtime answered an error, the runtime reported the
//! update failed) is queued again at once, but its next *unsolicited* send waits for its
//! back-off ([`Backoff::delay`] of its attempt count) as well as for the lull. The reply to an
//! event still carries it at once, whatever its back-off: a reply is applied by the runtime
//! under the locks the event already holds, and delivers the update ([`Outbox::sent`] resets
//! the count). There is no "given up" state: until the runtime takes the update, the container
//! may run on CPUs that are no longer its own (`topolet_core::placement::breach`).

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

/// How long a container whose unsolicited update failed waits before the next one: the
/// delay after the `n`th consecutive failure is `base · 2^(n-1)`, capped at `cap`, on top of
/// the lull every unsolicited request needs anyway.
///
/// The defaults ([`Backoff::DEFAULT`]: 500 ms doubling to 5 s) are chosen so that:
/// - the first retry follows the failure by about the lull (300 ms on a runtime with the
///   UpdateContainers fix), so a one-off error costs well under a second of breach;
/// - a runtime that keeps failing is asked at most every 5 s plus the request's own deadline
///   (containerd's default NRI request timeout is 2 s), i.e. within the kubelet's CPU manager
///   reconcile period (`--cpu-manager-reconcile-period`, 10 s by default,
///   pkg/kubelet/cm/cpumanager/cpu_manager.go): topolet never repairs more slowly than the
///   kubelet's own reconciliation would, and a slow guest is not flooded with requests that
///   each hold its NRI locks until their deadline;
/// - the cap is reached after four failures (0.5, 1, 2, 4, then 5 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    pub const DEFAULT: Backoff = Backoff {
        base: Duration::from_millis(500),
        cap: Duration::from_secs(5),
    };

    /// The wait before the next unsolicited send after the `attempt`th consecutive failure
    /// (`attempt` ≥ 1; 0 waits nothing).
    pub fn delay(&self, attempt: u32) -> Duration {
        if attempt == 0 {
            return Duration::ZERO;
        }
        // 2^(attempt-1) without overflow: past 2^20 the cap has long been reached.
        let factor = 1u32 << (attempt - 1).min(20);
        self.base.saturating_mul(factor).min(self.cap)
    }
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::DEFAULT
    }
}

/// A container whose unsolicited update failed: how many times in a row, and when the next
/// unsolicited send may carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Retry {
    attempts: u32,
    not_before: Instant,
}

/// One failed send of a container, as [`Outbox::failed`] scheduled its retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rescheduled {
    pub id: String,
    /// Consecutive failed sends so far (1 for the first failure).
    pub attempt: u32,
    /// How long the next unsolicited send waits (besides the lull).
    pub delay: Duration,
}

/// The queue of containers to update.
#[derive(Debug, Clone)]
pub struct Outbox {
    ids: BTreeSet<String>,
    quiet: Duration,
    last_event: Instant,
    backoff: Backoff,
    retries: BTreeMap<String, Retry>,
}

impl Outbox {
    pub fn new(now: Instant) -> Outbox {
        Outbox {
            ids: BTreeSet::new(),
            quiet: QUIET_LOCK_INVERSION,
            last_event: now,
            backoff: Backoff::DEFAULT,
            retries: BTreeMap::new(),
        }
    }

    /// The back-off of failed sends (tests shorten it).
    pub fn set_backoff(&mut self, backoff: Backoff) {
        self.backoff = backoff;
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
        self.retries.remove(id);
    }

    /// Forgets everything queued (a Synchronize computes every container's update afresh).
    pub fn clear(&mut self) {
        self.ids.clear();
        self.retries.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// When the runtime sent its last event.
    pub fn last_event(&self) -> Instant {
        self.last_event
    }

    /// Whether the runtime sent no event for `lull` before `now`.
    pub fn quiet_for(&self, now: Instant, lull: Duration) -> bool {
        now.saturating_duration_since(self.last_event) >= lull
    }

    /// Whether `id` may go in an unsolicited request at `now` (its back-off, if any, is over).
    fn ready(&self, id: &str, now: Instant) -> bool {
        self.retries.get(id).is_none_or(|r| r.not_before <= now)
    }

    /// Whether an unsolicited request should go now: a queued container whose back-off is over,
    /// and the runtime quiet for the runtime's lull ([`Outbox::set_quiet`]).
    pub fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_event) >= self.quiet
            && self.ids.iter().any(|id| self.ready(id, now))
    }

    /// When the next unsolicited request may go, as things stand: the end of the runtime's lull,
    /// or later the end of the soonest back-off among the queued containers; `None` with nothing
    /// queued. An event or a newly queued container moves it (the caller's timer is re-armed
    /// then: `crate::nri::handlers`'s scheduler), time alone never does.
    pub fn next_due(&self) -> Option<Instant> {
        let soonest = self
            .ids
            .iter()
            .map(|id| self.retries.get(id).map(|r| r.not_before))
            .min_by(|a, b| match (a, b) {
                // A container with no back-off is ready at once: it sorts first.
                (None, _) => std::cmp::Ordering::Less,
                (_, None) => std::cmp::Ordering::Greater,
                (Some(a), Some(b)) => a.cmp(b),
            })?;
        let lull_over = self.last_event + self.quiet;
        Some(soonest.map_or(lull_over, |ready| ready.max(lull_over)))
    }

    /// Takes the queued containers whose back-off is over at `now`, for an unsolicited request;
    /// the others stay queued (a reply still takes them).
    pub fn take(&mut self, now: Instant) -> Vec<String> {
        let (ready, waiting): (BTreeSet<String>, BTreeSet<String>) = std::mem::take(&mut self.ids)
            .into_iter()
            .partition(|id| self.ready(id, now));
        self.ids = waiting;
        ready.into_iter().collect()
    }

    /// Takes every queued id but `skip` (the container the event is about: a container cannot
    /// be updated while it is being created, and a stopping one needs no new cpuset) for the
    /// reply to an event. The runtime applies a reply's updates before it answers the event, so
    /// they count as delivered.
    pub fn take_except(&mut self, skip: &str) -> Vec<String> {
        self.take_except_all(&[skip])
    }

    /// Takes every queued id but those in `skip` (the event's own container, and containers
    /// an unsolicited request in flight carries: `crate::nri::records`) for the reply to an
    /// event; they count as delivered.
    pub fn take_except_all(&mut self, skip: &[&str]) -> Vec<String> {
        let kept: Vec<String> = skip.iter().filter_map(|s| self.ids.take(*s)).collect();
        let ids: Vec<String> = std::mem::take(&mut self.ids).into_iter().collect();
        self.ids.extend(kept);
        self.sent(&ids);
        ids
    }

    /// The runtime took the update of `ids`: their back-off ends.
    pub fn sent(&mut self, ids: &[String]) {
        for id in ids {
            self.retries.remove(id);
        }
    }

    /// The update of `ids` did not reach the runtime at `now`: they are queued again, each
    /// with the next step of its back-off ([`Backoff::delay`]). Never gives up (module doc).
    pub fn failed(&mut self, ids: &[String], now: Instant) -> Vec<Rescheduled> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let attempts = self.retries.get(id).map_or(0, |r| r.attempts) + 1;
            let delay = self.backoff.delay(attempts);
            self.retries.insert(
                id.clone(),
                Retry {
                    attempts,
                    not_before: now + delay,
                },
            );
            self.queue(id);
            out.push(Rescheduled {
                id: id.clone(),
                attempt: attempts,
                delay,
            });
        }
        out
    }

    /// `id`'s consecutive failed sends (0: none, or delivered since).
    pub fn attempts(&self, id: &str) -> u32 {
        self.retries.get(id).map_or(0, |r| r.attempts)
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
        assert_eq!(o.take(now + QUIET), vec!["a".to_string()]);
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
        assert_eq!(o.take(t0), vec!["self".to_string()]);
        assert!(o.take_except("x").is_empty());
    }

    #[test]
    fn the_back_off_doubles_from_its_base_up_to_its_cap() {
        let b = Backoff::DEFAULT;
        let ms = |n| b.delay(n).as_millis();
        assert_eq!(ms(0), 0);
        assert_eq!(
            (1..=7).map(ms).collect::<Vec<_>>(),
            [500, 1000, 2000, 4000, 5000, 5000, 5000]
        );
        // No overflow however long the runtime fails.
        assert_eq!(b.delay(u32::MAX), b.cap);
        let tiny = Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(3),
        };
        assert_eq!(tiny.delay(1), Duration::from_millis(1));
        assert_eq!(tiny.delay(2), Duration::from_millis(2));
        assert_eq!(tiny.delay(3), Duration::from_millis(3));
    }

    #[test]
    fn a_failed_container_waits_its_back_off_and_is_never_given_up() {
        let t0 = Instant::now();
        let mut o = outbox(t0);
        o.queue("a");
        let mut now = t0 + QUIET;
        let ids = o.take(now);
        assert_eq!(ids, vec!["a".to_string()]);
        for attempt in 1..=20u32 {
            let r = o.failed(&ids, now);
            let delay = Backoff::DEFAULT.delay(attempt);
            assert_eq!(
                r,
                vec![Rescheduled {
                    id: "a".into(),
                    attempt,
                    delay
                }]
            );
            assert_eq!(o.attempts("a"), attempt);
            // Queued again, but not due before its back-off is over, however quiet the runtime.
            assert!(!o.is_empty());
            assert!(!o.due(now + delay - Duration::from_millis(1)));
            assert!(o.take(now + delay - Duration::from_millis(1)).is_empty());
            assert!(!o.is_empty(), "still queued while it waits");
            now += delay;
            assert!(o.due(now));
            assert_eq!(o.take(now), ids);
        }
        // Delivered at last: the count starts afresh.
        o.sent(&ids);
        assert_eq!(o.attempts("a"), 0);
        assert_eq!(o.failed(&ids, now)[0].attempt, 1);
    }

    #[test]
    fn the_back_off_still_needs_the_lull_and_is_per_container() {
        let t0 = Instant::now();
        let mut o = outbox(t0);
        o.set_backoff(Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(1),
        });
        o.queue("a");
        let failed_at = t0 + QUIET;
        let ids = o.take(failed_at);
        o.failed(&ids, failed_at);
        // An event during the back-off: the lull counts from it.
        let event = failed_at + Duration::from_millis(900);
        o.event(event);
        assert!(!o.due(failed_at + Duration::from_secs(1)), "no lull yet");
        assert!(o.due(event + QUIET));
        // Another container queued while "a" backs off goes on its own, without waiting.
        let mut o = outbox(t0);
        o.set_backoff(Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(1),
        });
        o.queue("a");
        let ids = o.take(failed_at);
        o.failed(&ids, failed_at);
        o.queue("b");
        let meanwhile = failed_at + Duration::from_millis(500);
        assert!(o.due(meanwhile));
        assert_eq!(o.take(meanwhile), vec!["b".to_string()]);
        assert!(!o.is_empty(), "a waits out its back-off");
        assert!(!o.due(meanwhile));
        assert_eq!(o.take(failed_at + Duration::from_secs(1)), ids);
    }

    #[test]
    fn a_reply_carries_a_container_in_back_off_at_once_and_resets_it() {
        let t0 = Instant::now();
        let mut o = outbox(t0);
        o.queue("a");
        let ids = o.take(t0 + QUIET);
        for _ in 0..4 {
            o.failed(&ids, t0 + QUIET);
            let _ = o.take(t0 + QUIET * 1000);
        }
        o.failed(&ids, t0 + QUIET);
        assert!(!o.due(t0 + QUIET * 2), "backing off");
        // A newer target queued meanwhile: one entry, still backing off.
        o.queue("a");
        assert_eq!(o.take(t0 + QUIET * 2), Vec::<String>::new());
        // The next reply takes it whatever its back-off, and it counts as delivered.
        assert_eq!(o.take_except("x"), ids);
        assert_eq!(o.attempts("a"), 0);
        assert_eq!(o.failed(&ids, t0)[0].attempt, 1);
    }

    #[test]
    fn coalesces_queued_ids() {
        let t0 = Instant::now();
        let mut o = outbox(t0);
        o.queue("a");
        o.queue("b");
        o.queue("a");
        assert_eq!(o.take(t0 + QUIET), vec!["a".to_string(), "b".to_string()]);
        assert!(o.is_empty());
    }

    #[test]
    fn removed_and_cleared_containers_are_forgotten() {
        let t0 = Instant::now();
        let mut o = outbox(t0);
        o.queue("a");
        o.failed(&["a".to_string()], t0);
        o.remove("a");
        assert!(o.is_empty() && !o.due(t0 + QUIET));
        assert_eq!(o.attempts("a"), 0);
        o.queue("b");
        o.failed(&["b".to_string()], t0);
        o.clear();
        assert_eq!(o.attempts("b"), 0);
        assert!(o.is_empty() && !o.due(t0 + QUIET));
    }
}
