//! The configuration file's schema: [`Config`] and its sections, every key with its default and
//! unit, as serde reads them from TOML (unknown keys anywhere are errors).
//! `plugin/config.example.toml` documents every key; a test keeps the two in step.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use topolet_core::managers::topology::hints::TopologyOptions;

use crate::config::{
    reclaimed, CpuPolicyName, EvictionSection, MemoryPolicyName, TopologyPolicyName,
    TopologyScopeName,
};

/// The whole file. Unknown keys anywhere are errors.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub nri: NriConfig,
    pub cpu: CpuConfig,
    pub topology: TopologyConfig,
    pub memory: MemoryConfig,
    /// Extended resource name → PCI addresses of the devices that provide it (device hints).
    pub devices: BTreeMap<String, Vec<String>>,
    pub qos: QosConfig,
    pub state: StateConfig,
    pub admin: AdminConfig,
    pub metrics: MetricsConfig,
    /// `[eviction]`: node-pressure eviction (kubelet `eviction*` settings).
    pub eviction: EvictionSection,
    /// `[kubernetes]`: the API client (Events). Read at start only.
    pub kubernetes: KubernetesConfig,
    /// `[kubelet]`: the kubelet on this node (its PodResources API). Read at start only.
    pub kubelet: KubeletConfig,
    /// `[reclaimed]`: reclaimed CPU for batch pods (`topolet_core::reclaimed`).
    pub reclaimed: reclaimed::ReclaimedSection,
}

/// `[nri]`: how topolet registers with the runtime.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NriConfig {
    /// The runtime's NRI socket.
    pub socket: PathBuf,
    /// Plugin name (`[a-zA-Z0-9_.+-]+`).
    pub name: String,
    /// Plugin index, two digits: plugins run in ascending index order.
    pub index: PluginIndex,
    /// Seconds between drift checks (`crate::nri::handlers`: in a lull, every running container's
    /// process is compared with its target, and a container off it is sent its target again).
    /// Unset: [`DEFAULT_DRIFT_CHECK_S`]; 0: off; at most [`MAX_DRIFT_CHECK_S`].
    pub drift_check_s: Option<u64>,
}

/// `[nri] drift_check_s` when unset.
pub const DEFAULT_DRIFT_CHECK_S: u64 = 30;
/// The largest `[nri] drift_check_s`: a day.
pub const MAX_DRIFT_CHECK_S: u64 = 86_400;

impl NriConfig {
    /// The drift check's period; `None`: off.
    pub fn drift_check(&self) -> Option<std::time::Duration> {
        match self.drift_check_s.unwrap_or(DEFAULT_DRIFT_CHECK_S) {
            0 => None,
            s => Some(std::time::Duration::from_secs(s)),
        }
    }
}

impl Default for NriConfig {
    fn default() -> Self {
        NriConfig {
            socket: PathBuf::from("/var/run/nri/nri.sock"),
            name: "topolet".into(),
            index: PluginIndex(50),
            drift_check_s: None,
        }
    }
}

/// A plugin index `00`–`99`, written in TOML as an integer (`50`) or a string (`"05"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginIndex(pub u8);

impl PluginIndex {
    /// The two-digit form NRI expects.
    pub fn as_nri(self) -> String {
        format!("{:02}", self.0)
    }
}

impl<'de> Deserialize<'de> for PluginIndex {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Text(String),
        }
        let n = match Raw::deserialize(d)? {
            Raw::Int(n) => n,
            Raw::Text(t) if t.len() == 2 && t.bytes().all(|b| b.is_ascii_digit()) => {
                t.parse::<i64>().map_err(serde::de::Error::custom)?
            }
            Raw::Text(t) => {
                return Err(serde::de::Error::custom(format!(
                    "plugin index must be two digits, got {t:?}"
                )))
            }
        };
        if !(0..=99).contains(&n) {
            return Err(serde::de::Error::custom(format!(
                "plugin index must be between 0 and 99, got {n}"
            )));
        }
        Ok(PluginIndex(n as u8))
    }
}

