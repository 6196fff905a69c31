//! A container's entries of a kubelet PodResources answer (`PodResources` of k8s.io/kubelet
//! `pkg/apis/podresources/v1/api.proto`) → the devices it was given
//! (`topolet_core::managers::observed_devices`):
//! - `ContainerDevices` (device plugins): one device per id, `<resource>=<id>`, source
//!   `pod-resources`, its NUMA node from `topology.nodes`. A device the plugin reported on one
//!   node sits there; on several nodes (the kubelet then counts it in any mask holding one of
//!   them, `pkg/kubelet/cm/devicemanager/topology_hints.go`) or none it is recorded without one,
//!   so it fits every mask.
//! - `DynamicResource` (DRA): one device per claim resource, `<driver>/<pool>/<device>`, source
//!   `dra`; PodResources gives DRA devices no topology, so its NUMA node is unknown here
//!   ([`DRA_NOT_RESOLVED`]) until the caller resolves it through the node's ResourceSlices
//!   (`crate::nri::handlers`, with `crate::cluster::resource_slices`).
//!
//! Bad entries (no resource name, an empty device id, a NUMA id the machine does not have, a
//! claim resource without driver, pool or device) are [`PodResourcesError`]s naming the pod,
//! the container and the entry; the entry gives no NUMA node (or is skipped), never a panic.

use topolet_core::machine::topology::node_list;
use topolet_core::managers::observed_devices::{DeviceSource, ObservedDevice};

use super::api;

/// Why a DRA device's NUMA node is unknown before its ResourceSlices are asked.
pub const DRA_NOT_RESOLVED: &str =
    "PodResources gives DRA devices no topology and no ResourceSlice of this node was asked";

/// One entry of a PodResources answer that could not be used as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodResourcesError {
    #[error("pod resources of {pod}, container {container}: a device entry without a resource name (skipped)")]
    NoResourceName { pod: String, container: String },
    #[error("pod resources of {pod}, container {container}: resource {resource}: an empty device id (skipped)")]
    EmptyDeviceId {
        pod: String,
        container: String,
        resource: String,
    },
    #[error(
        "pod resources of {pod}, container {container}: device {device}: numa node {node} is not \
         one of this machine's numa nodes ({known}); the device is taken without that node"
    )]
    UnknownNode {
        pod: String,
        container: String,
        device: String,
        node: i64,
        known: String,
    },
    #[error(
        "pod resources of {pod}, container {container}: dra claim {claim}: a claim resource \
         without driver, pool or device name (skipped)"
    )]
    IncompleteClaim {
        pod: String,
        container: String,
        claim: String,
    },
}

/// What one container's entries gave.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ContainerEntries {
    pub devices: Vec<ObservedDevice>,
    pub errors: Vec<PodResourcesError>,
}

