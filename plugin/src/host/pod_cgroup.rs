//! The pod cgroup's CPU values, which topolet writes itself: the one thing it changes outside
//! NRI. NRI reaches containers only, but the kubelet also limits the pod cgroup (quota = the sum
//! of the containers' CPU limits), so a container whose own quota topolet removed for its
//! exclusive CPUs is still throttled at pod level. The kubelet's static CPU policy writes −1
//! there (`DisableCPUQuotaWithExclusiveCPUs`); topolet does the same, and undoes it:
//!
//! - [`Work::Unlimit`]: a pod holding exclusive CPUs gets an unlimited quota (`cpu.cfs_quota_us`
//!   −1 on cgroup v1, `cpu.max` `max <period>` on v2), at its first exclusive container, at
//!   Synchronize, and after every resize (the kubelet rewrites the pod's quota first);
//! - [`Work::Relimit`]: when a resize takes the pod's last exclusive container back to the shared
//!   pool, the kubelet's quota, if the cgroup still holds topolet's −1 (the kubelet normally
//!   writes its own first);
//! - [`Work::Revert`]: after a refused resize, the shares and quota of the containers' current
//!   resources, where the cgroup holds exactly what the kubelet wrote for the refused request.
//!
//! Paths: the pod cgroup is the sandbox's `cgroup_parent` (cgroupfs driver: a path; systemd
//! driver: `kubepods-burstable-pod<uid>.slice`, expanded to
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`) under the cpu
//! controller's mount point, found in `<proc>/self/mountinfo` (cgroup v1 `cpu` or `cpu,cpuacct`,
//! the shortest mount point as the kubelet picks it; else the v2 unified mount). A mount point
//! under `/sys` is read under the configured sysfs root instead (the DaemonSet's `/host/sys`,
//! a temporary tree in tests). Nothing is ever created: a missing pod cgroup is an error.
//!
//! All of it runs on one worker thread, in order, off the NRI event path; every failure is
//! logged and counted (`topolet_pod_cgroup_writes_total{result="error"}`), and never fails a
//! container event.

use crate::host::cgroupfs::{cgroup_path, unescape_mountinfo};
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use crate::telemetry::metrics::Metrics;
use topolet_core::kube::qos::{self, PodCpu};

/// cgroup v1 (`cpu` hierarchy) or v2 (unified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The cpu controller's hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuController {
    pub version: Version,
    /// Its mount point, as `/proc/self/mountinfo` names it.
    pub mount_point: PathBuf,
}

/// The cpu controller among the mounts of a `mountinfo` text: the v1 hierarchy with `cpu` among
/// its super options (the shortest mount point when there are several, as the kubelet picks
/// it), else the shortest cgroup2 mount.
pub fn find_cpu_controller(mountinfo: &str) -> Option<CpuController> {
    find_controller(mountinfo, "cpu")
}

/// The hierarchy of v1 controller `name` among the mounts of a `mountinfo` text (the shortest
/// mount point when there are several), else the shortest cgroup2 mount.
pub fn find_controller(mountinfo: &str, name: &str) -> Option<CpuController> {
    let mut v1: Option<PathBuf> = None;
    let mut v2: Option<PathBuf> = None;
    let shorter = |best: &Option<PathBuf>, p: &PathBuf| match best {
        None => true,
        Some(b) => p.as_os_str().len() < b.as_os_str().len(),
    };
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount_point) = left.split(' ').nth(4) else {
            continue;
        };
        let mut r = right.split(' ');
        let (Some(fstype), _, Some(options)) = (r.next(), r.next(), r.next()) else {
            continue;
        };
        let point = PathBuf::from(unescape_mountinfo(mount_point));
        let slot = match fstype {
            "cgroup" if options.split(',').any(|o| o == name) => &mut v1,
            "cgroup2" => &mut v2,
            _ => continue,
        };
        if shorter(slot, &point) {
            *slot = Some(point);
        }
    }
    match (v1, v2) {
        (Some(mount_point), _) => Some(CpuController {
            version: Version::V1,
            mount_point,
        }),
        (None, Some(mount_point)) => Some(CpuController {
            version: Version::V2,
            mount_point,
        }),
        (None, None) => None,
    }
}

/// What one pod cgroup holds now (the values topolet reads and writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Current {
    /// −1: unlimited.
    pub quota: i64,
    pub period: u64,
    /// v1 `cpu.shares`, or v2 `cpu.weight`.
    pub shares_or_weight: u64,
}

/// A pod cgroup directory with its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDir {
    pub version: Version,
    pub dir: PathBuf,
}

impl PodDir {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn read(&self) -> io::Result<Current> {
        let num = |name: &str| -> io::Result<i64> {
            let path = self.file(name);
            let text = fs::read_to_string(&path).map_err(|e| at(&path, e))?;
            text.trim()
                .parse::<i64>()
                .map_err(|_| at(&path, invalid(format!("not a number: {:?}", text.trim()))))
        };
        match self.version {
            Version::V1 => Ok(Current {
                quota: num("cpu.cfs_quota_us")?,
                period: u64::try_from(num("cpu.cfs_period_us")?).unwrap_or(0),
                shares_or_weight: u64::try_from(num("cpu.shares")?).unwrap_or(0),
            }),
            Version::V2 => {
                let path = self.file("cpu.max");
                let text = fs::read_to_string(&path).map_err(|e| at(&path, e))?;
                let mut it = text.split_whitespace();
                let bad = || {
                    at(
                        &path,
                        invalid(format!("not \"<quota|max> <period>\": {:?}", text.trim())),
                    )
                };
                let quota = match it.next() {
                    Some("max") => -1,
                    Some(q) => q.parse::<i64>().map_err(|_| bad())?,
                    None => return Err(bad()),
                };
                let period = it
                    .next()
                    .and_then(|p| p.parse::<u64>().ok())
                    .ok_or_else(bad)?;
                Ok(Current {
                    quota,
                    period,
                    shares_or_weight: u64::try_from(num("cpu.weight")?).unwrap_or(0),
                })
            }
        }
    }

    /// Writes the quota (−1 unlimited) with `period` (v2 writes both in `cpu.max`; v1 only the
    /// quota, the period being the kubelet's already).
    pub fn write_quota(&self, quota: i64, period: u64) -> io::Result<()> {
        match self.version {
            Version::V1 => write(&self.file("cpu.cfs_quota_us"), &quota.to_string()),
            Version::V2 => {
                let q = if quota < 0 {
                    "max".to_string()
                } else {
                    quota.to_string()
                };
                write(&self.file("cpu.max"), &format!("{q} {period}"))
            }
        }
    }

    /// Writes `cpu.shares` (v1) or `cpu.weight` (v2, already converted).
    pub fn write_shares_or_weight(&self, value: u64) -> io::Result<()> {
        let name = match self.version {
            Version::V1 => "cpu.shares",
            Version::V2 => "cpu.weight",
        };
        write(&self.file(name), &value.to_string())
    }
}

fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Writes an existing cgroup file (never creates one), as runc does (`O_WRONLY|O_TRUNC`).
fn write(path: &Path, value: &str) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| at(path, e))?;
    f.write_all(value.as_bytes()).map_err(|e| at(path, e))
}

/// One thing to do to a pod cgroup.
#[derive(Debug, Clone)]
pub enum Work {
    /// The pod holds exclusive CPUs: quota unlimited (kept period).
    Unlimit { pod: String, cgroup_parent: String },
    /// The pod's last exclusive container went back to the shared pool by resize: `quota` (the
    /// kubelet's) if the cgroup still holds −1.
    Relimit {
        pod: String,
        cgroup_parent: String,
        quota: i64,
    },
    /// A refused resize: where the cgroup holds `refused` (the kubelet's values for the refused
    /// request), `restore` (those of the containers' current resources). Shares and quota are
    /// checked and restored separately.
    Revert {
        pod: String,
        cgroup_parent: String,
        refused: PodCpu,
        restore: PodCpu,
    },
    /// Answers once everything queued before it is done (tests, shutdown).
    Barrier(mpsc::Sender<()>),
}

/// Where pod cgroups are found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// `/proc` (its `self/mountinfo`).
    pub proc_root: PathBuf,
    /// `/sys`: mount points under `/sys` are read under this root instead.
    pub sysfs_root: PathBuf,
}

impl Roots {
    /// The cpu controller of this process's mounts, its mount point rebased onto `sysfs_root`.
    pub fn controller(&self) -> io::Result<CpuController> {
        self.controller_of("cpu")
    }

    /// The hierarchy that accounts CPU time (v1 `cpuacct`, which may be mounted apart from
    /// `cpu`; else the v2 unified mount), its mount point rebased onto `sysfs_root`.
    pub fn cpuacct_controller(&self) -> io::Result<CpuController> {
        self.controller_of("cpuacct")
    }

    /// v1 controller `name` (else the v2 unified mount) of this process's mounts, its mount
    /// point rebased onto `sysfs_root`.
    pub fn controller_named(&self, name: &str) -> io::Result<CpuController> {
        self.controller_of(name)
    }

    fn controller_of(&self, name: &str) -> io::Result<CpuController> {
        let path = self.proc_root.join("self/mountinfo");
        let text = fs::read_to_string(&path).map_err(|e| at(&path, e))?;
        let mut c = find_controller(&text, name).ok_or_else(|| {
            at(
                &path,
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no cgroup {name} controller mounted"),
                ),
            )
        })?;
        if let Ok(rest) = c.mount_point.strip_prefix("/sys") {
            c.mount_point = self.sysfs_root.join(rest);
        }
        Ok(c)
    }

    /// The pod cgroup of `cgroup_parent`.
    pub fn pod_dir(&self, cgroup_parent: &str) -> io::Result<PodDir> {
        let c = self.controller()?;
        let rel = cgroup_path(cgroup_parent).ok_or_else(|| {
            invalid(format!(
                "cgroup parent {cgroup_parent:?} is not a cgroup path"
            ))
        })?;
        let dir = c.mount_point.join(rel);
        Ok(PodDir {
            version: c.version,
            dir,
        })
    }
}

/// What one [`Work`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to change (already so, or not topolet's to change).
    Unchanged(&'static str),
    /// Written: which values.
    Wrote(String),
}

/// Does `work` (the worker thread's body for one item; also called directly by tests).
pub fn apply(roots: &Roots, work: &Work) -> io::Result<Outcome> {
    match work {
        Work::Unlimit { cgroup_parent, .. } => {
            let d = roots.pod_dir(cgroup_parent)?;
            let cur = d.read()?;
            if cur.quota < 0 {
                return Ok(Outcome::Unchanged("quota already unlimited"));
            }
            d.write_quota(-1, cur.period)?;
            Ok(Outcome::Wrote(format!("quota {} → unlimited", cur.quota)))
        }
        Work::Relimit {
            cgroup_parent,
            quota,
            ..
        } => {
            let d = roots.pod_dir(cgroup_parent)?;
            let cur = d.read()?;
            if cur.quota >= 0 {
                return Ok(Outcome::Unchanged("the kubelet already set the quota"));
            }
            d.write_quota(*quota, cur.period)?;
            Ok(Outcome::Wrote(format!("quota unlimited → {quota}")))
        }
        Work::Revert {
            cgroup_parent,
            refused,
            restore,
            ..
        } => {
            let d = roots.pod_dir(cgroup_parent)?;
            let cur = d.read()?;
            let mut wrote = Vec::new();
            if let (Some(q_refused), Some(q_restore)) = (refused.quota, restore.quota) {
                if cur.quota == q_refused && q_refused != q_restore {
                    d.write_quota(q_restore, cur.period)?;
                    wrote.push(format!("quota {q_refused} → {q_restore}"));
                }
            }
            let have = match d.version {
                Version::V1 => (cur.shares_or_weight == refused.shares).then_some(restore.shares),
                Version::V2 => {
                    // The conversion the writer used: whichever reproduces what it wrote.
                    let convert: [fn(u64) -> u64; 2] =
                        [qos::cpu_shares_to_weight, qos::cpu_shares_to_weight_linear];
                    convert
                        .into_iter()
                        .find(|f| f(refused.shares) == cur.shares_or_weight)
                        .map(|f| f(restore.shares))
                }
            };
            if let Some(value) = have {
                if value != cur.shares_or_weight {
                    d.write_shares_or_weight(value)?;
                    wrote.push(format!("shares {} → {value}", cur.shares_or_weight));
                }
            }
            if wrote.is_empty() {
                Ok(Outcome::Unchanged(
                    "the pod cgroup does not hold the refused request's values",
                ))
            } else {
                Ok(Outcome::Wrote(wrote.join(", ")))
            }
        }
        Work::Barrier(done) => {
            let _ = done.send(());
            Ok(Outcome::Unchanged("barrier"))
        }
    }
}

/// The worker: a queue drained in order by one thread, started at the first work item.
pub struct Writer {
    roots: Roots,
    metrics: Arc<Metrics>,
    queue: Mutex<Option<mpsc::Sender<Work>>>,
}

impl Writer {
    pub fn new(roots: Roots, metrics: Arc<Metrics>) -> Writer {
        Writer {
            roots,
            metrics,
            queue: Mutex::new(None),
        }
    }

    /// Queues `work`; returns at once.
    pub fn submit(&self, work: Work) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let work = match q.as_ref() {
            Some(tx) => match tx.send(work) {
                Ok(()) => return,
                Err(mpsc::SendError(work)) => work,
            },
            None => work,
        };
        let (tx, rx) = mpsc::channel::<Work>();
        let (roots, metrics) = (self.roots.clone(), self.metrics.clone());
        let started = std::thread::Builder::new()
            .name("topolet-pod-cgroups".into())
            .spawn(move || {
                for work in rx {
                    run_one(&roots, &metrics, &work);
                }
            });
        match started {
            Ok(_) => {
                let _ = tx.send(work);
                *q = Some(tx);
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start the pod cgroup writer; writing inline");
                run_one(&self.roots, &self.metrics, &work);
            }
        }
    }

    /// Waits until everything queued so far is done.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::channel();
        self.submit(Work::Barrier(tx));
        let _ = rx.recv();
    }
}

fn run_one(roots: &Roots, metrics: &Metrics, work: &Work) {
    let (pod, what) = match work {
        Work::Unlimit { pod, .. } => (pod, "unlimit"),
        Work::Relimit { pod, .. } => (pod, "relimit"),
        Work::Revert { pod, .. } => (pod, "revert"),
        Work::Barrier(_) => {
            let _ = apply(roots, work);
            return;
        }
    };
    match apply(roots, work) {
        Ok(Outcome::Wrote(values)) => {
            metrics.pod_cgroup_write(true);
            tracing::info!(pod = %pod, action = what, values = %values, "pod cgroup cpu values written");
        }
        Ok(Outcome::Unchanged(why)) => {
            tracing::debug!(pod = %pod, action = what, reason = why, "pod cgroup left as it is")
        }
        Err(e) => {
            metrics.pod_cgroup_write(false);
            tracing::error!(pod = %pod, action = what, error = %e, "pod cgroup cpu values not written; the pod may be throttled at pod level");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MOUNTS: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:24 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755
27 26 0:25 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
33 26 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
34 26 0:32 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,cpuset
90 80 0:31 / /host/sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
";

    const V2_MOUNTS: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:8 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    /// A temporary tree shaped like the host: `proc/self/mountinfo` and `sys/fs/cgroup/...`
    /// with one pod cgroup holding `files`.
    fn tree(
        mounts: &str,
        pod_rel: &str,
        files: &[(&str, &str)],
    ) -> (tempfile::TempDir, Roots, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let proc_root = tmp.path().join("proc");
        fs::create_dir_all(proc_root.join("self")).unwrap();
        fs::write(proc_root.join("self/mountinfo"), mounts).unwrap();
        let sysfs_root = tmp.path().join("sys");
        let mount = match find_cpu_controller(mounts)
            .unwrap()
            .mount_point
            .strip_prefix("/sys")
        {
            Ok(rest) => sysfs_root.join(rest),
            Err(_) => unreachable!("test mounts are under /sys"),
        };
        let dir = mount.join(pod_rel);
        fs::create_dir_all(&dir).unwrap();
        for (name, value) in files {
            fs::write(dir.join(name), value).unwrap();
        }
        (
            tmp,
            Roots {
                proc_root,
                sysfs_root,
            },
            dir,
        )
    }

    fn read(dir: &Path, name: &str) -> String {
        fs::read_to_string(dir.join(name)).unwrap()
    }

    #[test]
    fn finds_the_cpu_controller_as_the_kubelet_does() {
        assert_eq!(
            find_cpu_controller(V1_MOUNTS),
            Some(CpuController {
                version: Version::V1,
                mount_point: "/sys/fs/cgroup/cpu,cpuacct".into()
            })
        );
        assert_eq!(
            find_cpu_controller(V2_MOUNTS),
            Some(CpuController {
                version: Version::V2,
                mount_point: "/sys/fs/cgroup".into()
            })
        );
        let spaced = "33 26 0:31 / /mnt/my\\040cgroups rw - cgroup cgroup rw,cpu\n";
        assert_eq!(
            find_cpu_controller(spaced).map(|c| c.mount_point),
            Some(PathBuf::from("/mnt/my cgroups"))
        );
        // cpuacct alone is not cpu; garbage lines are skipped.
        assert_eq!(
            find_cpu_controller("1 2 3 / /x rw - cgroup cgroup rw,cpuacct\nnonsense\n"),
            None
        );
    }

    #[test]
    fn cpu_time_comes_from_cpuacct_wherever_it_is_mounted() {
        // Mounted apart from cpu (this CI host), and together with it.
        let apart = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                     33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n";
        assert_eq!(
            find_controller(apart, "cpuacct").map(|c| c.mount_point),
            Some(PathBuf::from("/sys/fs/cgroup/cpuacct"))
        );
        assert_eq!(
            find_controller(V1_MOUNTS, "cpuacct").map(|c| c.mount_point),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"))
        );
        assert_eq!(
            find_controller(V2_MOUNTS, "cpuacct").map(|c| c.version),
            Some(Version::V2)
        );
    }

    #[test]
    fn unlimit_and_relimit_on_cgroup_v1() {
        let (_t, roots, dir) = tree(
            V1_MOUNTS,
            "kubepods/podg",
            &[
                ("cpu.cfs_quota_us", "200000\n"),
                ("cpu.cfs_period_us", "100000\n"),
                ("cpu.shares", "2048\n"),
            ],
        );
        let parent = "/kubepods/podg".to_string();
        let unlimit = Work::Unlimit {
            pod: "default/g".into(),
            cgroup_parent: parent.clone(),
        };
        assert!(matches!(
            apply(&roots, &unlimit).unwrap(),
            Outcome::Wrote(_)
        ));
        assert_eq!(read(&dir, "cpu.cfs_quota_us"), "-1");
        assert_eq!(
            apply(&roots, &unlimit).unwrap(),
            Outcome::Unchanged("quota already unlimited")
        );
        let relimit = Work::Relimit {
            pod: "default/g".into(),
            cgroup_parent: parent,
            quota: 150_000,
        };
        assert!(matches!(
            apply(&roots, &relimit).unwrap(),
            Outcome::Wrote(_)
        ));
        assert_eq!(read(&dir, "cpu.cfs_quota_us"), "150000");
        // The kubelet's own value is never overwritten.
        fs::write(dir.join("cpu.cfs_quota_us"), "170000").unwrap();
        assert!(matches!(
            apply(&roots, &relimit).unwrap(),
            Outcome::Unchanged(_)
        ));
        assert_eq!(read(&dir, "cpu.cfs_quota_us"), "170000");
    }

    #[test]
    fn unlimit_on_cgroup_v2_keeps_the_period_and_systemd_paths_expand() {
        let (_t, roots, dir) = tree(
            V2_MOUNTS,
            "kubepods.slice/kubepods-pod12_34.slice",
            &[("cpu.max", "200000 50000\n"), ("cpu.weight", "79\n")],
        );
        let work = Work::Unlimit {
            pod: "default/g".into(),
            cgroup_parent: "kubepods-pod12_34.slice".into(),
        };
        assert!(matches!(apply(&roots, &work).unwrap(), Outcome::Wrote(_)));
        assert_eq!(read(&dir, "cpu.max"), "max 50000");
        assert_eq!(
            roots
                .pod_dir("kubepods-pod12_34.slice")
                .unwrap()
                .read()
                .unwrap()
                .quota,
            -1
        );
    }

    #[test]
    fn revert_restores_only_what_the_refused_request_wrote() {
        let p = qos::DEFAULT_CPU_PERIOD_US;
        let refused = PodCpu {
            shares: 2048,
            quota: Some(200_000),
            period: p,
        };
        let restore = PodCpu {
            shares: 1536,
            quota: Some(150_000),
            period: p,
        };
        let (_t, roots, dir) = tree(
            V1_MOUNTS,
            "kubepods/podg",
            &[
                ("cpu.cfs_quota_us", "200000"),
                ("cpu.cfs_period_us", "100000"),
                ("cpu.shares", "2048"),
            ],
        );
        let work = Work::Revert {
            pod: "default/g".into(),
            cgroup_parent: "/kubepods/podg".into(),
            refused,
            restore,
        };
        assert!(matches!(apply(&roots, &work).unwrap(), Outcome::Wrote(_)));
        assert_eq!(read(&dir, "cpu.cfs_quota_us"), "150000");
        assert_eq!(read(&dir, "cpu.shares"), "1536");
        // Values topolet cannot account for (another container, pod overhead): left alone.
        fs::write(dir.join("cpu.cfs_quota_us"), "250000").unwrap();
        fs::write(dir.join("cpu.shares"), "2560").unwrap();
        assert!(matches!(
            apply(&roots, &work).unwrap(),
            Outcome::Unchanged(_)
        ));
        assert_eq!(read(&dir, "cpu.cfs_quota_us"), "250000");

        // v2: the weight is converted the way the writer converted it.
        for convert in [qos::cpu_shares_to_weight, qos::cpu_shares_to_weight_linear] {
            let (_t, roots, dir) = tree(
                V2_MOUNTS,
                "kubepods/podg",
                &[
                    ("cpu.max", "200000 100000"),
                    ("cpu.weight", &convert(2048).to_string()),
                ],
            );
            assert!(matches!(apply(&roots, &work).unwrap(), Outcome::Wrote(_)));
            assert_eq!(read(&dir, "cpu.max"), "150000 100000");
            assert_eq!(read(&dir, "cpu.weight"), convert(1536).to_string());
        }
    }

    #[test]
    fn errors_name_the_file() {
        let (_t, roots, _dir) = tree(V1_MOUNTS, "kubepods/podg", &[]);
        let work = Work::Unlimit {
            pod: "default/x".into(),
            cgroup_parent: "/kubepods/podx".into(),
        };
        let e = apply(&roots, &work).unwrap_err().to_string();
        assert!(e.contains("kubepods/podx/cpu.cfs_quota_us"), "{e}");
        let none = Roots {
            proc_root: "/nonexistent-proc".into(),
            sysfs_root: "/nonexistent-sys".into(),
        };
        let e = apply(&none, &work).unwrap_err().to_string();
        assert!(e.contains("/nonexistent-proc/self/mountinfo"), "{e}");
    }
}
