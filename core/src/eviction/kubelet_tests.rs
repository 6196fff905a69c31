//! The kubelet's eviction helper tables (`pkg/kubelet/eviction/helpers_test.go`), transcribed,
//! plus tests of the pressure tracker and the decision.
//!
//! Transcribed and matching: `TestOrderedByExceedsRequestMemory`, `TestOrderedByExceedsRequestDisk`,
//! `TestOrderedByPriority`, `TestOrderedbyDisk`, `TestOrderedbyInodes`,
//! `TestOrderedByPriorityDisk`, `TestOrderedByPriorityInodes`, `TestOrderedByMemory`,
//! `TestOrderedByPriorityMemory`, `TestOrderedByPriorityProcess`, `TestSortByEvictionPriority`,
//! `TestThresholdsMet`, `TestPercentageThresholdsMet`, `TestThresholdsUpdatedStats`,
//! `TestThresholdsMetGracePeriod` and `TestNodeConditionsObservedSince`. The shape of
//! `TestParseThresholdConfig` (its cases, with our key-naming messages) is in
//! `config::eviction`'s tests, where the `[eviction]` section is parsed.
//!
//! Where they are run differently: the kubelet tests sort with one comparator at a time
//! (`orderedBy(memory(statsFn))`); here the full rank function runs, which gives the same order
//! for these tables because every pod in a table shares the earlier keys. The tables' "guaranteed"
//! pods set memory (or ephemeral-storage) requests equal to limits but no CPU, so their QoS class
//! is Burstable or BestEffort and topolet's Guaranteed tier does not move them; the
//! `guaranteed_and_critical_go_last` test covers that difference. `TestParseThresholdConfig`'s
//! `allocatableMemory.available` and `containerfs.*` cases are refused (unsupported signals).

use std::time::Duration;

use crate::eviction::decide::{decide, HARD_EVICTION_GRACE_PERIOD};
use crate::eviction::observe::{
    thresholds_met, Observations, PressureTracker, SignalObservation, Timestamp,
};
use crate::eviction::rank::{rank_keys, PodUsage, UsageByPod};
use crate::eviction::settings::EvictionConfig;
use crate::eviction::signal::{NodeCondition, Signal};
use crate::eviction::threshold::{
    parse_min_reclaim, parse_threshold_value, Threshold, ThresholdValue,
};
use crate::kube::pod::{Container, Pod, ResourceList};

const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;

/// `newResourceList(cpu, memory, ephemeral)` in millicores / bytes.
fn rl(cpu: u64, mem: u64, eph: u64) -> ResourceList {
    let some = |v: u64| (v > 0).then_some(v);
    ResourceList {
        cpu_millis: some(cpu),
        memory_bytes: some(mem),
        ephemeral_storage_bytes: some(eph),
        ..Default::default()
    }
}

/// `newPod(name, priority, containers)` with one container.
fn pod(name: &str, priority: i32, requests: ResourceList, limits: ResourceList) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        priority: Some(priority),
        containers: vec![Container {
            name: name.into(),
            requests,
            limits,
            restart_policy: None,
        }],
        ..Default::default()
    }
}

fn none() -> ResourceList {
    ResourceList::default()
}

fn mem_usage(bytes: u64) -> PodUsage {
    PodUsage {
        memory_working_set: bytes,
        ..Default::default()
    }
}

fn disk_usage(bytes: u64) -> PodUsage {
    PodUsage {
        disk: bytes,
        ..Default::default()
    }
}

fn inode_usage(n: u64) -> PodUsage {
    PodUsage {
        inodes: n,
        ..Default::default()
    }
}

fn usage_of(entries: &[(&Pod, PodUsage)]) -> UsageByPod {
    entries.iter().map(|(p, u)| (p.key(), *u)).collect()
}

fn names(pods: &[&Pod]) -> Vec<String> {
    pods.iter().map(|p| p.key()).collect()
}

