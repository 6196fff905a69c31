//! Pod truth beside a real kubelet and API server: with `[kubernetes]` on (the cluster's
//! `topolet` user, bound to deploy/kubernetes/rbac.yaml's ClusterRole only), topolet watches
//! this node's pods and admits each container from its pod's spec, the NRI inversion being the
//! fallback. Checked here: every pod's decision comes from the API and the inversion of the same
//! container agrees with it (except where the API is known to be more precise, listed by
//! topolet); what only the API can get right (a node-critical pod's oom_score_adj, an init
//! container's role); and an API outage: containers keep being created from the inversion,
//! counted, and the watch catches up when the API server returns.

use anyhow::{ensure, Context};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use topolet_integration::admissions::{self, check_api_agrees};
use topolet_integration::cluster::{self, ClusterOptions, KubeNode};
use topolet_integration::kube::burstable_oom;
use topolet_integration::manifests::{ctr, init_ctr, one_pod_per_class, pod, res};
use topolet_integration::{observe, wait};

/// The bound of CreateContainer's wait for a pod the watch has not delivered yet: the largest
/// allowed, so that a busy machine's slow watch does not make a decision fall back.
const KUBERNETES: &str = "pod_wait_ms = 1000";

fn start() -> anyhow::Result<KubeNode> {
    KubeNode::start_with_api_config("", &ClusterOptions::default(), KUBERNETES)
}

/// The records of pod `default/<name>`'s `containers`, each decided from the API with the
/// inversion agreeing; returns each one's refinements.
fn agreeing(
    node: &mut KubeNode,
    name: &str,
    containers: &[&str],
) -> anyhow::Result<Vec<Vec<String>>> {
    let recs =
        admissions::wait_records(&mut node.t.topolet, &format!("default/{name}"), containers)?;
    recs.iter().map(check_api_agrees).collect()
}

fn oom_score_adj(node: &KubeNode, p: &Pod, cname: &str) -> anyhow::Result<i64> {
    Ok(node.observe(p, cname)?.1.oom_score_adj)
}

