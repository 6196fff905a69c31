//! The fuzz properties of topolet: one function per fuzz target, taking the raw fuzz input and
//! panicking when a property beyond "no panic" fails. The cargo-fuzz targets in
//! `fuzz/fuzz_targets/` are one-line wrappers around these; `plugin/tests/fuzz_replay.rs`
//! depends on this crate and replays the seed corpora and every kept crash input
//! (`fuzz/regressions/<target>/`) through the same functions in the normal `cargo test`. The
//! kubelet-shaped messages come from the test kit's kubelet simulator
//! (`topolet_testkit::kubelet::nri`), the kubelet's cgroup naming from its oracle
//! (`topolet_testkit::cgroup_names`), both written apart from `topolet_core::kube::qos`.
//!
//! Targets and their properties:
//! - [`mux_frames`]: bytes as a trunk read by `topolet_nri::mux` in chunks of a fuzzed size; each
//!   logical conn receives
//!   exactly the payloads a reference decoder finds for it, in order, and the trunk ends `Failed`
//!   exactly when the reference finds an oversized or truncated frame.
//! - [`nri_messages`]: a sequence of NRI requests (every request type the plugin side decodes),
//!   each decoded with `parse_from_bytes` and handed to `TopoletPlugin`'s handler; after every
//!   step the pools are consistent, exclusive CPUs belong only to Guaranteed-path pods, and no
//!   admitted container's oom_score_adj is below its QoS class's value.
//! - [`config_toml`]: `Config::parse`; errors name the file (and the key, for value errors),
//!   accepted files build a placement or fail naming a configuration key.
//! - [`sysfs_tree`]: a CPU list round trip, then a captured 2-CPU sysfs tree with fuzzed file
//!   contents (or files removed) through `topolet::host::sysfs::discover`; errors name a path inside the
//!   tree, accepted trees have exactly the CPUs of `cpu/online`.
//! - [`plan_input`]: `parse_pods` on JSON/YAML text, then `topolet_core::placement::plan::plan` on the 2-socket
//!   fixture machine; placement invariants hold on every plan.
//! - [`device_numa`]: the bytes as a PCI device's `numa_node`, through
//!   `topolet::host::device_numa::parse_numa_node` and `resolve` of a device node under it on a
//!   2-node machine: one device or one error, a node only when the text names one of the
//!   machine's, errors naming the device node and the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use topolet::config::Config;
use topolet::nri::handlers::TopoletPlugin;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::{SyntheticSpec, Topology};
use topolet_nri::api;
use topolet_nri::mux::{decode_header, Mux, TrunkState, HEADER_LEN};
use topolet_nri::plugin::{Plugin, RuntimeInfo};
use topolet_nri::protobuf::Message;
use topolet_nri::sync_fields::decode_synchronize;
use topolet_testkit::cgroup_names;
use topolet_testkit::kubelet::Qos;

fn sysfs_fixture(name: &str) -> PathBuf {
    topolet_testkit::sysfs::fixture(name)
}

/// One current-thread tokio runtime per process, shared by every input.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime for the fuzz harness")
    })
}

// ------------------------------------------------------------------------------------------------
// (a) mux frame reader

/// What a conn must see and how the trunk must end, by the wire format alone.
struct Expected {
    per_conn: BTreeMap<u32, Vec<u8>>,
    failed: bool,
}

fn reference_decode(data: &[u8], open: &[u32]) -> Expected {
    let mut per_conn: BTreeMap<u32, Vec<u8>> = open.iter().map(|&c| (c, Vec::new())).collect();
    let mut rest = data;
    loop {
        if rest.is_empty() {
            return Expected {
                per_conn,
                failed: false,
            };
        }
        let Some(hdr) = rest.get(..HEADER_LEN) else {
            return Expected {
                per_conn,
                failed: true,
            };
        };
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(hdr);
        let Ok((conn, len)) = decode_header(&h) else {
            return Expected {
                per_conn,
                failed: true,
            };
        };
        let Some(payload) = rest.get(HEADER_LEN..HEADER_LEN + len) else {
            return Expected {
                per_conn,
                failed: true,
            };
        };
        if let Some(buf) = per_conn.get_mut(&conn) {
            buf.extend_from_slice(payload);
        }
        rest = &rest[HEADER_LEN + len..];
    }
}

