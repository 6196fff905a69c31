//! Security properties (docs/src/install.md and docs/src/observability.md):
//!
//! - the admin socket is created 0600 in a root-only directory, whatever the umask, and an
//!   existing directory anyone may write to is refused; a non-root user cannot reach it;
//! - the state directory is created 0700 and the state file written 0600, whatever the umask and
//!   whatever a leftover temporary file's mode;
//! - over NRI (the real `TopoletPlugin` behind its stub, driven by the fake runtime), no
//!   annotation or label a pod author can set changes what topolet answers: for random pods of
//!   every QoS class, arbitrary annotations and labels (keys other NRI plugins and the kubelet
//!   honour, kubelet/CRI keys, huge values) give exactly the un-annotated pod's adjustment; no
//!   non-Guaranteed or non-integer pod gets exclusive or reserved CPUs, and no container gets an
//!   oom_score_adj below its QoS class's value;
//! - the QoS class comes only from the pod's cgroup parent, which the kubelet writes: a pod whose
//!   annotations, labels or name claim Guaranteed is treated by its cgroup path and resources, and
//!   a hand-made Guaranteed path with BestEffort resources (possible only for someone who talks to
//!   containerd directly, i.e. root) gets the Guaranteed oom_score_adj but no exclusive CPUs.
//!
//! The tests that check modes run each in a child process with umask 0 (this test binary
//! re-executed on that one test), so every mode checked is one the code sets itself; the umask
//! of this process, whose other tests run in parallel, is left alone.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use topolet::config::Config;
use topolet::introspection::admin;
use topolet::nri::handlers::{TopoletPlugin, STATE_FILE};
use topolet::state::file as state_file;
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::{SyntheticSpec, Topology};
use topolet_fuzz_props as fuzz;
use topolet_nri::api::{self, Event};
use topolet_nri::fake_runtime::{FakeRuntime, PluginConn};
use topolet_nri::plugin::Plugin;
use topolet_nri::Stub;
use topolet_testkit::kubelet::nri::{
    besteffort, create, ctr, guaranteed, pod, pod_with_parent, GIB,
};
use topolet_testkit::nri_harness::{self, Connected};

const GUARD: Duration = Duration::from_secs(20);
/// No floor: the QoS classes' own values are what is checked.
const FLOOR: i32 = -1000;
/// The unprivileged user of the reachability checks.
const NOBODY: u32 = 65534;

/// Set, to the test's name, in the child process that runs one umask-sensitive test.
const UMASK_ZERO_CHILD: &str = "TOPOLET_SECURITY_UMASK_ZERO_CHILD";