/// Rank `input` (in the given order) and compare with `expected`.
fn check(signal: Signal, input: &[&Pod], usage: &UsageByPod, expected: &[&Pod]) {
    let owned: Vec<Pod> = input.iter().map(|p| (*p).clone()).collect();
    assert_eq!(rank_keys(signal, &owned, usage), names(expected));
}

const LOW: i32 = -1;
const DEFAULT: i32 = 0;
const HIGH: i32 = 1;

#[test]
fn ordered_by_exceeds_request_memory() {
    let below = pod("below-requests", -1, rl(0, 200 * MI, 0), none());
    let exceeds = pod("exceeds-requests", 1, rl(0, 100 * MI, 0), none());
    let usage = usage_of(&[
        (&below, mem_usage(199 * MI)),
        (&exceeds, mem_usage(101 * MI)),
    ]);
    check(
        Signal::MemoryAvailable,
        &[&below, &exceeds],
        &usage,
        &[&exceeds, &below],
    );
}

#[test]
fn ordered_by_exceeds_request_disk() {
    let below = pod("below-requests", -1, rl(0, 0, 200 * MI), none());
    let exceeds = pod("exceeds-requests", 1, rl(0, 0, 100 * MI), none());
    let usage = usage_of(&[
        (&below, disk_usage(199 * MI)),
        (&exceeds, disk_usage(101 * MI)),
    ]);
    check(
        Signal::NodeFsAvailable,
        &[&below, &exceeds],
        &usage,
        &[&exceeds, &below],
    );
}

#[test]
fn ordered_by_priority() {
    let low = pod("low-priority", -134, none(), none());
    let medium = pod(
        "medium-priority",
        1,
        rl(100, 100 * MI, 0),
        rl(200, 200 * MI, 0),
    );
    let high = pod(
        "high-priority",
        12534,
        rl(200, 200 * MI, 0),
        rl(200, 200 * MI, 0),
    );
    // Same (zero) usage everywhere so only priority decides; the kubelet table has no stats.
    let usage = usage_of(&[
        (&low, PodUsage::default()),
        (&medium, PodUsage::default()),
        (&high, PodUsage::default()),
    ]);
    // `high` is Guaranteed (cpu and memory requests = limits): last in every order anyway.
    check(
        Signal::PidAvailable,
        &[&high, &medium, &low],
        &usage,
        &[&low, &medium, &high],
    );
}

#[test]
fn ordered_by_disk() {
    let p1 = pod("best-effort-high", DEFAULT, none(), none());
    let p2 = pod("best-effort-low", DEFAULT, none(), none());
    let p3 = pod(
        "burstable-high",
        DEFAULT,
        rl(0, 0, 100 * MI),
        rl(0, 0, 400 * MI),
    );
    let p4 = pod(
        "burstable-low",
        DEFAULT,
        rl(0, 0, 100 * MI),
        rl(0, 0, 400 * MI),
    );
    let p5 = pod(
        "guaranteed-high",
        DEFAULT,
        rl(0, 0, 400 * MI),
        rl(0, 0, 400 * MI),
    );
    let p6 = pod(
        "guaranteed-low",
        DEFAULT,
        rl(0, 0, 400 * MI),
        rl(0, 0, 400 * MI),
    );
    // rootfs + logs + local volume, as newPodDiskStats sums them.
    let usage = usage_of(&[
        (&p1, disk_usage(300 * MI)),
        (&p2, disk_usage(100 * MI)),
        (&p3, disk_usage(350 * MI)),
        (&p4, disk_usage(110 * MI)),
        (&p5, disk_usage(375 * MI)),
        (&p6, disk_usage(120 * MI)),
    ]);
    // The kubelet table sorts by `disk` alone: p1, p3, p2, p4, p5, p6. With exceedDiskRequests
    // first (the full rank function) the order is the same: p1..p4 exceed, p5 and p6 do not.
    check(
        Signal::NodeFsAvailable,
        &[&p1, &p2, &p3, &p4, &p5, &p6],
        &usage,
        &[&p1, &p3, &p2, &p4, &p5, &p6],
    );
}

