//! `topolet plan`: admit a list of pods in order on a machine and report what every container
//! would get — the operators' what-if tool and our acceptance interface.
//!
//! Containers on the shared pool are reported with the shared pool as it stands after every pod
//! has been admitted (topolet keeps shared containers on the current pool as exclusive grants
//! come and go). Refused containers are reported with `admitted: false` and the error.
//!
//! The devices each container was given ([`PlanDevices`], `topolet plan --devices`) are its
//! device set (`crate::managers::observed_devices`), as a node's device nodes would give it:
//! their NUMA nodes are topology hints, as at a real admission.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::kube::pod::{ContainerRef, Pod};
use crate::kube::qos;
use crate::machine::topology::Topology;
use crate::managers::observed_devices::{self, DeviceSource, ObservedDevice};
use crate::managers::topology::hints::NumaMask;
use crate::placement::settings::PlacementSettings;
use crate::placement::{Candidate, Placement, PlacementError};

/// The devices given to the plan's containers: `namespace/pod/container` → devices.
pub type PlanDevices = BTreeMap<String, Vec<ObservedDevice>>;

/// One device of `--devices`: `{"id": "/dev/nvidia1", "numa": 1}`; `source` defaults to
/// `device-node`, `numa` to none (no locality).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanDevice {
    id: String,
    #[serde(default)]
    numa: Option<usize>,
    #[serde(default)]
    source: Option<DeviceSource>,
}

/// Parses `topolet plan --devices`: a JSON object mapping `namespace/pod/container` to a list of
/// devices (see `PlanDevice`). Errors name what is wrong.
pub fn parse_plan_devices(text: &str) -> Result<PlanDevices, String> {
    let raw: BTreeMap<String, Vec<PlanDevice>> =
        serde_json::from_str(text).map_err(|e| format!("devices: {e}"))?;
    let mut out = PlanDevices::new();
    for (container, list) in raw {
        if container.split('/').count() != 3 || container.split('/').any(str::is_empty) {
            return Err(format!(
                "devices: {container:?}: expected namespace/pod/container"
            ));
        }
        let set = observed_devices::device_set(list.into_iter().map(|d| ObservedDevice {
            source: d.source.unwrap_or(DeviceSource::DeviceNode),
            id: d.id,
            numa: d.numa,
            numa_unknown: None,
        }));
        out.insert(container, set);
    }
    Ok(out)
}

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
    /// The devices the container was given (`--devices`), when any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub observed_devices: Vec<ObservedDevice>,
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
    plan_with_devices(topology, settings, pods, &PlanDevices::new())
}

/// [`plan`] with the devices each container was given.
pub fn plan_with_devices(
    topology: &Topology,
    settings: &PlacementSettings,
    pods: &[Pod],
    devices: &PlanDevices,
) -> Result<PlanOutput, PlacementError> {
    let (mut placement, _warnings) = Placement::new(topology, settings)?;
    let floor = settings.oom_score_adj_floor.unwrap_or(-1000);
    let mut rows: Vec<(PlannedContainer, OnShared)> = Vec::new();
    for pod in pods {
        let class = qos::class(pod);
        let refs = (0..pod.init_containers.len())
            .map(ContainerRef::Init)
            .chain((0..pod.containers.len()).map(ContainerRef::App));
        for which in refs {
            let Some(c) = pod.container(which) else {
                continue;
            };
            let given = devices
                .get(&format!("{}/{}", pod.key(), c.name))
                .map(Vec::as_slice)
                .unwrap_or_default();
            let result = placement.admit_with_devices(Candidate::Pod { pod, which }, given, floor);
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
                observed_devices: Vec::new(),
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
                    row.observed_devices = r.observed_devices;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managers::topology::hints::TopologyPolicy;
    use crate::placement::pipeline::device_tests::two_nodes;
    use crate::placement::pipeline::tests::{guaranteed, pod};

    #[test]
    fn devices_pull_the_plan_s_containers_to_their_node() {
        let topology = two_nodes();
        let mut settings = PlacementSettings::default();
        settings.cpu.policy = crate::managers::cpu::policy::CpuPolicyName::Static;
        settings.cpu.reserved_cpus = Some(crate::machine::cpuset::CpuSet::from_iter([0]));
        settings.topology.policy = TopologyPolicy::SingleNumaNode;
        let pods = [
            pod("gpu", vec![], vec![guaranteed("train", 2, 0)]),
            pod("split", vec![], vec![guaranteed("train", 2, 0)]),
        ];
        let devices = parse_plan_devices(
            r#"{"ns/gpu/train": [{"id": "/dev/nvidia1", "numa": 1}, {"id": "/dev/nvidiactl"}],
                "ns/split/train": [{"id": "/dev/nvidia0", "numa": 0}, {"id": "/dev/nvidia1", "numa": 1}]}"#,
        )
        .expect("valid");
        let out = plan_with_devices(&topology, &settings, &pods, &devices).expect("plan");
        let gpu = &out.containers[0];
        assert_eq!(gpu.cpuset.as_deref(), Some("4-5"), "{gpu:?}");
        assert_eq!(gpu.numa_affinity.as_deref(), Some("1"));
        assert_eq!(gpu.observed_devices.len(), 2);
        let split = &out.containers[1];
        assert!(!split.admitted, "{split:?}");
        assert!(
            split
                .error
                .as_deref()
                .unwrap_or("")
                .contains("single-numa-node"),
            "{split:?}"
        );
        for bad in [
            "[]",
            r#"{"gpu/train": []}"#,
            r#"{"ns/gpu/train": [{"id": "/dev/x", "numa": -1}]}"#,
            r#"{"ns/gpu/train": [{"id": "/dev/x", "node": 1}]}"#,
        ] {
            assert!(parse_plan_devices(bad).is_err(), "{bad}");
        }
    }
}
