//! The kubelet's QoS rules run backwards: from what NRI shows a plugin of a container (its pod's
//! cgroup parent, its cgroup values) to the class, requests and limits the kubelet must have
//! started from — the NRI inversion, admission's input when the API server's pod is not at hand
//! (`crate::placement::admission_input`). In the spirit of nri-plugins' `pkg/cgroups` and
//! `cache/utils.go` estimates; the precision of each estimate is stated on its function and held
//! by round-trip property tests against the forward rules ([`crate::kube::qos`]).

use crate::kube::pod::{Container, Pod, ResourceList};
use crate::kube::qos::{
    self, OomScoreVariant, QosClass, BURSTABLE_MAX_OOM_SCORE_ADJ, MAX_SHARES, MIN_SHARES,
    SHARES_PER_CPU,
};
use crate::machine::cpuset::CpuSet;

/// What a cgroup parent path says about a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupParentInfo {
    pub qos: QosClass,
    /// The pod UID, with the systemd driver's `_` turned back into `-`.
    pub pod_uid: String,
}

/// QoS class and pod UID from a pod's cgroup parent (or a container's cgroups path under it),
/// inverting `pkg/kubelet/cm/pod_container_manager_linux.go` `GetPodContainerName` and
/// qos_container_manager_linux.go's layout:
///
/// - cgroupfs driver: `[<cgroup-root>/]kubepods/pod<uid>` (Guaranteed),
///   `…/kubepods/burstable/pod<uid>`, `…/kubepods/besteffort/pod<uid>`, optionally followed by a
///   container component;
/// - systemd driver: a `…kubepods-pod<uid_>.slice`, `…kubepods-burstable-pod<uid_>.slice` or
///   `…kubepods-besteffort-pod<uid_>.slice` leaf (alone, as the kubelet sends it in
///   `cgroup_parent`, under its `kubepods.slice/kubepods-<qos>.slice` parents, or in containerd's
///   `slice:prefix:name` cgroups-path form).
///
/// Anything else (non-Kubernetes containers, QoS-level cgroups without a pod) gives `None`.
/// Exact: the path is a lossless encoding of the class.
pub fn qos_from_cgroup_parent(parent: &str) -> Option<CgroupParentInfo> {
    let path = parent.split(':').next().unwrap_or(parent);
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    // systemd form: find the pod slice.
    for part in parts.iter().rev() {
        if let Some(info) = systemd_pod_slice(part) {
            return Some(info);
        }
    }
    // cgroupfs form: .../kubepods/[burstable|besteffort/]pod<uid>[/container]
    let k = parts.iter().rposition(|p| *p == "kubepods")?;
    let rest = &parts[k + 1..];
    let (qos, pod) = match rest {
        [q, pod, ..] if *q == "burstable" => (QosClass::Burstable, *pod),
        [q, pod, ..] if *q == "besteffort" => (QosClass::BestEffort, *pod),
        [pod, ..] => (QosClass::Guaranteed, *pod),
        [] => return None,
    };
    let uid = pod.strip_prefix("pod").filter(|u| valid_uid(u))?;
    Some(CgroupParentInfo {
        qos,
        pod_uid: uid.to_string(),
    })
}

fn systemd_pod_slice(component: &str) -> Option<CgroupParentInfo> {
    let name = component.strip_suffix(".slice")?;
    let (prefix, uid) = name.rsplit_once("-pod")?;
    let qos = if prefix == "kubepods" || prefix.ends_with("-kubepods") {
        QosClass::Guaranteed
    } else if let Some(p) = prefix.strip_suffix("-burstable") {
        if p != "kubepods" && !p.ends_with("-kubepods") {
            return None;
        }
        QosClass::Burstable
    } else if let Some(p) = prefix.strip_suffix("-besteffort") {
        if p != "kubepods" && !p.ends_with("-kubepods") {
            return None;
        }
        QosClass::BestEffort
    } else {
        return None;
    };
    // The kubelet escapes a uid's `-` as `_` in a slice name (`-` separates the slice's
    // parents): a `-` left in the uid is not a name the kubelet writes.
    if !valid_uid(uid) || uid.contains('-') {
        return None;
    }
    Some(CgroupParentInfo {
        qos,
        pod_uid: uid.replace('_', "-"),
    })
}

