//! `topolet run`: composes the long-running plugin — logging, machine discovery, the NRI
//! handlers and the stub's connection loop — and runs it until SIGTERM/SIGINT (or, as a
//! pre-installed plugin, until containerd closes our socket).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use topolet_nri::config::StubConfig;
use topolet_nri::stub::Stub;

use crate::config::Config;
use crate::nri::handlers::TopoletPlugin;

/// Runs the plugin with `config`, reading the machine from `sysfs_root`. `config_path`: the file
/// `config` came from (or will come from), reloaded on SIGHUP and when it changes.
pub fn run(config: Config, config_path: Option<&Path>, sysfs_root: &Path) -> anyhow::Result<()> {
    // One worker: an NRI request crosses five tasks (mux reader, ttrpc reader, handler, ttrpc
    // writer, mux writer); on one worker each hop is a local queue push, with two every hop can be
    // a cross-thread wake-up (futex + eventfd). Measured with hack/bench.sh's driver: 4x fewer
    // context switches, NRI round trip median 0.78x, CPU per request 0.74x. Nothing here needs a
    // second worker: handlers are short, and the other loops (eviction interval, admin socket,
    // metrics, reload check) wake rarely and briefly.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("topolet")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(config, config_path, sysfs_root))
}

async fn serve(
    config: Config,
    config_path: Option<&Path>,
    sysfs_root: &Path,
) -> anyhow::Result<()> {
    let topology = crate::host::sysfs::discover_live(sysfs_root)
        .with_context(|| format!("reading the machine from {}", sysfs_root.display()))?;
    for w in topology.warnings() {
        tracing::warn!(warning = %w, "topology discovery");
    }
    tracing::info!(
        cpus = topology.num_cpus(),
        cores = topology.num_cores(),
        sockets = topology.socket_ids().count(),
        numa_nodes = topology.numa_ids().count(),
        memory_bytes = topology.memory_capacity(),
        numa_memory_bytes = topology.numa_memory_total(),
        "machine discovered"
    );
    let stub_config = StubConfig::from_env(
        Some(config.nri.name.clone()),
        Some(config.nri.index.as_nri()),
        Some(config.nri.socket.clone()),
    )
    .context("nri plugin settings")?;
    // One topolet per node: taken before the state file is read, held until the process ends.
    let node_lock =
        crate::state::lock::NodeLock::acquire(&config.state.dir).context("[state] dir")?;
    tracing::info!(lock = %node_lock.path().display(), "holding the node's state directory");
    let eviction = config.eviction().context("[eviction]")?;
    let (admin_config, metrics_config) = (config.admin.clone(), config.metrics.clone());
    let kubernetes = config.kubernetes.clone();
    let kubelet = config.kubelet.clone();
    let mut plugin = TopoletPlugin::new(config, topology)?;
    plugin.set_sysfs_root(sysfs_root.to_path_buf());
    let plugin = Arc::new(plugin);
    // The kubelet's PodResources API as a device source (`crate::kubelet`): dialled lazily, at
    // the first Synchronize.
    if kubelet.pod_resources {
        plugin.set_pod_resources(crate::kubelet::pod_resources::PodResourcesSource::new(
            &kubelet.pod_resources_socket,
            kubelet.pod_resources_wait(),
            plugin.metrics().clone(),
        ));
        tracing::info!(socket = %kubelet.pod_resources_socket.display(), wait_ms = kubelet.pod_resources_wait().as_millis() as u64, "devices from the kubelet's PodResources API");
    }
    // The Kubernetes API client: its own task; the handlers only hand it Events.
    let kube = crate::cluster::client::start(&kubernetes, plugin.metrics().clone())
        .await
        .context("[kubernetes]")?;
    if let Some(k) = &kube {
        plugin.set_event_sink(k.sink.clone());
    }
    // The API writers' first requests wait for a random time within `[kubernetes]
    // start_jitter_ms` (`crate::cluster::start_jitter`); nothing else does.
    let gate = crate::cluster::start_jitter::StartGate::draw(kubernetes.start_jitter());
    if kube.is_some() {
        tracing::info!(
            after_ms = gate
                .opens_at()
                .saturating_duration_since(tokio::time::Instant::now())
                .as_millis() as u64,
            bound_ms = kubernetes.start_jitter().as_millis() as u64,
            "kubernetes API: the first Node and NodeResourceTopology writes wait for the start jitter"
        );
    }
    // What the eviction loop reports each interval, for `topolet status`.
    let pressure = Arc::new(crate::pressure::PressureReport::new());
    // Node-pressure eviction: `action = "api"` without the client fails the start; the loop is
    // built once NRI's Configure names the runtime (the CRI endpoint and the image filesystem
    // not set are the runtime's own), with the client its node conditions publisher.
    crate::pressure::wiring::check_action(&eviction, kube.is_some()).context("[eviction]")?;
    let node_api = kube.as_ref().map(crate::pressure::wiring::NodeApi::of);
    let mut node_status_tx = None;
    // What the Node and its NodeResourceTopology held at start, read by their publishers' first
    // requests, for reclaimed CPU's first amounts (`crate::cluster::at_start`).
    let at_start = crate::cluster::at_start::AtStart::default();
    let mut _node_status = None;
    if let (Some(k), true) = (&kube, eviction.node_conditions) {
        let (tx, task) = crate::cluster::node_status::start(
            k.client.clone(),
            k.node.clone(),
            crate::cluster::node_status::PublisherConfig {
                heartbeat: eviction.node_condition_heartbeat,
                taint: eviction.pressure_taint,
            },
            plugin.metrics().clone(),
            gate,
            at_start.clone(),
        );
        node_status_tx = Some(tx);
        _node_status = Some(AbortOnDrop(task));
    }
    // One API client for every user: the Event recorder, the eviction loop, the node status
    // publisher, the NodeResourceTopology publisher and the pod watch.
    // The NodeResourceTopology publisher: its own task, woken when the books change.
    let _nrt = kube.as_ref().map(|k| {
        AbortOnDrop(crate::cluster::nrt::start(
            k.client.clone(),
            k.node.clone(),
            plugin.clone(),
            gate,
            at_start.clone(),
        ))
    });
    // The kubelet's device-plugin devices per NUMA node for that publisher: read again every
    // DEVICE_INVENTORY_EVERY, in a task of its own (`crate::kubelet::inventory`).
    let _device_inventory = (kube.is_some() && kubelet.pod_resources).then(|| {
        let plugin = plugin.clone();
        AbortOnDrop(tokio::spawn(async move {
            let mut every = tokio::time::interval(DEVICE_INVENTORY_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                plugin.refresh_device_inventory().await;
            }
        }))
    });
    // This node's pods from the API: admission from their specs (`crate::cluster::pod_directory`),
    // and the eviction loop's pod facts from the same store while it is synced.
    let mut watched_pods = None;
    let _pod_watch = kube.as_ref().map(|k| {
        let (pods, task) = crate::cluster::pod_directory::start(
            k.watch_client.clone(),
            k.node.clone(),
            kubernetes.pod_wait(),
            kubernetes.watch_timeout(),
            plugin.metrics().clone(),
        );
        watched_pods = Some(pods.clone());
        plugin.set_pod_directory(pods, kubernetes.pod_wait());
        AbortOnDrop(task)
    });
    // This node's DRA ResourceSlices: the NUMA nodes of the DRA devices the kubelet's
    // PodResources answer names (`crate::cluster::resource_slices`); a read of its index on the
    // event path, never a wait.
    let _slice_watch = kube.as_ref().map(|k| {
        let (slices, task) = crate::cluster::resource_slices::start(
            k.watch_client.clone(),
            k.node.clone(),
            k.acts_as_node,
            kubernetes.watch_timeout(),
        );
        plugin.set_resource_slices(slices);
        AbortOnDrop(task)
    });
    // Reclaimed CPU: its loop always runs (a reload may turn the feature on); with the client,
    // the Node's extended resource, starved batch pods' evictions and Events.
    let mut reclaimed_cluster = None;
    let mut advert = None;
    if let Some(k) = &kube {
        let name = config_reclaimed_name(&plugin);
        let (tx, task) = crate::cluster::extended_resource::start(
            k.client.clone(),
            k.node.clone(),
            name.clone(),
            plugin.metrics().clone(),
            gate,
        );
        reclaimed_cluster = Some(tx);
        advert = Some(Advert {
            client: k.client.clone(),
            node: k.node.clone(),
            name,
            in_cluster: k.in_cluster,
            task: AbortOnDrop(task),
        });
    }
    let _kubernetes = kube.map(|k| AbortOnDrop(k.recorder));
    let stub = Stub::new(plugin.clone(), stub_config).context("nri plugin settings")?;
    plugin.attach(stub.updater(), stub.status());
    // topolet's own PodResources socket (`crate::kubelet::reexport`): never fatal; a failure is
    // logged and shown in `topolet status`.
    let _pod_resources_export = match &kubelet.pod_resources_export_socket {
        Some(socket) => {
            let books: Arc<dyn crate::kubelet::reexport::ExportSource> = plugin.clone();
            let bound = crate::kubelet::reexport::bind(
                socket,
                &kubelet.pod_resources_socket,
                books,
                plugin.metrics().clone(),
            )
            .await;
            let status = |state: &str, error: Option<String>| {
                topolet_core::report::status::PodResourcesExportStatus {
                    socket: socket.display().to_string(),
                    state: state.into(),
                    error,
                }
            };
            match bound {
                Ok(b) => {
                    tracing::info!(socket = %b.socket().display(), kubelet = %kubelet.pod_resources_socket.display(), "serving PodResources: the kubelet's answers with topolet's exclusive CPUs and pinned memory");
                    plugin.set_pod_resources_export(status("serving", None));
                    Some(AbortOnDrop(tokio::spawn(b.serve())))
                }
                Err(e) => {
                    tracing::error!(error = %e, "the PodResources re-export is not served");
                    plugin.set_pod_resources_export(status("failed", Some(e.to_string())));
                    None
                }
            }
        }
        None => None,
    };
    // `topolet status` (admin socket) and /metrics, /healthz, /readyz: never fatal.
    let _endpoints = crate::introspection::start(
        &admin_config,
        &metrics_config,
        plugin.clone(),
        pressure.clone(),
    )
    .await;
    // Node-pressure eviction and reclaimed CPU: their own tasks, started once the runtime is
    // known; they log their errors and never end the plugin.
    let beside = BesideRuntime {
        eviction,
        plugin: plugin.clone(),
        node_api,
        pressure,
        node_status: node_status_tx,
        watched_pods,
        reclaimed_cluster,
        at_start,
    };
    let _beside = AbortOnDrop(tokio::spawn(beside.run(stub.status())));
    let _reload = match config_path {
        Some(path) => Some(AbortOnDrop(tokio::spawn(crate::config::reload::watch(
            plugin.clone(),
            path.to_path_buf(),
        )))),
        None => {
            tracing::info!("no configuration file: defaults apply; SIGHUP is ignored");
            let mut hup =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            Some(AbortOnDrop(tokio::spawn(async move {
                while let Some(h) = hup.as_mut() {
                    if h.recv().await.is_none() {
                        break;
                    }
                    tracing::info!("SIGHUP: no configuration file to reload (start with --config)");
                }
            })))
        }
    };

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = stub.run() => {
            r.context("nri connection")?;
            tracing::info!("runtime closed the connection; exiting");
        }
        _ = term.recv() => tracing::info!("SIGTERM: exiting"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: exiting"),
    }
    plugin.flush_state_on_exit();
    withdraw_reclaimed(&plugin, advert).await;
    Ok(())
}