/// `[cpu]`: the CPU manager (kubelet `cpuManagerPolicy`, `reservedSystemCPUs`,
/// `cpuManagerPolicyOptions`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CpuConfig {
    pub policy: CpuPolicyName,
    /// Explicit reserved CPUs (Linux list syntax). Exclusive with `reserved_cpu_count`.
    pub reserved_cpus: Option<String>,
    /// Number of CPUs to reserve, taken topology-aware from the lowest ids.
    pub reserved_cpu_count: Option<usize>,
    pub full_pcpus_only: bool,
    pub distribute_cpus_across_numa: bool,
    pub distribute_cpus_across_cores: bool,
    pub align_by_socket: bool,
    pub prefer_align_cpus_by_uncorecache: bool,
    pub strict_cpu_reservation: bool,
}

/// `[topology]`: the topology manager (kubelet `topologyManagerPolicy`, `topologyManagerScope`,
/// `topologyManagerPolicyOptions`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopologyConfig {
    pub policy: TopologyPolicyName,
    pub scope: TopologyScopeName,
    pub prefer_closest_numa_nodes: bool,
    pub max_allowable_numa_nodes: usize,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            policy: TopologyPolicyName::default(),
            scope: TopologyScopeName::default(),
            prefer_closest_numa_nodes: TopologyOptions::default().prefer_closest_numa_nodes,
            max_allowable_numa_nodes: TopologyOptions::default().max_allowable_numa_nodes,
        }
    }
}

/// `[memory]`: the memory manager (kubelet `memoryManagerPolicy`, `reservedMemory`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    pub policy: MemoryPolicyName,
    /// NUMA node id → quantity of memory kept out of exclusive NUMA-pinned allocations.
    pub reserved: BTreeMap<String, String>,
    /// Narrow the shared-pool containers' `cpuset.mems` to the NUMA nodes of the shared pool's
    /// CPUs (topolet's former behaviour). Default false, as the kubelet: it never sets
    /// `cpuset.mems` on containers the memory manager does not pin, so they keep every node.
    /// Opting in risks OOM kills of shared containers while other nodes have free memory.
    pub shared_pool_mems_follow_cpus: bool,
}

/// `[qos]`: per-QoS-class cgroup values.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QosConfig {
    /// kubelet `podPidsLimit`: > 0 sets pids.max on every container; 0 or -1 leaves it unlimited.
    pub pids_limit: i64,
    /// Lowest oom_score_adj the runtime can apply. Unset: detected at run time from the runtime's
    /// own oom_score_adj and capabilities.
    pub oom_score_adj_floor: Option<i32>,
    /// Keep the CFS quota on containers with exclusive CPUs and on their pod cgroups (kubelet's
    /// `DisableCPUQuotaWithExclusiveCPUs=false`). Default: both removed (`crate::host::pod_cgroup`).
    pub keep_cfs_quota_for_exclusive: bool,
}

impl Default for QosConfig {
    fn default() -> Self {
        QosConfig {
            pids_limit: -1,
            oom_score_adj_floor: None,
            keep_cfs_quota_for_exclusive: false,
        }
    }
}

/// `[state]`: where assignments are persisted.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    pub dir: PathBuf,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            dir: PathBuf::from("/var/lib/topolet"),
        }
    }
}

/// `[admin]`: the local admin socket `topolet status` talks to.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Unix socket path (created mode 0600; a missing parent directory is created mode 0700).
    pub socket: PathBuf,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            socket: PathBuf::from("/run/topolet/admin.sock"),
        }
    }
}

/// `[metrics]`: Prometheus metrics, `/healthz` and `/readyz` over HTTP.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    pub enabled: bool,
    /// `host:port` to listen on (port 0: any free port, logged at start).
    pub address: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            address: "127.0.0.1:9464".into(),
        }
    }
}

