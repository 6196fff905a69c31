//! Node-pressure eviction, the I/O half: the [`eviction`] loop (observe, ask the core, act),
//! the kernel's [`signals`] and [`psi`], what the API knows of the node's pods ([`pod_facts`]),
//! the eviction [`actions`] and the [`cri`] client the `cri` action and disk usage use.
pub mod actions;
pub mod cri;
pub mod eviction;
pub mod pod_facts;
pub mod psi;
pub mod signals;

use std::path::PathBuf;

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
