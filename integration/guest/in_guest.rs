//! The real-kernel suite: runs inside the QEMU guests of `hack/guest.sh`, one test per shape,
//! named like the shape (the guest's runner picks it with `--exact`). Each test first checks that
//! the kernel really has the shape's topology (sysfs), then drives containerd + runc + topolet
//! with kubelet-shaped pods (crictl) and reads what the kernel applied: cgroup v2 files, the
//! processes' `Cpus_allowed_list` / `Mems_allowed_list`, topolet's status, and `topolet plan` run
//! on the same sysfs. Outside a guest every test fails (TOPOLET_GUEST_SHAPE unset). Each step
//! prints the guest's uptime first (`[guest 123.4s] ...`), on the console too, so that a run that
//! is killed at its timeout shows where it was.

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use topolet_core::machine::cpuset::CpuSet;
use topolet_integration::cri::Created;
use topolet_integration::freeze::{shim_of, Frozen};
use topolet_integration::guest::{self, Driver, GUEST_WAIT};
use topolet_integration::kube::{ContainerSpec, PodSpec, Requirements};
use topolet_integration::topolet::metrics_text;
use topolet_integration::{observe, wait, Stack, Topolet, TopoletConfig};
use topolet_testkit::metrics_text::{parse_exposition, value};

const MIB: u64 = 1 << 20;

/// Prints `what` with the guest's uptime (progress and per-step time in the suite's log).
fn step(what: &str) {
    let up = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let up = up.split_whitespace().next().unwrap_or("?");
    eprintln!("[guest {up}s] {what}");
}

/// A stack and topolet in this guest. Fields drop in order: topolet before the stack, which is
/// left running (its logs kept): the guest powers off after the suite, and stopping a stack
/// under emulation takes about two minutes.
struct Guest {
    topolet: Topolet,
    stack: Stack,
    work: PathBuf,
    mem: u64,
    /// Pods created so far, in order, as Pod objects for `topolet plan`.
    plan_pods: Vec<Value>,
}

struct Running {
    c: Created,
    pid: i32,
    dir: PathBuf,
}

impl Guest {
    /// Checks the shape, starts the stack and topolet with `reserved` CPUs, `cpu_toml` lines in
    /// `[cpu]` and `extra` sections.
    fn boot(shape: &str, reserved: &str, cpu_toml: &str, extra: &str) -> Result<Guest> {
        let s = guest::shape()?;
        ensure!(s == shape, "this guest was booted as {s}, not {shape}");
        step("starting containerd");
        let stack = Stack::start()?;
        step("starting topolet");
        let work = stack.work_dir("topolet")?;
        let mut config = TopoletConfig::for_stack(&stack, &work);
        config.reserved_cpus = Some(reserved.into());
        config.cpu_toml = cpu_toml.into();
        config.extra_toml = extra.into();
        // The drift check every second: a container off its target is seen at once (snc4's
        // breach step).
        config.nri_toml = "drift_check_s = 1".into();
        let topolet = guest::start_topolet(&work, &config)?;
        Ok(Guest {
            topolet,
            stack,
            work,
            mem: observe::mem_capacity()?,
            plan_pods: Vec::new(),
        })
    }

    fn pod(&mut self, name: &str, r: Requirements) -> Result<(PodSpec, ContainerSpec)> {
        let (p, c) = guest::pod(&self.stack, name, r, self.mem)?;
        self.plan_pods.push(guest::pod_object(&p, &c));
        Ok((p, c))
    }

    /// A pod that must run.
    fn run(&mut self, name: &str, r: Requirements) -> Result<Running> {
        let (p, ctr) = self.pod(name, r)?;
        self.run_spec(&p, &ctr)
    }

    fn run_spec(&mut self, p: &PodSpec, ctr: &ContainerSpec) -> Result<Running> {
        step(&format!("pod {}", p.name));
        let cri = self.stack.cri();
        let c = cri.run_pod_with(p, ctr)?;
        let pid = cri.pid(&c.id)?;
        let dir = guest::container_cgroup(&c);
        ensure!(
            dir.is_dir(),
            "container cgroup {} is missing",
            dir.display()
        );
        Ok(Running { c, pid, dir })
    }

    /// A pod whose container must be refused; returns the error text.
    fn refuse(&mut self, name: &str, r: Requirements) -> Result<String> {
        let (p, ctr) = self.pod(name, r)?;
        step(&format!("pod {name} (to be refused)"));
        guest::refused(&self.stack, &p, &ctr)
    }

    /// The status, retried until topolet answers: under emulation (and while the kernel takes a
    /// CPU offline, which stops every vCPU) an answer can take longer than the client's 10 s.
    fn status(&mut self) -> Result<Value> {
        self.topolet
            .wait_status("an answer", GUEST_WAIT, |s| Some(s.clone()))
    }

    /// `topolet plan` of every pod created so far, on this guest's sysfs and topolet's config.
    fn plan(&self) -> Result<Vec<Value>> {
        step("topolet plan");
        guest::plan(self.topolet.config_path(), &self.plan_pods, &self.work)
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.stack.leave_running();
    }
}

fn file(dir: &std::path::Path, f: &str) -> Result<String> {
    guest::cgroup_file(dir, f)
}

fn same_cpus(a: &str, b: &str) -> Result<bool> {
    Ok(guest::parse_list(a)? == guest::parse_list(b)?)
}

fn expect_file(r: &Running, f: &str, want: &str) -> Result<()> {
    let got = file(&r.dir, f)?;
    ensure!(
        got == want,
        "{}/{f} = {got:?}, want {want:?}",
        r.dir.display()
    );
    Ok(())
}

/// An exclusive container: its cpuset is one NUMA node's, `cpuset.mems` and the process's
/// `Mems_allowed_list` are that node, `Cpus_allowed_list` the cpuset, the CFS quota removed in
/// the container and in its pod cgroup. Returns (cpus, node).
fn check_exclusive(g: &mut Guest, r: &Running) -> Result<(String, usize)> {
    let cpus = file(&r.dir, "cpuset.cpus")?;
    let node = guest::node_of_cpus(&cpus)?;
    expect_file(r, "cpuset.mems", &node.to_string())?;
    let allowed = guest::proc_status_field(r.pid, "Cpus_allowed_list")?;
    ensure!(
        same_cpus(&allowed, &cpus)?,
        "process {} runs on {allowed}, cgroup says {cpus}",
        r.pid
    );
    let mems = guest::proc_status_field(r.pid, "Mems_allowed_list")?;
    ensure!(
        mems == node.to_string(),
        "process {} may allocate on {mems}, want node {node}",
        r.pid
    );
    expect_file(r, "cpu.max", "max 100000")?;
    let pod = guest::pod_cgroup(&r.c.cgroup_parent);
    wait::until_true("the pod cgroup's cpu.max unlimited", GUEST_WAIT, || {
        Ok(file(&pod, "cpu.max")? == "max 100000")
    })?;
    let id = r.c.id.clone();
    let listed = g
        .topolet
        .wait_status("the container in the status", GUEST_WAIT, |s| {
            s["exclusive"]
                .as_array()?
                .iter()
                .find(|e| e["id"] == id.as_str())
                .cloned()
        })?;
    let books = listed["cpus"].as_str().unwrap_or_default().to_string();
    ensure!(
        same_cpus(&books, &cpus)?,
        "status books {books} for {id}, cgroup {cpus}"
    );
    Ok((cpus, node))
}

