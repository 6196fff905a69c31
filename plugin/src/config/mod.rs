//! The node's TOML configuration file: its schema, every key with its default and unit
//! ([`schema`]); parsing with errors that name the file and the key, and the value checks that
//! need no machine ([`check`]); the mapping of the file into settings the core owns
//! ([`settings`]). The `[eviction]` and `[reclaimed]` sections' TOML forms and their checks live
//! in [`eviction`] and [`reclaimed`]; the configuration in effect in [`effective`], its reload
//! while running in [`reload`].

pub mod check;
pub mod effective;
pub mod eviction;
pub mod reclaimed;
pub mod reload;
pub mod schema;
pub mod settings;

pub use check::{is_node_name, ConfigError};
pub use eviction::{EvictionConfigError, EvictionSection, ScalarText};
pub use schema::{
    AdminConfig, Config, CpuConfig, EvictAs, KubeletConfig, KubernetesConfig, KubernetesEnabled,
    MemoryConfig, MetricsConfig, NriConfig, PluginIndex, QosConfig, StateConfig, TopologyConfig,
    DEFAULT_DRIFT_CHECK_S, DEFAULT_POD_RESOURCES_WAIT_MS, DEFAULT_POD_WAIT_MS,
    DEFAULT_START_JITTER_MS, DEFAULT_WATCH_TIMEOUT_S, MAX_DRIFT_CHECK_S, MAX_POD_RESOURCES_WAIT_MS,
    MAX_POD_WAIT_MS, MAX_START_JITTER_MS, MAX_WATCH_TIMEOUT_S, MIN_WATCH_TIMEOUT_S,
};

/// `[cpu] policy`: the core's enum (one per concept, one default).
pub use topolet_core::managers::cpu::policy::CpuPolicyName;
/// `[memory] policy`: the core's enum.
pub use topolet_core::managers::memory::policy::MemoryPolicyKind as MemoryPolicyName;
/// `[topology] policy`: the core's enum.
pub use topolet_core::managers::topology::hints::TopologyPolicy as TopologyPolicyName;
/// `[topology] scope`: the core's enum.
pub use topolet_core::managers::topology::manager::Scope as TopologyScopeName;
