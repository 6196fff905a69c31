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
use k8s_openapi::api::resource::v1::ResourceSlice;
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

    /// The topolet pods (the DaemonSets', not `helm test`'s), as JSON.
    fn topolet_pods(&self) -> anyhow::Result<Vec<Value>> {
        let out = self.cluster.kubectl(&[
            "-n",
            NS,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=topolet,topolet.io/daemonset",
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

/// The metrics port: below the ephemeral range, where nothing on the machine (another lane's
/// stacks included) takes it between the upgrades' pod restarts.
fn free_port() -> anyhow::Result<u16> {
    topolet_integration::paths::free_port()
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

/// The chart's default node configuration (values.yaml `config`), as an operator gets it.
fn chart_default_config() -> anyhow::Result<String> {
    let path = Helm::chart().join("values.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    // `config: |` and its indented block, as YAML's literal block scalar holds it.
    let mut lines = text.lines().skip_while(|l| *l != "config: |");
    ensure!(
        lines.next().is_some(),
        "{} has no `config: |`",
        path.display()
    );
    let mut config = String::new();
    for l in lines {
        if !l.is_empty() && !l.starts_with("  ") {
            break;
        }
        config.push_str(l.strip_prefix("  ").unwrap_or(l));
        config.push('\n');
    }
    Ok(config)
}

/// This stack kubelet's hard eviction thresholds (hack/kube-node.sh, `evictionHard`), which
/// topolet matches as it does the kubelet's on any node.
const KUBELET_EVICTION_HARD: &str = "hard = { \"memory.available\" = \"100Mi\", \
    \"nodefs.available\" = \"256Mi\", \"nodefs.inodesFree\" = \"1%\", \
    \"imagefs.available\" = \"256Mi\", \"imagefs.inodesFree\" = \"1%\" }";

/// The node configuration this test installs: the chart's default one, its `[eviction]` given
/// this stack kubelet's thresholds. The reason: the build hosts share one disk, often more than
/// 85 % full, so the kubelet's default percentages (which the chart's configuration keeps) would
/// put this node under imagefs pressure from the host's other work; topolet would then rightly
/// reclaim the test's images and evict its BestEffort pods. The stack's kubelet has absolute
/// thresholds for the same reason, and a node's topolet uses its kubelet's.
fn node_config() -> anyhow::Result<String> {
    let default = chart_default_config()?;
    ensure!(
        default.matches("[eviction]\n").count() == 1 && !default.contains("\nhard ="),
        "the chart's config has one [eviction] table and no hard thresholds:\n{default}"
    );
    Ok(default.replace(
        "[eviction]\n",
        &format!("[eviction]\n{KUBELET_EVICTION_HARD}\n"),
    ))
}

/// The chart's values for this node: the chart's defaults (its node configuration, eviction
/// action, network, probes, privileges), overridden only where this test stack's layout forces
/// it, each with its reason:
/// - `config`: the chart's default node configuration with this stack kubelet's eviction
///   thresholds (`node_config`);
/// - `image`: the image built here, never pulled: no registry, images are imported with ctr;
/// - `nri.socket`, `cri.socket`: this stack's containerd listens in its own directory, not in
///   /var/run/nri and /run/containerd (the host's containerd, if any, is not the test's);
/// - `hostPaths.state`, `.admin`: under the test's directory: the host is left as found;
/// - `hostPaths.nodefs`, `.podLogs`: the test kubelet's `--root-dir` and `podLogsDir`;
/// - `kubelet.podResourcesSocket`: the PodResources socket under the test kubelet's `--root-dir`;
/// - `hostPaths.imagefs`: this stack containerd's root;
/// - `hostNetwork: true`: the node has no pod network (CNI loopback only): from a pod network
///   namespace of its own topolet could reach neither the API server nor be probed;
/// - `metrics.port`: a free port: 9464 of the host may be taken;
/// - `kubernetesServiceHost`, `kubernetesServicePort`: no kube-proxy on this node: the API
///   server's own address.
fn values(node: &Node, image: &Image, metrics_port: u16) -> anyhow::Result<Value> {
    let k = &node.cluster;
    let api = k.env("KUBE_API_URL")?;
    let port = api
        .rsplit_once(':')
        .map(|(_, p)| p.to_string())
        .context("KUBE_API_URL has no port")?;
    Ok(json!({
        "config": node_config()?,
        "image": {"repository": "localhost/topolet", "tag": image.tag(), "pullPolicy": "Never"},
        "nri": {"socket": node.stack.nri_socket()},
        "cri": {"socket": node.stack.dir().join("containerd.sock")},
        "kubelet": {"podResourcesSocket": k.pod_resources_socket()},
        "hostPaths": {
            "state": node.state_dir,
            "admin": node.admin_socket.parent().context("admin socket dir")?,
            "nodefs": k.dir().join("kubelet"),
            "imagefs": node.stack.dir().join("root"),
            "podLogs": k.env("KUBE_POD_LOGS_DIR")?,
            "sys": "/sys",
            "cgroup": "/sys/fs/cgroup",
        },
        "hostNetwork": true,
        "metrics": {"port": metrics_port},
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
    let node = Node {
        cluster,
        stack,
        state_dir,
        admin_socket,
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
    // The chart mounts the kubelet's PodResources socket: the device source answers from the pod
    // (its List at Synchronize runs beside it).
    wait::until_true(
        "the installed topolet's PodResources source answering",
        TIMEOUT,
        || Ok(node.status()?["pod_resources"]["state"] == "answering"),
    )
    .with_context(|| {
        format!(
            "pod_resources: {}",
            node.status()
                .map(|s| s["pod_resources"].clone())
                .unwrap_or_default()
        )
    })?;

    // The DRA ResourceSlice watch lists this node's slices as the node (the chart's default
    // rbac.evictAs: node grants topolet no slice read of its own; the Node authorizer serves the
    // node its own slices): `listed`, no error.
    wait::until_true(
        "the installed topolet's ResourceSlice watch listed as the node",
        TIMEOUT,
        || {
            let r = node.status()?["resource_slices"].clone();
            Ok(r["read_as"] == "node" && r["state"] == "listed" && r["last_error"].is_null())
        },
    )
    .with_context(|| {
        format!(
            "resource_slices: {}",
            node.status()
                .map(|s| s["resource_slices"].clone())
                .unwrap_or_default()
        )
    })?;

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
    let caps = sc.capabilities.as_ref().context("capabilities")?;
    ensure!(
        caps.add == Some(vec!["DAC_READ_SEARCH".to_string()]),
        "one capability added: {:?}",
        caps.add
    );
    // What the process really holds: CAP_DAC_READ_SEARCH (bit 2) and nothing else.
    let proc_status = std::fs::read_to_string(format!("/proc/{pid_a}/status"))?;
    let cap_eff = proc_status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(str::trim)
        .context("CapEff")?;
    assert_eq!(
        cap_eff, "0000000000000004",
        "topolet's effective capabilities"
    );
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
    // reach the kubelet on, see docs/src/install.md, "With Helm").
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
    // Each admitted from its spec in the API: the pod watch works as the node (the chart's
    // default rbac.evictAs: node grants topolet no pod read of its own).
    let status = node.status()?;
    for name in ["be", "bu", "gf"] {
        let record = status["admissions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["pod"] == format!("default/{name}"))
            .with_context(|| format!("no admission record of {name}: {}", status["admissions"]))?;
        ensure!(
            record["source"] == "api",
            "{name} admitted from the API's spec (the pod watch as the node): {record}"
        );
    }
    let expect = |cpus: &str, shares, quota, mem: Option<u64>| CgroupValues {
        cpuset_cpus: cpus.into(),
        cpuset_mems: "0".into(),
        cpu_shares: shares,
        cfs_quota_us: quota,
        cfs_period_us: 100_000,
        memory_limit: mem,
        // The chart's default configuration: [qos] pids_limit = -1 (the kubelet's default
        // podPidsLimit): no limit written.
        pids_max: None,
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

    // ---- Any pod may reach the metrics port: a flood from another address never starves the
    // kubelet's probes, and topolet is never restarted or made unready by it.
    let metrics_before = probe_get(metrics_port, "/metrics");
    ensure!(
        metrics_before == Ok(200),
        "/metrics before the flood: {metrics_before:?}"
    );
    let report = flood_while_probing(&node, metrics_port, &pod_a)?;
    let answered = |v: &[Result<u16, String>], ok: &[u16]| {
        v.iter()
            .filter(|r| r.as_ref().is_ok_and(|c| ok.contains(c)))
            .count()
    };
    eprintln!(
        "[helm] flood of 64 idle + 16 slow connections from {FLOODER} for {FLOOD:?}: /healthz 200 within {PROBE_TIMEOUT:?} {}/{} (slowest {:.1?}), /metrics answered (200 or 503) {}/{} (slowest {:.1?}), never unready: {}",
        answered(&report.healthz, &[200]),
        report.healthz.len(),
        report.slowest_healthz,
        answered(&report.metrics, &[200, 503]),
        report.metrics.len(),
        report.slowest_metrics,
        report.never_unready
    );
    ensure!(
        answered(&report.healthz, &[200]) == report.healthz.len(),
        "every /healthz probe answered 200 within the kubelet's timeout: {:?}",
        report.healthz
    );
    ensure!(
        answered(&report.metrics, &[200, 503]) == report.metrics.len(),
        "every /metrics request served or refused within {PROBE_TIMEOUT:?}: {:?}",
        report.metrics
    );
    ensure!(
        report.never_unready,
        "topolet's pod never unready during the flood"
    );
    let turned_away = topolet::metric(
        &format!("127.0.0.1:{metrics_port}"),
        "topolet_http_connections_total",
        &[("result", "peer_limit")],
    )?;
    ensure!(
        turned_away > 0.0,
        "the flood's connections past 8 were turned away"
    );
    eprintln!("[helm] connections turned away at once (peer_limit): {turned_away}");
    let restarts = |p: &str| -> anyhow::Result<String> {
        k.kubectl(&[
            "-n",
            NS,
            "get",
            "pod",
            p,
            "-o",
            "jsonpath={.status.containerStatuses[0].restartCount}",
        ])
    };
    assert_eq!(
        restarts(&pod_a)?,
        "0",
        "topolet's restart count after the flood"
    );
    // The chart's test hook: every topolet pod synchronized and answering.
    // Its report is its termination message (this node's kubelet serves no logs to the API
    // server: it has no address the API server could reach).
    let probe_status = || {
        k.kubectl(&[
            "-n",
            NS,
            "get",
            "pod",
            "topolet-probe",
            "-o",
            "jsonpath={.status}",
        ])
        .unwrap_or_else(|e| format!("({e:#})"))
    };
    helm.run(&["test", RELEASE, "-n", NS])
        .with_context(|| format!("the test pod's status: {}", probe_status()))?;
    let tested = k.kubectl(&[
        "-n",
        NS,
        "get",
        "pod",
        "topolet-probe",
        "-o",
        "jsonpath={.status.containerStatuses[0].state.terminated.message}",
    ])?;
    ensure!(
        tested.contains("/readyz 200 (synchronized)"),
        "helm test: {}",
        probe_status()
    );
    eprintln!("[helm] helm test: {}", tested.trim());

    // ---- Least privilege, from inside topolet's container: a Secret passed to a pod as a file
    // and as an environment variable, that pod's service-account token and the kubelet's keys
    // are nowhere readable; the node's daemons' /proc/<pid>/root and environ are closed.
    let canary = format!(
        "topolet-canary-{}-{}",
        std::process::id(),
        a.digest.len() + metrics_port as usize
    );
    k.kubectl(&[
        "create",
        "secret",
        "generic",
        "canary",
        &format!("--from-literal=value={canary}"),
    ])?;
    let mut secretive = pod("secretive", vec![ctr("main", json!({}))], vec![]);
    secretive["spec"]["automountServiceAccountToken"] = json!(true);
    secretive["spec"]["volumes"] = json!([{"name": "canary", "secret": {"secretName": "canary"}}]);
    secretive["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "canary", "mountPath": "/canary"}]);
    secretive["spec"]["containers"][0]["env"] = json!([{"name": "CANARY", "valueFrom": {"secretKeyRef": {"name": "canary", "key": "value"}}}]);
    k.create_pod(secretive)?;
    k.wait_running("secretive")?;
    let kubelet_pid: i32 = std::fs::read_to_string(k.env("KUBELET_PID_FILE")?)?
        .trim()
        .parse()?;
    let daemons = [node.stack.runtime_pid()?, kubelet_pid];
    let (readable, canaries, open) = readable_from_container(&node, &ctr_a, &canary, &daemons)?;
    let mut by_top: BTreeMap<String, usize> = BTreeMap::new();
    for f in &readable {
        let top = [
            (
                node.stack.dir().join("root").to_string_lossy().into_owned(),
                "containerd snapshots",
            ),
            (k.env("KUBE_POD_LOGS_DIR")?.to_string(), "pod logs"),
            (node.state_dir.to_string_lossy().into_owned(), "state"),
            (
                "/var/run/secrets/kubernetes.io/serviceaccount".to_string(),
                "own service-account token",
            ),
            ("/etc/topolet".to_string(), "config"),
        ]
        .into_iter()
        .find(|(p, _)| f.starts_with(p.as_str()))
        .map_or_else(
            || f.split('/').take(2).collect::<Vec<_>>().join("/"),
            |(_, n)| n.to_string(),
        );
        *by_top.entry(top).or_default() += 1;
    }
    eprintln!(
        "[helm] readable from topolet's container: {} files: {by_top:?}",
        readable.len()
    );
    ensure!(
        canaries.is_empty(),
        "the Secret's value is readable from topolet's container: {canaries:?}"
    );
    ensure!(
        open.is_empty(),
        "the node's daemons' /proc entries are open to topolet: {open:?}"
    );
    let leaks: Vec<&String> = readable
        .iter()
        .filter(|f| {
            f.contains("/kubelet/pods/")
                || f.contains("/pki/")
                || f.ends_with(".key")
                || (f.contains("serviceaccount")
                    && !f.starts_with("/var/run/secrets/kubernetes.io/serviceaccount"))
                || f.contains("io.containerd.metadata")
        })
        .collect();
    ensure!(
        leaks.is_empty(),
        "secrets, tokens, keys or containerd's metadata readable: {leaks:?}"
    );
    k.delete_pod("secretive")?;
    k.kubectl(&["delete", "secret", "canary"])?;

    // ---- Node-scoped writes on the real API server.
    node_scope(&node, &pod_a, &work)?;

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
    let default_config = node_config()?;
    ensure!(
        default_config.contains("reserved_cpus = \"0\""),
        "the chart's config reserves CPU 0:\n{default_config}"
    );
    bad["config"] = json!(default_config.replace("reserved_cpus = \"0\"", "reserved_cpus = \"7\""));
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
    // (pids limit 4096, and a reclaimed-CPU resource name of its own) is not the default's
    // (none). The pool's DaemonSet runs here, the default one nowhere, and a new container gets
    // the pool's value. The uninstall's hook withdraws the pool's resource name.
    k.kubectl(&["label", "node", &node_name, "topolet.io/pool=latency"])?;
    let mut pools = values(&node, &a, metrics_port)?;
    ensure!(
        default_config.contains("pids_limit = -1") && !default_config.contains("[reclaimed]"),
        "the chart's config sets no pids limit and no [reclaimed]:\n{default_config}"
    );
    let pool_config = format!(
        "{}\n[reclaimed]\nresource_name = \"{POOL_RESOURCE}\"\n",
        default_config.replace("pids_limit = -1", "pids_limit = 4096")
    );
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
    // The Node holds the pool's resource and the default one, as a topolet that stopped without
    // taking its amount back leaves them (killed, or its ClusterRoleBinding deleted first).
    // Written once the pool's topolet has done its start-time withdrawal (the feature is off:
    // a Node still listing its name is cleared once, and only at start), so that from here only
    // the uninstall's hook removes them.
    let metrics_at = format!("127.0.0.1:{metrics_port}");
    wait::until_true(
        "the pool's topolet's start-time withdrawal",
        TIMEOUT,
        || {
            Ok(topolet::metric(
                &metrics_at,
                "topolet_reclaimed_cpu_publishes_total",
                &[("result", "ok")],
            )? >= 1.0)
        },
    )?;
    let left = [POOL_RESOURCE, DEFAULT_RESOURCE];
    let amounts: serde_json::Map<String, Value> =
        left.iter().map(|r| (r.to_string(), json!("500"))).collect();
    k.block_on(
        kube::Api::<k8s_openapi::api::core::v1::Node>::all(k.client()).patch_status(
            &node_name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"status": {"capacity": amounts, "allocatable": amounts}}),
            ),
        ),
    )
    .context("writing the reclaimed-CPU amounts on the Node")?;
    let listed = || -> anyhow::Result<Vec<String>> {
        let status = k.node()?.status.unwrap_or_default();
        let (cap, alloc) = (
            status.capacity.unwrap_or_default(),
            status.allocatable.unwrap_or_default(),
        );
        Ok(left
            .iter()
            .flat_map(|r| {
                [
                    ("capacity", cap.contains_key(*r)),
                    ("allocatable", alloc.contains_key(*r)),
                ]
                .into_iter()
                .filter(|(_, has)| *has)
                .map(move |(map, _)| format!("{map} {r}"))
            })
            .collect())
    };
    assert_eq!(
        listed()?.len(),
        4,
        "both names in capacity and allocatable before the uninstall"
    );
    helm.run(&["uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "5m"])?;
    assert_eq!(
        listed()?,
        Vec::<String>::new(),
        "the uninstall's hook withdrew the pool's resource name and the default one"
    );
    k.kubectl(&["label", "node", &node_name, "topolet.io/pool-"])?;
    Ok(())
}

/// The reclaimed-CPU resource name the node pool's configuration sets (`[reclaimed]
/// resource_name`), not the default.
const POOL_RESOURCE: &str = "example.com/batch-cpu";
/// The default name (`[reclaimed] resource_name` unset).
const DEFAULT_RESOURCE: &str = "topolet.io/reclaimed-cpu";

/// How long the flood of [`flood_while_probing`] lasts.
const FLOOD: Duration = Duration::from_secs(30);
/// The kubelet's default probe timeout (`timeoutSeconds: 1`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The flooding client's address: one of its own, as a pod has (the node's own is 127.0.0.1).
const FLOODER: &str = "127.0.0.2";

/// One GET from 127.0.0.1, as the kubelet's probe: the status code, or why there is none
/// within [`PROBE_TIMEOUT`] (connect, send, answer).
fn probe_get(port: u16, path: &str) -> Result<u16, String> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, left()).map_err(|e| format!("connect: {e}"))?;
    s.set_write_timeout(Some(left()))
        .map_err(|e| e.to_string())?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        s.set_read_timeout(Some(left()))
            .map_err(|e| e.to_string())?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("answer: {e} after {} bytes", answer.len())),
        }
        if Instant::now() >= deadline {
            return Err("answer not complete within the probe timeout".into());
        }
    }
    let line = String::from_utf8_lossy(&answer);
    line.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {:?}", line.lines().next()))
}

/// A TCP connection from [`FLOODER`] to topolet's port.
fn flood_connect(port: u16) -> std::io::Result<std::net::TcpStream> {
    // std has no bind-before-connect: a tokio socket does it, driven by a small runtime.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.bind(
            format!("{FLOODER}:0")
                .parse()
                .map_err(std::io::Error::other)?,
        )?;
        let s = sock.connect(([127, 0, 0, 1], port).into()).await?;
        s.into_std()
    })
    .and_then(|s| {
        s.set_nonblocking(false)?;
        Ok(s)
    })
}

/// What the flood showed.
struct FloodReport {
    healthz: Vec<Result<u16, String>>,
    metrics: Vec<Result<u16, String>>,
    slowest_healthz: Duration,
    slowest_metrics: Duration,
    never_unready: bool,
}

/// 64 idle and 16 slow connections (a header line every 500 ms) from [`FLOODER`] for
/// [`FLOOD`], each re-opened 100 ms after topolet closes or refuses it, while a kubelet-style
/// probe of /healthz and a scrape of /metrics go out from the node's address once a second,
/// and the pod's Ready condition (the kubelet's readiness probe, every 2 s) is read each time.
fn flood_while_probing(node: &Node, port: u16, pod: &str) -> anyhow::Result<FloodReport> {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for i in 0..80 {
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let slow = i >= 64;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut s) = flood_connect(port) {
                    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                    if slow {
                        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
                    }
                    let mut buf = [0u8; 512];
                    while !stop.load(Ordering::Relaxed) {
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e)
                                if e.kind() == std::io::ErrorKind::WouldBlock
                                    || e.kind() == std::io::ErrorKind::TimedOut =>
                            {
                                if slow && s.write_all(b"X-Slow: 1\r\n").is_err() {
                                    break;
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
    }
    let (mut healthz, mut metrics) = (Vec::new(), Vec::new());
    let (mut slowest_healthz, mut slowest_metrics) = (Duration::ZERO, Duration::ZERO);
    let mut never_unready = true;
    let start = Instant::now();
    while start.elapsed() < FLOOD {
        let t = Instant::now();
        healthz.push(probe_get(port, "/healthz"));
        slowest_healthz = slowest_healthz.max(t.elapsed());
        let t = Instant::now();
        metrics.push(probe_get(port, "/metrics"));
        slowest_metrics = slowest_metrics.max(t.elapsed());
        let ready = node.cluster.kubectl(&[
            "-n",
            NS,
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])?;
        never_unready &= ready.trim() == "True";
        std::thread::sleep(Duration::from_secs(1));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    Ok(FloodReport {
        healthz,
        metrics,
        slowest_healthz,
        slowest_metrics,
        never_unready,
    })
}

/// The files topolet's container can read (every mount but /proc, /sys, /dev), and those that
/// hold `canary`; `/proc/<pid>/root` of each of `daemons` that it can open. Listed from inside
/// the container (its mounts, user, capabilities and seccomp profile) by a static busybox copied
/// into the state directory, the one writable host path the container has.
fn readable_from_container(
    node: &Node,
    ctr: &str,
    canary: &str,
    daemons: &[i32],
) -> anyhow::Result<(Vec<String>, Vec<String>, Vec<String>)> {
    let bb = node.state_dir.join("busybox");
    std::fs::copy("/bin/busybox", &bb).context("copying /bin/busybox into the state directory")?;
    let b = bb.to_str().context("busybox path")?;
    let pids: Vec<String> = daemons.iter().map(|p| p.to_string()).collect();
    let script = format!(
        r#"B={b}
$B find / \( -path /proc -o -path /sys -o -path /host/sys -o -path /dev \) -prune -o -type f -print 2>/dev/null |
while read -r f; do
  [ "$f" = "{b}" ] && continue
  if $B head -c 1 "$f" >/dev/null 2>&1; then
    echo "READ $f"
    if $B grep -q -F "{canary}" "$f" 2>/dev/null; then echo "CANARY $f"; fi
  fi
done
for p in {pids}; do
  if $B ls /proc/$p/root/ >/dev/null 2>&1; then echo "OPEN /proc/$p/root"; fi
  if $B head -c 1 /proc/$p/environ >/dev/null 2>&1; then echo "OPEN /proc/$p/environ"; fi
done
"#,
        pids = pids.join(" ")
    );
    let out = node.stack.cri().exec(ctr, &[b, "sh", "-c", &script]);
    let _ = std::fs::remove_file(&bb);
    let out = out?;
    let pick = |tag: &str| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.strip_prefix(tag))
            .map(str::to_string)
            .collect()
    };
    Ok((pick("READ "), pick("CANARY "), pick("OPEN ")))
}

/// A kubeconfig for `token` against this cluster's API server, at `path`.
fn token_kubeconfig(k: &Cluster, token: &str, path: &Path) -> anyhow::Result<()> {
    let kc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {
            "server": k.env("KUBE_API_URL")?,
            "certificate-authority": k.env("KUBE_CA_FILE")?,
        }}],
        "users": [{"name": "u", "user": {"token": token.trim()}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    });
    std::fs::write(path, kc.to_string())?;
    Ok(())
}

/// The HTTP status and message of a refused request (kube's Api error).
fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> anyhow::Result<(u16, String)> {
    match r {
        Err(kube::Error::Api(s)) => Ok((s.code, s.message)),
        other => anyhow::bail!("expected a refusal, got {other:?}"),
    }
}

/// The other node of [`node_scope`]: a Node object no kubelet serves, unschedulable and
/// tainted (no test pod lands there) and without the `kubernetes.io/os` label (no topolet
/// DaemonSet pod either).
const OTHER_NODE: &str = "topolet-other-node";

/// Node-scoped writes, on the real API server, as topolet's service account with a token bound
/// to its pod (the one the kubelet mounts names the node, as this one does): its own Node, NRT
/// and Events are writable, another node's are refused by the chart's ValidatingAdmissionPolicy;
/// it evicts nothing as itself; as its node it evicts a pod of its node, and NodeRestriction
/// refuses the eviction of a pod bound to another node; acting as another node is refused; a
/// token bound to no pod writes nothing. Each outcome is printed.
fn node_scope(node: &Node, topolet_pod: &str, work: &Path) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Node as KubeNode;
    use kube::api::{Api, DynamicObject, EvictParams, Patch, PatchParams, PostParams};
    let k = &node.cluster;
    let own = k.node_name().to_string();
    let other = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": OTHER_NODE},
        "spec": {"unschedulable": true, "taints": [{"key": "topolet.io/test", "effect": "NoSchedule"}]},
    });
    let nodes_admin: Api<KubeNode> = Api::all(k.client());
    k.block_on(nodes_admin.create(&PostParams::default(), &serde_json::from_value(other)?))
        .context("creating the other node")?;
    // A pod bound to the other node (it never runs: no kubelet there), and one of this node.
    let mut elsewhere = pod("elsewhere", vec![ctr("main", json!({}))], vec![]);
    elsewhere["spec"]["nodeName"] = json!(OTHER_NODE);
    k.create_pod(elsewhere)?;
    k.create_pod(pod("evictme", vec![ctr("main", json!({}))], vec![]))?;
    k.wait_running("evictme")?;

    let bound = k.kubectl(&[
        "-n",
        NS,
        "create",
        "token",
        "topolet",
        "--duration",
        "10m",
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        topolet_pod,
    ])?;
    let unbound = k.kubectl(&["-n", NS, "create", "token", "topolet", "--duration", "10m"])?;
    let (kc_bound, kc_unbound) = (
        work.join("sa-bound.kubeconfig"),
        work.join("sa-unbound.kubeconfig"),
    );
    token_kubeconfig(k, &bound, &kc_bound)?;
    token_kubeconfig(k, &unbound, &kc_unbound)?;
    let sa = k.client_for(&kc_bound, None)?;
    let sa_unbound = k.client_for(&kc_unbound, None)?;
    let as_own_node = k.client_for(&kc_bound, Some((&format!("system:node:{own}"), &[])))?;
    let as_other_node =
        k.client_for(&kc_bound, Some((&format!("system:node:{OTHER_NODE}"), &[])))?;

    let annotate =
        |v: &str| Patch::Merge(json!({"metadata": {"annotations": {"topolet.io/scope-test": v}}}));
    let pp = PatchParams::default();
    let nodes = |c: &kube::Client| -> Api<KubeNode> { Api::all(c.clone()) };
    // Its own Node (spec and status): allowed.
    k.block_on(nodes(&sa).patch(&own, &pp, &annotate("own")))
        .context("topolet's service account patching its own Node")?;
    k.block_on(nodes(&sa).patch(
        &own,
        &pp,
        &Patch::Merge(json!({"metadata": {"annotations": {"topolet.io/scope-test": null}}})),
    ))?;
    k.block_on(nodes(&sa).patch_status(&own, &pp, &Patch::Strategic(json!({"status": {}}))))
        .context("topolet's service account patching its own Node's status")?;
    eprintln!("[helm] node scope: own Node and Node status patched: allowed");
    // Another Node, its status: refused by the policy, naming the node.
    for (what, r) in [
        ("Node", refusal(k.block_on(nodes(&sa).patch(OTHER_NODE, &pp, &annotate("other"))))?),
        (
            "Node status",
            refusal(k.block_on(nodes(&sa).patch_status(
                OTHER_NODE,
                &pp,
                &Patch::Strategic(json!({"status": {"conditions": [{"type": "TopoletMemoryPressure", "status": "True"}]}})),
            )))?,
        ),
    ] {
        ensure!(
            r.0 == 403 && r.1.contains(&format!("topolet on node {own} may write only its own")),
            "another node's {what}: {r:?}"
        );
        eprintln!("[helm] node scope: another node's {what}: refused ({}: {})", r.0, r.1);
    }
    // Another node's NodeResourceTopology: refused; its own exists (topolet wrote it).
    let nrt_api = |c: &kube::Client| -> Api<DynamicObject> {
        Api::all_with(c.clone(), &topolet_integration::cluster::nrt_resource())
    };
    let foreign_nrt: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": OTHER_NODE}, "topologyPolicies": [], "zones": [],
    }))?;
    let r = refusal(k.block_on(nrt_api(&sa).create(&PostParams::default(), &foreign_nrt)))?;
    ensure!(
        r.0 == 403 && r.1.contains("may write only its own"),
        "another node's NRT: {r:?}"
    );
    eprintln!(
        "[helm] node scope: another node's NodeResourceTopology: refused ({})",
        r.0
    );
    // An Event reported as another node: refused.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(sa.clone(), "default");
    let ev: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "topolet-scope-test"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "evictme"},
        "reason": "Test", "message": "scope test", "type": "Normal",
        "reportingComponent": "topolet", "reportingInstance": OTHER_NODE,
        "source": {"component": "topolet", "host": OTHER_NODE},
    }))?;
    let r = refusal(k.block_on(events.create(&PostParams::default(), &ev)))?;
    ensure!(
        r.0 == 403 && r.1.contains("reportingInstance"),
        "an Event as another node: {r:?}"
    );
    eprintln!(
        "[helm] node scope: an Event reported as another node: refused ({})",
        r.0
    );
    // A token bound to no pod names no node: nothing is writable.
    let r = refusal(k.block_on(nodes(&sa_unbound).patch(&own, &pp, &annotate("unbound"))))?;
    ensure!(
        r.0 == 403 && r.1.contains("names no node"),
        "a token bound to no pod: {r:?}"
    );
    eprintln!(
        "[helm] node scope: a token bound to no pod patching the Node: refused ({})",
        r.0
    );

    // Pod reads: none as topolet itself; as its node, only that node's pods (the Node
    // authorizer serves a node the lists whose field selector names it).
    let list_pods =
        |c: &kube::Client, node_name: &str| {
            let pods: Api<Pod> = Api::all(c.clone());
            k.block_on(pods.list(
                &kube::api::ListParams::default().fields(&format!("spec.nodeName={node_name}")),
            ))
        };
    let r = refusal(list_pods(&sa, &own))?;
    ensure!(r.0 == 403, "listing pods as topolet itself: {r:?}");
    eprintln!(
        "[helm] node scope: listing this node's pods as topolet's own identity: refused ({})",
        r.0
    );
    let listed = list_pods(&as_own_node, &own).context("as its node, listing its pods")?;
    ensure!(
        listed
            .items
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("evictme")),
        "as its node, its pods: {:?}",
        listed
            .items
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    eprintln!(
        "[helm] node scope: as its node, listing its pods: allowed ({} pods)",
        listed.items.len()
    );
    let r = refusal(list_pods(&as_own_node, OTHER_NODE))?;
    ensure!(
        r.0 == 403,
        "as its node, listing another node's pods: {r:?}"
    );
    eprintln!(
        "[helm] node scope: as its node, listing another node's pods: refused ({})",
        r.0
    );
    let r = refusal(list_pods(&as_other_node, OTHER_NODE))?;
    ensure!(r.0 == 403, "acting as another node to list pods: {r:?}");

    // ResourceSlice reads, the same: none as topolet itself; as its node, only that node's.
    let list_slices =
        |c: &kube::Client, node_name: &str| {
            let slices: Api<ResourceSlice> = Api::all(c.clone());
            k.block_on(slices.list(
                &kube::api::ListParams::default().fields(&format!("spec.nodeName={node_name}")),
            ))
        };
    let r = refusal(list_slices(&sa, &own))?;
    ensure!(
        r.0 == 403,
        "listing ResourceSlices as topolet itself: {r:?}"
    );
    list_slices(&as_own_node, &own).context("as its node, listing its ResourceSlices")?;
    let r = refusal(list_slices(&as_own_node, OTHER_NODE))?;
    ensure!(
        r.0 == 403,
        "as its node, listing another node's ResourceSlices: {r:?}"
    );
    eprintln!(
        "[helm] node scope: ResourceSlices: as topolet itself refused, as its node its own \
         allowed, another node's refused"
    );

    // Evictions.
    let evict = |c: &kube::Client, name: &str| {
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        k.block_on(pods.evict(name, &EvictParams::default()))
    };
    let r = refusal(evict(&sa, "evictme"))?;
    ensure!(r.0 == 403, "an eviction as topolet itself: {r:?}");
    eprintln!(
        "[helm] node scope: eviction as topolet's own identity: refused ({})",
        r.0
    );
    let r = refusal(evict(&as_other_node, "elsewhere"))?;
    ensure!(r.0 == 403, "acting as another node: {r:?}");
    eprintln!(
        "[helm] node scope: acting as another node: refused ({}: {})",
        r.0, r.1
    );
    let r = refusal(evict(&as_own_node, "elsewhere"))?;
    ensure!(r.0 == 403, "the node evicting a pod of another node: {r:?}");
    eprintln!(
        "[helm] node scope: as its node, evicting a pod bound to another node: refused ({}: {})",
        r.0, r.1
    );
    evict(&as_own_node, "evictme").context("as its node, evicting a pod of its node")?;
    wait::until_true("evictme evicted", TIMEOUT, || {
        Ok(match k.block_on(k.pods().get_opt("evictme"))? {
            None => true,
            Some(p) => p.metadata.deletion_timestamp.is_some(),
        })
    })?;
    eprintln!("[helm] node scope: as its node, evicting a pod of its node: allowed");

    // Clean up: the pods, the other node.
    for p in ["elsewhere", "evictme"] {
        let _ = k.kubectl(&[
            "delete",
            "pod",
            p,
            "--grace-period=0",
            "--force",
            "--ignore-not-found",
        ]);
    }
    k.kubectl(&["delete", "node", OTHER_NODE])?;
    Ok(())
}
