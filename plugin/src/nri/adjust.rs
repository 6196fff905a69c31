//! Decisions → NRI messages: the `ContainerAdjustment` for a container being created and the
//! `ContainerUpdate`s for running ones.
//!
//! Only fields whose value differs from what the container already carries are set, so topolet
//! never claims a field it does not change (containerd gives each field to one plugin only, and
//! fails the container when two plugins set the same one). A cpuset that someone else (the
//! kubelet's own CPU manager, or an NRI plugin with a lower index) has already set is left alone
//! and reported as a conflict instead.

use topolet_nri::api;

use crate::nri::view::ContainerView;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::managers::topology::hints::NumaMask;
use topolet_core::placement::ContainerResources;

/// The adjustment for `view` to receive `target`, and the conflicts that kept fields unset.
pub fn adjustment(
    view: &ContainerView,
    target: &ContainerResources,
) -> (api::ContainerAdjustment, Vec<String>) {
    let cur = &view.current;
    let mut conflicts = Vec::new();
    let mut cpu = api::LinuxCPU::new();
    let mut cpu_set = false;
    match &cur.cpuset_cpus {
        Some(existing) if *existing != target.cpuset => conflicts.push(format!(
            "cpuset.cpus is already {existing}; topolet wanted {}",
            target.cpuset
        )),
        Some(_) => {}
        None => {
            cpu.cpus = target.cpuset.to_string();
            cpu_set = true;
        }
    }
    let mems = target.mems.to_string();
    // Compared as sets: `0-1` is `0,1`.
    let want: CpuSet = target.mems.ids().collect();
    match &cur.cpuset_mems {
        Some(existing) if *existing != want => conflicts.push(format!(
            "cpuset.mems is already {existing}; topolet wanted {mems}"
        )),
        Some(_) => {}
        None if !mems.is_empty() => {
            cpu.mems = mems;
            cpu_set = true;
        }
        None => {}
    }
    if cur.cpu_shares != Some(target.cpu_shares) {
        cpu.shares = some_u64(target.cpu_shares);
        cpu_set = true;
    }
    if target.cpu_quota != 0 && cur.cpu_quota != Some(target.cpu_quota) {
        cpu.quota = some_i64(target.cpu_quota);
        cpu_set = true;
    }
    if target.cpu_quota != 0 && cur.cpu_period != Some(target.cpu_period) {
        cpu.period = some_u64(target.cpu_period);
        cpu_set = true;
    }
    let mut resources = api::LinuxResources::new();
    if cpu_set {
        resources.cpu = protobuf::MessageField::some(cpu);
    }
    let mut res_set = cpu_set;
    if let Some(limit) = target.pids_limit {
        if cur.pids_limit != Some(limit) {
            resources.pids = protobuf::MessageField::some(api::LinuxPids {
                limit,
                ..Default::default()
            });
            res_set = true;
        }
    }
    let mut linux = api::LinuxContainerAdjustment::new();
    if res_set {
        linux.resources = protobuf::MessageField::some(resources);
    }
    let mut linux_set = res_set;
    if cur.oom_score_adj != Some(i64::from(target.oom_score_adj)) {
        linux.oom_score_adj = protobuf::MessageField::some(api::OptionalInt {
            value: i64::from(target.oom_score_adj),
            ..Default::default()
        });
        linux_set = true;
    }
    if target.sched_idle {
        match &cur.scheduler_policy {
            Some(p) => conflicts.push(format!(
                "the scheduling policy is already {p}; topolet wanted SCHED_IDLE"
            )),
            None => {
                linux.scheduler = protobuf::MessageField::some(api::LinuxScheduler {
                    policy: api::LinuxSchedulerPolicy::SCHED_IDLE.into(),
                    ..Default::default()
                });
                linux_set = true;
            }
        }
    }
    let mut adjust = api::ContainerAdjustment::new();
    if linux_set {
        adjust.linux = protobuf::MessageField::some(linux);
    }
    (adjust, conflicts)
}

