//! Runtime-side benchmark driver for `hack/bench.sh` (feature `test-support`).
//!
//! Plays containerd v2.2.7 / NRI v0.11.0 with `topolet_nri::fake_runtime` (it sends lifecycle events
//! as StateChange, the v0.11 wire; the supported lines v2.3/v2.4 use the dedicated v0.12 RPCs, which
//! the fake runtime does not implement): binds `--socket`, waits
//! for one plugin (started by the caller), registers and configures it, synchronizes, then:
//!
//! * `roundtrip --socket S --n N [--round R] [--samples FILE] [--rss-pid-file F]`: empty Synchronize,
//!   then N sequential CreateContainer requests with kubelet-shaped pods (Guaranteed / Burstable /
//!   BestEffort mix, new pod every other container), each timed around the ttrpc call under the
//!   NRI lock as containerd holds it. Appends per-request ns to FILE; with `--rss-pid-file`, reads
//!   the VmRSS, RssAnon and RssFile of the pid written in F (the plugin, started after the driver)
//!   after the last request. Prints `{"n","median_us","p99_us","adjusted"[,"rss_mib",
//!   "rss_anon_mib","rss_file_mib"]}` (`adjusted`: replies
//!   carrying a Linux adjustment). With `--extra-pod CGROUP_PARENT:ID`, first announces, creates and
//!   starts one more BestEffort container `ID` in a pod of that cgroup parent (untimed; hack/bench.sh
//!   gives it a real cgroup and a 200,000-entry writable layer for the eviction loop to measure).
//!   With `--exclusive-every K` (a multiple of 4, so the pod is a Guaranteed one), churn: every
//!   container is stopped and removed right after its timed CreateContainer and every pod's sandbox
//!   after its second container (all untimed), so the node stays near empty, and the app container
//!   of every K-th pod asks for one whole CPU: a grant, then a release, both state writes of the
//!   plugin. The JSON then also has `"exclusive":{"asked","granted"}` (granted: replies whose
//!   cpuset is one CPU).
//! * `sync --socket S --containers N [--metrics-log FILE]`: one Synchronize of N running containers
//!   (2 per pod), paged as containerd does when the request would exceed ttrpc's 4 MiB message
//!   limit. Prints `{"containers","messages","sync_ms"[,"plugin_ms"]}`; `plugin_ms`, with
//!   `--metrics-log`, is the plugin's own Synchronize handling time (the `_sum` of its
//!   `topolet_nri_event_duration_seconds{event="synchronize"}`, one observation).
//! * `events --socket S --live N --churn M --metrics-log FILE`: the plugin's own per-event handling
//!   time at N live containers. Brings the plugin to N live containers (N/2 pods of app + sidecar,
//!   each announced, created and started as containerd does), scrapes the plugin's
//!   `topolet_nri_event_duration_seconds` histogram from its `/metrics` (address read from the
//!   `metrics endpoint listening` line in the plugin's log FILE), then drives M churn pods through
//!   their whole life (RunPodSandbox, CreateContainer, PostStartContainer, StopContainer,
//!   RemoveContainer, StopPodSandbox, RemovePodSandbox; each only if the plugin subscribed) while the
//!   N stay live, scrapes again and reports quantiles of the difference of the two histograms:
//!   only the churn events count. Quantiles are computed as Prometheus' `histogram_quantile` does
//!   (linear interpolation inside the bucket that holds the rank). Prints
//!   `{"live","churn_pods","managed_containers","all":{"n","median_us","p99_us"},"by_event":{…}}`.
//! * `floor --socket S --n N [--samples FILE]` with `echo --socket S` as the peer: the machine's
//!   floor under any plugin's round trip. `floor` binds S and, once `echo` (started by the caller,
//!   a second process) connects, sends N frames the size of `roundtrip`'s CreateContainer request
//!   one by one on the same kind of runtime (tokio, current thread) and times each until the
//!   reply frame (the size of a CreateContainer reply carrying a cpuset adjustment) is read back.
//!   `echo` answers on one blocking thread: no NRI, no ttrpc, no allocation per frame. What this
//!   measures is two processes passing a message each way through a Unix socket, the kernel's
//!   part of every NRI round trip. Prints `{"n","median_us","p99_us"}`.
//! * `sdk --socket S`: not a runtime but the SDK floor, a plugin: dials S (a `roundtrip` driver's
//!   socket) with this crate's [`topolet_nri::Stub`] on the runtime shape topolet runs (tokio, one
//!   worker) and answers every CreateContainer with a fixed adjustment of the fields the Go
//!   baseline sets (shares from the request, quota, cpuset cpus and mems, oom_score_adj, pids
//!   limit), computed from nothing else; a Synchronize is decoded without the container fields
//!   topolet skips and answered with no updates. Between the bare floor and topolet: what the
//!   mux, ttrpc and tokio of this SDK cost without topolet's handler. Exits when the driver
//!   closes.
//! * `bare --socket S`: the bare floor, a plugin too, the cheapest one that still speaks NRI: one
//!   blocking thread, no async runtime and no ttrpc server; it cuts mux frames and ttrpc messages
//!   itself, registers, answers Configure and Synchronize, and decodes every CreateContainer and
//!   answers it with the SDK floor's adjustment (protobuf both ways, as every plugin must).
//!   Between the socket floor and the SDK floor: what any plugin pays on top of the kernel.
//! * `stats FILE...`: median and p99 over the ns samples in FILEs (`{"n","median_us","p99_us"}`).

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use topolet_nri::api::{self, Event};
use topolet_nri::fake_runtime::{FakeRuntime, LatencyStats, PluginConn};
use topolet_nri::protobuf::{Message, MessageField};
use topolet_nri::EventMask;

