//! Restart and reconnect semantics: rebuilding the assignments from what the runtime reports.
//!
//! The runtime's view is the truth; the state file only breaks ties. For every running container
//! that qualifies for exclusive CPUs, in a deterministic order:
//! 1. its own cpuset, when it is a valid exclusive set of the right size that nobody else holds
//!    (the normal case after a topolet restart: what we granted is what it runs on);
//! 2. else its saved assignment, when still free (a container whose adjustment or update was
//!    lost: topolet killed after it decided and before the runtime had its reply);
//! 3. else a fresh admission (a container created while topolet was away);
//! 4. else it stays on the shared pool, and the note says why.
//!
//! Each step runs for every container before the next one starts: a saved decision that nothing
//! contradicts is never handed to another container's fresh admission because of the order of
//! the containers' ids (the kubelet's CPU manager likewise restores its checkpoint before it
//! admits anything new: `pkg/kubelet/cm/cpumanager/state/state_checkpoint.go`).
//!
//! Pinned memory, devices (`[devices]`'s and the observed device set) and the NUMA affinity are
//! restored from the saved assignment of a
//! container kept in 1 or 2, and of every shared container that had them (a fractional
//! Guaranteed container's pinned memory), when still consistent. Assignments of containers that no longer run are dropped, so nothing
//! leaks however events were lost. Shared containers get the shared pool as it ends up.

use crate::kube::container_key::ContainerKey;
use crate::kube::qos::QosClass;
use crate::machine::cpuset::CpuSet;
use crate::managers::cpu::policy::ContainerRole;
use crate::placement::nri_container::NriContainer;
use crate::placement::{ContainerResources, Grant, Placement, Subject};

/// A running container as the runtime reports it (borrowed from the runtime's message: a
/// Synchronize of 10,000 containers copies none of them).
#[derive(Debug, Clone, Copy)]
pub struct RunningContainer<'a> {
    /// Runtime id.
    pub id: &'a str,
    /// The container as NRI describes it.
    pub container: &'a NriContainer,
    /// The cpuset it actually has.
    pub cpuset: Option<&'a CpuSet>,
}

/// The result of reconciling with the runtime's view.
#[derive(Debug, Clone, Default)]
pub struct Reconciled {
    /// Every running container's target values, in the order of the `running` slice given.
    pub targets: Vec<ContainerResources>,
    /// What had to be corrected, one line each.
    pub notes: Vec<String>,
}

