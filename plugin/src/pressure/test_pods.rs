//! Test fixture shared by the pressure modules' unit tests: a BestEffort pod as the eviction
//! loop's `PodSource` lists it.

use crate::nri::handlers::ManagedPod;
use topolet_core::kube::pod::Pod;
use topolet_core::kube::qos::QosClass;

/// Pod `i`: sandbox `sb{i}`, `ns/p{i}` (uid `u{i}`), BestEffort, no containers, not batch.
pub(super) fn pod(i: usize) -> ManagedPod {
    ManagedPod {
        sandbox_id: format!("sb{i}"),
        cgroup_parent: format!("/kubepods/besteffort/pod{i}"),
        qos: QosClass::BestEffort,
        pod: Pod {
            namespace: "ns".into(),
            name: format!("p{i}"),
            uid: format!("u{i}"),
            ..Default::default()
        },
        container_ids: Vec::new(),
        container_cgroups: Vec::new(),
        batch: false,
    }
}
