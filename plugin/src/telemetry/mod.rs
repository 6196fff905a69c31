//! What topolet tells operators without being asked: Prometheus [`metrics`] (written in the
//! text format by [`exposition`], every family declared once in [`family`]), log output ([`logging`]) and the [`refusal_log`] that logs a
//! repeated refusal once.
pub mod exposition;
pub mod family;
pub mod logging;
pub mod metrics;
pub mod refusal_log;
