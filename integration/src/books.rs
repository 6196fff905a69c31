//! The books: whether the exclusive CPU is granted at most once and every other running container
//! sits on the shared pool, checked three ways that must agree — the containers' real cgroup
//! `cpuset.cpus` (and their processes' `Cpus_allowed_list`), topolet's state file, and
//! `topolet status -o json` over the admin socket.
//!
//! Built for the stack host's shape used by every test config: 2 CPUs, CPU 0 reserved, so CPU 1
//! ([`EXCLUSIVE_CPU`]) is the only CPU topolet can grant and the shared pool is `0-1` while
//! nobody holds it, `0` otherwise.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use anyhow::{bail, ensure, Context};
use serde_json::Value;

use crate::cri::{Created, Cri};
use crate::kube::Qos;
use crate::observe;

/// The only CPU topolet can grant on the test host (CPU 0 is reserved).
pub const EXCLUSIVE_CPU: &str = "1";
/// The shared pool while nobody holds [`EXCLUSIVE_CPU`].
pub const POOL_FULL: &str = "0-1";
/// The shared pool while a container holds [`EXCLUSIVE_CPU`].
pub const POOL_WITHOUT_EXCLUSIVE: &str = "0";

/// A container the test created, with what the checks need to know about it.
#[derive(Debug, Clone)]
pub struct Tracked {
    /// Unique within the test (used in messages and to find topolet's log lines).
    pub name: String,
    pub qos: Qos,
    /// The pod's uid and the container's name: topolet's key for it in the state file.
    pub pod_uid: String,
    pub container: String,
    pub created: Created,
}

/// What the books say when they balance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    /// Name of the container holding [`EXCLUSIVE_CPU`], if any.
    pub holder: Option<String>,
    /// Every running tracked container's cpuset, by name.
    pub cpusets: BTreeMap<String, String>,
}

/// Where topolet's side of the books is read.
#[derive(Debug, Clone, Copy)]
pub struct TopoletSide<'a> {
    /// `<state dir>/assignments.json`.
    pub state_file: &'a Path,
    /// `[admin] socket`.
    pub admin_socket: &'a Path,
}

/// A running container as the cgroup and /proc show it.
fn live_cpuset(c: &Created) -> anyhow::Result<String> {
    let dir = observe::cgroup_dir("cpuset", &c.cgroup_parent, &c.id);
    let cg = observe::cgroup_cpuset(c)?;
    let tasks_path = dir.join("tasks");
    let tasks = std::fs::read_to_string(&tasks_path)
        .with_context(|| format!("reading {}", tasks_path.display()))?;
    // Every task of the container must agree with its cgroup (a process started before an update
    // keeps its old mask only if the update did not reach it).
    for pid in tasks.split_whitespace() {
        let pid: i32 = pid
            .parse()
            .with_context(|| format!("{} lists {pid:?}, not a pid", tasks_path.display()))?;
        let Ok(allowed) = observe::cpus_allowed_list(pid) else {
            continue; // exited between the two reads
        };
        ensure!(
            allowed == cg,
            "container {}: cgroup cpuset.cpus {cg} but pid {pid} has Cpus_allowed_list {allowed}",
            &c.id[..12]
        );
    }
    Ok(cg)
}

/// Ids of every running container, from one `crictl ps -o json`.
pub fn running_ids(cri: &Cri) -> anyhow::Result<BTreeSet<String>> {
    let out = cri.run(&["ps", "-o", "json"])?;
    let v: Value = serde_json::from_str(&out).context("parsing crictl ps -o json")?;
    let Some(list) = v["containers"].as_array() else {
        bail!("crictl ps -o json has no containers array: {out}");
    };
    Ok(list
        .iter()
        .filter(|c| c["state"] == "CONTAINER_RUNNING")
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .collect())
}

/// The exclusive assignments in topolet's state file: `pod_uid/container` → cpus.
pub fn state_file_exclusive(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .with_context(|| format!("{} has no header line", path.display()))?;
    let payload: Value = serde_json::from_slice(&bytes[nl + 1..])
        .with_context(|| format!("{}: payload is not JSON", path.display()))?;
    let Some(list) = payload["assignments"]["containers"].as_array() else {
        bail!("{}: no assignments.containers array", path.display());
    };
    let mut out = BTreeMap::new();
    for a in list {
        let Some(cpus) = a.get("cpus") else { continue };
        let key = format!(
            "{}/{}",
            a["pod_uid"].as_str().unwrap_or("?"),
            a["container"].as_str().unwrap_or("?")
        );
        out.insert(key, json_text(cpus));
    }
    Ok(out)
}

