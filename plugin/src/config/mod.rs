//! The node's TOML configuration file: its schema (every key, default and unit), parsing with
//! errors that name the file and the key, and the value checks that need no machine.
//!
//! This is the edge between the file and the core: [`Config::placement`] and
//! [`Config::eviction`] map the file into settings the core owns
//! ([`PlacementSettings`], [`EvictionConfig`]); the enum of each concept (`CpuPolicyName`, …) is
//! the core's, with its one default, and the core never reads this module. The `[eviction]`
//! section's TOML form and its checks live in [`eviction`].
//!
//! Checks against the live machine (reserved CPUs that do not exist, memory reservations above a
//! node's capacity, PCI addresses) happen when the policies are built from these settings
//! (`topolet_core::placement`); their errors name the key too. `plugin/config.example.toml`
//! documents every key; a test keeps the two in step.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use topolet_core::eviction::EvictionConfig;
use topolet_core::kube::qos::{self, ExclusiveCpuQuota};
use topolet_core::kube::quantity;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::managers::cpu::policy::CpuPolicyConfig;
use topolet_core::managers::memory::policy::MemoryPolicyConfig;
use topolet_core::managers::topology::hints::TopologyOptions;
use topolet_core::managers::topology::manager::TopologyManagerConfig;
use topolet_core::placement::settings::PlacementSettings;
use topolet_core::placement::PlacementError;

pub mod effective;
pub mod eviction;
pub mod reclaimed;
pub mod reload;

pub use eviction::{EvictionConfigError, EvictionSection, ScalarText};

/// `[cpu] policy`: the core's enum (one per concept, one default).
pub use topolet_core::managers::cpu::policy::CpuPolicyName;
/// `[memory] policy`: the core's enum.
pub use topolet_core::managers::memory::policy::MemoryPolicyKind as MemoryPolicyName;
/// `[topology] policy`: the core's enum.
pub use topolet_core::managers::topology::hints::TopologyPolicy as TopologyPolicyName;
/// `[topology] scope`: the core's enum.
pub use topolet_core::managers::topology::manager::Scope as TopologyScopeName;

/// A configuration problem, always naming the file (when there is one) and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: {key}: {message}")]
    Value {
        path: PathBuf,
        key: String,
        message: String,
    },
}

impl ConfigError {
    /// The key at fault, when the error is about one value.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Value { key, .. } => Some(key),
            _ => None,
        }
    }
}

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
}

/// `[kubernetes] evict_as`: the identity of topolet's evictions.
/// - `"node"`: this node's own (`system:node:<node>`), through constrained impersonation of the
///   node the service account's pod is bound to (the API server's `impersonate:associated-node`,
///   Kubernetes 1.36 and later); the API server's NodeRestriction admission then lets it evict
///   only pods bound to this node, whatever topolet asks. Needs in-cluster credentials (a
///   service account token bound to a pod: it names the node).
/// - `"self"`: topolet's own identity, which then needs `pods/eviction` `create`.
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

/// True when `name` is a valid Kubernetes node name (a DNS-1123 subdomain: at most 253
/// characters, lowercase letters, digits, `-` and `.`, starting and ending alphanumeric).
pub fn is_node_name(name: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && alnum(b[0])
                && alnum(b[b.len() - 1])
                && b.iter().all(|&c| alnum(c) || c == b'-')
        })
}

/// Longest unix socket path the kernel accepts (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