/// A reader handing out at most `chunk` bytes per read (0: everything at once), so frame
/// headers and payloads arrive split the ways a socket may split them.
struct Chunked {
    data: Vec<u8>,
    pos: usize,
    chunk: usize,
}

impl tokio::io::AsyncRead for Chunked {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let left = self.data.len() - self.pos;
        let mut n = left.min(buf.remaining());
        if self.chunk > 0 {
            n = n.min(self.chunk);
        }
        let start = self.pos;
        buf.put_slice(&self.data[start..start + n]);
        self.pos += n;
        std::task::Poll::Ready(Ok(()))
    }
}

/// Input: one byte choosing the read size (`b % 32`, 0 = unlimited), then the trunk's bytes
/// (conns 1 and 2 open, as in the plugin). Every conn's bytes and the trunk's end must match
/// `reference_decode`.
pub fn mux_frames(data: &[u8]) {
    const OPEN: [u32; 2] = [1, 2];
    let Some((&chunk, data)) = data.split_first() else {
        return;
    };
    let want = reference_decode(data, &OPEN);
    let reader = Chunked {
        data: data.to_vec(),
        pos: 0,
        chunk: usize::from(chunk % 32),
    };
    let trunk = tokio::io::join(reader, tokio::io::sink());
    runtime().block_on(async {
        use tokio::io::AsyncReadExt;
        let (mux, conns) = Mux::new(trunk, &OPEN).expect("mux over an in-memory trunk");
        let reads: Vec<_> = conns
            .into_iter()
            .map(|mut c| {
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let end = c.read_to_end(&mut got).await;
                    (c.id(), got, end.is_err())
                })
            })
            .collect();
        let mut results = Vec::new();
        for r in reads {
            results.push(r.await.expect("conn reader task"));
        }
        let state = mux.closed().await;
        for (id, got, errored) in results {
            let exp = &want.per_conn[&id];
            assert!(
                got == *exp,
                "conn {id}: got {} bytes, the frames carry {} bytes",
                got.len(),
                exp.len()
            );
            assert_eq!(
                errored, want.failed,
                "conn {id}: read ended with an error = {errored}, trunk failure expected = {}",
                want.failed
            );
        }
        match (&state, want.failed) {
            (TrunkState::Failed(_, msg), true) => assert!(
                msg.contains("mux") || msg.contains("frame"),
                "trunk failure message does not say what failed: {msg}"
            ),
            (TrunkState::Eof, false) => {}
            (s, failed) => panic!("trunk ended {s:?}; a failure expected = {failed}"),
        }
    });
}

// ------------------------------------------------------------------------------------------------
// (b) NRI messages through the plugin's handlers

/// The request types the plugin side of NRI decodes (the `Plugin` ttrpc service), in the order
/// the record's kind byte selects them.
pub const NRI_REQUESTS: [&str; 17] = [
    "ConfigureRequest",
    "SynchronizeRequest",
    "RunPodSandboxRequest",
    "UpdatePodSandboxRequest",
    "PostUpdatePodSandboxRequest",
    "StopPodSandboxRequest",
    "RemovePodSandboxRequest",
    "CreateContainerRequest",
    "PostCreateContainerRequest",
    "StartContainerRequest",
    "PostStartContainerRequest",
    "UpdateContainerRequest",
    "PostUpdateContainerRequest",
    "StopContainerRequest",
    "RemoveContainerRequest",
    "StateChangeEvent",
    "ValidateContainerAdjustmentRequest",
];

/// Encodes one record of an [`nri_messages`] input: kind, u16 little-endian length, message.
pub fn nri_record<M: Message>(kind: usize, msg: &M) -> Vec<u8> {
    let body = msg.write_to_bytes().expect("encode nri message");
    let len = u16::try_from(body.len()).expect("seed message below 64 KiB");
    let mut out = vec![u8::try_from(kind).expect("kind below 256")];
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The machine of the NRI target: 2 sockets × 2 cores × 2 threads (CPUs 0-7), CPU 0 reserved.
fn nri_topology() -> &'static Topology {
    static T: OnceLock<Topology> = OnceLock::new();
    T.get_or_init(|| SyntheticSpec::TWO_SOCKETS_SMT.build())
}

/// Floor of the NRI target's config: no floor, so the class values themselves are checked.
const NRI_FLOOR: i32 = -1000;