fn json_text(v: &Value) -> String {
    v.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string())
}

/// `topolet status -o json`: (exclusive container id → cpus, shared pool cpus).
pub fn status_exclusive(admin_socket: &Path) -> anyhow::Result<(BTreeMap<String, String>, String)> {
    let bin = crate::topolet::binary()?;
    let v = crate::topolet::status_of(&bin, admin_socket)?;
    let Some(list) = v["exclusive"].as_array() else {
        bail!("topolet status has no exclusive array");
    };
    let mut ex = BTreeMap::new();
    for e in list {
        let id = e["id"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("(no id: {})", e["name"]));
        ex.insert(id, json_text(&e["cpus"]));
    }
    Ok((ex, json_text(&v["shared"]["cpus"])))
}

/// Checks the books once:
/// - every running container is one the test tracks, and runs where its cgroup says (every
///   task's `Cpus_allowed_list` equals `cpuset.cpus`), on a valid set of online CPUs;
/// - at most one container holds [`EXCLUSIVE_CPU`], and it is Guaranteed; every other running
///   container is exactly on the shared pool (so nobody else can run on the granted CPU);
/// - a running container that was created on [`EXCLUSIVE_CPU`] alone (its bundle `config.json`,
///   what runc was given, says so: topolet's create-time grant reached the runtime) still holds
///   it: an exclusive grant is never taken back while the container runs. On CRI-O, where a
///   restart of topolet can grant the CPU twice (see the check), one of two such containers
///   holds it and the other runs on the shared pool;
/// - when `topolet` is given: the state file's exclusive assignments are exactly the holder's
///   (none stale), and `topolet status` reports the same holder and the same shared pool.
pub fn check(
    cri: &Cri,
    tracked: &[Tracked],
    topolet: Option<TopoletSide>,
) -> anyhow::Result<Balance> {
    let running = running_ids(cri)?;
    let by_id: HashMap<&str, &Tracked> =
        tracked.iter().map(|t| (t.created.id.as_str(), t)).collect();
    let untracked: Vec<&String> = running
        .iter()
        .filter(|id| !by_id.contains_key(id.as_str()))
        .collect();
    ensure!(
        untracked.is_empty(),
        "running containers the test does not know: {untracked:?}"
    );
    let online = observe::online_cpus()?;
    let mut cpusets = BTreeMap::new();
    for id in &running {
        let t = by_id[id.as_str()];
        let cg = live_cpuset(&t.created).with_context(|| format!("container {}", t.name))?;
        ensure!(
            [EXCLUSIVE_CPU, POOL_FULL, POOL_WITHOUT_EXCLUSIVE].contains(&cg.as_str()),
            "{} runs on {cg:?}: not a valid cpuset on this machine (online {online})",
            t.name
        );
        cpusets.insert(t.name.clone(), cg);
    }
    let holders: Vec<&String> = cpusets
        .iter()
        .filter(|(_, c)| c.as_str() == EXCLUSIVE_CPU)
        .map(|(n, _)| n)
        .collect();
    ensure!(
        holders.len() <= 1,
        "CPU {EXCLUSIVE_CPU} granted to several containers: {holders:?}"
    );
    let holder = holders.first().map(|h| h.to_string());
    let qos_of = |n: &str| tracked.iter().find(|t| t.name == n).map(|t| t.qos);
    if let Some(h) = &holder {
        ensure!(
            qos_of(h) == Some(Qos::Guaranteed),
            "{h} holds CPU {EXCLUSIVE_CPU} but is not Guaranteed"
        );
    }
    let pool = if holder.is_some() {
        POOL_WITHOUT_EXCLUSIVE
    } else {
        POOL_FULL
    };
    let mut wrong = Vec::new();
    for (name, c) in &cpusets {
        if Some(name) == holder.as_ref() {
            continue;
        }
        let t = tracked.iter().find(|t| &t.name == name);
        let created_on = match t {
            Some(t) => {
                observe::bundle_resources(&observe::bundle_spec(cri.stack(), &t.created.id)?)?
                    .cpus
                    .unwrap_or_default()
            }
            None => String::new(),
        };
        if created_on == EXCLUSIVE_CPU {
            // CRI-O only: a double grant across a restart of topolet, settled. CRI-O runs the NRI
            // CreateContainer before it adds the container to its store, which is what
            // Synchronize lists, and holds no plugin sync back meanwhile (cri-o/cri-o
            // server/container_create.go; containerd blocks it, internal/cri/server/
            // container_create.go BlockPluginSync). So a container the killed topolet granted
            // CPU 1 can reach the new one only after it granted CPU 1 again to a later
            // container; when it adopts the first (PostStartContainer), one of the two keeps the
            // CPU and the other is moved to the shared pool. Anything else is still wrong.
            let settled_double_grant =
                cri.stack().runtime().is_crio() && holder.is_some() && c == pool;
            if !settled_double_grant {
                wrong.push(format!(
                    "{name} was created on CPU {EXCLUSIVE_CPU} alone (bundle config.json) but runs on {c}"
                ));
            }
        } else if c != pool {
            wrong.push(format!("{name} runs on {c}; the shared pool is {pool}"));
        }
    }
    ensure!(
        wrong.is_empty(),
        "holder of CPU {EXCLUSIVE_CPU}: {holder:?}; {} containers wrong:\n  {}",
        wrong.len(),
        wrong.join("\n  ")
    );

    if let Some(side) = topolet {
        let holder_t = holder
            .as_ref()
            .and_then(|h| tracked.iter().find(|t| &t.name == h));
        let want_state: BTreeMap<String, String> = holder_t
            .map(|t| {
                (
                    format!("{}/{}", t.pod_uid, t.container),
                    EXCLUSIVE_CPU.to_string(),
                )
            })
            .into_iter()
            .collect();
        let state = state_file_exclusive(side.state_file)?;
        ensure!(
            state == want_state,
            "state file {} holds exclusive assignments {state:?}; the containers say {want_state:?}",
            side.state_file.display()
        );
        let want_status: BTreeMap<String, String> = holder_t
            .map(|t| (t.created.id.clone(), EXCLUSIVE_CPU.to_string()))
            .into_iter()
            .collect();
        let (status, shared) = status_exclusive(side.admin_socket)?;
        ensure!(
            status == want_status && shared == pool,
            "topolet status: exclusive {status:?}, shared pool {shared}; the containers say \
             exclusive {want_status:?}, shared pool {pool}"
        );
    }
    Ok(Balance { holder, cpusets })
}