/// What runs beside the runtime and needs to know which one it is (NRI's Configure names it):
/// the eviction loop (the CRI endpoint and image filesystem not set are the runtime's), and the
/// reclaimed-CPU loop (its evictor, with `[eviction] action = "cri"`, dials that endpoint).
struct BesideRuntime {
    eviction: topolet_core::eviction::EvictionConfig,
    plugin: Arc<TopoletPlugin>,
    node_api: Option<crate::pressure::wiring::NodeApi>,
    pressure: Arc<crate::pressure::PressureReport>,
    node_status: Option<crate::cluster::node_status::ReportSender>,
    watched_pods: Option<crate::cluster::pod_directory::PodDirectory>,
    reclaimed_cluster:
        Option<tokio::sync::watch::Sender<crate::cluster::extended_resource::Advert>>,
    at_start: crate::cluster::at_start::AtStart,
}

impl BesideRuntime {
    /// Waits for the runtime's name (the first Configure), then runs both loops until aborted.
    async fn run(self, status: tokio::sync::watch::Receiver<topolet_nri::stub::ConnectionStatus>) {
        let Some(runtime) = crate::pressure::wiring::runtime_of(status).await else {
            return;
        };
        tracing::info!(
            runtime = runtime.name(),
            cri_endpoint = %self.eviction.cri_endpoint_for(runtime),
            imagefs = %self.eviction.imagefs_path_for(runtime).display(),
            defaulted = self.eviction.depends_on_runtime(),
            "eviction: beside this runtime"
        );
        let mut reclaimed = crate::reclaimed::ReclaimedLoop::new(self.plugin.clone());
        if let (Some(k), Some(tx)) = (&self.node_api, self.reclaimed_cluster) {
            match crate::pressure::wiring::build_evictor(
                &self.eviction,
                runtime,
                Some((&k.node_client, k.node.as_str())),
            ) {
                Ok((evictor, _)) => {
                    reclaimed = reclaimed
                        .with_cluster(tx, evictor, k.sink.clone())
                        .with_at_start(self.at_start.clone());
                }
                Err(e) => tracing::error!(error = %format!("{e:#}"), "reclaimed CPU: no evictor"),
            }
        }
        let _reclaimed = AbortOnDrop(tokio::spawn(reclaimed.run()));
        let eviction_loop = match crate::pressure::eviction::EvictionLoop::for_node(
            self.eviction,
            runtime,
            self.plugin.clone(),
            self.node_api.as_ref(),
        ) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "eviction loop not started");
                return std::future::pending().await;
            }
        };
        let mut eviction_loop = eviction_loop
            .with_metrics(self.plugin.metrics().clone())
            .with_report(self.pressure);
        if let Some(tx) = self.node_status {
            eviction_loop = eviction_loop.with_node_status(tx);
        }
        if let Some(watched) = self.watched_pods {
            eviction_loop.wrap_pod_facts(|list| {
                Arc::new(crate::cluster::pod_directory::WatchedPodFacts::new(
                    watched, list,
                ))
            });
        }
        eviction_loop.run().await;
    }
}