const RUNTIME_VERSION: &str = "v2.2.7";
const NRI_VERSION: &str = "v0.11.0";
/// ttrpc's default maximum message size, which makes containerd split Synchronize.
const TTRPC_MAX_MSG: usize = 4 << 20;
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first().cloned() else {
        return Err(usage());
    };
    let mut opts: HashMap<String, String> = HashMap::new();
    let mut files = Vec::new();
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        if let Some(k) = a.strip_prefix("--") {
            let v = it.next().ok_or_else(|| format!("--{k} needs a value"))?;
            opts.insert(k.to_string(), v.clone());
        } else {
            files.push(a.clone());
        }
    }
    let num = |k: &str, d: usize| -> Res<usize> {
        opts.get(k).map_or(Ok(d), |v| {
            v.parse().map_err(|e| format!("--{k} {v}: {e}").into())
        })
    };
    match cmd.as_str() {
        "stats" => {
            let mut samples = Vec::new();
            for f in &files {
                for line in std::fs::read_to_string(f)?.lines() {
                    samples.push(Duration::from_nanos(line.trim().parse::<u64>()?));
                }
            }
            let s = LatencyStats::from_samples(&samples).ok_or("no samples")?;
            println!("{}", stats_json(&s));
            Ok(())
        }
        "sdk" => {
            let socket = opts.get("socket").ok_or("--socket is required")?.clone();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            rt.block_on(run_sdk_floor(&socket))
        }
        "bare" => {
            let socket = opts.get("socket").ok_or("--socket is required")?;
            run_bare(socket)
        }
        "echo" => {
            let socket = opts.get("socket").ok_or("--socket is required")?;
            run_echo(socket)
        }
        "floor" => {
            let socket = opts.get("socket").ok_or("--socket is required")?.clone();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let samples = opts.get("samples").cloned();
            rt.block_on(run_floor(&socket, num("n", 2000)?, samples))
        }
        "roundtrip" | "sync" | "events" => {
            let socket = opts.get("socket").ok_or("--socket is required")?.clone();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let fake = FakeRuntime::bind(&socket)?;
                let conn = tokio::time::timeout(ACCEPT_TIMEOUT, fake.accept())
                    .await
                    .map_err(|_| "no plugin connected")??;
                let mask = setup(&conn).await?;
                if cmd == "sync" {
                    let log = opts.get("metrics-log").map(String::as_str);
                    run_sync(&conn, num("containers", 1000)?, log).await
                } else if cmd == "events" {
                    let log = opts
                        .get("metrics-log")
                        .ok_or("events: --metrics-log is required")?;
                    run_events(&conn, mask, num("live", 10)?, num("churn", 1000)?, log).await
                } else {
                    let rss_pid = opts.get("rss-pid-file").cloned();
                    let samples = opts.get("samples").cloned();
                    let (n, round) = (num("n", 2000)?, num("round", 0)?);
                    let extra = match opts.get("extra-pod") {
                        Some(e) => Some(
                            e.rsplit_once(':')
                                .ok_or("--extra-pod wants CGROUP_PARENT:CONTAINER_ID")?,
                        ),
                        None => None,
                    };
                    let exclusive_every = match num("exclusive-every", 0)? {
                        0 => None,
                        k if k % 4 == 0 => Some(k),
                        k => {
                            return Err(format!(
                                "--exclusive-every {k}: not a multiple of 4 (only every 4th pod is Guaranteed)"
                            )
                            .into())
                        }
                    };
                    let scrape = match opts.get("scrape-hz") {
                        Some(hz) => {
                            let hz: f64 = hz.parse().map_err(|e| format!("--scrape-hz {hz}: {e}"))?;
                            if !(hz > 0.0 && hz <= 1000.0) {
                                return Err(format!("--scrape-hz {hz}: not in (0, 1000]").into());
                            }
                            let log = opts
                                .get("metrics-log")
                                .ok_or("--scrape-hz needs --metrics-log")?;
                            Some((hz, log.as_str()))
                        }
                        None => None,
                    };
                    let load = Load {
                        n,
                        round,
                        extra,
                        exclusive_every,
                        live: num("live", 0)?,
                        scrape,
                    };
                    run_roundtrip(&conn, mask, &load, samples, rss_pid).await
                }
            })
        }
        _ => Err(usage()),
    }
}

fn usage() -> Box<dyn std::error::Error> {
    "usage: bench_driver roundtrip|sync|events --socket S [--n N --round R --samples F \
     --rss-pid-file F --extra-pod PARENT:ID --exclusive-every K --live N --scrape-hz H --metrics-log F | --containers N [--metrics-log F] | --live N \
     --churn M --metrics-log F] | floor --socket S [--n N --samples F] | echo --socket S | sdk --socket S | bare --socket S | stats FILE..."
        .into()
}

async fn setup(conn: &PluginConn) -> Res<EventMask> {
    tokio::time::timeout(ACCEPT_TIMEOUT, conn.wait_registered())
        .await
        .map_err(|_| "plugin did not register")?
        .ok_or("plugin closed before registering")?;
    let resp = conn.configure_as(RUNTIME_VERSION, NRI_VERSION).await?;
    Ok(EventMask::from_bits(resp.events as u32))
}

fn stats_json(s: &LatencyStats) -> String {
    format!(
        "{{\"n\":{},\"median_us\":{:.1},\"p99_us\":{:.1}}}",
        s.count,
        s.p50.as_secs_f64() * 1e6,
        s.p99.as_secs_f64() * 1e6
    )
}

/// What `roundtrip` sends.
struct Load<'a> {
    /// CreateContainer requests, timed.
    n: usize,
    /// Makes pod names and uids unique across runs.
    round: usize,
    /// `--extra-pod`: cgroup parent and container id.
    extra: Option<(&'a str, &'a str)>,
    /// `--exclusive-every`: churn, and one whole CPU for the app of every K-th pod.
    exclusive_every: Option<usize>,
    /// `--live`: containers started (untimed, two per pod, no whole CPUs) before the timed ones,
    /// live while they run.
    live: usize,
    /// `--scrape-hz` and `--metrics-log`: GET /metrics this many times a second (from another
    /// thread) while the timed requests run; the address is read from the plugin's log.
    scrape: Option<(f64, &'a str)>,
}