/// Whether the body of the umask-sensitive test `name` runs in this process. The umask is the
/// process's and the other tests of this binary run in parallel, creating files of their own, so
/// it is not changed here: the test binary is re-executed on `name` alone, with umask 0 (set
/// first thing in the child, where no other test runs), and this checks that it ran and passed.
fn umask_zero_here(name: &str) -> bool {
    if std::env::var_os(UMASK_ZERO_CHILD).is_some_and(|v| v == name) {
        // SAFETY: umask(2) only sets the calling process's file mode creation mask; it touches
        // no memory and cannot fail.
        unsafe { libc::umask(0) };
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(UMASK_ZERO_CHILD, name)
        .output()
        .expect("run the test binary on one test");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprint!("{stderr}");
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} with umask 0 in a child: {}\n{stdout}\n{stderr}",
        out.status
    );
    false
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `topolet status --admin-socket <socket>` as `nobody`: its exit code and stderr.
fn status_as_nobody(socket: &Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_topolet"))
        .args(["status", "--admin-socket"])
        .arg(socket)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("run topolet status as nobody");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ------------------------------------------------------------------------------------------------
// Admin socket

#[tokio::test]
async fn admin_socket_is_root_only_whatever_the_umask() {
    if !umask_zero_here("admin_socket_is_root_only_whatever_the_umask") {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    // Traversable by everyone, so only topolet's own modes keep others out.
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");

    // A missing directory (two levels) is created 0700; the socket is 0600.
    let path = top.path().join("run/topolet/admin.sock");
    let sock = admin::bind(&path).expect("bind");
    assert_eq!(mode(&path), 0o600, "socket mode");
    assert_eq!(mode(&top.path().join("run/topolet")), 0o700, "created dir");
    assert_eq!(mode(&top.path().join("run")), 0o700, "created parent dir");
    let leftovers: Vec<_> = std::fs::read_dir(top.path().join("run/topolet"))
        .expect("list dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        leftovers,
        vec!["admin.sock"],
        "no temporary file or dir left"
    );

    // An existing, non-writable-by-others directory is used as it is; the socket is still 0600.
    let open_dir = top.path().join("open");
    std::fs::create_dir(&open_dir).expect("mkdir");
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let open_path = open_dir.join("admin.sock");
    let open_sock = admin::bind(&open_path).expect("bind in an existing 0755 dir");
    assert_eq!(mode(&open_path), 0o600);
    assert_eq!(
        mode(&open_dir),
        0o755,
        "an existing directory is left as it is"
    );

    if is_root() {
        // The directory layer: nobody cannot even reach the path.
        let (code, err) = status_as_nobody(&path);
        assert_eq!(code, Some(3), "unreachable exit code; stderr: {err}");
        assert!(err.contains("permission denied"), "{err}");
        // The socket layer alone (its directory is open): connect(2) needs write permission.
        let (code, err) = status_as_nobody(&open_path);
        assert_eq!(code, Some(3), "unreachable exit code; stderr: {err}");
        assert!(err.contains("permission denied"), "{err}");
    } else {
        eprintln!("not root: the reachability half (as uid {NOBODY}) needs root; modes checked");
    }
    drop((sock, open_sock));
}

#[tokio::test]
async fn admin_socket_refuses_a_directory_anyone_may_write() {
    if !umask_zero_here("admin_socket_refuses_a_directory_anyone_may_write") {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    for bits in [0o777, 0o1777, 0o703] {
        let dir = top.path().join(format!("d{bits:o}"));
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(bits)).expect("chmod");
        let path = dir.join("admin.sock");
        let e = match admin::bind(&path) {
            Ok(_) => panic!("bind in a mode {bits:o} directory was accepted"),
            Err(e) => e,
        };
        let msg = e.to_string();
        assert!(
            matches!(e, admin::AdminError::InsecureDirectory { .. }),
            "{msg}"
        );
        assert!(
            msg.contains(&dir.display().to_string()) && msg.contains("writable by everyone"),
            "{msg}"
        );
        assert!(!path.exists(), "nothing bound");
        assert_eq!(
            std::fs::read_dir(&dir).expect("list").count(),
            0,
            "no litter"
        );
    }
}

// ------------------------------------------------------------------------------------------------
// State directory and file

fn small_machine() -> Topology {
    SyntheticSpec::TWO_SOCKETS_SMT.build()
}

fn base_config(state_dir: &Path) -> Config {
    let mut c = Config::default();
    c.cpu.reserved_cpus = Some("0".into());
    c.qos.oom_score_adj_floor = Some(FLOOR);
    c.qos.pids_limit = 4096;
    c.state.dir = state_dir.to_path_buf();
    c
}

#[tokio::test]
async fn state_directory_and_file_are_root_only_whatever_the_umask() {
    if !umask_zero_here("state_directory_and_file_are_root_only_whatever_the_umask") {
        return;
    }
    let top = tempfile::tempdir().expect("tempdir");
    let state_dir = top.path().join("var/lib/topolet");
    let plugin =
        TopoletPlugin::new(base_config(&state_dir), small_machine()).expect("plugin starts");
    assert!(
        !state_dir.exists(),
        "nothing is written before there is something to keep"
    );
    // An exclusive grant is handed to the state-file writer at once (on disk after the flush).
    let g = pod("g", "");
    let resp = plugin
        .create_container(create(&g, &guaranteed(&g, "app", 2000)))
        .await
        .expect("admitted");
    assert!(resp.adjust.is_some());
    plugin.flush_state(std::time::Duration::from_secs(600));
    let file = state_dir.join(STATE_FILE);
    assert_eq!(mode(&state_dir), 0o700, "state dir");
    assert_eq!(
        mode(&top.path().join("var/lib")),
        0o700,
        "created parent dir"
    );
    assert_eq!(mode(&file), 0o600, "state file");
    let names: Vec<_> = std::fs::read_dir(&state_dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, vec![STATE_FILE], "no temporary file left");

    // A temporary file left behind with a loose mode (a crash between create and rename) does
    // not lend its mode to the next state file.
    let tmp = state_dir.join(format!(".{STATE_FILE}.tmp.{}", std::process::id()));
    std::fs::write(&tmp, b"leftover").expect("leftover");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    state_file::save(&file, &serde_json::json!({"k": 1})).expect("save");
    assert_eq!(mode(&file), 0o600, "state file after a leftover temporary");
    assert!(!tmp.exists());
}

// ------------------------------------------------------------------------------------------------
// NRI: annotations and labels change nothing

/// A running plugin behind its stub and the fake runtime's end of the connection.
struct Node {
    _dir: tempfile::TempDir,
    _rt: FakeRuntime,
    conn: PluginConn,
    plugin: Arc<TopoletPlugin>,
    reserved: CpuSet,
    strict: bool,
}

impl Node {
    async fn start(strict: bool) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = FakeRuntime::bind(dir.path().join("nri.sock")).expect("bind");
        let mut config = base_config(&dir.path().join("state"));
        config.cpu.strict_cpu_reservation = strict;
        let plugin = Arc::new(TopoletPlugin::new(config, small_machine()).expect("plugin"));
        let attach = |stub: &Stub<TopoletPlugin>| plugin.attach(stub.updater(), stub.status());
        let Connected { conn, .. } = nri_harness::connect(
            &rt,
            &dir.path().join("nri.sock"),
            plugin.clone(),
            attach,
            "v2.3.0",
            "v0.12.0",
        )
        .await;
        conn.synchronize(vec![], vec![], None).await.expect("sync");
        Node {
            _dir: dir,
            _rt: rt,
            conn,
            plugin,
            reserved: CpuSet::parse("0").expect("list"),
            strict,
        }
    }

    async fn state_change(&self, event: Event, p: &api::PodSandbox, c: Option<&api::Container>) {
        let ev = api::StateChangeEvent {
            event: event.into(),
            pod: Some(p.clone()).into(),
            container: c.cloned().into(),
            ..Default::default()
        };
        tokio::time::timeout(GUARD, self.conn.state_change(&ev))
            .await
            .expect("state change answered in time")
            .expect("state change");
    }

    /// RunPodSandbox, CreateContainer; returns the reply (or the refusal's message).
    async fn admit(
        &self,
        p: &api::PodSandbox,
        c: &api::Container,
    ) -> Result<api::CreateContainerResponse, String> {
        let run = api::RunPodSandboxRequest {
            pod: Some(p.clone()).into(),
            ..Default::default()
        };
        let client = self.conn.client();
        tokio::time::timeout(
            GUARD,
            self.conn
                .locked(client.run_pod_sandbox(self.conn.ctx(), &run)),
        )
        .await
        .expect("run answered in time")
        .expect("run pod sandbox");
        tokio::time::timeout(GUARD, self.conn.create_container(&create(p, c)))
            .await
            .expect("create answered in time")
            .map_err(|e| e.to_string())
    }

    /// StopContainer, RemoveContainer, RemovePodSandbox: the node is as before `admit`.
    async fn remove(&self, p: &api::PodSandbox, c: &api::Container) {
        let stop = api::StopContainerRequest {
            pod: Some(p.clone()).into(),
            container: Some(c.clone()).into(),
            ..Default::default()
        };
        let client = self.conn.client();
        tokio::time::timeout(
            GUARD,
            self.conn
                .locked(client.stop_container(self.conn.ctx(), &stop)),
        )
        .await
        .expect("stop answered in time")
        .expect("stop");
        self.state_change(Event::REMOVE_CONTAINER, p, Some(c)).await;
        self.state_change(Event::REMOVE_POD_SANDBOX, p, None).await;
    }
}

/// Annotation and label keys that mean something to someone: other NRI plugins (topology-aware,
/// balloons, cpu preservation), the kubelet and CRI, the scheduler, and keys shaped like a
/// topolet or cpuset setting.
const KEYS: &[&str] = &[
    "cpu.preserve.resources.nri.io",
    "cpu.preserve.resources.nri.io/container.app",
    "memory.preserve.resources.nri.io",
    "prefer-isolated-cpus.resources.beta.nri.io",
    "prefer-isolated-cpus.resources.beta.nri.io/container.app",
    "prefer-shared-cpus.resources.beta.nri.io/pod",
    "prefer-reserved-cpus.resources.beta.nri.io",
    "cpu.exclusive.resources.nri.io",
    "balloon.balloons.resource-policy.nri.io",
    "scheduling.nri.io/exclusive-cpus",
    "scheduling.nri.io/cpuset",
    "scheduling.nri.io/reserved",
    "cpu-manager.alpha.kubernetes.io/policy",
    "cpu-manager.kubernetes.io/exclusive-cpus",
    "cpu-manager.kubernetes.io/reserved-cpus",
    "qos.kubernetes.io/class",
    "io.kubernetes.cri.container-type",
    "io.kubernetes.cri.sandbox-id",
    "io.kubernetes.cri.sandbox-cpu-period",
    "io.kubernetes.cri.sandbox-cpu-quota",
    "io.kubernetes.cri.sandbox-cpu-shares",
    "io.kubernetes.cri.sandbox-memory",
    "io.kubernetes.cri-o.cpuset",
    "io.kubernetes.pod.uid",
    "io.kubernetes.pod.name",
    "io.kubernetes.container.name",
    "kubernetes.io/config.source",
    "kubernetes.io/config.mirror",
    "scheduler.alpha.kubernetes.io/critical-pod",
    "io.cri-containerd.kind",
    "oom_score_adj",
    "oom-score-adj.resources.nri.io",
    "topolet.io/exclusive-cpus",
    "topolet/reserved-cpus",
    "cpuset.cpus",
];

const VALUES: &[&str] = &[
    "",
    "true",
    "false",
    "0",
    "1",
    "0-7",
    "0,1",
    "all",
    "-1000",
    "-999",
    "-997",
    "Guaranteed",
    "exclusive",
    "reserved",
    "sandbox",
    "file",
    "api",
    "system-node-critical",
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(VALUES).prop_map(str::to_string),
        2 => ".{0,40}",
        1 => (1usize..70_000).prop_map(|n| "9".repeat(n)),
        1 => (1usize..20_000).prop_map(|n| "0-8191,".repeat(n)),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(KEYS).prop_map(str::to_string),
        1 => "[a-z./-]{1,40}",
        1 => (1usize..10_000).prop_map(|n| "k".repeat(n)),
    ]
}