/// `[kubernetes]`: topolet's own Kubernetes API client (Events, the NodeResourceTopology). Read
/// at start only: a reload that changes it is applied at the next restart.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    pub enabled: KubernetesEnabled,
    /// A kubeconfig file (absolute path). Unset: the in-cluster service account, if any.
    pub kubeconfig: Option<PathBuf>,
    /// This node's name (the Events' `source.host`). Unset: `NODE_NAME`, else the hostname.
    pub node_name: Option<String>,
    /// How long CreateContainer may wait for the pod watch to deliver a pod it does not hold yet
    /// (synced watch, an API pod, at most once per pod), in milliseconds; then the NRI inversion
    /// decides. Unset: [`DEFAULT_POD_WAIT_MS`]; at most [`MAX_POD_WAIT_MS`]; 0: never wait.
    pub pod_wait_ms: Option<u64>,
    /// How long the API server keeps one watch request of the pod watch open before it ends it
    /// and topolet resumes it from the last resourceVersion (no relist), in seconds: each
    /// request asks for a time drawn between this and twice this. Unset:
    /// [`DEFAULT_WATCH_TIMEOUT_S`]; from [`MIN_WATCH_TIMEOUT_S`] to [`MAX_WATCH_TIMEOUT_S`]. A
    /// proxy or load balancer that cuts connections idle for less than twice this needs a lower
    /// value.
    pub watch_timeout_s: Option<u64>,
    /// Whose identity evictions (the Eviction API) go out under: [`EvictAs`].
    pub evict_as: EvictAs,
    /// The API writers (Node conditions and taints, the reclaimed-CPU amount, the
    /// NodeResourceTopology) send nothing for a random time from 0 to this after the start, in
    /// milliseconds, so that a fleet restarted at once (a DaemonSet rolling update) does not
    /// write to the API server in the same second (`crate::cluster::start_jitter`). The pod
    /// watch, Events and evictions do not wait, nor does anything NRI does. Unset:
    /// [`DEFAULT_START_JITTER_MS`]; 0: none; at most [`MAX_START_JITTER_MS`].
    pub start_jitter_ms: Option<u64>,
}

/// `[kubernetes] start_jitter_ms` when unset.
pub const DEFAULT_START_JITTER_MS: u64 = 5_000;
/// The largest `[kubernetes] start_jitter_ms`: a minute.
pub const MAX_START_JITTER_MS: u64 = 60_000;

/// `[kubernetes] evict_as`: the identity this node's pods are read (the pod watch, the eviction
/// loop's lists) and evicted under.
/// - `"node"`: this node's own (`system:node:<node>`), through constrained impersonation of the
///   node the service account's pod is bound to (the API server's `impersonate:associated-node`,
///   Kubernetes 1.36 and later); the API server's Node authorizer then serves it only this
///   node's pods, and NodeRestriction lets it evict only those, whatever topolet asks. Needs
///   in-cluster credentials (a service account token bound to a pod: it names the node).
/// - `"self"`: topolet's own identity, which then needs `pods` `list`, `watch` and
///   `pods/eviction` `create` (on every pod of the cluster: RBAC cannot scope them to a node).
/// - `"auto"` (default): `"node"` with the in-cluster service account, `"self"` with a
///   kubeconfig (its user is no pod's: it has no node to impersonate).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvictAs {
    #[default]
    Auto,
    Node,
    #[serde(rename = "self")]
    Itself,
}

/// `[kubelet]`: the kubelet on this node, as a source of the devices each container was given
/// (`crate::kubelet`). Read at start only.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeletConfig {
    /// Ask the kubelet's PodResources API for each container's devices.
    pub pod_resources: bool,
    /// The kubelet's PodResources socket.
    pub pod_resources_socket: PathBuf,
    /// How long CreateContainer may wait for the kubelet's answer, in milliseconds. Unset:
    /// [`DEFAULT_POD_RESOURCES_WAIT_MS`]; from 1 to [`MAX_POD_RESOURCES_WAIT_MS`].
    pub pod_resources_wait_ms: Option<u64>,
    /// Serve a PodResources socket of topolet's own here (absolute path; unset: none): the
    /// kubelet's answers with each container's exclusive CPUs (`cpu_ids`) and pinned memory
    /// filled in, for PodResources consumers (`crate::kubelet::reexport`). Mode 0600.
    pub pod_resources_export_socket: Option<PathBuf>,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        KubeletConfig {
            pod_resources: true,
            pod_resources_socket: PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"),
            pod_resources_wait_ms: None,
            pod_resources_export_socket: None,
        }
    }
}

/// `[kubelet] pod_resources_wait_ms` when unset: a local call the kubelet answers from memory.
pub const DEFAULT_POD_RESOURCES_WAIT_MS: u64 = 100;
/// The largest `[kubelet] pod_resources_wait_ms`: well inside containerd's 2 s NRI request
/// timeout, beside the pod watch's own wait.
pub const MAX_POD_RESOURCES_WAIT_MS: u64 = 500;

impl KubeletConfig {
    /// `pod_resources_wait_ms` as a duration (the default when unset).
    pub fn pod_resources_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.pod_resources_wait_ms
                .unwrap_or(DEFAULT_POD_RESOURCES_WAIT_MS),
        )
    }
}