async fn run_roundtrip(
    conn: &PluginConn,
    mask: EventMask,
    load: &Load<'_>,
    samples: Option<String>,
    rss_pid_file: Option<String>,
) -> Res<()> {
    conn.synchronize(vec![], vec![], None).await?;
    // A runtime sends no event before Synchronize: the extra pod comes after it.
    if let Some((parent, id)) = load.extra {
        extra_pod(conn, mask, parent, id).await?;
    }
    start_live(conn, mask, load.live).await?;
    let scraper = match load.scrape {
        Some((hz, log)) => Some(Scraper::start(metrics_address(log).await?, hz)),
        None => None,
    };
    let mut lat = Vec::with_capacity(load.n);
    let mut pod = None;
    let mut adjusted = 0usize;
    let (mut asked, mut granted) = (0usize, 0usize);
    for i in 0..load.n {
        let p = i / 2;
        // A new pod every other container (app + sidecar), announced first if subscribed.
        if i % 2 == 0 {
            let sb = sandbox(load.round, p);
            send(conn, mask, Event::RUN_POD_SANDBOX, &sb, None).await?;
            pod = Some(sb);
        }
        let pod = pod.clone().ok_or("no pod")?;
        let mut ctr = container(&pod, i % 2, api::ContainerState::CONTAINER_CREATED);
        let exclusive = i % 2 == 0 && load.exclusive_every.is_some_and(|k| p % k == 0);
        if exclusive {
            one_whole_cpu(&mut ctr);
            asked += 1;
        }
        let req = api::CreateContainerRequest {
            pod: MessageField::some(pod.clone()),
            container: MessageField::some(ctr.clone()),
            ..Default::default()
        };
        let start = Instant::now();
        let resp = conn.create_container(&req).await?;
        lat.push(start.elapsed());
        let cpus = resp
            .adjust
            .as_ref()
            .and_then(|a| a.linux.as_ref())
            .and_then(|l| l.resources.as_ref())
            .and_then(|r| r.cpu.as_ref())
            .map(|c| c.cpus.as_str());
        if resp.adjust.as_ref().is_some_and(|a| a.linux.is_some()) {
            adjusted += 1;
        }
        if exclusive && cpus.is_some_and(|c| !c.is_empty() && !c.contains([',', '-'])) {
            granted += 1;
        }
        if load.exclusive_every.is_some() {
            // Churn, untimed: the container goes, and the pod after its second container.
            ctr.state = api::ContainerState::CONTAINER_STOPPED.into();
            send(conn, mask, Event::STOP_CONTAINER, &pod, Some(&ctr)).await?;
            send(conn, mask, Event::REMOVE_CONTAINER, &pod, Some(&ctr)).await?;
            if i % 2 == 1 {
                send(conn, mask, Event::STOP_POD_SANDBOX, &pod, None).await?;
                send(conn, mask, Event::REMOVE_POD_SANDBOX, &pod, None).await?;
            }
        }
    }
    let scraped = match scraper {
        Some(s) => Some(s.stop()?),
        None => None,
    };
    if let Some(f) = samples {
        append_samples(&f, &lat)?;
    }
    let s = LatencyStats::from_samples(&lat).ok_or("no samples")?;
    let mut json = stats_json(&s);
    json.pop();
    json.push_str(&format!(",\"adjusted\":{adjusted}"));
    if load.live > 0 {
        json.push_str(&format!(",\"live\":{}", load.live));
    }
    if let Some(t) = scraped {
        let s = LatencyStats::from_samples(&t).ok_or("the scraper got no /metrics reply")?;
        json.push_str(&format!(",\"scrapes\":{}", stats_json(&s)));
    }
    if load.exclusive_every.is_some() {
        json.push_str(&format!(
            ",\"exclusive\":{{\"asked\":{asked},\"granted\":{granted}}}"
        ));
    }
    json.push('}');
    if let Some(f) = rss_pid_file {
        let pid = std::fs::read_to_string(f)?.trim().to_string();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        json.pop();
        // VmRSS, and what it is made of: the heap and stacks (RssAnon), the binary's and
        // libraries' pages (RssFile).
        for (field, key) in [
            ("VmRSS", "rss_mib"),
            ("RssAnon", "rss_anon_mib"),
            ("RssFile", "rss_file_mib"),
        ] {
            json.push_str(&format!(
                ",\"{key}\":{:.2}",
                status_kib(&status, field)? / 1024.0
            ));
        }
        json.push('}');
    }
    println!("{json}");
    Ok(())
}

/// Appends `lat` to the samples file `f`, one duration in ns per line.
fn append_samples(f: &str, lat: &[Duration]) -> Res<()> {
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(f)?;
    let mut buf = String::new();
    for d in lat {
        buf.push_str(&format!("{}\n", d.as_nanos()));
    }
    out.write_all(buf.as_bytes())?;
    Ok(())
}

/// The size of a CreateContainer reply adjusting cpuset, mems, shares, quota, period, memory
/// limit, oom_score_adj and the pids limit (what topolet sends a Burstable container).
fn create_reply_bytes() -> Res<usize> {
    let cpu = api::LinuxCPU {
        shares: opt_u64(512),
        quota: opt_i64(50_000),
        period: opt_u64(100_000),
        cpus: "1-3".into(),
        mems: "0".into(),
        ..Default::default()
    };
    let memory = api::LinuxMemory {
        limit: opt_i64(256 << 20),
        ..Default::default()
    };
    let resp = adjustment_reply(cpu, Some(memory), 999);
    Ok(resp.write_to_bytes()?.len())
}

