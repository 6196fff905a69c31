//! topolet installed as operators install it, on the real single-node cluster: the image of
//! `hack/build-image.sh` imported with `ctr`, `helm install` of `deploy/helm/topolet`, topolet
//! running as the DaemonSet's pod (hostPID, host paths, not privileged, its service account's
//! token) and registering with containerd as an external NRI plugin; the kubelet suite's basic
//! checks with topolet in that pod; `helm upgrade` to an image of another version while pods of
//! every QoS class run, a pod created during the swap, `helm rollback`, and `helm uninstall`.
//! One cluster for all of it (CI's time): the steps build on each other.
//!
//! The node has 2 CPUs; the configuration reserves CPU 0, so CPU 1 is the one exclusive CPU.
//! Measurements (image size, install time, the upgrade's window, topolet's RSS in its pod) are
//! printed as `[helm] ...` lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use topolet_integration::cluster::{self, Cluster, ClusterOptions};
use topolet_integration::helm::{self, Helm, Image};
use topolet_integration::kube::{burstable_oom, BESTEFFORT_OOM};
use topolet_integration::manifests::{ctr, guaranteed, one_pod_per_class, pod};
use topolet_integration::observe::{self, CgroupValues};
use topolet_integration::stack::Stack;
use topolet_integration::{topolet, wait};

const MI: u64 = 1 << 20;
const NS: &str = "topolet-system";
const RELEASE: &str = "topolet";
const EXCLUSIVE_CPU: &str = "1";
const SHARED_ALL: &str = "0-1";
const SHARED_WITHOUT_EXCLUSIVE: &str = "0";
/// Generous deadlines for a busy 2-CPU machine: waits, not assertions about speed.
const TIMEOUT: Duration = Duration::from_secs(180);

/// The node: the cluster drops (stops) before the stack.
struct Node {
    cluster: Cluster,
    stack: Stack,
    /// Host paths the chart mounts (under the stack's directory).
    state_dir: PathBuf,
    admin_socket: PathBuf,
    nodefs: PathBuf,
    bin: PathBuf,
}

impl Node {
    fn status(&self) -> anyhow::Result<Value> {
        topolet::status_of(&self.bin, &self.admin_socket)
    }

    /// Waits until the topolet serving the admin socket is `version` and synchronized.
    fn wait_synchronized(&self, version: &str) -> anyhow::Result<Value> {
        wait::until(
            &format!("topolet {version} in its pod: NRI synchronized"),
            TIMEOUT,
            || {
                let s = self.status()?;
                Ok((s["version"] == version && s["nri"]["synchronized"] == true).then_some(s))
            },
        )
        .with_context(|| self.topolet_pods_summary())
    }

    /// The topolet pods (the DaemonSet's), as JSON.
    fn topolet_pods(&self) -> anyhow::Result<Vec<Value>> {
        let out = self.cluster.kubectl(&[
            "-n",
            NS,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=topolet",
            "-o",
            "json",
        ])?;
        let v: Value = serde_json::from_str(&out).context("kubectl get pods -o json")?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }

    fn topolet_pods_summary(&self) -> String {
        match self
            .cluster
            .kubectl(&["-n", NS, "get", "pods,ds", "-o", "wide"])
        {
            Ok(s) => format!("topolet's pods and DaemonSets:\n{s}"),
            Err(e) => format!("(kubectl get pods: {e:#})"),
        }
    }

    /// The one running topolet pod on image `image`, Ready: (pod name, container id, host pid).
    fn wait_topolet_pod(&self, image: &Image) -> anyhow::Result<(String, String, i32)> {
        let (name, id) = wait::until(
            &format!("one topolet pod Ready on {}", image.name),
            TIMEOUT,
            || {
                let pods = self.topolet_pods()?;
                let live: Vec<&Value> = pods
                    .iter()
                    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                    .collect();
                if live.len() != 1 || pods.len() != 1 {
                    return Ok(None);
                }
                let p = live[0];
                let c = &p["status"]["containerStatuses"][0];
                let ready = c["ready"] == true && c["image"].as_str() == Some(&image.name);
                let id = c["containerID"]
                    .as_str()
                    .and_then(|s| s.strip_prefix("containerd://"));
                Ok(match (ready, id, p["metadata"]["name"].as_str()) {
                    (true, Some(id), Some(n)) => Some((n.to_string(), id.to_string())),
                    _ => None,
                })
            },
        )
        .with_context(|| self.topolet_pods_summary())?;
        let pid = self.stack.cri().pid(&id)?;
        Ok((name, id, pid))
    }

