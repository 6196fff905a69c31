//! Node-level reclaim in the eviction loop (`EvictionLoop::reclaim_node`, the kubelet's
//! `reclaimNodeLevelResources`): before a pod is evicted for a disk signal, dead containers,
//! sandboxes and unused images go through [`NodeReclaim`](crate::pressure::reclaim::NodeReclaim),
//! the signals are observed again, and the outcome is logged, counted, shown by `topolet status`
//! and recorded as the Node's Events ([`FREED_DISK_SPACE_REASON`],
//! [`FREE_DISK_SPACE_FAILED_REASON`]).

use std::collections::BTreeMap;
use std::time::Instant;

use crate::pressure::blocking::off_runtime;
use crate::pressure::eviction::EvictionLoop;
use crate::pressure::observation::{core_observations, observations, Observed};
use crate::pressure::reclaim::Reclaimed;
use topolet_core::eviction::reclaim::{
    free_disk_space_failed_message, reclaim_steps, still_under_pressure, Need,
};
use topolet_core::eviction::{Signal, Threshold};
use topolet_core::kube::events::{EventType, ObjectRef, Occurrence};
use topolet_core::report::status::NodeReclaim as StatusReclaim;

impl EvictionLoop {
    /// True when a configured threshold's signal has a node-level reclaim step on some
    /// filesystem layout (the image tracker then keeps its detection period).
    pub(super) fn has_reclaim_steps(&self) -> bool {
        self.config
            .thresholds
            .iter()
            .any(|t| !reclaim_steps(t.signal, false).is_empty())
    }

    /// The kubelet's `reclaimNodeLevelResources` for `threshold`: dead containers and unused
    /// images first, then the signals observed again. True when the threshold is no longer
    /// met with its minimum reclaim, or when dead containers were removed (their space comes
    /// back asynchronously): no pod is evicted this interval. In dry run, true when
    /// the plan alone would have freed enough (nothing was removed, so nothing is observed).
    pub(super) async fn reclaim_node(
        &self,
        threshold: &Threshold,
        observed: &BTreeMap<Signal, Observed>,
        has_imagefs: bool,
    ) -> bool {
        let (Some(r), Some(before)) = (&self.reclaim, observed.get(&threshold.signal).copied())
        else {
            return false;
        };
        let api_pods: Option<std::collections::HashSet<String>> =
            self.pod_facts().await.map(|f| f.keys().cloned().collect());
        let t = Instant::now();
        let done = match r
            .run(
                threshold,
                before.available,
                before.capacity,
                has_imagefs,
                api_pods.as_ref(),
            )
            .await
        {
            Ok(Some(d)) => d,
            Ok(None) => return false,
            Err(e) => {
                tracing::error!(signal = %threshold.signal, error = %e, "node reclaim failed; evicting as without it");
                return false;
            }
        };
        let signal = threshold.signal;
        let (relieved, after) = if done.dry_run {
            (done.need.is_some() && done.images_enough, before.available)
        } else {
            let sources = self.sources.clone();
            let node = off_runtime(move || sources.observe()).await;
            let again = observations(&node);
            let core_obs = core_observations(&again);
            let after = again.get(&signal).map_or(before.available, |o| o.available);
            (
                !still_under_pressure(&self.config, signal, &core_obs),
                after,
            )
        };
        // containerd frees a removed container's writable layer when its garbage collector
        // next runs (RemoveImage collects synchronously, RemoveContainer does not): seen on the
        // eviction suite's tmpfs image filesystem, the space came back after the observation.
        // A reclaim that removed containers or sandboxes therefore holds eviction for this
        // interval; the next one observes again (and, with nothing new to remove, evicts).
        let deferred = !done.dry_run
            && !relieved
            && (!done.containers.is_empty() || !done.sandboxes.is_empty());
        let result = match (done.dry_run, relieved, deferred) {
            (true, _, _) => "dry_run",
            (false, true, _) => "relieved",
            (false, false, true) => "deferred",
            (false, false, false) => "not_enough",
        };
        let observed_bytes = u64::try_from(after.saturating_sub(before.available)).unwrap_or(0);
        let needed = match done.need {
            Some(Need::Bytes(n)) => Some(n),
            _ => None,
        };
        tracing::warn!(
            signal = %signal,
            result,
            steps = ?done.steps,
            images = done.images.len(),
            image_bytes = done.image_bytes,
            containers = done.containers.len(),
            sandboxes = done.sandboxes.len(),
            errors = done.errors,
            needed_bytes = needed,
            available_before = before.available,
            available_after = after,
            images_used_before = done.images_used_before,
            images_used_after = done.images_used_after,
            took_ms = t.elapsed().as_millis() as u64,
            "node reclaim done"
        );
        let total = if let Some(m) = &self.metrics {
            m.node_reclaim(
                signal.as_str(),
                result,
                crate::telemetry::metrics::NodeReclaimCounts {
                    images: if done.dry_run {
                        0
                    } else {
                        done.images.len() as u64
                    },
                    image_bytes: if done.dry_run { 0 } else { done.image_bytes },
                    containers: if done.dry_run {
                        0
                    } else {
                        done.containers.len() as u64
                    },
                    sandboxes: if done.dry_run {
                        0
                    } else {
                        done.sandboxes.len() as u64
                    },
                    observed_bytes,
                    ..Default::default()
                },
            );
            m.node_reclaims(signal.as_str()).runs.values().sum()
        } else {
            0
        };
        if let Some(report) = &self.report {
            report.node_reclaim(StatusReclaim {
                signal: signal.to_string(),
                result: result.to_string(),
                images: done.images.len() as u64,
                image_bytes: done.image_bytes,
                containers: done.containers.len() as u64,
                sandboxes: done.sandboxes.len() as u64,
                total,
            });
        }
        self.reclaim_event(signal, relieved, &done, needed);
        if relieved {
            tracing::warn!(signal = %signal, dry_run = done.dry_run, "eviction: node reclaim relieved the pressure; no pod evicted this interval");
        } else if deferred {
            tracing::warn!(signal = %signal, "eviction: node reclaim removed dead containers whose space the runtime frees asynchronously; no pod evicted this interval, the next one observes again");
        }
        relieved || deferred
    }

