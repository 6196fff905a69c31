//! `topolet rank --signal SIGNAL --pods PODS --usage USAGE.json` through the binary: the kubelet's
//! eviction order as a JSON array of "namespace/name", and exit 2 naming the file and the entry on
//! bad input. Also `topolet config check` naming the `[eviction]` key at fault.

// Test code throughout: clippy's `allow-unwrap-in-tests` (clippy.toml) covers the #[test]
// functions, not the helpers they share here.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::io::{ErrorKind, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const PODS: &str = r#"
apiVersion: v1
kind: List
items:
- metadata: {name: best-effort, namespace: default}
  spec: {containers: [{name: c}]}
- metadata: {name: burstable-under, namespace: default}
  spec:
    priority: 10
    containers: [{name: c, resources: {requests: {memory: 1Gi, ephemeral-storage: 1Gi}}}]
- metadata: {name: burstable-over, namespace: web}
  spec:
    priority: 10
    containers: [{name: c, resources: {requests: {memory: 100Mi}}}]
- metadata: {name: guaranteed, namespace: default}
  spec:
    priority: -5
    containers: [{name: c, resources: {limits: {memory: 1Gi, cpu: "1"}}}]
- metadata:
    name: kube-proxy
    namespace: kube-system
    annotations: {kubernetes.io/config.source: file}
  spec: {containers: [{name: c}]}
"#;

const USAGE: &str = r#"{
  "default/best-effort": {"memory_working_set": "50Mi", "processes": 3, "disk": "10Mi", "inodes": 10},
  "default/burstable-under": {"memory_working_set": "900Mi", "processes": 400, "disk": "2Gi", "inodes": 50},
  "web/burstable-over": {"memory_working_set": "199Mi", "processes": 10, "disk": 0, "inodes": 5000},
  "default/guaranteed": {"memory_working_set": "1000Mi", "processes": 1000},
  "kube-system/kube-proxy": {"memory_working_set": "5Gi", "processes": 5000}
}"#;

/// Runs `topolet rank`; `stdin` feeds `-`. Returns (exit code, stdout, stderr).
fn rank(signal: &str, pods: &Path, usage: &Path, stdin: Option<&str>) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_topolet"))
        .args(["rank", "--signal", signal, "--pods"])
        .arg(pods)
        .arg("--usage")
        .arg(usage)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The binary may exit before reading its stdin (e.g. on a bad --signal): writing to a
    // pipe whose reader is gone fails with BrokenPipe, which is not the test's failure.
    let input = stdin.unwrap_or("").as_bytes();
    match child.stdin.take().unwrap().write_all(input) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
        written => written.unwrap(),
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn files(pods: &str, usage: &str) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("pods.yaml");
    let u = dir.path().join("usage.json");
    std::fs::write(&p, pods).unwrap();
    std::fs::write(&u, usage).unwrap();
    (dir, p, u)
}

fn order(stdout: &str) -> Vec<String> {
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn ranks_for_each_signal() {
    let (_dir, pods, usage) = files(PODS, USAGE);
    let cases: [(&str, &[&str]); 4] = [
        // Exceeding requests first (best-effort at priority 0 before burstable-over at 10), then
        // the one below its request; Guaranteed after them, the static pod last.
        (
            "memory.available",
            &[
                "default/best-effort",
                "web/burstable-over",
                "default/burstable-under",
                "default/guaranteed",
                "kube-system/kube-proxy",
            ],
        ),
        // Disk: burstable-under exceeds its 1Gi ephemeral-storage request; burstable-over uses 0.
        (
            "nodefs.available",
            &[
                "default/best-effort",
                "default/burstable-under",
                "web/burstable-over",
                "default/guaranteed",
                "kube-system/kube-proxy",
            ],
        ),
        // Inodes: requests are 0, so every pod with inodes exceeds; then priority, then usage.
        (
            "imagefs.inodesFree",
            &[
                "default/best-effort",
                "web/burstable-over",
                "default/burstable-under",
                "default/guaranteed",
                "kube-system/kube-proxy",
            ],
        ),
        // PIDs: lower priority first, then more processes.
        (
            "pid.available",
            &[
                "default/best-effort",
                "default/burstable-under",
                "web/burstable-over",
                "default/guaranteed",
                "kube-system/kube-proxy",
            ],
        ),
    ];
    for (signal, want) in cases {
        let (code, out, err) = rank(signal, &pods, &usage, None);
        assert_eq!(code, 0, "{signal}: {err}");
        assert_eq!(order(&out), want, "{signal}");
    }
}

#[test]
fn reads_pods_from_stdin_and_ranks_pods_without_usage_first() {
    let (_dir, _pods, usage) = files(
        PODS,
        r#"{"default/best-effort": {"memory_working_set": 1}}"#,
    );
    let (code, out, err) = rank("memory.available", Path::new("-"), &usage, Some(PODS));
    assert_eq!(code, 0, "{err}");
    // No statistics: ranked first (kubelet), within each tier.
    assert_eq!(
        order(&out),
        [
            "default/burstable-under",
            "web/burstable-over",
            "default/best-effort",
            "default/guaranteed",
            "kube-system/kube-proxy",
        ]
    );
}

#[test]
fn bad_input_exits_2_naming_file_and_entry() {
    let cases: [(&str, &str, &str, &[&str]); 5] = [
        ("memory.availble", PODS, USAGE, &["memory.availble", "unknown signal"]),
        (
            "memory.available",
            PODS,
            r#"{"default/best-effort": {"memory_working_set": "lots"}}"#,
            &["usage.json", "\"default/best-effort\"", "memory_working_set", "\"lots\""],
        ),
        (
            "memory.available",
            PODS,
            r#"{"default/nobody": {}}"#,
            &["usage.json", "\"default/nobody\"", "no such pod"],
        ),
        (
            "memory.available",
            "metadata: {name: x}\nspec: {containers: [{name: c, resources: {requests: {memory: lots}}}]}\n",
            "{}",
            &["pods.yaml", "pod default/x", "resources.requests.memory"],
        ),
        ("pid.available", PODS, "[1]", &["usage.json", "expected an object"]),
    ];
    for (signal, pods_text, usage_text, needles) in cases {
        let (_dir, pods, usage) = files(pods_text, usage_text);
        let (code, out, err) = rank(signal, &pods, &usage, None);
        assert_eq!(code, 2, "{signal} {usage_text}: {err}");
        assert!(out.is_empty(), "{out}");
        for n in needles {
            assert!(err.contains(n), "{n:?} not in {err:?}");
        }
    }
    let (code, _, err) = rank(
        "pid.available",
        Path::new("/nonexistent/pods.yaml"),
        Path::new("/nonexistent/usage.json"),
        None,
    );
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/pods.yaml: cannot read"), "{err}");
}

#[test]
fn config_check_names_the_eviction_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.toml");
    std::fs::write(
        &file,
        "[eviction]\nhard = { \"memory.availble\" = \"500Mi\" }\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_topolet"))
        .args(["config", "check"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}: eviction.hard.\"memory.availble\": unknown signal",
            file.display()
        )),
        "{err}"
    );
}
