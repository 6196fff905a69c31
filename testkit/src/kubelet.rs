//! The kubelet, simulated: from a pod as its author writes it (names, uid, labels, annotations,
//! each container's requests and limits), the CRI requests exactly as the kubelet builds them —
//! and, through containerd, the NRI messages a plugin receives. The one simulator of every test
//! suite: topolet's handler tests, the fuzz properties and seeds ([`nri`]), and the end-to-end
//! suites (crictl JSON, [`PodSpec::to_json`] / [`ContainerSpec::to_json`]).
//!
//! Every kubelet rule the tests rely on lives here, each under the kubelet function it mirrors:
//! - the QoS class (`pkg/apis/core/helper/qos` `GetPodQOS`): [`Requirements::qos`], [`pod_qos`];
//! - a container's `linux.resources` (`pkg/kubelet/kuberuntime/kuberuntime_container_linux.go`
//!   `calculateLinuxResources`, `pkg/kubelet/cm/helpers_linux.go` `MilliCPUToShares` /
//!   `MilliCPUToQuota`): [`Requirements::kubelet_resources`];
//! - oom_score_adj (`pkg/kubelet/qos/policy.go` `GetContainerOOMScoreAdjust`): [`burstable_oom`];
//! - the cpuset the kubelet's CPU manager leaves (`none` policy: unset; `static`: the exclusive
//!   CPUs): [`ContainerSpec::cpuset_cpus`];
//! - the pod cgroup for either cgroup driver: [`crate::cgroup_names`];
//! - the sandbox and container labels (`kuberuntime_labels.go` `newPodLabels` /
//!   `newContainerLabels`).
//!
//! Sources: `pkg/kubelet/kuberuntime/kuberuntime_container_linux.go`
//! (`generateLinuxContainerResources`, `calculateLinuxResources`) and `pkg/kubelet/qos/policy.go`.
//! End-to-end pods live
//! under the stack's `CGROUP_PARENT_BASE` (a `--cgroup-root` prefix), e.g.
//! `<base>/kubepods/burstable/pod<uid>`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use topolet_nri::api;

use crate::cgroup_names::{pod_cgroup_parent, Driver};

/// CFS period the kubelet always sends (µs).
pub const CPU_PERIOD: i64 = 100_000;
/// Minimum CFS quota the kubelet sends (µs).
pub const MIN_QUOTA: i64 = 1_000;
/// Minimum cpu.shares.
pub const MIN_SHARES: u64 = 2;
/// Maximum cpu.shares (`MaxShares`).
pub const MAX_SHARES: u64 = 262_144;
/// Guaranteed containers' oom_score_adj as the kubelet computes it.
pub const GUARANTEED_OOM: i64 = -997;
/// BestEffort containers' oom_score_adj.
pub const BESTEFFORT_OOM: i64 = 1000;

pub use crate::qos::Qos;

/// A container's requests and limits as a pod author writes them (CPU in millicores, memory in
/// bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requirements {
    pub cpu_request_m: Option<u64>,
    pub cpu_limit_m: Option<u64>,
    pub mem_request: Option<u64>,
    pub mem_limit: Option<u64>,
}

impl Requirements {
    /// requests = limits = (`cpu_m`, `mem`): Guaranteed.
    pub fn guaranteed(cpu_m: u64, mem: u64) -> Requirements {
        Requirements {
            cpu_request_m: Some(cpu_m),
            cpu_limit_m: Some(cpu_m),
            mem_request: Some(mem),
            mem_limit: Some(mem),
        }
    }

    /// Nothing requested, nothing limited: BestEffort.
    pub fn best_effort() -> Requirements {
        Requirements::default()
    }

    /// Requests below limits (either limit may be absent): Burstable.
    pub fn burstable(
        cpu_request_m: u64,
        cpu_limit_m: Option<u64>,
        mem_request: u64,
        mem_limit: Option<u64>,
    ) -> Requirements {
        Requirements {
            cpu_request_m: Some(cpu_request_m),
            cpu_limit_m,
            mem_request: Some(mem_request),
            mem_limit,
        }
    }

