//! Kubelet QoS rules: pod QoS class, CPU shares and CFS quota, oom_score_adj, pids limit.
//!
//! One kubelet rule per function; each doc comment names the upstream file it mirrors:
//! - [`class`]: `pkg/apis/core/v1/helper/qos/qos.go` `GetPodQOS` / `ComputePodQOS`;
//! - [`milli_cpu_to_shares`], [`milli_cpu_to_quota`]: `pkg/kubelet/cm/helpers_linux.go`;
//! - [`container_cpu_shares`], [`container_cpu_quota`]:
//!   `pkg/kubelet/kuberuntime/kuberuntime_container_linux.go` `calculateLinuxResources`;
//! - [`oom_score_adj`]: `pkg/kubelet/qos/policy.go` `GetContainerOOMScoreAdjust`;
//! - [`pids_limit`]: the kubelet's `podPidsLimit` (`pkg/kubelet/cm/pod_container_manager_linux.go`);
//! - [`exclusive_cpu_count`]: `pkg/kubelet/cm/cpumanager/policy_static.go` `guaranteedCPUs`.
//!
//! The same rules run backwards (what NRI shows → what the kubelet started from) are
//! [`crate::kube::inverse`].
//!
//! Pure functions of values: no I/O.

use crate::kube::pod::{Container, Pod, ResourceList};

/// A pod's QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    /// The Kubernetes spelling ("Guaranteed", "Burstable", "BestEffort").
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

impl std::fmt::Display for QosClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---------------------------------------------------------------------------------------------
// QoS class
// ---------------------------------------------------------------------------------------------

/// Pod QoS class, as `pkg/apis/core/v1/helper/qos/qos.go` `ComputePodQOS` computes it.
///
/// - Only **cpu and memory** count (`supportedQoSComputeResources`). Hugepages, ephemeral storage
///   and extended resources never change the class (upstream case "best-effort-hugepages").
/// - Only **positive** amounts count: an explicit `0` is the same as absent.
/// - **Init containers count** exactly like app containers (sidecars included).
/// - BestEffort: no container has a positive cpu/memory request or limit.
/// - Guaranteed: every container has positive cpu *and* memory limits, and for cpu and memory the
///   sum of positive requests equals the sum of limits (requests defaulted from limits count as
///   set: "limits but no requests" is Guaranteed — `pod_input` applies that API defaulting).
/// - Burstable: anything else.
/// - With pod-level `spec.resources` (KEP-2837), the class is computed from the pod-level
///   requests/limits alone, same rules.
///
/// Amounts are compared after rounding to millicores/bytes, so `0.5m` vs `1m` compare equal
/// where apimachinery's exact `Cmp` would not; valid specs never depend on that.
pub fn class(pod: &Pod) -> QosClass {
    if let Some(r) = &pod.resources {
        return class_of(std::iter::once((&r.requests, &r.limits)));
    }
    class_of(pod.all_containers().map(|(_, c)| (&c.requests, &c.limits)))
}