/// A scratch directory of this process, `topolet-fuzz-<what>-<pid>` on tmpfs when there is one
/// (inputs write files all the time). A fuzzing process ends with `exit`, so nothing drops it:
/// instead, creating one removes those of processes that no longer exist.
fn scratch_dir(what: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let prefix = format!("topolet-fuzz-{what}-");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix(&prefix) else {
                continue;
            };
            if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = base.join(format!("{prefix}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory for the fuzz harness");
    dir
}

fn nri_state_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| scratch_dir("state"))
}

fn nri_plugin() -> TopoletPlugin {
    let mut c = Config::default();
    c.cpu.reserved_cpus = Some("0".into());
    c.qos.oom_score_adj_floor = Some(NRI_FLOOR);
    c.qos.pids_limit = 4096;
    c.state.dir = nri_state_dir().to_path_buf();
    let _ = std::fs::remove_file(c.state.dir.join(topolet::nri::handlers::STATE_FILE));
    TopoletPlugin::new(c, nri_topology().clone()).expect("plugin on the fixture machine")
}

/// The QoS class a cgroup parent names, by the kubelet's own naming (the test kit's oracle,
/// written apart from `topolet_core::kube::qos`).
fn class_of_parent(parent: &str) -> Option<&'static str> {
    parent_info(parent).map(|(class, _)| class)
}

/// `(class, pod uid)` of a kubelet pod cgroup path, either driver.
fn parent_info(parent: &str) -> Option<(&'static str, String)> {
    let (qos, uid) = cgroup_names::parse_pod(parent)?;
    let class = match qos {
        Qos::Guaranteed => "Guaranteed",
        Qos::Burstable => "Burstable",
        Qos::BestEffort => "BestEffort",
    };
    Some((class, uid))
}

/// The oom_score_adj range the kubelet gives `class` (clamped to `floor`).
pub fn oom_range(class: &str, floor: i32) -> (i32, i32) {
    let (lo, hi) = match class {
        "Guaranteed" => (-997, -997),
        "Burstable" => (3, 999),
        _ => (1000, 1000),
    };
    (lo.max(floor), hi.max(floor))
}

/// Checks the plugin's pools after an event: exclusive sets pairwise disjoint, outside the
/// reserved CPUs and the shared pool, and held only by pods whose cgroup parent is Guaranteed.
fn check_pools(plugin: &TopoletPlugin, guaranteed_uids: &BTreeSet<String>, step: usize) {
    let (snap, _) = plugin.snapshot();
    let all = nri_topology().cpus();
    let mut held = CpuSet::new();
    for e in &snap.exclusive {
        assert!(
            !e.cpus.is_empty() && e.cpus.is_subset(all),
            "step {step}: {} holds {} (machine {all})",
            e.key,
            e.cpus
        );
        assert!(
            e.cpus.is_disjoint(&held),
            "step {step}: cpus {} granted twice",
            e.cpus.intersection(&held)
        );
        assert!(
            e.cpus.is_disjoint(&snap.reserved),
            "step {step}: reserved cpus {} granted to {}",
            e.cpus.intersection(&snap.reserved),
            e.key
        );
        assert!(
            guaranteed_uids.contains(&e.key.pod_uid),
            "step {step}: {} holds exclusive cpus {} but no Guaranteed pod has uid {:?}",
            e.key,
            e.cpus,
            e.key.pod_uid
        );
        held.extend_from(&e.cpus);
    }
    assert!(
        snap.shared.is_disjoint(&held),
        "step {step}: shared pool {} overlaps exclusive {held}",
        snap.shared
    );
    assert!(
        snap.shared.is_subset(all) && !snap.shared.is_empty(),
        "step {step}: shared pool {} (machine {all})",
        snap.shared
    );
}

fn record_pod_uid(pod: &api::PodSandbox, guaranteed: &mut BTreeSet<String>) {
    let parent = pod.linux.as_ref().map(|l| l.cgroup_parent.as_str());
    if let Some(("Guaranteed", uid)) = parent.and_then(parent_info) {
        // The plugin keys containers by the sandbox uid, or the path's uid when that is empty.
        guaranteed.insert(if pod.uid.is_empty() {
            uid
        } else {
            pod.uid.clone()
        });
    }
}

