//! What admission is told about one container, and where it came from: the API server's pod
//! (the real spec, through the pod watch) or the NRI inversion (estimates from cgroup values,
//! with what they cannot know said explicitly).
//!
//! Owns the rule of which facts each source knows ([`INVERSION_UNKNOWNS`]), the fallback reasons
//! ([`Fallback`]), and the comparison of the two on the same container ([`compare`]): where they
//! must agree (class, exclusivity, CPU request and limit, memory limit, memory request within the
//! inversion's precision) and where the API is known to be more precise ([`Refinement`]).

use serde::{Deserialize, Serialize};

use crate::kube::pod::{Container, ContainerRef, Pod};
use crate::kube::qos::{self, QosClass};
use crate::placement::nri_container::NriContainer;
use crate::placement::Candidate;

/// Which source decided a container's admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The pod's spec from the API server (the pod watch).
    Api,
    /// The kubelet's cgroup values inverted (`topolet::nri::view`).
    Inversion,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Api => "api",
            Source::Inversion => "inversion",
        }
    }
}

/// Why the inversion decided although the API client may be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// The API client is off (`[kubernetes] enabled`, or no credentials).
    ApiOff,
    /// The pod watch has not (re)listed since it started or lost the API server.
    NotSynced,
    /// A static pod (`kubernetes.io/config.source` not `api`) whose mirror pod the watch has not
    /// seen.
    StaticPod,
    /// The watch is synced but does not hold the pod (after the bounded wait, if any).
    NotFound,
    /// The pod is known but has no container of that name (an ephemeral container, or a spec
    /// that changed).
    NoSuchContainer,
    /// The pod's spec could not be read (a quantity the core does not parse).
    InvalidSpec,
    /// Taken over at Synchronize (restored from what runs): the API is not consulted there.
    Synchronize,
}

impl Fallback {
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::ApiOff => "api_off",
            Fallback::NotSynced => "not_synced",
            Fallback::StaticPod => "static_pod",
            Fallback::NotFound => "not_found",
            Fallback::NoSuchContainer => "no_such_container",
            Fallback::InvalidSpec => "invalid_spec",
            Fallback::Synchronize => "synchronize",
        }
    }
}

/// What the inversion cannot know, said once: a decision it makes treats each as absent.
pub const INVERSION_UNKNOWNS: &[&str] = &[
    "priority and priority class (node-critical pods)",
    "init or restartable-init (sidecar) role",
    "extended resources",
    "hugepage requests",
    "pod-level resources and the pod's other containers",
    "Burstable memory request beyond its oom_score_adj step (under 2/1000 of capacity: none)",
];

/// The admission input of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmissionInput {
    /// The API's pod (uid set to the NRI sandbox's, which differs for a static pod's mirror)
    /// and which of its containers this is.
    Api { pod: Pod, which: ContainerRef },
    /// The inversion's container (`topolet::nri::view`): its path's class, its estimates, and
    /// everything in [`INVERSION_UNKNOWNS`] absent (an unknown role is admitted as an app
    /// container's).
    Inversion {
        estimate: NriContainer,
        why: Fallback,
    },
}

impl AdmissionInput {
    pub fn source(&self) -> Source {
        match self {
            AdmissionInput::Api { .. } => Source::Api,
            AdmissionInput::Inversion { .. } => Source::Inversion,
        }
    }

    /// Who admission is asked about.
    pub fn candidate(&self) -> Candidate<'_> {
        match self {
            AdmissionInput::Api { pod, which } => Candidate::Pod { pod, which: *which },
            AdmissionInput::Inversion { estimate, .. } => Candidate::Nri(estimate),
        }
    }

    /// Why the inversion decided; `None` for the API.
    pub fn fallback(&self) -> Option<Fallback> {
        match self {
            AdmissionInput::Api { .. } => None,
            AdmissionInput::Inversion { why, .. } => Some(*why),
        }
    }
}

