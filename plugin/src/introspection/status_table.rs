//! The human table of `topolet status` (`-o table`, the default): one section per concern,
//! aligned columns, no blank cells, rendered from the core's [`Status`] data.

use std::fmt::Write as _;

use topolet_core::machine::cpuset::CpuSet;
use topolet_core::report::status::Status;

/// A byte count in binary units, one decimal (`1.5 GiB`).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `-` for an empty set, so that no column is blank.
fn set_or_dash(s: &CpuSet) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// `cpus (n)`: the list and its size.
fn set_count(s: &CpuSet) -> String {
    if s.is_empty() {
        "- (0)".into()
    } else {
        format!("{s} ({})", s.len())
    }
}

fn list<T: ToString>(v: &[T]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.iter().map(T::to_string).collect::<Vec<_>>().join(",")
}

/// Left-aligned columns separated by two spaces; trailing spaces trimmed.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            } else {
                widths.push(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            l.push_str(cell);
            if i + 1 < cells.len() {
                l.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers.to_vec(), &mut out);
    for row in rows {
        line(row.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

/// The human report: one section per concern, aligned columns, no blank cells.
/// The reclaimed-CPU section: the state, the formula's terms for the node and each NUMA node (so
/// the amount can be checked by hand), the budget, and a row per batch pod.
fn render_reclaimed(out: &mut String, r: &topolet_core::reclaimed::ReclaimedStatus) {
    let _ = writeln!(out, "reclaimed CPU ({}): {}", r.resource, r.state);
    if r.state == "off" {
        out.push('\n');
        return;
    }
    let _ = writeln!(
        out,
        "  node: {} (regular usage: {}, the window's peak or percentile)",
        r.node, r.usage
    );
    if !r.reserved_rule.is_empty() {
        let _ = writeln!(out, "  reserved CPUs: {} ({})", r.reserved, r.reserved_rule);
    }
    if !r.cpu_time.is_empty() {
        let _ = writeln!(out, "  CPU busy time from: {}", r.cpu_time);
    }
    for z in &r.zones {
        match z.advertised_millis {
            Some(a) => {
                let _ = writeln!(out, "  NUMA {}: {} (advertised {a}m)", z.numa_node, z.terms);
            }
            None => {
                let _ = writeln!(out, "  NUMA {}: {}", z.numa_node, z.terms);
            }
        }
    }
    let _ = writeln!(
        out,
        "  advertised {}; batch budget {}m (regular now {}m), batch used {}m",
        r.advertised_millis
            .map_or_else(|| "nothing yet".to_string(), |a| format!("{a}m")),
        r.budget_millis,
        r.regular_now_millis,
        r.batch_used_millis
    );
    for p in &r.problems {
        let _ = writeln!(out, "  ! {p}");
    }
    if !r.batch.is_empty() {
        let rows: Vec<Vec<String>> = r
            .batch
            .iter()
            .map(|b| {
                vec![
                    b.pod.clone(),
                    format!("{}m", b.request_millis),
                    format!("{}m", b.limit_millis),
                    format!("{}m", b.granted_millis),
                    format!(
                        "{}m{}",
                        b.average_granted_millis,
                        if b.starved { " (starved)" } else { "" }
                    ),
                ]
            })
            .collect();
        out.push_str(&table(
            &["BATCH POD", "REQUEST", "LIMIT", "GRANTED", "AVERAGE"],
            &rows,
        ));
    }
    out.push('\n');
}

pub fn render_table(s: &Status) -> String {
    let mut out = String::new();
    let nri = &s.nri;
    let runtime = match (&nri.runtime, &nri.runtime_version) {
        (Some(n), Some(v)) => format!("{n} {v}"),
        (Some(n), None) => n.clone(),
        _ => "unknown runtime".into(),
    };
    let _ = writeln!(
        out,
        "topolet {}   NRI {} ({runtime}, {} connects, {} reconnects){}",
        s.version,
        nri.state,
        nri.connects,
        nri.reconnects,
        if nri.synchronized { "" } else { "   NOT READY" }
    );
    if let Some(e) = &nri.last_error {
        let _ = writeln!(out, "last NRI error: {e}");
    }
    let p = &s.policies;
    let _ = writeln!(
        out,
        "policies: cpu {}, topology {} (scope {}), memory {}",
        p.cpu, p.topology, p.topology_scope, p.memory
    );
    let m = &s.machine;
    let numa_count = s.numa_nodes.len();
    let _ = writeln!(
        out,
        "machine: {} sockets, {} NUMA nodes, {} cores, {} cpus ({} threads/core), {} L3 groups, {} memory",
        m.sockets.len(),
        numa_count,
        m.cores,
        m.cpus,
        m.threads_per_core,
        m.l3_groups.len(),
        human_bytes(m.memory_bytes)
    );
    out.push('\n');

    let rows: Vec<Vec<String>> = m
        .sockets
        .iter()
        .map(|so| {
            let l3: Vec<usize> = m
                .l3_groups
                .iter()
                .filter(|g| g.cpus.is_subset(&so.cpus))
                .map(|g| g.id)
                .collect();
            vec![
                so.id.to_string(),
                list(&so.numa_nodes),
                so.cores.to_string(),
                so.cpus.to_string(),
                list(&l3),
            ]
        })
        .collect();
    out.push_str(&table(
        &["SOCKET", "NUMA", "CORES", "CPUS", "L3 GROUPS"],
        &rows,
    ));
    out.push('\n');

    let rows: Vec<Vec<String>> = s
        .numa_nodes
        .iter()
        .map(|n| {
            let mut extra: Vec<String> = n
                .free_resources
                .iter()
                .map(|(k, v)| {
                    if k == "memory" || k.starts_with("hugepages-") {
                        format!("{k}={}", human_bytes(*v))
                    } else {
                        format!("{k}={v}")
                    }
                })
                .collect();
            if extra.is_empty() {
                extra.push("-".into());
            }
            vec![
                n.id.to_string(),
                n.cpus.to_string(),
                human_bytes(n.memory_bytes),
                set_or_dash(&n.reserved),
                set_count(&n.shared),
                set_count(&n.exclusive),
                set_count(&n.free),
                set_count(&n.free_whole_cores),
                set_count(&n.largest_l3_block),
                extra.join(" "),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "NUMA",
            "CPUS",
            "MEMORY",
            "RESERVED",
            "SHARED",
            "EXCLUSIVE",
            "FREE",
            "FREE WHOLE CORES",
            "LARGEST L3 BLOCK",
            "OTHER FREE",
        ],
        &rows,
    ));
    out.push('\n');

    let _ = writeln!(
        out,
        "shared pool: {} (mems {})   reserved: {}   managed containers: {}   left alone: {}",
        set_count(&s.shared.cpus),
        if s.shared.mems.is_empty() {
            "-"
        } else {
            &s.shared.mems
        },
        set_or_dash(&s.reserved),
        s.managed_containers,
        s.left_alone_containers
    );
    if s.left_alone_containers > 0 {
        let _ = writeln!(
            out,
            "  ! {} container(s) had a cpuset before topolet saw them (the kubelet's static CPU manager, or an NRI plugin with a lower index, e.g. dra-driver-cpu): their CPUs, memory nodes and cgroup values are that owner's, and topolet's books do not hold them",
            s.left_alone_containers
        );
    }
    out.push('\n');
    if !s.admissions.is_empty() {
        let api = s
            .admissions
            .iter()
            .filter(|a| a.source == topolet_core::placement::admission_input::Source::Api)
            .count();
        let _ = writeln!(
            out,
            "admissions: {api} from the pod's spec (API), {} from the inversion",
            s.admissions.len() - api
        );
    }

    if s.exclusive.is_empty() {
        out.push_str("exclusive: none\n");
    } else {
        let rows: Vec<Vec<String>> = s
            .exclusive
            .iter()
            .map(|e| {
                vec![
                    e.name.clone(),
                    list(&e.numa_nodes),
                    set_count(&e.cpus),
                    e.mems.clone().unwrap_or_else(|| "-".into()),
                    e.id.as_deref().map(short_id).unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        out.push_str(&table(
            &["EXCLUSIVE CONTAINER", "NUMA", "CPUS", "MEMS", "ID"],
            &rows,
        ));
    }
    out.push('\n');

    render_devices(&mut out, &s.devices);

    // One line per container that may run on another's exclusive CPUs, while it lasts.
    for b in &s.breaches {
        let _ = writeln!(
            out,
            "BREACH: {} ({}) may run on CPU {} held exclusively by {}, since {} ({:.1} s): its update is not applied yet",
            b.container,
            short_id(&b.id),
            b.cpus,
            b.holders.join(", "),
            b.since,
            b.seconds
        );
    }
    if !s.breaches.is_empty() {
        out.push('\n');
    }
    if let Some(r) = &s.reclaimed {
        render_reclaimed(&mut out, r);
    }

    match &s.pressure {
        None => out.push_str("pressure: not reported (no eviction loop running)\n"),
        Some(p) => {
            let on: Vec<&str> = p
                .conditions
                .iter()
                .filter(|(_, &v)| v)
                .map(|(k, _)| k.as_str())
                .collect();
            let _ = writeln!(
                out,
                "pressure: {}",
                if on.is_empty() {
                    "none".to_string()
                } else {
                    on.join(", ")
                }
            );
            if !p.signals.is_empty() {
                let rows: Vec<Vec<String>> = p
                    .signals
                    .iter()
                    .map(|sig| {
                        let th = |k: &str| {
                            sig.thresholds
                                .get(k)
                                .map(|v| signal_value(&sig.signal, *v))
                                .unwrap_or_else(|| "-".into())
                        };
                        vec![
                            sig.signal.clone(),
                            sig.value
                                .map(|v| signal_value(&sig.signal, v))
                                .unwrap_or_else(|| "-".into()),
                            th("hard"),
                            th("soft"),
                        ]
                    })
                    .collect();
                out.push_str(&table(&["SIGNAL", "VALUE", "HARD", "SOFT"], &rows));
            }
            if !p.stall.is_empty() {
                let some: Vec<String> = p
                    .stall
                    .iter()
                    .filter(|x| x.kind == "some")
                    .map(|x| format!("{} {:.2}%", x.resource, x.avg10))
                    .collect();
                let _ = writeln!(out, "stall (PSI some, avg10): {}", some.join(", "));
            }
            if let Some(r) = &p.node_reclaim {
                let _ = writeln!(
                    out,
                    "node reclaim: {} ({}): {} images ({}), {} containers, {} sandboxes; {} so far",
                    r.signal,
                    r.result,
                    r.images,
                    human_bytes(r.image_bytes),
                    r.containers,
                    r.sandboxes,
                    r.total
                );
            }
        }
    }
    if let Some(p) = &s.pod_resources {
        let _ = writeln!(
            out,
            "kubelet pod resources: {} ({}, wait {} ms): {}",
            p.state, p.socket, p.wait_ms, p.note
        );
        if let Some(e) = &p.last_error {
            let _ = writeln!(out, "  last error: {e}");
        }
    }
    if let Some(x) = &s.pod_resources_export {
        let _ = writeln!(
            out,
            "pod resources re-export: {} ({}): the kubelet's answers with topolet's exclusive \
             cpus and pinned memory",
            x.state, x.socket
        );
        if let Some(e) = &x.error {
            let _ = writeln!(out, "  error: {e}");
        }
    }
    if let Some(r) = &s.resource_slices {
        let _ = writeln!(
            out,
            "dra resource slices of node {} (read as {}): {}, {} slices, {} devices",
            r.node, r.read_as, r.state, r.slices, r.devices
        );
        if let Some(e) = &r.last_error {
            let _ = writeln!(out, "  last error: {e}");
        }
    }
    if let Some(a) = &s.metrics_address {
        let _ = writeln!(out, "metrics: http://{a}/metrics");
    }
    out
}

/// Containers given devices: which devices, from which source, on which NUMA nodes, and where
/// that pulled their CPUs and memory (nothing when no container holds devices).
fn render_devices(out: &mut String, devices: &[topolet_core::report::status::ContainerDevices]) {
    if devices.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|c| {
            let each: Vec<String> = c
                .devices
                .iter()
                .map(|d| match (d.numa, &d.numa_unknown) {
                    (Some(n), _) => format!("{} (numa {n})", d.id),
                    (None, Some(why)) => format!("{} (numa unknown: {why})", d.id),
                    (None, None) => format!("{} (no numa)", d.id),
                })
                .collect();
            let mut sources: Vec<&str> = c.devices.iter().map(|d| d.source.as_str()).collect();
            sources.sort_unstable();
            sources.dedup();
            vec![
                c.name.clone(),
                each.join(", "),
                sources.join(","),
                list(&c.device_numa_nodes),
                c.numa_affinity.clone().unwrap_or_else(|| "-".into()),
                c.cpus
                    .as_ref()
                    .map(set_count)
                    .unwrap_or_else(|| "shared".into()),
                c.mems
                    .clone()
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "DEVICE CONTAINER",
            "DEVICES",
            "SOURCE",
            "DEVICE NUMA",
            "PULLED TO",
            "CPUS",
            "MEMS",
        ],
        &rows,
    ));
    out.push('\n');
}

/// A container id as `crictl` shows it: its first 13 characters.
fn short_id(id: &str) -> String {
    id.chars().take(13).collect()
}

/// A signal value in its unit: bytes for memory and filesystem space, a plain count otherwise.
fn signal_value(signal: &str, v: f64) -> String {
    let is_bytes = signal.starts_with("memory.")
        || signal.ends_with("fs.available")
        || signal == "nodefs.available";
    if is_bytes && v >= 0.0 && v.is_finite() {
        human_bytes(v as u64)
    } else if v.fract() == 0.0 && v.is_finite() {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use topolet_core::report::status::fixtures::{input, machine, GIB};
    use topolet_core::report::status::{build, NodeReclaim, Pressure, Signal, Stall};

    #[test]
    fn the_reclaimed_section_prints_the_formula_and_each_batch_pod() {
        use topolet_core::reclaimed::{BatchStatus, ReclaimedStatus, Terms, ZoneTerms};
        let t = machine();
        let mut s = build(&t, input(&t));
        let terms = Terms::compute(1000, 210, 20);
        s.reclaimed = Some(ReclaimedStatus {
            state: "on".into(),
            resource: "topolet.io/reclaimed-cpu".into(),
            usage: "cpus".into(),
            node: terms,
            zones: vec![ZoneTerms {
                numa_node: 0,
                terms,
                advertised_millis: Some(590),
            }],
            advertised_millis: Some(590),
            budget_millis: 600,
            batch_used_millis: 420,
            regular_now_millis: 200,
            batch: vec![BatchStatus {
                pod: "default/batch".into(),
                request_millis: 600,
                limit_millis: 600,
                granted_millis: 590,
                average_granted_millis: 250,
                starved: true,
            }],
            reserved: topolet_core::reclaimed::Spill::compute(
                topolet_core::reclaimed::UsageSource::Cpus,
                1000,
                1000,
                20,
            ),
            reserved_rule: topolet_core::reclaimed::spill::RULE_CPUS.into(),
            cpu_time: "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage_percpu (run time per CPU, exact)".into(),
            problems: vec!["pod default/mixed asks for topolet.io/reclaimed-cpu but is not batch: container \"b\" asks for both".into()],
        });
        let text = render_table(&s);
        assert!(
            text.contains("reclaimed CPU (topolet.io/reclaimed-cpu): on\n  node: pool 1000m − regular 210m − margin 200m = 590m"),
            "{text}"
        );
        assert!(
            text.contains(
                "  NUMA 0: pool 1000m − regular 210m − margin 200m = 590m (advertised 590m)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "\n  ! pod default/mixed asks for topolet.io/reclaimed-cpu but is not batch"
            ),
            "{text}"
        );
        assert!(
            text.contains("advertised 590m; batch budget 600m"),
            "{text}"
        );
        assert!(
            text.contains("\n  CPU busy time from: /sys/fs/cgroup/cpu,cpuacct/cpuacct.usage_percpu (run time per CPU, exact)\n"),
            "{text}"
        );
        let row = text
            .lines()
            .find(|l| l.starts_with("default/batch"))
            .unwrap_or_default();
        assert!(
            row.contains("590m") && row.ends_with("250m (starved)"),
            "{row}"
        );
        // Off: one line, no terms.
        if let Some(r) = s.reclaimed.as_mut() {
            r.state = "off".into();
        }
        assert!(!render_table(&s).contains("node: pool"));
    }

    #[test]
    fn table_is_aligned_and_has_every_section() {
        let t = machine();
        let mut inp = input(&t);
        inp.pressure = Some(Pressure {
            conditions: BTreeMap::from([
                ("MemoryPressure".into(), true),
                ("PIDPressure".into(), false),
            ]),
            signals: vec![Signal {
                signal: "memory.available".into(),
                value: Some((512u64 << 20) as f64),
                thresholds: BTreeMap::from([("hard".into(), (100u64 << 20) as f64)]),
            }],
            stall: vec![Stall {
                resource: "memory".into(),
                kind: "some".into(),
                avg10: 1.5,
                ..Stall::default()
            }],
            node_reclaim: Some(NodeReclaim {
                signal: "imagefs.available".into(),
                result: "relieved".into(),
                images: 3,
                image_bytes: 3 << 20,
                containers: 1,
                sandboxes: 0,
                total: 2,
            }),
        });
        let text = render_table(&build(&t, inp));
        assert!(text.starts_with(
            "topolet 0.1.0   NRI Synchronized (containerd v2.2.7, 2 connects, 1 reconnects)\n"
        ));
        assert!(text.contains("machine: 1 sockets, 2 NUMA nodes, 8 cores, 16 cpus (2 threads/core), 4 L3 groups, 16.0 GiB memory"), "{text}");
        // Header and rows of the NUMA table share column starts.
        let lines: Vec<&str> = text.lines().collect();
        let header = lines.iter().position(|l| l.starts_with("NUMA ")).unwrap();
        let col = lines[header].find("FREE WHOLE CORES").unwrap();
        for row in &lines[header + 1..header + 3] {
            let before = &row[..col];
            assert!(before.ends_with("  "), "{row:?} misaligned at {col}");
            assert_ne!(row.as_bytes()[col], b' ', "{row:?}");
        }
        assert!(
            lines[header + 1].starts_with("0     0-3,8-11"),
            "{}",
            lines[header + 1]
        );
        assert!(lines[header + 1].contains("memory=3.0 GiB"));
        assert!(text.contains("default/web-0/app"));
        assert!(
            text.contains("0123456789abc\n"),
            "id shortened to 13: {text}"
        );
        assert!(text.contains("uid-db/pg"));
        assert!(text.contains("pressure: MemoryPressure\n"), "{text}");
        assert!(
            text.contains("memory.available  512.0 MiB  100.0 MiB  -"),
            "{text}"
        );
        assert!(
            text.contains("stall (PSI some, avg10): memory 1.50%\n"),
            "{text}"
        );
        assert!(
            text.contains("node reclaim: imagefs.available (relieved): 3 images (3.0 MiB), 1 containers, 0 sandboxes; 2 so far\n"),
            "{text}"
        );
        assert!(text.contains("metrics: http://127.0.0.1:9464/metrics"));
        for l in text.lines() {
            assert_eq!(l, l.trim_end(), "trailing spaces in {l:?}");
        }
    }

    #[test]
    fn table_without_pressure_or_exclusive_says_so() {
        let t = machine();
        let mut inp = input(&t);
        inp.snapshot.exclusive.clear();
        inp.nri.synchronized = false;
        inp.nri.state = "Connecting".into();
        inp.nri.runtime = None;
        inp.metrics_address = None;
        let text = render_table(&build(&t, inp));
        assert!(
            text.contains("NRI Connecting (unknown runtime, 2 connects, 1 reconnects)   NOT READY")
        );
        assert!(text.contains("exclusive: none\n"));
        assert!(text.contains("pressure: not reported"));
        assert!(!text.contains("metrics:"));
    }

    #[test]
    fn a_breach_prints_a_line_naming_the_container_its_cpus_and_since_when() {
        let t = machine();
        let mut inp = input(&t);
        let text = render_table(&build(&t, inp.clone()));
        assert!(!text.contains("BREACH"), "{text}");
        inp.snapshot.breaches = vec![topolet_core::report::status::BreachStatus {
            container: "default/bu/app".into(),
            id: "0123456789abcdef".into(),
            cpus: topolet_core::report::status::fixtures::set("1,9"),
            holders: vec!["default/web-0/app".into()],
            since: "2025-01-02T03:04:05Z".into(),
            seconds: 70.5,
        }];
        let text = render_table(&build(&t, inp));
        assert!(
            text.contains("BREACH: default/bu/app (0123456789abc) may run on CPU 1,9 held exclusively by default/web-0/app, since 2025-01-02T03:04:05Z (70.5 s)"),
            "{text}"
        );
    }

    /// A container given devices gets a row: each device with its NUMA node, the source, and
    /// where its CPUs and memory were pulled to; nothing is printed when none has devices.
    #[test]
    fn a_container_given_devices_gets_a_row() {
        use topolet_core::kube::container_key::ContainerKey;
        use topolet_core::managers::observed_devices::{DeviceSource, ObservedDevice};
        use topolet_core::managers::topology::hints::NumaMask;
        let t = machine();
        let mut inp = input(&t);
        let text = render_table(&build(&t, inp.clone()));
        assert!(!text.contains("DEVICE CONTAINER"), "{text}");
        let dev = |id: &str, numa| ObservedDevice {
            source: DeviceSource::DeviceNode,
            id: id.into(),
            numa,
            numa_unknown: None,
        };
        inp.snapshot.devices = vec![topolet_core::report::status::DevicesInput {
            key: ContainerKey::new("uid-gpu", "train"),
            pod_ref: Some("ml/gpu-0".into()),
            id: Some("fedcba9876543210".into()),
            devices: vec![dev("/dev/nvidia1", Some(1)), dev("/dev/nvidiactl", None)],
            affinity: NumaMask::single(1),
            cpus: Some(topolet_core::report::status::fixtures::set("4-5")),
            mems: NumaMask::single(1),
        }];
        let status = build(&t, inp);
        assert_eq!(status.devices[0].device_numa_nodes, vec![1]);
        let text = render_table(&status);
        let header = text
            .lines()
            .position(|l| l.starts_with("DEVICE CONTAINER"))
            .expect("the devices table");
        let row = text.lines().nth(header + 1).expect("a row");
        let cells: Vec<&str> = row
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            cells,
            vec![
                "ml/gpu-0/train",
                "/dev/nvidia1 (numa 1), /dev/nvidiactl (no numa)",
                "device-node",
                "1",
                "1",
                "4-5 (2)",
                "1"
            ],
            "{text}"
        );
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(64 * GIB), "64.0 GiB");
    }
}
