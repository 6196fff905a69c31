//! topolet's own objects in a real cluster (kubelet v1.37, API server, scheduler; topolet's API
//! client on with the `topolet` user, bound to deploy/kubernetes/rbac.yaml's ClusterRole only):
//! the NodeResourceTopology object follows `topolet status` through an exclusive/shared churn
//! and the real API server enforces the CRD's schema; a rejected and a refused configuration
//! reload are Events on the Node; and what the API server lets topolet do is exactly the list
//! of permissions in its code.
//!
//! The node has 2 CPUs; topolet reserves CPU 0, so CPU 1 is the one exclusive CPU.

use anyhow::{bail, ensure, Context};
use k8s_openapi::api::core::v1::Event;
use serde_json::{json, Value};
use topolet::cluster::permissions;
use topolet_core::report::status::Status;
use topolet_integration::cluster::{self, one_container_pod, ClusterOptions, KubeNode};
use topolet_integration::wait;

fn guaranteed(cpu: &str, mem: &str) -> Value {
    json!({"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}})
}

/// A resource of a zone: (capacity, allocatable, available) as strings.
fn resource(zone: &Value, name: &str) -> Option<(String, String, String)> {
    let r = zone["resources"]
        .as_array()?
        .iter()
        .find(|r| r["name"] == name)?;
    let q = |k: &str| match &r[k] {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    Some((q("capacity")?, q("allocatable")?, q("available")?))
}

fn attribute<'a>(list: &'a Value, name: &str) -> Option<&'a str> {
    list.as_array()?
        .iter()
        .find(|a| a["name"] == name)?
        .get("value")?
        .as_str()
}

/// Where the object and the status disagree (empty: they agree), independently of topolet's
/// own derivation: each zone's CPUs, memory and aligned block against the status's NUMA node.
fn disagreements(nrt: &Value, status: &Status) -> Vec<String> {
    let mut out = Vec::new();
    let zones = nrt["zones"].as_array().cloned().unwrap_or_default();
    if zones.len() != status.numa_nodes.len() {
        out.push(format!(
            "{} zones for {} NUMA nodes",
            zones.len(),
            status.numa_nodes.len()
        ));
    }
    for n in &status.numa_nodes {
        let name = format!("node-{}", n.id);
        let Some(z) = zones.iter().find(|z| z["name"] == name.as_str()) else {
            out.push(format!("no zone {name}"));
            continue;
        };
        if z["type"] != "Node" {
            out.push(format!("zone {name} has type {}", z["type"]));
        }
        let cpu = (
            n.cpus.len().to_string(),
            (n.cpus.len() - n.reserved.len()).to_string(),
            n.free.len().to_string(),
        );
        if resource(z, "cpu").as_ref() != Some(&cpu) {
            out.push(format!(
                "zone {name} cpu {:?}, status says {cpu:?}",
                resource(z, "cpu")
            ));
        }
        let mem_available = n.free_resources.get("memory").map(u64::to_string);
        let mem = resource(z, "memory");
        if mem.as_ref().map(|m| &m.2) != mem_available.as_ref()
            || mem.as_ref().map(|m| &m.0) != Some(&n.memory_bytes.to_string())
        {
            out.push(format!(
                "zone {name} memory {mem:?}, status says {} bytes, {mem_available:?} free",
                n.memory_bytes
            ));
        }
        let block = n.largest_l3_block.len().to_string();
        if attribute(&z["attributes"], "topoletLargestFreeAlignedCPUs") != Some(block.as_str()) {
            out.push(format!(
                "zone {name} attributes {}, largest aligned block {block}",
                z["attributes"]
            ));
        }
    }
    for (attr, want) in [
        ("topologyManagerPolicy", status.policies.topology.as_str()),
        (
            "topologyManagerScope",
            status.policies.topology_scope.as_str(),
        ),
    ] {
        if attribute(&nrt["attributes"], attr) != Some(want) {
            out.push(format!("{attr}: {} (status {want})", nrt["attributes"]));
        }
    }
    out
}

/// Waits until the node's NodeResourceTopology agrees with `topolet status` and zone node-0
/// shows `available` CPUs; returns the object.
fn wait_nrt(node: &mut KubeNode, step: &str, available: usize) -> anyhow::Result<Value> {
    let name = node.cluster.node_name().to_string();
    let mut last = String::new();
    let r = wait::until(
        &format!("NodeResourceTopology {name} ({step}): node-0 {available} CPUs available, as topolet status"),
        cluster::POD_TIMEOUT,
        || {
            let Some(obj) = node.cluster.nrt(&name)? else {
                last = "no object".into();
                return Ok(None);
            };
            let status: Status = serde_json::from_value(node.t.topolet.status()?)
                .context("topolet status -o json as topolet_core::report::status::Status")?;
            let mut diff = disagreements(&obj, &status);
            let zone0 = obj["zones"]
                .as_array()
                .and_then(|z| z.iter().find(|z| z["name"] == "node-0"));
            let got = zone0.and_then(|z| resource(z, "cpu")).map(|c| c.2);
            if got != Some(available.to_string()) {
                diff.push(format!("node-0 cpu available {got:?}"));
            }
            last = diff.join("; ");
            Ok(diff.is_empty().then_some(obj))
        },
    );
    r.with_context(|| format!("last difference: {last}"))
}

fn api_code(r: Result<(), kube::Error>) -> Option<u16> {
    match r {
        Err(kube::Error::Api(s)) => Some(s.code),
        _ => None,
    }
}

/// A syntactically plausible object violating the schema in one way each: the API server
/// refuses it (422), so the schema is enforced, not merely stored.
fn check_schema_is_enforced(k: &cluster::Cluster) -> anyhow::Result<()> {
    let obj = |name: &str, resources: Value| {
        json!({
            "apiVersion": "topology.node.k8s.io/v1alpha2",
            "kind": "NodeResourceTopology",
            "metadata": {"name": name},
            "topologyPolicies": ["None"],
            "zones": [{"name": "node-0", "type": "Node", "resources": resources}],
        })
    };
    let bad_quantity = obj(
        "schema-probe-1",
        json!([{"name": "cpu", "capacity": "lots", "allocatable": "1", "available": "1"}]),
    );
    let missing_available = obj(
        "schema-probe-2",
        json!([{"name": "cpu", "capacity": "1", "allocatable": "1"}]),
    );
    let mut no_zones = obj("schema-probe-3", json!([]));
    no_zones.as_object_mut().context("object")?.remove("zones");
    for (what, o) in [
        ("a capacity that is not a quantity", bad_quantity),
        ("a resource without available", missing_available),
        ("no zones", no_zones),
    ] {
        let code = api_code(k.create_nrt(o));
        ensure!(
            code == Some(422),
            "{what}: the API server answered {code:?}, not 422 Invalid"
        );
    }
    // The same shape, valid, is accepted: the refusals above were the schema's.
    k.create_nrt(obj(
        "schema-probe-ok",
        json!([{"name": "cpu", "capacity": 2, "allocatable": "1", "available": "500m"}]),
    ))
    .context("a valid object is accepted")?;
    k.delete_nrt("schema-probe-ok")
}

/// The CRD as the API server took it: established, names accepted, structural.
fn check_crd(k: &cluster::Cluster) -> anyhow::Result<()> {
    let out = k.kubectl(&[
        "get",
        "crd",
        "noderesourcetopologies.topology.node.k8s.io",
        "-o",
        "json",
    ])?;
    let crd: Value = serde_json::from_str(&out)?;
    let conds = crd["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let status = |t: &str| {
        conds
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| c["status"].as_str().unwrap_or("").to_string())
    };
    ensure!(
        status("Established").as_deref() == Some("True")
            && status("NamesAccepted").as_deref() == Some("True")
            && status("NonStructuralSchema").is_none()
            && status("KubernetesAPIApprovalPolicyConformant").as_deref() == Some("True"),
        "CRD conditions: {conds:?}"
    );
    Ok(())
}

