//! Read-only views of the plugin's state for the other loops: the managed pods (eviction), the
//! placement's snapshot and the admission records (status), the books (NodeResourceTopology),
//! the metrics registry and the connection status (introspection).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use topolet_nri::stub::{ConnState, ConnectionStatus};

use super::{PluginState, TopoletPlugin};
use crate::cluster::nrt::NrtSource;
use crate::cluster::pod_directory::Lookup;
use crate::kubelet::reexport::{
    Allocatable, ContainerAllocation, ExportSource, Exported, MemoryBlock,
};
use crate::nri::view;
use crate::telemetry::metrics::Metrics;
use topolet_core::kube::container_key::ContainerKey;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::Topology;
use topolet_core::managers::memory::policy::{MemoryAssignment, MemoryPolicyKind};
use topolet_core::managers::topology::hints::NumaMask;
use topolet_core::placement::admission_input::AdmissionRecord;
use topolet_core::report::nrt::{self, NrtContent};
use topolet_core::report::status::{
    self, DevicesInput, ExclusiveInput, NriStatus, Policies, Pressure, Snapshot, Status,
    StatusInput,
};

/// A Kubernetes pod topolet manages, as NRI described it (for the eviction loop).
#[derive(Debug, Clone)]
pub struct ManagedPod {
    /// The runtime's sandbox id.
    pub sandbox_id: String,
    /// The sandbox's cgroup parent: the pod cgroup.
    pub cgroup_parent: String,
    pub qos: topolet_core::kube::qos::QosClass,
    /// Namespace, name, uid, static/mirror from the sandbox's annotations, and each managed
    /// container with its requests and limits as estimated from its cgroup values (priority is
    /// not knowable from NRI: `None`).
    pub pod: topolet_core::kube::pod::Pod,
    /// The runtime's ids of the pod's managed containers, in the order of `pod.containers`.
    pub container_ids: Vec<String>,
    /// Their cgroups, in the same order, as cgroupfs paths (`/…/pod<uid>/<leaf>`): from NRI's
    /// `linux.cgroups_path`, whatever the runtime names the leaf (containerd the id, CRI-O
    /// `crio-<id>`; the systemd driver's `slice:prefix:name` made a path); `<cgroup parent>/<id>`
    /// when the runtime sent none.
    pub container_cgroups: Vec<String>,
    /// A batch pod of reclaimed CPU (`crate::reclaimed`): evicted before the others.
    pub batch: bool,
}

impl TopoletPlugin {
    /// Every Kubernetes pod sandbox topolet knows from NRI, with its managed containers. A
    /// read-only snapshot: nothing in the plugin changes.
    pub fn managed_pods(&self) -> Vec<ManagedPod> {
        let node = self.quiet_lock();
        let mut out: Vec<ManagedPod> = Vec::new();
        for (id, sb) in &node.sandboxes {
            let Ok(info) = view::pod_qos(sb) else {
                continue;
            };
            let uid = view::pod_uid(sb).unwrap_or_else(|| info.pod_uid.clone());
            let static_or_mirror = topolet_core::kube::pod::is_static_or_mirror(|k| {
                sb.annotations.get(k).map(String::as_str)
            });
            let ids: Vec<&String> = node.records.pod_ids(&uid).collect();
            let parent = sb
                .linux
                .as_ref()
                .map(|l| l.cgroup_parent.as_str())
                .unwrap_or_default();
            let container_cgroups = ids
                .iter()
                .map(|id| {
                    node.records
                        .get(id)
                        .and_then(|r| {
                            crate::host::freezer::container_cgroup(&r.view().cgroups_path)
                        })
                        .map(|rel| format!("/{}", rel.display()))
                        .unwrap_or_else(|| format!("{parent}/{id}"))
                })
                .collect();
            let containers = node
                .records
                .pod(&uid)
                .map(|(_, m)| m.view().container().clone())
                .collect();
            // The real priority when the pod watch holds the pod (never waits).
            let (priority, priority_class_name) = match self.pods.get().map(|(d, _)| d.get(&uid)) {
                Some(Lookup::Found(p)) => (p.priority, p.priority_class_name.clone()),
                _ => (None, None),
            };
            out.push(ManagedPod {
                sandbox_id: id.clone(),
                cgroup_parent: sb
                    .linux
                    .as_ref()
                    .map(|l| l.cgroup_parent.clone())
                    .unwrap_or_default(),
                qos: info.qos,
                pod: topolet_core::kube::pod::Pod {
                    namespace: sb.namespace.clone(),
                    name: sb.name.clone(),
                    uid,
                    priority,
                    priority_class_name,
                    static_or_mirror,
                    init_containers: Vec::new(),
                    containers,
                    resources: None,
                    termination_grace_period_seconds: None,
                },
                batch: ids.iter().any(|id| node.batch.is_batch(id)),
                container_ids: ids.into_iter().cloned().collect(),
                container_cgroups,
            });
        }
        out.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
        out
    }
}

