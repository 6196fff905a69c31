//! Topology-manager vocabulary shared by every hint provider: [`NumaMask`] (a set of NUMA node
//! ids) and [`TopologyHint`] (a mask plus whether it is preferred), mirroring
//! `pkg/kubelet/cm/topologymanager/{bitmask,topology_manager.go}`.
//!
//! Provider convention (as the kubelet's `HintProvider`): for each resource a provider returns
//! `None` ("no preference": any placement works) or `Some(hints)`; `Some(vec![])` means the request
//! cannot be satisfied anywhere.

use std::collections::BTreeSet;
use std::fmt;

/// NUMA node ids usable in a mask: `0..MAX_NUMA_ID`.
pub const MAX_NUMA_ID: usize = 64;

/// A set of NUMA node ids (kernel ids, < [`MAX_NUMA_ID`]).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NumaMask(u64);

impl NumaMask {
    pub const EMPTY: NumaMask = NumaMask(0);

    /// The mask of `ids`; `None` if an id is ≥ [`MAX_NUMA_ID`].
    pub fn from_ids<I: IntoIterator<Item = usize>>(ids: I) -> Option<NumaMask> {
        let mut bits = 0u64;
        for id in ids {
            if id >= MAX_NUMA_ID {
                return None;
            }
            bits |= 1 << id;
        }
        Some(NumaMask(bits))
    }

    pub fn single(id: usize) -> Option<NumaMask> {
        Self::from_ids([id])
    }

    pub fn bits(self) -> u64 {
        self.0
    }

    pub fn from_bits(bits: u64) -> NumaMask {
        NumaMask(bits)
    }

    pub fn contains(self, id: usize) -> bool {
        id < MAX_NUMA_ID && self.0 & (1 << id) != 0
    }

    /// Number of nodes in the mask.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn and(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 & other.0)
    }

    pub fn or(self, other: NumaMask) -> NumaMask {
        NumaMask(self.0 | other.0)
    }

    pub fn is_subset_of(self, other: NumaMask) -> bool {
        self.0 & !other.0 == 0
    }

    /// Ascending node ids.
    pub fn ids(self) -> impl Iterator<Item = usize> {
        (0..MAX_NUMA_ID).filter(move |i| self.0 & (1 << i) != 0)
    }

    pub fn to_set(self) -> BTreeSet<usize> {
        self.ids().collect()
    }

    /// The kubelet's `IsNarrowerThan`: fewer nodes, or as many nodes with lower ids.
    pub fn is_narrower_than(self, other: NumaMask) -> bool {
        if self.count() == other.count() {
            return self.0 < other.0;
        }
        self.count() < other.count()
    }
}

impl fmt::Display for NumaMask {
    /// Linux list syntax, as used for `cpuset.mems` (`0-1,3`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set: super::cpuset::CpuSet = self.ids().collect();
        write!(f, "{set}")
    }
}

impl fmt::Debug for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NumaMask({self})")
    }
}

/// One placement a provider can live with: `affinity` `None` means "any node".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TopologyHint {
    pub affinity: Option<NumaMask>,
    pub preferred: bool,
}

impl TopologyHint {
    pub fn new(affinity: NumaMask, preferred: bool) -> TopologyHint {
        TopologyHint {
            affinity: Some(affinity),
            preferred,
        }
    }

    /// The "don't care" hint.
    pub fn any() -> TopologyHint {
        TopologyHint {
            affinity: None,
            preferred: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_basics() {
        let m = NumaMask::from_ids([0, 1, 3]).unwrap();
        assert_eq!(m.to_string(), "0-1,3");
        assert_eq!(m.count(), 3);
        assert!(m.contains(3) && !m.contains(2) && !m.contains(99));
        assert!(NumaMask::from_ids([64]).is_none());
        assert!(NumaMask::single(1).unwrap().is_subset_of(m));
        assert!(NumaMask::single(0)
            .unwrap()
            .is_narrower_than(NumaMask::single(1).unwrap()));
        assert!(NumaMask::single(3)
            .unwrap()
            .is_narrower_than(NumaMask::from_ids([0, 1]).unwrap()));
    }
}
