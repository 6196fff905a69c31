//! Plugin identity (name, two-digit index) validation and the stub's connection
//! settings, including pre-installed mode via `NRI_PLUGIN_SOCKET`.

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::Duration;

/// Default runtime socket (NRI ≥ v0.3).
pub const DEFAULT_SOCKET_PATH: &str = "/var/run/nri/nri.sock";
/// Env var holding the inherited socket fd of a pre-installed plugin.
pub const ENV_PLUGIN_SOCKET: &str = "NRI_PLUGIN_SOCKET";
/// Env var holding a pre-installed plugin's name.
pub const ENV_PLUGIN_NAME: &str = "NRI_PLUGIN_NAME";
/// Env var holding a pre-installed plugin's index.
pub const ENV_PLUGIN_IDX: &str = "NRI_PLUGIN_IDX";

/// Errors in plugin identity or connection settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Name empty or with characters outside `[a-zA-Z0-9_.+-]`.
    #[error("invalid plugin name {0:?}: must be non-empty and match [a-zA-Z0-9_.+-]+")]
    InvalidName(String),
    /// Index is not exactly two ASCII digits.
    #[error("invalid plugin index {0:?}: must be exactly two ascii digits")]
    InvalidIndex(String),
    /// `NRI_PLUGIN_SOCKET` is not a non-negative decimal fd.
    #[error("invalid {ENV_PLUGIN_SOCKET} value {0:?}: must be a decimal file descriptor")]
    InvalidSocketFd(String),
    /// Pre-installed mode without name or index.
    #[error("pre-installed plugin lacks {0}")]
    MissingEnv(&'static str),
}

/// Validates a plugin name: non-empty, `[a-zA-Z0-9_.+-]+`.
pub fn validate_name(name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'+' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::InvalidName(name.to_string()))
    }
}

/// Validates a plugin index: exactly two ASCII digits.
pub fn validate_index(idx: &str) -> Result<(), ConfigError> {
    if idx.len() == 2 && idx.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(ConfigError::InvalidIndex(idx.to_string()))
    }
}

/// How the stub reaches the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Dial this unix socket path (external plugin; reconnects are possible).
    Socket(PathBuf),
    /// Adopt this inherited, connected socket fd (pre-installed plugin; no reconnect).
    InheritedFd(RawFd),
}

/// Reconnect backoff: exponential from `initial`, doubling, capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Cap.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// Delay before attempt number `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// Settings of a [`crate::stub::Stub`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StubConfig {
    /// Plugin name.
    pub name: String,
    /// Two-digit plugin index.
    pub idx: String,
    /// Where the runtime is.
    pub endpoint: Endpoint,
    /// Reconnect backoff (external plugins).
    pub backoff: Backoff,
    /// Timeout of the RegisterPlugin call.
    pub registration_timeout: Duration,
    /// Whether to reconnect after the runtime goes away (external plugins only).
    pub reconnect: bool,
}

impl StubConfig {
    /// An external plugin dialing `socket`.
    pub fn new(
        name: impl Into<String>,
        idx: impl Into<String>,
        socket: impl Into<PathBuf>,
    ) -> Result<StubConfig, ConfigError> {
        let cfg = StubConfig {
            name: name.into(),
            idx: idx.into(),
            endpoint: Endpoint::Socket(socket.into()),
            backoff: Backoff::default(),
            registration_timeout: Duration::from_secs(5),
            reconnect: true,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Settings from the environment: pre-installed mode if `NRI_PLUGIN_SOCKET`
    /// is set (name/idx from `NRI_PLUGIN_NAME`/`NRI_PLUGIN_IDX`, overriding the
    /// given ones), else an external plugin dialing `socket` (or the default path).
    pub fn from_env(
        name: Option<String>,
        idx: Option<String>,
        socket: Option<PathBuf>,
    ) -> Result<StubConfig, ConfigError> {
        Self::from_lookup(name, idx, socket, |k| std::env::var(k).ok())
    }

    /// Like [`StubConfig::from_env`] with an explicit variable lookup (testable).
    pub fn from_lookup(
        name: Option<String>,
        idx: Option<String>,
        socket: Option<PathBuf>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<StubConfig, ConfigError> {
        if let Some(fd) = lookup(ENV_PLUGIN_SOCKET) {
            let fd: RawFd = fd
                .trim()
                .parse()
                .ok()
                .filter(|v: &RawFd| *v >= 0)
                .ok_or_else(|| ConfigError::InvalidSocketFd(fd.clone()))?;
            let name = lookup(ENV_PLUGIN_NAME)
                .or(name)
                .ok_or(ConfigError::MissingEnv(ENV_PLUGIN_NAME))?;
            let idx = lookup(ENV_PLUGIN_IDX)
                .or(idx)
                .ok_or(ConfigError::MissingEnv(ENV_PLUGIN_IDX))?;
            let mut cfg = StubConfig::new(name, idx, DEFAULT_SOCKET_PATH)?;
            cfg.endpoint = Endpoint::InheritedFd(fd);
            cfg.reconnect = false;
            return Ok(cfg);
        }
        StubConfig::new(
            name.ok_or(ConfigError::InvalidName(String::new()))?,
            idx.ok_or(ConfigError::InvalidIndex(String::new()))?,
            socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET_PATH)),
        )
    }

    /// Checks name and index.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_name(&self.name)?;
        validate_index(&self.idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_indices() {
        assert!(validate_name("topolet").is_ok());
        assert!(validate_name("a.b+c_d-1").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("bad name").is_err());
        assert!(validate_name("ünï").is_err());
        assert!(validate_index("05").is_ok());
        for bad in ["5", "005", "a1", "", "٠١"] {
            assert!(validate_index(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_preinstalled_mode() {
        let env = |k: &str| match k {
            ENV_PLUGIN_SOCKET => Some("3".to_string()),
            ENV_PLUGIN_NAME => Some("topolet".to_string()),
            ENV_PLUGIN_IDX => Some("10".to_string()),
            _ => None,
        };
        let cfg = StubConfig::from_lookup(Some("x".into()), Some("99".into()), None, env)
            .expect("valid env");
        assert_eq!(cfg.endpoint, Endpoint::InheritedFd(3));
        assert_eq!(cfg.name, "topolet");
        assert_eq!(cfg.idx, "10");
        assert!(!cfg.reconnect);
        let bad = |k: &str| (k == ENV_PLUGIN_SOCKET).then(|| "x3".to_string());
        assert!(matches!(
            StubConfig::from_lookup(Some("a".into()), Some("01".into()), None, bad),
            Err(ConfigError::InvalidSocketFd(_))
        ));
        let none = |_: &str| None;
        let cfg = StubConfig::from_lookup(Some("a".into()), Some("01".into()), None, none)
            .expect("external");
        assert_eq!(cfg.endpoint, Endpoint::Socket(DEFAULT_SOCKET_PATH.into()));
    }

    #[test]
    fn backoff_caps() {
        let b = Backoff::default();
        assert_eq!(b.delay(0), Duration::from_millis(100));
        assert_eq!(b.delay(1), Duration::from_millis(200));
        assert_eq!(b.delay(10), Duration::from_secs(5));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(5));
    }
}
