//! The Kubernetes Events the handlers raise (a grant, a refusal, on the Node), handed to the
//! recorder's queue and never awaited, and the refusal log that keeps the kubelet's retries of
//! one refusal from all being logged.

use std::time::Instant;

use super::{PluginState, TopoletPlugin};
use crate::nri::view::ContainerView;
use crate::telemetry::refusal_log::Verdict;
use topolet_core::kube::events::{EventType, ObjectRef, Occurrence};
use topolet_core::placement::admission_input::Source;
use topolet_core::placement::{ContainerResources, Refusal};
use topolet_nri::plugin::PluginError;

/// The reason of the Normal Event of an exclusive CPU grant.
pub const GRANT_REASON: &str = "ExclusiveCPUsAssigned";
/// The reason of the Normal Event on a pod whose container topolet leaves to another cpuset
/// owner (its cpuset was set before topolet saw it).
pub const LEFT_ALONE_REASON: &str = "CPUSetOwnedElsewhere";

impl TopoletPlugin {
    /// Hands an Event on this node's Node object to the API client, if it is on (never waits).
    pub fn node_event(&self, type_: EventType, reason: &str, message: &str) {
        if let Some(sink) = self.events.get() {
            sink.node_event(type_, reason, message);
        }
    }

    /// Hands an Event on `view`'s pod to the API client, if it is on (never waits).
    pub(super) fn pod_event(
        &self,
        view: &ContainerView,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let Some(sink) = self.events.get() else {
            return;
        };
        let object = ObjectRef {
            namespace: view.estimate.namespace.clone(),
            name: view.estimate.name.clone(),
            uid: view.key.pod_uid.clone(),
        };
        sink.record(Occurrence::new(object, type_, reason, message));
    }

    /// Everything a refusal does besides changing nothing: it is counted
    /// (`topolet_refusals_total` by the refusal's metric label), logged once per repeat, raised
    /// as a Warning Event on the pod (the Event's source says topolet), and returned as the
    /// runtime's error, prefixed `topolet: ` (the kubelet shows it in the pod's status without
    /// saying who refused).
    pub(super) fn refused(
        &self,
        node: &mut PluginState,
        op: &'static str,
        source: Source,
        view: &ContainerView,
        refusal: &Refusal,
    ) -> PluginError {
        self.metrics.refused(op, refusal.metric_label());
        self.log_refusal(node, op, source, view, &refusal.message);
        self.pod_event(
            view,
            EventType::Warning,
            refusal.event_reason(),
            &refusal.message,
        );
        PluginError::Failed(format!("topolet: {refusal}"))
    }

    /// The Normal Event of an exclusive grant.
    pub(super) fn grant_event(
        &self,
        view: &ContainerView,
        decision: &ContainerResources,
        resize: bool,
    ) {
        if self.events.get().is_none() {
            return;
        }
        let n = decision.cpuset.len();
        let message = format!(
            "container {} got {n} exclusive CPU{} {}, memory nodes {}{}",
            view.key.container,
            if n == 1 { "" } else { "s" },
            decision.cpuset,
            if decision.mems.is_empty() {
                "all".to_string()
            } else {
                decision.mems.to_string()
            },
            if resize { " (in-place resize)" } else { "" },
        );
        self.pod_event(view, EventType::Normal, GRANT_REASON, &message);
    }

    /// Logs a refusal decided from `source` unless it repeats `key`'s last logged one (then
    /// counts it).
    fn log_refusal(
        &self,
        node: &mut PluginState,
        op: &'static str,
        source: Source,
        view: &ContainerView,
        msg: &str,
    ) {
        match node.refusals.note(op, &view.key, msg, Instant::now()) {
            Verdict::Log { repeats } => tracing::warn!(
                pod = %view.pod_ref,
                container = %view.key.container,
                operation = op,
                source = source.as_str(),
                repeats_not_logged = repeats,
                error = %msg,
                "refused; nothing changed"
            ),
            Verdict::Suppress => self.metrics.refusal_log_suppressed(op),
        }
    }
}
