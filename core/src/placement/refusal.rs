//! Refusals and their wording: why a configuration or a container was refused
//! ([`PlacementError`]), the names a refusal goes by (the kubelet's reason, the Event reason, the
//! metric label) and the one-line message the kubelet's own admission would give ([`Refusal`],
//! built by `Placement::refusal` right after the pipeline refused).

use crate::kube::pod::ContainerRef;
use crate::managers::cpu::policy::CpuPolicyError;
use crate::managers::devices::{DeviceConfigError, DeviceError};
use crate::managers::memory::policy::{MemoryConfigError, MemoryError, MemoryPolicyKind};
use crate::managers::topology::hints::TopologyConfigError;
use crate::managers::topology::manager::{format_amount, TopologyAffinityError};
use crate::placement::pipeline::{amounts, memory_request};
use crate::placement::{Placement, Subject};

/// Why a configuration or a container was refused.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error("{0}")]
    Cpu(#[from] CpuPolicyError),
    #[error("{0}")]
    Memory(#[from] MemoryError),
    #[error("{0}")]
    Device(#[from] DeviceError),
    #[error("{0}")]
    Topology(#[from] TopologyAffinityError),
    #[error("{0}")]
    MemoryConfig(#[from] MemoryConfigError),
    #[error("{0}")]
    DeviceConfig(#[from] DeviceConfigError),
    #[error("{}: {}", topology_key(.0), .0)]
    TopologyConfig(#[from] TopologyConfigError),
    #[error("{key}: {message}")]
    Config { key: String, message: String },
    #[error("pod {pod} has no container {which:?}")]
    NoSuchContainer { pod: String, which: ContainerRef },
}

/// A refused admission or resize: the error and its one-line message. Every name the refusal
/// goes by comes from here: the kubelet's reason (a pod's `status.reason`), the Event reason and
/// the metric label.
#[derive(Debug)]
pub struct Refusal {
    /// Boxed: a refusal travels in a `Result` the admission path returns on every call.
    pub error: Box<PlacementError>,
    /// The refusal as the kubelet's admission words it (see `Placement::refusal`).
    pub message: String,
}

impl Refusal {
    /// [`PlacementError::kubelet_reason`].
    pub fn kubelet_reason(&self) -> &'static str {
        self.error.kubelet_reason()
    }

    /// [`PlacementError::event_reason`].
    pub fn event_reason(&self) -> &'static str {
        self.error.event_reason()
    }

    /// [`PlacementError::metric_label`].
    pub fn metric_label(&self) -> &'static str {
        self.error.metric_label()
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error.as_ref())
    }
}

impl PlacementError {
    /// True for configuration problems (the operator's to fix) rather than refused containers.
    pub fn is_config(&self) -> bool {
        match self {
            PlacementError::Cpu(e) => matches!(e, CpuPolicyError::Config { .. }),
            PlacementError::MemoryConfig(_)
            | PlacementError::DeviceConfig(_)
            | PlacementError::TopologyConfig(_)
            | PlacementError::Config { .. } => true,
            _ => false,
        }
    }
}

impl PlacementError {
    /// The kubelet's reason for the same refusal at its own admission (the pod's
    /// `status.reason`): `TopologyAffinityError`, `SMTAlignmentError`, or
    /// `UnexpectedAdmissionError` (what the kubelet calls an allocation that fails after the
    /// hints admitted it: not enough CPUs, memory or devices).
    pub fn kubelet_reason(&self) -> &'static str {
        use crate::managers::cpu::alloc::CpuAllocError as A;
        match self {
            PlacementError::Topology(_) => "TopologyAffinityError",
            PlacementError::Cpu(CpuPolicyError::Alloc {
                source: A::SmtAlignment { .. },
                ..
            }) => "SMTAlignmentError",
            _ => "UnexpectedAdmissionError",
        }
    }

    /// The reason of the Warning Event on the pod (`kubectl describe pod`): the kubelet's own
    /// where its admission has one for the same failure (`TopologyAffinityError`,
    /// `SMTAlignmentError`), else a topolet reason naming what was short
    /// (`InsufficientExclusiveCPUs`, `InsufficientMemory`, `InsufficientHugepages`,
    /// `InsufficientDevices`), else [`PlacementError::kubelet_reason`]. A CamelCase word, as
    /// Event reasons are.
    pub fn event_reason(&self) -> &'static str {
        use crate::managers::cpu::alloc::CpuAllocError as A;
        match self {
            PlacementError::Topology(_)
            | PlacementError::Cpu(CpuPolicyError::Alloc {
                source: A::SmtAlignment { .. },
                ..
            }) => self.kubelet_reason(),
            PlacementError::Cpu(CpuPolicyError::Alloc {
                source: A::NotEnough { .. },
                ..
            })
            | PlacementError::Cpu(CpuPolicyError::SharedPoolExhausted { .. }) => {
                "InsufficientExclusiveCPUs"
            }
            PlacementError::Memory(MemoryError::Insufficient { resource, .. }) => match resource {
                crate::managers::memory::policy::MemoryResource::Memory => "InsufficientMemory",
                crate::managers::memory::policy::MemoryResource::Hugepages(_) => {
                    "InsufficientHugepages"
                }
            },
            PlacementError::Device(DeviceError::Insufficient { .. }) => "InsufficientDevices",
            _ => self.kubelet_reason(),
        }
    }

    /// A short, bounded label for metrics (`topolet_refusals_total{reason}`): the categories
    /// the kubelet reports as admission failures, finer where topolet knows more.
    pub fn metric_label(&self) -> &'static str {
        use crate::managers::cpu::alloc::CpuAllocError as A;
        match self {
            PlacementError::Cpu(CpuPolicyError::Alloc {
                source: A::SmtAlignment { .. },
                ..
            }) => "smt_alignment",
            PlacementError::Cpu(CpuPolicyError::Alloc {
                source: A::NotEnough { .. },
                ..
            }) => "insufficient_cpus",
            PlacementError::Cpu(CpuPolicyError::SharedPoolExhausted { .. }) => {
                "shared_pool_exhausted"
            }
            PlacementError::Cpu(CpuPolicyError::SizeMismatch { .. }) => "cpu_size_mismatch",
            PlacementError::Cpu(_) => "cpu",
            PlacementError::Memory(_) => "insufficient_memory",
            PlacementError::Device(_) => "insufficient_devices",
            PlacementError::Topology(_) => "topology_affinity",
            PlacementError::NoSuchContainer { .. } => "no_such_container",
            _ => "config",
        }
    }

    /// The cause in a few words, after the reason (none where the reason says it all).
    fn cause(&self) -> Option<String> {
        use crate::managers::cpu::alloc::CpuAllocError as A;
        match self {
            PlacementError::Topology(_) => None,
            PlacementError::Cpu(CpuPolicyError::Alloc { source, .. }) => match source {
                A::SmtAlignment { .. } => None,
                A::NotEnough { .. } => Some("not enough cpus".into()),
            },
            PlacementError::Cpu(CpuPolicyError::SharedPoolExhausted { .. }) => {
                Some("not enough cpus".into())
            }
            PlacementError::Memory(MemoryError::Insufficient { resource, .. }) => {
                Some(format!("not enough {resource}"))
            }
            PlacementError::Device(DeviceError::Insufficient { resource, .. }) => {
                Some(format!("not enough {resource}"))
            }
            _ => Some(self.to_string()),
        }
    }

    /// What the refusal adds to "asks …; free per NUMA node: …", if anything.
    fn detail(&self) -> Option<String> {
        use crate::managers::cpu::alloc::CpuAllocError as A;
        match self {
            PlacementError::Topology(e) => Some(format!(
                "topology manager policy {} cannot align them",
                e.policy
            )),
            PlacementError::Cpu(CpuPolicyError::Alloc {
                source:
                    A::SmtAlignment {
                        cpus_per_core,
                        available_physical,
                        ..
                    },
                ..
            }) => Some(format!(
                "full_pcpus_only needs a multiple of {cpus_per_core} cpus per core \
                 ({available_physical} free on whole cores)"
            )),
            PlacementError::Cpu(CpuPolicyError::SharedPoolExhausted { .. }) => {
                Some("the shared pool would be left without a cpu".into())
            }
            _ => None,
        }
    }
}

