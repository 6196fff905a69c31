//! `topolet plan` on every fixture machine: the library entry point
//! `topolet_core::placement::plan::plan` on topologies discovered from the sysfs machine trees
//! (`topolet_testkit::sysfs`), exact JSON for the CI
//! host and the dual-socket machine, refusal messages, init-container hand-off, and the binary
//! (`topolet plan`) on stdin YAML, a `kind: List`, a JSON array, malformed pods and a bad config.

// Test code throughout: clippy's `allow-unwrap-in-tests` (clippy.toml) covers the #[test]
// functions, not the helpers they share here.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::io::{ErrorKind, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use topolet::config::{Config, TopologyPolicyName};
use topolet::host::sysfs::discover;
use topolet_core::kube::pod_input::parse_pods;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::Topology;
use topolet_core::placement::plan::{plan, PlanOutput};

const NIC: &str = "example.com/nic";

use topolet_testkit::sysfs::fixture;

fn every_fixture() -> Vec<String> {
    topolet_testkit::sysfs::names()
}

/// A config whose `[devices]` lists the machine's PCI devices with a known NUMA node as NICs.
fn config_with_nics(topo: &Topology, reserved: &str) -> Config {
    let mut c = Config::default();
    c.cpu.reserved_cpus = Some(reserved.into());
    let nics: Vec<String> = topo
        .devices()
        .iter()
        .filter(|d| d.numa.is_some())
        .map(|d| d.address.clone())
        .collect();
    if !nics.is_empty() {
        c.devices.insert(NIC.into(), nics);
    }
    c
}

fn pod_yaml(name: &str, init: &[(&str, &str, bool)], apps: &[(&str, &str)]) -> String {
    let res = |cpu: &str| {
        if cpu.is_empty() {
            "{}".to_string()
        } else if let Some(b) = cpu.strip_suffix('b') {
            // Burstable: a request and a memory limit only.
            format!("{{requests: {{cpu: {b}, memory: 128Mi}}, limits: {{memory: 256Mi}}}}")
        } else if let Some(n) = cpu.strip_suffix('n') {
            format!("{{limits: {{cpu: \"{n}\", memory: 512Mi, {NIC}: \"1\"}}}}")
        } else {
            format!("{{limits: {{cpu: \"{cpu}\", memory: 1Gi}}}}")
        }
    };
    let mut s = format!("- metadata: {{name: {name}, namespace: t, uid: u-{name}}}\n  spec:\n");
    if !init.is_empty() {
        s.push_str("    initContainers:\n");
        for (n, cpu, sidecar) in init {
            s.push_str(&format!("    - name: {n}\n"));
            if *sidecar {
                s.push_str("      restartPolicy: Always\n");
            }
            s.push_str(&format!("      resources: {}\n", res(cpu)));
        }
    }
    s.push_str("    containers:\n");
    for (n, cpu) in apps {
        s.push_str(&format!("    - name: {n}\n      resources: {}\n", res(cpu)));
    }
    s
}

/// Every QoS class, an init container, a sidecar and (when `nic`) a device request.
fn representative(nic: bool) -> String {
    let mut s = String::new();
    s += &pod_yaml(
        "db",
        &[("migrate", "2", false), ("proxy", "1", true)],
        &[("main", "1")],
    );
    s += &pod_yaml("frac", &[], &[("main", "1500m")]);
    s += &pod_yaml("web", &[], &[("main", "250mb")]);
    s += &pod_yaml("batch", &[], &[("main", "")]);
    if nic {
        s += &pod_yaml("nic", &[], &[("main", "1n")]);
    }
    s += &pod_yaml("app", &[], &[("main", "2"), ("log", "1")]);
    s
}