/// The placement's CPU sets and the managed-container count: what `/metrics` reports.
#[derive(Debug, Clone, Default)]
pub struct CpuSets {
    pub shared: CpuSet,
    pub reserved: CpuSet,
    /// Every exclusive grant's CPUs.
    pub exclusive: CpuSet,
    /// Free for exclusive grants.
    pub assignable: CpuSet,
    pub managed: usize,
    /// Containers left to another cpuset owner.
    pub left_alone: usize,
}

/// Introspection (`crate::introspection`: the admin socket and `/metrics`).
impl TopoletPlugin {
    /// [`CpuSets`], copied under the lock: a handful of bit sets, nothing per container record
    /// (a scrape must not hold up the NRI handlers however many containers the node runs).
    pub fn cpu_sets(&self) -> CpuSets {
        let node = self.quiet_lock();
        let p = &node.placement;
        let mut exclusive = CpuSet::new();
        for cpus in p.exclusive().values() {
            exclusive.extend_from(cpus);
        }
        CpuSets {
            shared: p.shared_pool(),
            reserved: p.reserved().clone(),
            exclusive,
            assignable: p.assignable(),
            managed: node.records.len(),
            left_alone: node.records.left_alone().len(),
        }
    }

    /// The metrics registry; other loops (eviction) report through it too.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Signalled when the placement's books may have changed (`crate::cluster::nrt`).
    pub fn books_changed(&self) -> Arc<tokio::sync::Notify> {
        self.books_changed.clone()
    }

    /// The memory manager's and device provider's books per NUMA node (under the lock).
    pub fn books(&self) -> topolet_core::placement::books::Books {
        self.quiet_lock().placement.books()
    }

    /// `[topology] max_allowable_numa_nodes` in effect.
    pub fn max_allowable_numa_nodes(&self) -> usize {
        self.config.get().topology.max_allowable_numa_nodes
    }

    /// The stub's connection status, once attached.
    pub fn connection(&self) -> Option<ConnectionStatus> {
        self.status.get().map(|s| s.borrow().clone())
    }