impl Placement {
    /// Rebuilds every assignment from `running` (see the module docs). `floor` is the runtime's
    /// oom_score_adj floor.
    pub fn reconcile(&mut self, running: &[RunningContainer<'_>], floor: i32) -> Reconciled {
        let mut notes = Vec::new();
        let before = self.assignments();
        for a in &before.containers {
            self.release(&a.key());
        }
        self.pod_affinity.clear();
        let saved = std::mem::take(&mut self.saved);

        // Positions into `running`, in id order (the order every decision is taken in).
        let mut order: Vec<usize> = (0..running.len()).collect();
        order.sort_by(|&a, &b| running[a].id.cmp(running[b].id));
        let mut placed: Vec<Option<ContainerResources>> = std::iter::repeat_with(|| None)
            .take(running.len())
            .collect();
        let mut shared: Vec<usize> = Vec::new();
        let mut pending: Vec<usize> = Vec::new();

        // Pass 1: containers whose own cpuset is a valid exclusive set keep it.
        for i in order {
            let r = &running[i];
            let Some(n) = self.exclusive_cpus(r.container.class, &r.container.container.requests)
            else {
                shared.push(i);
                continue;
            };
            let key = r.container.key();
            match r.cpuset.filter(|s| s.len() == n) {
                Some(set) if self.cpu.restore(&key, set, ContainerRole::App).is_ok() => {
                    let grant = self.restore_rest(
                        &key,
                        Some(set),
                        &saved,
                        "restored from the running container",
                    );
                    placed[i] = Some(self.resources(&Subject::of_nri(r.container), grant, floor));
                }
                _ => pending.push(i),
            }
        }
        // Pass 2: the rest get their saved set if still free; every saved set is restored before
        // any fresh admission, so none of them can take a set another container was given.
        let mut unsaved: Vec<usize> = Vec::new();
        for i in pending {
            let r = &running[i];
            let key = r.container.key();
            let saved_cpus = saved.get(&key).and_then(|a| a.cpus.as_ref());
            if let Some(set) = saved_cpus {
                if self.cpu.restore(&key, set, ContainerRole::App).is_ok() {
                    notes.push(format!(
                        "{key}: runs on {}, moved back to its saved exclusive cpus {set}",
                        describe(r.cpuset)
                    ));
                    let grant =
                        self.restore_rest(&key, Some(set), &saved, "restored from the state file");
                    placed[i] = Some(self.resources(&Subject::of_nri(r.container), grant, floor));
                    continue;
                }
            }
            unsaved.push(i);
        }
        // Pass 3: a fresh admission, else the shared pool.
        for i in unsaved {
            let r = &running[i];
            let key = r.container.key();
            match self.admit_subject(&Subject::of_nri(r.container), floor) {
                Ok(res) => {
                    notes.push(format!(
                        "{key}: runs on {}, given exclusive cpus {}",
                        describe(r.cpuset),
                        res.cpuset
                    ));
                    placed[i] = Some(res);
                }
                Err(e) => {
                    notes.push(format!(
                        "{key}: cannot get exclusive cpus ({e}); left on the shared pool"
                    ));
                    shared.push(i);
                }
            }
        }
        let after = self.assignments();
        for a in &before.containers {
            if after.get(&a.key()).is_none() {
                notes.push(format!(
                    "{}: no longer running; its resources were released",
                    a.key()
                ));
            }
        }
        // Shared containers: the shared pool as it ends up, with what they had pinned.
        let reasons = SharedReasons::new();
        for i in shared {
            let r = &running[i];
            let key = r.container.key();
            let grant = self.restore_rest(&key, None, &saved, reasons.of(r.container.class));
            placed[i] = Some(self.resources(&Subject::of_nri(r.container), grant, floor));
        }
        Reconciled {
            // Every position went to exactly one of the passes above.
            targets: placed.into_iter().flatten().collect(),
            notes,
        }
    }

    /// After `key` got its exclusive `cpus` back (or none: a shared container): its saved
    /// affinity, pinned memory and devices, where still consistent (each is dropped on its own
    /// otherwise).
    fn restore_rest(
        &mut self,
        key: &ContainerKey,
        cpus: Option<&CpuSet>,
        saved: &crate::placement::assignments::Assignments,
        reason: &str,
    ) -> Grant {
        let entry = saved.get(key);
        let affinity = entry.and_then(|a| a.affinity);
        if let Some(a) = affinity {
            self.affinity.insert(key.clone(), a);
        }
        let mems = entry.and_then(|a| a.memory.clone()).and_then(|m| {
            let nodes = m.nodes;
            self.memory.restore(key, m).ok().map(|()| nodes)
        });
        let devices = entry
            .and_then(|a| a.devices.clone())
            .and_then(|d| {
                let list: Vec<String> = d.values().flatten().cloned().collect();
                self.devices.restore(key, d).ok().map(|()| list)
            })
            .unwrap_or_default();
        let observed = entry
            .and_then(|a| a.observed_devices.clone())
            .unwrap_or_default();
        if !observed.is_empty() {
            self.observed.insert(key.clone(), observed.clone());
        }
        Grant {
            exclusive: cpus.cloned(),
            mems,
            affinity,
            devices,
            observed,
            reason: reason.to_string(),
        }
    }
}

/// One container adopted after Synchronize ([`Placement::adopt`]): its target, and what had to be
/// corrected (as [`Reconciled::notes`]).
#[derive(Debug, Clone)]
pub struct Adopted {
    pub target: ContainerResources,
    pub note: Option<String>,
}

impl Placement {
    /// Adopts one running container that neither Synchronize nor CreateContainer showed (a
    /// runtime that does not block plugin synchronization while it creates a container: CRI-O,
    /// cri-o/cri-o server/container_create.go, runs the NRI CreateContainer before the
    /// container joins the store Synchronize lists). The steps of [`Placement::reconcile`] for
    /// this container alone, against the books as they are (nobody else is released or moved):
    /// its own cpuset when it is a valid exclusive set of the right size that nobody holds,
    /// else a fresh admission, else the shared pool. A container already holding an assignment
    /// keeps it (adopting twice grants nothing twice).
    pub fn adopt(&mut self, running: &RunningContainer<'_>, floor: i32) -> Adopted {
        let c = running.container;
        let key = c.key();
        let empty = crate::placement::assignments::Assignments::default();
        let shared_reason = || format!("{}: shared pool", c.class);
        if let Some(held) = self.exclusive().get(&key).cloned() {
            let grant = self.restore_rest(&key, Some(&held), &empty, "already held");
            return Adopted {
                target: self.resources(&Subject::of_nri(c), grant, floor),
                note: None,
            };
        }
        let Some(n) = self.exclusive_cpus(c.class, &c.container.requests) else {
            let grant = self.restore_rest(&key, None, &empty, &shared_reason());
            return Adopted {
                target: self.resources(&Subject::of_nri(c), grant, floor),
                note: None,
            };
        };
        if let Some(set) = running.cpuset.filter(|s| s.len() == n) {
            if self.cpu.restore(&key, set, ContainerRole::App).is_ok() {
                let grant = self.restore_rest(
                    &key,
                    Some(set),
                    &empty,
                    "adopted from the running container",
                );
                return Adopted {
                    target: self.resources(&Subject::of_nri(c), grant, floor),
                    note: None,
                };
            }
        }
        match self.admit_subject(&Subject::of_nri(c), floor) {
            Ok(res) => {
                let note = format!(
                    "{key}: runs on {}, given exclusive cpus {}",
                    describe(running.cpuset),
                    res.cpuset
                );
                Adopted {
                    target: res,
                    note: Some(note),
                }
            }
            Err(e) => {
                let grant = self.restore_rest(&key, None, &empty, &shared_reason());
                Adopted {
                    target: self.resources(&Subject::of_nri(c), grant, floor),
                    note: Some(format!(
                        "{key}: cannot get exclusive cpus ({e}); left on the shared pool"
                    )),
                }
            }
        }
    }
}

/// "<class>: shared pool", the grant reason of a shared container, formatted once per class.
struct SharedReasons([String; 3]);

impl SharedReasons {
    fn new() -> SharedReasons {
        SharedReasons(
            [
                QosClass::Guaranteed,
                QosClass::Burstable,
                QosClass::BestEffort,
            ]
            .map(|c| format!("{c}: shared pool")),
        )
    }

    fn of(&self, class: QosClass) -> &str {
        match class {
            QosClass::Guaranteed => &self.0[0],
            QosClass::Burstable => &self.0[1],
            QosClass::BestEffort => &self.0[2],
        }
    }
}

fn describe(s: Option<&CpuSet>) -> String {
    s.map(ToString::to_string)
        .unwrap_or_else(|| "no cpuset".into())
}