/// A CreateContainer reply adjusting `cpu`, `memory` if given, `oom_score_adj` and a pids limit
/// of 1,024.
fn adjustment_reply(
    cpu: api::LinuxCPU,
    memory: Option<api::LinuxMemory>,
    oom_score_adj: i64,
) -> api::CreateContainerResponse {
    let resources = api::LinuxResources {
        cpu: MessageField::some(cpu),
        memory: memory.into(),
        pids: MessageField::some(api::LinuxPids {
            limit: 1024,
            ..Default::default()
        }),
        ..Default::default()
    };
    let linux = api::LinuxContainerAdjustment {
        resources: MessageField::some(resources),
        oom_score_adj: MessageField::some(api::OptionalInt {
            value: oom_score_adj,
            ..Default::default()
        }),
        ..Default::default()
    };
    api::CreateContainerResponse {
        adjust: MessageField::some(api::ContainerAdjustment {
            linux: MessageField::some(linux),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The size of the first CreateContainer request `roundtrip` sends.
fn create_request_bytes() -> Res<usize> {
    let pod = sandbox(0, 0);
    let req = api::CreateContainerRequest {
        container: MessageField::some(container(&pod, 0, api::ContainerState::CONTAINER_CREATED)),
        pod: MessageField::some(pod),
        ..Default::default()
    };
    Ok(req.write_to_bytes()?.len())
}

/// `floor`: N timed frames to the `echo` peer, each answered with a reply's worth of bytes. The
/// reply's size travels in the first frame's first byte after the length (echo cannot know it).
async fn run_floor(socket: &str, n: usize, samples: Option<String>) -> Res<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::UnixListener::bind(socket)?;
    let (mut s, _) = tokio::time::timeout(ACCEPT_TIMEOUT, listener.accept())
        .await
        .map_err(|_| "no echo peer connected")??;
    let (size, reply_size) = (create_request_bytes()?, create_reply_bytes()?);
    let mut frame = vec![0u8; 4 + size];
    frame[..4].copy_from_slice(&u32::try_from(size)?.to_be_bytes());
    frame[4..8].copy_from_slice(&u32::try_from(reply_size)?.to_be_bytes());
    let mut reply = vec![0u8; 4 + reply_size];
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        s.write_all(&frame).await?;
        s.read_exact(&mut reply).await?;
        lat.push(start.elapsed());
    }
    drop(s);
    if let Some(f) = samples {
        append_samples(&f, &lat)?;
    }
    let st = LatencyStats::from_samples(&lat).ok_or("no samples")?;
    println!("{}", stats_json(&st));
    Ok(())
}

/// The SDK floor's plugin: a fixed adjustment for every CreateContainer.
struct SdkFloor;

#[async_trait::async_trait]
impl topolet_nri::Plugin for SdkFloor {
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::CREATE_CONTAINER])
    }
    /// topolet's skips, so a Synchronize costs the SDK what it costs under topolet (decoded,
    /// then answered with no updates).
    fn synchronize_skips(&self) -> topolet_nri::ContainerFields {
        use topolet_nri::ContainerFields as F;
        F::ARGS | F::ENV | F::MOUNTS | F::HOOKS | F::RLIMITS
    }
    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> topolet_nri::PluginResult<api::CreateContainerResponse> {
        Ok(fixed_adjustment(&req))
    }
}

/// The floors' answer to a CreateContainer: the fields the Go baseline sets (shares from the
/// request, quota, cpuset cpus and mems, oom_score_adj, pids limit), computed from nothing else.
fn fixed_adjustment(req: &api::CreateContainerRequest) -> api::CreateContainerResponse {
    let shares = req
        .container
        .linux
        .resources
        .cpu
        .shares
        .as_ref()
        .map_or(1024, |s| s.value);
    let cpu = api::LinuxCPU {
        shares: opt_u64(shares),
        quota: opt_i64(-1),
        cpus: "1".to_string(),
        mems: "0".to_string(),
        ..Default::default()
    };
    adjustment_reply(cpu, None, 0)
}

async fn run_sdk_floor(socket: &str) -> Res<()> {
    let mut config = topolet_nri::StubConfig::new("sdk-floor", "40", socket)?;
    config.reconnect = false;
    let stub = topolet_nri::Stub::new(std::sync::Arc::new(SdkFloor), config)?;
    stub.run().await?;
    Ok(())
}

/// ttrpc message types (the 10-byte ttrpc header's `type`).
const TTRPC_REQUEST: u8 = 1;
const TTRPC_RESPONSE: u8 = 2;
/// The runtime's view of one connection from the bare floor's side: mux frames in and out,
/// ttrpc messages reassembled per conn.
struct BareConn {
    s: std::os::unix::net::UnixStream,
    /// Bytes of conn 1 (the Plugin service) received and not yet cut into messages.
    pending: Vec<u8>,
    frame: Vec<u8>,
}

impl BareConn {
    /// The next ttrpc message on conn 1: (stream id, type, payload); `None` at EOF.
    fn next(&mut self) -> Res<Option<(u32, u8, Vec<u8>)>> {
        loop {
            if let Some(h) = self.pending.get(..10) {
                let len = usize::try_from(u32::from_be_bytes([h[0], h[1], h[2], h[3]]))?;
                let (sid, ty) = (u32::from_be_bytes([h[4], h[5], h[6], h[7]]), h[8]);
                if self.pending.len() >= 10 + len {
                    let body = self.pending[10..10 + len].to_vec();
                    self.pending.drain(..10 + len);
                    return Ok(Some((sid, ty, body)));
                }
            }
            let mut h = [0u8; topolet_nri::mux::HEADER_LEN];
            match self.s.read_exact(&mut h) {
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                r => r?,
            }
            let (conn, len) = topolet_nri::mux::decode_header(&h)?;
            self.frame.resize(len, 0);
            self.s.read_exact(&mut self.frame)?;
            // Conn 2 carries only the runtime's reply to RegisterPlugin: nothing to read in it.
            if conn == topolet_nri::mux::PLUGIN_SERVICE_CONN {
                self.pending.extend_from_slice(&self.frame);
            }
        }
    }

