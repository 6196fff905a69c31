//! The in-guest side of the real-kernel suite (`hack/guest.sh`, `integration/guest/in_guest.rs`):
//! the guest's own sysfs facts (NUMA nodes, thread siblings, node memory), cgroup v2 paths of a
//! container for either cgroup driver, pods named as the kubelet's systemd driver names them,
//! and `topolet plan` run on the guest's sysfs.
//!
//! Everything here reads the live kernel: it is only meaningful inside a guest booted by
//! `hack/guest.sh`, and [`shape`] fails anywhere else.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde_json::Value;

use crate::cri::Created;
use crate::kube::{ContainerSpec, PodSpec, Qos, Requirements};
use crate::stack::Stack;
use crate::topolet::{Topolet, TopoletConfig};

/// Upper bound of every wait in a guest: under emulation (TCG) a pod takes 5–20 s to start and
/// topolet a few seconds to register. Only reached when something is wrong.
pub const GUEST_WAIT: Duration = Duration::from_secs(300);

/// The unified cgroup v2 mount.
pub const CGROUP2: &str = "/sys/fs/cgroup";

/// The shape this guest was booted as (`TOPOLET_GUEST_SHAPE`, set by the guest's runner); fails
/// outside a guest, naming the variable.
pub fn shape() -> anyhow::Result<String> {
    std::env::var("TOPOLET_GUEST_SHAPE").context(
        "TOPOLET_GUEST_SHAPE is not set: the in-guest suite runs only inside a guest booted by hack/guest.sh",
    )
}

fn read_trimmed(path: impl AsRef<Path>) -> anyhow::Result<String> {
    let p = path.as_ref();
    Ok(std::fs::read_to_string(p)
        .with_context(|| format!("reading {}", p.display()))?
        .trim()
        .to_string())
}

/// `cpulist` of NUMA node `node` (empty for a memory-only node).
pub fn node_cpus(node: usize) -> anyhow::Result<String> {
    read_trimmed(format!("/sys/devices/system/node/node{node}/cpulist"))
}

/// The online NUMA nodes (`/sys/devices/system/node/online`).
pub fn nodes_online() -> anyhow::Result<String> {
    read_trimmed("/sys/devices/system/node/online")
}

/// `MemTotal` of NUMA node `node`, in bytes (its `meminfo`, kB × 1024).
pub fn node_mem_total(node: usize) -> anyhow::Result<u64> {
    let p = format!("/sys/devices/system/node/node{node}/meminfo");
    let text = read_trimmed(&p)?;
    let kb = text
        .lines()
        .find(|l| l.contains("MemTotal:"))
        .and_then(|l| l.split_whitespace().rev().nth(1))
        .with_context(|| format!("{p}: no MemTotal line"))?;
    let kb: u64 = kb
        .parse()
        .with_context(|| format!("{p}: MemTotal {kb:?} is not a number"))?;
    Ok(kb * 1024)
}

/// `thread_siblings_list` of `cpu`.
pub fn thread_siblings(cpu: u32) -> anyhow::Result<String> {
    read_trimmed(format!(
        "/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
    ))
}

/// The NUMA node whose cpulist contains every CPU of `cpus` (Linux list syntax).
pub fn node_of_cpus(cpus: &str) -> anyhow::Result<usize> {
    let want = parse_list(cpus)?;
    for node in parse_list(&nodes_online()?)? {
        let have = parse_list(&node_cpus(node as usize)?)?;
        if !want.is_empty() && want.iter().all(|c| have.contains(c)) {
            return Ok(node as usize);
        }
    }
    bail!("cpus {cpus} are not all in one NUMA node")
}

/// Parses a Linux list (`0-3,6`) into its members.
pub fn parse_list(list: &str) -> anyhow::Result<Vec<u32>> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: u32 = a
            .parse()
            .with_context(|| format!("bad cpu list {list:?}"))?;
        let b: u32 = b
            .parse()
            .with_context(|| format!("bad cpu list {list:?}"))?;
        out.extend(a..=b);
    }
    Ok(out)
}

/// The cgroup driver the stack's runc uses (`CONTAINERD_CGROUP_DRIVER`, as hack/containerd.sh).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Cgroupfs,
    Systemd,
}

impl Driver {
    /// The driver of this guest's stack.
    pub fn current() -> Driver {
        match std::env::var("CONTAINERD_CGROUP_DRIVER").as_deref() {
            Ok("systemd") => Driver::Systemd,
            _ => Driver::Cgroupfs,
        }
    }
}

/// The kubelet's systemd-driver pod slice for class `qos` (`kubepods-burstable-pod<uid>.slice`;
/// dashes of the uid become underscores, as the kubelet escapes them).
pub fn systemd_pod_slice(qos: Qos, uid: &str) -> String {
    let class = match qos {
        Qos::Guaranteed => "",
        Qos::Burstable => "-burstable",
        Qos::BestEffort => "-besteffort",
    };
    format!("kubepods{class}-pod{}.slice", uid.replace('-', "_"))
}

/// The path of a systemd slice under the cgroup root: every dash-separated prefix is a parent
/// (`a-b-c.slice` → `/a.slice/a-b.slice/a-b-c.slice`).
pub fn expand_slice(slice: &str) -> String {
    let name = slice.trim_end_matches(".slice");
    let mut path = String::new();
    let mut prefix = String::new();
    for (i, part) in name.split('-').enumerate() {
        if i > 0 {
            prefix.push('-');
        }
        prefix.push_str(part);
        path.push_str(&format!("/{prefix}.slice"));
    }
    path
}

