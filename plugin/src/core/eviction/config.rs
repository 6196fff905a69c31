//! The `[eviction]` section of the node configuration: its raw TOML form ([`EvictionSection`])
//! and the validated [`EvictionConfig`] built from it, with errors naming the key.
//!
//! Same vocabulary as KubeletConfiguration (`evictionHard`, `evictionSoft`,
//! `evictionSoftGracePeriod`, `evictionMinimumReclaim`, `evictionPressureTransitionPeriod`,
//! `evictionMaxPodGracePeriod`); parsing mirrors `ParseThresholdConfig` in
//! `pkg/kubelet/eviction/helpers.go`, defaults mirror `pkg/kubelet/eviction/defaults_linux.go`
//! and `pkg/kubelet/apis/config/v1beta1/defaults.go`.
//!
//! Where this is stricter than the kubelet (each is an error here, accepted silently there): a
//! grace period for a signal with no soft threshold, a minimum reclaim for a signal with no
//! threshold, a minimum reclaim over 100%, a zero `interval`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::duration::{format_duration, parse_duration};
use super::signal::Signal;
use super::threshold::{parse_min_reclaim, parse_threshold_value, Threshold, ThresholdValue};

/// The kubelet's default hard thresholds on Linux (`DefaultEvictionHard`, defaults_linux.go),
/// as of Kubernetes 1.31+ (which added `imagefs.inodesFree`). Used when `hard` is absent.
pub const DEFAULT_HARD: [(Signal, &str); 5] = [
    (Signal::MemoryAvailable, "100Mi"),
    (Signal::NodeFsAvailable, "10%"),
    (Signal::NodeFsInodesFree, "5%"),
    (Signal::ImageFsAvailable, "15%"),
    (Signal::ImageFsInodesFree, "5%"),
];

/// `evictionPressureTransitionPeriod` default.
pub const DEFAULT_PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(300);
/// The kubelet's eviction monitoring period (`evictionMonitoringPeriod`, housekeeping 10s).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// Where containerd serves CRI.
pub const DEFAULT_CRI_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
/// nodefs when `[eviction] nodefs_path` is not set: the kubelet's root directory.
pub const DEFAULT_NODEFS_PATH: &str = "/var/lib/kubelet";
/// imagefs when `[eviction] imagefs_path` is not set: containerd's root directory.
pub const DEFAULT_IMAGEFS_PATH: &str = "/var/lib/containerd";

/// `[eviction] node_condition_heartbeat` default: node-problem-detector's
/// `--k8s-exporter-heartbeat-period`.
pub const DEFAULT_CONDITION_HEARTBEAT: Duration = Duration::from_secs(300);

/// How a decided eviction is carried out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EvictionAction {
    /// Decide, log and count; touch nothing.
    #[default]
    DryRun,
    /// Stop the pod's containers and sandbox through containerd's CRI API.
    Cri,
    /// policy/v1 Eviction of the pod through the API server (PodDisruptionBudgets apply; the
    /// kubelet then stops the pod and its controller replaces it).
    Api,
}

impl EvictionAction {
    /// The action when `[eviction] action` is not set: `api` when the Kubernetes API client is
    /// on, else `dry-run`.
    pub fn default_for(kube_client_on: bool) -> EvictionAction {
        if kube_client_on {
            EvictionAction::Api
        } else {
            EvictionAction::DryRun
        }
    }
}

/// A TOML scalar kept as text: a string, or a number written without quotes (`1000`, `30`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalarText(pub String);

impl From<&str> for ScalarText {
    fn from(s: &str) -> Self {
        ScalarText(s.to_string())
    }
}

impl<'de> Deserialize<'de> for ScalarText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Float(f64),
            Text(String),
        }
        Ok(ScalarText(
            match Raw::deserialize(d)
                .map_err(|_| serde::de::Error::custom("expected a string or a number"))?
            {
                Raw::Int(n) => n.to_string(),
                Raw::Float(f) => f.to_string(),
                Raw::Text(t) => t,
            },
        ))
    }
}

/// `[eviction]` as written in TOML. Threshold tables are keyed by signal name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvictionSection {
    /// `evictionHard`. Absent: [`DEFAULT_HARD`]. Present (even empty): exactly these.
    pub hard: Option<BTreeMap<String, ScalarText>>,
    /// `evictionSoft`.
    pub soft: BTreeMap<String, ScalarText>,
    /// `evictionSoftGracePeriod`: durations such as `"1m30s"`.
    pub soft_grace_period: BTreeMap<String, ScalarText>,
    /// `evictionMinimumReclaim`.
    pub minimum_reclaim: BTreeMap<String, ScalarText>,
    /// `evictionPressureTransitionPeriod`.
    pub pressure_transition_period: ScalarText,
    /// `evictionMaxPodGracePeriod`: a duration, or a number of seconds. 0 = the pod's own.
    pub max_pod_grace_period: ScalarText,
    /// How often signals are observed and one pod at most is evicted.
    pub interval: ScalarText,
    /// Absent: [`EvictionAction::default_for`] the Kubernetes client.
    pub action: Option<EvictionAction>,
    /// Publish topolet's node conditions (`TopoletMemoryPressure`, …) on the Node when the
    /// Kubernetes API client is on.
    pub node_conditions: bool,
    /// How often unchanged node conditions are re-sent (their `lastHeartbeatTime`).
    pub node_condition_heartbeat: ScalarText,
    /// Taint the Node `NoSchedule` while topolet sees pressure.
    pub pressure_taint: bool,
    /// containerd's CRI endpoint (for `action = "cri"`).
    pub cri_endpoint: String,
    /// A path on the node filesystem (`nodefs.*` signals): statvfs of it.
    pub nodefs_path: std::path::PathBuf,
    /// A path on the image filesystem (`imagefs.*` signals); the same filesystem as nodefs is
    /// detected and treated as one.
    pub imagefs_path: std::path::PathBuf,
}