    /// The kubelet's defaulting: a limit without a request makes the request equal the limit.
    fn effective(self) -> Requirements {
        Requirements {
            cpu_request_m: self.cpu_request_m.or(self.cpu_limit_m),
            mem_request: self.mem_request.or(self.mem_limit),
            ..self
        }
    }

    /// The QoS class of a one-container pod with these requirements.
    pub fn qos(self) -> Qos {
        let r = self.effective();
        let all_none = r.cpu_request_m.is_none()
            && r.cpu_limit_m.is_none()
            && r.mem_request.is_none()
            && r.mem_limit.is_none();
        if all_none {
            return Qos::BestEffort;
        }
        let cpu_eq = r.cpu_limit_m.is_some() && r.cpu_request_m == r.cpu_limit_m;
        let mem_eq = r.mem_limit.is_some() && r.mem_request == r.mem_limit;
        if cpu_eq && mem_eq {
            Qos::Guaranteed
        } else {
            Qos::Burstable
        }
    }

    /// What the kubelet sends in `ContainerConfig.linux.resources` for these requirements on a
    /// node with `mem_capacity` bytes.
    pub fn kubelet_resources(self, mem_capacity: u64) -> KubeletResources {
        let r = self.effective();
        // MilliCPUToShares: 0 (or none) → the minimum, capped at MaxShares.
        let cpu_shares = match r.cpu_request_m {
            Some(m) => {
                (u128::from(m) * 1024 / 1000).clamp(MIN_SHARES.into(), MAX_SHARES.into()) as u64
            }
            None => MIN_SHARES,
        };
        // MilliCPUToQuota: no limit (or 0) → no quota, else at least the minimum.
        let cpu_quota = match r.cpu_limit_m {
            Some(m) if m > 0 => i64::try_from(u128::from(m) * CPU_PERIOD as u128 / 1000)
                .unwrap_or(i64::MAX)
                .max(MIN_QUOTA),
            _ => 0,
        };
        let oom_score_adj = match self.qos() {
            Qos::Guaranteed => GUARANTEED_OOM,
            Qos::BestEffort => BESTEFFORT_OOM,
            Qos::Burstable => burstable_oom(r.mem_request.unwrap_or(0), mem_capacity),
        };
        KubeletResources {
            cpu_shares,
            cpu_quota,
            cpu_period: CPU_PERIOD,
            memory_limit: r.mem_limit.unwrap_or(0) as i64,
            oom_score_adj,
        }
    }
}

/// kubelet `GetContainerOOMScoreAdjust` for a Burstable container.
pub fn burstable_oom(mem_request: u64, mem_capacity: u64) -> i64 {
    if mem_capacity == 0 {
        return 999;
    }
    let adj = 1000 - (1000 * mem_request as i128 / mem_capacity as i128) as i64;
    if adj < 1000 + GUARANTEED_OOM {
        1000 + GUARANTEED_OOM
    } else if adj == BESTEFFORT_OOM {
        adj - 1
    } else {
        adj
    }
}

/// `ContainerConfig.linux.resources` as the kubelet fills it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeletResources {
    pub cpu_shares: u64,
    /// 0 = no limit (containerd leaves the quota unset).
    pub cpu_quota: i64,
    pub cpu_period: i64,
    /// 0 = no limit.
    pub memory_limit: i64,
    pub oom_score_adj: i64,
}

