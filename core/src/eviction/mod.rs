//! Node-pressure eviction, the pure part: signals, thresholds and their configuration, the
//! pressure state machine, pod ranking, the per-interval decision and the node-problem-detector
//! view of node conditions. The shell observes the machine and carries out the decision.
//!
//! Mirrors `pkg/kubelet/eviction/` (`api/types.go`, `helpers.go`, `eviction_manager.go`
//! `synchronize`, `defaults_linux.go`), one concept per module:
//! - [`signal`]: `Signal`, `NodeCondition`;
//! - [`duration`]: Go duration strings;
//! - [`threshold`]: `Threshold`, `ThresholdValue`, statement parsing;
//! - [`settings`]: `EvictionConfig` (the settings; `topolet::config::eviction` maps the
//!   `[eviction]` section into it), `EvictionAction`, `DEFAULT_HARD`;
//! - [`observe`]: `Observations`, `thresholds_met`, the `PressureTracker` state machine;
//! - [`rank`](mod@rank): `PodUsage`, `rank` (memory, disk, inodes, pids);
//! - [`reclaim`]: node-level reclaim before eviction (dead containers, unused images; how much,
//!   in what order, whether a pod must still go);
//! - [`decide`](mod@decide): one interval's `Decision` (threshold, candidates, grace periods);
//! - [`message`]: the kubelet's eviction message;
//! - [`node_status`]: topolet's own node conditions on the Node (heartbeat and transition
//!   times as node-problem-detector keeps them) and the optional pressure taints;
//! - [`npd`]: node conditions as a node-problem-detector custom plugin result;
//! - [`usage_input`]: the `topolet rank --usage` JSON.

pub mod decide;
pub mod duration;
#[cfg(test)]
mod kubelet_tests;
pub mod message;
pub mod node_status;
pub mod npd;
pub mod observe;
pub mod rank;
pub mod reclaim;
pub mod settings;
pub mod signal;
pub mod threshold;
pub mod usage_input;

pub use decide::{batch_first, candidates, decide, Candidate, Decision};
pub use observe::{Observations, PressureTracker, PressureUpdate, SignalObservation, Timestamp};
pub use rank::{rank, rank_keys, PodUsage, UsageByPod};
pub use settings::{EvictionAction, EvictionConfig, Runtime, DEFAULT_HARD};
pub use signal::{NodeCondition, Signal, SignalResource};
pub use threshold::{Operator, Threshold, ThresholdKey, ThresholdValue};
