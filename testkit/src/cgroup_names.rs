//! The kubelet's cgroup naming, written from its own rules (pkg/kubelet/cm): the oracle the
//! plugin's cgroup-path parser (`topolet_core::kube::inverse::qos_from_cgroup_parent`) is tested against,
//! and the names the kubelet simulator ([`crate::kubelet`]) puts in `cgroup_parent`.
//!
//! The kubelet's model (cgroup_manager_linux.go, qos_container_manager_linux.go,
//! pod_container_manager_linux.go):
//!
//! - a cgroup name is a list of components (`CgroupName []string`); the node's root is the
//!   `--cgroup-root` split on `/` (empty by default), the pods' top is root + `kubepods`, the QoS
//!   levels are + `burstable` and + `besteffort` (Guaranteed pods sit directly under `kubepods`),
//!   a pod is its level + `pod<uid>`;
//! - cgroupfs driver (`ToCgroupfs`): `/` + the components joined with `/`;
//! - systemd driver (`ToSystemd`): each component with `-` escaped to `_`, joined with `-`,
//!   `.slice` appended, and expanded (systemd's `ExpandSlice`) into the path of its parent
//!   slices: `{kubepods, burstable, pod12-34}` →
//!   `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice`.
//!
//! The kubelet sends that name as the sandbox's `cgroup_parent`. The inverse ([`parse_pod`])
//! reads both forms back, alone or followed by what containerd appends below a pod (a container
//! component, or runc's `slice:prefix:name` systemd form), and nothing else.

use crate::qos::Qos;

/// The kubelet's `--cgroup-driver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Cgroupfs,
    Systemd,
}

/// The kubelet's `CgroupName`: a list of components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupName(pub Vec<String>);

/// The top of every pod cgroup (`CgroupKubePods`).
pub const KUBEPODS: &str = "kubepods";
/// The prefix of a pod's own component (`podCgroupNamePrefix`).
pub const POD_PREFIX: &str = "pod";
const SLICE: &str = ".slice";

