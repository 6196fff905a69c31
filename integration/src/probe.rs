//! The benchmark probe of `hack/bench/colocation` (one static Go binary, standard library only)
//! as the kubelet benches run it: built once, put in a hostPath directory the pods mount, driven
//! through request files, and the figures appended as one JSON line to `TOPOLET_BENCH_OUT`
//! (hack/bench.sh parts `reclaimed` and `isolation`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{json, Value};

use crate::cluster::POD_TIMEOUT;
use crate::manifests::{pod, script_ctr};
use crate::{paths, wait};

/// Where the pods see the hostPath directory.
pub const MOUNT: &str = "/bench";

/// The probe binary in `dir` (`dir/colocation`): `TOPOLET_COLOCATION_PROBE` copied, else built
/// from hack/bench/colocation with `go build` (`GO`, else `go` on PATH, else /usr/local/go/bin/go).
pub fn binary(dir: &Path) -> anyhow::Result<PathBuf> {
    let to = dir.join("colocation");
    if let Some(p) = std::env::var_os("TOPOLET_COLOCATION_PROBE") {
        std::fs::copy(&p, &to).with_context(|| format!("copying {p:?} to {}", to.display()))?;
        return Ok(to);
    }
    let src = paths::repo_root().join("hack/bench/colocation");
    crate::go::build(&src, &to, crate::go::Modules::None)?;
    Ok(to)
}

/// A pod whose container `main` runs `colocation ARGS` from the hostPath `dir` (mounted at
/// [`MOUNT`]; `{MOUNT}` in `args` is that path), exiting at once on SIGTERM.
pub fn pod_running(name: &str, args: &str, dir: &Path, resources: Value) -> Value {
    let script = format!("trap 'kill $p; exit 0' TERM; {MOUNT}/colocation {args} & p=$!; wait");
    let mut ctr = script_ctr("main", &script, resources);
    ctr["volumeMounts"] = json!([{"name": "bench", "mountPath": MOUNT}]);
    let mut p = pod(name, vec![ctr], vec![]);
    p["spec"]["volumes"] = json!([{
        "name": "bench",
        "hostPath": {"path": dir.to_string_lossy(), "type": "Directory"},
    }]);
    p
}

/// A `colocation regular DIR` probe, driven through its request file in `dir`.
pub struct Probe {
    pub dir: PathBuf,
    /// The CPUs every request's threads are confined to (empty: the container's cpuset).
    pub cpus: Vec<u32>,
    next_id: u64,
}

impl Probe {
    pub fn new(dir: &Path) -> Probe {
        Probe {
            dir: dir.to_path_buf(),
            cpus: Vec::new(),
            next_id: 0,
        }
    }

    /// Asks for `body` (a request object without its `id`); returns the id.
    pub fn request_body(&mut self, mut body: Value) -> anyhow::Result<u64> {
        self.next_id += 1;
        let id = self.next_id;
        body["id"] = json!(id);
        if !self.cpus.is_empty() && body.get("cpus").is_none() {
            body["cpus"] = json!(self.cpus);
        }
        let tmp = self.dir.join("req.tmp");
        std::fs::write(&tmp, body.to_string())
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, self.dir.join("req")).context("renaming the probe's request")?;
        Ok(id)
    }

    /// Asks for `mode` for `seconds` with `threads`; returns the id.
    pub fn request(&mut self, mode: &str, seconds: f64, threads: u32) -> anyhow::Result<u64> {
        self.request_body(json!({"mode": mode, "seconds": seconds, "threads": threads}))
    }

    pub fn read(&self, kind: &str, id: u64) -> anyhow::Result<Option<Value>> {
        read_json(&self.dir.join(format!("{kind}-{id}.json")))
    }

    pub fn wait(&self, kind: &str, id: u64, timeout: Duration) -> anyhow::Result<Value> {
        wait::until(&format!("the probe's {kind}-{id}.json"), timeout, || {
            self.read(kind, id)
        })
    }

    pub fn stop(&self, id: u64) -> anyhow::Result<()> {
        let p = self.dir.join(format!("stop-{id}"));
        std::fs::write(&p, "").with_context(|| format!("writing {}", p.display()))
    }

    /// One window of ticks; waits for its result.
    pub fn ticks(&mut self, seconds: f64) -> anyhow::Result<Value> {
        let id = self.request("ticks", seconds, 1)?;
        self.wait("res", id, Duration::from_secs_f64(seconds) + POD_TIMEOUT)
    }
}

/// Unix nanoseconds (CLOCK_REALTIME): the probe's own clock, compared with the host's.
pub fn unix_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// A JSON file, `None` while it does not exist.
pub fn read_json(p: &Path) -> anyhow::Result<Option<Value>> {
    match std::fs::read_to_string(p) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

pub fn read_trimmed(p: &Path) -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(p)
        .with_context(|| format!("reading {}", p.display()))?
        .trim()
        .to_string())
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> anyhow::Result<Vec<f64>> {
    let t = read_trimmed(Path::new("/proc/loadavg"))?;
    Ok(t.split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect())
}

/// The median (sorts `v`; 0 when empty).
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Prints `line` and appends it to `out` (`TOPOLET_BENCH_OUT`) when set.
pub fn emit(out: Option<&Path>, line: &Value) -> anyhow::Result<()> {
    println!("bench figures: {line}");
    if let Some(out) = out {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .with_context(|| format!("opening TOPOLET_BENCH_OUT {}", out.display()))?;
        writeln!(f, "{line}").with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}
