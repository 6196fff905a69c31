//! What reaches containers other than the one an event is about: the shared pool's changes
//! queued in the cache, the queued updates a reply carries, and the unsolicited UpdateContainers
//! the background task (`background`) sends in a lull (`crate::nri::outbox`). A send that fails
//! is retried after its back-off, for as long as the container lives.

use std::sync::Arc;
use std::time::Instant;

use topolet_nri::api;

use super::{PluginState, TopoletPlugin};
use crate::nri::adjust;
use crate::nri::outbox::Rescheduled;
use crate::nri::records::BatchResult;
use topolet_core::managers::topology::hints::NumaMask;

impl TopoletPlugin {
    /// Sends the queued containers their current targets in one UpdateContainers request, if
    /// the cache says it is time (`crate::nri::records`: after this connection's
    /// Synchronize, after a lull, one request at a time). The request is queued to the stub
    /// under the lock that computed it, so no newer target can be taken in between.
    pub(super) fn flush_updates(self: &Arc<Self>) {
        let Some(updater) = self.updater.get() else {
            return;
        };
        let mut node = self.quiet_lock();
        let Some(batch) = node.records.take_due(Instant::now()) else {
            return;
        };
        let updates = updates_for(&node, &batch.ids());
        let n = updates.len();
        match updater.update(updates, Vec::new()) {
            Ok(pending) => {
                drop(node);
                let plugin = Arc::downgrade(self);
                tokio::spawn(async move {
                    let result = pending.await;
                    let Some(p) = plugin.upgrade() else { return };
                    let mut node = p.lock();
                    let answer = match &result {
                        Ok(failed) => BatchResult::Answered {
                            failed: failed.iter().map(|u| u.container_id.clone()).collect(),
                        },
                        Err(_) => BatchResult::Failed,
                    };
                    let outcome = node.records.batch_done(&batch, answer, Instant::now());
                    drop(node);
                    if outcome.stale_connection {
                        tracing::debug!(
                            "an update request of an earlier connection ended; ignored"
                        );
                        return;
                    }
                    if !outcome.superseded.is_empty() {
                        tracing::debug!(containers = ?outcome.superseded, "targets changed while their update was in flight: sent again");
                        // A batch quota cut written directly while this request carried the
                        // older one: the runtime has just applied the older value; the cut is
                        // written again now, not after the next lull.
                        p.write_batch_quotas(&outcome.superseded);
                    }
                    let error = match &result {
                        Ok(failed) if failed.is_empty() => {
                            tracing::debug!(containers = n, "container updates applied");
                            return;
                        }
                        Ok(failed) => format!("the runtime failed {} of {n} updates", failed.len()),
                        Err(e) => e.to_string(),
                    };
                    log_retries(&error, n, &outcome.retried);
                });
            }
            Err(e) => {
                let retried = node.records.batch_not_queued(&batch, Instant::now());
                drop(node);
                log_retries(&e.to_string(), n, &retried);
            }
        }
    }

    /// Queues every managed shared container whose cpuset differs from the current shared
    /// pool for an update (carried by the next reply that can, or sent after a lull).
    pub(super) fn push_shared_pool(&self, node: &mut PluginState, skip: Option<&str>) {
        for id in shared_changes(node, skip) {
            node.records.queue(&id);
        }
        self.hold_batch(node);
    }

    /// The queued updates of every container but `skip`, for the reply to an event about
    /// `skip`.
    pub(super) fn reply_updates(
        &self,
        node: &mut PluginState,
        skip: &str,
    ) -> Vec<api::ContainerUpdate> {
        let ids = node.records.reply_ids(skip);
        let updates = updates_for(node, &ids);
        if !updates.is_empty() {
            tracing::debug!(
                containers = updates.len(),
                "container updates carried in the reply"
            );
        }
        updates
    }
}

/// One warning per failed unsolicited request: the error, and for the containers queued again
/// the highest attempt count among them and the soonest retry (a request's containers usually
/// share both). Partial failures of containers that exited since are retried by no one: debug.
fn log_retries(error: &str, sent: usize, retried: &[Rescheduled]) {
    let (Some(attempt), Some(delay)) = (
        retried.iter().map(|r| r.attempt).max(),
        retried.iter().map(|r| r.delay).min(),
    ) else {
        tracing::debug!(
            error,
            containers = sent,
            "container updates not applied to containers that have exited since"
        );
        return;
    };
    let ids: Vec<&str> = retried.iter().take(8).map(|r| r.id.as_str()).collect();
    tracing::warn!(
        error,
        containers = retried.len(),
        first = ?ids,
        attempt,
        retry_in_ms = delay.as_millis() as u64,
        "container updates not applied; sending them again after a back-off (never given up)"
    );
}

/// Each of `ids`' current target as an update (failures ignored: a container may have exited
/// meanwhile), in the order of `ids` (the cache hands them sorted).
fn updates_for(node: &PluginState, ids: &[String]) -> Vec<api::ContainerUpdate> {
    let mut updates = Vec::with_capacity(ids.len());
    for id in ids {
        let Some(m) = node.records.get(id) else {
            continue;
        };
        let t = m.target();
        let mut update = if t.exclusive {
            adjust::resize_update(m.view(), t)
        } else if node.batch.owns_quota(id) {
            adjust::batch_update(id, t)
        } else {
            adjust::cpuset_update(id, &t.cpuset, &t.mems, true)
        };
        update.ignore_failure = true;
        updates.push(update);
    }
    updates
}

/// The mems to send a container whose mems were `before` and are now to be `after`: an empty
/// `after` leaves the field alone (the kubelet's way for shared containers), unless topolet (or
/// someone) had narrowed it before: then every node, which is what the container would have had.
pub(super) fn widened(before: NumaMask, after: NumaMask, all: NumaMask) -> NumaMask {
    if after.is_empty() && !before.is_empty() {
        all
    } else {
        after
    }
}

/// Moves every shared container (except `skip`) to the current shared pool and mems in the
/// books; returns the ids whose cpuset or mems changed (to be sent the update).
fn shared_changes(node: &mut PluginState, skip: Option<&str>) -> Vec<String> {
    let shared = node.placement.shared_pool();
    // An empty pool leaves batch containers where they are: they are held (frozen), not
    // moved onto reserved CPUs (`super::reclaimed`).
    let batch_pool = node.placement.batch_pool();
    let mems = node.placement.shared_mems();
    let all = node.placement.all_mems();
    let mut changed = Vec::new();
    for (id, m) in node.records.iter_mut() {
        // Stopped containers left the update set at StopContainer.
        if Some(id.as_str()) == skip || m.target().exclusive || !m.lifecycle().is_live() {
            continue;
        }
        let t = m.target();
        let target_mems = if t.memory_pinned {
            t.mems
        } else {
            widened(t.mems, mems, all)
        };
        let cpus = if node.batch.is_batch(id) {
            &batch_pool
        } else {
            &shared
        };
        if m.retarget(|t| {
            if !cpus.is_empty() {
                t.cpuset.clone_from(cpus);
            }
            t.mems = target_mems;
        }) {
            changed.push(id.clone());
        }
    }
    changed.sort();
    changed
}
