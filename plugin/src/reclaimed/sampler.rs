//! One reading of what the reclaimed-CPU loop measures — every CPU's busy time (exact run time
//! where cgroup v1 offers it, else `/proc/stat`'s ticks: [`CpuTimeSource`]) and
//! the batch pods' (and, with `usage = "pods"`, the regular pods') cgroup CPU time — and the
//! rates between two readings, in milli-CPU.
//!
//! Regular usage, the formula's middle term (`topolet_core::reclaimed::budget`):
//! - `cpus`: the pool's busy time minus what the batch pods used (they run on the pool only);
//! - `pods`: the regular pods' cgroups, minus the busy time of the exclusive CPUs (their
//!   exclusive containers' work is not on the pool).
//!
//! With `cpus`, the reserved CPUs' busy time beyond their capacity less the margin is added
//! (regular pods float over them: `topolet_core::reclaimed::spill`), shared among the NUMA
//! nodes in proportion to their pool CPUs; with `pods` their own time counts wherever it ran.
//!
//! Per NUMA node, `cpus` takes each node's busy time and the batch pods' time in proportion to
//! it; `pods` splits the node's regular usage in proportion to each node's non-batch busy time
//! (cgroup v2 has no per-CPU usage). The node's number is what the scheduler sees; the zones'
//! are informational (NodeResourceTopology).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use crate::host::cgroupfs::cgroup_path;
use crate::host::cpu_usage::{busy_millis, cgroup_usage_ns, CpuTicks, CpuTimeSource};
use crate::host::pod_cgroup::{CpuController, PodDir};
use crate::nri::handlers::ReclaimedInputs;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::reclaimed::{Spill, UsageSource};

/// One reading.
#[derive(Debug, Clone)]
pub struct Reading {
    pub at: Instant,
    pub cpus: BTreeMap<usize, CpuTicks>,
    /// Batch pod uid → its cgroup's CPU time (ns).
    pub batch: BTreeMap<String, u64>,
    /// Regular pod cgroup parent → its cgroup's CPU time (ns), with `usage = "pods"`.
    pub regular: BTreeMap<String, u64>,
    /// Batch pods whose cgroup exists but could not be read: (`namespace/name`, error).
    pub batch_failed: Vec<(String, String)>,
}

/// Takes a reading. Fails when the CPUs' busy time cannot be read; a pod whose cgroup is gone
/// (it just ended) is left out.
pub fn read(
    proc_root: &Path,
    controller: &CpuController,
    cpu_time: &CpuTimeSource,
    inputs: &ReclaimedInputs,
    usage: UsageSource,
) -> Result<Reading, String> {
    let cpus = cpu_time.read(proc_root).map_err(|e| e.to_string())?;
    let usage_of = |parent: &str| -> Option<u64> {
        let dir = PodDir {
            version: controller.version,
            dir: controller.mount_point.join(cgroup_path(parent)?),
        };
        match cgroup_usage_ns(&dir) {
            Ok(ns) => Some(ns),
            Err(e) => {
                tracing::debug!(cgroup = %dir.dir.display(), error = %e, "reclaimed CPU: pod cgroup not readable (gone?)");
                None
            }
        }
    };
    let mut batch = BTreeMap::new();
    let mut batch_failed = Vec::new();
    for p in &inputs.batch {
        let Some(rel) = cgroup_path(&p.cgroup_parent) else {
            batch_failed.push((
                p.pod_ref.clone(),
                format!("cgroup parent {:?} is not a cgroup path", p.cgroup_parent),
            ));
            continue;
        };
        let dir = PodDir {
            version: controller.version,
            dir: controller.mount_point.join(rel),
        };
        match cgroup_usage_ns(&dir) {
            Ok(ns) => {
                batch.insert(p.uid.clone(), ns);
            }
            // Gone: the pod just ended.
            Err(_) if !dir.dir.exists() => {}
            Err(e) => batch_failed.push((p.pod_ref.clone(), e.to_string())),
        }
    }
    let regular = match usage {
        UsageSource::Cpus => BTreeMap::new(),
        UsageSource::Pods => inputs
            .regular_pods
            .iter()
            .filter_map(|parent| Some((parent.clone(), usage_of(parent)?)))
            .collect(),
    };
    Ok(Reading {
        at: Instant::now(),
        cpus,
        batch,
        regular,
        batch_failed,
    })
}

/// What happened between two readings, in milli-CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rates {
    /// Busy time of the pool's CPUs, per NUMA node.
    pub zone_busy: BTreeMap<usize, u64>,
    /// Busy time of the exclusive CPUs.
    pub exclusive_busy: u64,
    /// Busy time of the shared pool's reserved CPUs.
    pub reserved_busy: u64,
    /// How many reserved CPUs that is, × 1000.
    pub reserved_millis: u64,
    /// The batch pods' CPU time.
    pub batch: u64,
    /// The regular pods' CPU time (`usage = "pods"`).
    pub regular_pods: u64,
}

