//! The lifecycle events of sandboxes and containers: RunPodSandbox, PostStartContainer (where a
//! container first seen after Synchronize is adopted: `adopt`), StopContainer, RemoveContainer,
//! RemovePodSandbox, and the release of what a stopped or removed container (or a removed pod)
//! held.

use topolet_nri::api;
use topolet_nri::plugin::PluginResult;

use super::adopt::Adoption;
use super::{PluginState, TopoletPlugin};
use crate::nri::records::Lifecycle;
use crate::nri::view;

impl TopoletPlugin {
    /// RunPodSandbox: a Kubernetes pod sandbox joins the book.
    pub(super) fn on_run_pod_sandbox(&self, pod: api::PodSandbox) -> PluginResult<()> {
        if view::pod_qos(&pod).is_ok() {
            let mut node = self.event_lock();
            node.sandboxes.insert(pod.id.clone(), pod);
        }
        Ok(())
    }

    /// A container that was still being created at Synchronize now runs: send it the cpuset it
    /// should have again, in case its task started from the spec before our update. One that
    /// neither Synchronize nor CreateContainer showed is adopted (`adopt`).
    pub(super) fn on_post_start_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
    ) -> PluginResult<()> {
        let mut node = self.event_lock();
        if self.adopt(&mut node, pod, ctr, Lifecycle::Running) != Adoption::NotNeeded {
            return Ok(());
        }
        if let Some(r) = node.records.get_mut(&ctr.id) {
            r.set_pid(ctr.pid);
        }
        if !node.records.start(&ctr.id) {
            return Ok(());
        }
        if let Some(m) = node.records.get(&ctr.id) {
            tracing::info!(pod = %m.view().pod_ref, container = %ctr.name, cpus = %m.target().cpuset, "started after its cpuset changed: it will be sent again");
        }
        Ok(())
    }

    /// StopContainer: the container leaves the update set and returns what it held; the reply
    /// carries the others' queued updates.
    pub(super) fn on_stop_container(
        &self,
        ctr: &api::Container,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        let mut node = self.event_lock();
        // It leaves the update set now (`crate::nri::records`).
        node.records.stop(&ctr.id);
        self.release(&mut node, &ctr.id, "stopped");
        Ok(self.reply_updates(&mut node, &ctr.id))
    }

    /// RemoveContainer: returns what the container held (if its stop did not) and forgets it.
    pub(super) fn on_remove_container(&self, ctr: &api::Container) -> PluginResult<()> {
        let mut node = self.event_lock();
        self.release(&mut node, &ctr.id, "removed");
        node.records.remove(&ctr.id);
        node.batch.forget(&ctr.id);
        Ok(())
    }

    /// RemovePodSandbox: forgets the pod and returns everything its containers held.
    pub(super) fn on_remove_pod_sandbox(&self, pod: &api::PodSandbox) -> PluginResult<()> {
        let mut node = self.event_lock();
        let stored = node.sandboxes.remove(&pod.id);
        let sandbox = stored.as_ref().unwrap_or(pod);
        if view::pod_qos(sandbox).is_err() {
            return Ok(());
        }
        let Some(uid) = view::pod_uid(sandbox) else {
            return Ok(());
        };
        node.refusals.clear_pod(&uid);
        node.batch.forget_pod(&uid);
        if let Some(sink) = self.events.get() {
            sink.forget(&uid);
        }
        let before = node.records.left_alone().len();
        node.records.remove_pod(&uid);
        let forgot = node.records.left_alone().len() != before;
        if node.placement.release_pod(&uid) {
            tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), shared = %node.placement.shared_pool(), "pod removed: its cpus are back in the shared pool");
            self.persist(&node);
            self.push_shared_pool(&mut node, None);
        } else if forgot {
            self.persist(&node);
        }
        Ok(())
    }

    /// Returns a stopped or removed container's exclusive resources (idempotent: a second call,
    /// or a call for a container we never saw, changes nothing).
    fn release(&self, node: &mut PluginState, id: &str, what: &str) {
        let Some(key) = node.records.get(id).map(|m| m.view().key.clone()) else {
            return;
        };
        // A restarted container (same pod and name, new id) inherits the key's resources: the
        // old instance's late stop or removal must not take them from the new one.
        if node.records.has_successor(id) {
            if let Some(m) = node.records.get_mut(id) {
                m.retarget(|t| t.exclusive = false);
            }
            return;
        }
        if node.placement.release(&key) {
            if let Some(m) = node.records.get_mut(id) {
                m.retarget(|t| t.exclusive = false);
            }
            tracing::info!(container = %key, shared = %node.placement.shared_pool(), "container {what}: exclusive cpus released");
            self.persist(node);
            self.push_shared_pool(node, Some(id));
        }
    }
}