/// Checks the adjustment of an admitted container against its pod's class.
pub fn check_create_response(
    req: &api::CreateContainerRequest,
    resp: &api::CreateContainerResponse,
    floor: i32,
    machine: &CpuSet,
    context: &str,
) {
    let (Some(pod), Some(ctr)) = (req.pod.as_ref(), req.container.as_ref()) else {
        return;
    };
    let Some(adjust) = resp.adjust.as_ref() else {
        return; // not managed (not a Kubernetes pod, a sandbox, or cpuset already set)
    };
    let parent = pod.linux.as_ref().map(|l| l.cgroup_parent.as_str());
    let class = parent.and_then(class_of_parent).unwrap_or_else(|| {
        panic!("{context}: adjusted a container whose cgroup parent {parent:?} is not a kubelet pod cgroup")
    });
    let current = ctr
        .linux
        .as_ref()
        .and_then(|l| l.oom_score_adj.as_ref())
        .map(|o| o.value);
    let set = adjust
        .linux
        .as_ref()
        .and_then(|l| l.oom_score_adj.as_ref())
        .map(|o| o.value);
    let effective = set.or(current);
    // Never below the class's value. Above it is allowed: resources that contradict the path (a
    // Guaranteed path without limits) are placed by what can be read back, a lower class.
    let (lo, _) = oom_range(class, floor);
    assert!(
        effective.is_some_and(|v| (i64::from(lo)..=1000).contains(&v)),
        "{context}: {class} container ends with oom_score_adj {effective:?} (set {set:?}), outside {lo}..=1000"
    );
    if let Some(cpus) = adjust
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref())
        .map(|c| c.cpus.as_str())
        .filter(|c| !c.is_empty())
    {
        let set = CpuSet::parse(cpus)
            .unwrap_or_else(|e| panic!("{context}: adjustment cpuset {cpus:?}: {e}"));
        assert!(
            set.is_subset(machine) && !set.is_empty(),
            "{context}: adjustment cpuset {set} (machine {machine})"
        );
    }
}

/// Splits `data` into `(kind, message bytes)` records: kind byte, u16 LE length, bytes.
fn records(mut data: &[u8]) -> Vec<(usize, &[u8])> {
    let mut out = Vec::new();
    while data.len() >= 3 {
        let kind = usize::from(data[0]) % NRI_REQUESTS.len();
        let len = usize::from(u16::from_le_bytes([data[1], data[2]]));
        let body = &data[3..];
        let n = len.min(body.len());
        out.push((kind, &body[..n]));
        data = &body[n..];
    }
    out
}

fn pod_of(p: &topolet_nri::protobuf::MessageField<api::PodSandbox>) -> api::PodSandbox {
    p.as_ref().cloned().unwrap_or_default()
}

fn ctr_of(c: &topolet_nri::protobuf::MessageField<api::Container>) -> api::Container {
    c.as_ref().cloned().unwrap_or_default()
}

