//! Ranking pods for eviction under one signal's pressure.
//!
//! Mirrors `pkg/kubelet/eviction/helpers.go`: `rankMemoryPressure`
//! (`orderedBy(exceedMemoryRequests, priority, memory)`), `rankDiskPressureFunc`
//! (`orderedBy(exceedDiskRequests, priority, disk)`) and `rankPIDPressure`
//! (`orderedBy(priority, process)`), with their comparators:
//! - a pod without usage statistics sorts first in every usage comparator ("prioritize evicting
//!   the pod for which no stats were found");
//! - "exceeds requests" compares usage with the pod's request: memory with the memory request,
//!   disk bytes with the `ephemeral-storage` request, inodes with 0 (pods cannot request inodes);
//! - priority is `spec.priority` (0 when unset), lower first;
//! - the last key is usage minus request, larger first; for disk *and inodes* the
//!   `ephemeral-storage` request is subtracted, exactly as the kubelet's `disk` comparator does;
//! - processes: more first.
//!
//! Where this differs from the kubelet, on purpose (Guaranteed and node-critical pods go last:
//! docs/src/eviction.md), pods are first split into three tiers, and the kubelet's order applies inside each:
//! 1. every pod that is neither critical nor Guaranteed;
//! 2. Guaranteed pods. The kubelet has no QoS key: a Guaranteed pod's working set cannot exceed
//!    its request (= limit), so under memory pressure it already sorts among the pods below their
//!    requests, *by priority* — a low-priority Guaranteed pod goes before a high-priority
//!    Burstable pod below its request there, and last here. Under disk and PID pressure the kubelet
//!    ranks Guaranteed pods like any other;
//! 3. critical pods (`IsCriticalPod`: static/mirror pods and priority ≥ 2000000000). The kubelet
//!    ranks them normally but `evictPod` refuses to evict them; here they sort last and
//!    [`decide`](crate::eviction::decide()) never picks them.
//!
//! Ties (the kubelet's `sort.Sort` leaves their order unspecified) break by namespace/name.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::eviction::signal::{Signal, SignalResource};
use crate::kube::pod::Pod;
use crate::kube::qos::{self, QosClass};

/// A pod's measured usage (the kubelet's pod stats, reduced to what ranking needs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodUsage {
    /// Working set bytes of the pod cgroup (usage − inactive_file).
    pub memory_working_set: u64,
    /// Processes (and threads, as `pids.current` counts them) in the pod cgroup.
    pub processes: u64,
    /// Bytes of the pod's writable layers and logs on the filesystem of the signal.
    pub disk: u64,
    /// Inodes used by the same.
    pub inodes: u64,
}

/// Usage by pod key (`namespace/name`). A pod missing here has no statistics.
pub type UsageByPod = BTreeMap<String, PodUsage>;

/// The tier a pod is ranked in (see the module docs): lower tiers are evicted first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    Ordinary,
    Guaranteed,
    Critical,
}

/// The tier of `pod`.
pub fn tier(pod: &Pod) -> Tier {
    if pod.is_critical() {
        Tier::Critical
    } else if qos::class(pod) == QosClass::Guaranteed {
        Tier::Guaranteed
    } else {
        Tier::Ordinary
    }
}

/// `cmpBool`: `true` sorts first.
fn cmp_bool(a: bool, b: bool) -> Ordering {
    b.cmp(&a)
}

/// `corev1helpers.PodPriority`: the priority, 0 when unset.
fn priority(pod: &Pod) -> i32 {
    pod.effective_priority().unwrap_or(0)
}

/// The usage the signal ranks by, and the request "exceeds requests" compares it with, and the
/// request subtracted for the final key.
fn measure(signal: Signal, pod: &Pod, u: &PodUsage) -> (u64, u64, u64) {
    let requests = pod.effective_requests();
    match signal.resource() {
        SignalResource::Memory => (u.memory_working_set, requests.memory(), requests.memory()),
        SignalResource::Disk => (
            u.disk,
            requests.ephemeral_storage(),
            requests.ephemeral_storage(),
        ),
        SignalResource::Inodes => (u.inodes, 0, requests.ephemeral_storage()),
        SignalResource::Pids => (u.processes, 0, 0),
    }
}

/// The kubelet's comparator chain for `signal` (without tiers or the name tie-break).
pub fn kubelet_cmp(signal: Signal, a: &Pod, b: &Pod, usage: &UsageByPod) -> Ordering {
    let ua = usage.get(&a.key());
    let ub = usage.get(&b.key());
    let by_priority = priority(a).cmp(&priority(b));
    let (ua, ub) = match (ua, ub) {
        (Some(ua), Some(ub)) => (ua, ub),
        // Every usage comparator puts the pod without stats first.
        _ => {
            let no_stats = cmp_bool(ua.is_none(), ub.is_none());
            return match signal.resource() {
                SignalResource::Pids => by_priority.then(no_stats),
                _ => no_stats.then(by_priority).then(no_stats),
            };
        }
    };
    let (use_a, exceed_req_a, sub_req_a) = measure(signal, a, ua);
    let (use_b, exceed_req_b, sub_req_b) = measure(signal, b, ub);
    let over = |usage: u64, req: u64| i128::from(usage) - i128::from(req);
    match signal.resource() {
        SignalResource::Pids => by_priority.then(use_b.cmp(&use_a)),
        _ => cmp_bool(use_a > exceed_req_a, use_b > exceed_req_b)
            .then(by_priority)
            .then(over(use_b, sub_req_b).cmp(&over(use_a, sub_req_a))),
    }
}

/// Pods in eviction order for `signal`: tiers, then the kubelet's order, then namespace/name.
pub fn rank<'a>(signal: Signal, pods: &'a [Pod], usage: &UsageByPod) -> Vec<&'a Pod> {
    let mut out: Vec<&Pod> = pods.iter().collect();
    out.sort_by(|a, b| {
        tier(a)
            .cmp(&tier(b))
            .then_with(|| kubelet_cmp(signal, a, b, usage))
            .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    });
    out
}

/// [`rank`] as pod keys (`namespace/name`), the output of `topolet rank`.
pub fn rank_keys(signal: Signal, pods: &[Pod], usage: &UsageByPod) -> Vec<String> {
    rank(signal, pods, usage)
        .into_iter()
        .map(Pod::key)
        .collect()
}
