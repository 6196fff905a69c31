//! Live introspection: `topolet status` (the real binary, over the real
//! admin socket) shows what the cgroups really hold; `-o json` parses; the socket is mode 0600;
//! `/metrics` parses as Prometheus text and its counters move when pods are created; `/readyz`
//! is 200 once NRI is synchronized.
//!
//! The test config puts the admin socket in topolet's work directory and the metrics endpoint on
//! `127.0.0.1:0`; the bound address is the status's `metrics_address`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use topolet_integration::cri::Cri;
use topolet_integration::kube::Requirements;
use topolet_integration::observe;
use topolet_integration::topolet::binary;
use topolet_integration::{wait, WithTopolet};
use topolet_testkit::metrics_text::{parse_exposition, value, Sample};

const MIB: u64 = 1 << 20;

/// One HTTP/1.1 GET; returns (status code, body).
fn http_get(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)
        .with_context(|| format!("reading GET {path}"))?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path}: no header end in {raw:?}"))?;
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("GET {path}: bad status line in {head:?}"))?;
    if path == "/metrics" && code == 200 {
        ensure!(
            // Header names are case-insensitive (RFC 9110 5.1); hyper writes them lowercase.
            head.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "/metrics content type: {head}"
        );
    }
    Ok((code, body.to_string()))
}

fn scrape(addr: &str) -> anyhow::Result<Vec<Sample>> {
    let (code, body) = http_get(addr, "/metrics")?;
    ensure!(code == 200, "/metrics answered {code}: {body}");
    parse_exposition(&body).map_err(|e| anyhow::anyhow!("/metrics is not valid text format: {e}"))
}

fn num(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    value(samples, name, labels).unwrap_or(0.0)
}

fn status(socket: &Path, json: bool) -> anyhow::Result<Output> {
    let mut cmd = Command::new(binary()?);
    cmd.arg("status").arg("--admin-socket").arg(socket);
    if json {
        cmd.args(["-o", "json"]);
    }
    cmd.output().context("running topolet status")
}