#[test]
fn ordered_by_inodes() {
    let low = pod("low", DEFAULT, none(), none());
    let medium = pod("medium", DEFAULT, none(), none());
    let high = pod("high", DEFAULT, none(), none());
    let usage = usage_of(&[
        (&low, inode_usage(200_000)),
        (&medium, inode_usage(300_000)),
        (&high, inode_usage(400_000)),
    ]);
    check(
        Signal::NodeFsInodesFree,
        &[&low, &medium, &high],
        &usage,
        &[&high, &medium, &low],
    );
}

#[test]
fn ordered_by_priority_disk() {
    let p1 = pod(
        "above-requests-low-priority-high-usage",
        LOW,
        none(),
        none(),
    );
    let p2 = pod("above-requests-low-priority-low-usage", LOW, none(), none());
    let p3 = pod(
        "above-requests-high-priority-high-usage",
        HIGH,
        rl(0, 0, 100 * MI),
        none(),
    );
    let p4 = pod(
        "above-requests-high-priority-low-usage",
        HIGH,
        rl(0, 0, 100 * MI),
        none(),
    );
    let p5 = pod(
        "below-requests-low-priority-high-usage",
        LOW,
        rl(0, 0, GI),
        none(),
    );
    let p6 = pod(
        "below-requests-low-priority-low-usage",
        LOW,
        rl(0, 0, GI),
        none(),
    );
    let p7 = pod(
        "below-requests-high-priority-high-usage",
        HIGH,
        rl(0, 0, GI),
        none(),
    );
    let p8 = pod(
        "below-requests-high-priority-low-usage",
        HIGH,
        rl(0, 0, GI),
        none(),
    );
    let usage = usage_of(&[
        (&p1, disk_usage(500 * MI)),
        (&p2, disk_usage(50 * MI)),
        (&p3, disk_usage(600 * MI)),
        (&p4, disk_usage(150 * MI)),
        (&p5, disk_usage(800 * MI)),
        (&p6, disk_usage(200 * MI)),
        (&p7, disk_usage(800 * MI)),
        (&p8, disk_usage(200 * MI)),
    ]);
    check(
        Signal::ImageFsAvailable,
        &[&p8, &p7, &p6, &p5, &p4, &p3, &p2, &p1],
        &usage,
        &[&p1, &p2, &p3, &p4, &p5, &p6, &p7, &p8],
    );
}

#[test]
fn ordered_by_priority_inodes() {
    let p1 = pod("low-priority-high-usage", LOW, none(), none());
    let p2 = pod("low-priority-low-usage", LOW, none(), none());
    let p3 = pod("high-priority-high-usage", HIGH, none(), none());
    let p4 = pod("high-priority-low-usage", HIGH, none(), none());
    let usage = usage_of(&[
        (&p1, inode_usage(400_000)),
        (&p2, inode_usage(100_000)),
        (&p3, inode_usage(350_000)),
        (&p4, inode_usage(150_000)),
    ]);
    check(
        Signal::ImageFsInodesFree,
        &[&p4, &p3, &p2, &p1],
        &usage,
        &[&p1, &p2, &p3, &p4],
    );
}

#[test]
fn ordered_by_memory() {
    let p1 = pod("best-effort-high", DEFAULT, none(), none());
    let p2 = pod("best-effort-low", DEFAULT, none(), none());
    let p3 = pod("burstable-high", DEFAULT, rl(0, 100 * MI, 0), rl(0, GI, 0));
    let p4 = pod("burstable-low", DEFAULT, rl(0, 100 * MI, 0), rl(0, GI, 0));
    let p5 = pod("guaranteed-high", DEFAULT, rl(0, GI, 0), rl(0, GI, 0));
    let p6 = pod("guaranteed-low", DEFAULT, rl(0, GI, 0), rl(0, GI, 0));
    let usage = usage_of(&[
        (&p1, mem_usage(500 * MI)),
        (&p2, mem_usage(300 * MI)),
        (&p3, mem_usage(800 * MI)),
        (&p4, mem_usage(300 * MI)),
        (&p5, mem_usage(800 * MI)),
        (&p6, mem_usage(200 * MI)),
    ]);
    check(
        Signal::MemoryAvailable,
        &[&p1, &p2, &p3, &p4, &p5, &p6],
        &usage,
        &[&p3, &p1, &p2, &p4, &p5, &p6],
    );
}

