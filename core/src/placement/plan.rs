//! `topolet plan`: admit a list of pods in order on a machine and report what every container
//! would get — the operators' what-if tool and our acceptance interface.
//!
//! Containers on the shared pool are reported with the shared pool as it stands after every pod
//! has been admitted (topolet keeps shared containers on the current pool as exclusive grants
//! come and go). Refused containers are reported with `admitted: false` and the error.

use serde::Serialize;

use crate::kube::pod::{ContainerRef, Pod};
use crate::kube::qos;
use crate::machine::topology::Topology;
use crate::managers::topology::hints::NumaMask;
use crate::placement::settings::PlacementSettings;
use crate::placement::{Placement, PlacementError};

/// One container's line in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedContainer {
    /// `namespace/name`.
    pub pod: String,
    pub container: String,
    pub init: bool,
    pub qos: String,
    pub admitted: bool,
    pub error: Option<String>,
    pub exclusive: bool,
    pub cpuset: Option<String>,
    pub mems: Option<String>,
    pub numa_affinity: Option<String>,
    pub cpu_shares: Option<u64>,
    /// -1 = unlimited.
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub memory_limit: Option<u64>,
    pub oom_score_adj: Option<i32>,
    pub pids_limit: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
}

/// Which of a container's values follow the shared pool.
#[derive(Debug, Clone, Copy, Default)]
struct OnShared {
    cpus: bool,
    mems: bool,
}

/// The pools after admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pools {
    pub reserved: String,
    pub shared: String,
}

/// The whole plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanOutput {
    pub containers: Vec<PlannedContainer>,
    pub pools: Pools,
}

/// Admits `pods` in order (each pod's init containers first) on `topology` under `settings`.
/// The oom_score_adj floor is `settings.oom_score_adj_floor` (`[qos] oom_score_adj_floor`) when set (no floor otherwise: a plan
/// describes what the kubelet's rules give).
pub fn plan(
    topology: &Topology,
    settings: &PlacementSettings,
    pods: &[Pod],
) -> Result<PlanOutput, PlacementError> {
    let (mut placement, _warnings) = Placement::new(topology, settings)?;
    let floor = settings.oom_score_adj_floor.unwrap_or(-1000);
    let mut rows: Vec<(PlannedContainer, OnShared)> = Vec::new();
    for pod in pods {
        let class = qos::class(pod);
        for (which, result) in placement.admit_pod(pod, floor) {
            let Some(c) = pod.container(which) else {
                continue;
            };
            let mut row = PlannedContainer {
                pod: pod.key(),
                container: c.name.clone(),
                init: matches!(which, ContainerRef::Init(_)),
                qos: class.to_string(),
                admitted: result.is_ok(),
                error: None,
                exclusive: false,
                cpuset: None,
                mems: None,
                numa_affinity: None,
                cpu_shares: None,
                cpu_quota: None,
                cpu_period: None,
                memory_limit: None,
                oom_score_adj: None,
                pids_limit: None,
                devices: Vec::new(),
            };
            let on_shared = match result {
                Ok(r) => {
                    row.exclusive = r.exclusive;
                    row.cpuset = Some(r.cpuset.to_string());
                    row.mems = Some(r.mems.to_string());
                    row.numa_affinity = r.numa_affinity.map(|m: NumaMask| m.to_string());
                    row.cpu_shares = Some(r.cpu_shares);
                    row.cpu_quota = Some(if r.cpu_quota == 0 { -1 } else { r.cpu_quota });
                    row.cpu_period = Some(r.cpu_period);
                    row.memory_limit = r.memory_limit;
                    row.oom_score_adj = Some(r.oom_score_adj);
                    row.pids_limit = r.pids_limit;
                    row.devices = r.devices;
                    OnShared {
                        cpus: !r.exclusive,
                        mems: !r.exclusive && !r.memory_pinned,
                    }
                }
                Err(e) => {
                    row.error = Some(e.error.to_string());
                    OnShared::default()
                }
            };
            rows.push((row, on_shared));
        }
    }
    let shared = placement.shared_pool().to_string();
    let shared_mems = placement.shared_mems_effective().to_string();
    let containers = rows
        .into_iter()
        .map(|(mut row, on_shared)| {
            if on_shared.cpus {
                row.cpuset = Some(shared.clone());
            }
            if on_shared.mems {
                row.mems = Some(shared_mems.clone());
            }
            row
        })
        .collect();
    Ok(PlanOutput {
        containers,
        pools: Pools {
            reserved: placement.reserved().to_string(),
            shared,
        },
    })
}