    /// Sends one ttrpc message as one mux frame.
    fn send(&mut self, conn: u32, sid: u32, ty: u8, body: &[u8]) -> Res<()> {
        let mut msg = Vec::with_capacity(10 + body.len());
        msg.extend_from_slice(&u32::try_from(body.len())?.to_be_bytes());
        msg.extend_from_slice(&sid.to_be_bytes());
        msg.extend_from_slice(&[ty, 0]);
        msg.extend_from_slice(body);
        self.s
            .write_all(&topolet_nri::mux::encode_frames(conn, &msg))?;
        Ok(())
    }
}

fn run_bare(socket: &str) -> Res<()> {
    use topolet_nri::ttrpc;
    let mut c = BareConn {
        s: std::os::unix::net::UnixStream::connect(socket)?,
        pending: Vec::new(),
        frame: Vec::new(),
    };
    let register = ttrpc::Request {
        service: "nri.pkg.api.v1alpha1.Runtime".to_string(),
        method: "RegisterPlugin".to_string(),
        payload: api::RegisterPluginRequest {
            plugin_name: "bare-floor".to_string(),
            plugin_idx: "40".to_string(),
            NRI_version: topolet_nri::stub::NRI_VERSION.to_string(),
            ..Default::default()
        }
        .write_to_bytes()?,
        ..Default::default()
    };
    c.send(
        topolet_nri::mux::RUNTIME_SERVICE_CONN,
        1,
        TTRPC_REQUEST,
        &register.write_to_bytes()?,
    )?;
    while let Some((sid, ty, body)) = c.next()? {
        if ty != TTRPC_REQUEST {
            return Err(format!("bare: a ttrpc message of type {ty} on the Plugin service").into());
        }
        let req = ttrpc::Request::parse_from_bytes(&body)?;
        let mut resp = ttrpc::Response::new();
        match req.method.as_str() {
            "Configure" => {
                resp.payload = api::ConfigureResponse {
                    events: EventMask::of(&[Event::CREATE_CONTAINER]).to_wire(),
                    ..Default::default()
                }
                .write_to_bytes()?
            }
            "Synchronize" => resp.payload = api::SynchronizeResponse::new().write_to_bytes()?,
            "CreateContainer" => {
                let create = api::CreateContainerRequest::parse_from_bytes(&req.payload)?;
                resp.payload = fixed_adjustment(&create).write_to_bytes()?;
            }
            other => {
                resp.status = MessageField::some(ttrpc::get_status(
                    ttrpc::Code::UNIMPLEMENTED,
                    format!("bare floor: {other} is not served"),
                ));
            }
        }
        c.send(
            topolet_nri::mux::PLUGIN_SERVICE_CONN,
            sid,
            TTRPC_RESPONSE,
            &resp.write_to_bytes()?,
        )?;
    }
    Ok(())
}

/// `echo`: connects to `socket` and answers every length-prefixed frame with a frame of the
/// size its first four bytes name, until the other side closes.
fn run_echo(socket: &str) -> Res<()> {
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    let (mut buf, mut reply) = (Vec::new(), Vec::new());
    loop {
        let mut len = [0u8; 4];
        match s.read_exact(&mut len) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            r => r?,
        }
        buf.resize(usize::try_from(u32::from_be_bytes(len))?, 0);
        s.read_exact(&mut buf)?;
        let want: [u8; 4] = buf
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .ok_or("echo: a frame shorter than its reply size")?;
        let n = usize::try_from(u32::from_be_bytes(want))?;
        reply.resize(4 + n, 0);
        reply[..4].copy_from_slice(&want);
        s.write_all(&reply)?;
    }
}

/// The value in KiB of `field` (`VmRSS`, `RssAnon`, …) of a `/proc/<pid>/status` text.
fn status_kib(status: &str, field: &str) -> Res<f64> {
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .ok_or_else(|| format!("no {field} in /proc/<pid>/status"))?
        .parse()?)
}

/// Announces, creates and starts BestEffort container `id` in a pod of cgroup parent `parent`.
async fn extra_pod(conn: &PluginConn, mask: EventMask, parent: &str, id: &str) -> Res<()> {
    let mut pod = sandbox(7, 3); // pod 3: BestEffort (see `qos`)
                                 // The kubelet names the pod cgroup after the pod's uid.
    if let Some((_, uid)) = parent.rsplit_once("/pod") {
        pod.uid = uid.to_string();
    }
    let mut linux = (*pod.linux).clone();
    linux.cgroup_parent = parent.to_string();
    linux.cgroups_path = format!("{parent}/{}", pod.id);
    pod.linux = MessageField::some(linux);
    send(conn, mask, Event::RUN_POD_SANDBOX, &pod, None).await?;
    let mut ctr = container(&pod, 0, api::ContainerState::CONTAINER_UNKNOWN);
    ctr.id = id.to_string();
    start_container(conn, mask, &pod, ctr).await
}

async fn run_sync(conn: &PluginConn, n: usize, metrics_log: Option<&str>) -> Res<()> {
    let pods: Vec<_> = (0..n.div_ceil(2)).map(|p| sandbox(9, p)).collect();
    let ctrs: Vec<_> = (0..n)
        .map(|i| container(&pods[i / 2], i % 2, api::ContainerState::CONTAINER_RUNNING))
        .collect();
    let size: usize = pods
        .iter()
        .map(|p| p.compute_size() as usize)
        .sum::<usize>()
        + ctrs
            .iter()
            .map(|c| c.compute_size() as usize)
            .sum::<usize>();
    // containerd splits only when the whole state does not fit one message; keep a 10% margin.
    let page = if size + 1024 < TTRPC_MAX_MSG {
        None
    } else {
        let per_item = size.div_ceil(pods.len() + ctrs.len());
        Some((TTRPC_MAX_MSG * 9 / 10 / per_item / 2).max(1))
    };
    let start = Instant::now();
    let (_, messages) = conn.synchronize(pods, ctrs, page).await?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let plugin = match metrics_log {
        Some(log) => {
            let addr = metrics_address(log).await?;
            let sum = event_sum(&addr, "synchronize")?
                .ok_or("the plugin's histogram has no Synchronize")?;
            format!(",\"plugin_ms\":{:.2}", sum * 1e3)
        }
        None => String::new(),
    };
    println!(
        "{{\"containers\":{n},\"messages\":{messages},\"bytes\":{size},\"sync_ms\":{ms:.2}{plugin}}}"
    );
    Ok(())
}