#[test]
fn ordered_by_priority_memory() {
    let p1 = pod(
        "above-requests-low-priority-high-usage",
        LOW,
        none(),
        none(),
    );
    let p2 = pod("above-requests-low-priority-low-usage", LOW, none(), none());
    let p3 = pod(
        "above-requests-high-priority-high-usage",
        HIGH,
        rl(0, 100 * MI, 0),
        none(),
    );
    let p4 = pod(
        "above-requests-high-priority-low-usage",
        HIGH,
        rl(0, 100 * MI, 0),
        none(),
    );
    let p5 = pod(
        "below-requests-low-priority-high-usage",
        LOW,
        rl(0, GI, 0),
        none(),
    );
    let p6 = pod(
        "below-requests-low-priority-low-usage",
        LOW,
        rl(0, GI, 0),
        none(),
    );
    let p7 = pod(
        "below-requests-high-priority-high-usage",
        HIGH,
        rl(0, GI, 0),
        none(),
    );
    let p8 = pod(
        "below-requests-high-priority-low-usage",
        HIGH,
        rl(0, GI, 0),
        none(),
    );
    let usage = usage_of(&[
        (&p1, mem_usage(500 * MI)),
        (&p2, mem_usage(50 * MI)),
        (&p3, mem_usage(600 * MI)),
        (&p4, mem_usage(150 * MI)),
        (&p5, mem_usage(800 * MI)),
        (&p6, mem_usage(200 * MI)),
        (&p7, mem_usage(800 * MI)),
        (&p8, mem_usage(200 * MI)),
    ]);
    check(
        Signal::MemoryAvailable,
        &[&p8, &p7, &p6, &p5, &p4, &p3, &p2, &p1],
        &usage,
        &[&p1, &p2, &p3, &p4, &p5, &p6, &p7, &p8],
    );
}

#[test]
fn ordered_by_priority_process() {
    let p1 = pod("low-priority-high-usage", LOW, none(), none());
    let p2 = pod("low-priority-low-usage", LOW, none(), none());
    let p3 = pod("high-priority-high-usage", HIGH, none(), none());
    let p4 = pod("high-priority-low-usage", HIGH, none(), none());
    let procs = |n| PodUsage {
        processes: n,
        ..Default::default()
    };
    let usage = usage_of(&[
        (&p1, procs(20)),
        (&p2, procs(6)),
        (&p3, procs(20)),
        (&p4, procs(5)),
    ]);
    check(
        Signal::PidAvailable,
        &[&p4, &p3, &p2, &p1],
        &usage,
        &[&p1, &p2, &p3, &p4],
    );
}

/// The kubelet ranks a pod without stats first in every usage comparator.
#[test]
fn pods_without_stats_first() {
    let a = pod("a", DEFAULT, none(), none());
    let b = pod("b", DEFAULT, none(), none());
    let usage = usage_of(&[(&a, mem_usage(GI))]);
    check(Signal::MemoryAvailable, &[&a, &b], &usage, &[&b, &a]);
    // PIDs: priority still comes first.
    let hi = pod("hi", HIGH, none(), none());
    let usage = usage_of(&[(&a, PodUsage::default())]);
    check(Signal::PidAvailable, &[&hi, &a], &usage, &[&a, &hi]);
}

