//! The kubelet's eviction message, the text of the pod's `Evicted` Event.
//!
//! Mirrors `evictionMessage` in `pkg/kubelet/eviction/helpers.go` (1.37): the fragments
//! `nodeLowMessageFmt` ("The node was low on resource: %v. "), `thresholdMetMessageFmt`
//! ("Threshold quantity: %v, available: %v. ") and, for every app container whose usage is
//! above its request, `containerMessageFmt` ("Container %s was using %s, request is %s, has
//! larger consumption of %v. "), each with its trailing space, as the kubelet writes them.
//! Per-container usage is only reported for memory and ephemeral-storage, as in the kubelet.
//! Quantities are printed in `resource.Quantity`'s canonical form: binary suffixes (`Ki`, `Mi`,
//! …) for bytes, decimal ones (`k`, `M`, …) for counts (inodes, pids), a plain number when no
//! suffix divides exactly.

use crate::eviction::signal::SignalResource;

/// One container of the pod, as the message needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    /// In the signal's unit (working set bytes for memory, bytes for disk).
    pub usage: u64,
    /// The container's request of the resource (0 when it asks none).
    pub request: u64,
}

/// The resource name the kubelet reclaims for a signal's resource.
pub fn resource_name(resource: SignalResource) -> &'static str {
    match resource {
        SignalResource::Memory => "memory",
        SignalResource::Disk => "ephemeral-storage",
        SignalResource::Inodes => "inodes",
        SignalResource::Pids => "pids",
    }
}

/// `resource.Quantity` canonical text of `value`: BinarySI for bytes, DecimalSI for counts.
pub fn quantity(resource: SignalResource, value: i64) -> String {
    match resource {
        SignalResource::Memory | SignalResource::Disk => {
            suffixed(value, 1024, &["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
        }
        SignalResource::Inodes | SignalResource::Pids => {
            suffixed(value, 1000, &["", "k", "M", "G", "T", "P", "E"])
        }
    }
}

fn suffixed(value: i64, base: i64, suffixes: &[&str]) -> String {
    let mut v = value;
    let mut i = 0;
    while v != 0 && v % base == 0 && i + 1 < suffixes.len() {
        v /= base;
        i += 1;
    }
    format!("{v}{}", suffixes[i])
}

/// The message for evicting a pod for `resource`: `threshold` and `available` in the signal's
/// unit (`None` when the signal was not observed: the kubelet then leaves that part out);
/// `containers` the pod's app containers.
pub fn eviction_message(
    resource: SignalResource,
    threshold: Option<u64>,
    available: Option<i64>,
    containers: &[ContainerUsage],
) -> String {
    let name = resource_name(resource);
    let mut m = format!("The node was low on resource: {name}. ");
    if let (Some(t), Some(a)) = (threshold, available) {
        let t = i64::try_from(t).unwrap_or(i64::MAX);
        m.push_str(&format!(
            "Threshold quantity: {}, available: {}. ",
            quantity(resource, t),
            quantity(resource, a)
        ));
    }
    if matches!(resource, SignalResource::Memory | SignalResource::Disk) {
        for c in containers.iter().filter(|c| c.usage > c.request) {
            let q = |v: u64| quantity(resource, i64::try_from(v).unwrap_or(i64::MAX));
            m.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of {name}. ",
                c.name,
                q(c.usage),
                q(c.request)
            ));
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_canonical() {
        use SignalResource::*;
        assert_eq!(quantity(Memory, 100 << 20), "100Mi");
        assert_eq!(quantity(Memory, 3 << 30), "3Gi");
        assert_eq!(quantity(Memory, 1536), "1536");
        assert_eq!(quantity(Memory, 0), "0");
        assert_eq!(quantity(Memory, 1_572_864), "1536Ki");
        assert_eq!(quantity(Pids, 1000), "1k");
        assert_eq!(quantity(Pids, 32_768), "32768");
        assert_eq!(quantity(Inodes, 2_000_000), "2M");
    }

    #[test]
    fn the_kubelets_words() {
        let hog = ContainerUsage {
            name: "hog".into(),
            usage: 3 << 30,
            request: 0,
        };
        let quiet = ContainerUsage {
            name: "quiet".into(),
            usage: 10 << 20,
            request: 64 << 20,
        };
        assert_eq!(
            eviction_message(
                SignalResource::Memory,
                Some(100 << 20),
                Some(80 << 20),
                &[hog.clone(), quiet]
            ),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. \
             Container hog was using 3Gi, request is 0, has larger consumption of memory. "
        );
        // Pids: no container part; counts are decimal.
        assert_eq!(
            eviction_message(SignalResource::Pids, Some(2000), Some(1500), &[hog]),
            "The node was low on resource: pids. Threshold quantity: 2k, available: 1500. "
        );
        assert_eq!(
            eviction_message(SignalResource::Disk, None, None, &[]),
            "The node was low on resource: ephemeral-storage. "
        );
    }
}
