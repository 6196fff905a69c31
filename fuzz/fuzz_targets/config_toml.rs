//! cargo-fuzz target `config_toml`: the property lives in `topolet_fuzz_props::config_toml` (testkit/fuzz-props/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz_props::config_toml(data));