/// One event of a pod's or container's life, sent as containerd sends it (a request for
/// CreateContainer and StopContainer, a state change for the rest), only if `mask` subscribes it.
async fn send(
    conn: &PluginConn,
    mask: EventMask,
    event: Event,
    pod: &api::PodSandbox,
    ctr: Option<&api::Container>,
) -> Res<()> {
    if !mask.contains(event) {
        return Ok(());
    }
    conn.send_event(event, pod, ctr).await?;
    Ok(())
}

/// Announces, creates and starts `ctr` of `pod`, as containerd does.
async fn start_container(
    conn: &PluginConn,
    mask: EventMask,
    pod: &api::PodSandbox,
    mut ctr: api::Container,
) -> Res<()> {
    send(conn, mask, Event::CREATE_CONTAINER, pod, Some(&ctr)).await?;
    ctr.state = api::ContainerState::CONTAINER_CREATED.into();
    send(conn, mask, Event::POST_CREATE_CONTAINER, pod, Some(&ctr)).await?;
    send(conn, mask, Event::START_CONTAINER, pod, Some(&ctr)).await?;
    ctr.state = api::ContainerState::CONTAINER_RUNNING.into();
    send(conn, mask, Event::POST_START_CONTAINER, pod, Some(&ctr)).await
}

/// Cumulative bucket counts per `event` label, by upper bound (`f64::INFINITY` for `+Inf`).
type Buckets = BTreeMap<String, Vec<(f64, f64)>>;

/// GET /metrics from `addr`; returns the event histograms and the `topolet_managed_containers`
/// gauge.
fn scrape(addr: &str) -> Res<(Buckets, Option<f64>)> {
    let body = metrics_body(addr)?;
    let mut out = Buckets::new();
    let mut managed = None;
    for line in body.lines() {
        if let Some(v) = line.strip_prefix("topolet_managed_containers ") {
            managed = Some(v.trim().parse::<f64>()?);
        }
        let Some(rest) = line.strip_prefix("topolet_nri_event_duration_seconds_bucket{") else {
            continue;
        };
        let (labels, value) = rest
            .rsplit_once("} ")
            .ok_or_else(|| format!("metrics {addr}: bad bucket line {line:?}"))?;
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .and_then(|v| v.strip_suffix('"'))
                .ok_or_else(|| format!("metrics {addr}: no {name} label in {line:?}"))
        };
        let le = match label("le")? {
            "+Inf" => f64::INFINITY,
            v => v.parse()?,
        };
        out.entry(label("event")?.to_string())
            .or_default()
            .push((le, value.trim().parse()?));
    }
    Ok((out, managed))
}

/// The `_sum` (seconds) of the plugin's event histogram for `event`, if it has one.
fn event_sum(addr: &str, event: &str) -> Res<Option<f64>> {
    let want = format!("topolet_nri_event_duration_seconds_sum{{event=\"{event}\"}} ");
    for line in metrics_body(addr)?.lines() {
        if let Some(v) = line.strip_prefix(&want) {
            return Ok(Some(v.trim().parse()?));
        }
    }
    Ok(None)
}

/// The body of GET /metrics from `addr`.
fn metrics_body(addr: &str) -> Res<String> {
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("metrics {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("metrics {addr}: no HTTP header"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("metrics {addr}: {}", head.lines().next().unwrap_or("")).into());
    }
    Ok(body.to_string())
}

/// Prometheus' `histogram_quantile(q, …)` over cumulative `buckets` sorted by bound: linear
/// interpolation inside the bucket holding rank q×count (lower bound 0 for the first bucket; the
/// highest finite bound when the rank falls into `+Inf`). `None` without observations.
fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, cum) in buckets {
        if cum >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            if cum == below {
                return Some(le);
            }
            return Some(lower + (le - lower) * (rank - below) / (cum - below));
        }
        (lower, below) = (le, cum);
    }
    Some(lower)
}

/// Reads the metrics address from the plugin's log (`metrics endpoint listening … address=A`).
async fn metrics_address(log: &str) -> Res<String> {
    let deadline = Instant::now() + ACCEPT_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = text
            .lines()
            .filter(|l| l.contains("metrics endpoint listening"))
            .find_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("address="))
            });
        if let Some(a) = found {
            return Ok(a.trim_matches('"').to_string());
        }
        if Instant::now() > deadline {
            return Err(format!("{log}: no \"metrics endpoint listening\" line").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn quantiles_json(n: f64, buckets: &[(f64, f64)]) -> String {
    let us =
        |q| histogram_quantile(q, buckets).map_or("null".into(), |s| format!("{:.1}", s * 1e6));
    format!(
        "{{\"n\":{n},\"median_us\":{},\"p99_us\":{}}}",
        us(0.5),
        us(0.99)
    )
}

/// Starts `live` containers, two per pod (round 1: uids apart from every timed round's).
async fn start_live(conn: &PluginConn, mask: EventMask, live: usize) -> Res<()> {
    for p in 0..live.div_ceil(2) {
        let pod = sandbox(1, p);
        send(conn, mask, Event::RUN_POD_SANDBOX, &pod, None).await?;
        for k in 0..2.min(live - 2 * p) {
            let ctr = container(&pod, k, api::ContainerState::CONTAINER_UNKNOWN);
            start_container(conn, mask, &pod, ctr).await?;
        }
    }
    Ok(())
}

/// GET /metrics at a fixed rate from its own thread, as a Prometheus server scrapes; each reply's
/// wall time is kept. A failed scrape fails the run.
struct Scraper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Result<Vec<Duration>, String>>,
}

impl Scraper {
    fn start(addr: String, hz: f64) -> Scraper {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let period = Duration::from_secs_f64(1.0 / hz);
        let thread = std::thread::spawn(move || {
            let mut took = Vec::new();
            let mut next = Instant::now();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                metrics_body(&addr).map_err(|e| e.to_string())?;
                took.push(t.elapsed());
                // Fixed rate, not fixed gaps: a slow reply does not lower the rate.
                next += period;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            Ok(took)
        });
        Scraper { stop, thread }
    }

    fn stop(self) -> Res<Vec<Duration>> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(self.thread.join().map_err(|_| "the scraper panicked")??)
    }
}

