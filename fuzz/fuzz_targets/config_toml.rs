//! cargo-fuzz target `config_toml`: the property lives in `topolet_fuzz::config_toml` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz::config_toml(data));
