//! The state file of every released format loads in every later build (the kubelet's
//! `state_compatibility_test` idea, pkg/kubelet/cm/cpumanager/state): an upgrade must find
//! the assignments the previous topolet left on the host path. `fixtures/state/` holds one file
//! per format, written by the build that introduced it and never edited; a format change adds a
//! file (and a migration), it does not replace one. A newer format than this build reads is
//! refused with a message that names the file and both versions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use topolet::state::file::{self, StateFileError};
use topolet::state::NodeState;
use topolet_core::kube::container_key::ContainerKey;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::managers::memory::policy::{MemoryAssignment, MemoryResource};
use topolet_core::managers::observed_devices::{DeviceSource, ObservedDevice};
use topolet_core::managers::topology::hints::NumaMask;
use topolet_core::placement::assignments::{Assignment, Assignments};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/state")
        .join(name)
}

/// What `assignments-v1.json` holds: an exclusive container with its NUMA affinity, one with
/// pinned memory and devices, and a container left alone.
fn format_1_content() -> NodeState {
    let cpus = |s: &str| CpuSet::parse(s).expect("cpuset");
    let numa = |ids: &[usize]| NumaMask::from_ids(ids.iter().copied()).expect("mask");
    // Memory only: a hugepages entry (`MemoryResource::Hugepages`, a newtype variant) is not a
    // JSON map key, and format 1 cannot encode it (the state write fails: reported separately).
    let mut taken = BTreeMap::new();
    taken.insert(MemoryResource::Memory, BTreeMap::from([(1, 2u64 << 30)]));
    NodeState {
        assignments: Assignments {
            containers: vec![
                Assignment {
                    pod_uid: "5f0c4e1a-8d7b-4c1e-9a57-3a0d3f6b2c11".into(),
                    container: "app".into(),
                    cpus: Some(cpus("2-5")),
                    affinity: Some(numa(&[0])),
                    memory: None,
                    devices: None,
                    observed_devices: None,
                },
                Assignment {
                    pod_uid: "9b2d7c3e-1f4a-4e8b-b6c2-7d5e9a1f0c22".into(),
                    container: "db".into(),
                    cpus: Some(cpus("8-9,12-13")),
                    affinity: Some(numa(&[1])),
                    memory: Some(MemoryAssignment {
                        nodes: numa(&[1]),
                        taken,
                    }),
                    devices: Some(BTreeMap::from([(
                        "example.com/nic".to_string(),
                        vec!["vf-3".to_string()],
                    )])),
                    observed_devices: None,
                },
            ],
        },
        left_alone: BTreeSet::from([ContainerKey::new(
            "c3a1e5f7-2b6d-4f9e-8a1c-5e7b3d9f1a33",
            "pinned-by-kubelet",
        )]),
    }
}

#[test]
fn the_state_file_of_format_1_loads() {
    let path = fixture("assignments-v1.json");
    // Written once, by the build that introduced format 1 (`TOPOLET_WRITE_STATE_FIXTURE=1` on a
    // missing file); never rewritten.
    if std::env::var_os("TOPOLET_WRITE_STATE_FIXTURE").is_some() && !path.exists() {
        file::save(&path, &format_1_content()).expect("writing the fixture");
    }
    let loaded: NodeState = match file::load(&path) {
        Ok(Some(s)) => s,
        Ok(None) => panic!("{} is missing", path.display()),
        Err(e) => panic!("this build no longer loads format 1: {e}"),
    };
    assert_eq!(loaded, format_1_content());
}

/// What `assignments-v2.json` holds: format 1's content, the exclusive container given a GPU
/// device node on NUMA node 0 (format 2: `observed_devices`).
fn format_2_content() -> NodeState {
    let mut state = format_1_content();
    state.assignments.containers[0].observed_devices = Some(vec![ObservedDevice {
        source: DeviceSource::DeviceNode,
        id: "/dev/nvidia0".into(),
        numa: Some(0),
        numa_unknown: None,
    }]);
    state
}

#[test]
fn the_state_file_of_format_2_loads() {
    let path = fixture("assignments-v2.json");
    // Written once, by the build that introduced format 2; never rewritten.
    if std::env::var_os("TOPOLET_WRITE_STATE_FIXTURE").is_some() && !path.exists() {
        file::save(&path, &format_2_content()).expect("writing the fixture");
    }
    let loaded: NodeState = match file::load(&path) {
        Ok(Some(s)) => s,
        Ok(None) => panic!("{} is missing", path.display()),
        Err(e) => panic!("this build no longer loads format 2: {e}"),
    };
    assert_eq!(loaded, format_2_content());
}

#[test]
fn a_newer_format_is_refused_naming_the_file_and_both_versions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("assignments.json");
    let current =
        std::fs::read(fixture(&format!("assignments-v{}.json", file::VERSION))).expect("fixture");
    let newer = String::from_utf8(current).expect("utf-8").replacen(
        &format!("\"version\":{}", file::VERSION),
        &format!("\"version\":{}", file::VERSION + 1),
        1,
    );
    std::fs::write(&path, newer).expect("write");
    let err = file::load::<NodeState>(&path).expect_err("a newer format must be refused");
    assert!(matches!(err, StateFileError::Version { .. }), "{err}");
    let msg = err.to_string();
    for want in [
        path.display().to_string(),
        format!("version {}", file::VERSION + 1),
        format!("reads version {}", file::VERSION),
        "newer topolet".to_string(),
        "Synchronize".to_string(),
    ] {
        assert!(msg.contains(&want), "{msg:?} lacks {want:?}");
    }
}