    fn container(&self, pod: &str, cname: &str) -> anyhow::Result<cluster::KubeContainer> {
        let p = self.cluster.get_pod(pod)?;
        self.cluster.container(&p, cname)
    }

    /// What a container really got: cgroup values, and its process's CPUs and oom_score_adj.
    fn observe(&self, pod: &str) -> anyhow::Result<(CgroupValues, observe::ProcValues)> {
        let c = self.container(pod, "main")?;
        let cg = observe::cgroup_values(&c.created())?;
        let pid = self.stack.cri().pid(&c.id)?;
        cluster::check_process_cgroup(pid, &c)?;
        Ok((cg, observe::proc_values(pid)?))
    }

    /// Waits until container `main` of `pod` is on `cpus` (cgroup and process).
    fn wait_cpuset(&self, pod: &str, cpus: &str) -> anyhow::Result<()> {
        let c = self.container(pod, "main")?;
        wait::until_true(&format!("{pod} on CPUs {cpus}"), TIMEOUT, || {
            let cg = observe::cgroup_cpuset(&c.created())?;
            let pid = self.stack.cri().pid(&c.id)?;
            Ok(cg == cpus && observe::cpus_allowed_list(pid)? == cpus)
        })
    }

    /// Every test pod's container: id, restart count, cgroup values and process CPUs.
    fn snapshot(&self, pods: &[&str]) -> anyhow::Result<BTreeMap<String, Value>> {
        let mut out = BTreeMap::new();
        for name in pods {
            let p = self.cluster.get_pod(name)?;
            let st = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .with_context(|| format!("pod {name} has no container status"))?;
            let (cg, pr) = self.observe(name)?;
            out.insert(
                name.to_string(),
                json!({
                    "id": st.container_id,
                    "restarts": st.restart_count,
                    "cgroup": format!("{cg:?}"),
                    "cpus": pr.cpus_allowed_list,
                    "oom_score_adj": pr.oom_score_adj,
                }),
            );
        }
        Ok(out)
    }
}

/// The pod cgroup's CFS quota (cgroup v1 `cpu.cfs_quota_us`).
fn pod_cgroup_quota(cgroup_parent: &str) -> anyhow::Result<i64> {
    let p = Path::new(observe::CGROUP_ROOT)
        .join("cpu")
        .join(cgroup_parent.trim_start_matches('/'))
        .join("cpu.cfs_quota_us");
    let q = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    Ok(q.trim().parse()?)
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn vm_rss_kib(pid: i32) -> anyhow::Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))
}

