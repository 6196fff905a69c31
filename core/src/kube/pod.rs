//! The pod model the core works on: pods, containers, their requests and limits, priority.
//!
//! Owns the plain-value description of a pod after parsing (see `pod_input` for the Kubernetes
//! JSON/YAML side) and three kubelet rules about it:
//! - critical pods: `pkg/kubelet/types/pod_update.go` `IsCriticalPod` / `IsNodeCriticalPod`;
//! - restartable init ("sidecar") containers: `IsRestartableInitContainer` (same file);
//! - effective pod requests and limits with sidecars (KEP-753), as
//!   `k8s.io/component-helpers/resource/helpers.go` `PodRequests` / `PodLimits` aggregate them.
//!
//! Amounts are integers: CPU in millicores (rounded up like `MilliValue()`), memory and
//! hugepages in bytes (rounded up like `Value()`), extended resources as whole numbers. A resource
//! that is absent is `None` (or missing from the map); the API's defaulting of requests from limits
//! has already been applied by `pod_input`.

use std::collections::BTreeMap;

/// `scheduling.SystemCriticalPriority`: priorities at or above this are critical (`IsCriticalPod`).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// Priority class of node-critical pods (`scheduling.SystemNodeCritical`).
pub const SYSTEM_NODE_CRITICAL: &str = "system-node-critical";
/// Priority class of cluster-critical pods (`scheduling.SystemClusterCritical`).
pub const SYSTEM_CLUSTER_CRITICAL: &str = "system-cluster-critical";

/// The annotation the kubelet sets on a mirror pod: its static pod's uid.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The annotation naming where a pod's config came from (`api` for pods from the API server;
/// `file` or `http` for static pods), on the pod and on its sandbox.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// The kubelet's `IsStaticPod` / `IsMirrorPod`, from a pod's (or sandbox's) annotations: a
/// mirror pod, or a pod whose config source is not the API server.
pub fn is_static_or_mirror<'a>(annotation: impl Fn(&str) -> Option<&'a str>) -> bool {
    annotation(CONFIG_MIRROR_ANNOTATION).is_some()
        || annotation(CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s != "api")
}

/// One set of resource amounts: a container's (or a pod's) requests or its limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceList {
    /// CPU in millicores.
    pub cpu_millis: Option<u64>,
    /// Memory in bytes.
    pub memory_bytes: Option<u64>,
    /// `ephemeral-storage` in bytes (used by disk-pressure eviction ranking only).
    pub ephemeral_storage_bytes: Option<u64>,
    /// Hugepages: page size in bytes → amount in bytes (`hugepages-2Mi: 1Gi` is `2097152 → 1073741824`).
    pub hugepages: BTreeMap<u64, u64>,
    /// Extended resources (`nvidia.com/gpu`, …) by name → whole number.
    pub extended: BTreeMap<String, u64>,
}

impl ResourceList {
    /// CPU millicores, 0 when absent.
    pub fn cpu(&self) -> u64 {
        self.cpu_millis.unwrap_or(0)
    }

    /// Memory bytes, 0 when absent.
    pub fn memory(&self) -> u64 {
        self.memory_bytes.unwrap_or(0)
    }

    /// Ephemeral storage bytes, 0 when absent.
    pub fn ephemeral_storage(&self) -> u64 {
        self.ephemeral_storage_bytes.unwrap_or(0)
    }

    /// True when nothing at all is set, `ephemeral-storage` aside (pod-level resources cannot
    /// carry it, and it never changes a pod's QoS class).
    pub fn is_empty(&self) -> bool {
        self.cpu_millis.is_none()
            && self.memory_bytes.is_none()
            && self.hugepages.is_empty()
            && self.extended.is_empty()
    }

