//! Pod and container configs shaped exactly like the kubelet sends them (cgroupfs driver,
//! cgroups-per-qos, host network), per QoS class.
//!
//! Sources: kubelet `kuberuntime_container_linux.go` (`calculateLinuxResources`),
//! `pkg/kubelet/qos/policy.go` (oom_score_adj) and the pod cgroup names of
//! `pod_container_manager_linux.go`, as summarised in containerd-test-stack.md "What kubelet
//! sends". Pods live under the stack's `CGROUP_PARENT_BASE` (a `--cgroup-root` prefix), e.g.
//! `<base>/kubepods/burstable/pod<uid>`.

use serde_json::{json, Value};

/// CFS period the kubelet always sends (µs).
pub const CPU_PERIOD: i64 = 100_000;
/// Minimum CFS quota the kubelet sends (µs).
pub const MIN_QUOTA: i64 = 1_000;
/// Minimum cpu.shares.
pub const MIN_SHARES: u64 = 2;
/// Guaranteed containers' oom_score_adj as the kubelet computes it.
pub const GUARANTEED_OOM: i64 = -997;
/// BestEffort containers' oom_score_adj.
pub const BESTEFFORT_OOM: i64 = 1000;

/// A pod's QoS class (kubelet `GetPodQOS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

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
        let cpu_shares = match r.cpu_request_m {
            Some(m) => (m * 1024 / 1000).max(MIN_SHARES),
            None => MIN_SHARES,
        };
        let cpu_quota = match r.cpu_limit_m {
            Some(m) => (m as i64 * CPU_PERIOD / 1000).max(MIN_QUOTA),
            None => 0,
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

/// A host-network pod (PodSandboxConfig).
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub qos: Qos,
    /// Absolute cgroup parent, e.g. `<base>/kubepods/burstable/pod<uid>`.
    pub cgroup_parent: String,
    /// Pod-level resources (the kubelet sends the sum of its containers'); None = not sent.
    pub resources: Option<KubeletResources>,
    pub log_directory: String,
}

impl PodSpec {
    /// A pod of class `qos` named `name` (uid `uid-<name>`) under the stack's cgroup base.
    pub fn new(cgroup_base: &str, log_root: &str, name: &str, qos: Qos) -> PodSpec {
        let uid = format!("uid-{name}");
        PodSpec {
            name: name.to_string(),
            namespace: "topolet-it".to_string(),
            cgroup_parent: pod_cgroup_parent(cgroup_base, qos, &uid),
            uid,
            qos,
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
            "log_directory": self.log_directory,
            "linux": linux,
        })
    }
}

/// The kubelet's pod cgroup for class `qos` under `base` (its `--cgroup-root`).
pub fn pod_cgroup_parent(base: &str, qos: Qos, uid: &str) -> String {
    let class = match qos {
        Qos::Guaranteed => "",
        Qos::Burstable => "/burstable",
        Qos::BestEffort => "/besteffort",
    };
    format!("{base}/kubepods{class}/pod{uid}")
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
        }
    }

    pub fn qos(&self) -> Qos {
        self.requirements.qos()
    }

    /// The CRI ContainerConfig (crictl JSON).
    pub fn to_json(&self) -> Value {
        json!({
            "metadata": {"name": self.name, "attempt": 0},
            "image": {"image": self.image},
            "command": self.command,
            "log_path": format!("{}.log", self.name),
            "labels": {"io.kubernetes.container.name": self.name},
            "linux": {
                "resources": self.resources.to_json(),
                "security_context": {"namespace_options": {"network": 2, "pid": 1, "ipc": 0}},
            },
        })
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
}
