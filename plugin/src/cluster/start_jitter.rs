//! The start jitter of the API writers (`[kubernetes] start_jitter_ms`): the Node conditions
//! and taints publisher (`crate::cluster::node_status`), the reclaimed-CPU amount's
//! (`crate::cluster::extended_resource`) and the NodeResourceTopology's (`crate::cluster::nrt`)
//! send their first request only once a [`StartGate`] drawn at start has opened, at a random
//! time from 0 to the configured bound. A DaemonSet rolling update with a large
//! `maxUnavailable` restarts every topolet of a fleet within seconds; without it their first
//! writes land on the API server in the same second (docs/src/fleet.md). client-go's
//! `wait.Jitter` spreads its clients' periodic work the same way (`apimachinery/pkg/util/wait`).
//!
//! Each writer is a task of its own fed through a channel that keeps the latest value (a
//! `watch` or a `Notify`), so nothing waits for the gate but that task: the NRI handlers, the
//! pod watch, Events and evictions never do.

use std::time::Duration;

use tokio::time::Instant;
use topolet_core::jitter::mix;

/// When the API writers may send their first request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartGate {
    opens_at: Instant,
}

impl StartGate {
    /// A gate that opens `delay` after `start`.
    pub fn at(start: Instant, delay: Duration) -> StartGate {
        StartGate {
            opens_at: start + delay,
        }
    }

    /// A gate drawn now for a bound of `max` (0: open at once), with a seed of this process.
    pub fn draw(max: Duration) -> StartGate {
        StartGate::at(Instant::now(), delay(max, seed()))
    }

    /// A gate open at once.
    pub fn open() -> StartGate {
        StartGate::at(Instant::now(), Duration::ZERO)
    }

    /// When it opens.
    pub fn opens_at(&self) -> Instant {
        self.opens_at
    }

    /// Returns once the gate is open (at once when it already is).
    pub async fn wait(&self) {
        tokio::time::sleep_until(self.opens_at).await;
    }
}

/// The delay `seed` draws for a bound of `max`: from 0 to `max` inclusive, in whole
/// milliseconds.
pub fn delay(max: Duration, seed: u64) -> Duration {
    let span = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if span == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(mix(seed) % span.saturating_add(1))
}

/// A seed that differs between processes (and between runs of one): the start gate's, and the
/// reclaimed loop's for its rewrite ages (`topolet_core::reclaimed::aging`).
pub fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_stays_within_the_bound_and_spreads_over_it() {
        let max = Duration::from_secs(5);
        let delays: Vec<Duration> = (0..1000).map(|s| delay(max, s)).collect();
        assert!(delays.iter().all(|d| *d <= max));
        // A fleet's instances spread over the whole bound: every second of it gets some.
        for second in 0..5 {
            let n = delays.iter().filter(|d| d.as_secs() == second).count();
            assert!(n > 100, "second {second}: {n} of 1000");
        }
        assert!(
            (0..1000).all(|s| delay(Duration::ZERO, s).is_zero()),
            "0: no jitter"
        );
        assert!(delay(Duration::from_millis(1), u64::MAX) <= Duration::from_millis(1));
    }

    /// A writer that waits on the gate sends nothing before it opens, and a value handed to it
    /// meanwhile is the one it sends (the channel keeps the latest): the clock is tokio's paused
    /// one, advanced by the test.
    #[tokio::test(start_paused = true)]
    async fn a_writer_waits_for_the_gate_and_then_sends_the_latest_value() {
        let start = Instant::now();
        let gate = StartGate::at(start, Duration::from_millis(3_000));
        let (tx, mut rx) = tokio::sync::watch::channel(0u32);
        let (sent_tx, mut sent) = tokio::sync::mpsc::unbounded_channel();
        let writer = tokio::spawn(async move {
            gate.wait().await;
            loop {
                let v = *rx.borrow_and_update();
                let _ = sent_tx.send((v, Instant::now()));
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
        tx.send_replace(1);
        tokio::time::advance(Duration::from_millis(2_999)).await;
        tokio::task::yield_now().await;
        assert!(sent.try_recv().is_err(), "sent before the gate opened");
        tx.send_replace(2);
        tokio::time::advance(Duration::from_millis(1)).await;
        let (v, at) = sent.recv().await.expect("sent once open");
        assert_eq!(v, 2);
        assert_eq!(at, gate.opens_at());
        drop(tx);
        writer.await.expect("writer");
        // Open at once.
        let open = StartGate::open();
        open.wait().await;
        assert_eq!(open.opens_at(), Instant::now());
    }
}
