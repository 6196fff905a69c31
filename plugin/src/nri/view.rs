//! What topolet can learn about a container from NRI alone, and how precisely.
//!
//! NRI gives a plugin the pod sandbox and the container as containerd is about to create them, not
//! the Kubernetes pod spec. The kubelet has already turned the spec into cgroup values, so topolet
//! inverts its rules (`topolet_core::kube::qos` holds each inverse and its precision):
//!
//! | fact | source | precision |
//! |---|---|---|
//! | Kubernetes container or not | pod `cgroup_parent` is a kubelet pod cgroup (`…/kubepods[/burstable\|/besteffort]/pod<uid>`, or the systemd `kubepods-…-pod<uid>.slice` forms) | exact; anything else is left alone |
//! | QoS class, pod uid | the same path | exact |
//! | CPU request | `cpu.shares` (`request·1024/1000`, min 2) | exact from 3m to 256 CPUs; shares 2 ⇒ 0 |
//! | CPU limit | `cpu.quota / cpu.period` | exact above the 1 ms quota floor |
//! | memory limit | `memory.limit` | exact |
//! | memory request (Burstable) | `oom_score_adj = 1000 − 1000·request/capacity`, capacity = `/proc/meminfo` `MemTotal` | within one step (capacity/1000 bytes); 999 covers two, so under 2·capacity/1000 reads as none |
//! | memory request (Guaranteed) | = the memory limit | exact |
//! | exclusive CPUs | Guaranteed and an integer CPU request | exact |
//! | a container without requests or limits | its pod's class (the path's) | exact |
//!
//! With the Kubernetes API client on, a pod's spec from the pod watch decides instead when it is
//! known (`topolet_core::placement::admission_input`, `crate::cluster::pod_directory`); this view is the fallback.
//!
//! Not knowable from NRI and therefore not used: pod priority (eviction gets it elsewhere), init vs
//! app container (kubelet runs init containers to completion first, so their CPUs are released at
//! StopContainer before the app containers are created), hugepage and extended-resource requests
//! beyond the hugepage limits containerd passes.

use topolet_nri::api;

use topolet_core::kube::container_key::ContainerKey;
use topolet_core::kube::inverse::CurrentResources;
use topolet_core::kube::inverse::{self, admission_class, estimate_container};
use topolet_core::kube::pod::Container;
use topolet_core::kube::qos::QosClass;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::managers::topology::hints::{NumaMask, MAX_NUMA_ID};
use topolet_core::placement::nri_container::NriContainer;

/// containerd's label on sandbox (pause) containers.
const CRI_KIND_LABEL: &str = "io.cri-containerd.kind";

/// A Kubernetes container as topolet understands it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    pub key: ContainerKey,
    /// containerd's container id.
    pub id: String,
    /// `namespace/name` of the pod, for logs.
    pub pod_ref: String,
    pub qos: QosClass,
    /// The pod sandbox's cgroup parent: the pod cgroup (`crate::host::pod_cgroup`).
    pub cgroup_parent: String,
    /// The container's own cgroups path, as NRI gives it (`crate::host::freezer`).
    pub cgroups_path: String,
    /// What admission is told (`topolet_core::placement::nri_container`): the pod's identity, the class
    /// ([`ContainerView::qos`], the path's, unless its values contradict a Guaranteed path: see
    /// `admission_class`), the requests and limits estimated from the cgroup values, the role
    /// unknown.
    pub estimate: NriContainer,
    pub current: CurrentResources,
}

impl ContainerView {
    /// The estimated container.
    pub fn container(&self) -> &Container {
        &self.estimate.container
    }
}

/// Why a container is not topolet's business.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    /// The pod's cgroup parent is not a kubelet pod cgroup (plain containerd / nerdctl / ctr).
    NotKubernetes { cgroup_parent: String },
    /// A sandbox (pause) container.
    Sandbox,
}

/// A field of a container from NRI that topolet cannot read: never taken as absent (topolet
/// would then claim the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("container {container:?}: {field} {value:?} from the runtime cannot be read: {reason}")]
pub struct BadField {
    pub container: String,
    pub field: &'static str,
    pub value: String,
    pub reason: String,
}