/// topolet's difference: Guaranteed pods after every other pod, critical pods last; ties by name.
#[test]
fn guaranteed_and_critical_go_last() {
    let guaranteed = pod("guaranteed", LOW, rl(1000, GI, 0), rl(1000, GI, 0));
    let burstable = pod("burstable", HIGH, rl(0, GI, 0), none());
    let critical = Pod {
        priority: Some(2_000_001_000),
        priority_class_name: Some("system-node-critical".into()),
        ..pod("critical", DEFAULT, none(), none())
    };
    let static_pod = Pod {
        static_or_mirror: true,
        ..pod("static", LOW, none(), none())
    };
    let tie_a = pod("tie-a", DEFAULT, none(), none());
    let tie_b = pod("tie-b", DEFAULT, none(), none());
    let usage = usage_of(&[
        (&guaranteed, mem_usage(100 * MI)),
        (&burstable, mem_usage(100 * MI)),
        (&critical, mem_usage(10 * GI)),
        (&static_pod, mem_usage(10 * GI)),
        (&tie_a, mem_usage(MI)),
        (&tie_b, mem_usage(MI)),
    ]);
    // The kubelet: tie-a/tie-b (exceed), then critical, static (exceed, by priority)…; the
    // low-priority Guaranteed pod would come before the high-priority Burstable one.
    check(
        Signal::MemoryAvailable,
        &[
            &critical,
            &static_pod,
            &guaranteed,
            &burstable,
            &tie_b,
            &tie_a,
        ],
        &usage,
        &[
            &tie_a,
            &tie_b,
            &burstable,
            &guaranteed,
            &static_pod,
            &critical,
        ],
    );
}

fn obs(available: i64, capacity: u64) -> SignalObservation {
    SignalObservation {
        available,
        capacity,
        time: None,
    }
}

fn mem_threshold(value: ThresholdValue, min_reclaim: Option<ThresholdValue>) -> Threshold {
    Threshold {
        min_reclaim,
        ..Threshold::hard(Signal::MemoryAvailable, value)
    }
}

#[test]
fn thresholds_met_table() {
    let hard = mem_threshold(
        ThresholdValue::Quantity(GI),
        Some(ThresholdValue::Quantity(500 * MI)),
    );
    let cases: [(&str, bool, Option<i64>, bool); 4] = [
        ("threshold-met-memory", false, Some(500 * MI as i64), true),
        ("threshold-not-met", false, Some(2 * GI as i64), false),
        // 1.05Gi rounded up to bytes.
        (
            "threshold-met-with-min-reclaim",
            true,
            Some(1_127_428_915),
            true,
        ),
        (
            "threshold-not-met-with-min-reclaim",
            true,
            Some(2 * GI as i64),
            false,
        ),
    ];
    for (name, enforce, available, want) in cases {
        let mut o = Observations::new();
        if let Some(a) = available {
            o.insert(Signal::MemoryAvailable, obs(a, 0));
        }
        let met = thresholds_met([&hard], &o, enforce);
        assert_eq!(!met.is_empty(), want, "{name}");
    }
    assert!(thresholds_met([&hard], &Observations::new(), false).is_empty());
}

#[test]
fn percentage_thresholds_met_table() {
    let memory = mem_threshold(
        ThresholdValue::Percentage(0.2),
        Some(ThresholdValue::Percentage(0.05)),
    );
    let disk = Threshold::hard(Signal::NodeFsAvailable, ThresholdValue::Percentage(0.3));
    let both = [memory.clone(), disk.clone()];
    let o = |m: Option<u64>, d: Option<u64>| {
        let mut out = Observations::new();
        if let Some(m) = m {
            out.insert(Signal::MemoryAvailable, obs((m * MI) as i64, 1000 * MI));
        }
        if let Some(d) = d {
            out.insert(Signal::NodeFsAvailable, obs((d * GI) as i64, 1000 * GI));
        }
        out
    };
    let sig = |v: Vec<&Threshold>| v.into_iter().map(|t| t.signal).collect::<Vec<_>>();
    use Signal::*;
    assert_eq!(
        sig(thresholds_met(&both, &o(Some(100), Some(100)), false)),
        [MemoryAvailable, NodeFsAvailable]
    );
    assert_eq!(
        sig(thresholds_met(&both, &o(Some(300), Some(400)), false)),
        []
    );
    assert_eq!(
        sig(thresholds_met(&both, &o(Some(300), Some(100)), false)),
        [NodeFsAvailable]
    );
    assert_eq!(
        sig(thresholds_met(&both, &o(Some(100), Some(400)), false)),
        [MemoryAvailable]
    );
    assert_eq!(
        sig(thresholds_met(&both, &o(Some(225), None), true)),
        [MemoryAvailable]
    );
    assert_eq!(sig(thresholds_met(&both, &o(Some(300), None), true)), []);
}

