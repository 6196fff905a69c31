//! Synchronize: the runtime's view taken as the truth, at every connection (restart, reconnect).
//! Every container it reports is reconciled with the placement (`topolet_core::placement::reconcile`), recorded in
//! the cache afresh, and sent its target in the reply when it differs; the running ones are
//! checked later for a task started from an older spec (`drift`).

use std::collections::{BTreeSet, HashMap, HashSet};

use topolet_nri::api;
use topolet_nri::plugin::PluginResult;

use super::reclaimed::{self, keep_batch_values};
use super::TopoletPlugin;
use crate::nri::adjust;
use crate::nri::handlers::updates::widened;
use crate::nri::records::{Decided, Lifecycle, Record};
use crate::nri::view::{self, ContainerView, NoView};
use topolet_core::kube::container_key::ContainerKey;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::managers::topology::hints::NumaMask;
use topolet_core::placement::reconcile::RunningContainer;

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
        {
            let running: HashSet<&ContainerKey> = views.iter().map(|v| &v.view.key).collect();
            node.records
                .left_alone_mut()
                .retain(|k| running.contains(k));
        }
        views.retain(|v| !node.records.left_alone().contains(&v.view.key));
        // In id order: the cache's records and the reply's updates are built in it.
        views.sort_unstable_by(|a, b| a.view.id.cmp(&b.view.id));
        let (n_pods, n_containers) = (pods.len(), containers.len());
        // The runtime's pods move into the book (no copy of their labels and annotations).
        let mut sandboxes = HashMap::with_capacity(pods.len());
        sandboxes.extend(
            pods.into_iter()
                .filter(|p| view::pod_qos(p).is_ok())
                .map(|p| (p.id.clone(), p)),
        );
        let old_sandboxes = std::mem::replace(&mut node.sandboxes, sandboxes);
        let floor = node.oom_floor.unwrap_or(0);
        // Borrowed from the views: reconciling 10,000 containers copies none of them.
        let running: Vec<RunningContainer<'_>> = views
            .iter()
            .map(|v| RunningContainer {
                id: &v.view.id,
                container: &v.view.estimate,
                cpuset: v.view.current.cpuset_cpus.as_ref(),
            })
            .collect();
        let outcome = node.placement.reconcile(&running, floor);
        drop(running);
        for note in &outcome.notes {
            tracing::warn!(note = %note, "synchronize: reconciled");
        }
        let all_mems = node.placement.all_mems();
        let reclaimed = self.config.get().reclaimed.enabled;
        let batch_pool = node.placement.batch_pool();
        let ids: Vec<String> = views.iter().map(|v| v.view.id.clone()).collect();
        let created: Vec<String> = views
            .iter()
            .filter(|v| v.lifecycle == Lifecycle::Created)
            .map(|v| v.view.id.clone())
            .collect();
        // One target per view, in the views' order; the records go straight into the cache.
        let records = views
            .into_iter()
            .zip(outcome.targets)
            .map(|(SyncView { view, lifecycle, pid }, mut target)| {
                // Mems someone narrowed (an earlier topolet with shared_pool_mems_follow_cpus, or
                // a container that held exclusive cpus) go back to every node.
                let reported = match view.current.cpuset_mems.as_ref().map(view::mems_mask) {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        tracing::error!(pod = %view.pod_ref, container = %view.key.container, error = %e, "synchronize: cpuset.mems reported by the runtime cannot be used; treated as every node");
                        all_mems
                    }
                    None => NumaMask::default(),
                };
                target.mems = widened(reported, target.mems, all_mems);
                if reclaimed && reclaimed::looks_batch(&view, &target, &batch_pool) {
                    // Until the pod watch says whether it is batch, it stays where it runs.
                    keep_batch_values(&view, &mut target);
                }
                let id = view.id.clone();
                let mut record = Record::new(view, Decided::synchronize(), target, lifecycle);
                record.set_pid(pid);
                (id, record)
            });
        // This reply carries every container's update: nothing queued before still applies.
        let old_containers = node.records.synchronized(records);
        let updates = sync_updates(ids.iter().filter_map(|id| node.records.get(id)));
        // A container still being created may be starting its task right now, from a spec
        // older than the one reported (an update that reached only the stored spec before a
        // restart): it gets its cpuset again once it runs, whether or not it needs one now.
        for id in &created {
            node.records.resend_on_start(id);
        }
        node.records
            .sent_in_sync(updates.iter().map(|u| u.container_id.as_str()));
        let updated: HashSet<&str> = updates.iter().map(|u| u.container_id.as_str()).collect();
        let mut verify: Vec<(String, u32)> = containers
            .iter()
            .filter(|c| c.state.enum_value() == Ok(api::ContainerState::CONTAINER_RUNNING))
            .filter(|c| c.pid > 0)
            .filter(|c| !updated.contains(c.id.as_str()) && node.records.get(&c.id).is_some())
            .map(|c| (c.id.clone(), c.pid))
            .collect();
        verify.sort();
        node.records.set_verify(verify);
        // Pods holding exclusive CPUs: their cgroup's quota too (as at creation).
        let exclusive_pods: BTreeSet<String> = node
            .records
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
            managed = node.records.len(),
            updates = updates.len(),
            shared = %node.placement.shared_pool(),
            "synchronized"
        );
        drop(node);
        // Freeing the runtime's request and the previous books (tens of MB on a 10,000-container
        // node), and giving the pages back to the kernel, is left to a blocking-pool thread, so
        // the reply does not wait for it.
        let garbage = (containers, old_sandboxes, old_containers);
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::spawn_blocking(move || {
                drop(garbage);
                crate::host::heap::release_freed();
            });
        }
        Ok(updates)
    }
}