fn valid_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Estimated CPU request (millicores) from cpu.shares, inverting [`milli_cpu_to_shares`](crate::kube::qos::milli_cpu_to_shares).
///
/// Precision: **exact** for every request from 3m to 256000m — the forward map
/// `floor(m·1.024)` has slope > 1, so `ceil(shares·1000/1024)` recovers `m` (property-tested).
/// Shares of 2 (or less) come from requests of 0–2m and from BestEffort/no request: we return 0.
/// Shares of 262144 mean ≥ 256000m: we return 256000. Shares not produced by the kubelet map to the
/// smallest request whose shares are at least that value.
pub fn estimate_cpu_request_millis(shares: u64) -> u64 {
    if shares <= MIN_SHARES {
        return 0;
    }
    let s = shares.min(MAX_SHARES);
    (s * 1000).div_ceil(SHARES_PER_CPU)
}

/// Estimated CPU limit (millicores) from a CFS quota and period, inverting
/// [`milli_cpu_to_quota`](crate::kube::qos::milli_cpu_to_quota); `None` when there is no quota (≤ 0) or no period.
///
/// Precision: **exact** whenever the quota is above the 1000 µs floor and the period is at least
/// 1000 µs (with the default 100000 µs period: every limit ≥ 10m). A quota of exactly 1000 µs is the
/// floor: at the default period it comes from any limit of 1–10m and we return 10m
/// (`ceil(quota·1000/period)`).
pub fn estimate_cpu_limit_millis(quota_us: i64, period_us: u64) -> Option<u64> {
    if quota_us <= 0 || period_us == 0 {
        return None;
    }
    let q = u128::from(quota_us.unsigned_abs());
    let m = (q * 1000).div_ceil(u128::from(period_us));
    u64::try_from(m).ok()
}

/// The set of memory requests consistent with an observed Burstable oom_score_adj.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryRequestEstimate {
    /// Smallest request (bytes) giving this oom_score_adj; the estimate to use.
    pub min_bytes: u64,
    /// Largest request giving it; `None` at the clamp floor (any larger request also clamps there).
    pub max_bytes: Option<u64>,
}

/// Estimated memory request of a Burstable container from its oom_score_adj and the node's memory
/// capacity, inverting [`oom_score_adj`](crate::kube::qos::oom_score_adj)'s linear term. `None` for values the Burstable rule never
/// produces (below `variant.burstable_min()` or above 999, e.g. −997 or 1000).
///
/// Precision: one oom_score_adj step is `capacity/1000` bytes (about 64 MiB on a 64 GiB node), so
/// the true request lies in `[min_bytes, max_bytes]`, a range of width < capacity/1000 (two steps at
/// 999, which also covers requests under one step, including 0). At the clamp floor (3) only a lower
/// bound is known. A sidecar's value may be that of the smallest regular container (see
/// [`oom_score_adj`](crate::kube::qos::oom_score_adj)), and pod-level memory requests add an equal share per container; the estimate
/// is then of that effective request. The runtime's floor clamp ([`clamp_to_floor`](crate::kube::qos::clamp_to_floor)) destroys the
/// information entirely when it applies.
pub fn estimate_memory_request_bytes(
    oom_score_adj: i32,
    memory_capacity: u64,
    variant: OomScoreVariant,
) -> Option<MemoryRequestEstimate> {
    if oom_score_adj < variant.burstable_min()
        || oom_score_adj > BURSTABLE_MAX_OOM_SCORE_ADJ
        || memory_capacity == 0
    {
        return None;
    }
    let cap = u128::from(memory_capacity);
    // Linear term k = floor(1000·req/cap) = 1000 − adj, with adj = 999 also covering k = 0.
    let k = u128::from((1000 - oom_score_adj).unsigned_abs());
    let lo_k = if oom_score_adj == BURSTABLE_MAX_OOM_SCORE_ADJ {
        0
    } else {
        k
    };
    // Smallest req with floor(1000·req/cap) ≥ j is ceil(j·cap/1000).
    let first = |j: u128| (j * cap).div_ceil(1000);
    let min_bytes = u64::try_from(first(lo_k)).unwrap_or(u64::MAX);
    let max_bytes = if oom_score_adj == variant.burstable_min() {
        None
    } else {
        Some(u64::try_from(first(k + 1) - 1).unwrap_or(u64::MAX))
    };
    Some(MemoryRequestEstimate {
        min_bytes,
        max_bytes,
    })
}

