//! Eviction signals read from the real kernel, and per-pod usage read from the pod cgroups.
//!
//! Every reader takes a root directory (`/` on a node, a fake tree in tests) and its errors name
//! the file. What is measured, as the kubelet measures it (cadvisor / `pkg/kubelet/eviction`):
//!
//! | signal | source |
//! |---|---|
//! | `memory.available` | MemTotal (`/proc/meminfo`) − working set of the root cgroup. Working set = usage − inactive file pages. cgroup v1: `memory/memory.usage_in_bytes` − `total_inactive_file` (`memory/memory.stat`). cgroup v2: `memory.current` where the root has one (inside a cgroup namespace), else `anon + file` of the root `memory.stat` (as runc's `rootStatsFromMeminfo` and cadvisor do), − `inactive_file`. |
//! | `nodefs.available`, `nodefs.inodesFree` | statvfs of `[eviction] nodefs_path` (or its nearest existing ancestor): `f_bavail·f_frsize`, `f_ffree` |
//! | `imagefs.*` | statvfs of `[eviction] imagefs_path`; the same numbers as nodefs (and `same_as_nodefs`) when both paths are on one filesystem (same `st_dev`) |
//! | `pid.available` | min(`kernel/pid_max`, `kernel/threads-max`) − the task count of `/proc/loadavg` (its 4th field, `running/total`), as the kubelet's `pidlimit.Stats` |
//! | pressure (informational, no threshold) | `/proc/pressure/{cpu,memory,io}` (see `crate::pressure::psi`) |
//!
//! Per pod, from the pod cgroup (the sandbox's `cgroup_parent`, systemd slices expanded):
//! - memory working set: v1 `memory.usage_in_bytes − total_inactive_file`, v2 `memory.current −
//!   inactive_file` (hierarchical: the pod's containers included);
//! - processes: `pids.current` (tasks, i.e. threads, as the kernel counts them for `pids.max`);
//! - pressure (cgroup v2, informational): `{cpu,memory,io}.pressure` ([`SignalSources::pod_pressure`]);
//! - disk (see [`dir_usage`]): bytes and inodes of each container's writable layer (the overlay
//!   `upperdir` of its root mount, read from `/proc/<pid>/mountinfo` of a process in the
//!   container cgroup) plus its log directory (the directory of its CRI `log_path`, rotated
//!   files included). Volumes (emptyDir) are not measured.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::host::cgroupfs::{cgroup_path, unescape_mountinfo};
use crate::pressure::psi::{self, PressureByResource};
use crate::pressure::SignalError;

/// Memory of the node, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    pub capacity: u64,
    pub working_set: u64,
    /// capacity − working set (0 when the working set exceeds the capacity).
    pub available: u64,
}

/// One filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStats {
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
    /// `st_dev` of the measured path.
    pub device: u64,
}

/// Process ids of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidStats {
    /// min(pid_max, threads-max).
    pub max: u64,
    /// Tasks that exist now.
    pub running: u64,
    /// max − running (0 when over).
    pub available: u64,
}

/// One observation of every node signal; a signal that could not be read is `Err` (the loop
/// logs it and evaluates the others).
#[derive(Debug)]
pub struct NodeStats {
    pub memory: Result<MemoryStats, SignalError>,
    pub nodefs: Result<FsStats, SignalError>,
    pub imagefs: Result<FsStats, SignalError>,
    /// True when imagefs is the nodefs filesystem.
    pub imagefs_is_nodefs: bool,
    pub pid: Result<PidStats, SignalError>,
    /// Pressure stall information of the node (empty without PSI); informational.
    pub pressure: Result<PressureByResource, SignalError>,
}

/// Where to read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalSources {
    /// Root of /proc and /sys (`/` on a node).
    pub root: PathBuf,
    /// nodefs path (kubelet root dir), absolute on the node (not under `root`).
    pub nodefs: PathBuf,
    /// imagefs path (containerd's root), absolute on the node.
    pub imagefs: PathBuf,
}

impl SignalSources {
    fn proc(&self) -> PathBuf {
        self.root.join("proc")
    }
    fn cgroup(&self) -> PathBuf {
        self.root.join("sys/fs/cgroup")
    }

