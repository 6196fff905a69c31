//! Exclusive-CPU breaches as the plugin measures them (`topolet_core::placement::breach`): each run of
//! the background task (`background`: after a change of the records, and every
//! `crate::nri::schedule::BREACH_TICK` while a breach is open) hands the cache's live containers to `topolet_core::placement::breach::breaches`, follows the result in the node's
//! ledger, and reports it to the metrics (`topolet_exclusive_breach_seconds_total`,
//! `topolet_exclusive_breach_containers`); the status report dates the open ones.

use std::time::{Duration, Instant, SystemTime};

use super::{PluginState, TopoletPlugin};
use crate::nri::outbox::Backoff;
use topolet_core::placement::breach;
use topolet_core::report::status::BreachStatus;

impl TopoletPlugin {
    /// Observes the breaching containers at `now` (the background task): the ledger adds the
    /// time since the last observation, the metrics follow. A breach that opens is logged once,
    /// at warn; the end of the last one at info. Returns how many are open.
    pub(super) fn observe_breaches(&self, now: Instant) -> usize {
        let mut node = self.quiet_lock();
        let current = breach::breaches(&node.records.holdings());
        let was_open = node.breaches.len();
        let added = node.breaches.observe(now, current);
        let open = node.breaches.len();
        let opened: Vec<(String, String, String)> = node
            .breaches
            .open()
            .filter(|o| o.since == now)
            .map(|o| {
                (
                    name_of(&node, &o.breach.id),
                    o.breach.cpus.to_string(),
                    o.breach
                        .holders
                        .iter()
                        .map(|h| name_of(&node, h))
                        .collect::<Vec<_>>()
                        .join(", "),
                )
            })
            .collect();
        drop(node);
        self.metrics.exclusive_breach(added, open);
        self.breaching
            .send_if_modified(|n| std::mem::replace(n, open) != open);
        for (container, cpus, holders) in opened.iter().take(8) {
            tracing::warn!(%container, %cpus, %holders, "container may run on CPUs another holds exclusively: its new cpuset is not applied yet");
        }
        if opened.len() > 8 {
            tracing::warn!(
                more = opened.len() - 8,
                "more containers may run on CPUs others hold exclusively"
            );
        }
        if open == 0 && was_open > 0 {
            tracing::info!("no container runs on CPUs another holds exclusively any more");
        }
        open
    }

    /// The breaches open at the last observation, dated by the wall clock: `now` and `wall`
    /// are the same moment on the two clocks.
    pub(super) fn breach_report(
        node: &PluginState,
        now: Instant,
        wall: SystemTime,
    ) -> Vec<BreachStatus> {
        node.breaches
            .open()
            .map(|o| {
                let lasted = now.saturating_duration_since(o.since);
                let since = wall.checked_sub(lasted).unwrap_or(wall);
                BreachStatus {
                    container: name_of(node, &o.breach.id),
                    id: o.breach.id.clone(),
                    cpus: o.breach.cpus.clone(),
                    holders: o.breach.holders.iter().map(|h| name_of(node, h)).collect(),
                    since: rfc3339(since),
                    seconds: lasted.as_secs_f64(),
                }
            })
            .collect()
    }

    /// The number of containers in breach, as of each observation: changes when it does
    /// (tests wait on it rather than on time).
    pub fn breaching(&self) -> tokio::sync::watch::Receiver<usize> {
        self.breaching.subscribe()
    }

    /// Shortens (tests) or lengthens the back-off of failed unsolicited updates
    /// (`crate::nri::outbox::Backoff`; the default is [`Backoff::DEFAULT`]).
    pub fn set_update_backoff(&self, base: Duration, cap: Duration) {
        self.lock().records.set_backoff(Backoff { base, cap });
    }
}

/// `namespace/pod/container` of the container `id`, or its id when it is gone.
fn name_of(node: &PluginState, id: &str) -> String {
    match node.records.get(id) {
        Some(r) => format!("{}/{}", r.view().pod_ref, r.view().key.container),
        None => id.to_string(),
    }
}

/// `t` in RFC 3339, UTC (the Kubernetes API's timestamps: `k8s_openapi`'s `jiff`).
fn rfc3339(t: SystemTime) -> String {
    match k8s_openapi::jiff::Timestamp::try_from(t) {
        Ok(ts) => ts
            .round(k8s_openapi::jiff::Unit::Second)
            .map_or_else(|_| ts.to_string(), |r| r.to_string()),
        Err(_) => "unknown".into(),
    }
}
