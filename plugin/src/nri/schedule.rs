//! When the plugin's background work is next due, and what wakes the task that does it.
//!
//! The background work (`crate::nri::handlers`' `background`) is: the unsolicited update
//! request (`crate::nri::outbox`: after the runtime's lull, after a container's back-off), the
//! check of the containers a Synchronize listed, the exclusive-CPU breach observation, and the
//! drift check (`[nri] drift_check_s`, in a lull). None of it is periodic in itself: each is
//! due at a time the container records can name, or after the records changed. So the task
//! sleeps until the earliest of those times ([`Schedule::next`]), or until it is poked
//! ([`Wakeup::poke`]) because the records may have changed; an idle node wakes it only for
//! the drift check's schedule.
//!
//! Pokes are coalesced: after a run, the next one waits at least [`SETTLE`], however many pokes
//! arrived (during churn the task runs at most as often as the former fixed 100 ms tick; at
//! rest, never). The breach observation is the only thing repeated on a timer, every
//! [`BREACH_TICK`], and only while a breach is open: its seconds are counted as they pass.
//!
//! Pure apart from [`Wakeup`]: every time is a parameter (the tests drive the clock).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The least time between two runs of the background task when it is poked: the pokes of a
/// burst of events (each event pokes) are served by one run.
pub const SETTLE: Duration = Duration::from_millis(100);
/// How often an open exclusive-CPU breach is observed (its seconds counted, its end seen
/// without an event: `topolet_core::placement::breach`).
pub const BREACH_TICK: Duration = Duration::from_millis(100);

/// What the container records have due, read under the lock at the end of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Due {
    /// When the next unsolicited request may go (`ContainerRecords::next_send`).
    pub send: Option<Instant>,
    /// Running containers a Synchronize listed wait to be checked.
    pub verify: bool,
    /// A breach was open at this run's observation.
    pub breach_open: bool,
    /// From when the drift check would have something to compare
    /// (`ContainerRecords::drift_ready_at`).
    pub drift_ready: Option<Instant>,
}

/// The background task's own clock-free state: the drift check's period and last run.
#[derive(Debug, Clone)]
pub struct Schedule {
    drift_every: Option<Duration>,
    last_drift: Instant,
}

impl Schedule {
    /// A schedule whose drift check runs every `drift_every` (`None`: off), the first one a
    /// period after `now`.
    pub fn new(now: Instant, drift_every: Option<Duration>) -> Schedule {
        Schedule {
            drift_every,
            last_drift: now,
        }
    }

    /// Whether the drift check should run at `now`: its period is over and the records are in
    /// a lull with something to compare.
    pub fn drift_due(&self, now: Instant, drift_ready: Option<Instant>) -> bool {
        self.drift_at(drift_ready).is_some_and(|at| at <= now)
    }

    /// The drift check ran at `now`.
    pub fn drift_ran(&mut self, now: Instant) {
        self.last_drift = now;
    }

    fn drift_at(&self, drift_ready: Option<Instant>) -> Option<Instant> {
        let every = self.drift_every?;
        Some((self.last_drift + every).max(drift_ready?))
    }

    /// When the task should wake next after a run at `now` that left `due`: the earliest of
    /// the send, the drift check and, while a breach is open, the next observation; `now` when
    /// containers wait to be checked. `None`: nothing is due until something changes (a poke).
    pub fn next(&self, now: Instant, due: Due) -> Option<Instant> {
        [
            due.send,
            due.verify.then_some(now),
            due.breach_open.then(|| now + BREACH_TICK),
            self.drift_at(due.drift_ready),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// The poke that wakes the background task when the records may have changed, and its end.
/// Poking is cheap and never blocks: only the first poke after a run notifies the task.
#[derive(Debug, Default)]
pub struct Wakeup {
    poked: AtomicBool,
    closed: AtomicBool,
    notify: Notify,
}

impl Wakeup {
    /// The records may have changed: the task runs (at the latest [`SETTLE`] after its last run).
    pub fn poke(&self) {
        if !self.poked.swap(true, Ordering::AcqRel) {
            self.notify.notify_one();
        }
    }

    /// The task is about to read the records: pokes from now on wake it again.
    pub fn take(&self) -> bool {
        self.poked.swap(false, Ordering::AcqRel)
    }

    /// The plugin is gone: the task ends.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Waits for a poke (or the close) that arrived since the last [`Wakeup::take`].
    pub async fn poked(&self) {
        self.notify.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn an_idle_node_is_woken_by_nothing_but_the_drift_check() {
        let t0 = Instant::now();
        let s = Schedule::new(t0, Some(30 * SEC));
        // No container: nothing at all.
        assert_eq!(s.next(t0, Due::default()), None);
        // Running containers, the runtime quiet since t0: the drift check's period.
        let idle = Due {
            drift_ready: Some(t0 + 5 * SEC),
            ..Due::default()
        };
        assert_eq!(s.next(t0, idle), Some(t0 + 30 * SEC));
        assert!(!s.drift_due(t0 + 29 * SEC, idle.drift_ready));
        assert!(s.drift_due(t0 + 30 * SEC, idle.drift_ready));
        // Off: nothing.
        assert_eq!(Schedule::new(t0, None).next(t0, idle), None);
    }

    #[test]
    fn the_drift_check_waits_for_its_period_and_for_the_lull() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, Some(30 * SEC));
        s.drift_ran(t0 + 30 * SEC);
        // An event at 58 s: the lull ends at 63 s, after the period (60 s).
        let ready = Some(t0 + 63 * SEC);
        let due = Due {
            drift_ready: ready,
            ..Due::default()
        };
        assert_eq!(s.next(t0 + 31 * SEC, due), Some(t0 + 63 * SEC));
        assert!(!s.drift_due(t0 + 60 * SEC, ready));
        assert!(s.drift_due(t0 + 63 * SEC, ready));
        // Something queued or in flight: not ready; the send's end re-arms it.
        assert!(!s.drift_due(t0 + 100 * SEC, None));
    }

    #[test]
    fn the_earliest_of_what_is_due_wins() {
        let t0 = Instant::now();
        let s = Schedule::new(t0, Some(30 * SEC));
        let now = t0 + SEC;
        let send = Due {
            send: Some(now + Duration::from_millis(300)),
            drift_ready: Some(now + 5 * SEC),
            ..Due::default()
        };
        assert_eq!(s.next(now, send), send.send);
        let breach = Due {
            breach_open: true,
            ..send
        };
        assert_eq!(s.next(now, breach), Some(now + BREACH_TICK));
        let verify = Due {
            verify: true,
            ..breach
        };
        assert_eq!(s.next(now, verify), Some(now));
    }

    #[tokio::test]
    async fn pokes_are_coalesced_until_taken() {
        let w = Wakeup::default();
        assert!(!w.take());
        w.poke();
        w.poke();
        // One notification stored for both pokes.
        w.poked().await;
        assert!(w.take());
        assert!(!w.take());
        w.poke();
        w.poked().await;
        w.close();
        assert!(w.is_closed());
    }
}