/// The pool properties of any plan.
fn check_plan(name: &str, topo: &Topology, out: &PlanOutput) {
    let reserved = CpuSet::parse(&out.pools.reserved).unwrap();
    let shared = CpuSet::parse(&out.pools.shared).unwrap();
    let mut exclusive = CpuSet::new();
    let mut ever_exclusive = CpuSet::new();
    for c in &out.containers {
        let ctx = format!("{name}: {}/{}", c.pod, c.container);
        assert_eq!(c.admitted, c.error.is_none(), "{ctx}");
        if !c.admitted {
            assert!(c.cpuset.is_none() && !c.exclusive, "{ctx}");
            continue;
        }
        let set = CpuSet::parse(c.cpuset.as_deref().unwrap()).unwrap();
        assert!(!set.is_empty() && set.is_subset(topo.cpus()), "{ctx}");
        if c.exclusive {
            assert!(
                set.is_disjoint(&reserved),
                "{ctx}: reserved cpus handed out"
            );
            // A plain init container's cpus may go on to its pod's app containers; nothing else
            // may share.
            if !c.init {
                assert!(
                    set.is_disjoint(&exclusive),
                    "{ctx}: cpus {} twice",
                    set.intersection(&exclusive)
                );
                exclusive.extend_from(&set);
            }
            ever_exclusive.extend_from(&set);
        } else {
            assert_eq!(set, shared, "{ctx}");
        }
        assert!(c.mems.is_some() && c.cpu_shares.is_some(), "{ctx}");
    }
    assert!(shared.is_disjoint(&exclusive), "{name}");
    // The shared pool is all - exclusive (no strict reservation here): every cpu missing from it
    // was handed out exclusively.
    let missing = topo.cpus().difference(&shared);
    assert!(
        missing.is_subset(&ever_exclusive),
        "{name}: {missing} neither shared nor exclusive"
    );
    assert!(exclusive.is_subset(&missing), "{name}");
}

