//! Topology discovery against the sysfs machine trees (`topolet_testkit::sysfs`: generated at
//! build time by `hack/gen-sysfs-fixtures.py`, plus the captured CI host): each machine's shape,
//! agreement with `SyntheticSpec` where the shapes coincide, and malformed trees built in temp
//! dirs failing with the path named.

// Test code throughout: clippy's `allow-unwrap-in-tests` (clippy.toml) covers the #[test]
// functions, not the helpers they share here.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use topolet::host::sysfs::{
    discover, discover_with_memory, read_machine, read_meminfo_total, DiscoveryError, SysfsError,
};
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::{SyntheticSpec, Topology};

const KIB: u64 = 1024;
const MIB2: u64 = 2 << 20;
const GIB: u64 = 1 << 30;

use topolet_testkit::sysfs::fixture;

fn load(name: &str) -> Topology {
    match discover(&fixture(name)) {
        Ok(t) => t,
        Err(e) => panic!("{name}: {e}"),
    }
}

/// The shape every fixture is checked for.
struct Shape {
    cpus: &'static str,
    cores: usize,
    threads_per_core: usize,
    sockets: Vec<usize>,
    nodes: Vec<(usize, &'static str)>,
    l3: usize,
    memory_kb: Vec<u64>,
    /// (a, b, distance)
    distances: Vec<(usize, usize, u32)>,
    /// node → (page size → count)
    hugepages: Vec<(usize, Vec<(u64, u64)>)>,
    devices: Vec<(&'static str, Option<usize>)>,
}

fn check(name: &str, t: &Topology, s: &Shape) {
    assert_eq!(t.cpus().to_string(), s.cpus, "{name}: cpus");
    assert_eq!(t.num_cpus(), t.cpus().len(), "{name}");
    assert_eq!(t.num_cores(), s.cores, "{name}: cores");
    assert_eq!(t.max_threads_per_core(), s.threads_per_core, "{name}");
    assert_eq!(t.socket_ids().collect::<Vec<_>>(), s.sockets, "{name}");
    let nodes: Vec<(usize, String)> = t.numa_nodes().map(|n| (n.id, n.cpus.to_string())).collect();
    let want: Vec<(usize, String)> = s.nodes.iter().map(|(i, c)| (*i, c.to_string())).collect();
    assert_eq!(nodes, want, "{name}: nodes");
    assert_eq!(t.num_l3(), s.l3, "{name}: l3 groups");
    let mem: Vec<u64> = t.numa_nodes().map(|n| n.memory_bytes).collect();
    let want: Vec<u64> = s.memory_kb.iter().map(|kb| kb * KIB).collect();
    assert_eq!(mem, want, "{name}: node memory");
    assert_eq!(t.memory_capacity(), want.iter().sum::<u64>(), "{name}");
    for &(a, b, d) in &s.distances {
        assert_eq!(t.distance(a, b), d, "{name}: distance {a}→{b}");
    }
    for (node, pages) in &s.hugepages {
        let got = &t.numa_node(*node).unwrap().hugepages;
        let want: BTreeMap<u64, u64> = pages.iter().copied().collect();
        assert_eq!(got, &want, "{name}: hugepages of node {node}");
    }
    let devices: Vec<(&str, Option<usize>)> = t
        .devices()
        .iter()
        .map(|d| (d.address.as_str(), d.numa))
        .collect();
    assert_eq!(devices, s.devices, "{name}: devices");
    // Partition invariants.
    let mut seen = CpuSet::new();
    for core in t.cores() {
        assert!(core.is_disjoint(&seen), "{name}: cores overlap");
        seen.extend_from(core);
    }
    assert_eq!(&seen, t.cpus(), "{name}: cores cover every cpu");
    assert!(t.warnings().is_empty(), "{name}: {:?}", t.warnings());
}

#[test]
fn ci_host_1s2c() {
    let t = load("ci-host-1s2c");
    check(
        "ci-host-1s2c",
        &t,
        &Shape {
            cpus: "0-1",
            cores: 2,
            threads_per_core: 1,
            sockets: vec![0],
            nodes: vec![(0, "0-1")],
            l3: 1,
            memory_kb: vec![8743124],
            distances: vec![(0, 0, 10)],
            hugepages: vec![(0, vec![(MIB2, 0), (GIB, 0)])],
            devices: vec![
                ("0000:00:00.0", None),
                ("0000:00:01.0", Some(0)),
                ("0000:00:02.0", Some(0)),
                ("0000:00:03.0", Some(0)),
                ("0000:00:04.0", Some(0)),
                ("0000:00:05.0", Some(0)),
            ],
        },
    );
}

#[test]
fn ci_host_captured_matches_the_generated_shape() {
    let real = load("ci-host-captured");
    let generated = load("ci-host-1s2c");
    assert_eq!(real.cpus(), generated.cpus());
    assert_eq!(real.cores(), generated.cores());
    assert_eq!(real.l3_groups(), generated.l3_groups());
    assert_eq!(
        real.numa_nodes()
            .map(|n| n.cpus.clone())
            .collect::<Vec<_>>(),
        generated
            .numa_nodes()
            .map(|n| n.cpus.clone())
            .collect::<Vec<_>>()
    );
    assert!(real.memory_capacity() > GIB);
    assert!(real.warnings().is_empty());
}

#[test]
fn dual_socket_24_cores_ht() {
    let t = load("2s-24c-ht");
    check(
        "2s-24c-ht",
        &t,
        &Shape {
            cpus: "0-95",
            cores: 48,
            threads_per_core: 2,
            sockets: vec![0, 1],
            nodes: vec![(0, "0-23,48-71"), (1, "24-47,72-95")],
            l3: 2,
            memory_kb: vec![196581616, 198159208],
            distances: vec![(0, 0, 10), (0, 1, 21), (1, 0, 21), (1, 1, 10)],
            hugepages: vec![
                (0, vec![(MIB2, 512), (GIB, 4)]),
                (1, vec![(MIB2, 512), (GIB, 4)]),
            ],
            devices: vec![
                ("0000:00:1f.0", None),
                ("0000:17:00.0", Some(0)),
                ("0000:3b:00.0", Some(0)),
                ("0000:86:00.0", Some(1)),
            ],
        },
    );
    assert_eq!(t.siblings(0).to_string(), "0,48");
    assert_eq!(t.siblings(95).to_string(), "47,95");
    assert_eq!(t.socket_cpus(1).to_string(), "24-47,72-95");
    assert_eq!(t.l3_cpus(1), &t.socket_cpus(1));
}

#[test]
fn dual_socket_sub_numa_clustering() {
    let t = load("2s-snc2");
    check(
        "2s-snc2",
        &t,
        &Shape {
            cpus: "0-95",
            cores: 48,
            threads_per_core: 2,
            sockets: vec![0, 1],
            nodes: vec![
                (0, "0-11,48-59"),
                (1, "12-23,60-71"),
                (2, "24-35,72-83"),
                (3, "36-47,84-95"),
            ],
            // The L3 spans the socket, i.e. both of its nodes.
            l3: 2,
            memory_kb: vec![130343136, 132095084, 132072324, 132081100],
            distances: vec![(0, 1, 12), (0, 2, 21), (1, 3, 21), (2, 3, 12), (3, 3, 10)],
            hugepages: vec![
                (0, vec![(MIB2, 1024), (GIB, 8)]),
                (1, vec![(MIB2, 1024), (GIB, 0)]),
            ],
            devices: vec![
                ("0000:00:00.0", None),
                ("0000:16:00.0", Some(0)),
                ("0000:38:00.0", Some(1)),
                ("0000:97:00.0", Some(2)),
                ("0000:b8:00.0", Some(3)),
            ],
        },
    );
    assert_eq!(t.l3_cpus(0), &t.socket_cpus(0));
    assert_eq!(t.cpu(60).unwrap().numa, 1);
    assert_eq!(t.cpu(60).unwrap().socket, 0);
}

#[test]
fn one_socket_eight_l3_chiplets() {
    let t = load("1s-8l3-chiplets");
    check(
        "1s-8l3-chiplets",
        &t,
        &Shape {
            cpus: "0-127",
            cores: 64,
            threads_per_core: 2,
            sockets: vec![0],
            nodes: vec![(0, "0-127")],
            l3: 8,
            memory_kb: vec![527965512],
            distances: vec![(0, 0, 10)],
            hugepages: vec![(0, vec![(MIB2, 2048), (GIB, 16)])],
            devices: vec![
                ("0000:01:00.0", Some(0)),
                ("0000:41:00.0", Some(0)),
                ("0000:c0:00.0", None),
            ],
        },
    );
    for g in 0..8 {
        assert_eq!(
            t.l3_cpus(g).to_string(),
            format!("{}-{},{}-{}", 8 * g, 8 * g + 7, 64 + 8 * g, 64 + 8 * g + 7)
        );
    }
}

#[test]
fn eight_sockets_4096_cpus() {
    let t = load("8s-4096");
    let mem: Vec<u64> = (0..8)
        .map(|n| 1055807088 + if n == 0 { 0 } else { 1120392 + 4096 * n })
        .collect();
    let nodes: Vec<(usize, &'static str)> = (0..8usize)
        .map(|s| {
            let text = format!(
                "{}-{},{}-{}",
                256 * s,
                256 * s + 255,
                2048 + 256 * s,
                2048 + 256 * s + 255
            );
            (s, &*Box::leak(text.into_boxed_str()))
        })
        .collect();
    let mut devices = vec![("0000:00:00.0", None)];
    let addresses = [
        "0000:10:00.0",
        "0000:30:00.0",
        "0000:50:00.0",
        "0000:70:00.0",
        "0000:90:00.0",
        "0000:b0:00.0",
        "0000:d0:00.0",
        "0000:f0:00.0",
    ];
    devices.extend(addresses.iter().enumerate().map(|(s, a)| (*a, Some(s))));
    check(
        "8s-4096",
        &t,
        &Shape {
            cpus: "0-4095",
            cores: 2048,
            threads_per_core: 2,
            sockets: (0..8).collect(),
            nodes,
            l3: 128,
            memory_kb: mem,
            distances: vec![(0, 7, 21), (7, 0, 21), (3, 3, 10)],
            hugepages: (0..8).map(|n| (n, vec![(MIB2, 4096), (GIB, 32)])).collect(),
            devices,
        },
    );
    assert_eq!(t.l3_cpus(17).to_string(), "272-287,2320-2335");
    assert_eq!(t.siblings(4095).to_string(), "2047,4095");
}

#[test]
fn offline_cpus_are_skipped() {
    let t = load("offline-cpus");
    check(
        "offline-cpus",
        &t,
        &Shape {
            cpus: "0-5,7-8,10-13,15",
            cores: 7,
            threads_per_core: 2,
            sockets: vec![0, 1],
            nodes: vec![(0, "0-3,8,10-11"), (1, "4-5,7,12-13,15")],
            l3: 2,
            memory_kb: vec![32598628, 33023812],
            distances: vec![(0, 1, 21)],
            hugepages: vec![(0, vec![(MIB2, 128), (GIB, 0)])],
            devices: vec![("0000:03:00.0", Some(0)), ("0000:83:00.0", Some(1))],
        },
    );
    assert_eq!(t.siblings(1).to_string(), "1");
    assert_eq!(t.siblings(0).to_string(), "0,8");
    assert_eq!(t.siblings(7).to_string(), "7,15");
    assert!(t.cpu(6).is_none() && t.cpu(9).is_none() && t.cpu(14).is_none());
    assert_eq!(t.l3_cpus(1).to_string(), "4-5,7,12-13,15");
}

#[test]
fn no_numa_no_siblings_uses_the_fallbacks() {
    let root = fixture("no-numa-no-siblings");
    let raw = read_machine(&root).unwrap();
    assert!(raw.nodes.is_empty());
    assert!(raw
        .cpus
        .iter()
        .all(|c| c.die.is_none() && c.siblings.is_none() && c.l3.is_none()));
    let t = discover_with_memory(&root, Some(16 * GIB)).unwrap();
    check(
        "no-numa-no-siblings",
        &t,
        &Shape {
            cpus: "0-15",
            cores: 8,
            threads_per_core: 2,
            sockets: vec![0, 1],
            nodes: vec![(0, "0-15")],
            // One L3 group per (socket, node) without cache information.
            l3: 2,
            memory_kb: vec![16 * GIB / KIB],
            distances: vec![(0, 0, 10)],
            hugepages: vec![(0, vec![])],
            devices: vec![],
        },
    );
    // core_id 0 exists in both packages: grouped by (package, core_id).
    assert_eq!(t.siblings(0).to_string(), "0,8");
    assert_eq!(t.siblings(4).to_string(), "4,12");
    assert_eq!(discover(&root).unwrap().memory_capacity(), 0);
}

/// Fixture and `SyntheticSpec` describe the same machine: same CPU numbering, cores, L3 groups,
/// nodes and distances. Memory, hugepages and devices are the fixture's own (the spec has one
/// uniform memory size and no devices), so they are copied over before comparing.
#[test]
fn fixtures_match_synthetic_specs() {
    let spec =
        |sockets, numa_per_socket, l3_per_numa, cores_per_l3, threads_per_core| SyntheticSpec {
            sockets,
            numa_per_socket,
            l3_per_numa,
            cores_per_l3,
            threads_per_core,
            memory_per_node: 0,
        };
    for (name, spec) in [
        ("ci-host-1s2c", spec(1, 1, 1, 2, 1)),
        ("2s-24c-ht", spec(2, 1, 1, 24, 2)),
        ("2s-snc2", spec(2, 2, 1, 12, 2)),
        ("1s-8l3-chiplets", spec(1, 1, 8, 8, 2)),
        ("8s-4096", spec(8, 1, 16, 16, 2)),
    ] {
        let from_sysfs = read_machine(&fixture(name)).unwrap();
        let mut synthetic = spec.raw();
        assert_eq!(
            from_sysfs.cpus.iter().map(|c| c.id).collect::<Vec<_>>(),
            synthetic.cpus.iter().map(|c| c.id).collect::<Vec<_>>(),
            "{name}: cpu ids"
        );
        for (s, f) in synthetic.nodes.iter_mut().zip(&from_sysfs.nodes) {
            s.memory_bytes = f.memory_bytes;
            s.hugepages = f.hugepages.clone();
        }
        synthetic.devices = from_sysfs.devices.clone();
        if name == "2s-snc2" {
            // Real SNC hosts report one L3 per socket, the spec one per node: the only difference.
            let t = Topology::build(&from_sysfs).unwrap();
            for s in t.socket_ids() {
                assert!(t.l3_groups().contains(&t.socket_cpus(s)), "{name}");
            }
            for (s, f) in synthetic.cpus.iter_mut().zip(&from_sysfs.cpus) {
                s.l3 = f.l3.clone();
            }
        }
        assert_eq!(
            Topology::build(&from_sysfs).unwrap(),
            Topology::build(&synthetic).unwrap(),
            "{name}"
        );
    }
}

// ---- Malformed trees ----------------------------------------------------------------------------

/// A writable copy of the `offline-cpus` fixture (2 sockets, 2 nodes, CPUs 6, 9, 14 offline).
fn scratch() -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let dest = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &dest);
            } else {
                fs::copy(entry.path(), dest).unwrap();
            }
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    copy(&fixture("offline-cpus"), tmp.path());
    tmp
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn sysfs_err(root: &Path) -> SysfsError {
    match read_machine(root) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

/// The error names `rel` (under `root`) and says `what`.
fn assert_err(root: &Path, rel: &str, what: &str) {
    let e = sysfs_err(root);
    let path = root.join(rel);
    assert_eq!(e.path(), path, "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())), "{msg}");
    assert!(msg.contains(what), "{msg:?} should contain {what:?}");
    // And discovery reports the same.
    assert!(matches!(discover(root), Err(DiscoveryError::Sysfs(_))));
}

const CPU: &str = "devices/system/cpu";
const NODE: &str = "devices/system/node";

#[test]
fn scratch_tree_is_valid() {
    let tmp = scratch();
    assert_eq!(discover(tmp.path()).unwrap(), load("offline-cpus"));
}

#[test]
fn non_numeric_core_id() {
    let tmp = scratch();
    write(tmp.path(), &format!("{CPU}/cpu3/topology/core_id"), "x\n");
    let e = sysfs_err(tmp.path());
    assert_eq!(
        e.to_string(),
        format!(
            "{}/devices/system/cpu/cpu3/topology/core_id: expected an integer, found \"x\"",
            tmp.path().display()
        )
    );
}

#[test]
fn negative_core_id_and_empty_package_id() {
    let tmp = scratch();
    write(tmp.path(), &format!("{CPU}/cpu3/topology/core_id"), "-4\n");
    assert_err(
        tmp.path(),
        &format!("{CPU}/cpu3/topology/core_id"),
        "expected a non-negative id, found -4",
    );
    let tmp = scratch();
    write(
        tmp.path(),
        &format!("{CPU}/cpu2/topology/physical_package_id"),
        "",
    );
    assert_err(
        tmp.path(),
        &format!("{CPU}/cpu2/topology/physical_package_id"),
        "expected an integer, found \"\"",
    );
}

#[test]
fn bad_cpu_lists() {
    let tmp = scratch();
    write(tmp.path(), &format!("{CPU}/online"), "0-5,7-\n");
    assert_err(tmp.path(), &format!("{CPU}/online"), "expected a cpu list");

    let tmp = scratch();
    write(tmp.path(), &format!("{NODE}/node1/cpulist"), "4-5,x\n");
    assert_err(tmp.path(), &format!("{NODE}/node1/cpulist"), "\"4-5,x\"");

    let tmp = scratch();
    write(
        tmp.path(),
        &format!("{CPU}/cpu0/topology/thread_siblings_list"),
        "8-0\n",
    );
    assert_err(
        tmp.path(),
        &format!("{CPU}/cpu0/topology/thread_siblings_list"),
        "descending",
    );

    let tmp = scratch();
    write(
        tmp.path(),
        &format!("{CPU}/cpu0/cache/index3/shared_cpu_list"),
        "0-99999\n",
    );
    assert_err(
        tmp.path(),
        &format!("{CPU}/cpu0/cache/index3/shared_cpu_list"),
        "exceeds the limit",
    );
}

#[test]
fn missing_files() {
    let tmp = scratch();
    fs::remove_dir_all(tmp.path().join(format!("{CPU}/cpu3/topology"))).unwrap();
    assert_err(
        tmp.path(),
        &format!("{CPU}/cpu3/topology"),
        "missing, though cpu 3 is listed as online",
    );

    let tmp = scratch();
    fs::remove_dir_all(tmp.path().join(format!("{CPU}/cpu5"))).unwrap();
    assert_err(tmp.path(), &format!("{CPU}/cpu5/topology"), "missing");

    let tmp = scratch();
    fs::remove_file(tmp.path().join(format!("{CPU}/cpu4/topology/core_id"))).unwrap();
    let e = sysfs_err(tmp.path());
    assert!(matches!(e, SysfsError::Missing { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "{}/{CPU}/cpu4/topology/core_id: missing",
            tmp.path().display()
        )
    );

    let tmp = scratch();
    fs::remove_file(tmp.path().join(format!("{CPU}/online"))).unwrap();
    assert_err(tmp.path(), &format!("{CPU}/online"), "missing");

    for file in ["cpulist", "meminfo", "distance"] {
        let tmp = scratch();
        fs::remove_file(tmp.path().join(format!("{NODE}/node1/{file}"))).unwrap();
        assert_err(tmp.path(), &format!("{NODE}/node1/{file}"), "missing");
    }

    let tmp = scratch();
    fs::remove_file(tmp.path().join(format!("{NODE}/online"))).unwrap();
    assert_err(tmp.path(), &format!("{NODE}/online"), "missing");

    let tmp = scratch();
    fs::remove_file(
        tmp.path()
            .join(format!("{CPU}/cpu2/cache/index3/shared_cpu_list")),
    )
    .unwrap();
    assert_err(
        tmp.path(),
        &format!("{CPU}/cpu2/cache/index3/shared_cpu_list"),
        "missing",
    );
}

#[test]
fn cpu_in_two_nodes() {
    let tmp = scratch();
    write(
        tmp.path(),
        &format!("{NODE}/node1/cpulist"),
        "3-5,7,12-13,15\n",
    );
    assert_err(
        tmp.path(),
        &format!("{NODE}/node1/cpulist"),
        "cpu 3 is also listed by node 0",
    );
}

#[test]
fn node_meminfo_without_mem_total() {
    let tmp = scratch();
    write(
        tmp.path(),
        &format!("{NODE}/node0/meminfo"),
        "Node 0 MemFree:        29102835 kB\nNode 0 MemUsed:         3495793 kB\n",
    );
    assert_err(
        tmp.path(),
        &format!("{NODE}/node0/meminfo"),
        "no \"Node 0 MemTotal:\" line",
    );

    let tmp = scratch();
    write(
        tmp.path(),
        &format!("{NODE}/node1/meminfo"),
        "Node 0 MemTotal: 5 kB\n",
    );
    assert_err(
        tmp.path(),
        &format!("{NODE}/node1/meminfo"),
        "expected \"Node 1 MemTotal",
    );

    let tmp = scratch();
    write(
        tmp.path(),
        &format!("{NODE}/node1/meminfo"),
        "Node 1 MemTotal: lots kB\n",
    );
    assert_err(
        tmp.path(),
        &format!("{NODE}/node1/meminfo"),
        "expected \"<n> kB\"",
    );
}

#[test]
fn distance_row_of_wrong_length() {
    let tmp = scratch();
    write(tmp.path(), &format!("{NODE}/node1/distance"), "21 10 21\n");
    assert_err(
        tmp.path(),
        &format!("{NODE}/node1/distance"),
        "expected 2 distances (one per online node 0-1), found 3",
    );
    let tmp = scratch();
    write(tmp.path(), &format!("{NODE}/node0/distance"), "10 far\n");
    assert_err(
        tmp.path(),
        &format!("{NODE}/node0/distance"),
        "expected an integer, found \"far\"",
    );
}

#[test]
fn unreadable_files() {
    // A directory where a file belongs cannot be read, even by root (tests may run as root, where
    // permission bits do not stop reads).
    let tmp = scratch();
    let path = tmp.path().join(format!("{CPU}/cpu3/topology/core_id"));
    fs::remove_file(&path).unwrap();
    fs::create_dir(&path).unwrap();
    let e = sysfs_err(tmp.path());
    assert!(matches!(e, SysfsError::Unreadable { .. }), "{e}");
    assert_eq!(e.path(), path);
    assert!(e
        .to_string()
        .starts_with(&format!("{}: cannot read: ", path.display())));

    let tmp = scratch();
    let path = tmp.path().join(format!("{NODE}/node0/meminfo"));
    fs::write(&path, b"Node 0 MemTotal: \xff kB\n").unwrap();
    assert_err(
        tmp.path(),
        &format!("{NODE}/node0/meminfo"),
        "not valid utf-8",
    );
}

#[test]
fn hugepages_and_devices() {
    let tmp = scratch();
    write(
        tmp.path(),
        &format!("{NODE}/node0/hugepages/hugepages-2048kB/nr_hugepages"),
        "many\n",
    );
    assert_err(
        tmp.path(),
        &format!("{NODE}/node0/hugepages/hugepages-2048kB/nr_hugepages"),
        "expected a non-negative integer, found \"many\"",
    );

    let tmp = scratch();
    write(
        tmp.path(),
        &format!("{NODE}/node0/hugepages/hugepages-big/nr_hugepages"),
        "1\n",
    );
    assert_err(
        tmp.path(),
        &format!("{NODE}/node0/hugepages/hugepages-big"),
        "expected a directory named hugepages-<size>kB",
    );

    let tmp = scratch();
    write(tmp.path(), "bus/pci/devices/0000:03:00.0/numa_node", "-2\n");
    assert_err(
        tmp.path(),
        "bus/pci/devices/0000:03:00.0/numa_node",
        "expected a non-negative id, found -2",
    );

    // A device without numa_node (a non-NUMA kernel) has unknown locality.
    let tmp = scratch();
    fs::create_dir_all(tmp.path().join("bus/pci/devices/0000:00:02.0")).unwrap();
    let raw = read_machine(tmp.path()).unwrap();
    let dev = raw.devices.iter().find(|d| d.address == "0000:00:02.0");
    assert_eq!(dev.map(|d| d.numa), Some(None));
    // No hugepages dir: no hugepages.
    fs::remove_dir_all(tmp.path().join(format!("{NODE}/node1/hugepages"))).unwrap();
    let t = discover(tmp.path()).unwrap();
    assert!(t.numa_node(1).unwrap().hugepages.is_empty());
}

#[test]
fn non_x86_minus_one_ids_and_offline_garbage() {
    let tmp = scratch();
    // arm64 kernels: die_id -1 everywhere, physical_package_id -1 on some.
    for cpu in [0, 1, 2, 3, 4, 5, 7, 8, 10, 11, 12, 13, 15] {
        write(
            tmp.path(),
            &format!("{CPU}/cpu{cpu}/topology/die_id"),
            "-1\n",
        );
    }
    let raw = read_machine(tmp.path()).unwrap();
    assert!(raw.cpus.iter().all(|c| c.die.is_none()));
    write(
        tmp.path(),
        &format!("{CPU}/cpu0/topology/physical_package_id"),
        "-1\n",
    );
    assert_eq!(read_machine(tmp.path()).unwrap().cpus[0].package, 0);
    // Offline CPUs are never read, whatever their files say.
    write(
        tmp.path(),
        &format!("{CPU}/cpu9/topology/core_id"),
        "garbage\n",
    );
    assert!(discover(tmp.path()).is_ok());
    // A cache without a level-3 index: no L3 information for that CPU.
    fs::remove_dir_all(tmp.path().join(format!("{CPU}/cpu0/cache/index3"))).unwrap();
    assert!(read_machine(tmp.path()).unwrap().cpus[0].l3.is_none());
}

#[test]
fn cpu_missing_from_every_node_is_a_fallback_with_a_warning() {
    let tmp = scratch();
    write(tmp.path(), &format!("{NODE}/node0/cpulist"), "0-3,8\n"); // drops 10-11
    let t = discover(tmp.path()).unwrap();
    assert_eq!(t.numa_cpus(0).to_string(), "0-3,8,10-11");
    assert_eq!(t.warnings().len(), 2, "{:?}", t.warnings());
}

#[test]
fn inconsistent_files_name_the_root() {
    let tmp = scratch();
    // Each file is well-formed, together they are not: cpu 0 says it is not its own sibling.
    write(
        tmp.path(),
        &format!("{CPU}/cpu0/topology/thread_siblings_list"),
        "8\n",
    );
    let e = discover(tmp.path()).unwrap_err();
    assert!(matches!(e, DiscoveryError::Topology { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "{}: inconsistent topology: cpu 0: thread_siblings_list 8 does not contain the cpu itself",
            tmp.path().display()
        )
    );
}

#[test]
fn proc_meminfo_total() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("meminfo");
    fs::write(
        &path,
        "MemTotal:        9136340 kB\nMemFree:         3707320 kB\n",
    )
    .unwrap();
    assert_eq!(read_meminfo_total(&path).unwrap(), 9136340 * KIB);
    fs::write(&path, "MemFree: 1 kB\n").unwrap();
    let e = read_meminfo_total(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}: no \"MemTotal:\" line", path.display())
    );
    fs::write(&path, "MemTotal: 12\n").unwrap();
    assert!(read_meminfo_total(&path)
        .unwrap_err()
        .to_string()
        .contains("expected \"<n> kB\""));
}

/// The memory capacity is the kubelet's (`/proc/meminfo` `MemTotal`, kB × 1024, as cadvisor reads
/// it): a tree carrying `proc/meminfo` takes it from there, per-node sizes stay the nodes' own;
/// a captured tree without it falls back to the sum of the nodes.
#[test]
fn capacity_comes_from_proc_meminfo_under_the_root() {
    use topolet::host::sysfs::{capacity_source, discover_live, CapacitySource};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sys");
    copy_tree(&fixture("2s-24c-ht"), &root);
    let nodes = discover(&root).unwrap();
    assert_eq!(capacity_source(&root, false), CapacitySource::NodeSum);
    assert_eq!(nodes.memory_capacity(), nodes.numa_memory_total());
    fs::create_dir_all(root.join("proc")).unwrap();
    fs::write(
        root.join("proc/meminfo"),
        "MemTotal:       24684084 kB\nMemFree:         1000 kB\n",
    )
    .unwrap();
    for t in [discover(&root).unwrap(), discover_live(&root).unwrap()] {
        assert_eq!(t.memory_capacity(), 24684084 * KIB);
        assert_eq!(t.numa_memory_total(), nodes.numa_memory_total());
    }
    // The running machine without a tree-local meminfo: the host's /proc/meminfo.
    assert_eq!(
        capacity_source(&fixture("2s-24c-ht"), true),
        CapacitySource::Meminfo("/proc/meminfo".into())
    );
    assert_eq!(
        capacity_source(Path::new("/sys"), false),
        CapacitySource::Meminfo("/proc/meminfo".into())
    );
    // A malformed tree-local meminfo is an error naming it.
    fs::write(root.join("proc/meminfo"), "MemFree: 1 kB\n").unwrap();
    let e = discover(&root).unwrap_err().to_string();
    assert!(e.contains("proc/meminfo") && e.contains("MemTotal"), "{e}");
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), dest).unwrap();
        }
    }
}
