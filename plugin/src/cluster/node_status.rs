//! Publishes topolet's node conditions (and, with `[eviction] pressure_taint`, its pressure
//! taints) on this Node: a task of its own fed by the eviction loop through a `watch` channel
//! (latest report wins), so neither the loop nor an NRI event ever waits for the API server.
//!
//! Conditions (`topolet_core::eviction::node_status`) go to the `nodes/status` subresource as a
//! strategic merge patch: `status.conditions` merges by `type`, so the kubelet's own conditions
//! are left as they are. The first request is an empty patch, which answers with the Node: the
//! conditions topolet wrote before a restart seed the book (their transition times are kept)
//! and the Node's taints are learnt — without a `get` permission. Taints live in `spec` and are
//! a plain list: they are patched on the Node (`nodes patch`) as a merge patch of the whole list
//! with the Node's `resourceVersion`, so a concurrent change answers 409 and is retried from a
//! fresh read. Every failed request is counted and logged (the same target at most once a
//! minute) and retried with back-off (kube-runtime's `DefaultBackoff`: 0.8 s doubling to
//! [`RETRY_MAX`], jittered, reset by a sync that succeeds; a new report also tries). Otherwise
//! the publisher sleeps until the next report (one per eviction interval), which is also when a
//! heartbeat found due is sent: no timer of its own.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use kube::Client;
use serde_json::json;
use tokio::sync::watch;

use crate::cluster::at_start::AtStart;
use crate::cluster::start_jitter::StartGate;
use crate::telemetry::metrics::Metrics;
use topolet_core::eviction::node_status::{
    all_taint_keys, pressure_taints, ConditionBook, ConditionReport, NodeConditionOut, Status,
    TAINT_EFFECT,
};
use topolet_core::eviction::NodeCondition;

/// The longest a failed request waits to be tried again (a new report also tries).
pub const RETRY_MAX: Duration = Duration::from_secs(30);
/// The same failure is logged at most this often.
const LOG_INTERVAL: Duration = Duration::from_secs(60);

/// One interval's view, from the eviction loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    pub conditions: Vec<ConditionReport>,
    pub pressure: BTreeSet<NodeCondition>,
}

/// The loop's end of the channel.
pub type ReportSender = watch::Sender<Option<NodeReport>>;

/// The publisher's settings.
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    pub heartbeat: Duration,
    pub taint: bool,
}

/// Starts the publisher for `node`; returns the sender the eviction loop reports through and the
/// task. The Node its first request answers with goes to `at_start` too (the reclaimed amount
/// a restarted topolet finds there, `crate::cluster::at_start`).
pub fn start(
    client: Client,
    node: String,
    config: PublisherConfig,
    metrics: Arc<Metrics>,
    gate: StartGate,
    at_start: AtStart,
) -> (ReportSender, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(None);
    let p = Publisher {
        gate,
        api: Api::all(client),
        node,
        config,
        metrics,
        book: ConditionBook::new(),
        seeded: false,
        taints: None,
        logged: Default::default(),
        failing: false,
        retry_in: Duration::ZERO,
        backoff: DefaultBackoff::default(),
        at_start,
    };
    (tx, tokio::spawn(p.run(rx)))
}

struct Publisher {
    /// Nothing is sent before it opens (`crate::cluster::start_jitter`); the channel keeps the
    /// latest report meanwhile.
    gate: StartGate,
    api: Api<Node>,
    node: String,
    config: PublisherConfig,
    metrics: Arc<Metrics>,
    book: ConditionBook,
    seeded: bool,
    /// The Node's taints as last read (`None`: to be read).
    taints: Option<(Vec<Taint>, String)>,
    logged: std::collections::HashMap<&'static str, Instant>,
    /// A request of the last sync failed: try again after `retry_in`.
    failing: bool,
    retry_in: Duration,
    backoff: DefaultBackoff,
    at_start: AtStart,
}

fn time(t: SystemTime) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .ok()
        .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
}

/// The strategic merge patch of `conditions` (merged by `type` with the kubelet's).
pub fn conditions_patch(conditions: &[NodeConditionOut]) -> serde_json::Value {
    let list: Vec<serde_json::Value> = conditions
        .iter()
        .map(|c| {
            json!({
                "type": c.type_,
                "status": c.status.as_str(),
                "reason": c.reason,
                "message": c.message,
                "lastHeartbeatTime": time(c.last_heartbeat),
                "lastTransitionTime": time(c.last_transition),
            })
        })
        .collect();
    json!({"status": {"conditions": list}})
}

/// `current` with topolet's pressure taints replaced by `wanted`; `None` when nothing changes.
pub fn taints_update(current: &[Taint], wanted: &BTreeSet<&'static str>) -> Option<Vec<Taint>> {
    let ours = all_taint_keys();
    let have: BTreeSet<&str> = current
        .iter()
        .filter(|t| ours.contains(t.key.as_str()) && t.effect == TAINT_EFFECT)
        .map(|t| t.key.as_str())
        .collect();
    let want: BTreeSet<&str> = wanted.iter().copied().collect();
    if have == want {
        return None;
    }
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|t| !ours.contains(t.key.as_str()))
        .cloned()
        .collect();
    out.extend(want.into_iter().map(|k| Taint {
        key: k.to_string(),
        effect: TAINT_EFFECT.to_string(),
        ..Default::default()
    }));
    Some(out)
}

impl Publisher {
    async fn run(mut self, mut rx: watch::Receiver<Option<NodeReport>>) {
        self.gate.wait().await;
        loop {
            tokio::select! {
                r = rx.changed() => if r.is_err() { return },
                _ = tokio::time::sleep(self.retry_in), if self.failing => {}
            }
            let report = rx.borrow_and_update().clone();
            if let Some(report) = report {
                self.sync(&report).await;
                if !self.failing {
                    self.backoff.reset();
                }
            }
        }
    }

