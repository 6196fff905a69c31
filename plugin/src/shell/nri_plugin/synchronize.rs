//! Synchronize: the runtime's view taken as the truth, at every connection (restart, reconnect).
//! Every container it reports is reconciled with the placement (`core::reconcile`), recorded in
//! the cache afresh, and sent its target in the reply when it differs; the running ones are
//! checked later for a task started from an older spec (`drift`).

use std::collections::{BTreeSet, HashMap};

use topolet_nri::api;
use topolet_nri::plugin::PluginResult;

use super::updates::widened;
use super::TopoletPlugin;
use crate::core::container_key::ContainerKey;
use crate::core::cpuset::CpuSet;
use crate::core::hints::NumaMask;
use crate::core::reconcile::RunningContainer;
use crate::shell::container_cache::{Decided, Lifecycle, Record};
use crate::shell::nri_adjust;
use crate::shell::nri_view::{self, ContainerView, NoView};

impl TopoletPlugin {
    /// Synchronize: reconciles the placement with every container the runtime reports and
    /// replies with the updates of those off their targets.
    pub(super) fn on_synchronize(
        &self,
        pods: Vec<api::PodSandbox>,
        containers: Vec<api::Container>,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        let capacity = self.memory_capacity();
        let mut views = sync_views(&pods, &containers, capacity);
        let mut node = self.event_lock();
        // Containers someone else placed at creation stay theirs; forget those that are gone.
        let running: BTreeSet<ContainerKey> = views.iter().map(|v| v.key.clone()).collect();
        node.cache.left_alone_mut().retain(|k| running.contains(k));
        views.retain(|v| !node.cache.left_alone().contains(&v.key));
        let (n_pods, n_containers) = (pods.len(), containers.len());
        // The runtime's pods move into the book (no copy of their labels and annotations).
        let sandboxes = pods
            .into_iter()
            .filter(|p| nri_view::pod_qos(p).is_ok())
            .map(|p| (p.id.clone(), p))
            .collect();
        let old_sandboxes = std::mem::replace(&mut node.sandboxes, sandboxes);
        let floor = node.oom_floor.unwrap_or(0);
        let running: Vec<RunningContainer> = views
            .iter()
            .map(|v| RunningContainer {
                id: v.id.clone(),
                container: v.estimate.clone(),
                cpuset: v.current.cpuset_cpus.clone(),
            })
            .collect();
        let outcome = node.placement.reconcile(&running, floor);
        for note in &outcome.notes {
            tracing::warn!(note = %note, "synchronize: reconciled");
        }
        let mut by_id: HashMap<String, ContainerView> =
            views.into_iter().map(|v| (v.id.clone(), v)).collect();
        let states: HashMap<&str, (Lifecycle, u32)> = containers
            .iter()
            .map(|c| (c.id.as_str(), (sync_lifecycle(c), c.pid)))
            .collect();
        let all_mems = node.placement.all_mems();
        let mut records: Vec<(String, Record)> = outcome
            .containers
            .into_iter()
            .filter_map(|(id, mut target)| {
                let view = by_id.remove(&id)?;
                // Mems someone narrowed (an earlier topolet with shared_pool_mems_follow_cpus, or
                // a container that held exclusive cpus) go back to every node.
                let reported = match view.current.cpuset_mems.as_ref().map(nri_view::mems_mask) {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        tracing::error!(pod = %view.pod_ref, container = %view.key.container, error = %e, "synchronize: cpuset.mems reported by the runtime cannot be used; treated as every node");
                        all_mems
                    }
                    None => NumaMask::default(),
                };
                target.mems = widened(reported, target.mems, all_mems);
                let (lifecycle, pid) = states
                    .get(id.as_str())
                    .copied()
                    .unwrap_or((Lifecycle::Running, 0));
                let mut record = Record::new(view, Decided::synchronize(), target, lifecycle);
                record.set_pid(pid);
                Some((id, record))
            })
            .collect();
        records.sort_by(|a, b| a.0.cmp(&b.0));
        let updates = sync_updates(&records);
        let created: Vec<String> = records
            .iter()
            .filter(|(_, m)| m.lifecycle() == Lifecycle::Created)
            .map(|(id, _)| id.clone())
            .collect();
        // This reply carries every container's update: nothing queued before still applies.
        let old_containers = node.cache.synchronized(records);
        // A container still being created may be starting its task right now, from a spec
        // older than the one reported (an update that reached only the stored spec before a
        // restart): it gets its cpuset again once it runs, whether or not it needs one now.
        for id in &created {
            node.cache.resend_on_start(id);
        }
        let updated: Vec<String> = updates.iter().map(|u| u.container_id.clone()).collect();
        node.cache.sent_in_sync(&updated);
        let updated: BTreeSet<&str> = updated.iter().map(String::as_str).collect();
        let mut verify: Vec<(String, u32)> = containers
            .iter()
            .filter(|c| c.state.enum_value() == Ok(api::ContainerState::CONTAINER_RUNNING))
            .filter(|c| c.pid > 0)
            .filter(|c| !updated.contains(c.id.as_str()) && node.cache.get(&c.id).is_some())
            .map(|c| (c.id.clone(), c.pid))
            .collect();
        verify.sort();
        node.cache.set_verify(verify);
        // Pods holding exclusive CPUs: their cgroup's quota too (as at creation).
        let exclusive_pods: BTreeSet<String> = node
            .cache
            .iter()
            .filter(|(_, m)| m.target().exclusive)
            .map(|(_, m)| m.view().key.pod_uid.clone())
            .collect();
        for uid in &exclusive_pods {
            self.unlimit_pod(&node, uid);
        }
        self.persist(&node);
        tracing::info!(
            pods = n_pods,
            containers = n_containers,
            managed = node.cache.len(),
            updates = updates.len(),
            shared = %node.placement.shared_pool(),
            "synchronized"
        );
        drop(node);
        // Freeing the runtime's request and the previous books (tens of MB on a 10,000-container
        // node) is left to a blocking-pool thread, so the reply does not wait for it.
        drop((by_id, states));
        let garbage = (containers, old_sandboxes, old_containers);
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::spawn_blocking(move || drop(garbage));
        }
        Ok(updates)
    }
}