/// An update moving container `id` to `cpus` / `mems`. `ignore_failure`: the runtime skips the
/// update quietly if it fails (e.g. the container exited meanwhile).
pub fn cpuset_update(
    id: &str,
    cpus: &CpuSet,
    mems: &NumaMask,
    ignore_failure: bool,
) -> api::ContainerUpdate {
    let mut cpu = api::LinuxCPU::new();
    cpu.cpus = cpus.to_string();
    cpu.mems = mems.to_string();
    let mut resources = api::LinuxResources::new();
    resources.cpu = protobuf::MessageField::some(cpu);
    let mut linux = api::LinuxContainerUpdate::new();
    linux.resources = protobuf::MessageField::some(resources);
    api::ContainerUpdate {
        container_id: id.to_string(),
        linux: protobuf::MessageField::some(linux),
        ignore_failure,
        ..Default::default()
    }
}

/// An update moving a batch container (reclaimed CPU) to `target`'s cpuset, mems and CFS quota
/// (−1 when it is given the plain BestEffort values back).
pub fn batch_update(id: &str, target: &ContainerResources) -> api::ContainerUpdate {
    let mut update = cpuset_update(id, &target.cpuset, &target.mems, true);
    set_quota(&mut update, target.cpu_quota);
    if target.cpu_quota > 0 {
        let cpu = update
            .linux
            .mut_or_insert_default()
            .resources
            .mut_or_insert_default()
            .cpu
            .mut_or_insert_default();
        cpu.period = some_u64(target.cpu_period);
    }
    update
}

/// The reply to an in-place resize of `view` (its resources as the kubelet now asks for them)
/// placed as `target`: the cpuset and mems, plus the CFS quota when ours differs from the
/// kubelet's (an exclusive container's quota stays removed unless the config keeps it).
pub fn resize_update(view: &ContainerView, target: &ContainerResources) -> api::ContainerUpdate {
    let mut update = cpuset_update(&view.id, &target.cpuset, &target.mems, false);
    if let Some(quota) = quota_change(view, target) {
        set_quota(&mut update, quota);
    }
    update
}

/// The CFS quota `view` must be sent to run as `target`, if it differs from what it runs with:
/// −1 for an exclusive container (unless the config keeps quotas), the kubelet's value again
/// for one whose quota topolet removed. Other containers keep the kubelet's own.
pub fn quota_change(view: &ContainerView, target: &ContainerResources) -> Option<i64> {
    let ours = target.exclusive || view.current.cpu_quota == Some(-1);
    (ours && target.cpu_quota != 0 && view.current.cpu_quota != Some(target.cpu_quota))
        .then_some(target.cpu_quota)
}

/// The update a running container found at Synchronize needs to run as `target`, if any: its
/// cpuset and mems when they differ, and its CFS quota when [`quota_change`] says so (a
/// container taken over with exclusive CPUs loses its quota, as at creation).
pub fn sync_update(
    view: &ContainerView,
    target: &ContainerResources,
    mems_ok: bool,
) -> Option<api::ContainerUpdate> {
    let quota = quota_change(view, target);
    if view.current.cpuset_cpus.as_ref() == Some(&target.cpuset) && mems_ok && quota.is_none() {
        return None;
    }
    let mut update = cpuset_update(&view.id, &target.cpuset, &target.mems, true);
    if let Some(q) = quota {
        set_quota(&mut update, q);
    }
    Some(update)
}

fn set_quota(update: &mut api::ContainerUpdate, quota: i64) {
    let cpu = update
        .linux
        .mut_or_insert_default()
        .resources
        .mut_or_insert_default()
        .cpu
        .mut_or_insert_default();
    cpu.quota = some_i64(quota);
}

fn some_u64(value: u64) -> protobuf::MessageField<api::OptionalUInt64> {
    protobuf::MessageField::some(api::OptionalUInt64 {
        value,
        ..Default::default()
    })
}

fn some_i64(value: i64) -> protobuf::MessageField<api::OptionalInt64> {
    protobuf::MessageField::some(api::OptionalInt64 {
        value,
        ..Default::default()
    })
}
