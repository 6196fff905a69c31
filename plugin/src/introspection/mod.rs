//! Live introspection of the running plugin: the status report, the metrics text and readiness,
//! and the start-up of the two endpoints that serve them (the admin socket, `crate::introspection::admin`, and
//! the HTTP endpoint, `crate::introspection::http`), and the client side of that endpoint
//! (`crate::introspection::probe`: `topolet probe`, the Helm chart's test).
//!
//! What the endpoints read of the running plugin is [`Introspected`], owned here and implemented
//! for the NRI handlers' `TopoletPlugin` below. A scrape takes [`Introspected::cpu_sets`] (a few
//! bit-set copies under the plugin's lock, nothing per container); a status request takes
//! [`Introspected::status_report`] (the sets and one copy of each container's admission record). Both derive, order and format everything else outside the
//! lock, so neither holds up an NRI handler for longer than those copies.
//!
//! The endpoints are observability, not correctness: if one cannot be set up (address in use,
//! directory not writable) the error is logged and the plugin keeps placing containers.

pub mod admin;
pub mod http;
pub mod probe;
pub mod status_table;

use std::sync::Arc;

use topolet_nri::stub::{ConnState, ConnectionStatus};

use crate::config::{AdminConfig, MetricsConfig};
use crate::nri::handlers::{CpuSets, TopoletPlugin};
use crate::pressure::PressureReport;
use crate::telemetry::metrics::{Gauges, Metrics};
use topolet_core::machine::cpuset::CpuSet;
use topolet_core::machine::topology::Topology;
use topolet_core::report::status::{Pressure, Status};

/// What the endpoints read of the running plugin.
pub trait Introspected: Send + Sync {
    /// The full status report, with the eviction loop's `pressure` and the metrics endpoint's
    /// address when the caller has them.
    fn status_report(&self, pressure: Option<Pressure>, metrics_address: Option<String>) -> Status;
    /// The placement's CPU sets and the managed-container count, copied under the lock.
    fn cpu_sets(&self) -> CpuSets;
    fn topology(&self) -> &Topology;
    /// The NRI connection's status, once the stub is attached.
    fn connection(&self) -> Option<ConnectionStatus>;
    /// The metrics registry `/metrics` renders (and the endpoint counts its connections in).
    fn metrics(&self) -> &Arc<Metrics>;
}

/// The NRI handlers, as the endpoints see them.
impl Introspected for TopoletPlugin {
    fn status_report(&self, pressure: Option<Pressure>, metrics_address: Option<String>) -> Status {
        TopoletPlugin::status_report(self, pressure, metrics_address)
    }

    fn cpu_sets(&self) -> CpuSets {
        TopoletPlugin::cpu_sets(self)
    }

    fn topology(&self) -> &Topology {
        TopoletPlugin::topology(self)
    }

    fn connection(&self) -> Option<ConnectionStatus> {
        TopoletPlugin::connection(self)
    }

    fn metrics(&self) -> &Arc<Metrics> {
        TopoletPlugin::metrics(self)
    }
}

/// The full status report ([`Introspected::status_report`]).
pub fn status(
    plugin: &dyn Introspected,
    pressure: Option<Pressure>,
    metrics_address: Option<String>,
) -> Status {
    plugin.status_report(pressure, metrics_address)
}

/// The `/metrics` text.
pub fn metrics_text(plugin: &dyn Introspected) -> String {
    let sets = plugin.cpu_sets();
    let conn = plugin.connection();
    let topology = plugin.topology();
    let per_node = |set: &CpuSet| {
        topology
            .numa_nodes()
            .map(|n| (n.id, set.intersection(&n.cpus).len() as u64))
            .collect()
    };
    let gauges = Gauges {
        shared_pool_cpus: sets.shared.len() as u64,
        reserved_cpus: sets.reserved.len() as u64,
        exclusive_cpus: per_node(&sets.exclusive),
        free_cpus: per_node(&sets.assignable),
        managed_containers: sets.managed as u64,
        left_alone_containers: sets.left_alone as u64,
        nri_connects: conn.as_ref().map_or(0, |c| c.connects),
        nri_reconnects: conn.as_ref().map_or(0, |c| c.reconnects),
        nri_synchronized: conn
            .as_ref()
            .is_some_and(|c| c.state == ConnState::Synchronized),
    };
    plugin.metrics().render(&gauges)
}

/// `Ok` once the NRI connection is synchronized; else the state, for `/readyz`.
pub fn ready(plugin: &dyn Introspected) -> Result<(), String> {
    match plugin.connection() {
        Some(c) if c.state == ConnState::Synchronized => Ok(()),
        Some(c) => Err(match &c.last_error {
            Some(e) => format!("NRI {:?} (last error: {e})", c.state),
            None => format!("NRI {:?}", c.state),
        }),
        None => Err("NRI connection not started".into()),
    }
}

/// The endpoints' tasks; aborted (and the admin socket file removed) when dropped.
pub struct Endpoints {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Endpoints {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts the metrics endpoint (when enabled) and the admin socket. Call inside the runtime.
pub async fn start(
    admin_config: &AdminConfig,
    metrics_config: &MetricsConfig,
    plugin: Arc<dyn Introspected>,
    pressure: Arc<PressureReport>,
) -> Endpoints {
    let mut tasks = Vec::new();
    let mut metrics_address = None;
    if metrics_config.enabled {
        match http::bind(&metrics_config.address).await {
            Ok(listener) => {
                let addr = listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|_| metrics_config.address.clone());
                tracing::info!(address = %addr, "metrics endpoint listening (/metrics, /healthz, /readyz)");
                metrics_address = Some(addr);
                tasks.push(tokio::spawn(http::serve(listener, plugin.clone())));
            }
            Err(e) => {
                tracing::error!(error = %e, "metrics endpoint not started; the plugin runs without it")
            }
        }
    } else {
        tracing::info!("metrics endpoint disabled ([metrics] enabled = false)");
    }
    match admin::bind(&admin_config.socket) {
        Ok(socket) => {
            tracing::info!(path = %admin_config.socket.display(), "admin socket listening (topolet status)");
            tasks.push(tokio::spawn(admin::serve(
                socket,
                plugin,
                pressure,
                metrics_address,
            )));
        }
        Err(e) => {
            tracing::error!(error = %e, "admin socket not started; topolet status will not reach this plugin")
        }
    }
    Endpoints { tasks }
}