/// The plan's line for `name` agrees with what `run` did: admitted with `cpus` (and `mems`), or
/// refused with `error` (the kubelet's reason, which `run` prints CamelCase and `plan` in words:
/// `TopologyAffinityError` / "topology affinity error").
fn plan_agrees(plan: &[Value], name: &str, cpus: Option<&str>, error: Option<&str>) -> Result<()> {
    let l = guest::planned(plan, name)?;
    match (cpus, error) {
        (Some(cpus), _) => {
            ensure!(l["admitted"] == true, "plan refuses {name}: {l}");
            let p = l["cpuset"]
                .as_str()
                .with_context(|| format!("plan: no cpuset for {name}: {l}"))?;
            ensure!(
                same_cpus(p, cpus)?,
                "plan gives {name} {p}, run gave {cpus}"
            );
        }
        (None, Some(e)) => {
            ensure!(
                l["admitted"] == false,
                "plan admits {name}, run refused it: {l}"
            );
            let pe = l["error"].as_str().unwrap_or_default();
            let words = |t: &str| t.to_lowercase().replace(' ', "");
            ensure!(
                words(pe).contains(&words(e)),
                "plan's error for {name} is {pe:?}, want {e}"
            );
        }
        (None, None) => {}
    }
    Ok(())
}

/// The status's books of NUMA node memory equal the kernel's node sizes.
fn node_books_match(status: &Value, nodes: usize) -> Result<()> {
    let ns = status["numa_nodes"]
        .as_array()
        .context("status has no numa_nodes")?;
    ensure!(
        ns.len() == nodes,
        "status lists {} NUMA nodes, the guest has {nodes}",
        ns.len()
    );
    for (i, n) in ns.iter().enumerate() {
        let want = guest::node_mem_total(i)?;
        ensure!(
            n["memory_bytes"] == want,
            "node {i}: status memory_bytes {}, sysfs MemTotal {want}",
            n["memory_bytes"]
        );
    }
    Ok(())
}

/// `[eviction] memory.available` as topolet observed it, against the kubelet's formula on this
/// kernel's root `memory.stat` (the v2 root has no `memory.current`): MemTotal − (anon + file −
/// inactive_file). Both move as the guest runs; they must agree within 64 MiB.
fn memory_signal_matches(g: &mut Guest) -> Result<()> {
    ensure!(
        !std::path::Path::new("/sys/fs/cgroup/memory.current").exists(),
        "the v2 root cgroup has a memory.current here (a cgroup namespace?)"
    );
    let seen = g
        .topolet
        .wait_status("memory.available observed", GUEST_WAIT, |s| {
            s["pressure"]["signals"]
                .as_array()?
                .iter()
                .find(|x| x["signal"] == "memory.available")?["value"]
                .as_f64()
        })?;
    let stat =
        std::fs::read_to_string("/sys/fs/cgroup/memory.stat").context("reading memory.stat")?;
    let field = |k: &str| -> Result<f64> {
        stat.lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .with_context(|| format!("memory.stat has no {k}"))?
            .trim()
            .parse::<f64>()
            .with_context(|| format!("memory.stat {k}"))
    };
    let mine = g.mem as f64 - (field("anon")? + field("file")? - field("inactive_file")?);
    ensure!(
        (seen - mine).abs() < 64.0 * MIB as f64,
        "topolet's memory.available {seen} vs {mine} from /sys/fs/cgroup/memory.stat"
    );
    Ok(())
}

fn set_online(cpu: u32, on: bool) -> Result<()> {
    let p = format!("/sys/devices/system/cpu/cpu{cpu}/online");
    std::fs::write(&p, if on { "1" } else { "0" }).with_context(|| format!("writing {p}"))
}

/// The `some` total (µs) of a PSI file, read from the kernel.
fn kernel_stall_us(path: &std::path::Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let p = topolet::pressure::psi::parse(path, &text)?;
    Ok(p.some.total_us)
}

/// PSI from the real kernel: a pod whose page cache does not fit its `memory.max` reclaims on
/// every charge (a memory stall). topolet's eviction loop reads the node's and the pod's PSI
/// each interval: its node counter of memory `some` stall moves past its value before the hog,
/// its pod counter becomes positive, neither is ahead of the kernel's files read after the
/// scrape, and `topolet status` lists the node's lines.
fn pressure_moves(g: &mut Guest) -> Result<()> {
    step("PSI: memory hog");
    let addr = g.topolet.wait_metrics_address()?;
    let node_file = std::path::Path::new("/proc/pressure/memory");
    let scrape = |uid: Option<&str>| -> Result<Option<f64>> {
        let samples = parse_exposition(&metrics_text(&addr)?).map_err(anyhow::Error::msg)?;
        Ok(match uid {
            None => value(
                &samples,
                "topolet_pressure_stall_seconds_total",
                &[("resource", "memory"), ("kind", "some")],
            ),
            Some(u) => value(
                &samples,
                "topolet_pod_pressure_stall_seconds_total",
                &[("pod_uid", u), ("resource", "memory"), ("kind", "some")],
            ),
        })
    };
    let before = wait::until("the node's memory PSI in /metrics", GUEST_WAIT, || {
        scrape(None)
    })?;
    let (p, mut ctr) = g.pod(
        "hog",
        Requirements::burstable(100, None, 32 * MIB, Some(48 * MIB)),
    )?;
    ctr.command = [
        "/bin/sh",
        "-c",
        "dd if=/dev/zero of=/hog bs=1M count=128 2>/dev/null; while :; do cat /hog >/dev/null; done",
    ]
    .map(String::from)
    .to_vec();
    let hog = g.run_spec(&p, &ctr)?;
    let pod_file = guest::pod_cgroup(&hog.c.cgroup_parent).join("memory.pressure");
    let uid = p.uid.clone();
    let (node_seen, pod_seen) = wait::until(
        "memory stall counted for the node and the hog",
        GUEST_WAIT,
        || {
            let node = scrape(None)?.filter(|v| *v > before);
            let pod = scrape(Some(&uid))?.filter(|v| *v > 0.0);
            Ok(node.zip(pod))
        },
    )?;
    let node_kernel = kernel_stall_us(node_file)? as f64 / 1e6;
    let pod_kernel = kernel_stall_us(&pod_file)? as f64 / 1e6;
    ensure!(
        node_seen <= node_kernel && pod_seen <= pod_kernel,
        "topolet's stall counters ahead of the kernel: node {node_seen} > {node_kernel} or pod {pod_seen} > {pod_kernel} ({})",
        pod_file.display()
    );
    let s = g.status()?;
    let listed = s["pressure"]["stall"]
        .as_array()
        .context("status has no pressure.stall")?
        .iter()
        .find(|x| x["resource"] == "memory" && x["kind"] == "some")
        .and_then(|x| x["total_seconds"].as_f64())
        .context("status has no memory/some stall line")?;
    ensure!(
        listed >= node_seen && listed <= kernel_stall_us(node_file)? as f64 / 1e6,
        "status memory stall {listed} s, /metrics saw {node_seen} s"
    );
    Ok(())
}