fn map() -> impl Strategy<Value = HashMap<String, String>> {
    proptest::collection::hash_map(key(), value(), 0..6)
}

/// The four maps a pod author can reach: pod annotations and labels (sandbox), container
/// annotations and labels.
#[derive(Debug, Clone)]
struct Decoration {
    pod_annotations: HashMap<String, String>,
    pod_labels: HashMap<String, String>,
    ctr_annotations: HashMap<String, String>,
    ctr_labels: HashMap<String, String>,
}

fn decoration() -> impl Strategy<Value = Decoration> {
    (map(), map(), map(), map()).prop_map(|(a, b, c, d)| Decoration {
        pod_annotations: a,
        pod_labels: b,
        ctr_annotations: c,
        ctr_labels: d,
    })
}

/// A pod of one QoS class, its cgroup values as the kubelet computes them.
#[derive(Debug, Clone)]
enum Shape {
    /// `millis` CPU (integer or not), memory limit = request.
    Guaranteed {
        millis: u64,
        mem_gib: i64,
    },
    /// A CPU request (shares), an optional CPU limit (quota) and memory limit, oom in 3..=999.
    Burstable {
        request_millis: u64,
        limit_millis: Option<u64>,
        mem_gib: Option<i64>,
        oom: i64,
    },
    BestEffort,
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        (1u64..=3, any::<bool>(), 1i64..=4).prop_map(|(cpus, frac, mem_gib)| {
            Shape::Guaranteed {
                millis: cpus * 1000 + if frac { 500 } else { 0 },
                mem_gib,
            }
        }),
        (
            0u64..4000,
            proptest::option::of(1u64..8000),
            proptest::option::of(1i64..=4),
            3i64..=999
        )
            .prop_map(|(request_millis, limit, mem_gib, oom)| Shape::Burstable {
                request_millis,
                limit_millis: limit.map(|l| l.max(request_millis)),
                mem_gib,
                oom,
            }),
        Just(Shape::BestEffort),
    ]
}

