//! The state file's glue: loading it (`crate::state::NodeState`) at start, handing every
//! change of the assignments to the writer (`crate::state::persister`, its own thread) and the exit's
//! last write.

use std::path::Path;
use std::time::Duration;

use super::{PluginState, TopoletPlugin};
use crate::state::file as state_file;
use crate::state::persister::{FileWriter, PersistStatus, Persister};
use crate::state::NodeState;

/// File name of the assignments under `[state] dir`.
pub const STATE_FILE: &str = "assignments.json";

/// How long the exit waits for the last state write.
pub const SHUTDOWN_FLUSH: Duration = Duration::from_secs(5);

/// Loads the state file at `state_path` into `node` (a bad one is reported and moved aside:
/// the next Synchronize rebuilds from the runtime's view).
pub(super) fn load_state(node: &mut PluginState, state_path: &Path) {
    match state_file::load::<NodeState>(state_path) {
        Ok(Some(saved)) => {
            *node.records.left_alone_mut() = saved.left_alone;
            let report = node.placement.load_saved_assignments(saved.assignments);
            tracing::info!(path = %state_path.display(), %report, "state file loaded; the runtime's view will confirm it at synchronize");
        }
        Ok(None) => tracing::info!(path = %state_path.display(), "no state file yet"),
        Err(e) => {
            tracing::error!(error = %e, "state file unusable; rebuilding from the runtime's view");
            match state_file::quarantine(state_path) {
                Ok(aside) => {
                    tracing::warn!(moved_to = %aside.display(), "kept the unusable state file for inspection")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not move the unusable state file aside")
                }
            }
        }
    }
}

impl TopoletPlugin {
    /// Final state write on exit: the newest assignments, waited for (at most
    /// [`SHUTDOWN_FLUSH`]: a hung disk must not hang the exit).
    pub fn flush_state_on_exit(&self) {
        {
            let node = self.lock();
            self.persist(&node);
        }
        let st = self.flush_state(SHUTDOWN_FLUSH);
        if st.pending() {
            tracing::error!(
                path = %self.state_path.display(),
                submitted = st.submitted,
                written = st.written,
                "state file not written at exit; the next start rebuilds from the runtime's view"
            );
        }
    }

    /// Waits until the assignments handed to the writer so far are on disk (or their write
    /// failed), at most `limit`.
    pub fn flush_state(&self, limit: Duration) -> PersistStatus {
        match self.persister.get() {
            Some(p) => p.flush(limit),
            None => PersistStatus::default(),
        }
    }

    /// Hands the assignments to the state-file writer; never waits on the disk.
    pub(super) fn persist(&self, node: &PluginState) {
        // Every change of the assignments is persisted: the NodeResourceTopology follows.
        self.books_changed.notify_one();
        let state = NodeState {
            assignments: node.placement.assignments(),
            left_alone: node.records.left_alone().clone(),
        };
        match self.persister() {
            Some(p) => p.submit(state),
            None => self.metrics.state_write(false),
        }
    }

    fn persister(&self) -> Option<&Persister> {
        if let Some(p) = self.persister.get() {
            return Some(p);
        }
        let writer = Box::new(FileWriter(self.state_path.clone()));
        match Persister::start(writer, self.metrics.clone()) {
            Ok(p) => Some(self.persister.get_or_init(|| p)),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the state-file writer thread; assignments are kept in memory only");
                None
            }
        }
    }

    /// True while the newest assignments are not on disk (being written, or failing and
    /// retried every second).
    pub fn persist_pending(&self) -> bool {
        self.persister.get().is_some_and(|p| p.status().pending())
    }
}
