//! Eviction signals and the node conditions they drive.
//!
//! Mirrors `pkg/kubelet/eviction/api/types.go` (`Signal`, `OpForSignal`) and the
//! `signalToNodeCondition` / `signalToResource` tables of `pkg/kubelet/eviction/helpers.go`.
//! Only the signals a containerd node without a kubelet can observe are supported: the kubelet's
//! `allocatableMemory.available` and `containerfs.*` (derived from the others) are not.

use std::fmt;
use std::str::FromStr;

/// An eviction signal: a resource whose *available* amount is compared with thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// `memory.available`: capacity − working set of the root cgroup.
    MemoryAvailable,
    /// `nodefs.available`: free bytes of the node's main filesystem (logs, volumes).
    NodeFsAvailable,
    /// `nodefs.inodesFree`: free inodes of that filesystem.
    NodeFsInodesFree,
    /// `imagefs.available`: free bytes of the runtime's image/writable-layer filesystem.
    ImageFsAvailable,
    /// `imagefs.inodesFree`: free inodes of that filesystem.
    ImageFsInodesFree,
    /// `pid.available`: pid_max − processes.
    PidAvailable,
}

/// The node condition a signal sets (`signalToNodeCondition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeCondition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl NodeCondition {
    /// Every condition, in the order they are reported.
    pub const ALL: [NodeCondition; 3] = [
        NodeCondition::MemoryPressure,
        NodeCondition::DiskPressure,
        NodeCondition::PidPressure,
    ];

    /// The Kubernetes `NodeConditionType` name.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PidPressure => "PIDPressure",
        }
    }
}

impl fmt::Display for NodeCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a signal measures, which decides how pods are ranked for it (`signalToResource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignalResource {
    /// Bytes of memory (working set).
    Memory,
    /// Bytes of disk (`ephemeral-storage`).
    Disk,
    /// Inodes.
    Inodes,
    /// Process ids.
    Pids,
}

/// An unknown signal name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown signal {0:?} (known: memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available)")]
pub struct UnknownSignal(pub String);

impl Signal {
    /// Every supported signal, in the order thresholds are reported and reclaimed (memory first,
    /// as the kubelet's `byEvictionPriority`; the rest in a fixed order where the kubelet's map
    /// iteration leaves it unspecified).
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The kubelet's name for the signal.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// Parse a kubelet signal name (exact, case-sensitive, as the kubelet).
    pub fn parse(text: &str) -> Result<Signal, UnknownSignal> {
        Signal::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| UnknownSignal(text.to_string()))
    }

    /// The node condition this signal sets when one of its thresholds is met.
    pub fn condition(self) -> NodeCondition {
        match self {
            Signal::MemoryAvailable => NodeCondition::MemoryPressure,
            Signal::NodeFsAvailable
            | Signal::NodeFsInodesFree
            | Signal::ImageFsAvailable
            | Signal::ImageFsInodesFree => NodeCondition::DiskPressure,
            Signal::PidAvailable => NodeCondition::PidPressure,
        }
    }

    /// What the signal measures.
    pub fn resource(self) -> SignalResource {
        match self {
            Signal::MemoryAvailable => SignalResource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => SignalResource::Disk,
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => SignalResource::Inodes,
            Signal::PidAvailable => SignalResource::Pids,
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Signal {
    type Err = UnknownSignal;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Signal::parse(s)
    }
}

impl serde::Serialize for Signal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Signal::ALL {
            assert_eq!(Signal::parse(s.as_str()), Ok(s));
            assert_eq!(s.to_string().parse::<Signal>(), Ok(s));
        }
        for bad in [
            "memory.availble",
            "Memory.available",
            "allocatableMemory.available",
            "containerfs.available",
            "",
        ] {
            let err = Signal::parse(bad).unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn conditions_and_resources() {
        assert_eq!(
            Signal::MemoryAvailable.condition(),
            NodeCondition::MemoryPressure
        );
        assert_eq!(
            Signal::ImageFsInodesFree.condition(),
            NodeCondition::DiskPressure
        );
        assert_eq!(Signal::PidAvailable.condition(), NodeCondition::PidPressure);
        assert_eq!(NodeCondition::PidPressure.as_str(), "PIDPressure");
        assert_eq!(Signal::NodeFsInodesFree.resource(), SignalResource::Inodes);
    }
}
