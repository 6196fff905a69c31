//! Load for the reliability tests: bursts of parallel one-container pods of mixed QoS classes
//! (each create recorded with when it finished and what exists of it, even when a step failed),
//! clean-up of every pod, a seeded random source that a failure can be replayed from, and
//! topolet's resident memory.

use std::time::Instant;

use anyhow::Context;

use crate::books::Tracked;
use crate::cri::{Created, Cri};
use crate::fixture::WithTopolet;
use crate::kube::{ContainerSpec, PodSpec, Qos, Requirements};
use crate::stack::Stack;

const MIB: u64 = 1 << 20;

/// The `i`-th class of a mixed burst: Guaranteed with one whole CPU, Burstable, BestEffort.
pub fn mixed_requirements(i: usize) -> (&'static str, Requirements) {
    match i % 3 {
        0 => ("g", Requirements::guaranteed(1000, 64 * MIB)),
        1 => (
            "bu",
            Requirements::burstable(200, Some(400), 32 * MIB, Some(64 * MIB)),
        ),
        _ => ("be", Requirements::best_effort()),
    }
}

/// One pod of a burst, ready to create.
#[derive(Debug, Clone)]
pub struct PodToRun {
    pub name: String,
    pub qos: Qos,
    pub pod: PodSpec,
    pub ctr: ContainerSpec,
}

/// `n` kubelet-shaped one-container pods named `<prefix>-<class><i>`, classes rotating.
pub fn mixed_burst(t: &WithTopolet, prefix: &str, n: usize) -> anyhow::Result<Vec<PodToRun>> {
    (0..n)
        .map(|i| {
            let (class, req) = mixed_requirements(i);
            let name = format!("{prefix}-{class}{i}");
            let (pod, ctr) = t.pod(&name, req)?;
            Ok(PodToRun {
                name,
                qos: req.qos(),
                pod,
                ctr,
            })
        })
        .collect()
}

/// What became of one create of a burst.
#[derive(Debug)]
pub struct Outcome {
    pub name: String,
    pub qos: Qos,
    pub pod_uid: String,
    pub container_name: String,
    /// The container, if CreateContainer returned one (StartContainer may still have failed).
    pub created: Option<Created>,
    /// The first step that failed, if any.
    pub error: Option<String>,
    /// When the last step returned.
    pub finished: Instant,
}

impl Outcome {
    /// The container for the books (None if it was never created).
    pub fn tracked(&self) -> Option<Tracked> {
        self.created.as_ref().map(|c| Tracked {
            name: self.name.clone(),
            qos: self.qos,
            pod_uid: self.pod_uid.clone(),
            container: self.container_name.clone(),
            created: c.clone(),
        })
    }

    /// `name ok <id>` or `name FAILED <last line of the error>`.
    pub fn summary(&self) -> String {
        match (&self.created, &self.error) {
            (Some(c), None) => format!("{} ok {}", self.name, &c.id[..12]),
            (_, Some(e)) => format!(
                "{} FAILED {}",
                self.name,
                e.lines().last().unwrap_or_default()
            ),
            (None, None) => format!("{} ?", self.name),
        }
    }
}

/// RunPodSandbox + CreateContainer + StartContainer, recording how far it got.
pub fn run_one(cri: &Cri, p: &PodToRun) -> Outcome {
    let mut out = Outcome {
        name: p.name.clone(),
        qos: p.qos,
        pod_uid: p.pod.uid.clone(),
        container_name: p.ctr.name.clone(),
        created: None,
        error: None,
        finished: Instant::now(),
    };
    let r = (|| -> anyhow::Result<()> {
        let pod_id = cri.run_pod(&p.pod)?;
        let c = cri.create(&pod_id, &p.pod, &p.ctr)?;
        out.created = Some(c.clone());
        cri.start(&c.id)
    })();
    out.error = r.err().map(|e| format!("{e:#}"));
    out.finished = Instant::now();
    out
}

/// Starts every pod of `burst` on its own thread inside `scope`; join the handles for the
/// outcomes.
pub fn spawn_burst<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    stack: &'env Stack,
    burst: &'env [PodToRun],
) -> Vec<std::thread::ScopedJoinHandle<'scope, Outcome>> {
    burst
        .iter()
        .map(|p| scope.spawn(move || run_one(&stack.cri(), p)))
        .collect()
}

/// Joins a burst's threads.
pub fn join_burst(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Outcome>>,
) -> anyhow::Result<Vec<Outcome>> {
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("a create thread panicked"))
        })
        .collect()
}

/// Removes every pod sandbox (and so every container) of the stack, in one crictl call, after
/// stopping the running containers at once (`crictl stop --timeout 0`, SIGKILL): CRI-O's
/// StopPodSandbox gives each container the call's own deadline less a second to exit after
/// SIGTERM (cri-o/cri-o server/sandbox_stop_linux.go, `stopTimeoutFromContext`), so a test
/// container that ignores SIGTERM (sleep as pid 1) held it past crictl's 10 s; containerd kills
/// them at once.
pub fn remove_all_pods(cri: &Cri) -> anyhow::Result<()> {
    let pods = cri.pods()?;
    if pods.is_empty() {
        return Ok(());
    }
    let running = cri.run(&["ps", "-q"])?;
    let running: Vec<&str> = running.split_whitespace().collect();
    if !running.is_empty() {
        let mut args = vec!["stop", "--timeout", "0"];
        args.extend(running.iter().copied());
        // A container that exited meanwhile fails its stop: the removal below still takes it.
        let _ = cri.run(&args);
    }
    let mut args = vec!["rmp", "--force"];
    args.extend(pods.iter().map(String::as_str));
    cri.run(&args)
        .with_context(|| format!("removing {} pods", pods.len()))
        .map(drop)
}

/// A small seeded random source (SplitMix64): the tests print the seed so that a failing run can
/// be replayed with `TOPOLET_FAULT_SEED`.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// `TOPOLET_FAULT_SEED` if set (decimal), else one from the clock. Returns the seed too.
    pub fn from_env_or_clock() -> anyhow::Result<(Rng, u64)> {
        let seed = match std::env::var("TOPOLET_FAULT_SEED") {
            Ok(s) => s
                .trim()
                .parse()
                .with_context(|| format!("TOPOLET_FAULT_SEED={s:?} is not a decimal u64"))?,
            Err(_) => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x5eed),
        };
        Ok((Rng(seed), seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// `VmRSS` of a process, in KiB.
pub fn vm_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let p = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("{p} has no parsable VmRSS"))
}