/// The cgroup values a container carries right now (as the kubelet created it, or as earlier
/// plugins adjusted it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CurrentResources {
    pub cpu_shares: Option<u64>,
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub cpuset_cpus: Option<CpuSet>,
    /// As a set (`0-1` and `0,1` are the same).
    pub cpuset_mems: Option<CpuSet>,
    pub memory_limit: Option<i64>,
    pub oom_score_adj: Option<i64>,
    pub pids_limit: Option<i64>,
    /// The scheduling policy the container's process is created with (OCI
    /// `process.scheduler`), when one is set: the pod spec cannot ask for one, so it is another
    /// NRI plugin's.
    pub scheduler_policy: Option<String>,
}

/// The class admission uses for a container whose pod's cgroup path names `path`: the path's,
/// except that a Guaranteed path whose values cannot be Guaranteed (no CPU or no memory limit:
/// only a hand-made cgroup parent has that, the kubelet never makes it) is taken for what its
/// values are, so that nothing claims exclusive CPUs or −997 without the resources for them. A
/// Burstable pod's container stays Burstable whatever its own values (another container makes
/// the pod Burstable), a BestEffort pod's has no values.
pub fn admission_class(path: QosClass, estimate: &Container) -> QosClass {
    match path {
        QosClass::Guaranteed => qos::class(&Pod {
            containers: vec![estimate.clone()],
            ..Pod::default()
        }),
        QosClass::Burstable | QosClass::BestEffort => path,
    }
}