async fn run_events(
    conn: &PluginConn,
    mask: EventMask,
    live: usize,
    churn: usize,
    log: &str,
) -> Res<()> {
    conn.synchronize(vec![], vec![], None).await?;
    let addr = metrics_address(log).await?;
    start_live(conn, mask, live).await?;
    let (before, managed) = scrape(&addr)?;
    for j in 0..churn {
        let pod = sandbox(2, 1_000_000 + j);
        send(conn, mask, Event::RUN_POD_SANDBOX, &pod, None).await?;
        let mut ctr = container(&pod, 0, api::ContainerState::CONTAINER_UNKNOWN);
        start_container(conn, mask, &pod, ctr.clone()).await?;
        ctr.state = api::ContainerState::CONTAINER_RUNNING.into();
        send(conn, mask, Event::STOP_CONTAINER, &pod, Some(&ctr)).await?;
        ctr.state = api::ContainerState::CONTAINER_STOPPED.into();
        send(conn, mask, Event::REMOVE_CONTAINER, &pod, Some(&ctr)).await?;
        send(conn, mask, Event::STOP_POD_SANDBOX, &pod, None).await?;
        send(conn, mask, Event::REMOVE_POD_SANDBOX, &pod, None).await?;
    }
    let (after, _) = scrape(&addr)?;
    // Churn-only histograms: after − before, per event; pooled over events for "all".
    let mut all: Vec<(f64, f64)> = Vec::new();
    let mut by_event = Vec::new();
    for (event, b) in &after {
        let a = before.get(event);
        let diff: Vec<(f64, f64)> = b
            .iter()
            .enumerate()
            .map(|(i, &(le, c))| (le, c - a.and_then(|a| a.get(i)).map_or(0.0, |x| x.1)))
            .collect();
        let n = diff.last().map_or(0.0, |x| x.1);
        if n <= 0.0 {
            continue;
        }
        if all.is_empty() {
            all = diff.iter().map(|&(le, _)| (le, 0.0)).collect();
        }
        if all.len() != diff.len() {
            return Err(format!(
                "event {event}: {} buckets, others {}",
                diff.len(),
                all.len()
            )
            .into());
        }
        for (x, d) in all.iter_mut().zip(&diff) {
            x.1 += d.1;
        }
        by_event.push(format!("\"{event}\":{}", quantiles_json(n, &diff)));
    }
    let n = all.last().map_or(0.0, |x| x.1);
    if n <= 0.0 {
        return Err("the plugin's histogram recorded no churn event".into());
    }
    let managed = managed.map_or("null".into(), |m| m.to_string());
    println!(
        "{{\"live\":{live},\"churn_pods\":{churn},\"managed_containers\":{managed},\"all\":{},\"by_event\":{{{}}}}}",
        quantiles_json(n, &all),
        by_event.join(",")
    );
    Ok(())
}

/// QoS class of pod `p`: 1/4 Guaranteed (fractional CPU, so no exclusive CPUs are exhausted on a
/// small machine), 1/2 Burstable, 1/4 BestEffort.
#[derive(Clone, Copy)]
enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

fn qos(p: usize) -> Qos {
    match p % 4 {
        0 => Qos::Guaranteed,
        3 => Qos::BestEffort,
        _ => Qos::Burstable,
    }
}

fn uid(round: usize, p: usize) -> String {
    format!(
        "{round:08x}-{:04x}-4{:03x}-8000-{p:012x}",
        p >> 16,
        p & 0xfff
    )
}