/// `[kubernetes] watch_timeout_s` when unset: client-go's reflector's minWatchTimeout (5 min).
pub const DEFAULT_WATCH_TIMEOUT_S: u64 = 300;
/// The smallest `[kubernetes] watch_timeout_s`.
pub const MIN_WATCH_TIMEOUT_S: u64 = 10;
/// The largest `[kubernetes] watch_timeout_s`: half an hour (a longer watch only delays noticing
/// a connection that died silently).
pub const MAX_WATCH_TIMEOUT_S: u64 = 1800;

/// `[kubernetes] pod_wait_ms` when unset.
pub const DEFAULT_POD_WAIT_MS: u64 = 250;
/// The largest `[kubernetes] pod_wait_ms`: well inside containerd's 2 s NRI request timeout.
pub const MAX_POD_WAIT_MS: u64 = 1000;

impl KubernetesConfig {
    /// `pod_wait_ms` as a duration (the default when unset).
    pub fn pod_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.pod_wait_ms.unwrap_or(DEFAULT_POD_WAIT_MS))
    }

    /// `watch_timeout_s` as a duration (the default when unset).
    pub fn watch_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.watch_timeout_s.unwrap_or(DEFAULT_WATCH_TIMEOUT_S))
    }

    /// `start_jitter_ms` as a duration (the default when unset).
    pub fn start_jitter(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.start_jitter_ms.unwrap_or(DEFAULT_START_JITTER_MS))
    }
}

/// `[kubernetes] enabled`: `"auto"` (on when credentials are found: an explicit `kubeconfig`,
/// or the in-cluster service account), `"on"` (credentials are required: start fails without
/// them), `"off"`. `true` / `false` are accepted as `"on"` / `"off"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KubernetesEnabled {
    #[default]
    Auto,
    On,
    Off,
}