fn class_of<'a>(sets: impl Iterator<Item = (&'a ResourceList, &'a ResourceList)>) -> QosClass {
    let (mut req_cpu, mut req_mem, mut lim_cpu, mut lim_mem) = (None, None, None, None);
    let add = |acc: &mut Option<u64>, v: u64| {
        if v > 0 {
            *acc = Some(acc.unwrap_or(0).saturating_add(v));
        }
    };
    let mut guaranteed = true;
    for (req, lim) in sets {
        add(&mut req_cpu, req.cpu());
        add(&mut req_mem, req.memory());
        add(&mut lim_cpu, lim.cpu());
        add(&mut lim_mem, lim.memory());
        if lim.cpu() == 0 || lim.memory() == 0 {
            guaranteed = false;
        }
    }
    if req_cpu.is_none() && req_mem.is_none() && lim_cpu.is_none() && lim_mem.is_none() {
        return QosClass::BestEffort;
    }
    if guaranteed && req_cpu == lim_cpu && req_mem == lim_mem {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

// ---------------------------------------------------------------------------------------------
// CPU shares and quota
// ---------------------------------------------------------------------------------------------

/// `MinShares` (helpers_linux.go): the kernel's minimum cpu.shares; BestEffort containers get it.
pub const MIN_SHARES: u64 = 2;
/// `MaxShares` (helpers_linux.go): the kernel's maximum cpu.shares.
pub const MAX_SHARES: u64 = 262_144;
/// `SharesPerCPU`.
pub const SHARES_PER_CPU: u64 = 1024;
/// Default CFS period in µs (`quotaPeriod`, 100 ms).
pub const DEFAULT_CPU_PERIOD_US: u64 = 100_000;
/// Minimum CFS quota in µs (`minQuotaPeriod`, 1 ms; the kernel's lower bound).
pub const MIN_QUOTA_US: i64 = 1000;

/// `MilliCPUToShares` (pkg/kubelet/cm/helpers_linux.go): `millis * 1024 / 1000` (integer
/// division), at least [`MIN_SHARES`] (0 millis included), at most [`MAX_SHARES`].
pub fn milli_cpu_to_shares(millis: u64) -> u64 {
    (millis.saturating_mul(SHARES_PER_CPU) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// `MilliCPUToQuota` (pkg/kubelet/cm/helpers_linux.go): `millis * period / 1000` µs, at least
/// [`MIN_QUOTA_US`]; `0` (meaning "no quota") when `millis` is 0.
pub fn milli_cpu_to_quota(millis: u64, period_us: u64) -> i64 {
    if millis == 0 {
        return 0;
    }
    let q = millis.saturating_mul(period_us) / 1000;
    i64::try_from(q).unwrap_or(i64::MAX).max(MIN_QUOTA_US)
}

/// A container's cpu.shares as the kubelet sends them (`calculateLinuxResources` in
/// pkg/kubelet/kuberuntime/kuberuntime_container_linux.go): from the CPU request; when the
/// request is zero/absent but a limit is set, from the limit; with neither, [`MIN_SHARES`]
/// (BestEffort: 2).
pub fn container_cpu_shares(c: &Container) -> u64 {
    let (req, lim) = (c.requests.cpu(), c.limits.cpu());
    if req == 0 && lim > 0 {
        milli_cpu_to_shares(lim)
    } else {
        milli_cpu_to_shares(req)
    }
}

/// The CFS quota to apply to a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuQuota {
    /// No quota requested: the kubelet sends 0 and the runtime leaves the cgroup's value alone.
    Unset,
    /// Explicitly unlimited (-1): exclusive-CPU containers under `DisableCPUQuotaWithExclusiveCPUs`.
    Unlimited,
    /// A quota in µs per period.
    Micros(i64),
}

impl CpuQuota {
    /// The CRI/OCI encoding: 0 unset, -1 unlimited, else µs.
    pub fn to_cri(self) -> i64 {
        match self {
            CpuQuota::Unset => 0,
            CpuQuota::Unlimited => -1,
            CpuQuota::Micros(q) => q,
        }
    }
}

/// What happens to the quota of a container that holds exclusive CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExclusiveCpuQuota {
    /// `DisableCPUQuotaWithExclusiveCPUs` (kubelet default since 1.33, PR #127525): no throttling
    /// of pinned containers, quota -1.
    #[default]
    Disable,
    /// Keep the limit-derived quota (older kubelets; kept when topolet's config asks for it).
    Keep,
}

/// A container's CFS quota (`calculateLinuxResources` with CFS quota enforcement on):
/// `milli_cpu_to_quota(limit, period)`; [`CpuQuota::Unset`] with no CPU limit (BestEffort
/// included); [`CpuQuota::Unlimited`] for a container with exclusive CPUs unless `exclusive_policy`
/// keeps the quota. The period is always sent alongside (default [`DEFAULT_CPU_PERIOD_US`]).
pub fn container_cpu_quota(
    c: &Container,
    period_us: u64,
    has_exclusive_cpus: bool,
    exclusive_policy: ExclusiveCpuQuota,
) -> CpuQuota {
    if has_exclusive_cpus && exclusive_policy == ExclusiveCpuQuota::Disable {
        return CpuQuota::Unlimited;
    }
    match milli_cpu_to_quota(c.limits.cpu(), period_us) {
        0 => CpuQuota::Unset,
        q => CpuQuota::Micros(q),
    }
}

/// The CPU values of a pod cgroup, as the kubelet writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCpu {
    /// `cpu.shares` (cgroup v2 writes the weight converted from it).
    pub shares: u64,
    /// CFS quota in µs, −1 unlimited; `None`: the kubelet sets none (a Burstable pod with a
    /// container without a CPU limit, BestEffort).
    pub quota: Option<i64>,
    pub period: u64,
}

/// The pod cgroup's CPU values for a pod of `class` made of `containers`, as the kubelet's
/// `ResourceConfigForPod` (pkg/kubelet/cm/helpers_linux.go) computes them: shares from the sum
/// of the CPU requests (`MilliCPUToShares`), quota `MilliCPUToQuota(sum of the CPU limits,
/// period)` for Guaranteed pods and for Burstable pods whose every container has a CPU limit, −1
/// when `enforce_cpu_limits` is false (the kubelet's `DisableCPUQuotaWithExclusiveCPUs` for a pod
/// with exclusive CPUs, or `cpuCFSQuota: false`); BestEffort: shares 2 and no quota. Only the
/// given containers count: init containers, pod overhead and pod-level resources are not seen
/// through NRI (callers check the result against the cgroup before relying on it).
pub fn pod_cpu(
    class: QosClass,
    containers: &[Container],
    period_us: u64,
    enforce_cpu_limits: bool,
) -> PodCpu {
    let requests: u64 = containers.iter().map(|c| c.requests.cpu()).sum();
    let limits: u64 = containers.iter().map(|c| c.limits.cpu()).sum();
    let all_limited = containers.iter().all(|c| c.limits.cpu() > 0);
    let quota = if enforce_cpu_limits {
        milli_cpu_to_quota(limits, period_us)
    } else {
        -1
    };
    match class {
        QosClass::Guaranteed => PodCpu {
            shares: milli_cpu_to_shares(requests),
            quota: Some(quota),
            period: period_us,
        },
        QosClass::Burstable => PodCpu {
            shares: milli_cpu_to_shares(requests),
            quota: all_limited.then_some(quota),
            period: period_us,
        },
        QosClass::BestEffort => PodCpu {
            shares: MIN_SHARES,
            quota: None,
            period: period_us,
        },
    }
}

/// cgroup v2 `cpu.weight` from cpu.shares as current runc / opencontainers/cgroups convert it
/// (the quadratic fit in log2 that maps 2 → 1, 1024 → 100 and 262144 → 10000).
pub fn cpu_shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    if shares <= MIN_SHARES {
        return 1;
    }
    if shares >= MAX_SHARES {
        return 10_000;
    }
    let l = (shares as f64).log2();
    let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
    10f64.powf(exponent).ceil() as u64
}

/// cgroup v2 `cpu.weight` from cpu.shares as older runc converted it (linear:
/// `1 + (shares − 2)·9999/262142`).
pub fn cpu_shares_to_weight_linear(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

// ---------------------------------------------------------------------------------------------
// oom_score_adj
// ---------------------------------------------------------------------------------------------

/// The oom_score_adj rule differs between kubelet versions; the caller picks one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OomScoreVariant {
    /// Current kubelet (pkg/kubelet/qos/policy.go, `guaranteedOOMScoreAdj = -997`): Guaranteed and
    /// node-critical −997; Burstable clamped to `[1000 + (−997), 999] = [3, 999]`.
    #[default]
    Current,
    /// Old kubelets (`guaranteedOOMScoreAdj = -998`): Guaranteed −998; Burstable clamped to
    /// `[2, 999]`. This is where the widely copied `min(max(2, …), 999)` table comes from.
    Legacy,
}

