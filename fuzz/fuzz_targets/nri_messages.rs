//! cargo-fuzz target `nri_messages`: the property lives in `topolet_fuzz_props::nri_messages` (testkit/fuzz-props/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz_props::nri_messages(data));