/// Runs the NRI records of `data` through one fresh `TopoletPlugin`, checking after each.
pub fn nri_messages(data: &[u8]) {
    static LOCK: Mutex<()> = Mutex::new(());
    // One state dir per process: inputs run one at a time.
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let plugin = nri_plugin();
    let machine = nri_topology().cpus().clone();
    let mut guaranteed: BTreeSet<String> = BTreeSet::new();
    runtime().block_on(async {
        for (step, (kind, body)) in records(data).into_iter().enumerate() {
            let name = NRI_REQUESTS[kind];
            let ctx = format!("step {step} ({name})");
            // Handler errors are answers (the runtime fails the operation); only the state
            // afterwards is checked.
            match kind {
                0 => {
                    let Ok(req) = api::ConfigureRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    let _ = plugin
                        .configure(&req, &RuntimeInfo::from_configure(&req))
                        .await;
                }
                1 => {
                    let Ok(full) = api::SynchronizeRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    // The stub decodes Synchronize without the fields topolet skips: whatever
                    // the full decoder accepts, so does that, minus those fields.
                    let skip = plugin.synchronize_skips();
                    let req = decode_synchronize(body, skip).unwrap_or_else(|e| {
                        panic!("{ctx}: the full decode took it, the slim one: {e}")
                    });
                    let mut want = full;
                    for c in &mut want.containers {
                        skip.clear(c);
                    }
                    assert_eq!(
                        req, want,
                        "{ctx}: the slim decode differs beyond the skipped fields"
                    );
                    for p in &req.pods {
                        record_pod_uid(p, &mut guaranteed);
                    }
                    if let Ok(updates) = plugin.synchronize(req.pods, req.containers).await {
                        for u in &updates {
                            let cpus = u
                                .linux
                                .as_ref()
                                .and_then(|l| l.resources.as_ref())
                                .and_then(|r| r.cpu.as_ref())
                                .map(|c| c.cpus.clone())
                                .unwrap_or_default();
                            if !cpus.is_empty() {
                                let set = CpuSet::parse(&cpus).unwrap_or_else(|e| {
                                    panic!("{ctx}: update cpuset {cpus:?}: {e}")
                                });
                                assert!(set.is_subset(&machine), "{ctx}: update cpuset {set}");
                            }
                        }
                    }
                }
                2 => {
                    let Ok(req) = api::RunPodSandboxRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    record_pod_uid(&pod_of(&req.pod), &mut guaranteed);
                    let _ = plugin.run_pod_sandbox(pod_of(&req.pod)).await;
                }
                3 => {
                    let Ok(req) = api::UpdatePodSandboxRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    let _ = plugin.update_pod_sandbox(req).await;
                }
                4 => {
                    let Ok(req) = api::PostUpdatePodSandboxRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    let _ = plugin.post_update_pod_sandbox(pod_of(&req.pod)).await;
                }
                5 => {
                    let Ok(req) = api::StopPodSandboxRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    let _ = plugin.stop_pod_sandbox(pod_of(&req.pod)).await;
                }
                6 => {
                    let Ok(req) = api::RemovePodSandboxRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    let _ = plugin.remove_pod_sandbox(pod_of(&req.pod)).await;
                }
                7 => {
                    let Ok(req) = api::CreateContainerRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    record_pod_uid(&pod_of(&req.pod), &mut guaranteed);
                    if let Ok(resp) = plugin.create_container(req.clone()).await {
                        check_create_response(&req, &resp, NRI_FLOOR, &machine, &ctx);
                    }
                }
                8 => {
                    let Ok(req) = api::PostCreateContainerRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    let _ = plugin
                        .post_create_container(pod_of(&req.pod), ctr_of(&req.container))
                        .await;
                }
                9 => {
                    let Ok(req) = api::StartContainerRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    let _ = plugin
                        .start_container(pod_of(&req.pod), ctr_of(&req.container))
                        .await;
                }
                10 => {
                    let Ok(req) = api::PostStartContainerRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    // A container first seen here (after Synchronize) is adopted: its pod is
                    // as good a source of a Guaranteed uid as RunPodSandbox.
                    record_pod_uid(&pod_of(&req.pod), &mut guaranteed);
                    let _ = plugin
                        .post_start_container(pod_of(&req.pod), ctr_of(&req.container))
                        .await;
                }
                11 => {
                    let Ok(req) = api::UpdateContainerRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    // As PostStartContainer: a container first seen here is adopted.
                    if let Some(pod) = req.pod.as_ref() {
                        record_pod_uid(pod, &mut guaranteed);
                    }
                    let _ = plugin.update_container(req).await;
                }
                12 => {
                    let Ok(req) = api::PostUpdateContainerRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    let _ = plugin
                        .post_update_container(pod_of(&req.pod), ctr_of(&req.container))
                        .await;
                }
                13 => {
                    let Ok(req) = api::StopContainerRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    let _ = plugin
                        .stop_container(pod_of(&req.pod), ctr_of(&req.container))
                        .await;
                }
                14 => {
                    let Ok(req) = api::RemoveContainerRequest::parse_from_bytes(body) else {
                        continue;
                    };
                    let _ = plugin
                        .remove_container(pod_of(&req.pod), ctr_of(&req.container))
                        .await;
                }
                15 => {
                    // The plugin is not subscribed to StateChange-only events it does not
                    // declare; the stub drops those. Decoding must still be total.
                    let Ok(_ev) = api::StateChangeEvent::parse_from_bytes(body) else {
                        continue;
                    };
                }
                _ => {
                    let Ok(req) = api::ValidateContainerAdjustmentRequest::parse_from_bytes(body)
                    else {
                        continue;
                    };
                    let _ = plugin.validate_container_adjustment(req).await;
                }
            }
            check_pools(&plugin, &guaranteed, step);
        }
    });
}

// ------------------------------------------------------------------------------------------------
// (c) configuration

