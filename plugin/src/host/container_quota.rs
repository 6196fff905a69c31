//! A batch container's CFS quota written straight into its own cgroup: how the suppress loop's
//! cut reaches the kernel within the reading that asked for it
//! (`crate::nri::handlers::reclaimed`, `set_batch_budget`). The runtime is sent the same value
//! through NRI as well, so its record of the container agrees; but an unsolicited NRI update
//! waits for a lull in the runtime's events (`crate::nri::outbox`: 300 ms, 3 s on runtimes with
//! containerd/containerd#13733) and for any update already in flight, and then costs a
//! `runc update` per container — time in which the batch pods keep the CPU a regular pod has
//! just asked for. koordinator's node agent writes the best-effort cgroups' quota directly for
//! the same reason (`pkg/koordlet/qosmanager/plugins/cpusuppress`).
//!
//! Path: the container's `linux.cgroups_path` as NRI gives it
//! ([`crate::host::freezer::container_dir`]), under the cpu controller's mount; v1 writes
//! `cpu.cfs_quota_us` (the period is the runtime's already), v2 `cpu.max`. The cgroup must
//! exist: nothing is created.

use std::io;

use crate::host::freezer::container_dir;
use crate::host::pod_cgroup::{CpuController, PodDir, Roots};

/// The cpu controller's hierarchy, for containers' quotas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerQuota {
    cpu: CpuController,
}

impl ContainerQuota {
    /// The cpu controller of this process's mounts, rebased onto the sysfs root.
    pub fn of(roots: &Roots) -> io::Result<ContainerQuota> {
        Ok(ContainerQuota {
            cpu: roots.controller()?,
        })
    }

    /// Writes `quota` µs per `period` (−1: unlimited) into the cgroup of the container whose
    /// cgroups path is `cgroups_path`.
    pub fn write(&self, cgroups_path: &str, quota: i64, period: u64) -> io::Result<()> {
        // A container's cgroup holds the same CPU files as a pod's.
        PodDir {
            version: self.cpu.version,
            dir: container_dir(&self.cpu, cgroups_path)?,
        }
        .write_quota(quota, period)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::pod_cgroup::Version;
    use std::fs;

    fn at(version: Version, root: &std::path::Path) -> ContainerQuota {
        ContainerQuota {
            cpu: CpuController {
                version,
                mount_point: root.to_path_buf(),
            },
        }
    }

    #[test]
    fn writes_each_version_and_names_a_missing_cgroup() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cg = dir.path().join("kubepods/besteffort/podu/abc");
        fs::create_dir_all(&cg).expect("mkdir");
        fs::write(cg.join("cpu.cfs_quota_us"), "-1").expect("write");
        fs::write(cg.join("cpu.max"), "max 100000").expect("write");
        let path = "/kubepods/besteffort/podu/abc";
        at(Version::V1, dir.path())
            .write(path, 27_400, 100_000)
            .expect("v1");
        assert_eq!(
            fs::read_to_string(cg.join("cpu.cfs_quota_us")).expect("read"),
            "27400"
        );
        at(Version::V2, dir.path())
            .write(path, 27_400, 100_000)
            .expect("v2");
        assert_eq!(
            fs::read_to_string(cg.join("cpu.max")).expect("read"),
            "27400 100000"
        );
        let gone = at(Version::V1, dir.path())
            .write("/kubepods/besteffort/podu/gone", 1_000, 100_000)
            .expect_err("no such cgroup");
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
        assert!(gone.to_string().contains("gone/cpu.cfs_quota_us"), "{gone}");
        let bad = at(Version::V1, dir.path())
            .write("abc", 1_000, 100_000)
            .expect_err("no cgroup");
        assert!(bad.to_string().contains("names no cgroup"), "{bad}");
    }
}
