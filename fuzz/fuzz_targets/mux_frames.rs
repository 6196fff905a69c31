//! cargo-fuzz target `mux_frames`: the property lives in `topolet_fuzz::mux_frames` (fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| topolet_fuzz::mux_frames(data));