/// Every pod shape the kubelet suite uses (each QoS class, fractional and integer Guaranteed, a
/// Burstable pod with a Guaranteed-looking container, init containers) plus a node-critical one:
/// each container is decided from its pod's spec, and the inversion of the same container agrees
/// on its class, exclusive CPUs, CPU request and limit, memory limit and request. Where the API
/// knows more, topolet says so (refinements), and the node-critical pod shows the difference.
#[test]
fn every_pod_is_decided_from_its_spec_and_the_inversion_agrees() -> anyhow::Result<()> {
    let mut node = start()?;
    let cap = observe::mem_capacity()?;
    let k = &node.cluster;
    for p in one_pod_per_class() {
        k.create_pod(p)?;
    }
    k.create_pod(pod(
        "two",
        vec![ctr("a", res("1", "1", "64Mi", "64Mi")), ctr("b", json!({}))],
        vec![],
    ))?;
    let mut crit = pod(
        "crit",
        vec![ctr("main", res("100m", "", "32Mi", ""))],
        vec![],
    );
    crit["spec"]["priorityClassName"] = json!("system-node-critical");
    k.create_pod(crit)?;
    let mut pods = Vec::new();
    for name in ["be", "bu", "gf", "two", "crit"] {
        pods.push(k.wait_running(name)?);
    }
    for (name, containers) in [
        ("be", &["main"][..]),
        ("bu", &["main"]),
        ("gf", &["main"]),
        ("two", &["a", "b"]),
    ] {
        agreeing(&mut node, name, containers)?;
    }
    let two = agreeing(&mut node, "two", &["a", "b"])?;
    ensure!(
        two.iter()
            .all(|r| r.contains(&"other_containers".to_string())),
        "pod two's containers: the inversion sees one container: {two:?}"
    );

    // The node-critical Burstable pod: the kubelet asks -997 for it, which carries no memory
    // request; from its cgroup values alone it would be an ordinary Burstable container without
    // one (oom_score_adj 999, the first killed). From its spec it keeps the kubelet's -997 (as
    // clamped by containerd, like a Guaranteed container's).
    let crit_ref = agreeing(&mut node, "crit", &["main"])?;
    ensure!(
        crit_ref[0].contains(&"node_critical".to_string()),
        "crit is node-critical: {crit_ref:?}"
    );
    let crit_oom = oom_score_adj(&node, &pods[4], "main")?;
    let gf_oom = oom_score_adj(&node, &pods[2], "main")?;
    assert_eq!(
        crit_oom, gf_oom,
        "the node-critical pod's oom_score_adj is the kubelet's -997 as applied to a Guaranteed container"
    );
    assert_ne!(
        crit_oom,
        burstable_oom(0, cap),
        "not the inversion's Burstable value"
    );

    // An integer Guaranteed pod: exclusive, from the spec, the inversion agreeing.
    let k = &node.cluster;
    k.delete_pod("two")?;
    k.delete_pod("gf")?;
    k.create_pod(pod(
        "gx",
        vec![ctr("main", res("1", "1", "64Mi", "64Mi"))],
        vec![],
    ))?;
    k.wait_running("gx")?;
    agreeing(&mut node, "gx", &["main"])?;
    node.cluster.delete_pod("gx")?;

    // Init containers: known as such from the spec (the inversion cannot tell them).
    let init = init_ctr("init", res("1", "1", "64Mi", "64Mi"));
    node.cluster.create_pod(pod(
        "ini",
        vec![ctr("main", res("1", "1", "64Mi", "64Mi"))],
        vec![init],
    ))?;
    node.cluster.wait_running("ini")?;
    let ini = agreeing(&mut node, "ini", &["init", "main"])?;
    ensure!(
        ini[0].contains(&"role".to_string()),
        "the init container's role came from the spec: {ini:?}"
    );

    let m = admissions::metrics(&mut node.t.topolet)?;
    assert_eq!(
        admissions::sample(&m, "topolet_admission_source_disagreements_total"),
        Some(0.0)
    );
    ensure!(
        !m.lines()
            .any(|l| l.starts_with("topolet_admission_fallbacks_total{")),
        "no decision fell back to the inversion:\n{m}"
    );
    let api = admissions::sample(
        &m,
        "topolet_admission_decisions_total{operation=\"create\",source=\"api\"}",
    );
    ensure!(
        api >= Some(9.0),
        "9 containers decided from the API: {api:?}\n{m}"
    );
    for name in ["be", "bu", "crit", "ini"] {
        node.cluster.delete_pod(name)?;
    }
    Ok(())
}

/// The API server stops: the watch loses it (not synced, counted), and a container created
/// meanwhile (a static pod, which the kubelet runs without the API) is decided by the inversion,
/// its reason counted. The API server returns: the watch relists, and the next pod is decided
/// from its spec again.
#[test]
fn an_api_outage_falls_back_to_the_inversion_and_the_watch_catches_up() -> anyhow::Result<()> {
    let mut node = start()?;
    let node_name = node.cluster.node_name().to_string();
    node.cluster.stop_apiserver()?;
    admissions::wait_store_synced(&mut node.t.topolet, false)?;

    let manifest = node.cluster.static_pod_dir().join("spod.json");
    let mut spod = pod(
        "spod",
        vec![ctr("main", res("100m", "200m", "16Mi", "32Mi"))],
        vec![],
    );
    spod["spec"]
        .as_object_mut()
        .context("pod spec")?
        .remove("initContainers");
    std::fs::write(&manifest, serde_json::to_vec_pretty(&spod)?)
        .with_context(|| format!("writing {}", manifest.display()))?;
    let spod_ref = format!("default/spod-{node_name}");
    let recs = admissions::wait_records(&mut node.t.topolet, &spod_ref, &["main"])?;
    let r = &recs[0];
    assert_eq!(r["source"], "inversion", "{r}");
    assert_eq!(r["fallback"], "not_synced", "{r}");
    let id = r["id"].as_str().context("record id")?.to_string();
    wait::until_true(
        "the static pod's container runs",
        cluster::POD_TIMEOUT,
        || Ok(node.t.stack.cri().state(&id)? == "CONTAINER_RUNNING"),
    )?;
    let m = admissions::metrics(&mut node.t.topolet)?;
    ensure!(
        admissions::sample(
            &m,
            "topolet_admission_fallbacks_total{reason=\"not_synced\"}"
        ) >= Some(1.0),
        "the fallback is counted:\n{m}"
    );
    ensure!(
        admissions::sample(&m, "topolet_kube_pod_watch_errors_total") >= Some(1.0),
        "the watch error is counted:\n{m}"
    );

    node.cluster.start_apiserver()?;
    admissions::wait_store_synced(&mut node.t.topolet, true)?;
    let m = admissions::metrics(&mut node.t.topolet)?;
    ensure!(
        admissions::sample(&m, "topolet_kube_pod_watch_restarts_total") >= Some(1.0),
        "the watch restarted:\n{m}"
    );
    node.cluster.create_pod(pod(
        "after",
        vec![ctr("main", res("100m", "", "32Mi", ""))],
        vec![],
    ))?;
    node.cluster.wait_running("after")?;
    agreeing(&mut node, "after", &["main"])?;

    std::fs::remove_file(&manifest).with_context(|| format!("removing {}", manifest.display()))?;
    node.t.topolet.wait_status(
        "the static pod's containers removed",
        cluster::POD_TIMEOUT,
        |s| admissions::of_pod(s, &spod_ref).is_empty().then_some(()),
    )?;
    node.cluster.delete_pod("after")?;
    Ok(())
}

