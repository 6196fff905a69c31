//! What this Node and its NodeResourceTopology held of the reclaimed-CPU amounts when this
//! topolet first read them, for the suppress loop's damping (`crate::reclaimed`): a restarted
//! topolet decides its first amounts against what its predecessor wrote, so it writes only a
//! change the damping would have written anyway (`topolet_core::reclaimed::Advertiser::seed`)
//! or an amount due by `max_age` — not one write per node and object the moment its usage
//! window has filled (hack/fleet.sh, docs/src/fleet.md: the minute after a fleet restart).
//!
//! No request of its own: the Node is the answer to the conditions publisher's first (empty)
//! patch (`crate::cluster::node_status`), the NodeResourceTopology the publisher's first `get`
//! (`crate::cluster::nrt`). Without node conditions (`[eviction] node_conditions = false`) the
//! Node is not read and the first amount is written as before.
//!
//! **When an amount was written** (the `max_age` clock): the objects keep no time per key; the
//! time is that of the `managedFields` entry that owns the key (the Node: the entry owning
//! `status.capacity.<resource>`; the NodeResourceTopology, written by topolet alone: its latest
//! entry), which the API server moves whenever that manager changes any field it owns. It is
//! the latest time the amount can have been written, never earlier: a restart may delay an
//! amount's `max_age` rewrite (a rise within `min_change_percent`, the safe side: a fall is
//! written at once) by at most the time between that write and the owner's last change, never
//! bring it forward. An object without such an entry counts as written when it was read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

use crate::cluster::extended_resource::amount_of;
use topolet_core::report::nrt::{zone_name, NrtContent};

/// An amount found on an object and the time it counts as written.
pub type Found = (u64, SystemTime);

/// Shared by the publishers that read the objects and the suppress loop that seeds from them.
#[derive(Clone, Default)]
pub struct AtStart(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    /// The Node as first read, and when.
    node: Option<(Node, SystemTime)>,
    /// The NodeResourceTopology's content as first read (`None` inside: there was none), and
    /// its latest `managedFields` time (or the read's).
    nrt: Option<(Option<NrtContent>, SystemTime)>,
}

impl AtStart {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The Node as the first request answered it (kept: later reads are this topolet's own
    /// writes).
    pub fn node_read(&self, node: &Node, now: SystemTime) {
        self.inner().node.get_or_insert_with(|| (node.clone(), now));
    }

    /// The NodeResourceTopology as first read (`None`: there was none).
    pub fn nrt_read(
        &self,
        content: Option<&NrtContent>,
        meta: Option<&ObjectMeta>,
        now: SystemTime,
    ) {
        let written = meta.and_then(latest_write).unwrap_or(now);
        self.inner()
            .nrt
            .get_or_insert_with(|| (content.cloned(), written));
    }

    /// `None`: the Node was not read; `Some(None)`: it holds no `resource`; else the amount and
    /// when it counts as written.
    pub fn node_amount(&self, resource: &str) -> Option<Option<Found>> {
        let inner = self.inner();
        let (node, read) = inner.node.as_ref()?;
        Some(amount_of(node, resource).map(|millis| {
            let written = node
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .filter(|e| owns_capacity_key(e, resource))
                .filter_map(entry_time)
                .max()
                .unwrap_or(*read);
            (millis, written)
        }))
    }

    /// Each NUMA zone's `resource` allocatable as the NodeResourceTopology held it (`None`: not
    /// read yet).
    pub fn zone_amounts(
        &self,
        resource: &str,
        numa_nodes: &[usize],
    ) -> Option<BTreeMap<usize, Found>> {
        let inner = self.inner();
        let (content, written) = inner.nrt.as_ref()?;
        let Some(content) = content else {
            return Some(BTreeMap::new());
        };
        Some(
            numa_nodes
                .iter()
                .filter_map(|&n| {
                    let name = zone_name(n);
                    content
                        .zones
                        .iter()
                        .filter(|z| z.name == name)
                        .flat_map(|z| z.resources.iter())
                        .find(|r| r.name == resource)
                        .and_then(|r| r.allocatable.parse().ok())
                        .map(|millis| (n, (millis, *written)))
                })
                .collect(),
        )
    }
}

fn entry_time(e: &ManagedFieldsEntry) -> Option<SystemTime> {
    e.time.as_ref().map(|t| SystemTime::from(t.0))
}

/// The latest write any manager made to the object (`managedFields`), else its creation.
fn latest_write(meta: &ObjectMeta) -> Option<SystemTime> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter_map(entry_time)
        .max()
        .or_else(|| {
            meta.creation_timestamp
                .as_ref()
                .map(|t| SystemTime::from(t.0))
        })
}