impl CgroupName {
    /// The node's root from `--cgroup-root` (`""` or `/` = the root itself).
    pub fn root(cgroup_root: &str) -> CgroupName {
        CgroupName(
            cgroup_root
                .split('/')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    /// `self` with `components` appended (`NewCgroupName`).
    pub fn child(&self, components: &[&str]) -> CgroupName {
        let mut v = self.0.clone();
        v.extend(components.iter().map(|c| c.to_string()));
        CgroupName(v)
    }

    /// The pod cgroup of a pod of class `qos` with `uid` under this root.
    pub fn pod(&self, qos: Qos, uid: &str) -> CgroupName {
        let pod = format!("{POD_PREFIX}{uid}");
        match qos {
            Qos::Guaranteed => self.child(&[KUBEPODS, &pod]),
            Qos::Burstable => self.child(&[KUBEPODS, "burstable", &pod]),
            Qos::BestEffort => self.child(&[KUBEPODS, "besteffort", &pod]),
        }
    }

    /// `ToCgroupfs`.
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// `ToSystemd`: escaped, joined, `.slice`, expanded into its parents' path.
    pub fn to_systemd(&self) -> String {
        if self.0.is_empty() {
            return "/".to_string();
        }
        let escaped: Vec<String> = self.0.iter().map(|c| c.replace('-', "_")).collect();
        let mut path = String::new();
        for i in 1..=escaped.len() {
            path.push('/');
            path.push_str(&escaped[..i].join("-"));
            path.push_str(SLICE);
        }
        path
    }

    /// The name as the kubelet's cgroup manager for `driver` writes it (`cgroupManager.Name`).
    pub fn render(&self, driver: Driver) -> String {
        match driver {
            Driver::Cgroupfs => self.to_cgroupfs(),
            Driver::Systemd => self.to_systemd(),
        }
    }
}

/// The kubelet's `cgroup_parent` for a pod of class `qos` with `uid` on a node with
/// `--cgroup-root=cgroup_root` and `driver`.
pub fn pod_cgroup_parent(driver: Driver, cgroup_root: &str, qos: Qos, uid: &str) -> String {
    CgroupName::root(cgroup_root).pod(qos, uid).render(driver)
}

/// The QoS class and uid of a pod cgroup name's last components: `…, kubepods[, burstable |
/// besteffort], pod<uid>`.
fn class_of(components: &[String]) -> Option<(Qos, String)> {
    let (pod, level) = components.split_last()?;
    let uid = pod.strip_prefix(POD_PREFIX)?;
    let uid_ok = !uid.is_empty()
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !uid_ok {
        return None;
    }
    let qos = match level {
        [.., k] if k == KUBEPODS => Qos::Guaranteed,
        [.., k, q] if k == KUBEPODS && q == "burstable" => Qos::Burstable,
        [.., k, q] if k == KUBEPODS && q == "besteffort" => Qos::BestEffort,
        _ => return None,
    };
    Some((qos, uid.to_string()))
}

/// `ParseSystemdToCgroupName` of one slice unit name: `.slice` removed, split on `-`, each part
/// unescaped (`_` → `-`).
fn parse_systemd_slice(unit: &str) -> Option<Vec<String>> {
    let name = unit.strip_suffix(SLICE).filter(|n| !n.is_empty())?;
    Some(name.split('-').map(|p| p.replace('_', "-")).collect())
}

/// `(class, uid)` of a pod's cgroup, as the kubelet names it for either driver, alone or with what
/// containerd appends below the pod; `None` for anything else. The systemd form is recognised by
/// its slices, the cgroupfs one by its components.
pub fn parse_pod(path: &str) -> Option<(Qos, String)> {
    // runc's systemd form `slice:prefix:name` (containerd passes the pod slice's unit name).
    let path = path.split(':').next().unwrap_or(path);
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    // systemd: the deepest `.slice` component names the whole cgroup (its parents are its
    // prefixes); below a pod slice only scopes (containers) follow.
    if let Some(i) = parts.iter().rposition(|p| p.ends_with(SLICE)) {
        if let Some(found) = parse_systemd_slice(parts[i]).and_then(|c| class_of(&c)) {
            return Some((found.0, found.1));
        }
    }
    // cgroupfs: components `…/kubepods[/level]/pod<uid>[/<below the pod>…]`.
    let components: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
    (1..=components.len())
        .rev()
        .find_map(|end| class_of(&components[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelets_own_examples() {
        // cgroup_manager_linux.go's doc comment of ToSystemd.
        let n = CgroupName::root("").child(&[KUBEPODS, "burstable", "pod1234-abcd-5678-efgh"]);
        assert_eq!(
            n.to_systemd(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice"
        );
        assert_eq!(
            n.to_cgroupfs(),
            "/kubepods/burstable/pod1234-abcd-5678-efgh"
        );
        assert_eq!(CgroupName::root("/").to_systemd(), "/");
        assert_eq!(
            pod_cgroup_parent(Driver::Cgroupfs, "/base/x", Qos::Guaranteed, "u-1"),
            "/base/x/kubepods/podu-1"
        );
        assert_eq!(
            pod_cgroup_parent(Driver::Systemd, "", Qos::BestEffort, "u-1"),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu_1.slice"
        );
    }

    #[test]
    fn every_name_parses_back() {
        for driver in [Driver::Cgroupfs, Driver::Systemd] {
            for root in ["", "/", "/topolet-it/abc", "machine"] {
                for qos in [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort] {
                    let uid = "6f1c2d3e-0000-4bcd-9abc-0123456789ab";
                    let p = pod_cgroup_parent(driver, root, qos, uid);
                    assert_eq!(parse_pod(&p), Some((qos, uid.to_string())), "{p}");
                    let below = match driver {
                        Driver::Cgroupfs => format!("{p}/ctr1"),
                        Driver::Systemd => format!("{p}/cri-containerd-ctr1.scope"),
                    };
                    assert_eq!(parse_pod(&below), Some((qos, uid.to_string())), "{below}");
                }
            }
        }
        let leaf = "kubepods-burstable-pod12_34.slice:cri-containerd:abc";
        assert_eq!(parse_pod(leaf), Some((Qos::Burstable, "12-34".into())));
    }

    #[test]
    fn other_cgroups_are_not_pods() {
        for p in [
            "",
            "/",
            "/kubepods",
            "/kubepods/burstable",
            "/kubepods/burstable/notapod",
            "/system.slice/containerd.service",
            "/kubepods.slice/kubepods-burstable.slice",
            "/other/pod123",
            "/kubepods/pod",
            "kubepods-podx!.slice",
        ] {
            assert_eq!(parse_pod(p), None, "{p:?}");
        }
    }
}
