//! What topolet tells operators without being asked: Prometheus [`metrics`], log output
//! ([`logging`]) and the [`refusal_log`] that logs a repeated refusal once.
pub mod logging;
pub mod metrics;
pub mod refusal_log;