/// A managed container as Synchronize reports it.
pub(super) struct SyncView {
    pub view: ContainerView,
    pub lifecycle: Lifecycle,
    /// Its init process (0: none reported).
    pub pid: u32,
}

/// The managed containers among `containers` (of the Kubernetes `pods`), as NRI views; the
/// others are logged and left out.
pub(super) fn sync_views(
    pods: &[api::PodSandbox],
    containers: &[api::Container],
    capacity: u64,
) -> Vec<SyncView> {
    let by_id: HashMap<&str, view::PodContext<'_>> = pods
        .iter()
        .map(|p| (p.id.as_str(), view::PodContext::of(p)))
        .collect();
    // One line per pod at debug: on a 10,000-container node, thousands of info lines at every
    // connection would be most of Synchronize's time; the summary line says how many.
    for p in pods {
        tracing::debug!(pod = %format!("{}/{}", p.namespace, p.name), uid = %p.uid, id = %p.id, "synchronize: pod");
    }
    let mut views = Vec::with_capacity(containers.len());
    for c in containers {
        let Some(pod) = by_id.get(c.pod_sandbox_id.as_str()) else {
            tracing::warn!(container = %c.id, pod = %c.pod_sandbox_id, "synchronize: container of an unknown pod; ignored");
            continue;
        };
        match pod.view(c, capacity) {
            Ok(v) => {
                tracing::debug!(pod = %v.pod_ref, container = %c.name, qos = %v.qos, cpus = ?v.current.cpuset_cpus.as_ref().map(ToString::to_string), "synchronize: container");
                views.push(SyncView {
                    view: v,
                    lifecycle: sync_lifecycle(c),
                    pid: c.pid,
                });
            }
            Err(NoView::Ignored(why)) => {
                tracing::debug!(container = %c.name, reason = %why, "synchronize: not managed")
            }
            Err(NoView::Bad(e)) => {
                tracing::error!(pod = %pod.pod_ref(), id = %c.id, error = %e, "synchronize: container not managed")
            }
        }
    }
    views
}

/// The Synchronize reply: an update for every live container of `records` whose cpuset or
/// mems differ from its target (stopped containers are sent nothing), in the records' order.
pub(super) fn sync_updates<'a>(
    records: impl Iterator<Item = &'a Record>,
) -> Vec<api::ContainerUpdate> {
    let mut updates: Vec<api::ContainerUpdate> = Vec::new();
    for m in records {
        // Stopped containers are sent nothing.
        if !m.lifecycle().is_live() {
            continue;
        }
        let mems_ok = mems_match(m.view().current.cpuset_mems.as_ref(), &m.target().mems);
        if let Some(update) = adjust::sync_update(m.view(), m.target(), mems_ok) {
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
