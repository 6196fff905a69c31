//! topolet's persisted data: the state [`file`](mod@file) (the assignments, atomic and checksummed) and
//! its [`persister`] (one thread that writes it off the event path), what it holds
//! ([`NodeState`]), and the state directory's [`lock`]: one topolet per node.
pub mod file;
pub mod lock;
pub mod persister;

use std::collections::BTreeSet;

use topolet_core::kube::container_key::ContainerKey;
use topolet_core::placement::assignments::Assignments;

/// The state file's content: the placement's assignments, plus the containers topolet left
/// alone because their cpuset was already set by someone else (so that a restart does not take
/// them over).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeState {
    pub assignments: Assignments,
    #[serde(default)]
    pub left_alone: BTreeSet<ContainerKey>,
}