/// A threshold of `signal` at `value` (kubelet statement syntax), no grace period.
fn threshold(signal: &str, value: &str) -> Threshold {
    let signal = Signal::parse(signal).unwrap();
    Threshold::hard(signal, parse_threshold_value(value).unwrap().unwrap())
}

/// The default settings with exactly these hard thresholds, in signal order (as
/// `topolet::config::eviction` builds them; its tests check the parsing).
fn config(hard: &[(&str, &str)]) -> EvictionConfig {
    let mut thresholds: Vec<Threshold> = hard.iter().map(|(s, v)| threshold(s, v)).collect();
    thresholds.sort_by_key(|t| t.signal);
    EvictionConfig {
        thresholds,
        ..EvictionConfig::default()
    }
}

/// `c` with a soft threshold of `signal` at `value` and its grace period.
fn with_soft(mut c: EvictionConfig, signal: &str, value: &str, grace: Duration) -> EvictionConfig {
    c.thresholds.push(Threshold {
        grace_period: Some(grace),
        ..threshold(signal, value)
    });
    c
}

fn t(secs: u64) -> Timestamp {
    Timestamp::from_secs(secs)
}

fn memory_obs(available: u64, at: Option<u64>) -> Observations {
    Observations::from([(
        Signal::MemoryAvailable,
        SignalObservation {
            available: available as i64,
            capacity: 8 * GI,
            time: at.map(t),
        },
    )])
}

/// `TestThresholdsUpdatedStats` through the tracker: a threshold acts only on fresh stats.
#[test]
fn thresholds_updated_stats() {
    let c = config(&[("memory.available", "1Gi")]);
    let mut tr = PressureTracker::new();
    // no-last-observation
    assert_eq!(
        tr.update(&c, &memory_obs(0, Some(100)), t(0))
            .actionable
            .len(),
        1
    );
    // same-observation
    assert!(tr
        .update(&c, &memory_obs(0, Some(100)), t(10))
        .actionable
        .is_empty());
    // time-machine
    assert!(tr
        .update(&c, &memory_obs(0, Some(40)), t(20))
        .actionable
        .is_empty());
    // new-observation
    assert_eq!(
        tr.update(&c, &memory_obs(0, Some(200)), t(30))
            .actionable
            .len(),
        1
    );
    // no-time
    assert_eq!(
        tr.update(&c, &memory_obs(0, None), t(40)).actionable.len(),
        1
    );
}

/// `TestThresholdsMetGracePeriod` + `TestThresholdsFirstObservedAt` through the tracker.
#[test]
fn soft_grace_period_must_pass_continuously() {
    let c = with_soft(
        config(&[("memory.available", "1Gi")]),
        "memory.available",
        "2Gi",
        Duration::from_secs(60),
    );
    let mut tr = PressureTracker::new();
    let soft_only = memory_obs(3 * GI / 2, None);
    let u = tr.update(&c, &soft_only, t(0));
    assert_eq!(u.met.len(), 1);
    // The condition is set at once, before the grace period (as the kubelet's nodeConditions).
    assert!(u.conditions.contains(&NodeCondition::MemoryPressure));
    assert!(u.actionable.is_empty(), "soft-threshold-not-met");
    assert!(tr.update(&c, &soft_only, t(59)).actionable.is_empty());
    let u = tr.update(&c, &soft_only, t(60));
    assert_eq!(u.actionable.len(), 1, "soft-threshold-met");
    assert!(!u.actionable[0].is_hard());
    // Interrupted: the grace period starts again.
    tr.update(&c, &memory_obs(3 * GI, None), t(70));
    assert!(tr.update(&c, &soft_only, t(80)).actionable.is_empty());
    assert!(tr.update(&c, &soft_only, t(139)).actionable.is_empty());
    assert_eq!(tr.update(&c, &soft_only, t(140)).actionable.len(), 1);
    // hard-threshold-met: at once, and before the soft one.
    let u = tr.update(&c, &memory_obs(GI / 2, None), t(141));
    assert_eq!(u.actionable.len(), 2);
    assert!(u.actionable[0].is_hard());
}