    /// Apply `f` to each resource present in either list, giving absent ones as 0; the
    /// result holds a resource when either input holds it.
    fn combine(&self, other: &ResourceList, f: impl Fn(u64, u64) -> u64) -> ResourceList {
        fn opt(a: Option<u64>, b: Option<u64>, f: &impl Fn(u64, u64) -> u64) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(f(a.unwrap_or(0), b.unwrap_or(0))),
            }
        }
        fn map<K: Ord + Clone>(
            a: &BTreeMap<K, u64>,
            b: &BTreeMap<K, u64>,
            f: &impl Fn(u64, u64) -> u64,
        ) -> BTreeMap<K, u64> {
            let mut out = a.clone();
            for (k, v) in b {
                let cur = out.get(k).copied().unwrap_or(0);
                out.insert(k.clone(), f(cur, *v));
            }
            for (k, v) in out.iter_mut() {
                if !b.contains_key(k) {
                    *v = f(*v, 0);
                }
            }
            out
        }
        ResourceList {
            cpu_millis: opt(self.cpu_millis, other.cpu_millis, &f),
            memory_bytes: opt(self.memory_bytes, other.memory_bytes, &f),
            ephemeral_storage_bytes: opt(
                self.ephemeral_storage_bytes,
                other.ephemeral_storage_bytes,
                &f,
            ),
            hugepages: map(&self.hugepages, &other.hugepages, &f),
            extended: map(&self.extended, &other.extended, &f),
        }
    }

    /// Per-resource sum (saturating).
    pub fn add(&self, other: &ResourceList) -> ResourceList {
        self.combine(other, u64::saturating_add)
    }

    /// Per-resource maximum.
    pub fn max(&self, other: &ResourceList) -> ResourceList {
        self.combine(other, u64::max)
    }
}

/// Requests and limits of one container, or of a whole pod (`spec.resources`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub requests: ResourceList,
    pub limits: ResourceList,
}

/// A container's `restartPolicy` (set only on init containers, where `Always` makes a sidecar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerRestartPolicy {
    Always,
    OnFailure,
    Never,
}

/// One container of a pod (app or init).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Container {
    pub name: String,
    pub requests: ResourceList,
    pub limits: ResourceList,
    /// `restartPolicy`; `Some(Always)` on an init container makes it a restartable sidecar.
    pub restart_policy: Option<ContainerRestartPolicy>,
}

impl Container {
    /// `IsRestartableInitContainer`: the container's restart policy is `Always`. Only meaningful
    /// for init containers.
    pub fn is_restartable(&self) -> bool {
        self.restart_policy == Some(ContainerRestartPolicy::Always)
    }
}

/// A pod as the core sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.priority`, resolved by the API server's Priority admission from the class.
    pub priority: Option<i32>,
    /// `spec.priorityClassName`.
    pub priority_class_name: Option<String>,
    /// True for static and mirror pods (annotation `kubernetes.io/config.mirror`, or
    /// `kubernetes.io/config.source` other than `api`): the kubelet treats them as critical.
    pub static_or_mirror: bool,
    pub init_containers: Vec<Container>,
    pub containers: Vec<Container>,
    /// Pod-level `spec.resources` (KEP-2837), when given.
    pub resources: Option<Resources>,
    /// `spec.terminationGracePeriodSeconds` (the API defaults it to 30; `pod_input` does too).
    pub termination_grace_period_seconds: Option<i64>,
}

/// Which of a pod's containers: `Init(i)` is `init_containers[i]`, `App(i)` is `containers[i]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContainerRef {
    Init(usize),
    App(usize),
}