fn gone(pid: i32) -> bool {
    // A zombie has exited too (its parent, the shim, has not reaped it yet).
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// The chart's values for this node: its paths, the test's topolet configuration (CPU 0
/// reserved, pids limit 1024 as the kubelet suite expects, eviction dry-run on this shared host),
/// written through the chart's `tpl` as an operator would, and the API server's address (the
/// node's only network is loopback: pods cannot reach the `kubernetes` Service).
fn values(node: &Node, image: &Image, metrics_port: u16) -> anyhow::Result<Value> {
    let api = node.cluster.env("KUBE_API_URL")?;
    let port = api
        .rsplit_once(':')
        .map(|(_, p)| p.to_string())
        .context("KUBE_API_URL has no port")?;
    let config = r#"[nri]
socket = {{ .Values.nri.socket | quote }}
name = "topolet"
index = 50

[cpu]
policy = "static"
reserved_cpus = "0"

[qos]
pids_limit = 1024

[state]
dir = {{ .Values.hostPaths.state | quote }}

[admin]
socket = {{ printf "%s/admin.sock" .Values.hostPaths.admin | quote }}

[metrics]
address = {{ printf "%s:%d" .Values.metrics.bindAddress (int .Values.metrics.port) | quote }}

[eviction]
action = "dry-run"
nodefs_path = {{ .Values.hostPaths.nodefs | quote }}
imagefs_path = {{ .Values.hostPaths.imagefs | quote }}

[kubernetes]
enabled = "on"
"#;
    Ok(json!({
        "image": {"repository": "localhost/topolet", "tag": image.tag(), "pullPolicy": "Never"},
        "config": config,
        "nri": {"socket": node.stack.nri_socket()},
        "hostPaths": {
            "state": node.state_dir,
            "admin": node.admin_socket.parent().context("admin socket dir")?,
            // The eviction signals' filesystems: the host's, as directories without mounts
            // below them. This host's / is a private mount: no HostToContainer propagation.
            "nodefs": node.nodefs,
            "imagefs": node.stack.dir().join("root"),
            "sys": "/sys",
            "cgroup": "/sys/fs/cgroup",
            "mountPropagation": "None",
        },
        "hostNetwork": true,
        "metrics": {"port": metrics_port, "bindAddress": "127.0.0.1"},
        "kubernetesServiceHost": "127.0.0.1",
        "kubernetesServicePort": port,
    }))
}

#[test]
fn installed_with_helm_upgraded_and_rolled_back_keeping_every_pod_then_uninstalled(
) -> anyhow::Result<()> {
    let stack = Stack::start()?;
    let cluster = Cluster::start(
        &stack,
        &ClusterOptions {
            with_controllers: true,
            ..ClusterOptions::default()
        },
    )?;
    let work = stack.work_dir("helm")?;
    let state_dir = work.join("state");
    let admin_socket = work.join("admin/admin.sock");
    let nodefs = work.join("nodefs");
    std::fs::create_dir_all(&nodefs)?;
    let node = Node {
        cluster,
        stack,
        state_dir,
        admin_socket,
        nodefs,
        bin: topolet::binary()?,
    };
    let k = &node.cluster;

    // ---- The images: reproducible, imported with ctr.
    let images = work.join("images");
    let from = helm::Provenance::of_checkout()?;
    let a = helm::build_image(&node.bin, &from, &images.join("a.tar"))?;
    let a2 = helm::build_image(&node.bin, &from, &images.join("a-again.tar"))?;
    ensure!(
        a.digest == a2.digest && std::fs::read(&a.tarball)? == std::fs::read(&a2.tarball)?,
        "two builds of one binary differ: {} and {}",
        a.digest,
        a2.digest
    );
    let next_version = format!("{}-next", a.version);
    let b = helm::build_image(
        &helm::upgrade_binary(&next_version)?,
        &from,
        &images.join("b.tar"),
    )?;
    ensure!(b.version == next_version, "upgrade image is {}", b.version);
    eprintln!(
        "[helm] image {} {}: {} bytes (layer {} bytes gzip), two builds same digest; upgrade image {} {}",
        a.name, a.digest, a.size, a.layer_size, b.name, b.digest
    );
    helm::import_image(&node.stack, &a)?;
    helm::import_image(&node.stack, &b)?;

    // ---- helm install, as an operator: the chart creates the CRD, RBAC and DaemonSet.
    let helm = Helm::new(k, &work.join("helm-home"))?;
    let chart = Helm::chart();
    let chart = chart.to_str().context("chart path")?;
    let metrics_port = free_port()?;
    let values_a = work.join("values-a.yaml");
    std::fs::write(&values_a, values(&node, &a, metrics_port)?.to_string())?;
    let started = Instant::now();
    helm.run(&[
        "install",
        RELEASE,
        chart,
        "-n",
        NS,
        "--create-namespace",
        "-f",
        values_a.to_str().context("values path")?,
        "--wait",
        "--timeout",
        "5m",
    ])?;
    let (pod_a, ctr_a, pid_a) = node.wait_topolet_pod(&a)?;
    let status = node.wait_synchronized(&a.version)?;
    eprintln!(
        "[helm] helm install to all pods Ready and topolet synchronized: {:.1?}",
        started.elapsed()
    );

    // topolet runs in the pod: in its container's cgroup, not privileged, with the host's pids.
    let tpod: Pod = serde_json::from_value(
        node.topolet_pods()?
            .into_iter()
            .next()
            .context("no topolet pod")?,
    )?;
    let spec = tpod.spec.as_ref().context("pod spec")?;
    ensure!(spec.host_pid == Some(true), "hostPID");
    let sc = spec.containers[0]
        .security_context
        .as_ref()
        .context("securityContext")?;
    ensure!(sc.privileged == Some(false), "not privileged");
    let cgroup = std::fs::read_to_string(format!("/proc/{pid_a}/cgroup"))?;
    ensure!(
        cgroup.contains(&ctr_a) && cgroup.contains("kubepods"),
        "topolet (pid {pid_a}) runs in its pod's container cgroup: {cgroup}"
    );
    // Registered with containerd as an external plugin (not pre-installed), on its API client
    // with the service account's token.
    ensure!(
        status["nri"]["synchronized"] == true,
        "status: {}",
        status["nri"]
    );
    // (Written before the synchronized status the wait above saw.)
    let logs = node.stack.cri().run_raw(&["logs", &ctr_a])?;
    let log =
        String::from_utf8_lossy(&logs.stderr).into_owned() + &String::from_utf8_lossy(&logs.stdout);
    ensure!(
        log.contains("\"credentials\":\"in-cluster service account\""),
        "the API client uses the service account's token; topolet's log:\n{log}"
    );
    eprintln!("[helm] topolet pod {pod_a}, container {ctr_a}, pid {pid_a}");
    // topolet status inside the pod: the same binary, through the container (crictl exec:
    // what `kubectl exec` asks the kubelet for; this node has no address the API server could
    // reach the kubelet on, see README "Installing with Helm").
    let inside = node.stack.cri().exec(
        &ctr_a,
        &[
            "/usr/local/bin/topolet",
            "status",
            "-o",
            "json",
            "--admin-socket",
            node.admin_socket.to_str().context("admin socket")?,
        ],
    )?;
    let inside: Value = serde_json::from_str(&inside).context("status from inside the pod")?;
    ensure!(
        inside["version"] == a.version.as_str(),
        "{}",
        inside["version"]
    );

    // ---- The kubelet suite's basic checks, topolet in its pod.
    let cap = observe::mem_capacity()?;
    for p in one_pod_per_class() {
        k.create_pod(p)?;
    }
    for name in ["be", "bu", "gf"] {
        k.wait_running(name)?;
    }
    let expect = |cpus: &str, shares, quota, mem: Option<u64>| CgroupValues {
        cpuset_cpus: cpus.into(),
        cpuset_mems: "0".into(),
        cpu_shares: shares,
        cfs_quota_us: quota,
        cfs_period_us: 100_000,
        memory_limit: mem,
        pids_max: Some(1024),
    };
    let (cg, pr) = node.observe("be")?;
    assert_eq!(cg, expect(SHARED_ALL, 2, -1, None), "BestEffort cgroup");
    assert_eq!(pr.oom_score_adj, BESTEFFORT_OOM);
    let (cg, pr) = node.observe("bu")?;
    assert_eq!(
        cg,
        expect(SHARED_ALL, 102, 50_000, Some(64 * MI)),
        "Burstable"
    );
    assert_eq!(pr.oom_score_adj, burstable_oom(32 * MI, cap));
    let (cg, _) = node.observe("gf")?;
    assert_eq!(
        cg,
        expect(SHARED_ALL, 512, 50_000, Some(64 * MI)),
        "fractional Guaranteed"
    );

    // An exclusive CPU: the container and its pod cgroup without quota (the pod cgroup is
    // written through the chart's /sys/fs/cgroup mount), everybody else off CPU 1, a Normal
    // Event from topolet's service account, and the NodeResourceTopology shows it taken.
    k.create_pod(pod(
        "gx",
        vec![ctr("main", guaranteed("1", "64Mi"))],
        vec![],
    ))?;
    k.wait_running("gx")?;
    node.wait_cpuset("gx", EXCLUSIVE_CPU)?;
    let (cg, _) = node.observe("gx")?;
    assert_eq!(
        cg,
        expect(EXCLUSIVE_CPU, 1024, -1, Some(64 * MI)),
        "exclusive"
    );
    let gx = node.container("gx", "main")?;
    assert_eq!(
        pod_cgroup_quota(&gx.cgroup_parent)?,
        -1,
        "gx's pod cgroup quota"
    );
    for p in ["be", "bu", "gf"] {
        node.wait_cpuset(p, SHARED_WITHOUT_EXCLUSIVE)?;
    }
    wait::until_true("the ExclusiveCPUsAssigned Event on gx", TIMEOUT, || {
        Ok(k.pod_events("gx")?.iter().any(|e| {
            e.reason.as_deref() == Some("ExclusiveCPUsAssigned")
                && e.type_.as_deref() == Some("Normal")
        }))
    })?;
    let node_name = k.node_name().to_string();
    wait::until_true("NodeResourceTopology: 0 CPUs available", TIMEOUT, || {
        let Some(nrt) = k.nrt(&node_name)? else {
            return Ok(false);
        };
        let zone = &nrt["zones"][0];
        Ok(zone["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["name"] == "cpu" && r["available"] == "0"))
    })?;
    let rss = vm_rss_kib(pid_a)?;
    eprintln!(
        "[helm] topolet RSS in its pod: {:.1} MiB (DaemonSet requests 32Mi, limit 256Mi)",
        rss as f64 / 1024.0
    );

    // ---- helm upgrade to the other version while G, Bu and BE pods run; a pod created in
    // the swap.
    let pods = ["be", "bu", "gf", "gx"];
    let before = node.snapshot(&pods)?;
    let values_b = work.join("values-b.yaml");
    std::fs::write(&values_b, values(&node, &b, metrics_port)?.to_string())?;
    helm.run(&[
        "upgrade",
        RELEASE,
        chart,
        "-n",
        NS,
        "-f",
        values_b.to_str().context("values path")?,
    ])?;
    wait::until_true("the old topolet exits", TIMEOUT, || Ok(gone(pid_a)))?;
    let exited = Instant::now();
    // Created as the old one is gone; containerd places it with no plugin or with the new one,
    // whichever is there when the kubelet creates it: either way it must end on the shared pool.
    k.create_pod(pod("swap", vec![ctr("main", json!({}))], vec![]))?;
    node.wait_synchronized(&b.version)?;
    let window = exited.elapsed();
    k.wait_running("swap")?;
    node.wait_cpuset("swap", SHARED_WITHOUT_EXCLUSIVE)?;
    let swap_id = node.container("swap", "main")?.id;
    // How the new topolet came to manage it: `synchronize` (created while no topolet ran, taken
    // over at the new one's Synchronize) or `api` (created after it registered).
    let status_b = node.status()?;
    let record = status_b["admissions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["pod"] == "default/swap")
        .cloned()
        .with_context(|| format!("no admission record of swap: {}", status_b["admissions"]))?;
    let decided = format!("source {}", record["source"]);
    eprintln!(
        "[helm] upgrade window (old topolet exited -> new one synchronized): {window:.1?}; the pod created in it: {decided}, placed on CPU {SHARED_WITHOUT_EXCLUSIVE}"
    );
    let (_pod_b, _ctr_b, pid_b) = node.wait_topolet_pod(&b)?;
    let after = node.snapshot(&pods)?;
    assert_eq!(
        after, before,
        "upgrade: no restart, same cpusets and cgroup values"
    );
    // The new topolet took the state over: the exclusive assignment is in its books and in
    // the state file on the host path.
    let (ex, shared) = topolet_integration::books::status_exclusive(&node.admin_socket)?;
    assert_eq!(
        ex.get(&gx.id).map(String::as_str),
        Some(EXCLUSIVE_CPU),
        "{ex:?}"
    );
    assert_eq!(shared, SHARED_WITHOUT_EXCLUSIVE);
    let saved =
        topolet_integration::books::state_file_exclusive(&node.state_dir.join("assignments.json"))?;
    ensure!(
        saved.values().any(|c| c == EXCLUSIVE_CPU) && saved.len() == 1,
        "state file after the upgrade: {saved:?}"
    );

    // ---- helm rollback to the first release: the same, in the other direction.
    let all = ["be", "bu", "gf", "gx", "swap"];
    let before_rollback = node.snapshot(&all)?;
    helm.run(&[
        "rollback",
        RELEASE,
        "1",
        "-n",
        NS,
        "--wait",
        "--timeout",
        "5m",
    ])?;
    wait::until_true("the upgraded topolet exits", TIMEOUT, || Ok(gone(pid_b)))?;
    node.wait_synchronized(&a.version)?;
    let (_, _, pid_back) = node.wait_topolet_pod(&a)?;
    assert_eq!(
        node.snapshot(&all)?,
        before_rollback,
        "rollback: no restart, same cpusets and cgroup values"
    );
    assert_eq!(node.container("swap", "main")?.id, swap_id);
    let (ex, _) = topolet_integration::books::status_exclusive(&node.admin_socket)?;
    assert_eq!(
        ex.get(&gx.id).map(String::as_str),
        Some(EXCLUSIVE_CPU),
        "{ex:?}"
    );

    // ---- helm uninstall: containers stay as they are; what topolet published is withdrawn
    // (its node conditions, this node's NodeResourceTopology) by the chart's post-delete hook;
    // the CRD stays (helm.sh/resource-policy: keep).
    let topolet_conditions = || -> anyhow::Result<Vec<String>> {
        Ok(k.node()?
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.type_)
            .filter(|t| t.starts_with("Topolet"))
            .collect())
    };
    wait::until_true("topolet's node conditions published", TIMEOUT, || {
        Ok(!topolet_conditions()?.is_empty())
    })?;
    ensure!(
        k.nrt(&node_name)?.is_some(),
        "the NodeResourceTopology exists"
    );
    helm.run(&["uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "5m"])?;
    wait::until_true("topolet's pod is gone", TIMEOUT, || {
        Ok(gone(pid_back) && node.topolet_pods()?.is_empty())
    })?;
    assert_eq!(
        node.snapshot(&all)?,
        before_rollback,
        "uninstall: every container as it was"
    );
    k.kubectl(&["get", "crd", "noderesourcetopologies.topology.node.k8s.io"])?;
    assert_eq!(
        topolet_conditions()?,
        Vec::<String>::new(),
        "conditions withdrawn"
    );
    ensure!(
        k.nrt(&node_name)?.is_none(),
        "the NodeResourceTopology withdrawn"
    );
    let left = k.kubectl(&[
        "get",
        "jobs,serviceaccounts,clusterroles,clusterrolebindings",
        "-A",
        "-o",
        "name",
    ])?;
    ensure!(
        !left.contains("topolet"),
        "the release and its hook left nothing behind but the CRD:\n{left}"
    );

    // ---- A configuration that does not fit this machine (CPU 7 of 2): the chart's schema lets
    // the TOML through, topolet config check in the init container refuses it, and the pod's
    // status says why; topolet never starts.
    let mut bad = values(&node, &a, metrics_port)?;
    bad["config"] = json!(bad["config"]
        .as_str()
        .context("config")?
        .replace("reserved_cpus = \"0\"", "reserved_cpus = \"7\""));
    let values_bad = work.join("values-bad.yaml");
    std::fs::write(&values_bad, bad.to_string())?;
    helm.run(&[
        "install",
        RELEASE,
        chart,
        "-n",
        NS,
        "-f",
        values_bad.to_str().context("values path")?,
    ])?;
    let message = wait::until("the init container's termination message", TIMEOUT, || {
        let pods = node.topolet_pods()?;
        Ok(pods.first().and_then(|p| {
            let c = &p["status"]["initContainerStatuses"][0];
            let t = if c["state"]["terminated"].is_object() {
                &c["state"]["terminated"]
            } else {
                &c["lastState"]["terminated"]
            };
            t["message"].as_str().map(str::to_string)
        }))
    })?;
    ensure!(
        message.contains("reserved_cpus") && message.contains('7'),
        "the pod's status names the key at fault: {message:?}"
    );
    eprintln!(
        "[helm] a bad config in the pod's status: {}",
        message.trim()
    );
    helm.run(&["uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "5m"])?;
    wait::until_true("the refused pod is gone", TIMEOUT, || {
        Ok(node.topolet_pods()?.is_empty())
    })?;

    // ---- One chart, two node pools: this node labelled into pool `latency`, whose config
    // (pids limit 4096) is not the default's (1024). The pool's DaemonSet runs here, the
    // default one nowhere, and a new container gets the pool's value.
    k.kubectl(&["label", "node", &node_name, "topolet.io/pool=latency"])?;
    let mut pools = values(&node, &a, metrics_port)?;
    let pool_config = pools["config"]
        .as_str()
        .context("config")?
        .replace("pids_limit = 1024", "pids_limit = 4096");
    pools["nodePools"] = json!([{"name": "latency", "config": pool_config}]);
    let values_pools = work.join("values-pools.yaml");
    std::fs::write(&values_pools, pools.to_string())?;
    helm.run(&[
        "install",
        RELEASE,
        chart,
        "-n",
        NS,
        "-f",
        values_pools.to_str().context("values path")?,
        "--wait",
        "--timeout",
        "5m",
    ])?;
    node.wait_synchronized(&a.version)?;
    let desired = |ds: &str| -> anyhow::Result<String> {
        k.kubectl(&[
            "-n",
            NS,
            "get",
            "ds",
            ds,
            "-o",
            "jsonpath={.status.desiredNumberScheduled}",
        ])
    };
    assert_eq!(
        desired("topolet")?,
        "0",
        "the default DaemonSet skips the pool's node"
    );
    assert_eq!(
        desired("topolet-latency")?,
        "1",
        "the pool's DaemonSet runs on it"
    );
    k.create_pod(pod("pooled", vec![ctr("main", json!({}))], vec![]))?;
    k.wait_running("pooled")?;
    let (cg, _) = node.observe("pooled")?;
    assert_eq!(cg.pids_max, Some(4096), "the pool's configuration: {cg:?}");
    helm.run(&["uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "5m"])?;
    k.kubectl(&["label", "node", &node_name, "topolet.io/pool-"])?;
    Ok(())
}
