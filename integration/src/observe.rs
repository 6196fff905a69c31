//! What a container really got: its v1 cgroup files
//! (`/sys/fs/cgroup/<controller>/<cgroup_parent>/<id>/…`), its process's `/proc` files, and its
//! bundle `config.json` (read with oci-spec).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use oci_spec::runtime::Spec;

use crate::cri::Created;
use crate::stack::Stack;

/// Root of the cgroup v1 hierarchies.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The cgroup directory of container `id` with `cgroup_parent` in `controller`'s hierarchy, as
/// the runtime under test names it (`<id>`, or `crio-<id>` on CRI-O:
/// [`crate::stack::Runtime::container_cgroup`]).
pub fn cgroup_dir(controller: &str, cgroup_parent: &str, id: &str) -> PathBuf {
    Path::new(CGROUP_ROOT)
        .join(controller)
        .join(cgroup_parent.trim_start_matches('/'))
        .join(crate::stack::Runtime::under_test().container_cgroup(id))
}

fn read_trimmed(path: &Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.trim().to_string())
}

fn read_num<T: std::str::FromStr>(path: &Path) -> anyhow::Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    let text = read_trimmed(path)?;
    text.parse()
        .with_context(|| format!("{} holds {text:?}, not a number", path.display()))
}

/// A container's v1 cgroup values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupValues {
    pub cpuset_cpus: String,
    pub cpuset_mems: String,
    pub cpu_shares: u64,
    /// -1 = no quota.
    pub cfs_quota_us: i64,
    pub cfs_period_us: u64,
    /// None = unlimited (the v1 "no limit" value, ≥ 2^62).
    pub memory_limit: Option<u64>,
    /// None = "max".
    pub pids_max: Option<i64>,
}

/// Reads a container's cgroup values.
pub fn cgroup_values(c: &Created) -> anyhow::Result<CgroupValues> {
    let dir = |ctrl| cgroup_dir(ctrl, &c.cgroup_parent, &c.id);
    let mem: u64 = read_num(&dir("memory").join("memory.limit_in_bytes"))?;
    let pids = read_trimmed(&dir("pids").join("pids.max"))?;
    let pids_max = if pids == "max" {
        None
    } else {
        Some(
            pids.parse()
                .with_context(|| format!("pids.max of {} holds {pids:?}", c.id))?,
        )
    };
    Ok(CgroupValues {
        cpuset_cpus: read_trimmed(&dir("cpuset").join("cpuset.cpus"))?,
        cpuset_mems: read_trimmed(&dir("cpuset").join("cpuset.mems"))?,
        cpu_shares: read_num(&dir("cpu").join("cpu.shares"))?,
        cfs_quota_us: read_num(&dir("cpu").join("cpu.cfs_quota_us"))?,
        cfs_period_us: read_num(&dir("cpu").join("cpu.cfs_period_us"))?,
        memory_limit: (mem < (1u64 << 62)).then_some(mem),
        pids_max,
    })
}

/// Reads a container's cgroup v1 `freezer.state` (`THAWED`, `FREEZING`, `FROZEN`).
pub fn freezer_state(c: &Created) -> anyhow::Result<String> {
    read_trimmed(&cgroup_dir("freezer", &c.cgroup_parent, &c.id).join("freezer.state"))
}

/// Reads just `cpuset.cpus` of a container.
pub fn cgroup_cpuset(c: &Created) -> anyhow::Result<String> {
    read_trimmed(&cgroup_dir("cpuset", &c.cgroup_parent, &c.id).join("cpuset.cpus"))
}