impl Pod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The container `r` points at, if it exists.
    pub fn container(&self, r: ContainerRef) -> Option<&Container> {
        match r {
            ContainerRef::Init(i) => self.init_containers.get(i),
            ContainerRef::App(i) => self.containers.get(i),
        }
    }

    /// All containers in admission order: init containers first, then app containers.
    pub fn all_containers(&self) -> impl Iterator<Item = (ContainerRef, &Container)> {
        let init = self
            .init_containers
            .iter()
            .enumerate()
            .map(|(i, c)| (ContainerRef::Init(i), c));
        let app = self
            .containers
            .iter()
            .enumerate()
            .map(|(i, c)| (ContainerRef::App(i), c));
        init.chain(app)
    }

    /// The priority the kubelet sees. `spec.priority` when set; otherwise the value the Priority
    /// admission plugin gives the two built-in system classes (system-cluster-critical =
    /// 2000000000, system-node-critical = 2000001000), so specs written by hand behave as the
    /// same pod would after admission. Other classes without a priority give `None`.
    pub fn effective_priority(&self) -> Option<i32> {
        self.priority.or(match self.priority_class_name.as_deref() {
            Some(SYSTEM_CLUSTER_CRITICAL) => Some(SYSTEM_CRITICAL_PRIORITY),
            Some(SYSTEM_NODE_CRITICAL) => Some(SYSTEM_CRITICAL_PRIORITY + 1000),
            _ => None,
        })
    }

    /// `IsCriticalPod` (pkg/kubelet/types/pod_update.go): a static or mirror pod, or a pod whose
    /// priority is at least `SystemCriticalPriority` (2000000000), i.e. both system classes.
    pub fn is_critical(&self) -> bool {
        self.static_or_mirror
            || self
                .effective_priority()
                .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
    }

    /// `IsNodeCriticalPod` (pkg/kubelet/types/pod_update.go): critical *and* priority class
    /// `system-node-critical`. This is the test the kubelet's oom_score_adj rule uses (−997);
    /// a `system-cluster-critical` pod is critical but not node-critical.
    pub fn is_node_critical(&self) -> bool {
        self.is_critical() && self.priority_class_name.as_deref() == Some(SYSTEM_NODE_CRITICAL)
    }

    /// Effective pod requests: `PodRequests` with sidecars (KEP-753). Regular init containers run
    /// one at a time, each alongside the sidecars started before it; sidecars keep running and add
    /// to the app containers. Result per resource: `max(sum(app) + sum(sidecars), max over init
    /// containers of (its request + sidecars started before it), running sum of sidecars)`.
    /// Pod-level `spec.resources.requests` (cpu, memory, hugepages) override the aggregate.
    /// Pod overhead is not modelled.
    pub fn effective_requests(&self) -> ResourceList {
        let agg = self.aggregate(|c| &c.requests);
        override_pod_level(agg, self.resources.as_ref().map(|r| &r.requests))
    }

    /// Effective pod limits, aggregated the same way as requests (`PodLimits`), with pod-level
    /// `spec.resources.limits` overriding.
    pub fn effective_limits(&self) -> ResourceList {
        let agg = self.aggregate(|c| &c.limits);
        override_pod_level(agg, self.resources.as_ref().map(|r| &r.limits))
    }

    /// `AggregateContainerRequests` / `AggregateContainerLimits`: the container-level KEP-753
    /// aggregation, ignoring pod-level resources.
    pub fn aggregate(&self, pick: impl Fn(&Container) -> &ResourceList) -> ResourceList {
        let mut app = ResourceList::default();
        for c in &self.containers {
            app = app.add(pick(c));
        }
        let mut sidecars = ResourceList::default();
        let mut init_peak = ResourceList::default();
        for c in &self.init_containers {
            let this = if c.is_restartable() {
                app = app.add(pick(c));
                sidecars = sidecars.add(pick(c));
                sidecars.clone()
            } else {
                pick(c).add(&sidecars)
            };
            init_peak = init_peak.max(&this);
        }
        app.max(&init_peak)
    }
}