    /// Copies of the placement's sets, taken under the lock (no formatting, no I/O), and the
    /// policies in effect.
    pub fn snapshot(&self) -> (Snapshot, Policies) {
        let node = self.quiet_lock();
        let p = &node.placement;
        // containerd id, pod and mems of each key, preferring the instance holding the cpus.
        let mut known: HashMap<&ContainerKey, (&str, &str, Option<NumaMask>)> = HashMap::new();
        for (id, m) in node.records.iter() {
            let entry = (
                id.as_str(),
                m.view().pod_ref.as_str(),
                Some(m.target().mems),
            );
            if m.target().exclusive || !known.contains_key(&m.view().key) {
                known.insert(&m.view().key, entry);
            }
        }
        let exclusive = p
            .exclusive()
            .iter()
            .map(|(key, cpus)| {
                let k = known.get(key);
                ExclusiveInput {
                    key: key.clone(),
                    pod_ref: k.map(|k| k.1.to_string()),
                    id: k.map(|k| k.0.to_string()),
                    cpus: cpus.clone(),
                    mems: k.and_then(|k| k.2),
                }
            })
            .collect();
        let devices = p
            .observed_devices()
            .iter()
            .map(|(key, devices)| {
                let k = known.get(key);
                DevicesInput {
                    key: key.clone(),
                    pod_ref: k.map(|k| k.1.to_string()),
                    id: k.map(|k| k.0.to_string()),
                    devices: devices.clone(),
                    affinity: p.affinity_of(key),
                    cpus: p.exclusive().get(key).cloned(),
                    mems: k.and_then(|k| k.2),
                }
            })
            .collect();
        let mut snapshot = Snapshot {
            reserved: p.reserved().clone(),
            shared: p.shared_pool(),
            shared_mems: p.shared_mems_effective(),
            assignable: p.assignable(),
            exclusive,
            free: p.free_per_node(),
            managed: node.records.len(),
            left_alone: node.records.left_alone().len(),
            admissions: admission_records(&node),
            breaches: TopoletPlugin::breach_report(&node, Instant::now(), SystemTime::now()),
            devices,
        };
        drop(node);
        // Ordered outside the lock.
        snapshot
            .admissions
            .sort_by(|a, b| (&a.pod, &a.container, &a.id).cmp(&(&b.pod, &b.container, &b.id)));
        let c = self.config.get();
        let policies = Policies {
            cpu: c.cpu.policy.as_str().into(),
            topology: c.topology.policy.as_str().into(),
            topology_scope: c.topology.scope.as_str().into(),
            memory: c.memory.policy.as_str().into(),
        };
        (snapshot, policies)
    }
}

/// Which source decided each managed container (unordered).
fn admission_records(node: &PluginState) -> Vec<AdmissionRecord> {
    node.records
        .iter()
        .map(|(id, m)| AdmissionRecord {
            pod: m.view().pod_ref.clone(),
            container: m.view().key.container.clone(),
            id: id.clone(),
            source: m.decided().source,
            fallback: m.decided().fallback,
            comparison: m.decided().comparison.clone(),
        })
        .collect()
}

/// The NRI part of the status, from the stub's connection status.
pub fn nri_status(conn: Option<&ConnectionStatus>) -> NriStatus {
    match conn {
        None => NriStatus {
            state: "NotStarted".into(),
            ..NriStatus::default()
        },
        Some(c) => NriStatus {
            state: format!("{:?}", c.state),
            synchronized: c.state == ConnState::Synchronized,
            connects: c.connects,
            reconnects: c.reconnects,
            runtime: c.runtime.as_ref().map(|r| r.name.clone()),
            runtime_version: c.runtime.as_ref().map(|r| r.version.clone()),
            last_error: c.last_error.clone(),
        },
    }
}

/// The reports built from the views: `topolet status` and the NodeResourceTopology content.
impl TopoletPlugin {
    /// The full status report: the [`TopoletPlugin::snapshot`] and the connection, with the
    /// eviction loop's `pressure` and the metrics endpoint's address when the caller has them.
    pub fn status_report(
        &self,
        pressure: Option<Pressure>,
        metrics_address: Option<String>,
    ) -> Status {
        let (snapshot, policies) = self.snapshot();
        let conn = self.connection();
        let mut report = status::build(
            self.topology(),
            StatusInput {
                version: crate::version().to_string(),
                policies,
                snapshot,
                nri: nri_status(conn.as_ref()),
                pressure,
                metrics_address,
            },
        );
        report.reclaimed = self.reclaimed_report();
        report.pod_resources = self.pod_resources_status();
        report.resource_slices = self.resource_slices.get().map(|s| s.status());
        report.pod_resources_export = self.pod_resources_export_status();
        report
    }
}