/// Why a container has no view.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoView {
    /// Not topolet's business.
    #[error("{0}")]
    Ignored(Ignored),
    /// Topolet's business, but the runtime's description cannot be read.
    #[error(transparent)]
    Bad(#[from] BadField),
}

impl From<Ignored> for NoView {
    fn from(i: Ignored) -> NoView {
        NoView::Ignored(i)
    }
}

/// The field names used in [`BadField`].
pub const CPUSET_CPUS_FIELD: &str = "linux.resources.cpu.cpus";
pub const CPUSET_MEMS_FIELD: &str = "linux.resources.cpu.mems";

/// A `cpuset.mems` set as a NUMA mask; an id topolet's masks cannot hold is an error naming it.
pub fn mems_mask(mems: &CpuSet) -> Result<NumaMask, String> {
    match mems.iter().find(|&id| id >= MAX_NUMA_ID) {
        Some(id) => Err(format!(
            "NUMA node {id} in cpuset.mems {mems}: topolet handles NUMA node ids below {MAX_NUMA_ID}"
        )),
        None => NumaMask::from_ids(mems.iter()).ok_or_else(|| format!("cpuset.mems {mems}")),
    }
}

/// The pod uid of a sandbox: the sandbox's own uid (the kubelet's pod uid), else the one its
/// cgroup path names. The one source of a pod's uid for every handler.
pub fn pod_uid(pod: &api::PodSandbox) -> Option<String> {
    if !pod.uid.is_empty() {
        return Some(pod.uid.clone());
    }
    pod_qos(pod).ok().map(|i| i.pod_uid)
}

impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ignored::NotKubernetes { cgroup_parent } => {
                write!(
                    f,
                    "cgroup parent {cgroup_parent:?} is not a kubelet pod cgroup"
                )
            }
            Ignored::Sandbox => f.write_str("sandbox container"),
        }
    }
}

/// The QoS class and pod uid of a sandbox, if it is a Kubernetes pod.
pub fn pod_qos(pod: &api::PodSandbox) -> Result<inverse::CgroupParentInfo, Ignored> {
    let parent = pod
        .linux
        .as_ref()
        .map(|l| l.cgroup_parent.as_str())
        .unwrap_or("");
    inverse::qos_from_cgroup_parent(parent).ok_or_else(|| Ignored::NotKubernetes {
        cgroup_parent: parent.to_string(),
    })
}

/// The device nodes NRI lists for a container (`linux.devices`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceNodes {
    /// The nodes, in NRI's order.
    Listed(Vec<crate::host::device_numa::DeviceNode>),
    /// The container's device cgroup allows every device (a privileged container, which is
    /// given every device node of the host): its nodes say nothing of the devices it was
    /// allocated, and give no hints (the kubelet's device manager never counts them either).
    Every,
}

/// The container's device nodes (see [`DeviceNodes`]).
pub fn device_nodes(ctr: &api::Container) -> DeviceNodes {
    let Some(linux) = ctr.linux.as_ref() else {
        return DeviceNodes::Listed(Vec::new());
    };
    let allows_every = linux.resources.as_ref().is_some_and(|r| {
        r.devices.iter().any(|rule| {
            rule.allow
                && matches!(rule.type_.as_str(), "" | "a")
                && rule.major.is_none()
                && rule.minor.is_none()
        })
    });
    if allows_every {
        return DeviceNodes::Every;
    }
    DeviceNodes::Listed(
        linux
            .devices
            .iter()
            .map(|d| crate::host::device_numa::DeviceNode {
                path: d.path.clone(),
                kind: d.type_.clone(),
                major: d.major,
                minor: d.minor,
            })
            .collect(),
    )
}