fn metrics(node: &mut KubeNode) -> anyhow::Result<String> {
    let addr = node.t.topolet.wait_metrics_address()?;
    topolet_integration::topolet::metrics_text(&addr)
}

fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn node_resource_topology_follows_the_books_through_exclusive_and_shared_churn(
) -> anyhow::Result<()> {
    let mut node = KubeNode::start_with_api("", &ClusterOptions::default())?;
    check_crd(&node.cluster)?;

    // At start: CPU 1 free for exclusive use, CPU 0 reserved.
    let first = wait_nrt(&mut node, "at start", 1)?;
    // topolet's defaults: `[topology] policy = "best-effort"`, scope `container`.
    assert_eq!(
        attribute(&first["attributes"], "topologyManagerPolicy"),
        Some("best-effort")
    );
    assert_eq!(
        first["topologyPolicies"],
        json!(["BestEffortContainerLevel"]),
        "{first}"
    );
    assert_eq!(
        attribute(&first["attributes"], "topologyManagerMaxNUMANodes"),
        Some("8")
    );
    let zone = &first["zones"][0];
    assert_eq!(
        zone["costs"],
        json!([{"name": "node-0", "value": 10}]),
        "{zone}"
    );
    assert_eq!(first["metadata"]["name"], node.cluster.node_name());

    // A shared pod changes nothing; an exclusive one takes CPU 1; its deletion gives it back.
    let k = &node.cluster;
    k.create_pod(one_container_pod(
        "shared",
        json!({"requests": {"cpu": "100m", "memory": "32Mi"}}),
    ))?;
    k.wait_running("shared")?;
    wait_nrt(&mut node, "a shared pod", 1)?;
    node.cluster
        .create_pod(one_container_pod("gx", guaranteed("1", "64Mi")))?;
    node.cluster.wait_running("gx")?;
    let held = wait_nrt(&mut node, "exclusive pod gx holds CPU 1", 0)?;
    assert_eq!(
        attribute(
            &held["zones"][0]["attributes"],
            "topoletLargestFreeAlignedCPUs"
        ),
        Some("0")
    );
    node.cluster.delete_pod("gx")?;
    wait_nrt(&mut node, "gx deleted", 1)?;
    node.cluster.delete_pod("shared")?;
    wait_nrt(&mut node, "shared deleted", 1)?;

    // A restarted topolet holds no resourceVersion: it reads the object (get), writes nothing its
    // predecessor already wrote (the books are the same), and replaces it at the next change.
    node.t
        .topolet
        .terminate(topolet_integration::topolet::TERMINATE_TIMEOUT)?;
    node.t.topolet.restart()?;
    node.t.topolet.wait_nri_synchronized(1)?;
    wait_nrt(&mut node, "after topolet's restart", 1)?;
    let m = metrics(&mut node)?;
    ensure!(
        sample(&m, "topolet_nrt_writes_total{result=\"updated\"}").is_none()
            && sample(&m, "topolet_nrt_writes_total{result=\"created\"}").is_none(),
        "the restarted topolet rewrote an unchanged NodeResourceTopology:\n{m}"
    );
    node.cluster
        .create_pod(one_container_pod("gx2", guaranteed("1", "64Mi")))?;
    node.cluster.wait_running("gx2")?;
    wait::until_true(
        "the restarted topolet updated its NodeResourceTopology",
        cluster::POD_TIMEOUT,
        || {
            let m = metrics(&mut node)?;
            Ok(
                sample(&m, "topolet_nrt_writes_total{result=\"updated\"}")
                    .is_some_and(|n| n >= 1.0),
            )
        },
    )?;
    wait_nrt(&mut node, "gx2 holds CPU 1 after the restart", 0)?;
    let m = metrics(&mut node)?;
    ensure!(
        !m.lines()
            .any(|l| l.starts_with("topolet_kube_api_errors_total{")),
        "no failed API request (RBAC grants what the publisher uses):\n{m}"
    );

    check_schema_is_enforced(&node.cluster)
}

