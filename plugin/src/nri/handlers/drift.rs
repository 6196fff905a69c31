//! What the running containers' processes may actually use, against their targets, off the
//! event path on the blocking pool: the check of the containers Synchronize listed (a task
//! started from an older spec) and the periodic drift check (a cgroup rewritten behind
//! topolet's back, an update lost); a container found off its target is queued to be sent it
//! again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::TopoletPlugin;
use crate::host::proc_affinity::{self, Allowed};
use crate::nri::records::DriftProbe;
use topolet_core::machine::cpuset::CpuSet;

/// The lull the drift check needs: no runtime event for this long, nothing queued or in flight.
pub const DRIFT_LULL: Duration = Duration::from_secs(5);

impl TopoletPlugin {
    /// Checks the running containers Synchronize listed against their cpusets, off the event
    /// path: a container whose task may run outside its target (an update that reached only
    /// its stored spec while it started, before a topolet restart) is queued to be sent it again.
    pub(super) fn verify_running(self: &Arc<Self>) {
        let checks = self.quiet_lock().records.take_verify();
        if checks.is_empty() {
            return;
        }
        let plugin = Arc::downgrade(self);
        let proc_root = self.proc_root.clone();
        tokio::task::spawn_blocking(move || {
            let seen: Vec<(String, Result<CpuSet, _>)> = checks
                .into_iter()
                .map(|(id, pid)| (id, proc_affinity::cpus_allowed(&proc_root, pid)))
                .collect();
            let Some(p) = plugin.upgrade() else { return };
            let mut node = p.lock();
            for (id, allowed) in seen {
                let Some(m) = node.records.get(&id) else {
                    continue;
                };
                match allowed {
                    Ok(allowed) if !allowed.is_subset(&m.target().cpuset) => {
                        tracing::warn!(pod = %m.view().pod_ref, container = %m.view().key.container, runs_on = %allowed, cpus = %m.target().cpuset, "container runs outside its cpuset (an update reached only its spec); sending it again");
                        node.records.seen_running_on(&id, &allowed);
                        node.records.queue(&id);
                    }
                    Ok(_) => {}
                    // Exited since, or not ours to see: the next Synchronize looks again.
                    Err(e) => {
                        tracing::debug!(container = %id, error = %e, "cannot check where the container runs")
                    }
                }
            }
        });
    }

    /// The drift check (the kubelet's `reconcileState`, against what the kernel enforces rather
    /// than what was last sent): in a lull, every running container's init process is read
    /// (`/proc/<pid>/status`, on the blocking pool) and a container that may use a CPU outside
    /// its target, or other memory nodes than a target that names some, is queued to be sent its
    /// target again (counted in `topolet_drift_repairs_total`). Someone else's write to a
    /// container's cgroup, or an update lost in the runtime, is so repaired within
    /// `[nri] drift_check_s` plus the lull.
    pub(super) fn check_drift(self: &Arc<Self>, now: Instant) {
        let probes = self.quiet_lock().records.drift_probes(now, DRIFT_LULL);
        if probes.is_empty() {
            return;
        }
        let plugin = Arc::downgrade(self);
        let proc_root = self.proc_root.clone();
        tokio::task::spawn_blocking(move || {
            let seen = read_probes(&proc_root, probes);
            if let Some(p) = plugin.upgrade() {
                p.repair_drift(seen);
            }
        });
    }

    /// Queues the drifted containers among `seen` (probes and what their processes may use);
    /// returns how many were queued.
    pub(super) fn repair_drift(&self, seen: Vec<(DriftProbe, Allowed)>) -> usize {
        let mut node = self.lock();
        let mut repaired = 0;
        for (probe, allowed) in seen {
            self.metrics.drift_check();
            let cpus_off = !allowed.cpus.is_subset(&probe.cpus);
            let mems_off = probe.mems.as_ref().is_some_and(|m| *m != allowed.mems);
            if !(cpus_off || mems_off) || !node.records.drifted(&probe) {
                continue;
            }
            // What the kernel enforces is what the runtime applied, whatever it acknowledged
            // (an exclusive-CPU breach is measured from it: `topolet_core::placement::breach`).
            node.records.seen_running_on(&probe.id, &allowed.cpus);
            let field = if cpus_off { "cpus" } else { "mems" };
            self.metrics.drift_repair(field);
            repaired += 1;
            if let Some(m) = node.records.get(&probe.id) {
                tracing::warn!(pod = %m.view().pod_ref, container = %m.view().key.container, runs_on = %allowed.cpus, mems_allowed = %allowed.mems, cpus = %probe.cpus, field, "container drifted from its target (its cgroup was changed behind topolet's back, or an update was lost); sending it again");
            }
        }
        repaired
    }
}

/// Reads what each probed container's init process may use; a process that exited since (or
/// is not visible) is skipped: the next check looks again.
pub(super) fn read_probes(
    proc_root: &std::path::Path,
    probes: Vec<DriftProbe>,
) -> Vec<(DriftProbe, Allowed)> {
    probes
        .into_iter()
        .filter_map(|p| match proc_affinity::allowed(proc_root, p.pid) {
            Ok(a) => Some((p, a)),
            Err(e) => {
                tracing::debug!(container = %p.id, error = %e, "drift check: cannot read the container's process");
                None
            }
        })
        .collect()
}
