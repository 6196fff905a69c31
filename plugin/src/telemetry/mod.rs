//! What topolet tells operators without being asked: Prometheus [`metrics`] (written in the
//! text format by [`exposition`]), log output ([`logging`]) and the [`refusal_log`] that logs a
//! repeated refusal once.
pub mod exposition;
pub mod logging;
pub mod metrics;
pub mod refusal_log;
