//! What the suppress loop needs of the NRI handlers: [`BatchControl`], owned here and
//! implemented below for the handlers' `TopoletPlugin` (as the eviction loop's `PodSource`), so
//! that the loop names nothing else of them.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::Notify;

use crate::cluster::pod_directory::PodDirectory;
use crate::host::pod_cgroup::Roots;
use crate::nri::handlers::{ReclaimedInputs, TopoletPlugin};
use crate::telemetry::metrics::Metrics;
use topolet_core::reclaimed::{ReclaimedSettings, ReclaimedStatus};

/// The batch pods' side of the plugin, as the suppress loop drives it.
pub trait BatchControl: Send + Sync {
    /// `[reclaimed]` in effect.
    fn settings(&self) -> ReclaimedSettings;
    /// Woken by every reload that puts a new configuration in effect.
    fn config_changed(&self) -> Arc<Notify>;
    /// The runtime's Synchronize has been handled on this connection.
    fn nri_synchronized(&self) -> bool;
    /// This node's pods from the API, when the client is on.
    fn pod_directory(&self) -> Option<&PodDirectory>;
    /// Classifies the live containers' pods not classified yet from `dir` (batch pods of
    /// `resource`, or regular); how many containers became batch.
    fn learn_batch(&self, dir: &PodDirectory, resource: &str) -> usize;
    /// The usage window has refilled since a restart: carried-over grants give way to the
    /// budget's split; how many containers changed.
    fn end_carry(&self) -> usize;
    /// The feature turned off: every batch container back to the plain BestEffort values; how
    /// many were sent.
    fn batch_off(&self) -> usize;
    /// Thaws each held batch container that may run again; how many.
    fn release_batch(&self) -> usize;
    /// What the loop works from (batch containers no longer live leave the book).
    fn reclaimed_inputs(&self) -> ReclaimedInputs;
    /// Splits `budget` (milli-CPU) among the batch containers; how many containers changed.
    fn set_batch_budget(&self, budget: u64) -> usize;
    /// Pods that ask for the resource but are not batch: uid → (`namespace/name`, why).
    fn not_batch(&self) -> BTreeMap<String, (String, String)>;
    /// Where cgroups are read (`/proc` for the mounts, the sysfs root for `/sys`).
    fn cgroup_roots(&self) -> Roots;
    /// Why batch containers do not run under SCHED_IDLE, when they do not (status).
    fn sched_idle_missing(&self) -> Option<String>;
    /// Replaces the reclaimed-CPU report (`topolet status`, the NodeResourceTopology).
    fn set_reclaimed_report(&self, report: Option<ReclaimedStatus>);
    /// Where the loop counts.
    fn metrics(&self) -> &Arc<Metrics>;
}

/// The NRI handlers, as the suppress loop drives them (the `Arc`: several of their methods
/// hand their updates to a task of their own).
impl BatchControl for Arc<TopoletPlugin> {
    fn settings(&self) -> ReclaimedSettings {
        // `[reclaimed]` was checked when the file was read; a config built in code falls back
        // to the defaults (off).
        self.config().reclaimed.settings().unwrap_or_default()
    }

    fn config_changed(&self) -> Arc<Notify> {
        TopoletPlugin::config_changed(self)
    }

    fn nri_synchronized(&self) -> bool {
        TopoletPlugin::nri_synchronized(self)
    }

    fn pod_directory(&self) -> Option<&PodDirectory> {
        TopoletPlugin::pod_directory(self)
    }

    fn learn_batch(&self, dir: &PodDirectory, resource: &str) -> usize {
        TopoletPlugin::learn_batch(self, dir, resource)
    }

    fn end_carry(&self) -> usize {
        TopoletPlugin::end_carry(self)
    }

    fn batch_off(&self) -> usize {
        TopoletPlugin::batch_off(self)
    }

    fn release_batch(&self) -> usize {
        TopoletPlugin::release_batch(self)
    }

    fn reclaimed_inputs(&self) -> ReclaimedInputs {
        TopoletPlugin::reclaimed_inputs(self)
    }

    fn set_batch_budget(&self, budget: u64) -> usize {
        TopoletPlugin::set_batch_budget(self, budget)
    }

    fn not_batch(&self) -> BTreeMap<String, (String, String)> {
        TopoletPlugin::not_batch(self)
    }

    fn cgroup_roots(&self) -> Roots {
        TopoletPlugin::cgroup_roots(self)
    }

    fn sched_idle_missing(&self) -> Option<String> {
        TopoletPlugin::sched_idle_missing(self)
    }

    fn set_reclaimed_report(&self, report: Option<ReclaimedStatus>) {
        TopoletPlugin::set_reclaimed_report(self, report)
    }

    fn metrics(&self) -> &Arc<Metrics> {
        TopoletPlugin::metrics(self)
    }
}