/// A quiet node keeps its pod watch: each watch request is ended by the API server after
/// `watch_timeout_s` (35 to 70 s here, longer than the 30 s the client's reads were once cut at)
/// and topolet watches again from the last resourceVersion it saw: no list after the first, no
/// error, the store synced throughout, and the next pod is decided from its spec.
#[test]
fn the_pod_watch_outlives_a_quiet_period_without_a_relist() -> anyhow::Result<()> {
    let mut node = KubeNode::start_with_api_config(
        "",
        &ClusterOptions::default(),
        &format!("{KUBERNETES}\nwatch_timeout_s = 35"),
    )?;
    let requests = |m: &str, verb: &str| {
        admissions::sample(
            m,
            &format!("topolet_kube_pod_watch_requests_total{{verb=\"{verb}\"}}"),
        )
        .unwrap_or(0.0)
    };
    let m = admissions::metrics(&mut node.t.topolet)?;
    ensure!(requests(&m, "list") == 1.0, "one list at start:\n{m}");
    let watches = requests(&m, "watch");
    let errors = admissions::sample(&m, "topolet_kube_pod_watch_errors_total");
    // Nothing happens on the node; the server ends the first watch (35 s at least) and topolet
    // watches again.
    let addr = node.t.topolet.wait_metrics_address()?;
    wait::until_true(
        "the pod watch renewed by topolet after the server ended it",
        std::time::Duration::from_secs(150),
        || {
            let m = topolet_integration::topolet::metrics_text(&addr)?;
            Ok(requests(&m, "watch") > watches)
        },
    )?;
    let m = admissions::metrics(&mut node.t.topolet)?;
    ensure!(
        requests(&m, "list") == 1.0
            && admissions::sample(&m, "topolet_kube_pod_watch_relists_total") == Some(0.0),
        "no list while the watch lives:\n{m}"
    );
    ensure!(
        admissions::sample(&m, "topolet_kube_pod_watch_errors_total") == errors
            && admissions::sample(&m, "topolet_kube_pod_store_synced") == Some(1.0),
        "the watch never failed and the store stayed synced:\n{m}"
    );
    node.cluster.create_pod(pod(
        "quiet",
        vec![ctr("main", res("100m", "", "32Mi", ""))],
        vec![],
    ))?;
    node.cluster.wait_running("quiet")?;
    agreeing(&mut node, "quiet", &["main"])?;
    let m = admissions::metrics(&mut node.t.topolet)?;
    ensure!(
        !m.lines()
            .any(|l| l.starts_with("topolet_admission_fallbacks_total{")),
        "no decision fell back to the inversion:\n{m}"
    );
    node.cluster.delete_pod("quiet")?;
    Ok(())
}

