//! The eviction manager's settings ([`EvictionConfig`], plain values the core owns) and their
//! defaults, which mirror `pkg/kubelet/eviction/defaults_linux.go` and
//! `pkg/kubelet/apis/config/v1beta1/defaults.go`. `topolet::config::eviction` maps the file's
//! `[eviction]` section into these, with errors naming the key.

use std::time::Duration;

use serde::Deserialize;

use crate::eviction::signal::Signal;
use crate::eviction::threshold::{parse_threshold_value, Threshold};

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
/// Where CRI-O serves CRI (cri-o/cri-o pkg/config/config_unix.go, `CrioSocketPath`).
pub const CRIO_CRI_ENDPOINT: &str = "unix:///var/run/crio/crio.sock";
/// nodefs when `[eviction] nodefs_path` is not set: the kubelet's root directory.
pub const DEFAULT_NODEFS_PATH: &str = "/var/lib/kubelet";
/// imagefs when `[eviction] imagefs_path` is not set on containerd: its root directory.
pub const DEFAULT_IMAGEFS_PATH: &str = "/var/lib/containerd";
/// imagefs when `[eviction] imagefs_path` is not set on CRI-O: containers/storage's graph root,
/// CRI-O's default `root` (containers/storage's default graph root).
pub const CRIO_IMAGEFS_PATH: &str = "/var/lib/containers/storage";

/// The container runtime topolet runs beside, as NRI's Configure names it (`runtime_name`):
/// what `[eviction] cri_endpoint` and `imagefs_path` default to when they are not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Containerd,
    CriO,
}

impl Runtime {
    /// The runtime NRI's `runtime_name` names: `cri-o` is CRI-O (cri-o/cri-o
    /// internal/nri/nri.go registers as "cri-o"); anything else is taken as containerd, the
    /// defaults topolet always had.
    pub fn from_nri_name(name: &str) -> Runtime {
        if name.eq_ignore_ascii_case("cri-o") || name.eq_ignore_ascii_case("crio") {
            Runtime::CriO
        } else {
            Runtime::Containerd
        }
    }

    /// Where this runtime serves CRI by default.
    pub fn cri_endpoint(self) -> &'static str {
        match self {
            Runtime::Containerd => DEFAULT_CRI_ENDPOINT,
            Runtime::CriO => CRIO_CRI_ENDPOINT,
        }
    }

    /// This runtime's default image filesystem (its image store's root).
    pub fn imagefs_path(self) -> &'static str {
        match self {
            Runtime::Containerd => DEFAULT_IMAGEFS_PATH,
            Runtime::CriO => CRIO_IMAGEFS_PATH,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
        }
    }
}

/// `[eviction] node_condition_heartbeat` default: node-problem-detector's
/// `--k8s-exporter-heartbeat-period`.
pub const DEFAULT_CONDITION_HEARTBEAT: Duration = Duration::from_secs(300);

/// The kubelet's `imageMinimumGCAge` default.
pub const DEFAULT_IMAGE_MINIMUM_GC_AGE: Duration = Duration::from_secs(120);

/// The kubelet's own image garbage collector beside topolet: `imageGCHighThresholdPercent` and
/// `imageGCLowThresholdPercent` as configured on the kubelet, copied into topolet's
/// `[eviction]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeletImageGc {
    pub high_percent: u8,
    pub low_percent: u8,
}

/// What node-level reclaim may do ([`EvictionConfig::reclaim`]; decided by `crate::eviction::reclaim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimSettings {
    /// Reclaim at node level before evicting for a disk signal (the kubelet always does).
    pub enabled: bool,
    /// An image first detected less than this long ago is kept (`imageMinimumGCAge`).
    pub image_minimum_age: Duration,
    /// Image names or ids never removed, besides those the runtime reports pinned (containerd
    /// pins its sandbox image).
    pub pinned_images: Vec<String>,
    /// The kubelet's image GC on this node, when it runs there.
    pub kubelet_image_gc: Option<KubeletImageGc>,
}

impl Default for ReclaimSettings {
    fn default() -> Self {
        ReclaimSettings {
            enabled: true,
            image_minimum_age: DEFAULT_IMAGE_MINIMUM_GC_AGE,
            pinned_images: Vec::new(),
            kubelet_image_gc: None,
        }
    }
}

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
    /// `None`: the runtime's own ([`Runtime::cri_endpoint`], [`EvictionConfig::for_runtime`]).
    pub cri_endpoint: Option<String>,
    pub nodefs_path: std::path::PathBuf,
    /// `None`: the runtime's own ([`Runtime::imagefs_path`], [`EvictionConfig::for_runtime`]).
    pub imagefs_path: Option<std::path::PathBuf>,
    /// Node-level reclaim (dead containers, unused images) before evicting for a disk signal.
    pub reclaim: ReclaimSettings,
}

impl Default for EvictionConfig {
    /// The kubelet's defaults: [`DEFAULT_HARD`], no soft thresholds, the default periods.
    fn default() -> Self {
        EvictionConfig {
            thresholds: DEFAULT_HARD
                .iter()
                .filter_map(|(signal, text)| {
                    // Every DEFAULT_HARD value parses (a test checks it); none is skipped.
                    let value = parse_threshold_value(text).ok().flatten()?;
                    Some(Threshold::hard(*signal, value))
                })
                .collect(),
            pressure_transition_period: DEFAULT_PRESSURE_TRANSITION_PERIOD,
            max_pod_grace_period: Duration::ZERO,
            interval: DEFAULT_INTERVAL,
            action: None,
            node_conditions: true,
            node_condition_heartbeat: DEFAULT_CONDITION_HEARTBEAT,
            pressure_taint: false,
            cri_endpoint: None,
            nodefs_path: DEFAULT_NODEFS_PATH.into(),
            imagefs_path: None,
            reclaim: ReclaimSettings::default(),
        }
    }
}

impl EvictionConfig {
    /// The CRI endpoint: the one set, else `runtime`'s.
    pub fn cri_endpoint_for(&self, runtime: Runtime) -> String {
        self.cri_endpoint
            .clone()
            .unwrap_or_else(|| runtime.cri_endpoint().to_string())
    }

    /// The image filesystem's path: the one set, else `runtime`'s.
    pub fn imagefs_path_for(&self, runtime: Runtime) -> std::path::PathBuf {
        self.imagefs_path
            .clone()
            .unwrap_or_else(|| runtime.imagefs_path().into())
    }

    /// Whether the runtime decides a value (one of `cri_endpoint`, `imagefs_path` is not set).
    pub fn depends_on_runtime(&self) -> bool {
        self.cri_endpoint.is_none() || self.imagefs_path.is_none()
    }

    /// This configuration with the values not set taken from `runtime`.
    pub fn for_runtime(mut self, runtime: Runtime) -> EvictionConfig {
        self.cri_endpoint = Some(self.cri_endpoint_for(runtime));
        self.imagefs_path = Some(self.imagefs_path_for(runtime));
        self
    }
}

impl EvictionConfig {
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