/// The scheduling policy of every thread in a container's cpu cgroup (v1 `tasks`), as
/// `(tid, policy)` with the policy number of `/proc/<tid>/stat` field 41
/// (include/uapi/linux/sched.h: 0 SCHED_NORMAL, 3 SCHED_BATCH, 5 SCHED_IDLE). A thread that
/// exits between the two reads is skipped.
pub fn sched_policies(c: &Created) -> anyhow::Result<Vec<(i32, u32)>> {
    let tasks = read_trimmed(&cgroup_dir("cpu", &c.cgroup_parent, &c.id).join("tasks"))?;
    let mut out = Vec::new();
    for tid in tasks.lines().filter(|l| !l.trim().is_empty()) {
        let tid: i32 = tid
            .trim()
            .parse()
            .with_context(|| format!("tasks of {} holds {tid:?}", c.id))?;
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{tid}/stat")) else {
            continue;
        };
        // After the command's closing parenthesis, fields start at 3 (the state).
        let rest = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .with_context(|| format!("/proc/{tid}/stat has no command field"))?;
        let policy: u32 = rest
            .split_whitespace()
            .nth(41 - 3)
            .with_context(|| format!("/proc/{tid}/stat has no field 41"))?
            .parse()
            .with_context(|| format!("/proc/{tid}/stat field 41 is not a number"))?;
        out.push((tid, policy));
    }
    Ok(out)
}

/// A process's view of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcValues {
    /// `Cpus_allowed_list` of `/proc/<pid>/status`.
    pub cpus_allowed_list: String,
    pub oom_score_adj: i64,
}

/// Reads `/proc/<pid>/status` `Cpus_allowed_list` and `/proc/<pid>/oom_score_adj`.
pub fn proc_values(pid: i32) -> anyhow::Result<ProcValues> {
    Ok(ProcValues {
        cpus_allowed_list: cpus_allowed_list(pid)?,
        oom_score_adj: read_num(&PathBuf::from(format!("/proc/{pid}/oom_score_adj")))?,
    })
}

/// `Cpus_allowed_list` of `/proc/<pid>/status`.
pub fn cpus_allowed_list(pid: i32) -> anyhow::Result<String> {
    let p = PathBuf::from(format!("/proc/{pid}/status"));
    let status = read_trimmed(&p)?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
        .with_context(|| format!("{} has no Cpus_allowed_list", p.display()))
}

/// The container's bundle config.json, as runc was given it.
pub fn bundle_spec(stack: &Stack, id: &str) -> anyhow::Result<Spec> {
    let p = stack.bundle_dir(id).join("config.json");
    Spec::load(&p).with_context(|| format!("loading {} with oci-spec", p.display()))
}

/// The parts of a bundle's linux.resources and process the tests compare.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BundleResources {
    pub cpus: Option<String>,
    pub mems: Option<String>,
    pub shares: Option<u64>,
    pub quota: Option<i64>,
    pub period: Option<u64>,
    pub memory_limit: Option<i64>,
    pub pids_limit: Option<i64>,
    pub oom_score_adj: Option<i32>,
}

/// Extracts [`BundleResources`] from a spec.
pub fn bundle_resources(spec: &Spec) -> anyhow::Result<BundleResources> {
    let Some(linux) = spec.linux() else {
        bail!("bundle spec has no linux section");
    };
    let mut out = BundleResources {
        oom_score_adj: spec.process().as_ref().and_then(|p| p.oom_score_adj()),
        ..Default::default()
    };
    if let Some(res) = linux.resources() {
        if let Some(cpu) = res.cpu() {
            out.cpus = cpu.cpus().clone();
            out.mems = cpu.mems().clone();
            out.shares = cpu.shares();
            out.quota = cpu.quota();
            out.period = cpu.period();
        }
        out.memory_limit = res.memory().as_ref().and_then(|m| m.limit());
        out.pids_limit = res.pids().as_ref().map(|p| p.limit());
    }
    Ok(out)
}

/// Node memory capacity (`MemTotal` of /proc/meminfo), as the kubelet and topolet see it.
pub fn mem_capacity() -> anyhow::Result<u64> {
    let text = read_trimmed(Path::new("/proc/meminfo"))?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("/proc/meminfo has no parsable MemTotal")?;
    Ok(kib * 1024)
}

/// Online CPUs of this machine, as a list (e.g. `0-1`).
pub fn online_cpus() -> anyhow::Result<String> {
    read_trimmed(Path::new("/sys/devices/system/cpu/online"))
}