/// The entry owns `status.capacity.<resource>` (the reclaimed amount's writer).
fn owns_capacity_key(e: &ManagedFieldsEntry, resource: &str) -> bool {
    e.fields_v1.as_ref().is_some_and(|f| {
        f.0.get("f:status")
            .and_then(|s| s.get("f:capacity"))
            .and_then(|c| c.get(format!("f:{resource}")))
            .is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    const R: &str = "topolet.io/reclaimed-cpu";

    fn at(s: &str) -> SystemTime {
        let t: k8s_openapi::jiff::Timestamp = s.parse().expect("time");
        SystemTime::from(t)
    }

    #[test]
    fn the_nodes_amount_counts_as_written_when_its_owner_last_wrote() {
        let read = at("2026-12-07T05:00:00Z");
        let a = AtStart::default();
        assert_eq!(a.node_amount(R), None);
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "managedFields": [
                {"manager": "kubelet", "operation": "Update", "subresource": "status",
                 "time": "2026-12-07T04:59:50Z",
                 "fieldsV1": {"f:status": {"f:capacity": {"f:cpu": {}}}}},
                {"manager": "topolet", "operation": "Update", "subresource": "status",
                 "time": "2026-12-07T04:58:00Z",
                 "fieldsV1": {"f:status": {"f:capacity": {"f:topolet.io/reclaimed-cpu": {}}}}}
            ]},
            "status": {"capacity": {R: "440", "cpu": "2"}}
        }))
        .expect("node");
        a.node_read(&node, read);
        assert_eq!(
            a.node_amount(R),
            Some(Some((440, at("2026-12-07T04:58:00Z"))))
        );
        // Only the first read counts.
        a.node_read(&Node::default(), read + Duration::from_secs(5));
        assert_eq!(a.node_amount(R).map(|f| f.map(|f| f.0)), Some(Some(440)));
        // Another resource: not held.
        assert_eq!(a.node_amount("example.com/x"), Some(None));
    }

    #[test]
    fn a_node_amount_without_its_owners_entry_counts_as_written_when_read() {
        let read = at("2026-12-07T05:00:00Z");
        let a = AtStart::default();
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"}, "status": {"capacity": {R: "300"}}
        }))
        .expect("node");
        a.node_read(&node, read);
        assert_eq!(a.node_amount(R), Some(Some((300, read))));
    }

    #[test]
    fn the_zones_amounts_are_their_allocatable_at_the_objects_last_write() {
        let read = at("2026-12-07T05:00:00Z");
        let content: NrtContent = serde_json::from_value(json!({
            "topologyPolicies": ["None"], "attributes": [],
            "zones": [
                {"name": "node-0", "type": "Node", "costs": [], "attributes": [], "resources": [
                    {"name": "cpu", "capacity": "2", "allocatable": "2", "available": "1"},
                    {"name": R, "capacity": "2000", "allocatable": "700", "available": "700"}]},
                {"name": "node-1", "type": "Node", "costs": [], "attributes": [], "resources": [
                    {"name": "cpu", "capacity": "2", "allocatable": "2", "available": "2"}]}
            ]
        }))
        .expect("content");
        let meta: ObjectMeta = serde_json::from_value(json!({
            "name": "n", "creationTimestamp": "2026-12-07T04:00:00Z",
            "managedFields": [{"manager": "topolet", "operation": "Update",
                               "time": "2026-12-07T04:59:00Z", "fieldsV1": {}}]
        }))
        .expect("meta");
        let a = AtStart::default();
        assert_eq!(a.zone_amounts(R, &[0, 1]), None);
        a.nrt_read(Some(&content), Some(&meta), read);
        assert_eq!(
            a.zone_amounts(R, &[0, 1]),
            Some(BTreeMap::from([(0, (700, at("2026-12-07T04:59:00Z")))]))
        );
        // No object: nothing held.
        let none = AtStart::default();
        none.nrt_read(None, None, read);
        assert_eq!(none.zone_amounts(R, &[0]), Some(BTreeMap::new()));
    }
}