/// topolet's own Events on the Node with `reason`.
fn node_events(k: &cluster::Cluster, reason: &str) -> anyhow::Result<Vec<Event>> {
    Ok(k.node_events()?
        .into_iter()
        .filter(|e| {
            e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("topolet")
                && e.reason.as_deref() == Some(reason)
        })
        .collect())
}

fn wait_node_event(k: &cluster::Cluster, reason: &str) -> anyhow::Result<Event> {
    wait::until(
        &format!("a {reason} Event on node {}", k.node_name()),
        cluster::POD_TIMEOUT,
        || Ok(node_events(k, reason)?.into_iter().next()),
    )
}

#[test]
fn rejected_and_refused_reloads_are_node_events_and_rbac_is_exactly_the_code_list(
) -> anyhow::Result<()> {
    let mut node = KubeNode::start_with_api("", &ClusterOptions::default())?;

    // RBAC: what the API server lets the `topolet` user do, beyond what every authenticated
    // user may (an impersonated user with no bindings), is exactly the code's list.
    let k = &node.cluster;
    let own = k.client_for(k.env("KUBE_TOPOLET_KUBECONFIG")?.as_ref(), None)?;
    let baseline = k.client_for(
        k.env("KUBECONFIG")?.as_ref(),
        Some(("topolet-rbac-baseline", &["system:authenticated"])),
    )?;
    for ns in ["default", "kube-system"] {
        let granted = k.resource_rules(own.clone(), ns)?;
        let everyone = k.resource_rules(baseline.clone(), ns)?;
        let topolets: Vec<_> = granted.difference(&everyone).cloned().collect();
        // The chart's ClusterRole, and (hack/kube-node.sh) the eviction and pod-read rights of
        // `evict_as = "self"`: this user is no pod's service account, it has no node to act as.
        let mut listed = permissions::grants();
        listed.extend(permissions::grants_of(permissions::AS_SELF));
        listed.sort();
        listed.dedup();
        let missing: Vec<_> = listed.iter().filter(|g| !granted.contains(*g)).collect();
        let excess: Vec<_> = topolets.iter().filter(|g| !listed.contains(g)).collect();
        if !missing.is_empty() || !excess.is_empty() {
            bail!(
                "namespace {ns}: the API server's rules for user topolet differ from \
                 topolet::cluster::permissions::PERMISSIONS: missing {missing:?}, excess {excess:?}"
            );
        }
    }

    // A file that does not parse: rejected, the running configuration stays.
    let path = node.t.topolet.config_path().to_path_buf();
    let good = node.t.config.clone();
    let mut bad = good.clone();
    bad.extra_toml = "[topology]\npolicy = \"sideways\"".into();
    bad.write(&path)?;
    let e = wait_node_event(&node.cluster, "TopoletConfigRejected")?;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("Node"));
    assert_eq!(
        e.involved_object.name.as_deref(),
        Some(node.cluster.node_name())
    );
    assert_eq!(e.involved_object.namespace, None);
    let msg = e.message.clone().unwrap_or_default();
    ensure!(
        msg.contains("sideways") && msg.contains("file change"),
        "the message names the bad value and the trigger: {msg:?}"
    );

    // A valid file that would reserve the CPU a running container holds: refused.
    node.cluster
        .create_pod(one_container_pod("gx", guaranteed("1", "64Mi")))?;
    node.cluster.wait_running("gx")?;
    node.t
        .topolet
        .wait_status("gx holds CPU 1", cluster::POD_TIMEOUT, |s| {
            s["exclusive"]
                .as_array()
                .is_some_and(|x| x.iter().any(|c| c["name"] == "default/gx/main"))
                .then_some(())
        })?;
    let mut takes = good.clone();
    takes.reserved_cpus = Some("1".into());
    takes.write(&path)?;
    let e = wait_node_event(&node.cluster, "TopoletConfigRefused")?;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    let msg = e.message.clone().unwrap_or_default();
    ensure!(
        msg.contains("cpu.reserved_cpus") && msg.contains("refused"),
        "the message names the key: {msg:?}"
    );
    ensure!(
        node_events(&node.cluster, "TopoletConfigRejected")?.len() == 1,
        "one Event object per (reason, message)"
    );

    good.write(&path)?;
    node.cluster.delete_pod("gx")?;
    Ok(())
}