impl Config {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses `text` (named `path` in errors) and checks every value that needs no machine.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: describe_toml_error(&e),
        })?;
        config.check(path)?;
        Ok(config)
    }

    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let value_err = |key: &str, message: String| ConfigError::Value {
            path: path.to_path_buf(),
            key: key.to_string(),
            message,
        };
        if self.nri.name.is_empty()
            || !self
                .nri
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.+-".contains(&b))
        {
            return Err(value_err(
                "nri.name",
                format!(
                    "{:?} must be non-empty and use only letters, digits and _.+-",
                    self.nri.name
                ),
            ));
        }
        if self.cpu.reserved_cpus.is_some() && self.cpu.reserved_cpu_count.is_some() {
            return Err(value_err(
                "cpu.reserved_cpus",
                "set either cpu.reserved_cpus or cpu.reserved_cpu_count, not both".into(),
            ));
        }
        if let Some(list) = &self.cpu.reserved_cpus {
            CpuSet::parse(list).map_err(|e| value_err("cpu.reserved_cpus", e.to_string()))?;
        }
        if self.topology.max_allowable_numa_nodes == 0 {
            return Err(value_err(
                "topology.max_allowable_numa_nodes",
                "must be at least 1".into(),
            ));
        }
        for (node, qty) in &self.memory.reserved {
            let key = format!("memory.reserved.{node}");
            node.parse::<usize>()
                .map_err(|_| value_err(&key, format!("{node:?} is not a numa node id")))?;
            quantity::parse_value(qty).map_err(|e| value_err(&key, e.to_string()))?;
        }
        for (resource, addrs) in &self.devices {
            let key = format!("devices.\"{resource}\"");
            if !resource.contains('/') {
                return Err(value_err(
                    &key,
                    "extended resource names have the form domain/name".into(),
                ));
            }
            if addrs.is_empty() {
                return Err(value_err(&key, "lists no devices".into()));
            }
        }
        if self.qos.pids_limit < -1 {
            return Err(value_err(
                "qos.pids_limit",
                format!(
                    "{} is not a limit: use a positive number, or -1 / 0 for none",
                    self.qos.pids_limit
                ),
            ));
        }
        if let Some(floor) = self.qos.oom_score_adj_floor {
            if !(-1000..=1000).contains(&floor) {
                return Err(value_err(
                    "qos.oom_score_adj_floor",
                    format!("{floor} is outside -1000..=1000"),
                ));
            }
        }
        self.eviction
            .settings()
            .map_err(|EvictionConfigError { key, message }| value_err(&key, message))?;
        let admin = &self.admin.socket;
        if !admin.is_absolute() || admin.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(value_err(
                "admin.socket",
                format!(
                    "{} must be an absolute path of at most {MAX_SOCKET_PATH} bytes",
                    admin.display()
                ),
            ));
        }
        if self.metrics.enabled {
            self.metrics
                .address
                .parse::<std::net::SocketAddr>()
                .map_err(|e| {
                    value_err(
                        "metrics.address",
                        format!(
                            "{:?} is not an ip:port address ({e}), e.g. \"127.0.0.1:9464\"",
                            self.metrics.address
                        ),
                    )
                })?;
        }
        if let Some(kc) = &self.kubernetes.kubeconfig {
            if !kc.is_absolute() {
                return Err(value_err(
                    "kubernetes.kubeconfig",
                    format!("{} must be an absolute path", kc.display()),
                ));
            }
        }
        if let Some(s) = self.nri.drift_check_s.filter(|&s| s > MAX_DRIFT_CHECK_S) {
            return Err(value_err(
                "nri.drift_check_s",
                format!("{s} is more than {MAX_DRIFT_CHECK_S} (a day); 0 turns the check off"),
            ));
        }
        if let Some(ms) = self
            .kubernetes
            .pod_wait_ms
            .filter(|&ms| ms > MAX_POD_WAIT_MS)
        {
            return Err(value_err(
                "kubernetes.pod_wait_ms",
                format!(
                    "{ms} is more than {MAX_POD_WAIT_MS} (containerd gives an NRI request 2 s; \
                     the wait is part of CreateContainer)"
                ),
            ));
        }
        if let Some(s) = self
            .kubernetes
            .watch_timeout_s
            .filter(|s| !(MIN_WATCH_TIMEOUT_S..=MAX_WATCH_TIMEOUT_S).contains(s))
        {
            return Err(value_err(
                "kubernetes.watch_timeout_s",
                format!("{s} is not between {MIN_WATCH_TIMEOUT_S} and {MAX_WATCH_TIMEOUT_S}"),
            ));
        }
        if let Some(name) = &self.kubernetes.node_name {
            if !is_node_name(name) {
                return Err(value_err(
                    "kubernetes.node_name",
                    format!(
                        "{name:?} is not a node name (lowercase letters, digits, '-' and '.', \
                         at most 253 characters)"
                    ),
                ));
            }
        }
        if let Err(e) = self.reclaimed.settings() {
            return Err(value_err(&format!("reclaimed.{}", e.key), e.message));
        }
        Ok(())
    }

    /// The validated `[reclaimed]` section (`parse`/`load` already checked it).
    pub fn reclaimed(&self) -> Result<topolet_core::reclaimed::ReclaimedSettings, ConfigError> {
        self.reclaimed.settings().map_err(|e| ConfigError::Value {
            path: PathBuf::new(),
            key: format!("reclaimed.{}", e.key),
            message: e.message,
        })
    }

    /// The validated `[eviction]` section. `parse`/`load` already checked it, so this fails only
    /// for a `Config` built or changed in code.
    pub fn eviction(&self) -> Result<EvictionConfig, EvictionConfigError> {
        self.eviction.settings()
    }

    /// The admission pipeline's settings. `parse`/`load` already checked the values, so this
    /// fails only for a `Config` built or changed in code; the error names the key, as
    /// `Placement::new`'s do.
    pub fn placement(&self) -> Result<PlacementSettings, PlacementError> {
        let c = &self.cpu;
        let reserved_cpus = match &c.reserved_cpus {
            Some(text) => Some(CpuSet::parse(text).map_err(|e| PlacementError::Config {
                key: "cpu.reserved_cpus".into(),
                message: e.to_string(),
            })?),
            None => None,
        };
        let t = &self.topology;
        Ok(PlacementSettings {
            cpu: CpuPolicyConfig {
                policy: c.policy,
                reserved_cpus,
                reserved_cpu_count: c.reserved_cpu_count,
                full_pcpus_only: c.full_pcpus_only,
                distribute_cpus_across_numa: c.distribute_cpus_across_numa,
                distribute_cpus_across_cores: c.distribute_cpus_across_cores,
                align_by_socket: c.align_by_socket,
                prefer_align_cpus_by_uncorecache: c.prefer_align_cpus_by_uncorecache,
                strict_cpu_reservation: c.strict_cpu_reservation,
            },
            topology: TopologyManagerConfig {
                policy: t.policy,
                scope: t.scope,
                options: TopologyOptions {
                    prefer_closest_numa_nodes: t.prefer_closest_numa_nodes,
                    max_allowable_numa_nodes: t.max_allowable_numa_nodes,
                },
            },
            memory: MemoryPolicyConfig {
                policy: self.memory.policy,
                reserved: self.memory_reserved(),
                reserved_hugepages: BTreeMap::new(),
            },
            devices: self.devices.clone(),
            pids_limit: qos::pids_limit(self.qos.pids_limit),
            exclusive_quota: if self.qos.keep_cfs_quota_for_exclusive {
                ExclusiveCpuQuota::Keep
            } else {
                ExclusiveCpuQuota::Disable
            },
            shared_pool_mems_follow_cpus: self.memory.shared_pool_mems_follow_cpus,
            oom_score_adj_floor: self.qos.oom_score_adj_floor,
        })
    }

    /// The parsed `[memory] reserved` table.
    pub fn memory_reserved(&self) -> BTreeMap<usize, u64> {
        // Values were validated by `check`; an entry that somehow fails is skipped, not invented.
        self.memory
            .reserved
            .iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, quantity::parse_value(v).ok()?)))
            .collect()
    }
}