/// Every container key (`pod_uid/container`) in topolet's state file, whatever it holds, plus
/// the containers it left alone.
pub fn state_file_keys(path: &Path) -> anyhow::Result<BTreeSet<String>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .with_context(|| format!("{} has no header line", path.display()))?;
    let payload: Value = serde_json::from_slice(&bytes[nl + 1..])
        .with_context(|| format!("{}: payload is not JSON", path.display()))?;
    let mut keys = BTreeSet::new();
    for a in payload["assignments"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(payload["left_alone"].as_array().into_iter().flatten())
    {
        keys.insert(format!(
            "{}/{}",
            a["pod_uid"].as_str().unwrap_or("?"),
            a["container"].as_str().unwrap_or("?")
        ));
    }
    Ok(keys)
}

/// `managed_containers` of `topolet status -o json`.
pub fn status_managed(admin_socket: &Path) -> anyhow::Result<u64> {
    let bin = crate::topolet::binary()?;
    let out = Command::new(&bin)
        .args(["status", "-o", "json", "--admin-socket"])
        .arg(admin_socket)
        .output()
        .with_context(|| format!("running {} status", bin.display()))?;
    ensure!(
        out.status.success(),
        "topolet status failed ({})",
        out.status
    );
    let v: Value = serde_json::from_slice(&out.stdout).context("parsing topolet status -o json")?;
    v["managed_containers"]
        .as_u64()
        .context("topolet status has no managed_containers")
}
