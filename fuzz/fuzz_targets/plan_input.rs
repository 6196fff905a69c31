//! cargo-fuzz target `plan_input`: the property lives in `topolet_fuzz::plan_input` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz::plan_input(data));