/// 2 sockets × 2 cores × 2 threads, 2 NUMA nodes, cgroup v2, cgroupfs driver.
/// A slow runtime never parks a breach (the scene of a 4-NUMA guest whose containerd timed out
/// applying a shared-pool update): `b`'s shim is frozen, so no update of `b` can be applied, and
/// its cpuset is widened onto `holder_cpus` (another container's exclusive CPUs). topolet reports
/// the breach for as long as it lasts and keeps resending `b`'s target; once the shim thaws, its
/// retry puts `b` back on `shared`, without a reconnect.
fn breach_ends_by_retry(g: &mut Guest, b: &Running, shared: &str, holder_cpus: &str) -> Result<()> {
    step("breach: b's shim frozen, its cpuset widened onto an exclusive cpu");
    let connects = g.topolet.nri_connects()?;
    let mut wide = CpuSet::parse(shared)?;
    wide.extend_from(&CpuSet::parse(holder_cpus)?);
    let frozen = Frozen::freeze(shim_of(b.pid)?)?;
    std::fs::write(b.dir.join("cpuset.cpus"), wide.to_string())
        .with_context(|| format!("widening {}", b.dir.display()))?;
    wait::until_true("the breach reported for 8 s", GUEST_WAIT, || {
        let allowed = guest::proc_status_field(b.pid, "Cpus_allowed_list")?;
        let reported = g.topolet.breaches()?;
        Ok(same_cpus(&allowed, &wide.to_string())?
            && reported
                .iter()
                .any(|(id, cpus, seconds)| id == &b.c.id && cpus == holder_cpus && *seconds >= 8.0))
    })
    .with_context(|| format!("breaches {:?}", g.topolet.breaches().ok()))?;
    step("breach: b's shim thawed");
    drop(frozen);
    wait::until_true(
        "b back on the shared pool by topolet's retry",
        GUEST_WAIT,
        || {
            let allowed = guest::proc_status_field(b.pid, "Cpus_allowed_list")?;
            Ok(same_cpus(&file(&b.dir, "cpuset.cpus")?, shared)?
                && same_cpus(&allowed, shared)?
                && g.topolet.breaches()?.is_empty())
        },
    )
    .with_context(|| {
        format!(
            "breaches {:?}, b's cpuset.cpus {:?}",
            g.topolet.breaches().ok(),
            file(&b.dir, "cpuset.cpus").ok()
        )
    })?;
    ensure!(
        g.topolet.nri_connects()? == connects,
        "topolet reconnected: the breach was ended by a Synchronize, not by its retries"
    );
    Ok(())
}