impl KubeletResources {
    /// `linux.resources` as containerd passes it to NRI: shares and period always, the quota
    /// and memory limit when set, `cpus` when the CPU manager set a cpuset.
    pub fn to_nri(self, cpus: Option<&str>) -> api::LinuxResources {
        let mut cpu = api::LinuxCPU::new();
        cpu.shares = Some(api::OptionalUInt64 {
            value: self.cpu_shares,
            ..Default::default()
        })
        .into();
        if self.cpu_quota > 0 {
            cpu.quota = Some(api::OptionalInt64 {
                value: self.cpu_quota,
                ..Default::default()
            })
            .into();
        }
        cpu.period = Some(api::OptionalUInt64 {
            value: u64::try_from(self.cpu_period).unwrap_or(0),
            ..Default::default()
        })
        .into();
        if let Some(c) = cpus {
            cpu.cpus = c.to_string();
        }
        let mut res = api::LinuxResources::new();
        res.cpu = Some(cpu).into();
        if self.memory_limit > 0 {
            let mut m = api::LinuxMemory::new();
            m.limit = Some(api::OptionalInt64 {
                value: self.memory_limit,
                ..Default::default()
            })
            .into();
            res.memory = Some(m).into();
        }
        res
    }

    fn to_json(self) -> Value {
        json!({
            "cpu_shares": self.cpu_shares,
            "cpu_quota": self.cpu_quota,
            "cpu_period": self.cpu_period,
            "memory_limit_in_bytes": self.memory_limit,
            "oom_score_adj": self.oom_score_adj,
        })
    }
}

/// The QoS class of a pod of containers with these requirements (`GetPodQOS`: every container
/// Guaranteed → Guaranteed, none requesting or limiting anything → BestEffort, else Burstable).
pub fn pod_qos(containers: &[Requirements]) -> Qos {
    let classes: Vec<Qos> = containers.iter().map(|r| r.qos()).collect();
    if classes.iter().all(|q| *q == Qos::BestEffort) {
        Qos::BestEffort
    } else if classes.iter().all(|q| *q == Qos::Guaranteed) {
        Qos::Guaranteed
    } else {
        Qos::Burstable
    }
}