impl OomScoreVariant {
    /// oom_score_adj of Guaranteed and node-critical containers.
    pub fn guaranteed(self) -> i32 {
        match self {
            OomScoreVariant::Current => -997,
            OomScoreVariant::Legacy => -998,
        }
    }

    /// Lowest Burstable value: `1000 + guaranteed()`.
    pub fn burstable_min(self) -> i32 {
        1000 + self.guaranteed()
    }
}

/// oom_score_adj of BestEffort containers (`besteffortOOMScoreAdj`).
pub const BEST_EFFORT_OOM_SCORE_ADJ: i32 = 1000;
/// Highest Burstable value: one below BestEffort.
pub const BURSTABLE_MAX_OOM_SCORE_ADJ: i32 = 999;

/// The linear Burstable term `1000 − 1000·request/capacity` (Go integer division), unclamped.
fn linear_oom(request: u64, capacity: u64) -> i64 {
    let cap = u128::from(capacity.max(1));
    let used = (1000u128 * u128::from(request)) / cap;
    1000 - i64::try_from(used).unwrap_or(i64::MAX / 2)
}

/// A container's oom_score_adj, as `GetContainerOOMScoreAdjust` (pkg/kubelet/qos/policy.go)
/// computes it with default feature gates (KubeletOOMScoreAdjTieBreak off):
///
/// 1. node-critical pod ([`Pod::is_node_critical`]) → `variant.guaranteed()` (−997);
/// 2. Guaranteed → −997; BestEffort → 1000;
/// 3. Burstable: `1000 − 1000·memRequest/memoryCapacity`, where memRequest is the container's
///    memory request plus, when pod-level memory requests are set, an equal share of the pod
///    request not claimed by containers (`remainingPodMemReqPerContainer`);
/// 4. a sidecar (restartable init container) gets at most the value of the regular container with
///    the smallest memory request, so it is never killed before the app it serves;
/// 5. clamp to `[variant.burstable_min(), 999]` — `[3, 999]` today.
///
/// Older write-ups of the kubelet's table write `max(2, …)`: that is the
/// `Legacy` bound, from when Guaranteed was −998; upstream's own test expects 3 for a request of
/// capacity−1 bytes, so [`OomScoreVariant::Current`] is the default. The two differ only for
/// requests above 99.7 % of capacity.
///
/// `container` must be one of `pod`'s containers (sidecar status is looked up by name among the
/// init containers, as upstream does). `memory_capacity` is the node's capacity in bytes.
pub fn oom_score_adj(
    pod: &Pod,
    container: &Container,
    memory_capacity: u64,
    variant: OomScoreVariant,
) -> i32 {
    let is_sidecar =
        container.is_restartable() && pod.init_containers.iter().any(|c| c.name == container.name);
    oom_rule(
        OomFacts {
            node_critical: pod.is_node_critical(),
            class: class(pod),
            remaining: remaining_pod_memory_per_container(pod),
            sidecar_min_regular: is_sidecar
                .then(|| pod.containers.iter().map(|c| c.requests.memory()).min())
                .flatten(),
        },
        container,
        memory_capacity,
        variant,
    )
}

/// [`oom_score_adj`] when only the pod's class is known (the NRI view, `crate::placement::nri_container`):
/// the pod's priority, pod-level resources and other containers are unknown, so steps 1, the
/// pod-level share of 3, and 4 do not apply.
pub fn oom_score_adj_in_class(
    class: QosClass,
    container: &Container,
    memory_capacity: u64,
    variant: OomScoreVariant,
) -> i32 {
    oom_rule(
        OomFacts {
            node_critical: false,
            class,
            remaining: 0,
            sidecar_min_regular: None,
        },
        container,
        memory_capacity,
        variant,
    )
}

/// What [`oom_score_adj`]'s rule reads about the pod.
struct OomFacts {
    node_critical: bool,
    class: QosClass,
    /// `remainingPodMemReqPerContainer`.
    remaining: i64,
    /// For a sidecar: the smallest memory request among the pod's regular containers.
    sidecar_min_regular: Option<u64>,
}

/// The rule of [`oom_score_adj`], steps 1–5, on the facts it reads.
fn oom_rule(
    pod: OomFacts,
    container: &Container,
    memory_capacity: u64,
    variant: OomScoreVariant,
) -> i32 {
    if pod.node_critical {
        return variant.guaranteed();
    }
    match pod.class {
        QosClass::Guaranteed => return variant.guaranteed(),
        QosClass::BestEffort => return BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {}
    }
    let remaining = pod.remaining;
    let with_share = |r: u64| -> u64 {
        if remaining >= 0 {
            r.saturating_add(remaining.unsigned_abs())
        } else {
            r.saturating_sub(remaining.unsigned_abs())
        }
    };
    let mut adj = linear_oom(with_share(container.requests.memory()), memory_capacity);
    if let Some(min_regular) = pod.sidecar_min_regular {
        adj = adj.min(linear_oom(with_share(min_regular), memory_capacity));
    }
    let adj = adj.clamp(
        i64::from(variant.burstable_min()),
        i64::from(BURSTABLE_MAX_OOM_SCORE_ADJ),
    );
    // Clamped into [2, 999]: the conversion cannot fail.
    i32::try_from(adj).unwrap_or(BURSTABLE_MAX_OOM_SCORE_ADJ)
}

