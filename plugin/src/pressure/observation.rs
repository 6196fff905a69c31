//! The node's signals as the eviction loop observed them ([`Observed`], [`observations`]) and as
//! the pure core compares them (`core_observations`).

use std::collections::BTreeMap;

use crate::pressure::signals::NodeStats;
use topolet_core::eviction::{Observations, Signal, SignalObservation};

/// One signal's observation: available amount and the capacity percentages refer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub available: i64,
    pub capacity: u64,
}

/// The node's signals as the core compares them. Unreadable signals are absent.
pub fn observations(node: &NodeStats) -> BTreeMap<Signal, Observed> {
    let mut out = BTreeMap::new();
    let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    if let Ok(m) = &node.memory {
        out.insert(
            Signal::MemoryAvailable,
            Observed {
                available: i(m.available),
                capacity: m.capacity,
            },
        );
    }
    for (fs, bytes, inodes) in [
        (
            &node.nodefs,
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
        ),
        (
            &node.imagefs,
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        ),
    ] {
        if let Ok(f) = fs {
            out.insert(
                bytes,
                Observed {
                    available: i(f.available_bytes),
                    capacity: f.capacity_bytes,
                },
            );
            out.insert(
                inodes,
                Observed {
                    available: i(f.inodes_free),
                    capacity: f.inodes,
                },
            );
        }
    }
    if let Ok(p) = &node.pid {
        out.insert(
            Signal::PidAvailable,
            Observed {
                available: i(p.available),
                capacity: p.max,
            },
        );
    }
    out
}

/// The core's observations of the signals `observed`, without a time.
pub(super) fn core_observations(observed: &BTreeMap<Signal, Observed>) -> Observations {
    observed
        .iter()
        .map(|(signal, o)| {
            let obs = SignalObservation {
                available: o.available,
                capacity: o.capacity,
                time: None,
            };
            (*signal, obs)
        })
        .collect()
}