/// Parses `data` as the TOML configuration; errors must name the file and (value errors) the key;
/// an accepted file must build the placement on the 2-socket fixture, or fail naming a key.
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/fuzz/node.toml");
    match Config::parse(text, path) {
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with("/fuzz/node.toml: "),
                "error does not name the file: {msg}"
            );
            if let Some(key) = e.key() {
                assert!(!key.is_empty(), "value error with an empty key: {msg}");
                assert!(
                    msg.starts_with(&format!("/fuzz/node.toml: {key}: ")),
                    "value error does not lead with its key {key:?}: {msg}"
                );
            }
        }
        Ok(config) => {
            assert!(
                config.eviction().is_ok(),
                "parse accepted an [eviction] section that eviction() rejects"
            );
            match config
                .placement()
                .and_then(|s| topolet_core::placement::Placement::new(plan_topology(), &s))
            {
                Ok(_) => {}
                Err(e) => assert!(
                    e.is_config(),
                    "an accepted file fails placement with a non-configuration error: {e}"
                ),
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// (d) sysfs

/// Files of the base tree (`ci-host-captured`, relative to its root) a record may replace or
/// remove, plus paths the tree lacks (a third CPU, a second node, a hugepage size, a device).
fn sysfs_files() -> &'static [String] {
    static FILES: OnceLock<Vec<String>> = OnceLock::new();
    FILES.get_or_init(|| {
        let root = sysfs_fixture("ci-host-captured");
        let mut files = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("fixture ci-host-captured") {
                let path = entry.expect("fixture entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if let Ok(rel) = path.strip_prefix(&root) {
                    files.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        files.sort();
        for extra in [
            "devices/system/cpu/cpu2/topology/physical_package_id",
            "devices/system/cpu/cpu2/topology/core_id",
            "devices/system/cpu/cpu2/cache/index3/level",
            "devices/system/cpu/cpu2/cache/index3/shared_cpu_list",
            "devices/system/node/node1/cpulist",
            "devices/system/node/node1/meminfo",
            "devices/system/node/node1/distance",
            "devices/system/node/node0/hugepages/hugepages-64kB/nr_hugepages",
            "bus/pci/devices/0000:ff:1f.7/numa_node",
        ] {
            files.push(extra.to_string());
        }
        files
    })
}

struct SysfsTree {
    dir: PathBuf,
    original: BTreeMap<String, Vec<u8>>,
}

fn sysfs_tree_base() -> &'static Mutex<SysfsTree> {
    static TREE: OnceLock<Mutex<SysfsTree>> = OnceLock::new();
    TREE.get_or_init(|| {
        let src = sysfs_fixture("ci-host-captured");
        let dir = scratch_dir("sysfs");
        let mut original = BTreeMap::new();
        for rel in sysfs_files() {
            if let Ok(bytes) = std::fs::read(src.join(rel)) {
                let dst = dir.join(rel);
                if let Some(parent) = dst.parent() {
                    std::fs::create_dir_all(parent).expect("sysfs tree dir");
                }
                std::fs::write(&dst, &bytes).expect("sysfs tree file");
                original.insert(rel.clone(), bytes);
            }
        }
        Mutex::new(SysfsTree { dir, original })
    })
}

/// Canonical CPU lists: whatever parses prints canonically and parses back to the same set.
fn cpulist_round_trip(text: &str) {
    if let Ok(set) = CpuSet::parse(text) {
        let printed = set.to_string();
        let again = CpuSet::parse(&printed).unwrap_or_else(|e| {
            panic!("{text:?} printed as {printed:?}, which does not parse: {e}")
        });
        assert!(again == set, "{text:?} → {printed:?} → a different set");
        assert_eq!(again.to_string(), printed, "printing is not canonical");
        assert_eq!(set.len(), set.iter().count());
    }
}

/// Input: a CPU list up to the first NUL (round-tripped), then records of
/// `[file index][length][content]` applied to the base tree (length 255: remove the file),
/// then `discover`.
pub fn sysfs_tree(data: &[u8]) {
    let (list, mut rest) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(text) = std::str::from_utf8(list) {
        cpulist_round_trip(text);
    }
    let files = sysfs_files();
    let tree = sysfs_tree_base().lock().unwrap_or_else(|p| p.into_inner());
    let root = tree.dir.as_path();
    let mut touched: BTreeSet<&String> = BTreeSet::new();
    while rest.len() >= 2 {
        let file = &files[usize::from(rest[0]) % files.len()];
        let len = usize::from(rest[1]);
        rest = &rest[2..];
        let path = root.join(file);
        touched.insert(file);
        if len == 255 {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let n = len.min(rest.len());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("sysfs tree dir");
        }
        std::fs::write(&path, &rest[..n]).expect("sysfs tree file");
        rest = &rest[n..];
    }
    let result = topolet::host::sysfs::discover(root);
    // Check before restoring: the error paths point into the tree as it was read.
    match &result {
        Err(topolet::host::sysfs::DiscoveryError::Sysfs(e)) => {
            assert!(
                e.path().starts_with(root),
                "error names {} outside the tree {}",
                e.path().display(),
                root.display()
            );
            let msg = e.to_string();
            assert!(
                msg.starts_with(&e.path().display().to_string()),
                "error does not lead with its path: {msg}"
            );
        }
        Err(e @ topolet::host::sysfs::DiscoveryError::Topology { root: r, .. }) => {
            assert_eq!(r, root, "topology error names another root: {e}");
        }
        Ok(topo) => {
            let online = std::fs::read_to_string(root.join("devices/system/cpu/online"))
                .expect("online file was read");
            let want = CpuSet::parse(online.trim()).expect("online list parsed by discover");
            assert!(
                *topo.cpus() == want,
                "discovered cpus {} but cpu/online says {want}",
                topo.cpus()
            );
            let in_nodes: usize = topo.numa_nodes().map(|n| n.cpus.len()).sum();
            assert_eq!(in_nodes, topo.num_cpus(), "every cpu in exactly one node");
        }
    }
    for file in touched {
        let path = root.join(file);
        match tree.original.get(file) {
            Some(bytes) => std::fs::write(&path, bytes).expect("restore sysfs file"),
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// (e) plan

/// The fixture machine of the plan target: 2 sockets, 24 cores each, SMT (`2s-24c-ht`).
fn plan_topology() -> &'static Topology {
    static T: OnceLock<Topology> = OnceLock::new();
    T.get_or_init(|| {
        topolet::host::sysfs::discover(&sysfs_fixture("2s-24c-ht")).expect("fixture 2s-24c-ht")
    })
}

/// `topolet plan` on the text: errors are reported (never a panic), and every plan keeps the
/// placement invariants (see `plugin/tests/plan_fixtures.rs` `check_plan` for the same rules).
pub fn plan_input(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(pods) = topolet_core::kube::pod_input::parse_pods(text) else {
        return;
    };
    let topo = plan_topology();
    let mut config = Config::default();
    config.cpu.reserved_cpus = Some("0,48".into());
    let placement = match config.placement() {
        Ok(placement) => placement,
        Err(e) => panic!("the default configuration with reserved CPUs 0,48 is invalid: {e}"),
    };
    let out = match topolet_core::placement::plan::plan(topo, &placement, &pods) {
        Ok(out) => out,
        Err(e) => panic!("plan failed for a valid configuration: {e}"),
    };
    let n_containers: usize = pods
        .iter()
        .map(|p| p.containers.len() + p.init_containers.len())
        .sum();
    assert_eq!(out.containers.len(), n_containers, "one row per container");
    let reserved = CpuSet::parse(&out.pools.reserved).expect("reserved pool prints as a list");
    let shared = CpuSet::parse(&out.pools.shared).expect("shared pool prints as a list");
    let critical: BTreeSet<String> = pods
        .iter()
        .filter(|p| p.is_node_critical())
        .map(|p| p.key())
        .collect();
    let mut exclusive = CpuSet::new();
    for c in &out.containers {
        let ctx = format!("{}/{}", c.pod, c.container);
        assert_eq!(c.admitted, c.error.is_none(), "{ctx}");
        if !c.admitted {
            assert!(c.cpuset.is_none() && !c.exclusive, "{ctx}");
            continue;
        }
        let set = CpuSet::parse(c.cpuset.as_deref().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{ctx}: cpuset: {e}"));
        assert!(
            !set.is_empty() && set.is_subset(topo.cpus()),
            "{ctx}: {set}"
        );
        if c.exclusive {
            assert_eq!(c.qos, "Guaranteed", "{ctx}: exclusive cpus for {}", c.qos);
            assert!(
                set.is_disjoint(&reserved),
                "{ctx}: reserved cpus handed out"
            );
            if !c.init {
                // A plain init container's cpus go back to the pool (or its app containers).
                assert!(
                    set.is_disjoint(&shared),
                    "{ctx}: exclusive cpus in the shared pool"
                );
                assert!(
                    set.is_disjoint(&exclusive),
                    "{ctx}: cpus {set} granted twice"
                );
                exclusive.extend_from(&set);
            }
        } else {
            assert_eq!(set, shared, "{ctx}: shared container off the shared pool");
        }
        let oom = c
            .oom_score_adj
            .unwrap_or_else(|| panic!("{ctx}: no oom_score_adj"));
        let (mut lo, hi) = oom_range(&c.qos, -1000);
        if critical.contains(&c.pod) {
            lo = lo.min(-997); // node-critical pods get the Guaranteed value in every class
        }
        assert!(
            (lo..=hi).contains(&oom),
            "{ctx}: {} container gets oom_score_adj {oom}, outside {lo}..={hi}",
            c.qos
        );
    }
}

// ------------------------------------------------------------------------------------------------
// Kubelet-shaped NRI messages (seed corpora, and the security tests in plugin/tests/security.rs)

/// Messages shaped like the kubelet's through containerd, from the test kit's kubelet simulator.
pub use topolet_testkit::kubelet::nri as shapes;

/// The device tree of [`device_numa`]: a GPU (`0000:3b:00.0`) with a char device `226:1` under it.
fn device_numa_tree() -> &'static Mutex<PathBuf> {
    static TREE: OnceLock<Mutex<PathBuf>> = OnceLock::new();
    TREE.get_or_init(|| {
        let dir = scratch_dir("device-numa");
        let gpu = dir.join("devices/pci0000:00/0000:00:01.0/0000:3b:00.0");
        std::fs::create_dir_all(gpu.join("drm/card1")).expect("device tree dir");
        std::fs::create_dir_all(dir.join("dev/char")).expect("device tree dir");
        std::os::unix::fs::symlink(
            "../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0/drm/card1",
            dir.join("dev/char/226:1"),
        )
        .expect("device tree link");
        Mutex::new(dir)
    })
}

/// Input: the content of the GPU's `numa_node`. `parse_numa_node` agrees with an integer parse
/// of the text; `resolve` of `/dev/dri/card1` on a machine with nodes 0 and 1 gives exactly one
/// device or one error, its node one of the machine's and the one the text names, its error
/// naming the device node and the `numa_node` file.
pub fn device_numa(data: &[u8]) {
    use topolet::host::device_numa::{parse_numa_node, resolve, DeviceNode};
    let text = String::from_utf8_lossy(data);
    let number = text.trim().parse::<i64>().ok();
    match parse_numa_node(&text) {
        Ok(Some(n)) => assert_eq!(number, i64::try_from(n).ok(), "{text:?} read as node {n}"),
        Ok(None) => assert_eq!(number, Some(-1), "{text:?} read as no locality"),
        Err(reason) => assert!(
            number.is_none_or(|n| n < -1),
            "{text:?} refused ({reason}) though it is a node id or -1"
        ),
    }
    let dir = device_numa_tree().lock().unwrap_or_else(|p| p.into_inner());
    let file = dir.join("devices/pci0000:00/0000:00:01.0/0000:3b:00.0/numa_node");
    std::fs::write(&file, data).expect("numa_node");
    let card = DeviceNode {
        path: "/dev/dri/card1".into(),
        kind: "c".into(),
        major: 226,
        minor: 1,
    };
    let got = resolve(&dir, &[card], &[0, 1]);
    assert_eq!(got.devices.len() + got.errors.len(), 1, "{got:?}");
    // The file is read up to one page: what it says beyond is not the property's business.
    let whole = data.len() <= 4096;
    if let Some(d) = got.devices.first() {
        assert_eq!(d.id, "/dev/dri/card1");
        if let Some(n) = d.numa {
            assert!(n <= 1, "node {n} is not one of the machine's");
        }
        if whole {
            assert_eq!(parse_numa_node(&text), Ok(d.numa), "{text:?}");
        }
    }
    if let Some(e) = got.errors.first() {
        let msg = e.to_string();
        assert!(
            msg.contains("/dev/dri/card1") && msg.contains("numa_node"),
            "{msg}"
        );
        if whole {
            assert!(
                !matches!(parse_numa_node(&text), Ok(None) | Ok(Some(0 | 1))),
                "{text:?} refused: {msg}"
            );
        }
    }
}