    /// Reads every node signal.
    pub fn observe(&self) -> NodeStats {
        let nodefs = fs_stats(&self.nodefs);
        let imagefs = fs_stats(&self.imagefs);
        let imagefs_is_nodefs =
            matches!((&nodefs, &imagefs), (Ok(n), Ok(i)) if n.device == i.device);
        NodeStats {
            memory: self.memory(),
            nodefs,
            imagefs,
            imagefs_is_nodefs,
            pid: self.pids(),
            pressure: psi::node(&self.proc()),
        }
    }

    /// `memory.available` and its parts.
    pub fn memory(&self) -> Result<MemoryStats, SignalError> {
        let capacity = meminfo_total(&self.proc().join("meminfo"))?;
        let working_set = root_working_set(&self.cgroup())?;
        Ok(MemoryStats {
            capacity,
            working_set,
            available: capacity.saturating_sub(working_set),
        })
    }

    /// `pid.available` and its parts.
    pub fn pids(&self) -> Result<PidStats, SignalError> {
        let kernel = self.proc().join("sys/kernel");
        let pid_max = read_u64(&kernel.join("pid_max"))?;
        // threads-max is optional (some sandboxes hide it); pid_max alone is the kubelet's fallback.
        let max = match read_u64(&kernel.join("threads-max")) {
            Ok(t) => pid_max.min(t),
            Err(_) => pid_max,
        };
        let running = loadavg_tasks(&self.proc().join("loadavg"))?;
        Ok(PidStats {
            max,
            running,
            available: max.saturating_sub(running),
        })
    }

    /// The cgroup directories of a pod cgroup parent, for each controller topolet reads:
    /// (memory dir, pids dir). On cgroup v2 both are the same directory.
    pub fn pod_cgroup_dirs(&self, cgroup_parent: &str) -> Result<(PathBuf, PathBuf), SignalError> {
        let base = self.cgroup();
        let rel = cgroup_path(cgroup_parent).ok_or_else(|| SignalError::Parse {
            path: base.clone(),
            message: format!("cgroup parent {cgroup_parent:?} is not a cgroup path"),
        })?;
        Ok(if is_v1(&base) {
            (base.join("memory").join(&rel), base.join("pids").join(&rel))
        } else {
            (base.join(&rel), base.join(&rel))
        })
    }

    /// Memory working set and process count of the pod cgroup `cgroup_parent`.
    pub fn pod_usage(&self, cgroup_parent: &str) -> Result<PodCgroupUsage, SignalError> {
        let (mem_dir, pids_dir) = self.pod_cgroup_dirs(cgroup_parent)?;
        let memory_working_set = if mem_dir.join("memory.usage_in_bytes").exists() {
            let usage = read_u64(&mem_dir.join("memory.usage_in_bytes"))?;
            let inactive = stat_field(&mem_dir.join("memory.stat"), "total_inactive_file")?;
            usage.saturating_sub(inactive)
        } else {
            let usage = read_u64(&mem_dir.join("memory.current"))?;
            let inactive = stat_field(&mem_dir.join("memory.stat"), "inactive_file")?;
            usage.saturating_sub(inactive)
        };
        let processes = read_u64(&pids_dir.join("pids.current"))?;
        Ok(PodCgroupUsage {
            memory_working_set,
            processes,
        })
    }

    /// Pressure stall information of the pod cgroup `cgroup_parent` (cgroup v2; empty on v1).
    pub fn pod_pressure(&self, cgroup_parent: &str) -> Result<PressureByResource, SignalError> {
        let base = self.cgroup();
        if is_v1(&base) {
            return Ok(PressureByResource::new());
        }
        let (dir, _) = self.pod_cgroup_dirs(cgroup_parent)?;
        psi::cgroup(&dir)
    }

    /// The overlay upper directory (writable layer) of the container whose cgroup is
    /// `container_cgroup` (a cgroupfs path, `crate::nri::handlers::ManagedPod::container_cgroups`):
    /// the `upperdir=` of the root mount of the first process listed in it. `Ok(None)` when the container has no process or its root is not an
    /// overlay (native snapshotter: the whole rootfs is the writable layer; it is not counted).
    pub fn container_upperdir(
        &self,
        container_cgroup: &str,
    ) -> Result<Option<PathBuf>, SignalError> {
        let (_, pids_dir) = self.pod_cgroup_dirs(container_cgroup)?;
        let procs = pids_dir.join("cgroup.procs");
        let text = read(&procs)?;
        let Some(pid) = text.split_whitespace().next() else {
            return Ok(None);
        };
        let mountinfo = self.proc().join(pid).join("mountinfo");
        Ok(root_overlay_upperdir(&read(&mountinfo)?))
    }
}