/// Device truth from the kubelet (docs/src/devices.md): a device plugin built from the v1.37.2
/// modules (hack/device-plugin) advertises `topolet.test/gpu`, two devices on NUMA node 0; a
/// Guaranteed pod asks for one device and an exclusive CPU (this node has two CPUs, CPU 0
/// reserved: one is all there is) through the API and the stock scheduler. topolet's status says
/// the container's device came from the kubelet's PodResources API with NUMA node 0, that it
/// pulled the container's placement there, and the container's cgroup holds exactly the status's
/// CPUs and node 0's memory.
#[test]
fn a_device_plugin_device_comes_from_pod_resources_with_its_numa_node() -> anyhow::Result<()> {
    use topolet_integration::device_plugin;
    const GPU: &str = "topolet.test/gpu";
    let mut node = start()?;
    let export = serve_pod_resources_export(&mut node)?;
    let plugin = device_plugin::start(&node.cluster, GPU, 2, 0)?;
    wait::until_true(
        "the node advertises 2 topolet.test/gpu",
        cluster::POD_TIMEOUT,
        || {
            Ok(node
                .cluster
                .extended_resource(GPU)?
                .is_some_and(|a| a.capacity == 2 && a.allocatable_agrees))
        },
    )
    .with_context(|| format!("device plugin log:\n{}", plugin.logged()))?;
    let mut r = res("1", "1", "64Mi", "64Mi");
    r["requests"][GPU] = json!("1");
    r["limits"][GPU] = json!("1");
    node.cluster
        .create_pod(pod("gpu", vec![ctr("main", r)], vec![]))?;
    let p = node.cluster.wait_running("gpu")?;
    one_device_on_node_0(
        &mut node,
        &p,
        "gpu",
        "pod-resources",
        "topolet.test/gpu=dev-",
    )?;
    let status = node.t.topolet.status()?;
    let source = &status["pod_resources"];
    ensure!(
        source["state"] == "answering" && source["last_error"].is_null(),
        "the kubelet's PodResources API answers: {source:#}"
    );
    let m = admissions::metrics(&mut node.t.topolet)?;
    ensure!(
        admissions::sample(
            &m,
            "topolet_pod_resources_calls_total{call=\"get\",result=\"ok\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "CreateContainer asked the kubelet:\n{m}"
    );
    the_reexport_answers_with_topolets_cpus(&mut node, &export, &status, GPU)?;
    // The NodeResourceTopology counts the kubelet's devices on their zone: 2, one held.
    wait_nrt_devices(&node, GPU, ("2", "2", "1"))?;
    node.cluster.delete_pod("gpu")?;
    wait_nrt_devices(&node, GPU, ("2", "2", "2"))?;
    Ok(())
}

/// Waits until the node's NodeResourceTopology zone `node-0` has `resource` with (capacity,
/// allocatable, available): the kubelet's device-plugin devices (`GetAllocatableResources`) and
/// those its pods hold (`List`), read by topolet every 10 s.
fn wait_nrt_devices(
    node: &KubeNode,
    resource: &str,
    want: (&str, &str, &str),
) -> anyhow::Result<()> {
    let name = node.cluster.node_name().to_string();
    let mut last = serde_json::Value::Null;
    wait::until_true(
        &format!("NodeResourceTopology {name}: node-0 {resource} {want:?}"),
        cluster::POD_TIMEOUT,
        || {
            let Some(obj) = node.cluster.nrt(&name)? else {
                return Ok(false);
            };
            let r = obj["zones"]
                .as_array()
                .and_then(|z| z.iter().find(|z| z["name"] == "node-0"))
                .and_then(|z| z["resources"].as_array())
                .and_then(|r| r.iter().find(|r| r["name"] == resource))
                .cloned()
                .unwrap_or_default();
            let got = (
                r["capacity"].as_str().unwrap_or_default().to_string(),
                r["allocatable"].as_str().unwrap_or_default().to_string(),
                r["available"].as_str().unwrap_or_default().to_string(),
            );
            last = r;
            Ok(got == (want.0.into(), want.1.into(), want.2.into()))
        },
    )
    .with_context(|| format!("last seen: {last:#}"))
}

/// topolet restarted with its PodResources re-export on (`[kubelet]
/// pod_resources_export_socket`, off by default: an operator turns it on for the consumers
/// that read it) in a directory of its own under the node's; returns the socket.
fn serve_pod_resources_export(node: &mut KubeNode) -> anyhow::Result<std::path::PathBuf> {
    let socket = node
        .cluster
        .dir()
        .join("topolet-pod-resources/kubelet.sock");
    node.t.config.kubelet.push_str(&format!(
        "\npod_resources_export_socket = {:?}\n",
        socket.to_string_lossy()
    ));
    node.t.config.write(node.t.topolet.config_path())?;
    node.t
        .topolet
        .terminate(topolet_integration::topolet::TERMINATE_TIMEOUT)?;
    node.t.topolet.restart()?;
    node.t.topolet.wait_nri_synchronized(1)?;
    admissions::wait_store_synced(&mut node.t.topolet, true)?;
    Ok(socket)
}

/// The re-export read by the kubelet's own client (hack/podresources-client), beside the
/// kubelet's socket read by the same client: the same pods and devices, and where the kubelet
/// (`cpuManagerPolicy: none`) gives the container no `cpu_ids`, the re-export gives topolet's
/// exclusive CPUs, as `topolet status` shows them; `GetAllocatableResources` gives every CPU but
/// the reserved one with the kubelet's devices; an unknown pod is the kubelet's own error; the
/// socket is the owner's only.
fn the_reexport_answers_with_topolets_cpus(
    node: &mut KubeNode,
    export: &std::path::Path,
    status: &serde_json::Value,
    resource: &str,
) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    use topolet_integration::pod_resources_client::call;
    let served = &status["pod_resources_export"];
    ensure!(
        served["state"] == "serving" && served["socket"] == export.to_string_lossy().as_ref(),
        "topolet's status says the re-export is served: {served:#}"
    );
    let mode = std::fs::metadata(export)?.permissions().mode() & 0o777;
    ensure!(
        mode == 0o600,
        "the re-export's socket is mode {mode:o}, not 600"
    );
    let kubelet_socket = node.cluster.pod_resources_socket();
    let container_of = |answer: &serde_json::Value| -> Option<serde_json::Value> {
        answer["pod_resources"]
            .as_array()?
            .iter()
            .find(|p| p["namespace"] == "default" && p["name"] == "gpu")?["containers"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "main")
            .cloned()
    };
    let kubelet = call(&kubelet_socket, &["list"])?
        .map_err(|e| anyhow::anyhow!("the kubelet's List: {e}"))?;
    let ours =
        call(export, &["list"])?.map_err(|e| anyhow::anyhow!("the re-export's List: {e}"))?;
    let k = container_of(&kubelet).context("the kubelet lists default/gpu main")?;
    let o = container_of(&ours).context("the re-export lists default/gpu main")?;
    let want_cpus: Vec<i64> = vec![status["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == "default/gpu/main"))
        .and_then(|d| d["cpus"].as_str())
        .context("the status's CPUs of default/gpu/main")?
        .parse()?];
    ensure!(
        k["cpu_ids"].is_null() && k["devices"][0]["resource_name"] == resource,
        "the kubelet (cpuManagerPolicy none) gives no cpu_ids and the device: {k:#}"
    );
    ensure!(
        int64s(&o["cpu_ids"]) == want_cpus && device_set(&o["devices"]) == device_set(&k["devices"]),
        "the re-export gives topolet's CPUs {want_cpus:?} and the kubelet's devices: {o:#}\nkubelet: {k:#}"
    );
    let pods = |a: &serde_json::Value| a["pod_resources"].as_array().map_or(0, Vec::len);
    ensure!(
        pods(&kubelet) == pods(&ours),
        "the same pods: the kubelet {} / the re-export {}",
        pods(&kubelet),
        pods(&ours)
    );
    let got = call(export, &["get", "default", "gpu"])?
        .map_err(|e| anyhow::anyhow!("the re-export's Get: {e}"))?;
    let main = got["pod_resources"]["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "main"))
        .context("Get names main")?;
    ensure!(
        int64s(&main["cpu_ids"]) == want_cpus,
        "Get gives topolet's CPUs: {got:#}"
    );
    let missing = call(export, &["get", "default", "no-such-pod"])?;
    ensure!(
        matches!(&missing, Err(e) if e == "Unknown: pod no-such-pod in namespace default not found"),
        "an unknown pod is the kubelet's own error, passed on: {missing:?}"
    );
    let alloc = call(export, &["allocatable"])?
        .map_err(|e| anyhow::anyhow!("the re-export's GetAllocatableResources: {e}"))?;
    let kubelet_alloc = call(&kubelet_socket, &["allocatable"])?
        .map_err(|e| anyhow::anyhow!("the kubelet's GetAllocatableResources: {e}"))?;
    let reserved = status["reserved"].as_str().context("reserved CPUs")?;
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    let all = topolet_integration::guest::parse_list(online.trim())?;
    let reserved = topolet_integration::guest::parse_list(reserved)?;
    let want: Vec<i64> = all
        .iter()
        .filter(|c| !reserved.contains(c))
        .map(|&c| c as i64)
        .collect();
    ensure!(
        int64s(&alloc["cpu_ids"]) == want
            && device_set(&alloc["devices"]) == device_set(&kubelet_alloc["devices"]),
        "allocatable: every CPU but the reserved ({want:?}) and the kubelet's devices: {alloc:#}\nkubelet: {kubelet_alloc:#}"
    );
    Ok(())
}

/// DRA device truth (docs/src/devices.md): a DRA driver on the upstream kubelet plugin library
/// of v1.37.2 (hack/dra-driver) registers with the kubelet and publishes this node's
/// ResourceSlice, two devices each with `resource.kubernetes.io/numaNode` 0 (this host has one
/// NUMA node); a ResourceClaim created directly (this stack runs no resourceclaim controller, so
/// no template) asks for one, and a Guaranteed pod holding it (`resourceClaimName`) and an
/// exclusive CPU goes through the stock scheduler, which allocates the claim, and the kubelet,
/// which has the driver prepare it. The kubelet's PodResources answer names the device by
/// driver, pool and device only; topolet's status says the container's device came from `dra`
/// on NUMA node 0 (from the slice, through its watch), that it pulled the placement there, and
/// the container's cgroup holds exactly the status's CPUs and node 0's memory.
#[test]
fn a_dra_device_gets_its_numa_node_from_the_nodes_resource_slice() -> anyhow::Result<()> {
    use topolet_integration::dra_driver::{self, DRIVER};
    let mut node = start()?;
    let driver = dra_driver::start(&node.cluster, 2, 0)?;
    let node_name = node.cluster.node_name().to_string();
    wait::until_true(
        "the driver's ResourceSlice for this node",
        cluster::POD_TIMEOUT,
        || dra_driver::slice_published(&node.cluster),
    )
    .with_context(|| format!("dra driver log:\n{}", driver.logged()))?;
    // topolet's watch holds it: the test cluster's topolet user reads as itself (a kubeconfig:
    // `evict_as` "auto" is "self"), with the rbac.evictAs=self right.
    node.t.topolet.wait_status(
        "topolet's ResourceSlice watch holds the driver's 2 devices",
        cluster::POD_TIMEOUT,
        |s| {
            let r = &s["resource_slices"];
            (r["read_as"] == "self"
                && r["state"] == "listed"
                && r["devices"] == 2
                && r["last_error"].is_null())
            .then_some(())
        },
    )?;
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": "topolet-test-gpu"},
         "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}'")}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "gpu", "namespace": "default"},
         "spec": {"devices": {"requests": [
             {"name": "gpu", "exactly": {"deviceClassName": "topolet-test-gpu"}}]}}}
    ]});
    let file = node.cluster.dir().join("dra-objects.json");
    std::fs::write(&file, objects.to_string())
        .with_context(|| format!("writing {}", file.display()))?;
    node.cluster
        .kubectl(&["create", "-f", &file.to_string_lossy()])?;
    let mut c = ctr("main", res("1", "1", "64Mi", "64Mi"));
    c["resources"]["claims"] = json!([{"name": "gpu"}]);
    let mut manifest = pod("dra", vec![c], vec![]);
    manifest["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimName": "gpu"}]);
    node.cluster.create_pod(manifest)?;
    let p = node
        .cluster
        .wait_running("dra")
        .with_context(|| format!("dra driver log:\n{}", driver.logged()))?;
    let prefix = format!("{DRIVER}/{node_name}/gpu-");
    one_device_on_node_0(&mut node, &p, "dra", "dra", &prefix)?;
    node.cluster.delete_pod("dra")?;
    // Without a wait: no resourceclaim controller here releases the claim's reservation, so
    // its deletion-protection finalizer stays until the stack goes.
    node.cluster.kubectl(&[
        "delete",
        "--ignore-not-found",
        "--wait=false",
        "-f",
        &file.to_string_lossy(),
    ])?;
    Ok(())
}

