//! Stub against the fake runtime: register, configure mask per NRI version, sync,
//! StateChange dispatch, Unimplemented status, unsolicited updates, reconnect.

// Test code throughout: clippy's `allow-unwrap-in-tests` (clippy.toml) covers the #[test]
// functions, not the helpers they share here.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use topolet_nri::api::{self, Event};
use topolet_nri::fake_runtime::{FakeRuntime, PluginConn};
use topolet_nri::ttrpc::Code;
use topolet_nri::{
    ConnState, ContainerFields, ContainerUpdater, EventMask, Plugin, PluginResult, Stub, StubConfig,
};

/// Guard against hangs only (a deadlock makes the test fail), not a timing assertion.
const GUARD: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Recorder {
    mask: Mutex<EventMask>,
    seen: Mutex<Vec<String>>,
    synced: Mutex<Vec<(usize, usize)>>,
    /// What `synchronize_skips` answers, and the containers the last Synchronize delivered.
    skips: Mutex<ContainerFields>,
    sync_containers: Mutex<Vec<api::Container>>,
    create_containers: Mutex<Vec<api::Container>>,
    updater: Mutex<Option<ContainerUpdater>>,
    creates: AtomicUsize,
}

impl Recorder {
    fn with_mask(mask: EventMask) -> Arc<Recorder> {
        let r = Recorder::default();
        *r.mask.lock().unwrap() = mask;
        Arc::new(r)
    }
    fn log(&self, s: &str) {
        self.seen.lock().unwrap().push(s.to_string());
    }
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl Plugin for Recorder {
    fn events(&self) -> EventMask {
        *self.mask.lock().unwrap()
    }
    fn synchronize_skips(&self) -> ContainerFields {
        *self.skips.lock().unwrap()
    }
    async fn synchronize(
        &self,
        pods: Vec<api::PodSandbox>,
        containers: Vec<api::Container>,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        self.synced
            .lock()
            .unwrap()
            .push((pods.len(), containers.len()));
        *self.sync_containers.lock().unwrap() = containers;
        Ok(vec![api::ContainerUpdate {
            container_id: "synced".into(),
            ..Default::default()
        }])
    }
    async fn run_pod_sandbox(&self, pod: api::PodSandbox) -> PluginResult<()> {
        self.log(&format!("run_pod:{}", pod.id));
        Ok(())
    }
    async fn start_container(&self, _p: api::PodSandbox, c: api::Container) -> PluginResult<()> {
        self.log(&format!("start:{}", c.id));
        Ok(())
    }
    async fn remove_container(&self, _p: api::PodSandbox, c: api::Container) -> PluginResult<()> {
        self.log(&format!("remove:{}", c.id));
        Ok(())
    }
    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> PluginResult<api::CreateContainerResponse> {
        self.creates.fetch_add(1, Ordering::SeqCst);
        self.create_containers
            .lock()
            .unwrap()
            .push((*req.container).clone());
        let id = req.container.id.clone();
        self.log(&format!("create:{id}"));
        // Unsolicited update from inside a handler: must not deadlock.
        if id.starts_with("upd") {
            let u = self.updater.lock().unwrap().clone();
            if let Some(u) = u {
                let _pending = u
                    .update(
                        vec![api::ContainerUpdate {
                            container_id: format!("from-handler-{id}"),
                            ..Default::default()
                        }],
                        vec![],
                    )
                    .expect("queue");
            }
        }
        let mut resp = api::CreateContainerResponse::default();
        resp.adjust
            .mut_or_insert_default()
            .annotations
            .insert("seen-by".into(), "recorder".into());
        Ok(resp)
    }
}

fn sock(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("nri.sock")
}

type Started = (
    tempfile::TempDir,
    FakeRuntime,
    Arc<Recorder>,
    Arc<Stub<Recorder>>,
    tokio::task::JoinHandle<()>,
);

async fn start(mask: EventMask) -> Started {
    start_skipping(mask, ContainerFields::NONE).await
}

/// [`start`] with the plugin's Synchronize skips set before the stub runs: the stub reads them
/// when a session begins, which may be at once.
async fn start_skipping(mask: EventMask, skips: ContainerFields) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let rt = FakeRuntime::bind(sock(&dir)).unwrap();
    let plugin = Recorder::with_mask(mask);
    *plugin.skips.lock().unwrap() = skips;
    let mut cfg = StubConfig::new("recorder", "42", sock(&dir)).unwrap();
    cfg.backoff.initial = Duration::from_millis(10);
    cfg.backoff.max = Duration::from_millis(100);
    let stub = Arc::new(Stub::new(plugin.clone(), cfg).unwrap());
    *plugin.updater.lock().unwrap() = Some(stub.updater());
    let s = stub.clone();
    let task = tokio::spawn(async move {
        let _ = s.run().await;
    });
    (dir, rt, plugin, stub, task)
}

