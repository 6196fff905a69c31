//! A configuration reload applied to the running placement (`topolet_core::placement::migrate`): the placement
//! swapped keeping every assignment, the oom floor, the state file and the shared pool updated.

use std::sync::Arc;

use super::TopoletPlugin;
use crate::config::reload::{ReloadOutcome, Reloadable};
use crate::config::Config;
use topolet_core::kube::events::EventType;
use topolet_core::placement::migrate::MigrateError;

impl TopoletPlugin {
    /// Switches to `config` (its `[nri]` and `[state]` are ignored: read only at start) for
    /// containers created from now on, keeping every current assignment; refused, changing
    /// nothing, when the configuration is invalid or would break a running container
    /// (`topolet_core::placement::migrate`). Shared containers are moved if the shared pool changed. On success
    /// `config` is the configuration in effect for every reader ([`TopoletPlugin::config`]).
    pub fn reload(&self, config: &Config) -> Result<ReloadOutcome, MigrateError> {
        let mut node = self.lock();
        let migrated = node.placement.migrate(&config.placement()?)?;
        node.placement = migrated.placement;
        let previous = self.config.swap(config.clone());
        self.config_changed.notify_one();
        match config.qos.oom_score_adj_floor {
            Some(floor) => node.oom_floor = Some(floor),
            None if previous.qos.oom_score_adj_floor.is_some() => tracing::warn!(
                "qos.oom_score_adj_floor removed: detection from the runtime takes effect at restart"
            ),
            None => {}
        }
        self.persist(&node);
        self.push_shared_pool(&mut node, None);
        Ok(ReloadOutcome {
            warnings: migrated.warnings,
            carried: migrated.carried,
            shared: node.placement.shared_pool(),
            reserved: node.placement.reserved().clone(),
        })
    }
}

/// The configuration watcher's view of the plugin (`crate::config::reload`).
impl Reloadable for TopoletPlugin {
    fn config(&self) -> Arc<Config> {
        TopoletPlugin::config(self)
    }

    fn reload(&self, config: &Config) -> Result<ReloadOutcome, MigrateError> {
        TopoletPlugin::reload(self, config)
    }

    fn count_reload(&self, trigger: &'static str, result: &'static str) {
        self.metrics().config_reload(trigger, result);
    }

    fn node_event(&self, type_: EventType, reason: &str, message: &str) {
        TopoletPlugin::node_event(self, type_, reason, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::reload::{result, trigger, Watcher};

    /// Every outcome of a reload is counted by trigger and result, and the running configuration
    /// changes only when one is applied.
    #[test]
    fn each_outcome_is_counted_by_trigger_and_result() {
        use topolet_core::machine::topology::SyntheticSpec;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let state = dir.path().join("state");
        let text = |pids: i64, reserved: &str| {
            format!(
                "[cpu]\nreserved_cpus = {reserved:?}\n[qos]\npids_limit = {pids}\n[state]\ndir = {:?}\n",
                state.display()
            )
        };
        let first = text(1024, "0");
        std::fs::write(&path, &first).unwrap();
        let topology = SyntheticSpec::TWO_CORES.build();
        let config = Config::parse(&first, &path).unwrap();
        let plugin = Arc::new(TopoletPlugin::new(config, topology).unwrap());
        let metrics = plugin.metrics().clone();
        let mut w = Watcher::new(plugin.clone(), path.clone());
        let n = |t: &str, r: &str| metrics.config_reloads(t, r);

        // SIGHUP on the same file: valid, nothing to change.
        w.reload(true);
        assert_eq!(n(trigger::SIGHUP, result::UNCHANGED), 1);
        // A file change with a new pids limit: applied.
        std::fs::write(&path, text(2048, "0")).unwrap();
        w.reload(false);
        assert_eq!(n(trigger::FILE_CHANGE, result::APPLIED), 1);
        assert_eq!(plugin.config().qos.pids_limit, 2048);
        // Touched, same content, no signal: not a reload, not counted.
        w.reload(false);
        assert_eq!(n(trigger::FILE_CHANGE, result::APPLIED), 1);
        assert_eq!(n(trigger::FILE_CHANGE, result::UNCHANGED), 0);
        // A CPU this machine does not have: rejected, the running configuration stays.
        std::fs::write(&path, text(4096, "0,4095")).unwrap();
        w.reload(true);
        assert_eq!(n(trigger::SIGHUP, result::REJECTED), 1);
        // Not TOML: rejected.
        std::fs::write(&path, "[cpu\n").unwrap();
        w.reload(false);
        assert_eq!(n(trigger::FILE_CHANGE, result::REJECTED), 1);
        // Unreadable (gone): rejected.
        std::fs::remove_file(&path).unwrap();
        w.reload(true);
        assert_eq!(n(trigger::SIGHUP, result::REJECTED), 2);
        assert_eq!(plugin.config().qos.pids_limit, 2048);
        assert_eq!(n(trigger::SIGHUP, result::APPLIED), 0);
        assert_eq!(n(trigger::SIGHUP, result::REFUSED), 0);
    }
}