fn status_json(socket: &Path) -> anyhow::Result<serde_json::Value> {
    let out = status(socket, true)?;
    ensure!(
        out.status.success(),
        "topolet status -o json: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).context("topolet status -o json is not JSON")
}

#[test]
fn status_and_metrics_show_what_the_cgroups_hold() -> anyhow::Result<()> {
    let mut t = WithTopolet::start()?;
    let socket = t.work.join("admin.sock");

    // Root-only admin socket.
    let meta = std::fs::metadata(&socket).with_context(|| format!("{}", socket.display()))?;
    ensure!(
        meta.file_type().is_socket(),
        "{} is not a socket",
        socket.display()
    );
    ensure!(
        meta.permissions().mode() & 0o777 == 0o600,
        "admin socket mode {:o}",
        meta.permissions().mode() & 0o777
    );

    let addr = t.topolet.wait_metrics_address()?;

    // Synchronized (WithTopolet waited for it): ready, and alive.
    let (code, body) = http_get(&addr, "/readyz")?;
    ensure!(code == 200, "/readyz after synchronize: {code} {body}");
    ensure!(http_get(&addr, "/healthz")?.0 == 200);
    ensure!(http_get(&addr, "/nope")?.0 == 404);

    let before = scrape(&addr)?;
    ensure!(num(&before, "topolet_nri_synchronized", &[]) == 1.0);
    let admitted = |s: &[Sample]| {
        num(
            s,
            "topolet_admissions_total",
            &[("qos", "Guaranteed"), ("cpus", "exclusive")],
        )
    };
    let creates = |s: &[Sample]| {
        num(
            s,
            "topolet_nri_event_duration_seconds_count",
            &[("event", "create_container")],
        )
    };
    let writes = |s: &[Sample]| num(s, "topolet_state_file_writes_total", &[("result", "ok")]);

    // A Guaranteed 1-CPU container: exclusive CPUs, per the real cgroup.
    let cri = Cri::new(&t.stack);
    let (gp, gc) = t.pod("g-status", Requirements::guaranteed(1000, 64 * MIB))?;
    let g = cri.run_pod_with(&gp, &gc)?;
    let cg_cpus = observe::cgroup_cpuset(&g)?;
    let want_name = format!("{}/{}", gp.pod_ref(), gc.name);

    let s = status_json(&socket)?;
    let entries = s["exclusive"]
        .as_array()
        .context("status has no exclusive array")?;
    let entry = entries
        .iter()
        .find(|e| e["name"] == want_name.as_str())
        .with_context(|| format!("{want_name} not in status exclusive: {entries:?}"))?;
    ensure!(
        entry["cpus"] == cg_cpus.as_str(),
        "status says {want_name} holds {} but its cgroup cpuset.cpus is {cg_cpus}",
        entry["cpus"]
    );
    ensure!(
        entry["id"] == g.id.as_str(),
        "status id {} vs {}",
        entry["id"],
        g.id
    );
    ensure!(s["nri"]["state"] == "Synchronized", "nri: {}", s["nri"]);
    ensure!(s["nri"]["synchronized"] == true);
    ensure!(s["pressure"].is_null() || s["pressure"].is_object());
    ensure!(s["metrics_address"] == addr.as_str());
    // Per NUMA node, exclusive CPUs add up to the container's, and are not shared or free.
    let nodes = s["numa_nodes"].as_array().context("numa_nodes")?;
    let excl: Vec<&str> = nodes
        .iter()
        .filter_map(|n| n["exclusive"].as_str())
        .filter(|x| !x.is_empty())
        .collect();
    ensure!(
        excl.join(",") == cg_cpus,
        "per-node exclusive {excl:?} vs {cg_cpus}"
    );
    for n in nodes {
        for key in ["shared", "free"] {
            let cpus = n[key].as_str().unwrap_or("");
            ensure!(
                !cpus.split(',').any(|c| c == cg_cpus),
                "node {}: {key} {cpus} contains the exclusive cpu {cg_cpus}",
                n["id"]
            );
        }
    }
    // The shared containers' real cpuset is the status's shared pool.
    let (bp, bc) = t.pod("be-status", Requirements::best_effort())?;
    let be = cri.run_pod_with(&bp, &bc)?;
    let shared = s["shared"]["cpus"]
        .as_str()
        .context("shared.cpus")?
        .to_string();
    wait::until_true(
        "best-effort container on the shared pool",
        Duration::from_secs(10),
        || Ok(observe::cgroup_cpuset(&be)? == shared),
    )
    .with_context(|| format!("shared pool per status: {shared}"))?;

    // The table: readable, names the container and its CPUs.
    let out = status(&socket, false)?;
    ensure!(
        out.status.success(),
        "topolet status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout)?;
    let row = table
        .lines()
        .find(|l| l.starts_with(&want_name))
        .with_context(|| format!("no row for {want_name} in:\n{table}"))?;
    ensure!(
        row.split_whitespace().any(|w| w == cg_cpus),
        "row {row:?} lacks {cg_cpus}"
    );
    ensure!(table.contains("NRI Synchronized"), "{table}");

    // Counters moved. The state file is written off the event path (its writer thread, after
    // the reply): its counter is waited for; the others moved before the replies.
    wait::until_true(
        "the state file written after the grant",
        Duration::from_secs(60),
        || Ok(writes(&scrape(&addr)?) > writes(&before)),
    )?;
    let after = scrape(&addr)?;
    ensure!(
        admitted(&after) == admitted(&before) + 1.0,
        "Guaranteed exclusive admissions {} → {}",
        admitted(&before),
        admitted(&after)
    );
    ensure!(
        creates(&after) >= creates(&before) + 2.0,
        "create_container events {} → {}",
        creates(&before),
        creates(&after)
    );
    ensure!(
        writes(&after) > writes(&before),
        "state-file writes {} → {}",
        writes(&before),
        writes(&after)
    );
    let online = observe::online_cpus()?;
    let total = topolet_core::machine::cpuset::CpuSet::parse(&online)?.len() as f64;
    ensure!(
        num(&after, "topolet_shared_pool_cpus", &[]) == total - 1.0,
        "shared pool gauge {} with {total} cpus and one exclusive",
        num(&after, "topolet_shared_pool_cpus", &[])
    );
    let exclusive_sum: f64 = after
        .iter()
        .filter(|s| s.name == "topolet_exclusive_cpus")
        .map(|s| s.value)
        .sum();
    ensure!(
        exclusive_sum == 1.0,
        "topolet_exclusive_cpus sum {exclusive_sum}"
    );
    Ok(())
}

#[test]
fn status_errors_are_precise() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("nope.sock");
    let out = status(&missing, false)?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(3), "exit {:?}: {err}", out.status);
    ensure!(
        err.contains(&missing.display().to_string()) && err.contains("does not exist"),
        "{err}"
    );
    // A socket nobody listens on.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale)?);
    let out = status(&stale, true)?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(3), "exit {:?}: {err}", out.status);
    ensure!(err.contains("nobody is listening"), "{err}");
    if out.stdout.is_empty() {
        return Ok(());
    }
    bail!("stdout on error: {}", String::from_utf8_lossy(&out.stdout))
}