/// Reads the container's current cgroup values; a cpuset that does not parse is an error
/// naming the container and the field.
pub fn current_resources(ctr: &api::Container) -> Result<CurrentResources, BadField> {
    let mut cur = CurrentResources::default();
    let Some(linux) = ctr.linux.as_ref() else {
        return Ok(cur);
    };
    cur.oom_score_adj = linux.oom_score_adj.as_ref().map(|o| o.value);
    cur.scheduler_policy = linux
        .scheduler
        .as_ref()
        .and_then(|s| match s.policy.enum_value() {
            Ok(api::LinuxSchedulerPolicy::SCHED_NONE) => None,
            Ok(p) => Some(format!("{p:?}")),
            Err(n) => Some(format!("policy {n}")),
        });
    let Some(res) = linux.resources.as_ref() else {
        return Ok(cur);
    };
    let set = |field: &'static str, value: &str| -> Result<Option<CpuSet>, BadField> {
        if value.trim().is_empty() {
            return Ok(None);
        }
        CpuSet::parse(value)
            .map(|s| Some(s).filter(|s| !s.is_empty()))
            .map_err(|e| BadField {
                container: ctr.name.clone(),
                field,
                value: value.to_string(),
                reason: e.to_string(),
            })
    };
    if let Some(cpu) = res.cpu.as_ref() {
        cur.cpu_shares = cpu.shares.as_ref().map(|v| v.value);
        cur.cpu_quota = cpu.quota.as_ref().map(|v| v.value);
        cur.cpu_period = cpu.period.as_ref().map(|v| v.value);
        cur.cpuset_cpus = set(CPUSET_CPUS_FIELD, &cpu.cpus)?;
        cur.cpuset_mems = set(CPUSET_MEMS_FIELD, &cpu.mems)?;
    }
    if let Some(mem) = res.memory.as_ref() {
        cur.memory_limit = mem.limit.as_ref().map(|v| v.value).filter(|&v| v > 0);
    }
    cur.pids_limit = res.pids.as_ref().map(|p| p.limit).filter(|&l| l > 0);
    Ok(cur)
}

/// The view after an in-place resize: `resources` (from UpdateContainer) replace the cgroup
/// values they carry, and requests and limits are estimated again from the result.
pub fn with_resources(
    view: &ContainerView,
    resources: Option<&api::LinuxResources>,
    memory_capacity: u64,
) -> ContainerView {
    let mut current = view.current.clone();
    if let Some(res) = resources {
        if let Some(cpu) = res.cpu.as_ref() {
            if let Some(v) = cpu.shares.as_ref() {
                current.cpu_shares = Some(v.value);
            }
            if let Some(v) = cpu.quota.as_ref() {
                current.cpu_quota = Some(v.value);
            }
            if let Some(v) = cpu.period.as_ref() {
                current.cpu_period = Some(v.value);
            }
        }
        if let Some(v) = res.memory.as_ref().and_then(|m| m.limit.as_ref()) {
            current.memory_limit = Some(v.value).filter(|&l| l > 0);
        }
    }
    let container = estimate_container(&view.container().name, view.qos, &current, memory_capacity);
    let mut next = view.clone();
    next.estimate.class = admission_class(view.qos, &container);
    next.estimate.container = container;
    next.current = current;
    next
}

/// Builds the view of `ctr` in `pod`, or says why topolet leaves it alone or cannot read it.
pub fn view(
    pod: &api::PodSandbox,
    ctr: &api::Container,
    memory_capacity: u64,
) -> Result<ContainerView, NoView> {
    PodContext::of(pod).view(ctr, memory_capacity)
}

/// What every container's view in one pod shares, read from the sandbox once (Synchronize
/// builds the views of a 10,000-container node pod by pod).
pub struct PodContext<'a> {
    pod: &'a api::PodSandbox,
    /// The class and uid the sandbox's cgroup parent names, or why it is not a Kubernetes pod.
    info: Result<inverse::CgroupParentInfo, Ignored>,
    /// `namespace/name`, for logs.
    pod_ref: String,
}