/// Memory working set and tasks of one pod cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodCgroupUsage {
    pub memory_working_set: u64,
    pub processes: u64,
}

fn read(path: &Path) -> Result<String, SignalError> {
    std::fs::read_to_string(path).map_err(|source| SignalError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_err(path: &Path, message: impl Into<String>) -> SignalError {
    SignalError::Parse {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn read_u64(path: &Path) -> Result<u64, SignalError> {
    let text = read(path)?;
    text.trim()
        .parse()
        .map_err(|_| parse_err(path, format!("{:?} is not a number", text.trim())))
}

/// A `key value` line of a cgroup `memory.stat`.
fn stat_field(path: &Path, key: &str) -> Result<u64, SignalError> {
    let text = read(path)?;
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
        .ok_or_else(|| parse_err(path, format!("no {key}")))
}

fn meminfo_total(path: &Path) -> Result<u64, SignalError> {
    let text = read(path)?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| parse_err(path, "no MemTotal"))?;
    Ok(kib * 1024)
}

/// The total task count of `/proc/loadavg` (`0.00 0.01 0.05 2/345 6789`).
fn loadavg_tasks(path: &Path) -> Result<u64, SignalError> {
    let text = read(path)?;
    text.split_whitespace()
        .nth(3)
        .and_then(|f| f.split_once('/'))
        .and_then(|(_, total)| total.parse().ok())
        .ok_or_else(|| parse_err(path, format!("no running/total field in {:?}", text.trim())))
}

/// cgroup v1 (or hybrid): the memory controller has its own hierarchy.
fn is_v1(cgroup: &Path) -> bool {
    cgroup.join("memory").is_dir()
}

fn root_working_set(cgroup: &Path) -> Result<u64, SignalError> {
    if is_v1(cgroup) {
        let dir = cgroup.join("memory");
        let usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
        let inactive = stat_field(&dir.join("memory.stat"), "total_inactive_file")?;
        return Ok(usage.saturating_sub(inactive));
    }
    let stat = cgroup.join("memory.stat");
    let usage = match read_u64(&cgroup.join("memory.current")) {
        Ok(u) => u,
        // The real root cgroup has no memory.current.
        Err(SignalError::Read { .. }) => stat_field(&stat, "anon")? + stat_field(&stat, "file")?,
        Err(e) => return Err(e),
    };
    let inactive = stat_field(&stat, "inactive_file")?;
    Ok(usage.saturating_sub(inactive))
}

/// The `upperdir=` of the overlay mounted at `/` in a mountinfo text.
fn root_overlay_upperdir(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let mount_point = fields.get(4)?;
        if *mount_point != "/" {
            return None;
        }
        let sep = fields.iter().position(|f| *f == "-")?;
        if !fields.get(sep + 1)?.starts_with("overlay") {
            return None;
        }
        fields
            .get(sep + 3)?
            .split(',')
            .find_map(|o| o.strip_prefix("upperdir="))
            .map(|p| PathBuf::from(unescape_mountinfo(p)))
    })
}

/// statvfs of `path`, or of its nearest existing ancestor (the kubelet's root dir need not exist
/// on a containerd-only node; its filesystem is then that of the closest parent).
pub fn fs_stats(path: &Path) -> Result<FsStats, SignalError> {
    let mut p = path;
    while !p.exists() {
        match p.parent() {
            Some(parent) => p = parent,
            None => break,
        }
    }
    let device = std::fs::metadata(p)
        .map_err(|source| SignalError::Read {
            path: p.to_path_buf(),
            source,
        })?
        .dev();
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| {
        SignalError::Statvfs {
            path: p.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        }
    })?;
    // SAFETY: `libc::statvfs` is plain old data (integers only): all-zero bytes are a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(SignalError::Statvfs {
            path: p.to_path_buf(),
            source: std::io::Error::last_os_error(),
        });
    }
    let frsize = st.f_frsize as u64;
    Ok(FsStats {
        capacity_bytes: (st.f_blocks as u64).saturating_mul(frsize),
        available_bytes: (st.f_bavail as u64).saturating_mul(frsize),
        inodes: st.f_files as u64,
        inodes_free: st.f_ffree as u64,
        device,
    })
}