/// The PodResources re-export's view of the plugin (`crate::kubelet::reexport`): each
/// container's exclusive CPUs and pinned memory by pod name, and what the node hands out.
impl ExportSource for TopoletPlugin {
    fn exported(&self) -> Exported {
        let node = self.quiet_lock();
        let p = &node.placement;
        let assignments = p.assignments();
        let mut pods: HashMap<&ContainerKey, &str> = HashMap::new();
        for (_, m) in node.records.iter() {
            pods.insert(&m.view().key, m.view().pod_ref.as_str());
        }
        let mut containers = HashMap::new();
        for a in &assignments.containers {
            let key = a.key();
            // Only containers of a pod topolet knows by name (the kubelet answers by name).
            let Some((namespace, pod)) = pods.get(&key).and_then(|r| r.split_once('/')) else {
                continue;
            };
            let allocation = ContainerAllocation {
                cpus: a
                    .cpus
                    .iter()
                    .flat_map(|c| c.iter())
                    .map(|c| c as i64)
                    .collect(),
                memory: a.memory.as_ref().map(memory_blocks).unwrap_or_default(),
            };
            if allocation != ContainerAllocation::default() {
                containers.insert(
                    (namespace.to_string(), pod.to_string(), a.container.clone()),
                    allocation,
                );
            }
        }
        let allocatable_cpus: Vec<i64> = self
            .topology()
            .cpus()
            .difference(p.reserved())
            .iter()
            .map(|c| c as i64)
            .collect();
        // The memory manager's books under the same lock as the assignments (one copy of the
        // node, not a second lock).
        let books = if self.config.get().memory.policy == MemoryPolicyKind::Static {
            p.books()
        } else {
            Default::default()
        };
        drop(node);
        let mut memory = Vec::new();
        for (node_id, per) in books {
            for (name, book) in per {
                let is_memory = name == "memory" || name.starts_with("hugepages-");
                if is_memory && book.allocatable > 0 {
                    memory.push(MemoryBlock {
                        memory_type: name,
                        size: book.allocatable,
                        nodes: vec![node_id as i64],
                    });
                }
            }
        }
        Exported {
            containers,
            allocatable: Allocatable {
                cpus: allocatable_cpus,
                memory,
            },
        }
    }
}

/// A memory assignment as PodResources blocks: per resource, its bytes over the nodes it was
/// taken from.
fn memory_blocks(m: &MemoryAssignment) -> Vec<MemoryBlock> {
    m.taken
        .iter()
        .map(|(resource, per_node)| MemoryBlock {
            memory_type: resource.to_string(),
            size: per_node.values().sum(),
            nodes: per_node.keys().map(|&n| n as i64).collect(),
        })
        .collect()
}

/// The NodeResourceTopology publisher's view of the plugin (`crate::cluster::nrt`).
impl NrtSource for TopoletPlugin {
    fn nrt_content(&self, previous: Option<&NrtContent>) -> NrtContent {
        let books = self.books();
        let status = self.status_report(None, None);
        let mut content = nrt::build(
            self.topology(),
            &status,
            &books,
            self.max_allowable_numa_nodes(),
        );
        if let Some(inventory) = self.device_inventory() {
            nrt::add_devices(&mut content, &inventory);
        }
        if let Some(r) = status.reclaimed.as_ref() {
            nrt::add_reclaimed(&mut content, r);
            if let Some(p) = previous {
                nrt::carry_reclaimed(&mut content, p, r);
            }
        }
        content
    }

    fn books_changed(&self) -> Arc<tokio::sync::Notify> {
        TopoletPlugin::books_changed(self)
    }

    fn synchronized(&self) -> bool {
        self.connection()
            .is_some_and(|c| c.state == ConnState::Synchronized)
    }

    fn metrics(&self) -> &Arc<Metrics> {
        TopoletPlugin::metrics(self)
    }
}
