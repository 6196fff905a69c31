//! The manual's reference pages, generated from the code so that they cannot drift from it:
//! every configuration key ([`config`], from the schema, `plugin/config.example.toml` and
//! [`crate::config::reload::READ_AT_START`]) and every metric family ([`metrics`], from
//! [`crate::telemetry::family::CATALOGUE`]). The command line and the exit codes are the
//! binary's (`src/main.rs`, its test `cli_reference_is_current`).
//!
//! A unit test renders each page and compares it with the committed file under
//! `docs/src/reference/`; `TOPOLET_BLESS=1 cargo test -p topolet reference` rewrites them.

mod config;
mod metrics;

mod page;

pub(crate) use page::{cell, check_or_bless, GENERATED};

#[cfg(test)]
mod tests {
    #[test]
    fn config_reference_is_current() {
        super::check_or_bless("config.md", &super::config::render());
    }

    #[test]
    fn metrics_reference_is_current() {
        super::check_or_bless("metrics.md", &super::metrics::render());
    }
}
