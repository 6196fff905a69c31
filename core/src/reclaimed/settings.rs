//! The reclaimed-CPU settings the core decides with (`[reclaimed]` in the node's file maps into
//! them; the shell checks ranges and names the key at fault).

use std::time::Duration;

/// The extended resource batch pods request, in milli-CPU (an extended resource is a whole number
/// and its request equals its limit: `pkg/apis/core/validation` `ValidateResourceRequirements`).
pub const DEFAULT_RESOURCE_NAME: &str = "topolet.io/reclaimed-cpu";

/// What counts as the regular pods' use of the pool's CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UsageSource {
    /// Everything that is not batch on the pool's CPUs (each CPU's busy time): regular pods,
    /// system daemons, kernel threads, interrupts — what is really idle.
    #[default]
    Cpus,
    /// The regular pods' own usage (their cgroups), for nodes whose system daemons are kept on
    /// the reserved CPUs: work outside Kubernetes never shrinks the amount.
    Pods,
}

impl UsageSource {
    pub fn as_str(self) -> &'static str {
        match self {
            UsageSource::Cpus => "cpus",
            UsageSource::Pods => "pods",
        }
    }

    pub fn parse(text: &str) -> Option<UsageSource> {
        match text {
            "cpus" => Some(UsageSource::Cpus),
            "pods" => Some(UsageSource::Pods),
            _ => None,
        }
    }
}

/// The feature's settings. Shares are percentages of the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimedSettings {
    pub enabled: bool,
    /// The extended resource's name on the Node and in pod specs.
    pub resource_name: String,
    /// How often usage is sampled for the advertised amount.
    pub interval: Duration,
    /// How often the suppress loop looks at the regular pods' usage.
    pub suppress_interval: Duration,
    /// The smoothing window of the advertised amount.
    pub window: Duration,
    /// The percentile of the window's samples taken as "regular usage" (100: the peak).
    pub percentile: u8,
    /// The share of the pool kept free for the regular pods' bursts.
    pub margin_percent: u8,
    /// What counts as regular usage.
    pub usage: UsageSource,
    /// A higher amount is published only when it moved by more than this share of the pool
    /// (a lower one at once)…
    pub min_change_percent: u8,
    /// …or when the published one has aged: by an age drawn for each write from half of this to
    /// this ([`crate::reclaimed::aging`]).
    pub max_age: Duration,
    /// How far the batch budget grows back per suppress interval, as a share of the pool.
    pub grow_step_percent: u8,
    /// A batch pod whose grant, averaged over `starved_for`, is under this share of its
    /// request…
    pub starved_percent: u8,
    /// …once that window is full, is evicted.
    pub starved_for: Duration,
    /// Batch containers are created with the `SCHED_IDLE` scheduling policy (OCI
    /// `process.scheduler`), so that a regular task waking on a CPU a batch task runs on
    /// preempts it at once (kernel/sched/fair.c `check_preempt_wakeup_fair`: "Idle tasks are by
    /// definition preempted by non-idle tasks", decided per task before any cgroup entity is
    /// compared). Applies to containers created from then on: an update cannot change a
    /// running container's policy.
    pub sched_idle: bool,
}

impl Default for ReclaimedSettings {
    fn default() -> Self {
        ReclaimedSettings {
            enabled: false,
            resource_name: DEFAULT_RESOURCE_NAME.to_string(),
            interval: Duration::from_secs(1),
            suppress_interval: Duration::from_millis(200),
            window: Duration::from_secs(60),
            percentile: 100,
            margin_percent: 10,
            usage: UsageSource::Cpus,
            min_change_percent: 10,
            max_age: Duration::from_secs(300),
            grow_step_percent: 5,
            starved_percent: 50,
            starved_for: Duration::from_secs(120),
            sched_idle: true,
        }
    }
}

/// `share` percent of `millis`, rounded up.
pub(crate) fn percent_of(millis: u64, share: u8) -> u64 {
    (millis * u64::from(share)).div_ceil(100)
}