/// The (resource, device id, NUMA nodes) of a protojson `devices` list, as a set: the kubelet
/// lists them in no fixed order.
fn device_set(v: &serde_json::Value) -> std::collections::BTreeSet<(String, String, String)> {
    let mut out = std::collections::BTreeSet::new();
    for d in v.as_array().into_iter().flatten() {
        let resource = d["resource_name"].as_str().unwrap_or_default().to_string();
        let nodes = d["topology"]["nodes"].to_string();
        for id in d["device_ids"].as_array().into_iter().flatten() {
            out.insert((
                resource.clone(),
                id.as_str().unwrap_or_default().to_string(),
                nodes.clone(),
            ));
        }
    }
    out
}

/// A repeated int64 of protojson (each a string, as the proto3 JSON mapping spells 64-bit
/// integers); absent or malformed: empty.
fn int64s(v: &serde_json::Value) -> Vec<i64> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().and_then(|s| s.parse().ok()).or(x.as_i64()))
                .collect()
        })
        .unwrap_or_default()
}

/// What a container `main` of pod `name` holding one device is given (docs/src/devices.md):
/// topolet's status names one device from `source`, its id starting with `id_prefix`, on NUMA
/// node 0 by what the node says (not guessed); the device pulled the placement to node 0 with
/// the one exclusive CPU this host has; and the container's cgroup holds exactly the status's
/// CPUs and node 0's memory.
fn one_device_on_node_0(
    node: &mut KubeNode,
    p: &Pod,
    name: &str,
    source: &str,
    id_prefix: &str,
) -> anyhow::Result<()> {
    let full = format!("default/{name}/main");
    let entry = node
        .t
        .topolet
        .wait_container_devices(&full, source, cluster::POD_TIMEOUT)?;
    let devices = entry["devices"].as_array().context("devices")?;
    ensure!(
        devices.len() == 1
            && devices[0]["source"] == source
            && devices[0]["id"]
                .as_str()
                .is_some_and(|id| id.starts_with(id_prefix))
            && devices[0]["numa"] == 0
            && devices[0]["numa_unknown"].is_null(),
        "one device, from {source}, known to be on numa node 0: {entry:#}"
    );
    ensure!(
        entry["device_numa_nodes"] == json!([0]) && entry["numa_affinity"] == "0",
        "the device pulled the container to node 0: {entry:#}"
    );
    let cpus = entry["cpus"]
        .as_str()
        .context("exclusive cpus")?
        .to_string();
    ensure!(cpus == "1", "the one exclusive CPU: {entry:#}");
    let (cg, _) = node.observe(p, "main")?;
    ensure!(
        cg.cpuset_cpus == cpus && cg.cpuset_mems == "0",
        "cgroup cpuset.cpus {} / cpuset.mems {} follow the device (status: cpus {cpus}, node 0)",
        cg.cpuset_cpus,
        cg.cpuset_mems
    );
    Ok(())
}
