//! topolet-nri: the NRI (Node Resource Interface) wire layer for Rust.
//!
//! Owns the NRI schema (`schema/nri.proto`, generated into [`api`] and
//! [`api_ttrpc`]), the socket multiplexer ([`mux`]) and a reusable plugin stub
//! ([`stub`]). With the `test-support` feature it also provides a runtime-side
//! harness ([`fake_runtime`]) for tests and benchmarks.

pub use protobuf;
pub use ttrpc;

/// Generated NRI messages and enums (package `nri.pkg.api.v1alpha1`).
#[allow(
    clippy::all,
    clippy::pedantic,
    // Not in `all`: the generated descriptor lookups unwrap names the same generated file
    // defines (rust-protobuf's codegen), never input.
    clippy::unwrap_used,
    missing_docs,
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    unused_imports,
    unused_results,
    unknown_lints,
    deprecated,
    trivial_casts,
    unused_mut
)]
pub mod api {
    include!(concat!(env!("OUT_DIR"), "/gen/nri.rs"));
}

/// Generated async ttrpc services: `Plugin`/`Runtime` traits, `create_plugin`,
/// `create_runtime`, `PluginClient`, `RuntimeClient`.
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    non_camel_case_types,
    non_snake_case,
    unused_imports,
    unused_results,
    unknown_lints,
    deprecated,
    dead_code
)]
pub mod api_ttrpc {
    include!(concat!(env!("OUT_DIR"), "/gen/nri_ttrpc.rs"));
}

pub mod config;
pub mod events;
pub mod mux;
pub mod plugin;
mod service;
pub mod stub;
pub mod sync_fields;
pub mod updater;
pub mod version;

#[cfg(feature = "test-support")]
pub mod fake_runtime;

pub use config::{Backoff, ConfigError, Endpoint, StubConfig};
pub use events::EventMask;
pub use plugin::{Plugin, PluginError, PluginResult, RuntimeInfo};
pub use stub::{ConnState, ConnectionStatus, Stub, StubError};
pub use sync_fields::ContainerFields;
pub use updater::{ContainerUpdater, PendingUpdate, UpdateError};
pub use version::NriVersion;