#[test]
fn smt2numa() -> Result<()> {
    let extra = "[topology]\npolicy = \"single-numa-node\"\n\n[eviction]\nhard = { \"memory.available\" = \"100Mi\" }\ninterval = \"1s\"\nnodefs_path = \"/\"\nimagefs_path = \"/\"\n";
    let mut g = Guest::boot("smt2numa", "0-1,4-5", "full_pcpus_only = true", extra)?;
    ensure!(
        guest::node_cpus(0)? == "0-3" && guest::node_cpus(1)? == "4-7",
        "NUMA nodes are not 0-3 / 4-7"
    );
    ensure!(
        guest::thread_siblings(2)? == "2-3" && guest::thread_siblings(6)? == "6-7",
        "no SMT siblings 2-3, 6-7"
    );
    // Reserved 0-1 and 4-5 leave one free core per node: 4 CPUs are free but no node has 4.
    let e = g.refuse("four", Requirements::guaranteed(4000, 64 * MIB))?;
    ensure!(
        e.contains("TopologyAffinityError") && e.contains("single-numa-node"),
        "four: {e}"
    );
    let e = g.refuse("one", Requirements::guaranteed(1000, 64 * MIB))?;
    ensure!(e.contains("SMTAlignmentError"), "one: {e}");

    let a = g.run("a", Requirements::guaranteed(2000, 256 * MIB))?;
    let (cpus_a, node_a) = check_exclusive(&mut g, &a)?;
    let first_a = guest::parse_list(&cpus_a)?[0];
    ensure!(
        same_cpus(&guest::thread_siblings(first_a)?, &cpus_a)?,
        "a got {cpus_a}, not a whole core"
    );
    // cgroup v2 values as runc 1.3.6 writes them: weight from shares (2048 → 174).
    expect_file(&a, "cpu.weight", "174")?;
    expect_file(&a, "memory.max", &(256 * MIB).to_string())?;
    expect_file(&a, "pids.max", "1024")?;

    let b = g.run("b", Requirements::guaranteed(2000, 256 * MIB))?;
    let (cpus_b, node_b) = check_exclusive(&mut g, &b)?;
    ensure!(node_a != node_b, "a and b both on node {node_a}");

    let c = g.run(
        "c",
        Requirements::burstable(250, Some(500), 64 * MIB, Some(128 * MIB)),
    )?;
    expect_file(&c, "cpu.weight", "35")?;
    expect_file(&c, "cpu.max", "50000 100000")?;
    expect_file(&c, "memory.max", &(128 * MIB).to_string())?;
    expect_file(&c, "pids.max", "1024")?;
    let shared = g.status()?["shared"]["cpus"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure!(same_cpus(&shared, "0-1,4-5")?, "shared pool {shared}");
    ensure!(
        same_cpus(&file(&c.dir, "cpuset.cpus")?, &shared)?,
        "c is not on the shared pool"
    );
    // The kubelet never sets a shared container's cpuset.mems: every node stays allowed.
    expect_file(&c, "cpuset.mems", "")?;
    ensure!(
        guest::proc_status_field(c.pid, "Mems_allowed_list")? == "0-1",
        "c's Mems_allowed_list"
    );

    let be = g.run("be", Requirements::best_effort())?;
    expect_file(&be, "cpu.weight", "1")?;
    expect_file(&be, "cpu.max", "max 100000")?;
    expect_file(&be, "memory.max", "max")?;
    expect_file(&be, "pids.max", "1024")?;

    node_books_match(&g.status()?, 2)?;
    let plan = g.plan()?;
    plan_agrees(&plan, "four", None, Some("TopologyAffinityError"))?;
    plan_agrees(&plan, "one", None, Some("SMTAlignmentError"))?;
    plan_agrees(&plan, "a", Some(&cpus_a), None)?;
    plan_agrees(&plan, "b", Some(&cpus_b), None)?;
    plan_agrees(&plan, "c", Some(&shared), None)?;
    step("memory.available");
    memory_signal_matches(&mut g)?;

    // A CPU taken offline while running: topolet reads the topology at start and does not follow
    // hotplug (its books keep b's two CPUs); the kernel narrows b's effective cpuset and its
    // process's affinity, and gives both back when the CPU returns.
    step("CPU offline");
    let cpus = guest::parse_list(&cpus_b)?;
    let (keep, off) = (cpus[0], cpus[1]);
    set_online(off, false)?;
    let r = (|| -> Result<()> {
        wait::until_true(
            "b's effective cpuset without the offline CPU",
            GUEST_WAIT,
            || Ok(file(&b.dir, "cpuset.cpus.effective")? == keep.to_string()),
        )?;
        ensure!(
            guest::proc_status_field(b.pid, "Cpus_allowed_list")? == keep.to_string(),
            "b's affinity"
        );
        ensure!(
            same_cpus(&file(&b.dir, "cpuset.cpus")?, &cpus_b)?,
            "b's cpuset.cpus changed"
        );
        ensure!(
            g.stack.cri().state(&b.c.id)? == "CONTAINER_RUNNING",
            "b stopped"
        );
        let s = g.status()?;
        let listed = s["exclusive"]
            .as_array()
            .and_then(|v| v.iter().find(|e| e["id"] == b.c.id.as_str()).cloned());
        ensure!(
            listed.is_some_and(
                |e| same_cpus(e["cpus"].as_str().unwrap_or_default(), &cpus_b).unwrap_or(false)
            ),
            "status books of b changed: {s}"
        );
        Ok(())
    })();
    set_online(off, true)?;
    r?;
    wait::until_true("b's effective cpuset whole again", GUEST_WAIT, || {
        same_cpus(&file(&b.dir, "cpuset.cpus.effective")?, &cpus_b)
    })?;

    // Release and re-grant: a's core goes back to the pool and the next pod gets it.
    g.stack.cri().remove_pod(&a.c.pod_id)?;
    let id = a.c.id.clone();
    g.topolet.wait_status("a released", GUEST_WAIT, |s| {
        (!s["exclusive"]
            .as_array()?
            .iter()
            .any(|e| e["id"] == id.as_str()))
        .then_some(())
    })?;
    let a2 = g.run("a2", Requirements::guaranteed(2000, 256 * MIB))?;
    let (cpus_a2, _) = check_exclusive(&mut g, &a2)?;
    ensure!(
        same_cpus(&cpus_a2, &cpus_a)?,
        "a2 got {cpus_a2}, a's released core was {cpus_a}"
    );
    pressure_moves(&mut g)?;
    step("done");
    Ok(())
}

/// 1 socket × 4 cores, no SMT, 4 NUMA nodes of unequal memory, node 3 memory-only; systemd as
/// PID 1 and the systemd cgroup driver (`kubepods.slice` parents); memory manager static,
/// single-numa-node.
/// Reclaimed CPU's measurement on this kernel (cgroup v2, `usage = "cpus"`: the pool's busy
/// time from `/proc/stat`, per NUMA node): there is no API client here, so nothing is advertised
/// and no pod is batch, but the formula's terms in `topolet status` follow a BestEffort pod that
/// spins on every CPU, on the node and per NUMA node, and come down when it is gone. The pool is
/// CPUs 1-3 (CPU 0 reserved, nothing exclusive yet): one CPU on each of nodes 0-2, none on the
/// memory-only node 3.
fn reclaimed_measures(g: &mut Guest) -> Result<()> {
    step("reclaimed CPU: the pool");
    let idle = g
        .topolet
        .wait_status("reclaimed CPU measuring the pool", GUEST_WAIT, |s| {
            let r = &s["reclaimed"];
            let measuring = r["state"]
                .as_str()?
                .starts_with("off: needs the Kubernetes API client");
            (measuring && r["node"]["pool_millis"] == 3000 && r["zones"].as_array()?.len() == 4)
                .then(|| r.clone())
        })?;
    let pools: Vec<u64> = idle["zones"]
        .as_array()
        .map(|z| {
            z.iter()
                .filter_map(|z| z["terms"]["pool_millis"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    ensure!(
        pools == [1000, 1000, 1000, 0],
        "zone pools {pools:?}: {idle}"
    );
    // The default margin_percent (10) of the 3000m pool; nothing is advertised without the API
    // client.
    ensure!(
        idle["node"]["margin_millis"] == 300 && idle["advertised_millis"].is_null(),
        "idle terms: {idle}"
    );
    step("reclaimed CPU: a BestEffort pod spins on every CPU");
    let (p, mut c) = guest::pod(&g.stack, "spin", Requirements::best_effort(), g.mem)?;
    c.command = [
        "sh",
        "-c",
        "for i in 1 2 3 4; do (while :; do :; done) & done; wait",
    ]
    .map(String::from)
    .to_vec();
    let spin = g.run_spec(&p, &c)?;
    let busy = g
        .topolet
        .wait_status("regular usage of the spinning pool", GUEST_WAIT, |s| {
            let r = &s["reclaimed"];
            let regular = r["node"]["regular_millis"].as_u64()?;
            let zones_busy = r["zones"].as_array()?.iter().take(3).all(|z| {
                z["terms"]["regular_millis"]
                    .as_u64()
                    .is_some_and(|m| m >= 500)
            });
            (regular >= 1500 && zones_busy).then(|| r.clone())
        })?;
    // The formula holds for what was measured (the window's peak), and leaves at most
    // 3000 − 1500 − 300.
    let term = |r: &Value, k: &str| r["node"][k].as_u64().unwrap_or(u64::MAX);
    let want = 3000u64
        .saturating_sub(term(&busy, "regular_millis"))
        .saturating_sub(300);
    ensure!(
        term(&busy, "reclaimable_millis") == want && want <= 1200,
        "busy terms: {busy}"
    );
    step("reclaimed CPU: the spinner gone");
    g.stack.cri().remove_pod(&spin.c.pod_id)?;
    // Down by at least one CPU's worth once the window forgot the spinner (what the guest
    // itself does meanwhile is not known, so nothing absolute).
    let peak = term(&busy, "regular_millis");
    g.topolet
        .wait_status("regular usage back down", GUEST_WAIT, |s| {
            let regular = s["reclaimed"]["node"]["regular_millis"].as_u64()?;
            (regular + 1000 <= peak).then_some(())
        })?;
    Ok(())
}

#[test]
fn snc4() -> Result<()> {
    let comm = std::fs::read_to_string("/proc/1/comm").context("reading /proc/1/comm")?;
    ensure!(comm.trim() == "systemd", "PID 1 is {comm:?}, not systemd");
    ensure!(
        Driver::current() == Driver::Systemd,
        "the stack does not use the systemd driver"
    );
    let extra = "[topology]\npolicy = \"single-numa-node\"\n\n[memory]\npolicy = \"static\"\nreserved = { 0 = \"128Mi\" }\n\n[reclaimed]\nenabled = true\nusage = \"cpus\"\ninterval = \"500ms\"\nsuppress_interval = \"250ms\"\nwindow = \"2s\"\n";
    let mut g = Guest::boot("snc4", "0", "full_pcpus_only = true", extra)?;
    ensure!(
        guest::nodes_online()? == "0-3",
        "nodes online: {}",
        guest::nodes_online()?
    );
    for (n, want) in ["0-1", "2", "3", ""].iter().enumerate() {
        ensure!(
            guest::node_cpus(n)? == *want,
            "node {n} cpus {:?}, want {want:?}",
            guest::node_cpus(n)?
        );
    }
    ensure!(
        guest::thread_siblings(2)? == "2",
        "cpu 2 has thread siblings"
    );
    let status = g.status()?;
    node_books_match(&status, 4)?;
    // The memory manager's books: each node's MemTotal, less the reservation (node 0).
    let free = |s: &Value, n: usize| s["numa_nodes"][n]["free_resources"]["memory"].as_u64();
    for n in 0..4 {
        let want = guest::node_mem_total(n)? - if n == 0 { 128 * MIB } else { 0 };
        ensure!(
            free(&status, n) == Some(want),
            "node {n}: free memory {:?}, want {want}",
            free(&status, n)
        );
    }
    let f: Vec<u64> = (0..4).map(|n| free(&status, n).unwrap_or(0)).collect();
    ensure!(
        f[0] > f[1] && f[1] > f[2],
        "node memory not unequal as the shape says: {f:?}"
    );
    reclaimed_measures(&mut g)?;

    // SMT-less: full_pcpus_only admits one CPU. Memory fits only node 0. A Guaranteed pod of
    // the systemd driver: kubepods-pod<uid>.slice right under kubepods.slice.
    let m1_mem = (f[0] + f[1]) / 2 / MIB * MIB;
    let m1 = g.run("m1", Requirements::guaranteed(1000, m1_mem))?;
    ensure!(
        m1.c.cgroup_parent.starts_with("kubepods-pod"),
        "{}",
        m1.c.cgroup_parent
    );
    ensure!(
        m1.dir.starts_with("/sys/fs/cgroup/kubepods.slice/")
            && m1
                .dir
                .to_string_lossy()
                .ends_with(&format!("cri-containerd-{}.scope", m1.c.id)),
        "{}",
        m1.dir.display()
    );
    let (cpus1, node1) = check_exclusive(&mut g, &m1)?;
    ensure!(
        node1 == 0 && cpus1 == "1",
        "m1 on cpus {cpus1} node {node1}, want cpu 1 of node 0"
    );
    let s = g.status()?;
    ensure!(
        free(&s, 0) == Some(f[0] - m1_mem),
        "node 0 books after m1: {:?}",
        free(&s, 0)
    );

    // More memory than any node has left, less than all: single-numa-node refuses it.
    let big = (f[1].max(f[2]).max(f[3]).max(f[0] - m1_mem) + 64 * MIB) / MIB * MIB;
    let e = g.refuse("big", Requirements::guaranteed(1000, big))?;
    ensure!(e.contains("TopologyAffinityError"), "big: {e}");

    let m3 = g.run("m3", Requirements::guaranteed(1000, 256 * MIB))?;
    let (cpus3, node3) = check_exclusive(&mut g, &m3)?;
    ensure!(node3 != 3, "m3 on the memory-only node");

    // Burstable with an integer CPU request = limit: only the slice says it is not Guaranteed,
    // so it stays on the shared pool.
    let b = g.run(
        "b",
        Requirements::burstable(1000, Some(1000), 64 * MIB, Some(128 * MIB)),
    )?;
    ensure!(
        b.dir
            .starts_with("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/"),
        "{}",
        b.dir.display()
    );
    let shared = g.status()?["shared"]["cpus"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure!(
        same_cpus(&file(&b.dir, "cpuset.cpus")?, &shared)?,
        "b is not on the shared pool {shared}"
    );
    expect_file(&b, "cpu.weight", "100")?;
    expect_file(&b, "cpu.max", "100000 100000")?;
    expect_file(&b, "pids.max", "1024")?;

    // A shared container may allocate on every node, the memory-only one included.
    let be = g.run("be", Requirements::best_effort())?;
    ensure!(
        be.dir
            .starts_with("/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/"),
        "{}",
        be.dir.display()
    );
    expect_file(&be, "cpu.weight", "1")?;
    expect_file(&be, "pids.max", "1024")?;
    expect_file(&be, "cpuset.mems", "")?;
    ensure!(
        guest::proc_status_field(be.pid, "Mems_allowed_list")? == "0-3",
        "be's Mems_allowed_list"
    );
    let s = g.status()?;
    ensure!(
        s["managed_containers"] == 4,
        "status manages {} containers, want 4 (m1, m3, b, be)",
        s["managed_containers"]
    );
    breach_ends_by_retry(&mut g, &b, &shared, &cpus1)?;

    let plan = g.plan()?;
    plan_agrees(&plan, "m1", Some(&cpus1), None)?;
    plan_agrees(&plan, "big", None, Some("TopologyAffinityError"))?;
    plan_agrees(&plan, "m3", Some(&cpus3), None)?;
    plan_agrees(&plan, "b", Some(&shared), None)?;
    for (name, node) in [("m1", node1), ("m3", node3)] {
        let l = guest::planned(&plan, name)?;
        ensure!(
            l["mems"] == node.to_string().as_str(),
            "plan's mems for {name}: {l}"
        );
    }
    step("done");
    Ok(())
}

// ---------------------------------------------------------------- kube2numa: a real kubelet

/// Pods per device source and condition in `kube2numa` (created and deleted one after the other).
const KUBE_PODS: usize = 4;
/// The device plugin's extended resource.
const GPU: &str = "topolet.test/gpu";
/// The NUMA node every device of `kube2numa` is published on, and its CPUs.
const DEVICE_NODE: usize = 1;

/// One pod of the placement measurement: where its container really runs.
struct Placed {
    condition: &'static str,
    source: &'static str,
    pod: String,
    cpuset_cpus: String,
    cpuset_mems: String,
    cpus_allowed: String,
    mems_allowed: String,
}

impl Placed {
    /// Its CPUs (the process's affinity, which the cgroup's cpuset.cpus must equal) all on the
    /// device's node.
    fn cpus_with_device(&self) -> Result<bool> {
        let node = guest::parse_list(&guest::node_cpus(DEVICE_NODE)?)?;
        let cpus = guest::parse_list(&self.cpus_allowed)?;
        Ok(!cpus.is_empty() && cpus.iter().all(|c| node.contains(c)))
    }

    /// Its memory nodes (the process's `Mems_allowed_list`) only the device's node.
    fn mems_with_device(&self) -> bool {
        self.mems_allowed == DEVICE_NODE.to_string()
    }
}

/// The kubelet, the device plugin and the DRA driver of one condition, with topolet in the
/// second. Dropped in order: the programs, the kubelet, topolet; the stack is left running.
struct KubeGuest {
    plugin: Option<topolet_integration::go::Program>,
    driver: Option<topolet_integration::go::Program>,
    cluster: Option<topolet_integration::cluster::Cluster>,
    topolet: Option<Topolet>,
    stack: Stack,
}

impl Drop for KubeGuest {
    fn drop(&mut self) {
        self.plugin.take();
        self.driver.take();
        self.cluster.take();
        self.topolet.take();
        self.stack.leave_running();
    }
}

impl KubeGuest {
    fn cluster(&self) -> Result<&topolet_integration::cluster::Cluster> {
        self.cluster.as_ref().context("no kubelet runs")
    }

    /// Starts a kubelet with `opts` against the host's control plane, then the device plugin
    /// (`GPU`, `count` devices) and the DRA driver (`2 × count` devices: a claim this cluster
    /// cannot deallocate, having no resourceclaim controller, keeps its device, and each
    /// condition's pods need their own) publishing on `DEVICE_NODE`; returns once the node
    /// advertises both.
    fn start_kubelet(
        &mut self,
        mut opts: topolet_integration::cluster::ClusterOptions,
        count: u32,
    ) -> Result<()> {
        use topolet_integration::cluster::{Cluster, RemoteControl};
        use topolet_integration::{device_plugin, dra_driver};
        opts.remote_control = Some(RemoteControl::from_env().context(
            "TOPOLET_KUBE_CONTROL_DIR / TOPOLET_KUBE_API_HOST unset: hack/guest.sh runs the kube shapes' control plane",
        )?);
        step(&format!(
            "kubelet: cpuManagerPolicy {}, topologyManagerPolicy {}",
            opts.cpu_manager_policy, opts.topology_manager_policy
        ));
        let cluster = Cluster::start(&self.stack, &opts)?;
        step("device plugin and DRA driver");
        let numa = DEVICE_NODE as u32;
        self.plugin = Some(device_plugin::start(&cluster, GPU, count, numa)?);
        self.driver = Some(dra_driver::start(&cluster, 2 * count, numa)?);
        wait::until_true(
            "the node advertises the plugin's devices and the driver's ResourceSlice",
            GUEST_WAIT,
            || {
                let gpus = cluster
                    .extended_resource(GPU)?
                    .is_some_and(|a| a.capacity == u64::from(count) && a.allocatable_agrees);
                Ok(gpus && topolet_integration::dra_driver::slice_published(&cluster)?)
            },
        )
        .with_context(|| {
            format!(
                "device plugin log:\n{}\ndra driver log:\n{}",
                self.plugin.as_ref().map(|p| p.logged()).unwrap_or_default(),
                self.driver.as_ref().map(|p| p.logged()).unwrap_or_default()
            )
        })?;
        self.cluster = Some(cluster);
        Ok(())
    }

    /// Stops the programs and the kubelet, and deletes the Node, so that the next kubelet (the
    /// same node name: the node token of the control plane names it) registers afresh, with
    /// no capacity of the old device plugin's.
    fn stop_kubelet(&mut self) -> Result<()> {
        step("stopping the kubelet");
        self.plugin.take();
        self.driver.take();
        let mut cluster = self.cluster.take().context("no kubelet runs")?;
        cluster.keep_logs();
        cluster.stop()?;
        let node = cluster.node_name().to_string();
        cluster.kubectl(&["delete", "node", &node, "--wait=true"])?;
        Ok(())
    }
}

/// The pod manifest of one measured pod: 2 exclusive CPUs (Guaranteed, integer CPU), and one
/// device from `source` (`pod-resources`: the device plugin's `GPU`; `dra`: the claim `claim`).
fn device_pod(name: &str, source: &str, claim: &str) -> Value {
    use serde_json::json;
    use topolet_integration::manifests::{ctr, guaranteed, pod};
    let mut r = guaranteed("2", "64Mi");
    let mut c = if source == "dra" {
        let mut c = ctr("main", r);
        c["resources"]["claims"] = json!([{"name": "dev"}]);
        c
    } else {
        r["requests"][GPU] = json!("1");
        r["limits"][GPU] = json!("1");
        ctr("main", r)
    };
    c["name"] = json!("main");
    let mut m = pod(name, vec![c], vec![]);
    if source == "dra" {
        m["spec"]["resourceClaims"] = json!([{"name": "dev", "resourceClaimName": claim}]);
    }
    m
}

/// Creates the DeviceClass of the DRA driver's devices (once) or a ResourceClaim of one device.
fn kubectl_create(cluster: &topolet_integration::cluster::Cluster, object: &Value) -> Result<()> {
    let file = cluster.dir().join(format!(
        "object-{}.json",
        object["metadata"]["name"].as_str().unwrap_or("unnamed")
    ));
    std::fs::write(&file, object.to_string())
        .with_context(|| format!("writing {}", file.display()))?;
    cluster.kubectl(&["create", "-f", &file.to_string_lossy()])?;
    Ok(())
}

/// Runs `KUBE_PODS` pods per source, one after the other, under the current kubelet (and
/// topolet, if it runs): each created through the API, scheduled by the stock scheduler,
/// observed in its cgroup and `/proc`, deleted, and its CPUs seen released before the next.
/// With topolet, its status must name the pod's device with its source and node.
fn measure(g: &mut KubeGuest, condition: &'static str, prefix: &str) -> Result<Vec<Placed>> {
    use serde_json::json;
    let mut rows = Vec::new();
    for (source, tag) in [("pod-resources", "dp"), ("dra", "dra")] {
        for i in 0..KUBE_PODS {
            let name = format!("{prefix}-{tag}-{i}");
            let claim = format!("{name}-claim");
            let cluster = g.cluster()?;
            if source == "dra" {
                kubectl_create(
                    cluster,
                    &json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                        "metadata": {"name": claim, "namespace": "default"},
                        "spec": {"devices": {"requests": [
                            {"name": "dev", "exactly": {"deviceClassName": "topolet-test-dev"}}]}}}),
                )?;
            }
            step(&format!("{condition}: pod {name} ({source})"));
            cluster.create_pod(device_pod(&name, source, &claim))?;
            let pod = wait::until(&format!("pod {name} running"), GUEST_WAIT, || {
                let p = cluster.get_pod(&name)?;
                if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed") {
                    anyhow::bail!("pod {name} failed: {}", cluster.pod_summary(&name));
                }
                Ok(topolet_integration::cluster::all_ready(&p).then_some(p))
            })
            .with_context(|| cluster.pod_summary(&name))?;
            let kc = cluster.container(&pod, "main")?;
            let created = kc.created();
            let dir = guest::container_cgroup(&created);
            let pid = g.stack.cri().pid(&kc.id)?;
            // The harness's path of the container is the kernel's (cgroup v2: `0::<path>`).
            let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .with_context(|| format!("reading /proc/{pid}/cgroup"))?;
            let want = format!("0::{}/{}", kc.cgroup_parent, kc.id);
            ensure!(
                own.lines().any(|l| l == want),
                "container {} of {name} is in {own:?}, not {want}",
                kc.id
            );
            let row = Placed {
                condition,
                source,
                pod: name.clone(),
                cpuset_cpus: file(&dir, "cpuset.cpus")?,
                cpuset_mems: file(&dir, "cpuset.mems")?,
                cpus_allowed: guest::proc_status_field(pid, "Cpus_allowed_list")?,
                mems_allowed: guest::proc_status_field(pid, "Mems_allowed_list")?,
            };
            // Exclusive: the cgroup's cpuset is what the process runs on, 2 CPUs.
            ensure!(
                same_cpus(&row.cpuset_cpus, &row.cpus_allowed)?
                    && guest::parse_list(&row.cpus_allowed)?.len() == 2,
                "{name}: cpuset.cpus {:?}, Cpus_allowed_list {:?}: not 2 exclusive CPUs",
                row.cpuset_cpus,
                row.cpus_allowed
            );
            if let Some(t) = g.topolet.as_mut() {
                device_in_status(t, &name, source, &row)?;
            }
            eprintln!(
                "[kube2numa] {condition} {source} {name}: cpuset.cpus {} cpuset.mems {:?} Cpus_allowed_list {} Mems_allowed_list {}",
                row.cpuset_cpus, row.cpuset_mems, row.cpus_allowed, row.mems_allowed
            );
            rows.push(row);
            step(&format!("{condition}: deleting {name}"));
            let cluster = g.cluster()?;
            cluster.block_on(
                cluster
                    .pods()
                    .delete(&name, &kube::api::DeleteParams::default()),
            )?;
            wait::until_true(&format!("pod {name} gone"), GUEST_WAIT, || {
                Ok(cluster.block_on(cluster.pods().get_opt(&name))?.is_none())
            })?;
            released(g, &pod, &kc.id)?;
        }
    }
    Ok(rows)
}

/// Waits until the deleted pod's CPUs are free again for the next one: in topolet's books
/// (its status), or in the kubelet's CPU manager checkpoint (`<root-dir>/cpu_manager_state`,
/// pkg/kubelet/cm/cpumanager/state: the pod's entry goes when its container is removed).
fn released(g: &mut KubeGuest, pod: &k8s_openapi::api::core::v1::Pod, id: &str) -> Result<()> {
    if let Some(t) = g.topolet.as_mut() {
        let id = id.to_string();
        return t
            .wait_status("the pod's CPUs released", GUEST_WAIT, |s| {
                (!s["exclusive"]
                    .as_array()?
                    .iter()
                    .any(|e| e["id"] == id.as_str()))
                .then_some(())
            })
            .map(|_| ());
    }
    let uid = pod.metadata.uid.clone().context("pod without uid")?;
    let state = g.cluster()?.dir().join("kubelet/cpu_manager_state");
    wait::until_true(
        "the kubelet's CPU manager released the pod",
        GUEST_WAIT,
        || {
            let text = std::fs::read_to_string(&state)
                .with_context(|| format!("reading {}", state.display()))?;
            let v: Value = serde_json::from_str(&text)
                .with_context(|| format!("parsing {}", state.display()))?;
            Ok(v["entries"].get(&uid).is_none())
        },
    )
}

/// topolet's status names the container's device, from `source`, on `DEVICE_NODE` (from the
/// kubelet's PodResources answer; for DRA, the ResourceSlice's `resource.kubernetes.io/numaNode`),
/// with the affinity it gave and the CPUs the cgroup holds.
fn device_in_status(t: &mut Topolet, name: &str, source: &str, row: &Placed) -> Result<()> {
    let full = format!("default/{name}/main");
    let entry = t
        .wait_container_devices(&full, source, GUEST_WAIT)
        .with_context(|| {
            format!(
                "the PodResources source: {}; container {name}: cpus {}",
                t.status()
                    .map(|s| s["pod_resources"].to_string())
                    .unwrap_or_default(),
                row.cpus_allowed
            )
        })?;
    let devices = entry["devices"].as_array().context("devices")?;
    ensure!(
        devices.len() == 1
            && devices[0]["source"] == source
            && devices[0]["numa"] == DEVICE_NODE
            && devices[0]["numa_unknown"].is_null(),
        "one device, from {source}, on numa node {DEVICE_NODE}: {entry:#}"
    );
    ensure!(
        entry["device_numa_nodes"] == serde_json::json!([DEVICE_NODE])
            && entry["numa_affinity"] == DEVICE_NODE.to_string().as_str(),
        "the device pulled the container to node {DEVICE_NODE}: {entry:#}"
    );
    let cpus = entry["cpus"].as_str().context("exclusive cpus")?;
    ensure!(
        same_cpus(cpus, &row.cpuset_cpus)?,
        "status cpus {cpus}, cgroup {}",
        row.cpuset_cpus
    );
    Ok(())
}

/// The measurement's table: one line per pod, then the shares per condition and source.
fn placement_table(rows: &[Placed]) -> Result<String> {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<36} {:<14} {:<12} {:<12} {:<12} {:<18} {:<18} {:<10} mems on node {DEVICE_NODE}",
        "condition",
        "source",
        "pod",
        "cpuset.cpus",
        "cpuset.mems",
        "Cpus_allowed_list",
        "Mems_allowed_list",
        format!("cpus on {DEVICE_NODE}")
    );
    for r in rows {
        let _ = writeln!(
            t,
            "{:<36} {:<14} {:<12} {:<12} {:<12} {:<18} {:<18} {:<10} {}",
            r.condition,
            r.source,
            r.pod,
            r.cpuset_cpus,
            if r.cpuset_mems.is_empty() {
                "(unset)"
            } else {
                &r.cpuset_mems
            },
            r.cpus_allowed,
            r.mems_allowed,
            if r.cpus_with_device()? { "yes" } else { "no" },
            if r.mems_with_device() { "yes" } else { "no" }
        );
    }
    let _ = writeln!(
        t,
        "\nshare placed with the device (node {DEVICE_NODE}): CPUs / memory nodes"
    );
    let mut conditions: Vec<&str> = rows.iter().map(|r| r.condition).collect();
    conditions.dedup();
    for c in conditions {
        let mut line = format!("{c:<36}");
        for s in ["pod-resources", "dra"] {
            let of: Vec<&Placed> = rows
                .iter()
                .filter(|r| r.condition == c && r.source == s)
                .collect();
            let mut cpus = 0;
            for r in &of {
                cpus += usize::from(r.cpus_with_device()?);
            }
            let mems = of.iter().filter(|r| r.mems_with_device()).count();
            let _ = write!(
                line,
                " {s}: {cpus}/{n} CPUs, {mems}/{n} memory;",
                n = of.len()
            );
        }
        let _ = writeln!(t, "{line}");
    }
    Ok(t)
}

/// smt2numa's machine (2 NUMA nodes, 0-3 / 4-7), a real kubelet against the host's control
/// plane, a device plugin and a DRA driver publishing their devices on node 1. The issue's
/// measurement: pods asking for one device and 2 exclusive CPUs, placed by the kubelet
/// (`static` CPU manager, `single-numa-node` topology manager, CPU 0 reserved, no topolet) and
/// by topolet (kubelet `none`), for device-plugin devices and DRA devices. The kubelet's
/// topology manager takes hints from its device manager
/// (pkg/kubelet/cm/devicemanager/topology_hints.go) but none from its DRA manager
/// (pkg/kubelet/cm/dra has no GetTopologyHints), so only its device-plugin pods are expected on
/// the device's node; each node has room for the pod's CPUs (node 0: 1-3 besides the reserved
/// CPU 0), so where a pod lands is decided by its device or by nothing. Asserted: every pod
/// under topolet has its CPUs and memory node on the device's node, and topolet's status names
/// the device with its source and node; every device-plugin pod under the kubelet has its CPUs
/// there (pkg/kubelet/cm/topologymanager: single-numa-node admits only a hint of one node, the
/// device's); the kubelet's DRA pods are measured and reported, not asserted.
#[test]
fn kube2numa() -> Result<()> {
    use topolet_integration::cluster::ClusterOptions;
    let s = guest::shape()?;
    ensure!(
        s == "kube2numa",
        "this guest was booted as {s}, not kube2numa"
    );
    ensure!(
        guest::node_cpus(0)? == "0-3" && guest::node_cpus(1)? == "4-7",
        "NUMA nodes are not 0-3 / 4-7"
    );
    step("starting containerd");
    let mut g = KubeGuest {
        plugin: None,
        driver: None,
        cluster: None,
        topolet: None,
        stack: Stack::start()?,
    };
    let count = KUBE_PODS as u32;

    // The kubelet's own managers, no topolet.
    g.start_kubelet(
        ClusterOptions {
            cpu_manager_policy: "static".into(),
            reserved_cpus: Some("0".into()),
            topology_manager_policy: "single-numa-node".into(),
            ..ClusterOptions::default()
        },
        count,
    )?;
    kubectl_create(
        g.cluster()?,
        &serde_json::json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "topolet-test-dev"},
            "spec": {"selectors": [{"cel": {"expression":
                format!("device.driver == '{}'", topolet_integration::dra_driver::DRIVER)}}]}}),
    )?;
    let mut rows = measure(&mut g, "kubelet static + single-numa-node", "k")?;
    g.stop_kubelet()?;

    // The kubelet's managers off, topolet on.
    g.start_kubelet(ClusterOptions::default(), count)?;
    step("starting topolet");
    let work = g.stack.work_dir("topolet")?;
    let mut config = TopoletConfig::for_stack(&g.stack, &work);
    // The kubelet's reservedSystemCPUs of the other condition: the same CPUs to place on.
    config.reserved_cpus = Some("0".into());
    // The kubelet's topologyManagerPolicy of the other condition (topolet's default is none,
    // which aligns nothing).
    config.extra_toml = "[topology]\npolicy = \"single-numa-node\"\n\n[eviction]\n# This test's pods are never to be evicted (the harness's API-on nodes do the same).\naction = \"dry-run\"\n".into();
    let cluster = g.cluster()?;
    let kubeconfig = cluster.env("KUBE_TOPOLET_KUBECONFIG")?.to_string();
    let node = cluster.node_name().to_string();
    // The API client: the pods' specs and this node's ResourceSlices (a DRA device's node).
    config.kubernetes = format!(
        "enabled = \"on\"\nkubeconfig = {kubeconfig:?}\nnode_name = {node:?}\npod_wait_ms = 1000"
    );
    // This kubelet's PodResources socket (under its --root-dir, not the default path), and
    // CreateContainer's wait for its answer at the largest allowed: under emulation the
    // kubelet's Get took longer than the default 100 ms (a run saw a device-plugin pod
    // admitted without its device, on node 0).
    config.kubelet = format!(
        "pod_resources_socket = {:?}\npod_resources_wait_ms = 500",
        cluster.pod_resources_socket().to_string_lossy()
    );
    let mut t = guest::start_topolet(&work, &config)?;
    t.wait_status(
        "topolet's ResourceSlice watch holds the driver's devices",
        GUEST_WAIT,
        |s| {
            let r = &s["resource_slices"];
            (r["state"] == "listed" && r["devices"] == 2 * count && r["last_error"].is_null())
                .then_some(())
        },
    )?;
    g.topolet = Some(t);
    rows.extend(measure(&mut g, "kubelet none + topolet", "t")?);

    let table = placement_table(&rows)?;
    eprintln!("[kube2numa] placement\n{table}");
    let results = std::env::var("TOPOLET_GUEST_RESULTS").unwrap_or_else(|_| "/results".into());
    let out = PathBuf::from(results).join("placement.txt");
    std::fs::write(&out, &table).with_context(|| format!("writing {}", out.display()))?;

    for r in &rows {
        if r.condition == "kubelet none + topolet" {
            ensure!(
                r.cpus_with_device()? && r.mems_with_device() && r.cpuset_mems == "1",
                "topolet placed {} ({}) on cpus {} mems {} (cgroup {:?}), not with its device on node {DEVICE_NODE}",
                r.pod,
                r.source,
                r.cpus_allowed,
                r.mems_allowed,
                r.cpuset_mems
            );
        } else if r.source == "pod-resources" {
            ensure!(
                r.cpus_with_device()?,
                "the kubelet placed device-plugin pod {} on cpus {}, not on node {DEVICE_NODE}",
                r.pod,
                r.cpus_allowed
            );
        }
    }
    step("done");
    Ok(())
}
