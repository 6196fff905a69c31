//! cargo-fuzz target `nri_messages`: the property lives in `topolet_fuzz::nri_messages` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz::nri_messages(data));
