//! `EffectiveConfig`: the configuration in effect, one shared value that a reload swaps and
//! that everything reads (the handlers' oom-floor rule, `topolet status`'s policies, the
//! NodeResourceTopology attributes, the reload watcher's "running" configuration).
//!
//! Readers take a cheap `Arc` of the current value and never hold the lock while they use it;
//! a reload replaces the value in one step, so a reader sees either the old configuration or
//! the new one, never a mix.

use std::sync::{Arc, RwLock};

use crate::config::Config;

/// The shared, swappable configuration (clones share the value).
#[derive(Debug, Clone)]
pub struct EffectiveConfig(Arc<RwLock<Arc<Config>>>);

impl EffectiveConfig {
    pub fn new(config: Config) -> EffectiveConfig {
        EffectiveConfig(Arc::new(RwLock::new(Arc::new(config))))
    }

    /// The configuration in effect now.
    pub fn get(&self) -> Arc<Config> {
        // The value is replaced whole: a poisoned lock still holds a consistent one.
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts `config` in effect; returns the one it replaces.
    pub fn swap(&self, config: Config) -> Arc<Config> {
        let mut slot = self.0.write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *slot, Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_clone_sees_a_swap_and_earlier_reads_keep_their_value() {
        let a = EffectiveConfig::new(Config::default());
        let b = a.clone();
        let before = b.get();
        let mut next = Config::default();
        next.qos.pids_limit = 123;
        let old = a.swap(next);
        assert_eq!(old.qos.pids_limit, Config::default().qos.pids_limit);
        assert_eq!(b.get().qos.pids_limit, 123);
        assert_eq!(before.qos.pids_limit, Config::default().qos.pids_limit);
    }
}
