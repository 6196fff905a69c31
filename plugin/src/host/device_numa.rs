//! A container's device nodes → the NUMA nodes of the PCI devices behind them: the first source
//! of the devices a container really got (`topolet_core::managers::observed_devices`).
//!
//! For each device node NRI lists (`linux.devices`: type `c`/`b`, major, minor, path), under a
//! caller-chosen sysfs root (normally `/sys`):
//! - `/dev/vfio/N` (a VFIO group): every device of `kernel/iommu_groups/N/devices/`, each with its
//!   own `numa_node` (id: its PCI address);
//! - any other: `dev/{char,block}/MAJ:MIN`, a symlink into `devices/…`, resolved, then walked up
//!   to the nearest ancestor that has a `numa_node` file (a PCI device); none up to `devices/`
//!   means a pseudo device (`/dev/null`, a tty, `/dev/fuse`…), skipped (id: the node's path).
//!
//! `numa_node` holds the node id, or -1 for no locality. Bad input (a dangling link, an
//! unreadable or malformed `numa_node`, a node that is not one of the machine's) is a
//! [`DeviceNumaError`] naming the device and the path; nothing here panics on input. The caller
//! degrades: no hint from that device, a log line, never a refused container.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use topolet_core::machine::topology::node_list;
use topolet_core::managers::observed_devices::{DeviceSource, ObservedDevice};

/// One device node of a container, as NRI gives it (`LinuxDevice`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    pub path: String,
    /// `c` (char) or `b` (block); anything else (`p`, a FIFO) has no sysfs device.
    pub kind: String,
    pub major: i64,
    pub minor: i64,
}

/// A device node whose NUMA node could not be learnt.
#[derive(Debug, thiserror::Error)]
pub enum DeviceNumaError {
    #[error("device {device}: major:minor {major}:{minor} is out of range")]
    BadNumber {
        device: String,
        major: i64,
        minor: i64,
    },
    #[error("device {device}: {}: {what}: {source}", path.display())]
    Io {
        device: String,
        path: PathBuf,
        what: &'static str,
        source: io::Error,
    },
    #[error("device {device}: {}: {reason}", path.display())]
    Malformed {
        device: String,
        path: PathBuf,
        reason: String,
    },
    #[error(
        "device {device}: {}: numa node {node} is not one of this machine's numa nodes ({known})",
        path.display()
    )]
    UnknownNode {
        device: String,
        path: PathBuf,
        node: usize,
        known: String,
    },
}

/// What a container's device nodes resolved to: the devices with a PCI device behind them, and
/// one error per device node that could not be resolved.
#[derive(Debug, Default)]
pub struct Resolved {
    pub devices: Vec<ObservedDevice>,
    pub errors: Vec<DeviceNumaError>,
}

/// The content of a `numa_node` file: `Some(id)`, or `None` for -1 (no locality); the reason
/// when it is neither.
pub fn parse_numa_node(text: &str) -> Result<Option<usize>, String> {
    let t = text.trim();
    match t.parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(n) => usize::try_from(n)
            .map(Some)
            .map_err(|_| format!("expected a numa node id or -1, found {n}")),
        Err(_) => Err(format!("expected a numa node id or -1, found {t:?}")),
    }
}