impl<'de> Deserialize<'de> for KubernetesEnabled {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        let bad = |got: String| {
            serde::de::Error::custom(format!(
                "kubernetes.enabled: expected \"auto\", \"on\" or \"off\", got {got}"
            ))
        };
        match Raw::deserialize(d).map_err(|_| bad("a value of another type".into()))? {
            Raw::Bool(true) => Ok(KubernetesEnabled::On),
            Raw::Bool(false) => Ok(KubernetesEnabled::Off),
            Raw::Text(t) => match t.as_str() {
                "auto" => Ok(KubernetesEnabled::Auto),
                "on" => Ok(KubernetesEnabled::On),
                "off" => Ok(KubernetesEnabled::Off),
                _ => Err(bad(format!("{t:?}"))),
            },
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::path::Path;

    use crate::config::{is_node_name, ConfigError};

    pub(crate) fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/topolet.toml"))
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.nri.index.as_nri(), "50");
        assert_eq!(c.nri.socket, PathBuf::from("/var/run/nri/nri.sock"));
    }

    #[test]
    fn full_file_parses() {
        let c = parse(
            r#"
[nri]
socket = "/run/x.sock"
name = "topolet"
index = "05"
[cpu]
policy = "static"
reserved_cpus = "0-1"
full_pcpus_only = true
[topology]
policy = "single-numa-node"
scope = "pod"
prefer_closest_numa_nodes = true
max_allowable_numa_nodes = 16
[memory]
policy = "static"
reserved = { 0 = "1Gi", 1 = "512Mi" }
[devices]
"example.com/nic" = ["0000:3b:00.0"]
[qos]
pids_limit = 4096
oom_score_adj_floor = 0
"#,
        )
        .unwrap();
        assert_eq!(c.nri.index, PluginIndex(5));
        assert_eq!(c.topology.policy, TopologyPolicyName::SingleNumaNode);
        assert_eq!(c.topology.scope, TopologyScopeName::Pod);
        assert_eq!(
            c.memory_reserved(),
            BTreeMap::from([(0, 1 << 30), (1, 512 << 20)])
        );
        assert_eq!(c.qos.pids_limit, 4096);
    }

    /// `plugin/config.example.toml` documents every key with its default: it must parse to the
    /// defaults once its commented-out examples are uncommented where they are optional.
    #[test]
    fn example_file_is_the_defaults_and_mentions_every_key() {
        let text = include_str!("../../config.example.toml");
        assert_eq!(parse(text).unwrap(), Config::default());
        let uncommented: String = text
            .lines()
            .map(|l| {
                l.strip_prefix("# ")
                    .filter(|r| r.contains(" = "))
                    .unwrap_or(l)
            })
            .filter(|l| !l.starts_with("reserved_cpu_count"))
            .collect::<Vec<_>>()
            .join("\n");
        let c = parse(&uncommented).unwrap();
        assert_eq!(c.cpu.reserved_cpus.as_deref(), Some("0"));
        assert_eq!(c.memory.reserved.len(), 2);
        assert_eq!(c.devices.len(), 1);
        assert_eq!(c.qos.oom_score_adj_floor, Some(0));
        assert!(c.kubernetes.kubeconfig.is_some() && c.kubernetes.node_name.is_some());
        let ev = c.eviction().unwrap();
        assert_eq!(ev.thresholds.len(), 6, "{:?}", ev.thresholds);
        assert_eq!(ev.thresholds.iter().filter(|t| !t.is_hard()).count(), 1);
        for key in [
            "socket",
            "name",
            "index",
            "policy",
            "reserved_cpus",
            "reserved_cpu_count",
            "full_pcpus_only",
            "distribute_cpus_across_numa",
            "distribute_cpus_across_cores",
            "align_by_socket",
            "prefer_align_cpus_by_uncorecache",
            "strict_cpu_reservation",
            "scope",
            "prefer_closest_numa_nodes",
            "max_allowable_numa_nodes",
            "reserved",
            "shared_pool_mems_follow_cpus",
            "pids_limit",
            "oom_score_adj_floor",
            "keep_cfs_quota_for_exclusive",
            "dir",
            "enabled",
            "address",
            "hard",
            "soft",
            "soft_grace_period",
            "minimum_reclaim",
            "pressure_transition_period",
            "max_pod_grace_period",
            "interval",
            "action",
            "cri_endpoint",
            "kubeconfig",
            "node_name",
            "evict_as",
            "pod_wait_ms",
            "watch_timeout_s",
            "pod_resources",
            "pod_resources_socket",
            "pod_resources_wait_ms",
            "start_jitter_ms",
            "resource_name",
            "suppress_interval",
            "window",
            "percentile",
            "margin_percent",
            "usage",
            "min_change_percent",
            "max_age",
            "grow_step_percent",
            "starved_percent",
            "starved_for",
            "sched_idle",
            "withdraw_on_stop",
        ] {
            assert!(
                text.contains(&format!("{key} = ")),
                "{key} is not documented"
            );
        }
    }

    /// `topolet status` shows each policy as the file spells it: `as_str` is the serde name.
    #[test]
    fn policy_names_are_the_files_spelling() {
        for name in ["none", "static"] {
            let c = parse(&format!(
                "[cpu]\npolicy = \"{name}\"\n[memory]\npolicy = \"{name}\""
            ))
            .unwrap();
            assert_eq!(c.cpu.policy.as_str(), name);
            assert_eq!(c.memory.policy.as_str(), name);
        }
        for name in ["none", "best-effort", "restricted", "single-numa-node"] {
            let c = parse(&format!("[topology]\npolicy = \"{name}\"")).unwrap();
            assert_eq!(c.topology.policy.as_str(), name);
        }
        for name in ["container", "pod"] {
            let c = parse(&format!("[topology]\nscope = \"{name}\"")).unwrap();
            assert_eq!(c.topology.scope.to_string(), name);
        }
    }

    #[test]
    fn kubernetes_section() {
        assert_eq!(
            parse("").unwrap().kubernetes.enabled,
            KubernetesEnabled::Auto
        );
        for (v, want) in [
            ("\"auto\"", KubernetesEnabled::Auto),
            ("\"on\"", KubernetesEnabled::On),
            ("\"off\"", KubernetesEnabled::Off),
            ("true", KubernetesEnabled::On),
            ("false", KubernetesEnabled::Off),
        ] {
            let c = parse(&format!("[kubernetes]\nenabled = {v}")).unwrap();
            assert_eq!(c.kubernetes.enabled, want, "{v}");
        }
        let c = parse(
            "[kubernetes]\nkubeconfig = \"/etc/topolet/kubeconfig\"\nnode_name = \"node-1.example\"",
        )
        .unwrap();
        assert_eq!(
            c.kubernetes.kubeconfig.as_deref(),
            Some(Path::new("/etc/topolet/kubeconfig"))
        );
        assert_eq!(c.kubernetes.node_name.as_deref(), Some("node-1.example"));
        for bad in ["-a", "a-", "a..b", "A", &"a".repeat(254)] {
            assert!(!is_node_name(bad), "{bad}");
        }
    }
}