impl<'a> PodContext<'a> {
    pub fn of(pod: &'a api::PodSandbox) -> PodContext<'a> {
        PodContext {
            pod,
            info: pod_qos(pod),
            pod_ref: format!("{}/{}", pod.namespace, pod.name),
        }
    }

    /// The pod's `namespace/name`.
    pub fn pod_ref(&self) -> &str {
        &self.pod_ref
    }

    /// The view of `ctr`, a container of this pod (see [`view`]).
    pub fn view(
        &self,
        ctr: &api::Container,
        memory_capacity: u64,
    ) -> Result<ContainerView, NoView> {
        if ctr.labels.get(CRI_KIND_LABEL).map(String::as_str) == Some("sandbox") {
            return Err(Ignored::Sandbox.into());
        }
        let info = self.info.as_ref().map_err(Clone::clone)?;
        let pod = self.pod;
        let current = current_resources(ctr)?;
        let container = estimate_container(&ctr.name, info.qos, &current, memory_capacity);
        let uid = pod_uid(pod).unwrap_or_else(|| info.pod_uid.clone());
        Ok(ContainerView {
            key: ContainerKey::new(uid.clone(), ctr.name.clone()),
            id: ctr.id.clone(),
            pod_ref: self.pod_ref.clone(),
            qos: info.qos,
            cgroup_parent: pod
                .linux
                .as_ref()
                .map(|l| l.cgroup_parent.clone())
                .unwrap_or_default(),
            cgroups_path: ctr
                .linux
                .as_ref()
                .map(|l| l.cgroups_path.clone())
                .unwrap_or_default(),
            estimate: NriContainer {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid,
                class: admission_class(info.qos, &container),
                role: None,
                container,
            },
            current,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use topolet_core::kube::qos;

    pub(crate) fn sandbox(uid: &str, cgroup_parent: &str) -> api::PodSandbox {
        let mut pod = api::PodSandbox::new();
        pod.id = format!("sb-{uid}");
        pod.uid = uid.into();
        pod.name = format!("pod-{uid}");
        pod.namespace = "default".into();
        let mut linux = api::LinuxPodSandbox::new();
        linux.cgroup_parent = cgroup_parent.into();
        pod.linux = protobuf::MessageField::some(linux);
        pod
    }

    pub(crate) fn container(
        name: &str,
        shares: u64,
        quota: i64,
        mem: i64,
        oom: i64,
    ) -> api::Container {
        let mut c = api::Container::new();
        c.id = format!("id-{name}");
        c.name = name.into();
        let mut cpu = api::LinuxCPU::new();
        cpu.shares = protobuf::MessageField::some(api::OptionalUInt64 {
            value: shares,
            ..Default::default()
        });
        if quota > 0 {
            cpu.quota = protobuf::MessageField::some(api::OptionalInt64 {
                value: quota,
                ..Default::default()
            });
        }
        cpu.period = protobuf::MessageField::some(api::OptionalUInt64 {
            value: 100_000,
            ..Default::default()
        });
        let mut res = api::LinuxResources::new();
        res.cpu = protobuf::MessageField::some(cpu);
        if mem > 0 {
            let mut m = api::LinuxMemory::new();
            m.limit = protobuf::MessageField::some(api::OptionalInt64 {
                value: mem,
                ..Default::default()
            });
            res.memory = protobuf::MessageField::some(m);
        }
        let mut linux = api::LinuxContainer::new();
        linux.resources = protobuf::MessageField::some(res);
        linux.oom_score_adj = protobuf::MessageField::some(api::OptionalInt {
            value: oom,
            ..Default::default()
        });
        c.linux = protobuf::MessageField::some(linux);
        c
    }

    const GIB: u64 = 1 << 30;

    /// A container's device nodes are listed; a container whose device cgroup allows every
    /// device (privileged) is said to use every device, whatever nodes it lists.
    #[test]
    fn device_nodes_and_the_privileged_case() {
        let mut c = container("app", 2048, 200_000, 1 << 30, -997);
        assert_eq!(device_nodes(&c), DeviceNodes::Listed(Vec::new()));
        let linux = c.linux.mut_or_insert_default();
        linux.devices.push(api::LinuxDevice {
            path: "/dev/nvidia0".into(),
            type_: "c".into(),
            major: 195,
            minor: 0,
            ..Default::default()
        });
        let resources = linux.resources.mut_or_insert_default();
        resources.devices.push(api::LinuxDeviceCgroup {
            allow: false,
            access: "rwm".into(),
            ..Default::default()
        });
        resources.devices.push(api::LinuxDeviceCgroup {
            allow: true,
            type_: "c".into(),
            major: protobuf::MessageField::some(api::OptionalInt64 {
                value: 195,
                ..Default::default()
            }),
            minor: protobuf::MessageField::some(api::OptionalInt64 {
                value: 0,
                ..Default::default()
            }),
            access: "rw".into(),
            ..Default::default()
        });
        let listed = crate::host::device_numa::DeviceNode {
            path: "/dev/nvidia0".into(),
            kind: "c".into(),
            major: 195,
            minor: 0,
        };
        assert_eq!(device_nodes(&c), DeviceNodes::Listed(vec![listed]));
        let resources = c
            .linux
            .mut_or_insert_default()
            .resources
            .mut_or_insert_default();
        resources.devices.push(api::LinuxDeviceCgroup {
            allow: true,
            access: "rwm".into(),
            ..Default::default()
        });
        assert_eq!(device_nodes(&c), DeviceNodes::Every);
    }

    #[test]
    fn guaranteed_integer_cpu_container() {
        let v = view(
            &sandbox("u1", "/kubepods/podu1"),
            &container("app", 2048, 200_000, 1 << 30, -997),
            64 * GIB,
        )
        .unwrap();
        assert_eq!(v.qos, QosClass::Guaranteed);
        assert_eq!(v.key, ContainerKey::new("u1", "app"));
        assert_eq!(v.container().requests.cpu_millis, Some(2000));
        assert_eq!(v.container().limits.memory_bytes, Some(1 << 30));
        assert_eq!(v.estimate.class, QosClass::Guaranteed);
        assert_eq!(
            qos::exclusive_cpu_count(v.qos, v.container().requests.cpu()),
            Some(2)
        );
    }

    #[test]
    fn burstable_memory_request_from_oom_score() {
        // 4 GiB request on a 64 GiB node: 1000 - 62 = 938 (62.5 truncated).
        let v = view(
            &sandbox("u2", "/kubepods/burstable/podu2"),
            &container("app", 512, 0, 0, 938),
            64 * GIB,
        )
        .unwrap();
        assert_eq!(v.qos, QosClass::Burstable);
        assert_eq!(v.container().requests.cpu_millis, Some(500));
        let req = v.container().requests.memory();
        assert!(req <= 4 * GIB && 4 * GIB - req < 64 * GIB / 1000, "{req}");
        assert_eq!(v.estimate.class, QosClass::Burstable);
    }

    #[test]
    fn a_burstable_pods_container_without_resources_stays_burstable() {
        // The kubelet: Burstable, request 0, oom_score_adj 1000 - 0 clamped to 999.
        let v = view(
            &sandbox("u6", "/kubepods/burstable/podu6"),
            &container("sidekick", 2, 0, 0, 999),
            64 * GIB,
        )
        .unwrap();
        assert_eq!(v.estimate.class, QosClass::Burstable);
        let oom = qos::oom_score_adj_in_class(
            v.estimate.class,
            v.container(),
            64 * GIB,
            qos::OomScoreVariant::Current,
        );
        assert_eq!(oom, 999, "the kubelet's value, not BestEffort's 1000");
    }

    #[test]
    fn besteffort_and_foreign_and_sandbox() {
        let v = view(
            &sandbox("u3", "/kubepods/besteffort/podu3"),
            &container("app", 2, 0, 0, 1000),
            GIB,
        )
        .unwrap();
        assert_eq!(v.qos, QosClass::BestEffort);
        assert_eq!(v.estimate.class, QosClass::BestEffort);

        let err = view(
            &sandbox("u4", "/system.slice/foo"),
            &container("x", 2, 0, 0, 0),
            GIB,
        )
        .unwrap_err();
        assert!(matches!(
            err,
            NoView::Ignored(Ignored::NotKubernetes { .. })
        ));
        assert!(err.to_string().contains("/system.slice/foo"));

        let mut pause = container("POD", 2, 0, 0, -998);
        pause.labels.insert(CRI_KIND_LABEL.into(), "sandbox".into());
        assert_eq!(
            view(&sandbox("u5", "/kubepods/podu5"), &pause, GIB).unwrap_err(),
            NoView::Ignored(Ignored::Sandbox)
        );
    }

    pub(crate) use topolet_testkit::kubelet::nri::with_cpuset;

    #[test]
    fn an_unreadable_cpuset_is_an_error_naming_the_container_and_the_field() {
        let pod = sandbox("u7", "/kubepods/besteffort/podu7");
        for (cpus, mems, field) in [
            ("0-x", "", CPUSET_CPUS_FIELD),
            ("0-1", "zero", CPUSET_MEMS_FIELD),
        ] {
            let c = with_cpuset(container("app", 2, 0, 0, 1000), cpus, mems);
            let err = view(&pod, &c, GIB).unwrap_err();
            let NoView::Bad(bad) = &err else {
                panic!("{err:?}")
            };
            assert_eq!((bad.container.as_str(), bad.field), ("app", field));
            let text = err.to_string();
            assert!(text.contains("\"app\"") && text.contains(field), "{text}");
        }
        // Empty fields are absent, not errors.
        let c = with_cpuset(container("app", 2, 0, 0, 1000), "", " ");
        let v = view(&pod, &c, GIB).unwrap();
        assert_eq!((v.current.cpuset_cpus, v.current.cpuset_mems), (None, None));
    }

    #[test]
    fn mems_are_sets_and_numa_ids_past_the_mask_are_an_error() {
        let pod = sandbox("u8", "/kubepods/besteffort/podu8");
        let a = view(
            &pod,
            &with_cpuset(container("a", 2, 0, 0, 1000), "0-3", "0,1"),
            GIB,
        )
        .unwrap();
        let b = view(
            &pod,
            &with_cpuset(container("a", 2, 0, 0, 1000), "0-3", "0-1"),
            GIB,
        )
        .unwrap();
        assert_eq!(a.current.cpuset_mems, b.current.cpuset_mems);
        let m = a.current.cpuset_mems.as_ref().unwrap();
        assert_eq!(mems_mask(m).unwrap(), NumaMask::from_ids([0, 1]).unwrap());
        let far = CpuSet::parse("0,64").unwrap();
        let e = mems_mask(&far).unwrap_err();
        assert!(e.contains("NUMA node 64") && e.contains("below 64"), "{e}");
    }

    #[test]
    fn the_pod_uid_is_the_sandbox_s_and_else_the_cgroup_path_s() {
        let mut pod = sandbox("from-sandbox", "/kubepods/besteffort/podfrom-path");
        assert_eq!(pod_uid(&pod).as_deref(), Some("from-sandbox"));
        pod.uid.clear();
        assert_eq!(pod_uid(&pod).as_deref(), Some("from-path"));
        let v = view(&pod, &container("app", 2, 0, 0, 1000), GIB).unwrap();
        assert_eq!(v.key.pod_uid, "from-path");
    }

    #[test]
    fn older_kubelets_lowest_burstable_score_still_reads_as_a_large_request() {
        // oom_score_adj 2 comes only from kubelets that used -998 for Guaranteed.
        let v = view(
            &sandbox("u6", "/kubepods/burstable/podu6"),
            &container("app", 512, 0, 0, 2),
            64 * GIB,
        )
        .unwrap();
        assert!(v.container().requests.memory() >= 63 * GIB);
    }

    #[test]
    fn systemd_driver_parent() {
        let v = view(
            &sandbox(
                "",
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice",
            ),
            &container("app", 102, 0, 0, 999),
            GIB,
        )
        .unwrap();
        assert_eq!(v.qos, QosClass::Burstable);
        assert_eq!(v.key.pod_uid, "12-34");
    }
}
