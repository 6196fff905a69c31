//! Pod manifests (JSON) shaped as the kubelet suites create them: host-network pods without a
//! service-account token, busybox containers that exit at once on SIGTERM.

use serde_json::{json, Value};

/// A busybox container (the local image, never pulled) running `sh -c script`. `res` is the
/// `resources` object (may be empty).
pub fn script_ctr(name: &str, script: &str, res: Value) -> Value {
    json!({
        "name": name,
        "image": "localhost/topolet/busybox:latest",
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        "resources": res,
    })
}

/// `sh` waiting until SIGTERM, then exiting at once (deletion is quick).
pub const UNTIL_TERM: &str = "trap 'exit 0' TERM; sleep 3600 & wait";

/// A container that records its CPUs as its termination message, then waits for SIGTERM.
pub fn ctr(name: &str, res: Value) -> Value {
    script_ctr(
        name,
        &format!("grep Cpus_allowed_list /proc/self/status > /dev/termination-log; {UNTIL_TERM}"),
        res,
    )
}

/// A short-lived init container recording its CPUs as its termination message.
pub fn init_ctr(name: &str, res: Value) -> Value {
    script_ctr(
        name,
        "grep Cpus_allowed_list /proc/self/status > /dev/termination-log",
        res,
    )
}

pub fn res(cpu_req: &str, cpu_lim: &str, mem_req: &str, mem_lim: &str) -> Value {
    let mut r = json!({"requests": {}, "limits": {}});
    for (k, v, which) in [
        ("cpu", cpu_req, "requests"),
        ("memory", mem_req, "requests"),
        ("cpu", cpu_lim, "limits"),
        ("memory", mem_lim, "limits"),
    ] {
        if !v.is_empty() {
            r[which][k] = json!(v);
        }
    }
    r
}

pub fn guaranteed(cpu: &str, mem: &str) -> Value {
    res(cpu, cpu, mem, mem)
}

/// A host-network pod (the node's only network is loopback) without a service-account token
/// (no controller-manager issues them, and the kubelet's tmpfs mounts are private to it).
pub fn pod(name: &str, containers: Vec<Value>, init: Vec<Value>) -> Value {
    pod_with_labels(name, json!({"suite": "kubelet"}), containers, init)
}

/// [`pod`] with `labels` (e.g. for a PodDisruptionBudget's selector).
pub fn pod_with_labels(
    name: &str,
    labels: Value,
    containers: Vec<Value>,
    init: Vec<Value>,
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "hostNetwork": true,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 5,
            "containers": containers,
            "initContainers": init,
        }
    })
}

/// One pod per QoS class, one container `main` each: `be` (BestEffort), `bu` (Burstable: 100m to
/// 500m CPU, 32 Mi to 64 Mi) and `gf` (Guaranteed with a fractional CPU: 500m, 64 Mi).
pub fn one_pod_per_class() -> [Value; 3] {
    [
        pod("be", vec![ctr("main", json!({}))], vec![]),
        pod(
            "bu",
            vec![ctr("main", res("100m", "500m", "32Mi", "64Mi"))],
            vec![],
        ),
        pod("gf", vec![ctr("main", guaranteed("500m", "64Mi"))], vec![]),
    ]
}
