//! topolet: topology-aware, kubelet-grade node resource management for containerd, as an NRI plugin.
//!
//! `core` is pure and deterministic (no I/O, no clock, no globals); `shell` reads the machine, speaks NRI and
//! persists state, calling into `core`.

pub mod config;
pub mod core;
pub mod shell;