fn class_of(shape: &Shape) -> &'static str {
    match shape {
        Shape::Guaranteed { .. } => "Guaranteed",
        Shape::Burstable { .. } => "Burstable",
        Shape::BestEffort => "BestEffort",
    }
}

fn build(shape: &Shape, uid: &str) -> (api::PodSandbox, api::Container) {
    match shape {
        Shape::Guaranteed { millis, mem_gib } => {
            let p = pod(uid, "");
            let mut c = guaranteed(&p, "app", *millis);
            let limit = c
                .linux
                .mut_or_insert_default()
                .resources
                .mut_or_insert_default()
                .memory
                .mut_or_insert_default();
            limit.limit = Some(api::OptionalInt64 {
                value: mem_gib * GIB,
                ..Default::default()
            })
            .into();
            (p, c)
        }
        Shape::Burstable {
            request_millis,
            limit_millis,
            mem_gib,
            oom,
        } => {
            let p = pod(uid, "burstable");
            let shares = (request_millis * 1024 / 1000).max(2);
            let quota = limit_millis.map_or(0, |l| i64::try_from(l).unwrap_or(0) * 100);
            let c = ctr(&p, "app", shares, quota, mem_gib.unwrap_or(0) * GIB, *oom);
            (p, c)
        }
        Shape::BestEffort => {
            let p = pod(uid, "besteffort");
            let c = besteffort(&p, "app");
            (p, c)
        }
    }
}