fn kv(pairs: &[(&str, String)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn sandbox(round: usize, p: usize) -> api::PodSandbox {
    let uid = uid(round, p);
    let name = format!("web-{round}-{p}-7f9c6d5b8-x2k4q");
    let ns = "bench".to_string();
    let class = match qos(p) {
        Qos::Guaranteed => "",
        Qos::Burstable => "burstable/",
        Qos::BestEffort => "besteffort/",
    };
    let id = format!("{:064x}", (round as u128) << 64 | p as u128);
    let mut linux = api::LinuxPodSandbox::new();
    linux.cgroup_parent = format!("/kubepods/{class}pod{uid}");
    linux.cgroups_path = format!("/kubepods/{class}pod{uid}/{id}");
    linux.namespaces = ["ipc", "uts", "network"]
        .iter()
        .map(|t| api::LinuxNamespace {
            type_: t.to_string(),
            path: format!("/var/run/netns/cni-{uid}"),
            ..Default::default()
        })
        .collect();
    api::PodSandbox {
        id,
        name: name.clone(),
        uid: uid.clone(),
        namespace: ns.clone(),
        labels: kv(&[
            ("app", "web".into()),
            ("pod-template-hash", "7f9c6d5b8".into()),
            ("io.kubernetes.pod.name", name.clone()),
            ("io.kubernetes.pod.namespace", ns.clone()),
            ("io.kubernetes.pod.uid", uid.clone()),
        ]),
        annotations: kv(&[
            ("io.kubernetes.cri.container-type", "sandbox".into()),
            ("io.kubernetes.cri.sandbox-name", name),
            ("io.kubernetes.cri.sandbox-namespace", ns),
            ("io.kubernetes.cri.sandbox-uid", uid),
            (
                "io.kubernetes.cri.sandbox-log-directory",
                "/var/log/pods".into(),
            ),
            (
                "kubernetes.io/config.seen",
                "2026-11-29T13:00:00.000000000Z".into(),
            ),
            ("kubernetes.io/config.source", "api".into()),
        ]),
        runtime_handler: "runc".into(),
        linux: MessageField::some(linux),
        pid: 4000 + p as u32,
        ..Default::default()
    }
}

fn opt_u64(v: u64) -> MessageField<api::OptionalUInt64> {
    MessageField::some(api::OptionalUInt64 {
        value: v,
        ..Default::default()
    })
}

fn opt_i64(v: i64) -> MessageField<api::OptionalInt64> {
    MessageField::some(api::OptionalInt64 {
        value: v,
        ..Default::default()
    })
}

/// Container `k` (0 = app, 1 = sidecar) of `pod`, with the cgroup values the kubelet derives from
/// the pod's QoS class (shares from requests, quota from limits, oom_score_adj by class).
/// Makes a Guaranteed container ask for one whole CPU (1,024 shares, a 100 ms quota per 100 ms),
/// as the kubelet writes a `cpu: 1` request and limit.
fn one_whole_cpu(ctr: &mut api::Container) {
    let mut cpu = api::LinuxCPU::new();
    cpu.shares = opt_u64(1024);
    cpu.period = opt_u64(100_000);
    cpu.quota = opt_i64(100_000);
    if let Some(r) = ctr.linux.as_mut().and_then(|l| l.resources.as_mut()) {
        r.cpu = MessageField::some(cpu);
    }
}

fn container(pod: &api::PodSandbox, k: usize, state: api::ContainerState) -> api::Container {
    let p = pod.pid as usize - 4000;
    let (name, image) = if k == 0 {
        ("app", "registry.k8s.io/e2e-test-images/agnhost:2.53")
    } else {
        ("sidecar", "docker.io/library/busybox:1.36")
    };
    let (shares, quota, mem, oom) = match qos(p) {
        Qos::Guaranteed => (512, 50_000, 256 << 20, -997),
        Qos::Burstable => (102, 0, 512 << 20, 968),
        Qos::BestEffort => (2, 0, 0, 1000),
    };
    let mut cpu = api::LinuxCPU::new();
    cpu.shares = opt_u64(shares);
    cpu.period = opt_u64(100_000);
    if quota > 0 {
        cpu.quota = opt_i64(quota);
    }
    let mut res = api::LinuxResources::new();
    res.cpu = MessageField::some(cpu);
    if mem > 0 {
        let mut m = api::LinuxMemory::new();
        m.limit = opt_i64(mem);
        res.memory = MessageField::some(m);
    }
    let id = format!(
        "{:064x}",
        (pod.pid as u128) << 80 | (p as u128) << 8 | k as u128
    );
    let mut linux = api::LinuxContainer::new();
    linux.resources = MessageField::some(res);
    linux.oom_score_adj = MessageField::some(api::OptionalInt {
        value: oom,
        ..Default::default()
    });
    linux.cgroups_path = format!(
        "{}/{id}",
        pod.linux.as_ref().map_or("", |l| l.cgroup_parent.as_str())
    );
    linux.namespaces = ["pid", "ipc", "uts", "mount", "network"]
        .iter()
        .map(|t| api::LinuxNamespace {
            type_: t.to_string(),
            path: String::new(),
            ..Default::default()
        })
        .collect();
    let uid = &pod.uid;
    let mounts = [
        (
            "/etc/hosts",
            format!("/var/lib/kubelet/pods/{uid}/etc-hosts"),
        ),
        (
            "/dev/termination-log",
            format!("/var/lib/kubelet/pods/{uid}/containers/{name}/1a2b3c4d"),
        ),
        (
            "/var/run/secrets/kubernetes.io/serviceaccount",
            format!(
                "/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected/kube-api-access-x2k4q"
            ),
        ),
        (
            "/etc/hostname",
            format!(
                "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/{}/hostname",
                pod.id
            ),
        ),
    ]
    .into_iter()
    .map(|(d, s)| api::Mount {
        destination: d.into(),
        type_: "bind".into(),
        source: s,
        options: vec!["rbind".into(), "rprivate".into(), "rw".into()],
        ..Default::default()
    })
    .collect();
    api::Container {
        id,
        pod_sandbox_id: pod.id.clone(),
        name: name.into(),
        state: state.into(),
        labels: kv(&[
            ("io.kubernetes.container.name", name.into()),
            ("io.kubernetes.pod.name", pod.name.clone()),
            ("io.kubernetes.pod.namespace", pod.namespace.clone()),
            ("io.kubernetes.pod.uid", uid.clone()),
        ]),
        annotations: kv(&[
            ("io.kubernetes.cri.container-name", name.into()),
            ("io.kubernetes.cri.container-type", "container".into()),
            ("io.kubernetes.cri.image-name", image.into()),
            ("io.kubernetes.cri.sandbox-id", pod.id.clone()),
            ("io.kubernetes.cri.sandbox-name", pod.name.clone()),
            ("io.kubernetes.cri.sandbox-namespace", pod.namespace.clone()),
            ("io.kubernetes.cri.sandbox-uid", uid.clone()),
            ("io.kubernetes.container.hash", "5b3a9f1e".into()),
            ("io.kubernetes.container.restartCount", "0".into()),
            (
                "io.kubernetes.container.terminationMessagePath",
                "/dev/termination-log".into(),
            ),
        ]),
        args: vec![
            "/agnhost".into(),
            "netexec".into(),
            "--http-port=8080".into(),
        ],
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            format!("HOSTNAME={}", pod.name),
            "KUBERNETES_SERVICE_HOST=10.96.0.1".into(),
            "KUBERNETES_SERVICE_PORT=443".into(),
            "KUBERNETES_PORT=tcp://10.96.0.1:443".into(),
        ],
        mounts,
        linux: MessageField::some(linux),
        pid: if state == api::ContainerState::CONTAINER_RUNNING {
            5000 + p as u32 * 2 + k as u32
        } else {
            0
        },
        ..Default::default()
    }
}