/// toml's errors carry the key path and the position; keep them on one line.
fn describe_toml_error(e: &toml::de::Error) -> String {
    e.to_string()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
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
        ] {
            assert!(
                text.contains(&format!("{key} = ")),
                "{key} is not documented"
            );
        }
    }

    /// One default per concept: the file's defaults are the core's.
    #[test]
    fn defaults_are_the_cores() {
        assert_eq!(
            Config::default().placement().unwrap(),
            PlacementSettings::default()
        );
        assert_eq!(
            Config::default().eviction().unwrap(),
            EvictionConfig::default()
        );
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
    fn placement_maps_every_key() {
        let c = parse(
            "[cpu]\npolicy = \"none\"\nreserved_cpus = \"0,1\"\nfull_pcpus_only = true\n\
             [topology]\npolicy = \"restricted\"\nscope = \"pod\"\n\
             [memory]\npolicy = \"static\"\nreserved = { 1 = \"1Gi\" }\n\
             [qos]\npids_limit = 100\nkeep_cfs_quota_for_exclusive = true\noom_score_adj_floor = 0\n",
        )
        .unwrap();
        let s = c.placement().unwrap();
        assert_eq!(s.cpu.policy, CpuPolicyName::None);
        assert_eq!(s.cpu.reserved_cpus, Some(CpuSet::from_iter([0, 1])));
        assert!(s.cpu.full_pcpus_only);
        assert_eq!(s.topology.policy, TopologyPolicyName::Restricted);
        assert_eq!(s.topology.scope, TopologyScopeName::Pod);
        assert_eq!(s.memory.policy, MemoryPolicyName::Static);
        assert_eq!(s.memory.reserved, BTreeMap::from([(1, 1 << 30)]));
        assert_eq!(s.pids_limit, Some(100));
        assert_eq!(s.exclusive_quota, ExclusiveCpuQuota::Keep);
        assert_eq!(s.oom_score_adj_floor, Some(0));
        let mut bad = Config::default();
        bad.cpu.reserved_cpus = Some("3-1".into());
        let e = bad.placement().unwrap_err().to_string();
        assert!(e.starts_with("cpu.reserved_cpus: "), "{e}");
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

    #[test]
    fn errors_name_file_and_key() {
        for (text, needle) in [
            ("[cpu]\nreserved_cpus = \"3-1\"", "cpu.reserved_cpus"),
            ("[cpu]\npolicy = \"dynamic\"", "dynamic"),
            ("[cpu]\nbogus = 1", "bogus"),
            ("[bogus]\n", "bogus"),
            ("[nri]\nindex = 100", "index"),
            ("[nri]\nindex = \"5\"", "two digits"),
            ("[nri]\nname = \"a b\"", "nri.name"),
            ("[memory]\nreserved = { x = \"1Gi\" }", "memory.reserved.x"),
            ("[memory]\nreserved = { 0 = \"lots\" }", "memory.reserved.0"),
            ("[qos]\npids_limit = -5", "qos.pids_limit"),
            (
                "[eviction]\nnodefs_path = \"var/lib\"",
                "eviction.nodefs_path",
            ),
            ("[eviction]\nimagefs_path = \"\"", "eviction.imagefs_path"),
            (
                "[qos]\noom_score_adj_floor = -1001",
                "qos.oom_score_adj_floor",
            ),
            (
                "[topology]\nmax_allowable_numa_nodes = 0",
                "max_allowable_numa_nodes",
            ),
            ("[devices]\nnic = [\"0000:00:01.0\"]", "devices.\"nic\""),
            ("[admin]\nsocket = \"admin.sock\"", "admin.socket"),
            ("[metrics]\naddress = \"localhost\"", "metrics.address"),
            ("[metrics]\naddress = \":9464\"", "metrics.address"),
            (
                "[eviction]\nhard = { \"memory.availble\" = \"1Gi\" }",
                "eviction.hard.\"memory.availble\": unknown signal",
            ),
            (
                "[eviction]\nsoft = { \"memory.available\" = \"1Gi\" }",
                "eviction.soft.\"memory.available\"",
            ),
            ("[eviction]\ninterval = \"10\"", "eviction.interval"),
            ("[eviction]\naction = \"kill\"", "kill"),
            (
                "[cpu]\nreserved_cpus = \"0\"\nreserved_cpu_count = 1",
                "not both",
            ),
            ("[kubernetes]\nenabled = \"yes\"", "kubernetes.enabled"),
            ("[kubernetes]\nenabled = 1", "kubernetes.enabled"),
            (
                "[kubernetes]\nkubeconfig = \"kubeconfig\"",
                "kubernetes.kubeconfig",
            ),
            (
                "[kubernetes]\nnode_name = \"Node_1\"",
                "kubernetes.node_name",
            ),
            ("[kubernetes]\nnode_name = \"\"", "kubernetes.node_name"),
            ("[kubernetes]\npod_wait_ms = 5000", "kubernetes.pod_wait_ms"),
            (
                "[kubernetes]\nwatch_timeout_s = 5",
                "kubernetes.watch_timeout_s",
            ),
            (
                "[kubernetes]\nwatch_timeout_s = 3600",
                "kubernetes.watch_timeout_s",
            ),
            ("[nri]\ndrift_check_s = 86401", "nri.drift_check_s"),
            ("[nri]\ndrift_check_s = -1", "drift_check_s"),
            ("[kubernetes]\npod_wait_ms = -1", "pod_wait_ms"),
            ("[kubernetes]\nbogus = 1", "bogus"),
        ] {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.starts_with("/etc/topolet.toml: "), "{err}");
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