/// `p` and `c` with `d` applied as containerd would pass them: containerd sets its own
/// `io.cri-containerd.kind` label last (cri `BuildLabels`), so a user's value never survives.
fn decorate(
    p: &api::PodSandbox,
    c: &api::Container,
    d: &Decoration,
) -> (api::PodSandbox, api::Container) {
    let (mut p, mut c) = (p.clone(), c.clone());
    p.annotations.extend(d.pod_annotations.clone());
    p.labels.extend(d.pod_labels.clone());
    p.labels
        .insert("io.cri-containerd.kind".into(), "sandbox".into());
    c.annotations.extend(d.ctr_annotations.clone());
    c.labels.extend(d.ctr_labels.clone());
    c.labels
        .insert("io.cri-containerd.kind".into(), "container".into());
    (p, c)
}

/// Admits the decorated and the plain pod from the same node state; they must get the same
/// answer, and that answer must respect the class.
async fn annotations_change_nothing(
    node: &Node,
    case: usize,
    shape: &Shape,
    d: &Decoration,
) -> Result<(), TestCaseError> {
    let uid = format!("u{case}");
    let (plain_pod, plain_ctr) = build(shape, &uid);
    let (deco_pod, deco_ctr) = decorate(&plain_pod, &plain_ctr, d);
    let mut plain_ctr_labelled = plain_ctr.clone();
    plain_ctr_labelled
        .labels
        .insert("io.cri-containerd.kind".into(), "container".into());

    let decorated = node.admit(&deco_pod, &deco_ctr).await;
    let (snap, _) = node.plugin.snapshot();
    node.remove(&deco_pod, &deco_ctr).await;
    let plain = node.admit(&plain_pod, &plain_ctr_labelled).await;
    node.remove(&plain_pod, &plain_ctr_labelled).await;
    prop_assert_eq!(&decorated, &plain, "annotations changed topolet's answer");

    let resp = decorated.map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
    let class = class_of(shape);
    let integer_guaranteed =
        matches!(shape, Shape::Guaranteed { millis, .. } if millis % 1000 == 0);
    fuzz::check_create_response(
        &create(&deco_pod, &deco_ctr),
        &resp,
        FLOOR,
        &CpuSet::range(0, 7),
        &format!("{class} case {case}"),
    );
    let held: Vec<&CpuSet> = snap
        .exclusive
        .iter()
        .filter(|e| e.key.pod_uid == uid)
        .map(|e| &e.cpus)
        .collect();
    let cpus = resp
        .adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .and_then(|l| l.resources.as_ref())
        .and_then(|r| r.cpu.as_ref())
        .map(|c| CpuSet::parse(&c.cpus).expect("cpu list"))
        .expect("every kubelet-shaped container gets a cpuset");
    if integer_guaranteed {
        prop_assert_eq!(held.len(), 1, "integer Guaranteed holds exclusive cpus");
        prop_assert_eq!(held[0], &cpus);
        prop_assert!(
            cpus.is_disjoint(&snap.shared),
            "exclusive {} in shared",
            cpus
        );
    } else {
        prop_assert!(held.is_empty(), "{} pod holds exclusive {:?}", class, held);
        prop_assert_eq!(&cpus, &snap.shared, "shared container off the shared pool");
    }
    let exclusive_or_strict = integer_guaranteed || node.strict;
    if exclusive_or_strict {
        prop_assert!(
            cpus.is_disjoint(&node.reserved),
            "{} container on reserved cpus {}",
            class,
            cpus
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_annotation_or_label_changes_the_adjustment() {
    let cases: u32 = std::env::var("TOPOLET_SECURITY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(160);
    for strict in [false, true] {
        let node = Node::start(strict).await;
        let mut runner = TestRunner::new(ProptestConfig {
            cases,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let handle = tokio::runtime::Handle::current();
        let case = std::cell::Cell::new(0usize);
        let result = runner.run(&(shape(), decoration()), |(shape, d)| {
            case.set(case.get() + 1);
            tokio::task::block_in_place(|| {
                handle.block_on(annotations_change_nothing(&node, case.get(), &shape, &d))
            })
        });
        if let Err(e) = result {
            panic!("strict_cpu_reservation = {strict}: {e}");
        }
        // Every case gave back what it took.
        let (snap, _) = node.plugin.snapshot();
        assert!(
            snap.exclusive.is_empty(),
            "exclusive cpus left: {:?}",
            snap.exclusive
        );
    }
}

// ------------------------------------------------------------------------------------------------
// Claims that look Guaranteed

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_class_comes_from_the_cgroup_path_not_from_claims() {
    let node = Node::start(false).await;
    let (shared, _) = node.plugin.snapshot();

    // BestEffort by path, everything else claiming Guaranteed with two whole CPUs.
    let mut p = pod("claims", "besteffort");
    p.name = "guaranteed-2-cpus".into();
    for (k, v) in [
        ("qos.kubernetes.io/class", "Guaranteed"),
        ("cpu-manager.kubernetes.io/exclusive-cpus", "2"),
    ] {
        p.annotations.insert(k.into(), v.into());
        p.labels.insert(k.into(), v.into());
    }
    // Its cgroup values even look Guaranteed (a BestEffort path cannot have them from the kubelet).
    let c = guaranteed(&p, "app", 2000);
    let resp = node.admit(&p, &c).await.expect("admitted");
    let linux = resp
        .adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .expect("adjusted");
    let cpus = linux
        .resources
        .as_ref()
        .and_then(|r| r.cpu.as_ref())
        .map(|c| c.cpus.clone())
        .expect("cpuset");
    assert_eq!(
        cpus,
        shared.shared.to_string(),
        "BestEffort path: shared pool"
    );
    assert_eq!(
        linux.oom_score_adj.as_ref().map(|o| o.value),
        Some(1000),
        "BestEffort path: BestEffort oom_score_adj"
    );
    node.remove(&p, &c).await;

    // A hand-made Guaranteed path (only someone talking to containerd directly can choose a
    // cgroup parent, and containerd's socket is root's) with BestEffort resources: no requests
    // or limits can be read back, so the container is placed as BestEffort: oom_score_adj 1000
    // (what it already has: nothing to set) and the shared pool.
    let p = pod_with_parent("handmade", "/kubepods/podhandmade");
    let c = besteffort(&p, "app");
    let resp = node.admit(&p, &c).await.expect("admitted");
    let linux = resp
        .adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .expect("adjusted");
    assert_eq!(
        linux.oom_score_adj.as_ref().map(|o| o.value),
        None,
        "1000 stays"
    );
    let cpus = linux
        .resources
        .as_ref()
        .and_then(|r| r.cpu.as_ref())
        .map(|c| c.cpus.clone())
        .expect("cpuset");
    assert_eq!(
        cpus,
        shared.shared.to_string(),
        "no exclusive cpus without a request"
    );
    let (snap, _) = node.plugin.snapshot();
    assert!(snap.exclusive.is_empty(), "{:?}", snap.exclusive);
    node.remove(&p, &c).await;

    // Not a kubelet path at all (plain containerd, nerdctl): left alone, whatever it claims.
    let mut p = pod_with_parent("plain", "/default/guaranteed/podplain");
    p.annotations
        .insert("qos.kubernetes.io/class".into(), "Guaranteed".into());
    let c = guaranteed(&p, "app", 2000);
    let resp = node.admit(&p, &c).await.expect("answered");
    assert!(resp.adjust.is_none() && resp.update.is_empty(), "{resp:?}");
}

/// A Burstable pod's container whose own requests equal its limits (the pod is Burstable because
/// of another container): 2 CPUs, 8 GiB of this 16 GiB node, so the kubelet gives it
/// oom_score_adj 1000 − 1000·8/16 = 500. Read back from its cgroup values, its requests equal its
/// limits; it must still be placed as Burstable: the shared pool, oom_score_adj 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burstable_container_with_requests_equal_to_limits_stays_burstable() {
    let node = Node::start(false).await;
    let (before, _) = node.plugin.snapshot();
    let p = pod("mixed", "burstable");
    let c = ctr(&p, "app", 2048, 200_000, 8 * GIB, 500);
    let resp = node.admit(&p, &c).await.expect("admitted");
    let (after, _) = node.plugin.snapshot();
    assert!(
        after.exclusive.is_empty(),
        "Burstable pod got exclusive cpus: {:?}",
        after.exclusive
    );
    let linux = resp
        .adjust
        .as_ref()
        .and_then(|a| a.linux.as_ref())
        .expect("adjusted");
    let oom = linux.oom_score_adj.as_ref().map(|o| o.value);
    assert!(
        oom.is_none() || oom == Some(500),
        "oom_score_adj set to {oom:?}"
    );
    let cpus = linux
        .resources
        .as_ref()
        .and_then(|r| r.cpu.as_ref())
        .map(|c| c.cpus.clone())
        .expect("cpuset");
    assert_eq!(cpus, before.shared.to_string(), "shared pool");
    node.remove(&p, &c).await;
}

/// The family that broke it, and its neighbours: under a Burstable or BestEffort path, cgroup
/// values whose read-back requests equal their limits exactly (memory limit at the lowest byte
/// of its oom_score_adj step, CPU limit equal to a whole-CPU request) never get exclusive CPUs
/// or an oom_score_adj below the path's class. Handlers called directly (no socket): many cases.
#[test]
fn no_cgroup_values_lift_a_pod_above_its_path_class() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = TopoletPlugin::new(base_config(dir.path()), small_machine()).expect("plugin");
    let cap = u128::from(small_machine().memory_capacity());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = (
        prop_oneof![Just("burstable"), Just("besteffort")],
        1u64..=7,      // whole CPUs
        1u128..=996,   // oom step k: oom_score_adj 1000 - k
        -2i64..=2,     // bytes around the step's first byte
        any::<bool>(), // CPU limit set (= request) or not
    );
    let case = std::cell::Cell::new(0usize);
    let result = runner.run(&strategy, |(class, cpus, k, delta, limited)| {
        case.set(case.get() + 1);
        let uid = format!("v{}", case.get());
        let p = pod(&uid, class);
        let mem = i64::try_from((k * cap).div_ceil(1000)).expect("fits") + delta;
        let oom = 1000 - i64::try_from(k).expect("fits");
        let quota = if limited {
            i64::try_from(cpus).expect("fits") * 100_000
        } else {
            0
        };
        let c = ctr(&p, "app", cpus * 1024, quota, mem, oom);
        let req = create(&p, &c);
        let resp = rt
            .block_on(plugin.create_container(req.clone()))
            .map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
        let (snap, _) = plugin.snapshot();
        let held = snap.exclusive.iter().any(|e| e.key.pod_uid == uid);
        rt.block_on(plugin.remove_container(p.clone(), c.clone()))
            .expect("removed");
        prop_assert!(!held, "{} pod got exclusive cpus", class);
        let set = resp
            .adjust
            .as_ref()
            .and_then(|a| a.linux.as_ref())
            .and_then(|l| l.oom_score_adj.as_ref())
            .map(|o| o.value);
        let effective = set.unwrap_or(oom);
        let lowest = if class == "burstable" { 3 } else { 1000 };
        prop_assert!(
            effective >= lowest,
            "{} container gets oom_score_adj {} (lowest allowed {})",
            class,
            effective,
            lowest
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
