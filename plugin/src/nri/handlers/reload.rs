//! A configuration reload applied to the running placement (`topolet_core::placement::migrate`): the placement
//! swapped keeping every assignment, the oom floor, the state file and the shared pool updated.

use super::TopoletPlugin;
use crate::config::reload::ReloadOutcome;
use crate::config::Config;
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
