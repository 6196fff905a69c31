//! `topolet conditions` through the binary: node-problem-detector's custom plugin protocol
//! (one line on stdout; exit 0 OK, 1 pressure, 2 unknown) from one live observation.

use std::process::Command;

fn conditions(toml: &str) -> (i32, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("node.toml");
    std::fs::write(&file, toml).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_topolet"))
        .args(["conditions", "--config"])
        .arg(&file)
        .output()
        .expect("topolet runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout:?}");
    assert!(
        stdout.trim_end().len() <= 80,
        "at most 80 bytes: {stdout:?}"
    );
    (out.status.code().expect("exit code"), stdout)
}

#[test]
fn a_threshold_no_node_can_meet_reports_pressure() {
    // No machine has 1000 TiB of memory available.
    let (code, line) = conditions("[eviction]\nhard = { \"memory.available\" = \"1000Ti\" }\n");
    assert_eq!(code, 1, "{line}");
    assert!(line.starts_with("MemoryPressure"), "{line}");
}

#[test]
fn a_threshold_every_node_meets_reports_no_pressure() {
    let (code, line) = conditions("[eviction]\nhard = { \"memory.available\" = \"1Ki\" }\n");
    assert_eq!(code, 0, "{line}");
    assert!(line.contains("no MemoryPressure"), "{line}");
}

#[test]
fn an_invalid_configuration_is_unknown_and_names_the_key() {
    let (code, line) = conditions("[eviction]\nhard = { \"memory.availble\" = \"1Gi\" }\n");
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("eviction.hard"), "{line}");
}