/// The NUMA node of the PCI device at `address` (`DDDD:BB:DD.F`, checked by the caller:
/// `topolet_core::kube::resource_slice::pci_bus_id`), from `<sysfs>/bus/pci/devices/<address>/numa_node`:
/// `None` for -1; why not when it cannot be read.
pub fn pci_device_numa(sysfs: &Path, address: &str) -> Result<Option<usize>, String> {
    let file = sysfs
        .join("bus/pci/devices")
        .join(address)
        .join("numa_node");
    let text = read_optional(&file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .ok_or_else(|| format!("{}: no such file (no such PCI device here)", file.display()))?;
    parse_numa_node(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// The NUMA node of the PCIe root `root` (`pciDDDD:BB`, checked by the caller:
/// `topolet_core::kube::resource_slice::pcie_root`): the `numa_node` of the first PCI device
/// (by address) directly under `<sysfs>/devices/<root>/`, as every device below one root sits
/// on the same node; `None` for -1; why not when there is none or it cannot be read.
pub fn pcie_root_numa(sysfs: &Path, root: &str) -> Result<Option<usize>, String> {
    let dir = sysfs.join("devices").join(root);
    let mut addresses: Vec<String> = fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| topolet_core::kube::resource_slice::pci_bus_id(n).is_ok())
        .collect();
    addresses.sort();
    for a in addresses {
        let file = dir.join(&a).join("numa_node");
        if let Some(text) = read_optional(&file).map_err(|e| format!("{}: {e}", file.display()))? {
            return parse_numa_node(&text).map_err(|e| format!("{}: {e}", file.display()));
        }
    }
    Err(format!(
        "{}: no PCI device with a numa_node under it",
        dir.display()
    ))
}

/// Resolves every node of `devices` under `sysfs` on a machine with NUMA `nodes` (see the module
/// docs); pseudo devices and non-device types are left out.
pub fn resolve(sysfs: &Path, devices: &[DeviceNode], nodes: &[usize]) -> Resolved {
    let mut out = Resolved::default();
    for d in devices {
        match resolve_one(sysfs, d, nodes) {
            Ok(found) => out.devices.extend(found),
            Err(e) => out.errors.push(e),
        }
    }
    out
}

/// The VFIO group number of `/dev/vfio/N` (not `/dev/vfio/vfio`, the container device).
fn vfio_group(path: &str) -> Option<&str> {
    let n = path.strip_prefix("/dev/vfio/")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(n)
}

fn resolve_one(
    sysfs: &Path,
    d: &DeviceNode,
    nodes: &[usize],
) -> Result<Vec<ObservedDevice>, DeviceNumaError> {
    let class = match d.kind.as_str() {
        "c" | "u" => "char",
        "b" => "block",
        _ => return Ok(Vec::new()),
    };
    let io_err = |path: &Path, what: &'static str| {
        let device = d.path.clone();
        let path = path.to_path_buf();
        move |source| DeviceNumaError::Io {
            device,
            path,
            what,
            source,
        }
    };
    if let Some(group) = vfio_group(&d.path) {
        let dir = sysfs
            .join("kernel/iommu_groups")
            .join(group)
            .join("devices");
        let mut found = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(&dir, "cannot list the iommu group"))? {
            let entry = entry.map_err(io_err(&dir, "cannot list the iommu group"))?;
            let address = entry.file_name().to_string_lossy().into_owned();
            let file = entry.path().join("numa_node");
            let numa = match read_optional(&file).map_err(io_err(&file, "cannot read"))? {
                None => None,
                Some(text) => numa_of(d, &file, &text, nodes)?,
            };
            found.push(ObservedDevice {
                source: DeviceSource::DeviceNode,
                id: address,
                numa,
                numa_unknown: None,
            });
        }
        found.sort();
        return Ok(found);
    }
    let (Ok(major), Ok(minor)) = (u32::try_from(d.major), u32::try_from(d.minor)) else {
        return Err(DeviceNumaError::BadNumber {
            device: d.path.clone(),
            major: d.major,
            minor: d.minor,
        });
    };
    let link = sysfs
        .join("dev")
        .join(class)
        .join(format!("{major}:{minor}"));
    let real = fs::canonicalize(&link).map_err(io_err(&link, "cannot resolve"))?;
    let top = fs::canonicalize(sysfs.join("devices")).unwrap_or_else(|_| sysfs.join("devices"));
    let mut dir = real.as_path();
    while dir.starts_with(&top) && dir != top {
        let file = dir.join("numa_node");
        if let Some(text) = read_optional(&file).map_err(io_err(&file, "cannot read"))? {
            let numa = numa_of(d, &file, &text, nodes)?;
            return Ok(vec![ObservedDevice {
                source: DeviceSource::DeviceNode,
                id: d.path.clone(),
                numa,
                numa_unknown: None,
            }]);
        }
        match dir.parent() {
            Some(parent) => dir = parent,
            None => break,
        }
    }
    Ok(Vec::new())
}