impl Default for EvictionSection {
    fn default() -> Self {
        EvictionSection {
            hard: None,
            soft: BTreeMap::new(),
            soft_grace_period: BTreeMap::new(),
            minimum_reclaim: BTreeMap::new(),
            pressure_transition_period: ScalarText(format_duration(
                DEFAULT_PRESSURE_TRANSITION_PERIOD,
            )),
            max_pod_grace_period: ScalarText("0s".into()),
            interval: ScalarText(format_duration(DEFAULT_INTERVAL)),
            action: None,
            node_conditions: true,
            node_condition_heartbeat: ScalarText(format_duration(DEFAULT_CONDITION_HEARTBEAT)),
            pressure_taint: false,
            cri_endpoint: DEFAULT_CRI_ENDPOINT.into(),
            nodefs_path: DEFAULT_NODEFS_PATH.into(),
            imagefs_path: DEFAULT_IMAGEFS_PATH.into(),
        }
    }
}

/// A problem with one `[eviction]` key. `key` is the full dotted path
/// (`eviction.hard."memory.available"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct EvictionConfigError {
    pub key: String,
    pub message: String,
}

/// The validated eviction configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct EvictionConfig {
    /// Hard thresholds first, then soft ones, each in [`Signal::ALL`] order.
    pub thresholds: Vec<Threshold>,
    /// A pressure condition stays true until this long after a threshold was last met.
    pub pressure_transition_period: Duration,
    /// Cap on the grace period of soft evictions; zero means the pod's own
    /// `terminationGracePeriodSeconds`.
    pub max_pod_grace_period: Duration,
    pub interval: Duration,
    /// `None`: [`EvictionAction::default_for`] the Kubernetes client (see [`EvictionConfig::action_for`]).
    pub action: Option<EvictionAction>,
    pub node_conditions: bool,
    pub node_condition_heartbeat: Duration,
    pub pressure_taint: bool,
    pub cri_endpoint: String,
    pub nodefs_path: std::path::PathBuf,
    pub imagefs_path: std::path::PathBuf,
}

impl Default for EvictionConfig {
    fn default() -> Self {
        // The default section always builds; fall back to no thresholds rather than panic.
        EvictionConfig::from_section(&EvictionSection::default()).unwrap_or(EvictionConfig {
            thresholds: Vec::new(),
            pressure_transition_period: DEFAULT_PRESSURE_TRANSITION_PERIOD,
            max_pod_grace_period: Duration::ZERO,
            interval: DEFAULT_INTERVAL,
            action: None,
            node_conditions: true,
            node_condition_heartbeat: DEFAULT_CONDITION_HEARTBEAT,
            pressure_taint: false,
            cri_endpoint: DEFAULT_CRI_ENDPOINT.into(),
            nodefs_path: DEFAULT_NODEFS_PATH.into(),
            imagefs_path: DEFAULT_IMAGEFS_PATH.into(),
        })
    }
}

fn key(table: &str, signal: &str) -> String {
    format!("eviction.{table}.\"{signal}\"")
}

fn err(key: String, message: impl Into<String>) -> EvictionConfigError {
    EvictionConfigError {
        key,
        message: message.into(),
    }
}

fn signal_of(table: &str, name: &str) -> Result<Signal, EvictionConfigError> {
    Signal::parse(name).map_err(|e| err(key(table, name), e.to_string()))
}

/// Parse a threshold table (`hard` or `soft`) into signal → value (dropping `0%`/`100%`).
fn parse_table(
    table: &str,
    entries: &BTreeMap<String, ScalarText>,
) -> Result<BTreeMap<Signal, Option<ThresholdValue>>, EvictionConfigError> {
    let mut out = BTreeMap::new();
    for (name, text) in entries {
        let signal = signal_of(table, name)?;
        let value =
            parse_threshold_value(&text.0).map_err(|e| err(key(table, name), e.to_string()))?;
        out.insert(signal, value);
    }
    Ok(out)
}

fn duration(
    key: &str,
    text: &ScalarText,
    seconds_ok: bool,
) -> Result<Duration, EvictionConfigError> {
    if seconds_ok {
        if let Ok(n) = text.0.parse::<i64>() {
            return u64::try_from(n)
                .map(Duration::from_secs)
                .map_err(|_| err(key.to_string(), format!("{n} must not be negative")));
        }
    }
    parse_duration(&text.0).map_err(|e| err(key.to_string(), e.to_string()))
}