/// The container named `name` in `pod`: init containers first (names are unique in a pod).
pub fn find_container(pod: &Pod, name: &str) -> Option<ContainerRef> {
    pod.all_containers()
        .find(|(_, c)| c.name == name)
        .map(|(r, _)| r)
}

/// A fact the API gives and the inversion gets less precisely or not at all: allowed to differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refinement {
    /// An init container (run to completion) or a sidecar.
    Role,
    /// A node-critical pod (`system-node-critical`): oom_score_adj −997 whatever its class, and
    /// a Burstable one's oom_score_adj then carries no memory request.
    NodeCritical,
    /// Extended resources (mapped to `[devices]`).
    ExtendedResources,
    /// Hugepage requests.
    Hugepages,
    /// The Burstable memory request is exact (the inversion's gives the same oom_score_adj:
    /// within one step of capacity/1000 bytes, two at the 999 end).
    MemoryRequestExact,
    /// The pod has pod-level resources or more than this container.
    OtherContainers,
}

/// The two sources on the same container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comparison {
    /// Facts both know that differ: each names the fact and both values. Empty: they agree.
    pub differences: Vec<String>,
    /// Where the API is more precise (allowed to differ).
    pub refinements: Vec<Refinement>,
}

impl Comparison {
    pub fn agrees(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Which source decided one managed container, for `topolet status` (`admissions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionRecord {
    /// `namespace/name` of the pod.
    pub pod: String,
    pub container: String,
    /// containerd's container id.
    pub id: String,
    pub source: Source,
    /// Why the inversion decided (absent for the API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// The inversion of the same container next to the API's facts (API decisions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
}

/// Compares the API's container `which` of `api` with the inversion's `estimate` of it (the
/// one-container pod `topolet::nri::view` builds), on a node with `memory_capacity` bytes.
///
/// Must agree: the QoS class; the exclusive CPU count (`qos::exclusive_cpu_count`); the CPU
/// request (shares are exact from 3m; below, both are "none"); the CPU limit (above the 10m the
/// 1 ms quota floor allows); the memory limit; the memory request (Guaranteed: exact; Burstable:
/// both give the kubelet's oom_score_adj, which is all the inversion reads it from; not for a
/// node-critical pod, whose −997 carries no request). Everything in
/// [`Refinement`] may differ and is listed instead.
pub fn compare(
    api: &Pod,
    which: ContainerRef,
    estimate: &NriContainer,
    memory_capacity: u64,
) -> Comparison {
    let mut out = Comparison::default();
    let Some(a) = api.container(which) else {
        out.differences
            .push("container: missing from one of the sources".into());
        return out;
    };
    let e = &estimate.container;
    let class_a = qos::class(api);
    let class_e = estimate.class;
    if class_a != class_e {
        out.differences
            .push(format!("qos class: api {class_a}, inversion {class_e}"));
    }
    let excl_a = qos::exclusive_cpu_count(class_a, a.requests.cpu());
    let excl_e = qos::exclusive_cpu_count(class_e, e.requests.cpu());
    if excl_a != excl_e {
        out.differences.push(format!(
            "exclusive cpus: api {excl_a:?}, inversion {excl_e:?}"
        ));
    }
    let cpu_req = |c: &Container| c.requests.cpu_millis.filter(|&m| m >= 3);
    if cpu_req(a) != cpu_req(e) {
        out.differences.push(format!(
            "cpu request: api {:?}m, inversion {:?}m",
            a.requests.cpu_millis, e.requests.cpu_millis
        ));
    }
    let cpu_lim = |c: &Container| c.limits.cpu_millis.map(|m| m.max(10));
    if cpu_lim(a) != cpu_lim(e) {
        out.differences.push(format!(
            "cpu limit: api {:?}m, inversion {:?}m",
            a.limits.cpu_millis, e.limits.cpu_millis
        ));
    }
    let mem_lim = |c: &Container| c.limits.memory_bytes.filter(|&b| b > 0);
    if mem_lim(a) != mem_lim(e) {
        out.differences.push(format!(
            "memory limit: api {:?}, inversion {:?}",
            a.limits.memory_bytes, e.limits.memory_bytes
        ));
    }
    if matches!(which, ContainerRef::Init(_)) {
        out.refinements.push(Refinement::Role);
    }
    if api.is_node_critical() {
        out.refinements.push(Refinement::NodeCritical);
    }
    if !a.requests.extended.is_empty() {
        out.refinements.push(Refinement::ExtendedResources);
    }
    if !a.requests.hugepages.is_empty() {
        out.refinements.push(Refinement::Hugepages);
    }
    if api.resources.is_some() || api.init_containers.len() + api.containers.len() > 1 {
        out.refinements.push(Refinement::OtherContainers);
    }
    let (ma, me) = (a.requests.memory(), e.requests.memory());
    match class_a {
        QosClass::BestEffort => {}
        QosClass::Guaranteed if ma != me => out.differences.push(format!(
            "memory request: api {ma}, inversion {me} (Guaranteed: exact)"
        )),
        QosClass::Guaranteed => {}
        QosClass::Burstable if api.is_node_critical() => {}
        QosClass::Burstable => {
            // The inversion reads the request back from the oom_score_adj the kubelet computed
            // from it: it agrees when its estimate gives the same oom_score_adj. (The score is
            // an integer step of capacity/1000 bytes, and 999 covers the first two steps:
            // requests under 2·capacity/1000 read as none.)
            let variant = qos::OomScoreVariant::Current;
            let oom_a = qos::oom_score_adj(api, a, memory_capacity, variant);
            let oom_e = qos::oom_score_adj_in_class(class_e, e, memory_capacity, variant);
            if oom_a != oom_e {
                out.differences.push(format!(
                    "memory request: api {ma} (oom_score_adj {oom_a}), inversion {me} \
                     (oom_score_adj {oom_e})"
                ));
            } else if ma != me {
                out.refinements.push(Refinement::MemoryRequestExact);
            }
        }
    }
    out.refinements.sort();
    out.refinements.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::pod::tests::{ctr, rl};
    use crate::kube::pod::{ContainerRestartPolicy, ResourceList, SYSTEM_NODE_CRITICAL};

    const GIB: u64 = 1 << 30;

    fn one(c: Container) -> Pod {
        Pod {
            namespace: "default".into(),
            name: "p".into(),
            uid: "u".into(),
            containers: vec![c],
            ..Pod::default()
        }
    }

    /// What NRI would say of `pod`'s first app container with an exact inversion.
    fn nri(pod: &Pod) -> NriContainer {
        NriContainer {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            class: qos::class(pod),
            role: None,
            container: pod.containers[0].clone(),
        }
    }

    /// A Guaranteed pod: 2 CPUs, 1 GiB.
    fn guaranteed() -> Pod {
        one(ctr(
            "app",
            rl(Some(2000), Some(GIB)),
            rl(Some(2000), Some(GIB)),
        ))
    }

    #[test]
    fn the_same_container_agrees() {
        let g = guaranteed();
        let c = compare(&g, ContainerRef::App(0), &nri(&g), 64 * GIB);
        assert!(c.agrees() && c.refinements.is_empty(), "{c:?}");
    }

    #[test]
    fn each_shared_fact_that_differs_is_named() {
        let api = guaranteed();
        let est = one(ctr(
            "app",
            rl(Some(1500), Some(GIB)),
            rl(Some(1500), Some(2 * GIB)),
        ));
        let c = compare(&api, ContainerRef::App(0), &nri(&est), 64 * GIB);
        let text = c.differences.join("; ");
        for fact in [
            "qos class",
            "exclusive cpus",
            "cpu request",
            "cpu limit",
            "memory limit",
        ] {
            assert!(text.contains(fact), "{fact} missing from {text}");
        }
        assert!(!c.agrees());
    }

    #[test]
    fn a_burstable_memory_request_giving_the_same_oom_score_is_a_refinement_else_a_difference() {
        let cap = 64 * GIB;
        let api = one(ctr(
            "app",
            rl(Some(500), Some(GIB)),
            ResourceList::default(),
        ));
        let near = one(ctr(
            "app",
            rl(Some(500), Some(GIB - cap / 2000)),
            ResourceList::default(),
        ));
        let c = compare(&api, ContainerRef::App(0), &nri(&near), cap);
        assert!(c.agrees(), "{c:?}");
        assert_eq!(c.refinements, vec![Refinement::MemoryRequestExact]);
        let far = one(ctr(
            "app",
            rl(Some(500), Some(GIB / 2)),
            ResourceList::default(),
        ));
        assert!(!compare(&api, ContainerRef::App(0), &nri(&far), cap).agrees());
        // 32 MiB on a 25 GB node: oom_score_adj 999, which the inversion reads as no request.
        let cap = 25_275_990_016;
        let small = one(ctr(
            "app",
            rl(Some(100), Some(32 << 20)),
            ResourceList::default(),
        ));
        let none = one(ctr("app", rl(Some(100), None), ResourceList::default()));
        let c = compare(&small, ContainerRef::App(0), &nri(&none), cap);
        assert!(c.agrees(), "{c:?}");
        assert_eq!(c.refinements, vec![Refinement::MemoryRequestExact]);
    }

    #[test]
    fn what_only_the_api_knows_is_listed_not_counted() {
        let mut api = one(ctr(
            "app",
            rl(Some(100), Some(GIB)),
            ResourceList::default(),
        ));
        api.priority_class_name = Some(SYSTEM_NODE_CRITICAL.into());
        api.init_containers.push(Container {
            restart_policy: Some(ContainerRestartPolicy::Always),
            ..ctr("side", rl(Some(100), None), ResourceList::default())
        });
        api.containers[0]
            .requests
            .extended
            .insert("example.com/dev".into(), 1);
        api.containers[0]
            .requests
            .hugepages
            .insert(2 << 20, 4 << 20);
        // oom_score_adj -997 carried no memory request.
        let est = one(ctr("app", rl(Some(100), None), ResourceList::default()));
        let c = compare(&api, ContainerRef::App(0), &nri(&est), 64 * GIB);
        assert!(c.agrees(), "{c:?}");
        assert_eq!(
            c.refinements,
            vec![
                Refinement::NodeCritical,
                Refinement::ExtendedResources,
                Refinement::Hugepages,
                Refinement::OtherContainers
            ]
        );
        let side = one(ctr("side", rl(Some(100), None), ResourceList::default()));
        let c = compare(&api, ContainerRef::Init(0), &nri(&side), 64 * GIB);
        assert!(c.refinements.contains(&Refinement::Role), "{c:?}");
    }

    #[test]
    fn containers_are_found_by_name_init_first() {
        let mut p = one(ctr("app", ResourceList::default(), ResourceList::default()));
        p.init_containers.push(ctr(
            "init",
            ResourceList::default(),
            ResourceList::default(),
        ));
        assert_eq!(find_container(&p, "init"), Some(ContainerRef::Init(0)));
        assert_eq!(find_container(&p, "app"), Some(ContainerRef::App(0)));
        assert_eq!(find_container(&p, "debugger"), None);
        let input = AdmissionInput::Api {
            pod: p.clone(),
            which: ContainerRef::Init(0),
        };
        assert_eq!((input.source(), input.fallback()), (Source::Api, None));
        let inv = AdmissionInput::Inversion {
            estimate: nri(&p),
            why: Fallback::NotSynced,
        };
        assert_eq!(inv.source(), Source::Inversion);
        assert_eq!(inv.fallback().map(Fallback::as_str), Some("not_synced"));
    }
}