#[test]
fn every_fixture_plans_a_representative_pod_list() {
    let names = every_fixture();
    assert!(names.len() >= 8, "{names:?}");
    for name in names {
        let topo = discover(&fixture(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let config = config_with_nics(&topo, "0");
        let nic = !config.devices.is_empty();
        let pods = parse_pods(&representative(nic)).unwrap();
        let out = plan(&topo, &config.placement().unwrap(), &pods)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out.containers.len(), if nic { 9 } else { 8 }, "{name}");
        check_plan(&name, &topo, &out);
        // Enough room everywhere but the 2-cpu hosts: everything admitted.
        if topo.num_cpus() > 8 {
            for c in &out.containers {
                assert!(
                    c.admitted,
                    "{name}: {}/{}: {:?}",
                    c.pod, c.container, c.error
                );
            }
            let row = |pod: &str, c: &str| {
                out.containers
                    .iter()
                    .find(|r| r.pod == pod && r.container == c)
                    .unwrap()
            };
            assert!(row("t/db", "main").exclusive);
            assert!(!row("t/frac", "main").exclusive);
            if nic {
                assert_eq!(row("t/nic", "main").devices.len(), 1, "{name}");
            }
        }
        // Deterministic.
        assert_eq!(
            plan(&topo, &config.placement().unwrap(), &pods).unwrap(),
            out,
            "{name}"
        );
    }
}

/// The CI host (1 socket, 2 cpus, cpu 0 reserved): the init container's cpu goes on to the app
/// container; everyone else shares cpu 0.
#[test]
fn ci_host_exact_json() {
    let topo = discover(&fixture("ci-host-1s2c")).unwrap();
    let mut config = Config::default();
    config.cpu.reserved_cpus = Some("0".into());
    config
        .devices
        .insert(NIC.into(), vec!["0000:00:01.0".into()]);
    let pods = parse_pods(CI_PODS).unwrap();
    let got =
        serde_json::to_value(plan(&topo, &config.placement().unwrap(), &pods).unwrap()).unwrap();
    let want: Value = serde_json::from_str(CI_JSON).unwrap();
    assert_eq!(got, want, "{}", serde_json::to_string_pretty(&got).unwrap());
}

const CI_PODS: &str = r#"
apiVersion: v1
kind: List
items:
- metadata: {name: db, namespace: prod, uid: u-db}
  spec:
    initContainers:
    - name: migrate
      resources: {limits: {cpu: "1", memory: 256Mi}}
    containers:
    - name: main
      resources: {limits: {cpu: "1", memory: 1Gi}}
- metadata: {name: nic, namespace: prod, uid: u-nic}
  spec:
    containers:
    - name: main
      resources: {limits: {cpu: 500m, memory: 512Mi, example.com/nic: "1"}}
- metadata: {name: web, namespace: prod, uid: u-web}
  spec:
    priorityClassName: system-node-critical
    containers:
    - name: main
      resources: {requests: {cpu: 250m, memory: 128Mi}, limits: {memory: 256Mi}}
- metadata: {name: batch, namespace: prod, uid: u-batch}
  spec:
    containers:
    - name: main
"#;

const CI_JSON: &str = r#"{
 "containers": [
  {
   "pod": "prod/db",
   "container": "migrate",
   "init": true,
   "qos": "Guaranteed",
   "admitted": true,
   "error": null,
   "exclusive": true,
   "cpuset": "1",
   "mems": "0",
   "numa_affinity": "0",
   "cpu_shares": 1024,
   "cpu_quota": -1,
   "cpu_period": 100000,
   "memory_limit": 268435456,
   "oom_score_adj": -997,
   "pids_limit": null
  },
  {
   "pod": "prod/db",
   "container": "main",
   "init": false,
   "qos": "Guaranteed",
   "admitted": true,
   "error": null,
   "exclusive": true,
   "cpuset": "1",
   "mems": "0",
   "numa_affinity": "0",
   "cpu_shares": 1024,
   "cpu_quota": -1,
   "cpu_period": 100000,
   "memory_limit": 1073741824,
   "oom_score_adj": -997,
   "pids_limit": null
  },
  {
   "pod": "prod/nic",
   "container": "main",
   "init": false,
   "qos": "Guaranteed",
   "admitted": true,
   "error": null,
   "exclusive": false,
   "cpuset": "0",
   "mems": "0",
   "numa_affinity": "0",
   "cpu_shares": 512,
   "cpu_quota": 50000,
   "cpu_period": 100000,
   "memory_limit": 536870912,
   "oom_score_adj": -997,
   "pids_limit": null,
   "devices": [
    "0000:00:01.0"
   ]
  },
  {
   "pod": "prod/web",
   "container": "main",
   "init": false,
   "qos": "Burstable",
   "admitted": true,
   "error": null,
   "exclusive": false,
   "cpuset": "0",
   "mems": "0",
   "numa_affinity": null,
   "cpu_shares": 256,
   "cpu_quota": -1,
   "cpu_period": 100000,
   "memory_limit": 268435456,
   "oom_score_adj": -997,
   "pids_limit": null
  },
  {
   "pod": "prod/batch",
   "container": "main",
   "init": false,
   "qos": "BestEffort",
   "admitted": true,
   "error": null,
   "exclusive": false,
   "cpuset": "0",
   "mems": "0",
   "numa_affinity": null,
   "cpu_shares": 2,
   "cpu_quota": -1,
   "cpu_period": 100000,
   "memory_limit": null,
   "oom_score_adj": 1000,
   "pids_limit": null
  }
 ],
 "pools": {
  "reserved": "0",
  "shared": "0"
 }
}"#;

/// 2 sockets × 24 cores × 2 threads, cpus 0 and 48 (one core) reserved: 4 + 4 + 2 integer cpus
/// land on node 0 as whole cores next to each other, and what is left of node 0 is whole cores.
#[test]
fn dual_socket_exact_json_and_whole_cores_left() {
    let topo = discover(&fixture("2s-24c-ht")).unwrap();
    let mut config = Config::default();
    config.cpu.reserved_cpus = Some("0,48".into());
    let pods = parse_pods(&format!(
        "{}{}{}",
        pod_yaml("a", &[], &[("c", "4")]),
        pod_yaml("b", &[], &[("c", "4")]),
        pod_yaml("d", &[], &[("c", "2")]),
    ))
    .unwrap();
    let out = plan(&topo, &config.placement().unwrap(), &pods).unwrap();
    let got = serde_json::to_value(&out).unwrap();
    let want: Value = serde_json::from_str(HT_JSON).unwrap();
    assert_eq!(got, want, "{}", serde_json::to_string_pretty(&got).unwrap());

    let shared = CpuSet::parse(&out.pools.shared).unwrap();
    let reserved = CpuSet::parse("0,48").unwrap();
    for node in topo.numa_nodes() {
        let free = node.cpus.intersection(&shared).difference(&reserved);
        for cpu in free.iter() {
            assert!(
                topo.siblings(cpu).is_subset(&free),
                "node {}: cpu {cpu} is half a core",
                node.id
            );
        }
    }
}