    fn failed(&mut self, target: &'static str, error: &kube::Error) {
        if !self.failing {
            self.failing = true;
            self.retry_in = self.backoff.next().unwrap_or(RETRY_MAX);
        }
        self.metrics.node_status_patch(target, "error");
        let now = Instant::now();
        let due = self
            .logged
            .get(target)
            .is_none_or(|at| now.duration_since(*at) >= LOG_INTERVAL);
        if due {
            self.logged.insert(target, now);
            tracing::warn!(node = %self.node, target, error = %error, "kubernetes API: node patch failed; retrying (check topolet's RBAC: nodes/status patch, nodes patch)");
        }
    }

    async fn patch_status(&self, patch: serde_json::Value) -> Result<Node, kube::Error> {
        self.api
            .patch_status(
                &self.node,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
    }

    fn learn(&mut self, node: &Node) {
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let rv = node.metadata.resource_version.clone().unwrap_or_default();
        self.taints = Some((taints, rv));
    }

    async fn sync(&mut self, report: &NodeReport) {
        self.failing = false;
        if !self.seeded {
            match self.patch_status(json!({})).await {
                Ok(node) => {
                    self.at_start.node_read(&node, SystemTime::now());
                    for c in node
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .into_iter()
                        .flatten()
                    {
                        let ours = report.conditions.iter().any(|r| r.type_ == c.type_);
                        let (Some(status), Some(tr), Some(hb)) = (
                            Status::parse(&c.status),
                            c.last_transition_time.as_ref(),
                            c.last_heartbeat_time.as_ref(),
                        ) else {
                            continue;
                        };
                        if ours {
                            self.book.seed(NodeConditionOut {
                                type_: c.type_.clone(),
                                status,
                                reason: c.reason.clone().unwrap_or_default(),
                                message: c.message.clone().unwrap_or_default(),
                                last_heartbeat: SystemTime::from(hb.0),
                                last_transition: SystemTime::from(tr.0),
                            });
                        }
                    }
                    self.learn(&node);
                    self.seeded = true;
                }
                Err(e) => return self.failed("conditions", &e),
            }
        }
        let now = SystemTime::now();
        if let Some(plan) = self
            .book
            .plan(&report.conditions, now, self.config.heartbeat)
        {
            match self.patch_status(conditions_patch(&plan)).await {
                Ok(node) => {
                    self.metrics.node_status_patch("conditions", "ok");
                    let transition = plan.iter().any(|c| c.last_transition == now);
                    self.book.commit(&plan);
                    self.learn(&node);
                    let conditions: Vec<String> = plan
                        .iter()
                        .map(|c| format!("{}={}", c.type_, c.status.as_str()))
                        .collect();
                    if transition {
                        tracing::info!(node = %self.node, conditions = ?conditions, "node conditions published");
                    } else {
                        tracing::debug!(node = %self.node, conditions = ?conditions, "node conditions heartbeat");
                    }
                }
                Err(e) => return self.failed("conditions", &e),
            }
        }
        self.sync_taints(report).await;
    }

    async fn sync_taints(&mut self, report: &NodeReport) {
        let wanted = if self.config.taint {
            pressure_taints(&report.pressure)
        } else {
            BTreeSet::new()
        };
        if self.taints.is_none() {
            match self.patch_status(json!({})).await {
                Ok(node) => self.learn(&node),
                Err(e) => return self.failed("taints", &e),
            }
        }
        let Some((current, rv)) = &self.taints else {
            return;
        };
        let Some(new) = taints_update(current, &wanted) else {
            return;
        };
        let patch = json!({"metadata": {"resourceVersion": rv}, "spec": {"taints": new}});
        match self
            .api
            .patch(&self.node, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(node) => {
                self.metrics.node_status_patch("taints", "ok");
                tracing::info!(node = %self.node, taints = ?wanted, "pressure taints updated");
                self.learn(&node);
            }
            Err(e) => {
                // 409: the Node changed meanwhile; read it again next time.
                self.taints = None;
                self.failed("taints", &e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Default::default()
        }
    }

    #[test]
    fn taints_are_added_and_removed_leaving_others() {
        let other = taint("dedicated", "NoSchedule");
        let mem = BTreeSet::from(["topolet.io/memory-pressure"]);
        let added = taints_update(std::slice::from_ref(&other), &mem).unwrap();
        assert_eq!(
            added,
            vec![
                other.clone(),
                taint("topolet.io/memory-pressure", "NoSchedule")
            ]
        );
        assert_eq!(taints_update(&added, &mem), None);
        assert_eq!(
            taints_update(&added, &BTreeSet::new()).unwrap(),
            vec![other]
        );
        assert_eq!(taints_update(&[], &BTreeSet::new()), None);
    }

    #[test]
    fn the_conditions_patch_merges_by_type() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let p = conditions_patch(&[NodeConditionOut {
            type_: "TopoletPIDPressure".into(),
            status: Status::True,
            reason: "TopoletHasInsufficientPID".into(),
            message: "m".into(),
            last_heartbeat: t,
            last_transition: t,
        }]);
        assert_eq!(
            p,
            json!({"status": {"conditions": [{
                "type": "TopoletPIDPressure", "status": "True",
                "reason": "TopoletHasInsufficientPID", "message": "m",
                "lastHeartbeatTime": "2027-01-15T08:00:00Z",
                "lastTransitionTime": "2027-01-15T08:00:00Z"
            }]}})
        );
    }
}