/// The reclaimed-CPU resource's name in the configuration in effect.
fn config_reclaimed_name(plugin: &TopoletPlugin) -> String {
    plugin.config().reclaimed.resource_name.clone()
}

/// How often the kubelet's device-plugin devices are read for the NodeResourceTopology: a
/// device a pod takes or gives back shows in the zones within this (node-feature-discovery's
/// topology updater reads the same answers every 60 s by default).
const DEVICE_INVENTORY_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The reclaimed-CPU publisher as a stop finds it.
struct Advert {
    client: kube::Client,
    node: String,
    name: String,
    in_cluster: bool,
    task: AbortOnDrop,
}

/// A clean stop withdraws the reclaimed CPU the Node advertises (the key removed, never 0: see
/// `crate::cluster::extended_resource`), so that the scheduler places no batch pod on a node
/// whose agent no longer takes the CPU back — unless `[reclaimed] withdraw_on_stop` says the
/// next instance takes it over (`crate::config::reclaimed::WithdrawOnStop`: under the DaemonSet
/// by default); bounded, never fatal.
async fn withdraw_reclaimed(plugin: &TopoletPlugin, advert: Option<Advert>) {
    let Some(Advert {
        client,
        node,
        name,
        in_cluster,
        task,
    }) = advert
    else {
        return;
    };
    drop(task);
    let config = plugin.config();
    let reclaimed = &config.reclaimed;
    if !reclaimed.enabled {
        return;
    }
    if !reclaimed.withdraw_on_stop.withdraws(in_cluster) {
        tracing::info!(node = %node, resource = %name, withdraw_on_stop = reclaimed.withdraw_on_stop.as_str(), in_cluster, "reclaimed CPU left on the Node for the next topolet (it writes its own once its usage window has filled; the uninstall hook, topolet withdraw, removes it)");
        return;
    }
    let write = crate::cluster::extended_resource::write(&client, &node, &name, 0);
    match tokio::time::timeout(WITHDRAW_TIMEOUT, write).await {
        Ok(Ok(_)) => {
            tracing::info!(node = %node, resource = %name, "reclaimed CPU withdrawn from the Node (key removed)")
        }
        Ok(Err(e)) => {
            tracing::warn!(node = %node, resource = %name, error = %e, "reclaimed CPU: withdrawing the amount failed; the Node keeps the last one")
        }
        Err(_) => {
            tracing::warn!(node = %node, resource = %name, "reclaimed CPU: withdrawing the amount timed out; the Node keeps the last one")
        }
    }
}

/// How long a stop waits to withdraw the reclaimed CPU.
const WITHDRAW_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Aborts a background task when the serving future ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
