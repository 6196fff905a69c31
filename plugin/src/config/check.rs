//! From the file's text to a checked [`Config`]: reading and parsing it ([`Config::load`],
//! [`Config::parse`]) and the value checks that need no machine (`Config::check`), with errors
//! that name the file and the key ([`ConfigError`]).
//!
//! Checks against the live machine (reserved CPUs that do not exist, memory reservations above a
//! node's capacity, PCI addresses) happen when the policies are built from these settings
//! (`topolet_core::placement`); their errors name the key too.

use std::path::{Path, PathBuf};

use topolet_core::kube::quantity;
use topolet_core::machine::cpuset::CpuSet;

use crate::config::{
    Config, EvictionConfigError, MAX_DRIFT_CHECK_S, MAX_POD_RESOURCES_WAIT_MS, MAX_POD_WAIT_MS,
    MAX_START_JITTER_MS, MAX_WATCH_TIMEOUT_S, MIN_WATCH_TIMEOUT_S,
};

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
        if let Some(ms) = self
            .kubelet
            .pod_resources_wait_ms
            .filter(|ms| !(1..=MAX_POD_RESOURCES_WAIT_MS).contains(ms))
        {
            return Err(value_err(
                "kubelet.pod_resources_wait_ms",
                format!(
                    "{ms} is not from 1 to {MAX_POD_RESOURCES_WAIT_MS} (the wait is part of \
                     CreateContainer; pod_resources = false turns the lookup off)"
                ),
            ));
        }
        if let Some(p) = self.kubelet.pod_resources_export_socket.as_ref() {
            if !p.is_absolute() {
                return Err(value_err(
                    "kubelet.pod_resources_export_socket",
                    format!("{} is not an absolute path", p.display()),
                ));
            }
            if *p == self.kubelet.pod_resources_socket {
                return Err(value_err(
                    "kubelet.pod_resources_export_socket",
                    format!(
                        "{} is the kubelet's own socket (kubelet.pod_resources_socket); serve \
                         the re-export beside it, e.g. in a directory of topolet's",
                        p.display()
                    ),
                ));
            }
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
        if let Some(ms) = self
            .kubernetes
            .start_jitter_ms
            .filter(|&ms| ms > MAX_START_JITTER_MS)
        {
            return Err(value_err(
                "kubernetes.start_jitter_ms",
                format!("{ms} is more than {MAX_START_JITTER_MS} (a minute); 0: no jitter"),
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
    use crate::config::schema::tests::parse;

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
                "[kubelet]\npod_resources_wait_ms = 0",
                "kubelet.pod_resources_wait_ms",
            ),
            (
                "[kubelet]\npod_resources_wait_ms = 501",
                "kubelet.pod_resources_wait_ms",
            ),
            (
                "[kubelet]\npod_resources_export_socket = \"topolet.sock\"",
                "kubelet.pod_resources_export_socket",
            ),
            (
                "[kubelet]\npod_resources_export_socket = \"/var/lib/kubelet/pod-resources/kubelet.sock\"",
                "kubelet.pod_resources_export_socket",
            ),
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
            (
                "[kubernetes]\nstart_jitter_ms = 60001",
                "kubernetes.start_jitter_ms",
            ),
            (
                "[reclaimed]\nwithdraw_on_stop = \"yes\"",
                "withdraw_on_stop",
            ),
            ("[kubernetes]\nbogus = 1", "bogus"),
        ] {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.starts_with("/etc/topolet.toml: "), "{err}");
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
