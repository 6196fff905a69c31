//! cargo-fuzz target `mux_frames`: the property lives in `topolet_fuzz_props::mux_frames` (testkit/fuzz-props/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz_props::mux_frames(data));
