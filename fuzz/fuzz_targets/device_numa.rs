//! cargo-fuzz target `device_numa`: the property lives in `topolet_fuzz_props::device_numa` (testkit/fuzz-props/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz_props::device_numa(data));