impl Rates {
    pub fn pool_busy(&self) -> u64 {
        self.zone_busy.values().sum()
    }
}

fn busy(before: &Reading, after: &Reading, cpus: &CpuSet) -> u64 {
    cpus.iter()
        .filter_map(|c| Some(busy_millis(*before.cpus.get(&c)?, *after.cpus.get(&c)?)))
        .sum()
}

fn cgroup_rate(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, ns: u128) -> u64 {
    if ns == 0 {
        return 0;
    }
    let used: u128 = after
        .iter()
        .filter_map(|(k, a)| Some(u128::from(a.saturating_sub(*before.get(k)?))))
        .sum();
    u64::try_from(used * 1000 / ns).unwrap_or(u64::MAX)
}

/// Each batch pod's CPU time between `before` and `after`, in milli-CPU (a pod missing from
/// either reading is left out).
pub fn batch_rates(before: &Reading, after: &Reading) -> BTreeMap<String, u64> {
    let ns = after.at.saturating_duration_since(before.at).as_nanos();
    if ns == 0 {
        return BTreeMap::new();
    }
    after
        .batch
        .iter()
        .filter_map(|(uid, a)| {
            let used = u128::from(a.saturating_sub(*before.batch.get(uid)?));
            Some((
                uid.clone(),
                u64::try_from(used * 1000 / ns).unwrap_or(u64::MAX),
            ))
        })
        .collect()
}

/// The rates between `before` and `after` for the pool and exclusive CPUs of `inputs`.
pub fn rates(before: &Reading, after: &Reading, inputs: &ReclaimedInputs) -> Rates {
    let ns = after.at.saturating_duration_since(before.at).as_nanos();
    Rates {
        zone_busy: inputs
            .zones
            .iter()
            .map(|(n, cpus)| (*n, busy(before, after, cpus)))
            .collect(),
        exclusive_busy: busy(before, after, &inputs.exclusive),
        reserved_busy: busy(before, after, &inputs.reserved),
        reserved_millis: inputs.reserved.len() as u64 * 1000,
        batch: cgroup_rate(&before.batch, &after.batch, ns),
        regular_pods: cgroup_rate(&before.regular, &after.regular, ns),
    }
}

/// What [`regular`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Regular {
    pub node: u64,
    pub zones: BTreeMap<usize, u64>,
    /// The reserved CPUs' terms (what of their use was counted).
    pub spill: Spill,
}

/// Regular usage for the node and per NUMA node (see the module's doc); `margin_percent` is the
/// formula's, the reserved CPUs' headroom.
pub fn regular(
    rates: &Rates,
    usage: UsageSource,
    zone_cpus: &[(usize, CpuSet)],
    margin_percent: u8,
) -> Regular {
    let spill = Spill::compute(
        usage,
        rates.reserved_millis,
        rates.reserved_busy,
        margin_percent,
    );
    let (node, mut zones) = pool_regular(rates, usage, zone_cpus);
    let sizes: u64 = zone_cpus.iter().map(|(_, c)| c.len() as u64).sum();
    if spill.spill_millis > 0 && sizes > 0 {
        for (n, c) in zone_cpus {
            let share = u128::from(spill.spill_millis) * c.len() as u128 / u128::from(sizes);
            *zones.entry(*n).or_insert(0) += share as u64;
        }
    }
    Regular {
        node: node + spill.spill_millis,
        zones,
        spill,
    }
}