/// The devices of `container` in `pod`'s answer on a machine with NUMA `nodes` (see the module
/// docs). A container the answer does not list has none.
pub fn container_devices(
    pod: &api::PodResources,
    container: &str,
    nodes: &[usize],
) -> ContainerEntries {
    let mut out = ContainerEntries::default();
    let pod_ref = format!("{}/{}", pod.namespace, pod.name);
    let Some(c) = pod.containers.iter().find(|c| c.name == container) else {
        return out;
    };
    for entry in &c.devices {
        if entry.resource_name.is_empty() {
            out.errors.push(PodResourcesError::NoResourceName {
                pod: pod_ref.clone(),
                container: container.into(),
            });
            continue;
        }
        for id in &entry.device_ids {
            if id.is_empty() {
                out.errors.push(PodResourcesError::EmptyDeviceId {
                    pod: pod_ref.clone(),
                    container: container.into(),
                    resource: entry.resource_name.clone(),
                });
                continue;
            }
            let device = format!("{}={id}", entry.resource_name);
            let mut on = Vec::new();
            for n in entry.topology.iter().flat_map(|t| &t.nodes) {
                match usize::try_from(n.id).ok().filter(|i| nodes.contains(i)) {
                    Some(i) => on.push(i),
                    None => out.errors.push(PodResourcesError::UnknownNode {
                        pod: pod_ref.clone(),
                        container: container.into(),
                        device: device.clone(),
                        node: n.id,
                        known: node_list(nodes),
                    }),
                }
            }
            on.sort_unstable();
            on.dedup();
            out.devices.push(ObservedDevice {
                source: DeviceSource::PodResources,
                id: device,
                numa: match on.as_slice() {
                    [one] => Some(*one),
                    _ => None,
                },
                numa_unknown: None,
            });
        }
    }
    for claim in &c.dynamic_resources {
        for r in &claim.claim_resources {
            if r.driver_name.is_empty() || r.pool_name.is_empty() || r.device_name.is_empty() {
                out.errors.push(PodResourcesError::IncompleteClaim {
                    pod: pod_ref.clone(),
                    container: container.into(),
                    claim: format!("{}/{}", claim.claim_namespace, claim.claim_name),
                });
                continue;
            }
            out.devices.push(ObservedDevice {
                source: DeviceSource::Dra,
                id: format!("{}/{}/{}", r.driver_name, r.pool_name, r.device_name),
                numa: None,
                numa_unknown: Some(DRA_NOT_RESOLVED.into()),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn numa(ids: &[i64]) -> Option<api::TopologyInfo> {
        Some(api::TopologyInfo {
            nodes: ids.iter().map(|&id| api::NumaNode { id }).collect(),
        })
    }

    fn pod(containers: Vec<api::ContainerResources>) -> api::PodResources {
        api::PodResources {
            name: "p".into(),
            namespace: "ns".into(),
            containers,
            ..Default::default()
        }
    }

    fn ctr(
        devices: Vec<api::ContainerDevices>,
        dra: Vec<api::DynamicResource>,
    ) -> api::ContainerResources {
        api::ContainerResources {
            name: "c".into(),
            devices,
            dynamic_resources: dra,
            ..Default::default()
        }
    }

    fn devs(resource: &str, ids: &[&str], nodes: &[i64]) -> api::ContainerDevices {
        api::ContainerDevices {
            resource_name: resource.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            topology: if nodes.is_empty() { None } else { numa(nodes) },
        }
    }

    fn claim(resources: &[(&str, &str, &str)]) -> api::DynamicResource {
        api::DynamicResource {
            claim_name: "gpu".into(),
            claim_namespace: "ns".into(),
            claim_resources: resources
                .iter()
                .map(|(d, p, n)| api::ClaimResource {
                    driver_name: d.to_string(),
                    pool_name: p.to_string(),
                    device_name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn got(d: &ObservedDevice) -> (&str, &str, Option<usize>) {
        (d.source.as_str(), d.id.as_str(), d.numa)
    }

    #[test]
    fn device_plugin_devices_carry_their_node_and_dra_none() {
        let p = pod(vec![
            ctr(
                vec![
                    devs("topolet.test/gpu", &["dev-0", "dev-1"], &[1]),
                    devs("example.com/nic", &["vf-3"], &[]),
                    devs("example.com/wide", &["w"], &[0, 1]),
                ],
                vec![claim(&[("gpu.example.com", "node-a", "gpu-7")])],
            ),
            api::ContainerResources {
                name: "other".into(),
                devices: vec![devs("topolet.test/gpu", &["dev-9"], &[0])],
                ..Default::default()
            },
        ]);
        let out = container_devices(&p, "c", &[0, 1]);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let all: Vec<_> = out.devices.iter().map(got).collect();
        assert_eq!(
            all,
            [
                ("pod-resources", "topolet.test/gpu=dev-0", Some(1)),
                ("pod-resources", "topolet.test/gpu=dev-1", Some(1)),
                ("pod-resources", "example.com/nic=vf-3", None),
                ("pod-resources", "example.com/wide=w", None),
                ("dra", "gpu.example.com/node-a/gpu-7", None),
            ]
        );
        assert!(container_devices(&p, "absent", &[0, 1]).devices.is_empty());
        assert_eq!(container_devices(&p, "other", &[0]).devices.len(), 1);
    }

    #[test]
    fn bad_entries_name_the_thing_and_never_panic() {
        let p = pod(vec![ctr(
            vec![
                devs("", &["x"], &[0]),
                devs("topolet.test/gpu", &["", "dev-0"], &[7]),
                devs("topolet.test/gpu", &["dev-1"], &[-1]),
                devs("topolet.test/gpu", &["dev-2"], &[i64::MAX, 0]),
            ],
            vec![claim(&[("gpu.example.com", "", "gpu-1")])],
        )]);
        let out = container_devices(&p, "c", &[0, 1]);
        let all: Vec<_> = out.devices.iter().map(got).collect();
        assert_eq!(
            all,
            [
                ("pod-resources", "topolet.test/gpu=dev-0", None),
                ("pod-resources", "topolet.test/gpu=dev-1", None),
                ("pod-resources", "topolet.test/gpu=dev-2", Some(0)),
            ]
        );
        let text: Vec<String> = out.errors.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 6, "{text:#?}");
        assert!(text[0].contains("ns/p, container c: a device entry without a resource name"));
        assert!(text[1].contains("resource topolet.test/gpu: an empty device id"));
        assert!(text[2].contains(
            "device topolet.test/gpu=dev-0: numa node 7 is not one of this machine's numa nodes (0,1)"
        ));
        assert!(text[3].contains("numa node -1"));
        assert!(text[4].contains(&format!("numa node {}", i64::MAX)));
        assert!(text[5]
            .contains("dra claim ns/gpu: a claim resource without driver, pool or device name"));
    }

    /// Bytes off the wire: whatever they are, decoding either fails with an error or yields an
    /// answer the parser takes without a panic.
    #[test]
    fn arbitrary_bytes_decode_or_fail_cleanly() {
        let good = api::GetPodResourcesResponse {
            pod_resources: Some(pod(vec![ctr(
                vec![devs("topolet.test/gpu", &["dev-0"], &[0])],
                vec![],
            )])),
        }
        .encode_to_vec();
        let mut inputs = vec![
            good.clone(),
            vec![0xff; 16],
            good[..good.len() / 2].to_vec(),
        ];
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x5a;
            inputs.push(b);
        }
        for bytes in inputs {
            if let Ok(r) = api::GetPodResourcesResponse::decode(bytes.as_slice()) {
                if let Some(p) = r.pod_resources {
                    let _ = container_devices(&p, "c", &[0]);
                }
            }
        }
    }
}