/// `remainingPodMemReqPerContainer` (pkg/kubelet/qos/policy.go, KEP-2837): with a pod-level
/// memory request, `(pod request − aggregated container requests) / number of containers`
/// (Go integer division, so it may be negative only for invalid specs); else 0.
fn remaining_pod_memory_per_container(pod: &Pod) -> i64 {
    let pod_req = match pod.resources.as_ref().map(|r| r.requests.memory()) {
        Some(r) if r > 0 => r,
        _ => return 0,
    };
    let n = pod.containers.len() + pod.init_containers.len();
    if n == 0 {
        return 0;
    }
    let agg = pod.aggregate(|c| &c.requests).memory();
    let diff = i128::from(pod_req) - i128::from(agg);
    i64::try_from(diff / n as i128).unwrap_or(0)
}

/// Never ask for an oom_score_adj below what the runtime can apply: `max(value, floor)`.
///
/// A process without CAP_SYS_RESOURCE cannot lower its oom_score_adj below its current value;
/// runc then fails the container ("can't get final child's PID from pipe"; see
/// `topolet::nri::oom_floor`). `floor` is the runtime's own value
/// (0 on our hosts), detected or configured by the shell.
pub fn clamp_to_floor(value: i32, floor: i32) -> i32 {
    value.max(floor)
}

// ---------------------------------------------------------------------------------------------
// PIDs
// ---------------------------------------------------------------------------------------------

/// The kubelet's `podPidsLimit` semantics (`--pod-max-pids`, pkg/kubelet/cm
/// pod_container_manager_linux.go): a positive value is the limit; 0 and −1 (and any other
/// non-positive value) mean unlimited, i.e. leave pids.max unset.
pub fn pids_limit(pod_pids_limit: i64) -> Option<i64> {
    (pod_pids_limit > 0).then_some(pod_pids_limit)
}