/// The kubelet's own labels on a pod sandbox (`newPodLabels`, besides the pod's labels).
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// The kubelet's container-name label (`newContainerLabels`).
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// A host-network pod (PodSandboxConfig).
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub qos: Qos,
    /// The pod's own labels and annotations (the kubelet adds its labels, [`PodSpec::labels`]).
    pub pod_labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The kubelet's cgroup parent, e.g. `<base>/kubepods/burstable/pod<uid>` (cgroupfs) or
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice` (systemd).
    pub cgroup_parent: String,
    /// Pod-level resources (the kubelet sends the sum of its containers'); None = not sent.
    pub resources: Option<KubeletResources>,
    pub log_directory: String,
}

impl PodSpec {
    /// A pod of class `qos` named `name` (uid `uid-<name>`) under the stack's cgroup base
    /// (cgroupfs driver).
    pub fn new(cgroup_base: &str, log_root: &str, name: &str, qos: Qos) -> PodSpec {
        PodSpec::on_node(Driver::Cgroupfs, cgroup_base, log_root, name, qos)
    }

    /// A pod of class `qos` named `name` (uid `uid-<name>`) on a node whose kubelet runs with
    /// `--cgroup-driver=driver --cgroup-root=cgroup_root`.
    pub fn on_node(
        driver: Driver,
        cgroup_root: &str,
        log_root: &str,
        name: &str,
        qos: Qos,
    ) -> PodSpec {
        let uid = format!("uid-{name}");
        PodSpec {
            name: name.to_string(),
            namespace: "topolet-it".to_string(),
            cgroup_parent: pod_cgroup_parent(driver, cgroup_root, qos, &uid),
            uid,
            qos,
            pod_labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            resources: None,
            log_directory: format!("{log_root}/{name}"),
        }
    }

    /// A pod whose cgroup parent is not a kubelet pod cgroup (not a Kubernetes pod to topolet).
    pub fn foreign(cgroup_base: &str, log_root: &str, name: &str) -> PodSpec {
        let mut p = PodSpec::new(cgroup_base, log_root, name, Qos::BestEffort);
        p.cgroup_parent = format!("{cgroup_base}/other/{}", p.uid);
        p
    }

    /// `namespace/name`, as topolet logs it.
    pub fn pod_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The sandbox's labels as the kubelet sends them: the pod's, then its own.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut l = self.pod_labels.clone();
        l.insert(POD_NAME_LABEL.into(), self.name.clone());
        l.insert(POD_NAMESPACE_LABEL.into(), self.namespace.clone());
        l.insert(POD_UID_LABEL.into(), self.uid.clone());
        l
    }

    /// The CRI PodSandboxConfig (crictl JSON: snake_case, enums as numbers).
    pub fn to_json(&self) -> Value {
        let mut linux = json!({
            "cgroup_parent": self.cgroup_parent,
            "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}},
        });
        if let Some(r) = self.resources {
            linux["resources"] = r.to_json();
        }
        json!({
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid, "attempt": 0},
            "labels": self.labels(),
            "annotations": self.annotations,
            "log_directory": self.log_directory,
            "linux": linux,
        })
    }

    /// The sandbox as containerd hands it to an NRI plugin (id `sb-<uid>`).
    pub fn to_nri(&self) -> api::PodSandbox {
        let mut linux = api::LinuxPodSandbox::new();
        linux.cgroup_parent = self.cgroup_parent.clone();
        if let Some(r) = self.resources {
            linux.resources = Some(r.to_nri(None)).into();
        }
        api::PodSandbox {
            id: format!("sb-{}", self.uid),
            uid: self.uid.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            labels: self.labels().into_iter().collect(),
            annotations: self.annotations.clone().into_iter().collect(),
            linux: Some(linux).into(),
            ..Default::default()
        }
    }
}

/// A container (ContainerConfig).
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub requirements: Requirements,
    /// The kubelet-shaped values sent in `linux.resources`.
    pub resources: KubeletResources,
    /// `linux.resources.cpuset_cpus` as the kubelet's CPU manager leaves it: None with the `none`
    /// policy (what topolet runs beside), the exclusive CPUs with `static`.
    pub cpuset_cpus: Option<String>,
}

impl ContainerSpec {
    /// A `sleep` container with `requirements`, shaped for a node with `mem_capacity` bytes.
    pub fn sleeper(
        image: &str,
        name: &str,
        requirements: Requirements,
        mem_capacity: u64,
    ) -> ContainerSpec {
        ContainerSpec {
            name: name.to_string(),
            image: image.to_string(),
            command: vec!["/bin/sleep".into(), "3600".into()],
            resources: requirements.kubelet_resources(mem_capacity),
            requirements,
            cpuset_cpus: None,
        }
    }

    pub fn qos(&self) -> Qos {
        self.requirements.qos()
    }

    /// The container's labels as the kubelet sends them (`newContainerLabels`).
    pub fn labels(&self, pod: &PodSpec) -> BTreeMap<String, String> {
        let mut l = BTreeMap::new();
        l.insert(POD_NAME_LABEL.into(), pod.name.clone());
        l.insert(POD_NAMESPACE_LABEL.into(), pod.namespace.clone());
        l.insert(POD_UID_LABEL.into(), pod.uid.clone());
        l.insert(CONTAINER_NAME_LABEL.into(), self.name.clone());
        l
    }

    /// The CRI ContainerConfig (crictl JSON).
    pub fn to_json(&self) -> Value {
        let mut resources = self.resources.to_json();
        if let Some(c) = &self.cpuset_cpus {
            resources["cpuset_cpus"] = json!(c);
        }
        json!({
            "metadata": {"name": self.name, "attempt": 0},
            "image": {"image": self.image},
            "command": self.command,
            "log_path": format!("{}.log", self.name),
            "labels": {CONTAINER_NAME_LABEL: self.name},
            "linux": {
                "resources": resources,
                "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}},
            },
        })
    }

    /// The container as containerd hands it to an NRI plugin at CreateContainer (id
    /// `<pod uid>-<name>`).
    pub fn to_nri(&self, pod: &PodSpec) -> api::Container {
        let mut c = nri::container(&pod.to_nri(), &self.name, &self.resources);
        c.labels = self.labels(pod).into_iter().collect();
        if let Some(cpus) = &self.cpuset_cpus {
            let cpu = c
                .linux
                .mut_or_insert_default()
                .resources
                .mut_or_insert_default()
                .cpu
                .mut_or_insert_default();
            cpu.cpus = cpus.clone();
        }
        c
    }
}

/// A one-container pod of `requirements`' class: the pod (with kubelet's pod-level resources)
/// and its container.
pub fn one_container_pod(
    cgroup_base: &str,
    log_root: &str,
    image: &str,
    name: &str,
    requirements: Requirements,
    mem_capacity: u64,
) -> (PodSpec, ContainerSpec) {
    let ctr = ContainerSpec::sleeper(image, "main", requirements, mem_capacity);
    let mut pod = PodSpec::new(cgroup_base, log_root, name, requirements.qos());
    pod.resources = Some(ctr.resources);
    (pod, ctr)
}

/// Kubelet-shaped NRI messages in one call each, for the handler tests, the fuzz seeds and the
/// security tests: a pod under `/kubepods[/<class>]/pod<uid>` (cgroupfs, no `--cgroup-root`) on
/// a node of [`nri::NODE_MEMORY`] bytes, and its containers from requests and limits.
pub mod nri {
    use super::{api, KubeletResources, Qos, Requirements};

    use crate::cgroup_names::{pod_cgroup_parent, Driver};

    pub const GIB: i64 = 1 << 30;
    /// The node's memory capacity the shortcuts' oom_score_adj are computed for: a 500m / 1 GiB
    /// Burstable request gets 881.
    pub const NODE_MEMORY: u64 = 9_000_000_000;

    /// The class named by `class` ("" = Guaranteed, "burstable", "besteffort").
    fn qos_named(class: &str) -> Qos {
        match class {
            "burstable" => Qos::Burstable,
            "besteffort" => Qos::BestEffort,
            "" => Qos::Guaranteed,
            other => panic!("unknown QoS level {other:?} (\"\", \"burstable\" or \"besteffort\")"),
        }
    }

    /// A sandbox of `uid` under the kubelet's pod cgroup for `class` ("" = Guaranteed,
    /// "burstable", "besteffort").
    pub fn pod(uid: &str, class: &str) -> api::PodSandbox {
        pod_with_parent(
            uid,
            &pod_cgroup_parent(Driver::Cgroupfs, "", qos_named(class), uid),
        )
    }

    /// A sandbox of `uid` (name `pod-<uid>`, namespace `default`) with any cgroup parent.
    /// Without the kubelet's labels, so it encodes to the same bytes every time (protobuf map
    /// fields are written in hash order, and the fuzz seeds built from these are compared byte
    /// for byte); [`super::PodSpec::to_nri`] carries them.
    pub fn pod_with_parent(uid: &str, parent: &str) -> api::PodSandbox {
        let mut spec = super::PodSpec::new("", "", "", Qos::BestEffort);
        spec.uid = uid.into();
        spec.name = format!("pod-{uid}");
        spec.namespace = "default".into();
        spec.cgroup_parent = parent.into();
        let mut sandbox = spec.to_nri();
        sandbox.labels.clear();
        sandbox
    }

    /// The Linux resources the kubelet asks for: CFS shares, period 100ms, and the quota and
    /// memory limit when set (`quota` / `mem` 0 mean unset).
    pub fn resources(shares: u64, quota: i64, mem: i64) -> api::LinuxResources {
        KubeletResources {
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: super::CPU_PERIOD,
            memory_limit: mem,
            oom_score_adj: 0,
        }
        .to_nri(None)
    }

    /// A container of `pod` named `name` carrying `resources` as containerd hands it over.
    pub fn container(
        pod: &api::PodSandbox,
        name: &str,
        resources: &KubeletResources,
    ) -> api::Container {
        let mut linux = api::LinuxContainer::new();
        linux.resources = Some(resources.to_nri(None)).into();
        linux.oom_score_adj = Some(api::OptionalInt {
            value: resources.oom_score_adj,
            ..Default::default()
        })
        .into();
        api::Container {
            id: format!("{}-{name}", pod.uid),
            pod_sandbox_id: pod.id.clone(),
            name: name.into(),
            linux: Some(linux).into(),
            ..Default::default()
        }
    }

    /// A container with raw values, including ones no kubelet sends (`quota` / `mem` 0 mean
    /// unset): for tests of what a hand-made CRI client can ask.
    pub fn ctr(
        pod: &api::PodSandbox,
        name: &str,
        shares: u64,
        quota: i64,
        mem: i64,
        oom: i64,
    ) -> api::Container {
        let r = KubeletResources {
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: super::CPU_PERIOD,
            memory_limit: mem,
            oom_score_adj: oom,
        };
        container(pod, name, &r)
    }

    /// A container with `requirements`, as the kubelet shapes them on a node of [`NODE_MEMORY`].
    pub fn kubelet_ctr(
        pod: &api::PodSandbox,
        name: &str,
        requirements: Requirements,
    ) -> api::Container {
        container(pod, name, &requirements.kubelet_resources(NODE_MEMORY))
    }

    /// Guaranteed, `millis` CPU, 1 GiB (oom_score_adj −997).
    pub fn guaranteed(pod: &api::PodSandbox, name: &str, millis: u64) -> api::Container {
        kubelet_ctr(pod, name, Requirements::guaranteed(millis, GIB as u64))
    }

    /// Burstable: 500m and 1 GiB requested, no limit (oom_score_adj 881).
    pub fn burstable(pod: &api::PodSandbox, name: &str) -> api::Container {
        kubelet_ctr(
            pod,
            name,
            Requirements::burstable(500, None, GIB as u64, None),
        )
    }

    /// BestEffort: shares 2, nothing else (oom_score_adj 1000).
    pub fn besteffort(pod: &api::PodSandbox, name: &str) -> api::Container {
        kubelet_ctr(pod, name, Requirements::best_effort())
    }

    /// `c` with the cpuset the runtime reports (`cpus` and `mems`; "" leaves one unset).
    pub fn with_cpuset(mut c: api::Container, cpus: &str, mems: &str) -> api::Container {
        let cpu = c
            .linux
            .mut_or_insert_default()
            .resources
            .mut_or_insert_default()
            .cpu
            .mut_or_insert_default();
        cpu.cpus = cpus.into();
        cpu.mems = mems.into();
        c
    }

    /// `c` as the runtime reports a running container on `cpus` (mems unset), as Synchronize
    /// lists it.
    pub fn running(mut c: api::Container, cpus: &str) -> api::Container {
        c.state = api::ContainerState::CONTAINER_RUNNING.into();
        with_cpuset(c, cpus, "")
    }

    pub fn create(pod: &api::PodSandbox, c: &api::Container) -> api::CreateContainerRequest {
        api::CreateContainerRequest {
            pod: Some(pod.clone()).into(),
            container: Some(c.clone()).into(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn kubelet_shapes() {
        let g = Requirements::guaranteed(1000, GIB).kubelet_resources(8 * GIB);
        assert_eq!(
            g,
            KubeletResources {
                cpu_shares: 1024,
                cpu_quota: 100_000,
                cpu_period: 100_000,
                memory_limit: GIB as i64,
                oom_score_adj: -997
            }
        );
        let be = Requirements::best_effort().kubelet_resources(8 * GIB);
        assert_eq!(
            (
                be.cpu_shares,
                be.cpu_quota,
                be.memory_limit,
                be.oom_score_adj
            ),
            (2, 0, 0, 1000)
        );
        let b = Requirements::burstable(250, Some(500), GIB, None);
        assert_eq!(b.qos(), Qos::Burstable);
        let br = b.kubelet_resources(8 * GIB);
        assert_eq!(
            (br.cpu_shares, br.cpu_quota, br.memory_limit),
            (256, 50_000, 0)
        );
        assert_eq!(br.oom_score_adj, 875);
        assert_eq!(burstable_oom(0, GIB), 999);
        assert_eq!(burstable_oom(GIB, GIB), 3);
        assert_eq!(
            Requirements::burstable(5, None, 1, None)
                .kubelet_resources(GIB)
                .cpu_shares,
            5
        );
        assert_eq!(
            Requirements::burstable(1, Some(2), 1, None)
                .kubelet_resources(GIB)
                .cpu_quota,
            1000
        );
    }

    #[test]
    fn pod_class_over_its_containers() {
        let g = Requirements::guaranteed(1000, GIB);
        let be = Requirements::best_effort();
        assert_eq!(pod_qos(&[g, g]), Qos::Guaranteed);
        assert_eq!(pod_qos(&[be, be]), Qos::BestEffort);
        assert_eq!(pod_qos(&[g, be]), Qos::Burstable);
        // A limit alone defaults the request to it: Guaranteed.
        let limits_only = Requirements {
            cpu_limit_m: Some(500),
            mem_limit: Some(GIB),
            ..Requirements::default()
        };
        assert_eq!(limits_only.qos(), Qos::Guaranteed);
        assert_eq!(limits_only.kubelet_resources(8 * GIB).cpu_shares, 512);
        // Kubelet bounds: shares at most MaxShares, a zero limit is no limit.
        let huge = Requirements::burstable(1_000_000, Some(0), 1, None);
        let r = huge.kubelet_resources(GIB);
        assert_eq!((r.cpu_shares, r.cpu_quota), (MAX_SHARES, 0));
    }

    #[test]
    fn nri_messages_carry_what_the_kubelet_sent() {
        let mut pod = PodSpec::on_node(Driver::Systemd, "", "/logs", "web", Qos::Burstable);
        pod.pod_labels.insert("app".into(), "web".into());
        pod.annotations
            .insert("kubernetes.io/config.source".into(), "api".into());
        let mut c = ContainerSpec::sleeper(
            "img",
            "main",
            Requirements::burstable(250, Some(500), GIB, Some(2 * GIB)),
            8 * GIB,
        );
        c.cpuset_cpus = Some("2-3".into());
        let sb = pod.to_nri();
        assert_eq!(sb.id, "sb-uid-web");
        assert_eq!(
            sb.linux.cgroup_parent,
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_web.slice"
        );
        assert_eq!(sb.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(
            sb.labels.get(POD_UID_LABEL).map(String::as_str),
            Some("uid-web")
        );
        assert_eq!(
            sb.annotations
                .get("kubernetes.io/config.source")
                .map(String::as_str),
            Some("api")
        );
        let n = c.to_nri(&pod);
        assert_eq!(n.id, "uid-web-main");
        assert_eq!(n.pod_sandbox_id, sb.id);
        assert_eq!(
            n.labels.get(CONTAINER_NAME_LABEL).map(String::as_str),
            Some("main")
        );
        let cpu = &n.linux.resources.cpu;
        assert_eq!(cpu.shares.value, 256);
        assert_eq!(cpu.quota.value, 50_000);
        assert_eq!(cpu.period.value, 100_000);
        assert_eq!(cpu.cpus, "2-3");
        assert_eq!(n.linux.resources.memory.limit.value, (2 * GIB) as i64);
        assert_eq!(n.linux.oom_score_adj.value, burstable_oom(GIB, 8 * GIB));
        // The CRI request says the same.
        let j = c.to_json();
        assert_eq!(j["linux"]["resources"]["cpuset_cpus"], "2-3");
        assert_eq!(pod.to_json()["labels"]["app"], "web");
        // No quota or memory limit: absent, not zero.
        let be = nri::besteffort(&nri::pod("x", "besteffort"), "c");
        let r = &be.linux.resources;
        assert!(r.cpu.quota.is_none() && r.memory.is_none());
        assert_eq!(
            nri::burstable(&nri::pod("y", "burstable"), "c")
                .linux
                .oom_score_adj
                .value,
            881
        );
    }
}