/// The managed containers among `containers` (of the Kubernetes `pods`), as NRI views; the
/// others are logged and left out.
pub(super) fn sync_views(
    pods: &[api::PodSandbox],
    containers: &[api::Container],
    capacity: u64,
) -> Vec<ContainerView> {
    let by_id: HashMap<&str, &api::PodSandbox> = pods.iter().map(|p| (p.id.as_str(), p)).collect();
    for p in pods {
        tracing::info!(pod = %format!("{}/{}", p.namespace, p.name), uid = %p.uid, id = %p.id, "synchronize: pod");
    }
    let mut views = Vec::new();
    for c in containers {
        let Some(pod) = by_id.get(c.pod_sandbox_id.as_str()) else {
            tracing::warn!(container = %c.id, pod = %c.pod_sandbox_id, "synchronize: container of an unknown pod; ignored");
            continue;
        };
        match nri_view::view(pod, c, capacity) {
            Ok(v) => {
                tracing::debug!(pod = %v.pod_ref, container = %c.name, qos = %v.qos, cpus = ?v.current.cpuset_cpus.as_ref().map(ToString::to_string), "synchronize: container");
                views.push(v);
            }
            Err(NoView::Ignored(why)) => {
                tracing::debug!(container = %c.name, reason = %why, "synchronize: not managed")
            }
            Err(NoView::Bad(e)) => {
                tracing::error!(pod = %format!("{}/{}", pod.namespace, pod.name), id = %c.id, error = %e, "synchronize: container not managed")
            }
        }
    }
    views
}

/// The Synchronize reply: an update for every live container of `records` whose cpuset or
/// mems differ from its target (stopped containers are sent nothing).
pub(super) fn sync_updates(records: &[(String, Record)]) -> Vec<api::ContainerUpdate> {
    let mut updates: Vec<api::ContainerUpdate> = Vec::new();
    for (_, m) in records {
        // Stopped containers are sent nothing.
        if !m.lifecycle().is_live() {
            continue;
        }
        let mems_ok = mems_match(m.view().current.cpuset_mems.as_ref(), &m.target().mems);
        if let Some(update) = nri_adjust::sync_update(m.view(), m.target(), mems_ok) {
            updates.push(update);
        }
    }
    updates
}

/// True when the runtime's `cpuset.mems` is `want` (as sets: `0-1` is `0,1`); an empty `want`
/// (no NUMA information) matches anything.
pub(super) fn mems_match(actual: Option<&CpuSet>, want: &NumaMask) -> bool {
    let want: CpuSet = want.ids().collect();
    want.is_empty() || actual == Some(&want)
}

/// A container's lifecycle from its state in Synchronize.
fn sync_lifecycle(c: &api::Container) -> Lifecycle {
    match c.state.enum_value() {
        Ok(api::ContainerState::CONTAINER_CREATED) => Lifecycle::Created,
        Ok(api::ContainerState::CONTAINER_STOPPED) => Lifecycle::Stopped,
        _ => Lifecycle::Running,
    }
}
