//! The pod cgroup's CPU values: the writer (`crate::host::pod_cgroup`, its own thread), the unlimited
//! quota of a pod holding exclusive CPUs (the kubelet's static policy) and the values the
//! kubelet computes for a pod from its containers.

use super::{PluginState, TopoletPlugin};
use crate::host::pod_cgroup::{self, Work};
use crate::nri::view::ContainerView;

impl TopoletPlugin {
    pub(super) fn pod_cgroups(&self) -> &pod_cgroup::Writer {
        self.pod_cgroups.get_or_init(|| {
            pod_cgroup::Writer::new(
                pod_cgroup::Roots {
                    proc_root: self.proc_root.clone(),
                    sysfs_root: self.sysfs_root.clone(),
                },
                self.metrics.clone(),
            )
        })
    }

    /// Waits until every pod cgroup write queued so far is done (tests; blocking).
    pub fn flush_pod_cgroups(&self) {
        self.pod_cgroups().flush();
    }

    /// Queues the unlimited pod quota of pod `uid` if it holds exclusive CPUs and the kubelet's
    /// static policy would have disabled it.
    pub(super) fn unlimit_pod(&self, node: &PluginState, uid: &str) {
        if !node.placement.disables_exclusive_quota() {
            return;
        }
        let Some((_, m)) = node.records.pod(uid).find(|(_, m)| m.target().exclusive) else {
            return;
        };
        self.pod_cgroups().submit(Work::Unlimit {
            pod: m.view().pod_ref.clone(),
            cgroup_parent: m.view().cgroup_parent.clone(),
        });
    }
}

/// The pod cgroup's CPU values the kubelet computes for pod `uid` from its known, not stopped
/// containers, `replace` standing in for the container with its id (a resize's request).
pub(super) fn pod_cpu_of(
    node: &PluginState,
    uid: &str,
    replace: Option<&ContainerView>,
    enforce_cpu_limits: bool,
) -> Option<topolet_core::kube::qos::PodCpu> {
    let mut class = None;
    let mut period = topolet_core::kube::qos::DEFAULT_CPU_PERIOD_US;
    let mut containers = Vec::new();
    for (id, m) in node.records.pod(uid) {
        if !m.lifecycle().is_live() {
            continue;
        }
        let view = match replace {
            Some(v) if v.id == *id => v,
            _ => m.view(),
        };
        class = Some(view.qos);
        period = view.current.cpu_period.filter(|&p| p > 0).unwrap_or(period);
        containers.push(view.container().clone());
    }
    Some(topolet_core::kube::qos::pod_cpu(
        class?,
        &containers,
        period,
        enforce_cpu_limits,
    ))
}
