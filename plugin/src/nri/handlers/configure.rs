//! Configure: the start of a connection to the runtime. The oom_score_adj floor (from `[qos]`,
//! else detected from the runtime's process) and the lull unsolicited updates wait for, which
//! depends on the runtime's NRI version (`crate::nri::outbox`).

use topolet_nri::api;
use topolet_nri::plugin::{PluginResult, RuntimeInfo};

use super::{PluginState, TopoletPlugin};
use crate::nri::oom_floor;

impl TopoletPlugin {
    /// Configure: a new connection, nothing unsolicited before its Synchronize.
    pub(super) fn on_configure(
        &self,
        req: &api::ConfigureRequest,
        runtime: &RuntimeInfo,
    ) -> PluginResult<()> {
        tracing::info!(
            runtime = %runtime.name,
            version = %runtime.version,
            nri = ?runtime.nri_version,
            config_bytes = req.config.len(),
            "configured by runtime"
        );
        let mut node = self.event_lock();
        node.runtime_nri = runtime.nri_version;
        self.detect_oom_floor(&mut node);
        let quiet = crate::nri::outbox::quiet_for(runtime.nri_version);
        tracing::info!(
            quiet_ms = quiet.as_millis() as u64,
            "unsolicited updates wait for this long a lull (NRI before v0.12.3 can deadlock on them)"
        );
        // A new connection: nothing goes unsolicited before its Synchronize.
        node.records.connection_configured(quiet);
        Ok(())
    }

    fn detect_oom_floor(&self, node: &mut PluginState) {
        if self.config.get().qos.oom_score_adj_floor.is_some() {
            return;
        }
        let pid = self
            .status
            .get()
            .and_then(|s| s.borrow().runtime_pid)
            .filter(|&p| p > 0);
        let Some(pid) = pid else {
            tracing::warn!("runtime pid unknown; assuming it cannot lower oom_score_adj below 0 (set [qos] oom_score_adj_floor to override)");
            node.oom_floor = Some(0);
            return;
        };
        match oom_floor::detect(std::path::Path::new("/proc"), pid) {
            Ok(f) => {
                tracing::info!(floor = f.floor, reason = %f.reason, "oom_score_adj floor");
                node.oom_floor = Some(f.floor);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot detect the oom_score_adj floor; assuming 0");
                node.oom_floor = Some(0);
            }
        }
    }
}