    /// The Node's Event for one reclaim: Normal `FreedDiskSpace` with what went; when the images
    /// could not cover what was needed, also the kubelet's Warning `FreeDiskSpaceFailed` with
    /// its message (`image_gc_manager.go`). None in dry run.
    fn reclaim_event(&self, signal: Signal, relieved: bool, done: &Reclaimed, needed: Option<u64>) {
        let (Some(sink), Some(node)) = (&self.events, &self.node_name) else {
            return;
        };
        if done.dry_run {
            return;
        }
        let object = ObjectRef::node(node);
        let outcome = if relieved {
            "no pod evicted"
        } else {
            "still under pressure: evicting a pod"
        };
        let message = format!(
            "{signal}: removed {} unused images ({} bytes), {} dead containers, {} dead sandboxes; {outcome}",
            done.images.len(),
            done.image_bytes,
            done.containers.len(),
            done.sandboxes.len()
        );
        sink.record(Occurrence::new(
            object.clone(),
            EventType::Normal,
            FREED_DISK_SPACE_REASON,
            &message,
        ));
        if let (false, Some(n)) = (done.images_enough, needed) {
            sink.record(Occurrence::new(
                object,
                EventType::Warning,
                FREE_DISK_SPACE_FAILED_REASON,
                &free_disk_space_failed_message(n, done.image_bytes),
            ));
        }
    }
}

/// The Node's Event reason after a node-level reclaim.
pub const FREED_DISK_SPACE_REASON: &str = "FreedDiskSpace";
/// The kubelet's reason when its image GC could not free what was needed (`events.FreeDiskSpaceFailed`).
pub const FREE_DISK_SPACE_FAILED_REASON: &str = "FreeDiskSpaceFailed";
