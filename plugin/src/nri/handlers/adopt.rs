//! Adopting a container first seen after Synchronize. containerd blocks plugin synchronization
//! while it creates a container (containerd/containerd internal/cri/server/container_create.go
//! takes the NRI adaptation's BlockPluginSync), so every container reaches a new connection
//! either in Synchronize or at CreateContainer. CRI-O does not: cri-o/cri-o
//! server/container_create.go runs the NRI CreateContainer (createSandboxContainer) before it
//! adds the container to its store (addContainer), which is what Synchronize lists. A container
//! whose creation spans a restart of topolet then reaches it first at PostStartContainer or
//! UpdateContainer. It is adopted there, as Synchronize's reconcile takes a container created
//! while topolet was away ([`topolet_core::placement::Placement::adopt`]: its own exclusive
//! cpuset when valid and free, else a fresh admission, else the shared pool), recorded, and sent
//! its target when it runs off it.
//!
//! A container first seen at StopContainer is not adopted: it holds nothing topolet granted,
//! and a stopped container is sent nothing.

use topolet_nri::api;

use super::reclaimed::{self, keep_batch_values};
use super::synchronize::mems_match;
use super::{PluginState, TopoletPlugin};
use crate::nri::adjust;
use crate::nri::handlers::updates::widened;
use crate::nri::records::{Decided, Lifecycle, Record};
use crate::nri::view::{self, NoView};
use topolet_core::placement::reconcile::RunningContainer;

/// What [`TopoletPlugin::adopt`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Adoption {
    /// Known already (a record), left alone, not a managed container, or before this
    /// connection's Synchronize (which lists it): nothing done.
    NotNeeded,
    /// Recorded now; its target matches what it runs with.
    Recorded,
    /// Recorded now, and queued to be sent its target.
    Queued,
}

impl TopoletPlugin {
    /// Adopts `ctr` of `pod` if no record, Synchronize or CreateContainer, has it yet (see the
    /// module docs). `lifecycle`: what the event says of it.
    pub(super) fn adopt(
        &self,
        node: &mut PluginState,
        pod: &api::PodSandbox,
        ctr: &api::Container,
        lifecycle: Lifecycle,
    ) -> Adoption {
        if !node.records.is_synced() || node.records.get(&ctr.id).is_some() {
            return Adoption::NotNeeded;
        }
        if view::pod_qos(pod).is_err() {
            return Adoption::NotNeeded;
        }
        let view = match view::view(pod, ctr, self.memory_capacity()) {
            Ok(v) => v,
            Err(NoView::Ignored(why)) => {
                tracing::debug!(container = %ctr.name, reason = %why, "adopt: not managed");
                return Adoption::NotNeeded;
            }
            Err(NoView::Bad(e)) => {
                tracing::error!(pod = %format!("{}/{}", pod.namespace, pod.name), id = %ctr.id, error = %e, "adopt: container not managed");
                return Adoption::NotNeeded;
            }
        };
        if node.records.left_alone().contains(&view.key) {
            return Adoption::NotNeeded;
        }
        // The pod may be unknown too (its RunPodSandbox went to the old connection).
        node.sandboxes
            .entry(pod.id.clone())
            .or_insert_with(|| pod.clone());
        let floor = node.oom_floor.unwrap_or(0);
        let adopted = node.placement.adopt(
            &RunningContainer {
                id: &view.id,
                container: &view.estimate,
                cpuset: view.current.cpuset_cpus.as_ref(),
            },
            floor,
        );
        let mut target = adopted.target;
        let all_mems = node.placement.all_mems();
        let reported = match view.current.cpuset_mems.as_ref().map(view::mems_mask) {
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                tracing::error!(pod = %view.pod_ref, container = %ctr.name, error = %e, "adopt: cpuset.mems reported by the runtime cannot be used; treated as every node");
                all_mems
            }
            None => Default::default(),
        };
        target.mems = widened(reported, target.mems, all_mems);
        if self.config.get().reclaimed.enabled
            && reclaimed::looks_batch(&view, &target, &node.placement.batch_pool())
        {
            // Until the pod watch says whether it is batch, it stays where it runs.
            keep_batch_values(&view, &mut target);
        }
        let mems_ok = mems_match(view.current.cpuset_mems.as_ref(), &target.mems);
        let off_target = adjust::sync_update(&view, &target, mems_ok).is_some();
        let exclusive = target.exclusive;
        let uid = view.key.pod_uid.clone();
        tracing::info!(pod = %view.pod_ref, container = %ctr.name, id = %ctr.id, cpus = %target.cpuset, exclusive, note = adopted.note.as_deref().unwrap_or(""), "adopted a container first seen after Synchronize");
        let mut record = Record::new(view, Decided::synchronize(), target, lifecycle);
        record.set_pid(ctr.pid);
        node.records.insert(&ctr.id, record);
        if exclusive {
            // Its pod's quota, as at creation; and the others leave its CPUs.
            self.unlimit_pod(node, &uid);
            self.push_shared_pool(node, Some(&ctr.id));
        }
        self.persist(node);
        if off_target {
            node.records.queue(&ctr.id);
            Adoption::Queued
        } else {
            Adoption::Recorded
        }
    }
}