impl EvictionConfig {
    /// Validate `section` (see the module docs for every rule).
    pub fn from_section(section: &EvictionSection) -> Result<EvictionConfig, EvictionConfigError> {
        let hard = match &section.hard {
            Some(t) => parse_table("hard", t)?,
            None => DEFAULT_HARD
                .iter()
                .map(|(s, v)| {
                    Ok((
                        *s,
                        parse_threshold_value(v)
                            .map_err(|e| err(key("hard", s.as_str()), e.to_string()))?,
                    ))
                })
                .collect::<Result<_, EvictionConfigError>>()?,
        };
        let soft = parse_table("soft", &section.soft)?;
        let mut grace = BTreeMap::new();
        for (name, text) in &section.soft_grace_period {
            let signal = signal_of("soft_grace_period", name)?;
            let k = key("soft_grace_period", name);
            let d = parse_duration(&text.0).map_err(|e| err(k.clone(), e.to_string()))?;
            if !soft.contains_key(&signal) {
                return Err(err(
                    k,
                    format!("grace period without a soft threshold: set eviction.soft.\"{name}\" too or remove it"),
                ));
            }
            grace.insert(signal, d);
        }
        let mut reclaim = BTreeMap::new();
        for (name, text) in &section.minimum_reclaim {
            let signal = signal_of("minimum_reclaim", name)?;
            let k = key("minimum_reclaim", name);
            let v = parse_min_reclaim(&text.0).map_err(|e| err(k.clone(), e.to_string()))?;
            let has_threshold = hard.get(&signal).is_some_and(Option::is_some)
                || soft.get(&signal).is_some_and(Option::is_some);
            if !has_threshold {
                return Err(err(
                    k,
                    format!("minimum reclaim for a signal with no hard or soft threshold ({name})"),
                ));
            }
            reclaim.insert(signal, v);
        }
        let mut thresholds = Vec::new();
        for (signal, value) in &hard {
            if let Some(value) = value {
                thresholds.push(Threshold {
                    min_reclaim: reclaim.get(signal).cloned(),
                    ..Threshold::hard(*signal, value.clone())
                });
            }
        }
        for (signal, value) in &soft {
            // A soft "0%"/"100%" is dropped before the grace period check, as in the kubelet.
            let Some(value) = value else { continue };
            let Some(period) = grace.get(signal) else {
                return Err(err(
                    key("soft", signal.as_str()),
                    format!(
                        "soft threshold without a grace period: set eviction.soft_grace_period.\"{signal}\""
                    ),
                ));
            };
            thresholds.push(Threshold {
                grace_period: Some(*period),
                min_reclaim: reclaim.get(signal).cloned(),
                ..Threshold::hard(*signal, value.clone())
            });
        }
        let pressure_transition_period = duration(
            "eviction.pressure_transition_period",
            &section.pressure_transition_period,
            false,
        )?;
        let max_pod_grace_period = duration(
            "eviction.max_pod_grace_period",
            &section.max_pod_grace_period,
            true,
        )?;
        let interval = duration("eviction.interval", &section.interval, false)?;
        if interval.is_zero() {
            return Err(err("eviction.interval".into(), "must be longer than 0s"));
        }
        let node_condition_heartbeat = duration(
            "eviction.node_condition_heartbeat",
            &section.node_condition_heartbeat,
            false,
        )?;
        if node_condition_heartbeat.is_zero() {
            return Err(err(
                "eviction.node_condition_heartbeat".into(),
                "must be longer than 0s",
            ));
        }
        if section.action == Some(EvictionAction::Cri) && section.cri_endpoint.trim().is_empty() {
            return Err(err(
                "eviction.cri_endpoint".into(),
                "must not be empty with action = \"cri\"",
            ));
        }
        for (key, path) in [
            ("eviction.nodefs_path", &section.nodefs_path),
            ("eviction.imagefs_path", &section.imagefs_path),
        ] {
            if !path.is_absolute() {
                return Err(err(
                    key.into(),
                    format!("{} is not an absolute path", path.display()),
                ));
            }
        }
        Ok(EvictionConfig {
            thresholds,
            pressure_transition_period,
            max_pod_grace_period,
            interval,
            action: section.action,
            node_conditions: section.node_conditions,
            node_condition_heartbeat,
            pressure_taint: section.pressure_taint,
            cri_endpoint: section.cri_endpoint.clone(),
            nodefs_path: section.nodefs_path.clone(),
            imagefs_path: section.imagefs_path.clone(),
        })
    }

    /// The action in effect: the configured one, else `api` with the Kubernetes client on and
    /// `dry-run` without it.
    pub fn action_for(&self, kube_client_on: bool) -> EvictionAction {
        self.action
            .unwrap_or_else(|| EvictionAction::default_for(kube_client_on))
    }

    /// The thresholds of one signal.
    pub fn thresholds_for(&self, signal: Signal) -> impl Iterator<Item = &Threshold> {
        self.thresholds.iter().filter(move |t| t.signal == signal)
    }
}