/// `TestNodeConditionsObservedSince` through the tracker: pressure stays until the transition
/// period has passed since the threshold was last met.
#[test]
fn pressure_transition_period() {
    let c = config(&[("memory.available", "1Gi"), ("pid.available", "100")]);
    assert_eq!(c.pressure_transition_period, Duration::from_secs(300));
    let mut tr = PressureTracker::new();
    let u = tr.update(&c, &memory_obs(0, None), t(0));
    assert_eq!(
        u.conditions.iter().collect::<Vec<_>>(),
        [&NodeCondition::MemoryPressure]
    );
    let fine = memory_obs(4 * GI, None);
    assert!(tr
        .update(&c, &fine, t(60))
        .conditions
        .contains(&NodeCondition::MemoryPressure));
    assert!(tr
        .update(&c, &fine, t(299))
        .conditions
        .contains(&NodeCondition::MemoryPressure));
    assert!(tr.update(&c, &fine, t(300)).conditions.is_empty());
    // A zero period: reported while met, cleared at the next observation (kubelet: never set).
    let mut zero = c.clone();
    zero.pressure_transition_period = Duration::ZERO;
    let mut tr = PressureTracker::new();
    assert_eq!(
        tr.update(&zero, &memory_obs(0, None), t(0))
            .conditions
            .len(),
        1
    );
    assert!(tr.update(&zero, &fine, t(1)).conditions.is_empty());
    // PID pressure.
    let mut tr = PressureTracker::new();
    let o = Observations::from([(Signal::PidAvailable, obs(50, 4_194_304))]);
    let u = tr.update(&c, &o, t(0));
    assert_eq!(
        u.conditions.iter().collect::<Vec<_>>(),
        [&NodeCondition::PidPressure]
    );
}

/// Once driving eviction, a threshold stays met until available ≥ value + min reclaim.
#[test]
fn minimum_reclaim_keeps_eviction_going() {
    let mut c = config(&[("memory.available", "1Gi")]);
    c.thresholds[0].min_reclaim = Some(parse_min_reclaim("500Mi").unwrap());
    let mut tr = PressureTracker::new();
    assert_eq!(
        tr.update(&c, &memory_obs(GI - 1, None), t(0))
            .actionable
            .len(),
        1
    );
    // Above the threshold but below threshold + min reclaim: still acting.
    assert_eq!(
        tr.update(&c, &memory_obs(GI + 100 * MI, None), t(10))
            .actionable
            .len(),
        1
    );
    assert_eq!(
        tr.update(&c, &memory_obs(GI + 499 * MI, None), t(20))
            .actionable
            .len(),
        1
    );
    // Reclaimed enough: done.
    assert!(tr
        .update(&c, &memory_obs(GI + 500 * MI, None), t(30))
        .actionable
        .is_empty());
    // And not re-armed by being between the two again.
    assert!(tr
        .update(&c, &memory_obs(GI + 100 * MI, None), t(40))
        .actionable
        .is_empty());
}

/// `TestSortByEvictionPriority`: memory first.
#[test]
fn memory_drives_eviction_first() {
    let c = config(&[
        ("nodefs.available", "10%"),
        ("pid.available", "100"),
        ("memory.available", "1Gi"),
    ]);
    let o = Observations::from([
        (Signal::NodeFsAvailable, obs(0, 100 * GI)),
        (Signal::PidAvailable, obs(0, 1000)),
        (Signal::MemoryAvailable, obs(0, 8 * GI)),
    ]);
    let u = PressureTracker::new().update(&c, &o, t(0));
    let order: Vec<Signal> = u.actionable.iter().map(|t| t.signal).collect();
    assert_eq!(
        order,
        [
            Signal::MemoryAvailable,
            Signal::NodeFsAvailable,
            Signal::PidAvailable
        ]
    );
}

