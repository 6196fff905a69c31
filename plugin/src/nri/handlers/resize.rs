//! UpdateContainer: an in-place resize, decided from the runtime's new values. A refused resize
//! puts the pod cgroup back to what the containers run with; an accepted one retargets the
//! container, its pod's quota and, when its exclusive set changed, the shared pool.

use topolet_nri::api;
use topolet_nri::plugin::PluginResult;

use super::TopoletPlugin;
use crate::host::pod_cgroup::Work;
use crate::nri::adjust;
use crate::nri::handlers::pod_quota::pod_cpu_of;
use crate::nri::handlers::updates::widened;
use crate::nri::records::Lifecycle;
use crate::nri::view;
use topolet_core::placement::admission_input::Source;
use topolet_core::placement::Candidate;

impl TopoletPlugin {
    /// UpdateContainer: an in-place resize of a managed container; the reply carries the others'
    /// queued updates, then its own.
    pub(super) fn on_update_container(
        &self,
        req: &api::UpdateContainerRequest,
    ) -> PluginResult<api::UpdateContainerResponse> {
        let Some(ctr) = req.container.as_ref() else {
            return Ok(api::UpdateContainerResponse::default());
        };
        let mut node = self.event_lock();
        // One first seen now is adopted from what it runs with, then resized as any other
        // (`adopt`); its own update is this reply's.
        if let Some(pod) = req.pod.as_ref() {
            self.adopt(&mut node, pod, ctr, Lifecycle::Running);
        }
        let Some(m) = node.records.get(&ctr.id).cloned() else {
            return Ok(api::UpdateContainerResponse::default());
        };
        let view = view::with_resources(
            m.view(),
            req.linux_resources.as_ref(),
            self.memory_capacity(),
        );
        let floor = node.oom_floor.unwrap_or(0);
        let uid = m.view().key.pod_uid.clone();
        // A resize decides from the runtime's new values (exact; the watch may not have the
        // resized spec yet when the kubelet acts on it).
        self.metrics
            .admission_source("resize", Source::Inversion.as_str());
        let decision = match node.placement.resize(Candidate::Nri(&view.estimate), floor) {
            Ok(d) => d,
            Err(refusal) => {
                let error = self.refused(&mut node, "resize", Source::Inversion, &view, &refusal);
                // The kubelet resized the pod cgroup before asking: put it back to what the
                // containers run with (where it holds exactly the refused request's values).
                let exclusive = node.records.pod(&uid).any(|(_, o)| o.target().exclusive);
                let enforce = !(exclusive && node.placement.disables_exclusive_quota());
                let refused = pod_cpu_of(&node, &uid, Some(&view), true);
                let restore = pod_cpu_of(&node, &uid, None, enforce);
                if let (Some(refused), Some(restore)) = (refused, restore) {
                    if refused != restore {
                        self.pod_cgroups().submit(Work::Revert {
                            pod: m.view().pod_ref.clone(),
                            cgroup_parent: m.view().cgroup_parent.clone(),
                            refused,
                            restore,
                        });
                    }
                }
                return Err(error);
            }
        };
        node.refusals.clear("resize", &view.key);
        let mut decision = decision;
        let before = m.target();
        decision.mems = widened(before.mems, decision.mems, node.placement.all_mems());
        let changed_pool =
            decision.exclusive != before.exclusive || decision.cpuset != before.cpuset;
        tracing::info!(pod = %m.view().pod_ref, container = %ctr.name, cpus = %decision.cpuset, exclusive = decision.exclusive, source = Source::Inversion.as_str(), "container resized");
        if decision.exclusive && changed_pool {
            self.grant_event(&view, &decision, true);
        }
        let own = adjust::resize_update(&view, &decision);
        let (pod_ref, cgroup_parent) = (view.pod_ref.clone(), view.cgroup_parent.clone());
        let left_exclusive = before.exclusive && !decision.exclusive;
        if let Some(r) = node.records.get_mut(&ctr.id) {
            r.set_view(view);
            r.retarget(|t| *t = decision);
        }
        // The kubelet rewrote the pod cgroup's quota for the new size: unlimited again while
        // the pod holds exclusive CPUs; the kubelet's once its last exclusive container left.
        let pod_exclusive = node.records.pod(&uid).any(|(_, o)| o.target().exclusive);
        if pod_exclusive {
            self.unlimit_pod(&node, &uid);
        } else if left_exclusive && node.placement.disables_exclusive_quota() {
            if let Some(quota) = pod_cpu_of(&node, &uid, None, true).and_then(|p| p.quota) {
                self.pod_cgroups().submit(Work::Relimit {
                    pod: pod_ref,
                    cgroup_parent,
                    quota,
                });
            }
        }
        if changed_pool {
            self.persist(&node);
            self.push_shared_pool(&mut node, Some(&ctr.id));
        }
        // The others first: containerd takes the last update as the resized container's own.
        let mut update = self.reply_updates(&mut node, &ctr.id);
        update.push(own);
        node.records.applied_in_reply(&ctr.id);
        Ok(api::UpdateContainerResponse {
            update,
            ..Default::default()
        })
    }
}
