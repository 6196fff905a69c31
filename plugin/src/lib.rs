//! topolet: topology-aware, kubelet-grade node resource management for containerd, as an NRI
//! plugin. This crate is the shell: it does the I/O and calls into the pure core
//! (crate `topolet_core`) for every decision. Its modules are grouped by what they talk to:
//!
//! - [`config`]: the TOML file, the configuration in effect and its reload.
//! - [`host`]: the machine's files — sysfs discovery, `/proc` affinity, cgroupfs.
//! - [`nri`]: the container runtime over NRI — the handlers, what NRI shows of a container,
//!   the adjustments and updates sent back, the container records and the update outbox.
//! - [`state`]: the state file and its writer.
//! - [`cluster`]: the Kubernetes API — the client, the pod directory, node status, the
//!   NodeResourceTopology publisher, the permissions list.
//! - [`pressure`]: node-pressure eviction — the loop, its signals and PSI, pod facts, the
//!   eviction actions and the CRI client they use.
//! - [`kubelet`]: the kubelet on this node — its PodResources API, a source of the devices each
//!   container was given.
//! - [`reclaimed`]: reclaimed CPU — the suppress loop that measures the pool, advertises the
//!   idle CPU and takes it back from batch pods.
//! - [`introspection`]: the status report, the admin socket, the HTTP endpoint, the table.
//! - [`telemetry`]: metrics, log output, the refusal log.
//! - [`run`]: `topolet run`, composing all of the above.
//!
//! `reference` (test builds only) generates the manual's reference pages from the code.
//!
//! # Which folder may use which
//!
//! Uses go one way, from the row's folder to those it names; none uses a folder above it. When
//! a folder below needs something of one above, it owns a small trait of exactly that and the
//! one above implements it: the configuration watcher's `config::reload::Reloadable` and the
//! NodeResourceTopology publisher's `cluster::nrt::NrtSource` are implemented by
//! `nri::handlers::TopoletPlugin`. A folder above that reads or drives the plugin takes its own
//! narrow trait too, implemented beside it: the eviction loop's `pressure::eviction::PodSource`,
//! the endpoints' `introspection::Introspected`, the suppress loop's
//! `reclaimed::batch_control::BatchControl`; only `run`, which builds the plugin, names it. `hack/module-cycles.py`
//! checks every `crate::` path of every file under a folder against this table (CI, hack/test.sh).
//!
//! | folder          | may use                                                                     |
//! |-----------------|-----------------------------------------------------------------------------|
//! | `run`           | `cluster`, `config`, `host`, `introspection`, `kubelet`, `nri`, `pressure`, `reclaimed`, `state` |
//! | `introspection` | `config`, `nri`, `pressure`, `telemetry`                                    |
//! | `reclaimed`     | `cluster`, `host`, `nri`, `pressure`, `telemetry`                           |
//! | `pressure`      | `cluster`, `config`, `host`, `nri`, `telemetry`                             |
//! | `nri`           | `cluster`, `config`, `host`, `kubelet`, `state`, `telemetry`                |
//! | `cluster`       | `config`, `host`, `telemetry`                                               |
//! | `kubelet`       | `telemetry`                                                                 |
//! | `state`         | `telemetry`                                                                 |
//! | `host`          | `telemetry`                                                                 |
//! | `config`        | (none)                                                                      |
//! | `telemetry`     | (none)                                                                      |
//! | `reference`     | `config`, `telemetry`                                                       |
pub mod cluster;
pub mod config;
pub mod host;
pub mod introspection;
pub mod kubelet;
pub mod nri;
pub mod pressure;
pub mod reclaimed;
#[cfg(test)]
mod reference;
pub mod run;
pub mod state;
pub mod telemetry;

/// The version this process reports (`topolet status`, `topolet_build_info`): what the binary
/// set at start ([`set_version`]: its build's `TOPOLET_VERSION`, a packager's suffix, else the
/// crate's version; the image's tag, hack/build-image.sh), the crate's version until then.
/// Resolved in the binary (plugin/src/main.rs), not here: a build that changes only the version
/// string recompiles the binary's crate, never this library and what links it (hack/test.sh's
/// upgrade binary for the Helm suite).
pub fn version() -> &'static str {
    VERSION.get().copied().unwrap_or(env!("CARGO_PKG_VERSION"))
}

/// Sets what [`version`] says, once; a later call is ignored (the first value stays).
pub fn set_version(v: &'static str) {
    let _ = VERSION.set(v);
}

static VERSION: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