/// Number of exclusive CPUs a container qualifies for under the static CPU manager policy
/// (pkg/kubelet/cm/cpumanager/policy_static.go `guaranteedCPUs`): a Guaranteed pod's container
/// whose CPU request is a positive whole number of CPUs gets that many; otherwise `None` (shared
/// pool). From NRI, pass the class from [`crate::kube::inverse::qos_from_cgroup_parent`] and
/// the request from [`crate::kube::inverse::estimate_cpu_request_millis`]: the shares inverse
/// is exact, so the integer test is exact too for requests up to 256 CPUs.
pub fn exclusive_cpu_count(qos: QosClass, cpu_request_millis: u64) -> Option<u64> {
    (qos == QosClass::Guaranteed
        && cpu_request_millis > 0
        && cpu_request_millis.is_multiple_of(1000))
    .then_some(cpu_request_millis / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::pod::tests::{ctr, pod_of, rl};
    use crate::kube::pod::{ContainerRestartPolicy, Resources};
    use crate::kube::quantity::{parse_millis, parse_value};
    use proptest::prelude::*;

    const MI: u64 = 1 << 20;

    fn res(cpu: &str, mem: &str) -> ResourceList {
        rl(
            (!cpu.is_empty()).then(|| parse_millis(cpu).expect("test quantity")),
            (!mem.is_empty()).then(|| parse_value(mem).expect("test quantity")),
        )
    }

    /// `ResourceConfigForPod`'s CPU values: sums of requests and limits, quota only when every
    /// Burstable container has a limit, −1 when limits are not enforced, BestEffort 2 shares.
    #[test]
    fn pod_cpu_is_the_kubelets_resource_config_for_pod() {
        let g = |cpu: &str| ctr("c", res(cpu, "1Gi"), res(cpu, "1Gi"));
        let p = DEFAULT_CPU_PERIOD_US;
        assert_eq!(
            pod_cpu(QosClass::Guaranteed, &[g("1500m"), g("500m")], p, true),
            PodCpu {
                shares: 2048,
                quota: Some(200_000),
                period: p
            }
        );
        assert_eq!(
            pod_cpu(QosClass::Guaranteed, &[g("2")], p, false).quota,
            Some(-1)
        );
        // 150m + 150m: shares of the sum (307), not the sum of the shares (306).
        assert_eq!(
            pod_cpu(QosClass::Guaranteed, &[g("150m"), g("150m")], p, true).shares,
            307
        );
        let limited = ctr("a", res("250m", ""), res("1", ""));
        let unlimited = ctr("b", res("250m", ""), res("", ""));
        assert_eq!(
            pod_cpu(QosClass::Burstable, std::slice::from_ref(&limited), p, true).quota,
            Some(100_000)
        );
        let both = pod_cpu(QosClass::Burstable, &[limited, unlimited], p, true);
        assert_eq!((both.shares, both.quota), (512, None));
        assert_eq!(
            pod_cpu(
                QosClass::BestEffort,
                &[ctr("x", res("", ""), res("", ""))],
                p,
                true
            ),
            PodCpu {
                shares: 2,
                quota: None,
                period: p
            }
        );
    }

    /// Both shares → weight conversions fix 2 → 1 and 262144 → 10000; the current one maps the
    /// default 1024 to the default weight 100 (the linear one to 39).
    #[test]
    fn shares_to_weight_conversions() {
        assert_eq!(cpu_shares_to_weight(2), 1);
        assert_eq!(cpu_shares_to_weight(1024), 100);
        assert_eq!(cpu_shares_to_weight(MAX_SHARES), 10_000);
        assert_eq!(cpu_shares_to_weight_linear(2), 1);
        assert_eq!(cpu_shares_to_weight_linear(1024), 39);
        assert_eq!(cpu_shares_to_weight_linear(MAX_SHARES), 10_000);
        let mut last = 0;
        for s in (2..=MAX_SHARES).step_by(97) {
            let w = cpu_shares_to_weight(s);
            assert!(w >= last && (1..=10_000).contains(&w), "{s} → {w}");
            last = w;
        }
    }

    /// Upstream `TestComputePodQOS` (pkg/apis/core/v1/helper/qos/qos_test.go), all cases,
    /// transcribed as (name, app containers, init containers, pod-level, expected).
    #[test]
    fn upstream_compute_pod_qos_cases() {
        type C = (&'static str, &'static str, &'static str, &'static str);
        let mk = |cs: &[C]| -> Vec<Container> {
            cs.iter()
                .map(|(rc, rm, lc, lm)| ctr("c", res(rc, rm), res(lc, lm)))
                .collect()
        };
        use QosClass::*;
        type Case = (&'static str, Vec<C>, Vec<C>, Option<C>, QosClass);
        let cases: Vec<Case> = vec![
            (
                "guaranteed",
                vec![("100m", "100Mi", "100m", "100Mi")],
                vec![],
                None,
                Guaranteed,
            ),
            (
                "guaranteed-guaranteed",
                vec![
                    ("100m", "100Mi", "100m", "100Mi"),
                    ("100m", "100Mi", "100m", "100Mi"),
                ],
                vec![],
                None,
                Guaranteed,
            ),
            (
                "best-effort-best-effort",
                vec![("", "", "", ""), ("", "", "", "")],
                vec![],
                None,
                BestEffort,
            ),
            (
                "best-effort",
                vec![("", "", "", "")],
                vec![],
                None,
                BestEffort,
            ),
            (
                "best-effort-burstable",
                vec![("", "", "", ""), ("1", "", "2", "")],
                vec![],
                None,
                Burstable,
            ),
            (
                "best-effort-guaranteed",
                vec![("", "", "", ""), ("10m", "100Mi", "10m", "100Mi")],
                vec![],
                None,
                Burstable,
            ),
            (
                "burstable-cpu-guaranteed-memory",
                vec![("", "100Mi", "", "100Mi")],
                vec![],
                None,
                Burstable,
            ),
            (
                "burstable-no-limits",
                vec![("100m", "100Mi", "", "")],
                vec![],
                None,
                Burstable,
            ),
            (
                "burstable-guaranteed",
                vec![
                    ("1", "100Mi", "2", "100Mi"),
                    ("100m", "100Mi", "100m", "100Mi"),
                ],
                vec![],
                None,
                Burstable,
            ),
            (
                "burstable-unbounded-but-requests-match-limits",
                vec![
                    ("100m", "100Mi", "200m", "200Mi"),
                    ("100m", "100Mi", "", ""),
                ],
                vec![],
                None,
                Burstable,
            ),
            (
                "burstable-1",
                vec![("10m", "100Mi", "100m", "200Mi")],
                vec![],
                None,
                Burstable,
            ),
            (
                "burstable-2",
                vec![("0", "0", "100m", "200Mi")],
                vec![],
                None,
                Burstable,
            ),
            (
                "init-container",
                vec![("", "", "", "")],
                vec![("10m", "100Mi", "100m", "200Mi")],
                None,
                Burstable,
            ),
            (
                "guaranteed-with-pod-level-resources",
                vec![("", "", "", "")],
                vec![],
                Some(("10m", "100Mi", "10m", "100Mi")),
                Guaranteed,
            ),
            (
                "guaranteed-with-pod-and-container-level-resources",
                vec![("3m", "10Mi", "5m", "20Mi")],
                vec![],
                Some(("10m", "100Mi", "10m", "100Mi")),
                Guaranteed,
            ),
            (
                "burstable-with-pod-level-resources",
                vec![("", "", "", "")],
                vec![],
                Some(("10m", "10Mi", "20m", "50Mi")),
                Burstable,
            ),
            (
                "burstable-with-pod-and-container-level-resources",
                vec![("5m", "10Mi", "5m", "10Mi")],
                vec![],
                Some(("10m", "10Mi", "20m", "50Mi")),
                Burstable,
            ),
            (
                "burstable-with-pod-and-container-level-requests",
                vec![("5m", "10Mi", "", "")],
                vec![],
                Some(("10m", "10Mi", "", "")),
                Burstable,
            ),
            (
                "burstable-with-pod-and-container-level-resources-2",
                vec![("5m", "10Mi", "", ""), ("5m", "10Mi", "5m", "10Mi")],
                vec![],
                Some(("10m", "10Mi", "5m", "")),
                Burstable,
            ),
        ];
        for (name, app, init, pod_level, want) in cases {
            let mut pod = pod_of(mk(&app));
            pod.init_containers = mk(&init);
            pod.resources = pod_level.map(|(rc, rm, lc, lm)| Resources {
                requests: res(rc, rm),
                limits: res(lc, lm),
            });
            assert_eq!(class(&pod), want, "{name}");
        }
        // "best-effort-hugepages": hugepages alone do not make a pod Burstable.
        let mut req = res("0", "0");
        req.hugepages.insert(2 * MI, 1 << 30);
        let pod = pod_of(vec![ctr("c", req.clone(), req)]);
        assert_eq!(class(&pod), BestEffort);
        // Extended resources alone neither.
        let mut req = ResourceList::default();
        req.extended.insert("nvidia.com/gpu".into(), 1);
        let pod = pod_of(vec![ctr("c", req.clone(), req)]);
        assert_eq!(class(&pod), BestEffort);
    }

    /// The three class definitions (`GetPodQOS`, `pkg/apis/core/v1/helper/qos/qos.go`), one row
    /// each, including
    /// "a container with only limits has requests equal to limits" (applied by `pod_input`'s
    /// defaulting; here the defaulted form).
    #[test]
    fn kubelet_qos_class_rows() {
        let g = pod_of(vec![ctr("c", res("1", "1Gi"), res("1", "1Gi"))]);
        assert_eq!(class(&g), QosClass::Guaranteed);
        let b = pod_of(vec![ctr("c", res("500m", "1Gi"), res("1", "2Gi"))]);
        assert_eq!(class(&b), QosClass::Burstable);
        let be = pod_of(vec![ctr("c", res("", ""), res("", ""))]);
        assert_eq!(class(&be), QosClass::BestEffort);
    }

    /// Upstream `TestMilliCPUToQuota` (pkg/kubelet/cm/helpers_linux_test.go and
    /// kuberuntime's copy): every row, default period. All match.
    #[test]
    fn upstream_milli_cpu_to_quota() {
        for (input, quota) in [
            (0, 0),
            (5, 1000),
            (9, 1000),
            (10, 1000),
            (200, 20000),
            (500, 50000),
            (1000, 100000),
            (1500, 150000),
        ] {
            assert_eq!(
                milli_cpu_to_quota(input, DEFAULT_CPU_PERIOD_US),
                quota,
                "{input}"
            );
        }
        // Custom period (CustomCPUCFSQuotaPeriod), same rule.
        assert_eq!(milli_cpu_to_quota(1500, 50_000), 75_000);
        assert_eq!(milli_cpu_to_quota(1, 50_000), 1000);
    }

    #[test]
    fn milli_cpu_to_shares_table() {
        // Values used by upstream TestResourceConfigForPod (MilliCPUToShares(100), (200)) and
        // the bounds of helpers_linux.go.
        for (m, s) in [
            (0, 2),
            (1, 2),
            (2, 2),
            (3, 3),
            (100, 102),
            (200, 204),
            (500, 512),
            (1000, 1024),
            (2000, 2048),
            (256_000, 262_144),
            (300_000, 262_144),
            (u64::MAX, 262_144),
        ] {
            assert_eq!(milli_cpu_to_shares(m), s, "{m}");
        }
    }

    /// The container cgroup's CPU and memory values per QoS class, as the kubelet computes them
    /// (`pkg/kubelet/cm/helpers_linux.go` `MilliCPUToShares` / `MilliCPUToQuota`,
    /// `kuberuntime_container_linux.go` `calculateLinuxResources`):
    /// cpu.shares BestEffort 2, Burstable/Guaranteed requests.cpu×1024;
    /// cpu.cfs_quota_us BestEffort −1 (i.e. no quota: we send none), Burstable/Guaranteed
    /// limits.cpu×100 (per millicore, = cpu×100000 per CPU).
    /// Memory: memory.limit_in_bytes BestEffort unlimited
    /// (9223372036854771712 = no limit), Burstable/Guaranteed limits.memory.
    #[test]
    fn kubelet_container_cgroup_rows() {
        let period = DEFAULT_CPU_PERIOD_US;
        let be = ctr("be", res("", ""), res("", ""));
        assert_eq!(container_cpu_shares(&be), 2);
        assert_eq!(
            container_cpu_quota(&be, period, false, ExclusiveCpuQuota::Disable),
            CpuQuota::Unset
        );
        assert_eq!(be.limits.memory_bytes, None);

        let bu = ctr("bu", res("500m", "256Mi"), res("2", "1Gi"));
        assert_eq!(container_cpu_shares(&bu), 512); // 0.5 × 1024
        assert_eq!(
            container_cpu_quota(&bu, period, false, ExclusiveCpuQuota::Disable),
            CpuQuota::Micros(200_000) // 2000m × 100
        );
        assert_eq!(bu.limits.memory_bytes, Some(1 << 30));

        let gu = ctr("gu", res("2", "1Gi"), res("2", "1Gi"));
        assert_eq!(container_cpu_shares(&gu), 2048);
        assert_eq!(
            container_cpu_quota(&gu, period, false, ExclusiveCpuQuota::Disable),
            CpuQuota::Micros(200_000)
        );
        // Exclusive CPUs: quota removed (-1) unless kept.
        assert_eq!(
            container_cpu_quota(&gu, period, true, ExclusiveCpuQuota::Disable).to_cri(),
            -1
        );
        assert_eq!(
            container_cpu_quota(&gu, period, true, ExclusiveCpuQuota::Keep).to_cri(),
            200_000
        );
        // No request but a limit: shares from the limit.
        let lim_only = ctr("l", res("", ""), res("1500m", ""));
        assert_eq!(container_cpu_shares(&lim_only), 1536);
    }

    /// The pod cgroup (`pkg/kubelet/cm/helpers_linux.go` `ResourceConfigForPod`): its
    /// shares/quota/memory are the sums
    /// of the containers' (BestEffort: shares 2, no quota, no memory limit).
    #[test]
    fn kubelet_pod_cgroup_rows() {
        let pod = pod_of(vec![
            ctr("a", res("500m", "256Mi"), res("1", "512Mi")),
            ctr("b", res("250m", "128Mi"), res("500m", "256Mi")),
        ]);
        let req = pod.effective_requests();
        let lim = pod.effective_limits();
        assert_eq!(milli_cpu_to_shares(req.cpu()), 768); // (0.5 + 0.25) × 1024
        assert_eq!(
            milli_cpu_to_quota(lim.cpu(), DEFAULT_CPU_PERIOD_US),
            150_000
        );
        assert_eq!(lim.memory(), 768 * MI);
        let be = pod_of(vec![ctr("a", res("", ""), res("", ""))]);
        assert_eq!(milli_cpu_to_shares(be.effective_requests().cpu()), 2);
        assert_eq!(milli_cpu_to_quota(be.effective_limits().cpu(), 100_000), 0);
    }

    /// Upstream `TestGetContainerOOMScoreAdjust` (pkg/kubelet/qos/policy_test.go, current
    /// version with sidecar cases): every case and container, transcribed as (low, high) bounds.
    /// All match under `Current`. Under `Legacy` the old file's expectations (−998 Guaranteed,
    /// 2 for request-no-limit) hold.
    #[test]
    fn upstream_oom_score_adj_cases() {
        const STD: u64 = 8_000_000_000;
        let cv = OomScoreVariant::Current;
        let one =
            |name: &str, req: ResourceList, lim: ResourceList| pod_of(vec![ctr(name, req, lim)]);
        let cpu_limit = one("cpu-limit", res("", ""), res("10", ""));
        let memory_limit_cpu_request =
            one("memory-limit-cpu-request", res("0", ""), res("", "10G"));
        let zero_memory_limit = one("zero-memory-limit", res("", ""), res("", "0"));
        let no_request_limit = one("no-request-limit", res("", ""), res("", ""));
        let equal = one("equal", res("5m", "10G"), res("5m", "10G"));
        let half = one("half", res("5m", &(STD / 2).to_string()), res("", "10G"));
        let request_no_limit = one("rnl", res("5m", &(STD - 1).to_string()), res("", ""));
        let cluster_critical = Pod {
            priority: Some(2_000_000_000),
            priority_class_name: Some("system-cluster-critical".into()),
            ..one("cluster-critical", res("", ""), res("", ""))
        };
        let node_critical = Pod {
            priority: Some(2_000_001_000),
            priority_class_name: Some("system-node-critical".into()),
            ..one("node-critical", res("", ""), res("", ""))
        };
        // Sidecar fixtures: main and init request STD/8 with limit 1000 + STD/8.
        let sample_lim = res("", &(1000 + STD / 8).to_string());
        let main = ctr(
            "main-1",
            res("", &(STD / 8).to_string()),
            sample_lim.clone(),
        );
        let init = ctr(
            "init-container",
            res("", &(STD / 8).to_string()),
            sample_lim.clone(),
        );
        let side = |name: &str, mem: u64| Container {
            restart_policy: Some(ContainerRestartPolicy::Always),
            ..ctr(name, res("", &mem.to_string()), sample_lim.clone())
        };
        let with_init = |inits: Vec<Container>| Pod {
            init_containers: inits,
            ..pod_of(vec![main.clone()])
        };
        let unique = pod_of(vec![main.clone()]);
        let mixed_unique = with_init(vec![init.clone()]);
        let same = with_init(vec![init.clone(), side("sidecar-container", STD / 8)]);
        let small = with_init(vec![
            init.clone(),
            side("sidecar-small-container", STD / 20),
        ]);
        let big = with_init(vec![init.clone(), side("sidecar-big-container", STD / 2)]);

        // (pod, capacity, [(container name, low, high)])
        type Case<'a> = (&'a str, &'a Pod, u64, Vec<(&'a str, i32, i32)>);
        let cases: Vec<Case> = vec![
            (
                "cpu-limit",
                &cpu_limit,
                4_000_000_000,
                vec![("cpu-limit", 999, 999)],
            ),
            (
                "memory-limit-cpu-request",
                &memory_limit_cpu_request,
                8_000_000_000,
                vec![("memory-limit-cpu-request", 999, 999)],
            ),
            (
                "zero-memory-limit",
                &zero_memory_limit,
                7_230_457_451,
                vec![("zero-memory-limit", 1000, 1000)],
            ),
            (
                "no-request-limit",
                &no_request_limit,
                4_000_000_000,
                vec![("no-request-limit", 1000, 1000)],
            ),
            (
                "equal-request-limit-cpu-memory",
                &equal,
                123_456_789,
                vec![("equal", -997, -997)],
            ),
            (
                "cpu-unlimited-memory-limited-with-requests",
                &half,
                STD,
                vec![("half", 495, 505)],
            ),
            (
                "request-no-limit",
                &request_no_limit,
                STD,
                vec![("rnl", 3, 3)],
            ),
            (
                "cluster-critical",
                &cluster_critical,
                4_000_000_000,
                vec![("cluster-critical", 1000, 1000)],
            ),
            (
                "node-critical",
                &node_critical,
                4_000_000_000,
                vec![("node-critical", -997, -997)],
            ),
            (
                "burstable-unique-container-pod",
                &unique,
                STD,
                vec![("main-1", 875, 880)],
            ),
            (
                "burstable-mixed-unique-main-container-pod",
                &mixed_unique,
                STD,
                vec![("init-container", 875, 880), ("main-1", 875, 880)],
            ),
            (
                "burstable-mixed-multi-container-small-sidecar-pod",
                &small,
                STD,
                vec![
                    ("init-container", 875, 880),
                    ("sidecar-small-container", 875, 875),
                    ("main-1", 875, 875),
                ],
            ),
            (
                "burstable-mixed-multi-container-sample-request-pod",
                &same,
                STD,
                vec![
                    ("init-container", 875, 880),
                    ("sidecar-container", 875, 875),
                    ("main-1", 875, 875),
                ],
            ),
            (
                "burstable-mixed-multi-container-big-sidecar-container-pod",
                &big,
                STD,
                vec![
                    ("init-container", 875, 880),
                    ("sidecar-big-container", 500, 500),
                    ("main-1", 875, 875),
                ],
            ),
        ];
        for (name, pod, cap, want) in cases {
            for (cname, lo, hi) in want {
                let c = pod
                    .all_containers()
                    .map(|(_, c)| c)
                    .find(|c| c.name == cname)
                    .expect("container in fixture");
                let adj = oom_score_adj(pod, c, cap, cv);
                assert!(
                    lo <= adj && adj <= hi,
                    "{name}/{cname}: {adj} not in [{lo}, {hi}]"
                );
            }
        }
        let lv = OomScoreVariant::Legacy;
        assert_eq!(
            oom_score_adj(&equal, &equal.containers[0], 123_456_789, lv),
            -998
        );
        assert_eq!(
            oom_score_adj(&request_no_limit, &request_no_limit.containers[0], STD, lv),
            2
        );
    }

    /// The kubelet's oom_score_adj table (`pkg/kubelet/qos/policy.go`), one row per class, plus
    /// the formula at several request/capacity ratios, and the node-critical rule
    /// (`GetContainerOOMScoreAdjust`: a node-critical pod scores as Guaranteed).
    #[test]
    fn kubelet_oom_score_adj_rows() {
        let cap = 16 * (1u64 << 30);
        let cv = OomScoreVariant::Current;
        let g = pod_of(vec![ctr("c", res("1", "1Gi"), res("1", "1Gi"))]);
        assert_eq!(oom_score_adj(&g, &g.containers[0], cap, cv), -997);
        let be = pod_of(vec![ctr("c", res("", ""), res("", ""))]);
        assert_eq!(oom_score_adj(&be, &be.containers[0], cap, cv), 1000);
        for (mem, want) in [
            ("1Gi", 1000 - 62), // 1000·1/16 = 62.5 → 62
            ("8Gi", 500),
            ("16Gi", 3), // 0 → clamped to 3 (seed says 2: legacy bound)
            ("32Gi", 3),
            ("1Mi", 999), // 1000 − 0 = 1000 → 999
            ("0", 999),   // Burstable by CPU only
        ] {
            let p = pod_of(vec![ctr("c", res("100m", mem), res("", ""))]);
            assert_eq!(oom_score_adj(&p, &p.containers[0], cap, cv), want, "{mem}");
        }
        let p = pod_of(vec![ctr("c", res("100m", "16Gi"), res("", ""))]);
        assert_eq!(
            oom_score_adj(&p, &p.containers[0], cap, OomScoreVariant::Legacy),
            2
        );
        // Node-critical BestEffort pod still gets −997.
        let crit = Pod {
            priority_class_name: Some("system-node-critical".into()),
            ..be.clone()
        };
        assert_eq!(oom_score_adj(&crit, &crit.containers[0], cap, cv), -997);
        // Cluster-critical is not node-critical: normal rule.
        let cc = Pod {
            priority_class_name: Some("system-cluster-critical".into()),
            ..be
        };
        assert_eq!(oom_score_adj(&cc, &cc.containers[0], cap, cv), 1000);
    }

    #[test]
    fn sidecar_oom_not_above_smallest_app() {
        let cap = 1000 * MI;
        let mut sidecar = ctr("side", res("10m", "10Mi"), res("", ""));
        sidecar.restart_policy = Some(ContainerRestartPolicy::Always);
        let mut pod = pod_of(vec![
            ctr("a", res("10m", "500Mi"), res("", "")),
            ctr("b", res("10m", "200Mi"), res("", "")),
        ]);
        pod.init_containers = vec![sidecar.clone()];
        // Own value 990, smallest app (200Mi) 800 → 800.
        assert_eq!(
            oom_score_adj(&pod, &sidecar, cap, OomScoreVariant::Current),
            800
        );
        assert_eq!(
            oom_score_adj(&pod, &pod.containers[1], cap, OomScoreVariant::Current),
            800
        );
        // A plain init container keeps its own value.
        let mut plain = sidecar.clone();
        plain.restart_policy = None;
        pod.init_containers = vec![plain.clone()];
        assert_eq!(
            oom_score_adj(&pod, &plain, cap, OomScoreVariant::Current),
            990
        );
    }

    #[test]
    fn pod_level_memory_share() {
        // KEP-2837: pod requests 600Mi, containers 100Mi + 100Mi → 200Mi each extra.
        let cap = 1000 * MI;
        let mut pod = pod_of(vec![
            ctr("a", res("", "100Mi"), res("", "")),
            ctr("b", res("", "100Mi"), res("", "")),
        ]);
        pod.resources = Some(Resources {
            requests: res("", "600Mi"),
            limits: res("", ""),
        });
        assert_eq!(
            oom_score_adj(&pod, &pod.containers[0], cap, OomScoreVariant::Current),
            700
        );
    }

    #[test]
    fn floor_and_pids() {
        assert_eq!(clamp_to_floor(-997, 0), 0);
        assert_eq!(clamp_to_floor(500, 0), 500);
        assert_eq!(clamp_to_floor(1000, 0), 1000);
        assert_eq!(clamp_to_floor(-997, -999), -997);
        assert_eq!(pids_limit(1024), Some(1024));
        assert_eq!(pids_limit(0), None);
        assert_eq!(pids_limit(-1), None);
    }

    proptest! {
        /// The summed formulation (`GetPodQOS` of the v1 helper) agrees with the newer
        /// per-container one (`resourceQOS` aggregated: any Burstable container, or a mix of
        /// Guaranteed and BestEffort containers, makes the pod Burstable) for every valid spec,
        /// i.e. whenever request ≤ limit where a limit is set.
        #[test]
        fn class_matches_per_container_formulation(
            spec in proptest::collection::vec((0u64..3, 0u64..3, 0u64..3, 0u64..3), 1..5)
        ) {
            let containers: Vec<Container> = spec
                .iter()
                .map(|&(rc, lc, rm, lm)| {
                    // Keep request <= limit when a limit is set (API validation).
                    let rc = if lc > 0 { rc.min(lc) } else { rc };
                    let rm = if lm > 0 { rm.min(lm) } else { rm };
                    let o = |v: u64| (v > 0).then_some(v);
                    ctr("c", rl(o(rc), o(rm)), rl(o(lc), o(lm)))
                })
                .collect();
            let per_container = |c: &Container| {
                let (rc, lc, rm, lm) = (c.requests.cpu(), c.limits.cpu(), c.requests.memory(), c.limits.memory());
                if rc != lc || rm != lm {
                    QosClass::Burstable
                } else if rc == 0 && rm == 0 {
                    QosClass::BestEffort
                } else if rc > 0 && rm > 0 {
                    QosClass::Guaranteed
                } else {
                    QosClass::Burstable
                }
            };
            let mut want = per_container(&containers[0]);
            for c in &containers[1..] {
                if per_container(c) != want {
                    want = QosClass::Burstable;
                }
            }
            prop_assert_eq!(class(&pod_of(containers)), want);
        }
    }
}