const HT_JSON: &str = r#"{
 "containers": [
  {
   "pod": "t/a",
   "container": "c",
   "init": false,
   "qos": "Guaranteed",
   "admitted": true,
   "error": null,
   "exclusive": true,
   "cpuset": "1-2,49-50",
   "mems": "0",
   "numa_affinity": "0",
   "cpu_shares": 4096,
   "cpu_quota": -1,
   "cpu_period": 100000,
   "memory_limit": 1073741824,
   "oom_score_adj": -997,
   "pids_limit": null
  },
  {
   "pod": "t/b",
   "container": "c",
   "init": false,
   "qos": "Guaranteed",
   "admitted": true,
   "error": null,
   "exclusive": true,
   "cpuset": "3-4,51-52",
   "mems": "0",
   "numa_affinity": "0",
   "cpu_shares": 4096,
   "cpu_quota": -1,
   "cpu_period": 100000,
   "memory_limit": 1073741824,
   "oom_score_adj": -997,
   "pids_limit": null
  },
  {
   "pod": "t/d",
   "container": "c",
   "init": false,
   "qos": "Guaranteed",
   "admitted": true,
   "error": null,
   "exclusive": true,
   "cpuset": "5,53",
   "mems": "0",
   "numa_affinity": "0",
   "cpu_shares": 2048,
   "cpu_quota": -1,
   "cpu_period": 100000,
   "memory_limit": 1073741824,
   "oom_score_adj": -997,
   "pids_limit": null
  }
 ],
 "pools": {
  "reserved": "0,48",
  "shared": "0,6-48,54-95"
 }
}"#;

fn plan_yaml(fixture_name: &str, config: &Config, yaml: &str) -> PlanOutput {
    let topo = discover(&fixture(fixture_name)).unwrap();
    plan(
        &topo,
        &config.placement().unwrap(),
        &parse_pods(yaml).unwrap(),
    )
    .unwrap()
}

#[test]
fn refusals_name_the_policy_the_request_and_what_is_free() {
    let mut config = Config::default();
    config.cpu.reserved_cpus = Some("0,48".into());
    config.topology.policy = TopologyPolicyName::SingleNumaNode;
    let out = plan_yaml("2s-24c-ht", &config, &pod_yaml("huge", &[], &[("c", "50")]));
    let err = out.containers[0].error.as_deref().expect("refused");
    for needle in [
        "single-numa-node",
        "t/huge/c",
        "cpu: 50",
        "memory: 1Gi",
        "0: cpu 46",
        "1: cpu 48",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }

    config.topology.policy = TopologyPolicyName::Restricted;
    let first3: String = ["a", "b", "c"]
        .iter()
        .map(|n| pod_yaml(n, &[], &[("c", "20")]))
        .collect();
    let yaml = first3.clone() + &pod_yaml("d", &[], &[("c", "30")]);
    let out = plan_yaml("2s-24c-ht", &config, &yaml);
    assert!(out.containers[..3].iter().all(|c| c.admitted));
    let err = out.containers[3].error.as_deref().expect("refused");
    for needle in ["restricted", "t/d/c", "cpu: 30", "0: cpu 6", "1: cpu 28"] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    // Best-effort places the same request across both nodes...
    config.topology.policy = TopologyPolicyName::BestEffort;
    let out = plan_yaml("2s-24c-ht", &config, &yaml);
    let d = CpuSet::parse(out.containers[3].cpuset.as_deref().expect("admitted")).unwrap();
    assert_eq!((d.len(), topo_nodes(&d)), (30, 2));
    // ...and a request larger than what is free is refused naming all of it and every free cpu.
    let out = plan_yaml(
        "2s-24c-ht",
        &config,
        &(first3 + &pod_yaml("d", &[], &[("c", "40")])),
    );
    let err = out.containers[3].error.as_deref().expect("refused");
    assert!(
        err.contains("requested 40, available 34 (free: \"21-23,34-47,69-71,82-95\")"),
        "{err}"
    );
}

