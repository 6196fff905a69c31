//! Node-pressure eviction, the I/O half: the [`eviction`] loop (observe, ask the core, act) and
//! its parts: how it is built ([`wiring`]), observation on the blocking pool ([`blocking`]), the
//! signals as the core compares them ([`observation`]), the pods' usage ([`measure`]), one
//! eviction ([`evict_one`]), node-level reclaim before it ([`reclaim_node`]), the process's CPU
//! time ([`cpu_time`]) and the interval's pressure for `topolet status` ([`status_report`]).
//! Beside them: the kernel's [`signals`] and [`psi`], the eviction [`actions`], node-level
//! [`reclaim`] before a disk eviction, and the [`cri`] client the `cri` action, disk usage and
//! reclaim use. What the API knows of the node's pods is `crate::cluster::pod_facts`.
pub mod actions;
pub mod blocking;
pub mod cpu_time;
pub mod cri;
pub mod evict_one;
pub mod eviction;
pub mod measure;
pub mod observation;
pub mod psi;
pub mod reclaim;
pub mod reclaim_node;
pub mod signals;
pub mod status_report;
#[cfg(test)]
mod test_pods;
pub mod wiring;

use std::path::PathBuf;
use std::sync::Mutex;

use topolet_core::report::status::{NodeReclaim, Pressure};

/// A reading of one of the node's signal files ([`signals`], [`psi`]) that failed, naming the
/// file.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: statvfs: {source}")]
    Statvfs {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The eviction loop's latest view of node pressure for `topolet status` (signals, thresholds,
/// conditions, PSI), written once per interval by the loop ([`eviction::EvictionLoop`]) and read
/// by the status report. `None` until the loop has run once, or when it does not run.
#[derive(Debug, Default)]
pub struct PressureReport(Mutex<Option<Pressure>>);

impl PressureReport {
    pub fn new() -> PressureReport {
        PressureReport::default()
    }

    /// Replaces the report with this interval's (the last node-level reclaim is kept when this
    /// interval ran none).
    pub fn publish(&self, mut pressure: Pressure) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if pressure.node_reclaim.is_none() {
            pressure.node_reclaim = g.as_ref().and_then(|p| p.node_reclaim.clone());
        }
        *g = Some(pressure);
    }

    /// Records a node-level reclaim in the current report.
    pub fn node_reclaim(&self, reclaim: NodeReclaim) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.get_or_insert_with(Pressure::default).node_reclaim = Some(reclaim);
    }

    /// The last interval's report, if any.
    pub fn latest(&self) -> Option<Pressure> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
