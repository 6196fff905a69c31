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
//! - [`reclaimed`]: reclaimed CPU — the suppress loop that measures the pool, advertises the
//!   idle CPU and takes it back from batch pods.
//! - [`introspection`]: the status report, the admin socket, the HTTP endpoint, the table.
//! - [`telemetry`]: metrics, log output, the refusal log.
//! - [`run`]: `topolet run`, composing all of the above.
pub mod cluster;
pub mod config;
pub mod host;
pub mod introspection;
pub mod nri;
pub mod pressure;
pub mod reclaimed;
pub mod run;
pub mod state;
pub mod telemetry;

/// The version this build reports (`topolet --version`, `topolet status`, `topolet_build_info`,
/// the image's tag: hack/build-image.sh): the crate's, unless the build sets `TOPOLET_VERSION`
/// (a packager's suffix; the Helm suite's upgrade image is such a build).
pub const VERSION: &str = match option_env!("TOPOLET_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};