/// The requests and limits the kubelet must have started from to produce `cur` for a container
/// of class `class` (`memory_capacity`: the node's, which the oom_score_adj rule divides by).
pub fn estimate_container(
    name: &str,
    class: QosClass,
    cur: &CurrentResources,
    memory_capacity: u64,
) -> Container {
    let cpu_limit = match (cur.cpu_quota, cur.cpu_period) {
        (Some(q), Some(p)) => estimate_cpu_limit_millis(q, p),
        _ => None,
    };
    let cpu_request = cur.cpu_shares.map(estimate_cpu_request_millis);
    let memory_limit = cur.memory_limit.and_then(|l| u64::try_from(l).ok());
    let mut requests = ResourceList::default();
    let mut limits = ResourceList::default();
    match class {
        QosClass::BestEffort => {}
        QosClass::Guaranteed => {
            // requests == limits by definition; the quota-derived limit is exact where the
            // shares-derived request is too (and survives quota removal by another plugin).
            let cpu = cpu_limit.or(cpu_request).filter(|&m| m > 0);
            requests.cpu_millis = cpu;
            limits.cpu_millis = cpu;
            requests.memory_bytes = memory_limit;
            limits.memory_bytes = memory_limit;
        }
        QosClass::Burstable => {
            requests.cpu_millis = cpu_request.filter(|&m| m > 0);
            limits.cpu_millis = cpu_limit;
            limits.memory_bytes = memory_limit;
            requests.memory_bytes = cur
                .oom_score_adj
                .and_then(|o| i32::try_from(o).ok())
                .and_then(|o| {
                    // Kubelets before the -997 change clamp Burstable values at 2, not 3.
                    [OomScoreVariant::Current, OomScoreVariant::Legacy]
                        .into_iter()
                        .find_map(|v| estimate_memory_request_bytes(o, memory_capacity, v))
                })
                .map(|e| e.min_bytes)
                .filter(|&b| b > 0);
        }
    }
    Container {
        name: name.to_string(),
        requests,
        limits,
        restart_policy: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::pod::tests::{ctr, pod_of, rl};
    use crate::kube::qos::*;
    use proptest::prelude::*;

    #[test]
    fn cgroup_parents() {
        let uid = "0d3f1c0e-1b2a-4c5d-9e8f-001122334455";
        let uid_ = uid.replace('-', "_");
        let ok = |p: &str, q: QosClass| {
            assert_eq!(
                qos_from_cgroup_parent(p),
                Some(CgroupParentInfo {
                    qos: q,
                    pod_uid: uid.to_string()
                }),
                "{p}"
            );
        };
        use QosClass::*;
        ok(&format!("/kubepods/pod{uid}"), Guaranteed);
        ok(&format!("/kubepods/burstable/pod{uid}"), Burstable);
        ok(&format!("/kubepods/besteffort/pod{uid}"), BestEffort);
        ok(&format!("kubepods/burstable/pod{uid}"), Burstable);
        ok(
            &format!("/custom-root/kubepods/besteffort/pod{uid}"),
            BestEffort,
        );
        ok(
            &format!("/a/b/kubepods/pod{uid}/{}", "f".repeat(64)),
            Guaranteed,
        );
        ok(
            &format!("/kubepods.slice/kubepods-pod{uid_}.slice"),
            Guaranteed,
        );
        ok(
            &format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice"),
            Burstable,
        );
        ok(
            &format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice"
            ),
            BestEffort,
        );
        ok(&format!("kubepods-burstable-pod{uid_}.slice"), Burstable);
        ok(
            &format!(
                "kubepods-besteffort-pod{uid_}.slice:cri-containerd:{}",
                "a".repeat(64)
            ),
            BestEffort,
        );
        ok(
            &format!("/custom.slice/custom-kubepods.slice/custom-kubepods-burstable.slice/custom-kubepods-burstable-pod{uid_}.slice"),
            Burstable,
        );
        for p in [
            "",
            "/",
            "/system.slice/docker.service",
            "/kubepods",
            "/kubepods/burstable",
            "/kubepods/burstable/",
            "/kubepods.slice/kubepods-burstable.slice",
            "/user.slice/user-1000.slice",
            "/kubepods/burstable/notapod",
            "/kubepods/pod",
            "/machine.slice/machine-qemu-pod1.slice",
            "/docker/abc",
            // A `-` the kubelet would have escaped: not a slice it names.
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab-cd.slice",
            "kubepods-podab-cd.slice",
        ] {
            assert_eq!(qos_from_cgroup_parent(p), None, "{p:?}");
        }
    }

    #[test]
    fn estimates_edges() {
        assert_eq!(estimate_cpu_request_millis(2), 0);
        assert_eq!(estimate_cpu_request_millis(1024), 1000);
        assert_eq!(estimate_cpu_request_millis(262_144), 256_000);
        assert_eq!(estimate_cpu_limit_millis(1000, 100_000), Some(10));
        assert_eq!(estimate_cpu_limit_millis(0, 100_000), None);
        assert_eq!(estimate_cpu_limit_millis(-1, 100_000), None);
        assert_eq!(estimate_cpu_limit_millis(150_000, 100_000), Some(1500));
        let cv = OomScoreVariant::Current;
        assert_eq!(estimate_memory_request_bytes(1000, 1 << 30, cv), None);
        assert_eq!(estimate_memory_request_bytes(-997, 1 << 30, cv), None);
        assert_eq!(estimate_memory_request_bytes(2, 1 << 30, cv), None);
        let e = estimate_memory_request_bytes(500, 1000, cv);
        assert_eq!(
            e,
            Some(MemoryRequestEstimate {
                min_bytes: 500,
                max_bytes: Some(500)
            })
        );
        let e = estimate_memory_request_bytes(3, 1000, cv);
        assert_eq!(
            e,
            Some(MemoryRequestEstimate {
                min_bytes: 997,
                max_bytes: None
            })
        );
        assert_eq!(exclusive_cpu_count(QosClass::Guaranteed, 2000), Some(2));
        assert_eq!(exclusive_cpu_count(QosClass::Guaranteed, 1500), None);
        assert_eq!(exclusive_cpu_count(QosClass::Guaranteed, 0), None);
        assert_eq!(exclusive_cpu_count(QosClass::Burstable, 2000), None);
    }

    proptest! {
        /// shares → request is exact for 3m..=256000m.
        #[test]
        fn shares_round_trip(m in 3u64..=256_000) {
            prop_assert_eq!(estimate_cpu_request_millis(milli_cpu_to_shares(m)), m);
        }

        /// Requests of 0–2m all give 2 shares and estimate to 0 (error ≤ 2m).
        #[test]
        fn shares_low_end(m in 0u64..3) {
            prop_assert_eq!(estimate_cpu_request_millis(milli_cpu_to_shares(m)), 0);
        }

        /// quota → limit is exact above the floor, for any period ≥ 1000 µs.
        #[test]
        fn quota_round_trip(m in 1u64..=10_000_000, period in 1000u64..=1_000_000) {
            let q = milli_cpu_to_quota(m, period);
            let est = estimate_cpu_limit_millis(q, period);
            if q > MIN_QUOTA_US {
                prop_assert_eq!(est, Some(m));
            } else {
                // At the floor: the estimate is the largest limit that maps there.
                let e = est.unwrap_or(0);
                prop_assert!(e >= m && milli_cpu_to_quota(e, period) == MIN_QUOTA_US);
            }
        }

        /// oom_score_adj → request range always contains the true request, and is narrower
        /// than one step (capacity/1000) except at 999 (two steps) and at the floor (open).
        #[test]
        fn oom_round_trip(cap in 1_000_000u64..=(1u64 << 42), frac in 0u64..=1_100_000) {
            let req = ((u128::from(cap) * u128::from(frac)) / 1_000_000) as u64;
            let cv = OomScoreVariant::Current;
            let pod = pod_of(vec![ctr("c", rl(Some(100), Some(req)), ResourceList::default())]);
            let adj = oom_score_adj(&pod, &pod.containers[0], cap, cv);
            let est = estimate_memory_request_bytes(adj, cap, cv);
            prop_assert!(est.is_some());
            let est = est.unwrap_or(MemoryRequestEstimate { min_bytes: 0, max_bytes: None });
            prop_assert!(est.min_bytes <= req);
            if let Some(max) = est.max_bytes {
                prop_assert!(req <= max);
                let width = max - est.min_bytes;
                let step = cap.div_ceil(1000);
                let bound = if adj == 999 { 2 * step } else { step };
                prop_assert!(width < bound);
            }
            // The lower bound itself maps back to the same value.
            let p2 = pod_of(vec![ctr("c", rl(Some(100), Some(est.min_bytes)), ResourceList::default())]);
            prop_assert_eq!(oom_score_adj(&p2, &p2.containers[0], cap, cv), adj);
        }

        /// Class → cgroup parent → class is exact for both drivers.
        #[test]
        fn cgroup_round_trip(a in 0u32..u32::MAX, b in 0u16..u16::MAX, q in 0usize..3) {
            let uid = format!("{a:08x}-{b:04x}-4c5d-9e8f-001122334455");
            let uid_ = uid.replace('-', "_");
            let qos = [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort][q];
            let (fs, sd) = match qos {
                QosClass::Guaranteed => (format!("/kubepods/pod{uid}"), format!("/kubepods.slice/kubepods-pod{uid_}.slice")),
                QosClass::Burstable => (format!("/kubepods/burstable/pod{uid}"), format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice")),
                QosClass::BestEffort => (format!("/kubepods/besteffort/pod{uid}"), format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice")),
            };
            let want = Some(CgroupParentInfo { qos, pod_uid: uid.clone() });
            prop_assert_eq!(qos_from_cgroup_parent(&fs), want.clone());
            prop_assert_eq!(qos_from_cgroup_parent(&sd), want);
        }
    }
}