fn topo_nodes(set: &CpuSet) -> usize {
    discover(&fixture("2s-24c-ht"))
        .unwrap()
        .numa_nodes_of(set)
        .len()
}

/// kubernetes#94220: the init container's exclusive cpus go on to the app containers; a sidecar
/// (restartable init container) keeps its own.
#[test]
fn init_cpus_go_to_app_containers_and_sidecars_keep_theirs() {
    let mut config = Config::default();
    config.cpu.reserved_cpus = Some("0,48".into());
    let yaml = pod_yaml(
        "p",
        &[("init", "4", false), ("sidecar", "2", true)],
        &[("main", "2"), ("aux", "2")],
    );
    let out = plan_yaml("2s-24c-ht", &config, &yaml);
    let set = |c: &str| {
        CpuSet::parse(
            out.containers
                .iter()
                .find(|r| r.container == c)
                .unwrap()
                .cpuset
                .as_deref()
                .unwrap(),
        )
        .unwrap()
    };
    let (init, sidecar, main, aux) = (set("init"), set("sidecar"), set("main"), set("aux"));
    assert_eq!(init.len(), 4);
    // The sidecar starts once the plain init container is done, so it may reuse its cpus; the
    // app containers then take what is left of the init's, never the sidecar's.
    assert!(
        main.is_disjoint(&sidecar) && aux.is_disjoint(&sidecar),
        "sidecar {sidecar} shared"
    );
    assert!(main.is_disjoint(&aux));
    assert_eq!((sidecar.len(), main.len(), aux.len()), (2, 2, 2));
    let running = sidecar.union(&main).union(&aux);
    assert!(
        init.is_subset(&running),
        "init cpus {init} left unused by {running}"
    );
    // No more than the peak (sidecar + main + aux = 6) is taken from the shared pool.
    let shared = CpuSet::parse(&out.pools.shared).unwrap();
    assert_eq!(shared.len(), 96 - 6);
}

// ---------------------------------------------------------------------------------------------
// The binary
// ---------------------------------------------------------------------------------------------

fn topolet(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_topolet"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The binary may exit before reading its stdin (a config error is reported first): writing
    // to a pipe whose reader is gone fails with BrokenPipe, which is not the test's failure (the
    // exit status and stderr are what the tests check).
    match child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
        written => written.unwrap(),
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn plan_cli(config: Option<&Path>, stdin: &str) -> (i32, String, String) {
    let root = fixture("ci-host-1s2c");
    let mut args = vec![
        "plan",
        "--sysfs-root",
        root.to_str().unwrap(),
        "--pods",
        "-",
    ];
    if let Some(c) = config {
        args.extend(["--config", c.to_str().unwrap()]);
    }
    topolet(&args, stdin)
}

#[test]
fn binary_plans_yaml_a_list_and_a_json_array_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(
        &cfg,
        "[cpu]\nreserved_cpus = \"0\"\n[devices]\n\"example.com/nic\" = [\"0000:00:01.0\"]\n",
    )
    .unwrap();
    let want: Value = serde_json::from_str(CI_JSON).unwrap();

    // A kind: List in YAML.
    let (code, out, err) = plan_cli(Some(&cfg), CI_PODS);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), want);

    // The same pods as a YAML sequence and as a JSON array.
    let pods: Value = serde_saphyr::from_str(CI_PODS).unwrap();
    let items = pods["items"].clone();
    let (code, out, err) = plan_cli(Some(&cfg), &serde_saphyr::to_string(&items).unwrap());
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), want);
    let (code, out, err) = plan_cli(Some(&cfg), &serde_json::to_string(&items).unwrap());
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), want);

    // One pod on its own.
    let one = serde_json::to_string(&items[3]).unwrap();
    let (code, out, _) = plan_cli(Some(&cfg), &one);
    assert_eq!(code, 0);
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["containers"].as_array().unwrap().len(), 1);
    assert_eq!(got["containers"][0]["qos"], "BestEffort");
    assert_eq!(got["pools"]["shared"], "0-1");
}

