//! `topolet_core::kube::inverse::qos_from_cgroup_parent` against the kubelet's own cgroup naming
//! (`topolet_testkit::cgroup_names`, written from pkg/kubelet/cm, not from qos.rs):
//!
//! - every pod cgroup the kubelet names — either driver, any `--cgroup-root`, every QoS class,
//!   any uid — reads back as its class and uid, alone and with what containerd appends below the
//!   pod (a container directory, a `cri-containerd-<id>.scope`, runc's `slice:prefix:name`);
//! - the kubelet's other cgroups (the node root, `kubepods`, the QoS levels) are not pods;
//! - on arbitrary paths built from the naming's own pieces, whenever the kubelet's naming reads
//!   a pod, qos.rs reads the same pod.

use proptest::prelude::*;
use topolet_core::kube::inverse::qos_from_cgroup_parent;
use topolet_core::kube::qos::QosClass;
use topolet_testkit::cgroup_names::{parse_pod, CgroupName, Driver, KUBEPODS};
use topolet_testkit::kubelet::Qos;

fn class(q: Qos) -> QosClass {
    match q {
        Qos::Guaranteed => QosClass::Guaranteed,
        Qos::Burstable => QosClass::Burstable,
        Qos::BestEffort => QosClass::BestEffort,
    }
}

fn plugin_reads(path: &str) -> Option<(QosClass, String)> {
    qos_from_cgroup_parent(path).map(|i| (i.qos, i.pod_uid))
}

fn driver() -> impl Strategy<Value = Driver> {
    prop_oneof![Just(Driver::Cgroupfs), Just(Driver::Systemd)]
}

fn qos() -> impl Strategy<Value = Qos> {
    prop_oneof![
        Just(Qos::Guaranteed),
        Just(Qos::Burstable),
        Just(Qos::BestEffort)
    ]
}

/// A `--cgroup-root`: up to three components of the characters cgroup names use.
fn cgroup_root() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-z][a-z0-9.]{0,6}(-[a-z0-9]{1,4})?", 0..3).prop_map(|c| c.join("/"))
}

/// A pod uid: a UUID (what the API server assigns) or a static pod's hash-like uid.
fn uid() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "[0-9a-f]{32}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_pod_cgroup_the_kubelet_names_reads_back(
        driver in driver(), root in cgroup_root(), q in qos(), uid in uid(), id in "[0-9a-f]{12}",
    ) {
        let name = CgroupName::root(&root).pod(q, &uid);
        let parent = name.render(driver);
        let want = Some((class(q), uid.clone()));
        prop_assert_eq!(parse_pod(&parent), Some((q, uid.clone())), "oracle on {}", parent);
        prop_assert_eq!(plugin_reads(&parent), want.clone(), "{}", parent);
        let below = match driver {
            Driver::Cgroupfs => vec![format!("{parent}/{id}")],
            Driver::Systemd => {
                let leaf = parent.rsplit('/').next().unwrap_or(&parent).to_string();
                vec![
                    format!("{parent}/cri-containerd-{id}.scope"),
                    format!("{leaf}:cri-containerd:{id}"),
                ]
            }
        };
        for path in below {
            prop_assert_eq!(plugin_reads(&path), want.clone(), "{}", path);
        }
    }

    #[test]
    fn the_kubelets_other_cgroups_are_not_pods(driver in driver(), root in cgroup_root()) {
        let root_name = CgroupName::root(&root);
        for name in [
            root_name.clone(),
            root_name.child(&[KUBEPODS]),
            root_name.child(&[KUBEPODS, "burstable"]),
            root_name.child(&[KUBEPODS, "besteffort"]),
        ] {
            let path = name.render(driver);
            prop_assert_eq!(parse_pod(&path), None, "oracle on {}", path);
            prop_assert_eq!(plugin_reads(&path), None, "{}", path);
        }
    }

    /// Paths shaped like the kubelet's (a root, a level, a pod component, something below it)
    /// with each piece possibly wrong: qos.rs and the kubelet's naming agree on every one.
    #[test]
    fn on_near_miss_paths_qos_rs_agrees_with_the_kubelets_naming(
        root in cgroup_root(),
        level in prop_oneof![
            Just("kubepods"),
            Just("kubepods/burstable"),
            Just("kubepods/besteffort"),
            Just("kubepods/guaranteed"),
            Just("kubepod"),
            Just("burstable"),
            Just(""),
        ],
        pod in prop_oneof![
            "pod[0-9a-f-]{1,12}",
            "pod",
            "pod[0-9a-f]{4}[!@ ][0-9a-f]{2}",
            "[a-o][0-9a-f]{1,6}",
        ],
        below in prop::option::of("[0-9a-f]{1,12}"),
        systemd in any::<bool>(),
    ) {
        let path = if systemd {
            // The same pieces through the systemd naming, the pod component as is.
            let mut name = CgroupName::root(&root);
            for c in level.split('/').filter(|c| !c.is_empty()) {
                name = name.child(&[c]);
            }
            let mut p = name.child(&[&pod]).to_systemd();
            if let Some(b) = &below {
                p.push_str(&format!("/cri-containerd-{b}.scope"));
            }
            p
        } else {
            let mut p = format!("/{root}/{level}/{pod}");
            if let Some(b) = &below {
                p.push_str(&format!("/{b}"));
            }
            p
        };
        let oracle = parse_pod(&path).map(|(q, uid)| (class(q), uid));
        prop_assert_eq!(plugin_reads(&path), oracle, "{}", path);
    }
}