/// The node a `numa_node` file of `d` names, checked against the machine's `nodes`.
fn numa_of(
    d: &DeviceNode,
    file: &Path,
    text: &str,
    nodes: &[usize],
) -> Result<Option<usize>, DeviceNumaError> {
    match parse_numa_node(text) {
        Ok(Some(n)) if !nodes.contains(&n) => Err(DeviceNumaError::UnknownNode {
            device: d.path.clone(),
            path: file.to_path_buf(),
            node: n,
            known: node_list(nodes),
        }),
        Ok(numa) => Ok(numa),
        Err(reason) => Err(DeviceNumaError::Malformed {
            device: d.path.clone(),
            path: file.to_path_buf(),
            reason,
        }),
    }
}

/// A small sysfs attribute, or `None` when the file does not exist. Bounded: an attribute is one
/// page at most.
fn read_optional(path: &Path) -> io::Result<Option<String>> {
    use std::io::Read;
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    file.take(4096).read_to_end(&mut bytes)?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const GPU: &str = "devices/pci0000:00/0000:00:01.0/0000:3b:00.0";

    /// A sysfs tree: a GPU on node 1 with a char device under it, a NIC without locality,
    /// virtual devices (`/dev/null`, the VFIO container `/dev/vfio/vfio`) and an iommu group
    /// holding the GPU.
    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().expect("tempdir");
        let r = t.path();
        let mk = |p: &str| fs::create_dir_all(r.join(p)).expect("mkdir");
        let put = |p: &str, s: &str| fs::write(r.join(p), s).expect("write");
        mk(&format!("{GPU}/drm/card1"));
        put(&format!("{GPU}/numa_node"), "1\n");
        mk("devices/pci0000:80/0000:80:02.0/0000:81:00.0/net");
        put(
            "devices/pci0000:80/0000:80:02.0/0000:81:00.0/numa_node",
            "-1\n",
        );
        mk("devices/pci0000:80/0000:80:02.0/0000:81:00.0/infiniband_verbs/uverbs0");
        mk("devices/virtual/mem/null");
        mk("dev/char");
        mk("dev/block");
        symlink(format!("../../{GPU}/drm/card1"), r.join("dev/char/226:1")).expect("link");
        symlink(
            "../../devices/pci0000:80/0000:80:02.0/0000:81:00.0/infiniband_verbs/uverbs0",
            r.join("dev/char/231:192"),
        )
        .expect("link");
        symlink("../../devices/virtual/mem/null", r.join("dev/char/1:3")).expect("link");
        mk("devices/virtual/misc/vfio");
        symlink("../../devices/virtual/misc/vfio", r.join("dev/char/10:196")).expect("link");
        symlink("../../devices/nowhere", r.join("dev/char/10:200")).expect("link");
        mk("kernel/iommu_groups/12/devices");
        symlink(
            format!("../../../../{GPU}"),
            r.join("kernel/iommu_groups/12/devices/0000:3b:00.0"),
        )
        .expect("link");
        t
    }

    fn node(path: &str, kind: &str, major: i64, minor: i64) -> DeviceNode {
        DeviceNode {
            path: path.into(),
            kind: kind.into(),
            major,
            minor,
        }
    }

    fn dev(id: &str, numa: Option<usize>) -> ObservedDevice {
        ObservedDevice {
            source: DeviceSource::DeviceNode,
            id: id.into(),
            numa,
            numa_unknown: None,
        }
    }

    #[test]
    fn device_nodes_resolve_to_their_pci_device_s_node() {
        let t = tree();
        let got = resolve(
            t.path(),
            &[
                node("/dev/dri/card1", "c", 226, 1),
                node("/dev/infiniband/uverbs0", "c", 231, 192),
                node("/dev/null", "c", 1, 3),
                node("/dev/fifo", "p", 0, 0),
                node("/dev/vfio/12", "c", 243, 0),
                node("/dev/vfio/vfio", "c", 10, 196),
            ],
            &[0, 1],
        );
        assert!(got.errors.is_empty(), "{:?}", got.errors);
        assert_eq!(
            got.devices,
            vec![
                dev("/dev/dri/card1", Some(1)),
                dev("/dev/infiniband/uverbs0", None),
                dev("0000:3b:00.0", Some(1)),
            ]
        );
    }

    #[test]
    fn bad_input_is_an_error_naming_the_device_and_the_path() {
        let t = tree();
        let r = t.path();
        let one = |d: DeviceNode, nodes: &[usize]| {
            let got = resolve(r, &[d], nodes);
            assert!(got.devices.is_empty(), "{:?}", got.devices);
            assert_eq!(got.errors.len(), 1);
            got.errors[0].to_string()
        };
        // A dangling link.
        let e = one(node("/dev/gone", "c", 10, 200), &[0, 1]);
        assert!(
            e.contains("/dev/gone") && e.contains("10:200") && e.contains("cannot resolve"),
            "{e}"
        );
        // No sysfs entry at all.
        let e = one(node("/dev/none", "b", 8, 0), &[0, 1]);
        assert!(e.contains("/dev/none") && e.contains("8:0"), "{e}");
        // Negative numbers.
        let e = one(node("/dev/neg", "c", -1, 0), &[0, 1]);
        assert!(e.contains("/dev/neg") && e.contains("out of range"), "{e}");
        // A node this machine does not have.
        let e = one(node("/dev/dri/card1", "c", 226, 1), &[0]);
        assert!(
            e.contains("numa node 1 is not one of") && e.contains("numa_node"),
            "{e}"
        );
        // Garbage.
        fs::write(r.join(GPU).join("numa_node"), "one\n").expect("write");
        let e = one(node("/dev/dri/card1", "c", 226, 1), &[0, 1]);
        assert!(e.contains("/dev/dri/card1") && e.contains("\"one\""), "{e}");
        // A missing iommu group.
        let e = one(node("/dev/vfio/99", "c", 243, 1), &[0, 1]);
        assert!(e.contains("iommu_groups/99"), "{e}");
    }

    #[test]
    fn numa_node_content() {
        assert_eq!(parse_numa_node("0\n"), Ok(Some(0)));
        assert_eq!(parse_numa_node(" 3 "), Ok(Some(3)));
        assert_eq!(parse_numa_node("-1\n"), Ok(None));
        assert!(parse_numa_node("-2").is_err());
        assert!(parse_numa_node("").is_err());
        assert!(parse_numa_node("99999999999999999999").is_err());
    }

    #[test]
    fn pci_addresses_and_roots_from_slices_resolve_through_sysfs() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let sys = tmp.path();
        let pci = sys.join("bus/pci/devices/0000:3b:00.0");
        std::fs::create_dir_all(&pci).expect("mkdir");
        std::fs::write(pci.join("numa_node"), "1\n").expect("write");
        assert_eq!(pci_device_numa(sys, "0000:3b:00.0"), Ok(Some(1)));
        let err = pci_device_numa(sys, "0000:af:00.0").unwrap_err();
        assert!(
            err.contains("0000:af:00.0/numa_node: no such file"),
            "{err}"
        );
        let root = sys.join("devices/pci0000:3a");
        std::fs::create_dir_all(root.join("0000:3a:02.0")).expect("mkdir");
        std::fs::create_dir_all(root.join("0000:3a:00.0")).expect("mkdir");
        std::fs::create_dir_all(root.join("power")).expect("mkdir");
        std::fs::write(root.join("0000:3a:00.0/numa_node"), "-1").expect("write");
        std::fs::write(root.join("0000:3a:02.0/numa_node"), "0").expect("write");
        assert_eq!(pcie_root_numa(sys, "pci0000:3a"), Ok(None));
        std::fs::write(root.join("0000:3a:00.0/numa_node"), "garbage").expect("write");
        let err = pcie_root_numa(sys, "pci0000:3a").unwrap_err();
        assert!(err.contains("expected a numa node id or -1"), "{err}");
        let empty = sys.join("devices/pci0000:00");
        std::fs::create_dir_all(empty.join("power")).expect("mkdir");
        let err = pcie_root_numa(sys, "pci0000:00").unwrap_err();
        assert!(err.contains("no PCI device with a numa_node"), "{err}");
        assert!(pcie_root_numa(sys, "pci0000:ff").is_err());
    }
}