/// The `[topology]` key a topology configuration error is about.
fn topology_key(e: &TopologyConfigError) -> &'static str {
    match e {
        TopologyConfigError::MaxAllowableTooSmall(_) => "topology.max_allowable_numa_nodes",
        _ => "topology.policy",
    }
}

impl Placement {
    /// The refusal of `s`, worded as the kubelet's own admission would: its reason first, then
    /// what was asked and what each NUMA node has free, e.g. `TopologyAffinityError: container
    /// main of pod default/p asks 2 exclusive CPUs; free per NUMA node: node0 1, node1 1;
    /// topology manager policy single-numa-node cannot align them`; a container given devices
    /// has them listed before the last clause (`; devices given: /dev/nvidia0 (device-node, numa
    /// 1)`). Built right after the
    /// refusal: nothing changed, so the free capacity is what refused it.
    pub(super) fn refusal(&self, s: &Subject<'_>, err: PlacementError, resize: bool) -> Refusal {
        let message = self.refusal_message(s, &err, resize);
        Refusal {
            error: Box::new(err),
            message,
        }
    }

    fn refusal_message(&self, s: &Subject<'_>, err: &PlacementError, resize: bool) -> String {
        let c = s.container;
        let class = s.class;
        let n_cpus = self.exclusive_cpus(class, &c.requests);
        let mut mem = memory_request(class, &c.requests);
        if self.memory.kind() == MemoryPolicyKind::None {
            mem.guaranteed = false;
        }
        let mut asked = amounts(n_cpus, &mem, &c.requests.extended);
        if n_cpus.is_none() && c.requests.cpu() > 0 {
            asked.insert("cpu".into(), c.requests.cpu());
        }
        let names = crate::managers::topology::manager::message_order(asked.keys());
        let what: Vec<String> = names
            .iter()
            .map(|r| match (r.as_str(), n_cpus) {
                ("cpu", Some(n)) => format!("{n} exclusive CPU{}", if n == 1 { "" } else { "s" }),
                _ => format!("{r} {}", format_amount(r, asked[*r])),
            })
            .collect();
        let free = self.free_per_node();
        let only_cpu = names.iter().all(|r| r.as_str() == "cpu");
        let per_node: Vec<String> = free
            .iter()
            .map(|(node, have)| {
                let amount = |r: &str| format_amount(r, have.get(r).copied().unwrap_or(0));
                if only_cpu {
                    format!("node{node} {}", amount("cpu"))
                } else {
                    let parts: Vec<String> =
                        names.iter().map(|r| format!("{r} {}", amount(r))).collect();
                    format!("node{node} {}", parts.join(" "))
                }
            })
            .collect();
        let reason = match err.cause() {
            Some(cause) => format!("{} ({cause})", err.kubelet_reason()),
            None => err.kubelet_reason().to_string(),
        };
        let mut out = format!(
            "{reason}: container {} of pod {} asks {}{}; free per NUMA node: {}",
            c.name,
            s.pod_key,
            if what.is_empty() {
                "nothing".to_string()
            } else {
                what.join(", ")
            },
            if resize { " (in-place resize)" } else { "" },
            per_node.join(", ")
        );
        if !s.devices.is_empty() {
            let given: Vec<String> = s.devices.iter().map(ToString::to_string).collect();
            out.push_str("; devices given: ");
            out.push_str(&given.join(", "));
        }
        if let Some(d) = err.detail() {
            out.push_str("; ");
            out.push_str(&d);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::container_key::ContainerKey;
    use crate::managers::topology::hints::TopologyPolicy;
    use crate::placement::pipeline::tests::{config, guaranteed, machine, pod};
    use crate::placement::Candidate;

    /// A refusal naming more than CPUs lists each resource asked and, per node, each one free;
    /// the device's shortage is the cause.
    #[test]
    fn refusal_message_names_every_resource_asked() {
        let (mut p, _) = Placement::new(&machine(), &config()).unwrap();
        p.admit(
            Candidate::app(&pod("hog", vec![], vec![guaranteed("app", 1, 1)])),
            -1000,
        )
        .unwrap();
        let web = pod("web", vec![], vec![guaranteed("main", 2, 1)]);
        let err = p.admit(Candidate::app(&web), -1000).unwrap_err();
        assert_eq!(
            err.message,
            "UnexpectedAdmissionError (not enough example.com/nic): container main of \
             pod ns/web asks 2 exclusive CPUs, example.com/nic 1; free per NUMA node: node0 cpu \
             6 example.com/nic 0"
        );
        assert_eq!(err.event_reason(), "InsufficientDevices");
    }

    /// Event reasons: the kubelet's where it has one, else what was short.
    #[test]
    fn event_reasons_are_the_kubelets_or_name_what_was_short() {
        use crate::managers::cpu::alloc::CpuAllocError as A;
        let key = ContainerKey::new("u", "main");
        let alloc = |source| {
            PlacementError::Cpu(CpuPolicyError::Alloc {
                key: key.clone(),
                source,
            })
        };
        let not_enough = alloc(A::NotEnough {
            requested: 2,
            available: 1,
            free: "1".into(),
        });
        assert_eq!(not_enough.event_reason(), "InsufficientExclusiveCPUs");
        assert_eq!(not_enough.kubelet_reason(), "UnexpectedAdmissionError");
        let exhausted = PlacementError::Cpu(CpuPolicyError::SharedPoolExhausted {
            key: key.clone(),
            requested: 1,
            shared: "0".into(),
        });
        assert_eq!(exhausted.event_reason(), "InsufficientExclusiveCPUs");
        let smt = alloc(A::SmtAlignment {
            requested: 1,
            cpus_per_core: 2,
            available_physical: 0,
        });
        assert_eq!(smt.event_reason(), "SMTAlignmentError");
        let topo = PlacementError::Topology(TopologyAffinityError {
            policy: TopologyPolicy::SingleNumaNode,
            subject: "container default/web/app".into(),
            request: Default::default(),
            free: Default::default(),
        });
        assert_eq!(topo.event_reason(), "TopologyAffinityError");
        let config = PlacementError::Config {
            key: "k".into(),
            message: "m".into(),
        };
        assert_eq!(config.event_reason(), "UnexpectedAdmissionError");
    }
}