async fn accept_registered(rt: &FakeRuntime) -> PluginConn {
    let conn = tokio::time::timeout(GUARD, rt.accept())
        .await
        .unwrap()
        .unwrap();
    let reg = tokio::time::timeout(GUARD, conn.wait_registered())
        .await
        .unwrap()
        .expect("registered");
    assert_eq!(reg.plugin_name, "recorder");
    assert_eq!(reg.plugin_idx, "42");
    assert_eq!(reg.NRI_version, "v0.12.2");
    conn
}

fn pod(id: &str) -> api::PodSandbox {
    api::PodSandbox {
        id: id.into(),
        ..Default::default()
    }
}

fn ctr(id: &str) -> api::Container {
    api::Container {
        id: id.into(),
        pod_sandbox_id: "p".into(),
        ..Default::default()
    }
}

fn all_mask() -> EventMask {
    EventMask::from_bits(0x3FFF)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configure_mask_fits_nri_version() {
    let mask = EventMask::of(&[
        Event::CREATE_CONTAINER,
        Event::START_CONTAINER,
        Event::UPDATE_POD_SANDBOX,
        Event::VALIDATE_CONTAINER_ADJUSTMENT,
    ]);
    let (_d, rt, _p, stub, task) = start(mask).await;
    let conn = accept_registered(&rt).await;
    // containerd 2.1 (NRI v0.8, no NRI_version field): no 0x3800 bits.
    let r = conn.configure_as("v2.1.4", "").await.unwrap();
    assert_eq!(r.events, 0x28);
    // containerd 2.2.1 (NRI v0.11) inferred from the runtime version.
    let r = conn.configure_as("v2.2.1", "").await.unwrap();
    assert_eq!(r.events, 0x2828);
    // NRI v0.12 announced explicitly wins over the runtime version.
    let r = conn.configure_as("v1.7.0", "v0.12.1").await.unwrap();
    assert_eq!(r.events, 0x2828);
    // Unknown runtime, no version: conservative.
    let r = conn
        .configure(api::ConfigureRequest {
            runtime_name: "somert".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.events, 0x28);
    // The stub's session task records Configured once it has the RegisterPlugin reply too,
    // which it may read after the runtime's Configure calls were served (another task): wait.
    let mut status = stub.status();
    tokio::time::timeout(GUARD, status.wait_for(|s| s.state == ConnState::Configured))
        .await
        .unwrap()
        .unwrap();
    let st = stub.status().borrow().clone();
    assert_eq!(st.connects, 1);
    // The fake runtime lives in this very process.
    assert_eq!(st.runtime_pid, Some(std::process::id()));
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_unpaged_and_paged() {
    let (_d, rt, plugin, stub, task) = start(all_mask()).await;
    let conn = accept_registered(&rt).await;
    conn.configure_as("v2.3.0", "v0.12.0").await.unwrap();
    let pods: Vec<_> = (0..5).map(|i| pod(&format!("p{i}"))).collect();
    let ctrs: Vec<_> = (0..7).map(|i| ctr(&format!("c{i}"))).collect();
    let (r, n) = conn
        .synchronize(pods.clone(), ctrs.clone(), None)
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert!(!r.more);
    assert_eq!(r.update.len(), 1);
    let (r, n) = conn.synchronize(pods, ctrs, Some(2)).await.unwrap();
    assert_eq!(n, 4);
    assert!(!r.more);
    assert_eq!(r.update[0].container_id, "synced");
    assert_eq!(*plugin.synced.lock().unwrap(), vec![(5, 7), (5, 7)]);
    let mut st = stub.status();
    tokio::time::timeout(GUARD, st.wait_for(|s| s.state == ConnState::Synchronized))
        .await
        .unwrap()
        .unwrap();
    task.abort();
}

/// A container with every field the skips can name, and some they cannot.
fn full_ctr(id: &str) -> api::Container {
    let mut c = ctr(id);
    c.args = vec!["/app".into(), "--serve".into()];
    c.env = vec!["A=1".into()];
    c.mounts.push(api::Mount {
        destination: "/data".into(),
        source: "/var/lib/data".into(),
        ..Default::default()
    });
    c.labels.insert("io.kubernetes.pod.uid".into(), "u".into());
    c.pid = 7;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_leaves_out_the_fields_the_plugin_skips_and_other_requests_carry_them() {
    let (_d, rt, plugin, _stub, task) =
        start_skipping(all_mask(), ContainerFields::ENV | ContainerFields::MOUNTS).await;
    let conn = accept_registered(&rt).await;
    conn.configure_as("v2.3.0", "v0.12.0").await.unwrap();
    let ctrs: Vec<_> = (0..5).map(|i| full_ctr(&format!("c{i}"))).collect();
    // Paged: every page goes through the slim decode.
    let (r, n) = conn
        .synchronize(vec![pod("p")], ctrs.clone(), Some(2))
        .await
        .unwrap();
    assert_eq!((n, r.update.len()), (3, 1));
    let got = plugin.sync_containers.lock().unwrap().clone();
    assert_eq!(got.len(), 5);
    for (g, sent) in got.iter().zip(&ctrs) {
        assert!(g.env.is_empty() && g.mounts.is_empty(), "{g:?}");
        assert_eq!(
            (&g.id, &g.args, &g.labels, g.pid),
            (&sent.id, &sent.args, &sent.labels, sent.pid)
        );
    }
    let req = api::CreateContainerRequest {
        pod: Some(pod("p")).into(),
        container: Some(full_ctr("c9")).into(),
        ..Default::default()
    };
    conn.create_container(&req).await.unwrap();
    let created = plugin.create_containers.lock().unwrap().clone();
    assert_eq!(
        created,
        vec![full_ctr("c9")],
        "CreateContainer is decoded whole"
    );
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_of_10000_containers_paged() {
    let (_d, rt, plugin, _stub, task) = start(all_mask()).await;
    let conn = accept_registered(&rt).await;
    conn.configure_as("v2.3.0", "v0.12.0").await.unwrap();
    let pods: Vec<_> = (0..1000).map(|i| pod(&format!("p{i}"))).collect();
    let ctrs: Vec<_> = (0..10_000).map(|i| ctr(&format!("c{i}"))).collect();
    let (r, n) = conn.synchronize(pods, ctrs, Some(1000)).await.unwrap();
    assert_eq!(n, 10);
    assert!(!r.more);
    assert_eq!(*plugin.synced.lock().unwrap(), vec![(1000, 10_000)]);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedicated_rpcs_state_change_and_unimplemented() {
    let mask = EventMask::of(&[
        Event::RUN_POD_SANDBOX,
        Event::CREATE_CONTAINER,
        Event::START_CONTAINER,
        Event::REMOVE_CONTAINER,
    ]);
    let (_d, rt, plugin, _stub, task) = start(mask).await;
    let conn = accept_registered(&rt).await;
    conn.configure_as("v2.3.0", "v0.12.0").await.unwrap();
    let c = conn.client();

    let r = conn
        .create_container(&api::CreateContainerRequest {
            pod: Some(pod("p")).into(),
            container: Some(ctr("c1")).into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        r.adjust.annotations.get("seen-by").map(String::as_str),
        Some("recorder")
    );

    c.start_container(
        conn.ctx(),
        &api::StartContainerRequest {
            container: Some(ctr("c2")).into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();

    // Old-runtime style events through StateChange reach the same methods.
    for (ev, id) in [
        (Event::RUN_POD_SANDBOX, "p9"),
        (Event::START_CONTAINER, "c3"),
        (Event::REMOVE_CONTAINER, "c4"),
        (Event::STOP_CONTAINER, "ignored"),
    ] {
        conn.state_change(&api::StateChangeEvent {
            event: ev.into(),
            pod: Some(pod(id)).into(),
            container: Some(ctr(id)).into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    assert_eq!(
        plugin.seen(),
        vec![
            "create:c1",
            "start:c2",
            "run_pod:p9",
            "start:c3",
            "remove:c4"
        ]
    );

    // Unhandled RPCs answer Unimplemented (12) so v0.12 runtimes fall back.
    let code = |r: Result<(), topolet_nri::ttrpc::Error>| match r {
        Err(topolet_nri::ttrpc::Error::RpcStatus(s)) => s.code(),
        other => panic!("expected status, got {other:?}"),
    };
    let ctx = || conn.ctx();
    assert_eq!(
        code(
            c.post_start_container(ctx(), &Default::default())
                .await
                .map(|_| ())
        ),
        Code::UNIMPLEMENTED
    );
    assert_eq!(
        code(
            c.stop_pod_sandbox(ctx(), &Default::default())
                .await
                .map(|_| ())
        ),
        Code::UNIMPLEMENTED
    );
    assert_eq!(
        code(
            c.update_container(ctx(), &Default::default())
                .await
                .map(|_| ())
        ),
        Code::UNIMPLEMENTED
    );
    assert_eq!(
        code(
            c.validate_container_adjustment(ctx(), &Default::default())
                .await
                .map(|_| ())
        ),
        Code::UNIMPLEMENTED
    );
    assert_eq!(Code::UNIMPLEMENTED as i32, 12);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_containers_outside_and_inside_handler() {
    let (_d, rt, plugin, stub, task) = start(all_mask()).await;
    let conn = accept_registered(&rt).await;
    conn.configure_as("v2.3.0", "v0.12.0").await.unwrap();

    // From outside a handler: await the result.
    let pending = stub
        .updater()
        .update(
            vec![api::ContainerUpdate {
                container_id: "outside".into(),
                ..Default::default()
            }],
            vec![],
        )
        .unwrap();
    let failed = tokio::time::timeout(GUARD, pending).await.unwrap().unwrap();
    assert!(failed.is_empty());
    let got = tokio::time::timeout(GUARD, conn.next_update())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.update[0].container_id, "outside");

    // From inside a handler while the runtime holds its NRI lock.
    let r = tokio::time::timeout(
        GUARD,
        conn.create_container(&api::CreateContainerRequest {
            container: Some(ctr("upd1")).into(),
            ..Default::default()
        }),
    )
    .await
    .expect("handler must not deadlock");
    r.unwrap();
    let got = tokio::time::timeout(GUARD, conn.next_update())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.update[0].container_id, "from-handler-upd1");
    assert_eq!(plugin.creates.load(Ordering::SeqCst), 1);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_after_runtime_restart() {
    let (dir, rt, plugin, stub, task) = start(all_mask()).await;
    let conn = accept_registered(&rt).await;
    conn.configure_as("v2.3.0", "v0.12.0").await.unwrap();
    conn.synchronize(vec![pod("p")], vec![ctr("c")], None)
        .await
        .unwrap();

    // Runtime goes away: close the connection and the listening socket.
    conn.close();
    drop(rt);
    let mut st = stub.status();
    tokio::time::timeout(
        GUARD,
        st.wait_for(|s| s.state == ConnState::Disconnected || s.state == ConnState::Connecting),
    )
    .await
    .unwrap()
    .unwrap();
    // At least one dial fails against the missing socket before the runtime comes back.
    let failed = st.borrow().dial_failures;
    tokio::time::timeout(GUARD, st.wait_for(|s| s.dial_failures > failed))
        .await
        .unwrap()
        .unwrap();

    let rt2 = FakeRuntime::bind(sock(&dir)).unwrap();
    let conn2 = accept_registered(&rt2).await;
    conn2.configure_as("v2.3.0", "v0.12.0").await.unwrap();
    conn2
        .synchronize(vec![], vec![ctr("c"), ctr("d")], None)
        .await
        .unwrap();
    tokio::time::timeout(
        GUARD,
        st.wait_for(|s| s.reconnects == 1 && s.state == ConnState::Synchronized),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(stub.status().borrow().connects, 2);
    assert_eq!(*plugin.synced.lock().unwrap(), vec![(1, 1), (0, 2)]);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preinstalled_fd_mode_returns_on_close() {
    use std::os::fd::IntoRawFd;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let fd = theirs.into_raw_fd();
    let env = move |k: &str| match k {
        "NRI_PLUGIN_SOCKET" => Some(fd.to_string()),
        "NRI_PLUGIN_NAME" => Some("recorder".to_string()),
        "NRI_PLUGIN_IDX" => Some("42".to_string()),
        _ => None,
    };
    let cfg = StubConfig::from_lookup(None, None, None, env).unwrap();
    let plugin = Recorder::with_mask(all_mask());
    let stub = Arc::new(Stub::new(plugin, cfg).unwrap());
    let s = stub.clone();
    let task = tokio::spawn(async move { s.run().await });

    ours.set_nonblocking(true).unwrap();
    let stream = tokio::net::UnixStream::from_std(ours).unwrap();
    let conn = PluginConn::start(stream, Default::default()).await.unwrap();
    let reg = tokio::time::timeout(GUARD, conn.wait_registered())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reg.plugin_name, "recorder");
    conn.configure_as("v2.3.0", "v0.12.0").await.unwrap();
    conn.close();
    let res = tokio::time::timeout(GUARD, task).await.unwrap().unwrap();
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(stub.status().borrow().state, ConnState::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_harness_times_requests() {
    let (_d, rt, plugin, _stub, task) = start(all_mask()).await;
    let conn = accept_registered(&rt).await;
    conn.configure_as("v2.3.0", "v0.12.0").await.unwrap();
    let req = api::CreateContainerRequest {
        container: Some(ctr("bench")).into(),
        ..Default::default()
    };
    let lat = topolet_nri::fake_runtime::bench_sequential(200, |_| conn.create_container(&req))
        .await
        .unwrap();
    let stats = topolet_nri::fake_runtime::LatencyStats::from_samples(&lat).unwrap();
    assert_eq!(stats.count, 200);
    assert!(stats.min <= stats.p50 && stats.p50 <= stats.p99 && stats.p99 <= stats.max);
    assert_eq!(plugin.creates.load(Ordering::SeqCst), 200);
    task.abort();
}