/// Pod-level values replace the aggregate for the resources pod-level resources support
/// (`IsSupportedPodLevelResource`: cpu, memory, hugepages).
fn override_pod_level(mut agg: ResourceList, pod: Option<&ResourceList>) -> ResourceList {
    if let Some(p) = pod {
        if p.cpu_millis.is_some() {
            agg.cpu_millis = p.cpu_millis;
        }
        if p.memory_bytes.is_some() {
            agg.memory_bytes = p.memory_bytes;
        }
        for (size, v) in &p.hugepages {
            agg.hugepages.insert(*size, *v);
        }
    }
    agg
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn rl(cpu: Option<u64>, mem: Option<u64>) -> ResourceList {
        ResourceList {
            cpu_millis: cpu,
            memory_bytes: mem,
            ..Default::default()
        }
    }

    /// Pod `default/p` of `containers`.
    pub(crate) fn pod_of(containers: Vec<Container>) -> Pod {
        Pod {
            namespace: "default".into(),
            name: "p".into(),
            containers,
            ..Default::default()
        }
    }

    pub(crate) fn ctr(name: &str, req: ResourceList, lim: ResourceList) -> Container {
        Container {
            name: name.to_string(),
            requests: req,
            limits: lim,
            restart_policy: None,
        }
    }

    fn sidecar(name: &str, req: ResourceList) -> Container {
        Container {
            restart_policy: Some(ContainerRestartPolicy::Always),
            ..ctr(name, req, ResourceList::default())
        }
    }

    #[test]
    fn critical_pods() {
        let mut p = Pod::default();
        assert!(!p.is_critical());
        p.priority = Some(SYSTEM_CRITICAL_PRIORITY);
        assert!(p.is_critical() && !p.is_node_critical());
        p.priority_class_name = Some(SYSTEM_NODE_CRITICAL.into());
        assert!(p.is_node_critical());
        // Class alone (no resolved priority) resolves as admission would.
        let p = Pod {
            priority_class_name: Some(SYSTEM_NODE_CRITICAL.into()),
            ..Default::default()
        };
        assert!(p.is_node_critical());
        let p = Pod {
            priority_class_name: Some(SYSTEM_CLUSTER_CRITICAL.into()),
            ..Default::default()
        };
        assert!(p.is_critical() && !p.is_node_critical());
        // A class named system-node-critical with a low explicit priority is not critical.
        let p = Pod {
            priority: Some(1000),
            priority_class_name: Some(SYSTEM_NODE_CRITICAL.into()),
            ..Default::default()
        };
        assert!(!p.is_node_critical());
        let p = Pod {
            static_or_mirror: true,
            ..Default::default()
        };
        assert!(p.is_critical());
    }

    #[test]
    fn effective_requests_with_sidecars() {
        // KEP-753 example shape: init 1 (plain, 5 cpu), sidecar 1 cpu, init 2 (plain, 3 cpu),
        // app 2 cpu. Peaks: init1 = 5; sidecar running = 1; init2 + sidecar = 4; app + sidecar = 3.
        let pod = Pod {
            init_containers: vec![
                ctr("i1", rl(Some(5000), None), ResourceList::default()),
                sidecar("s1", rl(Some(1000), Some(100))),
                ctr("i2", rl(Some(3000), Some(500)), ResourceList::default()),
            ],
            containers: vec![ctr("a", rl(Some(2000), Some(200)), ResourceList::default())],
            ..Default::default()
        };
        let r = pod.effective_requests();
        assert_eq!(r.cpu_millis, Some(5000));
        assert_eq!(r.memory_bytes, Some(600)); // init2 500 + sidecar 100 > app 200 + 100
                                               // Sidecar-heavy: sidecars dominate.
        let pod = Pod {
            init_containers: vec![
                sidecar("s1", rl(Some(4000), None)),
                ctr("i", rl(Some(1000), None), ResourceList::default()),
            ],
            containers: vec![ctr("a", rl(Some(2000), None), ResourceList::default())],
            ..Default::default()
        };
        assert_eq!(pod.effective_requests().cpu_millis, Some(6000));
        // Pod-level resources override.
        let pod = Pod {
            containers: vec![ctr("a", rl(Some(2000), None), ResourceList::default())],
            resources: Some(Resources {
                requests: rl(Some(3000), Some(1 << 30)),
                limits: ResourceList::default(),
            }),
            ..Default::default()
        };
        let r = pod.effective_requests();
        assert_eq!((r.cpu_millis, r.memory_bytes), (Some(3000), Some(1 << 30)));
    }
}