#[test]
fn decide_one_victim_with_grace_period() {
    let mut c = with_soft(
        config(&[("memory.available", "1Gi")]),
        "pid.available",
        "1000",
        Duration::from_secs(30),
    );
    c.max_pod_grace_period = Duration::from_secs(20);
    let be = Pod {
        termination_grace_period_seconds: Some(60),
        ..pod("best-effort", DEFAULT, none(), none())
    };
    let short = Pod {
        termination_grace_period_seconds: Some(5),
        ..pod("short", DEFAULT, none(), none())
    };
    let g = pod("guaranteed", DEFAULT, rl(1000, GI, 0), rl(1000, GI, 0));
    let crit = Pod {
        static_or_mirror: true,
        ..pod("static", DEFAULT, none(), none())
    };
    let pods = vec![g.clone(), crit.clone(), be.clone(), short.clone()];
    let usage = usage_of(&[
        (
            &be,
            PodUsage {
                memory_working_set: GI,
                processes: 10,
                ..Default::default()
            },
        ),
        (
            &short,
            PodUsage {
                memory_working_set: MI,
                processes: 500,
                ..Default::default()
            },
        ),
        (&g, mem_usage(GI)),
        (&crit, mem_usage(4 * GI)),
    ]);
    let mut tr = PressureTracker::new();
    // Nothing met.
    let d = decide(&c, &mut tr, &memory_obs(4 * GI, None), t(0), &pods, &usage);
    assert!(d.threshold.is_none() && d.victim().is_none() && d.conditions.is_empty());
    // Hard memory: 1s grace, critical never a candidate, Guaranteed last.
    let d = decide(&c, &mut tr, &memory_obs(GI / 2, None), t(10), &pods, &usage);
    let keys: Vec<&str> = d.candidates.iter().map(|c| c.pod.as_str()).collect();
    assert_eq!(
        keys,
        ["default/best-effort", "default/short", "default/guaranteed"]
    );
    assert!(d
        .candidates
        .iter()
        .all(|c| c.grace_period == HARD_EVICTION_GRACE_PERIOD));
    assert_eq!(d.victim().map(|c| c.uid.as_str()), Some("uid-best-effort"));
    assert!(
        d.message
            .starts_with("The node was low on resource: memory."),
        "{}",
        d.message
    );
    // Soft PID after its grace period: min(pod, max_pod_grace_period = 20s).
    let pids = Observations::from([(Signal::PidAvailable, obs(900, 4_194_304))]);
    let mut tr = PressureTracker::new();
    assert!(decide(&c, &mut tr, &pids, t(0), &pods, &usage)
        .threshold
        .is_none());
    let d = decide(&c, &mut tr, &pids, t(30), &pods, &usage);
    let got: Vec<(&str, u64)> = d
        .candidates
        .iter()
        .map(|c| (c.pod.as_str(), c.grace_period.as_secs()))
        .collect();
    assert_eq!(
        got,
        [
            ("default/short", 5),
            ("default/best-effort", 20),
            ("default/guaranteed", 20)
        ]
    );
    // max_pod_grace_period = 0: the pod's own (30s when unset).
    let mut c0 = c.clone();
    c0.max_pod_grace_period = Duration::ZERO;
    let soft = c0.thresholds.iter().find(|t| !t.is_hard()).unwrap().clone();
    assert_eq!(
        crate::eviction::decide::grace_period(&c0, &soft, &be),
        Duration::from_secs(60)
    );
    assert_eq!(
        crate::eviction::decide::grace_period(&c0, &soft, &g),
        Duration::from_secs(30)
    );
}