#[test]
fn binary_rejects_malformed_pods_naming_pod_container_and_field() {
    let bad = "metadata: {name: web, namespace: prod}\nspec:\n  containers:\n  - name: app\n    resources: {limits: {cpu: abc}}\n";
    let (code, out, err) = plan_cli(None, bad);
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    for needle in ["prod/web", "\"app\"", "resources.limits.cpu", "abc"] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
}

#[test]
fn binary_rejects_an_unknown_config_key_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(
        &cfg,
        "[cpu]\nreserved_cpus = \"0\"\nreserved_cpu_cuont = 1\n",
    )
    .unwrap();
    // More pods text than a pipe holds (64 KiB): the binary exits on its config without reading
    // stdin, so the helper's write meets a closed pipe every time, not only when the child wins.
    let pods = format!("{CI_PODS}{}", "# padding\n".repeat(20_000));
    let (code, out, err) = plan_cli(Some(&cfg), &pods);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("reserved_cpu_cuont") && err.contains("node.toml"),
        "{err}"
    );
}

/// `--devices`: a container given a device on NUMA node 1 of the dual-socket machine gets its
/// exclusive CPUs there; under `single-numa-node`, devices on both nodes refuse it in the
/// topology manager's words; a malformed devices file names itself.
#[test]
fn binary_plans_with_devices_pulling_cpus_to_their_node() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(
        &cfg,
        "[cpu]\nreserved_cpus = \"0,48\"\n[topology]\npolicy = \"single-numa-node\"\n",
    )
    .unwrap();
    let devices = dir.path().join("devices.json");
    std::fs::write(
        &devices,
        r#"{"t/gpu/c": [{"id": "/dev/nvidia1", "numa": 1}],
            "t/split/c": [{"id": "/dev/nvidia0", "numa": 0}, {"id": "/dev/nvidia1", "numa": 1}]}"#,
    )
    .unwrap();
    let root = fixture("2s-24c-ht");
    let pods = format!(
        "{}{}",
        pod_yaml("gpu", &[], &[("c", "4")]),
        pod_yaml("split", &[], &[("c", "2")])
    );
    let args = |devices: &Path| {
        vec![
            "plan".to_string(),
            "--sysfs-root".into(),
            root.to_str().unwrap().into(),
            "--config".into(),
            cfg.to_str().unwrap().into(),
            "--devices".into(),
            devices.to_str().unwrap().into(),
            "--pods".into(),
            "-".into(),
        ]
    };
    let argv = args(&devices);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let (code, out, err) = topolet(&argv, &pods);
    assert_eq!(code, 0, "{err}");
    let got: Value = serde_json::from_str(&out).unwrap();
    let topo = discover(&root).unwrap();
    let gpu = &got["containers"][0];
    assert_eq!(gpu["numa_affinity"], "1", "{gpu}");
    let cpus = CpuSet::parse(gpu["cpuset"].as_str().unwrap()).unwrap();
    assert_eq!(cpus.len(), 4);
    assert!(cpus.is_subset(&topo.numa_cpus(1)), "{cpus}");
    assert_eq!(gpu["observed_devices"][0]["id"], "/dev/nvidia1");
    assert_eq!(gpu["observed_devices"][0]["source"], "device-node");
    let split = &got["containers"][1];
    assert_eq!(split["admitted"], false, "{split}");
    assert!(
        split["error"]
            .as_str()
            .unwrap()
            .contains("policy single-numa-node"),
        "{split}"
    );

    std::fs::write(&devices, r#"{"gpu": []}"#).unwrap();
    let (code, _, err) = topolet(&argv, &pods);
    assert_ne!(code, 0);
    assert!(
        err.contains("devices.json") && err.contains("namespace/pod/container"),
        "{err}"
    );
}