/// The pod cgroup directory of `cgroup_parent` (a path for cgroupfs, a slice for systemd).
pub fn pod_cgroup(cgroup_parent: &str) -> PathBuf {
    let rel = if cgroup_parent.ends_with(".slice") {
        expand_slice(cgroup_parent)
    } else {
        cgroup_parent.to_string()
    };
    Path::new(CGROUP2).join(rel.trim_start_matches('/'))
}

/// The cgroup v2 directory of a container (`<pod>/<id>`, or `<pod slice>/cri-containerd-<id>.scope`).
pub fn container_cgroup(c: &Created) -> PathBuf {
    let pod = pod_cgroup(&c.cgroup_parent);
    if c.cgroup_parent.ends_with(".slice") {
        pod.join(format!("cri-containerd-{}.scope", c.id))
    } else {
        pod.join(&c.id)
    }
}

/// One file of a cgroup directory, trimmed.
pub fn cgroup_file(dir: &Path, file: &str) -> anyhow::Result<String> {
    read_trimmed(dir.join(file))
}

/// A field (`Cpus_allowed_list`, `Mems_allowed_list`) of `/proc/<pid>/status`.
pub fn proc_status_field(pid: i32, field: &str) -> anyhow::Result<String> {
    let p = format!("/proc/{pid}/status");
    let text = read_trimmed(&p)?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
        .with_context(|| format!("{p} has no {field}"))
}

/// A kubelet-shaped one-container pod for this guest's driver: cgroupfs pods under the stack's
/// base, systemd pods in their `kubepods…slice`.
pub fn pod(
    stack: &Stack,
    name: &str,
    requirements: Requirements,
    mem_capacity: u64,
) -> anyhow::Result<(PodSpec, ContainerSpec)> {
    let (mut pod, ctr) = crate::fixture::pod_for(stack, name, requirements, mem_capacity)?;
    if Driver::current() == Driver::Systemd {
        pod.cgroup_parent = systemd_pod_slice(pod.qos, &pod.uid);
    }
    Ok((pod, ctr))
}

/// The same pod as a Kubernetes Pod object (for `topolet plan`).
pub fn pod_object(pod: &PodSpec, ctr: &ContainerSpec) -> Value {
    let r = ctr.requirements;
    let mut requests = serde_json::Map::new();
    let mut limits = serde_json::Map::new();
    if let Some(m) = r.cpu_request_m {
        requests.insert("cpu".into(), format!("{m}m").into());
    }
    if let Some(b) = r.mem_request {
        requests.insert("memory".into(), b.to_string().into());
    }
    if let Some(m) = r.cpu_limit_m {
        limits.insert("cpu".into(), format!("{m}m").into());
    }
    if let Some(b) = r.mem_limit {
        limits.insert("memory".into(), b.to_string().into());
    }
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "spec": {"containers": [{"name": ctr.name, "resources": {"requests": requests, "limits": limits}}]},
    })
}

/// `topolet plan --sysfs-root /sys --config CONFIG --pods FILE` of `pods` (in order) on this
/// guest; returns its `containers` array.
pub fn plan(topolet_config: &Path, pods: &[Value], work: &Path) -> anyhow::Result<Vec<Value>> {
    let file = work.join("plan-pods.json");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": pods});
    std::fs::write(&file, list.to_string())
        .with_context(|| format!("writing {}", file.display()))?;
    let bin = crate::topolet::binary()?;
    let out = Command::new(&bin)
        .args(["plan", "--sysfs-root", "/sys", "--config"])
        .arg(topolet_config)
        .arg("--pods")
        .arg(&file)
        .output()
        .with_context(|| format!("running {} plan", bin.display()))?;
    ensure!(
        out.status.success(),
        "topolet plan failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let v: Value = serde_json::from_slice(&out.stdout).context("parsing topolet plan's JSON")?;
    v["containers"]
        .as_array()
        .cloned()
        .context("topolet plan's output has no containers array")
}

/// The plan's line for pod `name`.
pub fn planned<'a>(plan: &'a [Value], name: &str) -> anyhow::Result<&'a Value> {
    plan.iter()
        .find(|c| {
            c["pod"]
                .as_str()
                .is_some_and(|p| p.ends_with(&format!("/{name}")))
        })
        .with_context(|| format!("topolet plan has no line for pod {name}"))
}

/// Starts topolet on `stack` with `config` and waits (up to [`GUEST_WAIT`]) until NRI is
/// synchronized.
pub fn start_topolet(work: &Path, config: &TopoletConfig) -> anyhow::Result<Topolet> {
    let mut t = Topolet::start(work, config)?;
    t.wait_status("NRI synchronized", GUEST_WAIT, |s| {
        (s["nri"]["synchronized"] == true).then_some(())
    })?;
    Ok(t)
}

/// RunPodSandbox + CreateContainer that must be refused; returns crictl's error text. The
/// sandbox is removed again.
pub fn refused(stack: &Stack, pod: &PodSpec, ctr: &ContainerSpec) -> anyhow::Result<String> {
    let cri = stack.cri();
    let pod_id = cri.run_pod(pod)?;
    let r = cri.create(&pod_id, pod, ctr);
    cri.remove_pod(&pod_id)?;
    match r {
        Ok(c) => bail!(
            "container of pod {} was created ({}), expected a refusal",
            pod.name,
            c.id
        ),
        Err(e) => Ok(format!("{e:#}")),
    }
}