/// Bytes and inodes under a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirUsage {
    /// Allocated bytes (`st_blocks·512`, as `du` counts; a hard link counted at each name).
    pub bytes: u64,
    /// Entries (files, directories, links), the directory itself included.
    pub inodes: u64,
    /// True when the walk stopped at the entry limit (the figures are then lower bounds).
    pub truncated: bool,
}

impl std::ops::AddAssign for DirUsage {
    fn add_assign(&mut self, o: DirUsage) {
        self.bytes += o.bytes;
        self.inodes += o.inodes;
        self.truncated |= o.truncated;
    }
}

/// Disk usage of `dir`: a walk that does not follow symlinks or cross filesystems, and stops
/// after `max_entries` entries. A missing `dir` is zero; unreadable subdirectories are skipped
/// (entries can vanish while a container runs).
pub fn dir_usage(dir: &Path, max_entries: u64) -> DirUsage {
    let mut usage = DirUsage::default();
    let Ok(root) = std::fs::symlink_metadata(dir) else {
        return usage;
    };
    let dev = root.dev();
    usage.bytes += root.blocks() * 512;
    usage.inodes += 1;
    if !root.is_dir() {
        return usage;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            if usage.inodes >= max_entries {
                usage.truncated = true;
                return usage;
            }
            let Ok(md) = entry.metadata() else { continue };
            usage.inodes += 1;
            usage.bytes += md.blocks() * 512;
            if md.is_dir() && md.dev() == dev {
                stack.push(entry.path());
            }
        }
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    fn sources(root: &Path) -> SignalSources {
        SignalSources {
            root: root.to_path_buf(),
            nodefs: root.to_path_buf(),
            imagefs: root.join("does/not/exist"),
        }
    }

    fn proc_files(root: &Path) {
        write(
            root,
            "proc/meminfo",
            "MemTotal:       1000 kB\nMemFree: 5 kB\n",
        );
        write(root, "proc/sys/kernel/pid_max", "4194304\n");
        write(root, "proc/sys/kernel/threads-max", "1000\n");
        write(root, "proc/loadavg", "0.10 0.20 0.30 3/250 12345\n");
    }

    #[test]
    fn v1_memory_and_pids() {
        let t = tempfile::tempdir().unwrap();
        proc_files(t.path());
        write(
            t.path(),
            "sys/fs/cgroup/memory/memory.usage_in_bytes",
            "600000\n",
        );
        write(
            t.path(),
            "sys/fs/cgroup/memory/memory.stat",
            "cache 1\ninactive_file 99\ntotal_inactive_file 100000\n",
        );
        let s = sources(t.path());
        let m = s.memory().unwrap();
        assert_eq!(m.capacity, 1_024_000);
        assert_eq!(m.working_set, 500_000);
        assert_eq!(m.available, 524_000);
        let p = s.pids().unwrap();
        assert_eq!((p.max, p.running, p.available), (1000, 250, 750));
    }

    #[test]
    fn v2_root_without_memory_current_uses_anon_plus_file() {
        let t = tempfile::tempdir().unwrap();
        proc_files(t.path());
        write(
            t.path(),
            "sys/fs/cgroup/memory.stat",
            "anon 300000\nfile 200000\ninactive_file 100000\n",
        );
        let m = sources(t.path()).memory().unwrap();
        assert_eq!(m.working_set, 400_000);
        write(t.path(), "sys/fs/cgroup/memory.current", "700000\n");
        let m = sources(t.path()).memory().unwrap();
        assert_eq!(m.working_set, 600_000);
    }

    #[test]
    fn errors_name_the_file() {
        let t = tempfile::tempdir().unwrap();
        let s = sources(t.path());
        let e = s.memory().unwrap_err().to_string();
        assert!(e.contains("proc/meminfo"), "{e}");
        write(t.path(), "proc/sys/kernel/pid_max", "lots\n");
        let e = s.pids().unwrap_err().to_string();
        assert!(e.contains("pid_max") && e.contains("lots"), "{e}");
        write(t.path(), "proc/sys/kernel/pid_max", "100\n");
        write(t.path(), "proc/loadavg", "0.1 0.2\n");
        let e = s.pids().unwrap_err().to_string();
        assert!(e.contains("loadavg"), "{e}");
    }

    #[test]
    fn pod_usage_v1_and_v2() {
        let t = tempfile::tempdir().unwrap();
        let pod = "kubepods/besteffort/podabc";
        write(
            t.path(),
            &format!("sys/fs/cgroup/memory/{pod}/memory.usage_in_bytes"),
            "5000\n",
        );
        write(
            t.path(),
            &format!("sys/fs/cgroup/memory/{pod}/memory.stat"),
            "total_inactive_file 1000\n",
        );
        write(
            t.path(),
            &format!("sys/fs/cgroup/pids/{pod}/pids.current"),
            "7\n",
        );
        let u = sources(t.path()).pod_usage(&format!("/{pod}")).unwrap();
        assert_eq!(u.memory_working_set, 4000);
        assert_eq!(u.processes, 7);

        let t = tempfile::tempdir().unwrap();
        let rel = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice";
        write(
            t.path(),
            &format!("sys/fs/cgroup/{rel}/memory.current"),
            "10\n",
        );
        write(
            t.path(),
            &format!("sys/fs/cgroup/{rel}/memory.stat"),
            "inactive_file 4\n",
        );
        write(
            t.path(),
            &format!("sys/fs/cgroup/{rel}/pids.current"),
            "2\n",
        );
        let u = sources(t.path())
            .pod_usage("kubepods-burstable-pod1_2.slice")
            .unwrap();
        assert_eq!((u.memory_working_set, u.processes), (6, 2));
        let e = sources(t.path())
            .pod_usage("/kubepods/podzzz")
            .unwrap_err()
            .to_string();
        assert!(e.contains("kubepods/podzzz/memory.current"), "{e}");
    }

    #[test]
    fn fs_stats_of_a_missing_path_is_its_ancestor() {
        let t = tempfile::tempdir().unwrap();
        let a = fs_stats(t.path()).unwrap();
        let b = fs_stats(&t.path().join("x/y/z")).unwrap();
        assert_eq!(a.device, b.device);
        assert!(a.capacity_bytes > 0 && a.inodes > 0);
        let s = sources(t.path()).observe();
        assert!(s.imagefs_is_nodefs);
    }

    #[test]
    fn upperdir_of_the_root_overlay() {
        let mi = "\
1 0 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l1:/l2,upperdir=/var/lib/containerd/snap/9/fs,workdir=/w\n\
2 1 0:5 / /proc rw - proc proc rw\n";
        assert_eq!(
            root_overlay_upperdir(mi),
            Some(PathBuf::from("/var/lib/containerd/snap/9/fs"))
        );
        let esc = "1 0 0:50 / / rw - overlay overlay rw,upperdir=/a\\040b/fs\n";
        assert_eq!(root_overlay_upperdir(esc), Some(PathBuf::from("/a b/fs")));
        assert_eq!(
            root_overlay_upperdir("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"),
            None
        );
    }

    #[test]
    fn container_upperdir_from_cgroup_procs() {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "sys/fs/cgroup/memory/.keep", "");
        write(
            t.path(),
            "sys/fs/cgroup/pids/kubepods/poda/c1/cgroup.procs",
            "42\n43\n",
        );
        write(
            t.path(),
            "proc/42/mountinfo",
            "1 0 0:50 / / rw - overlay overlay rw,upperdir=/up,workdir=/w\n",
        );
        let s = sources(t.path());
        assert_eq!(
            s.container_upperdir("/kubepods/poda/c1").unwrap(),
            Some(PathBuf::from("/up"))
        );
        write(
            t.path(),
            "sys/fs/cgroup/pids/kubepods/poda/c2/cgroup.procs",
            "",
        );
        assert_eq!(s.container_upperdir("/kubepods/poda/c2").unwrap(), None);
    }

    #[test]
    fn dir_usage_counts_and_stops_at_the_limit() {
        let t = tempfile::tempdir().unwrap();
        for i in 0..10 {
            write(t.path(), &format!("d/f{i}"), &"x".repeat(5000));
        }
        let u = dir_usage(t.path(), 1000);
        assert_eq!(u.inodes, 12);
        assert!(u.bytes >= 50_000, "{u:?}");
        assert!(!u.truncated);
        let u = dir_usage(t.path(), 5);
        assert!(u.truncated && u.inodes == 5, "{u:?}");
        assert_eq!(
            dir_usage(&t.path().join("missing"), 10),
            DirUsage::default()
        );
    }
}
