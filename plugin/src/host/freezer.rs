//! The cgroup freezer of one container: how a batch container is held when there is no CPU it may
//! run on (`crate::nri::handlers::reclaimed`: exclusive grants took every CPU that is neither
//! reserved nor exclusive). A cpuset cannot be empty, so the container cannot be moved off the
//! CPUs it has; frozen, it runs on none of them until the pool has CPUs again.
//!
//! The container's own cgroup is frozen, never its pod's: runc thaws a container's cgroup before
//! it sends SIGKILL (`libcontainer/container_linux.go` `Signal`: "for cgroup v1, killing a process
//! in a frozen cgroup does nothing until it's thawed"), and judges frozen by the container's own
//! cgroup, so a frozen container can still be killed (the kubelet's grace period, then SIGKILL);
//! on cgroup v2 a fatal signal ends frozen tasks anyway. cgroup v1: `freezer.state`
//! (`FROZEN`/`THAWED`) in the `freezer` hierarchy; v2: `cgroup.freeze` (`1`/`0`).
//!
//! Path: the container's `linux.cgroups_path` as NRI gives it: a cgroupfs path
//! (`/kubepods/besteffort/pod<uid>/<id>`), or systemd's `slice:prefix:name`
//! (`kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>`, which runc lays out as
//! `<slice expanded>/<prefix>-<name>.scope`, `libcontainer/cgroups/systemd` `getUnitName`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::host::cgroupfs::cgroup_path;
use crate::host::pod_cgroup::{CpuController, Roots, Version};

/// A container's cgroups path (NRI's `linux.cgroups_path`) relative to a controller's mount
/// point; `None` when it names no cgroup.
pub fn container_cgroup(cgroups_path: &str) -> Option<PathBuf> {
    let parts: Vec<&str> = cgroups_path.split(':').collect();
    match parts.as_slice() {
        [slice, prefix, name] if slice.ends_with(".slice") => {
            if name.is_empty() || name.contains('/') || name.contains("..") {
                return None;
            }
            let unit = if prefix.is_empty() {
                format!("{name}.scope")
            } else {
                format!("{prefix}-{name}.scope")
            };
            Some(cgroup_path(slice)?.join(unit))
        }
        [path] if path.contains('/') => cgroup_path(path),
        _ => None,
    }
}

/// The directory of the container whose cgroups path is `cgroups_path` in `hierarchy`; an error
/// naming the path when it names no cgroup.
pub fn container_dir(hierarchy: &CpuController, cgroups_path: &str) -> io::Result<PathBuf> {
    let rel = container_cgroup(cgroups_path).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("container cgroups path {cgroups_path:?} names no cgroup"),
        )
    })?;
    Ok(hierarchy.mount_point.join(rel))
}

/// The freezer hierarchy (v1 `freezer`, else the v2 unified mount).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freezer {
    hierarchy: CpuController,
}

impl Freezer {
    /// The freezer of this process's mounts (`<proc>/self/mountinfo`), rebased onto the sysfs
    /// root.
    pub fn of(roots: &Roots) -> io::Result<Freezer> {
        Ok(Freezer {
            hierarchy: roots.controller_named("freezer")?,
        })
    }

    /// A freezer at a known hierarchy (tests).
    pub fn at(version: Version, mount_point: PathBuf) -> Freezer {
        Freezer {
            hierarchy: CpuController {
                version,
                mount_point,
            },
        }
    }

    fn file(&self, cgroups_path: &str) -> io::Result<PathBuf> {
        let name = match self.hierarchy.version {
            Version::V1 => "freezer.state",
            Version::V2 => "cgroup.freeze",
        };
        Ok(container_dir(&self.hierarchy, cgroups_path)?.join(name))
    }

    /// Freezes (`true`) or thaws the container whose cgroups path is `cgroups_path`. The cgroup
    /// must exist: nothing is created.
    pub fn set(&self, cgroups_path: &str, frozen: bool) -> io::Result<()> {
        let file = self.file(cgroups_path)?;
        let text = match (self.hierarchy.version, frozen) {
            (Version::V1, true) => "FROZEN",
            (Version::V1, false) => "THAWED",
            (Version::V2, true) => "1",
            (Version::V2, false) => "0",
        };
        write_existing(&file, text)
    }
}

/// Writes `text` into the existing file `path`; errors name the file.
fn write_existing(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write as _;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    f.write_all(text.as_bytes())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_drivers_container_paths() {
        let p = |s: &str| container_cgroup(s).map(|p| p.to_string_lossy().into_owned());
        assert_eq!(
            p("/kubepods/besteffort/podu/abc").as_deref(),
            Some("kubepods/besteffort/podu/abc")
        );
        assert_eq!(
            p("kubepods-besteffort-podu.slice:cri-containerd:abc").as_deref(),
            Some("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu.slice/cri-containerd-abc.scope")
        );
        assert_eq!(p(""), None);
        assert_eq!(p("abc"), None);
        assert_eq!(p("/kubepods/../etc"), None);
        assert_eq!(p("kubepods.slice:cri-containerd:../x"), None);
    }

    #[test]
    fn freezes_and_thaws_each_version_and_names_a_missing_cgroup() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cg = dir.path().join("kubepods/besteffort/podu/abc");
        fs::create_dir_all(&cg).expect("mkdir");
        fs::write(cg.join("freezer.state"), "THAWED").expect("write");
        fs::write(cg.join("cgroup.freeze"), "0").expect("write");
        let v1 = Freezer::at(Version::V1, dir.path().to_path_buf());
        v1.set("/kubepods/besteffort/podu/abc", true)
            .expect("freeze");
        assert_eq!(
            fs::read_to_string(cg.join("freezer.state")).ok().as_deref(),
            Some("FROZEN")
        );
        v1.set("/kubepods/besteffort/podu/abc", false)
            .expect("thaw");
        assert_eq!(
            fs::read_to_string(cg.join("freezer.state")).ok().as_deref(),
            Some("THAWED")
        );
        let v2 = Freezer::at(Version::V2, dir.path().to_path_buf());
        v2.set("/kubepods/besteffort/podu/abc", true)
            .expect("freeze");
        assert_eq!(
            fs::read_to_string(cg.join("cgroup.freeze")).ok().as_deref(),
            Some("1")
        );
        let e = v1.set("/kubepods/besteffort/podu/gone", true).unwrap_err();
        assert!(e.to_string().contains("podu/gone/freezer.state"), "{e}");
        let e = v1.set("nonsense", true).unwrap_err();
        assert!(e.to_string().contains("\"nonsense\""), "{e}");
    }
}
