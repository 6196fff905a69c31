//! What `topolet status` says about reclaimed CPU: the state, each term of the formula for the
//! node and each NUMA node, the budget and every batch pod's grant.

use serde::{Deserialize, Serialize};

use super::budget::Terms;
use super::spill::Spill;

/// The reclaimed-CPU section of the status report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReclaimedStatus {
    /// `on`; `off`; `off: …` (why it cannot run); `withdrawn: …` (why the amount is 0).
    pub state: String,
    pub resource: String,
    /// What counts as regular usage (`cpus` or `pods`).
    pub usage: String,
    /// The formula for the node (the amount the scheduler sees).
    pub node: Terms,
    /// The formula per NUMA node (the NodeResourceTopology zones).
    pub zones: Vec<ZoneTerms>,
    /// The amount last handed to the Node, in milli-CPU.
    pub advertised_millis: Option<u64>,
    /// What the batch pods may use now, in milli-CPU.
    pub budget_millis: u64,
    /// What they used over the last suppress interval, in milli-CPU.
    pub batch_used_millis: u64,
    /// The regular usage of the last suppress interval (not smoothed), in milli-CPU.
    pub regular_now_millis: u64,
    pub batch: Vec<BatchStatus>,
    /// The reserved CPUs' use over the last interval and what of it counted as regular use of
    /// the pool ([`Spill`]).
    #[serde(default)]
    pub reserved: Spill,
    /// The rule that decided it, in words ([`Spill::rule`]).
    #[serde(default)]
    pub reserved_rule: String,
    /// Where each CPU's busy time is read (exact run time, or sampled clock ticks), in words;
    /// empty before the first reading.
    #[serde(default)]
    pub cpu_time: String,
    /// What needs an operator's eye, one line each: batch pods' cgroups that cannot be read,
    /// pods asking for the resource that are not batch (and why).
    #[serde(default)]
    pub problems: Vec<String>,
}

/// The formula for one NUMA node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZoneTerms {
    pub numa_node: usize,
    pub terms: Terms,
    /// The zone's amount last written to the NodeResourceTopology (damped like the Node's:
    /// [`super::ZoneAdvertisers`]); `None` before the first.
    #[serde(default)]
    pub advertised_millis: Option<u64>,
}

/// One batch pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchStatus {
    /// `namespace/name`.
    pub pod: String,
    pub request_millis: u64,
    pub limit_millis: u64,
    pub granted_millis: u64,
    /// Its grant averaged over `[reclaimed] starved_for` so far.
    pub average_granted_millis: u64,
    /// That average is under its starvation floor (it is evicted once the window is full).
    pub starved: bool,
}
