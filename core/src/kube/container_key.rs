//! `ContainerKey`: how every allocator and the state file name a container — the pod's uid plus
//! the container's name, as the kubelet's cpu/memory manager state does. Stable across container
//! restarts in the same pod, which is what lets a restarted container keep its CPUs.
//!
//! Keys order by pod uid first, so the entries of one pod in a map keyed by `ContainerKey` are
//! one range ([`of_pod`]): releasing a pod costs its own containers, not a scan of the node's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct ContainerKey {
    /// First: the derived order is by pod uid, then container name ([`of_pod`] relies on it).
    pub pod_uid: String,
    pub container: String,
}

impl ContainerKey {
    pub fn new(pod_uid: impl Into<String>, container: impl Into<String>) -> ContainerKey {
        ContainerKey {
            pod_uid: pod_uid.into(),
            container: container.into(),
        }
    }
}

/// The entries of pod `pod_uid` in `map`, in key order: a range query, O(log n + the pod's
/// entries).
pub fn of_pod<'a, V>(
    map: &'a BTreeMap<ContainerKey, V>,
    pod_uid: &'a str,
) -> impl Iterator<Item = (&'a ContainerKey, &'a V)> + 'a {
    // The pod's smallest key: the empty name sorts before every other.
    map.range(ContainerKey::new(pod_uid, "")..)
        .take_while(move |(k, _)| k.pod_uid == pod_uid)
}

/// The keys of pod `pod_uid` in `set`, in order: a range query, as [`of_pod`].
pub fn keys_of_pod<'a>(
    set: &'a BTreeSet<ContainerKey>,
    pod_uid: &'a str,
) -> impl Iterator<Item = &'a ContainerKey> + 'a {
    set.range(ContainerKey::new(pod_uid, "")..)
        .take_while(move |k| k.pod_uid == pod_uid)
}

impl fmt::Display for ContainerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.pod_uid, self.container)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Uids that are prefixes of one another and sort around each other.
    const UIDS: [&str; 6] = ["", "p", "p-1", "p1", "p10", "q"];

    proptest! {
        #[test]
        fn of_pod_is_what_a_scan_finds(
            keys in proptest::collection::vec((0usize..UIDS.len(), "[a-c]{0,2}"), 0..30),
            pod in 0usize..UIDS.len(),
        ) {
            let map: BTreeMap<ContainerKey, usize> = keys
                .iter()
                .enumerate()
                .map(|(i, (u, name))| (ContainerKey::new(UIDS[*u], name.as_str()), i))
                .collect();
            let uid = UIDS[pod];
            let scan: Vec<(&ContainerKey, &usize)> =
                map.iter().filter(|(k, _)| k.pod_uid == uid).collect();
            let range: Vec<(&ContainerKey, &usize)> = of_pod(&map, uid).collect();
            prop_assert_eq!(range, scan.clone());
            let set: BTreeSet<ContainerKey> = map.keys().cloned().collect();
            let keys: Vec<&ContainerKey> = keys_of_pod(&set, uid).collect();
            let scanned: Vec<&ContainerKey> = scan.iter().map(|(k, _)| *k).collect();
            prop_assert_eq!(keys, scanned);
        }
    }
}
