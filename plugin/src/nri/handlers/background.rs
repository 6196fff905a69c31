//! The plugin's background task, started when the plugin is attached to its stub: it sends the
//! unsolicited updates (`updates`), checks the containers a Synchronize listed and the drift
//! (`drift`) and observes the exclusive-CPU breaches (`breach`) — each when it is due, as the
//! container records say (`crate::nri::schedule`), never on a fixed tick. It sleeps until the
//! earliest due time or until a change of the records pokes it (every lock taken through
//! `TopoletPlugin::lock` pokes as it is released); an idle node wakes it only for the drift
//! check's schedule.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;
use topolet_nri::stub::ConnectionStatus;
use topolet_nri::updater::ContainerUpdater;

use super::{TopoletPlugin, DRIFT_LULL};
use crate::nri::schedule::{Due, Schedule, SETTLE};

impl TopoletPlugin {
    /// Connects the plugin to its stub's update queue and status, and starts the background
    /// task (once).
    pub fn attach(
        self: &Arc<Self>,
        updater: ContainerUpdater,
        status: watch::Receiver<ConnectionStatus>,
    ) {
        let _ = self.updater.set(updater);
        let _ = self.status.set(status);
        if self
            .background_started
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        let plugin = Arc::downgrade(self);
        let wake = self.wake.clone();
        // `[nri]` is read at start only; the kubelet's `reconcileState` runs every 10 s.
        let mut schedule = Schedule::new(Instant::now(), self.config.get().nri.drift_check());
        tokio::spawn(async move {
            let mut next = Some(Instant::now());
            let mut last_run: Option<Instant> = None;
            loop {
                let poked = tokio::select! {
                    _ = wake.poked() => true,
                    _ = sleep_until(next) => false,
                };
                if wake.is_closed() {
                    break;
                }
                if poked {
                    // Coalesce a burst of events into one run.
                    if let Some(settled) = last_run.map(|t| t + SETTLE) {
                        tokio::time::sleep_until(settled.into()).await;
                    }
                }
                let Some(p) = plugin.upgrade() else { break };
                wake.take();
                let now = Instant::now();
                next = p.run_due(&mut schedule, now);
                last_run = Some(now);
            }
        });
    }

    /// One run of the background task at `now`: whatever is due is done; returns when the next
    /// run is due if nothing changes meanwhile (`None`: only a change wakes it).
    pub(super) fn run_due(
        self: &Arc<Self>,
        schedule: &mut Schedule,
        now: Instant,
    ) -> Option<Instant> {
        self.verify_running();
        self.flush_updates();
        // Every run observes: a run follows a change of the records (which may open or close a
        // breach), a send, or the breach tick.
        let breach_open = self.observe_breaches(now) > 0;
        let node = self.quiet_lock();
        let due = Due {
            send: node.records.next_send(),
            verify: node.records.has_verify(),
            breach_open,
            drift_ready: node.records.drift_ready_at(DRIFT_LULL),
        };
        drop(node);
        if schedule.drift_due(now, due.drift_ready) {
            schedule.drift_ran(now);
            self.check_drift(now);
        }
        schedule.next(now, due)
    }
}

/// Sleeps until `at`, or for ever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
