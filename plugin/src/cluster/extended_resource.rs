//! The reclaimed-CPU extended resource on this Node (`crate::reclaimed` decides the amount).
//!
//! The amount goes to `status.capacity` and `status.allocatable` together, as a strategic merge
//! patch of the `nodes/status` subresource that names only this key. The kubelet keeps capacity
//! keys it does not own, removes allocatable keys that capacity lacks, and recomputes allocatable
//! as capacity minus its reservations (`pkg/kubelet/nodestatus/setters.go` `MachineInfo`), so
//! capacity is what must be written; allocatable is written too so that the scheduler sees the
//! new amount before the kubelet's next status update.
//!
//! **0 is never written: the key is removed** (a strategic merge `null` in both maps). A Node
//! that holds the key at 0 fails running batch pods when the kubelet restarts: it re-admits every
//! running pod against allocatable (`pkg/kubelet/lifecycle/predicate.go`), and 0 is less than any
//! request, while a resource the Node does not list at all is dropped from the pods' requests
//! before that check (`removeMissingExtendedResources`). The scheduler sees an absent key as 0:
//! nothing new is placed either way.
//!
//! A task of its own, fed the latest amount through a `watch` channel: the suppress loop never
//! waits on the API server, a failed write is retried with back-off ([`RETRY_MAX`]) with the
//! newest amount (never a stale one), and an amount that was superseded before it could be
//! written is never written.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use kube::Client;
use serde_json::json;
use tokio::sync::watch;

use crate::cluster::start_jitter::StartGate;
use crate::telemetry::metrics::Metrics;
use std::sync::Arc;

/// The longest a failed write waits before the next try (kube-runtime's `DefaultBackoff`, the
/// watcher's: 0.8 s doubling to 30 s, jittered, reset by a success).
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What the Node should say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advert {
    /// Nothing to write.
    Nothing,
    /// This amount, in milli-CPU (0: the key removed).
    Amount(u64),
    /// The key removed, but only if the Node holds it (the feature is off: a Node that never
    /// had the resource is not written to).
    WithdrawIfPresent,
}

/// The strategic merge patch setting `name` to `millis` in capacity and allocatable; for 0, the
/// patch that removes the key from both (`null`).
pub fn amount_patch(name: &str, millis: u64) -> serde_json::Value {
    let v = if millis == 0 {
        serde_json::Value::Null
    } else {
        json!(millis.to_string())
    };
    json!({"status": {"capacity": {name: v.clone()}, "allocatable": {name: v}}})
}

/// Whether the Node's capacity or allocatable lists `name` at all.
pub fn listed(node: &Node, name: &str) -> bool {
    node.status.as_ref().is_some_and(|s| {
        s.capacity.as_ref().is_some_and(|m| m.contains_key(name))
            || s.allocatable.as_ref().is_some_and(|m| m.contains_key(name))
    })
}

/// The amount of `name` the Node's capacity holds (`None`: absent or unreadable).
pub fn amount_of(node: &Node, name: &str) -> Option<u64> {
    let q = node.status.as_ref()?.capacity.as_ref()?.get(name)?;
    q.0.parse().ok()
}

/// Writes `millis` for `name` on `node` now (0: removes the key).
pub async fn write(
    client: &Client,
    node: &str,
    name: &str,
    millis: u64,
) -> Result<Node, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    api.patch_status(
        node,
        &PatchParams::default(),
        &Patch::Strategic(amount_patch(name, millis)),
    )
    .await
}

/// Starts the publisher of `name` on `node`; returns the sender of the wanted advert. Nothing
/// is written before `gate` opens (`crate::cluster::start_jitter`); the channel keeps the latest
/// advert meanwhile.
pub fn start(
    client: Client,
    node: String,
    name: String,
    metrics: Arc<Metrics>,
    gate: StartGate,
) -> (watch::Sender<Advert>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = watch::channel(Advert::Nothing);
    let task = tokio::spawn(async move {
        gate.wait().await;
        let api: Api<Node> = Api::all(client.clone());
        let mut logged_failure = false;
        let mut backoff = DefaultBackoff::default();
        loop {
            let want = *rx.borrow_and_update();
            let result = match want {
                Advert::Nothing => Ok(()),
                Advert::Amount(m) => write(&client, &node, &name, m).await.map(|_| ()),
                Advert::WithdrawIfPresent => {
                    match api
                        .patch_status(&node, &PatchParams::default(), &Patch::Strategic(json!({})))
                        .await
                    {
                        Ok(n) if listed(&n, &name) => {
                            write(&client, &node, &name, 0).await.map(|_| ())
                        }
                        Ok(_) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
            };
            match result {
                Ok(()) => {
                    if want != Advert::Nothing {
                        metrics.reclaimed_publish("ok");
                        tracing::debug!(node = %node, resource = %name, advert = ?want, "reclaimed CPU written on the Node");
                    }
                    logged_failure = false;
                    backoff.reset();
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    metrics.reclaimed_publish("error");
                    let delay = backoff.next().unwrap_or(RETRY_MAX);
                    if !logged_failure {
                        tracing::warn!(node = %node, resource = %name, error = %e, retry_in = ?delay, "kubernetes API: writing the reclaimed CPU on the Node failed; retrying with back-off (up to 30 s) with the newest amount (check topolet's RBAC: nodes/status patch)");
                        logged_failure = true;
                    }
                    // The newest amount at the next try. A change does not wake it early: a
                    // fleet's amounts change together (one load, a restart), and an API server
                    // refusing with 429 must not be asked again by every node each second
                    // (hack/fleet.sh at N = 600, docs/src/fleet.md).
                    tokio::time::sleep(delay).await;
                }
            }
        }
    });
    (tx, task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_names_only_the_resource_in_capacity_and_allocatable() {
        assert_eq!(
            amount_patch("topolet.io/reclaimed-cpu", 440),
            json!({"status": {"capacity": {"topolet.io/reclaimed-cpu": "440"},
                              "allocatable": {"topolet.io/reclaimed-cpu": "440"}}})
        );
    }

    #[test]
    fn zero_is_never_written_the_key_is_removed_from_both() {
        assert_eq!(
            amount_patch("topolet.io/reclaimed-cpu", 0),
            json!({"status": {"capacity": {"topolet.io/reclaimed-cpu": null},
                              "allocatable": {"topolet.io/reclaimed-cpu": null}}})
        );
        let node = |status: serde_json::Value| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n"}, "status": status}))
                .expect("node")
        };
        let r = "topolet.io/reclaimed-cpu";
        // A 0 left by an earlier version is listed: it is removed too.
        assert!(listed(&node(json!({"capacity": {r: "0"}})), r));
        assert!(listed(&node(json!({"allocatable": {r: "5"}})), r));
        assert!(!listed(&node(json!({"capacity": {"cpu": "2"}})), r));
        assert!(!listed(&node(json!({})), r));
    }

    #[test]
    fn the_amount_is_read_back_from_capacity() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"capacity": {"topolet.io/reclaimed-cpu": "440", "cpu": "2"}}
        }))
        .unwrap();
        assert_eq!(amount_of(&node, "topolet.io/reclaimed-cpu"), Some(440));
        assert_eq!(amount_of(&node, "example.com/x"), None);
    }
}
