//! cargo-fuzz target `plan_input`: the property lives in `topolet_fuzz_props::plan_input` (testkit/fuzz-props/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz_props::plan_input(data));