/// The regular use of the pool's own CPUs.
fn pool_regular(
    rates: &Rates,
    usage: UsageSource,
    zone_cpus: &[(usize, CpuSet)],
) -> (u64, BTreeMap<usize, u64>) {
    let pool = rates.pool_busy();
    // The batch pods' time on each NUMA node, in proportion to its busy time.
    let batch_in = |busy: u64| {
        if pool == 0 {
            0
        } else {
            (u128::from(rates.batch.min(pool)) * u128::from(busy) / u128::from(pool)) as u64
        }
    };
    match usage {
        UsageSource::Cpus => {
            let zones = rates
                .zone_busy
                .iter()
                .map(|(n, b)| (*n, b.saturating_sub(batch_in(*b))))
                .collect();
            (pool.saturating_sub(rates.batch), zones)
        }
        UsageSource::Pods => {
            let node = rates.regular_pods.saturating_sub(rates.exclusive_busy);
            let weights: BTreeMap<usize, u64> = rates
                .zone_busy
                .iter()
                .map(|(n, b)| (*n, b.saturating_sub(batch_in(*b))))
                .collect();
            let mut total: u64 = weights.values().sum();
            let weights = if total == 0 {
                let sizes: BTreeMap<usize, u64> = zone_cpus
                    .iter()
                    .map(|(n, c)| (*n, c.len() as u64))
                    .collect();
                total = sizes.values().sum();
                sizes
            } else {
                weights
            };
            let zones = weights
                .iter()
                .map(|(n, w)| {
                    let share = if total == 0 {
                        0
                    } else {
                        (u128::from(node) * u128::from(*w) / u128::from(total)) as u64
                    };
                    (*n, share)
                })
                .collect();
            (node, zones)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn reading(at: Instant, ticks: &[(usize, u64, u64)], batch: &[(&str, u64)]) -> Reading {
        Reading {
            at,
            cpus: ticks
                .iter()
                .map(|&(c, busy, total)| (c, CpuTicks { busy, total }))
                .collect(),
            batch: batch.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            regular: BTreeMap::new(),
            batch_failed: Vec::new(),
        }
    }

    fn inputs() -> ReclaimedInputs {
        ReclaimedInputs {
            pool: CpuSet::parse("1-3").unwrap(),
            exclusive: CpuSet::parse("0").unwrap(),
            reserved: CpuSet::parse("4").unwrap(),
            zones: vec![
                (0, CpuSet::parse("1").unwrap()),
                (1, CpuSet::parse("2-3").unwrap()),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn cpus_mode_is_the_pools_busy_time_minus_the_batch_pods() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        // CPU 1: 50 % busy, CPU 2: 100 %, CPU 3: 50 %; the batch pod used 0.6 CPU.
        let a = reading(
            t0,
            &[(0, 0, 0), (1, 0, 0), (2, 0, 0), (3, 0, 0)],
            &[("b", 0)],
        );
        let b = reading(
            t1,
            &[(0, 100, 100), (1, 50, 100), (2, 100, 100), (3, 50, 100)],
            &[("b", 600_000_000)],
        );
        let r = rates(&a, &b, &inputs());
        assert_eq!(r.zone_busy, BTreeMap::from([(0, 500), (1, 1500)]));
        assert_eq!(r.exclusive_busy, 1000);
        assert_eq!(r.batch, 600);
        let Regular { node, zones, .. } = regular(&r, UsageSource::Cpus, &inputs().zones, 20);
        assert_eq!(node, 1400);
        // The batch pod's 600 split 1:3 over the zones' busy time.
        assert_eq!(zones, BTreeMap::from([(0, 350), (1, 1050)]));
    }

    #[test]
    fn pods_mode_counts_regular_pods_less_their_exclusive_cpus() {
        let r = Rates {
            zone_busy: BTreeMap::from([(0, 1000), (1, 1000)]),
            exclusive_busy: 1000,
            batch: 0,
            regular_pods: 1600,
            ..Default::default()
        };
        let Regular { node, zones, .. } = regular(&r, UsageSource::Pods, &inputs().zones, 20);
        assert_eq!(node, 600);
        assert_eq!(zones, BTreeMap::from([(0, 300), (1, 300)]));
        // Nothing busy: split by the zones' pool size (1 and 2 CPUs).
        let idle = Rates {
            regular_pods: 300,
            zone_busy: BTreeMap::from([(0, 0), (1, 0)]),
            ..Default::default()
        };
        let Regular { zones, .. } = regular(&idle, UsageSource::Pods, &inputs().zones, 20);
        assert_eq!(zones, BTreeMap::from([(0, 100), (1, 200)]));
    }

    #[test]
    fn a_pod_seen_in_one_reading_only_adds_nothing() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(500);
        let a = reading(t0, &[], &[("old", 0)]);
        let b = reading(t1, &[], &[("new", 400_000_000)]);
        assert_eq!(rates(&a, &b, &inputs()).batch, 0);
    }

    #[test]
    fn a_regular_pod_on_the_reserved_cpu_counts_beyond_its_headroom() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        // The pool (CPUs 1-3) idle; a Burstable pod spins on reserved CPU 4 (100 % busy).
        let a = reading(t0, &[(1, 0, 0), (2, 0, 0), (3, 0, 0), (4, 0, 0)], &[]);
        let b = reading(
            t1,
            &[(1, 0, 100), (2, 0, 100), (3, 0, 100), (4, 100, 100)],
            &[],
        );
        let r = rates(&a, &b, &inputs());
        assert_eq!((r.reserved_busy, r.reserved_millis), (1000, 1000));
        let cpus = regular(&r, UsageSource::Cpus, &inputs().zones, 20);
        // 1000m busy − headroom 800m: 200m counted, shared 1:2 by the zones' pool CPUs.
        assert_eq!(cpus.spill.spill_millis, 200);
        assert_eq!(cpus.node, 200);
        assert_eq!(cpus.zones, BTreeMap::from([(0, 66), (1, 133)]));
        // The pods' own time already counts it: nothing added.
        let pods = regular(&r, UsageSource::Pods, &inputs().zones, 20);
        assert_eq!(pods.spill.spill_millis, 0);
        assert_eq!(pods.node, 0);
    }
}
