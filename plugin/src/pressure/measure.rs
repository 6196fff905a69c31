//! What the eviction loop measures of the pods it manages ([`measure_pods`]): memory working set
//! and processes from each pod's cgroup and, when a disk signal needs ranking, its containers'
//! writable layers and log directories (at most [`DISK_WALK_LIMIT`] entries each); the log
//! directories asked from the CRI once and kept ([`LogDirs`]); each pod cgroup's PSI; and the
//! core's view of the usage.

use std::collections::{BTreeMap, HashMap};

use crate::nri::handlers::ManagedPod;
use crate::pressure::blocking::off_runtime;
use crate::pressure::cri::CriClient;
use crate::pressure::psi::PressureByResource;
use crate::pressure::signals::{dir_usage, DirUsage, SignalSources};
use topolet_core::eviction::{PodUsage, UsageByPod};

/// Most directory entries walked per container when measuring disk usage.
pub const DISK_WALK_LIMIT: u64 = 200_000;

fn pod_ref(p: &ManagedPod) -> String {
    format!("{}/{}", p.pod.namespace, p.pod.name)
}

/// Measured usage of one pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeasuredUsage {
    pub memory_working_set: u64,
    pub processes: u64,
    /// Writable layers + logs (only measured when a disk signal needs ranking).
    pub disk: DirUsage,
}

/// Each container's log directory by container id, as the CRI reported it: fixed for the
/// container's life (the kubelet sets `ContainerConfig.log_path` at creation), so it is asked once.
pub type LogDirs = HashMap<String, std::path::PathBuf>;

/// Usage of every pod in `pods`, from its cgroup (memory, processes) and, when `disk`, from its
/// containers' writable layers and log directories. A pod whose cgroup cannot be read gets zero
/// usage and a debug log (it may be exiting right now). The log directories of containers
/// `log_dirs` does not hold yet are asked from the CRI first (async), and `log_dirs` keeps those of
/// `pods`' containers only; every file read and walk then runs in one [`off_runtime`] call.
pub async fn measure_pods(
    sources: &SignalSources,
    pods: &[ManagedPod],
    disk: bool,
    cri: Option<&CriClient>,
    log_dirs: &mut LogDirs,
) -> HashMap<String, MeasuredUsage> {
    let live: std::collections::HashSet<&String> =
        pods.iter().flat_map(|p| &p.container_ids).collect();
    log_dirs.retain(|id, _| live.contains(id));
    if let (true, Some(cri)) = (disk, cri) {
        for pod in pods {
            for (id, c) in pod.container_ids.iter().zip(&pod.pod.containers) {
                if log_dirs.contains_key(id) {
                    continue;
                }
                match cri.container_status(id).await {
                    Ok(Some(st)) if !st.log_path.is_empty() => {
                        if let Some(dir) = std::path::Path::new(&st.log_path).parent() {
                            log_dirs.insert(id.clone(), dir.to_path_buf());
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(pod = %pod_ref(pod), container = %c.name, error = %e, "log path unknown")
                    }
                }
            }
        }
    }
    let (sources, pods) = (sources.clone(), pods.to_vec());
    let dirs = if disk {
        log_dirs.clone()
    } else {
        LogDirs::new()
    };
    off_runtime(move || measure_pods_blocking(&sources, &pods, disk, &dirs)).await
}

/// The file-reading part of [`measure_pods`]: cgroup files, writable layers and the log
/// directories found (by container id). Blocks; runs off the runtime.
fn measure_pods_blocking(
    sources: &SignalSources,
    pods: &[ManagedPod],
    disk: bool,
    log_dirs: &HashMap<String, std::path::PathBuf>,
) -> HashMap<String, MeasuredUsage> {
    let mut out = HashMap::new();
    for pod in pods {
        let mut usage = MeasuredUsage::default();
        match sources.pod_usage(&pod.cgroup_parent) {
            Ok(u) => {
                usage.memory_working_set = u.memory_working_set;
                usage.processes = u.processes;
            }
            Err(e) => tracing::debug!(pod = %pod_ref(pod), error = %e, "pod usage not readable"),
        }
        if disk {
            for ((id, cgroup), c) in pod
                .container_ids
                .iter()
                .zip(&pod.container_cgroups)
                .zip(&pod.pod.containers)
            {
                match sources.container_upperdir(cgroup) {
                    Ok(Some(upper)) => usage.disk += dir_usage(&upper, DISK_WALK_LIMIT),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(pod = %pod_ref(pod), container = %c.name, error = %e, "writable layer not found")
                    }
                }
                if let Some(dir) = log_dirs.get(id) {
                    usage.disk += dir_usage(dir, DISK_WALK_LIMIT);
                }
            }
        }
        out.insert(pod.pod.uid.clone(), usage);
    }
    out
}

/// Each pod cgroup's PSI (cgroup v2), by pod uid; a pod whose files cannot be read is left out
/// (it may be exiting right now).
pub(super) fn pods_pressure(
    sources: &SignalSources,
    pods: &[ManagedPod],
) -> BTreeMap<String, PressureByResource> {
    let mut out = BTreeMap::new();
    for pod in pods {
        match sources.pod_pressure(&pod.cgroup_parent) {
            Ok(p) if !p.is_empty() => {
                out.insert(pod.pod.uid.clone(), p);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(pod = %pod_ref(pod), error = %e, "pod pressure not readable"),
        }
    }
    out
}

/// The core's view of the measured usage, keyed `namespace/name`.
pub(super) fn usage_by_pod(
    pods: &[ManagedPod],
    usage: &HashMap<String, MeasuredUsage>,
) -> UsageByPod {
    pods.iter()
        .map(|p| {
            let u = usage.get(&p.pod.uid).copied().unwrap_or_default();
            (
                p.pod.key(),
                PodUsage {
                    memory_working_set: u.memory_working_set,
                    processes: u.processes,
                    disk: u.disk.bytes,
                    inodes: u.disk.inodes,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pressure::test_pods::pod;

    #[tokio::test]
    async fn log_directories_learnt_once_are_measured_and_forgotten_with_their_container() {
        let t = tempfile::tempdir().unwrap();
        let logs = t.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::write(logs.join("0.log"), vec![b'x'; 64 * 1024]).unwrap();
        let sources = SignalSources {
            root: t.path().to_path_buf(),
            nodefs: t.path().join("none"),
            imagefs: t.path().join("none"),
        };
        let mut p = pod(1);
        p.container_ids = vec!["c1".into()];
        p.container_cgroups = vec!["/kubepods/podu1/c1".into()];
        p.pod.containers = vec![topolet_core::kube::pod::Container {
            name: "app".into(),
            ..Default::default()
        }];
        let mut dirs = LogDirs::from([
            ("c1".to_string(), logs.clone()),
            ("gone".to_string(), logs.clone()),
        ]);
        // No CRI client: the directory known from an earlier interval is what gets measured.
        let usage = measure_pods(&sources, &[p.clone()], true, None, &mut dirs).await;
        assert!(
            usage["u1"].disk.bytes >= 64 * 1024,
            "{:?}",
            usage["u1"].disk
        );
        assert_eq!(
            dirs.keys().collect::<Vec<_>>(),
            ["c1"],
            "a container no pod has is forgotten"
        );
        // Without a disk signal to rank, nothing is walked, and the directory is kept.
        let usage = measure_pods(&sources, &[p], false, None, &mut dirs).await;
        assert_eq!(usage["u1"].disk.bytes, 0);
        assert!(dirs.contains_key("c1"));
    }
}
